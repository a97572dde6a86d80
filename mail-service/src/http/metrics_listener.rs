//! The operator listener of `serve --metrics-listen`: `GET /metrics` in
//! the Prometheus text format (see [`crate::metrics`]), with the queue
//! gauges read from the database at each scrape.

use crate::metrics::install;
use crate::service::MailService;

/// Serves `/metrics` on `listener` until the process ends; the queue
/// gauges are read from the database at each scrape.
pub fn spawn(listener: tokio::net::TcpListener, service: MailService) {
    ops_metrics::spawn(listener, install(), move || {
        let service = service.clone();
        async move {
            if let Err(e) = service.record_queue_gauges().await {
                tracing::warn!(error = %e, "queue gauges not read; /metrics shows their last values");
            }
        }
    });
}

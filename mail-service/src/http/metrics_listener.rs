//! The operator listener of `serve --metrics-listen`: `GET /metrics` in
//! the Prometheus text format (see [`crate::metrics`]), every documented
//! family there from the start, with the queue gauges read from the
//! database at each scrape.

use crate::metrics::{FromStart, export_from_start, install};
use crate::service::MailService;

/// Serves `/metrics` on `listener` until the process ends, with every
/// series of `from_start` at 0 until it is recorded; the queue gauges are
/// read from the database at each scrape.
pub fn spawn(listener: tokio::net::TcpListener, service: MailService, from_start: &FromStart) {
    let handle = install();
    export_from_start(from_start);
    ops_metrics::spawn(listener, handle, move || {
        let service = service.clone();
        async move {
            if let Err(e) = service.record_queue_gauges().await {
                tracing::warn!(error = %e, "queue gauges not read; /metrics shows their last values");
            }
        }
    });
}

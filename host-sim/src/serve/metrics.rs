//! The operator listener of `serve --metrics-listen`: `GET /metrics` in
//! the Prometheus text format (see [`crate::metrics`]), with the instance
//! pool's gauges read at each scrape.

use std::sync::Arc;

use crate::host::Host;
use crate::metrics::{PREPARED, PREPARED_USED, SLOTS, SLOTS_IN_USE, install};

/// Serves `/metrics` on `listener` until the runtime ends.
pub fn spawn(listener: tokio::net::TcpListener, host: Arc<Host>) {
    ops_metrics::spawn(listener, install(), move || {
        let pool = host.pool_gauges();
        async move {
            ::metrics::gauge!(SLOTS_IN_USE).set(pool.slots_in_use as f64);
            ::metrics::gauge!(SLOTS).set(pool.slots as f64);
            ::metrics::counter!(PREPARED).absolute(pool.prepared);
            ::metrics::counter!(PREPARED_USED).absolute(pool.used_prepared);
        }
    });
}

//! The operator listener of `serve --metrics-listen`: `GET /metrics` in
//! the Prometheus text format (see [`crate::metrics`]).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::host::Host;
use crate::metrics::{PREPARED, PREPARED_USED, SLOTS, SLOTS_IN_USE, install};

/// The operator listener's router: `GET /metrics`.
pub(crate) fn router(host: Arc<Host>, handle: PrometheusHandle) -> Router {
    Router::new()
        .route("/metrics", get(render))
        .with_state((host, handle))
}

async fn render(State((host, handle)): State<(Arc<Host>, PrometheusHandle)>) -> impl IntoResponse {
    let pool = host.pool_gauges();
    ::metrics::gauge!(SLOTS_IN_USE).set(pool.slots_in_use as f64);
    ::metrics::gauge!(SLOTS).set(pool.slots as f64);
    ::metrics::counter!(PREPARED).absolute(pool.prepared);
    ::metrics::counter!(PREPARED_USED).absolute(pool.used_prepared);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
}

/// Serves `/metrics` on `listener` until the runtime ends, and drains the
/// histograms' samples every few seconds between scrapes.
pub fn spawn(listener: tokio::net::TcpListener, host: Arc<Host>) {
    let handle = install();
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(host, handle)).await {
            tracing::error!(error = %e, "the metrics listener stopped");
        }
    });
}

//! Probes on the public listener: `GET /healthz` (the process answers) and
//! `GET /readyz` (200 when the database answers with every migration
//! applied; 503 with the reason while not).

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::service::MailService;

pub(super) fn router() -> Router<MailService> {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
}

async fn ready(State(service): State<MailService>) -> (StatusCode, String) {
    match service.readiness().await {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(reason) => {
            tracing::warn!(%reason, "not ready");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {reason}\n"),
            )
        }
    }
}

//! mail-service: a Resend-style transactional mail HTTP API.
//!
//! Its modules form layers, each using only the layers below it (the table
//! is in ARCHITECTURE.md, "mail-service"; `cargo xtask layers` checks it).
//! From the bottom: `clock`, `status` (the enums stored as text, the email's
//! status), `metrics`, `smtp_sink` (the loopback SMTP server used by tests);
//! `id`, `error`; `model` (resources and validation); `store`
//! (SQLite/PostgreSQL), `transport` (SMTP via lettre, or files), `feedback`
//! (return-path tokens, reading reports); `service` (no HTTP); `http` (the
//! router, the middleware, the extractors, the one `IntoResponse` for
//! `error::Error`) and `feedback::listener`; `config` (the CLI's options)
//! and `backup` (the operator's online copy of the SQLite database).

pub mod backup;
pub mod clock;
pub mod config;
pub mod error;
pub mod feedback;
pub mod http;
pub mod id;
pub mod metrics;
pub mod model;
pub mod service;
pub mod smtp_sink;
mod status;
pub mod store;
pub mod transport;

use std::sync::Arc;
use std::time::Duration;

use crate::service::MailService;

/// Serves until `shutdown` resolves, sweeping abandoned handoffs, handing
/// off due scheduled emails and delivering webhooks in the background. On shutdown the
/// scheduler claims nothing more and the handoffs under way finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: MailService,
    sweep_interval: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let sweeper = {
        let service = service.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(sweep_interval);
            loop {
                tick.tick().await;
                // What it settled is logged by the sweep itself.
                if let Err(e) = service.sweep().await {
                    tracing::warn!(error = %e, "sweep failed");
                }
            }
        })
    };
    // Domains under verification are re-checked in the background; every
    // node runs this, and each check is taken by one node.
    let verifier = {
        let service = service.clone();
        let every = service.domain_recheck_tick();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                match service.recheck_domains().await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(count = n, "domains re-checked"),
                    Err(e) => tracing::warn!(error = %e, "domain re-check failed"),
                }
            }
        })
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let scheduler = tokio::spawn(service::Scheduler::new(service.clone()).run(stopped.clone()));
    // Webhook deliveries from the outbox; every node runs one, and each
    // delivery is leased to one node at a time.
    let webhooks = tokio::spawn(service::WebhookDispatcher::new(service.clone()).run(stopped));
    let result = axum::serve(listener, http::router(service))
        .with_graceful_shutdown(async move {
            shutdown.await;
            let _ = stop.send(true);
        })
        .await;
    let _ = scheduler.await;
    let _ = webhooks.await;
    sweeper.abort();
    verifier.abort();
    result
}

/// A shared clock handle for the common case.
pub fn system_clock() -> Arc<dyn clock::Clock> {
    Arc::new(clock::SystemClock)
}

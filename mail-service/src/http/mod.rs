//! HTTP layer: routing, the request middleware (request id, authentication,
//! rate limit, request log, the rest of a body a handler left unread),
//! extractors, thin handlers, the OpenAPI document, and the operator's
//! `/metrics` listener (`metrics_listener`).

mod analytics;
mod domains;
pub mod error;
pub mod extract;
mod handlers;
mod health;
mod list;
pub mod metrics_listener;
pub mod openapi;
mod suppressions;
mod unread;
mod webhooks;

use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use tracing::Instrument;

use crate::error::Error;
use crate::model::Principal;
use crate::service::{Incoming, MailService, RateStatus};

tokio::task_local! {
    /// The id of the request being served (also its log id).
    pub(crate) static REQUEST_ID: i64;
}

/// The request's id, as an extension for extractors.
#[derive(Debug, Clone, Copy)]
pub struct RequestId(pub i64);

/// Outcome of reading the `Authorization` header. The middleware resolves
/// it once; the `Sender`/`FullAccess` extractors decide per endpoint.
#[derive(Debug, Clone)]
pub enum AuthState {
    Valid(Principal),
    Refused(Error),
}

/// The router with every endpoint, at the root and under `/v1`.
pub fn router(service: MailService) -> Router {
    let api = Router::new()
        .route(
            "/emails",
            post(handlers::send_email).get(handlers::list_emails),
        )
        .route("/emails/batch", post(handlers::send_batch))
        .route("/emails/metrics", get(analytics::email_metrics))
        .route(
            "/emails/{id}",
            get(handlers::get_email).patch(handlers::reschedule_email),
        )
        .route("/emails/{id}/cancel", post(handlers::cancel_email))
        .route("/logs", get(handlers::list_logs))
        .route("/logs/{id}", get(handlers::get_log))
        .route("/analytics", get(analytics::analytics))
        .route(
            "/domains",
            post(domains::create_domain).get(domains::list_domains),
        )
        .route(
            "/domains/{id}",
            get(domains::get_domain).delete(domains::delete_domain),
        )
        .route("/domains/{id}/verify", post(domains::verify_domain))
        .route(
            "/suppressions",
            post(suppressions::add_suppression).get(suppressions::list_suppressions),
        )
        .route(
            "/suppressions/batch/add",
            post(suppressions::add_suppressions),
        )
        .route(
            "/suppressions/batch/remove",
            post(suppressions::remove_suppressions),
        )
        .route(
            "/suppressions/{email_or_id}",
            get(suppressions::get_suppression).delete(suppressions::delete_suppression),
        )
        .route(
            "/webhooks",
            post(webhooks::create_webhook).get(webhooks::list_webhooks),
        )
        .route(
            "/webhooks/{id}",
            get(webhooks::get_webhook)
                .patch(webhooks::update_webhook)
                .delete(webhooks::delete_webhook),
        )
        .route(
            "/webhooks/{id}/signing-secret/rotate",
            post(webhooks::rotate_webhook_secret),
        )
        .route("/webhooks/{id}/events", get(webhooks::list_webhook_events))
        .route(
            "/webhooks/{id}/events/{event_id}",
            get(webhooks::get_webhook_event),
        )
        .route(
            "/webhooks/{id}/events/{event_id}/attempts",
            get(webhooks::list_webhook_attempts),
        )
        .route(
            "/webhooks/{id}/events/{event_id}/replay",
            post(webhooks::replay_webhook_event),
        )
        .method_not_allowed_fallback(handlers::not_found);
    Router::new()
        .merge(api.clone())
        .nest("/v1", api)
        .route("/openapi.json", get(openapi::document))
        .fallback(handlers::not_found)
        .layer(middleware::from_fn_with_state(service.clone(), observe))
        // Probes bypass the request middleware: no request log, no rate
        // limit, and an answer while the database is down.
        .merge(health::router())
        .with_state(service)
}

/// Every route template the router serves with its methods, as the
/// request metrics label them: each path of the OpenAPI document (which
/// `tests/api.rs` holds to the routes) at the root and under `/v1`, and
/// the document itself.
pub fn served_routes() -> Vec<(String, &'static str)> {
    use utoipa::OpenApi;
    let document = serde_json::to_value(openapi::ApiDoc::openapi()).unwrap_or_default();
    let mut routes = vec![("/openapi.json".to_string(), "GET")];
    let paths = document["paths"].as_object().into_iter().flatten();
    for (path, item) in paths {
        let methods = item.as_object().into_iter().flat_map(|ops| ops.keys());
        for method in methods.map(|m| crate::metrics::method_label(&m.to_uppercase())) {
            if method != "other" {
                routes.push((path.clone(), method));
                routes.push((format!("/v1{path}"), method));
            }
        }
    }
    routes
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get("authorization")?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Runs around every request: assigns the request id, resolves the API key,
/// writes the request log (status 0 until the answer is known) together with
/// the request's count in the tenant's shared rate limit, and adds the
/// rate-limit and request-id headers.
async fn observe(State(service): State<MailService>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let request_id = service.next_id();
    let user_agent = req
        .headers()
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    // The route template (`/v1/emails/{id}`), never the path itself: a
    // bounded label and log field.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |m| m.as_str())
        .to_string();
    let span = tracing::info_span!("request", request_id, route = %route);
    observe_in(
        service,
        req,
        next,
        Observed {
            started,
            request_id,
            user_agent,
            method,
            path,
            route,
        },
    )
    .instrument(span)
    .await
}

struct Observed {
    started: Instant,
    request_id: i64,
    user_agent: Option<String>,
    method: String,
    path: String,
    route: String,
}

async fn observe_in(
    service: MailService,
    mut req: Request,
    next: Next,
    observed: Observed,
) -> Response {
    let Observed {
        started,
        request_id,
        user_agent,
        method,
        path,
        route,
    } = observed;
    let begun = service
        .begin_request(&Incoming {
            request_id,
            token: bearer(req.headers()),
            method: &method,
            path: &path,
            user_agent: user_agent.as_deref(),
        })
        .await;
    let tenant_id = begun.caller.as_ref().ok().map(|p| p.tenant_id);
    if let Err(Error::RateLimited { .. }) = &begun.rate {
        metrics::counter!(crate::metrics::RATE_LIMITED).increment(1);
    }
    req.extensions_mut().insert(match begun.caller {
        Ok(principal) => AuthState::Valid(principal),
        Err(e) => AuthState::Refused(e),
    });
    req.extensions_mut().insert(RequestId(request_id));
    let version = req.version();
    let unread = unread::Unread::default();
    let req = unread.watch(req);
    let (mut response, rate) = REQUEST_ID
        .scope(request_id, async {
            match begun.rate {
                Ok(rate) => (next.run(req).await, rate),
                Err(e) => (e.into_response(), None),
            }
        })
        .await;
    unread.settle(version, &mut response).await;
    let headers = response.headers_mut();
    if let Some(RateStatus {
        limit,
        remaining,
        reset_secs,
    }) = rate
    {
        headers.insert("ratelimit-limit", HeaderValue::from(limit));
        headers.insert("ratelimit-remaining", HeaderValue::from(remaining));
        headers.insert("ratelimit-reset", HeaderValue::from(reset_secs));
    }
    headers.insert("x-request-id", HeaderValue::from(request_id));
    let elapsed = started.elapsed().as_millis() as i64;
    if let Err(e) = service
        .log_finished(request_id, response.status().as_u16(), elapsed)
        .await
    {
        tracing::warn!(error = %e, request_id, "request log not completed");
    }
    let status = response.status().as_u16();
    let method_label = crate::metrics::method_label(&method);
    metrics::counter!(
        crate::metrics::HTTP_REQUESTS,
        "route" => route.clone(),
        "method" => method_label,
        "status" => status.to_string()
    )
    .increment(1);
    metrics::histogram!(
        crate::metrics::HTTP_DURATION,
        "route" => route,
        "method" => method_label
    )
    .record(started.elapsed().as_secs_f64());
    tracing::info!(
        request_id,
        tenant_id,
        %method,
        %path,
        status,
        elapsed_ms = elapsed,
        "request"
    );
    response
}

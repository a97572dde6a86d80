//! `host-sim serve`: one HTTP server for every surface of the host.
//!
//! | path | surface |
//! |---|---|
//! | `/v1/plugins/{extension}/projects/{project}/api/{route}` | the extension API ([`api`]) |
//! | `/v1/plugins/{extension}/panel/{file}` | the installed release's panel files ([`console`]) |
//! | `/console/…` | the console: sign-in, a page per project with the panel ([`console`]) |
//! | `/mcp` | the host's MCP server (streamable HTTP): a tool per action of the caller's granted extensions ([`mcp`]) |
//! | `/.well-known/oauth-*`, `/oauth/*`, `/console/authorize`, `/console/apps` | the MCP server's OAuth authorization server and its console pages ([`oauth`]) |
//! | `/healthz` | liveness |
//! | `/readyz` | readiness: 200 when the operator state answers, 503 with the reason while not |
//! | any path, `Host:` an applied tracking hostname | the tracking ingress: exactly `GET /script.js`, `POST`/`OPTIONS /api/send` forwarded to the provider, everything else 404 ([`ingress`]) |
//!
//! Every surface authenticates with the host's bearer tokens and runs
//! actions through [`Host::invoke`], the same function as the CLI. The
//! tokens the authorization server mints are bound to the MCP resource:
//! `/mcp` takes them (and operator-issued ones), the API and the console
//! only operator-issued ones.

mod api;
mod console;
mod develop;
mod ingress;
mod mcp;
pub mod metrics;
mod oauth;
mod recent;
mod unread_body;

pub use oauth::{MetadataFetch, OAuthOptions};

pub use console::{COOKIE as CONSOLE_COOKIE, Sessions as ConsoleSessions, sign_in_token};
pub use ingress::{IngressDecision, decide as ingress_decision};
pub use mcp::{PROJECT_ARGUMENT, tool_call_input};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::Value;

use crate::error::InvokeError;
use crate::error::Limit;
use crate::host::{Caller, Host, HostError, Invocation, InvokeRequest};
use crate::state::TokenAccess;

/// The header that carries the caller's runtime generation.
pub const GENERATION_HEADER: &str = "x-runtime-generation";
/// The header that carries the request id of every answer.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Lifetime of the project-scoped tokens the console hands to panels.
    pub panel_session_ttl: Duration,
    /// Lifetime of a console sign-in (the cookie), capped by the token's own.
    pub console_session_ttl: Duration,
    /// Proxies in front of `serve` whose `X-Forwarded-For` the tracking
    /// ingress believes (see `tracking::ingress::visitor_address`); none:
    /// the visitor is the connection's address.
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// The MCP server's authorization server.
    pub oauth: OAuthOptions,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            panel_session_ttl: Duration::from_secs(600),
            console_session_ttl: Duration::from_secs(8 * 3600),
            trusted_proxies: Vec::new(),
            oauth: OAuthOptions::default(),
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub host: Arc<Host>,
    pub options: Arc<ServeOptions>,
    pub console: Arc<ConsoleSessions>,
    /// The developer view's recent invocations (`host-sim dev` only).
    pub develop: Arc<recent::DeveloperLog>,
    pub oauth: Arc<oauth::OAuthShared>,
    /// The tracking ingress's forwarding client.
    pub ingress: Option<Arc<reqwest::Client>>,
}

/// The router of every surface.
pub fn router(host: Arc<Host>, options: ServeOptions) -> Router {
    let shared = Shared {
        host: host.clone(),
        options: Arc::new(options),
        console: Arc::new(console::Sessions::default()),
        develop: Arc::default(),
        oauth: Arc::default(),
        ingress: ingress::client().map(Arc::new),
    };
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(move || ready(host.clone())))
        .merge(api::routes(shared.clone()))
        .merge(console::routes(shared.clone()))
        .merge(develop::routes(shared.clone()))
        .merge(mcp::routes(shared.clone()))
        .merge(oauth::routes(shared.clone()))
        .fallback(|| async {
            error_response(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such path on this host",
                &new_request_id(),
            )
        })
        .layer(axum::middleware::from_fn(log_request))
        .layer(axum::middleware::from_fn_with_state(shared, ingress::route))
        .layer(axum::middleware::from_fn(unread_body::close_if_unread))
}

/// One `request` line (at info) per answered request: its request id
/// (the `X-Request-Id` the answer carries, the one the invocation's own
/// lines carry), method, route template, project, status and latency.
async fn log_request(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let started = std::time::Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let project = project_of(request.uri().path()).map(str::to_string);
    let response = next.run(request).await;
    let request_id = response
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    tracing::info!(
        request_id,
        %method,
        route = %route,
        project = project.as_deref().unwrap_or_default(),
        status = response.status().as_u16(),
        elapsed_us = started.elapsed().as_micros() as u64,
        "request"
    );
    response
}

/// The project of an extension API path
/// (`/v1/plugins/{extension}/projects/{project}/api/…`).
fn project_of(path: &str) -> Option<&str> {
    let mut segments = path.split('/').skip(1);
    match (
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    ) {
        (Some("v1"), Some("plugins"), Some(_), Some("projects")) => segments.next(),
        _ => None,
    }
}

/// `/readyz`: whether the operator state answers (read on a blocking
/// thread, bounded to 2 s).
async fn ready(host: Arc<Host>) -> Response {
    let check = tokio::task::spawn_blocking(move || host.readiness());
    match tokio::time::timeout(Duration::from_secs(2), check).await {
        Ok(Ok(Ok(()))) => (StatusCode::OK, "ready\n").into_response(),
        Ok(Ok(Err(reason))) => not_ready(&reason),
        Ok(Err(_)) => not_ready("the readiness check failed"),
        Err(_) => not_ready("the operator state did not answer within 2 s"),
    }
}

fn not_ready(reason: &str) -> Response {
    tracing::warn!(%reason, "not ready");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("not ready: {reason}\n"),
    )
        .into_response()
}

/// Serves `router` on `listener` until `shutdown` resolves; in-flight
/// requests finish first.
pub async fn run(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

/// A request id in the format [`Host::invoke`] uses, for answers given
/// before an invocation starts.
pub(crate) use crate::host::new_request_id;

/// The bearer token of `Authorization: Bearer <token>`, if well-formed.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<Caller> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| Caller::bearer(token))
}

/// Runs an invocation on a blocking thread (the host's calls block).
pub(crate) async fn invoke(host: &Arc<Host>, caller: Caller, request: InvokeRequest) -> Invocation {
    let host = host.clone();
    let extension = request.extension.clone();
    if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread
    {
        return tokio::task::block_in_place(move || host.invoke(&caller, &request));
    }
    match tokio::task::spawn_blocking(move || host.invoke(&caller, &request)).await {
        Ok(invocation) => invocation,
        Err(join) => {
            tracing::error!(error = %join, extension = %extension, "an invocation task failed");
            Invocation {
                request_id: new_request_id(),
                generation: None,
                result: Err(InvokeError::Internal(
                    "the invocation failed; see the host log".into(),
                )),
                log: Vec::new(),
            }
        }
    }
}

/// Runs a host query on a blocking thread (the host's calls block). A
/// failure is logged with `what` and becomes an `internal` error whose
/// message points at the host log.
pub(crate) async fn host_query<T: Send + 'static>(
    host: &Arc<Host>,
    what: &'static str,
    query: impl FnOnce(&Host) -> Result<T, HostError> + Send + 'static,
) -> Result<T, InvokeError> {
    let host = host.clone();
    match tokio::task::spawn_blocking(move || query(&host)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => {
            tracing::error!(error = %error, "{what} failed");
            Err(InvokeError::Internal(
                "the host state is unavailable; see the host log".into(),
            ))
        }
        Err(join) => {
            tracing::error!(error = %join, "{what} failed");
            Err(InvokeError::Internal(
                "the host failed; see the host log".into(),
            ))
        }
    }
}

/// What the caller's token reaches now; `Unauthenticated` for an unknown or
/// expired token.
pub(crate) async fn caller_access(
    host: &Arc<Host>,
    caller: &Caller,
) -> Result<TokenAccess, InvokeError> {
    let caller = caller.clone();
    host_query(host, "looking up a caller", move |host| {
        host.caller_access(&caller)
    })
    .await?
    .ok_or(InvokeError::Unauthenticated)
}

/// The one error shape: `{"error":{"code","message"},"request_id"}`.
pub(crate) fn error_response(
    status: StatusCode,
    code: &str,
    message: &str,
    request_id: &str,
) -> Response {
    let body = serde_json::json!({
        "error": {"code": code, "message": message},
        "request_id": request_id,
    });
    json_response(status, &body, request_id)
}

/// The HTTP status a surface answers an invocation error with.
pub fn http_status(error: &InvokeError) -> StatusCode {
    match error {
        InvokeError::Unauthenticated => StatusCode::UNAUTHORIZED,
        InvokeError::NoProjectAccess { .. }
        | InvokeError::InsufficientScope { .. }
        | InvokeError::NotGranted { .. }
        | InvokeError::CapabilityNotApproved { .. } => StatusCode::FORBIDDEN,
        InvokeError::StaleGeneration { .. } => StatusCode::CONFLICT,
        InvokeError::InvalidInput(_) => StatusCode::UNPROCESSABLE_ENTITY,
        InvokeError::NotInstalled { .. } | InvokeError::NoSuchAction { .. } => {
            StatusCode::NOT_FOUND
        }
        InvokeError::LimitExceeded { limit, .. } => match limit {
            Limit::InputBytes | Limit::OutputBytes | Limit::ResponseBytes => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Limit::Deadline | Limit::Memory | Limit::HostCalls | Limit::Capacity => {
                StatusCode::TOO_MANY_REQUESTS
            }
        },
        InvokeError::Action { code, .. } => action_status(code),
        // The extension's own mistake: the upstream of the caller failed.
        InvokeError::ExtensionFault(_) => StatusCode::BAD_GATEWAY,
        InvokeError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Statuses of the codes an extension may answer with.
fn action_status(code: &str) -> StatusCode {
    match code {
        "invalid_input" => StatusCode::UNPROCESSABLE_ENTITY,
        "not_provisioned" | "not_found" => StatusCode::NOT_FOUND,
        "conflict" => StatusCode::CONFLICT,
        "provider_unavailable" | "provider_rejected" => StatusCode::BAD_GATEWAY,
        "limit_exceeded" => StatusCode::TOO_MANY_REQUESTS,
        "unauthenticated" => StatusCode::UNAUTHORIZED,
        "forbidden" => StatusCode::FORBIDDEN,
        "not_implemented" => StatusCode::NOT_IMPLEMENTED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The error of an invocation in the one error shape, with its status.
pub(crate) fn invoke_error_response(error: &InvokeError, request_id: &str) -> Response {
    let status = http_status(error);
    let mut body = error.to_json();
    body["request_id"] = Value::String(request_id.to_string());
    let mut response = json_response(status, &body, request_id);
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"host-sim\""),
        );
    }
    response
}

pub(crate) fn json_response(status: StatusCode, body: &Value, request_id: &str) -> Response {
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    if let Ok(value) = HeaderValue::from_str(request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_its_status() {
        let not_granted = InvokeError::NotGranted {
            extension: "e".into(),
            project: "p".into(),
        };
        assert_eq!(http_status(&not_granted), StatusCode::FORBIDDEN);
        assert_eq!(
            http_status(&InvokeError::Unauthenticated),
            StatusCode::UNAUTHORIZED
        );
        let stale = InvokeError::StaleGeneration {
            presented: 1,
            current: 2,
        };
        assert_eq!(http_status(&stale), StatusCode::CONFLICT);
        let action = |code: &str| InvokeError::Action {
            code: code.into(),
            message: String::new(),
        };
        assert_eq!(
            http_status(&action("not_provisioned")),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            http_status(&action("provider_rejected")),
            StatusCode::BAD_GATEWAY
        );
        assert_eq!(
            http_status(&action("made_up")),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        let limit = |limit| InvokeError::LimitExceeded {
            limit,
            message: String::new(),
        };
        assert_eq!(
            http_status(&limit(Limit::OutputBytes)),
            StatusCode::PAYLOAD_TOO_LARGE
        );
        assert_eq!(
            http_status(&limit(Limit::Deadline)),
            StatusCode::TOO_MANY_REQUESTS
        );
        let fault = InvokeError::ExtensionFault("refused".into());
        assert_eq!(
            (http_status(&fault), fault.code()),
            (StatusCode::BAD_GATEWAY, "extension_fault")
        );
    }
}

//! The tracking-domain ingress of `serve`: a request whose `Host` names an
//! applied tracking hostname (in any spelling) never reaches the other
//! surfaces. Only the exact `Host` (`tracking::ingress::host_matches`, the
//! rule the nginx export applies) with one of the exposed requests
//! (`tracking::ingress::exposes`, matched exactly on the raw path) is
//! forwarded to the route's provider origin, with only the allowlisted
//! request headers (`FORWARDED_REQUEST_HEADERS`) and the visitor's address
//! as the sole `X-Forwarded-For` (`visitor_address`: the connection's,
//! unless it is a trusted proxy); nothing that authenticates (no provider
//! secret, no cookie, no `Authorization`). Anything else is 404 without a
//! request to the provider.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{Shared, error_response, new_request_id};
use crate::state::TrackingRoute;
use crate::tracking::hostname::host_of;
use crate::tracking::ingress::{FORWARDED_REQUEST_HEADERS, exposes, host_matches, visitor_address};

/// The largest body forwarded to `/api/send` (a page view is well under 4 KiB).
const MAX_BODY: usize = 64 * 1024;

/// Response headers passed back to the visitor.
const FORWARDED_RESPONSE: &[HeaderName] = &[
    header::CONTENT_TYPE,
    header::CACHE_CONTROL,
    header::ETAG,
    header::LAST_MODIFIED,
    header::ACCESS_CONTROL_ALLOW_ORIGIN,
    header::ACCESS_CONTROL_ALLOW_METHODS,
    header::ACCESS_CONTROL_ALLOW_HEADERS,
    header::ACCESS_CONTROL_MAX_AGE,
    header::VARY,
];

/// The client that forwards: no redirects followed, no proxy, a deadline.
pub(crate) fn client() -> Option<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .inspect_err(|e| tracing::error!(error = %e, "the tracking ingress has no HTTP client"))
        .ok()
}

/// What the ingress does with a request, decided from its `Host`, method
/// and target alone, before any body is read or the provider is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngressDecision {
    /// `Host` names no applied tracking hostname: the other surfaces answer.
    PassThrough,
    /// A tracking hostname in another spelling (case, final dot, port): 421.
    Misdirected(TrackingRoute),
    /// The exact tracking hostname, but not an exposed request: 404.
    NotExposed,
    /// One of the exposed requests: forwarded to the route's provider.
    Forward(TrackingRoute),
}

/// The one decision of the middleware ([`route`]) for a request with these
/// `headers`, `method` and `uri` (as the server parsed the request line),
/// given the applied `routes`.
pub fn decide(
    routes: &[TrackingRoute],
    headers: &HeaderMap,
    method: &Method,
    uri: &Uri,
) -> IngressDecision {
    let Some(raw) = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
    else {
        return IngressDecision::PassThrough;
    };
    let host = host_of(raw);
    let Some(route) = routes.iter().find(|r| r.hostname == host) else {
        return IngressDecision::PassThrough;
    };
    if !host_matches(raw, &route.hostname) {
        return IngressDecision::Misdirected(route.clone());
    }
    if exposes(method.as_str(), uri.path()) {
        IngressDecision::Forward(route.clone())
    } else {
        IngressDecision::NotExposed
    }
}

/// The middleware in front of every surface.
pub(crate) async fn route(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    let routes = match shared.host.tracking_routes() {
        Ok(routes) => routes,
        Err(e) => {
            tracing::error!(error = %e, "cannot read the tracking routes");
            return next.run(request).await;
        }
    };
    let decision = decide(&routes, request.headers(), request.method(), request.uri());
    let route = match decision {
        IngressDecision::PassThrough => return next.run(request).await,
        IngressDecision::Misdirected(route) => {
            return error_response(
                StatusCode::MISDIRECTED_REQUEST,
                "misdirected",
                &format!(
                    "a tracking domain answers only to `Host: {}` exactly",
                    route.hostname
                ),
                &new_request_id(),
            );
        }
        IngressDecision::NotExposed => {
            crate::metrics::ingress("refused");
            return not_exposed();
        }
        IngressDecision::Forward(route) => route,
    };
    let Some(client) = &shared.ingress else {
        crate::metrics::ingress("failed");
        return error_response(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the tracking ingress cannot forward (see the host log)",
            &new_request_id(),
        );
    };
    forward(client, &route, &shared.options.trusted_proxies, request).await
}

fn not_exposed() -> Response {
    error_response(
        StatusCode::NOT_FOUND,
        "not_found",
        "a tracking domain serves only GET /script.js and POST /api/send",
        &new_request_id(),
    )
}

async fn forward(
    client: &reqwest::Client,
    route: &TrackingRoute,
    trusted: &[IpAddr],
    request: Request,
) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(address)| address.ip());
    let (parts, body) = request.into_parts();
    let Ok(body) = to_bytes(body, MAX_BODY).await else {
        crate::metrics::ingress("refused");
        return error_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the body is larger than a page view",
            &new_request_id(),
        );
    };
    let query = parts
        .uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let url = format!("{}{}{query}", route.provider_origin, parts.uri.path());
    let mut outgoing = client.request(parts.method.clone(), &url);
    for name in FORWARDED_REQUEST_HEADERS {
        for value in parts.headers.get_all(*name) {
            outgoing = outgoing.header(*name, value);
        }
    }
    if let Some(peer) = peer {
        let received: Vec<&str> = parts
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let visitor = visitor_address(peer, &received, trusted);
        outgoing = outgoing.header("x-forwarded-for", visitor.to_string());
    }
    if parts.method != axum::http::Method::GET {
        outgoing = outgoing.body(body);
    }
    let answer = match outgoing.send().await {
        Ok(answer) => {
            crate::metrics::ingress("forwarded");
            answer
        }
        Err(e) => {
            crate::metrics::ingress("failed");
            tracing::warn!(hostname = %route.hostname, error = %e.without_url(), "the provider did not answer");
            return error_response(
                StatusCode::BAD_GATEWAY,
                "bad_gateway",
                "the analytics provider did not answer",
                &new_request_id(),
            );
        }
    };
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut headers = HeaderMap::new();
    for name in FORWARDED_RESPONSE {
        for value in answer.headers().get_all(name) {
            if let Ok(value) = HeaderValue::from_bytes(value.as_bytes()) {
                headers.append(name.clone(), value);
            }
        }
    }
    match answer.bytes().await {
        Ok(bytes) => (status, headers, Body::from(bytes)).into_response(),
        Err(_) => error_response(
            StatusCode::BAD_GATEWAY,
            "bad_gateway",
            "the analytics provider's answer broke off",
            &new_request_id(),
        ),
    }
}

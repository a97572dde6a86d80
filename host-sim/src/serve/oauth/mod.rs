//! The MCP server's authorization (MCP 2026-07-28, "Authorization"): host-sim
//! is the OAuth 2.1 authorization server of its own `/mcp` resource, and
//! the console's sign-in is how a person authenticates.
//!
//! | path | what |
//! |---|---|
//! | `/.well-known/oauth-protected-resource[/mcp]` | Protected Resource Metadata (RFC 9728) |
//! | `/.well-known/oauth-authorization-server` | Authorization Server Metadata (RFC 8414) |
//! | `/oauth/register` | Dynamic Client Registration (RFC 7591), unless switched off |
//! | `/console/authorize` | the authorization endpoint: the consent page ([`consent`]) |
//! | `/oauth/token` | the token endpoint: `authorization_code` (PKCE S256) and `refresh_token` |
//! | `/console/apps` | the person's connected apps, each revocable ([`consent`]) |
//!
//! Every rule is decided in `host::oauth` (HTTP-free); here requests are
//! parsed and answers rendered. A client is registered or identified by its
//! Client ID Metadata Document ([`client_metadata`]).

mod client_metadata;
mod consent;

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use serde_json::{Value, json};

/// What the authorization server keeps in memory: the consent pages not
/// yet decided and the fetched client metadata documents.
#[derive(Default)]
pub(crate) struct OAuthShared {
    pending: consent::PendingRequests,
    metadata: client_metadata::MetadataCache,
}

use super::Shared;
use crate::host::{ClientCredentials, OAuthError, OAuthLifetimes};
use crate::spec;

/// How the authorization server runs (part of `ServeOptions`).
#[derive(Debug, Clone)]
pub struct OAuthOptions {
    /// The server's public base URL (`https://host.example`), the issuer;
    /// the MCP resource is `<public_url>/mcp`. `None`: `http://<Host>` of
    /// each request, for loopback and development.
    pub public_url: Option<String>,
    pub lifetimes: OAuthLifetimes,
    /// Dynamic Client Registration at `/oauth/register`.
    pub dynamic_registration: bool,
    /// Clients identified by an https URL to their metadata document.
    pub client_metadata_documents: bool,
    /// How metadata documents are fetched.
    pub metadata_fetch: MetadataFetch,
}

/// The bounds of a Client ID Metadata Document fetch.
#[derive(Debug, Clone)]
pub struct MetadataFetch {
    /// Loopback, private and other non-public addresses (development only).
    pub allow_private_addresses: bool,
    pub max_bytes: usize,
    pub timeout: Duration,
    /// How long a fetched document is used before it is fetched again.
    pub cache_for: Duration,
}

impl Default for OAuthOptions {
    fn default() -> Self {
        Self {
            public_url: None,
            lifetimes: OAuthLifetimes::default(),
            dynamic_registration: true,
            client_metadata_documents: true,
            metadata_fetch: MetadataFetch {
                allow_private_addresses: false,
                max_bytes: 5 * 1024,
                timeout: Duration::from_secs(5),
                cache_for: Duration::from_secs(300),
            },
        }
    }
}

pub(super) fn routes(shared: Shared) -> Router {
    let mut router = Router::new()
        .route(
            "/.well-known/oauth-protected-resource",
            get(protected_resource),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(protected_resource),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(authorization_server),
        )
        .route("/oauth/token", post(token));
    if shared.options.oauth.dynamic_registration {
        router = router.route("/oauth/register", post(register));
    }
    // The consent and connected-apps pages are the console's: no CORS.
    router
        .layer(metadata_cors())
        .merge(consent::routes())
        .with_state(shared)
}

/// Browser-based clients read the metadata and call the token and
/// registration endpoints from their own origin; no cookie is involved.
fn metadata_cors() -> tower_http::cors::CorsLayer {
    use axum::http::Method;
    tower_http::cors::CorsLayer::new()
        .allow_origin(tower_http::cors::AllowOrigin::any())
        .allow_methods([Method::GET, Method::POST])
        .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION])
}

/// The issuer identifier (RFC 8414 §2): the server's base URL with the
/// root path, `<base>/`. (Written with its slash, it is the string clients
/// that parse it as a URL, such as the MCP Python SDK, compare `iss` with.)
pub(crate) fn issuer(shared: &Shared, headers: &HeaderMap) -> String {
    format!("{}/", base_url(shared, headers))
}

/// The server's base URL: the configured public URL, or `http://<Host>`.
pub(crate) fn base_url(shared: &Shared, headers: &HeaderMap) -> String {
    match &shared.options.oauth.public_url {
        Some(url) => url.trim_end_matches('/').to_string(),
        None => format!(
            "http://{}",
            headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("localhost")
        ),
    }
}

/// The MCP resource's canonical URL (RFC 8707): what tokens are bound to.
pub(crate) fn mcp_resource(shared: &Shared, headers: &HeaderMap) -> String {
    format!("{}/mcp", base_url(shared, headers))
}

/// The `WWW-Authenticate` value of a 401 from `/mcp` (RFC 9728 §5.1,
/// RFC 6750 §3): where the resource metadata is and which scopes to ask
/// for; `invalid_token` when a token was sent.
pub(crate) fn mcp_challenge(shared: &Shared, headers: &HeaderMap, token_sent: bool) -> HeaderValue {
    let metadata = format!(
        "{}/.well-known/oauth-protected-resource/mcp",
        base_url(shared, headers)
    );
    let error = if token_sent {
        "error=\"invalid_token\", "
    } else {
        ""
    };
    let value = format!(
        "Bearer {error}resource_metadata=\"{metadata}\", scope=\"{}\"",
        spec::SCOPES.join(" ")
    );
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
}

/// The `WWW-Authenticate` value of a 403 for a call that needs a scope the
/// token lacks: the scopes to ask for in the step-up (the granted ones
/// plus the missing one).
pub(crate) fn insufficient_scope_challenge(
    shared: &Shared,
    headers: &HeaderMap,
    granted: &str,
    needed: &str,
) -> HeaderValue {
    let scopes: Vec<&str> = spec::SCOPES
        .iter()
        .copied()
        .filter(|s| spec::scope_contains(granted, s) || *s == needed)
        .collect();
    let value = format!(
        "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\", error_description=\"this call needs scope {needed}\"",
        scopes.join(" "),
        base_url(shared, headers)
    );
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
}

fn metadata_response(body: Value) -> Response {
    let mut response = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=300"),
    );
    response
}

/// Protected Resource Metadata (RFC 9728) of `/mcp`.
async fn protected_resource(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    metadata_response(json!({
        "resource": mcp_resource(&shared, &headers),
        "authorization_servers": [issuer(&shared, &headers)],
        "scopes_supported": spec::SCOPES,
        "bearer_methods_supported": ["header"],
        "resource_name": "host-sim MCP server",
    }))
}

/// Authorization Server Metadata (RFC 8414).
async fn authorization_server(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let base = base_url(&shared, &headers);
    let options = &shared.options.oauth;
    let mut body = json!({
        "issuer": issuer(&shared, &headers),
        "authorization_endpoint": format!("{base}/console/authorize"),
        "token_endpoint": format!("{base}/oauth/token"),
        "scopes_supported": spec::SCOPES,
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
        "code_challenge_methods_supported": ["S256"],
        "client_id_metadata_document_supported": options.client_metadata_documents,
        "authorization_response_iss_parameter_supported": true,
    });
    if options.dynamic_registration {
        body["registration_endpoint"] = json!(format!("{base}/oauth/register"));
    }
    metadata_response(body)
}

/// An OAuth error answer: `{"error","error_description"}` (RFC 6749 §5.2).
pub(crate) fn oauth_error(error: &OAuthError) -> Response {
    let status = match error.code {
        "invalid_client" => StatusCode::UNAUTHORIZED,
        "server_error" => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    };
    let body = json!({"error": error.code, "error_description": error.message});
    let mut response = (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body.to_string(),
    )
        .into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"host-sim\""),
        );
    }
    response
}

/// Dynamic Client Registration (RFC 7591 §3).
async fn register(State(shared): State<Shared>, body: String) -> Response {
    let metadata: Value = match serde_json::from_str(&body) {
        Ok(metadata) => metadata,
        Err(e) => {
            return oauth_error(&OAuthError::new(
                "invalid_client_metadata",
                format!("the registration is not JSON ({e})"),
            ));
        }
    };
    let host = shared.host.clone();
    let registered = tokio::task::spawn_blocking(move || host.register_client(&metadata))
        .await
        .unwrap_or_else(|e| {
            Err(OAuthError::new(
                "server_error",
                format!("the host failed: {e}"),
            ))
        });
    match registered {
        Ok(client) => {
            let mut body = json!({
                "client_id": client.client_id,
                "client_id_issued_at": client.issued_at,
                "client_name": client.client_name,
                "redirect_uris": client.redirect_uris,
                "token_endpoint_auth_method": client.auth_method,
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
            });
            if let Some(secret) = client.client_secret {
                body["client_secret"] = json!(secret);
                body["client_secret_expires_at"] = json!(0);
            }
            (
                StatusCode::CREATED,
                [
                    (header::CONTENT_TYPE, "application/json"),
                    (header::CACHE_CONTROL, "no-store"),
                ],
                body.to_string(),
            )
                .into_response()
        }
        Err(error) => oauth_error(&error),
    }
}

/// The client's credentials of a token request: `client_secret_basic`
/// (the `Authorization` header) or the form's `client_id` and
/// `client_secret`.
fn client_credentials(
    headers: &HeaderMap,
    form: &[(String, String)],
) -> Result<ClientCredentials, OAuthError> {
    let field = |name: &str| {
        form.iter()
            .find(|(key, _)| key == name)
            .map(|(_, v)| v.clone())
    };
    if let Some(basic) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
    {
        let refused = || OAuthError::new("invalid_client", "the Basic credentials do not decode");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(basic.trim())
            .map_err(|_| refused())?;
        let decoded = String::from_utf8(decoded).map_err(|_| refused())?;
        let (id, secret) = decoded.split_once(':').ok_or_else(refused)?;
        let decode = |s: &str| {
            form_urlencoded::parse(format!("v={s}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        };
        return Ok(ClientCredentials {
            client_id: decode(id),
            client_secret: Some(decode(secret)),
        });
    }
    let client_id = field("client_id")
        .filter(|id| !id.is_empty())
        .ok_or_else(|| OAuthError::new("invalid_client", "client_id is required"))?;
    Ok(ClientCredentials {
        client_id,
        client_secret: field("client_secret"),
    })
}

/// The token endpoint (RFC 6749 §3.2): a form body.
async fn token(State(shared): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let form: Vec<(String, String)> = form_urlencoded::parse(body.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let field = |name: &str| {
        form.iter()
            .find(|(key, _)| key == name)
            .map(|(_, v)| v.clone())
    };
    let credentials = match client_credentials(&headers, &form) {
        Ok(credentials) => credentials,
        Err(error) => return oauth_error(&error),
    };
    let lifetimes = shared.options.oauth.lifetimes;
    let host = shared.host.clone();
    let grant_type = field("grant_type").unwrap_or_default();
    let resource = field("resource");
    let issued = match grant_type.as_str() {
        "authorization_code" => {
            let Some(code) = field("code") else {
                return oauth_error(&OAuthError::new("invalid_request", "code is required"));
            };
            let (redirect_uri, verifier) = (field("redirect_uri"), field("code_verifier"));
            tokio::task::spawn_blocking(move || {
                host.exchange_code(
                    &credentials,
                    &code,
                    redirect_uri.as_deref(),
                    verifier.as_deref(),
                    resource.as_deref(),
                    &lifetimes,
                )
            })
            .await
        }
        "refresh_token" => {
            let Some(refresh_token) = field("refresh_token") else {
                return oauth_error(&OAuthError::new(
                    "invalid_request",
                    "refresh_token is required",
                ));
            };
            let scope = field("scope");
            tokio::task::spawn_blocking(move || {
                host.refresh(
                    &credentials,
                    &refresh_token,
                    scope.as_deref(),
                    resource.as_deref(),
                    &lifetimes,
                )
            })
            .await
        }
        "" => {
            return oauth_error(&OAuthError::new(
                "invalid_request",
                "grant_type is required",
            ));
        }
        other => {
            return oauth_error(&OAuthError::new(
                "unsupported_grant_type",
                format!(
                    "grant_type {other} is not supported; use authorization_code or refresh_token"
                ),
            ));
        }
    };
    match issued.unwrap_or_else(|e| {
        Err(OAuthError::new(
            "server_error",
            format!("the host failed: {e}"),
        ))
    }) {
        Ok(tokens) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            json!({
                "access_token": tokens.access_token,
                "token_type": "Bearer",
                "expires_in": tokens.expires_in,
                "refresh_token": tokens.refresh_token,
                "scope": tokens.scope,
            })
            .to_string(),
        )
            .into_response(),
        Err(error) => oauth_error(&error),
    }
}

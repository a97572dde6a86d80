//! The authorization endpoint's pages in the console: the consent page
//! (`/console/authorize`), where a signed-in person sees the client's name
//! and redirect host and chooses the projects and scopes it may use, and
//! "Connected apps" (`/console/apps`), where they see and disconnect them.
//!
//! Until the client and its redirect URI are known to match, a refusal is
//! shown on the page (RFC 6749 §4.1.2.1: never redirect to an unchecked
//! URI); after that it goes back to the client as `error`, with `state`
//! and `iss` (RFC 9207). What the person approves is bound to their
//! console session: the form carries the id of a pending request that
//! only that session can complete, once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use rand::RngCore;

use super::super::Shared;
use super::super::console::{
    allow_form_target, escape, header_bar, page, same_origin, sign_in_page_to,
};
use super::{issuer, mcp_resource};
use crate::host::{
    Approval, Caller, OAuthClient, OAuthError, check_challenge, is_metadata_document_id,
    parse_scope, redirect_host, redirect_uri_matches,
};
use crate::spec;

/// How long a consent page may stay open.
const PENDING_FOR: Duration = Duration::from_secs(600);

/// Authorization requests shown to a person and not yet decided.
#[derive(Default)]
pub(super) struct PendingRequests {
    by_id: Mutex<HashMap<String, Pending>>,
}

#[derive(Clone)]
struct Pending {
    session: String,
    client: OAuthClient,
    redirect_uri: String,
    state: Option<String>,
    code_challenge: String,
    resource: String,
    scopes: Vec<String>,
    issuer: String,
    expires: Instant,
}

impl PendingRequests {
    fn insert(&self, pending: Pending) -> String {
        let mut bytes = [0u8; 24];
        rand::thread_rng().fill_bytes(&mut bytes);
        let id = hex::encode(bytes);
        let mut map = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        map.retain(|_, p| p.expires > now);
        map.insert(id.clone(), pending);
        id
    }

    /// Takes the pending request `id` of console session `session`.
    fn take(&self, id: &str, session: &str) -> Option<Pending> {
        let mut map = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        let pending = map.get(id)?;
        if pending.session != session || pending.expires <= Instant::now() {
            return None;
        }
        map.remove(id)
    }
}

pub(super) fn routes() -> Router<Shared> {
    Router::new()
        .route("/console/authorize", get(authorize).post(decide))
        .route("/console/apps", get(apps))
        .route("/console/apps/{app}/disconnect", post(disconnect))
}

/// A refusal shown on the page (the redirect URI is not trusted yet).
fn refusal_page(status: StatusCode, error: &OAuthError) -> Response {
    page(
        status,
        "Authorization refused",
        &format!(
            "<main>\n<h1>This app cannot be authorized</h1>\n\
             <p role=\"alert\"><code>{}</code>: {}</p>\n\
             <p><a href=\"/console\">Back to the console</a></p>\n</main>",
            escape(error.code),
            escape(&error.message)
        ),
    )
}

/// Sends the client its answer at its redirect URI, with `state` and `iss`.
fn redirect_to_client(
    redirect_uri: &str,
    params: &[(&str, &str)],
    state: Option<&str>,
    issuer: &str,
) -> Response {
    let Ok(mut url) = url::Url::parse(redirect_uri) else {
        return refusal_page(
            StatusCode::BAD_REQUEST,
            &OAuthError::new("invalid_request", "redirect_uri does not parse"),
        );
    };
    {
        let mut query = url.query_pairs_mut();
        for (name, value) in params {
            query.append_pair(name, value);
        }
        if let Some(state) = state {
            query.append_pair("state", state);
        }
        query.append_pair("iss", issuer);
    }
    Redirect::to(url.as_str()).into_response()
}

fn client_error(
    redirect_uri: &str,
    error: &OAuthError,
    state: Option<&str>,
    issuer: &str,
) -> Response {
    redirect_to_client(
        redirect_uri,
        &[("error", error.code), ("error_description", &error.message)],
        state,
        issuer,
    )
}

/// The client a request names: registered here, or described by its
/// metadata document.
async fn resolve_client(shared: &Shared, client_id: &str) -> Result<OAuthClient, OAuthError> {
    if is_metadata_document_id(client_id) {
        if !shared.options.oauth.client_metadata_documents {
            return Err(OAuthError::new(
                "invalid_client",
                "clients identified by a metadata document URL are switched off on this server",
            ));
        }
        return shared
            .oauth
            .metadata
            .client(client_id, &shared.options.oauth.metadata_fetch)
            .await;
    }
    let host = shared.host.clone();
    let id = client_id.to_string();
    tokio::task::spawn_blocking(move || host.registered_client(&id))
        .await
        .unwrap_or_else(|e| {
            Err(OAuthError::new(
                "server_error",
                format!("the host failed: {e}"),
            ))
        })?
        .ok_or_else(|| {
            OAuthError::new(
                "invalid_client",
                format!("client_id {client_id} is not a registered client"),
            )
        })
}

/// `GET /console/authorize`: checks the request and shows the consent page
/// (or the sign-in page first).
async fn authorize(
    State(shared): State<Shared>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let field = |name: &str| {
        query
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, v)| v.clone())
    };
    let Some(client_id) = field("client_id") else {
        return refusal_page(
            StatusCode::BAD_REQUEST,
            &OAuthError::new("invalid_request", "client_id is required"),
        );
    };
    let client = match resolve_client(&shared, &client_id).await {
        Ok(client) => client,
        Err(error) => return refusal_page(StatusCode::BAD_REQUEST, &error),
    };
    let Some(redirect_uri) = field("redirect_uri") else {
        return refusal_page(
            StatusCode::BAD_REQUEST,
            &OAuthError::new("invalid_request", "redirect_uri is required"),
        );
    };
    if !client
        .redirect_uris
        .iter()
        .any(|registered| redirect_uri_matches(registered, &redirect_uri))
    {
        return refusal_page(
            StatusCode::BAD_REQUEST,
            &OAuthError::new(
                "invalid_request",
                "redirect_uri must be exactly one of the client's registered redirect URIs (for http to a loopback IP address, only the port may differ)",
            ),
        );
    }
    // From here on the client hears about refusals at its redirect URI.
    let issuer = issuer(&shared, &headers);
    let state = field("state");
    let refuse = |error: OAuthError| client_error(&redirect_uri, &error, state.as_deref(), &issuer);
    if field("response_type").as_deref() != Some("code") {
        return refuse(OAuthError::new(
            "unsupported_response_type",
            "response_type must be code",
        ));
    }
    let Some(code_challenge) = field("code_challenge") else {
        return refuse(OAuthError::new(
            "invalid_request",
            "code_challenge is required: PKCE with S256 (RFC 7636)",
        ));
    };
    match field("code_challenge_method").as_deref() {
        Some("S256") => {}
        Some(other) => {
            return refuse(OAuthError::new(
                "invalid_request",
                format!("code_challenge_method {other} is not supported; use S256"),
            ));
        }
        None => {
            return refuse(OAuthError::new(
                "invalid_request",
                "code_challenge_method is required and must be S256",
            ));
        }
    }
    if let Err(rule) = check_challenge(&code_challenge) {
        return refuse(OAuthError::new("invalid_request", rule));
    }
    let resource = mcp_resource(&shared, &headers);
    if let Some(asked) = field("resource")
        && asked != resource
    {
        return refuse(OAuthError::new(
            "invalid_target",
            format!("resource must be {resource}, the only resource this server issues tokens for"),
        ));
    }
    let scopes = match parse_scope(field("scope").as_deref()) {
        Ok(scopes) => scopes,
        Err(error) => return refuse(error),
    };
    let next = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let (Some(session), Some(caller)) = (
        shared.console.session_id(&headers),
        shared.console.caller(&headers),
    ) else {
        return sign_in_page_to(
            StatusCode::OK,
            Some(&format!("Sign in to authorize {}.", client.client_name)),
            Some(&next),
        );
    };
    let pending = Pending {
        session,
        client,
        redirect_uri,
        state,
        code_challenge,
        resource,
        scopes,
        issuer,
        expires: Instant::now() + PENDING_FOR,
    };
    consent_page(&shared, caller, pending, None).await
}

/// The consent page for `pending` (stored under a new id).
async fn consent_page(
    shared: &Shared,
    caller: Caller,
    pending: Pending,
    problem: Option<&str>,
) -> Response {
    let access = match super::super::caller_access(&shared.host, &caller).await {
        Ok(access) => access,
        Err(_) => {
            return sign_in_page_to(
                StatusCode::UNAUTHORIZED,
                Some("Your sign-in has expired. Sign in again, then start from the app."),
                None,
            );
        }
    };
    let mut projects = String::new();
    for project in access.projects.keys() {
        projects.push_str(&format!(
            "<li><label><input type=\"checkbox\" name=\"project\" value=\"{p}\"> {p}</label></li>\n",
            p = escape(project)
        ));
    }
    let mut scopes = String::new();
    for scope in spec::SCOPES {
        let what = match scope {
            "read" => "read configuration and stats",
            _ => "provision and change",
        };
        let checked = if pending.scopes.iter().any(|s| s == scope) {
            " checked"
        } else {
            ""
        };
        scopes.push_str(&format!(
            "<li><label><input type=\"checkbox\" name=\"scope\" value=\"{scope}\"{checked}> \
             <code>{scope}</code>: {what}</label></li>\n"
        ));
    }
    let problem = problem
        .map(|p| format!("<p class=\"problem\" role=\"alert\">{}</p>\n", escape(p)))
        .unwrap_or_default();
    let title = format!("Authorize {}", pending.client.client_name);
    let body = format!(
        "{bar}\n<main class=\"consent\">\n<h1>Authorize {name}</h1>\n\
         <p><strong>{name}</strong> wants to use your projects through the MCP server. \
         After you decide, you go back to <strong>{host}</strong>.</p>\n\
         <p class=\"detail\">Client id: <code>{client_id}</code></p>\n{problem}\
         <form method=\"post\" action=\"/console/authorize\">\n\
         <input type=\"hidden\" name=\"request\" value=\"{request}\">\n\
         <fieldset>\n<legend>Projects it may use</legend>\n<ul class=\"choices\">\n{projects}</ul>\n</fieldset>\n\
         <fieldset>\n<legend>What it may do</legend>\n<ul class=\"choices\">\n{scopes}</ul>\n</fieldset>\n\
         <button type=\"submit\" name=\"decision\" value=\"approve\">Allow</button>\n\
         <button type=\"submit\" name=\"decision\" value=\"deny\">Deny</button>\n\
         </form>\n</main>",
        bar = header_bar(&access.user),
        name = escape(&pending.client.client_name),
        host = escape(&redirect_host(&pending.redirect_uri)),
        client_id = escape(&pending.client.client_id),
        request = shared.oauth.pending.insert(pending.clone()),
    );
    let mut response = page(StatusCode::OK, &title, &body);
    if let Some(target) = form_target(&pending.redirect_uri) {
        allow_form_target(&mut response, &target);
    }
    response
}

/// The CSP source of a redirect URI: its origin, or its scheme for a
/// private-use one (`com.example.app:/callback`). Both are made of URL
/// characters only, never of the URI's path or query.
fn form_target(redirect_uri: &str) -> Option<String> {
    let url = url::Url::parse(redirect_uri).ok()?;
    match url.origin() {
        origin @ url::Origin::Tuple(..) => Some(origin.ascii_serialization()),
        url::Origin::Opaque(_) => Some(format!("{}:", url.scheme())),
    }
}

/// `POST /console/authorize`: the person's decision.
async fn decide(State(shared): State<Shared>, headers: HeaderMap, body: String) -> Response {
    if !same_origin(&headers) {
        return refusal_page(
            StatusCode::FORBIDDEN,
            &OAuthError::new("access_denied", "decide on the consent page itself"),
        );
    }
    let form: Vec<(String, String)> = form_urlencoded::parse(body.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let values = |name: &str| -> Vec<String> {
        form.iter()
            .filter(|(key, _)| key == name)
            .map(|(_, v)| v.clone())
            .collect()
    };
    let request = values("request").pop().unwrap_or_default();
    let (Some(session), Some(caller)) = (
        shared.console.session_id(&headers),
        shared.console.caller(&headers),
    ) else {
        return sign_in_page_to(
            StatusCode::UNAUTHORIZED,
            Some("Your sign-in has expired. Sign in again, then start from the app."),
            None,
        );
    };
    let Some(pending) = shared.oauth.pending.take(&request, &session) else {
        return refusal_page(
            StatusCode::BAD_REQUEST,
            &OAuthError::new(
                "invalid_request",
                "this authorization request is unknown, expired or already decided; start again from the app",
            ),
        );
    };
    if values("decision").pop().as_deref() != Some("approve") {
        return client_error(
            &pending.redirect_uri,
            &OAuthError::new("access_denied", "the person denied the authorization"),
            pending.state.as_deref(),
            &pending.issuer,
        );
    }
    let approval = Approval {
        client: pending.client.clone(),
        redirect_uri: pending.redirect_uri.clone(),
        code_challenge: pending.code_challenge.clone(),
        resource: pending.resource.clone(),
        scopes: spec::SCOPES
            .iter()
            .filter(|s| values("scope").iter().any(|v| v == *s))
            .map(|s| s.to_string())
            .collect(),
        projects: values("project"),
    };
    let host = shared.host.clone();
    let lifetimes = shared.options.oauth.lifetimes;
    let person = caller.clone();
    let approved =
        tokio::task::spawn_blocking(move || host.authorize_app(&person, &approval, &lifetimes))
            .await
            .unwrap_or_else(|e| {
                Err(OAuthError::new(
                    "server_error",
                    format!("the host failed: {e}"),
                ))
            });
    match approved {
        Ok(code) => redirect_to_client(
            &pending.redirect_uri,
            &[("code", &code)],
            pending.state.as_deref(),
            &pending.issuer,
        ),
        Err(error) if error.code == "server_error" => {
            refusal_page(StatusCode::INTERNAL_SERVER_ERROR, &error)
        }
        Err(error) => {
            let mut response = consent_page(&shared, caller, pending, Some(&error.message)).await;
            *response.status_mut() = StatusCode::UNPROCESSABLE_ENTITY;
            response
        }
    }
}

/// `GET /console/apps`: the person's connected apps.
async fn apps(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let Some(caller) = shared.console.caller(&headers) else {
        return sign_in_page_to(
            StatusCode::UNAUTHORIZED,
            Some("Sign in to see your connected apps."),
            Some("/console/apps"),
        );
    };
    let access = match super::super::caller_access(&shared.host, &caller).await {
        Ok(access) => access,
        Err(_) => {
            return sign_in_page_to(
                StatusCode::UNAUTHORIZED,
                Some("Your token has expired or was revoked. Sign in with a current one."),
                Some("/console/apps"),
            );
        }
    };
    let host = shared.host.clone();
    let listed = tokio::task::spawn_blocking(move || host.connected_apps(&caller))
        .await
        .unwrap_or_else(|e| {
            Err(OAuthError::new(
                "server_error",
                format!("the host failed: {e}"),
            ))
        });
    let apps = match listed {
        Ok(apps) => apps,
        Err(error) => return refusal_page(StatusCode::INTERNAL_SERVER_ERROR, &error),
    };
    let mut rows = String::new();
    for app in &apps {
        let authorized = time::OffsetDateTime::from_unix_timestamp(app.updated_at)
            .ok()
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_default();
        rows.push_str(&format!(
            "<tr>\n<th scope=\"row\">{name}<br><span class=\"detail\">{host}</span></th>\n\
             <td>{projects}</td>\n<td>{scope}</td>\n<td><time datetime=\"{authorized}\">{authorized}</time></td>\n\
             <td><form method=\"post\" action=\"/console/apps/{id}/disconnect\">\
             <button type=\"submit\" aria-label=\"Disconnect {name}\">Disconnect</button></form></td>\n</tr>\n",
            name = escape(&app.client_name),
            host = escape(&app.redirect_host),
            projects = escape(&app.projects.join(", ")),
            scope = escape(&app.scope),
            id = escape(&app.app_id),
        ));
    }
    let list = if rows.is_empty() {
        "<p>No app is connected. An MCP client you authorize shows up here.</p>".to_string()
    } else {
        format!(
            "<table class=\"apps\">\n<thead><tr><th scope=\"col\">App</th><th scope=\"col\">Projects</th>\
             <th scope=\"col\">Scopes</th><th scope=\"col\">Authorized</th><th scope=\"col\"></th></tr></thead>\n\
             <tbody>\n{rows}</tbody>\n</table>"
        )
    };
    page(
        StatusCode::OK,
        "Connected apps",
        &format!(
            "{}\n<main>\n<h1>Connected apps</h1>\n{list}\n</main>",
            header_bar(&access.user)
        ),
    )
}

/// `POST /console/apps/{app}/disconnect`.
async fn disconnect(
    State(shared): State<Shared>,
    Path(app): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !same_origin(&headers) {
        return refusal_page(
            StatusCode::FORBIDDEN,
            &OAuthError::new("access_denied", "disconnect from the console page itself"),
        );
    }
    let Some(caller) = shared.console.caller(&headers) else {
        return sign_in_page_to(
            StatusCode::UNAUTHORIZED,
            Some("Sign in to manage your connected apps."),
            Some("/console/apps"),
        );
    };
    let host = shared.host.clone();
    let removed = tokio::task::spawn_blocking(move || host.disconnect_app(&caller, &app))
        .await
        .unwrap_or_else(|e| {
            Err(OAuthError::new(
                "server_error",
                format!("the host failed: {e}"),
            ))
        });
    match removed {
        Ok(true) => Redirect::to("/console/apps").into_response(),
        Ok(false) => refusal_page(
            StatusCode::NOT_FOUND,
            &OAuthError::new("invalid_request", "you have no such connected app"),
        ),
        Err(error) => refusal_page(StatusCode::INTERNAL_SERVER_ERROR, &error),
    }
}

#[cfg(test)]
mod tests {
    use super::form_target;

    #[test]
    fn a_redirect_uri_becomes_its_origin_or_its_scheme_for_the_page_policy() {
        assert_eq!(
            form_target("http://127.0.0.1:33418/callback?x=1").as_deref(),
            Some("http://127.0.0.1:33418")
        );
        assert_eq!(
            form_target("https://app.example/oauth/cb").as_deref(),
            Some("https://app.example")
        );
        assert_eq!(
            form_target("com.example.app:/callback").as_deref(),
            Some("com.example.app:")
        );
        assert_eq!(form_target("not a uri"), None);
    }
}

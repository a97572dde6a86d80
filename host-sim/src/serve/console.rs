//! The console: sign in with a host token, pick a project, and use each
//! granted extension's panel in a sandboxed iframe.
//!
//! - The user's token stays on the server: signing in stores it in memory
//!   under a random session id, and the browser holds only that id in an
//!   `HttpOnly`, `SameSite=Strict` cookie scoped to `/console`.
//! - A panel never sees the user's token. `console.js` answers the panel's
//!   `platform.ready` / `platform.session-expired` messages with a session
//!   from `POST /console/api/projects/{project}/extensions/{extension}/session`:
//!   a fresh token that reaches only that project and expires after
//!   [`ServeOptions::panel_session_ttl`](super::ServeOptions), plus the
//!   current generation and the API base. It lives in the iframe's memory.
//! - The iframe's height follows the panel's content: the panel posts
//!   `platform.resize` with its height and `console.js` sets it (clamped to
//!   120–20000 px, from that iframe's window only), so a panel never
//!   scrolls inside its frame.
//! - Panel files are served from the installed release with
//!   `Access-Control-Allow-Origin: *` (the sandboxed iframe has an opaque
//!   origin, so its module script and wasm fetches are CORS requests).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use rand::RngCore;
use serde_json::json;

use super::{
    Shared, caller_access, error_response, host_query, invoke_error_response, json_response,
    new_request_id,
};
use crate::error::InvokeError;
use crate::host::Caller;
use crate::state::TokenAccess;

/// The console session cookie's name.
pub const COOKIE: &str = "host_sim_console";
const CONSOLE_JS: &str = include_str!("console.js");
const CONSOLE_CSS: &str = include_str!("console.css");
const PAGE_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    frame-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; \
    form-action 'self'; frame-ancestors 'none'";

/// Signed-in browsers: session id → the user's token.
#[derive(Default)]
pub struct Sessions {
    by_id: Mutex<HashMap<String, ConsoleSession>>,
}

struct ConsoleSession {
    token: String,
    expires: Instant,
}

impl Sessions {
    /// Signs `token` in for `ttl`: the new session's id (the cookie's value).
    pub fn open(&self, token: String, ttl: Duration) -> String {
        let mut bytes = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut bytes);
        let id = hex::encode(bytes);
        let mut sessions = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        sessions.retain(|_, s| s.expires > now);
        sessions.insert(
            id.clone(),
            ConsoleSession {
                token,
                expires: now + ttl,
            },
        );
        id
    }

    /// The id of the browser's current session (what a consent page is
    /// bound to).
    pub(super) fn session_id(&self, headers: &HeaderMap) -> Option<String> {
        let id = cookie(headers, COOKIE)?;
        let sessions = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        sessions
            .get(&id)
            .filter(|s| s.expires > Instant::now())
            .map(|_| id)
    }

    /// The signed-in caller of a request: its session cookie names a
    /// session that has not expired.
    pub fn caller(&self, headers: &HeaderMap) -> Option<Caller> {
        let id = cookie(headers, COOKIE)?;
        let sessions = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        sessions
            .get(&id)
            .filter(|s| s.expires > Instant::now())
            .map(|s| Caller::bearer(s.token.clone()))
    }

    /// Signs out the session the request's cookie names.
    pub fn close(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers, COOKIE) {
            self.by_id
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
        }
    }
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
}

/// The token of a sign-in form body (`application/x-www-form-urlencoded`,
/// its first `token` field, trimmed); empty when there is none.
pub fn sign_in_token(body: &str) -> String {
    form_field(body, "token").unwrap_or_default()
}

/// A field of a form body, trimmed.
fn form_field(body: &str, field: &str) -> Option<String> {
    form_urlencoded::parse(body.as_bytes())
        .find(|(name, _)| name == field)
        .map(|(_, value)| value.trim().to_string())
}

pub(super) fn routes(shared: Shared) -> Router {
    let panel = Router::new()
        .route("/v1/plugins/{extension}/panel/{*file}", get(panel_file))
        .layer(super::api::cors())
        .with_state(shared.clone());
    Router::new()
        .route("/", get(|| async { Redirect::to("/console") }))
        .route("/console", get(home))
        .route("/console/", get(|| async { Redirect::to("/console") }))
        .route("/console/sign-in", post(sign_in))
        .route("/console/sign-out", post(sign_out))
        .route("/console/projects/{project}", get(project_page))
        .route(
            "/console/api/projects/{project}/extensions/{extension}/session",
            post(panel_session),
        )
        .route("/console/console.js", get(script))
        .route("/console/console.css", get(style))
        .with_state(shared)
        .merge(panel)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", CONSOLE_JS)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", CONSOLE_CSS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// A console page with the security headers every page gets.
pub(super) fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title} · host-sim console</title>\n\
         <link rel=\"stylesheet\" href=\"/console/console.css\">\n</head>\n<body>\n{body}\n</body>\n</html>\n",
        title = escape(title),
    );
    let mut response = (status, Html(html)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(PAGE_CSP),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Not `no-referrer`: under it browsers send `Origin: null` with the
    // page's own form posts and fetches, and `same_origin` refuses them.
    // `same-origin` still sends no referrer to any other origin.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// Lets the forms of page `response` lead to `target` as well as to the
/// console: the consent page's decision answers with a redirect to the
/// client, and browsers hold a form's redirects to `form-action` too.
/// `target` is a CSP source expression (an origin or a scheme).
pub(super) fn allow_form_target(response: &mut Response, target: &str) {
    let policy = PAGE_CSP.replace(
        "form-action 'self'",
        &format!("form-action 'self' {target}"),
    );
    if let Ok(value) = HeaderValue::from_str(&policy) {
        response
            .headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, value);
    }
}

pub(super) fn escape(text: &str) -> String {
    html_escape::encode_double_quoted_attribute(text).into_owned()
}

fn sign_in_page(status: StatusCode, problem: Option<&str>) -> Response {
    sign_in_page_to(status, problem, None)
}

/// Where a sign-in may continue to: the consent page of an authorization
/// request, or the connected apps (never another site).
fn continues_to(next: &str) -> bool {
    (next == "/console/apps" || next.starts_with("/console/authorize?"))
        && next.bytes().all(|b| b.is_ascii_graphic())
}

/// The sign-in page; after signing in the browser goes on to `next` (see
/// [`continues_to`]).
pub(super) fn sign_in_page_to(
    status: StatusCode,
    problem: Option<&str>,
    next: Option<&str>,
) -> Response {
    let next = next
        .filter(|next| continues_to(next))
        .map(|next| {
            format!(
                "<input type=\"hidden\" name=\"next\" value=\"{}\">\n",
                escape(next)
            )
        })
        .unwrap_or_default();
    let problem = problem
        .map(|p| {
            format!(
                "<p class=\"problem\" role=\"alert\" id=\"token-problem\">{}</p>",
                escape(p)
            )
        })
        .unwrap_or_default();
    let described = if problem.is_empty() {
        "token-help"
    } else {
        "token-help token-problem"
    };
    page(
        status,
        "Sign in",
        &format!(
            "<main class=\"sign-in\">\n<h1>Sign in to the console</h1>\n\
             <form method=\"post\" action=\"/console/sign-in\">\n\
             <label for=\"token\">API token</label>\n\
             <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" required \
             aria-describedby=\"{described}\">\n\
             <p id=\"token-help\" class=\"help\">A token from <code>host-sim token issue</code>. \
             It stays on this server; the browser keeps only a session cookie.</p>\n{problem}\n{next}\
             <button type=\"submit\">Sign in</button>\n</form>\n</main>"
        ),
    )
}

/// The caller's access, or the page/answer to give instead.
async fn access(shared: &Shared, caller: Caller) -> Result<TokenAccess, InvokeError> {
    caller_access(&shared.host, &caller).await
}

/// The signed-in person's caller and access, or the page to answer instead:
/// the sign-in page (`status`, saying `prompt` when there is no session,
/// and that the token expired when it no longer works) or the problem.
pub(super) async fn signed_in(
    shared: &Shared,
    headers: &HeaderMap,
    status: StatusCode,
    prompt: Option<&str>,
) -> Result<(Caller, TokenAccess), Response> {
    let Some(caller) = shared.console.caller(headers) else {
        return Err(sign_in_page(status, prompt));
    };
    match access(shared, caller.clone()).await {
        Ok(access) => Ok((caller, access)),
        Err(InvokeError::Unauthenticated) => Err(sign_in_page(
            status,
            Some("Your token has expired or was revoked. Sign in with a current one."),
        )),
        Err(error) => Err(problem_page(&error)),
    }
}

pub(super) fn header_bar(user: &str) -> String {
    format!(
        "<header class=\"bar\">\n<a class=\"home\" href=\"/console\">host-sim console</a>\n\
         <a class=\"apps\" href=\"/console/apps\">Connected apps</a>\n\
         <span class=\"user\">Signed in as {}</span>\n\
         <form method=\"post\" action=\"/console/sign-out\"><button type=\"submit\">Sign out</button></form>\n\
         </header>",
        escape(user)
    )
}

async fn home(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let access = match signed_in(&shared, &headers, StatusCode::OK, None).await {
        Ok((_, access)) => access,
        Err(page) => return page,
    };
    let mut items = String::new();
    for (project, extensions) in &access.projects {
        let detail = if extensions.is_empty() {
            "no extensions".to_string()
        } else {
            extensions.join(", ")
        };
        items.push_str(&format!(
            "<li><a href=\"/console/projects/{p}\">{p}</a> <span class=\"detail\">{d}</span></li>\n",
            p = escape(project),
            d = escape(&detail)
        ));
    }
    if items.is_empty() {
        items.push_str("<li>This token reaches no project.</li>");
    }
    page(
        StatusCode::OK,
        "Projects",
        &format!(
            "{}\n<main>\n<h1>Projects</h1>\n<ul class=\"projects\">\n{items}</ul>\n</main>",
            header_bar(&access.user)
        ),
    )
}

/// The path of the developer view of `extension` in `project` (`develop.rs`,
/// a development host only), its segments percent-encoded: for a redirect
/// as it is, for an attribute through [`escape`].
pub(super) fn develop_url(project: &str, extension: &str) -> String {
    let segment = |text: &str| {
        form_urlencoded::byte_serialize(text.as_bytes())
            .collect::<String>()
            .replace('+', "%20")
    };
    format!(
        "/console/projects/{}/extensions/{}/develop",
        segment(project),
        segment(extension)
    )
}

pub(super) fn problem_page(error: &InvokeError) -> Response {
    let status = super::http_status(error);
    page(
        status,
        "Problem",
        &format!(
            "<main>\n<h1>Something went wrong</h1>\n<p role=\"alert\">{}</p>\n\
             <p><a href=\"/console\">Back to the projects</a></p>\n</main>",
            escape(&error.to_string())
        ),
    )
}

/// Refuses cross-site form posts and fetches (on top of `SameSite=Strict`).
pub(super) fn same_origin(headers: &HeaderMap) -> bool {
    let site_ok = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v == "same-origin" || v == "none");
    let origin_ok = match (
        headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()),
        headers.get(header::HOST).and_then(|v| v.to_str().ok()),
    ) {
        (None, _) => true,
        (Some(origin), Some(host)) => {
            origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                == Some(host)
        }
        (Some(_), None) => false,
    };
    site_ok && origin_ok
}

async fn sign_in(State(shared): State<Shared>, headers: HeaderMap, body: String) -> Response {
    if !same_origin(&headers) {
        return sign_in_page(
            StatusCode::FORBIDDEN,
            Some("Sign in from the console page itself."),
        );
    }
    let token = sign_in_token(&body);
    let next = form_field(&body, "next").filter(|next| continues_to(next));
    if token.is_empty() {
        return sign_in_page_to(
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("Enter an API token."),
            next.as_deref(),
        );
    }
    let access = match access(&shared, Caller::bearer(token.clone())).await {
        Ok(access) => access,
        Err(InvokeError::Unauthenticated) => {
            return sign_in_page_to(
                StatusCode::UNAUTHORIZED,
                Some("That token is unknown or has expired."),
                next.as_deref(),
            );
        }
        Err(error) => return problem_page(&error),
    };
    let remaining = (access.expires_at - crate::state::now_secs()).max(1) as u64;
    let ttl = shared
        .options
        .console_session_ttl
        .min(Duration::from_secs(remaining));
    let id = shared.console.open(token, ttl);
    let mut response = Redirect::to(&match (next, access.projects.keys().next()) {
        (Some(next), _) => next,
        (None, Some(project)) if access.projects.len() == 1 => {
            format!("/console/projects/{project}")
        }
        _ => "/console".to_string(),
    })
    .into_response();
    let cookie = format!(
        "{COOKIE}={id}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}",
        ttl.as_secs()
    );
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

async fn sign_out(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    if same_origin(&headers) {
        shared.console.close(&headers);
    }
    let mut response = Redirect::to("/console").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "host_sim_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    response
}

async fn project_page(
    State(shared): State<Shared>,
    Path(project): Path<String>,
    headers: HeaderMap,
) -> Response {
    let access = match signed_in(
        &shared,
        &headers,
        StatusCode::UNAUTHORIZED,
        Some("Sign in to open this project."),
    )
    .await
    {
        Ok((_, access)) => access,
        Err(page) => return page,
    };
    let Some(extensions) = access.projects.get(&project) else {
        return problem_page(&InvokeError::NoProjectAccess { project });
    };
    let mut sections = String::new();
    for extension in extensions {
        let ext = extension.clone();
        let entry = match host_query(&shared.host, "reading a panel's entry", move |host| {
            host.panel_entry(&ext)
        })
        .await
        {
            Ok(entry) => entry,
            Err(error) => return problem_page(&error),
        };
        let body = match entry {
            Some(entry) => format!(
                "<iframe class=\"panel\" title=\"{e} panel\" src=\"/v1/plugins/{e}/panel/{entry}\" \
                 sandbox=\"allow-scripts allow-forms\" allow=\"clipboard-write\" \
                 data-session-url=\"/console/api/projects/{p}/extensions/{e}/session\"></iframe>\n\
                 <p class=\"panel-problem\" role=\"alert\" hidden></p>",
                e = escape(extension),
                p = escape(&project),
                entry = escape(&entry),
            ),
            None => "<p>This extension has no panel.</p>".to_string(),
        };
        // A development host: the extension's actions, their logs and the
        // project's documents, one link away.
        let body = if shared.host.is_development() {
            format!(
                "{body}\n<p class=\"develop-link\"><a href=\"{}\">Developer view of {}</a>: \
                 run its actions from forms, see their output and log lines, and the project's documents.</p>",
                escape(&develop_url(&project, extension)),
                escape(extension)
            )
        } else {
            body
        };
        sections.push_str(&format!(
            "<section class=\"extension\" aria-labelledby=\"ext-{e}\">\n<h2 id=\"ext-{e}\">{e}</h2>\n{body}\n</section>\n",
            e = escape(extension)
        ));
    }
    if sections.is_empty() {
        sections.push_str("<p>No extension is granted to this project.</p>");
    }
    page(
        StatusCode::OK,
        &format!("Project {project}"),
        &format!(
            "{}\n<main>\n<h1>Project {}</h1>\n{sections}</main>\n\
             <script type=\"module\" src=\"/console/console.js\"></script>",
            header_bar(&access.user),
            escape(&project)
        ),
    )
}

async fn panel_session(
    State(shared): State<Shared>,
    Path((project, extension)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let request_id = new_request_id();
    if !same_origin(&headers) {
        return error_response(
            StatusCode::FORBIDDEN,
            "forbidden",
            "panel sessions are issued to the console's own pages only",
            &request_id,
        );
    }
    let Some(caller) = shared.console.caller(&headers) else {
        return invoke_error_response(&InvokeError::Unauthenticated, &request_id);
    };
    let host = shared.host.clone();
    let ttl = shared.options.panel_session_ttl;
    let (p, e) = (project.clone(), extension.clone());
    let session = tokio::task::spawn_blocking(move || host.panel_session(&caller, &e, &p, ttl))
        .await
        .unwrap_or_else(|e| Err(InvokeError::Internal(format!("the host failed: {e}"))));
    match session {
        Ok(session) => json_response(
            StatusCode::OK,
            &json!({
                "token": session.token.token,
                "generation": session.generation,
                "apiBase": format!("/v1/plugins/{extension}/projects/{project}/api"),
                "projectId": project,
                "expiresAt": session.token.expires_at.saturating_mul(1000),
            }),
            &request_id,
        ),
        Err(error) => invoke_error_response(&error, &request_id),
    }
}

async fn panel_file(
    State(shared): State<Shared>,
    Path((extension, file)): Path<(String, String)>,
) -> Response {
    let path = file.clone();
    let found = host_query(&shared.host, "reading a panel file", move |host| {
        host.panel_file(&extension, &path)
    })
    .await;
    match found {
        Ok(Some(bytes)) => {
            let content_type = match file.rsplit_once('.').map(|(_, ext)| ext) {
                Some("html") => "text/html; charset=utf-8",
                Some("js" | "mjs") => "text/javascript; charset=utf-8",
                Some("css") => "text/css; charset=utf-8",
                Some("wasm") => "application/wasm",
                Some("json") => "application/json",
                Some("svg") => "image/svg+xml",
                Some("png") => "image/png",
                _ => "application/octet-stream",
            };
            let mut response = (
                [
                    (header::CONTENT_TYPE, content_type),
                    (header::CACHE_CONTROL, "no-cache"),
                    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                ],
                bytes,
            )
                .into_response();
            if content_type.starts_with("text/html") {
                // Only the console may frame the panel.
                response.headers_mut().insert(
                    header::CONTENT_SECURITY_POLICY,
                    HeaderValue::from_static("frame-ancestors 'self'"),
                );
            }
            response
        }
        Ok(None) => error_response(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such panel file",
            &new_request_id(),
        ),
        Err(error) => invoke_error_response(&error, &new_request_id()),
    }
}

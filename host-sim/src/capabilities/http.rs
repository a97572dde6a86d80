//! Capability `http:<binding>`: host-granted outbound HTTP.
//!
//! - **Declared** in the manifest as `[capabilities.http.<binding>]` with
//!   `allow` rules (method + path pattern, `{name}` = one path segment).
//! - **Granted** per invocation by the operator: the extension's grant to the
//!   project, the approval of `http:<binding>` for the installed release, and
//!   the project's binding (origin, secret, auth style, timeout).
//! - **Implemented** by [`http_binding::Host::send`] below.
//! - **Enforced** in exactly one function, [`authorize`]: every call is
//!   checked there, at call time, before anything leaves the host.
//!
//! The secret is read from the state only inside [`authorize`]'s result and
//! used only by [`send`] for the auth header and for redaction. Errors and
//! logs name the binding, method and path, never the secret or a URL.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::{HeaderName, HeaderValue};

use crate::bindings::platform::extension::http_binding::{self, BindingError, Request, Response};
use crate::housekeeping::Housekeeping;
use crate::runtime::InvocationState;
use crate::secret::{Secret, redact_bytes, redact_str};
use crate::spec::http_capability;
use crate::state::{AuthStyle, Binding};

/// Methods a guest may use.
const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

/// Request headers a guest may never set (the binding's auth header is
/// added to this list per binding).
const REFUSED_REQUEST_HEADERS: &[&str] = &[
    "authorization",
    "cookie",
    "host",
    "x-umami-api-key",
    "proxy-authorization",
    "content-length",
    "transfer-encoding",
    "connection",
];

/// Response headers that could carry credentials; never shown to a guest.
/// (A `HeaderName` is lowercase by construction.)
fn is_credential_header(name: &HeaderName, auth_header: &str) -> bool {
    let name = name.as_str();
    name == "set-cookie"
        || name == "set-cookie2"
        || name == "cookie"
        || name == "authorization"
        || name == "www-authenticate"
        || name == "x-umami-api-key"
        || name.starts_with("proxy-")
        || name == auth_header
}

/// A call that passed [`authorize`]: everything [`send`] needs.
pub(crate) struct AuthorizedCall {
    binding: Arc<Binding>,
    method: String,
    path: String,
    query: Option<String>,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
    timeout: Duration,
    max_bytes: usize,
}

/// The one place that decides whether a binding call may go out: budget,
/// grant (now, not at invocation start), declaration and approval of
/// `http:<binding>`, request shape, allow rule, project binding, deadline
/// and response budget.
pub(crate) fn authorize(
    state: &mut InvocationState,
    request: Request,
) -> wasmtime::Result<Result<AuthorizedCall, BindingError>> {
    state.charge_host_call()?;
    let scope = state.scope.clone();
    let name = request.binding.as_str();
    let what = What {
        binding: name,
        method: &request.method,
        path: &request.path,
    };

    let capability = http_capability(name);
    let (granted, approved, bound) = match state.call_time_check(&capability, Some(name)) {
        Ok(now) => (now.granted, now.approved, now.binding),
        Err(e) => {
            tracing::error!(request_id = %scope.request_id, error = %e, "{what}: state unavailable");
            return Ok(Err(BindingError::Unavailable(format!(
                "{what}: host state unavailable"
            ))));
        }
    };
    if !granted {
        state.grant_revoked = true;
        return Ok(Err(refuse(
            &scope.request_id,
            BindingError::NotGranted(format!(
                "{what}: {} is not granted to project {}",
                scope.extension_id, scope.project_id
            )),
        )));
    }
    let Some(rules) = scope.spec.http_rules(name) else {
        return Ok(Err(refuse(
            &scope.request_id,
            BindingError::CapabilityDenied(format!(
                "{what}: the manifest declares no capability {capability}"
            )),
        )));
    };
    if !approved {
        return Ok(Err(refuse(
            &scope.request_id,
            BindingError::CapabilityDenied(format!(
                "{what}: capability {capability} is not approved"
            )),
        )));
    }
    if let Err(problem) = check_shape(&request) {
        return Ok(Err(refuse(
            &scope.request_id,
            BindingError::InvalidRequest(format!("{what}: {problem}")),
        )));
    }
    let method = request.method.to_ascii_uppercase();
    if !rules
        .iter()
        .any(|rule| rule.matches(&method, &request.path))
    {
        return Ok(Err(refuse(
            &scope.request_id,
            BindingError::CapabilityDenied(format!(
                "{what}: outside the approved capability {capability}"
            )),
        )));
    }
    let Some(binding) = bound else {
        return Ok(Err(refuse(
            &scope.request_id,
            BindingError::NotBound(format!(
                "{what}: project {} has no binding {name}",
                scope.project_id
            )),
        )));
    };
    let auth_header = binding.auth_style.header();
    if let Some((header, _)) = request
        .headers
        .iter()
        .find(|(h, _)| h.eq_ignore_ascii_case(auth_header))
    {
        return Ok(Err(refuse(
            &scope.request_id,
            BindingError::InvalidRequest(format!("{what}: header {header} is set by the host")),
        )));
    }
    let remaining = scope.deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        return Ok(Err(BindingError::Timeout(format!(
            "{what}: the invocation's deadline has passed"
        ))));
    }
    let budget = state
        .limits
        .max_total_response_bytes
        .saturating_sub(state.response_bytes);
    if budget == 0 {
        return Ok(Err(refuse(
            &scope.request_id,
            BindingError::LimitExceeded(format!(
                "{what}: the invocation used up its response budget of {} bytes",
                state.limits.max_total_response_bytes
            )),
        )));
    }
    Ok(Ok(AuthorizedCall {
        timeout: binding.timeout.min(remaining),
        max_bytes: state.limits.max_response_bytes.min(budget),
        binding,
        method,
        path: request.path,
        query: request.query,
        headers: request.headers,
        body: request.body,
    }))
}

fn refuse(request_id: &str, error: BindingError) -> BindingError {
    tracing::warn!(request_id, refusal = %binding_error_message(&error), "binding call refused");
    error
}

/// The request's own shape: method, path, query and headers.
fn check_shape(request: &Request) -> Result<(), String> {
    if !METHODS
        .iter()
        .any(|method| method.eq_ignore_ascii_case(&request.method))
    {
        return Err(format!("method must be one of {}", METHODS.join(", ")));
    }
    check_path(&request.path)?;
    if let Some(query) = &request.query
        && !query.bytes().all(|b| b.is_ascii_graphic() && b != b'#')
    {
        return Err("the query must be printable ASCII without `#` or spaces".into());
    }
    for (name, value) in &request.headers {
        if REFUSED_REQUEST_HEADERS
            .iter()
            .any(|refused| name.eq_ignore_ascii_case(refused))
            || name
                .get(..6)
                .is_some_and(|prefix| prefix.eq_ignore_ascii_case("proxy-"))
        {
            return Err(format!(
                "header {} is set by the host",
                name.to_ascii_lowercase()
            ));
        }
        if HeaderName::from_bytes(name.as_bytes()).is_err() || HeaderValue::from_str(value).is_err()
        {
            return Err(format!("header {} is malformed", printable(name)));
        }
    }
    Ok(())
}

/// An absolute path without dot segments, empty segments, encoded slashes
/// or dots, backslashes, query or fragment: what the allow rule matched is
/// what the origin sees.
fn check_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err("the path must start with `/`".into());
    }
    if path.len() > 2048 {
        return Err("the path is longer than 2048 bytes".into());
    }
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&b);
    if !path.bytes().all(allowed) {
        return Err("the path has characters outside RFC 3986 path characters".into());
    }
    let encoded = |w: &[u8]| {
        w[0] == b'%'
            && matches!(
                (w[1], w[2].to_ascii_lowercase()),
                (b'2', b'f') | (b'5', b'c') | (b'2', b'e') | (b'0', b'0')
            )
    };
    if path.as_bytes().windows(3).any(encoded) {
        return Err("the path has an encoded slash, backslash, dot or NUL".into());
    }
    if path.len() > 1
        && path[1..]
            .split('/')
            .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        return Err("the path has an empty or dot segment".into());
    }
    Ok(())
}

/// Sends an authorized call: adds the secret, caps time and size, strips
/// credential headers and redacts the secret from what comes back.
pub(crate) fn send(
    call: AuthorizedCall,
    client: &BindingClient,
    request_id: &str,
    idle: Option<&Housekeeping>,
) -> Result<Response, BindingError> {
    let name = call.binding.name.clone();
    let what = What {
        binding: &name,
        method: &call.method,
        path: &call.path,
    };
    let fail = |failure: BindingError| {
        tracing::warn!(
            request_id,
            binding = %name,
            path = %call.path,
            "binding call failed: {}",
            binding_error_message(&failure)
        );
        failure
    };
    let mut url = format!("{}{}", call.binding.origin.trim_end_matches('/'), call.path);
    if let Some(query) = &call.query {
        url.push('?');
        url.push_str(query);
    }
    let auth_header = call.binding.auth_style.header();
    let secret = &call.binding.secret;
    let secrets = std::slice::from_ref(secret);
    let auth_value = match call.binding.auth_style {
        AuthStyle::Bearer => format!("Bearer {}", secret.expose()),
        AuthStyle::UmamiApiKey => secret.expose().to_string(),
    };
    let Ok(mut auth) = HeaderValue::from_str(&auth_value) else {
        return Err(fail(BindingError::Unavailable(format!(
            "{what}: the binding's secret cannot be sent as a header; ask the operator to set it again"
        ))));
    };
    auth.set_sensitive(true);
    let Ok(method) = reqwest::Method::from_bytes(call.method.as_bytes()) else {
        return Err(fail(BindingError::InvalidRequest(format!(
            "{what}: bad method"
        ))));
    };
    let mut request = client
        .http()
        .request(method, &url)
        .timeout(call.timeout)
        .header(auth_header, auth);
    for (name, value) in &call.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    if let Some(body) = call.body {
        request = request.body(body);
    }
    let started = Instant::now();
    let exchange = async {
        let response = request.send().await.map_err(|error| {
            if error.is_timeout() {
                Failure::NoAnswer
            } else {
                Failure::Unreachable
            }
        })?;
        let status = response.status().as_u16();
        let headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .filter(|(name, _)| !is_credential_header(name, auth_header))
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_string(), redact_str(value, secrets))
            })
            .collect();
        let body = read_body(response, call.max_bytes).await?;
        Ok((status, headers, body))
    };
    // The wait for the answer is when the host's sandbox housekeeping runs
    // (see `crate::housekeeping`): after one yield, so that the request is
    // on the wire before the work starts.
    let exchange = client.block_on(async {
        match idle {
            Some(idle) => {
                let housekeeping = async {
                    tokio::task::yield_now().await;
                    idle.run();
                };
                tokio::join!(exchange, housekeeping).0
            }
            None => exchange.await,
        }
    });
    let (status, headers, body) = match exchange {
        Ok(exchange) => exchange,
        Err(Failure::NoAnswer) => {
            return Err(fail(BindingError::Timeout(format!(
                "{what}: no answer within {} ms",
                call.timeout.as_millis()
            ))));
        }
        Err(Failure::Unreachable) => {
            return Err(fail(BindingError::Unavailable(format!(
                "{what}: the origin could not be reached"
            ))));
        }
        Err(Failure::TooLarge) => {
            return Err(fail(BindingError::ResponseTooLarge(format!(
                "{what}: the response is larger than {} bytes",
                call.max_bytes
            ))));
        }
        Err(Failure::BodyTimedOut) => {
            return Err(fail(BindingError::Timeout(format!(
                "{what}: the response did not arrive within {} ms",
                call.timeout.as_millis()
            ))));
        }
        Err(Failure::BodyFailed) => {
            return Err(fail(BindingError::Unavailable(format!(
                "{what}: the response could not be read"
            ))));
        }
    };
    let body = redact_bytes(body, secrets);
    tracing::info!(
        request_id,
        binding = %name,
        method = %call.method,
        path = %call.path,
        status,
        bytes = body.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "binding call"
    );
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// Why an exchange with the origin did not produce a response.
enum Failure {
    NoAnswer,
    Unreachable,
    TooLarge,
    BodyTimedOut,
    BodyFailed,
}

/// The body, at most `max_bytes` of it: a declared length over the limit
/// is refused unread; otherwise the body is read until it ends or passes
/// the limit.
async fn read_body(mut response: reqwest::Response, max_bytes: usize) -> Result<Vec<u8>, Failure> {
    let declared = response.content_length();
    if declared.is_some_and(|length| length > max_bytes as u64) {
        return Err(Failure::TooLarge);
    }
    let mut body = Vec::with_capacity(declared.unwrap_or(0) as usize);
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > max_bytes {
                    return Err(Failure::TooLarge);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(error) if error.is_timeout() => return Err(Failure::BodyTimedOut),
            Err(_) => return Err(Failure::BodyFailed),
        }
    }
}

/// The client every binding call goes through: no proxy from the
/// environment, no redirects (a redirect must not carry the secret
/// elsewhere), no cookies kept, statuses passed to the guest as they are.
///
/// Calls run on the calling thread: reqwest's async client on a
/// current-thread tokio runtime that [`BindingClient::block_on`] drives, so
/// a call is a write and a wait on the socket. (reqwest's blocking client
/// hands every request to its runtime thread and the response back: two
/// thread wake-ups per request.) Clones share the runtime and the
/// connection pool. Concurrent callers all make progress: one of them at a
/// time drives the runtime's IO and wakes the others, as reqwest's runtime
/// thread would.
#[derive(Clone)]
pub struct BindingClient(Arc<ClientInner>);

struct ClientInner {
    runtime: Option<tokio::runtime::Runtime>,
    http: reqwest::Client,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which would panic inside another
        // runtime; the connection tasks need no waiting for.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl BindingClient {
    /// The async client; its futures must run in [`Self::block_on`].
    pub fn http(&self) -> &reqwest::Client {
        &self.0.http
    }

    /// Runs `future` to completion on the calling thread. Blocking: not
    /// for use inside an async runtime (like `reqwest::blocking`).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.0
            .runtime
            .as_ref()
            .expect("the runtime lives as long as the client")
            .block_on(future)
    }
}

/// Builds the [`BindingClient`].
pub fn client() -> std::io::Result<BindingClient> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent("host-sim")
        .build()
        .map_err(std::io::Error::other)?;
    Ok(BindingClient(Arc::new(ClientInner {
        runtime: Some(runtime),
        http,
    })))
}

pub(crate) fn binding_error_message(error: &BindingError) -> &str {
    match error {
        BindingError::NotGranted(m)
        | BindingError::NotBound(m)
        | BindingError::CapabilityDenied(m)
        | BindingError::InvalidRequest(m)
        | BindingError::Timeout(m)
        | BindingError::Unavailable(m)
        | BindingError::ResponseTooLarge(m)
        | BindingError::LimitExceeded(m) => m,
    }
}

/// "binding NAME: METHOD PATH", the subject of a call's errors and log
/// lines; formatted only when one is written.
struct What<'a> {
    binding: &'a str,
    method: &'a str,
    path: &'a str,
}

impl std::fmt::Display for What<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "binding {}: {} {}",
            self.binding,
            printable(self.method),
            printable(self.path)
        )
    }
}

/// A guest-supplied string made safe for an error message.
fn printable(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(200)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if text.chars().count() > 200 {
        out.push('…');
    }
    out
}

impl http_binding::Host for InvocationState {
    fn send(&mut self, request: Request) -> wasmtime::Result<Result<Response, BindingError>> {
        let call = match authorize(self, request)? {
            Ok(call) => call,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let max = call.max_bytes;
        let idle = self.idle.upgrade();
        let result = send(call, &self.client, &self.scope.request_id, idle.as_deref());
        if let Ok(response) = &result {
            self.response_bytes += response.body.len().min(max);
        }
        Ok(result)
    }
}

/// Validates an operator-supplied origin: `http(s)://host[:port]`, no
/// userinfo, path, query or fragment.
pub fn check_origin(origin: &str) -> Result<String, String> {
    let trimmed = origin.trim().trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("https://")
        .or_else(|| trimmed.strip_prefix("http://"))
        .ok_or("the origin must start with http:// or https://")?;
    if rest.is_empty() {
        return Err("the origin has no host".into());
    }
    if rest.contains('@') {
        return Err("the origin must not carry credentials (user@); set the secret instead".into());
    }
    if rest.contains(['/', '?', '#']) || rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(
            "the origin must be scheme://host[:port] without path, query or fragment".into(),
        );
    }
    Ok(trimmed.to_string())
}

/// A secret for a binding: non-empty, one line, sendable as a header.
pub fn check_secret(secret: &str) -> Result<Secret, String> {
    let secret = secret.trim_end_matches(['\r', '\n']);
    if secret.is_empty() {
        return Err("the secret is empty".into());
    }
    if HeaderValue::from_str(secret).is_err() {
        return Err("the secret has characters that cannot go in an HTTP header".into());
    }
    Ok(Secret::new(secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_with_tricks_are_refused() {
        for bad in [
            "api/x",
            "/api/../me",
            "/api/./x",
            "/api//x",
            "/api/%2e%2e/me",
            "/api/%2F",
            "/api/a%2Eb",
            "/api/%5c",
            "/api/x%5C",
            "/api/%00",
            "/api/x?y",
            "/api/x#y",
            "/api/x\\y",
            "/api/x y",
        ] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
        for good in [
            "/",
            "/api/websites/123",
            "/api/items/a-b_c.d~e",
            "/api/a%20b",
            "/api/2f%",
            "/api/%2",
        ] {
            assert!(check_path(good).is_ok(), "{good}");
        }
    }

    fn request(headers: &[(&str, &str)]) -> Request {
        Request {
            binding: "provider".into(),
            method: "get".into(),
            path: "/api/items/1".into(),
            query: Some("a=1&b=2".into()),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: None,
        }
    }

    #[test]
    fn guests_cannot_set_credential_or_framing_headers() {
        assert!(check_shape(&request(&[("accept", "application/json")])).is_ok());
        for name in [
            "Authorization",
            "cookie",
            "Host",
            "X-Umami-Api-Key",
            "proxy-authorization",
            "content-length",
        ] {
            let error = check_shape(&request(&[(name, "x")])).unwrap_err();
            assert!(error.contains("set by the host"), "{name}: {error}");
        }
        assert!(check_shape(&request(&[("x-ok", "line\r\nbreak")])).is_err());
        let mut bad_method = request(&[]);
        bad_method.method = "CONNECT".into();
        assert!(check_shape(&bad_method).is_err());
        let mut bad_query = request(&[]);
        bad_query.query = Some("a=1#frag".into());
        assert!(check_shape(&bad_query).is_err());
    }

    #[test]
    fn origins_without_credentials_or_paths() {
        assert_eq!(
            check_origin("http://127.0.0.1:80/").unwrap(),
            "http://127.0.0.1:80"
        );
        assert!(check_origin("https://user:pw@example.net").is_err());
        assert!(check_origin("https://example.net/api").is_err());
        assert!(check_origin("ftp://example.net").is_err());
    }

    #[test]
    fn credential_headers_are_recognised() {
        for h in [
            "Set-Cookie",
            "WWW-Authenticate",
            "Proxy-Authenticate",
            "authorization",
            "x-umami-api-key",
        ] {
            let name = HeaderName::from_bytes(h.as_bytes()).unwrap();
            assert!(is_credential_header(&name, "authorization"), "{h}");
        }
        let name = |n: &'static str| HeaderName::from_static(n);
        assert!(is_credential_header(
            &name("x-custom-auth"),
            "x-custom-auth"
        ));
        assert!(!is_credential_header(
            &name("content-type"),
            "authorization"
        ));
    }
}

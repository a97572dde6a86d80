//! Capability `http:<binding>`: host-granted outbound HTTP.
//!
//! - **Declared** in the manifest as `[capabilities.http.<binding>]` with
//!   `allow` rules (method + path pattern, `{name}` = one path segment).
//! - **Granted** per invocation by the operator: the extension's grant to the
//!   project, the approval of `http:<binding>` for the installed release, and
//!   the project's binding (origin, secret, auth style, timeout).
//! - **Implemented** by [`http_binding::Host::send`] below on
//!   [`HttpCtxView`]; [`HttpCtx`] is the capability's part of a store.
//! - **Enforced** in exactly one function, [`authorize`]: every call is
//!   checked there, at call time, before anything leaves the host.
//!
//! The secret is read from the state only inside [`authorize`]'s result and
//! used only by [`send`] for the auth header and for redaction. Errors and
//! logs name the binding, method and path, never the secret or a URL.
//!
//! While a guest waits on the answer the embedder may do work of its own
//! (host-sim tears down and prepares sandbox stores then): it hands the
//! capability a [`BindingWait`], which this module calls and knows nothing
//! else about.

mod client;
mod request;
mod send;

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use wasmtime::component::{HasData, Linker};

pub use client::{BindingClient, client};
pub use request::{OriginError, SecretError, check_origin, check_secret};
pub use send::send;

use super::checks::CallChecks;
use crate::bindings::platform::extension::http_binding::{self, BindingError, Request, Response};
use crate::spec::http_capability;
use crate::state::Binding;
use request::{What, check_shape, printable};

/// Work an embedder does while a guest waits on a binding's answer (after
/// the request is on the wire), on the waiting thread.
pub trait BindingWait: Send + Sync {
    fn while_waiting(&self);
}

/// The HTTP capability's part of a store: the client, the response budget
/// of the invocation and what to do while waiting.
pub struct HttpCtx {
    client: BindingClient,
    max_response_bytes: usize,
    max_total_response_bytes: usize,
    /// Response bytes the guest received so far in this invocation.
    response_bytes: usize,
    /// Weak: the embedder's work may hold stores, and so this context.
    wait: Option<Weak<dyn BindingWait>>,
}

impl HttpCtx {
    pub fn new(
        client: BindingClient,
        max_response_bytes: usize,
        max_total_response_bytes: usize,
    ) -> Self {
        Self {
            client,
            max_response_bytes,
            max_total_response_bytes,
            response_bytes: 0,
            wait: None,
        }
    }

    /// Sets the work done while this invocation's guest waits.
    pub fn set_wait(&mut self, wait: Weak<dyn BindingWait>) {
        self.wait = Some(wait);
    }
}

/// The capability's context and the invocation's checks, borrowed from the
/// store's data.
pub struct HttpCtxView<'a> {
    pub ctx: &'a mut HttpCtx,
    pub checks: &'a mut CallChecks,
}

/// Store data that can lend the HTTP capability its parts.
pub trait HttpView: Send {
    fn http(&mut self) -> HttpCtxView<'_>;
}

struct HasHttp;

impl HasData for HasHttp {
    type Data<'a> = HttpCtxView<'a>;
}

/// Adds `platform:extension/http-binding` to `linker`.
pub fn add_to_linker<T: HttpView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    http_binding::add_to_linker::<T, HasHttp>(linker, T::http)
}

/// A call that passed [`authorize`]: everything [`send`] needs.
pub struct AuthorizedCall {
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
/// and response budget. `Err` ends the invocation (the budget); `Ok(Err)`
/// is the refusal the guest gets.
pub fn authorize(
    ctx: &HttpCtx,
    checks: &mut CallChecks,
    request: Request,
) -> wasmtime::Result<Result<AuthorizedCall, BindingError>> {
    checks.charge_host_call()?;
    let name = request.binding.as_str();
    let what = What {
        binding: name,
        method: &request.method,
        path: &request.path,
    };

    let capability = http_capability(name);
    let now = checks.at_call_time(&capability, Some(name));
    let scope = checks.scope_arc();
    let (granted, approved, bound) = match now {
        Ok(now) => (now.granted, now.approved, now.binding),
        Err(e) => {
            tracing::error!(request_id = %scope.request_id, error = %e, "{what}: state unavailable");
            return Ok(Err(BindingError::Unavailable(format!(
                "{what}: host state unavailable"
            ))));
        }
    };
    if !granted {
        checks.revoke();
        return Ok(Err(refuse(
            checks,
            BindingError::NotGranted(format!(
                "{what}: {} is not granted to project {}",
                scope.extension_id, scope.project_id
            )),
        )));
    }
    let Some(rules) = scope.spec.http_rules(name) else {
        return Ok(Err(refuse(
            checks,
            BindingError::CapabilityDenied(format!(
                "{what}: the manifest declares no capability {capability}; \
                 declare it as [capabilities.http.{}] with an allow rule for this request",
                printable(name)
            )),
        )));
    };
    if !approved {
        return Ok(Err(refuse_configured(
            checks,
            BindingError::CapabilityDenied(format!(
                "{what}: capability {capability} is not approved"
            )),
        )));
    }
    if let Err(problem) = check_shape(&request) {
        return Ok(Err(refuse(
            checks,
            BindingError::InvalidRequest(format!("{what}: {problem}")),
        )));
    }
    let method = request.method.to_ascii_uppercase();
    if !rules
        .iter()
        .any(|rule| rule.matches(&method, &request.path))
    {
        return Ok(Err(refuse(
            checks,
            BindingError::CapabilityDenied(format!(
                "{what}: outside the approved capability {capability}; to allow it, add \
                 {} to [capabilities.http.{name}] allow in manifest.toml",
                allow_rule(&method, &request.path)
            )),
        )));
    }
    let Some(binding) = bound else {
        return Ok(Err(refuse(
            checks,
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
            checks,
            BindingError::InvalidRequest(format!("{what}: header {header} is set by the host")),
        )));
    }
    let remaining = scope.deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        return Ok(Err(BindingError::Timeout(format!(
            "{what}: the invocation's deadline has passed"
        ))));
    }
    let budget = ctx
        .max_total_response_bytes
        .saturating_sub(ctx.response_bytes);
    if budget == 0 {
        return Ok(Err(refuse(
            checks,
            BindingError::LimitExceeded(format!(
                "{what}: the invocation used up its response budget of {} bytes",
                ctx.max_total_response_bytes
            )),
        )));
    }
    Ok(Ok(AuthorizedCall {
        timeout: binding.timeout.min(remaining),
        max_bytes: ctx.max_response_bytes.min(budget),
        binding,
        method,
        path: request.path,
        query: request.query,
        headers: request.headers,
        body: request.body,
    }))
}

/// Logs a refusal and notes it for the developer's error (see
/// [`CallChecks::last_refusal`]); the guest gets `error` as it is. A call
/// outside the manifest's capabilities or malformed is the extension's
/// fault; an unapproved capability, a missing binding or a used-up budget
/// are the operator's configuration and the limits.
fn refuse(checks: &mut CallChecks, error: BindingError) -> BindingError {
    let by_extension = matches!(
        error,
        BindingError::CapabilityDenied(_) | BindingError::InvalidRequest(_)
    );
    noted(checks, error, by_extension)
}

/// [`refuse`] for a refusal the operator's configuration caused (a
/// declared capability not approved), whatever its kind.
fn refuse_configured(checks: &mut CallChecks, error: BindingError) -> BindingError {
    noted(checks, error, false)
}

fn noted(checks: &mut CallChecks, error: BindingError, by_extension: bool) -> BindingError {
    let message = binding_error_message(&error);
    tracing::warn!(
        request_id = %checks.scope().request_id,
        refusal = %message,
        extension_fault = by_extension,
        "binding call refused"
    );
    checks.note_refusal(message, by_extension);
    error
}

/// The manifest allow rule that would let `method` `path` through, as TOML
/// (`{ method = "GET", path = "/x" }`); a path that is no valid pattern is
/// shown as it is, quoted.
fn allow_rule(method: &str, path: &str) -> String {
    let quote = |text: &str| serde_json::Value::String(printable(text)).to_string();
    format!("{{ method = {}, path = {} }}", quote(method), quote(path))
}

/// The message of a binding error, whatever its kind.
pub fn binding_error_message(error: &BindingError) -> &str {
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

impl http_binding::Host for HttpCtxView<'_> {
    fn send(&mut self, request: Request) -> wasmtime::Result<Result<Response, BindingError>> {
        let call = match authorize(self.ctx, self.checks, request)? {
            Ok(call) => call,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let max = call.max_bytes;
        let wait = self.ctx.wait.as_ref().and_then(Weak::upgrade);
        // Authorized: the release declares this binding's name.
        let binding = call.binding.name.clone();
        let started = Instant::now();
        let result = send(
            call,
            &self.ctx.client,
            &self.checks.scope().request_id,
            wait.as_deref(),
        );
        let class = match &result {
            Ok(response) => crate::metrics::status_class(response.status),
            Err(BindingError::Timeout(_)) => "timeout",
            Err(BindingError::Unavailable(_)) => "unavailable",
            Err(BindingError::ResponseTooLarge(_)) => "response_too_large",
            Err(_) => "invalid_request",
        };
        crate::metrics::binding_call(&binding, class, started.elapsed());
        if let Ok(response) = &result {
            self.ctx.response_bytes += response.body.len().min(max);
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{DIGEST, EXTENSION, Fixture, PROJECT};
    use super::*;

    fn ctx() -> HttpCtx {
        HttpCtx::new(client().unwrap(), 1000, 1500)
    }

    fn get(path: &str) -> Request {
        Request {
            binding: "provider".into(),
            method: "GET".into(),
            path: path.into(),
            query: None,
            headers: Vec::new(),
            body: None,
        }
    }

    fn refusal(outcome: wasmtime::Result<Result<AuthorizedCall, BindingError>>) -> BindingError {
        match outcome.unwrap() {
            Err(refusal) => refusal,
            Ok(call) => panic!("authorized {} {}", call.method, call.path),
        }
    }

    #[test]
    fn an_allowed_call_gets_its_binding_timeout_and_byte_cap() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        let call = authorize(&ctx(), &mut checks, get("/api/items/7"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (call.method.as_str(), call.path.as_str()),
            ("GET", "/api/items/7")
        );
        assert_eq!(call.binding.project_id, PROJECT);
        assert!(call.timeout <= Duration::from_millis(500));
        assert_eq!(call.max_bytes, 1000);
    }

    #[test]
    fn undeclared_bindings_and_paths_outside_the_rules_are_denied() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        let mut other = get("/api/items/7");
        other.binding = "other".into();
        let BindingError::CapabilityDenied(m) = refusal(authorize(&ctx(), &mut checks, other))
        else {
            panic!("not denied")
        };
        assert!(m.contains("declares no capability http:other"), "{m}");
        let BindingError::CapabilityDenied(m) =
            refusal(authorize(&ctx(), &mut checks, get("/api/me")))
        else {
            panic!("not denied")
        };
        assert!(
            m.ends_with(
                "outside the approved capability http:provider; to allow it, add \
                 { method = \"GET\", path = \"/api/me\" } to [capabilities.http.provider] allow in manifest.toml"
            ),
            "{m}"
        );
        assert_eq!(checks.last_refusal(), Some(m.as_str()));
        let mut post = get("/api/items/7");
        post.method = "POST".into();
        assert!(matches!(
            refusal(authorize(&ctx(), &mut checks, post)),
            BindingError::CapabilityDenied(_)
        ));
    }

    #[test]
    fn a_withdrawn_approval_or_a_revoked_grant_is_seen_at_the_call() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        fixture
            .state
            .set_approval(EXTENSION, DIGEST, &["http:provider".into()], false)
            .unwrap();
        let BindingError::CapabilityDenied(m) =
            refusal(authorize(&ctx(), &mut checks, get("/api/items/7")))
        else {
            panic!("not denied")
        };
        assert!(m.contains("not approved"), "{m}");
        assert!(!checks.grant_revoked());
        fixture.state.revoke(EXTENSION, PROJECT).unwrap();
        assert!(matches!(
            refusal(authorize(&ctx(), &mut checks, get("/api/items/7"))),
            BindingError::NotGranted(_)
        ));
        assert!(checks.grant_revoked(), "the invocation is void");
    }

    #[test]
    fn a_project_without_the_binding_is_not_bound() {
        let fixture = Fixture::unbound();
        let mut checks = fixture.checks();
        assert!(matches!(
            refusal(authorize(&ctx(), &mut checks, get("/api/items/7"))),
            BindingError::NotBound(_)
        ));
    }

    #[test]
    fn the_auth_header_and_bad_shapes_are_invalid_requests() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        let mut with_auth = get("/api/items/7");
        with_auth.headers = vec![("Authorization".into(), "Bearer mine".into())];
        assert!(matches!(
            refusal(authorize(&ctx(), &mut checks, with_auth)),
            BindingError::InvalidRequest(_)
        ));
        assert!(matches!(
            refusal(authorize(&ctx(), &mut checks, get("/api/items/../me"))),
            BindingError::InvalidRequest(_)
        ));
    }

    #[test]
    fn a_passed_deadline_and_a_spent_response_budget_refuse() {
        let fixture = Fixture::new();
        let mut late = fixture.checks_until(100, Instant::now());
        assert!(matches!(
            refusal(authorize(&ctx(), &mut late, get("/api/items/7"))),
            BindingError::Timeout(_)
        ));
        let mut checks = fixture.checks();
        let mut spent = ctx();
        spent.response_bytes = 1200;
        let call = authorize(&spent, &mut checks, get("/api/items/7"))
            .unwrap()
            .unwrap();
        assert_eq!(call.max_bytes, 300, "what is left of the budget");
        spent.response_bytes = 1500;
        assert!(matches!(
            refusal(authorize(&spent, &mut checks, get("/api/items/7"))),
            BindingError::LimitExceeded(_)
        ));
    }

    #[test]
    fn every_call_counts_against_the_host_call_budget() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks_with_budget(1);
        refusal(authorize(&ctx(), &mut checks, get("/api/me")));
        assert!(authorize(&ctx(), &mut checks, get("/api/items/7")).is_err());
    }

    #[test]
    fn headers_the_host_sets_and_malformed_requests_are_refused_by_rule() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        let invalid = |checks: &mut CallChecks, request: Request| match refusal(authorize(
            &ctx(),
            checks,
            request,
        )) {
            BindingError::InvalidRequest(message) => message,
            other => panic!("not an invalid request: {other:?}"),
        };
        for header in ["Host", "Cookie", "Proxy-Anything", "Transfer-Encoding"] {
            let mut request = get("/api/items/7");
            request.headers = vec![(header.into(), "x".into())];
            let message = invalid(&mut checks, request);
            assert!(
                message.contains("is set by the host"),
                "{header}: {message}"
            );
        }
        let mut fragment = get("/api/items/7");
        fragment.query = Some("a=1#top".into());
        assert!(invalid(&mut checks, fragment).contains("query"));
        let mut trace = get("/api/items/7");
        trace.method = "TRACE".into();
        assert!(invalid(&mut checks, trace).contains("method must be one of"));
        for path in ["api/items/7", "/api/items/%2e%2e", "/api//items/7"] {
            let message = invalid(&mut checks, get(path));
            assert!(
                message.starts_with("binding provider: GET"),
                "{path}: {message}"
            );
        }
    }

    #[test]
    fn a_binding_set_mid_invocation_is_used_at_the_next_call() {
        let fixture = Fixture::unbound();
        let mut checks = fixture.checks();
        assert!(matches!(
            refusal(authorize(&ctx(), &mut checks, get("/api/items/7"))),
            BindingError::NotBound(_)
        ));
        fixture.bind("provider", "late-secret");
        let call = authorize(&ctx(), &mut checks, get("/api/items/7"))
            .unwrap()
            .unwrap();
        assert_eq!(call.binding.secret.expose(), "late-secret");
        assert_eq!(checks.redact("late-secret".into()), "[redacted]");
    }

    #[test]
    fn the_method_is_matched_in_any_case_and_sent_in_upper_case() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        let mut lower = get("/api/items/7");
        lower.method = "get".into();
        let call = authorize(&ctx(), &mut checks, lower).unwrap().unwrap();
        assert_eq!(call.method, "GET");
    }

    #[test]
    fn no_refusal_names_the_secret() {
        let fixture = Fixture::new();
        let mut checks = fixture.checks();
        let mut with_secret_header = get("/api/items/7");
        with_secret_header.headers = vec![(
            "Authorization".into(),
            format!("Bearer {}", super::super::testing::SECRET),
        )];
        let mut other = get("/api/items/7");
        other.binding = "other".into();
        for request in [with_secret_header, other, get("/api/me"), get("/api/../x")] {
            let refused = refusal(authorize(&ctx(), &mut checks, request));
            let message = binding_error_message(&refused);
            assert!(
                !message.contains(super::super::testing::SECRET),
                "{message}"
            );
        }
    }
}

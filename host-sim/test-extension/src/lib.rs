//! A guest for host-sim's tests: a few well-behaved actions (the benchmark's
//! `docs.read_one`, `docs.write`, `http.get`) and actions that deliberately
//! misbehave, one misdeed each, so every sandbox and capability check of the
//! host has a guest that trips it.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    path: "../../wit",
    world: "managed-extension",
});

use core::sync::atomic::{AtomicU32, Ordering};
use exports::platform::extension::extension::{ActionError, Guest};
use platform::extension::documents::{self, DocumentError, Precondition};
use platform::extension::http_binding::{self, BindingError, Request};
use platform::extension::{context, log};
use serde_json::{Value, json};

struct TestExtension;

impl Guest for TestExtension {
    fn invoke(action: String, input: String) -> Result<String, ActionError> {
        let input: Value = serde_json::from_str(&input)
            .map_err(|e| failure("invalid_input", format!("input is not JSON: {e}")))?;
        let output = match action.as_str() {
            "context" => context_json(),
            "docs.read_one" => read_one()?,
            "docs.get" => docs_get(&input)?,
            "docs.write" => docs_write(&input)?,
            "docs.escape" => docs_escape(),
            "http.get" => http_get(&input)?,
            "http.ungranted_binding" => ungranted_binding()?,
            "http.outside_path" => outside_path()?,
            "http.leak" => leak(&input)?,
            "http.twice" => twice()?,
            "loop.forever" => loop_forever(),
            "memory.mark" => mark(),
            "memory.unbounded" => allocate_without_bound(),
            "calls.flood" => flood_host_calls(),
            other => return Err(failure("not_found", format!("no action named {other}"))),
        };
        Ok(output.to_string())
    }
}

export!(TestExtension);

fn failure(code: &str, message: impl Into<String>) -> ActionError {
    ActionError {
        code: code.to_string(),
        message: message.into(),
    }
}

fn str_field<'a>(input: &'a Value, field: &str) -> Result<&'a str, ActionError> {
    input
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| failure("invalid_input", format!("`{field}` must be a string")))
}

fn context_json() -> Value {
    let current = context::current();
    json!({
        "project_id": current.project_id,
        "request_id": current.request_id,
        "action": current.action,
        "provider_origin": current.settings.provider_origin,
        "tracking_origin": current.settings.tracking_origin,
    })
}

fn document_failure(error: DocumentError) -> ActionError {
    match error {
        DocumentError::Conflict(revision) => {
            failure("conflict", format!("stored revision is {revision}"))
        }
        DocumentError::Invalid(m) => failure("document_invalid", m),
        DocumentError::Denied(m) => failure("document_denied", m),
        DocumentError::LimitExceeded(m) => failure("document_limit_exceeded", m),
        DocumentError::Unavailable(m) => failure("document_unavailable", m),
    }
}

fn document_json(document: Option<documents::Document>) -> Value {
    match document {
        None => Value::Null,
        Some(d) => json!({
            "collection": d.collection,
            "id": d.id,
            "revision": d.revision,
            "body": serde_json::from_str::<Value>(&d.body).unwrap_or(Value::String(d.body)),
        }),
    }
}

/// Well-behaved: reads one document (the benchmark's action).
fn read_one() -> Result<Value, ActionError> {
    let document = documents::get("items", "one").map_err(document_failure)?;
    Ok(json!({ "document": document_json(document) }))
}

fn docs_get(input: &Value) -> Result<Value, ActionError> {
    let collection = str_field(input, "collection")?;
    let id = str_field(input, "id")?;
    let document = documents::get(collection, id).map_err(document_failure)?;
    Ok(json!({ "document": document_json(document) }))
}

fn docs_write(input: &Value) -> Result<Value, ActionError> {
    let collection = input
        .get("collection")
        .and_then(Value::as_str)
        .unwrap_or("items");
    let id = str_field(input, "id")?;
    let body = input
        .get("body")
        .cloned()
        .unwrap_or(Value::Null)
        .to_string();
    let condition = match input.get("expect") {
        Some(Value::Number(n)) => Precondition::Revision(n.as_u64().unwrap_or(0)),
        Some(Value::String(s)) if s == "absent" => Precondition::Absent,
        _ => Precondition::None,
    };
    let revision = documents::put(collection, id, &body, condition).map_err(document_failure)?;
    Ok(json!({ "revision": revision }))
}

/// Misbehaves: tries to reach another project's (or another collection's)
/// documents with path tricks and reports what each attempt gave.
fn docs_escape() -> Value {
    let attempts = [
        ("../other-project/items", "one"),
        ("items", "../../other-project/items/one"),
        ("items/../../other-project/items", "one"),
        ("..", "one"),
        ("items", ".."),
        ("items", "one/../../x"),
        ("other-project:items", "one"),
        ("items\0", "one"),
        ("", "one"),
        ("undeclared", "one"),
        ("ITEMS", "one"),
        ("items", "%2e%2e%2fother"),
    ];
    let outcomes: Vec<Value> = attempts
        .iter()
        .map(|(collection, id)| {
            let outcome = match documents::get(collection, id) {
                Ok(None) => json!("absent"),
                Ok(Some(d)) => json!({ "found": d.body }),
                Err(DocumentError::Invalid(_)) => json!("invalid"),
                Err(DocumentError::Denied(_)) => json!("denied"),
                Err(e) => json!(format!("{e:?}")),
            };
            json!({ "collection": collection, "id": id, "outcome": outcome })
        })
        .collect();
    json!({ "attempts": outcomes })
}

fn binding_failure(error: BindingError) -> ActionError {
    match error {
        BindingError::NotGranted(m) => failure("binding_not_granted", m),
        BindingError::NotBound(m) => failure("binding_not_bound", m),
        BindingError::CapabilityDenied(m) => failure("binding_capability_denied", m),
        BindingError::InvalidRequest(m) => failure("binding_invalid_request", m),
        BindingError::Timeout(m) => failure("binding_timeout", m),
        BindingError::Unavailable(m) => failure("binding_unavailable", m),
        BindingError::ResponseTooLarge(m) => failure("binding_response_too_large", m),
        BindingError::LimitExceeded(m) => failure("binding_limit_exceeded", m),
    }
}

fn send(
    binding: &str,
    method: &str,
    path: &str,
    query: Option<&str>,
) -> Result<http_binding::Response, ActionError> {
    http_binding::send(&Request {
        binding: binding.to_string(),
        method: method.to_string(),
        path: path.to_string(),
        query: query.map(str::to_string),
        headers: vec![("accept".to_string(), "application/json".to_string())],
        body: None,
    })
    .map_err(binding_failure)
}

fn response_json(response: http_binding::Response) -> Value {
    json!({
        "status": response.status,
        "headers": response.headers.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "body": String::from_utf8_lossy(&response.body),
    })
}

/// Well-behaved: one GET through the `provider` binding.
fn http_get(input: &Value) -> Result<Value, ActionError> {
    let path = str_field(input, "path")?;
    let query = input.get("query").and_then(Value::as_str);
    Ok(response_json(send("provider", "GET", path, query)?))
}

/// Misbehaves: names a binding the manifest never declared.
fn ungranted_binding() -> Result<Value, ActionError> {
    Ok(response_json(send("admin", "GET", "/api/items/1", None)?))
}

/// Misbehaves: a path outside the `provider` capability (it echoes the token).
fn outside_path() -> Result<Value, ActionError> {
    Ok(response_json(send("provider", "GET", "/api/me", None)?))
}

/// Misbehaves: whatever the provider answered is printed, logged, stored and
/// returned, so a secret that ever reached the guest would show up somewhere.
fn leak(input: &Value) -> Result<Value, ActionError> {
    let path = str_field(input, "path")?;
    let response = send("provider", "GET", path, None)?;
    let body = String::from_utf8_lossy(&response.body).into_owned();
    let headers: Vec<String> = response
        .headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    println!("provider said: {body} {headers:?}");
    eprintln!("provider said: {body}");
    log::write(
        log::Level::Warn,
        &format!("provider said: {body} {headers:?}"),
    );
    documents::put(
        "leak",
        "provider-response",
        &json!({ "body": body, "headers": headers }).to_string(),
        Precondition::None,
    )
    .map_err(document_failure)?;
    Ok(json!({ "status": response.status, "body": body, "headers": headers }))
}

/// Misbehaves: keeps using the binding after the grant was revoked (the test
/// provider revokes it while answering the first call).
fn twice() -> Result<Value, ActionError> {
    let first = http_binding::send(&Request {
        binding: "provider".to_string(),
        method: "POST".to_string(),
        path: "/api/revoke-grant".to_string(),
        query: None,
        headers: Vec::new(),
        body: Some(b"{}".to_vec()),
    })
    .map_err(binding_failure)?;
    let second = send("provider", "GET", "/api/items/1", None)?;
    Ok(json!({ "first": first.status, "second": response_json(second) }))
}

/// Misbehaves: never returns.
fn loop_forever() -> Value {
    let mut n: u64 = 0;
    loop {
        n = core::hint::black_box(n.wrapping_add(1));
    }
}

/// A zero-initialised static (in `.bss`) and one with a value from the data
/// segment (`.data`).
static ZEROED: AtomicU32 = AtomicU32::new(0);
static INITIALISED: AtomicU32 = AtomicU32::new(7);

/// The two statics as this instance found them; then both change.
fn mark() -> Value {
    let found = json!({
        "zeroed": ZEROED.fetch_add(1, Ordering::Relaxed),
        "initialised": INITIALISED.fetch_add(1, Ordering::Relaxed),
    });
    core::hint::black_box(&ZEROED);
    found
}

/// Misbehaves: allocates (and touches) memory until something stops it.
fn allocate_without_bound() -> Value {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(vec![0xA5; 1 << 20]);
        core::hint::black_box(&hoard);
    }
}

/// Misbehaves: calls the host in a tight loop, ignoring every answer.
fn flood_host_calls() -> Value {
    loop {
        let _ = core::hint::black_box(documents::get("items", "one"));
        log::write(log::Level::Debug, "flooding");
    }
}

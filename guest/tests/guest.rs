//! The guest crate natively: typed dispatch, JSON inputs and their errors,
//! documents with compare-and-set, and the error codes.

use std::sync::atomic::{AtomicUsize, Ordering};

use extension_guest::testing::TestHost;
use extension_guest::{
    ActionError, BindingError, Document, DocumentError, ErrorCode, Host, HttpRequest, HttpResponse,
    Invocation, Json, LogLevel, NoInput, Precondition, documents,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AddInput {
    a: i64,
    b: i64,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Total {
    total: i64,
}

fn add<H: Host + ?Sized>(
    _host: &H,
    Json(input): Json<AddInput>,
) -> Result<Json<Total>, ActionError> {
    Ok(Json(Total {
        total: input.a + input.b,
    }))
}

fn project<H: Host + ?Sized>(host: &H, NoInput: NoInput) -> Result<Json<String>, ActionError> {
    Ok(Json(host.invocation().project_id))
}

extension_guest::actions! {
    "math.add" => add,
    "math.project" => project,
}

#[test]
fn actions_dispatch_by_name_and_refuse_unknown_ones() {
    let host = TestHost::new("p1");
    assert_eq!(ACTIONS, ["math.add", "math.project"]);
    assert_eq!(
        dispatch(&host, "math.add", r#"{"a":2,"b":3}"#).unwrap(),
        r#"{"total":5}"#
    );
    assert_eq!(dispatch(&host, "math.project", "{}").unwrap(), r#""p1""#);
    let unknown = dispatch(&host, "math.sub", "{}").unwrap_err();
    assert_eq!(unknown.code, ErrorCode::NotImplemented);
    assert_eq!(unknown.code.http_status(), 501);
    assert_eq!(
        unknown.message,
        "action `math.sub` is declared in the manifest but not implemented: \
         this extension dispatches math.add and math.project; add its handler to \
         `impl manifest::Actions` (or to `actions!`) and build the component again"
    );
}

#[test]
fn the_actions_section_lists_each_dispatched_name_on_a_line() {
    const LEN: usize = extension_guest::action::section_len(ACTIONS);
    let bytes: [u8; LEN] = extension_guest::action::section_bytes(ACTIONS);
    assert_eq!(
        std::str::from_utf8(&bytes).unwrap(),
        "math.add\nmath.project\n"
    );
}

#[test]
fn json_input_errors_name_the_field_and_the_rule() {
    let host = TestHost::new("p1");
    let message = |input: &str| dispatch(&host, "math.add", input).unwrap_err().message;
    assert_eq!(
        message(r#"{"a":"2","b":3}"#),
        "a: invalid type: string \"2\", expected i64"
    );
    assert_eq!(message(r#"{"a":2}"#), "input: missing field `b`");
    assert_eq!(
        message(r#"{"a":2,"b":3,"c":4}"#),
        "c: unknown field `c`, expected `a` or `b`"
    );
    assert_eq!(message(r#"{"a":2,"b":3} x"#), "input: trailing characters");
    let no_fields = dispatch(&host, "math.project", r#"{"x":1}"#).unwrap_err();
    assert_eq!(
        no_fields.message,
        "x: unknown field; this action takes no fields"
    );
    let not_object = dispatch(&host, "math.project", "[]").unwrap_err();
    assert_eq!(not_object.message, "input: must be a JSON object");
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Counter {
    n: u64,
}

#[test]
fn update_writes_with_compare_and_set_and_skips_an_unchanged_value() {
    let host = TestHost::new("p1");
    let bump = |c: Option<&Counter>| {
        Ok(Counter {
            n: c.map_or(0, |c| c.n) + 1,
        })
    };
    let first = documents::update(&host, "c", "x", 3, bump).unwrap();
    assert_eq!((first.revision, first.value.n), (1, 1));
    let second = documents::update(&host, "c", "x", 3, bump).unwrap();
    assert_eq!((second.revision, second.value.n), (2, 2));
    let same = documents::update(&host, "c", "x", 3, |c: Option<&Counter>| {
        Ok(c.unwrap().clone())
    })
    .unwrap();
    assert_eq!(same.revision, 2, "an unchanged value is not written");
    assert_eq!(host.document("c", "x").unwrap().revision, 2);
    assert_eq!(
        documents::put(
            &host,
            "c",
            "x",
            &Counter { n: 9 },
            Precondition::Revision(1)
        ),
        Err(DocumentError::Conflict(2))
    );
}

/// A host where another writer bumps the document before each of the first
/// `races` writes.
struct Racing {
    inner: TestHost,
    races: AtomicUsize,
}

impl Host for Racing {
    fn invocation(&self) -> Invocation {
        self.inner.invocation()
    }
    fn send(&self, request: HttpRequest) -> Result<HttpResponse, BindingError> {
        self.inner.send(request)
    }
    fn get_document(&self, collection: &str, id: &str) -> Result<Option<Document>, DocumentError> {
        self.inner.get_document(collection, id)
    }
    fn put_document(
        &self,
        collection: &str,
        id: &str,
        body: &str,
        condition: Precondition,
    ) -> Result<u64, DocumentError> {
        if self.races.load(Ordering::SeqCst) > 0 {
            self.races.fetch_sub(1, Ordering::SeqCst);
            self.inner
                .put_document(collection, id, r#"{"n":100}"#, Precondition::None)?;
        }
        self.inner.put_document(collection, id, body, condition)
    }
    fn delete_document(
        &self,
        collection: &str,
        id: &str,
        condition: Precondition,
    ) -> Result<bool, DocumentError> {
        self.inner.delete_document(collection, id, condition)
    }
    fn log(&self, level: LogLevel, message: &str) {
        self.inner.log(level, message);
    }
}

#[test]
fn update_reads_again_after_a_lost_race_and_gives_up_with_conflict() {
    let bump = |c: Option<&Counter>| {
        Ok(Counter {
            n: c.map_or(0, |c| c.n) + 1,
        })
    };
    let host = Racing {
        inner: TestHost::new("p1"),
        races: AtomicUsize::new(2),
    };
    let stored = documents::update(&host, "c", "x", 3, bump).unwrap();
    assert_eq!(stored.value.n, 101, "built on the other writer's value");
    let host = Racing {
        inner: TestHost::new("p1"),
        races: AtomicUsize::new(3),
    };
    let error = documents::update(&host, "c", "x", 3, bump).unwrap_err();
    assert_eq!(error.code, ErrorCode::Conflict);
    assert_eq!(
        error.message,
        "c/x kept changing during the request (3 attempts); try again"
    );
}

#[test]
fn bindings_are_answered_by_handlers_and_their_errors_convert() {
    let host = TestHost::new("p1").on_binding("api", |request| {
        Ok(HttpResponse::json_body(
            200,
            &json!({ "path": request.path }),
        ))
    });
    let response = host
        .send(
            HttpRequest::get("api", "/a")
                .query("x=1")
                .header("accept", "application/json"),
        )
        .unwrap();
    assert!(response.is_success());
    assert_eq!(response.header("Content-Type"), Some("application/json"));
    assert_eq!(
        response.json::<serde_json::Value>().unwrap(),
        json!({ "path": "/a" })
    );
    let sent = host.requests();
    assert_eq!(sent[0].query.as_deref(), Some("x=1"));

    let unbound = host.send(HttpRequest::post("other", "/b")).unwrap_err();
    let error = ActionError::from(unbound);
    assert_eq!(error.code, ErrorCode::ProviderUnavailable);
    assert!(
        !error.message.contains("other"),
        "the host's detail is not copied"
    );
    let denied = ActionError::from(BindingError::CapabilityDenied("GET /secret".into()));
    assert_eq!(denied.code, ErrorCode::Forbidden);
    assert!(!denied.message.contains("/secret"));
}

#[test]
fn every_code_has_a_distinct_name() {
    let names: std::collections::BTreeSet<&str> =
        ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(names.len(), ErrorCode::ALL.len());
}

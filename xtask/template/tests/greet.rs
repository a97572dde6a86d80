//! The action against a native test host: the `upstream` binding answered
//! by a closure, documents in memory.

use extension_guest::testing::TestHost;
use extension_guest::{BindingError, ErrorCode, HttpResponse};
use {{crate}}::{ACTIONS, GREET, Greeting, SALUTATION_PATH, UPSTREAM, dispatch};
use serde_json::json;

fn host(salutation: &'static str) -> TestHost {
    TestHost::new("test-project").on_binding(UPSTREAM, move |request| {
        assert_eq!(
            (request.method.as_str(), request.path.as_str()),
            ("GET", SALUTATION_PATH)
        );
        Ok(HttpResponse::json_body(
            200,
            &json!({ "salutation": salutation }),
        ))
    })
}

fn greet(host: &TestHost, input: serde_json::Value) -> Result<Greeting, (ErrorCode, String)> {
    dispatch(host, GREET, &input.to_string())
        .map(|output| serde_json::from_str(&output).expect("the output is a Greeting"))
        .map_err(|e| (e.code, e.message))
}

#[test]
fn greets_with_the_upstream_salutation_and_counts_the_project_s_greetings() {
    let host = host("Hello");
    let first = greet(&host, json!({ "name": "Ada" })).unwrap();
    assert_eq!(
        first,
        Greeting {
            message: "Hello, Ada!".into(),
            count: 1
        }
    );
    let second = greet(&host, json!({ "name": " Grace " })).unwrap();
    assert_eq!(
        second,
        Greeting {
            message: "Hello, Grace!".into(),
            count: 2
        }
    );
    assert_eq!(host.document("greetings", "counter").unwrap().revision, 2);
    assert_eq!(host.requests().len(), 2);
}

#[test]
fn bad_input_names_the_field() {
    let host = host("Hello");
    let (code, message) = greet(&host, json!({ "name": "  " })).unwrap_err();
    assert_eq!(
        (code, message.as_str()),
        (ErrorCode::InvalidInput, "name: must not be blank")
    );
    let (code, message) = greet(&host, json!({ "nom": "Ada" })).unwrap_err();
    assert_eq!(code, ErrorCode::InvalidInput);
    assert_eq!(message, "nom: unknown field `nom`, expected `name`");
    assert!(host.requests().is_empty(), "nothing is sent for bad input");
}

#[test]
fn an_unreachable_upstream_is_provider_unavailable_and_counts_nothing() {
    let host = TestHost::new("test-project").on_binding(UPSTREAM, |_| {
        Err(BindingError::Unavailable("connection refused".into()))
    });
    let (code, _) = greet(&host, json!({ "name": "Ada" })).unwrap_err();
    assert_eq!(code, ErrorCode::ProviderUnavailable);
    assert!(host.document("greetings", "counter").is_none());
}

#[test]
fn the_dispatched_actions_are_the_manifest_s() {
    let manifest: toml::Value = toml::from_str(include_str!("../manifest.toml")).unwrap();
    let declared: Vec<&str> = manifest["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|action| action["name"].as_str().unwrap())
        .collect();
    assert_eq!(declared, ACTIONS);
}

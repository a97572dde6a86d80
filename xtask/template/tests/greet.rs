//! The `greet` action in host-sim's in-process test host: the `upstream`
//! binding answered by a handler in this process, documents and the secret
//! as the platform's host keeps them.

mod common;

use std::time::Duration;

use common::test_host;
use host_sim::testing::{ProviderResponse, TestHost};
use serde_json::json;
use {{crate}}::{GREET, SALUTATION_PATH, UPSTREAM};

fn upstream_says(salutation: &'static str) -> TestHost {
    test_host()
        .binding(UPSTREAM, move |_| {
            ProviderResponse::json(200, &json!({ "salutation": salutation }))
        })
        .build()
        .unwrap()
}

#[test]
fn greets_with_the_upstream_salutation_and_counts_the_project_s_greetings() {
    let host = upstream_says("Hello");
    let first = host.invoke(GREET, json!({ "name": "Ada" })).unwrap();
    assert_eq!(first, json!({ "message": "Hello, Ada!", "count": 1 }));
    let second = host.invoke(GREET, json!({ "name": " Grace " })).unwrap();
    assert_eq!(second, json!({ "message": "Hello, Grace!", "count": 2 }));
    let (revision, counter) = host.document("greetings", "counter").unwrap();
    assert_eq!((revision, counter), (2, json!({ "greetings": 2 })));

    // What the upstream saw: the allowed request, with the secret that
    // only the host holds.
    let requests = host.requests(UPSTREAM);
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!((request.method.as_str(), request.path.as_str()), ("GET", SALUTATION_PATH));
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {}", host.secret(UPSTREAM)).as_str())
        );
    }
}

#[test]
fn bad_input_names_the_field_and_sends_nothing() {
    let host = upstream_says("Hello");
    let blank = host.invoke(GREET, json!({ "name": "  " })).unwrap_err();
    assert_eq!(
        (blank.code(), blank.to_string().as_str()),
        ("invalid_input", "name: must not be blank")
    );
    // The manifest's input schema refuses unknown fields before the guest runs.
    let unknown = host.invoke(GREET, json!({ "nom": "Ada" })).unwrap_err();
    assert_eq!(unknown.code(), "invalid_input", "{unknown}");
    assert!(host.requests(UPSTREAM).is_empty(), "nothing is sent for bad input");
}

#[test]
fn upstream_failures_are_provider_errors_and_count_nothing() {
    let refusing = test_host()
        .binding(UPSTREAM, |_| ProviderResponse::status(503).body("maintenance"))
        .build()
        .unwrap();
    let refused = refusing.invoke(GREET, json!({ "name": "Ada" })).unwrap_err();
    assert_eq!(refused.code(), "provider_rejected", "{refused}");
    assert!(refused.to_string().contains("answered 503"), "{refused}");
    assert!(refusing.document("greetings", "counter").is_none());

    let slow = test_host()
        .binding(UPSTREAM, |_| {
            ProviderResponse::json(200, &json!({ "salutation": "Hi" })).after(Duration::from_secs(2))
        })
        .binding_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let late = slow.invoke(GREET, json!({ "name": "Ada" })).unwrap_err();
    assert_eq!(late.code(), "provider_unavailable", "{late}");

    let down = test_host().unreachable_binding(UPSTREAM).build().unwrap();
    let unreachable = down.invoke(GREET, json!({ "name": "Ada" })).unwrap_err();
    assert_eq!(unreachable.code(), "provider_unavailable", "{unreachable}");
    assert!(down.document("greetings", "counter").is_none());
}

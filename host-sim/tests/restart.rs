//! The operator state lives in the state directory: a restarted host has
//! the install, approvals, grants, bindings, tokens and documents.

mod common;

use common::*;
use serde_json::json;

#[test]
fn state_survives_a_host_restart() {
    let mut env = TestEnv::new();
    let token = env.ready("p1");
    let provider = Provider::start("restart-secret-77aa");
    env.bind("p1", &provider);
    env.host
        .set_tracking_origin("p1", Some("https://t.example.net"))
        .unwrap();
    assert_eq!(
        code(&env.invoke(
            &token,
            "p1",
            "docs.write",
            json!({ "id": "one", "body": { "kept": true } })
        )),
        "ok"
    );
    let generation = env.host.generation(EXTENSION, "p1").unwrap();

    env.restart();

    assert_eq!(
        env.host.releases().unwrap()[0].approved,
        vec!["documents", "http:provider"]
    );
    assert_eq!(env.host.generation(EXTENSION, "p1").unwrap(), generation);
    let read = env.invoke_at(&token, "p1", "docs.read_one", json!({}), Some(generation));
    assert_eq!(
        read.result.unwrap()["document"]["body"],
        json!({ "kept": true })
    );
    let call = env.invoke(&token, "p1", "http.get", json!({ "path": "/api/items/9" }));
    assert_eq!(
        call.result.unwrap()["status"],
        200,
        "the binding and its secret survived"
    );
    let context = env.invoke(&token, "p1", "context", json!({}));
    assert_eq!(
        context.result.unwrap()["tracking_origin"],
        "https://t.example.net"
    );
    let shown = env.host.bindings(Some("p1")).unwrap();
    assert_eq!(shown.len(), 1);
    assert!(shown[0].secret_set);
    assert!(!format!("{shown:?}").contains(&provider.secret));
}

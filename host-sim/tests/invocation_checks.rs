//! A customer's invocation passes four checks, in order, each with its own
//! error: project access, grant, approved capabilities, generation.

mod common;

use common::*;
use host_sim::InvokeError;
use serde_json::json;

/// An operator change, named for the assertion message.
type Change<'a> = (&'static str, Box<dyn Fn() + 'a>);

#[test]
fn a_granted_extension_reads_and_writes_its_project_documents() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let written = env.invoke(
        &token,
        "p1",
        "docs.write",
        json!({ "id": "one", "body": { "n": 1 } }),
    );
    assert_eq!(written.result.as_ref().unwrap()["revision"], 1);
    let read = env.invoke(&token, "p1", "docs.read_one", json!({}));
    let output = read.result.unwrap();
    assert_eq!(output["document"]["body"], json!({ "n": 1 }));
    assert_eq!(output["document"]["revision"], 1);
    assert_eq!(read.request_id.len(), 32);
    assert_eq!(
        read.generation,
        Some(env.host.generation(EXTENSION, "p1").unwrap())
    );
}

#[test]
fn a_document_is_read_by_collection_and_id_within_the_declared_collections() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let written = env.invoke(
        &token,
        "p1",
        "docs.write",
        json!({ "collection": "leak", "id": "Note-1", "body": ["a"] }),
    );
    assert_eq!(code(&written), "ok", "{:?}", written.result);
    let get = |collection: &str, id: &str| {
        env.invoke(
            &token,
            "p1",
            "docs.get",
            json!({ "collection": collection, "id": id }),
        )
    };
    let found = get("leak", "Note-1").result.unwrap();
    assert_eq!(
        found["document"],
        json!({ "collection": "leak", "id": "Note-1", "revision": 1, "body": ["a"] })
    );
    assert_eq!(
        get("items", "Note-1").result.unwrap()["document"],
        json!(null)
    );
    let undeclared = get("secrets", "Note-1");
    match &undeclared.result {
        Err(InvokeError::Action { code, message }) => {
            assert_eq!(code, "document_denied");
            assert!(message.contains("not declared"), "{message}");
        }
        other => panic!("expected a denial, got {other:?}"),
    }
    let traversal = get("leak", "../p2");
    assert_eq!(code(&traversal), "document_invalid");
    let missing_field = env.invoke(&token, "p1", "docs.get", json!({ "id": "x" }));
    assert_eq!(
        code(&missing_field),
        "invalid_input",
        "the schema requires it"
    );
}

#[test]
fn the_context_names_project_request_and_public_settings_only() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let provider = Provider::start("ctx-secret-123");
    env.bind("p1", &provider);
    env.host
        .set_tracking_origin("p1", Some("https://t.example.net"))
        .unwrap();
    let invocation = env.invoke(&token, "p1", "context", json!({}));
    let output = invocation.result.unwrap();
    assert_eq!(output["project_id"], "p1");
    assert_eq!(output["action"], "context");
    assert_eq!(output["request_id"], invocation.request_id);
    assert_eq!(output["provider_origin"], provider.origin());
    assert_eq!(output["tracking_origin"], "https://t.example.net");
    assert!(!output.to_string().contains("ctx-secret-123"));
}

#[test]
fn an_unknown_or_expired_token_is_unauthenticated() {
    let env = TestEnv::new();
    env.ready("p1");
    let invocation = env.invoke("hst_not-a-token", "p1", "docs.read_one", json!({}));
    assert_eq!(invocation.result, Err(InvokeError::Unauthenticated));
    let error = invocation.result.unwrap_err();
    assert_eq!((error.code(), status(&error)), ("unauthenticated", 401));
}

#[test]
fn a_caller_without_current_project_access_is_forbidden() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    env.host.grant(EXTENSION, "p2").unwrap();
    // A token for p1 does not reach p2.
    let other = env.invoke(&token, "p2", "docs.read_one", json!({}));
    assert!(
        matches!(other.result, Err(InvokeError::NoProjectAccess { .. })),
        "{:?}",
        other.result
    );
    // Access taken away after the token was issued: refused at once.
    assert_eq!(
        code(&env.invoke(&token, "p1", "docs.read_one", json!({}))),
        "ok"
    );
    assert!(env.host.remove_project_access("alice", "p1").unwrap());
    let after = env.invoke(&token, "p1", "docs.read_one", json!({}));
    let error = after.result.unwrap_err();
    assert!(matches!(error, InvokeError::NoProjectAccess { .. }));
    assert_eq!((error.code(), status(&error)), ("forbidden", 403));
    assert!(
        error.to_string().contains("no access to project p1"),
        "{error}"
    );
}

#[test]
fn an_extension_without_a_grant_is_forbidden() {
    let env = TestEnv::new();
    env.install();
    let token = env.token("alice", &["p1"]);
    let invocation = env.invoke(&token, "p1", "docs.read_one", json!({}));
    let error = invocation.result.unwrap_err();
    assert!(matches!(error, InvokeError::NotGranted { .. }), "{error:?}");
    assert_eq!(status(&error), 403);
    assert!(
        error.to_string().contains("not granted to project p1"),
        "{error}"
    );

    env.host.grant(EXTENSION, "p1").unwrap();
    assert_eq!(
        code(&env.invoke(&token, "p1", "docs.read_one", json!({}))),
        "ok"
    );
    env.host.revoke(EXTENSION, "p1").unwrap();
    let revoked = env.invoke(&token, "p1", "docs.read_one", json!({}));
    assert!(matches!(
        revoked.result,
        Err(InvokeError::NotGranted { .. })
    ));
}

#[test]
fn an_action_whose_capability_is_not_approved_is_forbidden() {
    let env = TestEnv::new();
    let dir = env.release(MANIFEST, guest_component());
    env.host.install_release(&dir, &mut |_| {}).unwrap();
    env.host.approve(EXTENSION, &["documents".into()]).unwrap();
    env.host.grant(EXTENSION, "p1").unwrap();
    let token = env.token("alice", &["p1"]);
    assert_eq!(
        code(&env.invoke(&token, "p1", "docs.read_one", json!({}))),
        "ok"
    );
    let invocation = env.invoke(&token, "p1", "http.get", json!({ "path": "/api/items/1" }));
    let error = invocation.result.unwrap_err();
    assert_eq!(
        error,
        InvokeError::CapabilityNotApproved {
            action: "http.get".into(),
            capability: "http:provider".into()
        }
    );
    assert_eq!(status(&error), 403);
    // The three forbidden refusals say different things.
    assert!(error.to_string().contains("not approved"));

    env.host
        .unapprove(EXTENSION, &["documents".into()])
        .unwrap();
    let withdrawn = env.invoke(&token, "p1", "docs.read_one", json!({}));
    assert!(matches!(
        withdrawn.result,
        Err(InvokeError::CapabilityNotApproved { .. })
    ));
}

#[test]
fn the_checks_run_in_order() {
    let env = TestEnv::new();
    env.install();
    env.host.unapprove(EXTENSION, &[]).unwrap();
    let token = env.token("alice", &["p1"]);
    // Not granted and not approved: the grant is reported (it is checked first).
    let both = env.invoke_at(&token, "p2", "docs.read_one", json!({}), Some(999));
    assert!(matches!(
        both.result,
        Err(InvokeError::NoProjectAccess { .. })
    ));
    let grant_first = env.invoke_at(&token, "p1", "docs.read_one", json!({}), Some(999));
    assert!(matches!(
        grant_first.result,
        Err(InvokeError::NotGranted { .. })
    ));
    env.host.grant(EXTENSION, "p1").unwrap();
    let approval_next = env.invoke_at(&token, "p1", "docs.read_one", json!({}), Some(999));
    assert!(matches!(
        approval_next.result,
        Err(InvokeError::CapabilityNotApproved { .. })
    ));
    env.host.approve(EXTENSION, &[]).unwrap();
    let generation_last = env.invoke_at(&token, "p1", "docs.read_one", json!({}), Some(999));
    assert!(matches!(
        generation_last.result,
        Err(InvokeError::StaleGeneration { .. })
    ));
}

#[test]
fn every_operator_change_moves_the_generation_and_old_callers_get_409() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let provider = Provider::start("gen-secret-42");
    let mut seen = env.host.generation(EXTENSION, "p1").unwrap();
    let current = env.invoke_at(&token, "p1", "docs.read_one", json!({}), Some(seen));
    assert_eq!(code(&current), "ok");

    let changes: Vec<Change<'_>> = vec![
        ("binding", Box::new(|| env.bind("p1", &provider))),
        (
            "setting",
            Box::new(|| {
                env.host
                    .set_tracking_origin("p1", Some("https://t.example.org"))
                    .unwrap();
            }),
        ),
        (
            "approval",
            Box::new(|| {
                env.host.approve(EXTENSION, &["documents".into()]).unwrap();
            }),
        ),
        (
            "grant",
            Box::new(|| {
                env.host.grant(EXTENSION, "p1").unwrap();
            }),
        ),
        (
            "upgrade",
            Box::new(|| {
                let manifest = MANIFEST.replace("version = \"0.1.0\"", "version = \"0.1.1\"");
                let dir = env.release(&manifest, guest_component());
                env.host.upgrade_release(&dir, &mut |_| {}).unwrap();
                env.host.approve(EXTENSION, &[]).unwrap();
            }),
        ),
    ];
    for (what, change) in changes {
        change();
        let now = env.host.generation(EXTENSION, "p1").unwrap();
        assert!(now > seen, "{what} did not move the generation");
        let stale = env.invoke_at(&token, "p1", "docs.read_one", json!({}), Some(seen));
        let error = stale.result.unwrap_err();
        assert_eq!(
            error,
            InvokeError::StaleGeneration {
                presented: seen,
                current: now
            },
            "{what}"
        );
        assert_eq!((error.code(), status(&error)), ("stale_generation", 409));
        let fresh = env.invoke_at(&token, "p1", "docs.read_one", json!({}), Some(now));
        assert_eq!(code(&fresh), "ok", "{what}: {:?}", fresh.result);
        seen = now;
    }
}

#[test]
fn input_is_validated_against_the_manifest_schema() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let invocation = env.invoke(&token, "p1", "docs.write", json!({ "body": 1 }));
    let error = invocation.result.unwrap_err();
    assert_eq!((error.code(), status(&error)), ("invalid_input", 422));
    assert!(error.to_string().contains("id"), "{error}");
    let extra = env.invoke(&token, "p1", "docs.read_one", json!({ "unexpected": true }));
    assert_eq!(code(&extra), "invalid_input");
    let missing = env.invoke(&token, "p1", "no.such.action", json!({}));
    assert_eq!(code(&missing), "not_found");
}

#[test]
fn errors_have_one_json_shape_with_the_request_id() {
    let env = TestEnv::new();
    env.ready("p1");
    let invocation = env.invoke("nope", "p1", "docs.read_one", json!({}));
    let body = invocation.to_json();
    assert_eq!(body["error"]["code"], "unauthenticated");
    assert!(body["error"]["message"].as_str().unwrap().contains("token"));
    assert_eq!(body["request_id"], invocation.request_id);
}

#[test]
fn one_host_serves_many_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<host_sim::Host>();
    let env = TestEnv::new();
    let token = env.ready("p1");
    std::thread::scope(|scope| {
        for worker in 0..4 {
            let (env, token) = (&env, &token);
            scope.spawn(move || {
                for i in 0..10 {
                    let id = format!("w{worker}-{i}");
                    let written =
                        env.invoke(token, "p1", "docs.write", json!({ "id": id, "body": i }));
                    assert_eq!(code(&written), "ok", "{:?}", written.result);
                }
            });
        }
    });
    let stored = env.host.state().documents("p1").unwrap();
    assert_eq!(stored.len(), 40);
}

//! The test extension misbehaves in every way it can; each time the host
//! stops it with a clear error, keeps serving other invocations, and no
//! binding secret shows up in a result, an error, a log line or a document.

mod common;

use std::time::{Duration, Instant};

use common::*;
use host_sim::{InvokeError, Limit};
use serde_json::{Value, json};

fn action_error(invocation: &host_sim::Invocation) -> (String, String) {
    match &invocation.result {
        Err(InvokeError::Action { code, message }) => (code.clone(), message.clone()),
        other => panic!("expected an action error, got {other:?}"),
    }
}

fn assert_no_secret(secret: &str, env: &TestEnv, project: &str, invocation: &host_sim::Invocation) {
    assert!(
        !format!("{:?}", invocation.result).contains(secret),
        "result leaks the secret"
    );
    assert!(
        !invocation.to_json().to_string().contains(secret),
        "JSON leaks the secret"
    );
    assert!(!logs().contains(secret), "the host log leaks the secret");
    for stored in env.host.state().documents(project).unwrap() {
        assert!(
            !stored.document.body.contains(secret),
            "a stored document leaks the secret"
        );
    }
}

#[test]
fn an_endless_loop_is_stopped_at_the_deadline_while_other_invocations_run() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    env.invoke(
        &token,
        "p1",
        "docs.write",
        json!({ "id": "one", "body": 1 }),
    );
    let looping = {
        let (host, token) = (env.host.clone(), token.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            let invocation = host.invoke(
                &host_sim::Caller::bearer(token),
                &host_sim::InvokeRequest {
                    extension: EXTENSION.into(),
                    project: "p1".into(),
                    action: "loop.forever".into(),
                    input: json!({}),
                    generation: None,
                },
            );
            (invocation, started.elapsed())
        })
    };
    // The host keeps serving while the loop runs.
    let mut served = 0;
    while !looping.is_finished() {
        let ok = env.invoke(&token, "p1", "docs.read_one", json!({}));
        assert_eq!(code(&ok), "ok", "{:?}", ok.result);
        served += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let (invocation, elapsed) = looping.join().unwrap();
    let error = invocation.result.unwrap_err();
    assert!(
        matches!(
            error,
            InvokeError::LimitExceeded {
                limit: Limit::Deadline,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("deadline"), "{error}");
    assert_eq!(status(&error), 429);
    assert!(elapsed >= env.limits.deadline, "{elapsed:?}");
    assert!(
        elapsed < env.limits.deadline + Duration::from_secs(2),
        "{elapsed:?}"
    );
    assert!(served > 5, "only {served} invocations ran beside the loop");
}

#[test]
fn unbounded_allocation_is_stopped_at_the_memory_limit() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let invocation = env.invoke(&token, "p1", "memory.unbounded", json!({}));
    let error = invocation.result.unwrap_err();
    assert!(
        matches!(
            error,
            InvokeError::LimitExceeded {
                limit: Limit::Memory,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("memory limit of 64 MiB"),
        "{error}"
    );
    assert_eq!(
        code(&env.invoke(&token, "p1", "docs.read_one", json!({}))),
        "ok"
    );
}

#[test]
fn a_host_call_flood_is_stopped_at_the_budget() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let invocation = env.invoke(&token, "p1", "calls.flood", json!({}));
    let error = invocation.result.unwrap_err();
    assert!(
        matches!(
            error,
            InvokeError::LimitExceeded {
                limit: Limit::HostCalls,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("100 host calls"), "{error}");
    assert_eq!(
        code(&env.invoke(&token, "p1", "docs.read_one", json!({}))),
        "ok"
    );
}

#[test]
fn a_binding_the_manifest_never_declared_is_refused() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let provider = Provider::start("undeclared-secret-7f3a");
    env.bind("p1", &provider);
    let invocation = env.invoke(&token, "p1", "http.ungranted_binding", json!({}));
    let (code, message) = action_error(&invocation);
    assert_eq!(code, "binding_capability_denied");
    assert!(message.contains("binding admin"), "{message}");
    assert!(
        message.contains("declares no capability http:admin"),
        "{message}"
    );
    assert!(provider.requests().is_empty());
    assert_no_secret(&provider.secret, &env, "p1", &invocation);
}

#[test]
fn a_path_outside_the_capability_never_leaves_the_host() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let provider = Provider::start("outside-secret-91bc");
    env.bind("p1", &provider);
    let invocation = env.invoke(&token, "p1", "http.outside_path", json!({}));
    let (code, message) = action_error(&invocation);
    assert_eq!(code, "binding_capability_denied");
    assert!(message.contains("GET /api/me"), "{message}");
    assert!(
        message.contains("outside the approved capability"),
        "{message}"
    );
    for tricky in [
        "/api/items/1/../../me",
        "/api/items/%2e%2e/me",
        "/api/items//me",
    ] {
        let trick = env.invoke(&token, "p1", "http.get", json!({ "path": tricky }));
        let (code, _) = action_error(&trick);
        assert!(
            code == "binding_invalid_request" || code == "binding_capability_denied",
            "{tricky}: {code}"
        );
    }
    assert!(provider.requests().is_empty(), "{:?}", provider.requests());
    assert_no_secret(&provider.secret, &env, "p1", &invocation);
}

#[test]
fn an_unbound_project_gets_not_bound() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let invocation = env.invoke(&token, "p1", "http.get", json!({ "path": "/api/items/1" }));
    let (code, message) = action_error(&invocation);
    assert_eq!(code, "binding_not_bound");
    assert!(
        message.contains("project p1 has no binding provider"),
        "{message}"
    );
}

#[test]
fn a_well_behaved_call_gets_the_secret_injected_and_credential_headers_stripped() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let provider = Provider::start("good-secret-5e6f");
    env.bind("p1", &provider);
    let invocation = env.invoke(
        &token,
        "p1",
        "http.get",
        json!({ "path": "/api/items/42", "query": "a=1" }),
    );
    let output = invocation.result.clone().unwrap();
    assert_eq!(output["status"], 200);
    let body: Value = serde_json::from_str(output["body"].as_str().unwrap()).unwrap();
    assert_eq!(body, json!({ "id": "42", "authorized": true }));
    let names: Vec<String> = output["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h[0].as_str().unwrap().to_ascii_lowercase())
        .collect();
    assert!(!names.contains(&"set-cookie".to_string()), "{names:?}");
    assert!(
        !names.contains(&"www-authenticate".to_string()),
        "{names:?}"
    );
    assert!(names.contains(&"x-echo-token".to_string()), "{names:?}");
    let seen = provider.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].target, "/api/items/42?a=1");
    assert!(seen[0].headers.contains(&(
        "authorization".into(),
        format!("Bearer {}", provider.secret)
    )));
    assert_no_secret(&provider.secret, &env, "p1", &invocation);
}

#[test]
fn an_echoed_secret_is_redacted_before_the_guest_sees_it() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let provider = Provider::start("echo-secret-c0ffee");
    env.bind("p1", &provider);
    let invocation = env.invoke(&token, "p1", "http.leak", json!({ "path": "/api/echo" }));
    let output = invocation.result.clone().unwrap();
    let body = output["body"].as_str().unwrap();
    assert!(body.contains("[redacted]"), "{body}");
    assert!(
        output["headers"].to_string().contains("token [redacted]"),
        "{output}"
    );
    // The guest printed, logged and stored what it got: all redacted.
    let logs = logs();
    assert!(
        logs.contains("provider said:"),
        "the guest's log line is missing"
    );
    assert!(logs.contains("[redacted]"));
    let docs = env.host.state().documents("p1").unwrap();
    assert!(
        docs.iter()
            .any(|d| d.collection == "leak" && d.document.body.contains("[redacted]"))
    );
    assert_no_secret(&provider.secret, &env, "p1", &invocation);
}

#[test]
fn a_grant_revoked_mid_invocation_refuses_the_next_binding_call() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let provider = Provider::start("revoke-secret-d00d");
    env.bind("p1", &provider);
    {
        let host = env.host.clone();
        provider.on_revoke(move || {
            host.revoke(EXTENSION, "p1").unwrap();
        });
    }
    let invocation = env.invoke(&token, "p1", "http.twice", json!({}));
    let error = invocation.result.clone().unwrap_err();
    assert!(matches!(error, InvokeError::NotGranted { .. }), "{error:?}");
    let seen: Vec<String> = provider
        .requests()
        .iter()
        .map(|s| s.target.clone())
        .collect();
    assert_eq!(
        seen,
        vec!["/api/revoke-grant".to_string()],
        "the second call went out"
    );
    assert!(logs().contains("is not granted to project p1"));
    assert_no_secret(&provider.secret, &env, "p1", &invocation);
}

#[test]
fn a_slow_origin_times_out_and_a_huge_response_is_refused() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let provider = Provider::start("slow-secret-abcd");
    env.bind("p1", &provider);
    let big = env.invoke(&token, "p1", "http.get", json!({ "path": "/api/big" }));
    let (code, message) = action_error(&big);
    assert_eq!(code, "binding_response_too_large");
    assert!(message.contains("larger than 1048576 bytes"), "{message}");
    let started = Instant::now();
    let slow = env.invoke(&token, "p1", "http.get", json!({ "path": "/api/slow" }));
    let (code, _) = action_error(&slow);
    assert_eq!(code, "binding_timeout");
    assert!(
        started.elapsed() < Duration::from_millis(2900),
        "{:?}",
        started.elapsed()
    );
    assert_no_secret(&provider.secret, &env, "p1", &slow);
}

#[test]
fn another_projects_documents_are_out_of_reach() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    env.host.grant(EXTENSION, "other-project").unwrap();
    let other = env.token("bob", &["other-project"]);
    let written = env.invoke(
        &other,
        "other-project",
        "docs.write",
        json!({ "id": "one", "body": { "owner": "other" } }),
    );
    assert_eq!(code(&written), "ok");
    let invocation = env.invoke(&token, "p1", "docs.escape", json!({}));
    let output = invocation.result.unwrap();
    let attempts = output["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 12);
    for attempt in attempts {
        let outcome = &attempt["outcome"];
        assert!(
            outcome == "invalid" || outcome == "denied" || outcome == "absent",
            "{attempt}"
        );
    }
    assert!(!output.to_string().contains("\"owner\""));
    // p1's own items/one is still separate from other-project's.
    let own = env.invoke(&token, "p1", "docs.read_one", json!({}));
    assert_eq!(own.result.unwrap()["document"], Value::Null);
}

#[test]
fn when_every_sandbox_slot_is_busy_the_caller_is_told_to_retry() {
    let env = TestEnv::with_limits(host_sim::SandboxLimits {
        max_instances: 1,
        ..test_limits()
    });
    let token = env.ready("p1");
    assert_eq!(
        code(&env.invoke(&token, "p1", "docs.read_one", json!({}))),
        "ok"
    );
    let busy = {
        let (host, token) = (env.host.clone(), token.clone());
        std::thread::spawn(move || {
            host.invoke(
                &host_sim::Caller::bearer(token),
                &host_sim::InvokeRequest {
                    extension: EXTENSION.into(),
                    project: "p1".into(),
                    action: "loop.forever".into(),
                    input: json!({}),
                    generation: None,
                },
            )
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let refused = env.invoke(&token, "p1", "docs.read_one", json!({}));
    let error = refused.result.unwrap_err();
    assert!(
        matches!(
            error,
            InvokeError::LimitExceeded {
                limit: Limit::Capacity,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(status(&error), 429);
    assert_eq!(code(&busy.join().unwrap()), "limit_exceeded");
    assert_eq!(
        code(&env.invoke(&token, "p1", "docs.read_one", json!({}))),
        "ok"
    );
}

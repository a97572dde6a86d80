//! The sandbox housekeeping (`src/housekeeping.rs`): stores are prepared and
//! torn down while invocations wait on a binding, and still every
//! invocation runs in an instance no guest code has run in, of its own
//! project and generation, with its own scope.

mod common;

use common::*;
use serde_json::{Value, json};

fn mark(env: &TestEnv, token: &str, project: &str) -> Value {
    env.invoke(token, project, "memory.mark", json!({}))
        .result
        .expect("memory.mark")
}

/// An invocation that waits on the provider (when the housekeeping runs).
fn wait(env: &TestEnv, token: &str, project: &str) {
    let invocation = env.invoke(
        token,
        project,
        "http.get",
        json!({ "path": "/api/items/1" }),
    );
    assert_eq!(code(&invocation), "ok", "{:?}", invocation.result);
}

/// The extension granted to p1 and p2, both bound to one provider, and a
/// token for both.
fn two_projects(secret: &str) -> (TestEnv, String, Provider) {
    let env = TestEnv::new();
    env.ready("p1");
    env.host.grant(EXTENSION, "p2").unwrap();
    let token = env.token("alice", &["p1", "p2"]);
    let provider = Provider::start(secret);
    env.bind("p1", &provider);
    env.bind("p2", &provider);
    (env, token, provider)
}

const CLEAN: fn() -> Value = || json!({ "zeroed": 0, "initialised": 7 });

#[test]
fn a_prepared_store_starts_clean_and_serves_one_invocation() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let provider = Provider::start("housekeeping-secret-4a1b");
    env.bind("p1", &provider);

    // No wait yet: nothing is prepared, and each instance starts clean.
    for _ in 0..3 {
        assert_eq!(mark(&env, &token, "p1"), CLEAN());
    }
    let before = env.host.sandbox_stats();
    assert_eq!(before.prepared, 0);
    assert_eq!(before.used_prepared, 0);

    for round in 0..5 {
        // The wait drops the finished stores (their pooled memory is reset)
        // and prepares one store; `memory.mark` runs in it, and changes both
        // statics, which no later invocation may see.
        wait(&env, &token, "p1");
        assert_eq!(mark(&env, &token, "p1"), CLEAN(), "round {round}");
    }
    let after = env.host.sandbox_stats();
    assert_eq!(after.prepared, 5, "{after:?}");
    assert_eq!(after.used_prepared, 5, "{after:?}");
    // The first wait drops the three marks' stores; every later one at
    // least the mark before it.
    assert!(after.dropped_while_waiting >= 3 + 4, "{after:?}");
}

#[test]
fn a_prepared_store_serves_only_its_own_project_and_generation() {
    let (env, token, provider) = two_projects("housekeeping-secret-7c2d");

    let context = |project: &str| {
        let invocation = env.invoke(&token, project, "context", json!({}));
        let output = invocation.result.clone().expect("context");
        assert_eq!(output["project_id"], project);
        assert_eq!(output["request_id"], invocation.request_id.as_str());
        assert_eq!(output["action"], "context");
        assert_eq!(output["provider_origin"], provider.origin().as_str());
    };

    // A store prepared for p1 is not given to p2.
    wait(&env, &token, "p1");
    let used = env.host.sandbox_stats().used_prepared;
    context("p2");
    assert_eq!(env.host.sandbox_stats().used_prepared, used);

    // Nor to p1 once its generation moved (a binding change).
    wait(&env, &token, "p1");
    env.bind("p1", &provider);
    context("p1");
    assert_eq!(env.host.sandbox_stats().used_prepared, used);

    // Of the same key it is, with this invocation's scope in it.
    wait(&env, &token, "p1");
    context("p1");
    assert_eq!(env.host.sandbox_stats().used_prepared, used + 1);
    assert_eq!(mark(&env, &token, "p1"), CLEAN());
}

#[test]
fn concurrent_invocations_of_two_projects_each_start_clean() {
    let (env, token, _provider) = two_projects("housekeeping-secret-9e3f");

    // Threads interleave waits (which prepare and drop stores) with marks,
    // on two projects, so prepared stores change hands, go stale and are
    // dropped under contention; more threads than cores also switch the
    // housekeeping off and on.
    std::thread::scope(|threads| {
        for t in 0..6 {
            let (env, token) = (&env, &token);
            threads.spawn(move || {
                let project = if t % 2 == 0 { "p1" } else { "p2" };
                for round in 0..25 {
                    wait(env, token, project);
                    assert_eq!(
                        mark(env, token, project),
                        CLEAN(),
                        "thread {t} round {round}"
                    );
                }
            });
        }
    });
    let stats = env.host.sandbox_stats();
    assert!(stats.used_prepared <= stats.prepared, "{stats:?}");
    // Quiet again: the housekeeping works as in the single-threaded case.
    let before = env.host.sandbox_stats().used_prepared;
    wait(&env, &token, "p1");
    assert_eq!(mark(&env, &token, "p1"), CLEAN());
    assert_eq!(env.host.sandbox_stats().used_prepared, before + 1);
}

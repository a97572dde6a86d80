//! The in-process test host (`host_sim::testing`) and development builds:
//! a scripted provider (answers, status codes, delays), the requests the
//! extension made, the secret only the host sees, and a new build replacing
//! the running one while an invocation is in flight.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use host_sim::testing::{ProviderResponse, TestHost, TestHostError};
use host_sim::{Host, HostConfig};
use serde_json::{Value, json};

fn output_body(output: &Value) -> String {
    output["body"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn a_scripted_provider_answers_and_sees_every_request() {
    let host = TestHost::from_bytes(MANIFEST, guest_component())
        .binding("provider", |request| match request.path.as_str() {
            "/api/items/7" => ProviderResponse::json(200, &json!({ "id": 7, "name": "seven" })),
            "/api/echo" => ProviderResponse::status(503).body("try later"),
            _ => ProviderResponse::status(404),
        })
        .build()
        .unwrap();

    let found = host
        .invoke(
            "http.get",
            json!({ "path": "/api/items/7", "query": "full=1" }),
        )
        .unwrap();
    assert_eq!(found["status"], 200);
    assert_eq!(
        serde_json::from_str::<Value>(&output_body(&found)).unwrap(),
        json!({ "id": 7, "name": "seven" })
    );
    let busy = host
        .invoke("http.get", json!({ "path": "/api/echo" }))
        .unwrap();
    assert_eq!(busy["status"], 503, "the status reaches the guest as it is");
    assert_eq!(output_body(&busy), "try later");

    let requests = host.requests("provider");
    assert_eq!(requests.len(), 2);
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("GET", "/api/items/7")
    );
    assert_eq!(requests[0].query.as_deref(), Some("full=1"));
    assert_eq!(requests[0].header("accept"), Some("application/json"));
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {}", host.secret("provider")).as_str()),
        "the host adds the binding's secret"
    );
    assert!(host.secret("provider").starts_with("test-secret-provider-"));
}

#[test]
fn the_secret_stays_hidden_from_the_guest() {
    // The provider echoes the secret back in a header and the body.
    let host = TestHost::from_bytes(MANIFEST, guest_component())
        .binding("provider", |request| {
            let authorization = request.header("authorization").unwrap_or_default();
            ProviderResponse::status(200)
                .header("x-echo", authorization)
                .body(format!("you sent {authorization}"))
        })
        .build()
        .unwrap();
    let output = host
        .invoke("http.get", json!({ "path": "/api/echo" }))
        .unwrap();
    let secret = host.secret("provider");
    assert!(!output.to_string().contains(secret), "{output}");
    assert!(output_body(&output).contains("[redacted]"), "{output}");
    assert!(
        host.requests("provider")[0]
            .header("authorization")
            .is_some_and(|value| value.contains(secret))
    );
}

#[test]
fn delays_past_the_timeout_and_unreachable_origins_are_binding_errors() {
    let host = TestHost::from_bytes(MANIFEST, guest_component())
        .binding("provider", |_| {
            ProviderResponse::json(200, &json!({})).after(Duration::from_millis(800))
        })
        .binding_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let late = host
        .invoke("http.get", json!({ "path": "/api/slow" }))
        .unwrap_err();
    assert_eq!(late.code(), "binding_timeout", "{late}");
    assert_eq!(host.requests("provider").len(), 1);

    let host = TestHost::from_bytes(MANIFEST, guest_component())
        .unreachable_binding("provider")
        .build()
        .unwrap();
    let down = host
        .invoke("http.get", json!({ "path": "/api/items/1" }))
        .unwrap_err();
    assert_eq!(down.code(), "binding_unavailable", "{down}");
}

#[test]
fn documents_are_readable_and_undeclared_bindings_are_refused() {
    let host = TestHost::from_bytes(MANIFEST, guest_component())
        .build()
        .unwrap();
    host.invoke(
        "docs.write",
        json!({ "collection": "items", "id": "a", "body": { "n": 1 } }),
    )
    .unwrap();
    let (revision, body) = host.document("items", "a").expect("written");
    assert_eq!((revision, body), (1, json!({ "n": 1 })));

    let refused = TestHost::from_bytes(MANIFEST, guest_component())
        .binding("admin", |_| ProviderResponse::status(200))
        .build()
        .err()
        .expect("`admin` is not declared");
    assert!(
        matches!(&refused, TestHostError::UndeclaredBinding(name) if name == "admin"),
        "{refused}"
    );
}

#[test]
fn a_test_host_started_again_on_the_same_build_loads_the_compiled_component() {
    let dir = tempfile::tempdir().unwrap();
    let (manifest, component) = (
        dir.path().join("manifest.toml"),
        dir.path().join("ext.wasm"),
    );
    std::fs::write(&manifest, MANIFEST).unwrap();
    std::fs::write(&component, guest_component()).unwrap();
    let cache = dir.path().join("compiled");
    let artifacts = || -> Vec<(std::path::PathBuf, std::time::SystemTime)> {
        std::fs::read_dir(&cache)
            .map(|entries| {
                entries
                    .map(|e| {
                        let path = e.unwrap().path();
                        let modified = path.metadata().unwrap().modified().unwrap();
                        (path, modified)
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let start = |what: &str| {
        let started = std::time::Instant::now();
        let host = TestHost::from_files(&manifest, &component)
            .unwrap()
            .compile_cache(&cache)
            .build()
            .unwrap();
        println!("{what}: the test host started in {:?}", started.elapsed());
        host
    };
    assert!(artifacts().is_empty());
    let first = start("compiling");
    let kept = artifacts();
    assert_eq!(kept.len(), 1, "one compiled component kept: {kept:?}");
    assert!(kept[0].0.to_string_lossy().ends_with(".cwasm"));
    drop(first);
    let second = start("loading");
    assert_eq!(artifacts(), kept, "loaded, not compiled and written again");
    let output = second.invoke("context", json!({})).unwrap();
    assert_eq!(output["project_id"], host_sim::testing::TEST_PROJECT);

    // A changed build is another artifact; a damaged one is compiled again.
    std::fs::write(&kept[0].0, b"not a compiled component").unwrap();
    let third = start("after damage");
    third.invoke("context", json!({})).unwrap();
    assert_ne!(
        std::fs::read(&kept[0].0).unwrap(),
        b"not a compiled component"
    );
}

#[test]
fn a_new_build_takes_over_while_an_invocation_finishes_on_the_old_one() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let host = TestHost::from_bytes(MANIFEST, guest_component())
        .binding("provider", move |request| {
            counted.fetch_add(1, Ordering::SeqCst);
            match request.path.as_str() {
                // The in-flight invocation's first call: the reload happens meanwhile.
                "/api/revoke-grant" => {
                    ProviderResponse::json(200, &json!({})).after(Duration::from_millis(1500))
                }
                _ => ProviderResponse::json(200, &json!({ "id": 1 })),
            }
        })
        .build()
        .unwrap();
    let before = host.invocation("http.get", json!({ "path": "/api/items/1" }));
    let old_generation = before.generation.unwrap();

    let host = Arc::new(host);
    let in_flight = {
        let host = host.clone();
        std::thread::spawn(move || host.invocation("http.twice", json!({})))
    };
    while calls.load(Ordering::SeqCst) < 2 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let rebuilt = MANIFEST.replace("version = \"0.1.0\"", "version = \"0.1.1\"");
    assert_ne!(rebuilt, MANIFEST);
    let files = [("extension.wasm".to_owned(), guest_component())].into();
    let installed = host
        .host()
        .install_development(&rebuilt, files, &mut |_| {})
        .unwrap();
    assert_eq!(installed.version, "0.1.1");

    let finished = in_flight.join().unwrap();
    let output = finished
        .result
        .expect("the in-flight call finishes on the old build");
    assert_eq!(output["first"], 200);
    assert_eq!(
        output["second"]["status"], 200,
        "its later host call is still allowed"
    );
    assert_eq!(finished.generation, Some(old_generation));

    let after = host.invocation("http.get", json!({ "path": "/api/items/1" }));
    assert!(after.result.is_ok(), "{:?}", after.result);
    assert!(after.generation.unwrap() > old_generation);
    let listed = host.host().releases().unwrap();
    assert_eq!(listed[0].version, "0.1.1");
    assert_eq!(listed[0].key_id, "development (unsigned)");
}

#[test]
fn development_states_take_builds_and_operator_states_take_releases() {
    let env = TestEnv::new();
    let files = || [("extension.wasm".to_owned(), guest_component())].into();
    let refused = env
        .host
        .install_development(MANIFEST, files(), &mut |_| {})
        .unwrap_err();
    assert!(
        refused.to_string().contains("only in a development state"),
        "{refused}"
    );

    let dir = tempfile::tempdir().unwrap();
    let development = Host::open(HostConfig::development(dir.path())).unwrap();
    assert!(development.is_development());
    let release = env.release(MANIFEST, guest_component());
    let refused = development
        .install_release(&release, &mut |_| {})
        .unwrap_err();
    assert!(
        refused.to_string().contains("development state"),
        "{refused}"
    );
    drop(development);
    // The marker stays with the state.
    let reopened = Host::open(HostConfig::new(dir.path())).unwrap();
    assert!(reopened.is_development());
    assert!(reopened.install_release(&release, &mut |_| {}).is_err());

    let broken = reopened
        .install_development(MANIFEST, Default::default(), &mut |_| {})
        .unwrap_err();
    assert!(
        broken.to_string().contains("`extension.wasm` is missing"),
        "{broken}"
    );
}

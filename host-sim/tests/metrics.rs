//! The operator's view of `host-sim serve --metrics-listen`: invocations
//! that ran, that the extension refused and that the host refused (access,
//! grant, generation) show in `/metrics`, which Debian's `promtool check
//! metrics` finds clean and whose labels never name a project, a token, a
//! user or a host; `/readyz` is 503 with the reason while the state's
//! database file is gone or behind the build's migrations, 200 once it is
//! back; and in the JSON log every
//! line a request causes carries the request id its answer names.

mod common;

use common::serve::ServeProcess;
use common::*;
use prometheus_fixture::{documented_families, promtool_problems};

const PROJECT: &str = "shop-4711";
const OTHER: &str = "other-project-0815";

fn api(project: &str, route: &str) -> String {
    format!("/v1/plugins/{EXTENSION}/projects/{project}/api{route}")
}

/// The `{…}` label sets of every sample line.
fn label_sets(exposition: &str) -> Vec<&str> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| Some(&l[l.find('{')?..=l.rfind('}')?]))
        .collect()
}

#[test]
fn invocations_and_refusals_are_counted_without_naming_a_project_or_token() {
    let env = TestEnv::new();
    let provider = Provider::start("metrics-provider-secret-77");
    let token = env.ready(PROJECT);
    env.bind(PROJECT, &provider);
    // A token for a project the extension is not granted to.
    let ungranted = env.token("bob", &[OTHER]);
    let served = ServeProcess::start(&env.state_dir(), "warn");
    let bearer = format!("Bearer {token}");
    let auth = [("authorization", bearer.as_str())];

    let ok = served.call("GET", &api(PROJECT, "/context"), &auth);
    assert_eq!(ok.status, 200, "{}", ok.body);
    let binding = served.call("GET", &api(PROJECT, "/http?path=%2Fapi%2Fitems%2F7"), &auth);
    assert_eq!(binding.status, 200, "{}", binding.body);
    // access: the token's user has no access to the other project.
    assert_eq!(
        served.call("GET", &api(OTHER, "/context"), &auth).status,
        403
    );
    // grant: the other project's token, the extension not granted there.
    let other_bearer = format!("Bearer {ungranted}");
    let other = [("authorization", other_bearer.as_str())];
    assert_eq!(
        served.call("GET", &api(OTHER, "/context"), &other).status,
        403
    );
    // generation: a caller that holds an old generation.
    let stale = [
        ("authorization", bearer.as_str()),
        ("x-runtime-generation", "999999"),
    ];
    assert_eq!(
        served.call("GET", &api(PROJECT, "/context"), &stale).status,
        409
    );
    // An extension that is not installed: the caller's words, unresolved.
    let unknown = served.call(
        "GET",
        "/v1/plugins/made-up-extension/projects/shop-4711/api/context",
        &auth,
    );
    assert_eq!(unknown.status, 404, "{}", unknown.body);

    let exposition = served.exposition();
    for expected in [
        r#"host_sim_invocations_total{extension="test-extension",action="context",outcome="ok"} 1"#,
        r#"host_sim_invocations_total{extension="test-extension",action="http.get",outcome="ok"} 1"#,
        r#"host_sim_invocation_refusals_total{kind="access"} 1"#,
        r#"host_sim_invocation_refusals_total{kind="grant"} 1"#,
        r#"host_sim_invocation_refusals_total{kind="generation"} 1"#,
        r#"host_sim_binding_calls_total{binding="provider",status_class="2xx"} 1"#,
        "host_sim_invocation_duration_seconds_bucket{",
        "host_sim_binding_call_duration_seconds_bucket{",
        "host_sim_pool_slots ",
        "host_sim_pool_slots_in_use ",
    ] {
        assert!(
            exposition.contains(expected),
            "{expected} is missing:\n{exposition}"
        );
    }
    assert!(!exposition.contains("made-up-extension"), "{exposition}");
    let forbidden = [
        PROJECT,
        OTHER,
        "shop",
        "alice",
        "bob",
        "127.0.0.1",
        "made-up",
        token.as_str(),
        ungranted.as_str(),
        provider.secret.as_str(),
    ];
    for labels in label_sets(&exposition) {
        for word in forbidden {
            assert!(!labels.contains(word), "a label names `{word}`: {labels}");
        }
    }
    if let Some(problems) = promtool_problems(&exposition) {
        assert_eq!(problems, "", "promtool check metrics:\n{exposition}");
    }
}

/// A host that has served nothing yet exports every documented family
/// (read from the README, so the two cannot drift apart) with its closed
/// label sets at 0; only the binding families, labelled with names the
/// releases declare, wait for their first call (the README says so).
#[test]
fn every_documented_family_is_exported_from_the_start() {
    const BINDING_FAMILIES: [&str; 2] = [
        "host_sim_binding_calls_total",
        "host_sim_binding_call_duration_seconds",
    ];
    let families = documented_families(include_str!("../README.md"));
    assert!(families.len() >= 10, "{families:?}");
    let env = TestEnv::new();
    env.install();
    let served = ServeProcess::start(&env.state_dir(), "warn");
    let exposition = served.exposition();
    for family in families
        .iter()
        .filter(|f| !BINDING_FAMILIES.contains(&f.as_str()))
    {
        assert!(
            exposition
                .lines()
                .any(|l| l.starts_with(&format!("# TYPE {family} "))),
            "{family} is not exported at start:\n{exposition}"
        );
    }
    for kind in host_sim::metrics::REFUSAL_KINDS {
        let series = format!("host_sim_invocation_refusals_total{{kind=\"{kind}\"}} 0");
        assert!(
            exposition.lines().any(|l| l == series),
            "{series}:\n{exposition}"
        );
    }
    for outcome in host_sim::metrics::INGRESS_OUTCOMES {
        let series = format!("host_sim_tracking_ingress_requests_total{{outcome=\"{outcome}\"}} 0");
        assert!(
            exposition.lines().any(|l| l == series),
            "{series}:\n{exposition}"
        );
    }
    for outcome in host_sim::metrics::UNRESOLVED_OUTCOMES {
        let series = format!(
            "host_sim_invocations_total{{extension=\"unresolved\",action=\"unresolved\",outcome=\"{outcome}\"}} 0"
        );
        assert!(
            exposition.lines().any(|l| l == series),
            "{series}:\n{exposition}"
        );
    }
    if let Some(problems) = promtool_problems(&exposition) {
        assert_eq!(problems, "", "promtool check metrics:\n{exposition}");
    }
}

#[test]
fn readyz_is_503_while_the_state_database_is_gone_or_behind_and_200_after() {
    let env = TestEnv::new();
    env.install();
    let served = ServeProcess::start(&env.state_dir(), "warn");
    let ready = served.call("GET", "/readyz", &[]);
    assert_eq!((ready.status, ready.body.as_str()), (200, "ready\n"));

    // The volume under the state goes away: the file the host opened is
    // no longer at its path (the open connection would go on reading it).
    let db = env.state_dir().join(host_sim::state::DB_FILE);
    let away = env.state_dir().join("moved-away.sqlite3");
    std::fs::rename(&db, &away).unwrap();
    let down = served.call("GET", "/readyz", &[]);
    assert_eq!(down.status, 503, "{}", down.body);
    assert!(
        down.body
            .starts_with("not ready: the operator state is unreachable:"),
        "{}",
        down.body
    );
    assert!(
        down.body.contains(host_sim::state::DB_FILE),
        "{}",
        down.body
    );
    assert_eq!(served.call("GET", "/healthz", &[]).status, 200);

    std::fs::rename(&away, &db).unwrap();
    let back = served.call("GET", "/readyz", &[]);
    assert_eq!((back.status, back.body.as_str()), (200, "ready\n"));

    // A state behind this build's migrations (an older backup restored).
    let conn = rusqlite::Connection::open(&db).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    conn.pragma_update(None, "user_version", version - 1)
        .unwrap();
    let behind = served.call("GET", "/readyz", &[]);
    assert_eq!(behind.status, 503, "{}", behind.body);
    assert!(
        behind.body.contains(&format!(
            "has schema version {}, this host needs {version}",
            version - 1
        )),
        "{}",
        behind.body
    );
    conn.pragma_update(None, "user_version", version).unwrap();
    assert_eq!(served.call("GET", "/readyz", &[]).status, 200);
}

#[test]
fn every_json_line_a_request_causes_carries_its_request_id() {
    let env = TestEnv::new();
    let provider = Provider::start("json-log-provider-secret-31");
    let token = env.ready(PROJECT);
    env.bind(PROJECT, &provider);
    let served = ServeProcess::start(&env.state_dir(), "info");
    let bearer = format!("Bearer {token}");
    let answer = served.call(
        "GET",
        &api(PROJECT, "/http?path=%2Fapi%2Fitems%2F9"),
        &[("authorization", bearer.as_str())],
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let request_id = answer
        .header("x-request-id")
        .expect("x-request-id")
        .to_string();

    // The request line comes last, once the answer is built.
    let mut lines = Vec::new();
    for _ in 0..50 {
        lines = served.json_lines();
        if lines.iter().any(|l| l["fields"]["message"] == "request") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let of_request: Vec<_> = lines
        .iter()
        .filter(|l| l["fields"]["request_id"] == request_id.as_str())
        .map(|l| {
            l["fields"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert!(
        of_request.iter().any(|m| m == "invocation ok")
            && of_request.iter().any(|m| m == "request"),
        "the lines of request {request_id}: {of_request:?}\nall: {lines:#?}"
    );
    let request = lines
        .iter()
        .find(|l| l["fields"]["message"] == "request")
        .unwrap();
    assert_eq!(request["fields"]["status"], 200);
    assert_eq!(request["fields"]["project"], PROJECT);
    let log = serde_json::to_string(&lines).unwrap();
    assert!(!log.contains(&token), "the log holds the token");
    assert!(!log.contains(&provider.secret), "the log holds the secret");
}

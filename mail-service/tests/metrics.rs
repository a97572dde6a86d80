//! The operator's view: `/metrics` (Prometheus text, checked by Debian's
//! `promtool`), labels that never carry a tenant, an address, a key or a
//! path, and `/healthz` and `/readyz` on the public listener: ready while
//! the database answers with every migration, 503 with the reason while it
//! does not (PostgreSQL behind a proxy the test cuts), ready again after.
//!
//! The recorder is global to the process: the tests here check labels and
//! shapes, never exact counts (tests/prometheus.rs in the workspace tests
//! counts, through a real Prometheus).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Backend, TestApp, TestDb, call_router, email, pg_url};
use mail_service::clock::rfc3339;
use mail_service::service::Settings;
use mail_service::store::{StorageConfig, Store};
use prometheus_fixture::{documented_families, promtool_problems};
use serde_json::json;

/// The `{…}` label sets of every sample line.
fn label_sets(exposition: &str) -> Vec<&str> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| Some(&l[l.find('{')?..=l.rfind('}')?]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exposition_passes_promtool_and_no_label_names_a_customer() {
    let handle = mail_service::metrics::install();
    let app = TestApp::start(Backend::Sqlite).await;
    let mut recipient = email();
    recipient["to"] = json!(["grace.hopper@customer-mail.example"]);
    for _ in 0..3 {
        app.send(&recipient).await.expect(200, "");
    }
    let mut later = recipient.clone();
    later["scheduled_at"] = json!(rfc3339(app.service.now_ms() + 3_600_000));
    let scheduled = app.send(&later).await;
    scheduled.expect(200, "");
    let id = scheduled.body["id"].as_str().unwrap().to_string();
    app.get(&format!("/emails/{id}")).await.ok();
    app.get(&format!("/v1/emails/{id}")).await.ok();
    app.get("/no/such/path/shop.customer-host.example")
        .await
        .expect(404, "not_found");
    app.call("BREW", "/emails", Some(&app.full_key), &[], None)
        .await;
    app.service.set_rate_limit("acme", 1).await.unwrap();
    let mut refused = 0;
    for _ in 0..3 {
        if app.get("/emails").await.status == 429 {
            refused += 1;
        }
    }
    assert!(refused > 0, "the rate limit refused nothing");
    app.service.record_queue_gauges().await.unwrap();

    let exposition = handle.render();
    for name in [
        "mail_http_requests_total",
        "mail_http_request_duration_seconds_bucket",
        "mail_emails_accepted_total",
        "mail_handoff_duration_seconds_bucket",
        "mail_scheduled_emails_due",
        "mail_webhook_deliveries_pending",
        "mail_rate_limited_requests_total",
        "mail_sqlite_commit_duration_seconds_bucket",
        "mail_sqlite_write_group_units_bucket",
    ] {
        assert!(
            exposition.contains(name),
            "{name} is missing:\n{exposition}"
        );
    }
    assert!(exposition.contains(r#"route="/v1/emails/{id}""#));
    assert!(exposition.contains(r#"route="unmatched""#));
    assert!(exposition.contains(r#"method="other""#));
    assert!(exposition.contains(r#"outcome="scheduled""#));
    let forbidden = [
        "acme",
        "customer",
        "grace",
        "example",
        "shop",
        "BREW",
        id.as_str(),
        app.full_key.as_str(),
        app.send_key.as_str(),
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

/// A node that has done nothing yet exports every documented family (the
/// list is read from the README, so the two cannot drift apart), each
/// closed set of label values at 0: `rate()` and absence alerts read a
/// quiet service right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_family_is_exported_from_the_start() {
    let families = documented_families(include_str!("../README.md"));
    assert!(families.len() >= 13, "{families:?}");
    let db = TestDb::new(Backend::Sqlite);
    let server = common::ServerProcess::start(
        &db.env(),
        &[("MAIL_METRICS_LISTEN", "127.0.0.1:0".to_string())],
    );
    let address = server
        .stderr_lines()
        .iter()
        .find_map(|l| l.strip_prefix("metrics on ").map(str::to_string))
        .expect("the metrics listener's address on stderr");
    let exposition = common::http_client()
        .get(address)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for family in &families {
        assert!(
            exposition
                .lines()
                .any(|l| l.starts_with(&format!("# TYPE {family} "))),
            "{family} is not exported at start:\n{exposition}"
        );
    }
    let at_zero = |name: &str, label: &str, values: &[&str]| {
        for value in values {
            let series = format!("{name}{{{label}=\"{value}\"}} 0");
            assert!(
                exposition.lines().any(|l| l == series),
                "{series} is missing:\n{exposition}"
            );
        }
    };
    use mail_service::metrics::*;
    at_zero(EMAILS_ACCEPTED, "outcome", ACCEPTED_OUTCOMES);
    at_zero(WEBHOOK_ATTEMPTS, "result", WEBHOOK_RESULTS);
    at_zero(FEEDBACK_REPORTS, "outcome", FEEDBACK_OUTCOMES);
    assert!(
        exposition
            .lines()
            .any(|l| l == "mail_rate_limited_requests_total 0")
    );
    assert!(
        exposition.contains(
            r#"mail_http_requests_total{route="/v1/emails",method="POST",status="200"} 0"#
        ),
        "{exposition}"
    );
    if let Some(problems) = promtool_problems(&exposition) {
        assert_eq!(problems, "", "promtool check metrics:\n{exposition}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_readyz_answer_and_readyz_sees_missing_migrations() {
    let app = TestApp::start(Backend::Sqlite).await;
    let health = call_router(app.router.clone(), "GET", "/healthz", None, &[], None).await;
    assert_eq!((health.status, health.body.as_str()), (200, Some("ok\n")));
    let ready = call_router(app.router.clone(), "GET", "/readyz", None, &[], None).await;
    assert_eq!((ready.status, ready.body.as_str()), (200, Some("ready\n")));
    // No request log for probes.
    assert_eq!(app.db.count("SELECT COUNT(*) FROM request_logs").await, 0);

    app.db
        .execute(
            "DELETE FROM _sqlx_migrations WHERE version = (SELECT MAX(version) FROM _sqlx_migrations)",
        )
        .await;
    let behind = call_router(app.router.clone(), "GET", "/readyz", None, &[], None).await;
    assert_eq!(behind.status, 503);
    let reason = behind.body.as_str().unwrap();
    assert!(
        reason.starts_with("not ready: the database's migrations are behind"),
        "{reason}"
    );
}

/// A TCP proxy to PostgreSQL that the test can cut (every connection
/// closed, new ones refused) and restore.
struct Proxy {
    port: u16,
    open: Arc<AtomicBool>,
    live: Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let live: Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (gate, tasks) = (open.clone(), live.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if !gate.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().unwrap().push(task.abort_handle());
            }
        });
        Proxy { port, open, live }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for task in self.live.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_while_postgresql_is_unreachable_and_200_after() {
    let pg = url::Url::parse(&pg_url()).expect("the PostgreSQL URL");
    let upstream = format!(
        "{}:{}",
        pg.host_str().unwrap_or("127.0.0.1"),
        pg.port().unwrap_or(5432)
    );
    let proxy = Proxy::start(upstream).await;
    let mut through = pg.clone();
    through.set_host(Some("127.0.0.1")).unwrap();
    through.set_port(Some(proxy.port)).unwrap();
    // The schema and its cleanup are the harness's; the store goes
    // through the proxy.
    let db = TestDb::new(Backend::Postgres);
    let storage = match &db.storage {
        StorageConfig::Postgres {
            schema,
            max_connections,
            ..
        } => StorageConfig::Postgres {
            url: through.to_string(),
            schema: schema.clone(),
            max_connections: *max_connections,
        },
        StorageConfig::Sqlite { .. } => unreachable!(),
    };
    let store = Store::open(&storage, &db.master_key())
        .await
        .expect("PostgreSQL through the proxy");
    let service = mail_service::service::MailService::start(
        store,
        mail_service::transport::Transport::File(db.dir.path().join("outbox")),
        mail_service::system_clock(),
        Settings::default(),
    )
    .await
    .unwrap();
    let router = mail_service::http::router(service);
    let readyz = || call_router(router.clone(), "GET", "/readyz", None, &[], None);

    assert_eq!(readyz().await.status, 200);

    proxy.cut();
    let down = readyz().await;
    assert_eq!(down.status, 503, "{}", down.body);
    let reason = down.body.as_str().unwrap();
    assert!(
        reason.starts_with("not ready: the database"),
        "the reason: {reason}"
    );
    assert!(!reason.contains("postgres://"), "the reason shows the URL");
    let health = call_router(router.clone(), "GET", "/healthz", None, &[], None).await;
    assert_eq!(health.status, 200, "liveness does not need the database");

    proxy.restore();
    let mut status = 0;
    for _ in 0..50 {
        status = readyz().await.status;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(status, 200, "ready again once the database answers");
}

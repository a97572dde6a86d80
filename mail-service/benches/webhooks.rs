//! Webhook delivery benchmark: `mail-service serve` (its own process, file
//! transport) delivers `email.sent` events to a receiver on loopback in this
//! process, on SQLite and on PostgreSQL.
//!
//! 1. Delivery rate: MAIL_BENCH_EVENTS emails are sent while the server's
//!    dispatcher is idle (its poll interval set to ten minutes after its
//!    first round), the server is killed, and a restarted one drains the
//!    outbox: events delivered per second, from its start to the last
//!    arrival. Baseline from the same run: unsigned POSTs of the same body
//!    size from this process to the same receiver with the dispatcher's
//!    concurrency.
//! 2. Delay: as many emails sent at a steady pace (4 at a time) while the
//!    dispatcher runs with its default poll interval (500 ms, or
//!    MAIL_WEBHOOK_POLL_MS): p50/p99/max of (arrival at the receiver − the
//!    event's `created_at`, the time of the status change, taken just
//!    before its commit).
//!
//! `cargo bench -p mail-service --bench webhooks`
//! Environment: MAIL_BENCH_EVENTS (default 3000), MAIL_BENCH_ONLY (`sqlite`
//! or `postgres`), MAIL_WEBHOOK_POLL_MS, MAIL_TEST_DATABASE_URL.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mail_service::clock::{Clock, SystemClock};
use mail_service::model::Permission;
use mail_service::store::StorageConfig;
use serde_json::{Value, json};

mod support;

/// (arrival ms, the event's created_at ms) per delivery.
type Arrivals = Arc<Mutex<Vec<(i64, i64)>>>;

async fn receiver() -> (SocketAddr, Arrivals) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let arrivals: Arrivals = Arc::default();
    let seen = arrivals.clone();
    let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
        let seen = seen.clone();
        async move {
            let arrived = SystemClock.now_ms();
            let created = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v["created_at"].as_str().map(str::to_string))
                .and_then(|t| {
                    time::OffsetDateTime::parse(&t, &time::format_description::well_known::Rfc3339)
                        .ok()
                })
                .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
                .unwrap_or(arrived);
            seen.lock().unwrap().push((arrived, created));
            "ok"
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, arrivals)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Sends `n` emails, `concurrency` at a time.
async fn send_many(base: &str, key: &str, n: usize, concurrency: usize) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (base, key, next) = (base.to_string(), key.to_string(), next.clone());
        tasks.push(tokio::spawn(async move {
            let client = client();
            while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < n {
                let resp = client
                    .post(format!("{base}/emails"))
                    .bearer_auth(&key)
                    .json(
                        &json!({"from": "bench@example.com", "to": "someone@example.net",
                        "subject": "Webhook bench", "text": "x"}),
                    )
                    .send()
                    .await
                    .expect("send");
                assert_eq!(resp.status().as_u16(), 200, "send accepted");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// `n` unsigned POSTs of a delivery-sized body to `url`, `concurrency` at
/// a time: the rate and the p50/p99 latency.
async fn bare_posts(url: &str, n: usize, concurrency: usize) -> (f64, f64, f64) {
    let body = json!({"type": "email.sent", "created_at": "2026-01-01T00:00:00.000Z",
        "data": {"email_id": "1", "message_id": "<1@example.com>", "from": "bench@example.com",
            "to": ["someone@example.net"], "subject": "Webhook bench", "created_at": "2026-01-01T00:00:00.000Z"}})
    .to_string();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (url, body, next) = (url.to_string(), body.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let client = client();
            let mut latencies = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < n {
                let t = Instant::now();
                client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                    .expect("bare post");
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    (
        latencies.len() as f64 / elapsed,
        at(0.5).as_secs_f64() * 1000.0,
        at(0.99).as_secs_f64() * 1000.0,
    )
}

async fn wait_for(arrivals: &Arrivals, count: usize, limit: Duration) -> bool {
    let started = Instant::now();
    while arrivals.lock().unwrap().len() < count {
        if started.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

async fn run(
    label: &str,
    storage: StorageConfig,
    mut env: Vec<(String, String)>,
    dir: &std::path::Path,
    events: usize,
    poll_ms: u64,
) {
    let Some((store, service, _, key)) =
        support::bench_tenant(label, &storage, dir, "webhooks").await
    else {
        return;
    };
    let (_, full_key) = service
        .create_api_key("bench", "ops", Permission::FullAccess)
        .await
        .unwrap();
    store.close().await;
    let (addr, arrivals) = receiver().await;
    env.push(("MAIL_WEBHOOK_ALLOW_PRIVATE_ADDRESSES".into(), "true".into()));
    env.push(("MAIL_WEBHOOK_ALLOW_HTTP_LOOPBACK".into(), "true".into()));
    let with_poll = |ms: u64| {
        let mut e = env.clone();
        e.push(("MAIL_WEBHOOK_POLL_MS".into(), ms.to_string()));
        e
    };

    // 1. The outbox filled while the dispatcher is idle, then drained.
    let (mut idle, base) = support::serve(&with_poll(600_000));
    let created = client()
        .post(format!("{base}/webhooks"))
        .bearer_auth(&full_key)
        .json(&json!({"endpoint": format!("http://{addr}/hook"), "events": ["email.sent"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 200, "webhook registered");
    send_many(&base, &key, events, 16).await;
    let _ = idle.kill();
    let _ = idle.wait();
    assert!(arrivals.lock().unwrap().is_empty(), "nothing delivered yet");
    let started = Instant::now();
    let (mut server, base) = support::serve(&with_poll(poll_ms));
    let drained = wait_for(&arrivals, events, Duration::from_secs(300)).await;
    let drain = started.elapsed().as_secs_f64();
    let (bare_rate, bare_p50, bare_p99) =
        bare_posts(&format!("http://{addr}/bare"), events, 16).await;
    let rate = events as f64 / drain;
    println!(
        "{label}: delivery rate {rate:.0} events/s ({events} events, drained in {drain:.2} s{}); \
         baseline unsigned POSTs to the same receiver {bare_rate:.0}/s (p50 {bare_p50:.2} ms, p99 {bare_p99:.2} ms); \
         ratio {:.2}",
        if drained { "" } else { ", NOT all delivered" },
        rate / bare_rate
    );

    // 2. Commit to first attempt while sending at a steady pace.
    arrivals.lock().unwrap().clear();
    send_many(&base, &key, events, 4).await;
    wait_for(&arrivals, events, Duration::from_secs(120)).await;
    let mut delays: Vec<i64> = arrivals
        .lock()
        .unwrap()
        .iter()
        .map(|(arrived, created)| arrived - created)
        .collect();
    delays.sort();
    let at = |q: f64| delays[((delays.len() as f64 * q) as usize).min(delays.len() - 1)];
    println!(
        "{label}: commit to first attempt (poll {poll_ms} ms): p50 {} ms, p99 {} ms, max {} ms over {} events",
        at(0.5),
        at(0.99),
        delays.last().copied().unwrap_or_default(),
        delays.len()
    );
    let _ = server.kill();
    let _ = server.wait();
}

#[tokio::main]
async fn main() {
    // Without `--bench` (a test run of every target) a small smoke run.
    let quick = !support::measuring();
    let events = if quick {
        50
    } else {
        support::env_or("MAIL_BENCH_EVENTS", 3000) as usize
    };
    let poll_ms = support::env_or("MAIL_WEBHOOK_POLL_MS", 500);
    let only = std::env::var("MAIL_BENCH_ONLY").ok();
    let wanted = |kind: &str| only.as_deref().is_none_or(|o| o == kind);
    let dir = tempfile::tempdir().unwrap();
    let pg_dir = tempfile::tempdir().unwrap();
    if wanted("sqlite") {
        run(
            "sqlite",
            StorageConfig::sqlite(dir.path().join("mail.db")),
            vec![("MAIL_DATA_DIR".into(), dir.path().display().to_string())],
            dir.path(),
            events,
            poll_ms,
        )
        .await;
    }
    if wanted("postgres") {
        let pg = support::BenchSchema::new();
        run(
            "postgres",
            pg.storage(10),
            pg.serve_env(pg_dir.path()),
            pg_dir.path(),
            events,
            poll_ms,
        )
        .await;
        pg.drop().await;
    }
}

//! Load benchmark: `mail-service serve` runs as its own process on loopback
//! with the file transport; this process loads it with concurrent
//! `POST /emails` for a fixed time and prints accepted sends per second and
//! the p99 latency, on SQLite and on PostgreSQL. In the same run it measures
//! the raw rate of the same database doing the row writes one accepted send
//! costs (request log insert + update, rate-window upsert, email insert +
//! update), and prints the ratio.
//!
//! `cargo bench -p mail-service --bench send_load`
//! Environment: MAIL_BENCH_SECONDS (default 10), MAIL_BENCH_CONCURRENCY
//! (default 16), MAIL_TEST_DATABASE_URL (default
//! postgres://postgres@127.0.0.1:5432/test).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mail_service::service::{MailService, Settings};
use mail_service::store::{NewEmail, NewLog, Permission, StorageConfig, Store};
use mail_service::transport::Transport;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Figures {
    rate: f64,
    p99_ms: f64,
    p50_ms: f64,
    count: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx].as_secs_f64() * 1000.0
}

async fn load_api(base: &str, key: &str, seconds: u64, concurrency: usize) -> (Figures, usize) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let body = serde_json::json!({
        "from": "Bench <bench@example.com>",
        "to": ["rcpt@example.com"],
        "subject": "Load test",
        "text": "Hello from the benchmark",
    });
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, stop, body) = (client.clone(), stop.clone(), body.clone());
            let (url, key) = (format!("{base}/emails"), key.to_string());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut errors = 0;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    match client.post(&url).bearer_auth(&key).json(&body).send().await {
                        Ok(r) if r.status().as_u16() == 200 => {
                            let _ = r.bytes().await;
                            latencies.push(t.elapsed());
                        }
                        _ => errors += 1,
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let mut errors = 0;
    for w in workers {
        let (l, e) = w.await.unwrap();
        all.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    (
        Figures {
            rate: all.len() as f64 / elapsed,
            p99_ms: percentile(&all, 0.99),
            p50_ms: percentile(&all, 0.50),
            count: all.len(),
        },
        errors,
    )
}

async fn load_raw(
    store: &Store,
    service: &MailService,
    tenant: i64,
    key_id: i64,
    seconds: u64,
    concurrency: usize,
) -> Figures {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (store, service, stop) = (store.clone(), service.clone(), stop.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let now = service.now_ms();
                    let id = service.next_id();
                    let email = NewEmail {
                        id,
                        tenant_id: tenant,
                        api_key_id: key_id,
                        from_addr: "Bench <bench@example.com>".into(),
                        to_addrs: "[\"rcpt@example.com\"]".into(),
                        subject: "Load test".into(),
                        payload: r#"{"from":"Bench <bench@example.com>","subject":"Load test","text":"Hello from the benchmark","to":["rcpt@example.com"]}"#.into(),
                        message_id: format!("<{id}@example.com>"),
                    };
                    let log = NewLog {
                        id: service.next_id(),
                        tenant_id: Some(tenant),
                        api_key_id: Some(key_id),
                        method: "POST".into(),
                        path: "/emails".into(),
                        user_agent: None,
                        created_at: now,
                    };
                    store.insert_probe_email(&email, &log, now).await.expect("raw insert");
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    Figures {
        rate: all.len() as f64 / elapsed,
        p99_ms: percentile(&all, 0.99),
        p50_ms: percentile(&all, 0.50),
        count: all.len(),
    }
}

async fn run(
    label: &str,
    storage: StorageConfig,
    env: Vec<(String, String)>,
    dir: &std::path::Path,
    seconds: u64,
    concurrency: usize,
) {
    let store = match Store::connect(&storage).await {
        Ok(s) => s,
        Err(e) => {
            println!("{label}: cannot open the database ({e:#}); skipped");
            return;
        }
    };
    let service = MailService::start(
        store.clone(),
        Transport::File(dir.join("outbox")),
        mail_service::system_clock(),
        Settings::default(),
    )
    .await
    .unwrap();
    let (record, key) = service
        .create_api_key("bench", "load", Permission::SendingAccess)
        .await
        .unwrap();
    store.set_rate_limit("bench", 1_000_000_000).await.unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_mail-service"))
        .arg("serve")
        .env("MAIL_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "warn")
        .envs(env)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("server starts");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("mail-service listening on ")
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(addr.to_string());
            }
        }
    });
    let base = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("server address");
    let (api, errors) = load_api(&base, &key, seconds, concurrency).await;
    let _ = child.kill();
    let _ = child.wait();

    let raw = load_raw(
        &store,
        &service,
        record.tenant_id,
        record.id,
        seconds,
        concurrency,
    )
    .await;
    println!(
        "{label:<10} API  POST /emails accepted: {:>8.0}/s  p50 {:>6.2} ms  p99 {:>6.2} ms  ({} sent, {} errors, {concurrency} connections, {seconds} s)",
        api.rate, api.p50_ms, api.p99_ms, api.count, errors
    );
    println!(
        "{label:<10} raw  same row writes:         {:>8.0}/s  p50 {:>6.2} ms  p99 {:>6.2} ms  ({} emails)",
        raw.rate, raw.p50_ms, raw.p99_ms, raw.count
    );
    println!(
        "{label:<10} ratio API / raw storage: {:.2}",
        api.rate / raw.rate
    );
    store.close().await;
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes --bench; without it (`cargo test --benches`,
    // `--all-targets`) this is a one-second smoke run.
    let quick = !std::env::args().any(|a| a == "--bench");
    let seconds = if quick {
        1
    } else {
        env_or("MAIL_BENCH_SECONDS", 10)
    };
    let concurrency = env_or("MAIL_BENCH_CONCURRENCY", 16) as usize;

    let dir = tempfile::tempdir().unwrap();
    let sqlite = StorageConfig::Sqlite {
        path: dir.path().join("mail.db"),
    };
    run(
        "sqlite",
        sqlite,
        vec![("MAIL_DATA_DIR".into(), dir.path().display().to_string())],
        dir.path(),
        seconds,
        concurrency,
    )
    .await;

    let pg_dir = tempfile::tempdir().unwrap();
    let url = std::env::var("MAIL_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
    let pg = StorageConfig::Postgres {
        url: url.clone(),
        schema: Some(schema.clone()),
        max_connections: 10,
    };
    run(
        "postgres",
        pg,
        vec![
            ("MAIL_DATA_DIR".into(), pg_dir.path().display().to_string()),
            ("DATABASE_URL".into(), url.clone()),
            ("MAIL_DATABASE_SCHEMA".into(), schema.clone()),
        ],
        pg_dir.path(),
        seconds,
        concurrency,
    )
    .await;
    if let Ok(pool) = sqlx::PgPool::connect(&url).await {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE"
        )))
        .execute(&pool)
        .await;
    }
}

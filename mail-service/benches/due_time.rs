//! Due-time accuracy of the scheduler, in real time: a `mail-service serve`
//! process (its real scheduler, on a real SQLite file or PostgreSQL schema)
//! hands off to an SMTP sink in this process. The benchmark schedules
//! `MAIL_BENCH_EMAILS` emails (default 10,000) through the API
//! (`POST /emails/batch`, 100 per batch), due evenly spread over the next
//! `MAIL_BENCH_SPAN_SECONDS` (default 60) starting a few seconds after the
//! last one is accepted, waits until the sink has seen them all, and prints
//! p50, p99 and the maximum of (handoff start − scheduled_at). The handoff
//! start is the moment the sink accepted the SMTP connection that carried
//! the email (so the figure includes the claim, the TCP connect and the
//! time the wall clock shows it: it is what the provider sees). Nothing
//! compresses time: the clock is the system clock in both processes.
//!
//! In the same run, as the baseline, a bare timer (a tokio task sleeping
//! until each due time of a slice, then connecting to the same sink) shows
//! how late this machine wakes anything at all.
//!
//! `cargo bench -p mail-service --bench due_time`
//! Environment: MAIL_BENCH_EMAILS (default 10000), MAIL_BENCH_SPAN_SECONDS
//! (default 60), MAIL_BENCH_ONLY (`sqlite` or `postgres`),
//! MAIL_TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test).
//! Without `--bench` (`cargo test --benches`) it is a smoke run: 200 emails
//! over 2 s.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mail_service::clock::rfc3339;
use mail_service::smtp_sink::{SinkMode, SmtpSink};
use mail_service::store::StorageConfig;
use serde_json::{Value, json};

const BATCH: usize = 100;
/// Batches sent at the same time while scheduling.
const SCHEDULING_CONNECTIONS: usize = 4;
/// The first email is due this long after the last one was accepted.
const LEAD: Duration = Duration::from_secs(3);
/// How long after the last due time the benchmark waits for stragglers.
const GRACE: Duration = Duration::from_secs(60);

fn micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_micros() as i64
}

fn now_ms() -> i64 {
    micros(SystemTime::now()) / 1000
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Lateness figures in milliseconds.
struct Figures {
    count: usize,
    p50: f64,
    p99: f64,
    max: f64,
    min: f64,
}

fn figures(mut late_us: Vec<i64>) -> Figures {
    late_us.sort_unstable();
    let at = |p: f64| {
        if late_us.is_empty() {
            return f64::NAN;
        }
        let idx = ((late_us.len() as f64 * p).ceil() as usize).clamp(1, late_us.len()) - 1;
        late_us[idx] as f64 / 1000.0
    };
    Figures {
        count: late_us.len(),
        p50: at(0.50),
        p99: at(0.99),
        max: at(1.0),
        min: late_us.first().map_or(f64::NAN, |v| *v as f64 / 1000.0),
    }
}

/// The email id a message carries in its `Message-ID` (`<id@domain>`).
fn email_id(message_id: &str) -> Option<i64> {
    message_id
        .trim_matches(['<', '>'])
        .split('@')
        .next()?
        .parse()
        .ok()
}

/// A `mail-service serve` process handing off to the sink; its base URL.
fn serve(env: &[(String, String)], sink_port: u16) -> (std::process::Child, String) {
    let mut all = vec![
        ("MAIL_SMTP_HOST".to_owned(), "127.0.0.1".to_owned()),
        ("MAIL_SMTP_PORT".to_owned(), sink_port.to_string()),
        ("MAIL_SMTP_SECURITY".to_owned(), "none".to_owned()),
    ];
    all.extend(env.iter().cloned());
    support::serve(&all)
}

/// Schedules one batch; the ids with their due times.
async fn schedule_batch(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    due: &[i64],
) -> Vec<(i64, i64)> {
    let items: Vec<Value> = due
        .iter()
        .map(|at| {
            json!({
                "from": "Bench <bench@example.com>",
                "to": ["rcpt@example.com"],
                "subject": "Due-time benchmark",
                "text": "Hello from the benchmark",
                "scheduled_at": rfc3339(*at),
            })
        })
        .collect();
    let resp = client
        .post(format!("{base}/emails/batch"))
        .bearer_auth(key)
        .json(&items)
        .send()
        .await
        .expect("batch request");
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.expect("batch answer");
    assert_eq!(status, 202, "scheduling refused: {body}");
    body["data"]
        .as_array()
        .expect("data")
        .iter()
        .zip(due)
        .map(|(d, at)| (d["id"].as_str().unwrap().parse().unwrap(), *at))
        .collect()
}

/// The baseline: a bare timer that sleeps until each due time and then
/// connects to the sink; how late the connection is accepted.
async fn bare_timer(sink: &SmtpSink, count: usize, span: Duration) -> Figures {
    let start = now_ms() + 1000;
    let step = span.as_micros() as f64 / count as f64 / 1000.0;
    let due: Vec<i64> = (0..count)
        .map(|i| start + (i as f64 * step) as i64)
        .collect();
    let port = sink.port();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        for at in due {
            let wait = at - now_ms();
            if wait > 0 {
                tokio::time::sleep(Duration::from_millis(wait as u64)).await;
            }
            let tx = tx.clone();
            tokio::spawn(async move {
                // The sink greets first; the time it accepted is what counts,
                // and the sink records it only for a message, so measure it
                // here at connect (the same loopback hop).
                if tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
                {
                    let _ = tx.send(micros(SystemTime::now()) - at * 1000);
                }
            });
        }
    });
    task.await.unwrap();
    let mut late = Vec::with_capacity(count);
    while late.len() < count {
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Some(l)) => late.push(l),
            _ => break,
        }
    }
    figures(late)
}

async fn run(
    label: &str,
    storage: StorageConfig,
    env: Vec<(String, String)>,
    dir: &std::path::Path,
    emails: usize,
    span: Duration,
) {
    let Some((store, service, _, key)) =
        support::bench_tenant(label, &storage, dir, "due-time").await
    else {
        return;
    };
    // The server owns the database from here on.
    store.close().await;
    drop(service);

    let sink = SmtpSink::start(0, SinkMode::Accept).await.unwrap();
    let (mut child, base) = serve(&env, sink.port());
    let client = reqwest::Client::new();

    // Due times evenly over the span, starting `LEAD` after scheduling is
    // expected to end (it is checked below).
    let scheduling_started = Instant::now();
    let estimate = Duration::from_millis(2 + emails as u64 / 5);
    let first_due = now_ms() + (estimate + LEAD).as_millis() as i64;
    let step_us = span.as_micros() as f64 / emails as f64;
    let due: Vec<i64> = (0..emails)
        .map(|i| first_due + (i as f64 * step_us / 1000.0) as i64)
        .collect();
    let mut scheduled: HashMap<i64, i64> = HashMap::with_capacity(emails);
    let batches: Vec<&[i64]> = due.chunks(BATCH).collect();
    for group in batches.chunks(SCHEDULING_CONNECTIONS) {
        let requests: Vec<_> = group
            .iter()
            .map(|batch| {
                let (client, base, key, batch) =
                    (client.clone(), base.clone(), key.clone(), batch.to_vec());
                tokio::spawn(async move { schedule_batch(&client, &base, &key, &batch).await })
            })
            .collect();
        for request in requests {
            scheduled.extend(request.await.expect("scheduling task"));
        }
    }
    let accepted_ms = now_ms();
    let scheduling = scheduling_started.elapsed();
    assert!(
        accepted_ms < first_due,
        "scheduling took {scheduling:?}, past the first due time; lower MAIL_BENCH_EMAILS"
    );

    // Wait for every handoff (or give up a while after the last due time).
    let last_due = *due.last().unwrap();
    let give_up = last_due + GRACE.as_millis() as i64;
    while sink.received().len() < emails && now_ms() < give_up {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let load = load_average();
    // Late duplicates would arrive now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = child.kill();
    let _ = child.wait();

    let mut seen: HashMap<i64, usize> = HashMap::new();
    let mut late = Vec::with_capacity(emails);
    for message in sink.received() {
        let Some(id) = message.message_id().as_deref().and_then(email_id) else {
            continue;
        };
        *seen.entry(id).or_default() += 1;
        if let Some(at) = scheduled.get(&id) {
            late.push(micros(message.connected_at) - at * 1000);
        }
    }
    let twice = seen.values().filter(|n| **n > 1).count();
    let missing = scheduled.keys().filter(|id| !seen.contains_key(id)).count();
    let f = figures(late);
    println!(
        "{label:<9} scheduler: handoff start - scheduled_at  p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms  min {:>6.2} ms  \
         ({} of {emails} handed off over {:.0} s; {missing} missing, {twice} twice; scheduled in {:.1} s; load average {load})",
        f.p50,
        f.p99,
        f.max,
        f.min,
        f.count,
        span.as_secs_f64(),
        scheduling.as_secs_f64(),
    );
    // The baseline on a tenth of the emails over a tenth of the span (the
    // same rate), in the same run.
    let b = bare_timer(&sink, (emails / 10).max(1), span / 10).await;
    println!(
        "{label:<9} baseline bare timer + connect:           p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms  ({} wake-ups at the same rate)",
        b.p50, b.p99, b.max, b.count
    );
}

#[tokio::main]
async fn main() {
    let quick = !support::measuring();
    let (emails, span) = if quick {
        (200, Duration::from_secs(2))
    } else {
        (
            support::env_or("MAIL_BENCH_EMAILS", 10_000) as usize,
            Duration::from_secs(support::env_or("MAIL_BENCH_SPAN_SECONDS", 60)),
        )
    };
    let only = std::env::var("MAIL_BENCH_ONLY").ok();
    let wanted = |kind: &str| only.as_deref().is_none_or(|o| o == kind);
    let dir = tempfile::tempdir().unwrap();

    if wanted("sqlite") {
        let sqlite_dir = dir.path().join("sqlite");
        std::fs::create_dir_all(&sqlite_dir).unwrap();
        run(
            "sqlite",
            StorageConfig::sqlite(sqlite_dir.join("mail.db")),
            vec![("MAIL_DATA_DIR".into(), sqlite_dir.display().to_string())],
            &sqlite_dir,
            emails,
            span,
        )
        .await;
    }

    if wanted("postgres") {
        let pg = support::BenchSchema::new();
        let pg_dir = dir.path().join("postgres");
        std::fs::create_dir_all(&pg_dir).unwrap();
        run(
            "postgres",
            pg.storage(10),
            pg.serve_env(&pg_dir),
            &pg_dir,
            emails,
            span,
        )
        .await;
        pg.drop().await;
    }
}

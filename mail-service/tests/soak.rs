//! The soak (issue 36): a `mail-service serve` process with its embedded
//! defaults (SQLite, the file outbox) under steady mixed traffic (single
//! sends, keyed sends, batches of five) from eight clients at a fixed
//! total rate (`SOAK_RATE`, 100 requests a second by default), sampled at
//! regular intervals: resident memory, open descriptors, the database and
//! its WAL on disk, requests and their p99. A leak is a slope: it fails
//! when memory or descriptors keep growing after the warm-up
//! (`soak_fixture::Soak::verdict`), and when the WAL outgrows its limit.
//!
//! `cargo xtask soak --minutes N` runs it for N minutes, a sample a minute;
//! the ordinary suite for `SOAK_SECS` (60 s by default), twelve samples.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Backend, ServerProcess, TestDb, email, http_client};
use serde_json::json;
use soak_fixture::{Sample, Soak, length_and_interval, open_fds, percentile, rate, rss_kib};

/// The checkpoint thread truncates the WAL past 64 MiB; between two of
/// its looks (100 ms) a group commit adds little.
const WAL_CEILING: u64 = 96 << 20;

const CLIENTS: usize = 8;

fn bytes(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn steady_traffic_keeps_memory_and_descriptors_flat() {
    let (length, interval) = length_and_interval();
    let db = TestDb::new(Backend::Sqlite);
    let (send_key, _) = common::provision_keys(&db).await;
    let server = ServerProcess::start(&db.env(), &[]);
    let pid = server.child.id();
    let data = db.dir.path().to_path_buf();
    let latencies: Arc<Mutex<Vec<u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let http = http_client();
    let rate = rate();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (http, base, key) = (http.clone(), server.base.clone(), send_key.clone());
            let (latencies, stop) = (latencies.clone(), stop.clone());
            tokio::spawn(async move {
                let mut pace =
                    tokio::time::interval(CLIENTS as u32 * Duration::from_secs(1) / rate);
                pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut n = 0_u64;
                while !stop.load(Ordering::Relaxed) {
                    pace.tick().await;
                    n += 1;
                    let request = match n % 10 {
                        9 => http.post(format!("{base}/emails/batch")).json(&json!([
                            email(),
                            email(),
                            email(),
                            email(),
                            email()
                        ])),
                        7 | 8 => http
                            .post(format!("{base}/emails"))
                            .header("idempotency-key", format!("soak-{c}-{n}"))
                            .json(&email()),
                        _ => http.post(format!("{base}/emails")).json(&email()),
                    };
                    let started = Instant::now();
                    let answer = request.bearer_auth(&key).send().await;
                    let ok = matches!(&answer, Ok(r) if r.status().is_success());
                    assert!(ok, "a soak request failed: {answer:?}");
                    latencies
                        .lock()
                        .unwrap()
                        .push(started.elapsed().as_micros() as u64);
                }
            })
        })
        .collect();

    println!(
        "\nsoak: mail-service (SQLite, embedded defaults), {length:?} at {rate} requests/s, a sample every {interval:?}"
    );
    let mut soak = Soak::new("mail-service");
    soak.header();
    let started = Instant::now();
    let mut wal_peak = 0;
    while started.elapsed() < length {
        tokio::time::sleep(interval).await;
        let taken = std::mem::take(&mut *latencies.lock().unwrap());
        let wal = bytes(&data.join("mail.db-wal"));
        wal_peak = wal_peak.max(wal);
        soak.push(Sample {
            at: started.elapsed(),
            rss_kib: rss_kib(pid),
            fds: open_fds(pid),
            db_bytes: Some(bytes(&data.join("mail.db")) + wal),
            requests: taken.len(),
            p99: Duration::from_micros(percentile(&taken, 99.0)),
        });
        // The outbox is the provider's side: emptied so the disk stays free.
        if let Ok(files) = std::fs::read_dir(data.join("outbox")) {
            for file in files.flatten() {
                let _ = std::fs::remove_file(file.path());
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    // After the load stops: what the service keeps.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (rss_slope, fds_slope) = soak.slopes();
    println!(
        "after the load stopped: {:.1} MiB resident, {} descriptors; after the warm-up {:.2} MiB and {:.2} descriptors a minute; WAL peak {:.1} MiB",
        rss_kib(pid) as f64 / 1024.0,
        open_fds(pid),
        rss_slope / 1024.0,
        fds_slope,
        wal_peak as f64 / (1 << 20) as f64
    );
    assert!(
        wal_peak <= WAL_CEILING,
        "the WAL reached {wal_peak} bytes, past its limit"
    );
    if let Err(trend) = soak.verdict() {
        panic!("{trend}");
    }
}

//! The soak of host-sim (issue 36): `host-sim serve`'s router with the
//! signed analytics release installed, four clients asking
//! `GET /configuration` at a steady rate (`SOAK_RATE`, 100 requests a
//! second by default, as the mail soak), sampled at regular intervals:
//! resident memory and open descriptors (of this process: the server runs
//! in it, beside clients whose own memory does not grow), requests and
//! their p99. A leak is a slope: it fails when memory or descriptors keep
//! growing after the warm-up (`soak_fixture::Soak::verdict`).
//!
//! `cargo xtask soak --minutes N` runs it for N minutes, a sample a minute;
//! the ordinary suite for `SOAK_SECS` (60 s by default), twelve samples.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use soak_fixture::{Sample, Soak, length_and_interval, open_fds, percentile, rate, rss_kib};
use support::Platform;

#[test]
fn steady_configuration_reads_keep_memory_and_descriptors_flat() {
    let (length, interval) = length_and_interval();
    let platform = Platform::start("soak-shop", "soak-provider-secret", Duration::from_secs(2));
    let served = platform.serve();
    // The project has its website, so `/configuration` answers 200.
    platform.provision("Soak Shop", "soak.example.com");
    let url = format!("{}/configuration", platform.api_base(&served));
    // The platform's token lives an hour; the soak's own outlives the soak
    // (a 60-minute run ended in 401s at its last minute).
    let token = platform
        .host
        .issue_token(
            "customer",
            &[platform.project.clone()],
            length + Duration::from_secs(600),
        )
        .expect("a token for the soak")
        .token;
    let latencies: Arc<Mutex<Vec<u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let (clients, rate) = (4, rate());
    let period = clients * Duration::from_secs(1) / rate;
    let clients: Vec<_> = (0..clients)
        .map(|_| {
            let (url, token) = (url.clone(), token.clone());
            let (latencies, stop) = (latencies.clone(), stop.clone());
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::new();
                let mut next = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    // The next request's time; a client that fell behind
                    // goes on at once, without catching up in a burst.
                    next = (next + period).max(Instant::now());
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                    let started = Instant::now();
                    let answer = client.get(&url).bearer_auth(&token).send();
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
        "\nsoak: host-sim GET /configuration, {length:?} at {rate} requests/s, a sample every {interval:?}"
    );
    let me = std::process::id();
    let mut soak = Soak::new("host-sim");
    soak.header();
    let started = Instant::now();
    while started.elapsed() < length {
        std::thread::sleep(interval);
        let taken = std::mem::take(&mut *latencies.lock().unwrap());
        soak.push(Sample {
            at: started.elapsed(),
            rss_kib: rss_kib(me),
            fds: open_fds(me),
            db_bytes: None,
            requests: taken.len(),
            p99: Duration::from_micros(percentile(&taken, 99.0)),
        });
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let (rss_slope, fds_slope) = soak.slopes();
    println!(
        "after the warm-up: {:.2} MiB and {fds_slope:.2} descriptors a minute",
        rss_slope / 1024.0
    );
    if let Err(trend) = soak.verdict() {
        panic!("{trend}");
    }
}

//! A storm of hostile guests under normal traffic (issue 36): two threads
//! invoke a well-behaved action back to back while a third mixes in the
//! test extension's hostile actions (endless loop, allocation bomb,
//! host-call flood, oversized output, ungranted binding), one for every
//! ten normal invocations. Checked: every hostile call ends with its
//! documented error within its limit, every normal call succeeds, no more
//! pool slots are held after the storm than after calm traffic, resident
//! memory is back within 64 MiB of its level before. The normal calls' p99
//! beside the storm against a run with an ordinary third client (see
//! [`phase`]) is printed, and is a failure of `cargo xtask chaos` (which
//! sets `CHAOS_SECS`), not of the ordinary suite (no timed assertions
//! there).
//!
//! `cargo xtask chaos --minutes N` runs each phase for N minutes / 2; the
//! ordinary suite for `CHAOS_SECS` / 2 (10 s by default).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use host_sim::{InvokeError, Limit, SandboxLimits};
use serde_json::{Value, json};
use soak_fixture::{percentile, rss_kib};

/// Hostile invocations: one per this many normal ones.
const RATIO: usize = 10;
const MAX_OUTPUT: usize = 4096;

/// The hostile actions, their input, and what must end each: the error
/// code and, for limits, which one.
fn hostile() -> Vec<(&'static str, Value, &'static str, Option<Limit>)> {
    vec![
        (
            "loop.forever",
            json!({}),
            "limit_exceeded",
            Some(Limit::Deadline),
        ),
        (
            "memory.unbounded",
            json!({}),
            "limit_exceeded",
            Some(Limit::Memory),
        ),
        (
            "calls.flood",
            json!({}),
            "limit_exceeded",
            Some(Limit::HostCalls),
        ),
        (
            "docs.get",
            json!({"collection": "items", "id": "big"}),
            "limit_exceeded",
            Some(Limit::OutputBytes),
        ),
        (
            "http.ungranted_binding",
            json!({}),
            "binding_capability_denied",
            None,
        ),
    ]
}

fn limit_of(result: &Result<Value, InvokeError>) -> Option<Limit> {
    match result {
        Err(InvokeError::LimitExceeded { limit, .. }) => Some(*limit),
        _ => None,
    }
}

struct Phase {
    normal: Vec<u64>,
    failed_normal: Vec<String>,
    hostile: usize,
    wrong_hostile: Vec<String>,
}

/// Normal traffic measured on two threads for `length`, and a third client
/// beside them: hostile calls mixed in at one per [`RATIO`] normal ones
/// when `storm`, ordinary calls back to back otherwise. So both runs have
/// three busy clients on the machine's cores, and the storm's p99 against
/// the calm one's shows what hostility costs the neighbours, not what a
/// third client costs on a 2-core machine.
fn phase(env: &TestEnv, token: &str, length: Duration, storm: bool) -> Phase {
    let stop = Arc::new(AtomicBool::new(false));
    let normal_count = Arc::new(AtomicUsize::new(0));
    let normal: Vec<_> = (0..2)
        .map(|_| {
            let (host, token, stop, count) = (
                env.host.clone(),
                token.to_string(),
                stop.clone(),
                normal_count.clone(),
            );
            std::thread::spawn(move || {
                let (mut micros, mut failed) = (Vec::new(), Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let invocation = host.invoke(
                        &host_sim::Caller::bearer(token.clone()),
                        &host_sim::InvokeRequest {
                            extension: EXTENSION.into(),
                            project: "p1".into(),
                            action: "docs.read_one".into(),
                            input: json!({}),
                            generation: None,
                        },
                    );
                    micros.push(started.elapsed().as_micros() as u64);
                    if let Err(e) = &invocation.result {
                        failed.push(format!("{e:?}"));
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                }
                (micros, failed)
            })
        })
        .collect();
    let (mut hostile_calls, mut wrong) = (0, Vec::new());
    let started = Instant::now();
    let actions = hostile();
    while started.elapsed() < length {
        if !storm {
            // The same three busy clients as in the storm, the third one
            // ordinary: its calls are not measured.
            let _ = env.invoke(token, "p1", "docs.read_one", json!({}));
            continue;
        }
        if normal_count.load(Ordering::Relaxed) < RATIO * (hostile_calls + 1) {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        let (action, input, code_wanted, limit) = &actions[hostile_calls % actions.len()];
        let began = Instant::now();
        let invocation = env.invoke(token, "p1", action, input.clone());
        let took = began.elapsed();
        hostile_calls += 1;
        // Within its limit: the deadline bounds every invocation.
        let in_time = took <= env.limits.deadline + Duration::from_secs(2);
        // The deadline bounds every invocation, so a hostile guest stopped
        // by it before its own limit (an allocation bomb on a machine too
        // busy to fill its memory in 500 ms) was stopped as documented.
        let got = limit_of(&invocation.result);
        let limit_ok = got == *limit || (limit.is_some() && got == Some(Limit::Deadline));
        if code(&invocation) != *code_wanted || !limit_ok || !in_time {
            wrong.push(format!(
                "{action}: {:?} after {took:?}",
                invocation.result.as_ref().err()
            ));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (mut micros, mut failed) = (Vec::new(), Vec::new());
    for thread in normal {
        let (m, f) = thread.join().unwrap();
        micros.extend(m);
        failed.extend(f);
    }
    Phase {
        normal: micros,
        failed_normal: failed,
        hostile: hostile_calls,
        wrong_hostile: wrong,
    }
}

#[test]
fn a_storm_of_hostile_guests_leaves_the_host_serving() {
    let secs: u64 = std::env::var("CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let strict = std::env::var("CHAOS_SECS").is_ok();
    let length = Duration::from_secs(secs / 2).max(Duration::from_secs(2));
    // The process's log capture keeps warnings only: at the suite's trace
    // level every one of the hundreds of thousands of calls adds lines to
    // an in-memory buffer, and the memory measured would be the test's.
    log_capture::capture("warn");
    let env = TestEnv::with_limits(SandboxLimits {
        deadline: Duration::from_millis(500),
        max_output_bytes: MAX_OUTPUT,
        ..test_limits()
    });
    let token = env.ready("p1");
    for (id, body) in [
        ("one", json!(1)),
        ("big", json!("x".repeat(2 * MAX_OUTPUT))),
    ] {
        let written = env.invoke(&token, "p1", "docs.write", json!({"id": id, "body": body}));
        assert_eq!(code(&written), "ok", "{:?}", written.result);
    }
    // Warm-up: every slot's first instantiation, the caches.
    let _ = phase(&env, &token, Duration::from_secs(1), true);
    let me = std::process::id();
    let rss_before = rss_kib(me);
    let calm = phase(&env, &token, length, false);
    // Slots held between invocations by design: finished stores waiting
    // for a binding wait to drop them (at most 4) and one prepared store.
    let slots_calm = env.host.pool_gauges().slots_in_use;
    let rss_calm = rss_kib(me);
    let storm = phase(&env, &token, length, true);
    std::thread::sleep(Duration::from_millis(500));
    let rss_after = rss_kib(me);
    let slots = env.host.pool_gauges().slots_in_use;
    let (calm_p99, storm_p99) = (
        percentile(&calm.normal, 99.0),
        percentile(&storm.normal, 99.0),
    );

    println!("\nhost-sim storm: {length:?} per phase, 1 hostile call per {RATIO} normal");
    println!("{:<44} {:>10} {:>10}", "", "calm", "storm");
    println!(
        "{:<44} {:>10} {:>10}",
        "normal invocations",
        calm.normal.len(),
        storm.normal.len()
    );
    println!(
        "{:<44} {:>10} {:>10}",
        "hostile invocations", calm.hostile, storm.hostile
    );
    println!(
        "{:<44} {:>10} {:>10}",
        "normal p99 (µs)", calm_p99, storm_p99
    );
    println!(
        "anonymous resident memory: {} MiB before the calm run, {} MiB after it, {} MiB after the storm; slots held after the calm run {slots_calm}, after the storm {slots}",
        rss_before / 1024,
        rss_calm / 1024,
        rss_after / 1024
    );
    let ratio = storm_p99 as f64 / calm_p99.max(1) as f64;
    let checks = [
        (
            "every hostile call ended with its documented error in time",
            storm.wrong_hostile.is_empty() && storm.hostile > 0,
        ),
        (
            "every normal call succeeded",
            calm.failed_normal.is_empty() && storm.failed_normal.is_empty(),
        ),
        (
            "no more pool slots held after the storm than after the calm run",
            slots <= slots_calm,
        ),
        (
            "resident memory back within 64 MiB of its level",
            rss_after <= rss_before + 64 * 1024,
        ),
        (
            "normal p99 beside the storm within 2x of the calm run",
            ratio <= 2.0,
        ),
    ];
    println!("{:<60} {:>6}", "invariant", "held");
    for (name, held) in &checks {
        println!("{name:<60} {held:>6}");
    }
    println!("normal p99 ratio storm/calm: {ratio:.2}");
    assert!(
        storm.wrong_hostile.is_empty(),
        "hostile calls: {:?}",
        storm.wrong_hostile
    );
    assert!(storm.hostile > 0, "hostile calls were made");
    assert!(
        calm.failed_normal.is_empty() && storm.failed_normal.is_empty(),
        "normal calls failed: {:?} {:?}",
        calm.failed_normal.first(),
        storm.failed_normal.first()
    );
    assert!(
        slots <= slots_calm,
        "pool slots leaked: {slots_calm} held after the calm run, {slots} after the storm"
    );
    // A pooled slot keeps at most `KEEP_RESIDENT_BYTES` (4 MiB) of what its
    // guest touched (`sandbox/mod.rs`); before, an allocation bomb's slot
    // kept its whole memory limit resident (74 → 386 MiB in this test).
    assert!(
        rss_after <= rss_before + 64 * 1024,
        "anonymous resident memory grew from {rss_before} to {rss_after} KiB"
    );
    if strict {
        assert!(
            ratio <= 2.0,
            "normal p99 beside the storm is {ratio:.2} times the calm run's"
        );
    }
}

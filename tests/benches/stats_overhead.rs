//! What the extension host adds to a stats call.
//!
//! Measures, in one run and interleaved, (a) `analytics.stats` with
//! `unit=day` through host-sim's invocation function (checks, sandbox, the
//! real component, documents, the `provider` binding, the Umami fake) and
//! (b) the same two provider requests the plugin makes (stats, then page
//! views per day) sent straight to the fake with the binding's own
//! keep-alive HTTP client, built by the same function
//! (`host_sim::capabilities::http::client`) and driven the same way
//! (`BindingClient::block_on` on the calling thread), so both sides use the
//! same transport and the difference is what the host adds. Prints p50 and
//! p99 of each, the difference of the p50s and their ratio (target: below
//! 1.1×, at most 30 µs added). The difference is the steadier figure: the direct path is mostly
//! waiting on loopback round trips, which a busy machine stretches, and a
//! slower baseline flatters the ratio. It reports; it does not assert timing.
//!
//! `cargo bench -p workspace-tests --bench stats_overhead`

#[path = "../support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::Platform;
use uuid::Uuid;

const WARM_UP: usize = 100;
/// Interleaved samples per path; `STATS_OVERHEAD_SAMPLES` overrides it
/// (a long run is what a profiler wants).
fn samples() -> usize {
    std::env::var("STATS_OVERHEAD_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(1_000)
}

/// The provider requests of one stats call, sent directly.
struct Direct {
    client: host_sim::capabilities::http::BindingClient,
    origin: String,
    authorization: String,
    website: Uuid,
}

impl Direct {
    fn get(&self, path: &str, query: &str) -> Value {
        let body = self.client.block_on(async {
            let response = self
                .client
                .http()
                .get(format!("{}{path}?{query}", self.origin))
                .header("Authorization", &self.authorization)
                .header("Accept", "application/json")
                .send()
                .await
                .expect("the fake answers");
            assert_eq!(response.status(), 200, "{path}");
            response.bytes().await.expect("a body")
        });
        serde_json::from_slice(&body).expect("JSON")
    }

    /// Totals and the per-day series of `[start, end)`.
    fn stats(&self, start: i64, end: i64) -> (Value, Value) {
        let base = format!("/api/websites/{}", self.website);
        let totals = self.get(
            &format!("{base}/stats"),
            &format!("startAt={start}&endAt={end}"),
        );
        let daily = self.get(
            &format!("{base}/pageviews"),
            &format!("startAt={start}&endAt={end}&unit=day&timezone=UTC"),
        );
        (totals, daily)
    }
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let platform = Platform::start(
        "bench-shop",
        "bench-provider-secret",
        Duration::from_secs(5),
    );
    // A week of traffic: 40 page views a day from 8 visitors.
    let support::Week {
        website,
        start,
        end,
    } = platform.provision_with_week("Bench Shop", "bench.example.com");

    let direct = Direct {
        client: host_sim::capabilities::http::client().expect("the binding's HTTP client"),
        origin: platform.fake.base_url(),
        authorization: format!("Bearer {}", platform.secret),
        website,
    };
    let input = json!({"start_at": start, "end_at": end, "unit": "day"});
    let through_host = || {
        let invocation = platform.invoke("analytics.stats", input.clone());
        invocation.result.expect("stats through the host")
    };

    // Both paths see the same data.
    let hosted = through_host();
    let (totals, _) = direct.stats(start, end);
    assert_eq!(hosted["pageviews"], totals["pageviews"]);
    assert_eq!(hosted["pageviews"], 7 * 40);

    let samples = samples();
    let mut host_times = Vec::with_capacity(samples);
    let mut direct_times = Vec::with_capacity(samples);
    for round in 0..WARM_UP + samples {
        // Alternate which path goes first so neither always follows the other.
        let mut timings = [Duration::ZERO; 2];
        for step in 0..2 {
            let host_turn = (round + step) % 2 == 0;
            let started = Instant::now();
            if host_turn {
                std::hint::black_box(through_host());
            } else {
                std::hint::black_box(direct.stats(start, end));
            }
            timings[usize::from(!host_turn)] = started.elapsed();
        }
        if round >= WARM_UP {
            host_times.push(timings[0]);
            direct_times.push(timings[1]);
        }
    }
    host_times.sort();
    direct_times.sort();

    let (host_p50, direct_p50) = (percentile(&host_times, 50), percentile(&direct_times, 50));
    println!(
        "stats_overhead: analytics.stats unit=day over 7 days, {samples} interleaved samples after {WARM_UP} warm-up rounds"
    );
    println!(
        "  direct to the provider (stats + pageviews, keep-alive): p50 {}  p99 {}",
        ms(direct_p50),
        ms(percentile(&direct_times, 99))
    );
    println!(
        "  through host-sim (invoke -> component -> binding -> provider): p50 {}  p99 {}",
        ms(host_p50),
        ms(percentile(&host_times, 99))
    );
    println!(
        "  added by the host (p50 difference): {:.0} µs",
        (host_p50.as_secs_f64() - direct_p50.as_secs_f64()) * 1e6
    );
    println!(
        "  ratio of p50s (host / direct): {:.2}x  (target <= 1.1x)",
        host_p50.as_secs_f64() / direct_p50.as_secs_f64()
    );
}

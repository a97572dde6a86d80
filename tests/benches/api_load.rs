//! The extension API under load from a second process.
//!
//! Starts the Umami fake and `host-sim serve`'s router in this process (the
//! release installed, approved, granted, bound; a week of recorded page
//! views), then runs `wrk` (a separate process, on loopback) against, in
//! one run and in this order:
//!
//! 1. `GET /healthz` on the same server: the HTTP stack alone (baseline);
//! 2. the provider fake's own stats endpoint, sent straight to it;
//! 3. `GET …/api/configuration` (checks, sandbox, the component, a document);
//! 4. `GET …/api/stats?…&unit=day` (the above plus two provider calls).
//!
//! Prints requests per second and p50/p99 latency of each, and each API
//! route's throughput as a ratio of the baselines. It reports; it does not
//! assert timing. Needs `wrk` (Debian: `apt-get install wrk`).
//!
//! Metrics on and off in the same run: the API routes are measured against
//! two servers in child processes of this same binary (the recorder is
//! global to a process), one without the Prometheus recorder (as `serve`
//! without `--metrics-listen`) and one with the recorder and the operator
//! listener on (`serve --metrics-listen`). Short slices alternate between
//! the two, the order swapped every pair, so a drift of the machine's
//! background load falls on both alike; per route it prints the ratio
//! on/off of the throughput over all slices and of the servers' CPU time
//! per request (from `/proc/<pid>/stat`, which background load does not
//! inflate as it does wall time). A server process keeps a speed of its
//! own for its life, so the slices are spread over `API_LOAD_EPOCHS`
//! (default 3) fresh pairs of processes.
//!
//! `cargo bench -p workspace-tests --bench api_load`
//! (`API_LOAD_SECONDS`, `API_LOAD_CONNECTIONS` change the defaults 10 and 16.)

#[path = "../support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use soak_fixture::cpu_seconds;
use support::Platform;
use support::env_number;
use support::wrk::{Figures, merge, wrk};

/// Set in the child process that serves with metrics on.
const ROLE: &str = "API_LOAD_ROLE";

/// A platform with a week of page views, served; the URLs and headers of
/// its two API routes.
struct Routes {
    configuration: String,
    stats: String,
    bearer: String,
}

fn provision(platform: &Platform, served: &support::Served) -> (Routes, support::Week) {
    let api = platform.api_base(served);
    let week = platform.provision_with_week("Load Shop", "load.example.com");
    let range = format!("start_at={}&end_at={}", week.start, week.end);
    (
        Routes {
            configuration: format!("{api}/configuration"),
            stats: format!("{api}/stats?{range}&unit=day"),
            bearer: format!("Bearer {}", platform.token),
        },
        week,
    )
}

/// The child: serves (with metrics on when its role says so) and prints
/// its routes until its stdin closes.
fn serve_child(metrics: bool) {
    let platform = Platform::start("load-shop", "load-provider-secret", Duration::from_secs(5));
    let served = if metrics {
        platform.serve_with_metrics()
    } else {
        platform.serve()
    };
    let (routes, _) = provision(&platform, &served);
    println!("configuration {}", routes.configuration);
    println!("stats {}", routes.stats);
    println!("bearer {}", routes.bearer);
    println!("metrics {}", served.metrics.as_deref().unwrap_or_default());
    println!("ready");
    let _ = std::io::stdout().flush();
    let mut rest = String::new();
    let _ = std::io::stdin().read_line(&mut rest);
}

/// A server in a child process of this binary, and its routes.
struct Child {
    process: std::process::Child,
    routes: Routes,
    metrics: String,
}

impl Child {
    fn start(role: &str) -> Child {
        let mut process = Command::new(std::env::current_exe().expect("this bench's path"))
            .env(ROLE, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("a server child starts");
        let mut lines = BufReader::new(process.stdout.take().unwrap()).lines();
        let mut said = std::collections::HashMap::new();
        for line in lines.by_ref().map_while(Result::ok) {
            if line == "ready" {
                break;
            }
            if let Some((key, value)) = line.split_once(' ') {
                said.insert(key.to_string(), value.to_string());
            }
        }
        let field = |name: &str| {
            said.get(name)
                .cloned()
                .unwrap_or_else(|| panic!("the {role} server did not say its {name}"))
        };
        Child {
            routes: Routes {
                configuration: field("configuration"),
                stats: field("stats"),
                bearer: field("bearer"),
            },
            metrics: said.get("metrics").cloned().unwrap_or_default(),
            process,
        }
    }

    /// The process's CPU time so far (user and system), in seconds.
    fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.process.id())
    }

    fn stop(mut self) {
        drop(self.process.stdin.take());
        let _ = self.process.wait();
    }
}

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        return serve_child(role == "metrics-on");
    }
    let seconds = env_number("API_LOAD_SECONDS", 10);
    let connections = env_number("API_LOAD_CONNECTIONS", 16);
    let epochs = env_number("API_LOAD_EPOCHS", 3).max(1);

    let platform = Platform::start("load-shop", "load-provider-secret", Duration::from_secs(5));
    let served = platform.serve();
    let (_, week) = provision(&platform, &served);
    let provider = vec![("Authorization", format!("Bearer {}", platform.secret))];
    let baselines = [
        (
            "GET /healthz (no invocation)",
            format!("{}/healthz", served.base_url),
            vec![],
        ),
        (
            "provider fake stats, direct",
            format!(
                "{}/api/websites/{}/stats?startAt={}&endAt={}",
                platform.fake.base_url(),
                week.website,
                week.start,
                week.end
            ),
            provider,
        ),
    ];
    let mut results = Vec::new();
    for (label, url, headers) in &baselines {
        results.push((
            label.to_string(),
            wrk(label, url, headers, seconds, connections),
        ));
    }
    // Each API route: off and on in alternating 2-second slices, `seconds`
    // in all per variant, the order swapped every pair. A server process
    // keeps a speed of its own for its life (where its memory landed, which
    // core it favours: ±4 % between two starts of the same build), so the
    // slices are spread over `epochs` fresh pairs of processes.
    let slice = 2.min(seconds).max(1);
    let pairs_per_epoch = (seconds / slice / epochs).max(1);
    let pairs = pairs_per_epoch * epochs;
    let routes: [(&str, fn(&Routes) -> String); 2] = [
        ("GET /configuration", |r| r.configuration.clone()),
        ("GET /stats (unit=day, 7 days)", |r| r.stats.clone()),
    ];
    // Per route: the slices off and on, and the servers' CPU seconds.
    let mut measured: Vec<(Vec<Figures>, Vec<Figures>, [f64; 2])> = routes
        .iter()
        .map(|_| (Vec::new(), Vec::new(), [0.0; 2]))
        .collect();
    let mut recorded = Vec::new();
    for epoch in 0..epochs {
        eprintln!("… epoch {} of {epochs}: two fresh servers", epoch + 1);
        let off = Child::start("metrics-off");
        let on = Child::start("metrics-on");
        for ((route, url_of), (without, with, cpu)) in routes.iter().zip(&mut measured) {
            for pair in 0..pairs_per_epoch {
                for metrics_on in [pair % 2 == 1, pair % 2 == 0] {
                    let server = if metrics_on { &on } else { &off };
                    let label =
                        format!("{route}, metrics {}", if metrics_on { "on" } else { "off" });
                    let headers = [("Authorization", server.routes.bearer.clone())];
                    let cpu_before = server.cpu_seconds();
                    let figures = wrk(
                        &label,
                        &url_of(&server.routes),
                        &headers,
                        slice,
                        connections,
                    );
                    cpu[usize::from(metrics_on)] += server.cpu_seconds() - cpu_before;
                    if metrics_on {
                        with.push(figures);
                    } else {
                        without.push(figures);
                    }
                }
            }
        }
        // What the metrics-on server recorded (and that it did record).
        let exposition = reqwest::blocking::get(format!("http://{}/metrics", on.metrics))
            .and_then(|r| r.text())
            .expect("the metrics-on server's /metrics");
        recorded = exposition
            .lines()
            .filter(|l| l.starts_with("host_sim_invocations_total{"))
            .map(str::to_string)
            .collect();
        assert!(!recorded.is_empty(), "metrics were not on:\n{exposition}");
        off.stop();
        on.stop();
    }
    let mut ratios = Vec::new();
    for ((route, _), (without, with, cpu)) in routes.iter().zip(&measured) {
        let (without, with) = (merge(without), merge(with));
        let cpu_per_request = |cpu: f64, figures: &Figures| cpu * 1e6 / figures.requests as f64;
        let (cpu_off, cpu_on) = (
            cpu_per_request(cpu[0], &without),
            cpu_per_request(cpu[1], &with),
        );
        ratios.push((
            route,
            with.requests_per_sec / without.requests_per_sec,
            cpu_off,
            cpu_on,
        ));
        results.push((format!("{route}, metrics off"), without));
        results.push((format!("{route}, metrics on"), with));
    }

    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "api_load: wrk from a second process, {connections} connections, 2 threads, {seconds} s per baseline, {pairs} slices of {slice} s per route and variant over {epochs} pairs of server processes, loopback"
    );
    let _ = writeln!(out, "| route | requests/s | p50 | p99 |");
    let _ = writeln!(out, "|---|---|---|---|");
    for (label, figures) in &results {
        let _ = writeln!(
            out,
            "| {label} | {:.0} | {:.3} ms | {:.3} ms |",
            figures.requests_per_sec, figures.p50_ms, figures.p99_ms
        );
    }
    let healthz = results[0].1.requests_per_sec;
    let direct = results[1].1.requests_per_sec;
    for (label, figures) in &results[2..] {
        let _ = writeln!(
            out,
            "{label}: {:.3} of /healthz throughput, {:.3} of the direct provider's",
            figures.requests_per_sec / healthz,
            figures.requests_per_sec / direct
        );
    }
    for (route, ratio, cpu_off, cpu_on) in ratios {
        let _ = writeln!(
            out,
            "{route}: metrics on / off throughput {ratio:.3}; server CPU per request {cpu_off:.1} µs off, {cpu_on:.1} µs on ({:.3})",
            cpu_on / cpu_off
        );
    }
    for line in recorded {
        let _ = writeln!(out, "recorded by the last metrics-on server: {line}");
    }
}

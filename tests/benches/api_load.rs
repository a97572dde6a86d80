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
//! `cargo bench -p workspace-tests --bench api_load`
//! (`API_LOAD_SECONDS`, `API_LOAD_CONNECTIONS` change the defaults 10 and 16.)

#[path = "../support/mod.rs"]
mod support;

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use support::Platform;

/// One wrk run's figures.
struct Figures {
    requests_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    non_2xx: u64,
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// wrk's latency figures are like `1.23ms`, `870.00us`, `1.02s`.
fn parse_latency(text: &str) -> Option<f64> {
    let (number, factor) = if let Some(n) = text.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1e3)
    } else {
        return None;
    };
    number.parse::<f64>().ok().map(|n| n * factor)
}

fn parse_wrk(output: &str) -> Option<Figures> {
    let mut figures = Figures {
        requests_per_sec: 0.0,
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
        non_2xx: 0,
    };
    for line in output.lines().map(str::trim) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["Requests/sec:", value] => figures.requests_per_sec = value.parse().ok()?,
            ["50%", value] => figures.p50_ms = parse_latency(value)?,
            ["99%", value] => figures.p99_ms = parse_latency(value)?,
            ["Non-2xx", "or", "3xx", "responses:", value] => {
                figures.non_2xx = value.parse().ok()?
            }
            _ => {}
        }
    }
    (figures.requests_per_sec > 0.0).then_some(figures)
}

/// Runs wrk against `url` with `headers`, printing progress.
fn wrk(
    label: &str,
    url: &str,
    headers: &[(&str, String)],
    seconds: u64,
    connections: u64,
) -> Figures {
    eprintln!("… {label}: wrk {seconds} s, {connections} connections");
    let mut command = Command::new("wrk");
    command
        .arg("--latency")
        .arg("--threads")
        .arg("2")
        .arg("--connections")
        .arg(connections.to_string())
        .arg("--duration")
        .arg(format!("{seconds}s"));
    for (name, value) in headers {
        command.arg("--header").arg(format!("{name}: {value}"));
    }
    let output = command.arg(url).output().unwrap_or_else(|e| {
        panic!("wrk could not run ({e}); install it (Debian: `apt-get install wrk`)")
    });
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "wrk failed: {}{}",
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    let figures = parse_wrk(&stdout).unwrap_or_else(|| panic!("unreadable wrk output:\n{stdout}"));
    assert_eq!(
        figures.non_2xx, 0,
        "{label}: some answers were errors:\n{stdout}"
    );
    figures
}

fn main() {
    let seconds = env_number("API_LOAD_SECONDS", 10);
    let connections = env_number("API_LOAD_CONNECTIONS", 16);
    let platform = Platform::start("load-shop", "load-provider-secret", Duration::from_secs(5));
    let served = platform.serve();
    let api = platform.api_base(&served);
    let support::Week {
        website,
        start,
        end,
    } = platform.provision_with_week("Load Shop", "load.example.com");

    let bearer = vec![("Authorization", format!("Bearer {}", platform.token))];
    let provider = vec![("Authorization", format!("Bearer {}", platform.secret))];
    let range = format!("start_at={start}&end_at={end}");
    let runs = [
        (
            "GET /healthz (same server, no invocation)",
            format!("{}/healthz", served.base_url),
            vec![],
        ),
        (
            "provider fake stats, direct",
            format!(
                "{}/api/websites/{website}/stats?startAt={start}&endAt={end}",
                platform.fake.base_url()
            ),
            provider,
        ),
        (
            "GET /configuration",
            format!("{api}/configuration"),
            bearer.clone(),
        ),
        (
            "GET /stats (unit=day, 7 days)",
            format!("{api}/stats?{range}&unit=day"),
            bearer,
        ),
    ];
    let mut results = Vec::new();
    for (label, url, headers) in &runs {
        results.push((*label, wrk(label, url, headers, seconds, connections)));
    }

    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "api_load: wrk from a second process, {connections} connections, 2 threads, {seconds} s per route, loopback"
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
}

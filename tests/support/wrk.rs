//! wrk from a second process, as the load benchmarks run it: its figures
//! and slices merged (a server's CPU time is `soak_fixture::cpu_seconds`).

use std::process::Command;

/// One wrk run's figures.
pub struct Figures {
    pub requests_per_sec: f64,
    pub requests: u64,
    pub seconds: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub non_2xx: u64,
}

/// wrk's durations are like `1.23ms`, `870.00us`, `1.02s`, `1.00m`; in
/// milliseconds.
fn parse_latency(text: &str) -> Option<f64> {
    let (number, factor) = if let Some(n) = text.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1e3)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60e3)
    } else {
        return None;
    };
    number.parse::<f64>().ok().map(|n| n * factor)
}

fn parse_wrk(output: &str) -> Option<Figures> {
    let mut figures = Figures {
        requests_per_sec: 0.0,
        requests: 0,
        seconds: 0.0,
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
        non_2xx: 0,
    };
    for line in output.lines().map(str::trim) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["Requests/sec:", value] => figures.requests_per_sec = value.parse().ok()?,
            [requests, "requests", "in", elapsed, ..] => {
                figures.requests = requests.parse().ok()?;
                figures.seconds = parse_latency(elapsed.trim_end_matches(','))? / 1e3;
            }
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
pub fn wrk(
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

/// Figures of several slices of one route: throughput over all of them,
/// latency averaged.
pub fn merge(slices: &[Figures]) -> Figures {
    let n = slices.len() as f64;
    let requests = slices.iter().map(|f| f.requests).sum::<u64>();
    let seconds = slices.iter().map(|f| f.seconds).sum::<f64>();
    Figures {
        requests_per_sec: requests as f64 / seconds,
        requests,
        seconds,
        p50_ms: slices.iter().map(|f| f.p50_ms).sum::<f64>() / n,
        p99_ms: slices.iter().map(|f| f.p99_ms).sum::<f64>() / n,
        non_2xx: slices.iter().map(|f| f.non_2xx).sum(),
    }
}

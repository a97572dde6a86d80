//! host-sim against the peer a user would otherwise run: `wasmtime serve`.
//!
//! In one run, under the same wrk load (a second process, loopback, the
//! same connections and threads), in alternating slices:
//!
//! - `wasmtime serve` (wasmtime-cli of the workspace's wasmtime major) on
//!   `http-hello`, the smallest `wasi:http/proxy` component: a fresh
//!   instance per request that answers `Hello, WASI!`;
//! - host-sim's `GET …/api/configuration`: the token checked, the project's
//!   access, the grant, the approved capabilities and the runtime
//!   generation checked, a fresh store, the plugin's run with a document
//!   read, JSON out.
//!
//! Prints each one's requests per second, p50/p99 and CPU time per request
//! (from /proc), and host-sim's ratio to `wasmtime serve` (target ≥ 1.0).
//! It reports; it does not assert timing.
//!
//! Setup (not done by CI): `cargo install wasmtime-cli --version 48.0.8
//! --locked --no-default-features --features
//! run,serve,component-model-async,cranelift,pooling-allocator,parallel-compilation,cache`,
//! `cargo xtask guests http-hello`, `cargo xtask release`, and wrk (Debian:
//! `apt-get install wrk`). `WASMTIME` names another wasmtime binary. (48's
//! `serve` does not build without `component-model-async`; the other
//! default features are left out to halve the build.)
//!
//! `cargo bench -p workspace-tests --bench peer_serve`
//! (`PEER_SECONDS`, default 20 per server in slices of 2 s;
//! `PEER_CONNECTIONS`, default 16.)

#[path = "../support/mod.rs"]
mod support;

use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use soak_fixture::cpu_seconds;
use support::Platform;
use support::env_number;
use support::wrk::{Figures, merge, wrk};

/// The wasmtime major the workspace builds host-sim with (Cargo.toml).
const WASMTIME_MAJOR: &str = "48.";

const SETUP: &str = "cargo install wasmtime-cli --version 48.0.8 --locked --no-default-features \
--features run,serve,component-model-async,cranelift,pooling-allocator,parallel-compilation,cache";

/// `wasmtime serve` on the hello component, until dropped.
struct WasmtimeServe {
    process: std::process::Child,
    url: String,
}

impl WasmtimeServe {
    fn start(wasmtime: &str, component: &std::path::Path) -> WasmtimeServe {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let process = Command::new(wasmtime)
            .arg("serve")
            .arg("--addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg(component)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{wasmtime} serve could not start: {e}"));
        let url = format!("http://127.0.0.1:{port}/");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match reqwest::blocking::get(&url).and_then(|r| r.error_for_status()?.text()) {
                Ok(body) => {
                    assert_eq!(body, "Hello, WASI!", "wasmtime serve answered");
                    break;
                }
                Err(e) if Instant::now() > deadline => {
                    panic!("wasmtime serve did not answer on {url} within 60 s: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        WasmtimeServe { process, url }
    }
}

impl Drop for WasmtimeServe {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Why the bench cannot run, and what to do, or the wasmtime to run.
fn prerequisites(component: &std::path::Path) -> Result<(String, String), String> {
    let wasmtime = std::env::var("WASMTIME").unwrap_or_else(|_| "wasmtime".to_owned());
    let version = Command::new(&wasmtime)
        .arg("--version")
        .output()
        .map_err(|e| format!("`{wasmtime} --version` failed ({e}); install it: {SETUP}"))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    if !version.starts_with(&format!("wasmtime {WASMTIME_MAJOR}")) {
        return Err(format!(
            "{wasmtime} is `{version}`; the peer must be wasmtime {WASMTIME_MAJOR}x, as host-sim's: {SETUP}"
        ));
    }
    if !component.is_file() {
        return Err(format!(
            "{} is missing: run `cargo xtask guests http-hello`",
            component.display()
        ));
    }
    if Command::new("wrk").arg("--version").output().is_err() {
        return Err("wrk is missing (Debian: `apt-get install wrk`)".to_owned());
    }
    Ok((wasmtime, version))
}

fn main() -> ExitCode {
    let seconds = env_number("PEER_SECONDS", 20);
    let connections = env_number("PEER_CONNECTIONS", 16);
    let component = workspace_tests::workspace_root().join("target/guests/http_hello.wasm");
    let (wasmtime, version) = match prerequisites(&component) {
        Ok(found) => found,
        Err(why) => {
            eprintln!("peer_serve cannot run: {why}");
            return ExitCode::from(2);
        }
    };

    let platform = Platform::start("peer-shop", "peer-provider-secret", Duration::from_secs(5));
    let served = platform.serve();
    platform.provision("Peer Shop", "peer.example.com");
    let configuration = format!("{}/configuration", platform.api_base(&served));
    let bearer = [("Authorization", format!("Bearer {}", platform.token))];
    let peer = WasmtimeServe::start(&wasmtime, &component);
    let host_sim_pid = std::process::id();
    let peer_pid = peer.process.id();

    // Warm both (wasmtime compiles the component at start; host-sim's
    // pool and caches fill), then alternate 2-second slices, the order
    // swapped every pair, so a drift of the machine falls on both alike.
    wrk("warm-up, wasmtime serve", &peer.url, &[], 2, connections);
    wrk("warm-up, host-sim", &configuration, &bearer, 2, connections);
    let slice = 2;
    let pairs = (seconds / slice).max(1);
    let (mut ours, mut theirs): (Vec<Figures>, Vec<Figures>) = (Vec::new(), Vec::new());
    let (mut our_cpu, mut their_cpu) = (0.0, 0.0);
    for pair in 0..pairs {
        for host_sim_first in [pair % 2 == 0, pair % 2 == 1] {
            if host_sim_first {
                let before = cpu_seconds(host_sim_pid);
                ours.push(wrk(
                    "host-sim GET /configuration",
                    &configuration,
                    &bearer,
                    slice,
                    connections,
                ));
                our_cpu += cpu_seconds(host_sim_pid) - before;
            } else {
                let before = cpu_seconds(peer_pid);
                theirs.push(wrk(
                    "wasmtime serve hello",
                    &peer.url,
                    &[],
                    slice,
                    connections,
                ));
                their_cpu += cpu_seconds(peer_pid) - before;
            }
        }
    }
    let (ours, theirs) = (merge(&ours), merge(&theirs));
    let per_request = |cpu: f64, figures: &Figures| cpu * 1e6 / figures.requests as f64;
    let (our_us, their_us) = (per_request(our_cpu, &ours), per_request(their_cpu, &theirs));

    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "peer_serve: wrk from a second process, {connections} connections, 2 threads, {pairs} slices of {slice} s per server, loopback; peer: {version} serve (default options) on http-hello"
    );
    let _ = writeln!(
        out,
        "| server | requests/s | p50 | p99 | server CPU per request |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|");
    for (label, figures, cpu) in [
        ("wasmtime serve, hello world", &theirs, their_us),
        ("host-sim GET /configuration", &ours, our_us),
    ] {
        let _ = writeln!(
            out,
            "| {label} | {:.0} | {:.3} ms | {:.3} ms | {cpu:.1} µs |",
            figures.requests_per_sec, figures.p50_ms, figures.p99_ms
        );
    }
    let _ = writeln!(
        out,
        "host-sim / wasmtime serve: throughput {:.3} (target ≥ 1.0), CPU per request {:.3}",
        ours.requests_per_sec / theirs.requests_per_sec,
        our_us / their_us
    );
    ExitCode::SUCCESS
}

//! The tutorial test's process helpers: commands run as from a
//! developer's login shell, the stand-in upstream, the `host-sim` binary.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use workspace_tests::workspace_root;

pub fn run(command: &mut Command) {
    let shown = format!("{command:?}");
    let status = command.status().unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(status.success(), "{shown} failed: {status}");
}

/// Skips (prints why) or, under CI, fails.
pub fn missing(what: &str) -> bool {
    assert!(
        std::env::var_os("CI").is_none(),
        "{what} (CI installs it in .ci/run)"
    );
    eprintln!("SKIPPED: {what}");
    true
}

/// The variables a developer's login shell passes to cargo; every other
/// one is what `cargo test` set for this test (`CARGO_*`, `CARGO_PKG_*`,
/// `CARGO_MANIFEST_DIR`, the workspace's `[env]` such as
/// `LIBSQLITE3_FLAGS`, `RUSTUP_TOOLCHAIN`, `LD_LIBRARY_PATH`, `CI`…), which
/// would make the nested builds use caches no developer can reuse.
pub const SHELL_VARIABLES: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TMPDIR",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "XDG_CACHE_HOME",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// `program` run as from a developer's shell in `dir`: only
/// [`SHELL_VARIABLES`]; what a step sets on purpose (the offline recipe's
/// `CARGO_TARGET_DIR`, `RUSTC`…) it adds itself.
pub fn in_developer_shell(program: &str, dir: &Path) -> Command {
    let mut command = Command::new(program);
    command.current_dir(dir).env_clear();
    for name in SHELL_VARIABLES {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
}

pub fn cargo_component_version() -> Option<String> {
    let output = Command::new("cargo-component")
        .arg("--version")
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

pub fn debian_toolchain_ready() -> bool {
    [
        "/usr/bin/rustc",
        "/usr/bin/cargo",
        "/usr/lib/wasm32-wasi/libc.a",
    ]
    .iter()
    .all(|p| Path::new(p).is_file())
        && Command::new("wasm-ld").arg("--version").output().is_ok()
}

/// Each request an upstream saw: its first line and `Authorization` header.
pub type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// The project's stand-in upstream: serves `dev-upstream/salutation.json`
/// (what the tutorial's `python3 -m http.server` serves) on loopback and
/// records what it sees.
pub fn upstream(project: &Path) -> (String, Seen) {
    let body = std::fs::read_to_string(project.join("dev-upstream/salutation.json")).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            let mut authorization = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("authorization")
                {
                    authorization = value.trim().to_owned();
                }
            }
            record
                .lock()
                .unwrap()
                .push((request_line.trim().to_owned(), authorization));
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (origin, seen)
}

/// `host-sim` as the tutorial runs it (`cargo build -p host-sim`; a
/// workspace test run builds it too).
pub fn host_sim_bin() -> PathBuf {
    let bin = workspace_root().join("target/debug/host-sim");
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo build -p host-sim`",
        bin.display()
    );
    bin
}

pub fn output(command: &mut Command) -> std::process::Output {
    let shown = format!("{command:?}");
    command.output().unwrap_or_else(|e| panic!("{shown}: {e}"))
}

pub fn succeeded(command: &mut Command) -> serde_json::Value {
    let shown = format!("{command:?}");
    let out = output(command);
    assert!(
        out.status.success(),
        "{shown} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{shown}: stdout is not JSON: {e}"))
}

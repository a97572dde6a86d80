//! A plugin developer's first steps: generate an extension from the
//! template (`cargo xtask new-extension`), run its own tests, build the
//! component with `cargo component build --release` (and with the offline
//! recipe: Debian's rustc-web, std built from source), sign it with a key of
//! their own, and see host-sim refuse it until that key is trusted, then
//! install it, run its action against a loopback upstream and keep the
//! binding's secret from the guest.
//!
//! Needs `cargo-component` (`.ci/run` installs the pinned version) and, for
//! the offline build, Debian's `rustc-web` toolchain; without them the test
//! says what is missing and passes, except under `CI`, where it fails. Each
//! build uses its own target directory under `target/new-extension/`, kept
//! between runs, so only the first run compiles the dependencies.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use extension_release::{Manifest, PublisherKey};
use host_sim::{AuthStyle, Caller, Host, HostConfig, InvokeRequest, Secret};
use serde_json::json;
use workspace_tests::workspace_root;

const NAME: &str = "hello-ext";
const ACTION: &str = "hello_ext.greet";
const PROJECT: &str = "tutorial";
const SECRET: &str = "upstream-secret-8d1f";
/// The pinned cargo-component (README, "Your first extension").
const CARGO_COMPONENT: &str = "cargo-component 0.21.1";

fn run(command: &mut Command) {
    let shown = format!("{command:?}");
    let status = command.status().unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(status.success(), "{shown} failed: {status}");
}

/// Skips (prints why) or, under CI, fails.
fn missing(what: &str) -> bool {
    assert!(
        std::env::var_os("CI").is_none(),
        "{what} (CI installs it in .ci/run)"
    );
    eprintln!("SKIPPED: {what}");
    true
}

fn cargo_component_version() -> Option<String> {
    let output = Command::new("cargo-component")
        .arg("--version")
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn debian_toolchain_ready() -> bool {
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
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// A loopback upstream serving `/salutation.json`; records what it sees.
fn upstream(salutation: &'static str) -> (String, Seen) {
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
            let body = json!({ "salutation": salutation }).to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (origin, seen)
}

/// Signs `component` with the project's manifest into a release directory.
fn sign(project: &Path, component: &Path, key: &PublisherKey, out: &Path) {
    let source = std::fs::read_to_string(project.join("manifest.toml")).unwrap();
    let manifest = Manifest::from_toml(&source).unwrap();
    let files = BTreeMap::from([(
        manifest.extension.component.clone(),
        std::fs::read(component).unwrap(),
    )]);
    extension_release::write_release(&source, &files, key, out).unwrap();
}

/// Installs the release signed by a new key: refused until the key is
/// trusted; then runs the action through the host against a loopback
/// upstream whose secret the guest never sees.
fn runs_in_host_sim(project: &Path, component: &Path) {
    let work = tempfile::tempdir().unwrap();
    let key = PublisherKey::generate();
    let release = work.path().join("release");
    sign(project, component, &key, &release);

    let state = work.path().join("state");
    let trust = state.join("trusted-publishers");
    std::fs::create_dir_all(&trust).unwrap();
    let host = Host::open(HostConfig::new(&state)).unwrap();
    let refused = host.install_release(&release, &mut |_| {}).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains(&key.public().key_id().to_string()),
        "refused for the untrusted key: {refused}"
    );
    std::fs::write(
        trust.join(format!("{}.pub", key.public().key_id())),
        key.public().to_line("the developer's key") + "\n",
    )
    .unwrap();
    let installed = host
        .install_release(&release, &mut |_| {})
        .expect("the component is accepted once its publisher is trusted");
    assert_eq!(installed.extension_id, NAME);

    let (origin, seen) = upstream("Hello");
    host.approve(NAME, &[]).unwrap();
    host.grant(NAME, PROJECT).unwrap();
    host.set_binding(
        PROJECT,
        "upstream",
        &origin,
        Secret::new(SECRET),
        AuthStyle::Bearer,
        Duration::from_secs(5),
    )
    .unwrap();
    let token = host
        .issue_token("dev", &[PROJECT.to_owned()], Duration::from_secs(600))
        .unwrap()
        .token;
    let greet = |name: &str| {
        host.invoke(
            &Caller::bearer(&token),
            &InvokeRequest {
                extension: NAME.to_owned(),
                project: PROJECT.to_owned(),
                action: ACTION.to_owned(),
                input: json!({ "name": name }),
                generation: None,
            },
        )
        .result
    };
    assert_eq!(
        greet("Ada").expect("the action runs"),
        json!({ "message": "Hello, Ada!", "count": 1 })
    );
    assert_eq!(greet("Grace").unwrap()["count"], 2, "the counter document");
    let refused = greet(" ").unwrap_err();
    assert_eq!(refused.code(), "invalid_input", "{refused}");
    assert_eq!(refused.to_string(), "name: must not be blank");

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "one upstream request per greeting: {seen:?}");
    for (line, authorization) in seen.iter() {
        assert_eq!(line, "GET /salutation.json HTTP/1.1");
        assert_eq!(
            authorization,
            &format!("Bearer {SECRET}"),
            "the host adds it"
        );
    }
}

fn component_in(target_dir: &Path) -> PathBuf {
    target_dir.join(format!(
        "wasm32-wasip1/release/{}.wasm",
        NAME.replace('-', "_")
    ))
}

#[test]
fn the_host_answers_every_guest_error_code_with_its_status() {
    for code in extension_guest::ErrorCode::ALL {
        let error = host_sim::InvokeError::Action {
            code: code.as_str().to_owned(),
            message: "m".into(),
        };
        assert_eq!(
            host_sim::serve::http_status(&error).as_u16(),
            code.http_status(),
            "{code}"
        );
        assert_eq!(error.code(), code.as_str());
    }
}

#[test]
fn a_generated_extension_tests_builds_and_runs_in_host_sim() {
    let root = workspace_root();
    let xtask = root.join("target/debug/xtask");
    assert!(
        xtask.is_file(),
        "{} is missing: run any `cargo xtask` command (e.g. `cargo xtask --help`) to build it",
        xtask.display()
    );
    let Some(version) = cargo_component_version() else {
        missing(
            "cargo-component is not installed: `cargo install cargo-component --version 0.21.1 --locked`",
        );
        return;
    };
    assert!(
        version.starts_with(CARGO_COMPONENT),
        "the docs pin {CARGO_COMPONENT}; found {version}"
    );

    let work = tempfile::tempdir().unwrap();
    let project = work.path().join(NAME);
    run(Command::new(&xtask)
        .args(["new-extension", NAME, "--dir"])
        .arg(&project));
    let refused = Command::new(&xtask)
        .args(["new-extension", NAME, "--dir"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(!refused.status.success(), "an existing project is kept");

    let targets = root.join("target/new-extension");
    // The template's own tests, natively.
    run(Command::new("cargo")
        .current_dir(&project)
        .args(["test", "--quiet"])
        .env("CARGO_TARGET_DIR", targets.join("native"))
        .env_remove("RUSTFLAGS"));

    // With the active toolchain's wasm32-wasip1 std.
    let online = targets.join("component");
    run(Command::new("cargo")
        .current_dir(&project)
        .args(["component", "build", "--release"])
        .env("CARGO_TARGET_DIR", &online)
        .env_remove("RUSTFLAGS"));
    runs_in_host_sim(&project, &component_in(&online));

    // The offline recipe of the README.
    if !debian_toolchain_ready() {
        missing(
            "Debian's rustc-web toolchain is not installed (`cargo xtask toolchain` with WASM_TOOLCHAIN=debian installs it)",
        );
        return;
    }
    if !Path::new("/usr/lib/rustlib/wasm32-wasip1/lib").is_dir() {
        missing("/usr/lib/rustlib/wasm32-wasip1/lib is missing (`cargo xtask test` creates it)");
        return;
    }
    let offline = targets.join("offline");
    run(Command::new("/usr/bin/cargo")
        .current_dir(&project)
        .args(["component", "build", "--release"])
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_UNSTABLE_BUILD_STD", "std,panic_abort")
        .env("RUSTC", "/usr/bin/rustc")
        .env("CARGO_TARGET_WASM32_WASIP1_LINKER", "wasm-ld")
        .env(
            "CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS",
            "-C link-self-contained=no -L native=/usr/lib/wasm32-wasi",
        )
        .env("CARGO_TARGET_DIR", &offline)
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTUP_TOOLCHAIN"));
    runs_in_host_sim(&project, &component_in(&offline));
}

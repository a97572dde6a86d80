//! Clients written by others, unchanged: Resend's official Node SDK
//! (`resend` on npm, pinned in `tests/sdk/package.json` with its lock file)
//! drives a `mail-service serve` process. Every `tests/sdk/*.test.mjs` runs
//! under node's test runner with the SDK's own `RESEND_BASE_URL` pointing at
//! the server.
//!
//! Needs `node` and `tests/sdk/node_modules` (`cargo xtask test` runs
//! `npm ci` there; by hand: `npm ci --prefix mail-service/tests/sdk`).
//! Without them the test fails when `CI` is set and is skipped loudly
//! otherwise.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Backend, SdkServer, TestDb};

fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk")
}

/// What the SDK test needs and this machine lacks.
fn missing_tools(dir: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !node {
        missing.push("`node` (Debian package nodejs)".to_owned());
    }
    if !dir.join("node_modules/resend/package.json").is_file() {
        missing.push(format!(
            "{}/node_modules/resend (`npm ci` there)",
            dir.display()
        ));
    }
    missing
}

/// The SDK's test files, in name order.
fn test_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("tests/sdk exists")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".test.mjs"))
        .collect();
    files.sort();
    files
}

async fn resend_node_sdk(b: Backend) {
    let dir = sdk_dir();
    let missing = missing_tools(&dir);
    if !missing.is_empty() {
        let message = format!(
            "the SDK test needs {}. `.ci/run` installs nodejs; `cargo xtask test` runs `npm ci` in mail-service/tests/sdk",
            missing.join(", ")
        );
        assert!(std::env::var_os("CI").is_none(), "CI is set: {message}");
        let _ = writeln!(
            std::io::stderr(),
            "\n******** SKIPPED the Resend SDK test: {message} ********\n"
        );
        return;
    }

    let db = TestDb::new(b);
    let (_, full_key) = common::provision_keys(&db).await;
    let sdk = SdkServer::start(&db);
    let server = &sdk.server;
    let files = test_files(&dir);
    assert!(
        !files.is_empty(),
        "{} holds *.test.mjs files",
        dir.display()
    );
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new("node")
            .arg("--test")
            .args(&files)
            .current_dir(&dir)
            .env("RESEND_BASE_URL", &server.base)
            .env("RESEND_API_KEY", &full_key)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the SDK tests finish within 120 s")
    .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("---- node --test mail-service/tests/sdk ----\n{stdout}{stderr}");
    assert!(
        output.status.success(),
        "the Resend SDK tests failed ({}):\n{stdout}{stderr}",
        output.status
    );
    assert!(
        !stdout.contains(&full_key) && !stderr.contains(&full_key),
        "the API key is never echoed"
    );
}

on_both_backends!(resend_node_sdk);

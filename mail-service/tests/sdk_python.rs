//! Clients written by others, unchanged: Resend's official Python SDK
//! (`resend` 2.52.0 on PyPI, pinned with its dependencies in
//! `tests/sdk_python/requirements.txt`) drives a `mail-service serve`
//! process through `tests/sdk_python/test_resend.py`, with the SDK's own
//! `RESEND_API_URL` pointing at the server.
//!
//! Needs the SDK in `target/resend-python-venv` (`cargo xtask test` installs
//! it; by hand: `python3 -m venv target/resend-python-venv &&
//! target/resend-python-venv/bin/pip install -r
//! mail-service/tests/sdk_python/requirements.txt`), or another interpreter
//! with it in `MAIL_RESEND_PYTHON`. Without it the test fails when `CI` is
//! set and is skipped loudly otherwise.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Backend, SdkServer, TestDb};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk_python/test_resend.py")
}

/// The interpreter with the pinned SDK, if this machine has one.
fn python() -> Option<PathBuf> {
    let python = std::env::var_os("MAIL_RESEND_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/resend-python-venv/bin/python")
        });
    let works = Command::new(&python)
        .args([
            "-c",
            "import resend, sys; sys.exit(0 if resend.__version__ == '2.52.0' else 1)",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        return Some(python);
    }
    let message = format!(
        "Resend's Python SDK 2.52.0 is not installed at {}: run `cargo xtask test`, or \
         `python3 -m venv target/resend-python-venv && target/resend-python-venv/bin/pip install -r mail-service/tests/sdk_python/requirements.txt`",
        python.display()
    );
    assert!(std::env::var_os("CI").is_none(), "CI is set: {message}");
    let _ = writeln!(
        std::io::stderr(),
        "\n******** SKIPPED: {message} ********\n"
    );
    None
}

async fn resend_python_sdk(b: Backend) {
    let Some(python) = python() else {
        return;
    };
    let db = TestDb::new(b);
    let (_, full_key) = common::provision_keys(&db).await;
    let sdk = SdkServer::start(&db);
    let server = &sdk.server;
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(&python)
            .arg(script())
            .env("RESEND_API_URL", &server.base)
            .env("RESEND_API_KEY", &full_key)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the Python SDK stories finish within 120 s")
    .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("---- {} ----\n{stdout}{stderr}", script().display());
    assert!(
        output.status.success(),
        "the Resend Python SDK stories failed ({}):\n{stdout}{stderr}",
        output.status
    );
    assert!(stdout.contains("all Python SDK stories passed"), "{stdout}");
    assert!(
        !stdout.contains(&full_key) && !stderr.contains(&full_key),
        "the API key is never echoed"
    );
}

on_both_backends!(resend_python_sdk);

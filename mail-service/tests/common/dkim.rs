//! The independent DKIM verifier of the stories: Python's dkimpy, which
//! fetches the public key from the test's DNS server on loopback with
//! dnspython (`tests/dkim/verify.py`).
//!
//! Needs the verifier in `target/dkim-venv` (`cargo xtask test` installs
//! `tests/dkim/requirements.txt` there) or `MAIL_DKIM_PYTHON` naming a
//! Python that has it. Without it a story is skipped loudly, or fails when
//! `CI` is set.

use std::path::PathBuf;
use std::process::Command;

use dns_fixture::DnsFixture;

/// The Python that has dkimpy, or `None` after saying why (a panic on CI).
pub fn verifier() -> Option<PathBuf> {
    let python = std::env::var_os("MAIL_DKIM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/dkim-venv/bin/python")
        });
    let works = Command::new(&python)
        .args(["-c", "import dkim, dns.resolver"])
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        return Some(python);
    }
    let message = format!(
        "the DKIM verifier (dkimpy) is not installed at {}: run `cargo xtask test`, or \
         `python3 -m venv target/dkim-venv && target/dkim-venv/bin/pip install -r mail-service/tests/dkim/requirements.txt`",
        python.display()
    );
    assert!(std::env::var_os("CI").is_none(), "CI is set: {message}");
    eprintln!("SKIPPED: {message}");
    None
}

/// Runs dkimpy once over every message; whether each one's signature
/// verifies, in order.
pub fn dkimpy_verify_all(python: &PathBuf, messages: &[String], dns: &DnsFixture) -> Vec<bool> {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = messages
        .iter()
        .enumerate()
        .map(|(i, message)| {
            let path = dir.path().join(format!("{i}.eml"));
            std::fs::write(&path, message).unwrap();
            path
        })
        .collect();
    let out = Command::new(python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dkim/verify.py"))
        .args(&files)
        .arg(dns.addr().port().to_string())
        .output()
        .expect("the verifier runs");
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "the verifier failed to run: {said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let verdicts: Vec<bool> = said.lines().map(|line| line.trim() == "pass").collect();
    assert_eq!(
        verdicts.len(),
        messages.len(),
        "one verdict a message: {said}"
    );
    verdicts
}

/// Runs dkimpy on `message`; true when the signature verifies.
pub fn dkimpy_verifies(python: &PathBuf, message: &str, dns: &DnsFixture) -> bool {
    dkimpy_verify_all(python, &[message.to_string()], dns)[0]
}

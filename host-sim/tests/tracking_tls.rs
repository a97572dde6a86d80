//! `wait-tls` against a TLS server on loopback serving certificates made
//! here (rcgen): a wrong name, an expired one, an untrusted one and one
//! near expiry are refused with their reason; a valid certificate that
//! appears after a delay ends the wait; one that never does times out with
//! the last reason (exit code 9 from the CLI).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::tls::{Ca, tls_server};
use time::OffsetDateTime;

use host_sim::tracking::tls::{TlsCheck, TlsOptions, wait};

const HOSTNAME: &str = "track.shop.example";

fn options(address: SocketAddr, roots: &Path) -> TlsOptions {
    TlsOptions {
        address: Some(address),
        roots: Some(roots.to_path_buf()),
        attempt_timeout: Duration::from_secs(2),
        ..TlsOptions::default()
    }
}

#[test]
fn each_wrong_certificate_is_refused_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Test Root");
    let roots = ca.pem_file(dir.path());
    let now = OffsetDateTime::now_utc();
    let stranger = Ca::new("Someone Else's Root");
    for (certificate, reason) in [
        (
            ca.valid_leaf("other.shop.example"),
            "not valid for this hostname",
        ),
        (
            ca.leaf(
                HOSTNAME,
                now - time::Duration::days(90),
                now - time::Duration::days(1),
            ),
            "has expired",
        ),
        (
            stranger.valid_leaf(HOSTNAME),
            "does not chain to a trusted root",
        ),
        (
            ca.leaf(
                HOSTNAME,
                now - time::Duration::days(60),
                now + time::Duration::days(2),
            ),
            "expires within 7 days",
        ),
        (
            ca.leaf(
                HOSTNAME,
                now + time::Duration::days(1),
                now + time::Duration::days(90),
            ),
            "not valid yet",
        ),
    ] {
        let (address, _) = tls_server(certificate);
        let check = TlsCheck::new(HOSTNAME, &options(address, &roots)).unwrap();
        let error = check.once().unwrap_err();
        assert!(error.contains(reason), "{reason}: {error}");
    }
    let (address, _) = tls_server(ca.valid_leaf(HOSTNAME));
    TlsCheck::new(HOSTNAME, &options(address, &roots))
        .unwrap()
        .once()
        .expect("a valid certificate for the hostname");
    // Mozilla's roots (the default) do not know the test root.
    let mut mozilla = options(address, &roots);
    mozilla.roots = None;
    let error = TlsCheck::new(HOSTNAME, &mozilla)
        .unwrap()
        .once()
        .unwrap_err();
    assert!(
        error.contains("does not chain to a trusted root"),
        "{error}"
    );
}

#[test]
fn the_wait_ends_when_a_valid_certificate_appears_and_times_out_when_none_does() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Test Root");
    let roots = ca.pem_file(dir.path());
    let (address, current) = tls_server(ca.valid_leaf("default.ingress.example"));
    let check = TlsCheck::new(HOSTNAME, &options(address, &roots)).unwrap();

    let valid = ca.valid_leaf(HOSTNAME);
    let swap = std::thread::spawn({
        let current = current.clone();
        move || {
            std::thread::sleep(Duration::from_millis(700));
            *current.0.lock().unwrap() = valid;
        }
    });
    let mut reasons = Vec::new();
    let attempts = wait(
        &check,
        Duration::from_secs(10),
        Duration::from_millis(200),
        &mut |attempt, reason| reasons.push((attempt, reason.to_string())),
    )
    .unwrap();
    swap.join().unwrap();
    assert!(attempts >= 2, "{attempts}");
    assert_eq!(
        reasons.len() as u32,
        attempts - 1,
        "one line per failed attempt"
    );
    assert!(
        reasons[0].1.contains("not valid for this hostname"),
        "{reasons:?}"
    );

    *current.0.lock().unwrap() = ca.valid_leaf("still.wrong.example");
    let timeout = wait(
        &check,
        Duration::from_millis(900),
        Duration::from_millis(200),
        &mut |_, _| {},
    )
    .unwrap_err();
    assert!(timeout.attempts >= 2, "{timeout:?}");
    assert!(timeout.last_reason.contains("not valid for this hostname"));
    assert!(
        timeout
            .to_string()
            .contains("no valid certificate for track.shop.example")
    );
}

#[test]
fn the_cli_waits_only_for_a_routed_domain_and_exits_9_with_the_last_reason() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let ca = Ca::new("Test Root");
    let roots = ca.pem_file(dir.path());
    let (address, _) = tls_server(ca.valid_leaf("wrong.example"));
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_host-sim"))
            .arg("--state-dir")
            .arg(&state)
            .args(args)
            .output()
            .unwrap()
    };
    let ok = run(&[
        "tracking-domain",
        "configure",
        "--ingress-target",
        "ingress.provider.example",
    ]);
    assert!(ok.status.success());
    assert!(
        run(&[
            "tracking-domain",
            "add",
            "--project",
            "p1",
            "--hostname",
            HOSTNAME
        ])
        .status
        .success()
    );
    let wait_tls = |timeout: &str| {
        run(&[
            "tracking-domain",
            "wait-tls",
            "--project",
            "p1",
            "--hostname",
            HOSTNAME,
            "--address",
            &address.to_string(),
            "--roots",
            roots.to_str().unwrap(),
            "--timeout",
            timeout,
            "--interval",
            "200ms",
        ])
    };
    let early = wait_tls("1s");
    assert_eq!(early.status.code(), Some(3), "not routed yet");
    assert!(String::from_utf8_lossy(&early.stderr).contains("needs routed"));
    assert!(
        !String::from_utf8_lossy(&early.stderr).contains("waiting up to"),
        "a refused step does not announce a wait first"
    );

    // Route it: verified needs DNS; the state's own steps are what is tested here.
    let host = host_sim::Host::open(host_sim::HostConfig::new(&state)).unwrap();
    host.state()
        .advance_tracking_domain(
            "p1",
            HOSTNAME,
            host_sim::state::Step::Added,
            host_sim::state::Step::Routed,
        )
        .unwrap();
    drop(host);
    let out = wait_tls("1s");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(9), "{stderr}");
    assert!(
        stderr.contains("attempt 1: the certificate is not valid for this hostname"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "last: the certificate is not valid for this hostname; it covers wrong.example"
        ),
        "{stderr}"
    );

    let help = run(&["tracking-domain", "wait-tls", "--help"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("chains to the roots"));
}

#[test]
fn status_shows_the_expiry_and_check_warns_within_14_days() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let ca = Ca::new("Test Root");
    let roots = ca.pem_file(dir.path());
    let now = time::OffsetDateTime::now_utc();
    let (address, current) = tls_server(ca.leaf(
        HOSTNAME,
        now - time::Duration::days(80),
        now + time::Duration::days(10) + time::Duration::hours(1),
    ));
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_host-sim"))
            .arg("--state-dir")
            .arg(&state)
            .args(args)
            .output()
            .unwrap()
    };
    assert!(
        run(&[
            "tracking-domain",
            "configure",
            "--ingress-target",
            "ingress.provider.example"
        ])
        .status
        .success()
    );
    let empty = run(&["tracking-domain", "status"]);
    assert!(
        String::from_utf8_lossy(&empty.stderr).contains("no tracking domains"),
        "{}",
        String::from_utf8_lossy(&empty.stderr)
    );
    assert!(
        run(&[
            "tracking-domain",
            "add",
            "--project",
            "p1",
            "--hostname",
            HOSTNAME
        ])
        .status
        .success()
    );
    let host = host_sim::Host::open(host_sim::HostConfig::new(&state)).unwrap();
    host.state()
        .advance_tracking_domain(
            "p1",
            HOSTNAME,
            host_sim::state::Step::Added,
            host_sim::state::Step::Routed,
        )
        .unwrap();
    drop(host);
    let edge = [
        "--address",
        &address.to_string(),
        "--roots",
        roots.to_str().unwrap(),
    ]
    .map(String::from);
    let with_edge = |base: &[&str]| {
        let args: Vec<&str> = base
            .iter()
            .copied()
            .chain(edge.iter().map(String::as_str))
            .collect();
        run(&args)
    };

    let status = with_edge(&["tracking-domain", "status"]);
    let stderr = String::from_utf8_lossy(&status.stderr);
    assert!(status.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("certificate of {HOSTNAME}: expires "))
            && stderr.contains("(10 days left)"),
        "{stderr}"
    );
    let shown: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(shown[0]["certificate"]["days_left"], 10, "{shown}");

    let check = with_edge(&["tracking-domain", "check"]);
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(10), "{stderr}");
    assert!(stderr.contains("fewer than 14 days"), "{stderr}");

    *current.0.lock().unwrap() = ca.valid_leaf(HOSTNAME);
    let check = with_edge(&["tracking-domain", "check"]);
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("(89 days left)") || stderr.contains("(90 days left)"),
        "{stderr}"
    );

    // A certificate that cannot be checked is a warning too.
    *current.0.lock().unwrap() = ca.valid_leaf("wrong.example");
    let check = with_edge(&["tracking-domain", "check"]);
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(10), "{stderr}");
    assert!(stderr.contains("cannot be checked"), "{stderr}");
}

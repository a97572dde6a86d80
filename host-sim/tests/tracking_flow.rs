//! An operator connects `track.shop.example` to project p1 with the CLI,
//! from `add` to `activate`, then `remove`s it; processes are killed in the
//! middle of the flow and running the step again resumes it. The running
//! host's extension sees the new `tracking_origin` at a new generation.

mod common;

use std::ffi::OsStr;
use std::fmt::Debug;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::tls::{Ca, tls_server};
use common::{Provider, TestEnv};
use dns_fixture::{DnsFixture, Fault, Record};
use host_sim::state::Step;
use serde_json::{Value, json};

const HOSTNAME: &str = "track.shop.example";
const INGRESS: &str = "ingress.provider.example";

fn command<S: AsRef<OsStr>>(state: &Path, args: &[S]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_host-sim"));
    command.arg("--state-dir").arg(state).args(args);
    command
}

fn run<S: AsRef<OsStr> + Debug>(state: &Path, args: &[S]) -> Output {
    command(state, args).output().unwrap()
}

fn succeeds<S: AsRef<OsStr> + Debug>(state: &Path, args: &[S]) -> Output {
    let out = run(state, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Starts `args`, lets it work for `after`, then kills it (SIGKILL): a
/// crash, not a shutdown.
fn killed_after<S: AsRef<OsStr> + Debug>(state: &Path, args: &[S], after: Duration) {
    let mut child: Child = command(state, args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    assert!(
        child.try_wait().unwrap().is_none(),
        "{args:?} was still working when killed"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

fn step(env: &TestEnv) -> Option<Step> {
    env.host
        .state()
        .tracking_domain(HOSTNAME)
        .unwrap()
        .map(|d| d.step)
}

#[test]
fn add_to_activate_and_remove_resume_after_a_killed_process() {
    let env = TestEnv::new();
    let token = env.ready("p1");
    let provider = Provider::start("provider-secret");
    env.bind("p1", &provider);
    let state = env.state_dir();
    let state = state.as_path();
    let dns = DnsFixture::start().unwrap();
    let nameserver = dns.addr().to_string();
    let ca = Ca::new("Test Root");
    let roots_dir = tempfile::tempdir().unwrap();
    let roots = ca.pem_file(roots_dir.path());
    let (tls_address, certificate) = tls_server(ca.valid_leaf("default.ingress.example"));
    let domain = ["--project", "p1", "--hostname", HOSTNAME];
    let with = |extra: &[&str], base: &[&str]| -> Vec<String> {
        [base, &domain[..], extra]
            .concat()
            .into_iter()
            .map(String::from)
            .collect()
    };

    succeeds(
        state,
        &["tracking-domain", "configure", "--ingress-target", INGRESS],
    );
    let added: Value =
        serde_json::from_slice(&succeeds(state, &with(&[], &["tracking-domain", "add"])).stdout)
            .unwrap();
    assert_eq!(step(&env), Some(Step::Added));
    // Steps out of order are refused, and say what comes first.
    let early = run(state, &with(&[], &["tracking-domain", "activate"]));
    assert_eq!(early.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&early.stderr).contains("run `tracking-domain verify` first"));

    // verify is killed while the nameserver keeps it waiting.
    let txt = &added["records"][0];
    dns.set(
        txt["name"].as_str().unwrap(),
        [Record::txt(txt["value"].as_str().unwrap())],
    );
    dns.set(HOSTNAME, [Record::cname(INGRESS)]);
    dns.fault(txt["name"].as_str().unwrap(), Fault::NoAnswer);
    let verify = with(
        &["--nameserver", &nameserver, "--dns-timeout-ms", "20000"],
        &["tracking-domain", "verify"],
    );
    killed_after(state, &verify, Duration::from_millis(800));
    assert_eq!(step(&env), Some(Step::Added), "nothing half-done");
    dns.clear_fault(txt["name"].as_str().unwrap());
    succeeds(state, &verify);
    assert_eq!(step(&env), Some(Step::Verified));

    // plan, then apply exactly that plan.
    let plan = String::from_utf8(succeeds(state, &["tracking-domain", "plan"]).stdout).unwrap();
    let id = plan
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("plan "))
        .unwrap()
        .to_string();
    assert!(
        plan.contains(&format!("+ {HOSTNAME} (project p1)")),
        "{plan}"
    );
    assert_eq!(
        run(state, &["tracking-domain", "apply"]).status.code(),
        Some(2)
    );
    let mistyped = run(
        state,
        &["tracking-domain", "apply", "--yes", "--plan", "3f0c"],
    );
    assert_eq!(mistyped.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&mistyped.stderr).contains("is not a plan id"),
        "{}",
        String::from_utf8_lossy(&mistyped.stderr)
    );
    succeeds(state, &["tracking-domain", "apply", "--yes", "--plan", &id]);
    assert_eq!(step(&env), Some(Step::Routed));
    let nothing = succeeds(state, &["tracking-domain", "plan"]);
    assert!(String::from_utf8_lossy(&nothing.stdout).starts_with("no changes"));
    assert!(
        !String::from_utf8_lossy(&nothing.stderr).contains("apply"),
        "an empty plan suggests nothing to apply"
    );

    // wait-tls is killed while the edge still serves another certificate.
    let tls_address = tls_address.to_string();
    let wait_tls = with(
        &[
            "--address",
            &tls_address,
            "--roots",
            roots.to_str().unwrap(),
            "--timeout",
            "60s",
            "--interval",
            "200ms",
        ],
        &["tracking-domain", "wait-tls"],
    );
    killed_after(state, &wait_tls, Duration::from_millis(800));
    assert_eq!(step(&env), Some(Step::Routed));
    *certificate.0.lock().unwrap() = ca.valid_leaf(HOSTNAME);
    succeeds(state, &wait_tls);
    assert_eq!(step(&env), Some(Step::TlsReady));

    // activate: the extension sees the origin, at a new generation.
    let before = env.host.generation(common::EXTENSION, "p1").unwrap();
    let edge = [
        "--address",
        tls_address.as_str(),
        "--roots",
        roots.to_str().unwrap(),
    ];
    let activated: Value = serde_json::from_slice(
        &succeeds(state, &with(&edge, &["tracking-domain", "activate"])).stdout,
    )
    .unwrap();
    assert_eq!(activated["tracking_origin"], format!("https://{HOSTNAME}"));
    assert_eq!(step(&env), Some(Step::Active));
    let after = env.host.generation(common::EXTENSION, "p1").unwrap();
    assert!(after > before, "activate bumps the runtime generation");
    let stale = env.invoke_at(&token, "p1", "context", json!({}), Some(before));
    assert_eq!(common::code(&stale), "stale_generation");
    let context = env.invoke(&token, "p1", "context", json!({}));
    assert_eq!(
        context.result.as_ref().unwrap()["tracking_origin"],
        format!("https://{HOSTNAME}")
    );
    let status = succeeds(state, &["tracking-domain", "status", "--project", "p1"]);
    let stderr = String::from_utf8_lossy(&status.stderr);
    assert!(stderr.contains("step active"), "{stderr}");
    assert!(stderr.contains("TLS: a valid certificate"), "{stderr}");

    // remove, killed after its first commit: the activation is undone, the
    // routing is still there; remove again finishes in reverse order.
    env.host
        .state()
        .deactivate_tracking_domain("p1", HOSTNAME)
        .unwrap();
    assert_eq!(step(&env), Some(Step::TlsReady));
    let removed = succeeds(
        state,
        &with(&["--removed-from-edge"], &["tracking-domain", "remove"]),
    );
    let stderr = String::from_utf8_lossy(&removed.stderr);
    assert!(
        !stderr.contains("activation undone")
            && stderr.find("routing removed") < stderr.find("domain forgotten"),
        "{stderr}"
    );
    assert_eq!(step(&env), None);
    assert!(env.host.tracking_routes().unwrap().is_empty());
    assert_eq!(
        env.host
            .state()
            .project_settings("p1")
            .unwrap()
            .tracking_origin,
        None
    );

    // The whole way back from active, in one run.
    let started = Instant::now();
    succeeds(state, &with(&[], &["tracking-domain", "add"]));
    succeeds(state, &verify);
    let plan = String::from_utf8(succeeds(state, &["tracking-domain", "plan"]).stdout).unwrap();
    let id = plan
        .lines()
        .last()
        .unwrap()
        .trim_start_matches("plan ")
        .to_string();
    succeeds(state, &["tracking-domain", "apply", "--yes", "--plan", &id]);
    succeeds(state, &wait_tls);
    succeeds(state, &with(&edge, &["tracking-domain", "activate"]));
    let removed = succeeds(
        state,
        &with(&["--removed-from-edge"], &["tracking-domain", "remove"]),
    );
    let stderr = String::from_utf8_lossy(&removed.stderr);
    let order: Vec<usize> = ["activation undone", "routing removed", "domain forgotten"]
        .iter()
        .map(|line| {
            stderr
                .find(line)
                .unwrap_or_else(|| panic!("{line}: {stderr}"))
        })
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{stderr}");
    assert_eq!(
        env.host
            .state()
            .project_settings("p1")
            .unwrap()
            .tracking_origin,
        None
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

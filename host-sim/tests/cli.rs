//! The operator CLI end to end: install a signed release, approve, grant,
//! bind (the secret from stdin, never printed back), issue a token, invoke,
//! and the exit codes of refusals.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::*;
use serde_json::Value;

fn host_sim(state: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_host-sim"))
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("HOST_SIM_TOKEN")
        .env_remove("HOST_SIM_DB")
        .env_remove("HOST_SIM_TRUST_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

#[test]
fn help_lists_the_commands_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let help = host_sim(dir.path(), &["--help"], None);
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    for word in [
        "release",
        "approve",
        "grant",
        "revoke",
        "binding",
        "project",
        "token",
        "invoke",
        "Exit codes",
    ] {
        assert!(text.contains(word), "--help lacks {word}: {text}");
    }
    let usage = host_sim(dir.path(), &["grant", "--extension"], None);
    assert_eq!(usage.status.code(), Some(2));
}

#[test]
fn an_operator_sets_up_an_extension_and_a_developer_invokes_it() {
    let env = TestEnv::new();
    let state = env.state_dir();
    let provider = Provider::start("cli-secret-0a1b2c");
    let release = env.release(MANIFEST, guest_component());
    let release = release.to_str().unwrap();

    let verify = host_sim(&state, &["release", "verify", release], None);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    let install = host_sim(&state, &["release", "install", release], None);
    assert!(
        install.status.success(),
        "{}",
        String::from_utf8_lossy(&install.stderr)
    );
    let progress = String::from_utf8_lossy(&install.stderr);
    assert!(
        progress.contains("verifying the signature") && progress.contains("compiling"),
        "{progress}"
    );
    let list = stdout_json(&host_sim(&state, &["release", "list"], None));
    assert_eq!(list[0]["extension_id"], EXTENSION);

    assert!(
        host_sim(&state, &["approve", EXTENSION], None)
            .status
            .success()
    );
    assert!(
        host_sim(
            &state,
            &["grant", "--extension", EXTENSION, "--project", "p1"],
            None
        )
        .status
        .success()
    );
    let origin = provider.origin();
    let bind = host_sim(
        &state,
        &[
            "binding",
            "set",
            "--project",
            "p1",
            "--name",
            "provider",
            "--origin",
            &origin,
        ],
        Some(&format!("{}\n", provider.secret)),
    );
    assert!(
        bind.status.success(),
        "{}",
        String::from_utf8_lossy(&bind.stderr)
    );
    let show = host_sim(&state, &["binding", "show", "--project", "p1"], None);
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(
        shown.contains(&origin) && shown.contains("\"secret_set\": true"),
        "{shown}"
    );
    for output in [&bind, &show] {
        assert!(!String::from_utf8_lossy(&output.stdout).contains(&provider.secret));
        assert!(!String::from_utf8_lossy(&output.stderr).contains(&provider.secret));
    }
    assert!(
        host_sim(
            &state,
            &[
                "project",
                "set",
                "p1",
                "--tracking-origin",
                "https://t.example.net"
            ],
            None
        )
        .status
        .success()
    );

    let issued = stdout_json(&host_sim(
        &state,
        &[
            "token",
            "issue",
            "--user",
            "dev",
            "--project",
            "p1",
            "--ttl",
            "1h",
        ],
        None,
    ));
    let token = issued["token"].as_str().unwrap().to_string();
    assert!(token.starts_with("hst_"));

    let invoke = |args: &[&str]| {
        let mut all = vec!["invoke", "--token", token.as_str(), "--project", "p1"];
        all.extend_from_slice(args);
        host_sim(&state, &all, None)
    };
    let write = invoke(&[
        "--action",
        "docs.write",
        "--input",
        r#"{"id":"one","body":{"cli":true}}"#,
    ]);
    assert!(
        write.status.success(),
        "{}",
        String::from_utf8_lossy(&write.stdout)
    );
    let read = invoke(&["--action", "docs.read_one"]);
    let body = stdout_json(&read);
    assert_eq!(body["output"]["document"]["body"]["cli"], true);
    let generation = body["generation"].as_u64().unwrap();
    let call = invoke(&[
        "--action",
        "http.leak",
        "--input",
        r#"{"path":"/api/echo"}"#,
    ]);
    assert!(call.status.success());
    assert!(!String::from_utf8_lossy(&call.stdout).contains(&provider.secret));
    assert!(!String::from_utf8_lossy(&call.stderr).contains(&provider.secret));

    // Refusals and their exit codes.
    let stale = invoke(&[
        "--action",
        "docs.read_one",
        "--generation",
        &(generation - 1).to_string(),
    ]);
    assert_eq!(stale.status.code(), Some(4));
    assert_eq!(stdout_json(&stale)["error"]["code"], "stale_generation");
    let invalid = invoke(&["--action", "docs.write", "--input", "{}"]);
    assert_eq!(invalid.status.code(), Some(5));
    let limited = invoke(&["--action", "calls.flood"]);
    assert_eq!(limited.status.code(), Some(6));
    let unknown = host_sim(
        &state,
        &[
            "invoke",
            "--token",
            "hst_wrong",
            "--project",
            "p1",
            "--action",
            "docs.read_one",
        ],
        None,
    );
    assert_eq!(unknown.status.code(), Some(3));
    assert_eq!(stdout_json(&unknown)["error"]["code"], "unauthenticated");
    assert!(
        host_sim(
            &state,
            &["revoke", "--extension", EXTENSION, "--project", "p1"],
            None
        )
        .status
        .success()
    );
    let revoked = invoke(&["--action", "docs.read_one"]);
    assert_eq!(revoked.status.code(), Some(3));
    assert_eq!(stdout_json(&revoked)["error"]["code"], "forbidden");

    // A tampered release is refused with exit code 3.
    let wasm = Path::new(release).join("extension.wasm");
    let mut bytes = std::fs::read(&wasm).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&wasm, bytes).unwrap();
    let tampered = host_sim(&state, &["release", "verify", release], None);
    assert_eq!(tampered.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&tampered.stderr).contains("does not match its SHA-256"));

    let uninstall = host_sim(&state, &["release", "uninstall", EXTENSION], None);
    assert!(uninstall.status.success());
    assert_eq!(
        stdout_json(&host_sim(&state, &["release", "list"], None)),
        Value::Array(vec![])
    );
}

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

#[test]
fn a_publisher_signs_with_a_new_key_that_installs_once_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let key = dir.path().join("keys/publisher.pem");
    let keygen = host_sim(
        &state,
        &[
            "publisher",
            "keygen",
            "--out",
            key.to_str().unwrap(),
            "--comment",
            "Ada's extensions",
        ],
        None,
    );
    assert!(
        keygen.status.success(),
        "{}",
        String::from_utf8_lossy(&keygen.stderr)
    );
    let generated = stdout_json(&keygen);
    let key_id = generated["key_id"].as_str().unwrap().to_owned();
    let public = std::fs::read_to_string(format!("{}.pub", key.display())).unwrap();
    assert!(public.starts_with("ed25519 ") && public.trim_end().ends_with("Ada's extensions"));
    assert!(!state.exists(), "a publisher's commands open no host state");
    let again = host_sim(
        &state,
        &["publisher", "keygen", "--out", key.to_str().unwrap()],
        None,
    );
    assert_eq!(again.status.code(), Some(2), "a key is never overwritten");

    // The staged release: the source manifest and the component.
    let release = dir.path().join("release");
    std::fs::create_dir_all(&release).unwrap();
    std::fs::write(release.join("manifest.toml"), MANIFEST).unwrap();
    std::fs::write(release.join("extension.wasm"), guest_component()).unwrap();
    let release = release.to_str().unwrap();
    let sign = host_sim(
        &state,
        &["release", "sign", release, "--key", key.to_str().unwrap()],
        None,
    );
    assert!(
        sign.status.success(),
        "{}",
        String::from_utf8_lossy(&sign.stderr)
    );
    assert_eq!(stdout_json(&sign)["key_id"], key_id.as_str());
    let resigned = host_sim(
        &state,
        &["release", "sign", release, "--key", key.to_str().unwrap()],
        None,
    );
    assert_eq!(resigned.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&resigned.stderr).contains("[release] table"),
        "{}",
        String::from_utf8_lossy(&resigned.stderr)
    );

    let refused = host_sim(&state, &["release", "install", release], None);
    assert_eq!(refused.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(&format!(
            "signed by key {key_id}, which this host does not trust; to trust it, put the \
             publisher's public key file (the `.pub` that `host-sim publisher keygen` wrote beside \
             the key) into {}",
            state.join("trusted-publishers").display()
        )),
        "{stderr}"
    );
    let trust = state.join("trusted-publishers");
    std::fs::create_dir_all(&trust).unwrap();
    std::fs::copy(format!("{}.pub", key.display()), trust.join("ada.pub")).unwrap();
    let install = host_sim(&state, &["release", "install", release], None);
    assert!(
        install.status.success(),
        "{}",
        String::from_utf8_lossy(&install.stderr)
    );
    let installed = stdout_json(&install);
    assert_eq!(installed["extension_id"], EXTENSION);
    assert_eq!(installed["key_id"], key_id.as_str());
}

/// `GET path` on `base` with a bearer token: the status, the
/// `x-runtime-generation` header and the body.
fn http_get(base: &str, path: &str, token: &str) -> (u16, Option<u64>, String) {
    use std::io::Read;
    let address = base.strip_prefix("http://").unwrap();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let generation = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("x-runtime-generation")
            .then(|| value.trim().parse().ok())?
    });
    (status, generation, body.to_owned())
}

#[test]
fn dev_serves_an_unsigned_build_and_reloads_each_new_build() {
    use std::io::{BufRead, BufReader};
    use std::sync::mpsc;

    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("manifest.toml");
    let component = dir.path().join("build.wasm");
    std::fs::write(&manifest, MANIFEST).unwrap();
    std::fs::write(&component, guest_component()).unwrap();
    let secret = dir.path().join("provider.secret");
    std::fs::write(&secret, "dev-provider-secret\n").unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_host-sim"))
        .args(["dev", "--manifest"])
        .arg(&manifest)
        .arg("--component")
        .arg(&component)
        .arg("--binding")
        .arg(format!(
            "provider=http://127.0.0.1:9,secret-file={}",
            secret.display()
        ))
        .args(["--listen", "127.0.0.1:0", "--poll-ms", "50"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (sender, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    let next = |key: &str| {
        let line = lines
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("no `{key}` line: {e}"));
        line.strip_prefix(&format!("{key} "))
            .unwrap_or_else(|| panic!("expected `{key} …`, got `{line}`"))
            .to_owned()
    };
    let base = next("listening");
    let token = next("token");
    assert_eq!(next("project"), "dev");
    assert_eq!(next("extension"), EXTENSION);

    let api = |route: &str| format!("/v1/plugins/{EXTENSION}/projects/dev/api{route}");
    let (status, first, body) = http_get(&base, &api("/context"), &token);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"project_id\":\"dev\""), "{body}");
    let first = first.unwrap();

    // A new build: the manifest moves the action's route.
    std::fs::write(
        &manifest,
        MANIFEST.replace("route = \"/context\"", "route = \"/whoami\""),
    )
    .unwrap();
    let reloaded: u64 = next("reloaded generation").parse().unwrap();
    assert!(reloaded > first);
    let (status, generation, body) = http_get(&base, &api("/whoami"), &token);
    assert_eq!((status, generation), (200, Some(reloaded)), "{body}");
    assert_eq!(http_get(&base, &api("/context"), &token).0, 404);

    // A broken build is refused; the running one stays.
    std::fs::write(&component, b"not a component").unwrap();
    assert_eq!(
        lines
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap(),
        "reload failed"
    );
    assert_eq!(http_get(&base, &api("/whoami"), &token).0, 200);

    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("development build, unsigned"), "{stderr}");
    assert!(stderr.contains("the new build was refused"), "{stderr}");
    assert!(!stderr.contains("dev-provider-secret"), "{stderr}");
    let state = stderr
        .lines()
        .find(|line| line.starts_with("✓ running"))
        .and_then(|line| line.split_once(") in "))
        .and_then(|(_, rest)| rest.split_once(", generation"))
        .map(|(path, _)| std::path::PathBuf::from(path))
        .expect("the state's path is named");
    assert!(!state.exists(), "the throwaway state is removed at exit");
}

#[test]
fn dev_names_a_malformed_binding() {
    let dir = tempfile::tempdir().unwrap();
    let out = host_sim(
        dir.path(),
        &[
            "dev",
            "--manifest",
            "m.toml",
            "--component",
            "c.wasm",
            "--binding",
            "provider",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`provider` is not NAME=ORIGIN"), "{stderr}");
}

#[test]
fn serve_off_loopback_needs_a_public_url() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_host-sim"))
        .arg("--state-dir")
        .arg(dir.path())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env_remove("HOST_SIM_PUBLIC_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("serve started on 0.0.0.0 without --public-url");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--public-url") && stderr.contains("Host header"),
        "{stderr}"
    );
}

/// Each manifest mistake of docs/manifest.md's examples, as `host-sim dev`
/// refuses it: the file, line and column, the table, and for a JSON Schema
/// the property and the allowed values: the very text the `manifest!`
/// macro shows at build time (both render `ManifestError`).
#[test]
fn dev_locates_a_manifest_mistake_as_the_build_does() {
    const TWO_ACTIONS: &str = include_str!("../release/testdata/two-actions.toml");
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("manifest.toml");
    for (from, to, located) in [
        (
            "mcp_tool = \"plugin__hello_ext__count\"",
            "mcp_tol = \"plugin__hello_ext__count\"",
            ":29:1: [[actions]] #2 (hello_ext.count): unknown field `mcp_tol`, expected one of",
        ),
        (
            "n = { type = \"integer\" }",
            "n = { type = \"integr\" }",
            ":35:25: [[actions]] #2 (hello_ext.count): field `actions[1].input_schema`, at \
             `/properties/n/type`: \"integr\" is not allowed here; allowed: array, boolean, \
             integer, null, number, object, string",
        ),
        (
            "collections = [\"greetings\"]",
            "collections = \"greetings\"",
            ":12:15: [capabilities.documents]: invalid type: string \"greetings\", expected a \
             sequence",
        ),
    ] {
        let bad = TWO_ACTIONS.replace(from, to);
        assert_ne!(bad, TWO_ACTIONS, "{from}");
        std::fs::write(&manifest, &bad).unwrap();
        let out = host_sim(
            &dir.path().join("state"),
            &[
                "dev",
                "--manifest",
                manifest.to_str().unwrap(),
                "--component",
                "absent.wasm",
            ],
            None,
        );
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let rendered = extension_release::Manifest::from_toml(&bad)
            .unwrap_err()
            .render(&manifest);
        assert!(
            rendered.starts_with(&format!("{}{located}", manifest.display())),
            "{rendered}"
        );
        assert!(
            stderr.contains(&format!("manifest refused: {rendered}\n")),
            "{stderr}"
        );
    }
}

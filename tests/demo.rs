//! A newcomer runs the main job, `cargo xtask demo`, as README.md says: it
//! prints the console, API, MCP and mail addresses with ready commands; the
//! mail `curl` it prints sends an email whose `.eml` lands where it says;
//! Ctrl-C stops everything; a rerun keeps the state.
//!
//! The demo runs in a state directory of the test's own (`--dir`) on free
//! ports, so a developer's `.demo/` and running demo are left alone, and
//! with `--prebuilt`: it runs the servers this workspace test run built
//! instead of building them again with the features of a plain build (which
//! would rebuild most dependencies). Everything after the build is the
//! demo a newcomer runs.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use workspace_tests::workspace_root;

/// The command README.md gives for the main job (tests/readme.rs checks
/// that README's command is this one).
pub const COMMAND: &str = "cargo xtask demo";

/// The release step checks the guest builds and may rebuild the panel.
const READY_LIMIT: Duration = Duration::from_secs(10 * 60);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running demo and what it printed up to "Ready".
struct Demo {
    child: Child,
    printed: String,
}

impl Demo {
    fn start(dir: &Path, mail_port: u16) -> Demo {
        let mut words = COMMAND.split_whitespace();
        let mut cmd = Command::new(words.next().unwrap());
        cmd.args(words)
            .arg("--prebuilt")
            .arg("--dir")
            .arg(dir)
            .args(["--port", &free_port().to_string()])
            .args(["--provider-port", &free_port().to_string()])
            .args(["--mail-port", &mail_port.to_string()])
            .current_dir(workspace_root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // Its own group, as a terminal's foreground job: Ctrl-C is a
            // SIGINT to the group.
            .process_group(0);
        let mut child = cmd.spawn().expect("cargo runs");
        let stdout = child.stdout.take().unwrap();
        let (lines, received) = mpsc::channel();
        std::thread::spawn(move || {
            // Read to the end, also once nobody waits for lines any more:
            // a closed pipe would fail the demo's next print.
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                println!("demo| {line}");
                let _ = lines.send(line);
            }
        });
        let started = Instant::now();
        let mut printed = String::new();
        loop {
            let left = READY_LIMIT.saturating_sub(started.elapsed());
            match received.recv_timeout(left) {
                Ok(line) => {
                    printed.push_str(&line);
                    printed.push('\n');
                    if line.trim_start().starts_with("Ready in ") {
                        return Demo { child, printed };
                    }
                }
                Err(e) => {
                    let _ = child.kill();
                    panic!("the demo did not get ready ({e:?}); it printed:\n{printed}")
                }
            }
        }
    }

    /// The shell command printed under "Mail": the `curl` line and the
    /// lines it continues onto.
    fn mail_curl(&self, mail_port: u16) -> String {
        let lines: Vec<&str> = self.printed.lines().map(str::trim).collect();
        let first = lines
            .iter()
            .position(|l| l.starts_with(&format!("curl -s http://127.0.0.1:{mail_port}/emails")))
            .unwrap_or_else(|| panic!("no mail curl line in:\n{}", self.printed));
        let mut command = String::new();
        for line in &lines[first..] {
            command.push_str(line.trim_end_matches('\\'));
            command.push(' ');
            if !line.ends_with('\\') {
                break;
            }
        }
        command
    }

    /// Ctrl-C: everything stops and the demo exits 0.
    fn interrupt(mut self) {
        let group = format!("-{}", self.child.id());
        let status = Command::new("kill")
            .args(["-INT", "--", &group])
            .status()
            .unwrap();
        assert!(status.success());
        let asked = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "the demo exited with {status} on Ctrl-C");
                return;
            }
            assert!(
                asked.elapsed() < Duration::from_secs(60),
                "the demo did not stop within a minute of Ctrl-C"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Runs the printed `curl` and answers the email id it printed.
fn send(curl: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(curl).output().unwrap();
    assert!(out.status.success(), "`{curl}` failed: {out:?}");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("`{curl}` answered no JSON ({e}): {out:?}"));
    answer["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id in {answer}"))
        .to_owned()
}

#[test]
fn the_demo_runs_both_products_and_its_mail_curl_sends_an_email() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().join("demo");
    let mail_port = free_port();

    let demo = Demo::start(&dir, mail_port);
    for expected in [
        "/console",
        "/v1/plugins/managed-analytics/projects/demo-shop/api",
        "/mcp",
        &format!("Mail      http://127.0.0.1:{mail_port}"),
    ] {
        assert!(
            demo.printed.contains(expected),
            "the demo did not print {expected}:\n{}",
            demo.printed
        );
    }
    let key = std::fs::read_to_string(dir.join("mail-key")).unwrap();
    let provider_secret = std::fs::read_to_string(dir.join("provider-secret")).unwrap();
    for secret in [key.trim(), provider_secret.trim()] {
        assert!(!demo.printed.contains(secret), "the demo printed a secret");
    }

    let curl = demo.mail_curl(mail_port);
    let id = send(&curl);
    let eml = dir.join("mail/outbox").join(format!("{id}.eml"));
    let message = std::fs::read_to_string(&eml)
        .unwrap_or_else(|e| panic!("{} is not there ({e})", eml.display()));
    assert!(message.contains("Subject: Hello"), "{message}");
    assert!(message.contains("DKIM-Signature:"), "{message}");
    demo.interrupt();

    // A rerun keeps the state: the same key, the email sent before, and
    // the printed curl works again.
    let demo = Demo::start(&dir, mail_port);
    assert!(
        demo.printed.contains("are there already"),
        "{}",
        demo.printed
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("mail-key")).unwrap(),
        key,
        "a rerun made a new key"
    );
    assert!(eml.exists());
    let again = send(&demo.mail_curl(mail_port));
    assert_ne!(again, id);
    assert!(
        dir.join("mail/outbox")
            .join(format!("{again}.eml"))
            .exists()
    );
    demo.interrupt();
}

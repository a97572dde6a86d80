//! Support for the workspace-level integration tests: where the artifacts
//! that `cargo xtask` builds live, and one sentence saying how to build them
//! when they are missing.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the workspace root")
}

fn require(path: PathBuf, command: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run `{command}` to build it",
        path.display()
    );
    path
}

/// A guest component built by `cargo xtask guests`, e.g. `managed_analytics`.
pub fn guest_component(artifact: &str) -> Vec<u8> {
    let path = workspace_root().join(format!("target/guests/{artifact}.wasm"));
    std::fs::read(require(path, "cargo xtask guests")).expect("readable component")
}

/// The signed release written by `cargo xtask release`.
pub fn release_dir() -> PathBuf {
    let manifest = extension_release::Manifest::from_toml(
        &std::fs::read_to_string(workspace_root().join("manifest.toml")).unwrap(),
    )
    .unwrap();
    require(
        workspace_root().join(format!(
            "target/release-bundle/{}-{}",
            manifest.extension.id, manifest.extension.version
        )),
        "cargo xtask release",
    )
}

/// The publisher keys `cargo xtask release` wrote for hosts to trust.
pub fn trusted_keys_dir() -> PathBuf {
    require(
        workspace_root().join("target/release-bundle/trusted-publishers"),
        "cargo xtask release",
    )
}

/// A copy of the release in a temporary directory, to tamper with.
pub fn copy_release(to: &Path) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    let target = to.join("release");
    copy(&release_dir(), &target);
    target
}

/// A server binary of this workspace's last debug build (`host-sim`,
/// `mail-service`), which `cargo test --workspace` builds with the tests
/// (`cargo test -p workspace-tests` alone leaves it as it was: build it
/// with `cargo build --bin NAME` first).
pub fn server_binary(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || workspace_root().join("target"),
        |dir| workspace_root().join(dir),
    );
    require(
        target.join("debug").join(name),
        &format!("cargo build --bin {name}"),
    )
}

/// The analytics plugin's source manifest without its `[panel]` table: a
/// development build of the component alone (`host-sim dev`, the test host)
/// ships no panel files.
pub fn manifest_without_panel() -> String {
    let source = std::fs::read_to_string(workspace_root().join("manifest.toml"))
        .expect("the workspace's manifest.toml");
    let without = source
        .replace("[panel]\n", "")
        .replace("entry = \"panel/index.html\"\n", "");
    assert_ne!(without, source, "the manifest has a panel to take out");
    without
}

/// `host-sim dev` running: its stdout lines arrive on a channel, its log
/// (stderr) is kept and passed on; stopped with SIGTERM (so it removes its
/// state) when dropped.
pub struct HostSimDev {
    child: std::process::Child,
    /// Its stdout, a line at a time.
    pub lines: std::sync::mpsc::Receiver<String>,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl HostSimDev {
    /// Starts `command` (a `host-sim dev` command line).
    pub fn start(command: &mut Command) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("host-sim dev starts");
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = child.stderr.take().unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("host-sim dev: {line}");
                let mut kept = kept.lock().unwrap();
                kept.push_str(&line);
                kept.push('\n');
            }
        });
        Self { child, lines, log }
    }

    /// Waits until the host's log has a line containing `text`.
    pub fn expect_log(&self, text: &str, within: Duration) {
        let until = std::time::Instant::now() + within;
        while !self.log.lock().unwrap().contains(text) {
            assert!(
                std::time::Instant::now() < until,
                "host-sim dev logged no `{text}`"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The value of the next stdout line starting with `key `.
    pub fn expect(&self, key: &str, within: Duration) -> String {
        let line = self
            .lines
            .recv_timeout(within)
            .unwrap_or_else(|e| panic!("host-sim dev printed no `{key}` line: {e}"));
        line.strip_prefix(&format!("{key} "))
            .unwrap_or_else(|| panic!("expected `{key} …`, host-sim dev printed `{line}`"))
            .to_owned()
    }
}

impl Drop for HostSimDev {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

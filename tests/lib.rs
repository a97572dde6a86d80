//! Support for the workspace-level integration tests: where the artifacts
//! that `cargo xtask` builds live, and one sentence saying how to build them
//! when they are missing.

use std::path::{Path, PathBuf};

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

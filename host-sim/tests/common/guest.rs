//! The test extension's component, which `cargo xtask guests` builds into
//! `target/guests/` (`cargo xtask test` builds it before the tests run).
//! Shared by the tests and the `invoke` benchmark.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The command that builds the component.
const BUILD: &str = "cargo xtask guests test-extension";

/// The component's bytes. A component that is missing, or older than the
/// test extension's sources or the WIT package, stops the caller with one
/// sentence naming the command that builds it.
pub fn test_extension() -> Vec<u8> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("../target/guests/test_extension.wasm");
    let built = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("{} is missing: run `{BUILD}` to build it", path.display()));
    let sources = [
        root.join("test-extension/src"),
        root.join("test-extension/Cargo.toml"),
        root.join("../wit"),
    ];
    if let Some(newer) = sources
        .iter()
        .flat_map(|source| files(source))
        .find(|(_, modified)| *modified > built)
    {
        panic!(
            "{} is older than {}: run `{BUILD}` to rebuild it",
            path.display(),
            newer.0.display()
        );
    }
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{} cannot be read ({e}): run `{BUILD}`", path.display()))
}

/// Every file under `path` (or `path` itself) with its modification time.
fn files(path: &Path) -> Vec<(PathBuf, SystemTime)> {
    let Ok(metadata) = std::fs::metadata(path) else {
        return Vec::new();
    };
    if metadata.is_file() {
        return metadata
            .modified()
            .map(|modified| vec![(path.to_path_buf(), modified)])
            .unwrap_or_default();
    }
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|entry| files(&entry.path()))
        .collect()
}

//! What every test file of this project shares: the built component in
//! host-sim's in-process test host (`host_sim::testing`). Build it first
//! with `cargo component build --release` (or point `EXTENSION_COMPONENT`
//! at a build).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use host_sim::testing::{TestHost, TestHostBuilder};

pub fn project_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The component `cargo component build --release` wrote, in this build's
/// target directory (wherever `.cargo/config.toml` or `CARGO_TARGET_DIR`
/// put it); refused when it is older than the sources (the test would run
/// yesterday's code).
pub fn component() -> PathBuf {
    let path = std::env::var_os("EXTENSION_COMPONENT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // Cargo gives tests `<target dir>/tmp`.
            let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap();
            target.join("wasm32-wasip1/release/{{crate}}.wasm")
        });
    let built = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "no component at {}: run `cargo component build --release` first",
                path.display()
            )
        });
    let (newest, source) = newest_file(&project_dir().join("src")).expect("src/ has files");
    assert!(
        built >= newest,
        "{} is older than {}: run `cargo component build --release` again",
        path.display(),
        source
            .strip_prefix(project_dir())
            .unwrap_or(&source)
            .display()
    );
    path
}

/// The most recently modified file under `dir`, in every subfolder.
fn newest_file(dir: &Path) -> Option<(SystemTime, PathBuf)> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let meta = entry.metadata().ok()?;
            if meta.is_dir() {
                newest_file(&entry.path())
            } else {
                Some((meta.modified().ok()?, entry.path()))
            }
        })
        .max()
}

/// A test host with this project's manifest and built component; add
/// bindings and settings, then `.build()`.
pub fn test_host() -> TestHostBuilder {
    TestHost::from_files(project_dir().join("manifest.toml"), component()).unwrap()
}

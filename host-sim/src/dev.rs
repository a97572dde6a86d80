//! The dev loop of `host-sim dev`: an unsigned build (manifest and
//! component as the developer's build leaves them) in a development state,
//! and a watcher that installs every new build of either file as a new
//! runtime generation while the server keeps running. Invocations running
//! on the replaced build finish on it (see [`Host::install_development`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crate::host::Host;
use crate::verify::{InstallError, ReleaseSummary};

/// Why a build could not be read or installed.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    #[error(transparent)]
    Install(#[from] InstallError),
}

/// The developer's build: where the manifest and the component are.
#[derive(Debug, Clone)]
pub struct DevBuild {
    pub manifest: PathBuf,
    pub component: PathBuf,
}

impl DevBuild {
    /// The manifest's text and the component's bytes, stored under the
    /// manifest's `extension.component` name.
    pub fn read(&self) -> Result<(String, BTreeMap<String, Vec<u8>>), DevError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|e| DevError::Read {
                path: path.display().to_string(),
                reason: e.to_string(),
            })
        };
        let manifest = String::from_utf8(read(&self.manifest)?).map_err(|_| DevError::Read {
            path: self.manifest.display().to_string(),
            reason: "not UTF-8".to_owned(),
        })?;
        // Located in the file by its absolute path: the text the
        // `manifest!` macro shows for the same mistake at build time.
        let name = extension_release::Manifest::from_toml(&manifest)
            .map_err(|e| {
                let file = std::path::absolute(&self.manifest).unwrap_or(self.manifest.clone());
                InstallError::Manifest(e.render(&file))
            })?
            .extension
            .component;
        let component = read(&self.component)?;
        Ok((manifest, BTreeMap::from([(name, component)])))
    }

    /// Reads the build and installs it into `host` (a development state).
    pub fn install(&self, host: &Host) -> Result<ReleaseSummary, DevError> {
        let (manifest, files) = self.read()?;
        Ok(host.install_development(&manifest, files, &mut |_| {})?)
    }

    /// Modification time and length of both files: what the watcher compares.
    fn fingerprint(&self) -> Option<[(SystemTime, u64); 2]> {
        let of = |path: &Path| {
            let meta = std::fs::metadata(path).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        };
        Some([of(&self.manifest)?, of(&self.component)?])
    }
}

/// What the watcher did about a change.
#[derive(Debug)]
pub enum Reload {
    /// The new build runs.
    Installed(ReleaseSummary),
    /// The new build was refused; the previous one keeps running.
    Failed(DevError),
}

/// Watches a [`DevBuild`] until dropped.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How many polls in a row a changed build must stay the same before it is
/// read: a build that pauses between its two files (or in the middle of
/// one, on a loaded machine) is not read half-written.
const SETTLE_POLLS: u32 = 2;

/// Polls the build's files every `interval`; once a change has settled
/// (the files stayed the same for [`SETTLE_POLLS`] more intervals),
/// installs the new build and tells `on_reload`. A refused build whose files
/// changed while they were read is not reported: the writer was still at
/// work, and its finished build is read once it settles.
pub fn watch(
    host: Arc<Host>,
    build: DevBuild,
    interval: Duration,
    mut on_reload: impl FnMut(Reload) + Send + 'static,
) -> Watcher {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let thread = std::thread::Builder::new()
        .name("dev-watcher".to_owned())
        .spawn(move || {
            let mut installed = build.fingerprint();
            let mut seen = installed;
            let mut steady = 0;
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(interval);
                let now = build.fingerprint();
                if now != seen {
                    // Changed since the last look: wait for it to settle.
                    seen = now;
                    steady = 0;
                    continue;
                }
                if now.is_none() || now == installed {
                    continue;
                }
                steady += 1;
                if steady < SETTLE_POLLS {
                    continue;
                }
                let outcome = build.install(&host);
                if outcome.is_err() && build.fingerprint() != now {
                    continue;
                }
                installed = now;
                on_reload(match outcome {
                    Ok(summary) => Reload::Installed(summary),
                    Err(error) => Reload::Failed(error),
                });
            }
        })
        .expect("a thread can be spawned");
    Watcher {
        stop,
        thread: Some(thread),
    }
}

//! The online backup of a live SQLite database.
//!
//! The copy runs SQLite's backup API page by page from a connection that
//! holds one read transaction from the first page to the last: in WAL mode
//! the service's writers go on committing to the WAL meanwhile, and every
//! page copied comes from the same snapshot, so the copy is the database as
//! it was when the backup began (every write committed before it, none
//! after). Without the held transaction SQLite would restart the copy on
//! every commit of another connection, and under steady writes never end.
//! While the copy runs the WAL cannot be checkpointed past its snapshot and
//! grows; it shrinks again at the service's next checkpoint.
//!
//! The pages go to a file beside the target (`.NAME.partial-PID`), which is
//! checked (`PRAGMA quick_check`), synced, and only then linked to the
//! target name; a target that exists is never overwritten.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags, OptionalExtension};

/// Pages copied per step (4 MiB with 4 KiB pages): the progress is
/// reported after each.
const PAGES_PER_STEP: i32 = 1024;

/// How long the backup waits for a lock the service holds for a moment
/// (starting its read transaction; a step told to wait).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How far a backup is: pages copied of the snapshot's pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub copied: u64,
    pub total: u64,
}

/// What a finished backup wrote.
#[derive(Debug, Clone)]
pub struct BackupReport {
    pub path: PathBuf,
    pub pages: u64,
    pub bytes: u64,
    /// The ids of the master keys the copy lists (`master_keys`, oldest
    /// first): its stored secrets open only with one of them.
    pub master_keys: Vec<String>,
    pub elapsed: Duration,
}

impl BackupReport {
    /// The line a backup command ends with.
    pub fn summary(&self) -> String {
        let keys = match self.master_keys.as_slice() {
            [] => "it holds no sealed secrets".to_string(),
            [key] => format!(
                "its stored secrets open only with master key {key}: keep that key file, apart from the backup"
            ),
            keys => format!(
                "its stored secrets open only with one of the master keys {}: keep the newest key file, apart from the backup",
                keys.join(", ")
            ),
        };
        format!(
            "backup written to {} ({} pages, {:.1} MiB, {:.1} s, integrity checked); {keys}",
            self.path.display(),
            self.pages,
            self.bytes as f64 / (1024.0 * 1024.0),
            self.elapsed.as_secs_f64()
        )
    }
}

/// Why a backup was not made. The target is left as it was.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(
        "backup target {path}: the file exists and a backup never overwrites one; choose a new path or move the old file away"
    )]
    TargetExists { path: PathBuf },
    #[error("{path}: there is no database here to back up; check the data directory option")]
    NoDatabase { path: PathBuf },
    #[error("{path}: {source}")]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("backup target {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the copy written to {path} failed its integrity check ({detail}); it was removed, nothing was written to the target: run the backup again"
    )]
    Check { path: PathBuf, detail: String },
    #[error(
        "{path}: the database stayed locked for {seconds} s; nothing was written to the target: run the backup again"
    )]
    Busy { path: PathBuf, seconds: u64 },
}

impl BackupError {
    /// The exit code a command ends with: a target that exists is a usage
    /// error ([`crate::EXIT_USAGE`]), the rest failures (1).
    pub fn exit_code(&self) -> u8 {
        match self {
            BackupError::TargetExists { .. } | BackupError::NoDatabase { .. } => crate::EXIT_USAGE,
            _ => 1,
        }
    }
}

/// Prints a backup's progress on stderr at most once a second (a small
/// database finishes before the first line).
pub struct ProgressPrinter {
    started: Instant,
    last: Instant,
}

impl Default for ProgressPrinter {
    fn default() -> Self {
        let now = Instant::now();
        ProgressPrinter {
            started: now,
            last: now,
        }
    }
}

impl ProgressPrinter {
    /// Prints `progress` on stderr unless a line was printed (or the
    /// backup began) less than a second ago.
    pub fn report(&mut self, progress: Progress) {
        if let Some(line) = self.line_at(progress, Instant::now()) {
            eprintln!("{line}");
        }
    }

    /// The line to print for `progress` at `now`, if one is due.
    pub fn line_at(&mut self, progress: Progress, now: Instant) -> Option<String> {
        if now.duration_since(self.last) < Duration::from_secs(1) || progress.total == 0 {
            return None;
        }
        self.last = now;
        Some(format!(
            "backup: {}% ({} of {} pages, {:.0} s)",
            progress.copied * 100 / progress.total,
            progress.copied,
            progress.total,
            now.duration_since(self.started).as_secs_f64()
        ))
    }
}

/// Copies the live database at `source` to `target` (which must not
/// exist), reporting the progress after every step.
pub fn backup_sqlite(
    source: &Path,
    target: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<BackupReport, BackupError> {
    let started = Instant::now();
    if target.symlink_metadata().is_ok() {
        return Err(BackupError::TargetExists {
            path: target.to_path_buf(),
        });
    }
    if !source.is_file() {
        return Err(BackupError::NoDatabase {
            path: source.to_path_buf(),
        });
    }
    let partial = partial_path(target);
    let copied = copy(source, &partial, progress).and_then(|pages| {
        let master_keys = check(&partial)?;
        std::fs::File::open(&partial)
            .and_then(|f| f.sync_all())
            .map_err(|source| BackupError::Io {
                path: partial.clone(),
                source,
            })?;
        Ok((pages, master_keys))
    });
    let (pages, master_keys) = match copied {
        Ok(done) => done,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    let placed = place(&partial, target);
    let _ = std::fs::remove_file(&partial);
    placed?;
    let bytes = std::fs::metadata(target).map(|m| m.len()).unwrap_or(0);
    Ok(BackupReport {
        path: target.to_path_buf(),
        pages,
        bytes,
        master_keys,
        elapsed: started.elapsed(),
    })
}

/// `.NAME.partial-PID` beside `target`.
fn partial_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "backup".into());
    target.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

/// Copies one snapshot of `source` into a new database at `partial`;
/// answers the pages copied.
fn copy(
    source: &Path,
    partial: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<u64, BackupError> {
    let at = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BackupError::Sqlite { path, source }
    };
    // Never created here, and this connection writes nothing.
    let src = Connection::open_with_flags(
        source,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(at(source))?;
    src.busy_timeout(BUSY_TIMEOUT).map_err(at(source))?;
    src.pragma_update(None, "query_only", true)
        .map_err(at(source))?;
    // The read transaction every step copies from (see the module's doc).
    src.execute_batch("BEGIN DEFERRED; SELECT count(*) FROM sqlite_schema;")
        .map_err(at(source))?;
    let mut dst = Connection::open(partial).map_err(at(partial))?;
    let pages = {
        let backup = Backup::new(&src, &mut dst).map_err(at(partial))?;
        let mut waiting_since: Option<Instant> = None;
        loop {
            let step = backup.step(PAGES_PER_STEP).map_err(at(source))?;
            let now = backup.progress();
            let total = now.pagecount.max(0) as u64;
            let done = Progress {
                copied: total - (now.remaining.max(0) as u64).min(total),
                total,
            };
            match step {
                StepResult::Done => {
                    progress(done);
                    break done.total;
                }
                StepResult::More => {
                    waiting_since = None;
                    progress(done);
                }
                // A lock held for a moment: try again shortly.
                _ => {
                    let since = *waiting_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > BUSY_TIMEOUT {
                        return Err(BackupError::Busy {
                            path: source.to_path_buf(),
                            seconds: BUSY_TIMEOUT.as_secs(),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    };
    src.execute_batch("COMMIT").map_err(at(source))?;
    dst.close().map_err(|(_, e)| at(partial)(e))?;
    Ok(pages)
}

/// Checks the copy; answers the master keys it lists.
fn check(partial: &Path) -> Result<Vec<String>, BackupError> {
    let at = |source| BackupError::Sqlite {
        path: partial.to_path_buf(),
        source,
    };
    let conn = Connection::open_with_flags(
        partial,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(at)?;
    let verdict: String = conn
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .map_err(at)?;
    if verdict != "ok" {
        return Err(BackupError::Check {
            path: partial.to_path_buf(),
            detail: verdict,
        });
    }
    let has_keys = conn
        .query_row(
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'master_keys'",
            [],
            |_| Ok(()),
        )
        .optional()
        .map_err(at)?
        .is_some();
    let mut keys = Vec::new();
    if has_keys {
        let mut stmt = conn
            .prepare("SELECT id FROM master_keys ORDER BY seq")
            .map_err(at)?;
        for id in stmt.query_map([], |r| r.get::<_, String>(0)).map_err(at)? {
            keys.push(id.map_err(at)?);
        }
    }
    drop(conn);
    Ok(keys)
}

/// Gives the finished copy its name, unless a file took it meanwhile.
fn place(partial: &Path, target: &Path) -> Result<(), BackupError> {
    let io = |source| BackupError::Io {
        path: target.to_path_buf(),
        source,
    };
    match std::fs::hard_link(partial, target) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(BackupError::TargetExists {
                path: target.to_path_buf(),
            });
        }
        // A file system without hard links: a rename, after one more look.
        Err(_) => {
            if target.symlink_metadata().is_ok() {
                return Err(BackupError::TargetExists {
                    path: target.to_path_buf(),
                });
            }
            std::fs::rename(partial, target).map_err(io)?;
        }
    }
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
    }
    Ok(())
}

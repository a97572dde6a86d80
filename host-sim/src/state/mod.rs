//! Operator state in one embedded SQLite database (WAL), one module per
//! subject:
//!
//! | module | holds |
//! |---|---|
//! | [`releases`] | installed releases (manifest and files as blobs) |
//! | [`access`] | approvals, grants, runtime generations, users and tokens |
//! | [`bindings`] | the projects' bindings: the only place a provider secret is stored |
//! | [`settings`] | public per-project settings |
//! | [`documents`] | the project-scoped documents |
//! | [`oauth`] | the MCP authorization server's clients, connected apps, codes and refresh tokens |
//! | [`tracking`] | tracking domains: settings, challenge key, each domain's step ([`steps`]) |
//! | `secrets` | sealing and opening the stored secrets under the master key; its rotation |
//! | [`snapshot`] | what one invocation's checks read, at one version |
//! | [`changes`] | the state's version (a commit counter shared by every process) |
//!
//! Every multi-row change runs in one transaction, so a failed step leaves
//! nothing half-done; every commit goes through [`State::write`].

pub mod access;
pub mod bindings;
mod changes;
pub mod documents;
mod error;
pub mod oauth;
pub mod releases;
mod schema;
mod secrets;
pub use schema::inspect;
pub mod settings;
pub mod snapshot;
pub mod steps;
pub mod tracking;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, Transaction, TransactionBehavior};
use sha2::{Digest, Sha256};

pub use access::{CapabilityCheck, TokenAccess, audience_accepts};
pub use bindings::{AuthStyle, Binding, BindingInfo};
pub use changes::StateVersion;
pub use documents::{Condition, DocumentScope, ProjectDocument, StoredDocument, WriteOutcome};
pub use error::StateError;
pub use releases::{NewRelease, StoredRelease};
pub use secrets_at_rest::{KeyStatus, MasterKey, MasterKeySource, SecretsStatus};
pub use settings::ProjectSettings;
pub use snapshot::InvocationSnapshot;
pub use steps::{Step, TrackingRefusal};
pub use tracking::{TrackingDomain, TrackingRoute, TrackingSettings};

use changes::{ChangeCounter, VersionedCache};
use error::Result;

/// The database file inside a state directory.
pub const DB_FILE: &str = "host-sim.sqlite3";

/// The change counter's file inside a state directory.
pub const CHANGES_FILE: &str = "host-sim.changes";

/// Documents kept between two commits.
const MAX_CACHED_DOCUMENTS: usize = 1024;

/// Distinct callers kept between two commits.
const MAX_CACHED_SNAPSHOTS: usize = 1024;

pub struct State {
    conn: Mutex<Connection>,
    path: PathBuf,
    changes: ChangeCounter,
    /// Invocation snapshots by (token hash, extension, project).
    snapshots: Mutex<VersionedCache<snapshot::SnapshotKey, snapshot::StoredSnapshot>>,
    documents: Mutex<VersionedCache<documents::DocumentKey, Option<StoredDocument>>>,
    /// Installed release digests by extension.
    digests: Mutex<VersionedCache<String, Option<String>>>,
    /// The applied tracking-domain routes (what `serve`'s ingress reads
    /// per request).
    routes: Mutex<VersionedCache<(), std::sync::Arc<[TrackingRoute]>>>,
    /// The master keys this process holds (see `secrets`).
    secrets: secrets::Sealer,
}

pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// SHA-256 of a token, hex; tokens are stored only as this.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Locks `mutex`, going on past a panic of another holder (every value
/// guarded this way stays consistent between statements).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl State {
    /// Opens (creating if needed) the database at `path`, migrates it and
    /// adopts the master `key` (read from `label`): on the first open with
    /// a key, plain-text secrets are sealed under it in one transaction; a
    /// key the state does not know, and a schema newer than this host's
    /// ([`StateError::SchemaTooNew`]), are refused before anything is
    /// written.
    pub fn open(path: &Path, key: MasterKey, label: &str) -> Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| StateError::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        let mut conn = Connection::open(path)?;
        schema::refuse_newer(&conn, path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Freed space is zeroed: a secret replaced by its sealed form (an
        // older state's upgrade) leaves no plain copy in the file's free pages.
        conn.pragma_update(None, "secure_delete", "ON")?;
        conn.busy_timeout(Duration::from_secs(5))?;
        schema::migrate(&mut conn)?;
        let changes = ChangeCounter::open(&path.with_file_name(CHANGES_FILE))?;
        let state = Self {
            conn: Mutex::new(conn),
            path: path.to_path_buf(),
            changes,
            snapshots: Mutex::new(VersionedCache::new(MAX_CACHED_SNAPSHOTS)),
            documents: Mutex::new(VersionedCache::new(MAX_CACHED_DOCUMENTS)),
            digests: Mutex::new(VersionedCache::new(MAX_CACHED_SNAPSHOTS)),
            routes: Mutex::new(VersionedCache::new(1)),
            secrets: secrets::Sealer::new(key),
        };
        state.adopt_master_key(label)?;
        Ok(state)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the state answers (readiness): the database file at the
    /// state's path opens afresh (never created), reads, and holds every
    /// migration this host knows. A file that was moved away, removed or
    /// is behind shows here, while the connection the host holds would go
    /// on reading the file it opened. The reason when it does not.
    pub fn ping(&self) -> std::result::Result<(), String> {
        let conn = Connection::open_with_flags(
            &self.path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| format!("{} does not open: {e}", self.path.display()))?;
        conn.busy_timeout(Duration::from_secs(1))
            .map_err(|e| e.to_string())?;
        let version = schema::version(&conn)
            .map_err(|e| format!("{} is unreadable: {e}", self.path.display()))?;
        if version < schema::LATEST {
            return Err(format!(
                "{} has schema version {version}, this host needs {}",
                self.path.display(),
                schema::LATEST
            ));
        }
        Ok(())
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        lock(&self.conn)
    }

    /// The only way host-sim commits: one immediate transaction, with the
    /// change counter moved before and after it.
    fn write<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self.conn();
        let in_flight = self.changes.begin();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = f(&tx)?;
        tx.commit()?;
        drop(in_flight);
        Ok(value)
    }

    /// The state's version now, or `None` while a commit is under way:
    /// two memory loads, no database access. Read it before the data it
    /// guards.
    pub fn version(&self) -> Option<StateVersion> {
        self.changes.version()
    }

    /// The value under `key` in `cache` if it was read at the state's
    /// current version; otherwise `read` (given the version it reads at,
    /// `None` while a commit is under way) and keep what it returns when
    /// there is a version to keep it under.
    fn cached<K: std::hash::Hash + Eq, V: Clone>(
        &self,
        cache: &Mutex<VersionedCache<K, V>>,
        key: K,
        read: impl FnOnce(&K, Option<StateVersion>) -> Result<V>,
    ) -> Result<V> {
        // Read before the data it guards.
        let version = self.version();
        if let Some(version) = version
            && let Some(hit) = lock(cache).get(version, &key)
        {
            return Ok(hit);
        }
        let value = read(&key, version)?;
        if let Some(version) = version {
            lock(cache).insert(version, key, value.clone());
        }
        Ok(value)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn open() -> (tempfile::TempDir, State) {
        let dir = tempfile::tempdir().unwrap();
        let state = open_at(&dir.path().join(DB_FILE));
        (dir, state)
    }

    /// The state at `path` with the key beside it (made on first use), as
    /// another process would open it.
    pub(crate) fn open_at(path: &Path) -> State {
        let loaded = MasterKeySource::BesideData
            .load(path.parent().unwrap())
            .unwrap();
        State::open(path, loaded.key, &loaded.label).unwrap()
    }

    #[test]
    fn the_version_moves_on_every_commit_from_any_connection() {
        let (dir, state) = open();
        let start = state.version().unwrap();
        assert_eq!(state.version().unwrap(), start, "reads move nothing");
        state.revoke("ext", "p1").unwrap();
        let after_own = state.version().unwrap();
        assert_ne!(after_own, start, "a write through this handle");
        // The operator CLI next to a running host: another connection.
        let other = open_at(&dir.path().join(DB_FILE));
        other.revoke("ext", "p1").unwrap();
        assert_ne!(
            state.version().unwrap(),
            after_own,
            "a write by another connection"
        );
    }

    #[test]
    fn a_commit_under_way_has_no_version_and_a_lone_opener_repairs_a_killed_one() {
        let (dir, state) = open();
        let before = state.version().expect("nothing under way");
        let in_flight = state.changes.begin();
        assert_eq!(state.version(), None, "a commit is under way");
        drop(in_flight);
        let after = state.version().expect("the commit finished");
        assert_ne!(after, before);

        // A process killed mid-commit: `started` moved, `finished` never will.
        std::mem::forget(state.changes.begin());
        assert_eq!(state.version(), None);
        let other = open_at(&dir.path().join(DB_FILE));
        assert_eq!(other.version(), None, "not alone: nothing is repaired");
        drop((state, other));
        let alone = open_at(&dir.path().join(DB_FILE));
        assert!(alone.version().is_some(), "alone with the state: repaired");
    }

    #[test]
    fn reopening_migrates_once() {
        let (dir, state) = open();
        state
            .set_tracking_origin("p1", Some("https://t.example"))
            .unwrap();
        drop(state);
        let state = open_at(&dir.path().join(DB_FILE));
        assert_eq!(
            state
                .project_settings("p1")
                .unwrap()
                .tracking_origin
                .as_deref(),
            Some("https://t.example")
        );
    }
}

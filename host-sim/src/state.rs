//! Operator state in one embedded SQLite database (WAL): installed releases
//! (files as blobs), approvals, grants, runtime generations, project
//! settings, bindings (the only place a secret is stored), users, tokens and
//! the project-scoped documents. Every multi-row change runs in one
//! transaction, so a failed step leaves nothing half-done.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use sha2::{Digest, Sha256};

use crate::secret::Secret;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("state directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    NotFound(String),
}

type Result<T, E = StateError> = std::result::Result<T, E>;

const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE releases (
    extension_id TEXT PRIMARY KEY,
    version TEXT NOT NULL,
    digest TEXT NOT NULL,
    manifest TEXT NOT NULL,
    key_id TEXT NOT NULL,
    installed_at INTEGER NOT NULL
);
CREATE TABLE release_files (
    extension_id TEXT NOT NULL REFERENCES releases(extension_id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    bytes BLOB NOT NULL,
    PRIMARY KEY (extension_id, path)
);
CREATE TABLE approvals (
    extension_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    capability TEXT NOT NULL,
    approved_at INTEGER NOT NULL,
    PRIMARY KEY (extension_id, digest, capability)
);
CREATE TABLE grants (
    extension_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    granted_at INTEGER NOT NULL,
    PRIMARY KEY (extension_id, project_id)
);
CREATE TABLE generations (
    extension_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    generation INTEGER NOT NULL,
    PRIMARY KEY (extension_id, project_id)
);
CREATE TABLE projects (
    project_id TEXT PRIMARY KEY,
    tracking_origin TEXT
);
CREATE TABLE bindings (
    project_id TEXT NOT NULL,
    name TEXT NOT NULL,
    origin TEXT NOT NULL,
    secret TEXT NOT NULL,
    auth_style TEXT NOT NULL,
    timeout_ms INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, name)
);
CREATE TABLE user_projects (
    user_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    PRIMARY KEY (user_id, project_id)
);
CREATE TABLE tokens (
    token_hash TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    issued_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE TABLE token_projects (
    token_hash TEXT NOT NULL REFERENCES tokens(token_hash) ON DELETE CASCADE,
    project_id TEXT NOT NULL,
    PRIMARY KEY (token_hash, project_id)
);
CREATE TABLE documents (
    project_id TEXT NOT NULL,
    extension_id TEXT NOT NULL,
    collection TEXT NOT NULL,
    id TEXT NOT NULL,
    revision INTEGER NOT NULL,
    body TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, extension_id, collection, id)
);
"#];

/// The database file inside a state directory.
pub const DB_FILE: &str = "host-sim.sqlite3";

/// The change counter's file inside a state directory.
pub const CHANGES_FILE: &str = "host-sim.changes";

pub struct State {
    conn: Mutex<Connection>,
    path: PathBuf,
    changes: ChangeCounter,
    /// Invocation snapshots by (token hash, extension, project).
    snapshots: Mutex<VersionedCache<(String, String, String), StoredSnapshot>>,
    documents: Mutex<VersionedCache<DocumentKey, Option<StoredDocument>>>,
}

/// Values read at one [`StateVersion`]; emptied when the version moves,
/// and when it holds `max` entries.
struct VersionedCache<K, V> {
    version: Option<StateVersion>,
    entries: HashMap<K, V>,
    max: usize,
}

impl<K: std::hash::Hash + Eq, V: Clone> VersionedCache<K, V> {
    fn new(max: usize) -> Self {
        Self {
            version: None,
            entries: HashMap::new(),
            max,
        }
    }

    fn get(&mut self, version: StateVersion, key: &K) -> Option<V> {
        if self.version != Some(version) {
            self.version = Some(version);
            self.entries.clear();
        }
        self.entries.get(key).cloned()
    }

    /// Keeps `value`, read after `version` was seen, if the cache is still
    /// at that version.
    fn insert(&mut self, version: StateVersion, key: K, value: V) {
        if self.version != Some(version) {
            return;
        }
        if self.entries.len() >= self.max {
            self.entries.clear();
        }
        self.entries.insert(key, value);
    }
}

/// (project, extension, collection, id).
type DocumentKey = (String, String, String, String);

/// Two counters shared by every process with the state open, in a mapping
/// of [`CHANGES_FILE`]: `started` moves before each commit host-sim makes
/// and `finished` after it. When they are equal no commit is under way and
/// `finished` names the state ([`StateVersion`]): anything read after
/// seeing it stays true while both still say the same. Reading them is two
/// memory loads, which is what lets invocations and host calls reuse their
/// checks without a database round trip. A process killed between the two
/// leaves them apart, and every reader goes to the database, until a
/// process opens the state while no other has it open (the counters are
/// then made equal again).
///
/// This holds because host-sim is the only writer of its state: every
/// commit goes through [`State::write`]. A change made with another SQLite
/// client is seen after the host restarts.
struct ChangeCounter {
    map: memmap2::MmapRaw,
    /// The counters' file; this handle holds a shared lock on it while the
    /// state is open.
    file: std::fs::File,
}

/// Moves `finished` when dropped: after the commit, or after a failed one.
struct CommitInFlight<'a>(&'a ChangeCounter);

impl Drop for CommitInFlight<'_> {
    fn drop(&mut self) {
        self.0.finished().fetch_add(1, Ordering::SeqCst);
    }
}

impl ChangeCounter {
    fn open(path: &Path) -> Result<Self> {
        let io = |source| StateError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        // Several processes may create it at once; growing to 16 bytes
        // zero-fills and never shrinks what another wrote.
        if file.metadata().map_err(io)?.len() < 16 {
            file.set_len(16).map_err(io)?;
        }
        let map = memmap2::MmapOptions::new()
            .len(16)
            .map_raw(&file)
            .map_err(io)?;
        let counter = Self { map, file };
        // Alone with the state: no commit can be under way, so counters
        // left apart by a killed process are made equal.
        if counter.file.try_lock().is_ok() {
            let finished = counter.finished().load(Ordering::SeqCst);
            counter.started().store(finished, Ordering::SeqCst);
        }
        counter.file.lock_shared().map_err(io)?;
        Ok(counter)
    }

    fn at(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: the mapping is 16 bytes long and page-aligned, so both
        // u64 slots are in bounds and aligned; other processes touch them
        // only with atomic operations; the mapping lives as long as `self`.
        unsafe { &*self.map.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    fn started(&self) -> &AtomicU64 {
        self.at(0)
    }

    fn finished(&self) -> &AtomicU64 {
        self.at(8)
    }

    /// Call before the commit; drop the guard after it.
    fn begin(&self) -> CommitInFlight<'_> {
        self.started().fetch_add(1, Ordering::SeqCst);
        CommitInFlight(self)
    }

    /// The state's version, or `None` while a commit is under way.
    fn version(&self) -> Option<StateVersion> {
        let finished = self.finished().load(Ordering::SeqCst);
        let started = self.started().load(Ordering::SeqCst);
        (started == finished).then_some(StateVersion(finished))
    }
}

/// Documents kept between two commits.
const MAX_CACHED_DOCUMENTS: usize = 1024;

/// Distinct callers kept between two commits.
const MAX_CACHED_SNAPSHOTS: usize = 1024;

/// A snapshot as the database holds it, shared by every invocation that
/// reads it while the version holds; the token's expiry is applied when it
/// is used ([`StoredSnapshot::at`]).
#[derive(Clone)]
struct StoredSnapshot {
    token_expires_at: Option<i64>,
    snapshot: Arc<InvocationSnapshot>,
}

impl StoredSnapshot {
    fn at(&self, now: i64) -> Arc<InvocationSnapshot> {
        let live = self
            .token_expires_at
            .is_some_and(|expires_at| expires_at > now);
        if live || (self.snapshot.user.is_none() && !self.snapshot.project_access) {
            return self.snapshot.clone();
        }
        Arc::new(InvocationSnapshot {
            user: None,
            project_access: false,
            ..(*self.snapshot).clone()
        })
    }
}

/// Where the state stands: two equal versions mean nothing was committed
/// in between, by this process or any other (see [`ChangeCounter`]).
/// Invocation snapshots, call-time checks and documents are reused while
/// the version holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateVersion(u64);

/// A release as installed: the verified manifest bytes and every file.
#[derive(Debug, Clone)]
pub struct StoredRelease {
    pub extension_id: String,
    pub version: String,
    pub digest: String,
    pub manifest: String,
    pub key_id: String,
    pub installed_at: i64,
}

/// What a new or upgraded release puts into the database.
pub struct NewRelease<'a> {
    pub extension_id: &'a str,
    pub version: &'a str,
    pub digest: &'a str,
    pub manifest: &'a str,
    pub key_id: &'a str,
    pub files: &'a BTreeMap<String, Vec<u8>>,
}

/// How the host authenticates to a binding's origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthStyle {
    /// `Authorization: Bearer <secret>`
    Bearer,
    /// `x-umami-api-key: <secret>` (Umami Cloud)
    UmamiApiKey,
}

impl AuthStyle {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthStyle::Bearer => "bearer",
            AuthStyle::UmamiApiKey => "x-umami-api-key",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "bearer" => Some(AuthStyle::Bearer),
            "x-umami-api-key" => Some(AuthStyle::UmamiApiKey),
            _ => None,
        }
    }

    /// The request header that carries the secret.
    pub fn header(self) -> &'static str {
        match self {
            AuthStyle::Bearer => "authorization",
            AuthStyle::UmamiApiKey => "x-umami-api-key",
        }
    }
}

/// A project's binding: where a named binding goes and with what secret.
#[derive(Debug, Clone)]
pub struct Binding {
    pub project_id: String,
    pub name: String,
    pub origin: String,
    pub secret: Secret,
    pub auth_style: AuthStyle,
    pub timeout: Duration,
}

/// A binding without its secret, for `binding show` and the context.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BindingInfo {
    pub project_id: String,
    pub name: String,
    pub origin: String,
    pub auth_style: String,
    pub timeout_ms: u64,
    pub secret_set: bool,
    pub updated_at: i64,
}

/// Public per-project settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProjectSettings {
    pub tracking_origin: Option<String>,
}

/// Everything the invocation checks read, taken under one lock so the checks
/// see one consistent state.
#[derive(Debug, Clone)]
pub struct InvocationSnapshot {
    /// The token's user, if the token exists and has not expired.
    pub user: Option<String>,
    /// The token names the project and the user still has access to it.
    pub project_access: bool,
    pub granted: bool,
    /// Digest of the installed release.
    pub release_digest: Option<String>,
    pub approved: BTreeSet<String>,
    pub generation: u64,
    pub settings: ProjectSettings,
    /// The project's bindings, secrets included (for the binding calls and
    /// for redaction; never shown).
    pub bindings: Vec<Binding>,
    /// The version all of the above was read at (none if a commit was
    /// under way).
    pub version: Option<StateVersion>,
}

/// What a token reaches now (see [`State::token_access`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenAccess {
    pub user: String,
    /// Unix seconds.
    pub expires_at: i64,
    /// Project → extensions granted to it.
    pub projects: BTreeMap<String, Vec<String>>,
}

/// One stored document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDocument {
    pub revision: u64,
    pub body: String,
}

/// The write condition of the document service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    None,
    Absent,
    Revision(u64),
}

/// A write's result: the new state or the stored revision on conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome<T> {
    Done(T),
    /// The condition did not hold; carries the stored revision (0: absent).
    Conflict(u64),
}

/// Scope of a document call: always the invoking project and extension.
#[derive(Debug, Clone, Copy)]
pub struct DocumentScope<'a> {
    pub project_id: &'a str,
    pub extension_id: &'a str,
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

impl State {
    /// Opens (creating if needed) the database at `path` and migrates it.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| StateError::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        let mut conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(Duration::from_secs(5))?;
        migrate(&mut conn)?;
        let changes = ChangeCounter::open(&path.with_file_name(CHANGES_FILE))?;
        Ok(Self {
            conn: Mutex::new(conn),
            path: path.to_path_buf(),
            changes,
            snapshots: Mutex::new(VersionedCache::new(MAX_CACHED_SNAPSHOTS)),
            documents: Mutex::new(VersionedCache::new(MAX_CACHED_DOCUMENTS)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        lock(&self.conn)
    }

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

    // ---- releases -------------------------------------------------------

    pub fn release(&self, extension_id: &str) -> Result<Option<StoredRelease>> {
        let conn = self.conn();
        Ok(conn
            .prepare_cached(
                "SELECT extension_id, version, digest, manifest, key_id, installed_at
                 FROM releases WHERE extension_id = ?1",
            )?
            .query_row([extension_id], release_row)
            .optional()?)
    }

    pub fn releases(&self) -> Result<Vec<StoredRelease>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT extension_id, version, digest, manifest, key_id, installed_at
             FROM releases ORDER BY extension_id",
        )?;
        let rows = stmt.query_map([], release_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn release_file(&self, extension_id: &str, path: &str) -> Result<Option<Vec<u8>>> {
        let conn = self.conn();
        Ok(conn
            .prepare_cached(
                "SELECT bytes FROM release_files WHERE extension_id = ?1 AND path = ?2",
            )?
            .query_row(params![extension_id, path], |r| r.get(0))
            .optional()?)
    }

    /// Stores a verified release. `upgrade` replaces an installed one (and
    /// drops the old release's approvals); otherwise an installed extension
    /// is a conflict. Bumps the extension's generations. One transaction.
    pub fn store_release(&self, release: &NewRelease<'_>, upgrade: bool) -> Result<()> {
        self.write(|tx| {
            let existing: Option<String> = tx
                .query_row(
                    "SELECT version FROM releases WHERE extension_id = ?1",
                    [release.extension_id],
                    |r| r.get(0),
                )
                .optional()?;
            match (&existing, upgrade) {
                (Some(version), false) => {
                    return Err(StateError::Conflict(format!(
                        "{} {version} is already installed; use `release upgrade`",
                        release.extension_id
                    )));
                }
                (None, true) => {
                    return Err(StateError::NotFound(format!(
                        "{} is not installed; use `release install`",
                        release.extension_id
                    )));
                }
                _ => {}
            }
            tx.execute(
                "DELETE FROM releases WHERE extension_id = ?1",
                [release.extension_id],
            )?;
            tx.execute(
                "DELETE FROM approvals WHERE extension_id = ?1",
                [release.extension_id],
            )?;
            tx.execute(
                "INSERT INTO releases (extension_id, version, digest, manifest, key_id, installed_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    release.extension_id,
                    release.version,
                    release.digest,
                    release.manifest,
                    release.key_id,
                    now_secs()
                ],
            )?;
            for (path, bytes) in release.files {
                tx.execute(
                    "INSERT INTO release_files (extension_id, path, bytes) VALUES (?1, ?2, ?3)",
                    params![release.extension_id, path, bytes],
                )?;
            }
            bump_extension(tx, release.extension_id)?;
            Ok(())
        })
    }

    /// Removes a release, its approvals and its grants (documents stay with
    /// their projects). Bumps the generations so cached instances go.
    pub fn remove_release(&self, extension_id: &str) -> Result<StoredRelease> {
        self.write(|tx| {
            let release = tx
                .query_row(
                    "SELECT extension_id, version, digest, manifest, key_id, installed_at
                     FROM releases WHERE extension_id = ?1",
                    [extension_id],
                    release_row,
                )
                .optional()?
                .ok_or_else(|| StateError::NotFound(format!("{extension_id} is not installed")))?;
            tx.execute(
                "DELETE FROM releases WHERE extension_id = ?1",
                [extension_id],
            )?;
            tx.execute(
                "DELETE FROM approvals WHERE extension_id = ?1",
                [extension_id],
            )?;
            tx.execute("DELETE FROM grants WHERE extension_id = ?1", [extension_id])?;
            bump_extension(tx, extension_id)?;
            Ok(release)
        })
    }

    // ---- approvals and grants -------------------------------------------

    /// Sets the approval of `capabilities` for the installed release with
    /// `digest`. Bumps the extension's generations.
    pub fn set_approval(
        &self,
        extension_id: &str,
        digest: &str,
        capabilities: &[String],
        approved: bool,
    ) -> Result<()> {
        self.write(|tx| {
            let installed: Option<String> = tx
                .query_row(
                    "SELECT digest FROM releases WHERE extension_id = ?1",
                    [extension_id],
                    |r| r.get(0),
                )
                .optional()?;
            if installed.as_deref() != Some(digest) {
                return Err(StateError::Conflict(format!(
                    "the installed release of {extension_id} changed; approve again"
                )));
            }
            for capability in capabilities {
                if approved {
                    tx.execute(
                        "INSERT OR IGNORE INTO approvals (extension_id, digest, capability, approved_at)
                         VALUES (?1, ?2, ?3, ?4)",
                        params![extension_id, digest, capability, now_secs()],
                    )?;
                } else {
                    tx.execute(
                        "DELETE FROM approvals WHERE extension_id = ?1 AND digest = ?2 AND capability = ?3",
                        params![extension_id, digest, capability],
                    )?;
                }
            }
            bump_extension(tx, extension_id)?;
            Ok(())
        })
    }

    pub fn approvals(&self, extension_id: &str, digest: &str) -> Result<BTreeSet<String>> {
        let conn = self.conn();
        approvals(&conn, extension_id, digest)
    }

    /// Grants an installed extension to a project (idempotent; bumps).
    pub fn grant(&self, extension_id: &str, project_id: &str) -> Result<u64> {
        self.write(|tx| {
            let installed: bool = tx
                .query_row(
                    "SELECT 1 FROM releases WHERE extension_id = ?1",
                    [extension_id],
                    |_| Ok(true),
                )
                .optional()?
                .unwrap_or(false);
            if !installed {
                return Err(StateError::NotFound(format!("{extension_id} is not installed")));
            }
            tx.execute(
                "INSERT OR IGNORE INTO grants (extension_id, project_id, granted_at) VALUES (?1, ?2, ?3)",
                params![extension_id, project_id, now_secs()],
            )?;
            bump_pair(tx, extension_id, project_id)
        })
    }

    /// Revokes a grant; answers whether one existed. Bumps the generation.
    pub fn revoke(&self, extension_id: &str, project_id: &str) -> Result<bool> {
        self.write(|tx| {
            let removed = tx.execute(
                "DELETE FROM grants WHERE extension_id = ?1 AND project_id = ?2",
                params![extension_id, project_id],
            )?;
            bump_pair(tx, extension_id, project_id)?;
            Ok(removed > 0)
        })
    }

    /// The grant check that every host call re-runs.
    pub fn is_granted(&self, extension_id: &str, project_id: &str) -> Result<bool> {
        let conn = self.conn();
        is_granted(&conn, extension_id, project_id)
    }

    pub fn grants(&self) -> Result<Vec<(String, String)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT extension_id, project_id FROM grants ORDER BY extension_id, project_id",
        )?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn generation(&self, extension_id: &str, project_id: &str) -> Result<u64> {
        let conn = self.conn();
        generation(&conn, extension_id, project_id)
    }

    // ---- projects and bindings ------------------------------------------

    pub fn set_tracking_origin(&self, project_id: &str, origin: Option<&str>) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO projects (project_id, tracking_origin) VALUES (?1, ?2)
                 ON CONFLICT (project_id) DO UPDATE SET tracking_origin = excluded.tracking_origin",
                params![project_id, origin],
            )?;
            bump_project(tx, project_id)
        })
    }

    pub fn project_settings(&self, project_id: &str) -> Result<ProjectSettings> {
        let conn = self.conn();
        project_settings(&conn, project_id)
    }

    pub fn set_binding(&self, binding: &Binding) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO bindings (project_id, name, origin, secret, auth_style, timeout_ms, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (project_id, name) DO UPDATE SET origin = excluded.origin,
                   secret = excluded.secret, auth_style = excluded.auth_style,
                   timeout_ms = excluded.timeout_ms, updated_at = excluded.updated_at",
                params![
                    binding.project_id,
                    binding.name,
                    binding.origin,
                    binding.secret.expose(),
                    binding.auth_style.as_str(),
                    binding.timeout.as_millis() as i64,
                    now_secs()
                ],
            )?;
            bump_project(tx, &binding.project_id)
        })
    }

    /// A binding with its secret: for the HTTP capability only.
    pub(crate) fn binding(&self, project_id: &str, name: &str) -> Result<Option<Binding>> {
        let conn = self.conn();
        Ok(conn
            .prepare_cached(
                "SELECT project_id, name, origin, secret, auth_style, timeout_ms
                 FROM bindings WHERE project_id = ?1 AND name = ?2",
            )?
            .query_row(params![project_id, name], binding_row)
            .optional()?)
    }

    /// Every secret of a project, for redacting guest output.
    pub(crate) fn project_secrets(&self, project_id: &str) -> Result<Vec<Secret>> {
        let bindings = project_bindings(&self.conn(), project_id)?;
        Ok(bindings.into_iter().map(|binding| binding.secret).collect())
    }

    /// Bindings without secrets.
    pub fn bindings(&self, project_id: Option<&str>) -> Result<Vec<BindingInfo>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT project_id, name, origin, auth_style, timeout_ms, length(secret) > 0, updated_at
             FROM bindings WHERE ?1 IS NULL OR project_id = ?1 ORDER BY project_id, name",
        )?;
        let rows = stmt.query_map([project_id], |r| {
            Ok(BindingInfo {
                project_id: r.get(0)?,
                name: r.get(1)?,
                origin: r.get(2)?,
                auth_style: r.get(3)?,
                timeout_ms: r.get::<_, i64>(4)? as u64,
                secret_set: r.get(5)?,
                updated_at: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    // ---- users and tokens -----------------------------------------------

    /// Stores a token (hashed) for `user` with access to `projects`, giving
    /// the user access to those projects.
    pub fn store_token(
        &self,
        token: &str,
        user_id: &str,
        projects: &[String],
        expires_at: i64,
    ) -> Result<()> {
        let hash = token_hash(token);
        self.write(|tx| {
            tx.execute(
                "INSERT INTO tokens (token_hash, user_id, issued_at, expires_at) VALUES (?1, ?2, ?3, ?4)",
                params![hash, user_id, now_secs(), expires_at],
            )?;
            for project in projects {
                tx.execute(
                    "INSERT OR IGNORE INTO user_projects (user_id, project_id) VALUES (?1, ?2)",
                    params![user_id, project],
                )?;
                tx.execute(
                    "INSERT OR IGNORE INTO token_projects (token_hash, project_id) VALUES (?1, ?2)",
                    params![hash, project],
                )?;
            }
            Ok(())
        })
    }

    /// Takes a user's access to a project away (their tokens stop working
    /// for it at the next invocation).
    pub fn remove_project_access(&self, user_id: &str, project_id: &str) -> Result<bool> {
        self.write(|tx| {
            Ok(tx.execute(
                "DELETE FROM user_projects WHERE user_id = ?1 AND project_id = ?2",
                params![user_id, project_id],
            )? > 0)
        })
    }

    /// The token's user, expiry and the projects it can reach now (named by
    /// the token and still the user's), with each project's granted
    /// extensions; `None` for an unknown or expired token.
    pub fn token_access(&self, token: &str) -> Result<Option<TokenAccess>> {
        let conn = self.conn();
        let hash = token_hash(token);
        let Some((user, expires_at)) = conn
            .prepare_cached(
                "SELECT user_id, expires_at FROM tokens WHERE token_hash = ?1 AND expires_at > ?2",
            )?
            .query_row(params![hash, now_secs()], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?
        else {
            return Ok(None);
        };
        let mut stmt = conn.prepare_cached(
            "SELECT tp.project_id, g.extension_id
               FROM token_projects tp
               JOIN user_projects up ON up.project_id = tp.project_id AND up.user_id = ?2
               LEFT JOIN grants g ON g.project_id = tp.project_id
              WHERE tp.token_hash = ?1
              ORDER BY tp.project_id, g.extension_id",
        )?;
        let rows = stmt.query_map(params![hash, user], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
        })?;
        let mut projects: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for row in rows {
            let (project, extension) = row?;
            let granted = projects.entry(project).or_default();
            granted.extend(extension);
        }
        Ok(Some(TokenAccess {
            user,
            expires_at,
            projects,
        }))
    }

    /// Deletes tokens that expired more than `grace_secs` ago; returns how many.
    pub fn prune_expired_tokens(&self, grace_secs: i64) -> Result<usize> {
        self.write(|tx| {
            Ok(tx.execute(
                "DELETE FROM tokens WHERE expires_at <= ?1",
                params![now_secs().saturating_sub(grace_secs)],
            )?)
        })
    }

    // ---- invocation -----------------------------------------------------

    /// Reads everything the invocation checks need, in one lock.
    pub fn invocation_snapshot(
        &self,
        token: &str,
        extension_id: &str,
        project_id: &str,
    ) -> Result<Arc<InvocationSnapshot>> {
        let key = (
            token_hash(token),
            extension_id.to_string(),
            project_id.to_string(),
        );
        let now = now_secs();
        let stored = self.cached(&self.snapshots, key, |key, version| {
            let mut conn = self.conn();
            // One read transaction: one snapshot even against other
            // processes writing the file, and one lock of the database
            // instead of one per query.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
            let stored = read_snapshot(&tx, key, version)?;
            tx.finish()?;
            Ok(stored)
        })?;
        Ok(stored.at(now))
    }

    /// The call-time check of host calls: grant and approval, now.
    pub fn call_time_check(
        &self,
        extension_id: &str,
        project_id: &str,
        digest: &str,
        capability: &str,
    ) -> Result<(bool, bool)> {
        let conn = self.conn();
        let granted = is_granted(&conn, extension_id, project_id)?;
        let approved = conn
            .prepare_cached(
                "SELECT 1 FROM approvals WHERE extension_id = ?1 AND digest = ?2 AND capability = ?3",
            )?
            .query_row(params![extension_id, digest, capability], |_| Ok(()))
            .optional()?
            .is_some();
        Ok((granted, approved))
    }

    // ---- documents ------------------------------------------------------

    pub fn document(
        &self,
        scope: DocumentScope<'_>,
        collection: &str,
        id: &str,
    ) -> Result<Option<StoredDocument>> {
        let conn = self.conn();
        get_document(&conn, scope, collection, id)
    }

    /// [`Self::document`], reused while the state stays at one version.
    pub fn document_cached(
        &self,
        scope: DocumentScope<'_>,
        collection: &str,
        id: &str,
    ) -> Result<Option<StoredDocument>> {
        let key = (
            scope.project_id.to_string(),
            scope.extension_id.to_string(),
            collection.to_string(),
            id.to_string(),
        );
        self.cached(&self.documents, key, |_, _| {
            self.document(scope, collection, id)
        })
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

    pub fn put_document(
        &self,
        scope: DocumentScope<'_>,
        collection: &str,
        id: &str,
        body: &str,
        condition: Condition,
    ) -> Result<WriteOutcome<u64>> {
        self.write(|tx| {
            let stored = get_document(tx, scope, collection, id)?;
            let current = stored.as_ref().map(|d| d.revision).unwrap_or(0);
            if !condition_holds(condition, current) {
                return Ok(WriteOutcome::Conflict(current));
            }
            let revision = current + 1;
            tx.execute(
                "INSERT INTO documents (project_id, extension_id, collection, id, revision, body, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (project_id, extension_id, collection, id) DO UPDATE SET
                   revision = excluded.revision, body = excluded.body, updated_at = excluded.updated_at",
                params![
                    scope.project_id,
                    scope.extension_id,
                    collection,
                    id,
                    revision as i64,
                    body,
                    now_secs()
                ],
            )?;
            Ok(WriteOutcome::Done(revision))
        })
    }

    pub fn delete_document(
        &self,
        scope: DocumentScope<'_>,
        collection: &str,
        id: &str,
        condition: Condition,
    ) -> Result<WriteOutcome<bool>> {
        self.write(|tx| {
            let current = get_document(tx, scope, collection, id)?
                .map(|d| d.revision)
                .unwrap_or(0);
            if !condition_holds(condition, current) {
                return Ok(WriteOutcome::Conflict(current));
            }
            let removed = tx.execute(
                "DELETE FROM documents WHERE project_id = ?1 AND extension_id = ?2 AND collection = ?3 AND id = ?4",
                params![scope.project_id, scope.extension_id, collection, id],
            )?;
            Ok(WriteOutcome::Done(removed > 0))
        })
    }

    /// Every document body of a project (operator inspection and tests).
    pub fn documents(
        &self,
        project_id: &str,
    ) -> Result<Vec<(String, String, String, StoredDocument)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT extension_id, collection, id, revision, body FROM documents
             WHERE project_id = ?1 ORDER BY extension_id, collection, id",
        )?;
        let rows = stmt.query_map([project_id], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                StoredDocument {
                    revision: r.get::<_, i64>(3)? as u64,
                    body: r.get(4)?,
                },
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// Everything the invocation checks read, at `version`; `user` is the
/// token's user whether or not the token has expired.
fn read_snapshot(
    conn: &Connection,
    (hash, extension_id, project_id): &(String, String, String),
    version: Option<StateVersion>,
) -> Result<StoredSnapshot> {
    let token: Option<(String, i64)> = conn
        .prepare_cached("SELECT user_id, expires_at FROM tokens WHERE token_hash = ?1")?
        .query_row([hash], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let project_access = match &token {
        None => false,
        Some((user, _)) => conn
            .prepare_cached(
                "SELECT 1 FROM token_projects tp JOIN user_projects up
                   ON up.project_id = tp.project_id AND up.user_id = ?2
                 WHERE tp.token_hash = ?1 AND tp.project_id = ?3",
            )?
            .query_row(params![hash, user, project_id], |_| Ok(()))
            .optional()?
            .is_some(),
    };
    let granted = is_granted(conn, extension_id, project_id)?;
    let release_digest: Option<String> = conn
        .prepare_cached("SELECT digest FROM releases WHERE extension_id = ?1")?
        .query_row([extension_id], |r| r.get(0))
        .optional()?;
    let approved = match &release_digest {
        Some(digest) => approvals(conn, extension_id, digest)?,
        None => BTreeSet::new(),
    };
    let (user, token_expires_at) = match token {
        Some((user, expires_at)) => (Some(user), Some(expires_at)),
        None => (None, None),
    };
    Ok(StoredSnapshot {
        token_expires_at,
        snapshot: Arc::new(InvocationSnapshot {
            user,
            project_access,
            granted,
            release_digest,
            approved,
            generation: generation(conn, extension_id, project_id)?,
            settings: project_settings(conn, project_id)?,
            bindings: project_bindings(conn, project_id)?,
            version,
        }),
    })
}

/// Locks `mutex`, going on past a panic of another holder (every value
/// guarded this way stays consistent between statements).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn binding_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Binding> {
    let style: String = r.get(4)?;
    Ok(Binding {
        project_id: r.get(0)?,
        name: r.get(1)?,
        origin: r.get(2)?,
        secret: Secret::new(r.get::<_, String>(3)?),
        auth_style: AuthStyle::parse(&style).unwrap_or(AuthStyle::Bearer),
        timeout: Duration::from_millis(r.get::<_, i64>(5)?.max(1) as u64),
    })
}

fn project_bindings(conn: &Connection, project_id: &str) -> Result<Vec<Binding>> {
    let mut stmt = conn.prepare_cached(
        "SELECT project_id, name, origin, secret, auth_style, timeout_ms
         FROM bindings WHERE project_id = ?1 ORDER BY name",
    )?;
    let rows = stmt.query_map([project_id], binding_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn condition_holds(condition: Condition, current: u64) -> bool {
    match condition {
        Condition::None => true,
        Condition::Absent => current == 0,
        Condition::Revision(r) => current == r && r != 0,
    }
}

fn migrate(conn: &mut Connection) -> Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for (i, migration) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
        tx.execute_batch(migration)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
    }
    tx.commit()?;
    Ok(())
}

fn release_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredRelease> {
    Ok(StoredRelease {
        extension_id: r.get(0)?,
        version: r.get(1)?,
        digest: r.get(2)?,
        manifest: r.get(3)?,
        key_id: r.get(4)?,
        installed_at: r.get(5)?,
    })
}

fn approvals(conn: &Connection, extension_id: &str, digest: &str) -> Result<BTreeSet<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT capability FROM approvals WHERE extension_id = ?1 AND digest = ?2",
    )?;
    let rows = stmt.query_map(params![extension_id, digest], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn is_granted(conn: &Connection, extension_id: &str, project_id: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM grants WHERE extension_id = ?1 AND project_id = ?2")?
        .query_row(params![extension_id, project_id], |_| Ok(()))
        .optional()?
        .is_some())
}

fn generation(conn: &Connection, extension_id: &str, project_id: &str) -> Result<u64> {
    Ok(conn
        .prepare_cached(
            "SELECT generation FROM generations WHERE extension_id = ?1 AND project_id = ?2",
        )?
        .query_row(params![extension_id, project_id], |r| r.get::<_, i64>(0))
        .optional()?
        .unwrap_or(0) as u64)
}

fn project_settings(conn: &Connection, project_id: &str) -> Result<ProjectSettings> {
    Ok(conn
        .prepare_cached("SELECT tracking_origin FROM projects WHERE project_id = ?1")?
        .query_row([project_id], |r| {
            Ok(ProjectSettings {
                tracking_origin: r.get(0)?,
            })
        })
        .optional()?
        .unwrap_or_default())
}

fn get_document(
    conn: &Connection,
    scope: DocumentScope<'_>,
    collection: &str,
    id: &str,
) -> Result<Option<StoredDocument>> {
    Ok(conn
        .prepare_cached(
            "SELECT revision, body FROM documents
             WHERE project_id = ?1 AND extension_id = ?2 AND collection = ?3 AND id = ?4",
        )?
        .query_row(
            params![scope.project_id, scope.extension_id, collection, id],
            |r| {
                Ok(StoredDocument {
                    revision: r.get::<_, i64>(0)? as u64,
                    body: r.get(1)?,
                })
            },
        )
        .optional()?)
}

/// Every generation of (extension, project) moves by one.
fn bump_pair(tx: &Transaction<'_>, extension_id: &str, project_id: &str) -> Result<u64> {
    Ok(tx.query_row(
        "INSERT INTO generations (extension_id, project_id, generation) VALUES (?1, ?2, 1)
         ON CONFLICT (extension_id, project_id) DO UPDATE SET generation = generation + 1
         RETURNING generation",
        params![extension_id, project_id],
        |r| r.get::<_, i64>(0),
    )? as u64)
}

fn bump_extension(tx: &Transaction<'_>, extension_id: &str) -> Result<()> {
    tx.execute(
        "UPDATE generations SET generation = generation + 1 WHERE extension_id = ?1",
        [extension_id],
    )?;
    Ok(())
}

fn bump_project(tx: &Transaction<'_>, project_id: &str) -> Result<()> {
    tx.execute(
        "UPDATE generations SET generation = generation + 1 WHERE project_id = ?1",
        [project_id],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> (tempfile::TempDir, State) {
        let dir = tempfile::tempdir().unwrap();
        let state = State::open(&dir.path().join(DB_FILE)).unwrap();
        (dir, state)
    }

    const P1: DocumentScope<'static> = DocumentScope {
        project_id: "p1",
        extension_id: "ext",
    };

    #[test]
    fn the_version_moves_on_every_commit_from_any_connection() {
        let (dir, state) = open();
        let start = state.version().unwrap();
        assert_eq!(state.version().unwrap(), start, "reads move nothing");
        state.revoke("ext", "p1").unwrap();
        let after_own = state.version().unwrap();
        assert_ne!(after_own, start, "a write through this handle");
        // The operator CLI next to a running host: another connection.
        let other = State::open(&dir.path().join(DB_FILE)).unwrap();
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
        let other = State::open(&dir.path().join(DB_FILE)).unwrap();
        assert_eq!(other.version(), None, "not alone: nothing is repaired");
        drop((state, other));
        let alone = State::open(&dir.path().join(DB_FILE)).unwrap();
        assert!(alone.version().is_some(), "alone with the state: repaired");
    }

    #[test]
    fn documents_are_reused_only_while_the_version_holds() {
        let (dir, state) = open();
        state
            .put_document(P1, "site", "a", "1", Condition::Absent)
            .unwrap();
        let read = |state: &State| state.document_cached(P1, "site", "a").unwrap().unwrap();
        assert_eq!(read(&state).body, "1");
        // Another process writes: the next read sees it.
        let other = State::open(&dir.path().join(DB_FILE)).unwrap();
        other
            .put_document(P1, "site", "a", "2", Condition::Revision(1))
            .unwrap();
        assert_eq!(read(&state).body, "2");
        // While a commit is under way nothing cached is used.
        let in_flight = other.changes.begin();
        other
            .conn()
            .execute(
                "UPDATE documents SET body = '3', revision = 3 WHERE id = 'a'",
                [],
            )
            .unwrap();
        assert_eq!(read(&state).body, "3");
        drop(in_flight);
        assert_eq!(read(&state).body, "3");
    }

    #[test]
    fn a_repeated_snapshot_sees_a_revoke_from_another_process() {
        let (dir, state) = open();
        state
            .store_token("hst_t", "u", &["p1".into()], now_secs() + 60)
            .unwrap();
        let release = NewRelease {
            extension_id: "ext",
            version: "1.0.0",
            digest: "d1",
            manifest: "",
            key_id: "k",
            files: &BTreeMap::new(),
        };
        state.store_release(&release, false).unwrap();
        state.grant("ext", "p1").unwrap();
        for _ in 0..2 {
            let snapshot = state.invocation_snapshot("hst_t", "ext", "p1").unwrap();
            assert!(snapshot.granted && snapshot.project_access);
        }
        let other = State::open(&dir.path().join(DB_FILE)).unwrap();
        other.revoke("ext", "p1").unwrap();
        assert!(
            !state
                .invocation_snapshot("hst_t", "ext", "p1")
                .unwrap()
                .granted
        );
    }

    #[test]
    fn a_snapshot_read_before_a_token_expired_does_not_outlive_it() {
        let (_dir, state) = open();
        let key = (token_hash("hst_t"), "ext".to_string(), "p1".to_string());
        state
            .store_token("hst_t", "u", &["p1".into()], now_secs() + 60)
            .unwrap();
        let conn = state.conn();
        let stored = read_snapshot(&conn, &key, state.version()).unwrap();
        assert!(stored.clone().at(now_secs()).project_access);
        let later = stored.at(now_secs() + 61);
        assert!(later.user.is_none() && !later.project_access);
    }

    #[test]
    fn documents_have_revisions_and_compare_and_set() {
        let (_dir, state) = open();
        assert_eq!(
            state
                .put_document(P1, "site", "a", "1", Condition::Absent)
                .unwrap(),
            WriteOutcome::Done(1)
        );
        assert_eq!(
            state
                .put_document(P1, "site", "a", "2", Condition::Absent)
                .unwrap(),
            WriteOutcome::Conflict(1)
        );
        assert_eq!(
            state
                .put_document(P1, "site", "a", "2", Condition::Revision(1))
                .unwrap(),
            WriteOutcome::Done(2)
        );
        assert_eq!(
            state
                .put_document(P1, "site", "a", "3", Condition::Revision(1))
                .unwrap(),
            WriteOutcome::Conflict(2)
        );
        let other = DocumentScope {
            project_id: "p2",
            extension_id: "ext",
        };
        assert_eq!(state.document(other, "site", "a").unwrap(), None);
        assert_eq!(
            state
                .delete_document(P1, "site", "a", Condition::Revision(1))
                .unwrap(),
            WriteOutcome::Conflict(2)
        );
        assert_eq!(
            state
                .delete_document(P1, "site", "a", Condition::None)
                .unwrap(),
            WriteOutcome::Done(true)
        );
        assert_eq!(
            state
                .delete_document(P1, "site", "a", Condition::None)
                .unwrap(),
            WriteOutcome::Done(false)
        );
    }

    #[test]
    fn tokens_are_stored_hashed_and_expire() {
        let (dir, state) = open();
        state
            .store_token("hst_secret-token", "u", &["p1".into()], now_secs() + 60)
            .unwrap();
        state
            .store_token("hst_old", "u", &["p1".into()], now_secs() - 1)
            .unwrap();
        assert!(
            state
                .invocation_snapshot("hst_secret-token", "ext", "p1")
                .unwrap()
                .project_access
        );
        assert!(
            state
                .invocation_snapshot("hst_old", "ext", "p1")
                .unwrap()
                .user
                .is_none()
        );
        drop(state);
        let raw = std::fs::read(dir.path().join(DB_FILE)).unwrap();
        let needle = b"hst_secret-token";
        assert!(!raw.windows(needle.len()).any(|w| w == needle));
    }

    #[test]
    fn reopening_migrates_once() {
        let (dir, state) = open();
        state
            .set_tracking_origin("p1", Some("https://t.example"))
            .unwrap();
        drop(state);
        let state = State::open(&dir.path().join(DB_FILE)).unwrap();
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

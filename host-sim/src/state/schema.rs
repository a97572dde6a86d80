//! The database schema and its migrations (`PRAGMA user_version` counts
//! the applied ones).

use std::path::Path;
use std::time::Duration;

use db_lifecycle::SchemaTooNew;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use super::error::Result;

const MIGRATIONS: &[&str] = &[
    r#"
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
"#,
    r#"
CREATE TABLE tracking_settings (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    challenge_key BLOB NOT NULL,
    ingress_target TEXT,
    console_host TEXT,
    reserved TEXT NOT NULL
);
CREATE TABLE tracking_domains (
    hostname TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    step TEXT NOT NULL,
    challenge TEXT NOT NULL,
    ingress_target TEXT NOT NULL,
    dns_report TEXT,
    checked_at INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
"#,
    r#"
CREATE TABLE tracking_routes (
    hostname TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    provider_origin TEXT NOT NULL,
    applied_at INTEGER NOT NULL
);
"#,
    // Secrets at rest (issue 28): the master keys that seal the stored
    // secrets, listed by id (a hash, never the key); `master_key_wraps`
    // holds a key sealed under another one, which a rotation writes so
    // every process, whichever of the two keys it was started with, reads
    // both until the rotation is done. The key with the highest `seq` seals
    // new values. The challenge key becomes text: hex here, sealed by the
    // first open with a master key (as are the bindings' secrets).
    r#"
CREATE TABLE master_keys (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
);
CREATE TABLE master_key_wraps (
    key_id TEXT NOT NULL REFERENCES master_keys(id),
    wrapping_key_id TEXT NOT NULL REFERENCES master_keys(id),
    wrapped TEXT NOT NULL,
    PRIMARY KEY (key_id, wrapping_key_id)
);
CREATE TABLE tracking_settings_sealed (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    challenge_key TEXT NOT NULL,
    ingress_target TEXT,
    console_host TEXT,
    reserved TEXT NOT NULL
);
INSERT INTO tracking_settings_sealed (id, challenge_key, ingress_target, console_host, reserved)
    SELECT id, lower(hex(challenge_key)), ingress_target, console_host, reserved
    FROM tracking_settings;
DROP TABLE tracking_settings;
ALTER TABLE tracking_settings_sealed RENAME TO tracking_settings;
"#,
    // OAuth authorization of the MCP server (issue 31). A token row may be
    // bound to one resource (`audience`, NULL: an operator-issued token,
    // valid on every surface but refused by none) and carry the scopes
    // granted (`scope`, NULL: every scope); one issued by the authorization
    // server belongs to a connected app (`app_id`: a person's consent to a
    // client) and to the refresh family of one authorization (`family_id`).
    // Codes, refresh tokens and client secrets are stored as SHA-256 hashes
    // only, like the tokens.
    r#"
ALTER TABLE tokens ADD COLUMN audience TEXT;
ALTER TABLE tokens ADD COLUMN scope TEXT;
ALTER TABLE tokens ADD COLUMN app_id TEXT;
ALTER TABLE tokens ADD COLUMN family_id TEXT;
CREATE INDEX tokens_by_app ON tokens (app_id);
CREATE INDEX tokens_by_family ON tokens (family_id);
CREATE TABLE oauth_clients (
    client_id TEXT PRIMARY KEY,
    auth_method TEXT NOT NULL,
    client_name TEXT NOT NULL,
    redirect_uris TEXT NOT NULL,
    secret_hash TEXT,
    metadata TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE oauth_apps (
    app_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    client_id TEXT NOT NULL,
    client_name TEXT NOT NULL,
    redirect_host TEXT NOT NULL,
    scope TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    UNIQUE (user_id, client_id)
);
CREATE TABLE oauth_app_projects (
    app_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    PRIMARY KEY (app_id, project_id)
);
CREATE TABLE oauth_codes (
    code_hash TEXT PRIMARY KEY,
    app_id TEXT NOT NULL,
    client_id TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    resource TEXT NOT NULL,
    scope TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    family_id TEXT
);
CREATE TABLE oauth_refresh_tokens (
    token_hash TEXT PRIMARY KEY,
    family_id TEXT NOT NULL,
    app_id TEXT NOT NULL,
    client_id TEXT NOT NULL,
    resource TEXT NOT NULL,
    scope TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at INTEGER
);
CREATE INDEX oauth_refresh_by_family ON oauth_refresh_tokens (family_id);
"#,
    // A removal in progress: `remove` marks the domain first, so that no
    // later `apply` routes it again while the edge is still being asked
    // (it stays out of the desired routing until the removal finishes or
    // `tracking-domain keep` undoes it).
    r#"
ALTER TABLE tracking_domains ADD COLUMN removal_started_at INTEGER;
"#,
];

/// The schema version a database must have for this host.
pub(super) const LATEST: i64 = MIGRATIONS.len() as i64;

/// The schema version of a database (reading its tables, so a file that is
/// not a database fails here).
pub(super) fn version(conn: &Connection) -> Result<i64> {
    conn.query_row("SELECT COUNT(*) FROM sqlite_schema", [], |_| Ok(()))?;
    Ok(conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
}

/// Refuses a database a newer release migrated (its `user_version` past
/// the migrations this host knows), before anything is written.
pub(super) fn refuse_newer(conn: &Connection, path: &Path) -> Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    SchemaTooNew::check(path.display(), version, LATEST)?;
    Ok(())
}

/// What the existing database at `path` is, looked at without writing to
/// it (nor creating it): refused when its schema is newer than this host's;
/// otherwise the ids of the master keys it lists, oldest first (none for a
/// new state).
pub fn inspect(path: &Path) -> Result<Vec<String>> {
    if !path.is_file() {
        return Ok(Vec::new());
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "query_only", true)?;
    refuse_newer(&conn, path)?;
    let has_keys = conn
        .query_row(
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'master_keys'",
            [],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if !has_keys {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare("SELECT id FROM master_keys ORDER BY seq")?;
    let ids = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(ids)
}

/// Applies the migrations the database has not seen, in one transaction.
pub(super) fn migrate(conn: &mut Connection) -> Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for (i, migration) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
        tx.execute_batch(migration)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
    }
    tx.commit()?;
    Ok(())
}

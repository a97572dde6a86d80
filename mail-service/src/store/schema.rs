//! What an existing database is, looked at before `open` writes anything:
//! its schema version (the highest migration sqlx recorded), refused when
//! a newer release wrote it ([`SchemaTooNew`]), and the master keys it
//! lists (so a missing key file is not made anew beside a database whose
//! secrets are sealed; see `MasterKeySource::load_for`).

use std::path::Path;
use std::str::FromStr;

use db_lifecycle::SchemaTooNew;
use rusqlite::{OpenFlags, OptionalExtension};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

use super::StorageConfig;

/// The migrations of each backend, as built into this binary.
pub(super) static SQLITE_MIGRATIONS: sqlx::migrate::Migrator =
    sqlx::migrate!("./migrations/sqlite");
pub(super) static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator =
    sqlx::migrate!("./migrations/postgres");

/// The newest schema version this binary knows on a backend.
pub(super) fn known(migrator: &sqlx::migrate::Migrator) -> i64 {
    migrator.iter().map(|m| m.version).max().unwrap_or(0)
}

/// An existing database, as it was before this process.
#[derive(Debug, Default)]
pub(super) struct Existing {
    /// The ids of its master keys, oldest first.
    pub master_keys: Vec<String>,
}

/// How messages name the database of `config` (never a URL's password).
pub(super) fn describe(config: &StorageConfig) -> String {
    match config {
        StorageConfig::Sqlite { path, .. } => path.display().to_string(),
        StorageConfig::Postgres { url, schema, .. } => {
            let server = PgConnectOptions::from_str(url)
                .map(|o| {
                    let database = o.get_database().unwrap_or_default().to_owned();
                    format!("{}:{}/{database}", o.get_host(), o.get_port())
                })
                .unwrap_or_else(|_| "PostgreSQL".into());
            match schema {
                Some(schema) => format!("{server} (schema {schema})"),
                None => server,
            }
        }
    }
}

/// Looks at the database of `config` without writing to it: `None` when
/// there is none yet; refused when its schema is newer than this binary's.
pub(super) async fn inspect(config: &StorageConfig) -> anyhow::Result<Option<Existing>> {
    let found = match config {
        StorageConfig::Sqlite { path, .. } => inspect_sqlite(path)?,
        StorageConfig::Postgres { url, schema, .. } => {
            inspect_postgres(url, schema.as_deref()).await?
        }
    };
    let Some((version, master_keys)) = found else {
        return Ok(None);
    };
    let migrator = match config {
        StorageConfig::Sqlite { .. } => &SQLITE_MIGRATIONS,
        StorageConfig::Postgres { .. } => &POSTGRES_MIGRATIONS,
    };
    SchemaTooNew::check(describe(config), version, known(migrator))?;
    Ok(Some(Existing { master_keys }))
}

/// The schema version and master keys of the SQLite file at `path`, if it
/// is a database of this service.
fn inspect_sqlite(path: &Path) -> anyhow::Result<Option<(i64, Vec<String>)>> {
    if !path.is_file() {
        return Ok(None);
    }
    // Never created here, and this connection writes nothing.
    let conn = rusqlite::Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "query_only", true)?;
    let has = |table: &str| {
        conn.query_row(
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [table],
            |_| Ok(()),
        )
        .optional()
        .map(|found| found.is_some())
    };
    if !has("_sqlx_migrations")? {
        return Ok(None);
    }
    let version: i64 = conn.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations",
        [],
        |r| r.get(0),
    )?;
    let mut keys = Vec::new();
    if has("master_keys")? {
        let mut stmt = conn.prepare("SELECT id FROM master_keys ORDER BY seq")?;
        for id in stmt.query_map([], |r| r.get::<_, String>(0))? {
            keys.push(id?);
        }
    }
    Ok(Some((version, keys)))
}

/// The same for a PostgreSQL database (in `schema`, when set).
async fn inspect_postgres(
    url: &str,
    schema: Option<&str>,
) -> anyhow::Result<Option<(i64, Vec<String>)>> {
    let mut options = PgConnectOptions::from_str(url)?;
    if let Some(schema) = schema {
        options = options.options([("search_path", schema)]);
    }
    let mut conn = options.connect().await?;
    let has = |table: &'static str| {
        sqlx::query_scalar::<_, bool>("SELECT to_regclass($1) IS NOT NULL").bind(table)
    };
    let found = if has("_sqlx_migrations").fetch_one(&mut conn).await? {
        let version: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations")
                .fetch_one(&mut conn)
                .await?;
        let keys: Vec<String> = if has("master_keys").fetch_one(&mut conn).await? {
            sqlx::query_scalar("SELECT id FROM master_keys ORDER BY seq")
                .fetch_all(&mut conn)
                .await?
        } else {
            Vec::new()
        };
        Some((version, keys))
    } else {
        None
    };
    conn.close().await?;
    Ok(found)
}

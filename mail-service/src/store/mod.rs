//! Storage: one interface, two backends (embedded SQLite in WAL mode, shared
//! PostgreSQL). Every queue, lock, idempotency reservation and rate-limit
//! window lives here; API nodes keep no state needed for correctness.
//!
//! Reads go through a sqlx pool on both backends and map each record with
//! its one `sqlx::FromRow` derive; `on_db!` expands a read once per backend
//! over the same SQL text (`$n` placeholders work on both). The two reads
//! every send makes (its domain, its recipients' suppressions) run on the
//! request's own thread on SQLite (`sqlite_reads`), with the same SQL.
//!
//! Writes are units of work (`unit`): a list of statements that commit
//! together, built once here and run by the backend's write path: SQLite's
//! writer thread with group commit (`sqlite`), PostgreSQL's pooled
//! connections (`postgres`). Where a unit would cost PostgreSQL several round
//! trips, it has a one-statement form there (marked `PG_`); both forms are
//! exercised by every test on both backends.
//!
//! The queries live by subject: `accounts` (tenants, API keys), `logs`
//! (request logs, rate windows), `emails` (emails, idempotency, handoff
//! outcomes, scheduling), `webhooks` (webhooks, their outbox and delivery
//! attempts; `record_event` adds an event to a unit).

mod postgres;
mod records;
mod schema;
mod sqlite;
mod sqlite_reads;
mod unit;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::{ConnectOptions, Connection};

use crate::error::Error;
use crate::model::{ApiKey, EmailStatus, KeyState, Principal, RequestLog, StoredEmail, Tenant};

pub use analytics::{DayCount, DomainDayCount};
pub use domains::{DkimKey, DomainCheck, NewDomain, SendingDomain};
pub use feedback::{FeedbackTarget, NewAutoSuppression, NewEvent, NewReport};
pub use health::QueueDepths;
pub use records::{
    Change, ClaimedEmail, EmailFilter, EmailUpdate, KeyRecord, KeyRef, LogFilter, NewEmail, NewLog,
    RateHit, Reservation, Reserved, ScreenedStart, Started, Swept,
};
pub(crate) use secrets::Slot;
pub use secrets::{DEFAULT_KEY_FILE, KeyStatus, MasterKeySource, SecretsStatus};
use unit::{Ran, Step, Unit, params};
pub use webhooks::{AttemptOutcome, ClaimedDelivery, WebhookAttempt, WebhookEvent};

/// How long an SQLite write waits for another process (an operator command)
/// that holds the database before it fails with 503.
pub const DEFAULT_SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Readers of the SQLite file (WAL readers never wait for the writer).
const SQLITE_READERS: u32 = 4;

/// Where the data lives.
#[derive(Debug, Clone)]
pub enum StorageConfig {
    /// An SQLite file (created if missing).
    Sqlite {
        path: PathBuf,
        /// How long a write waits for another process's write lock.
        busy_timeout: Duration,
    },
    /// A PostgreSQL database; `schema`, when set, is created if missing and
    /// used as the search path (one database can hold several isolated
    /// deployments, as the tests do).
    Postgres {
        url: String,
        schema: Option<String>,
        max_connections: u32,
    },
}

impl StorageConfig {
    /// An SQLite file with the default busy timeout.
    pub fn sqlite(path: impl Into<PathBuf>) -> StorageConfig {
        StorageConfig::Sqlite {
            path: path.into(),
            busy_timeout: DEFAULT_SQLITE_BUSY_TIMEOUT,
        }
    }
}

#[derive(Debug, Clone)]
enum Db {
    Sqlite {
        reads: SqlitePool,
        /// The send path's reads, on the request's thread.
        inline: sqlite_reads::Readers,
        writer: sqlite::Writer,
    },
    Postgres {
        /// Durable writes.
        writes: PgPool,
        /// Reads and bookkeeping writes (`synchronous_commit = off`).
        reads: PgPool,
        /// Request-log completions, queued onto `reads`.
        completions: postgres::LogCompletions,
    },
}

#[derive(Debug, Clone)]
pub struct Store {
    db: Db,
    /// The master keys this process holds (see `secrets`).
    secrets: std::sync::Arc<secrets::Sealer>,
}

/// Runs a read once per backend: `$pool` is the sqlx pool of either.
macro_rules! on_db {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.db {
            Db::Sqlite { reads: $pool, .. } => $body,
            Db::Postgres { reads: $pool, .. } => $body,
        }
    };
}

/// A page of rows, newest first, before `before_id` (the list endpoints'
/// cursor): `$sql` selects `WHERE <owner> = $1 AND id < $2 ORDER BY id
/// DESC LIMIT $3`, for the owner (a tenant, a webhook, an event).
macro_rules! page {
    ($store:expr, $sql:expr, $owner:expr, $before_id:expr, $limit:expr) => {
        Ok(on_db!($store, pool => {
            sqlx::query_as($sql)
                .bind($owner)
                .bind($before_id.unwrap_or(i64::MAX))
                .bind($limit)
                .fetch_all(pool)
                .await?
        }))
    };
}

/// The row a query selects, if any, with its parameters in `$1, $2` order.
macro_rules! optional {
    ($store:expr, $sql:expr, $($param:expr),+ $(,)?) => {
        Ok(on_db!($store, pool => {
            sqlx::query_as($sql)
                $(.bind($param))+
                .fetch_optional(pool)
                .await?
        }))
    };
}

mod accounts;
mod analytics;
mod domains;
mod emails;
mod feedback;
mod health;
mod logs;
mod secrets;
mod suppressions;
mod webhooks;

impl Store {
    /// Opens the database with the master key beside an SQLite database
    /// (see `open`).
    pub async fn connect(config: &StorageConfig) -> anyhow::Result<Store> {
        Self::open(config, &MasterKeySource::BesideData).await
    }

    /// Opens the database, applies pending migrations and adopts the master
    /// key: on the first start with a key, plain-text secrets are sealed
    /// under it; a key the database does not know, a missing key file
    /// beside a database whose secrets are sealed, and a schema newer than
    /// this binary's ([`db_lifecycle::SchemaTooNew`]) are refused before
    /// anything is written.
    pub async fn open(config: &StorageConfig, key: &MasterKeySource) -> anyhow::Result<Store> {
        let dir = match config {
            StorageConfig::Sqlite { path, .. } => path.parent().unwrap_or_else(|| Path::new(".")),
            StorageConfig::Postgres { .. } => {
                if *key == MasterKeySource::BesideData {
                    anyhow::bail!(
                        "PostgreSQL mode needs the master key: pass --master-key-file FILE (or set MAIL_MASTER_KEY_FILE); make one with `mail-service secrets generate-key FILE` and give every node the same file"
                    );
                }
                Path::new(".")
            }
        };
        let existing = schema::inspect(config).await?.unwrap_or_default();
        let secrets_at_rest::LoadedKey {
            key,
            label,
            created,
        } = key.load_for(dir, &existing.master_keys, &schema::describe(config))?;
        if let Some(file) = created {
            eprintln!("{}", secrets_at_rest::wording::key_created(&file));
        }
        let db = match config {
            StorageConfig::Sqlite { path, busy_timeout } => {
                Self::open_sqlite(path, *busy_timeout).await?
            }
            StorageConfig::Postgres {
                url,
                schema,
                max_connections,
            } => Self::open_postgres(url, schema.as_deref(), *max_connections).await?,
        };
        let store = Store {
            db,
            secrets: std::sync::Arc::new(secrets::Sealer::new(key)),
        };
        store.adopt_master_key(&label).await?;
        Ok(store)
    }

    async fn open_sqlite(path: &Path, busy_timeout: Duration) -> anyhow::Result<Db> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(busy_timeout)
            .foreign_keys(true);
        let mut migrator = options.connect().await?;
        schema::SQLITE_MIGRATIONS.run(&mut migrator).await?;
        migrator.close().await?;
        // Every write goes through the writer; the readers cannot write.
        let reads = SqlitePoolOptions::new()
            .max_connections(SQLITE_READERS)
            .connect_with(options.pragma("query_only", "ON"))
            .await?;
        let writer = sqlite::Writer::start(path, busy_timeout)?;
        let inline = sqlite_reads::Readers::new(path, busy_timeout);
        Ok(Db::Sqlite {
            reads,
            inline,
            writer,
        })
    }

    async fn open_postgres(
        url: &str,
        schema: Option<&str>,
        max_connections: u32,
    ) -> anyhow::Result<Db> {
        let mut options = PgConnectOptions::from_str(url)?;
        if let Some(schema) = schema {
            if !schema
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                anyhow::bail!("database schema `{schema}`: only letters, digits and _ are allowed");
            }
            let mut admin = options.connect().await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "CREATE SCHEMA IF NOT EXISTS {schema}"
            )))
            .execute(&mut admin)
            .await?;
            admin.close().await?;
            options = options.options([("search_path", schema)]);
        }
        let pool = |size: u32, options: PgConnectOptions| {
            PgPoolOptions::new()
                .max_connections(size)
                .acquire_timeout(Duration::from_secs(10))
                .connect_lazy_with(options)
        };
        let writes = pool(max_connections, options.clone());
        schema::POSTGRES_MIGRATIONS.run(&writes).await?;
        let reads = pool(
            (max_connections / 2).max(2),
            options.options([("synchronous_commit", "off")]),
        );
        let completions = postgres::LogCompletions::start(reads.clone());
        Ok(Db::Postgres {
            writes,
            reads,
            completions,
        })
    }

    pub fn backend(&self) -> &'static str {
        match self.db {
            Db::Sqlite { .. } => "sqlite",
            Db::Postgres { .. } => "postgres",
        }
    }

    fn is_postgres(&self) -> bool {
        matches!(self.db, Db::Postgres { .. })
    }

    /// Waits for queued writes, then closes every connection.
    pub async fn close(&self) {
        match &self.db {
            Db::Sqlite { reads, writer, .. } => {
                writer.close().await;
                reads.close().await;
            }
            Db::Postgres {
                writes,
                reads,
                completions,
            } => {
                let _ = completions.written().await;
                writes.close().await;
                reads.close().await;
            }
        }
    }

    /// Runs one unit of work on the backend's write path.
    async fn write(&self, unit: Unit) -> Result<Ran, Error> {
        match &self.db {
            Db::Sqlite { writer, .. } => writer.run(unit).await,
            Db::Postgres { writes, reads, .. } => {
                postgres::run(if unit.durable { writes } else { reads }, &unit).await
            }
        }
    }

    /// Waits until every request-log completion queued before this call
    /// (`finish_log`) is written.
    async fn written_behind(&self) -> Result<(), Error> {
        match &self.db {
            Db::Sqlite { writer, .. } => writer.run(Unit::new(Vec::new())).await.map(drop),
            Db::Postgres { completions, .. } => completions.written().await,
        }
    }

    /// Runs one durable statement; what it yields.
    async fn write_one(&self, step: Step) -> Result<i64, Error> {
        Ok(self.write(Unit::one(step)).await?.last())
    }

    /// Registers a starting node; the returned number seeds its ID generator.
    pub async fn register_node(&self, now: i64) -> Result<i64, Error> {
        self.write_one(Step::value(
            "INSERT INTO nodes (started_at) VALUES ($1) RETURNING id",
            params![now],
        ))
        .await
    }
}

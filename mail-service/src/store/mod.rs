//! Storage: one interface, two backends (embedded SQLite in WAL mode, shared
//! PostgreSQL). Every queue, lock, idempotency reservation and rate-limit
//! window lives here; API nodes keep no state needed for correctness.
//!
//! Reads go through a sqlx pool on both backends and map each record with
//! its one `sqlx::FromRow` derive; `on_db!` expands a read once per backend
//! over the same SQL text (`$n` placeholders work on both).
//!
//! Writes are units of work (`unit`): a list of statements that commit
//! together, built once here and run by the backend's write path: SQLite's
//! writer thread with group commit (`sqlite`), PostgreSQL's pooled
//! connections (`postgres`). Where a unit would cost PostgreSQL several round
//! trips, it has a one-statement form there (marked `PG_`); both forms are
//! exercised by every test on both backends.

mod postgres;
mod records;
mod sqlite;
mod unit;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::{ConnectOptions, Connection};

use crate::error::Error;
use crate::model::{ApiKey, EmailStatus, KeyState, Principal, RequestLog, StoredEmail, Tenant};

pub use records::{
    Change, ClaimedEmail, EmailFilter, EmailUpdate, KeyRecord, KeyRef, LogFilter, NewEmail, NewLog,
    RateHit, Reservation, Reserved, Started,
};
use unit::{Ran, Step, Unit, params};

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
        writer: sqlite::Writer,
    },
    Postgres {
        /// Durable writes.
        writes: PgPool,
        /// Reads and bookkeeping writes (`synchronous_commit = off`).
        reads: PgPool,
    },
}

#[derive(Debug, Clone)]
pub struct Store {
    db: Db,
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

/// The columns of `Tenant`, then the rest of the query.
macro_rules! select_tenant {
    ($rest:literal) => {
        concat!(
            "SELECT id, name, rate_limit_per_minute, created_at FROM tenants ",
            $rest
        )
    };
}

/// The columns of `StoredEmail`, then the rest of the query.
macro_rules! select_email {
    ($rest:literal) => {
        concat!(
            "SELECT id, status, revision, payload, message_id, handoff_detail, scheduled_at, batch_id, created_at, updated_at FROM emails ",
            $rest
        )
    };
}

/// The columns of `RequestLog`, then the rest of the query.
macro_rules! select_log {
    ($rest:literal) => {
        concat!(
            "SELECT id, api_key_id, method, path, status, duration_ms, user_agent, created_at FROM request_logs ",
            $rest
        )
    };
}

/// The request log row of a starting request ($1..$7), status 0.
macro_rules! insert_log {
    () => {
        "INSERT INTO request_logs (id, tenant_id, api_key_id, method, path, status, duration_ms, user_agent, created_at) \
         VALUES ($1, $2, $3, $4, $5, 0, NULL, $6, $7)"
    };
}

/// One more request in a tenant's window, returning the count so far.
macro_rules! hit_rate_window {
    ($tenant:literal, $window:literal) => {
        concat!(
            "INSERT INTO rate_windows (tenant_id, window_start, count) VALUES (",
            $tenant,
            ", ",
            $window,
            ", 1) ON CONFLICT (tenant_id, window_start) DO UPDATE SET count = rate_windows.count + 1 RETURNING count"
        )
    };
}

/// An email's handoff result ($1 status, $2 detail, $3 now, $4 id), taken
/// only by a `sending` row or one the sweeper declared `unknown`.
macro_rules! update_email_outcome {
    () => {
        "UPDATE emails SET status = $1, handoff_detail = $2, revision = revision + 1, lease_until = NULL, updated_at = $3 \
         WHERE id = $4 AND status IN ('sending', 'unknown')"
    };
}

/// PostgreSQL: the emails of a request from arrays ($3..$12) at time $2:
/// `scheduled` when they have a `scheduled_at`, else `sending` with lease $1.
macro_rules! pg_insert_emails {
    () => {
        "INSERT INTO emails (id, tenant_id, api_key_id, status, revision, from_addr, to_addrs, subject, payload, message_id, scheduled_at, batch_id, lease_until, created_at, updated_at) \
         SELECT u.id, u.tenant_id, u.api_key_id, CASE WHEN u.scheduled_at IS NULL THEN 'sending' ELSE 'scheduled' END, 1, \
           u.from_addr, u.to_addrs, u.subject, u.payload, u.message_id, u.scheduled_at, u.batch_id, \
           CASE WHEN u.scheduled_at IS NULL THEN $1::bigint END, $2, $2 \
         FROM unnest($3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::bigint[], $12::bigint[]) \
         AS u(id, tenant_id, api_key_id, from_addr, to_addrs, subject, payload, message_id, scheduled_at, batch_id)"
    };
}

/// 1 while API key (id, tenant, permission) is active and its tenant's
/// limit is the given one; 0 once any of it changed.
macro_rules! principal_holds {
    ($key:literal, $tenant:literal, $permission:literal, $limit:literal) => {
        concat!(
            "SELECT count(*) AS holds FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE k.id = ",
            $key,
            " AND k.tenant_id = ",
            $tenant,
            " AND k.permission = ",
            $permission,
            " AND k.revoked_at IS NULL AND t.rate_limit_per_minute = ",
            $limit
        )
    };
}

const INSERT_LOG: &str = insert_log!();
const HIT_RATE_WINDOW: &str = hit_rate_window!("$1", "$2");
const PRINCIPAL_HOLDS: &str = principal_holds!("$1", "$2", "$3", "$4");
/// PostgreSQL: the log row and the rate count in one statement.
const PG_INSERT_LOG_AND_HIT: &str = concat!(
    "WITH log AS (",
    insert_log!(),
    ") ",
    hit_rate_window!("$8", "$9")
);
/// PostgreSQL: `PG_INSERT_LOG_AND_HIT`, written only while the principal
/// ($10..$13) holds; no row (0) otherwise.
const PG_INSERT_LOG_AND_HIT_IF_HOLDS: &str = concat!(
    "WITH ok AS (",
    principal_holds!("$10", "$11", "$12", "$13"),
    "), log AS (INSERT INTO request_logs (id, tenant_id, api_key_id, method, path, status, duration_ms, user_agent, created_at) \
     SELECT $1, $2, $3, $4, $5, 0, NULL, $6, $7 FROM ok WHERE holds > 0) \
     INSERT INTO rate_windows (tenant_id, window_start, count) SELECT $8, $9, 1 FROM ok WHERE holds > 0 \
     ON CONFLICT (tenant_id, window_start) DO UPDATE SET count = rate_windows.count + 1 RETURNING count"
);

/// Reserves key ($1 tenant, $2 scope, $3 key) for body $4 in state $5 with
/// emails $6 and answer $7 (NULL while in flight), lease $8 at time $9,
/// completed at $10 (NULL while in flight), unless someone holds it: a
/// completed record older than $11 is taken over. Changes no row when the
/// key is held. (SQLite numbers `$n` by first appearance, so they appear in
/// order.)
const RESERVE_KEY: &str = "INSERT INTO idempotency_keys (tenant_id, scope, idem_key, body_hash, state, email_ids, outcome, lease_until, created_at, completed_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
     ON CONFLICT (tenant_id, scope, idem_key) DO UPDATE SET \
       body_hash = excluded.body_hash, state = excluded.state, email_ids = excluded.email_ids, \
       outcome = excluded.outcome, lease_until = excluded.lease_until, created_at = excluded.created_at, \
       completed_at = excluded.completed_at \
     WHERE idempotency_keys.state = 'completed' AND idempotency_keys.completed_at < $11";
/// One email ($1..$11) in status $4 with lease $12 at time $13.
const INSERT_EMAIL: &str = "INSERT INTO emails (id, tenant_id, api_key_id, status, revision, from_addr, to_addrs, subject, payload, message_id, scheduled_at, batch_id, lease_until, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, 1, $5, $6, $7, $8, $9, $10, $11, $12, $13, $13)";
const PG_INSERT_EMAILS: &str = pg_insert_emails!();
/// PostgreSQL: `RESERVE_KEY` (key $13..$15, body $16, email ids $17, replay
/// cutoff $18, state $19, answer $20 completed at $21, with the emails'
/// lease $1 and time $2) and the emails in one statement; the emails are
/// written only when the key was reserved. Yields 1 when reserved, 0 when
/// the key is held.
const PG_RESERVE_AND_INSERT_EMAILS: &str = concat!(
    "WITH k AS (INSERT INTO idempotency_keys (tenant_id, scope, idem_key, body_hash, state, email_ids, outcome, lease_until, created_at, completed_at) \
     VALUES ($13, $14, $15, $16, $19, $17, $20, $1, $2, $21) \
     ON CONFLICT (tenant_id, scope, idem_key) DO UPDATE SET \
       body_hash = excluded.body_hash, state = excluded.state, email_ids = excluded.email_ids, \
       outcome = excluded.outcome, lease_until = excluded.lease_until, created_at = excluded.created_at, \
       completed_at = excluded.completed_at \
     WHERE idempotency_keys.state = 'completed' AND idempotency_keys.completed_at < $18 RETURNING 1), \
     e AS (",
    pg_insert_emails!(),
    " WHERE EXISTS (SELECT 1 FROM k)) SELECT count(*) FROM k"
);

const UPDATE_EMAIL_OUTCOME: &str = update_email_outcome!();
/// The key's state $1 and recorded answer $2 at $3, for key ($4, $5, $6).
const UPDATE_KEY_OUTCOME: &str = "UPDATE idempotency_keys SET state = $1, outcome = $2, completed_at = $3 \
     WHERE tenant_id = $4 AND scope = $5 AND idem_key = $6 AND state IN ('in_flight', 'unknown')";
/// PostgreSQL: one email's result and its key's ($5..$9) in one statement;
/// the key moves only when the email did. Yields the emails changed (0 or 1).
const PG_UPDATE_EMAIL_AND_KEY_OUTCOME: &str = concat!(
    "WITH e AS (",
    update_email_outcome!(),
    " RETURNING id), k AS (UPDATE idempotency_keys SET state = $5, outcome = $6, completed_at = $3 \
     WHERE tenant_id = $7 AND scope = $8 AND idem_key = $9 AND state IN ('in_flight', 'unknown') \
     AND EXISTS (SELECT 1 FROM e)) SELECT count(*) FROM e"
);

/// Completes the `unknown` keys whose JSON list of email ids (`[1,2]`, as
/// written by `email_ids`) holds `$2`: the list is matched as `,1,2,` against
/// `%,$2,%`, so one id never matches inside a longer one.
const RELEASE_KEYS_OF_EMAIL: &str = "UPDATE idempotency_keys SET state = 'completed', completed_at = $1 \
     WHERE state = 'unknown' AND (',' || substr(email_ids, 2, length(email_ids) - 2) || ',') LIKE ('%,' || $2 || ',%')";

impl Store {
    /// Opens the database and applies pending migrations.
    pub async fn connect(config: &StorageConfig) -> anyhow::Result<Store> {
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
        Ok(Store { db })
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
        sqlx::migrate!("./migrations/sqlite")
            .run(&mut migrator)
            .await?;
        migrator.close().await?;
        // Every write goes through the writer; the readers cannot write.
        let reads = SqlitePoolOptions::new()
            .max_connections(SQLITE_READERS)
            .connect_with(options.pragma("query_only", "ON"))
            .await?;
        let writer = sqlite::Writer::start(path, busy_timeout)?;
        Ok(Db::Sqlite { reads, writer })
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
        sqlx::migrate!("./migrations/postgres").run(&writes).await?;
        let reads = pool(
            (max_connections / 2).max(2),
            options.options([("synchronous_commit", "off")]),
        );
        Ok(Db::Postgres { writes, reads })
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
            Db::Sqlite { reads, writer } => {
                writer.close().await;
                reads.close().await;
            }
            Db::Postgres { writes, reads } => {
                writes.close().await;
                reads.close().await;
            }
        }
    }

    /// Runs one unit of work on the backend's write path.
    async fn write(&self, unit: Unit) -> Result<Ran, Error> {
        match &self.db {
            Db::Sqlite { writer, .. } => writer.run(unit).await,
            Db::Postgres { writes, reads } => {
                postgres::run(if unit.durable { writes } else { reads }, &unit).await
            }
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

    // ---- tenants and keys -------------------------------------------------

    /// Fails with `Conflict` when a tenant of that name exists.
    pub async fn create_tenant(&self, tenant: &Tenant) -> Result<(), Error> {
        self.write(
            Unit::one(Step::rows(
                "INSERT INTO tenants (id, name, rate_limit_per_minute, created_at) VALUES ($1, $2, $3, $4)",
                params![tenant.id, &tenant.name, tenant.rate_limit_per_minute, tenant.created_at],
            ))
            .conflict_means(format!("tenant `{}` already exists", tenant.name)),
        )
        .await?;
        Ok(())
    }

    pub async fn find_tenant(&self, name: &str) -> Result<Option<Tenant>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(select_tenant!("WHERE name = $1"))
                .bind(name)
                .fetch_optional(pool)
                .await?
        }))
    }

    pub async fn list_tenants(&self) -> Result<Vec<Tenant>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(select_tenant!("ORDER BY id"))
                .fetch_all(pool)
                .await?
        }))
    }

    /// Returns false when no tenant has that name.
    pub async fn set_rate_limit(&self, name: &str, per_minute: i64) -> Result<bool, Error> {
        let changed = self
            .write_one(Step::rows(
                "UPDATE tenants SET rate_limit_per_minute = $1 WHERE name = $2",
                params![per_minute, name],
            ))
            .await?;
        Ok(changed == 1)
    }

    /// Fails with `Conflict` when the id or the key's hash exists.
    pub async fn create_api_key(&self, key: &ApiKey, key_hash: &str) -> Result<(), Error> {
        self.write(
            Unit::one(Step::rows(
                "INSERT INTO api_keys (id, tenant_id, name, key_hash, key_prefix, permission, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                params![
                    key.id,
                    key.tenant_id,
                    &key.name,
                    key_hash,
                    &key.key_prefix,
                    key.permission.as_str(),
                    key.created_at
                ],
            ))
            .conflict_means(format!("API key {} already exists", key.id)),
        )
        .await?;
        Ok(())
    }

    /// Returns false when the key does not exist or was already revoked.
    pub async fn revoke_api_key(&self, id: i64, now: i64) -> Result<bool, Error> {
        let changed = self
            .write_one(Step::rows(
                "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
                params![now, id],
            ))
            .await?;
        Ok(changed == 1)
    }

    pub async fn list_api_keys(&self, tenant_id: i64) -> Result<Vec<ApiKey>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(
                "SELECT id, tenant_id, name, key_prefix, permission, created_at, revoked_at \
                 FROM api_keys WHERE tenant_id = $1 ORDER BY id",
            )
            .bind(tenant_id)
            .fetch_all(pool)
            .await?
        }))
    }

    /// The principal of an active key, by the hash of the key.
    pub async fn principal_by_key_hash(&self, key_hash: &str) -> Result<Option<Principal>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(
                "SELECT k.tenant_id, k.id AS api_key_id, k.permission, t.rate_limit_per_minute \
                 FROM api_keys k JOIN tenants t ON t.id = k.tenant_id \
                 WHERE k.key_hash = $1 AND k.revoked_at IS NULL",
            )
            .bind(key_hash)
            .fetch_optional(pool)
            .await?
        }))
    }

    // ---- request logs and the rate limit ------------------------------------

    /// Writes a starting request's log row (status 0) and, for an
    /// authenticated caller, counts it in its tenant's window, in one unit.
    /// With `recheck`, the unit first checks that this principal still holds
    /// (its key active, its tenant's limit unchanged) and writes nothing if
    /// not, so a principal remembered from an earlier request is as good as
    /// one read now.
    pub async fn request_started(
        &self,
        log: &NewLog,
        rate: Option<RateHit>,
        recheck: Option<&Principal>,
    ) -> Result<Started, Error> {
        let log_params = params![
            log.id,
            log.tenant_id,
            log.api_key_id,
            &log.method,
            &log.path,
            &log.user_agent,
            log.created_at
        ];
        let holds = |p: &Principal| {
            params![
                p.api_key_id,
                p.tenant_id,
                p.permission.as_str(),
                p.rate_limit_per_minute
            ]
        };
        let unit = match rate {
            None => Unit::one(Step::rows(INSERT_LOG, log_params)),
            Some(hit) if self.is_postgres() => {
                let mut values = log_params;
                values.extend(params![hit.tenant_id, hit.window_start]);
                match recheck {
                    None => Unit::one(Step::value(PG_INSERT_LOG_AND_HIT, values)),
                    Some(p) => {
                        values.extend(holds(p));
                        Unit::one(
                            Step::value(PG_INSERT_LOG_AND_HIT_IF_HOLDS, values).abort_if_zero(),
                        )
                    }
                }
            }
            Some(hit) => Unit::new(
                recheck
                    .map(|p| Step::value(PRINCIPAL_HOLDS, holds(p)).abort_if_zero())
                    .into_iter()
                    .chain([
                        Step::rows(INSERT_LOG, log_params),
                        Step::value(HIT_RATE_WINDOW, params![hit.tenant_id, hit.window_start]),
                    ])
                    .collect(),
            ),
        };
        Ok(match self.write(unit.bookkeeping()).await? {
            Ran::RolledBack => Started::PrincipalChanged,
            ran => Started::Counted(rate.map(|_| ran.last())),
        })
    }

    pub async fn finish_log(&self, id: i64, status: i64, duration_ms: i64) -> Result<(), Error> {
        self.write(
            Unit::one(Step::rows(
                "UPDATE request_logs SET status = $1, duration_ms = $2 WHERE id = $3",
                params![status, duration_ms, id],
            ))
            .bookkeeping(),
        )
        .await?;
        Ok(())
    }

    pub async fn prune_rate_windows(&self, before: i64) -> Result<u64, Error> {
        let deleted = self
            .write_one(Step::rows(
                "DELETE FROM rate_windows WHERE window_start < $1",
                params![before],
            ))
            .await?;
        Ok(deleted as u64)
    }

    /// Newest first; at most `filter.limit` rows.
    pub async fn list_logs(
        &self,
        tenant_id: i64,
        filter: &LogFilter,
    ) -> Result<Vec<RequestLog>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(select_log!(
                "WHERE tenant_id = $1 AND ($2 IS NULL OR id < $2) AND ($3 IS NULL OR method = $3) \
                 AND ($4 IS NULL OR status = $4) ORDER BY id DESC LIMIT $5"
            ))
            .bind(tenant_id)
            .bind(filter.before_id)
            .bind(&filter.method)
            .bind(filter.status)
            .bind(filter.limit)
            .fetch_all(pool)
            .await?
        }))
    }

    pub async fn log(&self, tenant_id: i64, id: i64) -> Result<Option<RequestLog>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(select_log!("WHERE tenant_id = $1 AND id = $2"))
                .bind(tenant_id)
                .bind(id)
                .fetch_optional(pool)
                .await?
        }))
    }

    // ---- emails and idempotency ------------------------------------------

    /// Stores the emails (as `sending`, or `scheduled` when they have a
    /// `scheduled_at`) and, when a reservation is given, reserves its key,
    /// in one unit: either the key is ours and the emails exist, or nothing
    /// was written. The key is in flight until `finish_handoff`, or, with
    /// `answered`, completed at once with that recorded answer (an answer
    /// that needs no handoff: scheduled emails). A completed record older
    /// than the replay window is taken over.
    pub async fn reserve_and_store(
        &self,
        reservation: Option<&Reservation>,
        emails: &[NewEmail],
        now: i64,
        lease_until: i64,
        answered: Option<&str>,
    ) -> Result<Reserved, Error> {
        let (state, completed_at) = match answered {
            Some(_) => (KeyState::Completed, Some(now)),
            None => (KeyState::InFlight, None),
        };
        let answered = answered.map(str::to_string);
        let unit = if self.is_postgres() {
            Self::pg_reserve(
                reservation,
                emails,
                now,
                lease_until,
                (state, &answered, completed_at),
            )
        } else {
            let key = reservation.map(|r| {
                Step::rows(
                    RESERVE_KEY,
                    params![
                        r.tenant_id,
                        &r.scope,
                        &r.key,
                        &r.body_hash,
                        state.as_str(),
                        email_ids(emails),
                        &answered,
                        lease_until,
                        now,
                        completed_at,
                        r.replay_cutoff
                    ],
                )
                .stop_if_zero()
            });
            let rows = emails.iter().map(|e| {
                let (status, lease) = match e.scheduled_at {
                    Some(_) => (EmailStatus::Scheduled, None),
                    None => (EmailStatus::Sending, Some(lease_until)),
                };
                Step::rows(
                    INSERT_EMAIL,
                    params![
                        e.id,
                        e.tenant_id,
                        e.api_key_id,
                        status.as_str(),
                        &e.from_addr,
                        &e.to_addrs,
                        &e.subject,
                        &e.payload,
                        &e.message_id,
                        e.scheduled_at,
                        e.batch_id,
                        lease,
                        now
                    ],
                )
            });
            Unit::new(key.into_iter().chain(rows).collect())
        };
        match (self.write(unit).await?, reservation) {
            (Ran::Stopped(_), Some(r)) => self.taken(r).await,
            _ => Ok(Reserved::Fresh),
        }
    }

    /// PostgreSQL's `reserve_and_store`: one statement.
    fn pg_reserve(
        reservation: Option<&Reservation>,
        emails: &[NewEmail],
        now: i64,
        lease_until: i64,
        (state, answered, completed_at): (KeyState, &Option<String>, Option<i64>),
    ) -> Unit {
        let column = |f: fn(&NewEmail) -> &String| -> Vec<String> {
            emails.iter().map(|e| f(e).clone()).collect()
        };
        let mut values = params![
            lease_until,
            now,
            emails.iter().map(|e| e.id).collect::<Vec<_>>(),
            emails.iter().map(|e| e.tenant_id).collect::<Vec<_>>(),
            emails.iter().map(|e| e.api_key_id).collect::<Vec<_>>(),
            column(|e| &e.from_addr),
            column(|e| &e.to_addrs),
            column(|e| &e.subject),
            column(|e| &e.payload),
            column(|e| &e.message_id),
            emails.iter().map(|e| e.scheduled_at).collect::<Vec<_>>(),
            emails.iter().map(|e| e.batch_id).collect::<Vec<_>>()
        ];
        match reservation {
            None => Unit::one(Step::rows(PG_INSERT_EMAILS, values)),
            Some(r) => {
                values.extend(params![
                    r.tenant_id,
                    &r.scope,
                    &r.key,
                    &r.body_hash,
                    email_ids(emails),
                    r.replay_cutoff,
                    state.as_str(),
                    answered,
                    completed_at
                ]);
                Unit::one(Step::value(PG_RESERVE_AND_INSERT_EMAILS, values).stop_if_zero())
            }
        }
    }

    /// What holds a key that could not be reserved. Keys are never deleted,
    /// so the row exists; it may have moved on since, which is as if this
    /// request had come a moment later.
    async fn taken(&self, r: &Reservation) -> Result<Reserved, Error> {
        let record: Option<KeyRecord> = on_db!(self, pool => {
            sqlx::query_as(
                "SELECT body_hash, state, email_ids, outcome, lease_until FROM idempotency_keys \
                 WHERE tenant_id = $1 AND scope = $2 AND idem_key = $3",
            )
            .bind(r.tenant_id)
            .bind(&r.scope)
            .bind(&r.key)
            .fetch_optional(pool)
            .await?
        });
        record
            .map(Reserved::Taken)
            .ok_or_else(|| Error::StoredDataInvalid {
                detail: format!(
                    "idempotency key `{}` refused a reservation but is not stored",
                    r.key
                ),
            })
    }

    /// Records the result of a handoff: the emails' final states and, when a
    /// key was reserved, its state (`completed` or `unknown`) and the outcome
    /// to replay, in one unit. A row the sweeper already declared `unknown`
    /// takes the definite result; anything else (an operator's
    /// reconciliation) is left alone, nothing is written and false is
    /// returned.
    pub async fn finish_handoff(
        &self,
        updates: &[EmailUpdate],
        key: Option<(&KeyRef, KeyState, &str)>,
        now: i64,
    ) -> Result<bool, Error> {
        let unit = match (updates, key) {
            ([u], Some((k, state, outcome))) if self.is_postgres() => Unit::one(
                Step::value(
                    PG_UPDATE_EMAIL_AND_KEY_OUTCOME,
                    params![
                        u.status.as_str(),
                        &u.detail,
                        now,
                        u.id,
                        state.as_str(),
                        outcome,
                        k.tenant_id,
                        &k.scope,
                        &k.key
                    ],
                )
                .abort_if_zero(),
            ),
            _ => Unit::new(
                updates
                    .iter()
                    .map(|u| {
                        Step::rows(
                            UPDATE_EMAIL_OUTCOME,
                            params![u.status.as_str(), &u.detail, now, u.id],
                        )
                        .abort_if_zero()
                    })
                    .chain(key.map(|(k, state, outcome)| {
                        Step::rows(
                            UPDATE_KEY_OUTCOME,
                            params![state.as_str(), outcome, now, k.tenant_id, &k.scope, &k.key],
                        )
                    }))
                    .collect(),
            ),
        };
        Ok(self.write(unit).await? != Ran::RolledBack)
    }

    /// Declares `unknown` every email whose handoff lease ran out while it was
    /// still `sending` (its node died or stalled mid-handoff), and moves the
    /// keys that reserved them to `unknown` with `outcome`. Nothing is resent.
    pub async fn expire_abandoned_handoffs(&self, now: i64, outcome: &str) -> Result<u64, Error> {
        let ran = self
            .write(Unit::new(vec![
                Step::rows(
                    "UPDATE emails SET status = 'unknown', revision = revision + 1, lease_until = NULL, updated_at = $1, \
                     handoff_detail = 'the handoff did not finish before its lease ran out (node stopped or stalled)' \
                     WHERE status = 'sending' AND lease_until < $1",
                    params![now],
                ),
                Step::rows(
                    "UPDATE idempotency_keys SET state = 'unknown', outcome = $1, completed_at = $2 \
                     WHERE state = 'in_flight' AND lease_until < $2",
                    params![outcome, now],
                ),
            ]))
            .await?;
        Ok(match ran {
            Ran::Committed(yields) => yields.first().copied().unwrap_or(0) as u64,
            _ => 0,
        })
    }

    pub async fn email(&self, tenant_id: i64, id: i64) -> Result<Option<StoredEmail>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(select_email!("WHERE id = $1 AND tenant_id = $2"))
                .bind(id)
                .bind(tenant_id)
                .fetch_optional(pool)
                .await?
        }))
    }

    /// The tenant's emails, newest first; at most `filter.limit` rows.
    pub async fn list_emails(
        &self,
        tenant_id: i64,
        filter: &EmailFilter,
    ) -> Result<Vec<StoredEmail>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(select_email!(
                "WHERE tenant_id = $1 AND ($2 IS NULL OR id < $2) AND ($3 IS NULL OR status = $3) \
                 ORDER BY id DESC LIMIT $4"
            ))
            .bind(tenant_id)
            .bind(filter.before_id)
            .bind(filter.status.map(EmailStatus::as_str))
            .bind(filter.limit)
            .fetch_all(pool)
            .await?
        }))
    }

    // ---- scheduled emails -------------------------------------------------

    /// Moves a `scheduled` email at `revision` to `at`. Exactly one of a
    /// reschedule, a cancel and the scheduler's claim changes a given
    /// revision: each is one conditional statement on the row.
    pub async fn reschedule(
        &self,
        tenant_id: i64,
        id: i64,
        revision: i64,
        at: i64,
        now: i64,
    ) -> Result<Change, Error> {
        let new_revision = self
            .write_one(Step::value(
                "UPDATE emails SET scheduled_at = $1, revision = revision + 1, updated_at = $2 \
                 WHERE id = $3 AND tenant_id = $4 AND status = 'scheduled' AND revision = $5 RETURNING revision",
                params![at, now, id, tenant_id, revision],
            ))
            .await?;
        Ok(Change::from_revision(new_revision))
    }

    /// Cancels a `scheduled` email (at `revision`, when given): it is never
    /// handed off.
    pub async fn cancel(
        &self,
        tenant_id: i64,
        id: i64,
        revision: Option<i64>,
        now: i64,
    ) -> Result<Change, Error> {
        let new_revision = self
            .write_one(Step::value(
                "UPDATE emails SET status = 'canceled', revision = revision + 1, updated_at = $1, \
                 handoff_detail = 'canceled before it was due; it was not sent' \
                 WHERE id = $2 AND tenant_id = $3 AND status = 'scheduled' \
                 AND (CAST($4 AS BIGINT) IS NULL OR revision = $4) RETURNING revision",
                params![now, id, tenant_id, revision],
            ))
            .await?;
        Ok(Change::from_revision(new_revision))
    }

    /// Claims up to `limit` emails due at `now` (earliest due first) for one
    /// handoff each: they become `sending` with `lease_until` and carry the
    /// claim's id, by which `claimed` reads them. On PostgreSQL rows another
    /// node is claiming are skipped (`FOR UPDATE SKIP LOCKED`); on SQLite
    /// the single writer serializes claims. Returns how many were claimed.
    pub async fn claim_due(
        &self,
        claim: i64,
        now: i64,
        lease_until: i64,
        limit: i64,
    ) -> Result<u64, Error> {
        let sql = if self.is_postgres() {
            "WITH due AS (SELECT id FROM emails WHERE status = 'scheduled' AND scheduled_at <= $3 \
               ORDER BY scheduled_at LIMIT $4 FOR UPDATE SKIP LOCKED) \
             UPDATE emails SET status = 'sending', claim = $1, lease_until = $2, revision = emails.revision + 1, updated_at = $3 \
             FROM due WHERE emails.id = due.id"
        } else {
            "UPDATE emails SET status = 'sending', claim = $1, lease_until = $2, revision = revision + 1, updated_at = $3 \
             WHERE id IN (SELECT id FROM emails WHERE status = 'scheduled' AND scheduled_at <= $3 \
               ORDER BY scheduled_at LIMIT $4)"
        };
        let claimed = self
            .write_one(Step::rows(sql, params![claim, lease_until, now, limit]))
            .await?;
        Ok(claimed as u64)
    }

    /// The emails a claim took that are still `sending`.
    pub async fn claimed(&self, claim: i64) -> Result<Vec<ClaimedEmail>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(
                "SELECT id, payload, message_id, scheduled_at FROM emails \
                 WHERE claim = $1 AND status = 'sending' ORDER BY scheduled_at",
            )
            .bind(claim)
            .fetch_all(pool)
            .await?
        }))
    }

    /// When the next scheduled email is due, if one is waiting.
    pub async fn next_due(&self) -> Result<Option<i64>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_scalar("SELECT min(scheduled_at) FROM emails WHERE status = 'scheduled'")
                .fetch_one(pool)
                .await?
        }))
    }

    /// Operator reconciliation of an `unknown` handoff: sets the email to
    /// `status` and completes the key that reserved it, which from then on
    /// replays its recorded answer. Returns false when the email is not
    /// `unknown`.
    pub async fn reconcile(
        &self,
        email_id: i64,
        status: EmailStatus,
        detail: &str,
        now: i64,
    ) -> Result<bool, Error> {
        let ran = self
            .write(Unit::new(vec![
                Step::rows(
                    "UPDATE emails SET status = $1, handoff_detail = $2, revision = revision + 1, updated_at = $3 \
                     WHERE id = $4 AND status = 'unknown'",
                    params![status.as_str(), detail, now, email_id],
                )
                .abort_if_zero(),
                Step::rows(RELEASE_KEYS_OF_EMAIL, params![now, email_id.to_string()]),
            ]))
            .await?;
        Ok(ran != Ran::RolledBack)
    }
}

/// The JSON list of the emails' ids, as stored with their reservation.
fn email_ids(emails: &[NewEmail]) -> String {
    let ids: Vec<String> = emails.iter().map(|e| e.id.to_string()).collect();
    format!("[{}]", ids.join(","))
}

impl Change {
    /// What a conditional `UPDATE ... RETURNING revision` yielded.
    fn from_revision(yielded: i64) -> Change {
        if yielded == 0 {
            Change::Refused
        } else {
            Change::Done(yielded)
        }
    }
}

//! Storage: one interface, two backends (embedded SQLite in WAL mode, shared
//! PostgreSQL). Both run the same SQL text (`$n` placeholders work on both);
//! `on_db!` expands each method body once per backend, so there is no second
//! copy of a query to drift. Every queue, lock, idempotency reservation and
//! rate-limit window lives here; API nodes keep no state needed for
//! correctness.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::error::Error;

/// Where the data lives.
#[derive(Debug, Clone)]
pub enum StorageConfig {
    /// An SQLite file (created if missing).
    Sqlite { path: PathBuf },
    /// A PostgreSQL database; `schema`, when set, is created if missing and
    /// used as the search path (one database can hold several isolated
    /// deployments, as the tests do).
    Postgres {
        url: String,
        schema: Option<String>,
        max_connections: u32,
    },
}

#[derive(Debug, Clone)]
enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

#[derive(Debug, Clone)]
pub struct Store {
    db: Db,
}

macro_rules! on_db {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.db {
            Db::Sqlite($pool) => $body,
            Db::Postgres($pool) => $body,
        }
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    SendingAccess,
    FullAccess,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::SendingAccess => "sending_access",
            Permission::FullAccess => "full_access",
        }
    }
}

impl FromStr for Permission {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sending_access" => Ok(Permission::SendingAccess),
            "full_access" => Ok(Permission::FullAccess),
            other => Err(format!(
                "unknown permission `{other}` (use sending_access or full_access)"
            )),
        }
    }
}

/// The caller an API key stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant_id: i64,
    pub api_key_id: i64,
    pub permission: Permission,
    pub rate_limit_per_minute: i64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct TenantRecord {
    pub id: i64,
    pub name: String,
    pub rate_limit_per_minute: i64,
    pub created_at: i64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ApiKeyRecord {
    pub id: i64,
    pub tenant_id: i64,
    pub name: String,
    pub key_prefix: String,
    pub permission: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct NewEmail {
    pub id: i64,
    pub tenant_id: i64,
    pub api_key_id: i64,
    pub from_addr: String,
    pub to_addrs: String,
    pub subject: String,
    pub payload: String,
    pub message_id: String,
}

#[derive(Debug, Clone)]
pub struct EmailRecord {
    pub id: i64,
    pub status: String,
    pub revision: i64,
    pub payload: String,
    pub message_id: String,
    pub handoff_detail: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A request to reserve an idempotency key.
#[derive(Debug, Clone)]
pub struct Reservation {
    pub tenant_id: i64,
    pub scope: String,
    pub key: String,
    pub body_hash: String,
    /// A completed record older than this (completion time) may be replaced.
    pub replay_cutoff: i64,
}

/// What is stored under a key.
#[derive(Debug, Clone)]
pub struct KeyRecord {
    pub body_hash: String,
    pub state: String,
    pub email_ids: Vec<i64>,
    pub outcome: Option<String>,
    pub lease_until: i64,
}

#[derive(Debug, Clone)]
pub enum Reserved {
    /// The emails are stored as `sending` and the key (if any) is ours.
    Fresh,
    /// Someone already holds the key.
    Taken(KeyRecord),
}

/// Final state of one email after its handoff attempt.
#[derive(Debug, Clone)]
pub struct EmailUpdate {
    pub id: i64,
    pub status: &'static str,
    pub detail: Option<String>,
}

#[derive(Debug, Clone)]
pub struct KeyRef {
    pub tenant_id: i64,
    pub scope: String,
    pub key: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct LogRecord {
    pub id: i64,
    pub api_key_id: Option<i64>,
    pub method: String,
    pub path: String,
    pub status: i64,
    pub duration_ms: Option<i64>,
    pub user_agent: Option<String>,
    pub created_at: i64,
}

#[derive(Debug, Clone)]
pub struct NewLog {
    pub id: i64,
    pub tenant_id: Option<i64>,
    pub api_key_id: Option<i64>,
    pub method: String,
    pub path: String,
    pub user_agent: Option<String>,
    pub created_at: i64,
}

#[derive(Debug, Clone, Default)]
pub struct LogFilter {
    pub before_id: Option<i64>,
    pub method: Option<String>,
    pub status: Option<i64>,
    pub limit: i64,
}

fn key_record<R: Row>(row: &R) -> Result<KeyRecord, sqlx::Error>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let ids: String = row.try_get("email_ids")?;
    Ok(KeyRecord {
        body_hash: row.try_get("body_hash")?,
        state: row.try_get("state")?,
        email_ids: serde_json::from_str(&ids).unwrap_or_default(),
        outcome: row.try_get("outcome")?,
        lease_until: row.try_get("lease_until")?,
    })
}

impl Store {
    /// Opens the database and applies pending migrations.
    pub async fn connect(config: &StorageConfig) -> anyhow::Result<Store> {
        let db = match config {
            StorageConfig::Sqlite { path } => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)?;
                }
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    // WAL + NORMAL: a commit survives a process crash (the
                    // case the crash test covers); see README for power loss.
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(10))
                    .foreign_keys(true);
                // SQLite has one writer; a single connection serializes the
                // service's statements without busy-wait back-offs.
                let pool = SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect_with(options)
                    .await?;
                sqlx::migrate!("./migrations/sqlite").run(&pool).await?;
                Db::Sqlite(pool)
            }
            StorageConfig::Postgres {
                url,
                schema,
                max_connections,
            } => {
                let mut options = PgConnectOptions::from_str(url)?;
                if let Some(schema) = schema {
                    if !schema
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        anyhow::bail!(
                            "database schema `{schema}`: only letters, digits and _ are allowed"
                        );
                    }
                    let admin = PgPoolOptions::new()
                        .max_connections(1)
                        .connect_with(options.clone())
                        .await?;
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "CREATE SCHEMA IF NOT EXISTS {schema}"
                    )))
                    .execute(&admin)
                    .await?;
                    admin.close().await;
                    options = options.options([("search_path", schema.as_str())]);
                }
                let pool = PgPoolOptions::new()
                    .max_connections(*max_connections)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect_with(options)
                    .await?;
                sqlx::migrate!("./migrations/postgres").run(&pool).await?;
                Db::Postgres(pool)
            }
        };
        Ok(Store { db })
    }

    pub fn backend(&self) -> &'static str {
        match self.db {
            Db::Sqlite(_) => "sqlite",
            Db::Postgres(_) => "postgres",
        }
    }

    pub async fn close(&self) {
        on_db!(self, pool => pool.close().await)
    }

    /// Registers a starting node; the returned number seeds its ID generator.
    pub async fn register_node(&self, now: i64) -> Result<i64, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query("INSERT INTO nodes (started_at) VALUES ($1) RETURNING id")
                .bind(now)
                .fetch_one(pool)
                .await?
                .try_get::<i64, _>("id")?
        }))
    }

    // ---- tenants and keys -------------------------------------------------

    pub async fn create_tenant(&self, tenant: &TenantRecord) -> Result<(), Error> {
        on_db!(self, pool => {
            sqlx::query("INSERT INTO tenants (id, name, rate_limit_per_minute, created_at) VALUES ($1, $2, $3, $4)")
                .bind(tenant.id)
                .bind(&tenant.name)
                .bind(tenant.rate_limit_per_minute)
                .bind(tenant.created_at)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    pub async fn find_tenant(&self, name: &str) -> Result<Option<TenantRecord>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query("SELECT id, name, rate_limit_per_minute, created_at FROM tenants WHERE name = $1")
                .bind(name)
                .fetch_optional(pool)
                .await?
                .map(|row| -> Result<TenantRecord, sqlx::Error> {
                    Ok(TenantRecord {
                        id: row.try_get("id")?,
                        name: row.try_get("name")?,
                        rate_limit_per_minute: row.try_get("rate_limit_per_minute")?,
                        created_at: row.try_get("created_at")?,
                    })
                })
                .transpose()?
        }))
    }

    pub async fn list_tenants(&self) -> Result<Vec<TenantRecord>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query("SELECT id, name, rate_limit_per_minute, created_at FROM tenants ORDER BY id")
                .fetch_all(pool)
                .await?
                .iter()
                .map(|row| -> Result<TenantRecord, sqlx::Error> {
                    Ok(TenantRecord {
                        id: row.try_get("id")?,
                        name: row.try_get("name")?,
                        rate_limit_per_minute: row.try_get("rate_limit_per_minute")?,
                        created_at: row.try_get("created_at")?,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?
        }))
    }

    /// Returns false when no tenant has that name.
    pub async fn set_rate_limit(&self, name: &str, per_minute: i64) -> Result<bool, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query("UPDATE tenants SET rate_limit_per_minute = $1 WHERE name = $2")
                .bind(per_minute)
                .bind(name)
                .execute(pool)
                .await?
                .rows_affected()
                == 1
        }))
    }

    pub async fn create_api_key(&self, key: &ApiKeyRecord, key_hash: &str) -> Result<(), Error> {
        on_db!(self, pool => {
            sqlx::query("INSERT INTO api_keys (id, tenant_id, name, key_hash, key_prefix, permission, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)")
                .bind(key.id)
                .bind(key.tenant_id)
                .bind(&key.name)
                .bind(key_hash)
                .bind(&key.key_prefix)
                .bind(&key.permission)
                .bind(key.created_at)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Returns false when the key does not exist or was already revoked.
    pub async fn revoke_api_key(&self, id: i64, now: i64) -> Result<bool, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
                .bind(now)
                .bind(id)
                .execute(pool)
                .await?
                .rows_affected()
                == 1
        }))
    }

    pub async fn list_api_keys(&self, tenant_id: i64) -> Result<Vec<ApiKeyRecord>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query("SELECT id, tenant_id, name, key_prefix, permission, created_at, revoked_at FROM api_keys WHERE tenant_id = $1 ORDER BY id")
                .bind(tenant_id)
                .fetch_all(pool)
                .await?
                .iter()
                .map(|row| -> Result<ApiKeyRecord, sqlx::Error> {
                    Ok(ApiKeyRecord {
                        id: row.try_get("id")?,
                        tenant_id: row.try_get("tenant_id")?,
                        name: row.try_get("name")?,
                        key_prefix: row.try_get("key_prefix")?,
                        permission: row.try_get("permission")?,
                        created_at: row.try_get("created_at")?,
                        revoked_at: row.try_get("revoked_at")?,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?
        }))
    }

    /// The principal of an active key, by the hash of the key.
    pub async fn principal_by_key_hash(&self, key_hash: &str) -> Result<Option<Principal>, Error> {
        let row: Option<(i64, i64, String, i64)> = on_db!(self, pool => {
            sqlx::query_as(
                "SELECT k.tenant_id, k.id, k.permission, t.rate_limit_per_minute \
                 FROM api_keys k JOIN tenants t ON t.id = k.tenant_id \
                 WHERE k.key_hash = $1 AND k.revoked_at IS NULL",
            )
            .bind(key_hash)
            .fetch_optional(pool)
            .await?
        });
        Ok(row.and_then(|(tenant_id, api_key_id, permission, rate)| {
            Some(Principal {
                tenant_id,
                api_key_id,
                permission: permission.parse().ok()?,
                rate_limit_per_minute: rate,
            })
        }))
    }

    // ---- rate limit -------------------------------------------------------

    /// Counts one request in the tenant's window; returns the count so far.
    pub async fn hit_rate_window(&self, tenant_id: i64, window_start: i64) -> Result<i64, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query(
                "INSERT INTO rate_windows (tenant_id, window_start, count) VALUES ($1, $2, 1) \
                 ON CONFLICT (tenant_id, window_start) DO UPDATE SET count = rate_windows.count + 1 \
                 RETURNING count",
            )
            .bind(tenant_id)
            .bind(window_start)
            .fetch_one(pool)
            .await?
            .try_get::<i64, _>("count")?
        }))
    }

    pub async fn prune_rate_windows(&self, before: i64) -> Result<u64, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query("DELETE FROM rate_windows WHERE window_start < $1")
                .bind(before)
                .execute(pool)
                .await?
                .rows_affected()
        }))
    }

    // ---- emails and idempotency ------------------------------------------

    /// Stores the emails as `sending` and, when a reservation is given,
    /// reserves its key, in one transaction: either the key is ours and the
    /// emails exist, or nothing was written. A completed record older than
    /// the replay window is taken over.
    pub async fn reserve_and_store(
        &self,
        reservation: Option<&Reservation>,
        emails: &[NewEmail],
        now: i64,
        lease_until: i64,
    ) -> Result<Reserved, Error> {
        let ids = serde_json::to_string(&emails.iter().map(|e| e.id).collect::<Vec<_>>())
            .unwrap_or_else(|_| "[]".into());
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            if let Some(r) = reservation {
                let taken = sqlx::query(
                    "INSERT INTO idempotency_keys (tenant_id, scope, idem_key, body_hash, state, email_ids, outcome, lease_until, created_at, completed_at) \
                     VALUES ($1, $2, $3, $4, 'in_flight', $5, NULL, $6, $7, NULL) \
                     ON CONFLICT (tenant_id, scope, idem_key) DO UPDATE SET \
                       body_hash = excluded.body_hash, state = 'in_flight', email_ids = excluded.email_ids, \
                       outcome = NULL, lease_until = excluded.lease_until, created_at = excluded.created_at, completed_at = NULL \
                     WHERE idempotency_keys.state = 'completed' AND idempotency_keys.completed_at < $8",
                )
                .bind(r.tenant_id)
                .bind(&r.scope)
                .bind(&r.key)
                .bind(&r.body_hash)
                .bind(&ids)
                .bind(lease_until)
                .bind(now)
                .bind(r.replay_cutoff)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if taken == 0 {
                    let row = sqlx::query("SELECT body_hash, state, email_ids, outcome, lease_until FROM idempotency_keys WHERE tenant_id = $1 AND scope = $2 AND idem_key = $3")
                        .bind(r.tenant_id)
                        .bind(&r.scope)
                        .bind(&r.key)
                        .fetch_one(&mut *tx)
                        .await?;
                    let record = key_record(&row)?;
                    tx.rollback().await?;
                    return Ok(Reserved::Taken(record));
                }
            }
            for e in emails {
                sqlx::query(
                    "INSERT INTO emails (id, tenant_id, api_key_id, status, revision, from_addr, to_addrs, subject, payload, message_id, lease_until, created_at, updated_at) \
                     VALUES ($1, $2, $3, 'sending', 1, $4, $5, $6, $7, $8, $9, $10, $10)",
                )
                .bind(e.id)
                .bind(e.tenant_id)
                .bind(e.api_key_id)
                .bind(&e.from_addr)
                .bind(&e.to_addrs)
                .bind(&e.subject)
                .bind(&e.payload)
                .bind(&e.message_id)
                .bind(lease_until)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(Reserved::Fresh)
        })
    }

    /// Records the result of a handoff: the emails' final states and, when a
    /// key was reserved, its state (`completed` or `unknown`) and the outcome
    /// to replay, in one transaction. A row the sweeper already declared
    /// `unknown` takes the definite result; anything else (an operator's
    /// reconciliation) is left alone and false is returned.
    pub async fn finish_handoff(
        &self,
        updates: &[EmailUpdate],
        key: Option<(&KeyRef, &'static str, &str)>,
        now: i64,
    ) -> Result<bool, Error> {
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            for u in updates {
                let changed = sqlx::query(
                    "UPDATE emails SET status = $1, handoff_detail = $2, revision = revision + 1, lease_until = NULL, updated_at = $3 \
                     WHERE id = $4 AND status IN ('sending', 'unknown')",
                )
                .bind(u.status)
                .bind(&u.detail)
                .bind(now)
                .bind(u.id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if changed == 0 {
                    tx.rollback().await?;
                    return Ok(false);
                }
            }
            if let Some((k, state, outcome)) = key {
                sqlx::query(
                    "UPDATE idempotency_keys SET state = $1, outcome = $2, completed_at = $3 \
                     WHERE tenant_id = $4 AND scope = $5 AND idem_key = $6 AND state IN ('in_flight', 'unknown')",
                )
                .bind(state)
                .bind(outcome)
                .bind(now)
                .bind(k.tenant_id)
                .bind(&k.scope)
                .bind(&k.key)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(true)
        })
    }

    /// Declares `unknown` every email whose handoff lease ran out while it was
    /// still `sending` (its node died or stalled mid-handoff), and moves the
    /// keys that reserved them to `unknown`. Nothing is resent.
    pub async fn expire_abandoned_handoffs(&self, now: i64) -> Result<u64, Error> {
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            let swept = sqlx::query(
                "UPDATE emails SET status = 'unknown', revision = revision + 1, lease_until = NULL, updated_at = $1, \
                 handoff_detail = 'the handoff did not finish before its lease ran out (node stopped or stalled)' \
                 WHERE status = 'sending' AND lease_until < $1",
            )
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            let outcome = serde_json::json!({"kind": "abandoned"}).to_string();
            sqlx::query(
                "UPDATE idempotency_keys SET state = 'unknown', outcome = $1, completed_at = $2 \
                 WHERE state = 'in_flight' AND lease_until < $2",
            )
            .bind(outcome)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(swept)
        })
    }

    pub async fn email(&self, tenant_id: i64, id: i64) -> Result<Option<EmailRecord>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query(
                "SELECT id, status, revision, payload, message_id, handoff_detail, created_at, updated_at \
                 FROM emails WHERE id = $1 AND tenant_id = $2",
            )
            .bind(id)
            .bind(tenant_id)
            .fetch_optional(pool)
            .await?
            .map(|row| -> Result<EmailRecord, sqlx::Error> {
                Ok(EmailRecord {
                    id: row.try_get("id")?,
                    status: row.try_get("status")?,
                    revision: row.try_get("revision")?,
                    payload: row.try_get("payload")?,
                    message_id: row.try_get("message_id")?,
                    handoff_detail: row.try_get("handoff_detail")?,
                    created_at: row.try_get("created_at")?,
                    updated_at: row.try_get("updated_at")?,
                })
            })
            .transpose()?
        }))
    }

    /// Operator reconciliation of an `unknown` handoff: sets the email to
    /// `sent` or `failed` and completes the key that reserved it, which from
    /// then on replays its recorded answer. Returns false when the email is
    /// not `unknown`.
    pub async fn reconcile(&self, email_id: i64, sent: bool, now: i64) -> Result<bool, Error> {
        let status = if sent { "sent" } else { "failed" };
        let detail = if sent {
            "reconciled by an operator: the provider accepted it"
        } else {
            "reconciled by an operator: the provider did not accept it"
        };
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            let changed = sqlx::query(
                "UPDATE emails SET status = $1, handoff_detail = $2, revision = revision + 1, updated_at = $3 \
                 WHERE id = $4 AND status = 'unknown'",
            )
            .bind(status)
            .bind(detail)
            .bind(now)
            .bind(email_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if changed == 0 {
                tx.rollback().await?;
                return Ok(false);
            }
            let keys: Vec<(i64, String, String, String)> = sqlx::query_as(
                "SELECT tenant_id, scope, idem_key, email_ids FROM idempotency_keys WHERE state = 'unknown' AND email_ids LIKE $1",
            )
            .bind(format!("%{email_id}%"))
            .fetch_all(&mut *tx)
            .await?;
            for (tenant_id, scope, key, ids) in keys {
                let ids: Vec<i64> = serde_json::from_str(&ids).unwrap_or_default();
                if !ids.contains(&email_id) {
                    continue;
                }
                sqlx::query(
                    "UPDATE idempotency_keys SET state = 'completed', completed_at = $1 \
                     WHERE tenant_id = $2 AND scope = $3 AND idem_key = $4",
                )
                .bind(now)
                .bind(tenant_id)
                .bind(&scope)
                .bind(&key)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(true)
        })
    }

    // ---- request logs -----------------------------------------------------

    pub async fn insert_log(&self, log: &NewLog) -> Result<(), Error> {
        on_db!(self, pool => {
            sqlx::query(
                "INSERT INTO request_logs (id, tenant_id, api_key_id, method, path, status, duration_ms, user_agent, created_at) \
                 VALUES ($1, $2, $3, $4, $5, 0, NULL, $6, $7)",
            )
            .bind(log.id)
            .bind(log.tenant_id)
            .bind(log.api_key_id)
            .bind(&log.method)
            .bind(&log.path)
            .bind(&log.user_agent)
            .bind(log.created_at)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    pub async fn finish_log(&self, id: i64, status: i64, duration_ms: i64) -> Result<(), Error> {
        on_db!(self, pool => {
            sqlx::query("UPDATE request_logs SET status = $1, duration_ms = $2 WHERE id = $3")
                .bind(status)
                .bind(duration_ms)
                .bind(id)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Newest first; at most `limit + 1` rows so the caller knows whether a
    /// next page exists.
    pub async fn list_logs(
        &self,
        tenant_id: i64,
        filter: &LogFilter,
    ) -> Result<Vec<LogRecord>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query(
                "SELECT id, api_key_id, method, path, status, duration_ms, user_agent, created_at FROM request_logs \
                 WHERE tenant_id = $1 AND ($2 IS NULL OR id < $2) AND ($3 IS NULL OR method = $3) AND ($4 IS NULL OR status = $4) \
                 ORDER BY id DESC LIMIT $5",
            )
            .bind(tenant_id)
            .bind(filter.before_id)
            .bind(&filter.method)
            .bind(filter.status)
            .bind(filter.limit + 1)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|row| -> Result<LogRecord, sqlx::Error> {
                Ok(LogRecord {
                    id: row.try_get("id")?,
                    api_key_id: row.try_get("api_key_id")?,
                    method: row.try_get("method")?,
                    path: row.try_get("path")?,
                    status: row.try_get("status")?,
                    duration_ms: row.try_get("duration_ms")?,
                    user_agent: row.try_get("user_agent")?,
                    created_at: row.try_get("created_at")?,
                })
            })
            .collect::<Result<Vec<_>, _>>()?
        }))
    }

    pub async fn log(&self, tenant_id: i64, id: i64) -> Result<Option<LogRecord>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query(
                "SELECT id, api_key_id, method, path, status, duration_ms, user_agent, created_at FROM request_logs \
                 WHERE tenant_id = $1 AND id = $2",
            )
            .bind(tenant_id)
            .bind(id)
            .fetch_optional(pool)
            .await?
            .map(|row| -> Result<LogRecord, sqlx::Error> {
                Ok(LogRecord {
                    id: row.try_get("id")?,
                    api_key_id: row.try_get("api_key_id")?,
                    method: row.try_get("method")?,
                    path: row.try_get("path")?,
                    status: row.try_get("status")?,
                    duration_ms: row.try_get("duration_ms")?,
                    user_agent: row.try_get("user_agent")?,
                    created_at: row.try_get("created_at")?,
                })
            })
            .transpose()?
        }))
    }

    /// Raw insert rate reference for the benchmark: the same number of row
    /// writes one accepted `POST /emails` costs, without HTTP or handoff.
    pub async fn insert_probe_email(
        &self,
        email: &NewEmail,
        log: &NewLog,
        now: i64,
    ) -> Result<(), Error> {
        self.insert_log(log).await?;
        self.hit_rate_window(email.tenant_id, now / 60_000 * 60_000)
            .await?;
        self.reserve_and_store(None, std::slice::from_ref(email), now, now + 60_000)
            .await?;
        self.finish_handoff(
            &[EmailUpdate {
                id: email.id,
                status: "sent",
                detail: None,
            }],
            None,
            now,
        )
        .await?;
        self.finish_log(log.id, 200, 1).await
    }
}

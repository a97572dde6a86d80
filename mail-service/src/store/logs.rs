//! Request logs and the per-tenant rate-limit windows.

use super::*;

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

impl Store {
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

    /// Records a request's answer without waiting for it to be written:
    /// SQLite's writer runs it in its queue's order, PostgreSQL's
    /// `LogCompletions` many to a statement; the reads of the log below wait
    /// for what was queued before them (`written_behind`). A refusal by the
    /// rate limit (429) is written before it is answered, so the log counts
    /// the requests each window let through exactly, even after a crash.
    pub async fn finish_log(&self, id: i64, status: i64, duration_ms: i64) -> Result<(), Error> {
        let unit = || {
            Unit::one(Step::rows(
                "UPDATE request_logs SET status = $1, duration_ms = $2 WHERE id = $3",
                params![status, duration_ms, id],
            ))
            .bookkeeping()
        };
        match &self.db {
            _ if status == 429 => self.write(unit()).await.map(drop),
            Db::Sqlite { writer, .. } => writer.submit(unit()),
            Db::Postgres { completions, .. } => completions.queue(id, status, duration_ms),
        }
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

    /// Newest first; at most `filter.limit` rows. Unfinished requests
    /// (status 0) only when `filter.status` asks for them, and never the
    /// listing request itself.
    pub async fn list_logs(
        &self,
        tenant_id: i64,
        filter: &LogFilter,
    ) -> Result<Vec<RequestLog>, Error> {
        self.written_behind().await?;
        Ok(on_db!(self, pool => {
            sqlx::query_as(select_log!(
                "WHERE tenant_id = $1 AND ($2 IS NULL OR id < $2) AND ($3 IS NULL OR method = $3) \
                 AND (($4 IS NULL AND status <> 0) OR status = $4) AND id <> $5 ORDER BY id DESC LIMIT $6"
            ))
            .bind(tenant_id)
            .bind(filter.before_id)
            .bind(&filter.method)
            .bind(filter.status)
            .bind(filter.except_id)
            .bind(filter.limit)
            .fetch_all(pool)
            .await?
        }))
    }

    pub async fn log(&self, tenant_id: i64, id: i64) -> Result<Option<RequestLog>, Error> {
        self.written_behind().await?;
        optional!(
            self,
            select_log!("WHERE tenant_id = $1 AND id = $2"),
            tenant_id,
            id
        )
    }
}

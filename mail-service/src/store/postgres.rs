//! PostgreSQL's write path: a unit of one step is one statement on a pooled
//! connection (no BEGIN/COMMIT round trips), so the hot writes are written
//! as one statement each (data-modifying CTEs, `unnest` for many rows); a
//! longer unit runs in one transaction. PostgreSQL groups the commits of
//! concurrent connections itself. Request-log completions are queued and
//! written many to a statement (`LogCompletions`).

use sqlx::postgres::{PgArguments, PgPool};
use sqlx::{PgExecutor, Postgres, Row};
use tokio::sync::{mpsc, oneshot};

use crate::error::Error;

use super::unit::{self, Param, Ran, Step, Unit, Yields};

/// How many times a unit is run when PostgreSQL rolls it back for a
/// deadlock or a serialization failure before the caller gets the error.
pub(crate) const MOST_ATTEMPTS: u32 = 5;

/// Runs a unit; a unit PostgreSQL rolled back to break a deadlock (SQLSTATE
/// `40P01`) or for a serialization failure (`40001`) is run again, up to
/// `MOST_ATTEMPTS` times, after a short random wait that grows with each
/// attempt. Running it again is safe: such an error means the database
/// undid the whole unit (a one-statement unit is its own transaction), so
/// nothing of the failed attempt is stored, and a unit only writes rows: the
/// handoff its caller makes next starts only after it returned, once.
pub(crate) async fn run(pool: &PgPool, unit: &Unit) -> Result<Ran, Error> {
    let mut attempt = 1;
    loop {
        match run_unit(pool, unit).await {
            Err(e) if attempt < MOST_ATTEMPTS && rolled_back_to_retry(&e) => {
                tracing::debug!(attempt, error = %e, "unit rolled back by the database; running it again");
                tokio::time::sleep(retry_wait(attempt)).await;
                attempt += 1;
            }
            result => return result.map_err(|e| storage_error(e, unit)),
        }
    }
}

/// Whether PostgreSQL undid the unit for a reason that running it again can
/// clear: a deadlock (`40P01`) or a serialization failure (`40001`).
pub(crate) fn rolled_back_to_retry(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("40P01" | "40001")))
}

/// The wait before attempt `attempt + 1`: random within 5 ms times the
/// attempts so far, so that the units that met do not meet again in step.
fn retry_wait(attempt: u32) -> std::time::Duration {
    use rand::Rng;
    let most = 5 * u64::from(attempt);
    std::time::Duration::from_millis(rand::thread_rng().gen_range(1..=most))
}

async fn run_unit(pool: &PgPool, unit: &Unit) -> Result<Ran, sqlx::Error> {
    let mut yields = Vec::with_capacity(unit.steps.len());
    if let [step] = unit.steps.as_slice() {
        let yielded = execute(pool, step).await?;
        return Ok(unit::record(step, yielded, &mut yields).unwrap_or(Ran::Committed(yields)));
    }
    let mut tx = pool.begin().await?;
    for step in &unit.steps {
        let yielded = execute(&mut *tx, step).await?;
        if let Some(end) = unit::record(step, yielded, &mut yields) {
            match end {
                Ran::RolledBack => tx.rollback().await?,
                _ => tx.commit().await?,
            }
            return Ok(end);
        }
    }
    tx.commit().await?;
    Ok(Ran::Committed(yields))
}

async fn execute<'e>(executor: impl PgExecutor<'e>, step: &Step) -> Result<i64, sqlx::Error> {
    let query = step
        .params
        .iter()
        .fold(sqlx::query(step.sql), |query, param| bind(query, param));
    match step.yields {
        Yields::Rows => Ok(query.execute(executor).await?.rows_affected() as i64),
        Yields::Value => Ok(match query.fetch_optional(executor).await? {
            Some(row) => row.try_get::<i64, _>(0)?,
            None => 0,
        }),
    }
}

fn bind<'q>(
    query: sqlx::query::Query<'q, Postgres, PgArguments>,
    param: &Param,
) -> sqlx::query::Query<'q, Postgres, PgArguments> {
    match param {
        Param::Int(v) => query.bind(*v),
        Param::OptInt(v) => query.bind(*v),
        Param::Text(v) => query.bind(v),
        Param::OptText(v) => query.bind(v),
        Param::Ints(v) => query.bind(v),
        Param::OptInts(v) => query.bind(v),
        Param::Texts(v) => query.bind(v),
        Param::OptTexts(v) => query.bind(v),
    }
}

fn storage_error(e: sqlx::Error, unit: &Unit) -> Error {
    match &e {
        sqlx::Error::Database(db) if db.kind() == sqlx::error::ErrorKind::UniqueViolation => {
            unit.conflict(db.message())
        }
        _ => Error::from(e),
    }
}

/// Request-log completions on PostgreSQL (`Store::finish_log`), queued
/// instead of awaited: one task writes whatever has queued as one statement
/// (`unnest`) while the requests go on, so under load many completions share
/// one round trip (one of a send's round trips on an idle node, a fraction
/// of one on a busy one). `written` waits for what was queued before it, as
/// SQLite's `written_behind` does; the queue of a node that is killed is
/// lost with it, leaving those rows unfinished (status 0).
#[derive(Debug, Clone)]
pub(crate) struct LogCompletions {
    queue: mpsc::UnboundedSender<Queued>,
}

enum Queued {
    Log([i64; 3]),
    /// Answered once every completion queued before it was written.
    Written(oneshot::Sender<()>),
}

/// The most completions one statement writes.
const MOST_COMPLETIONS: usize = 1024;

const FINISH_LOGS: &str = "UPDATE request_logs AS l SET status = u.status, duration_ms = u.duration_ms \
     FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS u(id, status, duration_ms) WHERE l.id = u.id";

impl LogCompletions {
    /// Starts the task that writes them through `pool` (the bookkeeping
    /// pool: `synchronous_commit = off`).
    pub(crate) fn start(pool: PgPool) -> LogCompletions {
        let (queue, queued) = mpsc::unbounded_channel();
        tokio::spawn(write_completions(pool, queued));
        LogCompletions { queue }
    }

    /// Queues the completion (status, duration) of log row `id`.
    pub(crate) fn queue(&self, id: i64, status: i64, duration_ms: i64) -> Result<(), Error> {
        self.queue
            .send(Queued::Log([id, status, duration_ms]))
            .map_err(|_| stopped())
    }

    /// Waits until every completion queued before this call was written
    /// (or its statement failed, which the task logs).
    pub(crate) async fn written(&self) -> Result<(), Error> {
        let (done, answer) = oneshot::channel();
        self.queue
            .send(Queued::Written(done))
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())
    }
}

fn stopped() -> Error {
    Error::Unavailable {
        detail: "the request log's writer has stopped".into(),
    }
}

async fn write_completions(pool: PgPool, mut queued: mpsc::UnboundedReceiver<Queued>) {
    let mut waiting = Vec::new();
    let mut columns: [Vec<i64>; 3] = Default::default();
    while let Some(first) = queued.recv().await {
        let mut next = Some(first);
        while let Some(item) = next.take() {
            match item {
                Queued::Log(values) => {
                    for (column, value) in columns.iter_mut().zip(values) {
                        column.push(value);
                    }
                }
                Queued::Written(done) => waiting.push(done),
            }
            if columns[0].len() < MOST_COMPLETIONS {
                next = queued.try_recv().ok();
            }
        }
        if !columns[0].is_empty() {
            let [ids, statuses, durations] = std::mem::take(&mut columns);
            // Planned afresh each time (not a cached prepared statement): a
            // plan cached while the table was small joins by scanning it
            // whole, and keeps doing so as it grows.
            let written = sqlx::query(FINISH_LOGS)
                .persistent(false)
                .bind(&ids)
                .bind(statuses)
                .bind(durations)
                .execute(&pool)
                .await;
            if let Err(e) = written {
                tracing::warn!(
                    requests = ids.len(),
                    error = %e,
                    "request log completions could not be written; those requests stay unfinished (status 0) in the log"
                );
            }
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
}

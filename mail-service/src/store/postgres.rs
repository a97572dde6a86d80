//! PostgreSQL's write path: a unit of one step is one statement on a pooled
//! connection (no BEGIN/COMMIT round trips), so the hot writes are written
//! as one statement each (data-modifying CTEs, `unnest` for many rows); a
//! longer unit runs in one transaction. PostgreSQL groups the commits of
//! concurrent connections itself.

use sqlx::postgres::{PgArguments, PgPool};
use sqlx::{PgExecutor, Postgres, Row};

use crate::error::Error;

use super::unit::{self, Param, Ran, Step, Unit, Yields};

pub(crate) async fn run(pool: &PgPool, unit: &Unit) -> Result<Ran, Error> {
    run_unit(pool, unit)
        .await
        .map_err(|e| storage_error(e, unit))
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

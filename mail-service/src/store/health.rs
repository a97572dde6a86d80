//! What readiness and the queue gauges read: whether the database answers
//! with every migration applied, and the depth of the shared queues.

use std::time::Duration;

use super::{Db, Store, schema};
use crate::error::Error;

/// How long a readiness check waits for the database.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// The depth of the shared queues at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDepths {
    /// Scheduled emails due and not yet claimed.
    pub scheduled_due: i64,
    /// When the oldest of them became due (ms).
    pub oldest_due_at: Option<i64>,
    /// Pending webhook deliveries.
    pub webhooks_pending: i64,
    /// When the oldest of them was created (ms).
    pub oldest_pending_at: Option<i64>,
}

impl Store {
    /// `Ok` when the database answers within 2 s and has every migration
    /// this build carries; otherwise why not, for the operator.
    pub async fn readiness(&self) -> Result<(), String> {
        let expected = schema::known(match &self.db {
            Db::Sqlite { .. } => &schema::SQLITE_MIGRATIONS,
            Db::Postgres { .. } => &schema::POSTGRES_MIGRATIONS,
        });
        const SQL: &str = "SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations WHERE success";
        let applied = tokio::time::timeout(READY_TIMEOUT, async {
            Ok::<i64, sqlx::Error>(on_db!(self, pool => {
                sqlx::query_scalar::<_, i64>(SQL).fetch_one(pool).await?
            }))
        })
        .await;
        match applied {
            Err(_) => Err(format!(
                "the database did not answer within {} s",
                READY_TIMEOUT.as_secs()
            )),
            Ok(Err(e)) => Err(format!("the database is unreachable: {e}")),
            Ok(Ok(applied)) if applied < expected => Err(format!(
                "the database's migrations are behind: {applied} applied, {expected} expected"
            )),
            Ok(Ok(_)) => Ok(()),
        }
    }

    /// The queues' depths at `now` (ms).
    pub async fn queue_depths(&self, now: i64) -> Result<QueueDepths, Error> {
        let (scheduled_due, oldest_due_at): (i64, Option<i64>) = on_db!(self, pool => {
            sqlx::query_as(
                "SELECT COUNT(*), MIN(scheduled_at) FROM emails \
                 WHERE status = 'scheduled' AND scheduled_at <= $1",
            )
            .bind(now)
            .fetch_one(pool)
            .await?
        });
        let (webhooks_pending, oldest_pending_at): (i64, Option<i64>) = on_db!(self, pool => {
            sqlx::query_as(
                "SELECT COUNT(*), MIN(created_at) FROM webhook_events WHERE status = 'pending'",
            )
            .fetch_one(pool)
            .await?
        });
        Ok(QueueDepths {
            scheduled_due,
            oldest_due_at,
            webhooks_pending,
            oldest_pending_at,
        })
    }
}

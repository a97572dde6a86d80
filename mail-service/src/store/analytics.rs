//! Analytics reads: the per-day counts the triggers of migration 0005 keep.

use super::*;

/// One aggregate row: (UTC day number, status, count).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DayCount {
    pub day: i64,
    pub status: String,
    pub count: i64,
}

impl Store {
    /// The counts of a tenant's domain for days `from_day..=to_day`, the
    /// shards summed. An index range read of at most days × statuses × 16
    /// rows.
    pub async fn day_counts(
        &self,
        tenant_id: i64,
        domain: &str,
        from_day: i64,
        to_day: i64,
    ) -> Result<Vec<DayCount>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(
                "SELECT day, status, CAST(SUM(count) AS BIGINT) AS count FROM email_day_counts \
                 WHERE tenant_id = $1 AND domain = $2 AND day >= $3 AND day <= $4 GROUP BY day, status",
            )
            .bind(tenant_id)
            .bind(domain)
            .bind(from_day)
            .bind(to_day)
            .fetch_all(pool)
            .await?
        }))
    }

    /// The counts of every domain of a tenant for days `from_day..=to_day`,
    /// the shards summed, per domain name. The same aggregates as
    /// `day_counts` (served as `GET /emails/metrics`).
    pub async fn domain_day_counts(
        &self,
        tenant_id: i64,
        from_day: i64,
        to_day: i64,
    ) -> Result<Vec<DomainDayCount>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(
                "SELECT domain, day, status, CAST(SUM(count) AS BIGINT) AS count FROM email_day_counts \
                 WHERE tenant_id = $1 AND day >= $2 AND day <= $3 GROUP BY domain, day, status",
            )
            .bind(tenant_id)
            .bind(from_day)
            .bind(to_day)
            .fetch_all(pool)
            .await?
        }))
    }
}

/// One aggregate row of a tenant: (domain name, UTC day number, status, count).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DomainDayCount {
    pub domain: String,
    pub day: i64,
    pub status: String,
    pub count: i64,
}

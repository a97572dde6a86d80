//! The suppression list and the recipients an email lost to it.

use super::*;
use crate::model::{Suppression, SuppressionOrigin, suppression_key};

/// `$2, $3, ...`: the placeholders of `n` values after the tenant's `$1`.
fn placeholders(n: usize) -> String {
    (0..n)
        .map(|i| format!("${}", i + 2))
        .collect::<Vec<_>>()
        .join(", ")
}

/// PostgreSQL: the tenant's ($1) suppressed keys among $2 and, only when
/// there is none, `begin_handoff`'s mark (time $3, lease $4, email $5, key
/// $6..$8 or NULLs) in the same statement; yields (emails marked, keys).
const PG_SCREEN_AND_BEGIN: &str = concat!(
    "WITH s AS (SELECT email_key FROM suppressions WHERE tenant_id = $1 AND email_key = ANY($2::text[])), e AS (",
    emails::mark_handoff_begun!("$3", "$4", "$5"),
    " AND NOT EXISTS (SELECT 1 FROM s) RETURNING id), k AS (",
    emails::renew_key_lease!("$4", "$6", "$7", "$8"),
    " AND EXISTS (SELECT 1 FROM e)) \
     SELECT (SELECT count(*) FROM e), array(SELECT email_key FROM s)"
);

/// The columns of `Suppression`, then the rest of the query.
macro_rules! select_suppression {
    ($rest:literal) => {
        concat!(
            "SELECT id, email, reason, created_at, origin, source_id FROM suppressions ",
            $rest
        )
    };
}

impl Store {
    /// The step that adds `new` unless its mailbox (any case) is there.
    pub(crate) fn insert_suppression(tenant_id: i64, new: &Suppression) -> Step {
        Step::rows(
            "INSERT INTO suppressions (id, tenant_id, email, email_key, reason, created_at, origin, source_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (tenant_id, email_key) DO NOTHING",
            params![
                new.id,
                tenant_id,
                &new.email,
                suppression_key(&new.email),
                &new.reason,
                new.created_at,
                new.origin.as_str(),
                new.source_id
            ],
        )
    }

    /// Adds each of `new` (normalised addresses) to the tenant's list
    /// unless its mailbox (any case) is there, in one unit; answers the
    /// entries as stored (an address already there: its existing entry),
    /// one per mailbox, in the order given.
    pub async fn add_suppressions(
        &self,
        tenant_id: i64,
        new: &[Suppression],
    ) -> Result<Vec<Suppression>, Error> {
        if new.is_empty() {
            return Ok(Vec::new());
        }
        let steps = new
            .iter()
            .map(|s| Self::insert_suppression(tenant_id, s))
            .collect();
        self.write(Unit::new(steps)).await?;
        let keys: Vec<String> = new.iter().map(|s| suppression_key(&s.email)).collect();
        let stored = self.suppressions_by_key(tenant_id, &keys).await?;
        let mut out: Vec<Suppression> = Vec::new();
        for key in &keys {
            let entry = stored
                .iter()
                .find(|s| suppression_key(&s.email) == *key)
                .ok_or_else(|| Error::Unavailable {
                    detail: "the suppression was written but could not be read back".into(),
                })?;
            if !out.iter().any(|s| s.id == entry.id) {
                out.push(entry.clone());
            }
        }
        Ok(out)
    }

    /// Adds `email` (normalised) to the tenant's list unless its mailbox
    /// is there; either way answers the entry as stored.
    pub async fn add_suppression(
        &self,
        tenant_id: i64,
        new: &Suppression,
    ) -> Result<Suppression, Error> {
        let mut added = self
            .add_suppressions(tenant_id, std::slice::from_ref(new))
            .await?;
        added.pop().ok_or_else(|| Error::Unavailable {
            detail: "the suppression was written but could not be read back".into(),
        })
    }

    /// The entry of `email`'s mailbox (any case).
    pub async fn suppression_by_email(
        &self,
        tenant_id: i64,
        email: &str,
    ) -> Result<Option<Suppression>, Error> {
        optional!(
            self,
            select_suppression!("WHERE tenant_id = $1 AND email_key = $2"),
            tenant_id,
            suppression_key(email)
        )
    }

    /// The entries of these keys (`suppression_key`), in no order.
    async fn suppressions_by_key(
        &self,
        tenant_id: i64,
        keys: &[String],
    ) -> Result<Vec<Suppression>, Error> {
        let sql = format!(
            "{}({})",
            select_suppression!("WHERE tenant_id = $1 AND email_key IN "),
            placeholders(keys.len())
        );
        Ok(on_db!(self, pool => {
            // Only numbered placeholders are formatted into the text.
            let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone())).bind(tenant_id);
            for k in keys {
                query = query.bind(k);
            }
            query.fetch_all(pool).await?
        }))
    }

    pub async fn suppression_by_id(
        &self,
        tenant_id: i64,
        id: i64,
    ) -> Result<Option<Suppression>, Error> {
        optional!(
            self,
            select_suppression!("WHERE tenant_id = $1 AND id = $2"),
            tenant_id,
            id
        )
    }

    /// The tenant's suppressions, newest first, before `before_id`.
    pub async fn list_suppressions(
        &self,
        tenant_id: i64,
        before_id: Option<i64>,
        origin: Option<SuppressionOrigin>,
        limit: i64,
    ) -> Result<Vec<Suppression>, Error> {
        let origin = origin.map(SuppressionOrigin::as_str);
        Ok(on_db!(self, pool => {
            sqlx::query_as(select_suppression!(
                "WHERE tenant_id = $1 AND id < $2 AND ($3 IS NULL OR origin = $3) ORDER BY id DESC LIMIT $4"
            ))
            .bind(tenant_id)
            .bind(before_id.unwrap_or(i64::MAX))
            .bind(origin)
            .bind(limit)
            .fetch_all(pool)
            .await?
        }))
    }

    /// Removes these entries (ids of the tenant's) in one unit; answers the
    /// ids that were on the list.
    pub async fn delete_suppressions(
        &self,
        tenant_id: i64,
        ids: &[i64],
    ) -> Result<Vec<i64>, Error> {
        let steps: Vec<Step> = ids
            .iter()
            .map(|id| {
                Step::rows(
                    "DELETE FROM suppressions WHERE tenant_id = $1 AND id = $2",
                    params![tenant_id, *id],
                )
            })
            .collect();
        if steps.is_empty() {
            return Ok(Vec::new());
        }
        let yields = match self.write(Unit::new(steps)).await? {
            Ran::Committed(y) | Ran::Stopped(y) => y,
            Ran::RolledBack => Vec::new(),
        };
        Ok(ids
            .iter()
            .zip(yields)
            .filter(|(_, n)| *n == 1)
            .map(|(id, _)| *id)
            .collect())
    }

    /// Which of `emails` (normalised) are on the tenant's list, as their
    /// keys (`suppression_key`): any case of a suppressed mailbox matches.
    pub async fn suppressed_among(
        &self,
        tenant_id: i64,
        emails: &[String],
    ) -> Result<Vec<String>, Error> {
        if emails.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT email_key FROM suppressions WHERE tenant_id = $1 AND email_key IN ({})",
            placeholders(emails.len())
        );
        let keys: Vec<String> = emails.iter().map(|e| suppression_key(e)).collect();
        // Only numbered placeholders are formatted into the text; every
        // address is a bound parameter.
        Ok(match &self.db {
            Db::Sqlite { inline, .. } => inline.read(|conn| {
                let mut statement = conn.prepare_cached(&sql)?;
                let params = std::iter::once(rusqlite::types::Value::Integer(tenant_id))
                    .chain(keys.iter().cloned().map(rusqlite::types::Value::Text));
                statement
                    .query_map(rusqlite::params_from_iter(params), |row| row.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()
            })?,
            Db::Postgres { reads, .. } => {
                let mut query = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(tenant_id);
                for key in keys {
                    query = query.bind(key);
                }
                query.fetch_all(reads).await?
            }
        })
    }

    /// The handoff's start when none of `emails` is on the tenant's list:
    /// `Began` as `begin_handoff` marks it (`false`: its lease ran out and
    /// it was settled); otherwise `Suppressed` with their keys and nothing
    /// written. On PostgreSQL the screen and the mark are one statement (one
    /// round trip instead of two); on SQLite the screen is the inline read
    /// and the mark a unit of the writer, as apart.
    pub async fn begin_handoff_if_clear(
        &self,
        tenant_id: i64,
        emails: &[String],
        (id, key): (i64, Option<&KeyRef>),
        now: i64,
        lease_until: i64,
    ) -> Result<ScreenedStart, Error> {
        let Db::Postgres { writes, .. } = &self.db else {
            let suppressed = self.suppressed_among(tenant_id, emails).await?;
            if !suppressed.is_empty() {
                return Ok(ScreenedStart::Suppressed(suppressed));
            }
            let began = self.begin_handoff(id, key, now, lease_until).await?;
            return Ok(ScreenedStart::Began(began));
        };
        let keys: Vec<String> = emails.iter().map(|e| suppression_key(e)).collect();
        let (began, suppressed): (i64, Vec<String>) = sqlx::query_as(PG_SCREEN_AND_BEGIN)
            .bind(tenant_id)
            .bind(keys)
            .bind(now)
            .bind(lease_until)
            .bind(id)
            .bind(key.map(|k| k.tenant_id))
            .bind(key.map(|k| k.scope.as_str()))
            .bind(key.map(|k| k.key.as_str()))
            .fetch_one(writes)
            .await?;
        Ok(match suppressed.is_empty() {
            true => ScreenedStart::Began(began == 1),
            false => ScreenedStart::Suppressed(suppressed),
        })
    }

    /// Records the recipients an email lost to the list (a JSON list), on
    /// an email whose handoff has not been recorded yet.
    pub async fn record_suppressed_recipients(
        &self,
        email_id: i64,
        recipients: &[String],
    ) -> Result<(), Error> {
        let list = serde_json::to_string(recipients).unwrap_or_default();
        self.write_one(Step::rows(
            concat!(
                "UPDATE emails SET suppressed_recipients = $1 WHERE id = $2 AND ",
                emails::status_is!("sending")
            ),
            params![list, email_id],
        ))
        .await?;
        Ok(())
    }
}

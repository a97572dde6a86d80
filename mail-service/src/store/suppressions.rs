//! The suppression list and the recipients an email lost to it.

use super::*;
use crate::model::Suppression;

/// The columns of `Suppression`, then the rest of the query.
macro_rules! select_suppression {
    ($rest:literal) => {
        concat!(
            "SELECT id, email, reason, created_at FROM suppressions ",
            $rest
        )
    };
}

impl Store {
    /// Adds `email` (normalised) to the tenant's list unless it is there;
    /// either way answers the entry as stored.
    pub async fn add_suppression(
        &self,
        tenant_id: i64,
        new: &Suppression,
    ) -> Result<Suppression, Error> {
        self.write_one(Step::rows(
            "INSERT INTO suppressions (id, tenant_id, email, reason, created_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (tenant_id, email) DO NOTHING",
            params![new.id, tenant_id, &new.email, &new.reason, new.created_at],
        ))
        .await?;
        self.suppression_by_email(tenant_id, &new.email)
            .await?
            .ok_or_else(|| Error::Unavailable {
                detail: "the suppression was written but could not be read back".into(),
            })
    }

    pub async fn suppression_by_email(
        &self,
        tenant_id: i64,
        email: &str,
    ) -> Result<Option<Suppression>, Error> {
        optional!(
            self,
            select_suppression!("WHERE tenant_id = $1 AND email = $2"),
            tenant_id,
            email
        )
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
        limit: i64,
    ) -> Result<Vec<Suppression>, Error> {
        page!(
            self,
            select_suppression!("WHERE tenant_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3"),
            tenant_id,
            before_id,
            limit
        )
    }

    /// Returns false when the address was not on the list.
    pub async fn delete_suppression(&self, tenant_id: i64, email: &str) -> Result<bool, Error> {
        let deleted = self
            .write_one(Step::rows(
                "DELETE FROM suppressions WHERE tenant_id = $1 AND email = $2",
                params![tenant_id, email],
            ))
            .await?;
        Ok(deleted == 1)
    }

    /// Which of `emails` (normalised) are on the tenant's list.
    pub async fn suppressed_among(
        &self,
        tenant_id: i64,
        emails: &[String],
    ) -> Result<Vec<String>, Error> {
        if emails.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders: Vec<String> = (0..emails.len()).map(|i| format!("${}", i + 2)).collect();
        let sql = format!(
            "SELECT email FROM suppressions WHERE tenant_id = $1 AND email IN ({})",
            placeholders.join(", ")
        );
        Ok(on_db!(self, pool => {
            // Only numbered placeholders are formatted into the text; every
            // address is a bound parameter.
            let mut query = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.clone())).bind(tenant_id);
            for e in emails {
                query = query.bind(e);
            }
            query.fetch_all(pool).await?
        }))
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
            "UPDATE emails SET suppressed_recipients = $1 WHERE id = $2 AND status = 'sending'",
            params![list, email_id],
        ))
        .await?;
        Ok(())
    }
}

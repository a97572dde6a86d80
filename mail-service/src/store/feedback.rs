//! Feedback reports, the events they record on emails, and the service's
//! shared secrets (the return-path key).

use super::*;
use crate::model::{
    EmailEvent, EmailPayload, FeedbackKind, FeedbackReport, JsonText, ReportOutcome,
};

/// A received report, as kept.
#[derive(Debug, Clone)]
pub struct NewReport {
    pub id: i64,
    pub received_at: i64,
    pub source: &'static str,
    pub peer: Option<String>,
    pub envelope_to: Option<String>,
    /// SHA-256 (hex) of the message: one report however often it arrives.
    pub digest: String,
    pub size: i64,
    pub outcome: ReportOutcome,
    pub reason: Option<String>,
    pub tenant_id: Option<i64>,
    pub email_id: Option<i64>,
    /// The message (base64), kept for a quarantined report.
    pub raw_base64: Option<String>,
}

/// One event to record.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub id: i64,
    /// The `data` of its webhook event (Resend's email event data).
    pub webhook_data: String,
    pub recipient: String,
    pub kind: FeedbackKind,
    pub status_code: Option<String>,
    pub diagnostic: Option<String>,
}

/// A suppression a report adds (hard bounce, complaint).
#[derive(Debug, Clone)]
pub struct NewAutoSuppression {
    pub id: i64,
    pub email: String,
    pub reason: String,
    pub origin: crate::model::SuppressionOrigin,
    /// The email bounced or complained about.
    pub source_id: i64,
}

/// The email a report names, as the ingest needs it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct FeedbackTarget {
    pub id: i64,
    pub tenant_id: i64,
    pub status: EmailStatus,
    pub from_domain: String,
    pub payload: JsonText<EmailPayload>,
    pub message_id: String,
    pub created_at: i64,
    /// Recipients removed at the handoff (never sent to).
    pub suppressed_recipients: Option<JsonText<Vec<String>>>,
}

const INSERT_REPORT: &str = "INSERT INTO feedback_reports (id, received_at, source, peer, envelope_to, digest, size, outcome, reason, tenant_id, email_id, raw_base64) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (digest) DO NOTHING";

impl Store {
    /// The secret `name`, made from `candidate` by the first node that asks;
    /// every later call (on any node) gets the stored one.
    pub async fn service_secret(
        &self,
        name: &str,
        candidate: &str,
        now: i64,
    ) -> Result<String, Error> {
        let slot = Slot::Service {
            name: name.to_string(),
        };
        let sealed = self.seal(&slot, candidate).await?;
        self.write_one(Step::rows(
            "INSERT INTO service_secrets (name, value, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
            params![name, sealed, now],
        ))
        .await?;
        let stored: Option<String> = on_db!(self, pool => {
            sqlx::query_scalar("SELECT value FROM service_secrets WHERE name = $1")
                .bind(name)
                .fetch_optional(pool)
                .await?
        });
        let stored = stored.ok_or_else(|| Error::Unavailable {
            detail: format!("the service secret `{name}` was written but could not be read back"),
        })?;
        Ok(self.open_secret(&slot, &stored).await?.to_string())
    }

    /// The email a report names, whatever its tenant (the caller checks the
    /// report's token first).
    pub async fn feedback_target(&self, email_id: i64) -> Result<Option<FeedbackTarget>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(
                "SELECT id, tenant_id, status, from_domain, payload, message_id, created_at, suppressed_recipients FROM emails WHERE id = $1",
            )
            .bind(email_id)
            .fetch_optional(pool)
            .await?
        }))
    }

    /// Keeps a report and, for an applied one, its events (with their
    /// webhook events, `email.bounced` ...) and the suppressions it adds (an address already on the list keeps its
    /// entry), in one unit. False when the same report (by digest) was
    /// kept before: then nothing is written.
    pub async fn record_feedback(
        &self,
        report: &NewReport,
        events: &[NewEvent],
        suppressions: &[NewAutoSuppression],
    ) -> Result<bool, Error> {
        let mut steps = vec![
            Step::rows(
                INSERT_REPORT,
                params![
                    report.id,
                    report.received_at,
                    report.source,
                    &report.peer,
                    &report.envelope_to,
                    &report.digest,
                    report.size,
                    report.outcome.as_str(),
                    &report.reason,
                    report.tenant_id,
                    report.email_id,
                    &report.raw_base64
                ],
            )
            .abort_if_zero(),
        ];
        if let (Some(tenant_id), Some(email_id)) = (report.tenant_id, report.email_id) {
            for e in events {
                steps.push(Step::rows(
                    "INSERT INTO email_events (id, tenant_id, email_id, report_id, recipient, type, status_code, diagnostic, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                    params![
                        e.id,
                        tenant_id,
                        email_id,
                        report.id,
                        &e.recipient,
                        e.kind.as_str(),
                        &e.status_code,
                        &e.diagnostic,
                        report.received_at
                    ],
                ));
                steps.push(Self::record_event(
                    tenant_id,
                    e.kind.webhook_event(),
                    &e.webhook_data,
                    report.received_at,
                ));
            }
            for s in suppressions {
                steps.push(Self::insert_suppression(
                    tenant_id,
                    &crate::model::Suppression {
                        id: s.id,
                        email: s.email.clone(),
                        reason: Some(s.reason.clone()),
                        created_at: report.received_at,
                        origin: s.origin,
                        source_id: Some(s.source_id),
                    },
                ));
            }
        }
        Ok(self.write(Unit::new(steps)).await? != Ran::RolledBack)
    }

    /// The events of a tenant's email, oldest first.
    pub async fn email_events(
        &self,
        tenant_id: i64,
        email_id: i64,
    ) -> Result<Vec<EmailEvent>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(
                "SELECT id, email_id, recipient, type, status_code, diagnostic, created_at FROM email_events \
                 WHERE tenant_id = $1 AND email_id = $2 ORDER BY id",
            )
            .bind(tenant_id)
            .bind(email_id)
            .fetch_all(pool)
            .await?
        }))
    }

    /// How many reports were kept, per outcome.
    pub async fn feedback_report_counts(&self) -> Result<Vec<(String, i64)>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(
                "SELECT outcome, CAST(count(*) AS BIGINT) FROM feedback_reports GROUP BY outcome ORDER BY outcome",
            )
            .fetch_all(pool)
            .await?
        }))
    }

    /// Kept reports, newest first, of one outcome when given.
    pub async fn feedback_reports(
        &self,
        outcome: Option<ReportOutcome>,
        limit: i64,
    ) -> Result<Vec<FeedbackReport>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(
                "SELECT id, received_at, source, peer, envelope_to, size, outcome, reason, tenant_id, email_id \
                 FROM feedback_reports WHERE ($1 IS NULL OR outcome = $1) ORDER BY id DESC LIMIT $2",
            )
            .bind(outcome.map(ReportOutcome::as_str))
            .bind(limit)
            .fetch_all(pool)
            .await?
        }))
    }
}

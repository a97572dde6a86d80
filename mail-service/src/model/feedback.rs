//! What feedback mail says about a sent email: one event per recipient, in
//! Resend's event names, and the reports as received.

use serde::Serialize;

use crate::status::text_enum;

text_enum!(
    /// What a report said about one recipient.
    FeedbackKind, "feedback event" {
        /// A DSN with `Action: delivered` or `relayed` (or `expanded`).
        Delivered = "delivered",
        /// A DSN with `Action: delayed`, or `failed` with a 4.x.x status.
        DeliveryDelayed = "delivery_delayed",
        /// A DSN with `Action: failed` and a 5.x.x status: a hard bounce.
        Bounced = "bounced",
        /// A complaint report (ARF): the recipient marked it as spam.
        Complained = "complained",
    }
);

impl FeedbackKind {
    /// Whether the recipient goes on the tenant's suppression list.
    pub fn suppresses(self) -> bool {
        matches!(self, FeedbackKind::Bounced | FeedbackKind::Complained)
    }

    /// The webhook event that reports it.
    pub fn webhook_event(self) -> super::EventType {
        match self {
            FeedbackKind::Delivered => super::EventType::EmailDelivered,
            FeedbackKind::DeliveryDelayed => super::EventType::EmailDeliveryDelayed,
            FeedbackKind::Bounced => super::EventType::EmailBounced,
            FeedbackKind::Complained => super::EventType::EmailComplained,
        }
    }
}

text_enum!(
    /// What became of a received report.
    ReportOutcome, "feedback report outcome" {
        /// Its events were recorded.
        Applied = "applied",
        /// Kept, not applied; the report's `reason` says why.
        Quarantined = "quarantined",
    }
);

/// One recorded event of an email.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct EmailEvent {
    pub id: i64,
    pub email_id: i64,
    /// The recipient as the email named it (normalised).
    pub recipient: String,
    #[serde(rename = "type")]
    #[sqlx(rename = "type")]
    pub kind: FeedbackKind,
    /// The DSN's `Status` (`5.1.1`), or the complaint's feedback type.
    pub status_code: Option<String>,
    /// The DSN's `Diagnostic-Code`, when given.
    pub diagnostic: Option<String>,
    pub created_at: i64,
}

/// A report as kept, for the operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct FeedbackReport {
    pub id: i64,
    pub received_at: i64,
    /// `smtp` or `stdin`.
    pub source: String,
    pub peer: Option<String>,
    pub envelope_to: Option<String>,
    pub size: i64,
    pub outcome: ReportOutcome,
    pub reason: Option<String>,
    pub tenant_id: Option<i64>,
    pub email_id: Option<i64>,
}

//! Feedback mail applied: a delivery report or a complaint, once read
//! (`feedback::report`), is matched to its email by the return-path token
//! (`feedback::verp`), and its per-recipient events, the suppressions of
//! hard-bounced and complaining addresses and the report itself are
//! written in one unit. Whatever cannot be applied is kept as
//! `quarantined` with the reason; nothing is dropped silently.

use std::net::IpAddr;

use base64::Engine;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::feedback::report::{self, RecipientFeedback, Report, ReportKind};
use crate::feedback::verp::{TokenError, Verified};
use crate::model::{
    self, EmailEvent, EmailStatus, FeedbackKind, FeedbackReport, MAX_SUPPRESSION_REASON_CHARS,
    ReportOutcome,
};
use crate::store::{FeedbackTarget, NewAutoSuppression, NewEvent, NewReport};

use super::{Caller, MailService};

/// Where a report came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedbackSource {
    /// The SMTP listener: the peer and the envelope recipients (`RCPT TO`).
    Smtp { peer: IpAddr, rcpt_to: Vec<String> },
    /// `mail-service feedback ingest`: the recipient the relay names, if any.
    Stdin { recipient: Option<String> },
}

/// What became of one report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Ingested {
    /// Its events were recorded on the email.
    Applied {
        report_id: String,
        email_id: String,
        events: Vec<AppliedEvent>,
        /// Addresses it put on the tenant's suppression list.
        suppressed: Vec<String>,
        /// Recipients the report named that are not recipients of the
        /// email: nothing was recorded for them.
        ignored: Vec<String>,
    },
    /// Kept, not applied.
    Quarantined { report_id: String, reason: String },
    /// The same message was received before; nothing changed.
    Duplicate,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppliedEvent {
    #[serde(rename = "type")]
    pub kind: FeedbackKind,
    pub recipient: String,
    pub status: String,
}

/// A refusal to apply, with the email when it is known.
struct Refusal {
    reason: String,
    target: Option<(i64, i64)>,
}

fn refuse(reason: impl Into<String>) -> Refusal {
    Refusal {
        reason: reason.into(),
        target: None,
    }
}

impl MailService {
    /// Reads one received message and applies it, or keeps it in
    /// quarantine with the reason. An error only when storage fails (the
    /// sender should try again later).
    pub async fn ingest_feedback(
        &self,
        raw: &[u8],
        source: FeedbackSource,
    ) -> Result<Ingested, Error> {
        let now = self.clock.now_ms();
        let (peer, envelope_to, source_name) = match &source {
            FeedbackSource::Smtp { peer, rcpt_to } => {
                (Some(peer.to_string()), rcpt_to.clone(), "smtp")
            }
            FeedbackSource::Stdin { recipient } => {
                (None, recipient.iter().cloned().collect(), "stdin")
            }
        };
        let mut new = NewReport {
            id: self.ids.next(),
            received_at: now,
            source: source_name,
            peer,
            envelope_to: (!envelope_to.is_empty()).then(|| envelope_to.join(", ")),
            digest: hex::encode(Sha256::digest(raw)),
            size: raw.len() as i64,
            outcome: ReportOutcome::Applied,
            reason: None,
            tenant_id: None,
            email_id: None,
            raw_base64: None,
        };
        let applied = match report::parse(raw) {
            Err(unreadable) => Err(refuse(unreadable.0)),
            Ok(report) => self.plan(&report, &envelope_to).await?,
        };
        let report_id = new.id.to_string();
        let (outcome, kept) = match applied {
            Ok(plan) => {
                new.tenant_id = Some(plan.target.tenant_id);
                new.email_id = Some(plan.target.id);
                new.reason = (!plan.ignored.is_empty()).then(|| {
                    format!(
                        "not recipients of the email, ignored: {}",
                        plan.ignored.join(", ")
                    )
                });
                let kept = self
                    .store
                    .record_feedback(&new, &plan.events, &plan.suppressions)
                    .await?;
                let outcome = Ingested::Applied {
                    report_id: report_id.clone(),
                    email_id: plan.target.id.to_string(),
                    events: plan
                        .events
                        .iter()
                        .map(|e| AppliedEvent {
                            kind: e.kind,
                            recipient: e.recipient.clone(),
                            status: e.status_code.clone().unwrap_or_default(),
                        })
                        .collect(),
                    suppressed: plan.suppressions.into_iter().map(|s| s.email).collect(),
                    ignored: plan.ignored,
                };
                (outcome, kept)
            }
            Err(refusal) => {
                new.outcome = ReportOutcome::Quarantined;
                new.reason = Some(refusal.reason.clone());
                new.tenant_id = refusal.target.map(|t| t.0);
                new.email_id = refusal.target.map(|t| t.1);
                new.raw_base64 = Some(base64::engine::general_purpose::STANDARD.encode(raw));
                let kept = self.store.record_feedback(&new, &[], &[]).await?;
                let outcome = Ingested::Quarantined {
                    report_id: report_id.clone(),
                    reason: refusal.reason,
                };
                (outcome, kept)
            }
        };
        let counted = match (&outcome, kept) {
            (_, false) => "duplicate",
            (Ingested::Quarantined { .. }, true) => "quarantined",
            (_, true) => "applied",
        };
        metrics::counter!(crate::metrics::FEEDBACK_REPORTS, "outcome" => counted).increment(1);
        if !kept {
            tracing::info!(
                source = source_name,
                "feedback report received before; ignored"
            );
            return Ok(Ingested::Duplicate);
        }
        match &outcome {
            Ingested::Applied {
                email_id, events, ..
            } => {
                tracing::info!(report = %report_id, email = %email_id, events = events.len(), "feedback report applied")
            }
            Ingested::Quarantined { reason, .. } => {
                tracing::warn!(report = %report_id, %reason, "feedback report quarantined")
            }
            Ingested::Duplicate => {}
        }
        Ok(outcome)
    }

    /// What a report would change, or why it changes nothing.
    async fn plan(
        &self,
        report: &Report,
        envelope_to: &[String],
    ) -> Result<Result<Plan, Refusal>, Error> {
        let verified = match self.find_token(report, envelope_to) {
            Ok(v) => v,
            Err(reason) => return Ok(Err(refuse(reason))),
        };
        let Some(target) = self.store.feedback_target(verified.email_id).await? else {
            return Ok(Err(refuse(format!(
                "the return path names email {}, which does not exist",
                verified.email_id
            ))));
        };
        let known = Some((target.tenant_id, target.id));
        let refuse_known = |reason: String| Refusal {
            reason,
            target: known,
        };
        if !verified
            .domain
            .ends_with(&format!(".{}", target.from_domain))
        {
            return Ok(Err(refuse_known(format!(
                "the return path's domain {} is not one of email {}'s domain",
                verified.domain, target.id
            ))));
        }
        if !matches!(target.status, EmailStatus::Sent | EmailStatus::Unknown) {
            return Ok(Err(refuse_known(format!(
                "email {} was not handed off (status {}), so no report can be about it",
                target.id, target.status
            ))));
        }
        let recipients = recipients_of(&target);
        let mut matched: Vec<(String, &RecipientFeedback)> = Vec::new();
        let mut ignored = Vec::new();
        for r in &report.recipients {
            let found = r
                .original_address
                .iter()
                .chain(std::iter::once(&r.address))
                .find_map(|a| match_recipient(&recipients, a));
            match found {
                Some(address) => matched.push((address, r)),
                None => ignored.push(r.address.clone()),
            }
        }
        let complaint_for_the_only_recipient;
        if report.kind == ReportKind::Complaint && report.recipients.is_empty() {
            // Feedback loops often redact the recipient; an email with one
            // recipient still names it.
            let [only] = recipients.as_slice() else {
                return Ok(Err(refuse_known(format!(
                    "the complaint names no recipient and email {} has {}",
                    target.id,
                    recipients.len()
                ))));
            };
            complaint_for_the_only_recipient = RecipientFeedback {
                address: only.clone(),
                original_address: None,
                kind: FeedbackKind::Complained,
                status: "abuse".into(),
                diagnostic: None,
            };
            matched.push((only.clone(), &complaint_for_the_only_recipient));
        }
        if matched.is_empty() {
            return Ok(Err(refuse_known(format!(
                "the report names no recipient of email {} ({})",
                target.id,
                ignored.join(", ")
            ))));
        }
        let mut events = Vec::new();
        let mut suppressions: Vec<NewAutoSuppression> = Vec::new();
        for (address, r) in matched {
            events.push(NewEvent {
                id: self.ids.next(),
                webhook_data: webhook_data(&target, &address, r),
                recipient: address.clone(),
                kind: r.kind,
                status_code: Some(r.status.clone()),
                diagnostic: r.diagnostic.clone(),
            });
            if r.kind.suppresses() && !suppressions.iter().any(|s| s.email == address) {
                suppressions.push(NewAutoSuppression {
                    id: self.ids.next(),
                    reason: suppression_reason(&target, r),
                    email: address,
                    origin: if r.kind == FeedbackKind::Complained {
                        crate::model::SuppressionOrigin::Complaint
                    } else {
                        crate::model::SuppressionOrigin::Bounce
                    },
                    source_id: target.id,
                });
            }
        }
        Ok(Ok(Plan {
            target,
            events,
            suppressions,
            ignored,
        }))
    }

    /// The first return-path address of ours among the envelope's
    /// recipients and the report's candidates.
    fn find_token(&self, report: &Report, envelope_to: &[String]) -> Result<Verified, String> {
        let mut mismatch = None;
        let mut seen = Vec::new();
        for address in envelope_to.iter().chain(&report.return_path_candidates) {
            match self.verp.verify(address) {
                Ok(v) => return Ok(v),
                Err(e @ TokenError::Mismatch(_)) => {
                    mismatch.get_or_insert(e.to_string());
                }
                Err(TokenError::NotOurs(_)) => seen.push(address.clone()),
            }
        }
        Err(mismatch.unwrap_or_else(|| {
            if seen.is_empty() {
                "no return-path address of this service: the report names no envelope recipient, To, Original-Mail-From or Return-Path".to_string()
            } else {
                format!(
                    "no return-path address of this service among {}",
                    seen.join(", ")
                )
            }
        }))
    }

    /// The feedback events of a tenant's email.
    pub async fn email_events(&self, caller: &Caller, id: i64) -> Result<Vec<EmailEvent>, Error> {
        self.store
            .email_events(caller.principal.tenant_id, id)
            .await
    }

    /// How many reports were kept, per outcome (`applied`, `quarantined`;
    /// an outcome with none is 0).
    pub async fn feedback_report_counts(&self) -> Result<Vec<(ReportOutcome, i64)>, Error> {
        let stored = self.store.feedback_report_counts().await?;
        ReportOutcome::ALL
            .iter()
            .map(|o| {
                let n = stored
                    .iter()
                    .find(|(name, _)| name == o.as_str())
                    .map(|(_, n)| *n)
                    .unwrap_or(0);
                Ok((*o, n))
            })
            .collect()
    }

    /// Kept reports, newest first (the operator's view of the quarantine).
    pub async fn feedback_reports(
        &self,
        outcome: Option<ReportOutcome>,
        limit: i64,
    ) -> Result<Vec<FeedbackReport>, Error> {
        self.store.feedback_reports(outcome, limit).await
    }
}

struct Plan {
    target: FeedbackTarget,
    events: Vec<NewEvent>,
    suppressions: Vec<NewAutoSuppression>,
    ignored: Vec<String>,
}

/// The recipients the email was handed off to (to, cc, bcc, normalised,
/// without those the suppression list removed at its handoff).
fn recipients_of(target: &FeedbackTarget) -> Vec<String> {
    let payload = serde_json::to_value(&target.payload.0).unwrap_or_default();
    let Ok(email) = model::validate_email(&payload) else {
        return Vec::new();
    };
    let removed = target
        .suppressed_recipients
        .as_ref()
        .map(|l| l.0.clone())
        .unwrap_or_default();
    let mut all: Vec<String> = Vec::new();
    for address in email
        .to
        .iter()
        .chain(&email.cc)
        .chain(&email.bcc)
        .map(|m| model::normalized(&m.email))
    {
        if !removed.contains(&address) && !all.contains(&address) {
            all.push(address);
        }
    }
    all
}

/// The email's recipient a reported address means: the same normalised
/// address, or the same ignoring case (relays may change it).
fn match_recipient(recipients: &[String], reported: &str) -> Option<String> {
    let normalized = model::normalize_address("recipient", reported).ok()?;
    recipients
        .iter()
        .find(|r| **r == normalized)
        .or_else(|| {
            recipients
                .iter()
                .find(|r| r.eq_ignore_ascii_case(&normalized))
        })
        .cloned()
}

/// Resend's email event data, with what the report said about the
/// recipient: `bounce` (`type` Permanent, `subType` the status, `message`
/// the diagnostic), `delivery_delayed`, `complaint` or `delivery`. A report
/// without diagnostic text gives an empty `message`, as the email's events
/// show it (`GET /emails/{id}`).
fn webhook_data(target: &FeedbackTarget, recipient: &str, r: &RecipientFeedback) -> String {
    let message = &target.payload.0.message;
    let detail = serde_json::json!({
        "status": r.status,
        "message": r.diagnostic.clone().unwrap_or_default(),
    });
    let to = match serde_json::to_value(&message.to).unwrap_or_default() {
        serde_json::Value::Array(list) => serde_json::Value::Array(list),
        one => serde_json::json!([one]),
    };
    let mut data = serde_json::json!({
        "email_id": target.id.to_string(),
        "message_id": target.message_id,
        "from": message.from,
        "to": to,
        "subject": message.subject,
        "created_at": crate::clock::rfc3339(target.created_at),
        "recipient": recipient,
    });
    let (key, value) = match r.kind {
        FeedbackKind::Bounced => (
            "bounce",
            serde_json::json!({
                "type": "Permanent",
                "subType": r.status,
                "message": r.diagnostic.clone().unwrap_or_default(),
            }),
        ),
        FeedbackKind::DeliveryDelayed => ("delivery_delayed", detail),
        FeedbackKind::Delivered => ("delivery", detail),
        FeedbackKind::Complained => ("complaint", serde_json::json!({"feedback_type": r.status})),
    };
    data[key] = value;
    data.to_string()
}

/// Why a report put an address on the list (within the list's rules for
/// a reason: 256 characters, no control characters).
fn suppression_reason(target: &FeedbackTarget, r: &RecipientFeedback) -> String {
    let text = match r.kind {
        FeedbackKind::Complained => {
            format!("complained: {} report about email {}", r.status, target.id)
        }
        _ => format!(
            "bounced: {} for email {}{}",
            r.status,
            target.id,
            r.diagnostic
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        ),
    };
    text.chars()
        .filter(|c| !c.is_control())
        .take(MAX_SUPPRESSION_REASON_CHARS)
        .collect()
}

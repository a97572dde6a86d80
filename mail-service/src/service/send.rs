//! Sending: `POST /emails` and `POST /emails/batch` with a safe handoff and
//! idempotency, and reading an email back.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::model::{self, EmailStatus, KeyState, StoredEmail, ValidatedEmail};
use crate::store::{DkimKey, EmailUpdate, KeyRecord, KeyRef, NewEmail, Reservation, Reserved};
use crate::transport::{self, Handoff};

use super::handoff::{NotBegun, Parcel, handoff_outcome};
use super::suppressions;
use super::{Caller, MailService};

/// The scope of a key: tenant + method + path.
const SEND_SCOPE: &str = "POST /emails";
const BATCH_SCOPE: &str = "POST /emails/batch";
/// Added to the handoff bound before a `sending` email counts as abandoned.
const LEASE_MARGIN_MS: i64 = 30_000;

/// A checked `Idempotency-Key`.
#[derive(Debug, Clone)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(raw: &str) -> Result<Self, Error> {
        model::validate_idempotency_key(raw)?;
        Ok(IdempotencyKey(raw.to_string()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    pub id: String,
    pub revision: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemError {
    pub index: usize,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchSent {
    pub ids: Vec<String>,
    /// Refused items (permissive validation only).
    pub errors: Vec<ItemError>,
    /// Set when the batch had a scheduled item: every item was stored for
    /// the scheduler (those without `scheduled_at` due at once) and nothing
    /// was handed off yet (answered 202).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchValidation {
    Strict,
    Permissive,
}

/// What a key replays (stored as JSON with the key).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum Outcome {
    Sent(Sent),
    BatchSent(BatchSent),
    Failed {
        error: Error,
        request_id: String,
    },
    /// Written by the sweeper: the node stopped during the handoff.
    Abandoned,
    /// Written by the sweeper: the node stopped before any of the key's
    /// emails began its handoff. The key is released: the next request with
    /// it is taken as new.
    NotSent,
}

impl Outcome {
    pub(super) fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    fn parse(text: &str) -> Result<Outcome, Error> {
        serde_json::from_str(text).map_err(|e| Error::StoredDataInvalid {
            detail: format!("idempotency_keys.outcome: {e}"),
        })
    }
}

/// Hash of the canonical body: JSON with sorted keys and no whitespace, so
/// formatting and key order do not make two equal requests differ.
pub fn body_hash(body: &Value) -> String {
    hex::encode(Sha256::digest(body.to_string().as_bytes()))
}

/// How the handoff of one email ended, as stored.
pub(super) fn update(id: i64, status: EmailStatus, detail: Option<String>) -> EmailUpdate {
    EmailUpdate { id, status, detail }
}

impl MailService {
    pub async fn email(&self, caller: &Caller, id: i64) -> Result<StoredEmail, Error> {
        self.store
            .email(caller.principal.tenant_id, id)
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "email".into(),
            })
    }

    /// `POST /emails`: validate, reserve, hand off, record, answer. The
    /// reservation and the email row are written before the handoff starts,
    /// so a crash can never lose an accepted email or let a retry send it
    /// again.
    pub async fn send_email(
        &self,
        caller: &Caller,
        key: Option<&IdempotencyKey>,
        body: &Value,
    ) -> Result<Sent, Error> {
        let email = model::validate_email(body)?;
        // One that leaves now is screened with its sender's read.
        let recipients = match email.scheduled_at {
            None => suppressions::recipients(&email),
            Some(_) => Vec::new(),
        };
        let (sender, listed) = self
            .check_sender_screened(caller.principal.tenant_id, &email, &recipients)
            .await?;
        let now = self.clock.now_ms();
        if let Some(at) = email.scheduled_at {
            model::check_schedule_window("scheduled_at", at, now)?;
        }
        let new = self.new_email(caller, &email, email.scheduled_at, None);
        let id = new.id;
        let reservation = key.map(|k| self.reservation(caller, SEND_SCOPE, k, body, now));
        // A scheduled email is answered at once: its key records the answer
        // in the unit that stores it.
        let scheduled = new.scheduled_at.map(|_| Sent {
            id: id.to_string(),
            revision: 1,
        });
        let answered = scheduled.clone().map(|s| Outcome::Sent(s).to_json());
        // One that leaves now with every recipient clear is stored with its
        // handoff marked as begun: one unit of the writer, not two.
        let cleared = match &scheduled {
            None => self.cleared_identity(caller.principal.tenant_id, &sender, &listed),
            Some(_) => None,
        };
        let reserving = self.reserve(
            reservation.as_ref(),
            std::slice::from_ref(&new),
            answered.as_deref(),
            cleared.is_some(),
        );
        // Its message is built and signed while the writer stores it: the
        // signature (most of a send's CPU) runs beside the write instead of
        // after it. A replayed key wastes that one signature.
        let (reserved, prepared) = match &cleared {
            Some(identity) => {
                let preparing = self.prepare(&email, id, &new.message_id, identity);
                let (reserved, prepared) = tokio::join!(reserving, preparing);
                (reserved, Some(prepared))
            }
            None => (reserving.await, None),
        };
        if let Some(replay) = reserved? {
            return match replay {
                Outcome::Sent(sent) => Ok(sent),
                other => Err(replayed_error(other)),
            };
        }
        if let Some(sent) = scheduled {
            crate::metrics::emails_accepted("scheduled", 1);
            self.scheduler_wake.notify_one();
            return Ok(sent);
        }
        let key_ref = reservation.as_ref().map(key_ref);
        let result = self
            .hand_off(Parcel {
                tenant_id: caller.principal.tenant_id,
                email: &email,
                sender: &sender,
                id,
                message_id: &new.message_id,
                key: key_ref.as_ref(),
                prepared,
            })
            .await
            .unwrap_or_else(NotBegun::rejected);
        crate::metrics::emails_accepted(handoff_outcome(&result), 1);
        let now = self.clock.now_ms();
        let (status, detail, state, answer) = match result {
            Handoff::Accepted => (
                EmailStatus::Sent,
                None,
                KeyState::Completed,
                Ok(Sent {
                    id: id.to_string(),
                    revision: 2,
                }),
            ),
            // Accepted, and deliberately not handed off: answered as sent
            // (the email exists, with status `suppressed`).
            Handoff::Suppressed(detail) => (
                EmailStatus::Suppressed,
                Some(detail),
                KeyState::Completed,
                Ok(Sent {
                    id: id.to_string(),
                    revision: 2,
                }),
            ),
            Handoff::Rejected(detail) => (
                EmailStatus::Failed,
                Some(detail.clone()),
                KeyState::Completed,
                Err(Error::HandoffFailed {
                    email_id: id.to_string(),
                    detail,
                }),
            ),
            Handoff::Unknown(detail) => (
                EmailStatus::Unknown,
                Some(detail.clone()),
                KeyState::Unknown,
                Err(Error::HandoffUnknown {
                    email_id: id.to_string(),
                    detail,
                }),
            ),
        };
        let outcome = match &answer {
            Ok(sent) => Outcome::Sent(sent.clone()),
            Err(error) => Outcome::Failed {
                error: error.clone(),
                request_id: caller.request_id.to_string(),
            },
        }
        .to_json();
        let stored = self
            .store
            .finish_handoff(
                &[update(id, status, detail)],
                key_ref.as_ref().map(|k| (k, state, outcome.as_str())),
                now,
            )
            .await;
        match (answer, stored) {
            (Ok(sent), Ok(true)) => Ok(sent),
            // Accepted upstream but not recorded: the sweeper will declare it
            // unknown; the caller must not resend.
            (Ok(_), _) => Err(Error::HandoffUnknown {
                email_id: id.to_string(),
                detail: "the provider accepted it but the result could not be recorded".into(),
            }),
            // Not sent, but not recorded either: the sweeper will declare it
            // unknown, so the caller hears that storage failed.
            (Err(Error::HandoffFailed { .. }), Err(storage)) => Err(storage),
            // An unknown outcome stays unknown whether or not it was recorded
            // (the sweeper reaches the same state).
            (Err(error), _) => Err(error),
        }
    }

    /// `POST /emails/batch`: items are handed off in order; the first item
    /// that is not accepted stops the batch and later items are canceled.
    /// A batch with any scheduled item is stored whole for the scheduler
    /// (items without `scheduled_at` are due at once) and answered at once
    /// with its `batch_id`.
    pub async fn send_batch(
        &self,
        caller: &Caller,
        key: Option<&IdempotencyKey>,
        body: &Value,
        validation: BatchValidation,
    ) -> Result<BatchSent, Error> {
        let items = model::batch_items(body)?;
        let now = self.clock.now_ms();
        let mut valid: Vec<(usize, ValidatedEmail, DkimKey)> = Vec::new();
        let mut errors = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let checked =
                model::validate_batch_item(item).and_then(|email| match email.scheduled_at {
                    Some(at) => {
                        model::check_schedule_window("scheduled_at", at, now).map(|()| email)
                    }
                    None => Ok(email),
                });
            let checked = match checked {
                Ok(email) => self
                    .check_sender(caller.principal.tenant_id, &email)
                    .await
                    .map(|sender| (email, sender)),
                Err(e) => Err(e),
            };
            match checked {
                Ok((email, sender)) => valid.push((index, email, sender)),
                Err(e) if validation == BatchValidation::Strict => return Err(e.at_index(index)),
                Err(e) => errors.push(ItemError {
                    index,
                    message: e.to_string(),
                }),
            }
        }
        let batch_id = valid
            .iter()
            .any(|(_, e, _)| e.scheduled_at.is_some())
            .then(|| self.ids.next());
        let news: Vec<NewEmail> = valid
            .iter()
            .map(|(_, e, _)| {
                let due = batch_id.map(|_| e.scheduled_at.unwrap_or(now));
                self.new_email(caller, e, due, batch_id)
            })
            .collect();
        let reservation = key.map(|k| self.reservation(caller, BATCH_SCOPE, k, body, now));
        let scheduled = batch_id.map(|batch_id| BatchSent {
            ids: news.iter().map(|n| n.id.to_string()).collect(),
            errors: errors.clone(),
            batch_id: Some(batch_id.to_string()),
        });
        let answered = scheduled.clone().map(|s| Outcome::BatchSent(s).to_json());
        if let Some(replay) = self
            .reserve(reservation.as_ref(), &news, answered.as_deref(), false)
            .await?
        {
            return match replay {
                Outcome::BatchSent(sent) => Ok(sent),
                other => Err(replayed_error(other)),
            };
        }
        if let Some(sent) = scheduled {
            crate::metrics::emails_accepted("scheduled", news.len() as u64);
            self.scheduler_wake.notify_one();
            return Ok(sent);
        }
        let key_ref = reservation.as_ref().map(key_ref);
        let request_id = caller.request_id.to_string();
        let mut sent_ids = Vec::new();
        for (position, ((index, email, sender), new)) in valid.iter().zip(&news).enumerate() {
            let result = self
                .hand_off(Parcel {
                    tenant_id: caller.principal.tenant_id,
                    email,
                    sender,
                    id: new.id,
                    message_id: &new.message_id,
                    key: key_ref.as_ref(),
                    prepared: None,
                })
                .await
                .unwrap_or_else(NotBegun::rejected);
            crate::metrics::emails_accepted(handoff_outcome(&result), 1);
            let now = self.clock.now_ms();
            let (status, detail, unknown) = match result {
                Handoff::Accepted | Handoff::Suppressed(_) => {
                    let done = match result {
                        Handoff::Suppressed(detail) => {
                            update(new.id, EmailStatus::Suppressed, Some(detail))
                        }
                        _ => update(new.id, EmailStatus::Sent, None),
                    };
                    let recorded = self.store.finish_handoff(&[done], None, now).await;
                    if recorded.is_ok() {
                        sent_ids.push(new.id.to_string());
                        continue;
                    }
                    // Sent but not recorded: the sweeper will declare it
                    // unknown; stop here and say so.
                    (
                        EmailStatus::Unknown,
                        "the provider accepted it but the result could not be recorded".to_string(),
                        true,
                    )
                }
                Handoff::Rejected(d) => (EmailStatus::Failed, d, false),
                Handoff::Unknown(d) => (EmailStatus::Unknown, d, true),
            };
            let mut updates = vec![update(new.id, status, Some(detail.clone()))];
            updates.extend(news[position + 1..].iter().map(|later| {
                update(
                    later.id,
                    EmailStatus::Canceled,
                    Some(format!(
                        "not sent: item {index} of the batch failed before it"
                    )),
                )
            }));
            crate::metrics::emails_accepted("canceled", (news.len() - position - 1) as u64);
            let error = Error::BatchHandoffFailed {
                sent_ids: sent_ids.clone(),
                failed_index: *index,
                failed_email_id: new.id.to_string(),
                unknown,
                detail,
            };
            let outcome = Outcome::Failed {
                error: error.clone(),
                request_id: request_id.clone(),
            }
            .to_json();
            let state = if unknown {
                KeyState::Unknown
            } else {
                KeyState::Completed
            };
            let _ = self
                .store
                .finish_handoff(
                    &updates,
                    key_ref.as_ref().map(|k| (k, state, outcome.as_str())),
                    now,
                )
                .await;
            return Err(error);
        }
        let result = BatchSent {
            ids: sent_ids,
            errors,
            batch_id: None,
        };
        if let Some(k) = &key_ref {
            let outcome = Outcome::BatchSent(result.clone()).to_json();
            self.store
                .finish_handoff(
                    &[],
                    Some((k, KeyState::Completed, outcome.as_str())),
                    self.clock.now_ms(),
                )
                .await?;
        }
        Ok(result)
    }

    /// The row of a validated email, `scheduled` for `scheduled_at` when it
    /// is given. The stored payload leaves `scheduled_at` out: the row's
    /// column is the one place that says when it is due.
    fn new_email(
        &self,
        caller: &Caller,
        email: &ValidatedEmail,
        scheduled_at: Option<i64>,
        batch_id: Option<i64>,
    ) -> NewEmail {
        let id = self.ids.next();
        let mut payload = email.payload.clone();
        payload.message.scheduled_at = None;
        NewEmail {
            id,
            tenant_id: caller.principal.tenant_id,
            api_key_id: caller.principal.api_key_id,
            from_addr: email.from.to_string(),
            from_domain: super::domains::domain_of(email),
            to_addrs: serde_json::to_string(&email.payload.message.to).unwrap_or_default(),
            subject: email.payload.message.subject.clone(),
            payload: serde_json::to_string(&payload).unwrap_or_default(),
            message_id: transport::message_id_for(id, email),
            scheduled_at,
            batch_id,
            request_id: Some(caller.request_id),
        }
    }

    fn reservation(
        &self,
        caller: &Caller,
        scope: &str,
        key: &IdempotencyKey,
        body: &Value,
        now: i64,
    ) -> Reservation {
        Reservation {
            tenant_id: caller.principal.tenant_id,
            scope: scope.to_string(),
            key: key.0.clone(),
            body_hash: body_hash(body),
            replay_cutoff: now - self.settings.replay_window_ms,
        }
    }

    pub(super) fn lease_ms(&self) -> i64 {
        self.settings.handoff_lease.as_millis() as i64 + LEASE_MARGIN_MS
    }

    /// Writes the emails and the reservation (completed at once with
    /// `answered`, when given; the emails' handoff marked as begun with
    /// `begun`). `Some(outcome)` when the key was already completed
    /// (replay); an error when it is taken otherwise.
    async fn reserve(
        &self,
        reservation: Option<&Reservation>,
        emails: &[NewEmail],
        answered: Option<&str>,
        begun: bool,
    ) -> Result<Option<Outcome>, Error> {
        for attempt in 0..2 {
            let now = self.clock.now_ms();
            // One handoff's lease, whatever the number of emails: each
            // handoff renews it when it begins (`Store::begin_handoff`).
            let lease_until = now + self.lease_ms();
            match self
                .store
                .reserve_and_store(reservation, emails, (now, lease_until), answered, begun)
                .await?
            {
                Reserved::Fresh => return Ok(None),
                Reserved::Taken(record) => {
                    let body_hash = reservation
                        .map(|r| r.body_hash.as_str())
                        .unwrap_or_default();
                    match judge(&record, body_hash, now)? {
                        Judgement::Replay(outcome) => return Ok(Some(outcome)),
                        Judgement::LeaseExpired if attempt == 0 => {
                            self.expire_abandoned(now).await?;
                        }
                        Judgement::LeaseExpired => return Err(Error::IdempotencyInFlight),
                    }
                }
            }
        }
        Err(Error::IdempotencyInFlight)
    }
}

enum Judgement {
    Replay(Outcome),
    LeaseExpired,
}

fn key_ref(r: &Reservation) -> KeyRef {
    KeyRef {
        tenant_id: r.tenant_id,
        scope: r.scope.clone(),
        key: r.key.clone(),
    }
}

/// Decides what a request meets when its key is already taken.
fn judge(record: &KeyRecord, body_hash: &str, now: i64) -> Result<Judgement, Error> {
    if record.body_hash != body_hash {
        return Err(Error::IdempotencyBodyMismatch);
    }
    let outcome = record.outcome.as_deref().map(Outcome::parse).transpose()?;
    let unresolved_email = || {
        let id = match &outcome {
            Some(Outcome::Failed {
                error: Error::HandoffUnknown { email_id, .. },
                ..
            }) => email_id.clone(),
            Some(Outcome::Failed {
                error:
                    Error::BatchHandoffFailed {
                        failed_email_id, ..
                    },
                ..
            }) => failed_email_id.clone(),
            _ => record
                .email_ids
                .0
                .first()
                .map(ToString::to_string)
                .unwrap_or_default(),
        };
        Error::IdempotencyUnresolved { email_id: id }
    };
    match record.state {
        KeyState::InFlight if record.lease_until < now => Ok(Judgement::LeaseExpired),
        KeyState::InFlight => Err(Error::IdempotencyInFlight),
        KeyState::Unknown => Err(unresolved_email()),
        KeyState::Completed => match outcome {
            // Released by the sweeper; another request took it over first.
            Some(Outcome::NotSent) => Ok(Judgement::LeaseExpired),
            Some(Outcome::Abandoned) | None => Err(unresolved_email()),
            Some(o) => Ok(Judgement::Replay(o)),
        },
    }
}

/// A replayed outcome that is not the success shape of its endpoint. Keys
/// are scoped by path, so a success is always the endpoint's own kind and
/// only recorded failures arrive here.
fn replayed_error(outcome: Outcome) -> Error {
    match outcome {
        Outcome::Failed { error, request_id } => Error::Replayed {
            error: Box::new(error),
            request_id,
        },
        _ => Error::IdempotencyBodyMismatch,
    }
}

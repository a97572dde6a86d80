//! The scheduler: hands each due email off at most once, from any node.
//!
//! Durable: scheduled emails are rows (`status = 'scheduled'`), found after
//! any restart. Leased: a claim moves due rows to `sending` with a lease in
//! one statement (PostgreSQL: `FOR UPDATE SKIP LOCKED`, so two nodes never
//! take the same row; SQLite: the single writer). From the claim on, an
//! email follows the rules of an immediate send: its outcome is written
//! after the handoff, a handoff that may or may not have happened is
//! `unknown`, and a claim whose node died is settled by the sweeper when its
//! lease runs out: `unknown` when its handoff began (the durable mark
//! written before the transport connects), back to `scheduled` when it
//! never did (also what a storage error before the handoff leads to).
//! Nothing is ever handed off twice.
//!
//! A node claims only as many emails as it has free handoff slots
//! (`Settings::scheduler_concurrency`), so every claimed email starts its
//! handoff at once and its lease covers one handoff.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tracing::Instrument;

use crate::error::Error;
use crate::model::{self, EmailStatus};
use crate::store::ClaimedEmail;
use crate::transport::Handoff;

use super::MailService;
use super::handoff::{NotBegun, Parcel};
use super::send::update;

/// Shortest wait before looking again while due emails are held by another
/// node's claim.
const RECHECK: Duration = Duration::from_millis(10);

impl MailService {
    /// Claims up to `limit` emails due now.
    async fn claim_due(&self, limit: usize) -> Result<Vec<ClaimedEmail>, Error> {
        let now = self.clock.now_ms();
        let claim = self.ids.next();
        let claimed = self
            .store
            .claim_due(claim, now, now + self.lease_ms(), limit as i64)
            .await?;
        if claimed == 0 {
            return Ok(Vec::new());
        }
        self.store.claimed(claim).await
    }

    /// Hands one claimed email off and records the outcome. A handoff that
    /// began is never retried. When the outcome cannot be recorded the
    /// email stays `sending` and the sweeper settles it once its lease has
    /// run out: `unknown` when its handoff began, back to `scheduled` when
    /// it never did. A storage error before the handoff begins (reading
    /// the sender's domain, the suppression list, writing the mark) leaves
    /// it so on purpose: the error is transient, and a scheduled email has
    /// nobody to retry it but the scheduler. Its log lines carry the id of
    /// the request that accepted the email.
    async fn hand_off_claimed(&self, email: ClaimedEmail) {
        let span = tracing::info_span!(
            "scheduled_handoff",
            request_id = email.request_id,
            email_id = email.id
        );
        self.hand_off_claimed_in_span(email).instrument(span).await;
    }

    async fn hand_off_claimed_in_span(&self, email: ClaimedEmail) {
        let (status, detail) = match self.hand_off_scheduled(&email).await {
            Ok(outcome) => outcome,
            Err(not_begun) => {
                tracing::warn!(email_id = email.id, detail = %not_begun.detail,
                    "scheduled handoff did not begin; left claimed, the sweeper hands it back to the scheduler when its lease runs out");
                return;
            }
        };
        let recorded = self
            .store
            .finish_handoff(
                &[update(email.id, status, detail)],
                None,
                self.clock.now_ms(),
            )
            .await;
        if let Err(e) = recorded {
            tracing::error!(email_id = email.id, error = %e, outcome = %status,
                "scheduled handoff not recorded; the sweeper will settle it");
        }
    }

    /// The status and detail a claimed email's handoff leaves it in;
    /// `NotBegun` (transient) when storage failed before it began.
    async fn hand_off_scheduled(
        &self,
        email: &ClaimedEmail,
    ) -> Result<(EmailStatus, Option<String>), NotBegun> {
        let payload = serde_json::to_value(&email.payload.0).unwrap_or_default();
        let valid = match model::validate_email(&payload) {
            Ok(valid) => valid,
            Err(e) => {
                return Ok((
                    EmailStatus::Failed,
                    Some(format!(
                        "the stored message no longer passes validation ({e}); it was not sent"
                    )),
                ));
            }
        };
        // The domain may have been deleted since it was accepted.
        let sender = match self.check_sender(email.tenant_id, &valid).await {
            Ok(sender) => sender,
            Err(e @ Error::Unavailable { .. }) => {
                return Err(NotBegun {
                    detail: format!("not sent: {e}"),
                    transient: true,
                });
            }
            Err(e) => return Ok((EmailStatus::Failed, Some(format!("not sent: {e}")))),
        };
        let handoff = self
            .hand_off(Parcel {
                tenant_id: email.tenant_id,
                email: &valid,
                sender: &sender,
                id: email.id,
                message_id: &email.message_id,
                key: None,
                prepared: None,
            })
            .await;
        Ok(match handoff {
            Err(not_begun) if not_begun.transient => return Err(not_begun),
            Err(not_begun) => (EmailStatus::Failed, Some(not_begun.detail)),
            Ok(Handoff::Accepted) => (EmailStatus::Sent, None),
            Ok(Handoff::Rejected(detail)) => (EmailStatus::Failed, Some(detail)),
            Ok(Handoff::Unknown(detail)) => (EmailStatus::Unknown, Some(detail)),
            Ok(Handoff::Suppressed(detail)) => (EmailStatus::Suppressed, Some(detail)),
        })
    }

    /// Hands off every email due now, `scheduler_concurrency` at a time, and
    /// returns how many were handed off. What the background scheduler
    /// does, as one call (tests move an injected clock and call this).
    pub async fn dispatch_due(&self) -> Result<usize, Error> {
        let mut handed_off = 0;
        loop {
            let claimed = self
                .claim_due(self.settings.scheduler_concurrency.max(1))
                .await?;
            if claimed.is_empty() {
                return Ok(handed_off);
            }
            handed_off += claimed.len();
            let mut handoffs = tokio::task::JoinSet::new();
            for email in claimed {
                let service = self.clone();
                handoffs.spawn(async move { service.hand_off_claimed(email).await });
            }
            while handoffs.join_next().await.is_some() {}
        }
    }
}

/// The background scheduler of one node.
pub struct Scheduler {
    service: MailService,
    slots: Arc<Semaphore>,
    concurrency: usize,
}

impl Scheduler {
    pub fn new(service: MailService) -> Scheduler {
        let concurrency = service.settings.scheduler_concurrency.max(1);
        Scheduler {
            service,
            slots: Arc::new(Semaphore::new(concurrency)),
            concurrency,
        }
    }

    /// Runs until `stop` turns true, then waits for the handoffs under way
    /// (each bounded by the handoff lease) so none is cut off.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        while !*stop.borrow() {
            let wait = match self.claim_round().await {
                Ok(true) => continue,
                Ok(false) => self.until_next_due().await,
                Err(e) => {
                    tracing::warn!(error = %e, "scheduler could not claim due emails");
                    self.service.settings.scheduler_poll
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.service.scheduler_wake.notified() => {}
                _ = stop.changed() => {}
            }
        }
        let _ = self.slots.acquire_many(self.concurrency as u32).await;
    }

    /// Waits for a free slot, claims as many due emails as there are free
    /// slots and starts their handoffs. True when every slot found an email
    /// (more may be due).
    async fn claim_round(&self) -> Result<bool, Error> {
        let Ok(first) = self.slots.clone().acquire_owned().await else {
            return Ok(false);
        };
        let wanted = 1 + self.slots.available_permits();
        let claimed = self.service.claim_due(wanted).await?;
        let full = claimed.len() == wanted;
        let mut first = Some(first);
        for email in claimed {
            let slot: OwnedSemaphorePermit = match first.take() {
                Some(slot) => slot,
                None => match self.slots.clone().acquire_owned().await {
                    Ok(slot) => slot,
                    Err(_) => return Ok(false),
                },
            };
            let service = self.service.clone();
            tokio::spawn(async move {
                service.hand_off_claimed(email).await;
                drop(slot);
            });
        }
        Ok(full)
    }

    /// How long to sleep before the next claim: until the next due email,
    /// at most the poll interval.
    async fn until_next_due(&self) -> Duration {
        let poll = self.service.settings.scheduler_poll;
        match self.service.store.next_due().await {
            Ok(Some(at)) => {
                let ms = at - self.service.clock.now_ms();
                if ms <= 0 {
                    RECHECK
                } else {
                    Duration::from_millis(ms as u64).min(poll)
                }
            }
            Ok(None) => poll,
            Err(e) => {
                tracing::warn!(error = %e, "scheduler could not read the next due time");
                poll
            }
        }
    }
}

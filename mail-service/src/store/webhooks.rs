//! Webhooks, their outbox (`webhook_events`: one row per event and
//! subscribed webhook) and the delivery attempts.
//!
//! Email and domain status changes reach the outbox through triggers (see
//! the `0017_webhooks` migrations), in the transaction of the write that
//! changes the status. Any other event is recorded with `record_event`: a
//! step added to the unit of the state change it reports.

use super::*;
use crate::model::{DeliveryStatus, EventType, SigningSecret, Webhook};

fn signing_secret(plain: &str) -> Result<SigningSecret, Error> {
    plain.parse().map_err(|_| Error::StoredDataInvalid {
        detail: "a webhook signing secret is not in its form".into(),
    })
}

/// Whose secret a webhook's columns hold.
fn webhook_slot(w: &Webhook) -> Slot {
    Slot::Webhook {
        tenant_id: w.tenant_id,
        webhook_id: w.id,
    }
}

/// The columns of `Webhook`, then the rest of the query.
macro_rules! select_webhook {
    ($rest:literal) => {
        concat!(
            "SELECT id, tenant_id, endpoint, events, secret, previous_secret, previous_secret_until, status, disabled_reason, created_at, updated_at FROM webhooks ",
            $rest
        )
    };
}

/// The columns of `WebhookEvent`, then the rest of the query.
macro_rules! select_event {
    ($rest:literal) => {
        concat!(
            "SELECT id, webhook_id, event_type, data, created_at, status, attempts, next_attempt_at, finished_at FROM webhook_events ",
            $rest
        )
    };
}

/// One outbox row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WebhookEvent {
    pub id: i64,
    pub webhook_id: i64,
    pub event_type: EventType,
    /// The event's JSON `data`.
    pub data: String,
    pub created_at: i64,
    pub status: DeliveryStatus,
    /// Attempts recorded so far.
    pub attempts: i64,
    pub next_attempt_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// One delivery attempt.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WebhookAttempt {
    pub id: i64,
    pub event_id: i64,
    pub attempted_at: i64,
    pub status_code: Option<i64>,
    /// None on a 2xx answer; else what went wrong (`http_status`,
    /// `timeout`, `connect`, `forbidden_address`, ...).
    pub error_class: Option<String>,
    /// The start of the answer's body (capped).
    pub response: String,
    pub duration_ms: i64,
}

/// An outbox row a dispatcher claimed, with what its delivery needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedDelivery {
    #[sqlx(rename = "event_id")]
    pub id: i64,
    pub event_type: EventType,
    pub data: String,
    #[sqlx(rename = "event_created_at")]
    pub created_at: i64,
    pub attempts: i64,
    /// The request that caused the event (an email's accepting request),
    /// when one did.
    pub request_id: Option<i64>,
    #[sqlx(flatten)]
    pub webhook: Webhook,
}

/// What an attempt did to its outbox row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// A 2xx answer.
    Delivered,
    /// Tried again at this time.
    RetryAt(i64),
    /// Never tried again; the webhook is disabled with this reason.
    GaveUp { disable_reason: String },
}

impl Store {
    pub async fn create_webhook(&self, webhook: &Webhook) -> Result<(), Error> {
        let sealed = self
            .seal(&webhook_slot(webhook), webhook.secret.reveal())
            .await?;
        self.write_one(Step::rows(
            "INSERT INTO webhooks (id, tenant_id, endpoint, events, secret, status, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7)",
            params![
                webhook.id,
                webhook.tenant_id,
                &webhook.endpoint,
                &webhook.events,
                sealed,
                webhook.status.as_str(),
                webhook.created_at
            ],
        ))
        .await?;
        Ok(())
    }

    pub async fn webhook(&self, tenant_id: i64, id: i64) -> Result<Option<Webhook>, Error> {
        let found: Result<Option<Webhook>, Error> = optional!(
            self,
            select_webhook!("WHERE id = $1 AND tenant_id = $2"),
            id,
            tenant_id
        );
        match found? {
            Some(w) => Ok(Some(self.open_webhook(w).await?)),
            None => Ok(None),
        }
    }

    /// A webhook as read, with its sealed secrets opened.
    async fn open_webhook(&self, mut w: Webhook) -> Result<Webhook, Error> {
        let slot = webhook_slot(&w);
        let plain = self.open_secret(&slot, w.secret.reveal()).await?;
        w.secret = signing_secret(&plain)?;
        if let Some(previous) = &w.previous_secret {
            let plain = self.open_secret(&slot, previous.reveal()).await?;
            w.previous_secret = Some(signing_secret(&plain)?);
        }
        Ok(w)
    }

    /// The tenant's webhooks, newest first, before `before_id`.
    pub async fn list_webhooks(
        &self,
        tenant_id: i64,
        before_id: Option<i64>,
        limit: i64,
    ) -> Result<Vec<Webhook>, Error> {
        let rows: Result<Vec<Webhook>, Error> = page!(
            self,
            select_webhook!("WHERE tenant_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3"),
            tenant_id,
            before_id,
            limit
        );
        let rows = rows?;
        let mut opened = Vec::with_capacity(rows.len());
        for w in rows {
            opened.push(self.open_webhook(w).await?);
        }
        Ok(opened)
    }

    /// Sets a webhook's endpoint, events and status (enabling clears the
    /// reason it was disabled). False when it does not exist.
    pub async fn update_webhook(&self, webhook: &Webhook, now: i64) -> Result<bool, Error> {
        let changed = self
            .write_one(Step::rows(
                "UPDATE webhooks SET endpoint = $1, events = $2, status = $3, disabled_reason = $4, updated_at = $5 \
                 WHERE id = $6 AND tenant_id = $7",
                params![
                    &webhook.endpoint,
                    &webhook.events,
                    webhook.status.as_str(),
                    &webhook.disabled_reason,
                    now,
                    webhook.id,
                    webhook.tenant_id
                ],
            ))
            .await?;
        Ok(changed == 1)
    }

    /// Replaces the signing secret; the one it replaces keeps signing beside
    /// it until `previous_until`. False when the webhook does not exist.
    pub async fn rotate_webhook_secret(
        &self,
        tenant_id: i64,
        id: i64,
        secret: &crate::model::SigningSecret,
        previous_until: i64,
        now: i64,
    ) -> Result<bool, Error> {
        let slot = Slot::Webhook {
            tenant_id,
            webhook_id: id,
        };
        let sealed = self.seal(&slot, secret.reveal()).await?;
        let changed = self
            .write_one(Step::rows(
                "UPDATE webhooks SET previous_secret = secret, previous_secret_until = $1, secret = $2, updated_at = $3 \
                 WHERE id = $4 AND tenant_id = $5",
                params![previous_until, sealed, now, id, tenant_id],
            ))
            .await?;
        Ok(changed == 1)
    }

    /// Deletes a webhook with its outbox rows and attempts. False when it
    /// does not exist.
    pub async fn delete_webhook(&self, tenant_id: i64, id: i64) -> Result<bool, Error> {
        let ran = self
            .write(Unit::new(vec![
                Step::rows(
                    "DELETE FROM webhook_attempts WHERE event_id IN \
                     (SELECT e.id FROM webhook_events e JOIN webhooks w ON w.id = e.webhook_id WHERE w.id = $1 AND w.tenant_id = $2)",
                    params![id, tenant_id],
                ),
                Step::rows(
                    "DELETE FROM webhook_events WHERE webhook_id IN (SELECT id FROM webhooks WHERE id = $1 AND tenant_id = $2)",
                    params![id, tenant_id],
                ),
                Step::rows(
                    "DELETE FROM webhooks WHERE id = $1 AND tenant_id = $2",
                    params![id, tenant_id],
                )
                .abort_if_zero(),
            ]))
            .await?;
        Ok(ran != Ran::RolledBack)
    }

    /// The step that records an event of `tenant_id`: one outbox row per
    /// enabled webhook of the tenant subscribed to `event`, none (one index
    /// probe) when there is no such webhook. Add it to the unit of the state
    /// change the event reports, so both commit or neither does. `data` is
    /// the event's JSON `data` object; `now` its time.
    pub(crate) fn record_event(tenant_id: i64, event: EventType, data: &str, now: i64) -> Step {
        Step::rows(
            "INSERT INTO webhook_events (webhook_id, tenant_id, event_type, data, created_at, status, next_attempt_at) \
             SELECT id, $1, $2, $3, $4, 'pending', $4 FROM webhooks \
             WHERE tenant_id = $5 AND status = 'enabled' AND events LIKE $6",
            params![
                tenant_id,
                event.as_str(),
                data,
                now,
                tenant_id,
                format!("%,{},%", event.as_str())
            ],
        )
    }

    /// Records an event on its own, for a state change that is not stored
    /// here (`record_event` is the step to add to a unit).
    pub async fn record_event_alone(
        &self,
        tenant_id: i64,
        event: EventType,
        data: &str,
        now: i64,
    ) -> Result<u64, Error> {
        Ok(self
            .write_one(Self::record_event(tenant_id, event, data, now))
            .await? as u64)
    }

    /// Claims up to `limit` pending outbox rows due at `now` whose webhook is
    /// enabled: they carry `claim` and are not due again before
    /// `lease_until` (when a node stopped mid-attempt, another takes them
    /// then). On PostgreSQL rows another node is claiming are skipped.
    pub async fn claim_webhook_events(
        &self,
        claim: i64,
        now: i64,
        lease_until: i64,
        limit: i64,
    ) -> Result<u64, Error> {
        let sql = if self.is_postgres() {
            "WITH due AS (SELECT e.id FROM webhook_events e WHERE e.status = 'pending' AND e.next_attempt_at <= $3 \
               AND EXISTS (SELECT 1 FROM webhooks w WHERE w.id = e.webhook_id AND w.status = 'enabled') \
               ORDER BY e.next_attempt_at LIMIT $4 FOR UPDATE SKIP LOCKED) \
             UPDATE webhook_events SET claim = $1, next_attempt_at = $2 FROM due WHERE webhook_events.id = due.id"
        } else {
            "UPDATE webhook_events SET claim = $1, next_attempt_at = $2 \
             WHERE id IN (SELECT e.id FROM webhook_events e WHERE e.status = 'pending' AND e.next_attempt_at <= $3 \
               AND EXISTS (SELECT 1 FROM webhooks w WHERE w.id = e.webhook_id AND w.status = 'enabled') \
               ORDER BY e.next_attempt_at LIMIT $4)"
        };
        let claimed = self
            .write_one(Step::rows(sql, params![claim, lease_until, now, limit]))
            .await?;
        Ok(claimed as u64)
    }

    /// The rows a claim took that are still pending under it.
    pub async fn claimed_webhook_events(&self, claim: i64) -> Result<Vec<ClaimedDelivery>, Error> {
        let rows: Vec<ClaimedDelivery> = on_db!(self, pool => {
            sqlx::query_as(
                "SELECT e.id AS event_id, e.event_type, e.data, e.created_at AS event_created_at, e.attempts, e.request_id, \
                   w.id, w.tenant_id, w.endpoint, w.events, w.secret, w.previous_secret, w.previous_secret_until, \
                   w.status, w.disabled_reason, w.created_at, w.updated_at \
                 FROM webhook_events e JOIN webhooks w ON w.id = e.webhook_id \
                 WHERE e.claim = $1 AND e.status = 'pending' ORDER BY e.id",
            )
            .bind(claim)
            .fetch_all(pool)
            .await?
        });
        let mut opened = Vec::with_capacity(rows.len());
        for mut delivery in rows {
            delivery.webhook = self.open_webhook(delivery.webhook).await?;
            opened.push(delivery);
        }
        Ok(opened)
    }

    /// When the next pending row of an enabled webhook is due.
    pub async fn next_webhook_event_due(&self) -> Result<Option<i64>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_scalar(
                "SELECT min(e.next_attempt_at) FROM webhook_events e JOIN webhooks w ON w.id = e.webhook_id \
                 WHERE e.status = 'pending' AND w.status = 'enabled'",
            )
            .fetch_one(pool)
            .await?
        }))
    }

    /// Records an attempt on a row this claim holds, and what it leads to,
    /// in one unit. False (nothing written) when the claim no longer holds
    /// the row (its lease ran out and another node took it).
    pub async fn record_attempt(
        &self,
        claim: i64,
        delivery: &ClaimedDelivery,
        attempt: &WebhookAttempt,
        outcome: &AttemptOutcome,
        now: i64,
    ) -> Result<bool, Error> {
        let (status, next, finished) = match outcome {
            AttemptOutcome::Delivered => (DeliveryStatus::Delivered, None, Some(now)),
            AttemptOutcome::RetryAt(at) => (DeliveryStatus::Pending, Some(*at), None),
            AttemptOutcome::GaveUp { .. } => (DeliveryStatus::Failed, None, Some(now)),
        };
        let mut steps = vec![
            Step::rows(
                "UPDATE webhook_events SET status = $1, attempts = attempts + 1, next_attempt_at = $2, finished_at = $3, claim = NULL \
                 WHERE id = $4 AND claim = $5 AND status = 'pending'",
                params![status.as_str(), next, finished, delivery.id, claim],
            )
            .abort_if_zero(),
            Step::rows(
                "INSERT INTO webhook_attempts (event_id, attempted_at, status_code, error_class, response, duration_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
                params![
                    delivery.id,
                    attempt.attempted_at,
                    attempt.status_code,
                    &attempt.error_class,
                    &attempt.response,
                    attempt.duration_ms
                ],
            ),
        ];
        if let AttemptOutcome::GaveUp { disable_reason } = outcome {
            steps.push(Step::rows(
                "UPDATE webhooks SET status = 'disabled', disabled_reason = $1, updated_at = $2 \
                 WHERE id = $3 AND status = 'enabled'",
                params![disable_reason, now, delivery.webhook.id],
            ));
        }
        Ok(self.write(Unit::new(steps)).await? != Ran::RolledBack)
    }

    /// A webhook's outbox rows, newest first, before `before_id`.
    pub async fn webhook_events(
        &self,
        webhook_id: i64,
        before_id: Option<i64>,
        limit: i64,
    ) -> Result<Vec<WebhookEvent>, Error> {
        page!(
            self,
            select_event!("WHERE webhook_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3"),
            webhook_id,
            before_id,
            limit
        )
    }

    pub async fn webhook_event(
        &self,
        webhook_id: i64,
        id: i64,
    ) -> Result<Option<WebhookEvent>, Error> {
        optional!(
            self,
            select_event!("WHERE webhook_id = $1 AND id = $2"),
            webhook_id,
            id
        )
    }

    /// An outbox row's attempts, newest first, before `before_id`.
    pub async fn webhook_attempts(
        &self,
        event_id: i64,
        before_id: Option<i64>,
        limit: i64,
    ) -> Result<Vec<WebhookAttempt>, Error> {
        page!(
            self,
            "SELECT id, event_id, attempted_at, status_code, error_class, response, duration_ms FROM webhook_attempts \
             WHERE event_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
            event_id,
            before_id,
            limit
        )
    }

    /// Makes an outbox row pending and due at `now` again, keeping its id
    /// (a replay is the same message). False when it does not exist.
    pub async fn replay_webhook_event(
        &self,
        webhook_id: i64,
        id: i64,
        now: i64,
    ) -> Result<bool, Error> {
        let changed = self
            .write_one(Step::rows(
                "UPDATE webhook_events SET status = 'pending', next_attempt_at = $1, claim = NULL, finished_at = NULL \
                 WHERE webhook_id = $2 AND id = $3",
                params![now, webhook_id, id],
            ))
            .await?;
        Ok(changed == 1)
    }
}

//! Webhooks: registration (`/webhooks`), the deliveries a caller can see and
//! replay, and the settings of the dispatcher (`webhook_dispatch`).

use std::time::Duration;

use serde_json::Value;

use crate::error::Error;
use crate::model::{
    self, EndpointPolicy, EventType, SigningSecret, Webhook, WebhookStatus, events_column,
};
use crate::store::{WebhookAttempt, WebhookEvent};

use super::page::{Page, PageRequest};
use super::{Caller, MailService};

/// How deliveries are made and retried.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// The waits before the 2nd, 3rd, ... attempt; after the last one fails
    /// the event is given up and the endpoint disabled. Each wait gets up
    /// to a tenth more at random (jitter), so endpoints that failed together
    /// are not retried all at once.
    pub retry_schedule: Vec<Duration>,
    /// How often an idle dispatcher looks for due deliveries.
    pub poll: Duration,
    /// Bound on one attempt: connect, request and the answer's head.
    pub timeout: Duration,
    /// Deliveries this node makes at the same time.
    pub concurrency: usize,
    /// What the operator allows beyond public HTTPS endpoints.
    pub policy: EndpointPolicy,
    /// How long the secret a rotation replaced keeps signing beside the new
    /// one.
    pub secret_grace: Duration,
}

/// Resend's and the design's schedule: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h,
/// 10 h (eight attempts over about 27.5 hours).
pub const DEFAULT_RETRY_SCHEDULE: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings {
            retry_schedule: DEFAULT_RETRY_SCHEDULE.to_vec(),
            poll: Duration::from_millis(500),
            timeout: Duration::from_secs(10),
            concurrency: 16,
            policy: EndpointPolicy::default(),
            secret_grace: Duration::from_secs(24 * 3600),
        }
    }
}

/// Raw query of the webhook lists, before checks: `limit`, `cursor`, and
/// Resend's `after` (an id; the page continues after it).
#[derive(Debug, Clone, Default)]
pub struct WebhookListQuery {
    pub limit: Option<String>,
    pub cursor: Option<String>,
    pub after: Option<String>,
}

/// One outbox row with its attempts (newest first).
#[derive(Debug, Clone)]
pub struct EventWithAttempts {
    pub event: WebhookEvent,
    pub attempts: Vec<WebhookAttempt>,
}

/// The most attempts one event shows.
const MAX_ATTEMPTS_SHOWN: i64 = 100;

impl MailService {
    /// `POST /webhooks {endpoint, events}`: the webhook with its new secret
    /// (the only time the secret is answered).
    pub async fn create_webhook(&self, caller: &Caller, body: &Value) -> Result<Webhook, Error> {
        let obj = super::body_object(body, &["endpoint", "events"])?;
        let endpoint = match obj.get("endpoint") {
            None | Some(Value::Null) => {
                return Err(Error::MissingField {
                    field: "endpoint".into(),
                });
            }
            Some(v) => self.endpoint(v)?,
        };
        let events = match obj.get("events") {
            None | Some(Value::Null) => {
                return Err(Error::MissingField {
                    field: "events".into(),
                });
            }
            Some(v) => events(v)?,
        };
        let now = self.clock.now_ms();
        let webhook = Webhook {
            id: self.ids.next(),
            tenant_id: caller.principal.tenant_id,
            endpoint,
            events: events_column(&events),
            secret: SigningSecret::generate(),
            previous_secret: None,
            previous_secret_until: None,
            status: WebhookStatus::Enabled,
            disabled_reason: None,
            created_at: now,
            updated_at: now,
        };
        self.store.create_webhook(&webhook).await?;
        Ok(webhook)
    }

    pub async fn list_webhooks(
        &self,
        caller: &Caller,
        query: &WebhookListQuery,
    ) -> Result<Page<Webhook>, Error> {
        let page = page_request("webhooks", query)?;
        let rows = self
            .store
            .list_webhooks(caller.principal.tenant_id, page.before_id, page.fetch())
            .await?;
        Ok(page.page(rows, |w| w.id))
    }

    pub async fn webhook(&self, caller: &Caller, id: i64) -> Result<Webhook, Error> {
        self.store
            .webhook(caller.principal.tenant_id, id)
            .await?
            .ok_or_else(not_found)
    }

    /// `PATCH /webhooks/{id}`: any of `endpoint`, `events`, and `status`
    /// (`enabled`/`disabled`, Resend's form) or `enabled` (a boolean).
    pub async fn update_webhook(
        &self,
        caller: &Caller,
        id: i64,
        body: &Value,
    ) -> Result<Webhook, Error> {
        // Resend's Python SDK repeats the id in the body as `webhook_id`.
        let body = &model::without_path_id(body, &["webhook_id", "id"], id)?;
        let obj = super::body_object(body, &["endpoint", "events", "status", "enabled"])?;
        let mut webhook = self.webhook(caller, id).await?;
        if let Some(v) = obj.get("endpoint").filter(|v| !v.is_null()) {
            webhook.endpoint = self.endpoint(v)?;
        }
        if let Some(v) = obj.get("events").filter(|v| !v.is_null()) {
            webhook.events = events_column(&events(v)?);
        }
        let given = |name: &str| obj.get(name).filter(|v| !v.is_null());
        let status = match (given("status"), given("enabled")) {
            (None, None) => None,
            (Some(_), Some(_)) => {
                return Err(Error::validation(
                    "enabled",
                    "give either `status` or `enabled`, not both",
                ));
            }
            (Some(Value::String(s)), None) => Some(
                s.parse::<WebhookStatus>()
                    .map_err(|_| Error::validation("status", "must be `enabled` or `disabled`"))?,
            ),
            (Some(_), None) => {
                return Err(Error::validation(
                    "status",
                    "must be `enabled` or `disabled`",
                ));
            }
            (None, Some(Value::Bool(true))) => Some(WebhookStatus::Enabled),
            (None, Some(Value::Bool(false))) => Some(WebhookStatus::Disabled),
            (None, Some(_)) => return Err(Error::validation("enabled", "must be a boolean")),
        };
        if let Some(status) = status {
            webhook.disabled_reason = match status {
                WebhookStatus::Enabled => None,
                WebhookStatus::Disabled if webhook.status == WebhookStatus::Disabled => {
                    webhook.disabled_reason.take()
                }
                WebhookStatus::Disabled => Some("disabled by the account".into()),
            };
            webhook.status = status;
        }
        let now = self.clock.now_ms();
        if !self.store.update_webhook(&webhook, now).await? {
            return Err(not_found());
        }
        webhook.updated_at = now;
        Ok(webhook)
    }

    pub async fn delete_webhook(&self, caller: &Caller, id: i64) -> Result<(), Error> {
        if self
            .store
            .delete_webhook(caller.principal.tenant_id, id)
            .await?
        {
            Ok(())
        } else {
            Err(not_found())
        }
    }

    /// `POST /webhooks/{id}/signing-secret/rotate`: a new secret (answered
    /// once); the old one keeps signing beside it for the grace period.
    pub async fn rotate_webhook_secret(
        &self,
        caller: &Caller,
        id: i64,
    ) -> Result<SigningSecret, Error> {
        let secret = SigningSecret::generate();
        let now = self.clock.now_ms();
        let until = now + self.settings.webhooks.secret_grace.as_millis() as i64;
        if self
            .store
            .rotate_webhook_secret(caller.principal.tenant_id, id, &secret, until, now)
            .await?
        {
            Ok(secret)
        } else {
            Err(not_found())
        }
    }

    /// The deliveries of one of the caller's webhooks, newest first.
    pub async fn webhook_events(
        &self,
        caller: &Caller,
        webhook_id: i64,
        query: &WebhookListQuery,
    ) -> Result<Page<WebhookEvent>, Error> {
        let webhook = self.webhook(caller, webhook_id).await?;
        let page = page_request("webhook_events", query)?;
        let rows = self
            .store
            .webhook_events(webhook.id, page.before_id, page.fetch())
            .await?;
        Ok(page.page(rows, |e| e.id))
    }

    /// One delivery with its attempts.
    pub async fn webhook_event(
        &self,
        caller: &Caller,
        webhook_id: i64,
        event_id: i64,
    ) -> Result<EventWithAttempts, Error> {
        let webhook = self.webhook(caller, webhook_id).await?;
        let event = self
            .store
            .webhook_event(webhook.id, event_id)
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "webhook event".into(),
            })?;
        let attempts = self
            .store
            .webhook_attempts(event.id, None, MAX_ATTEMPTS_SHOWN)
            .await?;
        Ok(EventWithAttempts { event, attempts })
    }

    /// One delivery's attempts, newest first.
    pub async fn webhook_event_attempts(
        &self,
        caller: &Caller,
        webhook_id: i64,
        event_id: i64,
        query: &WebhookListQuery,
    ) -> Result<Page<WebhookAttempt>, Error> {
        let event = self.webhook_event(caller, webhook_id, event_id).await?;
        let page = page_request("webhook_attempts", query)?;
        let rows = self
            .store
            .webhook_attempts(event.event.id, page.before_id, page.fetch())
            .await?;
        Ok(page.page(rows, |a| a.id))
    }

    /// Sends a delivery again (same message id), whatever became of it.
    pub async fn replay_webhook_event(
        &self,
        caller: &Caller,
        webhook_id: i64,
        event_id: i64,
    ) -> Result<(), Error> {
        let event = self.webhook_event(caller, webhook_id, event_id).await?;
        self.store
            .replay_webhook_event(webhook_id, event.event.id, self.clock.now_ms())
            .await?;
        self.webhook_wake.notify_one();
        Ok(())
    }

    fn endpoint(&self, value: &Value) -> Result<String, Error> {
        let Value::String(text) = value else {
            return Err(Error::validation("endpoint", "must be a string"));
        };
        Ok(model::validate_endpoint("endpoint", text, self.settings.webhooks.policy)?.to_string())
    }
}

fn not_found() -> Error {
    Error::NotFound {
        what: "webhook".into(),
    }
}

fn events(value: &Value) -> Result<Vec<EventType>, Error> {
    let Value::Array(items) = value else {
        return Err(Error::validation(
            "events",
            "must be an array of event types",
        ));
    };
    let names = items
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) => Ok(s.clone()),
            _ => Err(Error::validation(
                format!("events[{i}]"),
                "must be a string",
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    model::parse_events("events", &names)
}

fn page_request(kind: &'static str, query: &WebhookListQuery) -> Result<PageRequest, Error> {
    let mut page = PageRequest::parse(kind, query.limit.as_deref(), query.cursor.as_deref())?;
    if let Some(after) = &query.after {
        if query.cursor.is_some() {
            return Err(Error::validation(
                "after",
                "give either `cursor` or `after`, not both",
            ));
        }
        page.before_id = Some(
            after
                .parse::<i64>()
                .map_err(|_| Error::validation("after", "must be an id from this list"))?,
        );
    }
    Ok(page)
}

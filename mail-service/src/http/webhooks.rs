//! Handlers of `/webhooks` (all `full_access`), in the shapes of Resend's
//! SDK (`resend.webhooks.*`, `resend.webhooks.events.*`).

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::clock::rfc3339;
use crate::error::Error;
use crate::model::{DeliveryStatus, Webhook};
use crate::service::MailService;
use crate::store::{WebhookAttempt, WebhookEvent};

use super::error::ErrorBody;
use super::extract::{EmptyBody, EventPath, FullAccess, IdPath, JsonBody, WebhookListParams};
use super::list::List;

/// Body of `POST /webhooks`. Unknown properties are refused.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewWebhook {
    /// An `https://` URL (plain `http://` only to a loopback address when
    /// the operator allows it); it must not resolve to a private, loopback,
    /// link-local or metadata address unless the operator allows them.
    pub endpoint: String,
    /// The event types to send, at least one: `email.sent`,
    /// `email.scheduled`, `email.failed`, `email.canceled`,
    /// `email.suppressed`, `email.delivered`, `email.delivery_delayed`,
    /// `email.bounced`, `email.complained`, `domain.updated`.
    pub events: Vec<String>,
}

/// Body of `PATCH /webhooks/{id}`: any of these.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookUpdate {
    pub endpoint: Option<String>,
    pub events: Option<Vec<String>>,
    /// `enabled` or `disabled` (Resend's form).
    pub status: Option<String>,
    /// The same as a boolean; give `status` or `enabled`, not both.
    pub enabled: Option<bool>,
}

/// Answer of `POST /webhooks` and of a secret rotation: the only answers
/// that hold the signing secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookCreated {
    /// Always `webhook`.
    pub object: &'static str,
    pub id: String,
    /// `whsec_<base64 key>`: verify signatures with it (Standard Webhooks,
    /// Svix). Shown once; it is never answered again.
    pub signing_secret: String,
}

/// A webhook (never its secret).
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookResource {
    /// Always `webhook`.
    pub object: &'static str,
    pub id: String,
    pub endpoint: String,
    pub events: Vec<String>,
    /// `enabled` or `disabled`.
    pub status: String,
    /// Why it is disabled (410 Gone, the retry schedule ran out, or the
    /// account disabled it); null when enabled.
    pub disabled_reason: Option<String>,
    pub created_at: String,
}

/// Answer of `PATCH`/`DELETE /webhooks/{id}` and of a replay.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookChanged {
    /// `webhook`, or `webhook_event` for a replay.
    pub object: &'static str,
    pub id: String,
    /// Present (true) on `DELETE`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<bool>,
}

/// What a webhook is sent: the body of every delivery (`POST` to the
/// endpoint, `Content-Type: application/json`), signed per Standard
/// Webhooks: headers `webhook-id` (`msg_<event id>`, the same on every
/// attempt), `webhook-timestamp` (Unix seconds) and `webhook-signature`
/// (`v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, keyed with the
/// base64-decoded part of the `whsec_` secret; during a rotation's grace
/// period two signatures separated by a space), and the same three as
/// `svix-id`, `svix-timestamp`, `svix-signature`. Delivered at least once:
/// receivers must tolerate duplicates (same `webhook-id`) and any order.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookPayload {
    /// The event type, e.g. `email.sent`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// When it happened (RFC 3339).
    pub created_at: String,
    /// Email events: `email_id`, `message_id`, `from`, `to` (array),
    /// `subject`, `created_at` (the email's); `email.scheduled` adds
    /// `scheduled_at`, `email.failed` adds `failed: {reason}`,
    /// `email.suppressed` adds `suppressed: {message, type}`. `domain.updated`:
    /// `id`, `name`, `status`, `region`, `created_at`, `records`.
    #[schema(value_type = Object)]
    pub data: Value,
}

/// One delivery of an event to a webhook, in a list.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookEventEntry {
    /// The event id; deliveries carry `webhook-id: msg_<id>`.
    pub id: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub created_at: String,
    /// `pending` (not attempted yet), `attempting` (failed attempts, more
    /// to come), `success`, `failed` (given up).
    pub status: &'static str,
    /// Attempts made so far.
    pub attempt_count: i64,
    /// When the next attempt is due; null when none will be made.
    pub next_attempt_at: Option<String>,
}

/// One delivery attempt.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookAttemptEntry {
    pub id: String,
    /// The endpoint's HTTP status; null when no answer came.
    pub http_status_code: Option<i64>,
    /// Null on a 2xx answer; else `http_status`, `timeout`, `connect`,
    /// `dns`, `forbidden_address` or `request`.
    pub error_class: Option<String>,
    /// The start of the answer's body (at most 1 KiB), or what went wrong.
    pub response: String,
    pub sent_at: String,
    pub duration_ms: i64,
}

/// One delivery with its payload and its attempts (newest first).
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookEventResource {
    /// Always `webhook_event`.
    pub object: &'static str,
    #[serde(flatten)]
    pub entry: WebhookEventEntry,
    pub payload: WebhookPayload,
    pub attempts: Vec<WebhookAttemptEntry>,
}

fn resource(w: Webhook) -> WebhookResource {
    WebhookResource {
        object: "webhook",
        id: w.id.to_string(),
        events: w
            .event_types()
            .iter()
            .map(|t| t.as_str().to_string())
            .collect(),
        endpoint: w.endpoint,
        status: w.status.as_str().to_string(),
        disabled_reason: w.disabled_reason,
        created_at: rfc3339(w.created_at),
    }
}

fn event_entry(e: &WebhookEvent) -> WebhookEventEntry {
    WebhookEventEntry {
        id: e.id.to_string(),
        event_type: e.event_type.as_str().to_string(),
        created_at: rfc3339(e.created_at),
        status: match (e.status, e.attempts) {
            (DeliveryStatus::Pending, 0) => "pending",
            (DeliveryStatus::Pending, _) => "attempting",
            (DeliveryStatus::Delivered, _) => "success",
            (DeliveryStatus::Failed, _) => "failed",
        },
        attempt_count: e.attempts,
        next_attempt_at: match e.status {
            DeliveryStatus::Pending => e.next_attempt_at.map(rfc3339),
            _ => None,
        },
    }
}

fn attempt_entry(a: WebhookAttempt) -> WebhookAttemptEntry {
    WebhookAttemptEntry {
        id: a.id.to_string(),
        http_status_code: a.status_code,
        error_class: a.error_class,
        response: a.response,
        sent_at: rfc3339(a.attempted_at),
        duration_ms: a.duration_ms,
    }
}

#[utoipa::path(
    post, path = "/webhooks", tag = "webhooks",
    request_body = NewWebhook,
    responses(
        (status = 200, description = "Registered and enabled; the signing secret is shown this once", body = WebhookCreated),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create_webhook(
    FullAccess(caller): FullAccess,
    service: State<MailService>,
    JsonBody(body): JsonBody,
) -> Result<Json<WebhookCreated>, Error> {
    let webhook = service.create_webhook(&caller, &body).await?;
    Ok(Json(WebhookCreated {
        object: "webhook",
        id: webhook.id.to_string(),
        signing_secret: webhook.secret.reveal().to_string(),
    }))
}

#[utoipa::path(
    get, path = "/webhooks", tag = "webhooks",
    params(
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("cursor" = Option<String>, Query, description = "nextCursor of the previous page"),
        ("after" = Option<String>, Query, description = "A webhook id: the page continues after it (Resend's form)"),
    ),
    responses(
        (status = 200, body = List<WebhookResource>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_webhooks(
    FullAccess(caller): FullAccess,
    WebhookListParams(query): WebhookListParams,
    service: State<MailService>,
) -> Result<Json<List<WebhookResource>>, Error> {
    let page = service.list_webhooks(&caller, &query).await?;
    Ok(Json(List::of(page, resource)))
}

#[utoipa::path(
    get, path = "/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "^[1-9][0-9]{0,18}$")),
    responses(
        (status = 200, body = WebhookResource),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_webhook(
    FullAccess(caller): FullAccess,
    IdPath(id): IdPath,
    service: State<MailService>,
) -> Result<Json<WebhookResource>, Error> {
    Ok(Json(resource(service.webhook(&caller, id).await?)))
}

#[utoipa::path(
    patch, path = "/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "^[1-9][0-9]{0,18}$")),
    request_body = WebhookUpdate,
    responses(
        (status = 200, body = WebhookChanged),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn update_webhook(
    FullAccess(caller): FullAccess,
    IdPath(id): IdPath,
    service: State<MailService>,
    JsonBody(body): JsonBody,
) -> Result<Json<WebhookChanged>, Error> {
    let webhook = service.update_webhook(&caller, id, &body).await?;
    Ok(Json(WebhookChanged {
        object: "webhook",
        id: webhook.id.to_string(),
        deleted: None,
    }))
}

#[utoipa::path(
    delete, path = "/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "^[1-9][0-9]{0,18}$")),
    responses(
        (status = 200, description = "Deleted with its deliveries; nothing more is sent to it", body = WebhookChanged),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete_webhook(
    FullAccess(caller): FullAccess,
    IdPath(id): IdPath,
    service: State<MailService>,
) -> Result<Json<WebhookChanged>, Error> {
    service.delete_webhook(&caller, id).await?;
    Ok(Json(WebhookChanged {
        object: "webhook",
        id: id.to_string(),
        deleted: Some(true),
    }))
}

#[utoipa::path(
    post, path = "/webhooks/{id}/signing-secret/rotate", tag = "webhooks",
    params(("id" = String, Path, description = "^[1-9][0-9]{0,18}$")),
    responses(
        (status = 200, description = "A new secret, shown this once; the old one keeps signing beside it for 24 hours (two signatures in `webhook-signature`)", body = WebhookCreated),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn rotate_webhook_secret(
    FullAccess(caller): FullAccess,
    IdPath(id): IdPath,
    service: State<MailService>,
    _: EmptyBody,
) -> Result<Json<WebhookCreated>, Error> {
    let secret = service.rotate_webhook_secret(&caller, id).await?;
    Ok(Json(WebhookCreated {
        object: "webhook",
        id: id.to_string(),
        signing_secret: secret.reveal().to_string(),
    }))
}

#[utoipa::path(
    get, path = "/webhooks/{id}/events", tag = "webhooks",
    params(
        ("id" = String, Path, description = "^[1-9][0-9]{0,18}$"),
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("cursor" = Option<String>, Query, description = "nextCursor of the previous page"),
        ("after" = Option<String>, Query, description = "An event id: the page continues after it"),
    ),
    responses(
        (status = 200, body = List<WebhookEventEntry>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_webhook_events(
    FullAccess(caller): FullAccess,
    IdPath(id): IdPath,
    WebhookListParams(query): WebhookListParams,
    service: State<MailService>,
) -> Result<Json<List<WebhookEventEntry>>, Error> {
    let page = service.webhook_events(&caller, id, &query).await?;
    Ok(Json(List::of(page, |e| event_entry(&e))))
}

#[utoipa::path(
    get, path = "/webhooks/{id}/events/{event_id}", tag = "webhooks",
    params(
        ("id" = String, Path, description = "^[1-9][0-9]{0,18}$"),
        ("event_id" = String, Path, description = "^[1-9][0-9]{0,18}$"),
    ),
    responses(
        (status = 200, body = WebhookEventResource),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_webhook_event(
    FullAccess(caller): FullAccess,
    EventPath(id, event_id): EventPath,
    service: State<MailService>,
) -> Result<Json<WebhookEventResource>, Error> {
    let found = service.webhook_event(&caller, id, event_id).await?;
    let event = found.event;
    let data = serde_json::from_str(&event.data).map_err(|e| Error::StoredDataInvalid {
        detail: format!(
            "webhook event {} holds data that is not JSON ({e})",
            event.id
        ),
    })?;
    Ok(Json(WebhookEventResource {
        object: "webhook_event",
        entry: event_entry(&event),
        payload: WebhookPayload {
            event_type: event.event_type.as_str().to_string(),
            created_at: rfc3339(event.created_at),
            data,
        },
        attempts: found.attempts.into_iter().map(attempt_entry).collect(),
    }))
}

#[utoipa::path(
    get, path = "/webhooks/{id}/events/{event_id}/attempts", tag = "webhooks",
    params(
        ("id" = String, Path, description = "^[1-9][0-9]{0,18}$"),
        ("event_id" = String, Path, description = "^[1-9][0-9]{0,18}$"),
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("cursor" = Option<String>, Query, description = "nextCursor of the previous page"),
        ("after" = Option<String>, Query, description = "An attempt id: the page continues after it"),
    ),
    responses(
        (status = 200, body = List<WebhookAttemptEntry>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_webhook_attempts(
    FullAccess(caller): FullAccess,
    EventPath(id, event_id): EventPath,
    WebhookListParams(query): WebhookListParams,
    service: State<MailService>,
) -> Result<Json<List<WebhookAttemptEntry>>, Error> {
    let page = service
        .webhook_event_attempts(&caller, id, event_id, &query)
        .await?;
    Ok(Json(List::of(page, attempt_entry)))
}

#[utoipa::path(
    post, path = "/webhooks/{id}/events/{event_id}/replay", tag = "webhooks",
    params(
        ("id" = String, Path, description = "^[1-9][0-9]{0,18}$"),
        ("event_id" = String, Path, description = "^[1-9][0-9]{0,18}$"),
    ),
    responses(
        (status = 200, description = "Due again now, with the same webhook-id (once the webhook is enabled)", body = WebhookChanged),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn replay_webhook_event(
    FullAccess(caller): FullAccess,
    EventPath(id, event_id): EventPath,
    service: State<MailService>,
    _: EmptyBody,
) -> Result<Json<WebhookChanged>, Error> {
    service.replay_webhook_event(&caller, id, event_id).await?;
    Ok(Json(WebhookChanged {
        object: "webhook_event",
        id: event_id.to_string(),
        deleted: None,
    }))
}

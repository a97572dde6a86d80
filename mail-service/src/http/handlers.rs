//! Thin handlers: extract, call the service, shape the answer.

use axum::Json;
use axum::http::StatusCode;
use axum::http::header::ETAG;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::clock::rfc3339;
use crate::error::Error;
use crate::model::{EmailPayload, EmailStatus, Recipients, RequestLog, Reschedule, StoredEmail};
use crate::service::{BatchValidation, MailService};

use super::error::{ErrorBody, IdEntry};
use super::extract::{
    BatchValidationHeader, EmailQueryParams, EmptyBody, FullAccess, IdPath, IdempotencyHeader,
    IfMatchHeader, JsonBody, LogQueryParams, Sender,
};
use super::list::List;

/// `{id}` of an accepted email.
#[derive(Debug, Serialize, ToSchema)]
pub struct SendResult {
    /// Matches `^[1-9][0-9]{0,18}$`.
    pub id: String,
}

/// A refused item of a permissive batch.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchItemError {
    pub index: usize,
    pub message: String,
}

/// Success body of `POST /emails/batch`: 200 `{data}` when every item was
/// handed off; 202 `{id, status: "processing", data}` when the batch had a
/// scheduled item and every item was stored for the scheduler.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchResult {
    /// The batch's id (202 only; each email's `batch_id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `processing` (202 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
    pub data: Vec<IdEntry>,
    /// Present with `x-batch-validation: permissive`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<BatchItemError>>,
}

/// A stored email as `GET /emails` lists it (without its bodies).
#[derive(Debug, Serialize, ToSchema)]
pub struct EmailSummary {
    /// Always `email`.
    pub object: &'static str,
    pub id: String,
    /// `scheduled`, `sending`, `sent`, `failed`, `unknown`, `canceled` or
    /// `suppressed`.
    #[schema(value_type = String)]
    pub status: EmailStatus,
    /// Resend's vocabulary: the latest event feedback mail reported
    /// (`delivered`, `delivery_delayed`, `bounced`, `complained`), else
    /// `status` in Resend's words: `scheduled`, `queued` (`sending`, or
    /// `unknown`: accepted, outcome not known), `sent`, `failed`,
    /// `canceled`, `suppressed`.
    pub last_event: &'static str,
    /// When it is due (RFC 3339, UTC), for a scheduled email.
    pub scheduled_at: Option<String>,
    /// The batch it was accepted in, when that batch was answered 202.
    pub batch_id: Option<String>,
    /// Also sent as the `ETag` header.
    pub revision: i64,
    pub from: String,
    pub to: Recipients,
    pub cc: Option<Recipients>,
    pub bcc: Option<Recipients>,
    pub reply_to: Option<Recipients>,
    pub subject: String,
    pub message_id: String,
    /// Why the handoff failed or is unknown.
    pub handoff_detail: Option<String>,
    /// Recipients removed at the handoff because they were on the
    /// suppression list (normalised addresses); empty when none were.
    pub suppressed_recipients: Vec<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A stored email (`GET /emails/{id}`).
#[derive(Debug, Serialize, ToSchema)]
pub struct EmailResource {
    #[serde(flatten)]
    pub email: EmailSummary,
    pub text: Option<String>,
    pub html: Option<String>,
    /// What feedback mail (delivery reports, complaints) said, per
    /// recipient, oldest first.
    pub events: Vec<EventEntry>,
}

/// One event of an email, from a delivery report or a complaint.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventEntry {
    /// `delivered`, `delivery_delayed`, `bounced` or `complained`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The recipient (normalised) the report is about.
    pub recipient: String,
    /// The report's status code (`5.1.1`) or, for a complaint, its
    /// feedback type (`abuse`).
    pub status: Option<String>,
    /// The receiving server's diagnostic text; empty when the report gave
    /// none, as in the webhooks' `message` (Resend's, always a string).
    pub diagnostic: String,
    pub created_at: String,
}

/// One request log entry.
#[derive(Debug, Serialize, ToSchema)]
pub struct LogEntry {
    /// Always `log`.
    pub object: &'static str,
    /// Also the `request_id` of the request.
    pub id: String,
    pub method: String,
    pub path: String,
    /// Same as `path` (Resend's name).
    pub endpoint: String,
    /// HTTP status; 0 while the request is unfinished.
    pub status: i64,
    /// Same as `status` (Resend's name).
    pub response_status: i64,
    pub duration_ms: Option<i64>,
    pub user_agent: Option<String>,
    pub api_key_id: Option<String>,
    pub created_at: String,
}

fn etag(revision: i64) -> [(axum::http::HeaderName, String); 1] {
    [(ETAG, format!("\"{revision}\""))]
}

#[utoipa::path(
    post, path = "/emails", tag = "emails",
    request_body = EmailPayload,
    params(("Idempotency-Key" = Option<String>, Header, description = "1 to 256 characters; replayed for 24 hours")),
    responses(
        (status = 200, description = "Accepted by the upstream provider", body = SendResult),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
        (status = 502, description = "Handoff failed or has an unknown outcome; never resend automatically", body = ErrorBody),
        (status = 503, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn send_email(
    Sender(caller): Sender,
    IdempotencyHeader(key): IdempotencyHeader,
    service: axum::extract::State<MailService>,
    JsonBody(body): JsonBody,
) -> Result<Response, Error> {
    let sent = service.send_email(&caller, key.as_ref(), &body).await?;
    Ok((etag(sent.revision), Json(SendResult { id: sent.id })).into_response())
}

#[utoipa::path(
    post, path = "/emails/batch", tag = "emails",
    request_body = Vec<crate::model::MessageFields>,
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "1 to 256 characters; replayed for 24 hours"),
        ("x-batch-validation" = Option<String>, Header, description = "strict (default) or permissive"),
    ),
    responses(
        (status = 200, description = "Every valid item was accepted by the provider", body = BatchResult),
        (status = 202, description = "A scheduled item made the batch wait for the scheduler: every valid item is stored (`scheduled`; those without scheduled_at due at once)", body = BatchResult),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody),
        (status = 502, description = "Stopped at failed_index; data holds the items sent before it", body = ErrorBody),
        (status = 503, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn send_batch(
    Sender(caller): Sender,
    IdempotencyHeader(key): IdempotencyHeader,
    BatchValidationHeader(mode): BatchValidationHeader,
    service: axum::extract::State<MailService>,
    JsonBody(body): JsonBody,
) -> Result<Response, Error> {
    let sent = service
        .send_batch(&caller, key.as_ref(), &body, mode)
        .await?;
    let status = match sent.batch_id {
        Some(_) => StatusCode::ACCEPTED,
        None => StatusCode::OK,
    };
    let result = BatchResult {
        status: sent.batch_id.as_ref().map(|_| "processing"),
        id: sent.batch_id,
        data: sent.ids.into_iter().map(|id| IdEntry { id }).collect(),
        errors: (mode == BatchValidation::Permissive).then(|| {
            sent.errors
                .into_iter()
                .map(|e| BatchItemError {
                    index: e.index,
                    message: e.message,
                })
                .collect()
        }),
    };
    Ok((status, Json(result)).into_response())
}

#[utoipa::path(
    get, path = "/emails/{id}", tag = "emails",
    params(("id" = String, Path, description = "^[1-9][0-9]{0,18}$")),
    responses(
        (status = 200, body = EmailResource, headers(("ETag" = String, description = "revision"))),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_email(
    FullAccess(caller): FullAccess,
    IdPath(id): IdPath,
    service: axum::extract::State<MailService>,
) -> Result<Response, Error> {
    let mut email = service.email(&caller, id).await?;
    let events = service
        .email_events(&caller, id)
        .await?
        .into_iter()
        .map(|e| EventEntry {
            kind: e.kind.as_str(),
            recipient: e.recipient,
            status: e.status_code,
            diagnostic: e.diagnostic.unwrap_or_default(),
            created_at: rfc3339(e.created_at),
        })
        .collect();
    let revision = email.revision;
    let message = &mut email.payload.0.message;
    let (text, html) = (message.text.take(), message.html.take());
    let resource = EmailResource {
        email: email_summary(email),
        text,
        html,
        events,
    };
    Ok((etag(revision), Json(resource)).into_response())
}

fn email_summary(email: StoredEmail) -> EmailSummary {
    let last_event = email.last_event();
    let message = email.payload.0.message;
    EmailSummary {
        object: "email",
        id: email.id.to_string(),
        status: email.status,
        last_event,
        scheduled_at: email.scheduled_at.map(rfc3339),
        batch_id: email.batch_id.map(|b| b.to_string()),
        revision: email.revision,
        from: message.from,
        to: message.to,
        cc: message.cc,
        bcc: message.bcc,
        reply_to: message.reply_to,
        subject: message.subject,
        message_id: email.message_id,
        handoff_detail: email.handoff_detail,
        suppressed_recipients: email.suppressed_recipients.map(|l| l.0).unwrap_or_default(),
        created_at: rfc3339(email.created_at),
        updated_at: rfc3339(email.updated_at),
    }
}

#[utoipa::path(
    get, path = "/emails", tag = "emails",
    params(
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("cursor" = Option<String>, Query, description = "nextCursor of the previous page, at most 200 characters"),
        ("after" = Option<String>, Query, description = "An email id (Resend's pagination): the page continues after it, older emails; not with cursor"),
        ("status" = Option<String>, Query, description = "scheduled, sending, sent, failed, unknown, canceled or suppressed"),
    ),
    responses(
        (status = 200, body = List<EmailSummary>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_emails(
    FullAccess(caller): FullAccess,
    EmailQueryParams(query): EmailQueryParams,
    service: axum::extract::State<MailService>,
) -> Result<Json<List<EmailSummary>>, Error> {
    let page = service.list_emails(&caller, &query).await?;
    Ok(Json(List::of(page, email_summary)))
}

/// Answer of `PATCH /emails/{id}` and `POST /emails/{id}/cancel`.
#[derive(Debug, Serialize, ToSchema)]
pub struct EmailChanged {
    /// Always `email`.
    pub object: &'static str,
    pub id: String,
    /// The new due time (RFC 3339, UTC); absent after a cancel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<String>,
}

#[utoipa::path(
    patch, path = "/emails/{id}", tag = "emails",
    params(
        ("id" = String, Path, description = "^[1-9][0-9]{0,18}$"),
        ("If-Match" = String, Header, description = "The ETag of GET /emails/{id} (or of the last change), e.g. \"3\"; one strong tag, no `*`"),
    ),
    request_body = Reschedule,
    responses(
        (status = 200, body = EmailChanged, headers(("ETag" = String, description = "the new revision"))),
        (status = 400, description = "If-Match is not one strong ETag (`invalid_if_match`)", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "`stale_revision`: If-Match is not the current revision; `invalid_state`: the email is no longer scheduled (its `status` says what happened)", body = ErrorBody),
        (status = 415, body = ErrorBody),
        (status = 422, description = "Unknown property, or scheduled_at outside its window", body = ErrorBody),
        (status = 428, description = "If-Match is missing (`precondition_required`)", body = ErrorBody),
        (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn reschedule_email(
    FullAccess(caller): FullAccess,
    IdPath(id): IdPath,
    IfMatchHeader(if_match): IfMatchHeader,
    service: axum::extract::State<MailService>,
    JsonBody(body): JsonBody,
) -> Result<Response, Error> {
    let moved = service.reschedule(&caller, id, if_match, &body).await?;
    let answer = EmailChanged {
        object: "email",
        id: moved.id,
        scheduled_at: Some(rfc3339(moved.scheduled_at)),
    };
    Ok((etag(moved.revision), Json(answer)).into_response())
}

#[utoipa::path(
    post, path = "/emails/{id}/cancel", tag = "emails",
    params(
        ("id" = String, Path, description = "^[1-9][0-9]{0,18}$"),
        ("If-Match" = Option<String>, Header, description = "Optional: when given, the current ETag"),
    ),
    responses(
        (status = 200, description = "Canceled: it will never be handed off", body = EmailChanged, headers(("ETag" = String, description = "the new revision"))),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "`invalid_state`: the email is no longer scheduled; `stale_revision`", body = ErrorBody),
        (status = 422, description = "A body other than none or {}", body = ErrorBody),
        (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn cancel_email(
    FullAccess(caller): FullAccess,
    IdPath(id): IdPath,
    IfMatchHeader(if_match): IfMatchHeader,
    service: axum::extract::State<MailService>,
    _: EmptyBody,
) -> Result<Response, Error> {
    let canceled = service.cancel(&caller, id, if_match).await?;
    let answer = EmailChanged {
        object: "email",
        id: canceled.id,
        scheduled_at: None,
    };
    Ok((etag(canceled.revision), Json(answer)).into_response())
}

fn log_entry(r: RequestLog) -> LogEntry {
    LogEntry {
        object: "log",
        id: r.id.to_string(),
        method: r.method,
        endpoint: r.path.clone(),
        path: r.path,
        status: r.status,
        response_status: r.status,
        duration_ms: r.duration_ms,
        user_agent: r.user_agent,
        api_key_id: r.api_key_id.map(|k| k.to_string()),
        created_at: rfc3339(r.created_at),
    }
}

#[utoipa::path(
    get, path = "/logs", tag = "logs",
    params(
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("cursor" = Option<String>, Query, description = "nextCursor of the previous page, at most 200 characters"),
        ("method" = Option<String>, Query, description = "GET, POST, PATCH, PUT, DELETE, HEAD or OPTIONS"),
        ("status" = Option<i64>, Query, description = "HTTP status; 0 for an unfinished request"),
    ),
    responses(
        (status = 200, body = List<LogEntry>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_logs(
    FullAccess(caller): FullAccess,
    LogQueryParams(query): LogQueryParams,
    service: axum::extract::State<MailService>,
) -> Result<Json<List<LogEntry>>, Error> {
    let page = service.list_logs(&caller, &query).await?;
    Ok(Json(List::of(page, log_entry)))
}

#[utoipa::path(
    get, path = "/logs/{id}", tag = "logs",
    params(("id" = String, Path, description = "^[1-9][0-9]{0,18}$")),
    responses(
        (status = 200, body = LogEntry),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_log(
    FullAccess(caller): FullAccess,
    IdPath(id): IdPath,
    service: axum::extract::State<MailService>,
) -> Result<Json<LogEntry>, Error> {
    Ok(Json(log_entry(service.log(&caller, id).await?)))
}

pub async fn not_found() -> Error {
    Error::NotFound {
        what: "route".into(),
    }
}

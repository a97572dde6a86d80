//! Thin handlers: extract, call the service, shape the answer.

use axum::Json;
use axum::http::header::ETAG;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::{OpenApi, ToSchema};

use crate::clock::rfc3339;
use crate::error::Error;
use crate::model::EmailPayload;
use crate::service::{BatchValidation, MailService};
use crate::store::LogRecord;

use super::error::{ErrorBody, IdEntry};
use super::extract::{
    BatchValidationHeader, FullAccess, IdPath, IdempotencyHeader, JsonBody, LogQueryParams, Sender,
};

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

/// Success body of `POST /emails/batch`.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchResult {
    pub data: Vec<IdEntry>,
    /// Present with `x-batch-validation: permissive`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<BatchItemError>>,
}

/// A stored email.
#[derive(Debug, Serialize, ToSchema)]
pub struct EmailResource {
    /// Always `email`.
    pub object: &'static str,
    pub id: String,
    /// `sending`, `sent`, `failed`, `unknown` or `canceled`.
    pub status: String,
    /// Same as `status` (Resend's name).
    pub last_event: String,
    /// Also sent as the `ETag` header.
    pub revision: i64,
    #[schema(value_type = Object)]
    pub from: Value,
    #[schema(value_type = Object)]
    pub to: Value,
    #[schema(value_type = Object)]
    pub cc: Value,
    #[schema(value_type = Object)]
    pub bcc: Value,
    #[schema(value_type = Object)]
    pub reply_to: Value,
    pub subject: String,
    pub text: Option<String>,
    pub html: Option<String>,
    pub message_id: String,
    /// Why the handoff failed or is unknown.
    pub handoff_detail: Option<String>,
    pub created_at: String,
    pub updated_at: String,
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
    /// HTTP status; 0 while the request is unfinished.
    pub status: i64,
    pub duration_ms: Option<i64>,
    pub user_agent: Option<String>,
    pub api_key_id: Option<String>,
    pub created_at: String,
}

/// A page of request logs, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct LogList {
    /// Always `list`.
    pub object: &'static str,
    pub data: Vec<LogEntry>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[serde(rename = "nextCursor")]
    pub next_cursor: Option<String>,
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
) -> Result<Json<BatchResult>, Error> {
    let sent = service
        .send_batch(&caller, key.as_ref(), &body, mode)
        .await?;
    Ok(Json(BatchResult {
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
    }))
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
    let record = service.email(&caller, id).await?.record;
    let payload: Value = serde_json::from_str(&record.payload).unwrap_or(Value::Null);
    let field = |name: &str| payload.get(name).cloned().unwrap_or(Value::Null);
    let text_field = |name: &str| {
        payload
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let resource = EmailResource {
        object: "email",
        id: record.id.to_string(),
        status: record.status.clone(),
        last_event: record.status,
        revision: record.revision,
        from: field("from"),
        to: field("to"),
        cc: field("cc"),
        bcc: field("bcc"),
        reply_to: field("reply_to"),
        subject: text_field("subject").unwrap_or_default(),
        text: text_field("text"),
        html: text_field("html"),
        message_id: record.message_id,
        handoff_detail: record.handoff_detail,
        created_at: rfc3339(record.created_at),
        updated_at: rfc3339(record.updated_at),
    };
    Ok((etag(record.revision), Json(resource)).into_response())
}

fn log_entry(r: LogRecord) -> LogEntry {
    LogEntry {
        object: "log",
        id: r.id.to_string(),
        method: r.method,
        path: r.path,
        status: r.status,
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
        (status = 200, body = LogList),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_logs(
    FullAccess(caller): FullAccess,
    LogQueryParams(query): LogQueryParams,
    service: axum::extract::State<MailService>,
) -> Result<Json<LogList>, Error> {
    let page = service.list_logs(&caller, &query).await?;
    Ok(Json(LogList {
        object: "list",
        data: page.entries.into_iter().map(log_entry).collect(),
        next_cursor: page.next_cursor,
    }))
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

/// The OpenAPI document, generated from these handlers and types.
pub async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(super::openapi::ApiDoc::openapi())
}

pub async fn not_found() -> Error {
    Error::NotFound {
        what: "route".into(),
    }
}

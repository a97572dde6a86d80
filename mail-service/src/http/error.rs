//! The one place where a service error becomes an HTTP answer: status, `name`
//! and the Error body of the contract.

use axum::Json;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::Error;

use super::REQUEST_ID;

/// `{id}` inside `data` of an error or batch answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct IdEntry {
    pub id: String,
}

/// Body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    #[serde(rename = "statusCode")]
    pub status_code: u16,
    pub name: &'static str,
    pub message: String,
    pub request_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email_id: Option<String>,
    /// On 502: `failed` (not sent) or `unknown` (may have been sent); on
    /// 409 `invalid_state`: the email's status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Vec<IdEntry>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_email_id: Option<String>,
}

pub fn status_and_name(error: &Error) -> (StatusCode, &'static str) {
    match error {
        Error::Validation { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "validation_error"),
        Error::MissingField { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "missing_required_field"),
        Error::InvalidAttachment { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_attachment"),
        Error::InvalidIdempotencyKey { .. } => {
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_idempotency_key")
        }
        Error::IdempotencyBodyMismatch => (StatusCode::CONFLICT, "invalid_idempotent_request"),
        Error::IdempotencyInFlight => (StatusCode::CONFLICT, "concurrent_idempotent_requests"),
        Error::IdempotencyUnresolved { .. } => (StatusCode::CONFLICT, "handoff_unknown"),
        Error::NotFound { .. } => (StatusCode::NOT_FOUND, "not_found"),
        Error::PayloadTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
        Error::UnsupportedMediaType => {
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
        }
        Error::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_exceeded"),
        Error::MissingApiKey => (StatusCode::UNAUTHORIZED, "missing_api_key"),
        Error::InvalidApiKey => (StatusCode::UNAUTHORIZED, "invalid_api_key"),
        Error::RestrictedApiKey => (StatusCode::FORBIDDEN, "restricted_api_key"),
        Error::HandoffFailed { .. }
        | Error::HandoffUnknown { .. }
        | Error::BatchHandoffFailed { .. } => (StatusCode::BAD_GATEWAY, "handoff_failed"),
        Error::Replayed { error, .. } => status_and_name(error),
        Error::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
        Error::DomainNotVerified { .. } => (StatusCode::FORBIDDEN, "validation_error"),
        Error::PreconditionRequired => (StatusCode::PRECONDITION_REQUIRED, "precondition_required"),
        Error::InvalidIfMatch { .. } => (StatusCode::BAD_REQUEST, "invalid_if_match"),
        Error::StaleRevision { .. } => (StatusCode::CONFLICT, "stale_revision"),
        Error::NotScheduled { .. } => (StatusCode::CONFLICT, "invalid_state"),
        Error::StoredDataInvalid { .. } => {
            (StatusCode::INTERNAL_SERVER_ERROR, "internal_server_error")
        }
        Error::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "service_unavailable"),
    }
}

fn body(error: &Error, request_id: String) -> ErrorBody {
    let (status, name) = status_and_name(error);
    let mut body = ErrorBody {
        status_code: status.as_u16(),
        name,
        message: error.to_string(),
        request_id,
        email_id: None,
        status: None,
        data: None,
        failed_index: None,
        failed_email_id: None,
    };
    match error {
        Error::IdempotencyUnresolved { email_id } | Error::StaleRevision { email_id, .. } => {
            body.email_id = Some(email_id.clone())
        }
        Error::NotScheduled {
            email_id, status, ..
        } => {
            body.email_id = Some(email_id.clone());
            body.status = Some(status.as_str());
        }
        Error::HandoffFailed { email_id, .. } => {
            body.email_id = Some(email_id.clone());
            body.status = Some("failed");
        }
        Error::HandoffUnknown { email_id, .. } => {
            body.email_id = Some(email_id.clone());
            body.status = Some("unknown");
        }
        Error::BatchHandoffFailed {
            sent_ids,
            failed_index,
            failed_email_id,
            unknown,
            ..
        } => {
            body.email_id = Some(failed_email_id.clone());
            body.status = Some(if *unknown { "unknown" } else { "failed" });
            body.data = Some(
                sent_ids
                    .iter()
                    .map(|id| IdEntry { id: id.clone() })
                    .collect(),
            );
            body.failed_index = Some(*failed_index);
            body.failed_email_id = Some(failed_email_id.clone());
        }
        _ => {}
    }
    body
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (error, request_id) = match self {
            Error::Replayed { error, request_id } => (*error, request_id),
            other => (
                other,
                REQUEST_ID.try_with(|id| id.to_string()).unwrap_or_default(),
            ),
        };
        let (status, _) = status_and_name(&error);
        let mut response = (status, Json(body(&error, request_id))).into_response();
        if let Error::RateLimited {
            limit, reset_secs, ..
        } = error
        {
            let headers = response.headers_mut();
            for (name, value) in [
                ("ratelimit-limit", limit),
                ("ratelimit-remaining", 0),
                ("ratelimit-reset", reset_secs),
                ("retry-after", reset_secs),
            ] {
                headers.insert(name, HeaderValue::from(value));
            }
        }
        response
    }
}

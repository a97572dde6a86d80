//! The one error type of the service layer. It knows nothing about HTTP;
//! `http::error` maps each variant to a status and a `name` exactly once.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Error {
    #[error("{field}: {rule}")]
    Validation { field: String, rule: String },
    #[error("{field}: is required")]
    MissingField { field: String },
    #[error("{field}: {rule}")]
    InvalidAttachment { field: String, rule: String },
    #[error("Idempotency-Key: {rule}")]
    InvalidIdempotencyKey { rule: String },
    #[error(
        "Idempotency-Key: this key was already used with a different request body; use a new key for a different request"
    )]
    IdempotencyBodyMismatch,
    #[error("Idempotency-Key: a request with this key is still being processed; retry later")]
    IdempotencyInFlight,
    #[error(
        "Idempotency-Key: the handoff of email {email_id} under this key has an unknown outcome and stays reserved until an operator reconciles it; do not resend under a new key"
    )]
    IdempotencyUnresolved { email_id: String },
    #[error("{what} not found")]
    NotFound { what: String },
    #[error("body: larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("Content-Type: must be application/json")]
    UnsupportedMediaType,
    #[error("too many requests: the limit is {limit} per minute for this account")]
    RateLimited {
        limit: i64,
        reset_secs: i64,
        remaining: i64,
    },
    #[error("Authorization: missing or malformed; use `Authorization: Bearer ms_...`")]
    MissingApiKey,
    #[error("Authorization: API key is invalid or revoked")]
    InvalidApiKey,
    #[error("this API key is restricted to sending emails; this endpoint needs full_access")]
    RestrictedApiKey,
    #[error(
        "handoff of email {email_id} failed: {detail}; it was not sent and will not be retried"
    )]
    HandoffFailed { email_id: String, detail: String },
    #[error(
        "handoff of email {email_id} has an unknown outcome ({detail}); it may have been sent; it will not be resent automatically, and resending it under a new Idempotency-Key may deliver it twice"
    )]
    HandoffUnknown { email_id: String, detail: String },
    #[error(
        "batch handoff stopped at item {failed_index} (email {failed_email_id}): {detail}; earlier items were sent, later items were not"
    )]
    BatchHandoffFailed {
        /// Ids of the items handed off before the failure.
        sent_ids: Vec<String>,
        failed_index: usize,
        failed_email_id: String,
        /// `true` when the failed item's outcome is unknown.
        unknown: bool,
        detail: String,
    },
    /// A recorded failure replayed under its idempotency key: the original
    /// error with the request id of the request that produced it.
    #[error("{error}")]
    Replayed {
        error: Box<Error>,
        request_id: String,
    },
    #[error(
        "If-Match: required (a reschedule is conditional); send the email's current revision as given in the ETag header of GET /emails/{{id}} (also on the answers of POST /emails and PATCH), e.g. If-Match: \"3\""
    )]
    PreconditionRequired,
    #[error("If-Match: {detail}")]
    InvalidIfMatch { detail: String },
    #[error(
        "If-Match: revision {given} of email {email_id} is stale; it is at revision {current} now (read it again with GET /emails/{email_id})"
    )]
    StaleRevision {
        email_id: String,
        given: i64,
        current: i64,
    },
    /// A change that only a `scheduled` email allows.
    #[error("email {email_id} is {status}: {reason}; only a scheduled email can be {action}")]
    NotScheduled {
        email_id: String,
        status: crate::status::EmailStatus,
        reason: String,
        action: String,
    },
    /// A write would duplicate something unique (a tenant name, a key).
    #[error("{what}")]
    Conflict { what: String },
    #[error("{field}: the domain {domain} is not verified for this account: {detail}")]
    DomainNotVerified {
        field: String,
        domain: String,
        detail: String,
    },
    /// A stored row holds a value the code cannot read (an unknown status,
    /// a broken JSON document): the data needs an operator, not a retry.
    #[error("stored data could not be read: {detail}")]
    StoredDataInvalid { detail: String },
    #[error("service unavailable: {detail}")]
    Unavailable { detail: String },
}

impl Error {
    pub fn validation(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Error::Validation {
            field: field.into(),
            rule: rule.into(),
        }
    }

    /// A body's property `key` that is not allowed (`why` says which are):
    /// named by the property, or by the body when its name is empty (found
    /// by the fuzz target `email_json`: `{"": 1}` was refused naming the
    /// field `""`).
    pub fn unknown_property(key: &str, why: &str) -> Self {
        if key.is_empty() {
            Error::validation("body", format!("has a property with an empty name ({why})"))
        } else {
            Error::validation(key, format!("unknown property ({why})"))
        }
    }

    pub fn attachment(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Error::InvalidAttachment {
            field: field.into(),
            rule: rule.into(),
        }
    }

    /// Prefixes the field with a batch position (`[3].to`).
    pub fn at_index(self, index: usize) -> Self {
        match self {
            Error::Validation { field, rule } => Error::Validation {
                field: format!("[{index}].{field}"),
                rule,
            },
            Error::MissingField { field } => Error::MissingField {
                field: format!("[{index}].{field}"),
            },
            Error::InvalidAttachment { field, rule } => Error::InvalidAttachment {
                field: format!("[{index}].{field}"),
                rule,
            },
            Error::DomainNotVerified {
                field,
                domain,
                detail,
            } => Error::DomainNotVerified {
                field: format!("[{index}].{field}"),
                domain,
                detail,
            },
            other => other,
        }
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                tracing::error!(error = %e, "stored data could not be read");
                Error::StoredDataInvalid {
                    detail: e.to_string(),
                }
            }
            _ => {
                tracing::error!(error = %e, "storage error");
                Error::Unavailable {
                    detail: "storage is not available".into(),
                }
            }
        }
    }
}

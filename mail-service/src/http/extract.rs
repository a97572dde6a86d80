//! Extractors: permission checks and request parsing. Every rejection is a
//! service `Error`, so it renders with the contract's error body.

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::request::Parts;
use serde_json::Value;

use crate::error::Error;
use crate::id::{ID_PATTERN, ParsedId, parse_id};
use crate::model::MAX_BODY_BYTES;
use crate::service::{BatchValidation, Caller, IdempotencyKey, LogQuery};
use crate::store::Permission;

use super::{AuthState, RequestId};

fn caller(parts: &Parts, needs_full_access: bool) -> Result<Caller, Error> {
    let request_id = parts
        .extensions
        .get::<RequestId>()
        .map(|r| r.0)
        .unwrap_or_default();
    match parts.extensions.get::<AuthState>() {
        Some(AuthState::Valid(principal)) => {
            if needs_full_access && principal.permission != Permission::FullAccess {
                return Err(Error::RestrictedApiKey);
            }
            Ok(Caller {
                principal: principal.clone(),
                request_id,
            })
        }
        Some(AuthState::Refused(error)) => Err(error.clone()),
        None => Err(Error::MissingApiKey),
    }
}

/// A caller allowed to send (`sending_access` or `full_access`).
pub struct Sender(pub Caller);

impl<S: Send + Sync> FromRequestParts<S> for Sender {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Error> {
        caller(parts, false).map(Sender)
    }
}

/// A caller with `full_access`.
pub struct FullAccess(pub Caller);

impl<S: Send + Sync> FromRequestParts<S> for FullAccess {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Error> {
        caller(parts, true).map(FullAccess)
    }
}

/// The optional `Idempotency-Key` header, checked.
pub struct IdempotencyHeader(pub Option<IdempotencyKey>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyHeader {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Error> {
        match parts.headers.get("idempotency-key") {
            None => Ok(IdempotencyHeader(None)),
            Some(v) => {
                let text = v.to_str().map_err(|_| Error::InvalidIdempotencyKey {
                    rule: "must be visible ASCII characters".into(),
                })?;
                IdempotencyKey::parse(text).map(|k| IdempotencyHeader(Some(k)))
            }
        }
    }
}

/// `x-batch-validation: strict | permissive` (default strict).
pub struct BatchValidationHeader(pub BatchValidation);

impl<S: Send + Sync> FromRequestParts<S> for BatchValidationHeader {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Error> {
        let mode = match parts.headers.get("x-batch-validation").map(|v| v.to_str()) {
            None => BatchValidation::Strict,
            Some(Ok(v)) if v.eq_ignore_ascii_case("strict") => BatchValidation::Strict,
            Some(Ok(v)) if v.eq_ignore_ascii_case("permissive") => BatchValidation::Permissive,
            Some(_) => {
                return Err(Error::validation(
                    "x-batch-validation",
                    "must be strict or permissive",
                ));
            }
        };
        Ok(BatchValidationHeader(mode))
    }
}

/// An `{id}` path segment matching the ID pattern.
pub struct IdPath(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for IdPath {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        let Path(segment) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| Error::validation("id", format!("must match {ID_PATTERN}")))?;
        match parse_id(&segment) {
            ParsedId::Id(id) => Ok(IdPath(id)),
            ParsedId::OutOfRange => Err(Error::NotFound {
                what: "resource".into(),
            }),
            ParsedId::Invalid => Err(Error::validation("id", format!("must match {ID_PATTERN}"))),
        }
    }
}

/// The query of `GET /logs`: `limit`, `cursor`, `method`, `status`.
pub struct LogQueryParams(pub LogQuery);

impl<S: Send + Sync> FromRequestParts<S> for LogQueryParams {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Error> {
        let pairs = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
            .map_err(|_| Error::validation("query", "is not a valid query string"))?
            .0;
        let mut query = LogQuery::default();
        for (name, value) in pairs {
            let slot = match name.as_str() {
                "limit" => &mut query.limit,
                "cursor" => &mut query.cursor,
                "method" => &mut query.method,
                "status" => &mut query.status,
                other => {
                    return Err(Error::validation(
                        other,
                        "unknown query parameter (allowed: limit, cursor, method, status)",
                    ));
                }
            };
            *slot = Some(value);
        }
        Ok(LogQueryParams(query))
    }
}

/// A JSON body: `Content-Type` must be JSON (415), at most 4,000,000 bytes
/// (413), well-formed (422).
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = Error;
    async fn from_request(req: Request<Body>, _: &S) -> Result<Self, Error> {
        let is_json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|mime| {
                let mime = mime.trim().to_ascii_lowercase();
                mime == "application/json"
                    || (mime.starts_with("application/") && mime.ends_with("+json"))
            })
            .unwrap_or(false);
        if !is_json {
            return Err(Error::UnsupportedMediaType);
        }
        let declared = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > MAX_BODY_BYTES) {
            return Err(Error::PayloadTooLarge {
                limit: MAX_BODY_BYTES,
            });
        }
        let bytes = axum::body::to_bytes(req.into_body(), MAX_BODY_BYTES)
            .await
            .map_err(|_| Error::PayloadTooLarge {
                limit: MAX_BODY_BYTES,
            })?;
        let value = serde_json::from_slice(&bytes)
            .map_err(|e| Error::validation("body", format!("must be valid JSON ({e})")))?;
        Ok(JsonBody(value))
    }
}

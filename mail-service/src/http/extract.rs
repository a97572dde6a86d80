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
use crate::model::Permission;
use crate::service::{
    AnalyticsQuery, BatchValidation, Caller, DomainQuery, EmailQuery, IdempotencyKey, IfMatch,
    LogQuery, MetricsQuery, SuppressionQuery, WebhookListQuery,
};

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

/// The optional `If-Match` header, checked (see `IfMatch::parse`).
pub struct IfMatchHeader(pub Option<IfMatch>);

impl<S: Send + Sync> FromRequestParts<S> for IfMatchHeader {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Error> {
        let mut values = parts.headers.get_all("if-match").iter();
        let Some(value) = values.next() else {
            return Ok(IfMatchHeader(None));
        };
        if values.next().is_some() {
            return Err(Error::InvalidIfMatch {
                detail: "given more than once; send exactly one ETag".into(),
            });
        }
        let text = value.to_str().map_err(|_| Error::InvalidIfMatch {
            detail: "must be visible ASCII characters".into(),
        })?;
        IfMatch::parse(text).map(|m| IfMatchHeader(Some(m)))
    }
}

/// A body that must be absent, empty or `{}` (`POST /emails/{id}/cancel`:
/// Resend's SDK sends none). Any `Content-Type` is accepted.
pub struct EmptyBody;

impl<S: Send + Sync> FromRequest<S> for EmptyBody {
    type Rejection = Error;
    async fn from_request(req: Request<Body>, _: &S) -> Result<Self, Error> {
        let bytes = axum::body::to_bytes(req.into_body(), 1024)
            .await
            .map_err(|_| Error::validation("body", "must be empty or {}"))?;
        let text = String::from_utf8_lossy(&bytes);
        let empty = text.trim().is_empty()
            || serde_json::from_str::<serde_json::Map<String, Value>>(&text)
                .is_ok_and(|object| object.is_empty());
        if empty {
            Ok(EmptyBody)
        } else {
            Err(Error::validation(
                "body",
                "must be empty or {} (cancel takes no properties)",
            ))
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

/// `{id}/events/{event_id}`: a webhook's id and one of its events' ids.
pub struct EventPath(pub i64, pub i64);

impl<S: Send + Sync> FromRequestParts<S> for EventPath {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        let Path((webhook, event)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|_| Error::validation("id", format!("must match {ID_PATTERN}")))?;
        let parse = |field: &str, segment: &str| match parse_id(segment) {
            ParsedId::Id(id) => Ok(id),
            ParsedId::OutOfRange => Err(Error::NotFound {
                what: "resource".into(),
            }),
            ParsedId::Invalid => Err(Error::validation(field, format!("must match {ID_PATTERN}"))),
        };
        Ok(EventPath(
            parse("id", &webhook)?,
            parse("event_id", &event)?,
        ))
    }
}

/// A path segment that is an address or an ID (`{email_or_id}`), percent-
/// decoded.
pub struct KeyPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for KeyPath {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        let Path(segment) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| Error::validation("path", "is not a valid path segment"))?;
        Ok(KeyPath(segment))
    }
}

/// An extractor for a query of named optional strings (`$name(pub
/// $query)`): each field filled by `read_query` from the parameter of its
/// name; any other parameter is refused.
macro_rules! query_params {
    ($(#[$doc:meta])* $name:ident($query:ty) { $($field:ident),+ $(,)? }) => {
        $(#[$doc])*
        pub struct $name(pub $query);

        impl<S: Send + Sync> FromRequestParts<S> for $name {
            type Rejection = Error;
            async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Error> {
                let mut query = <$query>::default();
                read_query(parts, &mut [$((stringify!($field), &mut query.$field)),+])?;
                Ok($name(query))
            }
        }
    };
}

query_params! {
    /// The query of `GET /analytics`: `domain_id`, `days`.
    AnalyticsQueryParams(AnalyticsQuery) { domain_id, days }
}

query_params! {
    /// The query of `GET /emails/metrics`.
    MetricsQueryParams(MetricsQuery) {
        start_date, end_date, timezone, granularity, metrics, dimensions, domain_id, email_id,
        broadcast_id
    }
}

query_params! {
    /// The query of `GET /domains`: `limit`, `cursor`.
    DomainQueryParams(DomainQuery) { limit, cursor }
}

query_params! {
    /// The query of `GET /suppressions`: `limit`, `cursor`, `origin`.
    SuppressionQueryParams(SuppressionQuery) { limit, cursor, origin }
}

query_params! {
    /// The query of the webhook lists: `limit`, `cursor`, `after`.
    WebhookListParams(WebhookListQuery) { limit, cursor, after }
}

query_params! {
    /// The query of `GET /logs`: `limit`, `cursor`, `method`, `status`.
    LogQueryParams(LogQuery) { limit, cursor, method, status }
}

query_params! {
    /// The query of `GET /emails`: `limit`, `cursor`, `after`, `status`.
    EmailQueryParams(EmailQuery) { limit, cursor, after, status }
}

/// Fills each named slot from the query string; any other name is refused.
fn read_query(parts: &Parts, slots: &mut [(&str, &mut Option<String>)]) -> Result<(), Error> {
    let pairs = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
        .map_err(|_| Error::validation("query", "is not a valid query string"))?
        .0;
    for (name, value) in pairs {
        let Some((_, slot)) = slots.iter_mut().find(|(known, _)| *known == name) else {
            let allowed: Vec<&str> = slots.iter().map(|(known, _)| *known).collect();
            let allowed = allowed.join(", ");
            // A parameter without a name (`?=x`) is named by the query
            // (found by the fuzz target `log_cursor`: the refusal named an
            // empty field).
            return Err(if name.is_empty() {
                Error::validation(
                    "query",
                    format!("has a parameter without a name (allowed: {allowed})"),
                )
            } else {
                Error::validation(
                    name,
                    format!("unknown query parameter (allowed: {allowed})"),
                )
            });
        };
        **slot = Some(value);
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the fuzz target `log_cursor`: `?=x` was refused naming an
    /// empty field.
    #[test]
    fn a_query_parameter_without_a_name_is_refused_naming_the_query() {
        let (parts, ()) = axum::http::Request::builder()
            .uri("/logs?limit=2&=x")
            .body(())
            .unwrap()
            .into_parts();
        let mut limit = None;
        let error = read_query(&parts, &mut [("limit", &mut limit)]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "query: has a parameter without a name (allowed: limit)"
        );
    }
}

//! The Umami-compatible HTTP surface: `/api/*` and `/script.js`.
//!
//! Status codes and bodies follow what a real Umami v3.1.0 server answers
//! (see the design page), including its quirks: `200 null` for a missing
//! website, an empty 500 for a duplicate or non-UUID id, and 401 instead of
//! 404 for a non-admin account.

// Helpers early-return the finished response of a handler; boxing it would
// only add noise to a test tool.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::UmamiFake;
use crate::store::{ACCOUNT_USER_ID, Bucket, Fault, ResponseShape, Totals, Unit, Website};

/// The browser tracker served as `/script.js`.
const TRACKER_JS: &str = include_str!("tracker.js");

fn now_ms() -> i64 {
    (OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

fn iso(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

/// Umami's JSON error body.
fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"message": message, "code": code, "status": status.as_u16()}})),
    )
        .into_response()
}

fn unauthorized() -> Response {
    error(StatusCode::UNAUTHORIZED, "unauthorized", "Unauthorized")
}

fn bad_request(errors: Value) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": {"message": "Bad request", "code": "bad-request", "status": 400, "errors": errors}})),
    )
        .into_response()
}

/// An unhandled exception on Umami: HTTP 500, empty body, no content type.
fn empty_500() -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response
}

/// The credential a request presents: `Authorization: Bearer` or Umami
/// Cloud's `x-umami-api-key`.
fn presented_token(headers: &HeaderMap) -> Option<&str> {
    if let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        return value.strip_prefix("Bearer ").map(str::trim);
    }
    headers
        .get("x-umami-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// Checks the caller's credential against the configured secret.
fn authorize(fake: &UmamiFake, headers: &HeaderMap) -> Result<String, Response> {
    match presented_token(headers) {
        Some(token) if fake.secret_matches(token) => Ok(token.to_owned()),
        _ => Err(unauthorized()),
    }
}

/// Applies the configured fault to an `/api/*` request.
pub(crate) async fn fault_layer(
    State(fake): State<UmamiFake>,
    request: Request,
    next: Next,
) -> Response {
    let fault = fake.fault();
    // Fault bodies echo the presented credential on purpose (as `/api/me`
    // does) so tests can prove that no provider body reaches an error message.
    let echoed = presented_token(request.headers())
        .unwrap_or_default()
        .to_owned();
    match fault {
        Fault::None => next.run(request).await,
        Fault::Slow { delay_ms } => {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            next.run(request).await
        }
        Fault::ServerError => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"error": {"message": "Internal Server Error", "code": "internal-error", "status": 500, "token": echoed}})),
        )
            .into_response(),
        Fault::Unauthorized => unauthorized(),
        Fault::MalformedJson => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            format!("{{\"token\":\"{echoed}\",\"pageviews\":{{\"value\":"),
        )
            .into_response(),
    }
}

fn user_json() -> Value {
    json!({"id": ACCOUNT_USER_ID, "username": "admin", "role": "admin", "isAdmin": true})
}

pub(crate) async fn login(State(fake): State<UmamiFake>, body: Option<Json<Value>>) -> Response {
    let body = body.map(|Json(v)| v).unwrap_or(Value::Null);
    let username = body
        .get("username")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let password = body
        .get("password")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match fake.login(username, password) {
        Some(token) => Json(json!({"token": token, "user": user_json()})).into_response(),
        None => error(
            StatusCode::UNAUTHORIZED,
            "incorrect-username-password",
            "Unauthorized",
        ),
    }
}

pub(crate) async fn verify(State(fake): State<UmamiFake>, headers: HeaderMap) -> Response {
    match authorize(&fake, &headers) {
        Ok(_) => Json(user_json()).into_response(),
        Err(response) => response,
    }
}

/// Like Umami: the caller's own token comes back in the body.
pub(crate) async fn me(State(fake): State<UmamiFake>, headers: HeaderMap) -> Response {
    match authorize(&fake, &headers) {
        Ok(token) => {
            Json(json!({"token": token, "authKey": token, "user": user_json()})).into_response()
        }
        Err(response) => response,
    }
}

fn website_json(w: &Website) -> Value {
    json!({
        "id": w.id,
        "name": w.name,
        "domain": w.domain,
        "resetAt": null,
        "userId": w.owner,
        "teamId": null,
        "createdBy": w.owner,
        "createdAt": iso(w.created_at_ms),
        "updatedAt": w.updated_at_ms.map(iso),
        "deletedAt": null,
        "replayEnabled": false,
        "replayConfig": null,
        "shareId": null,
    })
}

/// Checks a `name`/`domain` pair of a create or update body; `required`
/// tells whether both must be present.
fn website_fields(
    body: &Value,
    required: bool,
) -> Result<(Option<String>, Option<String>), Response> {
    let mut errors = serde_json::Map::new();
    let mut field = |key: &str, max: usize| -> Option<String> {
        match body.get(key) {
            None | Some(Value::Null) if required => {
                errors.insert(key.into(), json!(["Required"]));
                None
            }
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.chars().count() <= max => Some(s.clone()),
            Some(Value::String(_)) => {
                errors.insert(
                    key.into(),
                    json!([format!("String must contain at most {max} character(s)")]),
                );
                None
            }
            Some(_) => {
                errors.insert(key.into(), json!(["Expected string"]));
                None
            }
        }
    };
    let name = field("name", 100);
    let domain = field("domain", 500);
    if errors.is_empty() {
        Ok((name, domain))
    } else {
        Err(bad_request(Value::Object(errors)))
    }
}

pub(crate) async fn create_website(
    State(fake): State<UmamiFake>,
    headers: HeaderMap,
    body: Option<Json<Value>>,
) -> Response {
    if let Err(response) = authorize(&fake, &headers) {
        return response;
    }
    let body = body.map(|Json(v)| v).unwrap_or(Value::Null);
    let (name, domain) = match website_fields(&body, true) {
        Ok((Some(name), Some(domain))) => (name, domain),
        Ok(_) => return bad_request(json!({})),
        Err(response) => return response,
    };
    let id = match body.get("id") {
        None | Some(Value::Null) => Uuid::new_v4(),
        Some(Value::String(s)) => match Uuid::parse_str(s) {
            Ok(id) => id,
            Err(_) => return bad_request(json!({"id": ["Invalid uuid"]})),
        },
        Some(_) => return bad_request(json!({"id": ["Expected string"]})),
    };
    match fake.create_website(id, name, domain, ACCOUNT_USER_ID, now_ms()) {
        Some(website) => Json(website_json(&website)).into_response(),
        None => empty_500(),
    }
}

pub(crate) async fn get_website(
    State(fake): State<UmamiFake>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(response) = authorize(&fake, &headers) {
        return response;
    }
    let Ok(id) = Uuid::parse_str(&id) else {
        return empty_500();
    };
    let (website, admin) = fake.with_store(|s| (s.visible_website(id).cloned(), s.admin));
    match website {
        Some(w) => Json(website_json(&w)).into_response(),
        None if admin => Json(Value::Null).into_response(),
        None => unauthorized(),
    }
}

pub(crate) async fn update_website(
    State(fake): State<UmamiFake>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Option<Json<Value>>,
) -> Response {
    if let Err(response) = authorize(&fake, &headers) {
        return response;
    }
    let Ok(id) = Uuid::parse_str(&id) else {
        return empty_500();
    };
    let body = body.map(|Json(v)| v).unwrap_or(Value::Null);
    let (name, domain) = match website_fields(&body, false) {
        Ok(fields) => fields,
        Err(response) => return response,
    };
    match fake.update_website(id, name, domain, now_ms()) {
        Ok(website) => Json(website_json(&website)).into_response(),
        Err(admin) if admin => error(StatusCode::NOT_FOUND, "not-found", "Not found"),
        Err(_) => unauthorized(),
    }
}

/// `startAt`/`endAt` of a stats or series query.
fn range(query: &HashMap<String, String>) -> Result<(i64, i64), Response> {
    let parse = |key: &str| query.get(key).and_then(|v| v.parse::<i64>().ok());
    match (parse("startAt"), parse("endAt")) {
        (Some(start), Some(end)) => Ok((start, end)),
        _ => Err(bad_request(
            json!({"startAt": ["Required"], "endAt": ["Required"]}),
        )),
    }
}

/// Resolves a website id of a stats-like request the way Umami does: a
/// non-UUID is an empty 500; a non-admin gets 401 for a website it cannot see;
/// an admin gets numbers (zeros) even for a missing website.
fn stats_target(fake: &UmamiFake, headers: &HeaderMap, id: &str) -> Result<Uuid, Response> {
    authorize(fake, headers)?;
    let id = Uuid::parse_str(id).map_err(|_| empty_500())?;
    let visible = fake.with_store(|s| s.admin || s.visible_website(id).is_some());
    if visible { Ok(id) } else { Err(unauthorized()) }
}

fn totals_json(shape: ResponseShape, current: Totals, previous: Totals) -> Value {
    match shape {
        ResponseShape::V2 => {
            let pair = |now: u64, prev: u64| json!({"value": now, "prev": prev});
            json!({
                "pageviews": pair(current.pageviews, previous.pageviews),
                "visitors": pair(current.visitors, previous.visitors),
                "visits": pair(current.visits, previous.visits),
                "bounces": pair(current.bounces, previous.bounces),
                "totaltime": pair(current.totaltime, previous.totaltime),
            })
        }
        ResponseShape::V3 => {
            let flat = |t: Totals| json!({"pageviews": t.pageviews, "visitors": t.visitors, "visits": t.visits, "bounces": t.bounces, "totaltime": t.totaltime});
            let mut body = flat(current);
            body["comparison"] = flat(previous);
            body
        }
        ResponseShape::V3Postgres => {
            // COUNT comes back as a string, SUM over no rows as null.
            let stringly = |t: Totals| {
                let sum = |v: u64| {
                    if t.visits == 0 {
                        Value::Null
                    } else {
                        json!(v.to_string())
                    }
                };
                json!({
                    "pageviews": t.pageviews.to_string(),
                    "visitors": t.visitors.to_string(),
                    "visits": t.visits.to_string(),
                    "bounces": sum(t.bounces),
                    "totaltime": sum(t.totaltime),
                })
            };
            let mut body = stringly(current);
            body["comparison"] = stringly(previous);
            body
        }
    }
}

pub(crate) async fn stats(
    State(fake): State<UmamiFake>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let id = match stats_target(&fake, &headers, &id) {
        Ok(id) => id,
        Err(response) => return response,
    };
    let (start, end) = match range(&query) {
        Ok(range) => range,
        Err(response) => return response,
    };
    let length = end.saturating_sub(start);
    let (shape, current, previous) = fake.with_store(|s| {
        (
            s.shape,
            s.totals(id, start, end),
            s.totals(id, start.saturating_sub(length), start),
        )
    });
    Json(totals_json(shape, current, previous)).into_response()
}

fn bucket_label(start_ms: i64, unit: Unit) -> String {
    let Ok(t) = OffsetDateTime::from_unix_timestamp(start_ms.div_euclid(1000)) else {
        return String::new();
    };
    let (y, m, d) = (t.year(), u8::from(t.month()), t.day());
    match unit {
        Unit::Day => format!("{y:04}-{m:02}-{d:02} 00:00:00"),
        Unit::Hour => format!("{y:04}-{m:02}-{d:02}T{:02}:00:00Z", t.hour()),
    }
}

pub(crate) async fn pageviews(
    State(fake): State<UmamiFake>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let id = match stats_target(&fake, &headers, &id) {
        Ok(id) => id,
        Err(response) => return response,
    };
    let (start, end) = match range(&query) {
        Ok(range) => range,
        Err(response) => return response,
    };
    // Buckets are UTC whatever `timezone` says; the plugin always asks for UTC.
    let unit = match query.get("unit").map(String::as_str) {
        Some("day") => Unit::Day,
        None | Some("hour") => Unit::Hour,
        Some(_) => return bad_request(json!({"unit": ["Invalid enum value"]})),
    };
    let series = fake.with_store(|s| s.series(id, start, end, unit));
    let points = |value: fn(&Bucket) -> u64| -> Vec<Value> {
        series
            .iter()
            .map(|b| json!({"x": bucket_label(b.start_ms, unit), "y": value(b)}))
            .collect()
    };
    Json(json!({"pageviews": points(|b| b.pageviews), "sessions": points(|b| b.sessions)}))
        .into_response()
}

fn cors(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("POST, OPTIONS"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("Content-Type"),
    );
    response
}

pub(crate) async fn send_preflight() -> Response {
    cors(StatusCode::NO_CONTENT.into_response())
}

/// The visitor's IP: the first `X-Forwarded-For` entry, else `X-Real-IP`,
/// else the peer address.
fn client_ip(headers: &HeaderMap, peer: SocketAddr) -> String {
    let header_value = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    header_value("x-forwarded-for")
        .or_else(|| header_value("x-real-ip"))
        .unwrap_or_else(|| peer.ip().to_string())
}

/// Umami drops bot traffic (curl's default User-Agent included) with a cheerful
/// `beep boop`. The fake treats every `Mozilla/...` agent as a browser,
/// headless ones included, so browser tests are counted.
fn is_browser(user_agent: &str) -> bool {
    user_agent.starts_with("Mozilla/")
}

pub(crate) async fn send(
    State(fake): State<UmamiFake>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if !is_browser(&user_agent) {
        return cors(Json(json!({"beep": "boop"})).into_response());
    }
    let payload = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v.get("payload").cloned())
        .unwrap_or(Value::Null);
    let website = payload
        .get("website")
        .and_then(Value::as_str)
        .and_then(|s| Uuid::parse_str(s).ok());
    let Some(website) = website else {
        return cors(bad_request(json!({"website": ["Required"]})));
    };
    let url = payload
        .get("url")
        .and_then(Value::as_str)
        .unwrap_or("/")
        .to_owned();
    // Umami takes an optional `timestamp` in Unix seconds.
    let timestamp_ms = payload
        .get("timestamp")
        .and_then(Value::as_i64)
        .map_or_else(now_ms, |s| s.saturating_mul(1000));
    let ip = client_ip(&headers, peer);
    match fake.record_event(website, &url, timestamp_ms, &user_agent, &ip) {
        Some(event) => cors(
            Json(json!({
                "cache": format!("{}.{}", event.session_id.simple(), event.visit_id.simple()),
                "sessionId": event.session_id,
                "visitId": event.visit_id,
            }))
            .into_response(),
        ),
        None => cors(
            (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                "Website not found.",
            )
                .into_response(),
        ),
    }
}

pub(crate) async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/javascript"),
            (
                header::CACHE_CONTROL,
                "public, max-age=86400, must-revalidate",
            ),
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        ],
        TRACKER_JS,
    )
        .into_response()
}

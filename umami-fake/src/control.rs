//! The control API under `/__fake/...`: lets a separate process (the demo,
//! browser tests) read counters and switch fault mode, response shape and
//! account kind. It has no authentication: the fake is a loopback test tool.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use crate::UmamiFake;
use crate::store::{ACCOUNT_USER_ID, Fault, OTHER_USER_ID, ResponseShape};

fn invalid(message: String) -> Response {
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(json!({"error": message})),
    )
        .into_response()
}

pub(crate) async fn state(State(fake): State<UmamiFake>) -> Response {
    let websites = fake.websites();
    fake.with_store(|s| {
        Json(json!({
            "writes": s.creates + s.renames,
            "creates": s.creates,
            "renames": s.renames,
            "events": s.events.len(),
            "fault": s.fault,
            "shape": s.shape,
            "admin": s.admin,
            "websites": websites,
        }))
    })
    .into_response()
}

pub(crate) async fn set_fault(State(fake): State<UmamiFake>, Json(fault): Json<Fault>) -> Response {
    fake.set_fault(fault.clone());
    Json(json!({"fault": fault})).into_response()
}

#[derive(Deserialize)]
pub(crate) struct ShapeBody {
    shape: ResponseShape,
}

pub(crate) async fn set_shape(
    State(fake): State<UmamiFake>,
    Json(body): Json<ShapeBody>,
) -> Response {
    fake.set_shape(body.shape);
    Json(json!({"shape": body.shape})).into_response()
}

#[derive(Deserialize)]
pub(crate) struct AdminBody {
    admin: bool,
}

pub(crate) async fn set_admin(
    State(fake): State<UmamiFake>,
    Json(body): Json<AdminBody>,
) -> Response {
    fake.set_admin(body.admin);
    Json(json!({"admin": body.admin})).into_response()
}

pub(crate) async fn events(State(fake): State<UmamiFake>) -> Response {
    Json(json!({"events": fake.events()})).into_response()
}

#[derive(Deserialize)]
pub(crate) struct EventBody {
    website_id: Uuid,
    #[serde(default = "root_url")]
    url: String,
    timestamp_ms: i64,
    #[serde(default = "browser_agent")]
    user_agent: String,
    #[serde(default = "documentation_ip")]
    ip: String,
}

fn root_url() -> String {
    "/".into()
}

fn browser_agent() -> String {
    "Mozilla/5.0 (X11; Linux x86_64) umami-fake".into()
}

fn documentation_ip() -> String {
    "192.0.2.1".into()
}

/// Records a page view at a chosen time, e.g. on a past day.
pub(crate) async fn record_event(
    State(fake): State<UmamiFake>,
    Json(body): Json<EventBody>,
) -> Response {
    match fake.record_event(
        body.website_id,
        &body.url,
        body.timestamp_ms,
        &body.user_agent,
        &body.ip,
    ) {
        Some(event) => (StatusCode::CREATED, Json(event)).into_response(),
        None => invalid(format!("no website {}", body.website_id)),
    }
}

#[derive(Deserialize)]
pub(crate) struct WebsiteBody {
    id: Uuid,
    name: String,
    domain: String,
    /// Owned by another user: a non-admin account cannot see it.
    #[serde(default)]
    foreign: bool,
}

/// Seeds a website without counting it as a provider write.
pub(crate) async fn insert_website(
    State(fake): State<UmamiFake>,
    Json(body): Json<WebsiteBody>,
) -> Response {
    let owner = if body.foreign {
        OTHER_USER_ID
    } else {
        ACCOUNT_USER_ID
    };
    if fake.insert_website(body.id, body.name, body.domain, owner) {
        StatusCode::CREATED.into_response()
    } else {
        invalid(format!("website {} exists", body.id))
    }
}

pub(crate) async fn reset(State(fake): State<UmamiFake>) -> Response {
    fake.reset();
    StatusCode::NO_CONTENT.into_response()
}

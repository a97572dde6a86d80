//! Handler of `GET /analytics` (`full_access`).

use axum::Json;
use axum::extract::State;

use crate::error::Error;
use crate::service::{Analytics, MailService};

use super::error::ErrorBody;
use super::extract::{AnalyticsQueryParams, FullAccess};

#[utoipa::path(
    get, path = "/analytics", tag = "analytics",
    params(
        ("domain_id" = String, Query, description = "A domain of the caller's account (^[1-9][0-9]{0,18}$); required"),
        ("days" = Option<i64>, Query, description = "The period: 7, 30 or 90 days ending today (UTC), default 7"),
    ),
    responses(
        (status = 200, description = "Totals and a zero-filled per-day series of accepted, sent, failed, unknown, suppressed, scheduled, canceled, and the feedback events delivered, delivery_delayed, bounced and complained", body = Analytics),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn analytics(
    FullAccess(caller): FullAccess,
    AnalyticsQueryParams(query): AnalyticsQueryParams,
    service: State<MailService>,
) -> Result<Json<Analytics>, Error> {
    Ok(Json(service.analytics(&caller, &query).await?))
}

//! Handler of `GET /analytics` (`full_access`).

use axum::Json;
use axum::extract::State;

use crate::error::Error;
use crate::service::{Analytics, EmailMetrics, MailService};

use super::error::ErrorBody;
use super::extract::{AnalyticsQueryParams, FullAccess, MetricsQueryParams};

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

#[utoipa::path(
    get, path = "/emails/metrics", tag = "analytics",
    params(
        ("start_date" = Option<String>, Query, description = "First day, `YYYY-MM-DD` or an RFC 3339 date-time (its UTC day); default 6 days before end_date"),
        ("end_date" = Option<String>, Query, description = "Last day, likewise; default today (UTC). The range spans at most 90 days"),
        ("timezone" = Option<String>, Query, description = "`UTC` only"),
        ("granularity" = Option<String>, Query, description = "`daily` only"),
        ("metrics" = Option<String>, Query, description = "Comma-separated: received, sent, failed, suppressed, delivered, delivery_delayed, bounced, complained; default all"),
        ("dimensions" = Option<String>, Query, description = "Comma-separated: period, domain"),
        ("domain_id" = Option<String>, Query, description = "Comma-separated domain ids of the caller's"),
    ),
    responses(
        (status = 200, description = "Resend's metrics shape, from the counters `/analytics` reads", body = EmailMetrics),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn email_metrics(
    FullAccess(caller): FullAccess,
    MetricsQueryParams(query): MetricsQueryParams,
    service: State<MailService>,
) -> Result<Json<EmailMetrics>, Error> {
    Ok(Json(service.email_metrics(&caller, &query).await?))
}

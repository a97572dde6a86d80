//! Handlers of `/suppressions` (all `full_access`).

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::clock::rfc3339;
use crate::error::Error;
use crate::model::Suppression;
use crate::service::MailService;

use super::error::ErrorBody;
use super::extract::{FullAccess, JsonBody, KeyPath, SuppressionQueryParams};
use super::list::List;

/// Body of `POST /suppressions`. Unknown properties are refused.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewSuppression {
    /// The address; stored normalised (domain lower-case, IDNA ASCII form;
    /// the local part as given).
    pub email: String,
    /// Why it is suppressed, at most 256 characters.
    pub reason: Option<String>,
}

/// A suppressed address.
#[derive(Debug, Serialize, ToSchema)]
pub struct SuppressionEntry {
    /// Always `suppression`.
    pub object: &'static str,
    pub id: String,
    /// The normalised address, in the case it was first suppressed with
    /// (any case of it matches).
    pub email: String,
    pub reason: Option<String>,
    /// `manual`, `bounce` or `complaint`.
    pub origin: &'static str,
    /// The email whose bounce or complaint added it; null for `manual`.
    pub source_id: Option<String>,
    pub created_at: String,
}

/// Answer of `DELETE /suppressions/{email_or_id}`, and an item of the
/// batch removal's `data`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SuppressionDeleted {
    /// Always `suppression`.
    pub object: &'static str,
    /// The entry removed.
    pub id: String,
    /// The normalised address removed.
    pub email: String,
    /// Always true.
    pub deleted: bool,
}

/// Answer of the batch routes: `{data: [...]}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SuppressionBatch<T> {
    pub data: Vec<T>,
}

fn entry(s: Suppression) -> SuppressionEntry {
    SuppressionEntry {
        object: "suppression",
        id: s.id.to_string(),
        email: s.email,
        reason: s.reason,
        origin: s.origin.as_str(),
        source_id: s.source_id.map(|id| id.to_string()),
        created_at: rfc3339(s.created_at),
    }
}

fn deleted(s: Suppression) -> SuppressionDeleted {
    SuppressionDeleted {
        object: "suppression",
        id: s.id.to_string(),
        email: s.email,
        deleted: true,
    }
}

#[utoipa::path(
    post, path = "/suppressions", tag = "suppressions",
    request_body = NewSuppression,
    responses(
        (status = 200, description = "On the list (idempotent: an address already there answers its entry)", body = SuppressionEntry),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn add_suppression(
    FullAccess(caller): FullAccess,
    service: State<MailService>,
    JsonBody(body): JsonBody,
) -> Result<Json<SuppressionEntry>, Error> {
    Ok(Json(entry(service.add_suppression(&caller, &body).await?)))
}

#[utoipa::path(
    get, path = "/suppressions", tag = "suppressions",
    params(
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("cursor" = Option<String>, Query, description = "nextCursor of the previous page, at most 200 characters"),
        ("origin" = Option<String>, Query, description = "`manual`, `bounce` or `complaint`: only entries of that origin"),
    ),
    responses(
        (status = 200, body = List<SuppressionEntry>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_suppressions(
    FullAccess(caller): FullAccess,
    SuppressionQueryParams(query): SuppressionQueryParams,
    service: State<MailService>,
) -> Result<Json<List<SuppressionEntry>>, Error> {
    let page = service.list_suppressions(&caller, &query).await?;
    Ok(Json(List::of(page, entry)))
}

#[utoipa::path(
    get, path = "/suppressions/{email_or_id}", tag = "suppressions",
    params(("email_or_id" = String, Path, description = "The address (normalised before the lookup) or the entry's id")),
    responses(
        (status = 200, body = SuppressionEntry),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_suppression(
    FullAccess(caller): FullAccess,
    KeyPath(key): KeyPath,
    service: State<MailService>,
) -> Result<Json<SuppressionEntry>, Error> {
    Ok(Json(entry(service.suppression(&caller, &key).await?)))
}

#[utoipa::path(
    delete, path = "/suppressions/{email_or_id}", tag = "suppressions",
    params(("email_or_id" = String, Path, description = "The address (normalised before the lookup) or the entry's id")),
    responses(
        (status = 200, body = SuppressionDeleted),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete_suppression(
    FullAccess(caller): FullAccess,
    KeyPath(email): KeyPath,
    service: State<MailService>,
) -> Result<Json<SuppressionDeleted>, Error> {
    Ok(Json(deleted(
        service.delete_suppression(&caller, &email).await?,
    )))
}

#[utoipa::path(
    post, path = "/suppressions/batch/add", tag = "suppressions",
    request_body(content = Object, description = "`{emails: [...]}`, 1 to 100 addresses"),
    responses(
        (status = 200, description = "The entries, one per mailbox (an address already there answers its entry)", body = SuppressionBatch<SuppressionEntry>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn add_suppressions(
    FullAccess(caller): FullAccess,
    service: State<MailService>,
    JsonBody(body): JsonBody,
) -> Result<Json<SuppressionBatch<SuppressionEntry>>, Error> {
    let added = service.add_suppressions(&caller, &body).await?;
    Ok(Json(SuppressionBatch {
        data: added.into_iter().map(entry).collect(),
    }))
}

#[utoipa::path(
    post, path = "/suppressions/batch/remove", tag = "suppressions",
    request_body(content = Object, description = "`{emails: [...]}` or `{ids: [...]}`, 1 to 100 items"),
    responses(
        (status = 200, description = "The entries removed; items not on the list are left out", body = SuppressionBatch<SuppressionDeleted>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn remove_suppressions(
    FullAccess(caller): FullAccess,
    service: State<MailService>,
    JsonBody(body): JsonBody,
) -> Result<Json<SuppressionBatch<SuppressionDeleted>>, Error> {
    let removed = service.remove_suppressions(&caller, &body).await?;
    Ok(Json(SuppressionBatch {
        data: removed.into_iter().map(deleted).collect(),
    }))
}

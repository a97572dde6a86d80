//! Handlers of `/domains` (all `full_access`).

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::clock::rfc3339;
use crate::error::Error;
use crate::model::{DnsRecord, Domain, DomainStatus, split_records};
use crate::service::MailService;

use super::error::ErrorBody;
use super::extract::{DomainQueryParams, EmptyBody, FullAccess, IdPath, JsonBody};
use super::list::List;

/// Body of `POST /domains`. Unknown properties are refused.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewDomainBody {
    /// The domain mail is sent from (`example.com`); stored lower-case in
    /// its ASCII (IDNA) form.
    pub name: String,
    /// The return-path subdomain (one label; default `send`).
    pub custom_return_path: Option<String>,
    /// Only `us-east-1` (Resend's default), accepted for SDK compatibility.
    pub region: Option<String>,
}

/// A sending domain with the records to publish. The DKIM private key is
/// never part of it.
#[derive(Debug, Serialize, ToSchema)]
pub struct DomainResource {
    /// Always `domain`.
    pub object: &'static str,
    pub id: String,
    pub name: String,
    /// `not_started`, `pending`, `verified`, `partially_verified`,
    /// `partially_failed`, `failed` or `temporary_failure`.
    #[schema(value_type = String)]
    pub status: DomainStatus,
    /// Always `us-east-1`.
    pub region: &'static str,
    pub custom_return_path: String,
    /// The records to publish, of the kinds Resend's SDKs know (`SPF`,
    /// `DKIM`); the domain's status depends on each.
    pub records: Vec<DnsRecord>,
    /// The DMARC record recommended beside them (the status does not
    /// depend on it), with its own status.
    pub dmarc: Option<DnsRecord>,
    /// Always `{sending: "enabled", receiving: "disabled"}`: the service
    /// sends from a domain and receives no mail for it.
    #[schema(value_type = Object)]
    pub capabilities: serde_json::Value,
    pub created_at: String,
}

/// Answer of `POST /domains/{id}/verify` and `DELETE /domains/{id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DomainChanged {
    /// Always `domain`.
    pub object: &'static str,
    pub id: String,
    /// `DELETE` only: always true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<bool>,
}

fn resource(d: Domain) -> DomainResource {
    let (records, dmarc) = split_records(d.records.0);
    DomainResource {
        object: "domain",
        id: d.id.to_string(),
        name: d.name,
        status: d.status,
        region: "us-east-1",
        custom_return_path: d.return_path,
        records,
        dmarc,
        capabilities: crate::model::domain_capabilities(),
        created_at: rfc3339(d.created_at),
    }
}

#[utoipa::path(
    post, path = "/domains", tag = "domains",
    request_body = NewDomainBody,
    responses(
        (status = 200, description = "Created with a new DKIM key pair; status `not_started`", body = DomainResource),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create_domain(
    FullAccess(caller): FullAccess,
    service: State<MailService>,
    JsonBody(body): JsonBody,
) -> Result<Json<DomainResource>, Error> {
    Ok(Json(resource(service.create_domain(&caller, &body).await?)))
}

#[utoipa::path(
    get, path = "/domains", tag = "domains",
    params(
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("cursor" = Option<String>, Query, description = "nextCursor of the previous page, at most 200 characters"),
    ),
    responses(
        (status = 200, body = List<DomainResource>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_domains(
    FullAccess(caller): FullAccess,
    DomainQueryParams(query): DomainQueryParams,
    service: State<MailService>,
) -> Result<Json<List<DomainResource>>, Error> {
    let page = service.list_domains(&caller, &query).await?;
    Ok(Json(List::of(page, resource)))
}

#[utoipa::path(
    get, path = "/domains/{id}", tag = "domains",
    params(("id" = String, Path, description = "^[1-9][0-9]{0,18}$")),
    responses(
        (status = 200, body = DomainResource),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_domain(
    FullAccess(caller): FullAccess,
    IdPath(id): IdPath,
    service: State<MailService>,
) -> Result<Json<DomainResource>, Error> {
    Ok(Json(resource(service.domain(&caller, id).await?)))
}

#[utoipa::path(
    post, path = "/domains/{id}/verify", tag = "domains",
    params(("id" = String, Path, description = "^[1-9][0-9]{0,18}$")),
    responses(
        (status = 200, description = "Answered at once: the records are checked in the background now (all lookups at the same time, one deadline) and again for the verification period; the outcome is on GET and sent as `domain.updated`", body = DomainChanged),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody), (status = 503, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn verify_domain(
    FullAccess(caller): FullAccess,
    IdPath(id): IdPath,
    service: State<MailService>,
    _: EmptyBody,
) -> Result<Json<DomainChanged>, Error> {
    let domain = service.verify_domain(&caller, id).await?;
    Ok(Json(DomainChanged {
        object: "domain",
        id: domain.id.to_string(),
        deleted: None,
    }))
}

#[utoipa::path(
    delete, path = "/domains/{id}", tag = "domains",
    params(("id" = String, Path, description = "^[1-9][0-9]{0,18}$")),
    responses(
        (status = 200, description = "Deleted: no more mail is sent from it; accepted emails keep their records", body = DomainChanged),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete_domain(
    FullAccess(caller): FullAccess,
    IdPath(id): IdPath,
    service: State<MailService>,
) -> Result<Json<DomainChanged>, Error> {
    service.delete_domain(&caller, id).await?;
    Ok(Json(DomainChanged {
        object: "domain",
        id: id.to_string(),
        deleted: Some(true),
    }))
}

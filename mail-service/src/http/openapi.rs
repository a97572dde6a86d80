//! The OpenAPI document: derived from the handlers' annotations and the
//! request/response types, never written by hand. It stands above the
//! handlers it lists, and serves itself at `GET /openapi.json`.

use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::error::{ErrorBody, IdEntry};
use super::list::List;
use super::{analytics, domains, handlers, suppressions, webhooks};

#[derive(OpenApi)]
#[openapi(
    info(title = "mail-service", version = "1.0.0", description = "Transactional mail API (Resend-compatible subset). The versioned base path is /v1; the root serves the same API."),
    servers((url = "/v1")),
    paths(
        handlers::send_email,
        handlers::send_batch,
        handlers::list_emails,
        handlers::get_email,
        handlers::reschedule_email,
        handlers::cancel_email,
        handlers::list_logs,
        handlers::get_log,
        analytics::analytics,
        analytics::email_metrics,
        domains::create_domain,
        domains::list_domains,
        domains::get_domain,
        domains::verify_domain,
        domains::delete_domain,
        suppressions::add_suppression,
        suppressions::list_suppressions,
        suppressions::get_suppression,
        suppressions::delete_suppression,
        suppressions::add_suppressions,
        suppressions::remove_suppressions,
        webhooks::create_webhook,
        webhooks::list_webhooks,
        webhooks::get_webhook,
        webhooks::update_webhook,
        webhooks::delete_webhook,
        webhooks::rotate_webhook_secret,
        webhooks::list_webhook_events,
        webhooks::get_webhook_event,
        webhooks::list_webhook_attempts,
        webhooks::replay_webhook_event,
    ),
    components(schemas(
        crate::model::EmailPayload,
        crate::model::MessageFields,
        crate::model::Recipients,
        crate::model::Tag,
        crate::model::Attachment,
        handlers::SendResult,
        handlers::BatchResult,
        handlers::BatchItemError,
        handlers::EmailResource,
        handlers::EventEntry,
        handlers::EmailSummary,
        List<handlers::EmailSummary>,
        handlers::EmailChanged,
        crate::model::Reschedule,
        handlers::LogEntry,
        List<handlers::LogEntry>,
        crate::service::Analytics,
        crate::service::EventCounts,
        crate::service::DaySeries,
        crate::service::EmailMetrics,
        domains::NewDomainBody,
        domains::DomainResource,
        domains::DomainChanged,
        crate::model::DnsRecord,
        List<domains::DomainResource>,
        suppressions::NewSuppression,
        suppressions::SuppressionEntry,
        suppressions::SuppressionDeleted,
        List<suppressions::SuppressionEntry>,
        suppressions::SuppressionBatch<suppressions::SuppressionEntry>,
        suppressions::SuppressionBatch<suppressions::SuppressionDeleted>,
        webhooks::NewWebhook,
        webhooks::WebhookUpdate,
        webhooks::WebhookCreated,
        webhooks::WebhookResource,
        webhooks::WebhookChanged,
        webhooks::WebhookPayload,
        webhooks::WebhookEventEntry,
        webhooks::WebhookAttemptEntry,
        webhooks::WebhookEventResource,
        List<webhooks::WebhookResource>,
        List<webhooks::WebhookEventEntry>,
        List<webhooks::WebhookAttemptEntry>,
        ErrorBody,
        IdEntry,
    )),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

/// `GET /openapi.json`: the document, generated from the handlers and types.
pub async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("ms_...")
                    .build(),
            ),
        );
    }
}

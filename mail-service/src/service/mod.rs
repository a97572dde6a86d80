//! The service layer: sending with a safe handoff, idempotency, rate limits,
//! request logs and the operator actions. It knows nothing about HTTP; the
//! HTTP layer and the CLI both call it. One file per subject: `auth`
//! (API keys and the rate limit), `send` (emails and idempotency),
//! `suppressions` (the list and the screening at handoff), `logs`,
//! `admin` (operator actions and the sweep), `webhooks` (registration and
//! the deliveries' history), `webhook_dispatch` (signing, the checked HTTP
//! client and the dispatcher).

mod admin;
mod analytics;
mod auth;
mod dns;
mod domain_check;
mod domains;
mod feedback;
mod handoff;
mod health;
mod logs;
mod metrics;
mod page;
mod schedule;
mod scheduler;
mod send;
mod suppressions;
mod webhook_dispatch;
mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::error::Error;
use crate::feedback::verp::VerpKey;
use crate::id::IdGenerator;
use crate::model::Principal;
use crate::store::Store;
use crate::transport::Transport;

pub use analytics::{
    ANALYTICS_DAYS, ANALYTICS_EVENTS, Analytics, AnalyticsQuery, DaySeries, EventCounts,
};
pub use auth::{Begun, Incoming, KEY_PREFIX, RateStatus, hash_key};
pub use dns::{DnsProtocol, DnsSettings};
pub use domains::DomainQuery;
pub use feedback::{AppliedEvent, FeedbackSource, Ingested};
pub use logs::{CheckedLogQuery, LOG_METHODS, LogQuery};
pub use metrics::{EmailMetrics, METRICS, MetricsQuery};
pub use page::{MAX_CURSOR_CHARS, MAX_PAGE_LIMIT, Page, PageRequest};
pub use schedule::{Canceled, EmailQuery, IfMatch, Rescheduled};
pub use scheduler::Scheduler;
pub use send::{BatchSent, BatchValidation, IdempotencyKey, ItemError, Sent, body_hash};
pub use suppressions::SuppressionQuery;
pub use webhook_dispatch::{RESPONSE_KEPT_BYTES, WebhookDispatcher};
pub use webhooks::{DEFAULT_RETRY_SCHEDULE, EventWithAttempts, WebhookListQuery, WebhookSettings};

pub const DEFAULT_RATE_LIMIT: i64 = 120;
/// Name of the return-path key among the service's secrets.
const VERP_SECRET: &str = "verp";

#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a completed response is replayed under its key.
    pub replay_window_ms: i64,
    /// Length of a rate-limit window (the limit is per window).
    pub rate_window_ms: i64,
    /// Upper bound of one email's handoff; also its lease: a `sending` email
    /// older than this (plus a margin) belongs to a stopped node.
    pub handoff_lease: Duration,
    /// How many scheduled emails one node hands off at the same time (and
    /// so claims at most at once).
    pub scheduler_concurrency: usize,
    /// How often an idle scheduler looks for emails other nodes scheduled;
    /// it wakes earlier for the next due email it knows of, and at once for
    /// one accepted on its own node.
    pub scheduler_poll: Duration,
    /// Where domain verification asks DNS.
    pub dns: DnsSettings,
    /// The service's host in the records a domain publishes: the SPF
    /// include `spf.<host>` and the bounce MX `feedback-smtp.<host>`.
    pub sending_host: String,
    /// How long after a verify request a domain keeps being re-checked.
    pub domain_verify_period: Duration,
    /// How often a domain under verification is re-checked.
    pub domain_recheck_interval: Duration,
    /// Webhook deliveries: retry schedule, timeouts, allowed endpoints.
    pub webhooks: WebhookSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            replay_window_ms: 24 * 60 * 60 * 1000,
            rate_window_ms: 60 * 1000,
            handoff_lease: Duration::from_secs(120),
            scheduler_concurrency: 16,
            scheduler_poll: Duration::from_secs(1),
            dns: DnsSettings::default(),
            sending_host: "mail-service.example".into(),
            domain_verify_period: Duration::from_secs(72 * 60 * 60),
            domain_recheck_interval: Duration::from_secs(5 * 60),
            webhooks: WebhookSettings::default(),
        }
    }
}

/// Who is calling, for one request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub principal: Principal,
    pub request_id: i64,
}

#[derive(Clone)]
pub struct MailService {
    store: Store,
    transport: Transport,
    clock: Arc<dyn Clock>,
    ids: Arc<IdGenerator>,
    settings: Settings,
    principals: Arc<auth::RememberedPrincipals>,
    /// Told when this node accepts a scheduled email or moves one, so its
    /// scheduler recomputes when to wake.
    scheduler_wake: Arc<tokio::sync::Notify>,
    dns: dns::Dns,
    /// DKIM signers built once per stored key.
    dkim_signers: Arc<domains::DkimSigners>,
    /// The one client of webhook deliveries (checked DNS, no redirects).
    webhook_client: reqwest::Client,
    /// Told when this node makes a delivery due at once (a replay).
    webhook_wake: Arc<tokio::sync::Notify>,
    /// The key of the return-path tokens (shared through the database).
    verp: Arc<VerpKey>,
    /// Domain checks verify requests started on this node.
    domain_checks: Arc<domain_check::ChecksInFlight>,
}

impl MailService {
    /// Registers this node and builds the service.
    pub async fn start(
        store: Store,
        transport: Transport,
        clock: Arc<dyn Clock>,
        settings: Settings,
    ) -> Result<MailService, Error> {
        let node = store.register_node(clock.now_ms()).await?;
        let dns = dns::Dns::new(&settings.dns);
        let webhook_client =
            webhook_dispatch::client(&dns, settings.webhooks.policy, settings.webhooks.timeout)?;
        let verp = {
            use rand::RngCore;
            let mut candidate = [0u8; 32];
            rand::rngs::OsRng.fill_bytes(&mut candidate);
            let key = store
                .service_secret(VERP_SECRET, &hex::encode(candidate), clock.now_ms())
                .await?;
            Arc::new(VerpKey::new(key.as_bytes()))
        };
        Ok(MailService {
            store,
            transport,
            clock,
            ids: Arc::new(IdGenerator::new(node)),
            dns,
            settings,
            principals: Arc::default(),
            scheduler_wake: Arc::default(),
            dkim_signers: Arc::default(),
            webhook_client,
            webhook_wake: Arc::default(),
            verp,
            domain_checks: Arc::default(),
        })
    }

    pub fn next_id(&self) -> i64 {
        self.ids.next()
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
}

/// The JSON object a request body must be, with only the `allowed`
/// properties: otherwise a validation error naming the body or the first
/// unknown property.
fn body_object<'a>(
    body: &'a serde_json::Value,
    allowed: &[&str],
) -> Result<&'a serde_json::Map<String, serde_json::Value>, Error> {
    let serde_json::Value::Object(obj) = body else {
        return Err(Error::validation("body", "must be a JSON object"));
    };
    if let Some(unknown) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(Error::unknown_property(
            unknown,
            &format!("allowed: {}", allowed.join(", ")),
        ));
    }
    Ok(obj)
}

//! The webhook dispatcher: takes due outbox rows with a lease, signs and
//! posts each one, records the attempt and what follows from it (delivered,
//! retried later with jitter, or given up with the endpoint disabled).
//!
//! Delivery is at least once: a node that stops after the receiver got a
//! message but before the attempt is recorded leaves the row claimed until
//! its lease ends, and it is sent again (same `webhook-id`). Order is not
//! promised.
//!
//! Where a request may go is decided here only: the endpoint's address
//! literal is checked before the request, and a host name is resolved by
//! `CheckedResolver` (once per connection; the connection goes to the
//! addresses it checked), which refuses every non-public address unless the
//! operator allows them. No redirect is followed and no proxy is used.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_resolver::proto::rr::{RData, RecordType};
use rand::Rng;
use tokio::sync::watch;
use tracing::Instrument;

use crate::clock::rfc3339;
use crate::error::Error;
use crate::model::{self, EndpointPolicy};
use crate::store::{AttemptOutcome, ClaimedDelivery, WebhookAttempt};

use super::MailService;
use super::dns::{Dns, Found};

/// How much of an answer's body is kept with its attempt (and read at all).
pub const RESPONSE_KEPT_BYTES: usize = 1024;

/// Why a request was not made or did not get an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct Refused {
    /// `forbidden_address`, `dns`, `timeout`, `connect`, `request`.
    pub class: &'static str,
    pub detail: String,
}

/// Builds the one HTTP client of webhook deliveries.
pub(super) fn client(
    dns: &Dns,
    policy: EndpointPolicy,
    timeout: Duration,
) -> Result<reqwest::Client, Error> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent(concat!("mail-service-webhooks/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(CheckedResolver {
            dns: dns.clone(),
            policy,
        }))
        .build()
        .map_err(|e| Error::Unavailable {
            detail: format!("the webhook HTTP client could not be built ({e})"),
        })
}

/// Resolves an endpoint's host once and refuses it when any address is one
/// the policy does not allow.
struct CheckedResolver {
    dns: Dns,
    policy: EndpointPolicy,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let dns = self.dns.clone();
        let policy = self.policy;
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addresses = resolve_checked(&dns, &host, policy)
                .await
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
            let addrs: reqwest::dns::Addrs =
                Box::new(addresses.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

async fn resolve_checked(
    dns: &Dns,
    host: &str,
    policy: EndpointPolicy,
) -> Result<Vec<IpAddr>, Refused> {
    let mut addresses = Vec::new();
    let mut failures = Vec::new();
    for record_type in [RecordType::A, RecordType::AAAA] {
        match dns.lookup(host, record_type).await {
            Found::Records(records) => addresses.extend(records.iter().filter_map(|r| match r {
                RData::A(a) => Some(IpAddr::V4(a.0)),
                RData::AAAA(a) => Some(IpAddr::V6(a.0)),
                _ => None,
            })),
            Found::Nothing => {}
            Found::Temporary(e) => failures.push(e),
        }
    }
    if addresses.is_empty() {
        return Err(Refused {
            class: "dns",
            detail: match failures.first() {
                Some(e) => format!("`{host}` could not be resolved ({e})"),
                None => format!("`{host}` has no A or AAAA record"),
            },
        });
    }
    for address in &addresses {
        model::check_address(*address, policy).map_err(|kind| Refused {
            class: "forbidden_address",
            detail: format!("`{host}` resolves to {address}, a {kind} address, which is refused"),
        })?;
    }
    Ok(addresses)
}

impl MailService {
    /// One dispatch round: claims the deliveries due now (at most the
    /// configured concurrency), makes them at the same time and records
    /// each. Returns how many were claimed.
    pub async fn deliver_due_webhooks(&self) -> Result<usize, Error> {
        let (claim, deliveries) = self
            .claim_webhook_deliveries(self.settings.webhooks.concurrency)
            .await?;
        let claimed = deliveries.len();
        let mut running = tokio::task::JoinSet::new();
        for delivery in deliveries {
            let service = self.clone();
            running.spawn(async move { service.deliver(claim, delivery).await });
        }
        while running.join_next().await.is_some() {}
        Ok(claimed)
    }

    /// Claims up to `limit` due deliveries: the claim's id and the rows.
    async fn claim_webhook_deliveries(
        &self,
        limit: usize,
    ) -> Result<(i64, Vec<ClaimedDelivery>), Error> {
        let claim = self.ids.next();
        let now = self.clock.now_ms();
        // An attempt ends within the timeout; the lease leaves room for
        // recording it. A row still claimed after that belongs to a node
        // that stopped, and is due again.
        let timeout = self.settings.webhooks.timeout;
        let lease_until = now + (timeout * 2 + Duration::from_secs(30)).as_millis() as i64;
        let claimed = self
            .store
            .claim_webhook_events(claim, now, lease_until, limit as i64)
            .await?;
        if claimed == 0 {
            return Ok((claim, Vec::new()));
        }
        Ok((claim, self.store.claimed_webhook_events(claim).await?))
    }

    /// Makes one delivery attempt and records it; its log lines carry the
    /// id of the request that caused the event, when one did.
    async fn deliver(&self, claim: i64, delivery: ClaimedDelivery) {
        let span = tracing::info_span!(
            "webhook_delivery",
            request_id = delivery.request_id,
            event_id = delivery.id
        );
        self.deliver_in_span(claim, delivery).instrument(span).await;
    }

    async fn deliver_in_span(&self, claim: i64, delivery: ClaimedDelivery) {
        let attempted_at = self.clock.now_ms();
        let started = Instant::now();
        let answer = self.post(&delivery, attempted_at).await;
        let duration_ms = started.elapsed().as_millis() as i64;
        let (status_code, error_class, response) = match &answer {
            Ok((status, body)) if (200..300).contains(status) => {
                (Some(*status as i64), None, body.clone())
            }
            Ok((status, body)) => (Some(*status as i64), Some("http_status"), body.clone()),
            Err(refused) => (None, Some(refused.class), refused.detail.clone()),
        };
        metrics::counter!(
            crate::metrics::WEBHOOK_ATTEMPTS,
            "result" => error_class.unwrap_or("delivered")
        )
        .increment(1);
        let finished_at = self.clock.now_ms();
        let outcome = self.outcome(&delivery, &answer, finished_at);
        let attempt = WebhookAttempt {
            id: 0,
            event_id: delivery.id,
            attempted_at,
            status_code,
            error_class: error_class.map(str::to_string),
            response,
            duration_ms,
        };
        tracing::info!(
            webhook_id = delivery.webhook.id,
            event_id = delivery.id,
            event_type = %delivery.event_type,
            status_code,
            error_class,
            duration_ms,
            "webhook attempt"
        );
        match self
            .store
            .record_attempt(claim, &delivery, &attempt, &outcome, finished_at)
            .await
        {
            Ok(true) => {
                if let AttemptOutcome::GaveUp { disable_reason } = &outcome {
                    tracing::warn!(
                        webhook_id = delivery.webhook.id,
                        reason = %disable_reason,
                        "webhook disabled"
                    );
                }
            }
            Ok(false) => tracing::warn!(
                event_id = delivery.id,
                "webhook attempt not recorded: the lease ran out and another node took it"
            ),
            Err(e) => tracing::warn!(
                event_id = delivery.id,
                error = %e,
                "webhook attempt not recorded; it is made again after its lease"
            ),
        }
    }

    /// What an attempt leads to.
    fn outcome(
        &self,
        delivery: &ClaimedDelivery,
        answer: &Result<(u16, String), Refused>,
        now: i64,
    ) -> AttemptOutcome {
        let what = match answer {
            Ok((status, _)) if (200..300).contains(status) => return AttemptOutcome::Delivered,
            Ok((410, _)) => {
                return AttemptOutcome::GaveUp {
                    disable_reason: "the endpoint answered 410 Gone".into(),
                };
            }
            Ok((status, _)) => format!("HTTP {status}"),
            Err(refused) => refused.detail.clone(),
        };
        let schedule = &self.settings.webhooks.retry_schedule;
        let made = delivery.attempts as usize + 1;
        match schedule.get(made - 1) {
            Some(wait) => {
                let wait = wait.as_millis() as i64;
                let jitter = rand::thread_rng().gen_range(0..=wait / 10);
                AttemptOutcome::RetryAt(now + wait + jitter)
            }
            None => AttemptOutcome::GaveUp {
                disable_reason: format!(
                    "every attempt of the retry schedule failed ({made} attempts; the last: {what})"
                ),
            },
        }
    }

    /// Signs and posts one delivery: the status and the start of the body.
    async fn post(
        &self,
        delivery: &ClaimedDelivery,
        now_ms: i64,
    ) -> Result<(u16, String), Refused> {
        let webhook = &delivery.webhook;
        let url =
            model::validate_endpoint("endpoint", &webhook.endpoint, self.settings.webhooks.policy)
                .map_err(|e| Refused {
                    class: "forbidden_address",
                    detail: e.to_string(),
                })?;
        let body = format!(
            "{{\"type\":\"{}\",\"created_at\":\"{}\",\"data\":{}}}",
            delivery.event_type.as_str(),
            rfc3339(delivery.created_at),
            delivery.data
        );
        let msg_id = format!("msg_{}", delivery.id);
        let timestamp = now_ms.div_euclid(1000);
        let keys = webhook.signing_keys(now_ms).map_err(|e| Refused {
            class: "request",
            detail: e.to_string(),
        })?;
        let signature = model::signature(&keys, &msg_id, timestamp, body.as_bytes());
        let sent = self
            .webhook_client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", &msg_id)
            .header("webhook-timestamp", timestamp)
            .header("webhook-signature", &signature)
            .header("svix-id", &msg_id)
            .header("svix-timestamp", timestamp)
            .header("svix-signature", &signature)
            .body(body)
            .send()
            .await;
        let mut response = sent.map_err(refused)?;
        let status = response.status().as_u16();
        let mut kept = Vec::new();
        while kept.len() < RESPONSE_KEPT_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => kept.extend_from_slice(&chunk),
                Ok(None) => break,
                // The status counts; a body cut short does not change it.
                Err(_) => break,
            }
        }
        kept.truncate(RESPONSE_KEPT_BYTES);
        Ok((status, String::from_utf8_lossy(&kept).into_owned()))
    }
}

/// Classifies a failed request; a refusal of our resolver keeps its own
/// class and words. The detail is the error and its causes, without the URL.
fn refused(e: reqwest::Error) -> Refused {
    let class = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else {
        "request"
    };
    let e = e.without_url();
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<Refused>() {
            return r.clone();
        }
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        source = s.source();
    }
    Refused { class, detail }
}

/// Delivers until told to stop: claims no more due deliveries than it has
/// free slots (`--webhook-concurrency`), so every claimed delivery starts at
/// once and a slow endpoint holds one slot, not the others; claims again
/// once at least half the slots are free (each claim is a write, so it
/// takes several rows at a time), else after the poll interval or when
/// woken (a replay on this node). On stop it claims nothing more and lets
/// the deliveries under way finish.
pub struct WebhookDispatcher {
    service: MailService,
}

impl WebhookDispatcher {
    pub fn new(service: MailService) -> WebhookDispatcher {
        WebhookDispatcher { service }
    }

    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let settings = &self.service.settings.webhooks;
        let slots = Arc::new(tokio::sync::Semaphore::new(settings.concurrency));
        let finished = Arc::new(tokio::sync::Notify::new());
        let wake = self.service.webhook_wake.clone();
        let enough = settings.concurrency.div_ceil(2);
        while !*stop.borrow() {
            let free = slots.available_permits();
            if free < enough && free < settings.concurrency {
                tokio::select! {
                    _ = finished.notified() => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
            match self.service.claim_webhook_deliveries(free).await {
                Ok((claim, deliveries)) if !deliveries.is_empty() => {
                    for delivery in deliveries {
                        // Free: only this loop takes slots, and it claimed
                        // no more rows than were free.
                        let Ok(permit) = slots.clone().acquire_owned().await else {
                            break;
                        };
                        let service = self.service.clone();
                        let finished = finished.clone();
                        tokio::spawn(async move {
                            service.deliver(claim, delivery).await;
                            drop(permit);
                            finished.notify_one();
                        });
                    }
                    continue;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "webhook claim failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(settings.poll) => {}
                _ = wake.notified() => {}
                _ = stop.changed() => {}
            }
        }
        let _ = slots.acquire_many(settings.concurrency as u32).await;
    }
}

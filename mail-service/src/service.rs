//! The service layer: sending with a safe handoff, idempotency, rate limits,
//! request logs and the operator actions. It knows nothing about HTTP; the
//! HTTP layer and the CLI both call it.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::clock::Clock;
use crate::error::Error;
use crate::id::IdGenerator;
use crate::model::{self, MAX_BATCH, ValidatedEmail};
use crate::store::{
    ApiKeyRecord, EmailRecord, EmailUpdate, KeyRecord, KeyRef, LogFilter, LogRecord, NewEmail,
    NewLog, Permission, Principal, Reservation, Reserved, Store, TenantRecord,
};
use crate::transport::{self, Handoff, Transport};

/// Prefix of every API key.
pub const KEY_PREFIX: &str = "ms_";
pub const DEFAULT_RATE_LIMIT: i64 = 120;
pub const MAX_LOG_CURSOR_CHARS: usize = 200;
pub const MAX_LOG_LIMIT: i64 = 100;
pub const LOG_METHODS: &[&str] = &["GET", "POST", "PATCH", "PUT", "DELETE", "HEAD", "OPTIONS"];

#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a completed response is replayed under its key.
    pub replay_window_ms: i64,
    /// Length of a rate-limit window (the limit is per window).
    pub rate_window_ms: i64,
    /// Upper bound of one email's handoff; also its lease: a `sending` email
    /// older than this (plus a margin) belongs to a stopped node.
    pub handoff_lease: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            replay_window_ms: 24 * 60 * 60 * 1000,
            rate_window_ms: 60 * 1000,
            handoff_lease: Duration::from_secs(120),
        }
    }
}

/// Who is calling, for one request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub principal: Principal,
    pub request_id: i64,
}

/// A checked `Idempotency-Key`.
#[derive(Debug, Clone)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(raw: &str) -> Result<Self, Error> {
        model::validate_idempotency_key(raw)?;
        Ok(IdempotencyKey(raw.to_string()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    pub id: String,
    pub revision: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemError {
    pub index: usize,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchSent {
    pub ids: Vec<String>,
    /// Refused items (permissive validation only).
    pub errors: Vec<ItemError>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchValidation {
    Strict,
    Permissive,
}

/// What a key replays.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Outcome {
    Sent(Sent),
    BatchSent(BatchSent),
    Failed {
        error: Error,
        request_id: String,
    },
    /// Written by the sweeper: the node stopped during the handoff.
    Abandoned,
}

/// The rate-limit state after counting a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateStatus {
    pub limit: i64,
    pub remaining: i64,
    pub reset_secs: i64,
}

#[derive(Debug, Clone)]
pub struct EmailView {
    pub record: EmailRecord,
}

#[derive(Debug, Clone)]
pub struct LogPage {
    pub entries: Vec<LogRecord>,
    pub next_cursor: Option<String>,
}

/// Raw query of `GET /logs`, before checks.
#[derive(Debug, Clone, Default)]
pub struct LogQuery {
    pub limit: Option<String>,
    pub cursor: Option<String>,
    pub method: Option<String>,
    pub status: Option<String>,
}

#[derive(Clone)]
pub struct MailService {
    store: Store,
    transport: Transport,
    clock: Arc<dyn Clock>,
    ids: Arc<IdGenerator>,
    settings: Settings,
}

/// The scope of a key: tenant + method + path.
const SEND_SCOPE: &str = "POST /emails";
const BATCH_SCOPE: &str = "POST /emails/batch";
const LEASE_MARGIN_MS: i64 = 30_000;

pub fn hash_key(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Hash of the canonical body: JSON with sorted keys and no whitespace, so
/// formatting and key order do not make two equal requests differ.
pub fn body_hash(body: &Value) -> String {
    hex::encode(Sha256::digest(body.to_string().as_bytes()))
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
        Ok(MailService {
            store,
            transport,
            clock,
            ids: Arc::new(IdGenerator::new(node)),
            settings,
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn next_id(&self) -> i64 {
        self.ids.next()
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    // ---- authentication and rate limit -------------------------------------

    /// The principal of a bearer token. The token is hashed at once and never
    /// logged or echoed.
    pub async fn authenticate(&self, token: &str) -> Result<Principal, Error> {
        if !token.starts_with(KEY_PREFIX) {
            return Err(Error::InvalidApiKey);
        }
        self.store
            .principal_by_key_hash(&hash_key(token))
            .await?
            .ok_or(Error::InvalidApiKey)
    }

    /// Counts one request of the tenant in the current shared window.
    pub async fn count_request(&self, principal: &Principal) -> Result<RateStatus, Error> {
        let now = self.clock.now_ms();
        let window = self.settings.rate_window_ms;
        let start = now - now.rem_euclid(window);
        let count = self
            .store
            .hit_rate_window(principal.tenant_id, start)
            .await?;
        let limit = principal.rate_limit_per_minute;
        let reset_secs = ((start + window - now) + 999) / 1000;
        let status = RateStatus {
            limit,
            remaining: (limit - count).max(0),
            reset_secs,
        };
        if count > limit {
            return Err(Error::RateLimited {
                limit,
                reset_secs,
                remaining: 0,
            });
        }
        Ok(status)
    }

    // ---- request logs ------------------------------------------------------

    pub async fn log_started(
        &self,
        request_id: i64,
        principal: Option<&Principal>,
        method: &str,
        path: &str,
        user_agent: Option<&str>,
    ) -> Result<(), Error> {
        self.store
            .insert_log(&NewLog {
                id: request_id,
                tenant_id: principal.map(|p| p.tenant_id),
                api_key_id: principal.map(|p| p.api_key_id),
                method: method.to_string(),
                path: path.chars().take(2048).collect(),
                user_agent: user_agent.map(|u| u.chars().take(512).collect()),
                created_at: self.clock.now_ms(),
            })
            .await
    }

    pub async fn log_finished(
        &self,
        request_id: i64,
        status: u16,
        duration_ms: i64,
    ) -> Result<(), Error> {
        self.store
            .finish_log(request_id, i64::from(status), duration_ms)
            .await
    }

    pub async fn list_logs(&self, caller: &Caller, query: &LogQuery) -> Result<LogPage, Error> {
        let limit = match &query.limit {
            None => 20,
            Some(raw) => match raw.parse::<i64>() {
                Ok(n) if (1..=MAX_LOG_LIMIT).contains(&n) => n,
                _ => {
                    return Err(Error::validation(
                        "limit",
                        format!("must be an integer from 1 to {MAX_LOG_LIMIT}"),
                    ));
                }
            },
        };
        let before_id = match &query.cursor {
            None => None,
            Some(c) => Some(decode_cursor(c)?),
        };
        let method = match &query.method {
            None => None,
            Some(m) if LOG_METHODS.contains(&m.as_str()) => Some(m.clone()),
            Some(_) => {
                return Err(Error::validation(
                    "method",
                    format!("must be one of {}", LOG_METHODS.join(", ")),
                ));
            }
        };
        let status = match &query.status {
            None => None,
            Some(raw) => match raw.parse::<i64>() {
                Ok(s) if s == 0 || (100..=599).contains(&s) => Some(s),
                _ => {
                    return Err(Error::validation(
                        "status",
                        "must be an HTTP status (100 to 599) or 0 for an unfinished request",
                    ));
                }
            },
        };
        let mut entries = self
            .store
            .list_logs(
                caller.principal.tenant_id,
                &LogFilter {
                    before_id,
                    method,
                    status,
                    limit,
                },
            )
            .await?;
        let next_cursor = if entries.len() as i64 > limit {
            entries.truncate(limit as usize);
            entries.last().map(|e| encode_cursor(e.id))
        } else {
            None
        };
        Ok(LogPage {
            entries,
            next_cursor,
        })
    }

    pub async fn log(&self, caller: &Caller, id: i64) -> Result<LogRecord, Error> {
        self.store
            .log(caller.principal.tenant_id, id)
            .await?
            .ok_or_else(|| Error::NotFound { what: "log".into() })
    }

    // ---- emails ------------------------------------------------------------

    pub async fn email(&self, caller: &Caller, id: i64) -> Result<EmailView, Error> {
        let record = self
            .store
            .email(caller.principal.tenant_id, id)
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "email".into(),
            })?;
        Ok(EmailView { record })
    }

    /// `POST /emails`: validate, reserve, hand off, record, answer. The
    /// reservation and the email row are written before the handoff starts,
    /// so a crash can never lose an accepted email or let a retry send it
    /// again.
    pub async fn send_email(
        &self,
        caller: &Caller,
        key: Option<&IdempotencyKey>,
        body: &Value,
    ) -> Result<Sent, Error> {
        let email = model::validate_email(body)?;
        let now = self.clock.now_ms();
        let new = self.new_email(caller, &email);
        let id = new.id;
        let reservation = key.map(|k| self.reservation(caller, SEND_SCOPE, k, body, now));
        if let Some(replay) = self
            .reserve(reservation.as_ref(), std::slice::from_ref(&new), 1)
            .await?
        {
            return match replay {
                Outcome::Sent(sent) => Ok(sent),
                other => Err(replayed_error(other)),
            };
        }
        let key_ref = reservation.as_ref().map(key_ref);
        let message_id = new.message_id.clone();
        let result = self.hand_off(&email, id, &message_id).await;
        let now = self.clock.now_ms();
        let request_id = caller.request_id.to_string();
        match result {
            Handoff::Accepted => {
                let sent = Sent {
                    id: id.to_string(),
                    revision: 2,
                };
                let outcome =
                    serde_json::to_string(&Outcome::Sent(sent.clone())).unwrap_or_default();
                let stored = self
                    .store
                    .finish_handoff(
                        &[EmailUpdate {
                            id,
                            status: "sent",
                            detail: None,
                        }],
                        key_ref.as_ref().map(|k| (k, "completed", outcome.as_str())),
                        now,
                    )
                    .await;
                match stored {
                    Ok(true) => Ok(sent),
                    // Accepted upstream but not recorded: the sweeper will
                    // declare it unknown; the caller must not resend.
                    _ => Err(Error::HandoffUnknown {
                        email_id: id.to_string(),
                        detail: "the provider accepted it but the result could not be recorded"
                            .into(),
                    }),
                }
            }
            Handoff::Rejected(detail) => {
                let error = Error::HandoffFailed {
                    email_id: id.to_string(),
                    detail: detail.clone(),
                };
                let outcome = serde_json::to_string(&Outcome::Failed {
                    error: error.clone(),
                    request_id,
                })
                .unwrap_or_default();
                self.store
                    .finish_handoff(
                        &[EmailUpdate {
                            id,
                            status: "failed",
                            detail: Some(detail),
                        }],
                        key_ref.as_ref().map(|k| (k, "completed", outcome.as_str())),
                        now,
                    )
                    .await?;
                Err(error)
            }
            Handoff::Unknown(detail) => {
                let error = Error::HandoffUnknown {
                    email_id: id.to_string(),
                    detail: detail.clone(),
                };
                let outcome = serde_json::to_string(&Outcome::Failed {
                    error: error.clone(),
                    request_id,
                })
                .unwrap_or_default();
                // If this write fails the sweeper reaches the same state.
                let _ = self
                    .store
                    .finish_handoff(
                        &[EmailUpdate {
                            id,
                            status: "unknown",
                            detail: Some(detail),
                        }],
                        key_ref.as_ref().map(|k| (k, "unknown", outcome.as_str())),
                        now,
                    )
                    .await;
                Err(error)
            }
        }
    }

    /// `POST /emails/batch`: items are handed off in order; the first item
    /// that is not accepted stops the batch and later items are canceled.
    pub async fn send_batch(
        &self,
        caller: &Caller,
        key: Option<&IdempotencyKey>,
        body: &Value,
        validation: BatchValidation,
    ) -> Result<BatchSent, Error> {
        let Value::Array(items) = body else {
            return Err(Error::validation(
                "body",
                format!("must be a JSON array of 1 to {MAX_BATCH} emails"),
            ));
        };
        if items.is_empty() {
            return Err(Error::validation("body", "must contain at least 1 email"));
        }
        if items.len() > MAX_BATCH {
            return Err(Error::validation(
                "body",
                format!(
                    "must contain at most {MAX_BATCH} emails (got {})",
                    items.len()
                ),
            ));
        }
        let mut valid: Vec<(usize, ValidatedEmail)> = Vec::new();
        let mut errors = Vec::new();
        for (index, item) in items.iter().enumerate() {
            match model::validate_batch_item(item) {
                Ok(email) => valid.push((index, email)),
                Err(e) if validation == BatchValidation::Strict => return Err(e.at_index(index)),
                Err(e) => errors.push(ItemError {
                    index,
                    message: e.to_string(),
                }),
            }
        }
        let now = self.clock.now_ms();
        let news: Vec<NewEmail> = valid
            .iter()
            .map(|(_, e)| self.new_email(caller, e))
            .collect();
        let reservation = key.map(|k| self.reservation(caller, BATCH_SCOPE, k, body, now));
        if let Some(replay) = self
            .reserve(reservation.as_ref(), &news, news.len())
            .await?
        {
            return match replay {
                Outcome::BatchSent(sent) => Ok(sent),
                other => Err(replayed_error(other)),
            };
        }
        let key_ref = reservation.as_ref().map(key_ref);
        let request_id = caller.request_id.to_string();
        let mut sent_ids = Vec::new();
        for (position, ((index, email), new)) in valid.iter().zip(&news).enumerate() {
            let result = self.hand_off(email, new.id, &new.message_id).await;
            let now = self.clock.now_ms();
            let (status, detail, unknown) = match result {
                Handoff::Accepted => {
                    let recorded = self
                        .store
                        .finish_handoff(
                            &[EmailUpdate {
                                id: new.id,
                                status: "sent",
                                detail: None,
                            }],
                            None,
                            now,
                        )
                        .await;
                    if recorded.is_ok() {
                        sent_ids.push(new.id.to_string());
                        continue;
                    }
                    // Sent but not recorded: the sweeper will declare it
                    // unknown; stop here and say so.
                    (
                        "unknown",
                        "the provider accepted it but the result could not be recorded".to_string(),
                        true,
                    )
                }
                Handoff::Rejected(d) => ("failed", d, false),
                Handoff::Unknown(d) => ("unknown", d, true),
            };
            let mut updates = vec![EmailUpdate {
                id: new.id,
                status,
                detail: Some(detail.clone()),
            }];
            updates.extend(news[position + 1..].iter().map(|later| EmailUpdate {
                id: later.id,
                status: "canceled",
                detail: Some(format!(
                    "not sent: item {index} of the batch failed before it"
                )),
            }));
            let error = Error::BatchHandoffFailed {
                sent_ids: sent_ids.clone(),
                failed_index: *index,
                failed_email_id: new.id.to_string(),
                unknown,
                detail,
            };
            let outcome = serde_json::to_string(&Outcome::Failed {
                error: error.clone(),
                request_id: request_id.clone(),
            })
            .unwrap_or_default();
            let state = if unknown { "unknown" } else { "completed" };
            let _ = self
                .store
                .finish_handoff(
                    &updates,
                    key_ref.as_ref().map(|k| (k, state, outcome.as_str())),
                    now,
                )
                .await;
            return Err(error);
        }
        let result = BatchSent {
            ids: sent_ids,
            errors,
        };
        if let Some(k) = &key_ref {
            let outcome =
                serde_json::to_string(&Outcome::BatchSent(result.clone())).unwrap_or_default();
            self.store
                .finish_handoff(
                    &[],
                    Some((k, "completed", outcome.as_str())),
                    self.clock.now_ms(),
                )
                .await?;
        }
        Ok(result)
    }

    fn new_email(&self, caller: &Caller, email: &ValidatedEmail) -> NewEmail {
        let id = self.ids.next();
        NewEmail {
            id,
            tenant_id: caller.principal.tenant_id,
            api_key_id: caller.principal.api_key_id,
            from_addr: email.from.to_string(),
            to_addrs: serde_json::to_string(&email.payload.message.to).unwrap_or_default(),
            subject: email.payload.message.subject.clone(),
            payload: serde_json::to_string(&email.payload).unwrap_or_default(),
            message_id: transport::message_id_for(id, email),
        }
    }

    fn reservation(
        &self,
        caller: &Caller,
        scope: &str,
        key: &IdempotencyKey,
        body: &Value,
        now: i64,
    ) -> Reservation {
        Reservation {
            tenant_id: caller.principal.tenant_id,
            scope: scope.to_string(),
            key: key.0.clone(),
            body_hash: body_hash(body),
            replay_cutoff: now - self.settings.replay_window_ms,
        }
    }

    fn lease_ms(&self) -> i64 {
        self.settings.handoff_lease.as_millis() as i64 + LEASE_MARGIN_MS
    }

    /// Writes the emails and the reservation. `Some(outcome)` when the key
    /// was already completed (replay); an error when it is taken otherwise.
    async fn reserve(
        &self,
        reservation: Option<&Reservation>,
        emails: &[NewEmail],
        count: usize,
    ) -> Result<Option<Outcome>, Error> {
        for attempt in 0..2 {
            let now = self.clock.now_ms();
            let lease_until = now + self.lease_ms() * count.max(1) as i64;
            match self
                .store
                .reserve_and_store(reservation, emails, now, lease_until)
                .await?
            {
                Reserved::Fresh => return Ok(None),
                Reserved::Taken(record) => {
                    let body_hash = reservation
                        .map(|r| r.body_hash.as_str())
                        .unwrap_or_default();
                    match judge(&record, body_hash, now)? {
                        Judgement::Replay(outcome) => return Ok(Some(outcome)),
                        Judgement::LeaseExpired if attempt == 0 => {
                            self.store.expire_abandoned_handoffs(now).await?;
                        }
                        Judgement::LeaseExpired => return Err(Error::IdempotencyInFlight),
                    }
                }
            }
        }
        Err(Error::IdempotencyInFlight)
    }

    async fn hand_off(&self, email: &ValidatedEmail, id: i64, message_id: &str) -> Handoff {
        let envelope = transport::Envelope {
            email_id: id,
            message_id,
        };
        match tokio::time::timeout(
            self.settings.handoff_lease,
            self.transport.handoff(email, &envelope),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Handoff::Unknown(format!(
                "the handoff did not finish within {:?}",
                self.settings.handoff_lease
            )),
        }
    }

    /// Declares abandoned handoffs `unknown` and drops old rate windows.
    pub async fn sweep(&self) -> Result<u64, Error> {
        let now = self.clock.now_ms();
        let swept = self.store.expire_abandoned_handoffs(now).await?;
        self.store
            .prune_rate_windows(now - 2 * self.settings.rate_window_ms)
            .await?;
        Ok(swept)
    }

    // ---- operator actions --------------------------------------------------

    pub async fn create_tenant(&self, name: &str, rate_limit: i64) -> Result<TenantRecord, Error> {
        if name.trim().is_empty() || name.len() > 200 {
            return Err(Error::validation("name", "must be 1 to 200 characters"));
        }
        if self.store.find_tenant(name).await?.is_some() {
            return Err(Error::validation(
                "name",
                format!("tenant `{name}` already exists"),
            ));
        }
        let tenant = TenantRecord {
            id: self.ids.next(),
            name: name.to_string(),
            rate_limit_per_minute: rate_limit,
            created_at: self.clock.now_ms(),
        };
        self.store.create_tenant(&tenant).await?;
        Ok(tenant)
    }

    /// Creates a key for the tenant (created if missing). Returns the record
    /// and the secret, which is shown once and only its hash is stored.
    pub async fn create_api_key(
        &self,
        tenant_name: &str,
        key_name: &str,
        permission: Permission,
    ) -> Result<(ApiKeyRecord, String), Error> {
        let tenant = match self.store.find_tenant(tenant_name).await? {
            Some(t) => t,
            None => self.create_tenant(tenant_name, DEFAULT_RATE_LIMIT).await?,
        };
        let secret = format!(
            "{KEY_PREFIX}{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let record = ApiKeyRecord {
            id: self.ids.next(),
            tenant_id: tenant.id,
            name: key_name.to_string(),
            key_prefix: secret[..KEY_PREFIX.len() + 6].to_string(),
            permission: permission.as_str().to_string(),
            created_at: self.clock.now_ms(),
            revoked_at: None,
        };
        self.store
            .create_api_key(&record, &hash_key(&secret))
            .await?;
        Ok((record, secret))
    }

    pub async fn revoke_api_key(&self, id: i64) -> Result<(), Error> {
        if self.store.revoke_api_key(id, self.clock.now_ms()).await? {
            Ok(())
        } else {
            Err(Error::NotFound {
                what: format!("active API key {id}"),
            })
        }
    }

    pub async fn reconcile(&self, email_id: i64, sent: bool) -> Result<(), Error> {
        if self
            .store
            .reconcile(email_id, sent, self.clock.now_ms())
            .await?
        {
            Ok(())
        } else {
            Err(Error::NotFound {
                what: format!("email {email_id} with status unknown"),
            })
        }
    }
}

enum Judgement {
    Replay(Outcome),
    LeaseExpired,
}

fn key_ref(r: &Reservation) -> KeyRef {
    KeyRef {
        tenant_id: r.tenant_id,
        scope: r.scope.clone(),
        key: r.key.clone(),
    }
}

/// Decides what a request meets when its key is already taken.
fn judge(record: &KeyRecord, body_hash: &str, now: i64) -> Result<Judgement, Error> {
    if record.body_hash != body_hash {
        return Err(Error::IdempotencyBodyMismatch);
    }
    let outcome: Option<Outcome> = record
        .outcome
        .as_deref()
        .and_then(|o| serde_json::from_str(o).ok());
    let unresolved_email = || {
        let id = match &outcome {
            Some(Outcome::Failed {
                error: Error::HandoffUnknown { email_id, .. },
                ..
            }) => email_id.clone(),
            Some(Outcome::Failed {
                error:
                    Error::BatchHandoffFailed {
                        failed_email_id, ..
                    },
                ..
            }) => failed_email_id.clone(),
            _ => record
                .email_ids
                .first()
                .map(ToString::to_string)
                .unwrap_or_default(),
        };
        Error::IdempotencyUnresolved { email_id: id }
    };
    match record.state.as_str() {
        "in_flight" if record.lease_until < now => Ok(Judgement::LeaseExpired),
        "in_flight" => Err(Error::IdempotencyInFlight),
        "unknown" => Err(unresolved_email()),
        _ => match outcome {
            Some(Outcome::Abandoned) | None => Err(unresolved_email()),
            Some(o) => Ok(Judgement::Replay(o)),
        },
    }
}

/// A replayed outcome that is not the success shape of its endpoint. Keys
/// are scoped by path, so a success is always the endpoint's own kind and
/// only recorded failures arrive here.
fn replayed_error(outcome: Outcome) -> Error {
    match outcome {
        Outcome::Failed { error, request_id } => Error::Replayed {
            error: Box::new(error),
            request_id,
        },
        _ => Error::IdempotencyBodyMismatch,
    }
}

fn encode_cursor(id: i64) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("logs:{id}"))
}

fn decode_cursor(cursor: &str) -> Result<i64, Error> {
    if cursor.chars().count() > MAX_LOG_CURSOR_CHARS {
        return Err(Error::validation(
            "cursor",
            format!("must be at most {MAX_LOG_CURSOR_CHARS} characters"),
        ));
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.strip_prefix("logs:").and_then(|n| n.parse().ok()))
        .ok_or_else(|| {
            Error::validation("cursor", "is not a nextCursor value returned by GET /logs")
        })
}

//! What the service hands the store to write, and the idempotency record it
//! reads back.

use crate::model::{EmailPayload, EmailStatus, JsonText, KeyState};

/// An email to store: as `sending` before its handoff, or as `scheduled`
/// when it has a `scheduled_at`.
#[derive(Debug, Clone)]
pub struct NewEmail {
    pub id: i64,
    /// The sending domain (lower-case IDNA ASCII), by which analytics count.
    pub from_domain: String,
    pub tenant_id: i64,
    pub api_key_id: i64,
    pub from_addr: String,
    pub to_addrs: String,
    pub subject: String,
    pub payload: String,
    pub message_id: String,
    /// Unix ms; `Some` stores the email as `scheduled`.
    pub scheduled_at: Option<i64>,
    pub batch_id: Option<i64>,
    /// The request that accepted it (its log lines and those of its later
    /// handoff and webhook deliveries carry this id); `None` for an email
    /// no request wrote.
    pub request_id: Option<i64>,
}

/// An email the scheduler claimed for its handoff.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedEmail {
    pub id: i64,
    pub tenant_id: i64,
    pub payload: JsonText<EmailPayload>,
    pub message_id: String,
    pub scheduled_at: Option<i64>,
    /// The request that accepted it.
    pub request_id: Option<i64>,
}

/// Which emails a page of `GET /emails` holds.
#[derive(Debug, Clone, Default)]
pub struct EmailFilter {
    pub before_id: Option<i64>,
    pub status: Option<EmailStatus>,
    pub limit: i64,
}

/// How a conditional change of a scheduled email ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// It took effect; the email's new revision.
    Done(i64),
    /// Nothing changed: the email is not `scheduled`, its revision is not
    /// the expected one, or it does not exist (read it to say which).
    Refused,
}

/// A request to reserve an idempotency key.
#[derive(Debug, Clone)]
pub struct Reservation {
    pub tenant_id: i64,
    pub scope: String,
    pub key: String,
    pub body_hash: String,
    /// A completed record older than this (completion time) may be replaced.
    pub replay_cutoff: i64,
}

/// What is stored under an idempotency key.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeyRecord {
    pub body_hash: String,
    pub state: KeyState,
    pub email_ids: JsonText<Vec<i64>>,
    /// The recorded answer (JSON), once there is one.
    pub outcome: Option<String>,
    pub lease_until: i64,
}

/// What one sweep of abandoned handoffs settled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Scheduled emails whose handoff never began, back to `scheduled`.
    pub rescheduled: u64,
    /// Immediate emails whose handoff never began: `failed`, not sent.
    pub not_sent: u64,
    /// Emails whose handoff began and did not finish: `unknown`.
    pub unknown: u64,
    /// Keys none of whose emails began: released for the next request.
    pub keys_released: u64,
    /// Keys with an email that began: `unknown`.
    pub keys_unknown: u64,
}

impl Swept {
    /// Emails settled.
    pub fn emails(&self) -> u64 {
        self.rescheduled + self.not_sent + self.unknown
    }
}

#[derive(Debug, Clone)]
pub enum Reserved {
    /// The emails are stored as `sending` and the key (if any) is ours.
    Fresh,
    /// Someone already holds the key.
    Taken(KeyRecord),
}

/// Final state of one email after its handoff attempt.
#[derive(Debug, Clone)]
pub struct EmailUpdate {
    pub id: i64,
    pub status: EmailStatus,
    pub detail: Option<String>,
}

/// The key a request reserved.
#[derive(Debug, Clone)]
pub struct KeyRef {
    pub tenant_id: i64,
    pub scope: String,
    pub key: String,
}

/// What `Store::begin_handoff_if_clear` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScreenedStart {
    /// No recipient is on the list; whether the handoff was marked begun.
    Began(bool),
    /// These recipients' keys are on the list; nothing was written.
    Suppressed(Vec<String>),
}

/// The request log row written before a request's handler runs.
#[derive(Debug, Clone)]
pub struct NewLog {
    pub id: i64,
    pub tenant_id: Option<i64>,
    pub api_key_id: Option<i64>,
    pub method: String,
    pub path: String,
    pub user_agent: Option<String>,
    pub created_at: i64,
}

/// How a starting request's unit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// Written; the caller's count in its window so far (none for an
    /// anonymous request).
    Counted(Option<i64>),
    /// The principal to re-check no longer holds (key revoked, limit
    /// changed): nothing was written.
    PrincipalChanged,
}

/// One request counted in a tenant's rate-limit window.
#[derive(Debug, Clone, Copy)]
pub struct RateHit {
    pub tenant_id: i64,
    pub window_start: i64,
}

#[derive(Debug, Clone, Default)]
pub struct LogFilter {
    pub before_id: Option<i64>,
    pub method: Option<String>,
    /// `None`: finished requests only; `Some(0)`: unfinished ones.
    pub status: Option<i64>,
    /// The listing request itself, never in its own page.
    pub except_id: i64,
    pub limit: i64,
}

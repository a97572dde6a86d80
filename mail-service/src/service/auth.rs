//! How a request begins: authentication, its request-log row and its count
//! in the tenant's shared rate limit.

use std::collections::HashMap;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::model::Principal;
use crate::store::{NewLog, RateHit, Started};

use super::MailService;

/// At most this many principals are remembered; the memory is cleared when
/// it is full.
const REMEMBERED_PRINCIPALS: usize = 10_000;

/// Prefix of every API key.
pub const KEY_PREFIX: &str = "ms_";

/// The rate-limit state after counting a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateStatus {
    pub limit: i64,
    pub remaining: i64,
    pub reset_secs: i64,
}

pub fn hash_key(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// What the HTTP layer knows of a request before it runs.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    pub request_id: i64,
    /// The bearer token, if the request carries one.
    pub token: Option<&'a str>,
    pub method: &'a str,
    pub path: &'a str,
    pub user_agent: Option<&'a str>,
}

/// How a request began.
#[derive(Debug, Clone)]
pub struct Begun {
    /// Who is calling, or why nobody is.
    pub caller: Result<Principal, Error>,
    /// The caller's rate-limit state, or the error to answer with instead
    /// of running the request (429, 503).
    pub rate: Result<Option<RateStatus>, Error>,
}

/// Principals read from the database by earlier requests, by the hash of
/// their key. Never trusted alone: a request that finds its principal here
/// writes its log row and rate count only if the principal still holds in
/// that same unit, and reads it afresh otherwise. Correctness never depends
/// on this memory; it saves a read per request.
#[derive(Debug, Default)]
pub(super) struct RememberedPrincipals(Mutex<HashMap<String, Principal>>);

impl RememberedPrincipals {
    fn get(&self, key_hash: &str) -> Option<Principal> {
        self.lock().get(key_hash).cloned()
    }

    fn remember(&self, key_hash: String, principal: Principal) {
        let mut map = self.lock();
        if map.len() >= REMEMBERED_PRINCIPALS {
            map.clear();
        }
        map.insert(key_hash, principal);
    }

    fn forget(&self, key_hash: &str) {
        self.lock().remove(key_hash);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Principal>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl MailService {
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

    /// A request begins: its caller is authenticated and its log row (status
    /// 0 until it is answered) is written together with, for a caller, its
    /// count in the tenant's shared rate window. Past the limit the request
    /// still counts and is logged, and `rate` holds the 429.
    pub async fn begin_request(&self, incoming: &Incoming<'_>) -> Begun {
        let now = self.clock.now_ms();
        let key_hash = match incoming.token {
            None => {
                return self
                    .begin_anonymous(incoming, now, Error::MissingApiKey)
                    .await;
            }
            Some(token) if !token.starts_with(KEY_PREFIX) => {
                return self
                    .begin_anonymous(incoming, now, Error::InvalidApiKey)
                    .await;
            }
            Some(token) => hash_key(token),
        };
        if let Some(remembered) = self.principals.get(&key_hash) {
            match self.count_started(incoming, now, &remembered, true).await {
                Ok(Some(rate)) => {
                    return Begun {
                        caller: Ok(remembered),
                        rate,
                    };
                }
                Ok(None) => self.principals.forget(&key_hash),
                Err(e) => {
                    return Begun {
                        caller: Ok(remembered),
                        rate: Err(e),
                    };
                }
            }
        }
        match self.store.principal_by_key_hash(&key_hash).await {
            Ok(Some(principal)) => {
                self.principals.remember(key_hash, principal.clone());
                let rate = match self.count_started(incoming, now, &principal, false).await {
                    Ok(Some(rate)) => rate,
                    Ok(None) => Err(Error::InvalidApiKey),
                    Err(e) => Err(e),
                };
                Begun {
                    caller: Ok(principal),
                    rate,
                }
            }
            Ok(None) => {
                self.begin_anonymous(incoming, now, Error::InvalidApiKey)
                    .await
            }
            Err(e) => self.begin_anonymous(incoming, now, e).await,
        }
    }

    /// Logs a request nobody could be authenticated for; a log row that
    /// cannot be written does not stop it (it is refused anyway).
    async fn begin_anonymous(&self, incoming: &Incoming<'_>, now: i64, why: Error) -> Begun {
        if let Err(e) = self
            .store
            .request_started(&new_log(incoming, None, now), None, None)
            .await
        {
            tracing::warn!(error = %e, request_id = incoming.request_id, "request log not written");
        }
        Begun {
            caller: Err(why),
            rate: Ok(None),
        }
    }

    /// Writes the log row and the rate count of `principal`'s request;
    /// `None` when `recheck` found that the principal no longer holds.
    async fn count_started(
        &self,
        incoming: &Incoming<'_>,
        now: i64,
        principal: &Principal,
        recheck: bool,
    ) -> Result<Option<Result<Option<RateStatus>, Error>>, Error> {
        let hit = self.rate_hit(principal, now);
        let started = self
            .store
            .request_started(
                &new_log(incoming, Some(principal), now),
                Some(hit),
                recheck.then_some(principal),
            )
            .await?;
        Ok(match started {
            Started::PrincipalChanged => None,
            Started::Counted(count) => Some(
                self.rate_status(principal, hit, count.unwrap_or(0), now)
                    .map(Some),
            ),
        })
    }

    /// The shared window a request at `now` counts in.
    pub(super) fn rate_hit(&self, principal: &Principal, now: i64) -> RateHit {
        RateHit {
            tenant_id: principal.tenant_id,
            window_start: now - now.rem_euclid(self.settings.rate_window_ms),
        }
    }

    /// The rate-limit state once `count` requests were counted in `hit`'s
    /// window; an error past the tenant's limit.
    pub(super) fn rate_status(
        &self,
        principal: &Principal,
        hit: RateHit,
        count: i64,
        now: i64,
    ) -> Result<RateStatus, Error> {
        let limit = principal.rate_limit_per_minute;
        let reset_secs = ((hit.window_start + self.settings.rate_window_ms - now) + 999) / 1000;
        if count > limit {
            return Err(Error::RateLimited {
                limit,
                reset_secs,
                remaining: 0,
            });
        }
        Ok(RateStatus {
            limit,
            remaining: limit - count,
            reset_secs,
        })
    }
}

fn new_log(incoming: &Incoming<'_>, principal: Option<&Principal>, now: i64) -> NewLog {
    NewLog {
        id: incoming.request_id,
        tenant_id: principal.map(|p| p.tenant_id),
        api_key_id: principal.map(|p| p.api_key_id),
        method: incoming.method.to_string(),
        path: incoming.path.chars().take(2048).collect(),
        user_agent: incoming.user_agent.map(|u| u.chars().take(512).collect()),
        created_at: now,
    }
}

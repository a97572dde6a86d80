//! Emails, their idempotency reservations, handoff outcomes and scheduling.

use super::*;

/// The columns of `StoredEmail`, then the rest of the query.
macro_rules! select_email {
    ($rest:literal) => {
        concat!(
            "SELECT id, status, revision, payload, message_id, handoff_detail, scheduled_at, batch_id, suppressed_recipients, created_at, updated_at, \
             (SELECT type FROM email_events v WHERE v.email_id = emails.id ORDER BY v.id DESC LIMIT 1) AS last_feedback FROM emails ",
            $rest
        )
    };
}

/// An email's status, as a condition beside `id = $n`. Written as `IS
/// TRUE` so that PostgreSQL finds the row by its primary key: with
/// statistics that show few rows in a passing status (`sending`,
/// `unknown`: always, in a steady state) a plain `status = 'sending'` makes
/// it scan the `(status, lease_until)` index instead, whose dead entries
/// grow with every send until the next vacuum (the handoff mark cost 74 to
/// 204 buffer reads instead of 6).
macro_rules! status_is {
    ($status:literal) => {
        concat!("(status = '", $status, "') IS TRUE")
    };
}
pub(super) use status_is;

/// The mark that an email's handoff began (time `$now`, lease `$lease`,
/// email `$id`), taken only by a `sending` row.
macro_rules! mark_handoff_begun {
    ($now:literal, $lease:literal, $id:literal) => {
        concat!(
            "UPDATE emails SET handoff_began_at = ",
            $now,
            ", lease_until = ",
            $lease,
            " WHERE id = ",
            $id,
            " AND ",
            $crate::store::emails::status_is!("sending")
        )
    };
}
pub(super) use mark_handoff_begun;

/// The lease `$lease` of an in-flight key (`$tenant`, `$scope`, `$key`),
/// renewed with its email's when the handoff begins.
macro_rules! renew_key_lease {
    ($lease:literal, $tenant:literal, $scope:literal, $key:literal) => {
        concat!(
            "UPDATE idempotency_keys SET lease_until = ",
            $lease,
            " WHERE tenant_id = ",
            $tenant,
            " AND scope = ",
            $scope,
            " AND idem_key = ",
            $key,
            " AND state = 'in_flight'"
        )
    };
}
pub(super) use renew_key_lease;

/// An email's handoff result ($1 status, $2 detail, $3 now, $4 id), taken
/// only by a `sending` row or one the sweeper declared `unknown`.
macro_rules! update_email_outcome {
    () => {
        "UPDATE emails SET status = $1, handoff_detail = $2, revision = revision + 1, lease_until = NULL, updated_at = $3 \
         WHERE id = $4 AND status IN ('sending', 'unknown')"
    };
}

/// PostgreSQL: the emails of a request from arrays ($3..$12, their
/// sending domains in `$domains` and accepting request in `$requests`) at time $2: `scheduled` when they have a
/// `scheduled_at`, else `sending` with lease $1, their handoff begun at $2
/// when `$begun` is 1.
macro_rules! pg_insert_emails {
    ($domains:literal, $requests:literal, $begun:literal) => {
        concat!(
            "INSERT INTO emails (id, tenant_id, api_key_id, status, revision, from_addr, to_addrs, subject, payload, message_id, scheduled_at, batch_id, lease_until, created_at, updated_at, from_domain, request_id, handoff_began_at) \
         SELECT u.id, u.tenant_id, u.api_key_id, CASE WHEN u.scheduled_at IS NULL THEN 'sending' ELSE 'scheduled' END, 1, \
           u.from_addr, u.to_addrs, u.subject, u.payload, u.message_id, u.scheduled_at, u.batch_id, \
           CASE WHEN u.scheduled_at IS NULL THEN $1::bigint END, $2, $2, u.from_domain, u.request_id, \
           CASE WHEN u.scheduled_at IS NULL AND ",
            $begun,
            "::bigint = 1 THEN $2 END \
         FROM unnest($3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::bigint[], $12::bigint[], ",
            $domains,
            "::text[], ",
            $requests,
            "::bigint[]) \
         AS u(id, tenant_id, api_key_id, from_addr, to_addrs, subject, payload, message_id, scheduled_at, batch_id, from_domain, request_id)"
        )
    };
}

/// Reserves key ($1 tenant, $2 scope, $3 key) for body $4 in state $5 with
/// emails $6 and answer $7 (NULL while in flight), lease $8 at time $9,
/// completed at $10 (NULL while in flight), unless someone holds it: a
/// completed record older than $11 is taken over. Changes no row when the
/// key is held. (SQLite numbers `$n` by first appearance, so they appear in
/// order.)
const RESERVE_KEY: &str = "INSERT INTO idempotency_keys (tenant_id, scope, idem_key, body_hash, state, email_ids, outcome, lease_until, created_at, completed_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
     ON CONFLICT (tenant_id, scope, idem_key) DO UPDATE SET \
       body_hash = excluded.body_hash, state = excluded.state, email_ids = excluded.email_ids, \
       outcome = excluded.outcome, lease_until = excluded.lease_until, created_at = excluded.created_at, \
       completed_at = excluded.completed_at \
     WHERE idempotency_keys.state = 'completed' AND idempotency_keys.completed_at < $11";
/// One email ($1..$11) in status $4 with lease $12 at time $13, domain $14,
/// accepted by request $15, its handoff begun at $16 (NULL: not yet).
const INSERT_EMAIL: &str = "INSERT INTO emails (id, tenant_id, api_key_id, status, revision, from_addr, to_addrs, subject, payload, message_id, scheduled_at, batch_id, lease_until, created_at, updated_at, from_domain, request_id, handoff_began_at) \
     VALUES ($1, $2, $3, $4, 1, $5, $6, $7, $8, $9, $10, $11, $12, $13, $13, $14, $15, $16)";
const PG_INSERT_EMAILS: &str = pg_insert_emails!("$13", "$14", "$15");
/// PostgreSQL: `RESERVE_KEY` (key $13..$15, body $16, email ids $17, replay
/// cutoff $18, state $19, answer $20 completed at $21, with the emails'
/// lease $1 and time $2, domains $22, requests $23 and begun $24) and the emails in one statement; the emails are
/// written only when the key was reserved. Yields 1 when reserved, 0 when
/// the key is held.
const PG_RESERVE_AND_INSERT_EMAILS: &str = concat!(
    "WITH k AS (INSERT INTO idempotency_keys (tenant_id, scope, idem_key, body_hash, state, email_ids, outcome, lease_until, created_at, completed_at) \
     VALUES ($13, $14, $15, $16, $19, $17, $20, $1, $2, $21) \
     ON CONFLICT (tenant_id, scope, idem_key) DO UPDATE SET \
       body_hash = excluded.body_hash, state = excluded.state, email_ids = excluded.email_ids, \
       outcome = excluded.outcome, lease_until = excluded.lease_until, created_at = excluded.created_at, \
       completed_at = excluded.completed_at \
     WHERE idempotency_keys.state = 'completed' AND idempotency_keys.completed_at < $18 RETURNING 1), \
     e AS (",
    pg_insert_emails!("$22", "$23", "$24"),
    " WHERE EXISTS (SELECT 1 FROM k)) SELECT count(*) FROM k"
);

const UPDATE_EMAIL_OUTCOME: &str = update_email_outcome!();
/// The key's state $1 and recorded answer $2 at $3, for key ($4, $5, $6).
const UPDATE_KEY_OUTCOME: &str = "UPDATE idempotency_keys SET state = $1, outcome = $2, completed_at = $3 \
     WHERE tenant_id = $4 AND scope = $5 AND idem_key = $6 AND state IN ('in_flight', 'unknown')";
/// PostgreSQL: one email's result and its key's ($5..$9) in one statement;
/// the key moves only when the email did. Yields the emails changed (0 or 1).
const PG_UPDATE_EMAIL_AND_KEY_OUTCOME: &str = concat!(
    "WITH e AS (",
    update_email_outcome!(),
    " RETURNING id), k AS (UPDATE idempotency_keys SET state = $5, outcome = $6, completed_at = $3 \
     WHERE tenant_id = $7 AND scope = $8 AND idem_key = $9 AND state IN ('in_flight', 'unknown') \
     AND EXISTS (SELECT 1 FROM e)) SELECT count(*) FROM e"
);

/// Completes the `unknown` keys whose JSON list of email ids (`[1,2]`, as
/// written by `email_ids`) holds `$2`: the list is matched as `,1,2,` against
/// `%,$2,%`, so one id never matches inside a longer one.
/// `completed_at` of a key the sweeper released (none of its emails was
/// handed off): older than any replay window, so the next request with the
/// key takes it over (`RESERVE_KEY`) and sends anew.
const RELEASED_AT: i64 = i64::MIN;

const RELEASE_KEYS_OF_EMAIL: &str = "UPDATE idempotency_keys SET state = 'completed', completed_at = $1 \
     WHERE state = 'unknown' AND (',' || substr(email_ids, 2, length(email_ids) - 2) || ',') LIKE ('%,' || $2 || ',%')";

impl Store {
    /// Stores the emails (as `sending`, or `scheduled` when they have a
    /// `scheduled_at`) and, when a reservation is given, reserves its key,
    /// in one unit: either the key is ours and the emails exist, or nothing
    /// was written. The key is in flight until `finish_handoff`, or, with
    /// `answered`, completed at once with that recorded answer (an answer
    /// that needs no handoff: scheduled emails). A completed record older
    /// than the replay window is taken over. With `begun`, the emails that
    /// are not scheduled are stored with their handoff marked as begun at
    /// `now`, as `begin_handoff` would mark them in a unit of its own: for a
    /// send whose recipients were screened clear before, handed to the
    /// transport right after.
    pub async fn reserve_and_store(
        &self,
        reservation: Option<&Reservation>,
        emails: &[NewEmail],
        (now, lease_until): (i64, i64),
        answered: Option<&str>,
        begun: bool,
    ) -> Result<Reserved, Error> {
        let (state, completed_at) = match answered {
            Some(_) => (KeyState::Completed, Some(now)),
            None => (KeyState::InFlight, None),
        };
        let answered = answered.map(str::to_string);
        let unit = if self.is_postgres() {
            Self::pg_reserve(
                reservation,
                emails,
                (now, lease_until, begun),
                (state, &answered, completed_at),
            )
        } else {
            let key = reservation.map(|r| {
                Step::rows(
                    RESERVE_KEY,
                    params![
                        r.tenant_id,
                        &r.scope,
                        &r.key,
                        &r.body_hash,
                        state.as_str(),
                        email_ids(emails),
                        &answered,
                        lease_until,
                        now,
                        completed_at,
                        r.replay_cutoff
                    ],
                )
                .stop_if_zero()
            });
            let rows = emails.iter().map(|e| {
                let (status, lease, began_at) = match e.scheduled_at {
                    Some(_) => (EmailStatus::Scheduled, None, None),
                    None => (
                        EmailStatus::Sending,
                        Some(lease_until),
                        begun.then_some(now),
                    ),
                };
                Step::rows(
                    INSERT_EMAIL,
                    params![
                        e.id,
                        e.tenant_id,
                        e.api_key_id,
                        status.as_str(),
                        &e.from_addr,
                        &e.to_addrs,
                        &e.subject,
                        &e.payload,
                        &e.message_id,
                        e.scheduled_at,
                        e.batch_id,
                        lease,
                        now,
                        &e.from_domain,
                        e.request_id,
                        began_at
                    ],
                )
            });
            Unit::new(key.into_iter().chain(rows).collect())
        };
        match (self.write(unit).await?, reservation) {
            (Ran::Stopped(_), Some(r)) => self.taken(r).await,
            _ => Ok(Reserved::Fresh),
        }
    }

    /// PostgreSQL's `reserve_and_store`: one statement.
    fn pg_reserve(
        reservation: Option<&Reservation>,
        emails: &[NewEmail],
        (now, lease_until, begun): (i64, i64, bool),
        (state, answered, completed_at): (KeyState, &Option<String>, Option<i64>),
    ) -> Unit {
        let column = |f: fn(&NewEmail) -> &String| -> Vec<String> {
            emails.iter().map(|e| f(e).clone()).collect()
        };
        let mut values = params![
            lease_until,
            now,
            emails.iter().map(|e| e.id).collect::<Vec<_>>(),
            emails.iter().map(|e| e.tenant_id).collect::<Vec<_>>(),
            emails.iter().map(|e| e.api_key_id).collect::<Vec<_>>(),
            column(|e| &e.from_addr),
            column(|e| &e.to_addrs),
            column(|e| &e.subject),
            column(|e| &e.payload),
            column(|e| &e.message_id),
            emails.iter().map(|e| e.scheduled_at).collect::<Vec<_>>(),
            emails.iter().map(|e| e.batch_id).collect::<Vec<_>>()
        ];
        let domains = params![
            column(|e| &e.from_domain),
            emails.iter().map(|e| e.request_id).collect::<Vec<_>>(),
            i64::from(begun)
        ];
        match reservation {
            None => {
                values.extend(domains);
                Unit::one(Step::rows(PG_INSERT_EMAILS, values))
            }
            Some(r) => {
                values.extend(params![
                    r.tenant_id,
                    &r.scope,
                    &r.key,
                    &r.body_hash,
                    email_ids(emails),
                    r.replay_cutoff,
                    state.as_str(),
                    answered,
                    completed_at
                ]);
                values.extend(domains);
                Unit::one(Step::value(PG_RESERVE_AND_INSERT_EMAILS, values).stop_if_zero())
            }
        }
    }

    /// What holds a key that could not be reserved. Keys are never deleted,
    /// so the row exists; it may have moved on since, which is as if this
    /// request had come a moment later.
    async fn taken(&self, r: &Reservation) -> Result<Reserved, Error> {
        let record: Option<KeyRecord> = on_db!(self, pool => {
            sqlx::query_as(
                "SELECT body_hash, state, email_ids, outcome, lease_until FROM idempotency_keys \
                 WHERE tenant_id = $1 AND scope = $2 AND idem_key = $3",
            )
            .bind(r.tenant_id)
            .bind(&r.scope)
            .bind(&r.key)
            .fetch_optional(pool)
            .await?
        });
        record
            .map(Reserved::Taken)
            .ok_or_else(|| Error::StoredDataInvalid {
                detail: format!(
                    "idempotency key `{}` refused a reservation but is not stored",
                    r.key
                ),
            })
    }

    /// Records the result of a handoff: the emails' final states and, when a
    /// key was reserved, its state (`completed` or `unknown`) and the outcome
    /// to replay, in one unit. A row the sweeper already declared `unknown`
    /// takes the definite result; anything else (an operator's
    /// reconciliation) is left alone, nothing is written and false is
    /// returned.
    pub async fn finish_handoff(
        &self,
        updates: &[EmailUpdate],
        key: Option<(&KeyRef, KeyState, &str)>,
        now: i64,
    ) -> Result<bool, Error> {
        let unit = match (updates, key) {
            ([u], Some((k, state, outcome))) if self.is_postgres() => Unit::one(
                Step::value(
                    PG_UPDATE_EMAIL_AND_KEY_OUTCOME,
                    params![
                        u.status.as_str(),
                        &u.detail,
                        now,
                        u.id,
                        state.as_str(),
                        outcome,
                        k.tenant_id,
                        &k.scope,
                        &k.key
                    ],
                )
                .abort_if_zero(),
            ),
            _ => Unit::new(
                updates
                    .iter()
                    .map(|u| {
                        Step::rows(
                            UPDATE_EMAIL_OUTCOME,
                            params![u.status.as_str(), &u.detail, now, u.id],
                        )
                        .abort_if_zero()
                    })
                    .chain(key.map(|(k, state, outcome)| {
                        Step::rows(
                            UPDATE_KEY_OUTCOME,
                            params![state.as_str(), outcome, now, k.tenant_id, &k.scope, &k.key],
                        )
                    }))
                    .collect(),
            ),
        };
        Ok(self.write(unit).await? != Ran::RolledBack)
    }

    /// Marks email `id`'s handoff as begun at `now`, just before the
    /// transport is asked for a connection, and renews its lease (and its
    /// key's, when it has one) to `lease_until`: a batch's key is held one
    /// handoff past its latest begun item, not the sum of its items'
    /// budgets. False when the email is no longer `sending` (the sweeper
    /// settled it): it must not be handed off.
    pub async fn begin_handoff(
        &self,
        id: i64,
        key: Option<&KeyRef>,
        now: i64,
        lease_until: i64,
    ) -> Result<bool, Error> {
        let email = Step::rows(
            mark_handoff_begun!("$1", "$2", "$3"),
            params![now, lease_until, id],
        )
        .abort_if_zero();
        let key = key.map(|k| {
            Step::rows(
                renew_key_lease!("$1", "$2", "$3", "$4"),
                params![lease_until, k.tenant_id, &k.scope, &k.key],
            )
        });
        let unit = Unit::new(std::iter::once(email).chain(key).collect());
        Ok(self.write(unit).await? != Ran::RolledBack)
    }

    /// Settles every email whose handoff lease ran out while it was still
    /// `sending` (its node died or stalled), and the keys that reserved
    /// them. Nothing is resent:
    /// - an email whose handoff never began (no `handoff_began_at`) was
    ///   never offered to the relay: a scheduled one goes back to
    ///   `scheduled` for any node to claim again, an immediate one is
    ///   `failed` (not sent);
    /// - one whose handoff began may have been sent: `unknown`;
    /// - a key none of whose emails began is released (`completed`, taken
    ///   over by the next request with it, `released`), any other key is
    ///   `unknown` with `outcome`.
    pub async fn expire_abandoned_handoffs(
        &self,
        now: i64,
        outcome: &str,
        released: &str,
    ) -> Result<Swept, Error> {
        let ran = self
            .write(Unit::new(vec![
                Step::rows(
                    "UPDATE emails SET status = 'scheduled', claim = NULL, lease_until = NULL, revision = revision + 1, updated_at = $1 \
                     WHERE status = 'sending' AND lease_until < $1 AND handoff_began_at IS NULL AND scheduled_at IS NOT NULL",
                    params![now],
                ),
                Step::rows(
                    "UPDATE emails SET status = 'failed', revision = revision + 1, lease_until = NULL, updated_at = $1, \
                     handoff_detail = 'not sent: its node stopped before the handoff began' \
                     WHERE status = 'sending' AND lease_until < $1 AND handoff_began_at IS NULL",
                    params![now],
                ),
                Step::rows(
                    "UPDATE emails SET status = 'unknown', revision = revision + 1, lease_until = NULL, updated_at = $1, \
                     handoff_detail = 'the handoff did not finish before its lease ran out (node stopped or stalled)' \
                     WHERE status = 'sending' AND lease_until < $1",
                    params![now],
                ),
            ]))
            .await?;
        let yields = match ran {
            Ran::Committed(yields) => yields,
            _ => Vec::new(),
        };
        let mut swept = Swept {
            rescheduled: yields.first().copied().unwrap_or(0) as u64,
            not_sent: yields.get(1).copied().unwrap_or(0) as u64,
            unknown: yields.get(2).copied().unwrap_or(0) as u64,
            ..Swept::default()
        };
        // Keys are settled after their emails: an email's lease never ends
        // after its key's (both are renewed together when it begins), so
        // every email of an expired key is settled by now and none of them
        // can begin any more. Expired keys are rare (a node died), so each
        // is looked at on its own.
        let expired: Vec<(i64, String, String, String)> = on_db!(self, pool => {
            sqlx::query_as(
                "SELECT tenant_id, scope, idem_key, email_ids FROM idempotency_keys \
                 WHERE state = 'in_flight' AND lease_until < $1",
            )
            .bind(now)
            .fetch_all(pool)
            .await?
        });
        for (tenant_id, scope, key, ids) in expired {
            let began = self.any_handoff_began(&ids).await?;
            let (state, outcome, completed_at) = if began {
                (KeyState::Unknown, outcome, now)
            } else {
                (KeyState::Completed, released, RELEASED_AT)
            };
            let settled = self
                .write_one(Step::rows(
                    "UPDATE idempotency_keys SET state = $1, outcome = $2, completed_at = $3 \
                     WHERE tenant_id = $4 AND scope = $5 AND idem_key = $6 AND state = 'in_flight' AND lease_until < $7",
                    params![state.as_str(), outcome, completed_at, tenant_id, &scope, &key, now],
                ))
                .await?;
            match (settled, began) {
                (0, _) => {}
                (_, true) => swept.keys_unknown += 1,
                (_, false) => swept.keys_released += 1,
            }
        }
        Ok(swept)
    }

    /// Whether the handoff of any email in a key's JSON list of ids began.
    async fn any_handoff_began(&self, email_ids: &str) -> Result<bool, Error> {
        let ids: Vec<i64> =
            serde_json::from_str(email_ids).map_err(|e| Error::StoredDataInvalid {
                detail: format!("idempotency_keys.email_ids: {e}"),
            })?;
        for id in ids {
            let began: i64 = on_db!(self, pool => {
                sqlx::query_scalar(
                    "SELECT count(*) FROM emails WHERE id = $1 AND handoff_began_at IS NOT NULL",
                )
                .bind(id)
                .fetch_one(pool)
                .await?
            });
            if began > 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    pub async fn email(&self, tenant_id: i64, id: i64) -> Result<Option<StoredEmail>, Error> {
        optional!(
            self,
            select_email!("WHERE id = $1 AND tenant_id = $2"),
            id,
            tenant_id
        )
    }

    /// The tenant's emails, newest first; at most `filter.limit` rows.
    pub async fn list_emails(
        &self,
        tenant_id: i64,
        filter: &EmailFilter,
    ) -> Result<Vec<StoredEmail>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(select_email!(
                "WHERE tenant_id = $1 AND ($2 IS NULL OR id < $2) AND ($3 IS NULL OR status = $3) \
                 ORDER BY id DESC LIMIT $4"
            ))
            .bind(tenant_id)
            .bind(filter.before_id)
            .bind(filter.status.map(EmailStatus::as_str))
            .bind(filter.limit)
            .fetch_all(pool)
            .await?
        }))
    }

    // ---- scheduled emails -------------------------------------------------

    /// Moves a `scheduled` email at `revision` to `at`. Exactly one of a
    /// reschedule, a cancel and the scheduler's claim changes a given
    /// revision: each is one conditional statement on the row.
    pub async fn reschedule(
        &self,
        tenant_id: i64,
        id: i64,
        revision: i64,
        at: i64,
        now: i64,
    ) -> Result<Change, Error> {
        let new_revision = self
            .write_one(Step::value(
                "UPDATE emails SET scheduled_at = $1, revision = revision + 1, updated_at = $2 \
                 WHERE id = $3 AND tenant_id = $4 AND status = 'scheduled' AND revision = $5 RETURNING revision",
                params![at, now, id, tenant_id, revision],
            ))
            .await?;
        Ok(Change::from_revision(new_revision))
    }

    /// Cancels a `scheduled` email (at `revision`, when given): it is never
    /// handed off.
    pub async fn cancel(
        &self,
        tenant_id: i64,
        id: i64,
        revision: Option<i64>,
        now: i64,
    ) -> Result<Change, Error> {
        let new_revision = self
            .write_one(Step::value(
                "UPDATE emails SET status = 'canceled', revision = revision + 1, updated_at = $1, \
                 handoff_detail = 'canceled before it was due; it was not sent' \
                 WHERE id = $2 AND tenant_id = $3 AND status = 'scheduled' \
                 AND (CAST($4 AS BIGINT) IS NULL OR revision = $4) RETURNING revision",
                params![now, id, tenant_id, revision],
            ))
            .await?;
        Ok(Change::from_revision(new_revision))
    }

    /// Claims up to `limit` emails due at `now` (earliest due first) for one
    /// handoff each: they become `sending` with `lease_until` and carry the
    /// claim's id, by which `claimed` reads them. On PostgreSQL rows another
    /// node is claiming are skipped (`FOR UPDATE SKIP LOCKED`); on SQLite
    /// the single writer serializes claims. Returns how many were claimed.
    pub async fn claim_due(
        &self,
        claim: i64,
        now: i64,
        lease_until: i64,
        limit: i64,
    ) -> Result<u64, Error> {
        let sql = if self.is_postgres() {
            "WITH due AS (SELECT id FROM emails WHERE status = 'scheduled' AND scheduled_at <= $3 \
               ORDER BY scheduled_at LIMIT $4 FOR UPDATE SKIP LOCKED) \
             UPDATE emails SET status = 'sending', claim = $1, lease_until = $2, revision = emails.revision + 1, updated_at = $3 \
             FROM due WHERE emails.id = due.id"
        } else {
            "UPDATE emails SET status = 'sending', claim = $1, lease_until = $2, revision = revision + 1, updated_at = $3 \
             WHERE id IN (SELECT id FROM emails WHERE status = 'scheduled' AND scheduled_at <= $3 \
               ORDER BY scheduled_at LIMIT $4)"
        };
        let claimed = self
            .write_one(Step::rows(sql, params![claim, lease_until, now, limit]))
            .await?;
        Ok(claimed as u64)
    }

    /// The emails a claim took that are still `sending`.
    pub async fn claimed(&self, claim: i64) -> Result<Vec<ClaimedEmail>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(
                "SELECT id, tenant_id, payload, message_id, scheduled_at, request_id FROM emails \
                 WHERE claim = $1 AND status = 'sending' ORDER BY scheduled_at",
            )
            .bind(claim)
            .fetch_all(pool)
            .await?
        }))
    }

    /// When the next scheduled email is due, if one is waiting.
    pub async fn next_due(&self) -> Result<Option<i64>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_scalar("SELECT min(scheduled_at) FROM emails WHERE status = 'scheduled'")
                .fetch_one(pool)
                .await?
        }))
    }

    /// Operator reconciliation of an `unknown` handoff: sets the email to
    /// `status` and completes the key that reserved it, which from then on
    /// replays its recorded answer. Returns false when the email is not
    /// `unknown`.
    pub async fn reconcile(
        &self,
        email_id: i64,
        status: EmailStatus,
        detail: &str,
        now: i64,
    ) -> Result<bool, Error> {
        let ran = self
            .write(Unit::new(vec![
                Step::rows(
                    concat!(
                        "UPDATE emails SET status = $1, handoff_detail = $2, revision = revision + 1, updated_at = $3 \
                         WHERE id = $4 AND ",
                        status_is!("unknown")
                    ),
                    params![status.as_str(), detail, now, email_id],
                )
                .abort_if_zero(),
                Step::rows(RELEASE_KEYS_OF_EMAIL, params![now, email_id.to_string()]),
            ]))
            .await?;
        Ok(ran != Ran::RolledBack)
    }
}

/// The JSON list of the emails' ids, as stored with their reservation.
fn email_ids(emails: &[NewEmail]) -> String {
    let ids: Vec<String> = emails.iter().map(|e| e.id.to_string()).collect();
    format!("[{}]", ids.join(","))
}

impl Change {
    /// What a conditional `UPDATE ... RETURNING revision` yielded.
    fn from_revision(yielded: i64) -> Change {
        if yielded == 0 {
            Change::Refused
        } else {
            Change::Done(yielded)
        }
    }
}

//! The handoff of one accepted email: its recipients screened against the
//! suppression list, its handoff marked as begun, its message built, signed
//! and given to the transport within the handoff lease. Shared by
//! `POST /emails`, the batch and the scheduler.

use crate::error::Error;
use crate::model::ValidatedEmail;
use crate::store::{DkimKey, KeyRef, ScreenedStart};
use crate::transport::{self, Handoff, Prepared};

use super::MailService;
use super::domains::SendingIdentity;
use super::suppressions::{self, Screened};

/// One email to hand off, with what its handoff needs.
pub(super) struct Parcel<'a> {
    pub tenant_id: i64,
    pub email: &'a ValidatedEmail,
    pub sender: &'a DkimKey,
    pub id: i64,
    pub message_id: &'a str,
    /// The key that reserved it, whose lease each begun handoff renews.
    pub key: Option<&'a KeyRef>,
    /// Set when the email was stored with its handoff marked as begun (its
    /// recipients screened clear before): its message, built and signed
    /// while that write ran, goes to the transport as it is.
    pub prepared: Option<Result<Prepared, Handoff>>,
}

/// A handoff that never began: nothing was offered to the transport.
#[derive(Debug)]
pub(super) struct NotBegun {
    pub detail: String,
    /// Storage failed before the handoff could begin: worth another try
    /// (the scheduler leaves such an email claimed; the sweeper hands the
    /// claim back once its lease runs out).
    pub transient: bool,
}

impl NotBegun {
    fn storage(what: &str, e: Error) -> NotBegun {
        NotBegun {
            transient: matches!(e, Error::Unavailable { .. }),
            detail: format!("not sent: {what} ({e})"),
        }
    }

    /// What an immediate send answers: not sent, and not retried.
    pub(super) fn rejected(self) -> Handoff {
        Handoff::Rejected(self.detail)
    }
}

impl MailService {
    /// [`Self::screen_and_hand_off`], timed and counted in the handoff
    /// latency histogram by outcome (one that never began counts as
    /// `failed`), and logged (one `handoff` line, in the span of the
    /// request or of the scheduled handoff, which carries the accepting
    /// request's id).
    pub(super) async fn hand_off(&self, parcel: Parcel<'_>) -> Result<Handoff, NotBegun> {
        let started = std::time::Instant::now();
        let id = parcel.id;
        // A message prepared beside its reservation counts the time that
        // took as its handoff's, as one prepared here would.
        let prepared_in = match &parcel.prepared {
            Some(Ok(prepared)) => prepared.took,
            _ => std::time::Duration::ZERO,
        };
        let handoff = self.screen_and_hand_off(parcel).await;
        let outcome = match &handoff {
            Ok(handoff) => handoff_outcome(handoff),
            Err(_) => "failed",
        };
        let elapsed = started.elapsed() + prepared_in;
        metrics::histogram!(crate::metrics::HANDOFF_DURATION, "outcome" => outcome)
            .record(elapsed.as_secs_f64());
        tracing::info!(
            email_id = id,
            outcome,
            elapsed_ms = elapsed.as_millis() as u64,
            "handoff"
        );
        handoff
    }

    /// Screens the recipients against the tenant's suppression list, marks
    /// the handoff as begun, then hands the email with the remaining
    /// recipients to the transport. The recipients removed are recorded on
    /// the email first; when none remain nothing is handed off. A list that
    /// cannot be read, a removal or a mark that cannot be recorded stops
    /// the handoff before it begins (`NotBegun`): the durable mark is what
    /// tells the sweeper, after a crash, that the relay may have seen it.
    /// When the email can leave as it is (its sender has an identity), the
    /// screen and the mark are one store call, which marks only when no
    /// recipient is on the list (`Store::begin_handoff_if_clear`).
    async fn screen_and_hand_off(&self, parcel: Parcel<'_>) -> Result<Handoff, NotBegun> {
        let Parcel {
            tenant_id,
            email,
            sender,
            id,
            message_id,
            key,
            prepared,
        } = parcel;
        if let Some(prepared) = prepared {
            return Ok(match prepared {
                Ok(prepared) => self.deliver_prepared(id, &prepared).await,
                Err(refused) => refused,
            });
        }
        let unlisted = |e: Error| NotBegun::storage("the suppression list could not be checked", e);
        let identity = self.sending_identity(tenant_id, sender);
        let addresses = suppressions::recipients(email);
        let now = self.clock.now_ms();
        let lease_until = now + self.lease_ms();
        let marked = |e| {
            NotBegun::storage(
                "its recipients could not be screened and its handoff marked as begun",
                e,
            )
        };
        let (suppressed, identity) = match identity {
            Ok(identity) => match self
                .store
                .begin_handoff_if_clear(tenant_id, &addresses, (id, key), now, lease_until)
                .await
                .map_err(marked)?
            {
                ScreenedStart::Began(began) => {
                    return self.transfer(email, id, message_id, &identity, began).await;
                }
                ScreenedStart::Suppressed(keys) => (keys, Ok(identity)),
            },
            Err(detail) => (
                self.store
                    .suppressed_among(tenant_id, &addresses)
                    .await
                    .map_err(unlisted)?,
                Err(detail),
            ),
        };
        let remaining = match suppressions::screened(email, &addresses, &suppressed) {
            Screened::Clear => None,
            Screened::Some(remaining, dropped) => {
                self.store
                    .record_suppressed_recipients(id, &dropped)
                    .await
                    .map_err(unlisted)?;
                Some(remaining)
            }
            Screened::All(dropped) => {
                self.store
                    .record_suppressed_recipients(id, &dropped)
                    .await
                    .map_err(unlisted)?;
                return Ok(Handoff::Suppressed(format!(
                    "not sent: every recipient is on the suppression list ({})",
                    dropped.join(", ")
                )));
            }
        };
        let email = remaining.as_deref().unwrap_or(email);
        let identity = match identity {
            Ok(d) => d,
            Err(detail) => return Ok(Handoff::Rejected(format!("not sent: {detail}"))),
        };
        let now = self.clock.now_ms();
        let began = self
            .store
            .begin_handoff(id, key, now, now + self.lease_ms())
            .await
            .map_err(|e| NotBegun::storage("its handoff could not be marked as begun", e))?;
        self.transfer(email, id, message_id, &identity, began).await
    }

    /// Hands a screened email whose handoff was marked (`began`) to the
    /// transport, within the handoff lease.
    async fn transfer(
        &self,
        email: &ValidatedEmail,
        id: i64,
        message_id: &str,
        identity: &SendingIdentity,
        began: bool,
    ) -> Result<Handoff, NotBegun> {
        if !began {
            return Err(NotBegun {
                detail: "not sent: its lease ran out before the handoff began, and it was settled"
                    .into(),
                transient: false,
            });
        }
        let handoff = async {
            match self.prepare(email, id, message_id, identity).await {
                Ok(prepared) => self.transport.deliver(id, &prepared).await,
                Err(refused) => refused,
            }
        };
        Ok(self.within_lease(handoff).await)
    }

    /// The message of an email built and signed for its sender's identity,
    /// with its return path ([`transport::Transport::prepare`]).
    pub(super) async fn prepare(
        &self,
        email: &ValidatedEmail,
        id: i64,
        message_id: &str,
        identity: &SendingIdentity,
    ) -> Result<Prepared, Handoff> {
        let return_path = self.verp.return_path(id, &identity.return_path_domain);
        let envelope = transport::Envelope {
            email_id: id,
            message_id,
            dkim: &identity.signing,
            return_path: &return_path,
        };
        self.transport.prepare(email, &envelope).await
    }

    /// A prepared message handed to the transport, within the lease.
    async fn deliver_prepared(&self, id: i64, prepared: &Prepared) -> Handoff {
        self.within_lease(self.transport.deliver(id, prepared))
            .await
    }

    /// A handoff's outcome, or `Unknown` when it did not finish within the
    /// handoff lease.
    async fn within_lease(&self, handoff: impl std::future::Future<Output = Handoff>) -> Handoff {
        match tokio::time::timeout(self.settings.handoff_lease, handoff).await {
            Ok(result) => result,
            Err(_) => Handoff::Unknown(format!(
                "the handoff did not finish within {:?}",
                self.settings.handoff_lease
            )),
        }
    }
}

/// The status a handoff leaves its email in, as a metric label.
pub(super) fn handoff_outcome(handoff: &Handoff) -> &'static str {
    match handoff {
        Handoff::Accepted => "sent",
        Handoff::Suppressed(_) => "suppressed",
        Handoff::Rejected(_) => "failed",
        Handoff::Unknown(_) => "unknown",
    }
}

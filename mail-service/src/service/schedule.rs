//! Scheduled emails through the API: `PATCH /emails/{id}` (reschedule,
//! guarded by `If-Match`), `POST /emails/{id}/cancel`, and `GET /emails`
//! to find them. Each change is one
//! conditional statement on the email's row, so of a reschedule, a cancel
//! and the scheduler's claim racing for one revision exactly one wins; a
//! loser reads the row to say who won.

use serde_json::Value;

use crate::error::Error;
use crate::id::{ParsedId, parse_id};
use crate::model::{self, EmailStatus, StoredEmail};
use crate::store::{Change, EmailFilter};

use super::page::{Page, PageRequest};
use super::{Caller, MailService};

/// Raw query of `GET /emails`, before checks.
#[derive(Debug, Clone, Default)]
pub struct EmailQuery {
    pub limit: Option<String>,
    pub cursor: Option<String>,
    /// Resend's pagination: an email id; the page continues after it.
    pub after: Option<String>,
    pub status: Option<String>,
}

/// A checked `If-Match`: the revision the caller read (the email's `ETag`,
/// a quoted decimal such as `"3"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfMatch(pub i64);

impl IfMatch {
    /// One strong entity tag holding a revision. `*`, weak tags, lists and
    /// unquoted values are refused: each would defeat or blur the check
    /// the header exists for.
    pub fn parse(text: &str) -> Result<IfMatch, Error> {
        let text = text.trim();
        let invalid = |detail: String| Err(Error::InvalidIfMatch { detail });
        if text == "*" {
            return invalid(
                "`*` names no revision; send the ETag you read from GET /emails/{id}, e.g. \"3\""
                    .into(),
            );
        }
        if text.contains(',') {
            return invalid(format!(
                "`{text}` is a list; send exactly one ETag, the one you read from GET /emails/{{id}}"
            ));
        }
        if text.starts_with("W/") {
            return invalid(format!(
                "`{text}` is a weak entity tag; If-Match compares strong tags: send the ETag as given, e.g. \"3\""
            ));
        }
        let revision = text
            .strip_prefix('"')
            .and_then(|rest| rest.strip_suffix('"'))
            .map(parse_id);
        match revision {
            Some(ParsedId::Id(revision)) => Ok(IfMatch(revision)),
            _ => invalid(format!(
                "`{text}` is not an ETag of this service; send it as given, with its quotes, e.g. \"3\""
            )),
        }
    }
}

/// The answer to a reschedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rescheduled {
    pub id: String,
    pub scheduled_at: i64,
    pub revision: i64,
}

/// The answer to a cancel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canceled {
    pub id: String,
    pub revision: i64,
}

impl MailService {
    /// `GET /emails`: the tenant's emails, newest first.
    pub async fn list_emails(
        &self,
        caller: &Caller,
        query: &EmailQuery,
    ) -> Result<Page<StoredEmail>, Error> {
        if query.after.is_some() && query.cursor.is_some() {
            return Err(Error::validation("after", "give cursor or after, not both"));
        }
        let mut page =
            PageRequest::parse("emails", query.limit.as_deref(), query.cursor.as_deref())?;
        if let Some(after) = &query.after {
            page.before_id = match parse_id(after) {
                ParsedId::Id(id) => Some(id),
                _ => {
                    return Err(Error::validation(
                        "after",
                        format!("must be an email id matching {}", crate::id::ID_PATTERN),
                    ));
                }
            };
        }
        let status = query
            .status
            .as_deref()
            .map(str::parse::<EmailStatus>)
            .transpose()
            .map_err(|e| Error::validation("status", e.to_string()))?;
        let rows = self
            .store
            .list_emails(
                caller.principal.tenant_id,
                &EmailFilter {
                    before_id: page.before_id,
                    status,
                    limit: page.fetch(),
                },
            )
            .await?;
        Ok(page.page(rows, |email| email.id))
    }

    /// `PATCH /emails/{id}`: moves a scheduled email to a new time. Needs
    /// the revision the caller read; the body is `{scheduled_at}` only.
    pub async fn reschedule(
        &self,
        caller: &Caller,
        id: i64,
        if_match: Option<IfMatch>,
        body: &Value,
    ) -> Result<Rescheduled, Error> {
        let IfMatch(revision) = if_match.ok_or(Error::PreconditionRequired)?;
        // Resend's Python SDK repeats the id in the body.
        let body = &model::without_path_id(body, &["id"], id)?;
        let Value::Object(fields) = body else {
            return Err(Error::validation(
                "body",
                "must be a JSON object {\"scheduled_at\": ...}",
            ));
        };
        if let Some(other) = fields.keys().find(|k| *k != "scheduled_at") {
            return Err(Error::unknown_property(
                other,
                "only scheduled_at can be changed",
            ));
        }
        let at = match fields.get("scheduled_at") {
            None | Some(Value::Null) => {
                return Err(Error::MissingField {
                    field: "scheduled_at".into(),
                });
            }
            Some(Value::String(text)) => model::parse_scheduled_at("scheduled_at", text)?,
            Some(_) => {
                return Err(Error::validation(
                    "scheduled_at",
                    "must be a string (an RFC 3339 date-time)",
                ));
            }
        };
        let now = self.clock.now_ms();
        model::check_schedule_window("scheduled_at", at, now)?;
        let tenant = caller.principal.tenant_id;
        match self.store.reschedule(tenant, id, revision, at, now).await? {
            Change::Done(revision) => {
                self.scheduler_wake.notify_one();
                Ok(Rescheduled {
                    id: id.to_string(),
                    scheduled_at: at,
                    revision,
                })
            }
            Change::Refused => Err(self
                .why_refused(tenant, id, Some(revision), "rescheduled")
                .await),
        }
    }

    /// `POST /emails/{id}/cancel`: a scheduled email is never handed off.
    /// `If-Match` is optional here (Resend's clients do not send it); when
    /// given it must name the current revision.
    pub async fn cancel(
        &self,
        caller: &Caller,
        id: i64,
        if_match: Option<IfMatch>,
    ) -> Result<Canceled, Error> {
        let given = if_match.map(|IfMatch(r)| r);
        let tenant = caller.principal.tenant_id;
        match self
            .store
            .cancel(tenant, id, given, self.clock.now_ms())
            .await?
        {
            Change::Done(revision) => Ok(Canceled {
                id: id.to_string(),
                revision,
            }),
            Change::Refused => Err(self.why_refused(tenant, id, given, "canceled").await),
        }
    }

    /// Why a conditional change of email `id` changed nothing, as the row
    /// stands now: it does not exist, it is no longer `scheduled` (the
    /// scheduler claimed it, or another request canceled it), or `given`
    /// is not its revision.
    async fn why_refused(
        &self,
        tenant: i64,
        id: i64,
        given: Option<i64>,
        action: &'static str,
    ) -> Error {
        let email = match self.store.email(tenant, id).await {
            Ok(Some(email)) => email,
            Ok(None) => {
                return Error::NotFound {
                    what: "email".into(),
                };
            }
            Err(e) => return e,
        };
        let reason = match email.status {
            EmailStatus::Scheduled => {
                return Error::StaleRevision {
                    email_id: id.to_string(),
                    given: given.unwrap_or_default(),
                    current: email.revision,
                };
            }
            EmailStatus::Sending => {
                "its handoff has started (it was due, or sent without a schedule)"
            }
            EmailStatus::Sent => "it was handed off to the provider",
            EmailStatus::Failed => "its handoff failed",
            EmailStatus::Unknown => "its handoff has an unknown outcome",
            EmailStatus::Canceled => "it was canceled",
            EmailStatus::Suppressed => "every recipient was suppressed at its handoff",
        };
        Error::NotScheduled {
            email_id: id.to_string(),
            status: email.status,
            reason: reason.into(),
            action: action.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_match_takes_one_strong_etag() {
        assert_eq!(IfMatch::parse("\"3\"").unwrap(), IfMatch(3));
        assert_eq!(IfMatch::parse(" \"42\" ").unwrap(), IfMatch(42));
        for bad in [
            "*",
            "3",
            "W/\"3\"",
            "\"3\", \"4\"",
            "\"\"",
            "\"03\"",
            "\"-1\"",
            "\"abc\"",
            "\"3",
            "",
        ] {
            let err = IfMatch::parse(bad).unwrap_err();
            assert!(
                matches!(err, Error::InvalidIfMatch { .. }),
                "{bad}: {err:?}"
            );
            assert!(err.to_string().starts_with("If-Match: "), "{err}");
        }
    }
}

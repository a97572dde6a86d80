//! The suppression list: `POST/GET/DELETE /suppressions`, and the screening
//! of an email's recipients against it when its handoff is due.

use serde_json::Value;

use crate::error::Error;
use crate::model::{self, Suppression, SuppressionOrigin, ValidatedEmail, suppression_key};

use super::page::{Page, PageRequest};
use super::{Caller, MailService};

/// Raw query of `GET /suppressions`, before checks.
#[derive(Debug, Clone, Default)]
pub struct SuppressionQuery {
    pub limit: Option<String>,
    pub cursor: Option<String>,
    /// `manual`, `bounce` or `complaint`: only entries of that origin.
    pub origin: Option<String>,
}

/// What the list did to an email's recipients.
#[derive(Debug)]
pub(super) enum Screened {
    /// No recipient is suppressed.
    Clear,
    /// Some were removed (normalised addresses); the rest remain.
    Some(Box<ValidatedEmail>, Vec<String>),
    /// Every recipient is suppressed (normalised addresses).
    All(Vec<String>),
}

impl MailService {
    /// `POST /suppressions {email, reason?}`: idempotent; adding an address
    /// that is there answers the existing entry.
    pub async fn add_suppression(
        &self,
        caller: &Caller,
        body: &Value,
    ) -> Result<Suppression, Error> {
        let obj = super::body_object(body, &["email", "reason"])?;
        let email = match obj.get("email") {
            None | Some(Value::Null) => {
                return Err(Error::MissingField {
                    field: "email".into(),
                });
            }
            Some(Value::String(s)) => model::normalize_address("email", s)?,
            Some(_) => return Err(Error::validation("email", "must be a string")),
        };
        let reason = match obj.get("reason") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(Error::validation("reason", "must be a string")),
        };
        model::validate_reason(reason.as_deref())?;
        self.store
            .add_suppression(
                caller.principal.tenant_id,
                &Suppression {
                    id: self.ids.next(),
                    email,
                    reason,
                    created_at: self.clock.now_ms(),
                    origin: SuppressionOrigin::Manual,
                    source_id: None,
                },
            )
            .await
    }

    pub async fn list_suppressions(
        &self,
        caller: &Caller,
        query: &SuppressionQuery,
    ) -> Result<Page<Suppression>, Error> {
        let page = PageRequest::parse(
            "suppressions",
            query.limit.as_deref(),
            query.cursor.as_deref(),
        )?;
        let origin = match query.origin.as_deref() {
            None => None,
            Some(text) => Some(text.parse::<SuppressionOrigin>().map_err(|_| {
                Error::validation("origin", "must be `manual`, `bounce` or `complaint`")
            })?),
        };
        let rows = self
            .store
            .list_suppressions(
                caller.principal.tenant_id,
                page.before_id,
                origin,
                page.fetch(),
            )
            .await?;
        Ok(page.page(rows, |s| s.id))
    }

    /// `GET /suppressions/{email_or_id}`: an ID (digits) or an address.
    pub async fn suppression(&self, caller: &Caller, key: &str) -> Result<Suppression, Error> {
        let tenant = caller.principal.tenant_id;
        let found = if !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit()) {
            match key.parse::<i64>() {
                Ok(id) => self.store.suppression_by_id(tenant, id).await?,
                Err(_) => None,
            }
        } else {
            let email = model::normalize_address("email_or_id", key)?;
            self.store.suppression_by_email(tenant, &email).await?
        };
        found.ok_or_else(|| Error::NotFound {
            what: "suppression".into(),
        })
    }

    /// `DELETE /suppressions/{email_or_id}`: the entry removed.
    pub async fn delete_suppression(
        &self,
        caller: &Caller,
        key: &str,
    ) -> Result<Suppression, Error> {
        let entry = self.suppression(caller, key).await?;
        let removed = self
            .store
            .delete_suppressions(caller.principal.tenant_id, &[entry.id])
            .await?;
        if removed.is_empty() {
            Err(Error::NotFound {
                what: "suppression".into(),
            })
        } else {
            Ok(entry)
        }
    }

    /// `POST /suppressions/batch/add {emails: [...]}` (1 to 100 addresses):
    /// one unit; an address already there (any case) answers its entry,
    /// and addresses of one mailbox answer one entry.
    pub async fn add_suppressions(
        &self,
        caller: &Caller,
        body: &Value,
    ) -> Result<Vec<Suppression>, Error> {
        let obj = super::body_object(body, &["emails"])?;
        let emails = string_list(obj, "emails")?.ok_or(Error::MissingField {
            field: "emails".into(),
        })?;
        let now = self.clock.now_ms();
        let mut new = Vec::with_capacity(emails.len());
        for (i, text) in emails.iter().enumerate() {
            new.push(Suppression {
                id: self.ids.next(),
                email: model::normalize_address(&format!("emails[{i}]"), text)?,
                reason: None,
                created_at: now,
                origin: SuppressionOrigin::Manual,
                source_id: None,
            });
        }
        self.store
            .add_suppressions(caller.principal.tenant_id, &new)
            .await
    }

    /// `POST /suppressions/batch/remove {emails: [...]} | {ids: [...]}`
    /// (one of the two, 1 to 100 items): the entries removed, in one unit;
    /// an item not on the list is left out of the answer, not an error.
    pub async fn remove_suppressions(
        &self,
        caller: &Caller,
        body: &Value,
    ) -> Result<Vec<Suppression>, Error> {
        let obj = super::body_object(body, &["emails", "ids"])?;
        let tenant = caller.principal.tenant_id;
        let mut found: Vec<Suppression> = Vec::new();
        match (string_list(obj, "emails")?, string_list(obj, "ids")?) {
            (Some(_), Some(_)) => {
                return Err(Error::validation(
                    "ids",
                    "give either `emails` or `ids`, not both",
                ));
            }
            (None, None) => {
                return Err(Error::MissingField {
                    field: "emails".into(),
                });
            }
            (Some(emails), None) => {
                for (i, text) in emails.iter().enumerate() {
                    let email = model::normalize_address(&format!("emails[{i}]"), text)?;
                    if let Some(s) = self.store.suppression_by_email(tenant, &email).await? {
                        found.push(s);
                    }
                }
            }
            (None, Some(ids)) => {
                for (i, text) in ids.iter().enumerate() {
                    let id = match crate::id::parse_id(text) {
                        crate::id::ParsedId::Id(id) => id,
                        // Beyond every id: not on the list.
                        crate::id::ParsedId::OutOfRange => continue,
                        crate::id::ParsedId::Invalid => {
                            return Err(Error::validation(
                                format!("ids[{i}]"),
                                format!("must match {}", crate::id::ID_PATTERN),
                            ));
                        }
                    };
                    if let Some(s) = self.store.suppression_by_id(tenant, id).await? {
                        found.push(s);
                    }
                }
            }
        }
        found.dedup_by_key(|s| s.id);
        let mut ids: Vec<i64> = found.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        ids.dedup();
        let removed = self.store.delete_suppressions(tenant, &ids).await?;
        let mut out: Vec<Suppression> = Vec::new();
        for s in found {
            if removed.contains(&s.id) && !out.iter().any(|o| o.id == s.id) {
                out.push(s);
            }
        }
        Ok(out)
    }
}

/// What the list's keys `suppressed` (found by `Store::suppressed_among`
/// among `addresses`, the email's `recipients`) leave of its to, cc and
/// bcc.
pub(super) fn screened(
    email: &ValidatedEmail,
    addresses: &[String],
    suppressed: &[String],
) -> Screened {
    if suppressed.is_empty() {
        return Screened::Clear;
    }
    let is_suppressed = |a: &str| suppressed.contains(&suppression_key(a));
    let keep = |list: &Vec<lettre::message::Mailbox>| -> Vec<lettre::message::Mailbox> {
        list.iter()
            .filter(|m| !is_suppressed(&model::normalized(&m.email)))
            .cloned()
            .collect()
    };
    let mut dropped: Vec<String> = Vec::new();
    for a in addresses {
        if is_suppressed(a) && !dropped.contains(a) {
            dropped.push(a.clone());
        }
    }
    let mut remaining = email.clone();
    remaining.to = keep(&email.to);
    remaining.cc = keep(&email.cc);
    remaining.bcc = keep(&email.bcc);
    if remaining.to.is_empty() && remaining.cc.is_empty() && remaining.bcc.is_empty() {
        Screened::All(dropped)
    } else {
        Screened::Some(Box::new(remaining), dropped)
    }
}

/// The normalised addresses of an email's to, cc and bcc, as the list is
/// searched for them.
pub(super) fn recipients(email: &ValidatedEmail) -> Vec<String> {
    let all = email.to.iter().chain(&email.cc).chain(&email.bcc);
    all.map(|m| model::normalized(&m.email)).collect()
}

/// Most items one batch call takes.
pub const MAX_SUPPRESSION_BATCH: usize = 100;

/// The list of strings `field` holds (1 to 100), `None` when absent.
fn string_list(
    obj: &serde_json::Map<String, Value>,
    field: &str,
) -> Result<Option<Vec<String>>, Error> {
    let items = match obj.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(Error::validation(field, "must be an array of strings")),
    };
    if items.is_empty() || items.len() > MAX_SUPPRESSION_BATCH {
        return Err(Error::validation(
            field,
            format!("must hold 1 to {MAX_SUPPRESSION_BATCH} items"),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) => Ok(s.clone()),
            _ => Err(Error::validation(
                format!("{field}[{i}]"),
                "must be a string",
            )),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

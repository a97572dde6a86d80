//! The suppression list: `POST/GET/DELETE /suppressions`, and the screening
//! of an email's recipients against it when its handoff is due.

use serde_json::Value;

use crate::error::Error;
use crate::model::{self, Suppression, ValidatedEmail};

use super::page::{Page, PageRequest};
use super::{Caller, MailService};

/// Raw query of `GET /suppressions`, before checks.
#[derive(Debug, Clone, Default)]
pub struct SuppressionQuery {
    pub limit: Option<String>,
    pub cursor: Option<String>,
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
        let Value::Object(obj) = body else {
            return Err(Error::validation("body", "must be a JSON object"));
        };
        if let Some(unknown) = obj
            .keys()
            .find(|k| !["email", "reason"].contains(&k.as_str()))
        {
            return Err(Error::validation(
                unknown.clone(),
                "unknown property (allowed: email, reason)",
            ));
        }
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
        let rows = self
            .store
            .list_suppressions(caller.principal.tenant_id, page.before_id, page.fetch())
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

    /// `DELETE /suppressions/{email_or_id}`; the normalised address deleted.
    pub async fn delete_suppression(&self, caller: &Caller, key: &str) -> Result<String, Error> {
        let entry = self.suppression(caller, key).await?;
        if self
            .store
            .delete_suppression(caller.principal.tenant_id, &entry.email)
            .await?
        {
            Ok(entry.email)
        } else {
            Err(Error::NotFound {
                what: "suppression".into(),
            })
        }
    }

    /// Removes the tenant's suppressed addresses from to, cc and bcc.
    pub(super) async fn screen(
        &self,
        tenant_id: i64,
        email: &ValidatedEmail,
    ) -> Result<Screened, Error> {
        let all = email.to.iter().chain(&email.cc).chain(&email.bcc);
        let addresses: Vec<String> = all.map(|m| model::normalized(&m.email)).collect();
        let suppressed = self.store.suppressed_among(tenant_id, &addresses).await?;
        if suppressed.is_empty() {
            return Ok(Screened::Clear);
        }
        let keep = |list: &Vec<lettre::message::Mailbox>| -> Vec<lettre::message::Mailbox> {
            list.iter()
                .filter(|m| !suppressed.contains(&model::normalized(&m.email)))
                .cloned()
                .collect()
        };
        let mut dropped: Vec<String> = Vec::new();
        for a in addresses {
            if suppressed.contains(&a) && !dropped.contains(&a) {
                dropped.push(a);
            }
        }
        let mut remaining = email.clone();
        remaining.to = keep(&email.to);
        remaining.cc = keep(&email.cc);
        remaining.bcc = keep(&email.bcc);
        if remaining.to.is_empty() && remaining.cc.is_empty() && remaining.bcc.is_empty() {
            Ok(Screened::All(dropped))
        } else {
            Ok(Screened::Some(Box::new(remaining), dropped))
        }
    }
}

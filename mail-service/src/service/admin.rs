//! The operator's actions (tenants, API keys, reconciliation) and the sweep
//! of abandoned handoffs. The CLI reaches the database only through these.

use crate::error::Error;
use crate::model::{ApiKey, EmailStatus, Permission, Tenant};
use crate::store::Swept;

use super::auth::{KEY_PREFIX, hash_key};
use super::send::Outcome;
use super::{DEFAULT_RATE_LIMIT, MailService};

impl MailService {
    /// Creates a tenant; `Conflict` when the name is taken.
    pub async fn create_tenant(&self, name: &str, rate_limit: i64) -> Result<Tenant, Error> {
        if name.trim().is_empty() || name.len() > 200 {
            return Err(Error::validation("name", "must be 1 to 200 characters"));
        }
        check_rate_limit(rate_limit)?;
        let tenant = Tenant {
            id: self.ids.next(),
            name: name.to_string(),
            rate_limit_per_minute: rate_limit,
            created_at: self.clock.now_ms(),
        };
        self.store.create_tenant(&tenant).await?;
        Ok(tenant)
    }

    pub async fn list_tenants(&self) -> Result<Vec<Tenant>, Error> {
        self.store.list_tenants().await
    }

    /// Requests per minute for the tenant.
    pub async fn set_rate_limit(&self, tenant_name: &str, per_minute: i64) -> Result<(), Error> {
        check_rate_limit(per_minute)?;
        if self.store.set_rate_limit(tenant_name, per_minute).await? {
            Ok(())
        } else {
            Err(tenant_not_found(tenant_name))
        }
    }

    /// Creates a key for the tenant (created if missing). Returns the record
    /// and the secret, which is shown once and only its hash is stored.
    pub async fn create_api_key(
        &self,
        tenant_name: &str,
        key_name: &str,
        permission: Permission,
    ) -> Result<(ApiKey, String), Error> {
        let tenant = match self.store.find_tenant(tenant_name).await? {
            Some(t) => t,
            None => match self.create_tenant(tenant_name, DEFAULT_RATE_LIMIT).await {
                // Created by someone else in the meantime: use theirs.
                Err(Error::Conflict { .. }) => self.tenant(tenant_name).await?,
                other => other?,
            },
        };
        let secret = format!(
            "{KEY_PREFIX}{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let record = ApiKey {
            id: self.ids.next(),
            tenant_id: tenant.id,
            name: key_name.to_string(),
            key_prefix: secret[..KEY_PREFIX.len() + 6].to_string(),
            permission,
            created_at: self.clock.now_ms(),
            revoked_at: None,
        };
        self.store
            .create_api_key(&record, &hash_key(&secret))
            .await?;
        Ok((record, secret))
    }

    /// The tenant's keys, never their secrets.
    pub async fn list_api_keys(&self, tenant_name: &str) -> Result<Vec<ApiKey>, Error> {
        let tenant = self.tenant(tenant_name).await?;
        self.store.list_api_keys(tenant.id).await
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

    /// Settles an `unknown` handoff after the operator checked the provider:
    /// the email becomes `sent` or `failed` and its key replays its answer.
    pub async fn reconcile(&self, email_id: i64, sent: bool) -> Result<(), Error> {
        let (status, detail) = if sent {
            (
                EmailStatus::Sent,
                "reconciled by an operator: the provider accepted it",
            )
        } else {
            (
                EmailStatus::Failed,
                "reconciled by an operator: the provider did not accept it",
            )
        };
        if self
            .store
            .reconcile(email_id, status, detail, self.clock.now_ms())
            .await?
        {
            Ok(())
        } else {
            Err(Error::NotFound {
                what: format!("email {email_id} with status unknown"),
            })
        }
    }

    /// Settles abandoned handoffs (see `Store::expire_abandoned_handoffs`)
    /// and drops old rate windows; returns how many emails it settled.
    pub async fn sweep(&self) -> Result<u64, Error> {
        let now = self.clock.now_ms();
        let swept = self.expire_abandoned(now).await?;
        self.store
            .prune_rate_windows(now - 2 * self.settings.rate_window_ms)
            .await?;
        Ok(swept)
    }

    /// Settles the emails and keys whose handoff lease ran out; returns how
    /// many emails it settled.
    pub(super) async fn expire_abandoned(&self, now: i64) -> Result<u64, Error> {
        let swept = self
            .store
            .expire_abandoned_handoffs(
                now,
                &Outcome::Abandoned.to_json(),
                &Outcome::NotSent.to_json(),
            )
            .await?;
        if swept != Swept::default() {
            tracing::warn!(
                rescheduled = swept.rescheduled,
                not_sent = swept.not_sent,
                unknown = swept.unknown,
                keys_released = swept.keys_released,
                keys_unknown = swept.keys_unknown,
                "abandoned handoffs settled"
            );
        }
        Ok(swept.emails())
    }

    async fn tenant(&self, name: &str) -> Result<Tenant, Error> {
        self.store
            .find_tenant(name)
            .await?
            .ok_or_else(|| tenant_not_found(name))
    }
}

fn tenant_not_found(name: &str) -> Error {
    Error::NotFound {
        what: format!("tenant `{name}`"),
    }
}

fn check_rate_limit(per_minute: i64) -> Result<(), Error> {
    if per_minute < 1 {
        return Err(Error::validation(
            "rate_limit",
            format!("must be at least 1 request per minute (got {per_minute})"),
        ));
    }
    Ok(())
}

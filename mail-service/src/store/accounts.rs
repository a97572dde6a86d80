//! Tenants and API keys.

use super::*;

/// The columns of `Tenant`, then the rest of the query.
macro_rules! select_tenant {
    ($rest:literal) => {
        concat!(
            "SELECT id, name, rate_limit_per_minute, created_at FROM tenants ",
            $rest
        )
    };
}

impl Store {
    /// Fails with `Conflict` when a tenant of that name exists.
    pub async fn create_tenant(&self, tenant: &Tenant) -> Result<(), Error> {
        self.write(
            Unit::one(Step::rows(
                "INSERT INTO tenants (id, name, rate_limit_per_minute, created_at) VALUES ($1, $2, $3, $4)",
                params![tenant.id, &tenant.name, tenant.rate_limit_per_minute, tenant.created_at],
            ))
            .conflict_means(format!("tenant `{}` already exists", tenant.name)),
        )
        .await?;
        Ok(())
    }

    pub async fn find_tenant(&self, name: &str) -> Result<Option<Tenant>, Error> {
        optional!(self, select_tenant!("WHERE name = $1"), name)
    }

    pub async fn list_tenants(&self) -> Result<Vec<Tenant>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(select_tenant!("ORDER BY id"))
                .fetch_all(pool)
                .await?
        }))
    }

    /// Returns false when no tenant has that name.
    pub async fn set_rate_limit(&self, name: &str, per_minute: i64) -> Result<bool, Error> {
        let changed = self
            .write_one(Step::rows(
                "UPDATE tenants SET rate_limit_per_minute = $1 WHERE name = $2",
                params![per_minute, name],
            ))
            .await?;
        Ok(changed == 1)
    }

    /// Fails with `Conflict` when the id or the key's hash exists.
    pub async fn create_api_key(&self, key: &ApiKey, key_hash: &str) -> Result<(), Error> {
        self.write(
            Unit::one(Step::rows(
                "INSERT INTO api_keys (id, tenant_id, name, key_hash, key_prefix, permission, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                params![
                    key.id,
                    key.tenant_id,
                    &key.name,
                    key_hash,
                    &key.key_prefix,
                    key.permission.as_str(),
                    key.created_at
                ],
            ))
            .conflict_means(format!("API key {} already exists", key.id)),
        )
        .await?;
        Ok(())
    }

    /// Returns false when the key does not exist or was already revoked.
    pub async fn revoke_api_key(&self, id: i64, now: i64) -> Result<bool, Error> {
        let changed = self
            .write_one(Step::rows(
                "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
                params![now, id],
            ))
            .await?;
        Ok(changed == 1)
    }

    pub async fn list_api_keys(&self, tenant_id: i64) -> Result<Vec<ApiKey>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(
                "SELECT id, tenant_id, name, key_prefix, permission, created_at, revoked_at \
                 FROM api_keys WHERE tenant_id = $1 ORDER BY id",
            )
            .bind(tenant_id)
            .fetch_all(pool)
            .await?
        }))
    }

    /// The principal of an active key, by the hash of the key.
    pub async fn principal_by_key_hash(&self, key_hash: &str) -> Result<Option<Principal>, Error> {
        Ok(on_db!(self, pool => {
            sqlx::query_as(
                "SELECT k.tenant_id, k.id AS api_key_id, k.permission, t.rate_limit_per_minute \
                 FROM api_keys k JOIN tenants t ON t.id = k.tenant_id \
                 WHERE k.key_hash = $1 AND k.revoked_at IS NULL",
            )
            .bind(key_hash)
            .fetch_optional(pool)
            .await?
        }))
    }
}

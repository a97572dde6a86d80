//! Accounts: tenants, their API keys and the caller a key stands for.

use serde::Serialize;

use crate::status::text_enum;

text_enum!(
    /// What an API key may do.
    Permission, "permission" {
        /// `POST /emails` and `POST /emails/batch` only.
        SendingAccess = "sending_access",
        /// Every endpoint.
        FullAccess = "full_access",
    }
);

/// The caller an API key stands for.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Principal {
    pub tenant_id: i64,
    pub api_key_id: i64,
    pub permission: Permission,
    pub rate_limit_per_minute: i64,
}

/// An account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Tenant {
    pub id: i64,
    pub name: String,
    pub rate_limit_per_minute: i64,
    pub created_at: i64,
}

/// An API key as listed; the secret itself is never stored, only its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ApiKey {
    pub id: i64,
    pub tenant_id: i64,
    pub name: String,
    pub key_prefix: String,
    pub permission: Permission,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_round_trips_and_refuses_unknown_values() {
        for p in [Permission::SendingAccess, Permission::FullAccess] {
            assert_eq!(p.as_str().parse::<Permission>().unwrap(), p);
        }
        let err = "admin".parse::<Permission>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown permission `admin` (expected one of: sending_access, full_access)"
        );
    }
}

//! The one error shape of every surface: `{"error":{"code","message"}}`.
//! [`InvokeError`] knows its stable code; which HTTP status a code maps to
//! is the HTTP surface's business (`serve::http_status`).

use serde_json::{Value, json};

/// Why an invocation was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvokeError {
    /// No valid, unexpired token.
    #[error("the token is missing, unknown or expired")]
    Unauthenticated,
    /// The caller has no current access to the project.
    #[error("the caller has no access to project {project}")]
    NoProjectAccess { project: String },
    /// The token was granted scopes that do not include the one the
    /// action needs (see `spec::required_scope`).
    #[error("the token's scopes do not include {scope}, which this action needs")]
    InsufficientScope { scope: String },
    /// The extension is not granted to the project.
    #[error("{extension} is not granted to project {project}")]
    NotGranted { extension: String, project: String },
    /// A capability the action needs is not operator-approved.
    #[error("action {action} needs capability {capability}, which the operator has not approved")]
    CapabilityNotApproved { action: String, capability: String },
    /// The caller presented an older (or unknown) runtime generation.
    #[error("generation {presented} is stale; the current generation is {current}")]
    StaleGeneration { presented: u64, current: u64 },
    /// The input does not match the action's schema (the message names the
    /// location and the rule).
    #[error("{0}")]
    InvalidInput(String),
    /// No release of the extension is installed.
    #[error("{extension} is not installed")]
    NotInstalled { extension: String },
    /// The installed release has no such action.
    #[error("{extension} has no action {action}")]
    NoSuchAction { extension: String, action: String },
    /// A sandbox limit stopped the invocation.
    #[error("{message}")]
    LimitExceeded { limit: Limit, message: String },
    /// The extension answered with an `action-error` (already redacted).
    #[error("{message}")]
    Action { code: String, message: String },
    /// The extension failed because the host refused one of its own host
    /// calls (a binding its manifest does not declare, a request outside its
    /// allow rules, a malformed request): the extension's fault, not the
    /// caller's. The host log has the refusal; a development host adds it
    /// to the message.
    #[error("{0}")]
    ExtensionFault(String),
    /// The extension trapped or answered something the host cannot accept,
    /// or the host failed.
    #[error("{0}")]
    Internal(String),
}

/// Which sandbox limit was hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Deadline,
    Memory,
    HostCalls,
    InputBytes,
    OutputBytes,
    ResponseBytes,
    /// Every pooled instance slot is in use.
    Capacity,
}

/// A limit that ends an invocation from inside a host call or the memory
/// limiter: host code returns it as the trap's error, and the sandbox turns
/// it into [`InvokeError::LimitExceeded`].
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct LimitTrap {
    pub limit: Limit,
    pub message: String,
}

impl InvokeError {
    /// The stable machine-readable code.
    pub fn code(&self) -> &str {
        match self {
            InvokeError::Action { code, .. } => code,
            other => other.host_code().unwrap_or("internal"),
        }
    }

    /// The outcome label of the metrics: the code, except `action_error`
    /// for every error the extension itself returned (its codes are the
    /// extension's words, not a closed set).
    pub fn metric_outcome(&self) -> &'static str {
        self.host_code().unwrap_or("action_error")
    }

    /// The code of an error the host decided; `None` for an error the
    /// extension returned (its code is its own).
    fn host_code(&self) -> Option<&'static str> {
        Some(match self {
            InvokeError::Unauthenticated => "unauthenticated",
            InvokeError::NoProjectAccess { .. }
            | InvokeError::NotGranted { .. }
            | InvokeError::CapabilityNotApproved { .. } => "forbidden",
            InvokeError::StaleGeneration { .. } => "stale_generation",
            InvokeError::InsufficientScope { .. } => "insufficient_scope",
            InvokeError::InvalidInput(_) => "invalid_input",
            InvokeError::NotInstalled { .. } | InvokeError::NoSuchAction { .. } => "not_found",
            InvokeError::LimitExceeded { .. } => "limit_exceeded",
            InvokeError::ExtensionFault(_) => "extension_fault",
            InvokeError::Action { .. } => return None,
            InvokeError::Internal(_) => "internal",
        })
    }

    /// The kind of a refusal before the extension ran, for the metrics:
    /// `authentication`, `access`, `grant`, `approval`, `generation`.
    pub fn refusal_kind(&self) -> Option<&'static str> {
        match self {
            InvokeError::Unauthenticated => Some("authentication"),
            InvokeError::NoProjectAccess { .. } => Some("access"),
            InvokeError::NotGranted { .. } => Some("grant"),
            InvokeError::CapabilityNotApproved { .. } => Some("approval"),
            InvokeError::StaleGeneration { .. } => Some("generation"),
            InvokeError::InsufficientScope { .. } => Some("scope"),
            _ => None,
        }
    }

    /// Whether the host refused before the installed release declared the
    /// requested extension and action (they are then only the caller's
    /// words, never a metric label).
    pub fn before_resolution(&self) -> bool {
        matches!(
            self,
            InvokeError::Unauthenticated
                | InvokeError::NoProjectAccess { .. }
                | InvokeError::NotGranted { .. }
                | InvokeError::NotInstalled { .. }
                | InvokeError::NoSuchAction { .. }
        )
    }

    /// `{"error":{"code","message"}}`
    pub fn to_json(&self) -> Value {
        json!({ "error": { "code": self.code(), "message": self.to_string() } })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_refusals_share_a_code_and_differ_in_message() {
        let refusals = [
            InvokeError::NoProjectAccess {
                project: "p".into(),
            },
            InvokeError::NotGranted {
                extension: "e".into(),
                project: "p".into(),
            },
            InvokeError::CapabilityNotApproved {
                action: "a".into(),
                capability: "documents".into(),
            },
        ];
        let messages: std::collections::BTreeSet<String> =
            refusals.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), 3);
        for r in &refusals {
            assert_eq!(r.code(), "forbidden");
        }
    }

    #[test]
    fn json_shape() {
        let e = InvokeError::StaleGeneration {
            presented: 1,
            current: 2,
        };
        assert_eq!(e.to_json()["error"]["code"], "stale_generation");
        let action = InvokeError::Action {
            code: "not_provisioned".into(),
            message: "set up first".into(),
        };
        assert_eq!(
            action.to_json(),
            json!({"error": {"code": "not_provisioned", "message": "set up first"}})
        );
        let missing = InvokeError::NoSuchAction {
            extension: "e".into(),
            action: "a".into(),
        };
        assert_eq!(
            (missing.code(), missing.to_string().as_str()),
            ("not_found", "e has no action a")
        );
    }
}

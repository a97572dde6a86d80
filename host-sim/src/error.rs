//! The one error shape of every surface: `{"error":{"code","message"}}`.
//! [`InvokeError`] knows its code and HTTP status, so a surface maps once.

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
    /// The extension is not granted to the project.
    #[error("{extension} is not granted to project {project}")]
    NotGranted { extension: String, project: String },
    /// A capability the action needs is not operator-approved.
    #[error("action {action} needs capability {capability}, which the operator has not approved")]
    CapabilityNotApproved { action: String, capability: String },
    /// The caller presented an older (or unknown) runtime generation.
    #[error("generation {presented} is stale; the current generation is {current}")]
    StaleGeneration { presented: u64, current: u64 },
    /// The input does not match the action's schema.
    #[error("{0}")]
    InvalidInput(String),
    /// No such extension or action.
    #[error("{0}")]
    NotFound(String),
    /// A sandbox limit stopped the invocation.
    #[error("{message}")]
    LimitExceeded { limit: Limit, message: String },
    /// The extension answered with an `action-error` (already redacted).
    #[error("{message}")]
    Action { code: String, message: String },
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

impl InvokeError {
    /// The stable machine-readable code.
    pub fn code(&self) -> &str {
        match self {
            InvokeError::Unauthenticated => "unauthenticated",
            InvokeError::NoProjectAccess { .. }
            | InvokeError::NotGranted { .. }
            | InvokeError::CapabilityNotApproved { .. } => "forbidden",
            InvokeError::StaleGeneration { .. } => "stale_generation",
            InvokeError::InvalidInput(_) => "invalid_input",
            InvokeError::NotFound(_) => "not_found",
            InvokeError::LimitExceeded { .. } => "limit_exceeded",
            InvokeError::Action { code, .. } => code,
            InvokeError::Internal(_) => "internal",
        }
    }

    /// The HTTP status a surface answers with.
    pub fn http_status(&self) -> u16 {
        match self {
            InvokeError::Unauthenticated => 401,
            InvokeError::NoProjectAccess { .. }
            | InvokeError::NotGranted { .. }
            | InvokeError::CapabilityNotApproved { .. } => 403,
            InvokeError::StaleGeneration { .. } => 409,
            InvokeError::InvalidInput(_) => 422,
            InvokeError::NotFound(_) => 404,
            InvokeError::LimitExceeded { limit, .. } => match limit {
                Limit::InputBytes | Limit::OutputBytes | Limit::ResponseBytes => 413,
                Limit::Deadline | Limit::Memory | Limit::HostCalls | Limit::Capacity => 429,
            },
            InvokeError::Action { code, .. } => action_status(code),
            InvokeError::Internal(_) => 500,
        }
    }

    /// `{"error":{"code","message"}}`
    pub fn to_json(&self) -> Value {
        json!({ "error": { "code": self.code(), "message": self.to_string() } })
    }
}

/// Statuses of the codes an extension may answer with.
fn action_status(code: &str) -> u16 {
    match code {
        "invalid_input" => 422,
        "not_provisioned" | "not_found" => 404,
        "conflict" => 409,
        "provider_unavailable" | "provider_rejected" => 502,
        "limit_exceeded" => 429,
        "unauthenticated" => 401,
        "forbidden" => 403,
        _ => 500,
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
            assert_eq!((r.code(), r.http_status()), ("forbidden", 403));
        }
    }

    #[test]
    fn json_shape_and_statuses() {
        let e = InvokeError::StaleGeneration {
            presented: 1,
            current: 2,
        };
        assert_eq!(e.http_status(), 409);
        assert_eq!(e.to_json()["error"]["code"], "stale_generation");
        let action = InvokeError::Action {
            code: "not_provisioned".into(),
            message: "set up first".into(),
        };
        assert_eq!(
            (action.code(), action.http_status()),
            ("not_provisioned", 404)
        );
        assert_eq!(
            action.to_json(),
            json!({"error": {"code": "not_provisioned", "message": "set up first"}})
        );
        let limit = InvokeError::LimitExceeded {
            limit: Limit::OutputBytes,
            message: "too big".into(),
        };
        assert_eq!(limit.http_status(), 413);
    }
}

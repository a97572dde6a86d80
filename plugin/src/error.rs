//! The one error shape of every action: a stable code and a sentence for
//! people. Messages name the field and the rule; they never carry a provider
//! body, a secret or a stack trace.

use std::fmt;

/// Stable, machine-readable error codes (see the design page).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The input breaks a rule; the message names the field.
    InvalidInput,
    /// The project has no website yet (run `analytics.provision`).
    NotProvisioned,
    /// The provider is unreachable, slow, failing (5xx) or not configured.
    ProviderUnavailable,
    /// The provider refused the request (4xx, bad credentials) or answered
    /// something unusable (malformed JSON, unexpected shape).
    ProviderRejected,
    /// A host budget (calls, sizes) was used up.
    LimitExceeded,
    /// The host refused: no grant, capability not approved.
    Forbidden,
    /// A bug or a broken stored document.
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidInput => "invalid_input",
            Self::NotProvisioned => "not_provisioned",
            Self::ProviderUnavailable => "provider_unavailable",
            Self::ProviderRejected => "provider_rejected",
            Self::LimitExceeded => "limit_exceeded",
            Self::Forbidden => "forbidden",
            Self::Internal => "internal",
        }
    }

    /// The HTTP status the host answers for this code.
    pub fn http_status(self) -> u16 {
        match self {
            Self::InvalidInput => 422,
            Self::NotProvisioned => 404,
            Self::ProviderUnavailable | Self::ProviderRejected => 502,
            Self::LimitExceeded => 429,
            Self::Forbidden => 403,
            Self::Internal => 500,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An action's failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionError {
    pub code: ErrorCode,
    pub message: String,
}

impl ActionError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidInput, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}

impl fmt::Display for ActionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ActionError {}

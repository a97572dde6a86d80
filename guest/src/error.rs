//! The one error shape of every action: a stable code and a sentence for
//! people. Messages name the field and the rule; they never carry a
//! binding's secret, an upstream body or a stack trace.

use std::fmt;

use crate::host::{BindingError, DocumentError};

/// The codes the host understands: it answers each with its HTTP status
/// ([`ErrorCode::http_status`]) on the API and passes it on in MCP results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The input breaks a rule; the message names the field.
    InvalidInput,
    /// What the action reads does not exist.
    NotFound,
    /// The project has not been set up for this action yet.
    NotProvisioned,
    /// The stored state changed under the action (a compare-and-set lost).
    Conflict,
    /// The upstream behind a binding is unreachable, slow, failing (5xx) or
    /// not configured.
    ProviderUnavailable,
    /// The upstream refused the request (4xx, bad credentials) or answered
    /// something unusable (malformed JSON, unexpected shape).
    ProviderRejected,
    /// A host budget (calls, sizes) was used up.
    LimitExceeded,
    /// The caller is not who it must be.
    Unauthenticated,
    /// The host refused: no grant, capability not approved.
    Forbidden,
    /// A bug or a broken stored document.
    Internal,
    /// The manifest declares the action but the extension's code has no
    /// handler for it: the extension's fault, not the caller's.
    NotImplemented,
}

impl ErrorCode {
    /// Every code, for exhaustive checks against the host.
    pub const ALL: [ErrorCode; 11] = [
        Self::InvalidInput,
        Self::NotFound,
        Self::NotProvisioned,
        Self::Conflict,
        Self::ProviderUnavailable,
        Self::ProviderRejected,
        Self::LimitExceeded,
        Self::Unauthenticated,
        Self::Forbidden,
        Self::Internal,
        Self::NotImplemented,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidInput => "invalid_input",
            Self::NotFound => "not_found",
            Self::NotProvisioned => "not_provisioned",
            Self::Conflict => "conflict",
            Self::ProviderUnavailable => "provider_unavailable",
            Self::ProviderRejected => "provider_rejected",
            Self::LimitExceeded => "limit_exceeded",
            Self::Unauthenticated => "unauthenticated",
            Self::Forbidden => "forbidden",
            Self::Internal => "internal",
            Self::NotImplemented => "not_implemented",
        }
    }

    /// The HTTP status the host answers for this code.
    pub fn http_status(self) -> u16 {
        match self {
            Self::InvalidInput => 422,
            Self::NotFound | Self::NotProvisioned => 404,
            Self::Conflict => 409,
            Self::ProviderUnavailable | Self::ProviderRejected => 502,
            Self::LimitExceeded => 429,
            Self::Unauthenticated => 401,
            Self::Forbidden => 403,
            Self::Internal => 500,
            Self::NotImplemented => 501,
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

    /// The answer to an action name the extension does not dispatch. The
    /// host runs only the actions its manifest declares, so this is a
    /// declared action without a handler: the extension's bug.
    pub fn unknown_action(action: &str, offered: &[&str]) -> Self {
        let offered = match offered {
            [] => "no actions".to_owned(),
            [only] => (*only).to_owned(),
            [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
        };
        Self::new(
            ErrorCode::NotImplemented,
            format!(
                "action `{action}` is declared in the manifest but not implemented: \
                 this extension dispatches {offered}; add its handler to `impl manifest::Actions` \
                 (or to `actions!`) and build the component again"
            ),
        )
    }
}

impl fmt::Display for ActionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ActionError {}

/// A binding failure as an action's answer. The host's detail is not
/// copied (it may name the origin); the message says what happened.
impl From<BindingError> for ActionError {
    fn from(error: BindingError) -> Self {
        let (code, message) = match error {
            BindingError::NotGranted(_) => (
                ErrorCode::Forbidden,
                "the extension is not granted to this project",
            ),
            BindingError::CapabilityDenied(_) => (
                ErrorCode::Forbidden,
                "the request is outside the binding's approved capability",
            ),
            BindingError::NotBound(_) => (
                ErrorCode::ProviderUnavailable,
                "the binding is not configured for this project",
            ),
            BindingError::Timeout(_) => (
                ErrorCode::ProviderUnavailable,
                "the binding's origin did not answer in time",
            ),
            BindingError::Unavailable(_) => (
                ErrorCode::ProviderUnavailable,
                "the binding's origin could not be reached",
            ),
            BindingError::ResponseTooLarge(_) => (
                ErrorCode::ProviderRejected,
                "the binding's origin answered more than the host accepts",
            ),
            BindingError::LimitExceeded(_) => (
                ErrorCode::LimitExceeded,
                "the invocation used up its budget of response bytes",
            ),
            BindingError::InvalidRequest(_) => (
                ErrorCode::Internal,
                "the host refused the request as malformed",
            ),
        };
        Self::new(code, message)
    }
}

/// A document-service failure as an action's answer.
impl From<DocumentError> for ActionError {
    fn from(error: DocumentError) -> Self {
        match error {
            DocumentError::Conflict(_) => Self::new(
                ErrorCode::Conflict,
                "the document changed during the request; try again",
            ),
            DocumentError::Invalid(_) => {
                Self::internal("the document service refused the document as invalid")
            }
            DocumentError::Denied(_) => Self::new(
                ErrorCode::Forbidden,
                "the host denied access to the project's documents (grant or documents capability missing)",
            ),
            DocumentError::LimitExceeded(_) => Self::new(
                ErrorCode::LimitExceeded,
                "the document service's size or call limit was reached",
            ),
            DocumentError::Unavailable(_) => {
                Self::internal("the document service is unavailable; try again")
            }
        }
    }
}

//! The host behind a small trait that mirrors the WIT imports of
//! `platform:extension@0.1.0`, so the logic runs natively in tests and the
//! component adapter stays thin.

use std::time::{SystemTime, UNIX_EPOCH};

/// The binding the manifest declares for the analytics provider.
pub const PROVIDER_BINDING: &str = "provider";

/// Public per-project settings (`context.project-settings`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProjectSettings {
    /// Public origin of the shared provider.
    pub provider_origin: Option<String>,
    /// Operator-set origin that serves the tracking script for this project.
    pub tracking_origin: Option<String>,
}

/// The current invocation (`context.invocation`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Invocation {
    pub project_id: String,
    pub request_id: String,
    pub action: String,
    pub settings: ProjectSettings,
}

/// A request through a host-owned binding (`http-binding.request`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequest {
    pub binding: String,
    pub method: String,
    /// Absolute path on the binding's origin.
    pub path: String,
    /// Query string without the leading `?`.
    pub query: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
}

/// The origin's answer (`http-binding.response`), secrets already removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Why a binding call did not produce a response (`http-binding.binding-error`).
/// The strings are the host's details; the plugin never copies them into
/// its own messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindingError {
    NotGranted(String),
    NotBound(String),
    CapabilityDenied(String),
    InvalidRequest(String),
    Timeout(String),
    Unavailable(String),
    ResponseTooLarge(String),
    LimitExceeded(String),
}

/// A stored JSON document (`documents.document`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    pub collection: String,
    pub id: String,
    /// Starts at 1 and grows by one with every write.
    pub revision: u64,
    pub body: String,
}

/// Compare-and-set condition of a write (`documents.precondition`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    None,
    Absent,
    Revision(u64),
}

/// A document-service failure (`documents.document-error`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DocumentError {
    /// The precondition did not hold; the stored revision (0: absent).
    Conflict(u64),
    Invalid(String),
    Denied(String),
    LimitExceeded(String),
    Unavailable(String),
}

/// Log levels (`log.level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

/// What the plugin needs from its host.
pub trait Host {
    /// `context.current`.
    fn invocation(&self) -> Invocation;
    /// `http-binding.send`.
    fn send(&self, request: HttpRequest) -> Result<HttpResponse, BindingError>;
    /// `documents.get`.
    fn get_document(&self, collection: &str, id: &str) -> Result<Option<Document>, DocumentError>;
    /// `documents.put`; answers the new revision.
    fn put_document(
        &self,
        collection: &str,
        id: &str,
        body: &str,
        condition: Precondition,
    ) -> Result<u64, DocumentError>;
    /// `documents.delete`; answers whether a document was deleted.
    fn delete_document(
        &self,
        collection: &str,
        id: &str,
        condition: Precondition,
    ) -> Result<bool, DocumentError>;
    /// `log.write`.
    fn log(&self, level: LogLevel, message: &str);

    /// Now, in Unix milliseconds. The platform WIT has no clock of its own:
    /// the component imports `wasi:clocks/wall-clock`; natively it is the
    /// system clock.
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

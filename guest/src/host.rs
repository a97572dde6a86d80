//! The host behind a small trait that mirrors the WIT imports of
//! `platform:extension@0.1.0`. In a component the trait is implemented by
//! the imports themselves; natively a test implements it, so an extension's
//! logic runs in plain `cargo test`.

use std::time::{SystemTime, UNIX_EPOCH};

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

impl HttpRequest {
    /// A request without query, headers or body through `binding`.
    pub fn new(binding: &str, method: &str, path: &str) -> Self {
        Self {
            binding: binding.to_owned(),
            method: method.to_owned(),
            path: path.to_owned(),
            query: None,
            headers: Vec::new(),
            body: None,
        }
    }

    /// `GET path` through `binding`.
    pub fn get(binding: &str, path: &str) -> Self {
        Self::new(binding, "GET", path)
    }

    /// `POST path` through `binding`.
    pub fn post(binding: &str, path: &str) -> Self {
        Self::new(binding, "POST", path)
    }

    /// Sets the query string (without the leading `?`).
    pub fn query(mut self, query: impl Into<String>) -> Self {
        self.query = Some(query.into());
        self
    }

    /// Adds a request header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// A JSON body, with its `content-type`.
    pub fn json<T: serde::Serialize + ?Sized>(self, body: &T) -> Result<Self, serde_json::Error> {
        let body = serde_json::to_vec(body)?;
        let mut request = self.header("content-type", "application/json");
        request.body = Some(body);
        Ok(request)
    }
}

/// The origin's answer (`http-binding.response`), secrets already removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// A 2xx status.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body read as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// Why a binding call did not produce a response (`http-binding.binding-error`).
/// The strings are the host's details, meant for logs rather than for an
/// action's answer.
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

impl Precondition {
    /// Whether the condition holds for a stored revision (0: absent).
    pub fn holds(self, stored_revision: u64) -> bool {
        match self {
            Precondition::None => true,
            Precondition::Absent => stored_revision == 0,
            Precondition::Revision(revision) => stored_revision == revision,
        }
    }
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

/// What an extension needs from its host.
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
    /// the component imports `wasi:clocks/wall-clock` (only when it calls
    /// this); natively it is the system clock.
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

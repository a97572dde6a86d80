//! A native host for an extension's unit tests: bindings answered by
//! closures, documents in memory with revisions and compare-and-set, and a
//! log. It runs the extension's Rust code directly (no component, no
//! sandbox); host-sim runs the built component.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::host::{
    BindingError, Document, DocumentError, Host, HttpRequest, HttpResponse, Invocation, LogLevel,
    Precondition, ProjectSettings,
};

type Handler = Box<dyn Fn(&HttpRequest) -> Result<HttpResponse, BindingError> + Send + Sync>;

/// An in-memory [`Host`].
pub struct TestHost {
    /// What [`Host::invocation`] answers.
    pub invocation: Invocation,
    /// What [`Host::now_ms`] answers.
    pub now_ms: i64,
    handlers: HashMap<String, Handler>,
    documents: MemoryDocuments,
    requests: Mutex<Vec<HttpRequest>>,
    logs: Mutex<Vec<(LogLevel, String)>>,
}

impl TestHost {
    /// A host for `project` with no bindings, no documents and "now" at
    /// 2026-01-01T00:00:00Z.
    pub fn new(project: &str) -> Self {
        Self {
            invocation: Invocation {
                project_id: project.to_owned(),
                request_id: "test-request".to_owned(),
                action: String::new(),
                settings: ProjectSettings::default(),
            },
            now_ms: 1_767_225_600_000,
            handlers: HashMap::new(),
            documents: MemoryDocuments::default(),
            requests: Mutex::default(),
            logs: Mutex::default(),
        }
    }

    /// Answers requests through `binding` with `handler`; a binding without
    /// a handler is [`BindingError::NotBound`].
    pub fn on_binding(
        mut self,
        binding: &str,
        handler: impl Fn(&HttpRequest) -> Result<HttpResponse, BindingError> + Send + Sync + 'static,
    ) -> Self {
        self.handlers.insert(binding.to_owned(), Box::new(handler));
        self
    }

    /// Every request sent through a binding, in order.
    pub fn requests(&self) -> Vec<HttpRequest> {
        lock(&self.requests).clone()
    }

    /// Every log line, in order.
    pub fn logs(&self) -> Vec<(LogLevel, String)> {
        lock(&self.logs).clone()
    }

    /// The stored document `collection/id`.
    pub fn document(&self, collection: &str, id: &str) -> Option<Document> {
        self.documents.get(collection, id)
    }
}

/// A project's documents in memory, with revisions and compare-and-set as
/// the host keeps them: the first write is revision 1, each write adds one,
/// a [`Precondition`] that does not hold is [`DocumentError::Conflict`] with
/// the stored revision (0 for none), and a body must be JSON. Share one
/// (in an `Arc`) between hosts to model concurrent invocations of a project.
#[derive(Default)]
pub struct MemoryDocuments {
    documents: Mutex<HashMap<(String, String), (u64, String)>>,
}

impl MemoryDocuments {
    /// The stored document `collection/id`.
    pub fn get(&self, collection: &str, id: &str) -> Option<Document> {
        lock(&self.documents)
            .get(&(collection.to_owned(), id.to_owned()))
            .map(|(revision, body)| Document {
                collection: collection.to_owned(),
                id: id.to_owned(),
                revision: *revision,
                body: body.clone(),
            })
    }

    /// How many documents are stored.
    pub fn len(&self) -> usize {
        lock(&self.documents).len()
    }

    /// Whether no document is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes `body` when `condition` holds; answers the new revision.
    pub fn put(
        &self,
        collection: &str,
        id: &str,
        body: &str,
        condition: Precondition,
    ) -> Result<u64, DocumentError> {
        if serde_json::from_str::<serde_json::Value>(body).is_err() {
            return Err(DocumentError::Invalid("the body is not JSON".to_owned()));
        }
        let mut documents = lock(&self.documents);
        let key = (collection.to_owned(), id.to_owned());
        let stored = documents.get(&key).map_or(0, |(revision, _)| *revision);
        if !condition.holds(stored) {
            return Err(DocumentError::Conflict(stored));
        }
        documents.insert(key, (stored + 1, body.to_owned()));
        Ok(stored + 1)
    }

    /// Deletes `collection/id` when `condition` holds; answers whether a
    /// document was deleted.
    pub fn delete(
        &self,
        collection: &str,
        id: &str,
        condition: Precondition,
    ) -> Result<bool, DocumentError> {
        let mut documents = lock(&self.documents);
        let key = (collection.to_owned(), id.to_owned());
        let stored = documents.get(&key).map_or(0, |(revision, _)| *revision);
        if !condition.holds(stored) {
            return Err(DocumentError::Conflict(stored));
        }
        Ok(documents.remove(&key).is_some())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl HttpResponse {
    /// A response with a JSON body, for a binding handler.
    pub fn json_body(status: u16, body: &serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![("content-type".to_owned(), "application/json".to_owned())],
            body: body.to_string().into_bytes(),
        }
    }
}

impl Host for TestHost {
    fn invocation(&self) -> Invocation {
        self.invocation.clone()
    }

    fn send(&self, request: HttpRequest) -> Result<HttpResponse, BindingError> {
        lock(&self.requests).push(request.clone());
        match self.handlers.get(&request.binding) {
            Some(handler) => handler(&request),
            None => Err(BindingError::NotBound(format!(
                "no handler for binding `{}`",
                request.binding
            ))),
        }
    }

    fn get_document(&self, collection: &str, id: &str) -> Result<Option<Document>, DocumentError> {
        Ok(self.document(collection, id))
    }

    fn put_document(
        &self,
        collection: &str,
        id: &str,
        body: &str,
        condition: Precondition,
    ) -> Result<u64, DocumentError> {
        self.documents.put(collection, id, body, condition)
    }

    fn delete_document(
        &self,
        collection: &str,
        id: &str,
        condition: Precondition,
    ) -> Result<bool, DocumentError> {
        self.documents.delete(collection, id, condition)
    }

    fn log(&self, level: LogLevel, message: &str) {
        lock(&self.logs).push((level, message.to_owned()));
    }

    fn now_ms(&self) -> i64 {
        self.now_ms
    }
}

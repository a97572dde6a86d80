//! A native stand-in for the extension host: the `provider` binding over
//! loopback HTTP (adds the secret, checks the manifest's capability), an
//! in-memory document service with revisions and compare-and-set, and a log.
//! Unlike the real host it does not redact secrets from responses, so a test
//! that finds no secret in a message proves the plugin copied none.

#![allow(dead_code, reason = "each test binary uses a different part")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use extension_guest::testing::MemoryDocuments;
use managed_analytics::host::{
    BindingError, Document, DocumentError, Host, HttpRequest, HttpResponse, Invocation, LogLevel,
    Precondition, ProjectSettings,
};
use umami_fake::{FakeConfig, FakeHandle, UmamiFake};

pub const SECRET: &str = "s3cret-provider-token-4f9d2a";
pub const PROJECT: &str = "prj_7c1f0e";
pub const PROVIDER_ORIGIN: &str = "https://analytics.example.net";
/// 2026-11-21T12:00:00Z, the tests' "now".
pub const NOW_MS: i64 = 1_795_262_400_000;
pub const DAY_MS: i64 = 86_400_000;

/// The `[capabilities.http.provider]` allow list of manifest.toml.
const ALLOWED: &[(&str, &str)] = &[
    ("POST", "/api/auth/verify"),
    ("POST", "/api/websites"),
    ("GET", "/api/websites/{id}"),
    ("POST", "/api/websites/{id}"),
    ("GET", "/api/websites/{id}/stats"),
    ("GET", "/api/websites/{id}/pageviews"),
];

fn allowed(method: &str, path: &str) -> bool {
    ALLOWED.iter().any(|(m, pattern)| {
        *m == method && {
            let want: Vec<&str> = pattern.split('/').collect();
            let got: Vec<&str> = path.split('/').collect();
            want.len() == got.len()
                && want
                    .iter()
                    .zip(&got)
                    .all(|(w, g)| *w == *g || (*w == "{id}" && !g.is_empty()))
        }
    })
}

pub struct TestHost {
    pub invocation: Invocation,
    base_url: Option<String>,
    secret: String,
    agent: ureq::Agent,
    /// Shared by every sibling host of the project (like the core's).
    pub documents: Arc<MemoryDocuments>,
    pub logs: Mutex<Vec<String>>,
    /// `METHOD path` of every request the plugin sent.
    pub sent: Mutex<Vec<String>>,
    pub now_ms: i64,
}

impl TestHost {
    /// A host for `PROJECT` whose `provider` binding points at `base_url`.
    pub fn new(base_url: Option<String>) -> Self {
        Self {
            invocation: Invocation {
                project_id: PROJECT.into(),
                request_id: "req-1".into(),
                action: String::new(),
                settings: ProjectSettings {
                    provider_origin: Some(PROVIDER_ORIGIN.into()),
                    tracking_origin: None,
                },
            },
            base_url,
            secret: SECRET.into(),
            agent: ureq::Agent::config_builder()
                .timeout_global(Some(Duration::from_millis(700)))
                .http_status_as_error(false)
                .build()
                .into(),
            documents: Arc::new(MemoryDocuments::default()),
            logs: Mutex::new(Vec::new()),
            sent: Mutex::new(Vec::new()),
            now_ms: NOW_MS,
        }
    }

    pub fn for_fake(fake: &FakeHandle) -> Self {
        Self::new(Some(fake.base_url()))
    }

    /// Another host of the same project sharing its documents (a second
    /// concurrent invocation).
    pub fn sibling(&self) -> Self {
        let mut host = Self::new(self.base_url.clone());
        host.invocation = self.invocation.clone();
        host.secret = self.secret.clone();
        host.documents = Arc::clone(&self.documents);
        host.now_ms = self.now_ms;
        host
    }

    pub fn with_secret(mut self, secret: &str) -> Self {
        self.secret = secret.into();
        self
    }

    pub fn with_tracking_origin(mut self, origin: &str) -> Self {
        self.invocation.settings.tracking_origin = Some(origin.into());
        self
    }

    pub fn sent(&self) -> Vec<String> {
        self.sent.lock().unwrap().clone()
    }

    pub fn mapping_revision(&self) -> Option<u64> {
        self.documents
            .get("site", "mapping")
            .map(|document| document.revision)
    }

    /// Fails if the secret appears in any log line.
    pub fn assert_logs_hold_no_secret(&self) {
        for line in self.logs.lock().unwrap().iter() {
            assert!(
                !line.contains(SECRET),
                "a log line holds the secret: {line}"
            );
        }
    }
}

fn transport_error(error: &ureq::Error) -> BindingError {
    let timed_out = match error {
        ureq::Error::Timeout(_) => true,
        ureq::Error::Io(e) => matches!(
            e.kind(),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
        ),
        _ => false,
    };
    if timed_out {
        BindingError::Timeout("the origin did not answer in time".into())
    } else {
        BindingError::Unavailable("the origin could not be reached".into())
    }
}

impl TestHost {
    /// Sends `request` to `url` with the binding's credential added.
    fn run(
        &self,
        request: &HttpRequest,
        url: &str,
    ) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        let mut builder = ureq::http::Request::builder()
            .method(request.method.as_str())
            .uri(url)
            .header("Authorization", format!("Bearer {}", self.secret));
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        match &request.body {
            Some(body) => self
                .agent
                .run(builder.body(body.clone()).map_err(ureq::Error::Http)?),
            None => self.agent.run(builder.body(()).map_err(ureq::Error::Http)?),
        }
    }
}

impl Host for TestHost {
    fn invocation(&self) -> Invocation {
        self.invocation.clone()
    }

    fn send(&self, request: HttpRequest) -> Result<HttpResponse, BindingError> {
        if request.binding != "provider" {
            return Err(BindingError::NotBound(request.binding));
        }
        let Some(base_url) = &self.base_url else {
            return Err(BindingError::NotBound("provider".into()));
        };
        if !allowed(&request.method, &request.path) {
            return Err(BindingError::CapabilityDenied(format!(
                "{} {}",
                request.method, request.path
            )));
        }
        if request.headers.iter().any(|(name, _)| {
            ["authorization", "cookie", "host"].contains(&name.to_ascii_lowercase().as_str())
        }) {
            return Err(BindingError::InvalidRequest("a refused header".into()));
        }
        self.sent
            .lock()
            .unwrap()
            .push(format!("{} {}", request.method, request.path));
        let url = match &request.query {
            Some(query) => format!("{base_url}{}?{query}", request.path),
            None => format!("{base_url}{}", request.path),
        };
        let mut response = self.run(&request, &url).map_err(|e| transport_error(&e))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.to_string(),
                    value.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let body = response
            .body_mut()
            .read_to_vec()
            .map_err(|e| transport_error(&e))?;
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }

    fn get_document(&self, collection: &str, id: &str) -> Result<Option<Document>, DocumentError> {
        Ok(self.documents.get(collection, id))
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
        self.logs
            .lock()
            .unwrap()
            .push(format!("{level:?} {message}"));
    }

    fn now_ms(&self) -> i64 {
        self.now_ms
    }
}

/// A fake provider (admin account, v3 shapes) with `SECRET`.
pub fn start_fake() -> FakeHandle {
    UmamiFake::start(FakeConfig::new(SECRET)).expect("the fake provider starts on loopback")
}

pub fn provision_input(name: &str, domain: &str) -> String {
    serde_json::json!({"name": name, "domain": domain}).to_string()
}

/// Required and known field names of a `[definitions.NAME]` output shape of
/// manifest.toml.
pub fn manifest_definition(name: &str) -> (Vec<String>, Vec<String>) {
    let manifest: toml::Table = toml::from_str(include_str!("../../../manifest.toml")).unwrap();
    let definition = &manifest["definitions"][name];
    let required = definition["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let properties = definition["properties"]
        .as_table()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    (required, properties)
}

//! An in-process test host for an extension's own tests, in the manner of
//! spin-test's virtualised outbound HTTP: the built component runs in this
//! host exactly as `host-sim serve` runs it (sandbox, capability checks,
//! documents, the secret added by the host and redacted from what comes
//! back), while each binding is answered by a handler of the test, in this
//! process. Nothing leaves the machine: a binding's origin is a loopback
//! listener that hands every request to the handler.
//!
//! A test scripts the provider (answers, status codes, delays) and asserts
//! on the requests the extension made (method, path, query, body, and the
//! secret only the host adds):
//!
//! ```no_run
//! use host_sim::testing::{ProviderResponse, TestHost};
//! use serde_json::json;
//!
//! let host = TestHost::from_files("manifest.toml", "target/wasm32-wasip1/release/hello.wasm")
//!     .unwrap()
//!     .binding("upstream", |_request| {
//!         ProviderResponse::json(200, &json!({ "salutation": "Hello" }))
//!     })
//!     .build()
//!     .unwrap();
//! let output = host.invoke("hello.greet", json!({ "name": "Ada" })).unwrap();
//! let requests = host.requests("upstream");
//! assert_eq!(requests[0].path, "/salutation.json");
//! assert_eq!(
//!     requests[0].header("authorization"),
//!     Some(format!("Bearer {}", host.secret("upstream")).as_str())
//! );
//! # let _ = output;
//! ```
//!
//! The state is a throwaway development state (see
//! [`crate::DEVELOPMENT_MARKER`]) holding the unsigned build, every declared
//! capability approved, granted to one project.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;

use crate::error::InvokeError;
use crate::host::{Caller, Host, HostConfig, HostError, Invocation, InvokeRequest};
use crate::limits::SandboxLimits;
use crate::secret::Secret;
use crate::state::{AuthStyle, DocumentScope};
use crate::verify::InstallError;

/// The project a [`TestHost`] grants the extension to, unless told otherwise.
pub const TEST_PROJECT: &str = "test-project";

/// Where [`TestHost::from_files`] and `host-sim dev` keep compiled
/// components: `$HOST_SIM_COMPILE_CACHE` (empty: nowhere), else the user's
/// cache directory (`$XDG_CACHE_HOME`, or `~/.cache`) under
/// `host-sim/compiled`. A per-user folder, never one beside the build (which
/// may be a release being staged).
pub fn default_compile_cache() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("HOST_SIM_COMPILE_CACHE") {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("host-sim/compiled"))
}

/// Why a [`TestHost`] could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TestHostError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the development build was refused: {0}")]
    Install(#[from] InstallError),
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("the in-process provider could not start: {0}")]
    Provider(std::io::Error),
    #[error("binding `{0}` is not declared in the manifest's [capabilities.http]")]
    UndeclaredBinding(String),
}

/// A request the extension sent through a binding, as the provider got it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl ProviderRequest {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON, if it is.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// What a scripted provider answers.
#[derive(Debug, Clone)]
pub struct ProviderResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    delay: Duration,
}

impl ProviderResponse {
    /// `status` with an empty body.
    pub fn status(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            delay: Duration::ZERO,
        }
    }

    /// `status` with a JSON body.
    pub fn json(status: u16, body: &Value) -> Self {
        Self::status(status)
            .header("content-type", "application/json")
            .body(body.to_string().into_bytes())
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Answers only after `delay` (past the binding's timeout, the
    /// extension gets a timeout).
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

type Handler = Arc<dyn Fn(&ProviderRequest) -> ProviderResponse + Send + Sync>;

enum Script {
    Handler(Handler),
    /// Nothing listens at the origin.
    Unreachable,
}

/// Sets up a [`TestHost`].
pub struct TestHostBuilder {
    manifest: String,
    files: BTreeMap<String, Vec<u8>>,
    project: String,
    bindings: BTreeMap<String, Script>,
    timeout: Duration,
    limits: SandboxLimits,
    compile_cache: Option<PathBuf>,
}

impl TestHostBuilder {
    /// Keeps the compiled component in `dir` (see
    /// [`crate::sandbox::compile_cached`]); [`TestHost::from_files`] uses
    /// [`default_compile_cache`].
    pub fn compile_cache(mut self, dir: impl Into<PathBuf>) -> Self {
        self.compile_cache = Some(dir.into());
        self
    }

    /// Answers the binding `name` with `handler`, called once per request.
    pub fn binding(
        mut self,
        name: &str,
        handler: impl Fn(&ProviderRequest) -> ProviderResponse + Send + Sync + 'static,
    ) -> Self {
        self.bindings
            .insert(name.to_owned(), Script::Handler(Arc::new(handler)));
        self
    }

    /// Binds `name` to an origin where nothing listens.
    pub fn unreachable_binding(mut self, name: &str) -> Self {
        self.bindings.insert(name.to_owned(), Script::Unreachable);
        self
    }

    /// The timeout of every binding's calls (default 2 s).
    pub fn binding_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The project the extension is granted to (default [`TEST_PROJECT`]).
    pub fn project(mut self, project: &str) -> Self {
        project.clone_into(&mut self.project);
        self
    }

    pub fn limits(mut self, limits: SandboxLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Installs the build in a throwaway development state, approves every
    /// declared capability, grants it to the project, binds each scripted
    /// binding (each with a secret of its own) and issues a token.
    pub fn build(self) -> Result<TestHost, TestHostError> {
        let dir = tempfile::tempdir().map_err(|source| TestHostError::Read {
            path: "a temporary directory".to_owned(),
            source,
        })?;
        let mut config = HostConfig::development(dir.path().join("state"));
        config.limits = self.limits;
        config.compile_cache = self.compile_cache;
        let host = Arc::new(Host::open(config)?);
        let installed = host.install_development(&self.manifest, self.files, &mut |_| {})?;
        let extension = installed.extension_id;
        for name in self.bindings.keys() {
            if !installed
                .capabilities
                .iter()
                .any(|c| c.strip_prefix("http:") == Some(name.as_str()))
            {
                return Err(TestHostError::UndeclaredBinding(name.clone()));
            }
        }
        host.grant(&extension, &self.project)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("test-provider")
            .enable_all()
            .build()
            .map_err(TestHostError::Provider)?;
        let mut providers = BTreeMap::new();
        for (name, script) in self.bindings {
            let secret = format!("test-secret-{name}-{}", crate::host::new_request_id());
            let requests = Arc::new(Mutex::new(Vec::new()));
            let origin = match script {
                Script::Handler(handler) => {
                    let address = runtime
                        .block_on(serve_provider(handler, requests.clone()))
                        .map_err(TestHostError::Provider)?;
                    format!("http://{address}")
                }
                Script::Unreachable => {
                    let listener = std::net::TcpListener::bind("127.0.0.1:0")
                        .map_err(TestHostError::Provider)?;
                    let address = listener.local_addr().map_err(TestHostError::Provider)?;
                    drop(listener);
                    format!("http://{address}")
                }
            };
            host.set_binding(
                &self.project,
                &name,
                &origin,
                Secret::new(secret.clone()),
                AuthStyle::Bearer,
                self.timeout,
            )?;
            providers.insert(name, Provider { secret, requests });
        }
        let token = host
            .issue_token(
                "test-developer",
                std::slice::from_ref(&self.project),
                Duration::from_secs(24 * 3600),
            )?
            .token;
        Ok(TestHost {
            host,
            extension,
            project: self.project,
            token,
            providers,
            runtime: Some(runtime),
            _dir: dir,
        })
    }
}

struct Provider {
    secret: String,
    requests: Arc<Mutex<Vec<ProviderRequest>>>,
}

/// A running extension in a throwaway development state, its bindings
/// answered in process. See the [module documentation](self).
pub struct TestHost {
    host: Arc<Host>,
    extension: String,
    project: String,
    token: String,
    providers: BTreeMap<String, Provider>,
    runtime: Option<tokio::runtime::Runtime>,
    _dir: tempfile::TempDir,
}

impl Drop for TestHost {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl TestHost {
    /// A test host for the manifest and the built component at these paths.
    pub fn from_files(
        manifest: impl AsRef<Path>,
        component: impl AsRef<Path>,
    ) -> Result<TestHostBuilder, TestHostError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| TestHostError::Read {
                path: path.display().to_string(),
                source,
            })
        };
        let manifest_path = manifest.as_ref();
        let manifest =
            String::from_utf8(read(manifest_path)?).map_err(|_| TestHostError::Read {
                path: manifest_path.display().to_string(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"),
            })?;
        let bytes = read(component.as_ref())?;
        let builder = Self::from_bytes(&manifest, bytes);
        Ok(match default_compile_cache() {
            Some(dir) => builder.compile_cache(dir),
            None => builder,
        })
    }

    /// A test host for a manifest's text and a component's bytes (stored
    /// under the manifest's `extension.component` name).
    pub fn from_bytes(manifest: &str, component: Vec<u8>) -> TestHostBuilder {
        let name = extension_release::Manifest::from_toml(manifest)
            .map(|m| m.extension.component)
            .unwrap_or_default();
        TestHostBuilder {
            manifest: manifest.to_owned(),
            files: BTreeMap::from([(name, component)]),
            project: TEST_PROJECT.to_owned(),
            bindings: BTreeMap::new(),
            timeout: Duration::from_secs(2),
            limits: SandboxLimits::default(),
            compile_cache: None,
        }
    }

    /// Runs `action` with `input` as the test developer; the action's
    /// output or the error the host answers.
    pub fn invoke(&self, action: &str, input: Value) -> Result<Value, InvokeError> {
        self.invocation(action, input).result
    }

    /// [`Self::invoke`] with the request id and generation.
    pub fn invocation(&self, action: &str, input: Value) -> Invocation {
        self.host.invoke(
            &Caller::bearer(&self.token),
            &InvokeRequest {
                extension: self.extension.clone(),
                project: self.project.clone(),
                action: action.to_owned(),
                input,
                generation: None,
            },
        )
    }

    /// Every request the extension sent through `binding`, in order.
    pub fn requests(&self, binding: &str) -> Vec<ProviderRequest> {
        self.providers
            .get(binding)
            .map(|p| lock(&p.requests).clone())
            .unwrap_or_default()
    }

    /// The secret the host sends on `binding` (never shown to the guest).
    pub fn secret(&self, binding: &str) -> &str {
        self.providers
            .get(binding)
            .map_or("", |p| p.secret.as_str())
    }

    /// The project's document `collection/id` of this extension: its
    /// revision and body.
    pub fn document(&self, collection: &str, id: &str) -> Option<(u64, Value)> {
        let stored = self
            .host
            .state()
            .document(
                DocumentScope {
                    project_id: &self.project,
                    extension_id: &self.extension,
                },
                collection,
                id,
            )
            .ok()??;
        Some((
            stored.revision,
            serde_json::from_str(&stored.body).unwrap_or(Value::Null),
        ))
    }

    pub fn extension(&self) -> &str {
        &self.extension
    }

    pub fn project(&self) -> &str {
        &self.project
    }

    /// The host, for anything the helpers above do not cover.
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }

    /// A bearer token of the test developer for the project.
    pub fn token(&self) -> &str {
        &self.token
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Serves `handler` on a loopback port; answers the address.
async fn serve_provider(
    handler: Handler,
    requests: Arc<Mutex<Vec<ProviderRequest>>>,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let handler = handler.clone();
        let requests = requests.clone();
        async move { answer(&handler, &requests, request).await }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(address)
}

async fn answer(
    handler: &Handler,
    requests: &Mutex<Vec<ProviderRequest>>,
    request: axum::extract::Request,
) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default();
    let seen = ProviderRequest {
        method: parts.method.as_str().to_owned(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
    };
    lock(requests).push(seen.clone());
    let scripted = handler(&seen);
    if !scripted.delay.is_zero() {
        tokio::time::sleep(scripted.delay).await;
    }
    let mut response = axum::response::Response::builder().status(scripted.status);
    for (name, value) in &scripted.headers {
        response = response.header(name, value);
    }
    response
        .body(axum::body::Body::from(scripted.body))
        .unwrap_or_else(|e| {
            axum::response::Response::builder()
                .status(500)
                .body(axum::body::Body::from(format!(
                    "the scripted response is not valid HTTP: {e}"
                )))
                .expect("a fixed response is valid")
        })
}

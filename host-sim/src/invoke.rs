//! The one invocation function every surface calls (CLI now; HTTP API, MCP
//! server and console later). It checks, in this order and each with its
//! own error: the caller's current project access, the extension's grant to
//! the project, operator approval of every capability the action needs, and
//! the caller's runtime generation; then validates the input and runs the
//! action in a fresh store from a cached `InstancePre`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmtime::Store;

use crate::bindings::{ManagedExtension, ManagedExtensionPre};
use crate::error::{InvokeError, Limit};
use crate::host::{Host, LoadedRelease, PreKey};
use crate::housekeeping::Housekeeping;
use crate::runtime::{self, InvocationScope, InvocationState};
use crate::spec::{self, ExtensionSpec};

/// Who calls: the bearer token a surface received. Its `Debug` never shows
/// the token.
#[derive(Clone)]
pub struct Caller {
    token: String,
}

impl Caller {
    pub fn bearer(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
        }
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }
}

impl fmt::Debug for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Caller(bearer [redacted])")
    }
}

/// Instantiation timings of one release, both ways, taken in one run.
#[derive(Debug, Clone)]
pub struct InstantiationSamples {
    /// Fresh store + `InstancePre::instantiate` on the pooled engine.
    pub pooled_pre: Vec<Duration>,
    /// Fresh store + `Linker::instantiate` on a plain (on-demand) engine.
    pub plain_linker: Vec<Duration>,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct InvokeRequest {
    pub extension: String,
    pub project: String,
    pub action: String,
    pub input: Value,
    /// The runtime generation the caller last saw; `None` runs the current one.
    pub generation: Option<u64>,
}

/// The outcome of one invocation, with the host-generated request id.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub request_id: String,
    /// The generation the action ran under (known once the checks passed).
    pub generation: Option<u64>,
    pub result: Result<Value, InvokeError>,
}

impl Invocation {
    /// `{"request_id", "generation", "output"}` or the error shape with the
    /// request id beside it.
    pub fn to_json(&self) -> Value {
        match &self.result {
            Ok(output) => serde_json::json!({
                "request_id": self.request_id,
                "generation": self.generation,
                "output": output,
            }),
            Err(error) => {
                let mut body = error.to_json();
                body["request_id"] = Value::String(self.request_id.clone());
                body
            }
        }
    }
}

/// A new request id: a random (version 4) UUID, drawn from the thread's
/// generator instead of a system call per request.
pub(crate) fn new_request_id() -> String {
    uuid::Builder::from_random_bytes(rand::random())
        .into_uuid()
        .simple()
        .to_string()
}

/// The store of a running invocation. When the invocation ends the store
/// goes to the housekeeping, to be dropped in a later wait, unless the
/// guest trapped or grew its memory past [`RETIRE_MEMORY_LIMIT`]: resetting
/// that much memory would stall another invocation's wait, so such a store
/// is dropped at once, on its own invocation's time.
struct InUse<'a> {
    store: Option<Store<InvocationState>>,
    housekeeping: &'a Housekeeping,
}

/// Linear memory up to which a finished store is handed to the housekeeping.
const RETIRE_MEMORY_LIMIT: usize = 4 << 20;

impl InUse<'_> {
    /// Drops the store now (the guest trapped).
    fn discard(mut self) {
        drop(self.store.take());
    }
}

impl std::ops::Deref for InUse<'_> {
    type Target = Store<InvocationState>;
    fn deref(&self) -> &Self::Target {
        self.store.as_ref().expect("in use until dropped")
    }
}

impl std::ops::DerefMut for InUse<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.store.as_mut().expect("in use until dropped")
    }
}

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        if let Some(store) = self.store.take()
            && store.data().memory_grown_to <= RETIRE_MEMORY_LIMIT
        {
            self.housekeeping.retire(store);
        }
    }
}

fn internal(what: &str, error: impl fmt::Display) -> InvokeError {
    tracing::error!(error = %error, "{what}");
    InvokeError::Internal(format!("{what}; see the host log"))
}

impl Host {
    /// Runs `request` for `caller`. Blocking (run it on a blocking thread
    /// from async code); safe to call from many threads at once.
    pub fn invoke(&self, caller: &Caller, request: &InvokeRequest) -> Invocation {
        let request_id = new_request_id();
        let started = Instant::now();
        let mut generation = None;
        let in_flight = self.housekeeping.enter();
        let result = self.run(caller, request, &request_id, &mut generation);
        drop(in_flight);
        let elapsed_us = started.elapsed().as_micros() as u64;
        match &result {
            Ok(_) => tracing::info!(
                request_id = %request_id,
                extension = %request.extension,
                project = %request.project,
                action = %request.action,
                elapsed_us,
                "invocation ok"
            ),
            Err(error) => tracing::warn!(
                request_id = %request_id,
                extension = %request.extension,
                project = %request.project,
                action = %request.action,
                code = error.code(),
                elapsed_us,
                "invocation failed: {error}"
            ),
        }
        Invocation {
            request_id,
            generation,
            result,
        }
    }

    fn run(
        &self,
        caller: &Caller,
        request: &InvokeRequest,
        request_id: &str,
        generation_out: &mut Option<u64>,
    ) -> Result<Value, InvokeError> {
        let snapshot = self
            .state
            .invocation_snapshot(&caller.token, &request.extension, &request.project)
            .map_err(|e| internal("the host state is unavailable", e))?;
        if snapshot.user.is_none() {
            return Err(InvokeError::Unauthenticated);
        }
        if !snapshot.project_access {
            return Err(InvokeError::NoProjectAccess {
                project: request.project.clone(),
            });
        }
        if !snapshot.granted {
            return Err(InvokeError::NotGranted {
                extension: request.extension.clone(),
                project: request.project.clone(),
            });
        }
        let digest = snapshot.release_digest.as_deref().ok_or_else(|| {
            InvokeError::NotFound(format!("{} is not installed", request.extension))
        })?;
        let release = self.loaded_release(&request.extension, digest)?;
        let action = release.spec.actions.get(&request.action).ok_or_else(|| {
            InvokeError::NotFound(format!(
                "{} has no action {}",
                request.extension, request.action
            ))
        })?;
        if let Some(missing) = action
            .capabilities
            .iter()
            .find(|c| !snapshot.approved.contains(*c))
        {
            return Err(InvokeError::CapabilityNotApproved {
                action: action.name.clone(),
                capability: missing.clone(),
            });
        }
        if let Some(presented) = request.generation
            && presented != snapshot.generation
        {
            return Err(InvokeError::StaleGeneration {
                presented,
                current: snapshot.generation,
            });
        }
        *generation_out = Some(snapshot.generation);

        let input = request.input.to_string();
        if input.len() > self.limits.max_input_bytes {
            return Err(InvokeError::LimitExceeded {
                limit: Limit::InputBytes,
                message: format!(
                    "the input is larger than {} bytes",
                    self.limits.max_input_bytes
                ),
            });
        }
        spec::check(&action.input, &request.input, "input").map_err(InvokeError::InvalidInput)?;

        let (key, pre) = self.instance_pre(&release, &request.project, snapshot.generation)?;
        let provider_origin = release.spec.provider_binding().and_then(|name| {
            snapshot
                .bindings
                .iter()
                .find(|binding| binding.name == name)
                .map(|binding| binding.origin.clone())
        });
        let scope = Arc::new(InvocationScope {
            extension_id: request.extension.clone(),
            project_id: request.project.clone(),
            request_id: request_id.to_string(),
            action: request.action.clone(),
            release_digest: release.digest.clone(),
            spec: release.spec.clone(),
            settings: snapshot.settings.clone(),
            provider_origin,
            deadline: Instant::now() + self.limits.deadline,
        });
        let (store, instance) = match self.housekeeping.take(&key) {
            Some(prepared) => {
                let mut store = prepared.store;
                store.data_mut().scope = scope;
                store.set_epoch_deadline(self.limits.deadline_ticks());
                (store, prepared.instance)
            }
            None => self.instantiate(&pre, scope)?,
        };
        let mut store = InUse {
            store: Some(store),
            housekeeping: &self.housekeeping,
        };
        let data = store.data_mut();
        data.idle = Arc::downgrade(&self.housekeeping);
        data.seed_checks(
            snapshot.version,
            snapshot.granted,
            &snapshot.approved,
            &snapshot.bindings,
        );
        if !self.housekeeping.wants(&key) {
            let waiting = Arc::new(InvocationScope {
                request_id: String::new(),
                action: String::new(),
                settings: Default::default(),
                provider_origin: None,
                ..(*store.data().scope).clone()
            });
            self.housekeeping.want(key, pre, waiting);
        }
        let outcome = instance.platform_extension_extension().call_invoke(
            &mut *store,
            &request.action,
            &input,
        );
        let data = store.data_mut();
        data.flush_guest_output();
        if data.grant_revoked {
            return Err(InvokeError::NotGranted {
                extension: request.extension.clone(),
                project: request.project.clone(),
            });
        }
        match outcome {
            Ok(Ok(output)) => {
                if output.len() > self.limits.max_output_bytes {
                    return Err(InvokeError::LimitExceeded {
                        limit: Limit::OutputBytes,
                        message: format!(
                            "the extension's output is larger than {} bytes",
                            self.limits.max_output_bytes
                        ),
                    });
                }
                let output = data.redact(output);
                let value: Value = serde_json::from_str(&output).map_err(|_| {
                    InvokeError::Internal("the extension answered with invalid JSON".into())
                })?;
                if let Some(validator) = &action.output {
                    spec::check(validator, &value, "output").map_err(|m| {
                        InvokeError::Internal(format!(
                            "the extension's output does not match its output_schema: {m}"
                        ))
                    })?;
                }
                Ok(value)
            }
            Ok(Err(error)) => {
                let code = if !error.code.is_empty()
                    && error.code.len() <= 64
                    && error
                        .code
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                {
                    error.code
                } else {
                    "internal".to_string()
                };
                let mut message = data.redact(error.message);
                if message.len() > 2000 {
                    let mut cut = 2000;
                    while !message.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    message.truncate(cut);
                }
                Err(InvokeError::Action { code, message })
            }
            Err(trap) => {
                store.discard();
                Err(runtime::classify_trap(&trap, &self.limits))
            }
        }
    }

    /// A fresh store and instance of `pre` for `scope`. A full pool first
    /// gives back the stores the housekeeping holds, then tries once more.
    fn instantiate(
        &self,
        pre: &ManagedExtensionPre<InvocationState>,
        scope: Arc<InvocationScope>,
    ) -> Result<(Store<InvocationState>, ManagedExtension), InvokeError> {
        let attempt = |scope| self.housekeeping.instantiate(pre, scope);
        let full = |e: &wasmtime::Error| {
            e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                .is_some()
        };
        let outcome = match attempt(scope.clone()) {
            Err(e) if full(&e) => {
                self.housekeeping.release();
                attempt(scope)
            }
            outcome => outcome,
        };
        outcome.map_err(|e| {
            if full(&e) {
                InvokeError::LimitExceeded {
                    limit: Limit::Capacity,
                    message: "every sandbox slot is in use; try again".into(),
                }
            } else {
                runtime::classify_trap(&e, &self.limits)
            }
        })
    }

    /// Measures instantiating an installed release `iterations` times from
    /// the pooled, cached `InstancePre` the invocations use and with a plain
    /// `Linker::instantiate` on an engine without pooling, interleaved.
    pub fn measure_instantiation(
        &self,
        extension: &str,
        project: &str,
        iterations: usize,
    ) -> Result<InstantiationSamples, InvokeError> {
        let stored = self
            .state
            .release(extension)
            .map_err(|e| internal("the host state is unavailable", e))?
            .ok_or_else(|| InvokeError::NotFound(format!("{extension} is not installed")))?;
        let release = self.loaded_release(extension, &stored.digest)?;
        let generation = self
            .state
            .generation(extension, project)
            .map_err(|e| internal("the host state is unavailable", e))?;
        let (_, pre) = self.instance_pre(&release, project, generation)?;
        let bytes = self
            .state
            .release_file(extension, &release.spec.component)
            .map_err(|e| internal("the host state is unavailable", e))?
            .ok_or_else(|| internal("the stored release lacks its component", extension))?;
        let plain_engine =
            runtime::engine(&self.limits, false).map_err(|e| internal("plain engine", e))?;
        let plain_linker =
            runtime::linker(&plain_engine).map_err(|e| internal("plain linker", e))?;
        let plain_component =
            runtime::compile(&plain_engine, &bytes).map_err(|e| internal("plain compile", e))?;
        let scope = Arc::new(InvocationScope {
            extension_id: extension.to_string(),
            project_id: project.to_string(),
            request_id: "instantiation-benchmark".into(),
            action: String::new(),
            release_digest: release.digest.clone(),
            spec: release.spec.clone(),
            settings: Default::default(),
            provider_origin: None,
            deadline: Instant::now() + self.limits.deadline,
        });
        let data = || {
            InvocationState::new(
                scope.clone(),
                self.state.clone(),
                self.client.clone(),
                self.limits.clone(),
            )
        };
        let ticks = self.limits.deadline_ticks();
        let mut samples = InstantiationSamples {
            pooled_pre: Vec::with_capacity(iterations),
            plain_linker: Vec::with_capacity(iterations),
        };
        for _ in 0..iterations {
            let started = Instant::now();
            let mut store = runtime::new_store(&self.engine, data(), ticks);
            pre.instantiate(&mut store)
                .map_err(|e| internal("pooled instantiation", e))?;
            drop(store);
            samples.pooled_pre.push(started.elapsed());

            let started = Instant::now();
            let mut store = runtime::new_store(&plain_engine, data(), ticks);
            plain_linker
                .instantiate(&mut store, &plain_component)
                .map_err(|e| internal("plain instantiation", e))?;
            drop(store);
            samples.plain_linker.push(started.elapsed());
        }
        Ok(samples)
    }

    /// The installed release with `digest`, compiled once and cached.
    pub(crate) fn loaded_release(
        &self,
        extension: &str,
        digest: &str,
    ) -> Result<Arc<LoadedRelease>, InvokeError> {
        if let Some(release) = self
            .releases
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(digest)
        {
            return Ok(release.clone());
        }
        let stored = self
            .state
            .release(extension)
            .map_err(|e| internal("the host state is unavailable", e))?
            .filter(|r| r.digest == digest)
            .ok_or_else(|| InvokeError::NotFound(format!("{extension} is not installed")))?;
        let manifest = extension_release::Manifest::from_toml(&stored.manifest)
            .map_err(|e| internal("the stored manifest does not parse", e))?;
        let spec = ExtensionSpec::from_manifest(&manifest)
            .map_err(|e| internal("the stored manifest is not usable", e))?;
        let bytes = self
            .state
            .release_file(extension, &spec.component)
            .map_err(|e| internal("the host state is unavailable", e))?
            .ok_or_else(|| internal("the stored release lacks its component", &spec.component))?;
        let component = runtime::compile(&self.engine, &bytes)
            .map_err(|e| internal("the stored component does not compile", e))?;
        let release = Arc::new(LoadedRelease {
            digest: digest.to_string(),
            spec: Arc::new(spec),
            component,
        });
        self.releases
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(digest.to_string(), release.clone());
        Ok(release)
    }

    /// The pre-instantiation for (release, project, generation); a newer
    /// generation replaces the project's older entries.
    fn instance_pre(
        &self,
        release: &LoadedRelease,
        project: &str,
        generation: u64,
    ) -> Result<(PreKey, ManagedExtensionPre<InvocationState>), InvokeError> {
        let key = PreKey {
            digest: release.digest.clone(),
            project: project.to_string(),
            generation,
        };
        if let Some(pre) = self
            .instances
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok((key, pre.clone()));
        }
        let pre = self
            .linker
            .instantiate_pre(&release.component)
            .and_then(ManagedExtensionPre::new)
            .map_err(|e| internal("the component cannot be linked", e))?;
        let mut instances = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        instances.retain(|k, _| !(k.digest == key.digest && k.project == key.project));
        instances.insert(key.clone(), pre.clone());
        Ok((key, pre))
    }
}

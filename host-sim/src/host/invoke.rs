//! The one invocation function every surface calls (the CLI, the HTTP API,
//! the MCP server and the console). It checks, in this order and each with
//! its own error: the caller's current project access, the extension's
//! grant to the project, operator approval of every capability the action
//! needs, and the caller's runtime generation; then validates the input and
//! runs the action in a fresh store from the instance pool.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::Host;
use crate::capabilities::InvocationScope;
use crate::capabilities::checks::GuestLogLine;
use crate::capabilities::context::ContextCtx;
use crate::error::{InvokeError, Limit};
use crate::pool::{InstantiationSamples, LoadError};
use crate::sandbox::{self, CompiledRelease};
use crate::spec;
use crate::state;

/// Who calls: the bearer token a surface received, and the resource that
/// surface is when it accepts tokens bound to it (RFC 8707: the MCP
/// server's URL). Its `Debug` never shows the token.
#[derive(Clone)]
pub struct Caller {
    token: String,
    resource: Option<String>,
}

impl Caller {
    /// A caller of a surface that takes operator-issued tokens only (the
    /// HTTP API, the console, the CLI).
    pub fn bearer(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            resource: None,
        }
    }

    /// A caller of the resource `resource`, which also takes the tokens
    /// the authorization server minted for exactly that resource.
    pub fn at_resource(token: impl Into<String>, resource: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            resource: Some(resource.into()),
        }
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    pub(crate) fn resource(&self) -> Option<&str> {
        self.resource.as_deref()
    }
}

impl fmt::Debug for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Caller(bearer [redacted])")
    }
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
    /// The guest's log lines, kept by a development host only (the
    /// console's developer view shows them); empty elsewhere.
    pub log: Vec<GuestLogLine>,
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
pub fn new_request_id() -> String {
    uuid::Builder::from_random_bytes(rand::random())
        .into_uuid()
        .simple()
        .to_string()
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
        let mut log = Vec::new();
        let in_flight = self.pool.enter();
        let result = self.run(caller, request, &request_id, &mut generation, &mut log);
        drop(in_flight);
        let elapsed = started.elapsed();
        let elapsed_us = elapsed.as_micros() as u64;
        let (outcome, refusal, resolved) = match &result {
            Ok(_) => ("ok", None, true),
            Err(e) => (e.metric_outcome(), e.refusal_kind(), !e.before_resolution()),
        };
        crate::metrics::invocation(
            &request.extension,
            &request.action,
            outcome,
            refusal,
            resolved,
            elapsed,
        );
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
            log,
        }
    }

    fn run(
        &self,
        caller: &Caller,
        request: &InvokeRequest,
        request_id: &str,
        generation_out: &mut Option<u64>,
        log_out: &mut Vec<GuestLogLine>,
    ) -> Result<Value, InvokeError> {
        let snapshot = self
            .state
            .invocation_snapshot(caller.token(), &request.extension, &request.project)
            .map_err(|e| internal("the host state is unavailable", e))?;
        if snapshot.user.is_none()
            || !state::audience_accepts(snapshot.audience.as_deref(), caller.resource())
        {
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
        let digest =
            snapshot
                .release_digest
                .as_deref()
                .ok_or_else(|| InvokeError::NotInstalled {
                    extension: request.extension.clone(),
                })?;
        let release = self.compiled_release(&request.extension, digest)?;
        let action =
            release
                .spec
                .actions
                .get(&request.action)
                .ok_or_else(|| InvokeError::NoSuchAction {
                    extension: request.extension.clone(),
                    action: request.action.clone(),
                })?;
        let needed = spec::required_scope(&action.info.http_method);
        if let Some(granted) = &snapshot.scope
            && !spec::scope_contains(granted, needed)
        {
            return Err(InvokeError::InsufficientScope {
                scope: needed.to_string(),
            });
        }
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

        let (key, pre) = self
            .pool
            .instance_pre(&release, &request.project, snapshot.generation)
            .map_err(|e| internal("the component cannot be linked", e))?;
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
            deadline: Instant::now() + self.limits.deadline,
        });
        let context = ContextCtx {
            settings: snapshot.settings.clone(),
            provider_origin,
        };
        let (mut store, instance) = self.pool.store(&key, &pre, scope, context)?;
        let checks = store.get().data_mut().checks();
        checks.seed(
            snapshot.version,
            snapshot.granted,
            &snapshot.approved,
            &snapshot.bindings,
        );
        if self.development {
            checks.keep_guest_log();
        }
        let outcome = instance.platform_extension_extension().call_invoke(
            store.get(),
            &request.action,
            &input,
        );
        let data = store.get().data_mut();
        data.flush_guest_output();
        let checks = data.checks();
        *log_out = checks.take_guest_log();
        if checks.grant_revoked() {
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
                let output = checks.redact(output);
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
                let mut message = error.message;
                // A development host (`host-sim dev`, the test host) tells the
                // developer what the host refused and the manifest rule that
                // would allow it; an operator's host keeps the guest's words
                // (its log has the refusal).
                if self.development
                    && let Some(refusal) = checks.last_refusal()
                    && !message.contains(refusal)
                {
                    message = format!("{message} (the host refused: {refusal})");
                }
                let mut message = checks.redact(message);
                if message.len() > 2000 {
                    let mut cut = 2000;
                    while !message.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    message.truncate(cut);
                }
                // A refusal the extension caused, passed on as `forbidden`
                // (or `internal`): the caller did nothing forbidden.
                if checks.extension_fault() && matches!(code.as_str(), "forbidden" | "internal") {
                    tracing::warn!(
                        request_id = %checks.scope().request_id,
                        extension = %request.extension,
                        action = %request.action,
                        "the extension failed on a host call the host refused (extension_fault)"
                    );
                    return Err(InvokeError::ExtensionFault(message));
                }
                Err(InvokeError::Action { code, message })
            }
            Err(trap) => {
                store.discard();
                Err(sandbox::classify_trap(&trap, &self.limits))
            }
        }
    }

    /// The installed release with `digest`, compiled once and cached.
    fn compiled_release(
        &self,
        extension: &str,
        digest: &str,
    ) -> Result<Arc<CompiledRelease>, InvokeError> {
        self.pool
            .release(extension, digest)
            .map_err(|error| match error {
                LoadError::NotInstalled { extension } => InvokeError::NotInstalled { extension },
                other => internal("the installed release cannot be loaded", other),
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
            .ok_or_else(|| InvokeError::NotInstalled {
                extension: extension.to_string(),
            })?;
        let release = self.compiled_release(extension, &stored.digest)?;
        let generation = self
            .state
            .generation(extension, project)
            .map_err(|e| internal("the host state is unavailable", e))?;
        let (_, pre) = self
            .pool
            .instance_pre(&release, project, generation)
            .map_err(|e| internal("the component cannot be linked", e))?;
        let bytes = self
            .state
            .release_file(extension, &release.spec.component)
            .map_err(|e| internal("the host state is unavailable", e))?
            .ok_or_else(|| internal("the stored release lacks its component", extension))?;
        self.pool
            .measure_instantiation(&release, &pre, &bytes, project, iterations)
            .map_err(|e| internal("measuring instantiation failed", e))
    }
}

//! The sandbox: one pooled engine, an epoch ticker, the linker with exactly
//! the host interfaces of `platform:extension@0.1.0` plus WASI without
//! preopens, environment, arguments or network, and a fresh store per
//! invocation with a memory limit, an epoch deadline and a host-call budget.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store,
    Trap,
};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::bindings::ManagedExtension;
use crate::error::{InvokeError, Limit};
use crate::housekeeping::Housekeeping;
use crate::secret::{Secret, redact_str};
use crate::spec::ExtensionSpec;
use crate::state::{Binding, ProjectSettings, State, StateError, StateVersion};

/// Limits of one invocation; every one of them is configurable.
#[derive(Debug, Clone)]
pub struct SandboxLimits {
    /// Linear memory of one instance.
    pub memory_bytes: usize,
    /// Wall time of one invocation, host calls included.
    pub deadline: Duration,
    /// How often the epoch ticker advances the engine's epoch.
    pub epoch_tick: Duration,
    /// Host calls (context, log, documents, binding) per invocation.
    pub max_host_calls: u32,
    /// Body of one binding response.
    pub max_response_bytes: usize,
    /// All binding responses of one invocation together.
    pub max_total_response_bytes: usize,
    /// JSON input of an action.
    pub max_input_bytes: usize,
    /// JSON output of an action.
    pub max_output_bytes: usize,
    /// One stored document.
    pub max_document_bytes: usize,
    /// Guest stdout and stderr kept for the log.
    pub max_guest_output_bytes: usize,
    /// Instances alive at once (pooling allocator slots).
    pub max_instances: u32,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            deadline: Duration::from_secs(2),
            epoch_tick: Duration::from_millis(5),
            max_host_calls: 100,
            max_response_bytes: 1 << 20,
            max_total_response_bytes: 4 << 20,
            max_input_bytes: 256 << 10,
            max_output_bytes: 1 << 20,
            max_document_bytes: 256 << 10,
            max_guest_output_bytes: 64 << 10,
            max_instances: 64,
        }
    }
}

impl SandboxLimits {
    /// Epoch ticks that make up the deadline (at least one).
    pub fn deadline_ticks(&self) -> u64 {
        let tick = self.epoch_tick.as_nanos().max(1);
        (self.deadline.as_nanos().div_ceil(tick)).max(1) as u64
    }
}

/// Builds the engine: Cranelift, component model, epoch interruption and
/// (when `pooled`) the pooling allocator sized by `limits`.
pub fn engine(limits: &SandboxLimits, pooled: bool) -> wasmtime::Result<Engine> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    if std::env::var_os("HOST_SIM_PERFMAP").is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    if pooled {
        let n = limits.max_instances.max(1);
        let mut pool = PoolingAllocationConfig::new();
        // Totals are `n` times the per-component maxima, so `n` instances
        // of any accepted component fit at once.
        pool.total_component_instances(n)
            .total_core_instances(n * 16)
            .total_memories(n * 4)
            .total_tables(n * 16)
            .max_core_instances_per_component(16)
            .max_memories_per_component(4)
            .max_tables_per_component(16)
            .max_memory_size(limits.memory_bytes)
            .linear_memory_keep_resident(limits.memory_bytes)
            .table_keep_resident(1 << 20)
            .pagemap_scan(wasmtime::Enabled::Auto);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    Engine::new(&config)
}

/// Advances an engine's epoch every `tick` until dropped; this is what turns
/// an invocation's epoch deadline into wall time.
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub fn start(engine: &Engine, tick: Duration) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let weak = engine.weak();
        let thread = std::thread::Builder::new()
            .name("host-sim-epoch".into())
            .spawn({
                let stop = stop.clone();
                move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(tick);
                        match weak.upgrade() {
                            Some(engine) => engine.increment_epoch(),
                            None => break,
                        }
                    }
                }
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The linker every instance comes from: WASI p2 (sync) for components
/// that import WASI (the preview1 adapter's interfaces, or just the wall
/// clock like the plugin), and the four host interfaces implemented by the
/// capability modules.
pub fn linker(engine: &Engine) -> wasmtime::Result<Linker<InvocationState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    ManagedExtension::add_to_linker::<_, HasSelf<InvocationState>>(&mut linker, |s| s)?;
    Ok(linker)
}

/// Who and what an invocation is for; fixed by the host before the guest
/// runs. Holds no secret.
#[derive(Debug, Clone)]
pub struct InvocationScope {
    pub extension_id: String,
    pub project_id: String,
    pub request_id: String,
    pub action: String,
    pub release_digest: String,
    pub spec: Arc<ExtensionSpec>,
    pub settings: ProjectSettings,
    /// Public origin of the project's provider binding, if bound.
    pub provider_origin: Option<String>,
    /// Wall-clock end of the invocation (binding timeouts never exceed it).
    pub deadline: Instant,
}

/// A limit that ends an invocation; host code returns it as the trap error.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct LimitTrap {
    pub limit: Limit,
    pub message: String,
}

/// The data of one store: WASI context, the invocation scope, the budgets
/// and what the host calls observed.
pub struct InvocationState {
    wasi: WasiCtx,
    table: ResourceTable,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    pub(crate) scope: Arc<InvocationScope>,
    pub(crate) state: Arc<State>,
    pub(crate) client: crate::capabilities::http::BindingClient,
    pub(crate) limits: Arc<SandboxLimits>,
    host_calls: u32,
    pub(crate) response_bytes: usize,
    /// A host call found the grant revoked; the invocation's output is void.
    pub(crate) grant_revoked: bool,
    secrets: Option<Vec<Secret>>,
    memory_limit: usize,
    /// The largest linear memory the guest asked for (0: it never grew).
    pub(crate) memory_grown_to: usize,
    checks: CallTimeChecks,
    /// Where a binding wait does the host's sandbox housekeeping (weak: the
    /// housekeeping holds stores, and so this state).
    pub(crate) idle: Weak<Housekeeping>,
}

/// What the call-time checks of this invocation read, valid while the
/// state's version holds: any commit (grant, revoke, approval, binding, by
/// this host or another process) moves it and empties this.
#[derive(Default)]
struct CallTimeChecks {
    version: Option<StateVersion>,
    /// (granted, approved) per capability.
    capabilities: HashMap<String, (bool, bool)>,
    bindings: HashMap<String, Option<Arc<Binding>>>,
}

/// The state as a host call sees it, now.
pub(crate) struct CallTime {
    pub granted: bool,
    pub approved: bool,
    /// The project's binding, when the call asked for one.
    pub binding: Option<Arc<Binding>>,
}

impl WasiView for InvocationState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl ResourceLimiter for InvocationState {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.memory_grown_to = self.memory_grown_to.max(desired);
        if desired > self.memory_limit {
            return Err(wasmtime::Error::new(LimitTrap {
                limit: Limit::Memory,
                message: format!(
                    "the extension exceeded its memory limit of {} MiB",
                    self.memory_limit >> 20
                ),
            }));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

impl InvocationState {
    pub fn new(
        scope: Arc<InvocationScope>,
        state: Arc<State>,
        client: crate::capabilities::http::BindingClient,
        limits: Arc<SandboxLimits>,
    ) -> Self {
        let stdout = MemoryOutputPipe::new(limits.max_guest_output_bytes);
        let stderr = MemoryOutputPipe::new(limits.max_guest_output_bytes);
        // No preopens, no environment, no arguments, no network.
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            stdout,
            stderr,
            memory_limit: limits.memory_bytes,
            scope,
            state,
            client,
            limits,
            host_calls: 0,
            response_bytes: 0,
            grant_revoked: false,
            secrets: None,
            checks: CallTimeChecks::default(),
            idle: Weak::new(),
            memory_grown_to: 0,
        }
    }

    /// Starts the call-time checks from the invocation's snapshot: while
    /// the state stays at the snapshot's version, a host call needs no
    /// query. The snapshot's binding secrets are what output is redacted of.
    pub(crate) fn seed_checks(
        &mut self,
        version: Option<StateVersion>,
        granted: bool,
        approved: &BTreeSet<String>,
        bindings: &[Binding],
    ) {
        self.checks = CallTimeChecks {
            version,
            capabilities: approved
                .iter()
                .map(|capability| (capability.clone(), (granted, true)))
                .collect(),
            bindings: bindings
                .iter()
                .map(|binding| (binding.name.clone(), Some(Arc::new(binding.clone()))))
                .collect(),
        };
        self.secrets = Some(bindings.iter().map(|b| b.secret.clone()).collect());
    }

    /// The grant, the approval of `capability` and (with `binding`) the
    /// project's binding, as they are now: reused from earlier host calls
    /// of this invocation only if nothing was committed since.
    pub(crate) fn call_time_check(
        &mut self,
        capability: &str,
        binding: Option<&str>,
    ) -> Result<CallTime, StateError> {
        // Read before the data it guards; `None` (a commit under way)
        // reuses nothing.
        let version = self.state.version();
        if version.is_none() || self.checks.version != version {
            self.checks = CallTimeChecks {
                version,
                ..CallTimeChecks::default()
            };
        }
        let scope = &self.scope;
        let (granted, approved) = match self.checks.capabilities.get(capability) {
            Some(checked) => *checked,
            None => {
                let checked = self.state.call_time_check(
                    &scope.extension_id,
                    &scope.project_id,
                    &scope.release_digest,
                    capability,
                )?;
                self.checks
                    .capabilities
                    .insert(capability.to_string(), checked);
                checked
            }
        };
        let binding = match binding {
            None => None,
            Some(name) => match self.checks.bindings.get(name) {
                Some(bound) => bound.clone(),
                None => {
                    let bound = self.state.binding(&scope.project_id, name)?.map(Arc::new);
                    if let (Some(secrets), Some(binding)) = (&mut self.secrets, &bound) {
                        // A secret set mid-invocation is redacted too.
                        secrets.push(binding.secret.clone());
                    }
                    self.checks.bindings.insert(name.to_string(), bound.clone());
                    bound
                }
            },
        };
        Ok(CallTime {
            granted,
            approved,
            binding,
        })
    }

    /// Counts one host call; past the budget the invocation ends.
    pub(crate) fn charge_host_call(&mut self) -> wasmtime::Result<()> {
        self.host_calls += 1;
        if self.host_calls > self.limits.max_host_calls {
            return Err(wasmtime::Error::new(LimitTrap {
                limit: Limit::HostCalls,
                message: format!(
                    "the extension exceeded its budget of {} host calls",
                    self.limits.max_host_calls
                ),
            }));
        }
        Ok(())
    }

    /// `text` with every binding secret of the project redacted. If the
    /// secrets cannot be read, the text is withheld (fail closed).
    pub(crate) fn redact(&mut self, text: String) -> String {
        if self.secrets.is_none() {
            match self.state.project_secrets(&self.scope.project_id) {
                Ok(secrets) => self.secrets = Some(secrets),
                Err(e) => {
                    tracing::error!(request_id = %self.scope.request_id, error = %e, "cannot read binding secrets for redaction");
                    return "[withheld: the host could not redact this text]".into();
                }
            }
        }
        redact_str(text, self.secrets.as_deref().unwrap_or_default())
    }

    /// Guest stdout/stderr, redacted, into the host log.
    pub(crate) fn flush_guest_output(&mut self) {
        for (stream, pipe) in [
            ("stdout", self.stdout.clone()),
            ("stderr", self.stderr.clone()),
        ] {
            let bytes = pipe.contents();
            if bytes.is_empty() {
                continue;
            }
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let text = self.redact(text);
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                tracing::info!(
                    target: "host_sim::guest",
                    request_id = %self.scope.request_id,
                    extension = %self.scope.extension_id,
                    project = %self.scope.project_id,
                    stream,
                    "{line}"
                );
            }
        }
    }
}

/// A fresh store for one invocation: limiter, epoch deadline.
pub fn new_store(
    engine: &Engine,
    data: InvocationState,
    deadline_ticks: u64,
) -> Store<InvocationState> {
    let mut store = Store::new(engine, data);
    store.limiter(|s| s as &mut dyn ResourceLimiter);
    store.set_epoch_deadline(deadline_ticks);
    store.epoch_deadline_trap();
    store
}

/// Turns a trap or host failure of a call into the invocation error.
pub fn classify_trap(error: &wasmtime::Error, limits: &SandboxLimits) -> InvokeError {
    if let Some(limit) = error.downcast_ref::<LimitTrap>() {
        return InvokeError::LimitExceeded {
            limit: limit.limit,
            message: limit.message.clone(),
        };
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => InvokeError::LimitExceeded {
            limit: Limit::Deadline,
            message: format!(
                "the extension did not finish within its deadline of {} ms",
                limits.deadline.as_millis()
            ),
        },
        Some(Trap::StackOverflow) => InvokeError::LimitExceeded {
            limit: Limit::Memory,
            message: "the extension overflowed its stack".into(),
        },
        Some(trap) => InvokeError::Internal(format!("the extension trapped: {trap}")),
        None => InvokeError::Internal("the extension failed in a host call".into()),
    }
}

/// Compiles a component for `engine`.
pub fn compile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
    Component::from_binary(engine, bytes)
}

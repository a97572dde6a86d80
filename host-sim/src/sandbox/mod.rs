//! The sandbox: one pooled engine, an epoch ticker, the linker with exactly
//! the host interfaces of `platform:extension@0.1.0` (each registered by its
//! capability module) plus WASI without preopens, environment, arguments or
//! network, and a fresh store per invocation ([`StoreData`]) with a memory
//! limit, an epoch deadline and a host-call budget.

mod store;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store,
    Trap,
};

pub use store::StoreData;

use crate::capabilities::{context, documents, http, log};
use crate::error::{InvokeError, Limit, LimitTrap};
use crate::limits::SandboxLimits;
use crate::spec::ExtensionSpec;

/// How much of a pooled slot's linear memory stays resident between
/// instances (reset in place, the cheap path). A guest that grew past it
/// has the rest returned to the kernel when its slot is freed, so hostile
/// guests that fill their memory limit cannot keep slots × limit of the
/// host's memory resident; an ordinary guest's memory (the analytics
/// plugin's and the test extension's start at 1 MiB) stays within it and
/// is reset in place as before.
const KEEP_RESIDENT_BYTES: usize = 4 << 20;

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
            .linear_memory_keep_resident(KEEP_RESIDENT_BYTES.min(limits.memory_bytes))
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
/// clock like the plugin), and the four host interfaces, each added by its
/// capability module.
pub fn linker(engine: &Engine) -> wasmtime::Result<Linker<StoreData>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    context::add_to_linker(&mut linker)?;
    http::add_to_linker(&mut linker)?;
    documents::add_to_linker(&mut linker)?;
    log::add_to_linker(&mut linker)?;
    Ok(linker)
}

/// A fresh store for one invocation: limiter, epoch deadline.
pub fn new_store(engine: &Engine, data: StoreData, deadline_ticks: u64) -> Store<StoreData> {
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

/// An installed release, prepared for invocations: the enforced parts of
/// its manifest and its compiled component.
pub struct CompiledRelease {
    pub digest: String,
    pub spec: Arc<ExtensionSpec>,
    pub component: Component,
}

/// Compiles a component for `engine`.
pub fn compile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
    Component::from_binary(engine, bytes)
}

/// [`compile`], for a development host with a directory of compiled
/// components (`cache`): loads the artifact an earlier compile of the same
/// bytes for a compatible engine left there (keyed by the component's
/// SHA-256 and the engine's compatibility hash), or compiles and leaves
/// one. A debug build of wasmtime takes seconds to compile a component and
/// milliseconds to load one. Loading an artifact trusts the directory, so
/// only development hosts use it, on a folder of the developer's own.
pub fn compile_cached(
    engine: &Engine,
    bytes: &[u8],
    cache: Option<&std::path::Path>,
) -> wasmtime::Result<Component> {
    use std::hash::{Hash, Hasher};
    let Some(dir) = cache else {
        return compile(engine, bytes);
    };
    let mut compatibility = std::hash::DefaultHasher::new();
    engine
        .precompile_compatibility_hash()
        .hash(&mut compatibility);
    let path = dir.join(format!(
        "{}-{:016x}.cwasm",
        extension_release::sha256_hex(bytes),
        compatibility.finish()
    ));
    // Read into memory, not mapped: a file changed under a mapping (another
    // process rewriting the cache, a developer clearing it) would end this
    // one with SIGBUS. The file is the artifact followed by its SHA-256, so
    // a cut or damaged file is compiled again, never loaded.
    if let Ok(file) = std::fs::read(&path)
        && let Some(artifact) = checked_artifact(&file)
    {
        // SAFETY: the bytes are, checksum verified, an artifact that
        // `Component::serialize` wrote below into the developer's own cache
        // folder for an engine of the same compatibility hash; wasmtime
        // checks their header and version as well.
        match unsafe { Component::deserialize(engine, artifact) } {
            Ok(component) => return Ok(component),
            Err(e) => tracing::warn!(
                path = %path.display(),
                error = %e,
                "a compiled component in the cache could not be loaded; compiling it again"
            ),
        }
    }
    let component = compile(engine, bytes)?;
    let written = std::fs::create_dir_all(dir).and_then(|()| {
        let mut file = component.serialize().map_err(std::io::Error::other)?;
        let digest = extension_release::sha256_hex(&file);
        file.extend_from_slice(digest.as_bytes());
        // A name of its own per writer: tests of one build start test hosts
        // in parallel threads, each compiling and writing the same artifact.
        let partial = path.with_extension(format!("partial-{}", uuid::Uuid::new_v4().simple()));
        std::fs::write(&partial, file)?;
        std::fs::rename(&partial, &path)
    });
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "cannot keep the compiled component");
    }
    prune_compile_cache(dir);
    Ok(component)
}

/// The artifact of a cache file whose trailing SHA-256 (64 hex characters)
/// matches it; `None` for a cut or damaged file.
fn checked_artifact(file: &[u8]) -> Option<&[u8]> {
    let (artifact, digest) = file.split_at_checked(file.len().checked_sub(64)?)?;
    (extension_release::sha256_hex(artifact).as_bytes() == digest).then_some(artifact)
}

/// Artifacts [`compile_cached`] keeps in one directory: the newest, one per
/// recent build.
const KEPT_ARTIFACTS: usize = 32;

fn prune_compile_cache(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut artifacts: Vec<(std::time::SystemTime, std::path::PathBuf)> = entries
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let modified = path.metadata().ok()?.modified().ok()?;
            (path.extension()? == "cwasm").then_some((modified, path))
        })
        .collect();
    artifacts.sort_by(|a, b| b.0.cmp(&a.0));
    for (_, old) in artifacts.into_iter().skip(KEPT_ARTIFACTS) {
        let _ = std::fs::remove_file(old);
    }
}

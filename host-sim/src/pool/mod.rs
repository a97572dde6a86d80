//! The instance pool: compiled releases (one per digest), their
//! pre-instantiations (`InstancePre`, one per release, project and
//! generation), and the stores invocations run in, with the housekeeping
//! that tears finished stores down and prepares fresh ones while guests
//! wait on the network ([`housekeeping`]).
//!
//! What it guarantees: every store it hands out ([`InstancePool::store`])
//! is fresh (no guest code has run in it), comes from the pre-instantiation
//! of the invocation's own (release, project, generation), and has the
//! invocation's scope, context and epoch deadline before the guest runs.

mod housekeeping;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use wasmtime::component::Linker;
use wasmtime::{Engine, Store};

pub use housekeeping::SandboxStats;

use crate::bindings::{ManagedExtension, ManagedExtensionPre};
use crate::capabilities::InvocationScope;
use crate::capabilities::context::ContextCtx;
use crate::capabilities::http::{BindingClient, BindingWait};
use crate::error::{InvokeError, Limit};
use crate::limits::SandboxLimits;
use crate::sandbox::{self, CompiledRelease, StoreData};
use crate::state::{State, lock};
use housekeeping::Housekeeping;

/// Cache key of pre-instantiations: a release, a project, a generation.
/// Any change that bumps the generation makes a new key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PreKey {
    pub digest: String,
    pub project: String,
    pub generation: u64,
}

/// A pre-instantiation: the component linked, ready to instantiate.
pub type Pre = ManagedExtensionPre<StoreData>;

/// Linear memory up to which a finished store is handed to the housekeeping.
const RETIRE_MEMORY_LIMIT: usize = 4 << 20;

/// Instantiation timings of one release, both ways, taken in one run.
#[derive(Debug, Clone)]
pub struct InstantiationSamples {
    /// Fresh store + `InstancePre::instantiate` on the pooled engine.
    pub pooled_pre: Vec<Duration>,
    /// Fresh store + `Linker::instantiate` on a plain (on-demand) engine.
    pub plain_linker: Vec<Duration>,
}

pub struct InstancePool {
    engine: Engine,
    linker: Linker<StoreData>,
    state: Arc<State>,
    client: BindingClient,
    limits: Arc<SandboxLimits>,
    releases: RwLock<HashMap<String, Arc<CompiledRelease>>>,
    instances: Mutex<HashMap<PreKey, Pre>>,
    /// Store teardown and preparation, done while invocations wait.
    housekeeping: Arc<Housekeeping>,
}

/// A store checked out for one invocation. When it is dropped the store
/// goes to the housekeeping, to be dropped in a later wait, unless the
/// guest trapped ([`PooledStore::discard`]) or grew its memory past
/// [`RETIRE_MEMORY_LIMIT`]: resetting that much memory would stall another
/// invocation's wait, so such a store is dropped at once, on its own
/// invocation's time.
pub struct PooledStore<'a> {
    store: Option<Store<StoreData>>,
    housekeeping: &'a Housekeeping,
}

impl PooledStore<'_> {
    /// The store, until it is dropped or discarded.
    pub fn get(&mut self) -> &mut Store<StoreData> {
        // Only `discard` and `drop` take the store, and both consume `self`.
        self.store.as_mut().unwrap_or_else(|| unreachable!())
    }

    /// Drops the store now (the guest trapped).
    pub fn discard(mut self) {
        drop(self.store.take());
    }
}

impl Drop for PooledStore<'_> {
    fn drop(&mut self) {
        if let Some(store) = self.store.take()
            && store.data().memory_grown_to() <= RETIRE_MEMORY_LIMIT
        {
            self.housekeeping.retire(store);
        }
    }
}

/// Why a release could not be loaded into the pool.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{extension} is not installed")]
    NotInstalled { extension: String },
    #[error("the host state is unavailable: {0}")]
    State(#[from] crate::state::StateError),
    #[error("the stored manifest is not usable: {0}")]
    Manifest(String),
    #[error("the stored release lacks its component {0}")]
    MissingComponent(String),
    #[error("the stored component does not compile: {0}")]
    Compile(String),
}

impl InstancePool {
    pub fn new(
        engine: Engine,
        state: Arc<State>,
        client: BindingClient,
        limits: Arc<SandboxLimits>,
    ) -> wasmtime::Result<Self> {
        let linker = sandbox::linker(&engine)?;
        let housekeeping = Arc::new(Housekeeping::new(
            engine.clone(),
            state.clone(),
            client.clone(),
            limits.clone(),
        ));
        Ok(Self {
            engine,
            linker,
            state,
            client,
            limits,
            releases: RwLock::new(HashMap::new()),
            instances: Mutex::new(HashMap::new()),
            housekeeping,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn linker(&self) -> &Linker<StoreData> {
        &self.linker
    }

    /// What the housekeeping has done.
    pub fn stats(&self) -> SandboxStats {
        self.housekeeping.stats()
    }

    /// Instance slots held now (see [`Housekeeping::slots_in_use`]).
    pub fn slots_in_use(&self) -> usize {
        self.housekeeping.slots_in_use()
    }

    /// Counts an invocation as under way until the guard drops (the
    /// housekeeping stands aside while more are under way than cores).
    pub fn enter(&self) -> impl Drop + '_ {
        self.housekeeping.enter()
    }

    /// The release with `digest` if it is compiled and cached already.
    pub fn cached_release(&self, digest: &str) -> Option<Arc<CompiledRelease>> {
        self.releases
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(digest)
            .cloned()
    }

    /// The installed release with `digest`, compiled once and cached.
    pub fn release(
        &self,
        extension: &str,
        digest: &str,
    ) -> Result<Arc<CompiledRelease>, LoadError> {
        if let Some(release) = self.cached_release(digest) {
            return Ok(release);
        }
        let not_installed = || LoadError::NotInstalled {
            extension: extension.to_string(),
        };
        let stored = self
            .state
            .release(extension)?
            .filter(|r| r.digest == digest)
            .ok_or_else(not_installed)?;
        let manifest = extension_release::Manifest::from_toml(&stored.manifest)
            .map_err(|e| LoadError::Manifest(e.to_string()))?;
        let spec =
            crate::spec::ExtensionSpec::from_manifest(&manifest).map_err(LoadError::Manifest)?;
        let bytes = self
            .state
            .release_file(extension, &spec.component)?
            .ok_or_else(|| LoadError::MissingComponent(spec.component.clone()))?;
        let component = sandbox::compile(&self.engine, &bytes)
            .map_err(|e| LoadError::Compile(e.to_string()))?;
        Ok(self.insert(CompiledRelease {
            digest: digest.to_string(),
            spec: Arc::new(spec),
            component,
        }))
    }

    /// Caches a release compiled elsewhere (at install).
    pub fn insert(&self, release: CompiledRelease) -> Arc<CompiledRelease> {
        let release = Arc::new(release);
        self.releases
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(release.digest.clone(), release.clone());
        release
    }

    /// Drops cached compilations, pre-instantiations and stores of a release.
    pub fn evict(&self, digest: &str) {
        self.releases
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(digest);
        lock(&self.instances).retain(|key, _| key.digest != digest);
        self.housekeeping.evict(digest);
    }

    /// The pre-instantiation for (release, project, generation); a newer
    /// generation replaces the project's older entries.
    pub fn instance_pre(
        &self,
        release: &CompiledRelease,
        project: &str,
        generation: u64,
    ) -> wasmtime::Result<(PreKey, Pre)> {
        let key = PreKey {
            digest: release.digest.clone(),
            project: project.to_string(),
            generation,
        };
        if let Some(pre) = lock(&self.instances).get(&key) {
            return Ok((key, pre.clone()));
        }
        let pre = self
            .linker
            .instantiate_pre(&release.component)
            .and_then(ManagedExtensionPre::new)?;
        let mut instances = lock(&self.instances);
        instances.retain(|k, _| !(k.digest == key.digest && k.project == key.project));
        instances.insert(key.clone(), pre.clone());
        Ok((key, pre))
    }

    /// A fresh store and instance for one invocation of `key`: the one the
    /// housekeeping prepared, or a new one. It gets the invocation's scope,
    /// context and epoch deadline here, before any guest code runs; and
    /// waits from now on prepare stores of `key`.
    pub fn store(
        &self,
        key: &PreKey,
        pre: &Pre,
        scope: Arc<InvocationScope>,
        context: ContextCtx,
    ) -> Result<(PooledStore<'_>, ManagedExtension), InvokeError> {
        let (mut store, instance) = match self.housekeeping.take(key) {
            Some(prepared) => {
                let mut store = prepared.store;
                store.set_epoch_deadline(self.limits.deadline_ticks());
                (store, prepared.instance)
            }
            None => self.instantiate(pre, scope.clone())?,
        };
        let wait = Arc::downgrade(&self.housekeeping) as Weak<dyn BindingWait>;
        store.data_mut().begin(scope.clone(), context, wait);
        if !self.housekeeping.wants(key) {
            let waiting = Arc::new(InvocationScope {
                request_id: String::new(),
                action: String::new(),
                ..(*scope).clone()
            });
            self.housekeeping.want(key.clone(), pre.clone(), waiting);
        }
        Ok((
            PooledStore {
                store: Some(store),
                housekeeping: &self.housekeeping,
            },
            instance,
        ))
    }

    /// A fresh store and instance of `pre` for `scope`. A full pool first
    /// gives back the stores the housekeeping holds, then tries once more.
    fn instantiate(
        &self,
        pre: &Pre,
        scope: Arc<InvocationScope>,
    ) -> Result<(Store<StoreData>, ManagedExtension), InvokeError> {
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
                sandbox::classify_trap(&e, &self.limits)
            }
        })
    }

    /// Measures instantiating `release` `iterations` times from the pooled,
    /// cached `InstancePre` the invocations use and with a plain
    /// `Linker::instantiate` on an engine without pooling, interleaved.
    pub fn measure_instantiation(
        &self,
        release: &CompiledRelease,
        pre: &Pre,
        component_bytes: &[u8],
        project: &str,
        iterations: usize,
    ) -> wasmtime::Result<InstantiationSamples> {
        let plain_engine = sandbox::engine(&self.limits, false)?;
        let plain_linker = sandbox::linker(&plain_engine)?;
        let plain_component = sandbox::compile(&plain_engine, component_bytes)?;
        let scope = Arc::new(InvocationScope {
            extension_id: release.spec.id.clone(),
            project_id: project.to_string(),
            request_id: "instantiation-benchmark".into(),
            action: String::new(),
            release_digest: release.digest.clone(),
            spec: release.spec.clone(),
            deadline: Instant::now() + self.limits.deadline,
        });
        let data = || {
            StoreData::new(
                scope.clone(),
                self.state.clone(),
                self.client.clone(),
                &self.limits,
            )
        };
        let ticks = self.limits.deadline_ticks();
        let mut samples = InstantiationSamples {
            pooled_pre: Vec::with_capacity(iterations),
            plain_linker: Vec::with_capacity(iterations),
        };
        for _ in 0..iterations {
            let started = Instant::now();
            let mut store = sandbox::new_store(&self.engine, data(), ticks);
            pre.instantiate(&mut store)?;
            drop(store);
            samples.pooled_pre.push(started.elapsed());

            let started = Instant::now();
            let mut store = sandbox::new_store(&plain_engine, data(), ticks);
            plain_linker.instantiate(&mut store, &plain_component)?;
            drop(store);
            samples.plain_linker.push(started.elapsed());
        }
        Ok(samples)
    }
}

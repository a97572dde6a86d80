//! Sandbox work that an invocation's wait on the network absorbs.
//!
//! Around every invocation the host tears down the finished store (the
//! pooling allocator resets the instance's dirty memory) and builds a fresh
//! one (store, WASI context, `InstancePre::instantiate`): about a fifth of
//! what the host adds to a stats call, none of it needed by the caller. The
//! calling thread is idle, though, while a guest waits on a binding call. So
//! an invocation hands its finished store here instead of dropping it and
//! says which (release, project, generation) it ran; the next binding wait,
//! on whichever thread, drops the handed-over stores and prepares one fresh
//! store of that key: the housekeeping is the [`BindingWait`] of every
//! store's HTTP capability.
//!
//! What does not change: every invocation gets a store and instance that no
//! guest code has run in, from the cached `InstancePre` of its own key (the
//! key names the project and the generation, so a prepared store never
//! serves another project or an older generation); its scope, call-time
//! checks and epoch deadline are set when it is taken, before the guest
//! runs. Stores waiting here hold pooled slots, so an instantiation that
//! finds the pool full releases them and tries once more.
//!
//! Only while the host has idle time: with more invocations in flight than
//! the machine has cores, no wait is idle, and moving the work between
//! threads would only add cache misses; then stores are dropped by their
//! own invocation and nothing is prepared.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use wasmtime::{Engine, Store};

use super::PreKey;
use crate::bindings::{ManagedExtension, ManagedExtensionPre};
use crate::capabilities::InvocationScope;
use crate::capabilities::http::{BindingClient, BindingWait};
use crate::limits::SandboxLimits;
use crate::sandbox::{self, StoreData};
use crate::state::{State, lock};

/// Finished stores kept for a later wait; past this, the one handing a
/// store over drops the oldest itself (invocations without binding calls
/// never wait).
const MAX_RETIRED: usize = 4;

/// A store instantiated ahead of its invocation.
pub struct Prepared {
    pub key: PreKey,
    pub store: Store<StoreData>,
    pub instance: ManagedExtension,
}

/// What the next wait prepares: the key's pre-instantiation, and the
/// scope the store holds until an invocation takes it (no request, no
/// action, no binding origin).
struct Wanted {
    key: PreKey,
    pre: ManagedExtensionPre<StoreData>,
    scope: Arc<InvocationScope>,
}

pub struct Housekeeping {
    engine: Engine,
    state: Arc<State>,
    client: BindingClient,
    limits: Arc<SandboxLimits>,
    retired: Mutex<Vec<Store<StoreData>>>,
    prepared: Mutex<Option<Prepared>>,
    wanted: Mutex<Option<Wanted>>,
    /// Held while one wait prepares, so two waits do not both instantiate.
    preparing: Mutex<()>,
    prepared_count: AtomicU64,
    used_prepared_count: AtomicU64,
    dropped_while_waiting_count: AtomicU64,
    /// Invocations under way, and how many the host runs without queueing.
    in_flight: AtomicUsize,
    cores: usize,
}

/// An invocation under way (see [`Housekeeping::enter`]).
pub struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the housekeeping has done since the host opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SandboxStats {
    /// Stores prepared during a binding wait.
    pub prepared: u64,
    /// Invocations that ran in a prepared store.
    pub used_prepared: u64,
    /// Finished stores dropped during a binding wait.
    pub dropped_while_waiting: u64,
}

impl Housekeeping {
    pub fn new(
        engine: Engine,
        state: Arc<State>,
        client: BindingClient,
        limits: Arc<SandboxLimits>,
    ) -> Self {
        Self {
            engine,
            state,
            client,
            limits,
            retired: Mutex::new(Vec::new()),
            prepared: Mutex::new(None),
            wanted: Mutex::new(None),
            preparing: Mutex::new(()),
            prepared_count: AtomicU64::new(0),
            used_prepared_count: AtomicU64::new(0),
            dropped_while_waiting_count: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// Counts an invocation as under way until the guard drops.
    pub fn enter(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(&self.in_flight)
    }

    /// More invocations under way than cores: no wait is idle.
    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) > self.cores
    }

    /// Instance slots held: invocations under way, the prepared store and
    /// the finished stores awaiting teardown.
    pub fn slots_in_use(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
            + usize::from(lock(&self.prepared).is_some())
            + lock(&self.retired).len()
    }

    pub fn stats(&self) -> SandboxStats {
        SandboxStats {
            prepared: self.prepared_count.load(Ordering::Relaxed),
            used_prepared: self.used_prepared_count.load(Ordering::Relaxed),
            dropped_while_waiting: self.dropped_while_waiting_count.load(Ordering::Relaxed),
        }
    }

    /// The prepared store, if `matches` says it is the one to take out.
    fn take_prepared_if(&self, matches: impl FnOnce(&Prepared) -> bool) -> Option<Prepared> {
        let mut prepared = lock(&self.prepared);
        if prepared.as_ref().is_some_and(matches) {
            prepared.take()
        } else {
            None
        }
    }

    /// A new store holding `scope`, and an instance of `pre` in it.
    pub fn instantiate(
        &self,
        pre: &ManagedExtensionPre<StoreData>,
        scope: Arc<InvocationScope>,
    ) -> wasmtime::Result<(Store<StoreData>, ManagedExtension)> {
        let data = StoreData::new(scope, self.state.clone(), self.client.clone(), &self.limits);
        let mut store = sandbox::new_store(&self.engine, data, self.limits.deadline_ticks());
        let instance = pre.instantiate(&mut store)?;
        Ok((store, instance))
    }

    /// The prepared store of `key`, if there is one.
    pub fn take(&self, key: &PreKey) -> Option<Prepared> {
        let taken = self.take_prepared_if(|p| &p.key == key);
        if taken.is_some() {
            self.used_prepared_count.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// Whether the next wait already prepares for `key`.
    pub fn wants(&self, key: &PreKey) -> bool {
        lock(&self.wanted).as_ref().is_some_and(|w| &w.key == key)
    }

    /// From now on, waits prepare stores of `key`; a store prepared for
    /// another key is handed over for dropping.
    pub fn want(
        &self,
        key: PreKey,
        pre: ManagedExtensionPre<StoreData>,
        scope: Arc<InvocationScope>,
    ) {
        let stale = self.take_prepared_if(|p| p.key != key);
        *lock(&self.wanted) = Some(Wanted { key, pre, scope });
        if let Some(stale) = stale {
            self.retire(stale.store);
        }
    }

    /// Forgets every store and pre-instantiation of the release `digest`.
    pub fn evict(&self, digest: &str) {
        let mut wanted = lock(&self.wanted);
        if wanted.as_ref().is_some_and(|w| w.key.digest == digest) {
            *wanted = None;
        }
        drop(wanted);
        drop(self.take_prepared_if(|p| p.key.digest == digest));
    }

    /// Takes a finished store; it is dropped in a later wait (or now, when
    /// the host is busy).
    pub fn retire(&self, store: Store<StoreData>) {
        if self.busy() {
            drop(store);
            return;
        }
        let excess: Vec<_> = {
            let mut retired = lock(&self.retired);
            retired.push(store);
            let over = retired.len().saturating_sub(MAX_RETIRED);
            retired.drain(..over).collect()
        };
        // Dropped outside the lock.
        drop(excess);
    }

    /// Drops every store waiting here, prepared ones included: the pool is
    /// full and an invocation needs a slot.
    pub fn release(&self) {
        let retired = std::mem::take(&mut *lock(&self.retired));
        let prepared = lock(&self.prepared).take();
        drop(retired);
        drop(prepared);
    }

    /// The work of one wait: drop the finished stores, then prepare a store
    /// for the wanted key unless one is ready.
    pub fn run(&self) {
        let retired = std::mem::take(&mut *lock(&self.retired));
        self.dropped_while_waiting_count
            .fetch_add(retired.len() as u64, Ordering::Relaxed);
        drop(retired);

        if self.busy() {
            return;
        }
        let Ok(_preparing) = self.preparing.try_lock() else {
            return;
        };
        if lock(&self.prepared).is_some() {
            return;
        }
        let Some((key, pre, scope)) = lock(&self.wanted)
            .as_ref()
            .map(|w| (w.key.clone(), w.pre.clone(), w.scope.clone()))
        else {
            return;
        };
        // A full pool (or anything else) only means nothing is prepared: the
        // invocation instantiates for itself and reports what goes wrong.
        let Ok((store, instance)) = self.instantiate(&pre, scope) else {
            return;
        };
        self.prepared_count.fetch_add(1, Ordering::Relaxed);
        let stale = lock(&self.prepared).replace(Prepared {
            key,
            store,
            instance,
        });
        drop(stale);
    }
}

impl BindingWait for Housekeeping {
    fn while_waiting(&self) {
        self.run();
    }
}

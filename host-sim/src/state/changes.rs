//! The state's version: two commit counters shared by every process that
//! has the state open, and the caches that are valid while it holds.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::{Result, StateError};

/// Values read at one [`StateVersion`]; emptied when the version moves,
/// and when it holds `max` entries.
pub(super) struct VersionedCache<K, V> {
    version: Option<StateVersion>,
    entries: HashMap<K, V>,
    max: usize,
}

impl<K: std::hash::Hash + Eq, V: Clone> VersionedCache<K, V> {
    pub(super) fn new(max: usize) -> Self {
        Self {
            version: None,
            entries: HashMap::new(),
            max,
        }
    }

    pub(super) fn get(&mut self, version: StateVersion, key: &K) -> Option<V> {
        if self.version != Some(version) {
            self.version = Some(version);
            self.entries.clear();
        }
        self.entries.get(key).cloned()
    }

    /// Keeps `value`, read after `version` was seen, if the cache is still
    /// at that version.
    pub(super) fn insert(&mut self, version: StateVersion, key: K, value: V) {
        if self.version != Some(version) {
            return;
        }
        if self.entries.len() >= self.max {
            self.entries.clear();
        }
        self.entries.insert(key, value);
    }
}

/// Two counters shared by every process with the state open, in a mapping
/// of [`super::CHANGES_FILE`]: `started` moves before each commit host-sim makes
/// and `finished` after it. When they are equal no commit is under way and
/// `finished` names the state ([`StateVersion`]): anything read after
/// seeing it stays true while both still say the same. Reading them is two
/// memory loads, which is what lets invocations and host calls reuse their
/// checks without a database round trip. A process killed between the two
/// leaves them apart, and every reader goes to the database, until a
/// process opens the state while no other has it open (the counters are
/// then made equal again).
///
/// This holds because host-sim is the only writer of its state: every
/// commit goes through [`super::State::write`]. A change made with another SQLite
/// client is seen after the host restarts.
pub(super) struct ChangeCounter {
    map: memmap2::MmapRaw,
    /// The counters' file; this handle holds a shared lock on it while the
    /// state is open.
    file: std::fs::File,
}

/// Moves `finished` when dropped: after the commit, or after a failed one.
pub(super) struct CommitInFlight<'a>(&'a ChangeCounter);

impl Drop for CommitInFlight<'_> {
    fn drop(&mut self) {
        self.0.finished().fetch_add(1, Ordering::SeqCst);
    }
}

impl ChangeCounter {
    pub(super) fn open(path: &Path) -> Result<Self> {
        let io = |source| StateError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        // Several processes may create it at once; growing to 16 bytes
        // zero-fills and never shrinks what another wrote.
        if file.metadata().map_err(io)?.len() < 16 {
            file.set_len(16).map_err(io)?;
        }
        let map = memmap2::MmapOptions::new()
            .len(16)
            .map_raw(&file)
            .map_err(io)?;
        let counter = Self { map, file };
        // Alone with the state: no commit can be under way, so counters
        // left apart by a killed process are made equal.
        if counter.file.try_lock().is_ok() {
            let finished = counter.finished().load(Ordering::SeqCst);
            counter.started().store(finished, Ordering::SeqCst);
        }
        counter.file.lock_shared().map_err(io)?;
        Ok(counter)
    }

    fn at(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: the mapping is 16 bytes long and page-aligned, so both
        // u64 slots are in bounds and aligned; other processes touch them
        // only with atomic operations; the mapping lives as long as `self`.
        unsafe { &*self.map.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    fn started(&self) -> &AtomicU64 {
        self.at(0)
    }

    fn finished(&self) -> &AtomicU64 {
        self.at(8)
    }

    /// Call before the commit; drop the guard after it.
    pub(super) fn begin(&self) -> CommitInFlight<'_> {
        self.started().fetch_add(1, Ordering::SeqCst);
        CommitInFlight(self)
    }

    /// The state's version, or `None` while a commit is under way.
    pub(super) fn version(&self) -> Option<StateVersion> {
        let finished = self.finished().load(Ordering::SeqCst);
        let started = self.started().load(Ordering::SeqCst);
        (started == finished).then_some(StateVersion(finished))
    }
}

/// Where the state stands: two equal versions mean nothing was committed
/// in between, by this process or any other (see [`ChangeCounter`]).
/// Invocation snapshots, call-time checks and documents are reused while
/// the version holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateVersion(u64);

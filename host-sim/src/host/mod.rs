//! [`Host`]: the facade every surface and the CLI use. It opens the
//! operator state, the sandbox and the instance pool over a state
//! directory, and offers the operator's actions ([`operator`]), the one
//! invocation function ([`Host::invoke`], [`invoke`]) and what the surfaces
//! ask besides invoking ([`queries`]). Its fields are private: everything
//! below it is reached through these methods.

mod invoke;
mod oauth;
mod operator;
mod queries;
mod tracking;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) use invoke::new_request_id;
pub use invoke::{Caller, Invocation, InvokeRequest};
pub use oauth::{
    Approval, ClientCredentials, OAuthClient, OAuthError, OAuthLifetimes, check_challenge,
    check_redirect_uri, is_metadata_document_id, parse_scope, redirect_host, redirect_uri_matches,
};
pub use operator::{InvalidInput, IssuedToken};
pub use queries::{MAX_SESSION_TTL, PanelSession};
pub use tracking::{CertificateState, EdgeRemoval, TrackingError, TrackingRecords};

use crate::capabilities::http::client;
use crate::limits::SandboxLimits;
use crate::pool::{InstancePool, LoadError, SandboxStats};
use crate::sandbox::{self, EpochTicker};
use crate::state::{self, MasterKeySource, State, StateError};
use crate::verify::InstallError;

/// The instance pool's state for `/metrics`.
#[derive(Debug, Clone, Copy)]
pub struct PoolGauges {
    pub slots_in_use: u64,
    pub slots: u64,
    pub prepared: u64,
    pub used_prepared: u64,
}

/// Where the host keeps its state and how it sandboxes extensions.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Holds the database (unless `db_path` says otherwise) and, by
    /// default, the trusted publisher keys.
    pub state_dir: PathBuf,
    /// The SQLite file; default `<state_dir>/host-sim.sqlite3`.
    pub db_path: Option<PathBuf>,
    /// Directory of trusted publisher keys (`*.pub`); default
    /// `<state_dir>/trusted-publishers`.
    pub trust_dir: Option<PathBuf>,
    pub limits: SandboxLimits,
    /// Marks the state as a development state (see [`DEVELOPMENT_MARKER`]):
    /// it takes unsigned development builds and refuses signed releases.
    pub development: bool,
    /// The master key that seals the stored secrets: a file
    /// (`--master-key-file`), or by default `<state_dir>/master.key`, made
    /// (mode 0600) on the first open.
    pub master_key: MasterKeySource,
    /// Where a development host keeps the components it compiled (see
    /// [`crate::sandbox::compile_cached`], [`crate::testing::default_compile_cache`]),
    /// so a test host or `host-sim dev` started again on the same build loads
    /// instead of compiling. Ignored by an operator's host, which always
    /// compiles what it verified.
    pub compile_cache: Option<PathBuf>,
}

/// The file beside the database that marks a development state, one that
/// `host-sim dev` or [`crate::testing`] made. Such a state takes unsigned
/// builds ([`Host::install_development`]) and refuses releases; an
/// operator's state is the other way round.
pub const DEVELOPMENT_MARKER: &str = "DEVELOPMENT-STATE";

impl HostConfig {
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            db_path: None,
            trust_dir: None,
            limits: SandboxLimits::default(),
            development: false,
            master_key: MasterKeySource::BesideData,
            compile_cache: None,
        }
    }

    /// A development state in `state_dir` (see [`DEVELOPMENT_MARKER`]).
    pub fn development(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            development: true,
            ..Self::new(state_dir)
        }
    }

    pub fn db_path(&self) -> PathBuf {
        self.db_path
            .clone()
            .unwrap_or_else(|| self.state_dir.join(state::DB_FILE))
    }

    pub fn trust_dir(&self) -> PathBuf {
        self.trust_dir
            .clone()
            .unwrap_or_else(|| self.state_dir.join("trusted-publishers"))
    }
}

/// Errors of the operator's operations and the surfaces' queries.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Install(#[from] InstallError),
    /// An operator's value breaks a rule (the message names both).
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    #[error("{extension} is not installed")]
    NotInstalled { extension: String },
    /// The installed release could not be prepared for invocations.
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("the stored manifest does not parse: {0}")]
    StoredManifest(String),
    /// A tracking-domain step refused or could not run.
    #[error(transparent)]
    Tracking(#[from] tracking::TrackingError),
    #[error("the sandbox could not start: {0}")]
    Sandbox(String),
}

/// The host. `Send + Sync`: share it as `Arc<Host>`.
pub struct Host {
    state: Arc<State>,
    pool: InstancePool,
    limits: Arc<SandboxLimits>,
    trust_dir: PathBuf,
    development: bool,
    /// [`HostConfig::compile_cache`], in a development host only.
    compile_cache: Option<PathBuf>,
    _ticker: EpochTicker,
}

impl Host {
    /// Opens (creating and migrating) the state, builds the pooled engine
    /// and starts its epoch ticker (stopped when the host is dropped).
    pub fn open(config: HostConfig) -> Result<Self, HostError> {
        let sandbox_error = |e: &dyn std::fmt::Display| HostError::Sandbox(e.to_string());
        let db_path = config.db_path();
        let marker = db_path
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join(DEVELOPMENT_MARKER);
        if config.development && !marker.exists() {
            if let Some(parent) = marker.parent() {
                std::fs::create_dir_all(parent).map_err(|e| {
                    HostError::Sandbox(format!("cannot create {}: {e}", parent.display()))
                })?;
            }
            std::fs::write(
                &marker,
                "A development state of `host-sim dev`: unsigned builds only, never releases.\n",
            )
            .map_err(|e| HostError::Sandbox(format!("cannot write {}: {e}", marker.display())))?;
        }
        let development = marker.exists();
        // A newer schema is refused, and a missing key file not made beside
        // a state whose secrets are sealed, before anything is written.
        let known_keys = state::inspect(&db_path)?;
        let key = config
            .master_key
            .load_for(
                &config.state_dir,
                &known_keys,
                &db_path.display().to_string(),
            )
            .map_err(StateError::from)?;
        if let Some(file) = &key.created
            && !development
        {
            eprintln!("{}", secrets_at_rest::wording::key_created(file));
        }
        let state = Arc::new(State::open(&db_path, key.key, &key.label)?);
        let limits = Arc::new(config.limits.clone());
        let engine = sandbox::engine(&limits, true).map_err(|e| sandbox_error(&e))?;
        let ticker =
            EpochTicker::start(&engine, limits.epoch_tick).map_err(|e| sandbox_error(&e))?;
        let client = client().map_err(|e| HostError::Sandbox(format!("HTTP client: {e}")))?;
        let pool = InstancePool::new(engine, state.clone(), client, limits.clone())
            .map_err(|e| sandbox_error(&e))?;
        Ok(Self {
            state,
            pool,
            limits,
            trust_dir: config.trust_dir(),
            development,
            compile_cache: config.compile_cache.filter(|_| development),
            _ticker: ticker,
        })
    }

    /// What the sandbox housekeeping has done (see `ARCHITECTURE.md`,
    /// "Store housekeeping in the waits").
    pub fn sandbox_stats(&self) -> SandboxStats {
        self.pool.stats()
    }

    /// `Ok` when the operator state answers; otherwise why not (`/readyz`).
    pub fn readiness(&self) -> Result<(), String> {
        self.state
            .ping()
            .map_err(|e| format!("the operator state is unreachable: {e}"))
    }

    /// The instance pool's gauges for `/metrics`.
    pub fn pool_gauges(&self) -> PoolGauges {
        let stats = self.pool.stats();
        PoolGauges {
            slots_in_use: self.pool.slots_in_use() as u64,
            slots: u64::from(self.limits.max_instances),
            prepared: stats.prepared,
            used_prepared: stats.used_prepared,
        }
    }

    /// The operator state (read access for tools and tests).
    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn limits(&self) -> &SandboxLimits {
        &self.limits
    }

    pub fn engine(&self) -> &wasmtime::Engine {
        self.pool.engine()
    }

    pub fn trust_dir(&self) -> &Path {
        &self.trust_dir
    }

    /// Whether this is a development state (see [`DEVELOPMENT_MARKER`]).
    pub fn is_development(&self) -> bool {
        self.development
    }
}

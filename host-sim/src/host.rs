//! [`Host`]: the operator state, the sandbox and the caches, opened over a
//! state directory; and the operator's operations on them.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rand::RngCore;
use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

use crate::bindings::ManagedExtensionPre;
use crate::capabilities::http::{check_origin, client};
use crate::housekeeping::Housekeeping;
use crate::install::InstallError;
use crate::runtime::{self, EpochTicker, InvocationState, SandboxLimits};
use crate::secret::Secret;
use crate::spec::ExtensionSpec;
use crate::state::{self, AuthStyle, Binding, BindingInfo, ProjectSettings, State, StateError};

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
}

impl HostConfig {
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            db_path: None,
            trust_dir: None,
            limits: SandboxLimits::default(),
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

/// Errors of the operator's operations.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Install(#[from] InstallError),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("the sandbox could not start: {0}")]
    Runtime(String),
}

/// A freshly issued token: shown once, stored only as a hash.
#[derive(Debug, Clone)]
pub struct IssuedToken {
    pub token: String,
    pub user: String,
    pub projects: Vec<String>,
    pub expires_at: i64,
}

/// An installed release, prepared for invocations: the enforced parts of
/// its manifest and its compiled component.
pub(crate) struct LoadedRelease {
    pub digest: String,
    pub spec: Arc<ExtensionSpec>,
    pub component: Component,
}

/// Cache key of pre-instantiations: a release, a project, a generation.
/// Any change that bumps the generation makes a new key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PreKey {
    pub digest: String,
    pub project: String,
    pub generation: u64,
}

/// The host. `Send + Sync`: share it as `Arc<Host>`.
pub struct Host {
    pub(crate) state: Arc<State>,
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<InvocationState>,
    pub(crate) limits: Arc<SandboxLimits>,
    pub(crate) client: crate::capabilities::http::BindingClient,
    pub(crate) trust_dir: PathBuf,
    pub(crate) releases: RwLock<HashMap<String, Arc<LoadedRelease>>>,
    pub(crate) instances: Mutex<HashMap<PreKey, ManagedExtensionPre<InvocationState>>>,
    /// Store teardown and preparation, done while invocations wait.
    pub(crate) housekeeping: Arc<Housekeeping>,
    _ticker: EpochTicker,
}

impl Host {
    /// Opens (creating and migrating) the state, builds the pooled engine
    /// and starts its epoch ticker (stopped when the host is dropped).
    pub fn open(config: HostConfig) -> Result<Self, HostError> {
        let state = Arc::new(State::open(&config.db_path())?);
        let limits = Arc::new(config.limits.clone());
        let engine =
            runtime::engine(&limits, true).map_err(|e| HostError::Runtime(e.to_string()))?;
        let linker = runtime::linker(&engine).map_err(|e| HostError::Runtime(e.to_string()))?;
        let ticker = EpochTicker::start(&engine, limits.epoch_tick)
            .map_err(|e| HostError::Runtime(e.to_string()))?;
        let client = client().map_err(|e| HostError::Runtime(format!("HTTP client: {e}")))?;
        let housekeeping = Arc::new(Housekeeping::new(
            engine.clone(),
            state.clone(),
            client.clone(),
            limits.clone(),
        ));
        Ok(Self {
            state,
            engine,
            linker,
            limits,
            client,
            housekeeping,
            trust_dir: config.trust_dir(),
            releases: RwLock::new(HashMap::new()),
            instances: Mutex::new(HashMap::new()),
            _ticker: ticker,
        })
    }

    /// What the sandbox housekeeping has done (see `ARCHITECTURE.md`,
    /// "Invocation").
    pub fn sandbox_stats(&self) -> crate::SandboxStats {
        self.housekeeping.stats()
    }

    /// The operator state (read access for tools and tests).
    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn limits(&self) -> &SandboxLimits {
        &self.limits
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn trust_dir(&self) -> &Path {
        &self.trust_dir
    }

    /// Approves capabilities of the installed release (every declared one
    /// when `capabilities` is empty). Answers the approved set.
    pub fn approve(
        &self,
        extension: &str,
        capabilities: &[String],
    ) -> Result<BTreeSet<String>, HostError> {
        self.set_approval(extension, capabilities, true)
    }

    /// Withdraws approvals (all when `capabilities` is empty).
    pub fn unapprove(
        &self,
        extension: &str,
        capabilities: &[String],
    ) -> Result<BTreeSet<String>, HostError> {
        self.set_approval(extension, capabilities, false)
    }

    fn set_approval(
        &self,
        extension: &str,
        capabilities: &[String],
        approved: bool,
    ) -> Result<BTreeSet<String>, HostError> {
        let release = self
            .state
            .release(extension)?
            .ok_or_else(|| HostError::NotFound(format!("{extension} is not installed")))?;
        let manifest = extension_release::Manifest::from_toml(&release.manifest)
            .map_err(|e| HostError::Invalid(format!("stored manifest: {e}")))?;
        let declared = manifest.capability_ids();
        let chosen: Vec<String> = if capabilities.is_empty() {
            declared.iter().cloned().collect()
        } else {
            for capability in capabilities {
                if !declared.contains(capability) {
                    return Err(HostError::Invalid(format!(
                        "{extension} {} does not declare capability {capability}; it declares: {}",
                        release.version,
                        declared.iter().cloned().collect::<Vec<_>>().join(", ")
                    )));
                }
            }
            capabilities.to_vec()
        };
        self.state
            .set_approval(extension, &release.digest, &chosen, approved)?;
        Ok(self.state.approvals(extension, &release.digest)?)
    }

    /// Approved capabilities of the installed release.
    pub fn approvals(&self, extension: &str) -> Result<BTreeSet<String>, HostError> {
        let release = self
            .state
            .release(extension)?
            .ok_or_else(|| HostError::NotFound(format!("{extension} is not installed")))?;
        Ok(self.state.approvals(extension, &release.digest)?)
    }

    /// Grants an installed extension to a project; answers the new generation.
    pub fn grant(&self, extension: &str, project: &str) -> Result<u64, HostError> {
        check_project(project)?;
        Ok(self.state.grant(extension, project)?)
    }

    /// Revokes a grant (effective for host calls already in flight).
    pub fn revoke(&self, extension: &str, project: &str) -> Result<bool, HostError> {
        Ok(self.state.revoke(extension, project)?)
    }

    /// Sets a project's binding. The secret is stored only in the state.
    pub fn set_binding(
        &self,
        project: &str,
        name: &str,
        origin: &str,
        secret: Secret,
        auth_style: AuthStyle,
        timeout: Duration,
    ) -> Result<BindingInfo, HostError> {
        check_project(project)?;
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(HostError::Invalid(
                "a binding name uses lower-case letters, digits, `-` and `_`".into(),
            ));
        }
        let origin = check_origin(origin).map_err(HostError::Invalid)?;
        crate::capabilities::http::check_secret(secret.expose()).map_err(HostError::Invalid)?;
        if timeout.is_zero() || timeout > Duration::from_secs(60) {
            return Err(HostError::Invalid(
                "the binding timeout must be between 1 ms and 60 s".into(),
            ));
        }
        self.state.set_binding(&Binding {
            project_id: project.to_string(),
            name: name.to_string(),
            origin,
            secret,
            auth_style,
            timeout,
        })?;
        self.state
            .bindings(Some(project))?
            .into_iter()
            .find(|b| b.name == name)
            .ok_or_else(|| HostError::NotFound(format!("binding {name} vanished")))
    }

    /// Bindings without their secrets.
    pub fn bindings(&self, project: Option<&str>) -> Result<Vec<BindingInfo>, HostError> {
        Ok(self.state.bindings(project)?)
    }

    /// Sets (or clears) a project's public `tracking_origin` override.
    pub fn set_tracking_origin(
        &self,
        project: &str,
        origin: Option<&str>,
    ) -> Result<ProjectSettings, HostError> {
        check_project(project)?;
        let origin = origin
            .map(|o| check_origin(o).map_err(HostError::Invalid))
            .transpose()?;
        self.state.set_tracking_origin(project, origin.as_deref())?;
        Ok(self.state.project_settings(project)?)
    }

    /// Issues a token for `user` with access to `projects`; the token is
    /// returned once and stored as a SHA-256 hash.
    pub fn issue_token(
        &self,
        user: &str,
        projects: &[String],
        ttl: Duration,
    ) -> Result<IssuedToken, HostError> {
        if user.is_empty() || user.len() > 128 || user.chars().any(char::is_control) {
            return Err(HostError::Invalid(
                "the user must be 1 to 128 printable characters".into(),
            ));
        }
        if projects.is_empty() {
            return Err(HostError::Invalid(
                "a token needs at least one project".into(),
            ));
        }
        for project in projects {
            check_project(project)?;
        }
        let mut bytes = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut bytes);
        let token = format!("hst_{}", hex::encode(bytes));
        let expires_at = state::now_secs().saturating_add(ttl.as_secs() as i64);
        self.state.store_token(&token, user, projects, expires_at)?;
        Ok(IssuedToken {
            token,
            user: user.to_string(),
            projects: projects.to_vec(),
            expires_at,
        })
    }

    /// Takes a user's access to a project away.
    pub fn remove_project_access(&self, user: &str, project: &str) -> Result<bool, HostError> {
        Ok(self.state.remove_project_access(user, project)?)
    }

    /// The current runtime generation of (extension, project).
    pub fn generation(&self, extension: &str, project: &str) -> Result<u64, HostError> {
        Ok(self.state.generation(extension, project)?)
    }

    /// The installed extension that has an action of this name, if exactly one does.
    pub fn extension_for_action(&self, action: &str) -> Result<Option<String>, HostError> {
        let mut found = Vec::new();
        for release in self.state.releases()? {
            let manifest = extension_release::Manifest::from_toml(&release.manifest)
                .map_err(|e| HostError::Invalid(format!("stored manifest: {e}")))?;
            if manifest.action(action).is_some() {
                found.push(release.extension_id);
            }
        }
        Ok(if found.len() == 1 { found.pop() } else { None })
    }

    /// Drops cached compilations and pre-instantiations of a release.
    pub(crate) fn evict(&self, digest: &str) {
        self.releases
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(digest);
        self.instances
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|key, _| key.digest != digest);
        self.housekeeping.evict(digest);
    }
}

/// Project ids: 1 to 128 characters of `[A-Za-z0-9._-]`.
fn check_project(project: &str) -> Result<(), HostError> {
    let ok = !project.is_empty()
        && project.len() <= 128
        && project
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && project != "."
        && project != "..";
    if ok {
        Ok(())
    } else {
        Err(HostError::Invalid(format!(
            "project id `{}` must be 1 to 128 characters of letters, digits, `.`, `_`, `-`",
            project.escape_debug()
        )))
    }
}

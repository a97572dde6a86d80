//! The operator's actions: verified install, upgrade and uninstall,
//! approvals, grants, bindings, project settings and tokens. Each checks
//! its input (naming the field and the rule) before the state changes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use rand::RngCore;

use super::{Host, HostError};
use crate::capabilities::http::{OriginError, SecretError, check_origin, check_secret};
use crate::secret::Secret;
use crate::state::{
    self, AuthStyle, Binding, BindingInfo, MasterKey, NewRelease, ProjectSettings, SecretsStatus,
};
use crate::verify::{self, InstallError, ReleaseSummary};

/// An operator's value that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidInput {
    #[error("project id `{project}` must be 1 to 128 characters of letters, digits, `.`, `_`, `-`")]
    ProjectId { project: String },
    #[error("a binding name uses lower-case letters, digits, `-` and `_`")]
    BindingName,
    #[error(transparent)]
    Origin(#[from] OriginError),
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error("the binding timeout must be between 1 ms and 60 s")]
    BindingTimeout,
    #[error("the user must be 1 to 128 printable characters")]
    User,
    #[error("a token needs at least one project")]
    NoProjects,
    #[error(
        "{extension} {version} does not declare capability {capability}; it declares: {declared}"
    )]
    UndeclaredCapability {
        extension: String,
        version: String,
        capability: String,
        declared: String,
    },
}

/// A freshly issued token: shown once, stored only as a hash.
#[derive(Debug, Clone)]
pub struct IssuedToken {
    pub token: String,
    pub user: String,
    pub projects: Vec<String>,
    pub expires_at: i64,
}

impl Host {
    /// Runs every check of an install without storing anything.
    /// `progress` is told about each step.
    pub fn verify_release(
        &self,
        dir: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ReleaseSummary, InstallError> {
        let (release, _) = self.verified(dir, progress)?;
        Ok(verify::summary(&release))
    }

    /// Verifies and installs a release of an extension that is not installed.
    pub fn install_release(
        &self,
        dir: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ReleaseSummary, InstallError> {
        self.store_release(dir, false, progress)
    }

    /// Verifies a release and replaces the installed one of the same
    /// extension. Approvals belong to a release: approve the new one.
    pub fn upgrade_release(
        &self,
        dir: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ReleaseSummary, InstallError> {
        self.store_release(dir, true, progress)
    }

    /// Removes an installed release with its approvals and grants. The
    /// projects' documents stay.
    pub fn uninstall(&self, extension: &str) -> Result<ReleaseSummary, InstallError> {
        let removed = self.state.remove_release(extension)?;
        self.pool.evict(&removed.digest);
        tracing::info!(extension, version = %removed.version, digest = %removed.digest, "release uninstalled");
        Ok(ReleaseSummary {
            extension_id: removed.extension_id,
            name: String::new(),
            version: removed.version,
            digest: removed.digest,
            key_id: removed.key_id,
            capabilities: Vec::new(),
            actions: Vec::new(),
            approved: Vec::new(),
        })
    }

    /// Installed releases with their approvals.
    pub fn releases(&self) -> Result<Vec<ReleaseSummary>, InstallError> {
        let mut out = Vec::new();
        for stored in self.state.releases()? {
            let manifest = extension_release::Manifest::from_toml(&stored.manifest)
                .map_err(|e| InstallError::Manifest(e.to_string()))?;
            out.push(ReleaseSummary {
                extension_id: stored.extension_id.clone(),
                name: manifest.extension.name.clone(),
                version: stored.version.clone(),
                digest: stored.digest.clone(),
                key_id: stored.key_id.clone(),
                capabilities: manifest.capability_ids().into_iter().collect(),
                actions: manifest.actions.iter().map(|a| a.name.clone()).collect(),
                approved: self
                    .state
                    .approvals(&stored.extension_id, &stored.digest)?
                    .into_iter()
                    .collect(),
            });
        }
        Ok(out)
    }

    fn store_release(
        &self,
        dir: &Path,
        upgrade: bool,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ReleaseSummary, InstallError> {
        if self.development {
            return Err(InstallError::Development(
                "this is a development state of `host-sim dev`, which runs unsigned builds only; install releases into an operator's state (another --state-dir)",
            ));
        }
        let (release, compiled) = self.verified(dir, progress)?;
        let summary = verify::summary(&release);
        progress("storing the release");
        let manifest_text = String::from_utf8(release.manifest_bytes.clone())
            .map_err(|_| InstallError::Manifest("the manifest is not UTF-8".into()))?;
        let previous = self.state.release(&summary.extension_id)?;
        self.state.store_release(
            &NewRelease {
                extension_id: &summary.extension_id,
                version: &summary.version,
                digest: &summary.digest,
                manifest: &manifest_text,
                key_id: &summary.key_id,
                files: &release.files,
            },
            upgrade,
        )?;
        if let Some(previous) = previous {
            self.pool.evict(&previous.digest);
        }
        self.pool.insert(compiled);
        tracing::info!(
            extension = %summary.extension_id,
            version = %summary.version,
            digest = %summary.digest,
            key_id = %summary.key_id,
            upgrade,
            "release installed"
        );
        Ok(summary)
    }

    /// Installs an unsigned development build (the manifest as written and
    /// the files it names), or replaces the installed build of the same
    /// extension, with every declared capability approved: a new runtime
    /// generation. Invocations running on the replaced build finish on it.
    /// Only in a development state.
    pub fn install_development(
        &self,
        manifest_text: &str,
        files: BTreeMap<String, Vec<u8>>,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ReleaseSummary, InstallError> {
        if !self.development {
            return Err(InstallError::Development(
                "unsigned development builds run only in a development state (`host-sim dev`, host_sim::testing); sign a release for an operator's state",
            ));
        }
        let (build, compiled) = verify::verify_development(
            self.pool.engine(),
            self.pool.linker(),
            manifest_text,
            files,
            self.compile_cache.as_deref(),
            progress,
        )?;
        let manifest = &build.manifest;
        let capabilities: Vec<String> = manifest.capability_ids().into_iter().collect();
        progress("storing the build");
        let previous = self.state.release(&manifest.extension.id)?;
        self.state.store_development_release(
            &NewRelease {
                extension_id: &manifest.extension.id,
                version: &manifest.extension.version,
                digest: &build.digest,
                manifest: &build.manifest_text,
                key_id: verify::DEVELOPMENT_KEY_ID,
                files: &build.files,
            },
            &capabilities,
        )?;
        self.pool.insert(compiled);
        if let Some(previous) = previous
            && previous.digest != build.digest
        {
            self.pool.evict(&previous.digest);
        }
        tracing::info!(
            extension = %manifest.extension.id,
            version = %manifest.extension.version,
            digest = %build.digest,
            "development build installed"
        );
        Ok(ReleaseSummary {
            extension_id: manifest.extension.id.clone(),
            name: manifest.extension.name.clone(),
            version: manifest.extension.version.clone(),
            digest: build.digest.clone(),
            key_id: verify::DEVELOPMENT_KEY_ID.to_owned(),
            actions: manifest.actions.iter().map(|a| a.name.clone()).collect(),
            approved: capabilities.clone(),
            capabilities,
        })
    }

    fn verified(
        &self,
        dir: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<
        (
            extension_release::VerifiedRelease,
            crate::sandbox::CompiledRelease,
        ),
        InstallError,
    > {
        verify::verify(
            self.pool.engine(),
            self.pool.linker(),
            &self.trust_dir,
            dir,
            progress,
        )
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
        let release = self.installed(extension)?;
        let manifest = extension_release::Manifest::from_toml(&release.manifest)
            .map_err(|e| HostError::StoredManifest(e.to_string()))?;
        let declared = manifest.capability_ids();
        let chosen: Vec<String> = if capabilities.is_empty() {
            declared.iter().cloned().collect()
        } else {
            for capability in capabilities {
                if !declared.contains(capability) {
                    return Err(InvalidInput::UndeclaredCapability {
                        extension: extension.to_string(),
                        version: release.version.clone(),
                        capability: capability.clone(),
                        declared: declared.iter().cloned().collect::<Vec<_>>().join(", "),
                    }
                    .into());
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
        let release = self.installed(extension)?;
        Ok(self.state.approvals(extension, &release.digest)?)
    }

    fn installed(&self, extension: &str) -> Result<state::StoredRelease, HostError> {
        self.state
            .release(extension)?
            .ok_or_else(|| HostError::NotInstalled {
                extension: extension.to_string(),
            })
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
            return Err(InvalidInput::BindingName.into());
        }
        let origin = check_origin(origin).map_err(InvalidInput::from)?;
        check_secret(secret.expose()).map_err(InvalidInput::from)?;
        if timeout.is_zero() || timeout > Duration::from_secs(60) {
            return Err(InvalidInput::BindingTimeout.into());
        }
        Ok(self.state.set_binding(&Binding {
            project_id: project.to_string(),
            name: name.to_string(),
            origin,
            secret,
            auth_style,
            timeout,
        })?)
    }

    /// The state's master keys and how many stored secrets each protects.
    pub fn secrets_status(&self) -> Result<SecretsStatus, HostError> {
        Ok(self.state.secrets_status()?)
    }

    /// Re-seals every stored secret under `new` while other processes
    /// serve; run again after an interruption, it goes on where it stopped.
    /// Answers how many values it re-sealed.
    pub fn rotate_secrets(&self, new: MasterKey) -> Result<u64, HostError> {
        Ok(self.state.rotate_secrets(new)?)
    }

    /// Removes a retired master key (one that protects no value and is not
    /// the newest).
    pub fn forget_master_key(&self, key_id: &str) -> Result<(), HostError> {
        Ok(self.state.forget_master_key(key_id)?)
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
            .map(check_origin)
            .transpose()
            .map_err(InvalidInput::from)?;
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
            return Err(InvalidInput::User.into());
        }
        if projects.is_empty() {
            return Err(InvalidInput::NoProjects.into());
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
                .map_err(|e| HostError::StoredManifest(e.to_string()))?;
            if manifest.action(action).is_some() {
                found.push(release.extension_id);
            }
        }
        Ok(if found.len() == 1 { found.pop() } else { None })
    }
}

/// Project ids: 1 to 128 characters of `[A-Za-z0-9._-]`.
pub(super) fn check_project(project: &str) -> Result<(), InvalidInput> {
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
        Err(InvalidInput::ProjectId {
            project: project.escape_debug().to_string(),
        })
    }
}

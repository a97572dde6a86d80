//! What the surfaces (HTTP API, MCP server, console) ask the host besides
//! invoking: who a token is, which actions an installed extension offers,
//! the panel's files, and short-lived console sessions.

use std::sync::Arc;
use std::time::Duration;

use super::{Caller, Host, HostError, IssuedToken};
use crate::error::InvokeError;
use crate::spec::ActionInfo;
use crate::state::{self, TokenAccess};

/// Longest lifetime of a console session token.
pub const MAX_SESSION_TTL: Duration = Duration::from_secs(3600);

/// A short-lived token for one project's panel, with the generation the
/// panel must carry.
#[derive(Debug, Clone)]
pub struct PanelSession {
    pub token: IssuedToken,
    pub generation: u64,
}

impl Host {
    /// The caller's user and the projects (with their granted extensions)
    /// its token reaches now; `None` for an unknown or expired token.
    pub fn caller_access(&self, caller: &Caller) -> Result<Option<TokenAccess>, HostError> {
        Ok(self.state.token_access(caller.token(), caller.resource())?)
    }

    /// The actions of an installed extension, in manifest-name order;
    /// `None` if it is not installed. Blocking on a first look-up (the
    /// database, maybe a compilation); see [`Self::actions_in_memory`].
    pub fn actions(&self, extension: &str) -> Result<Option<Arc<[ActionInfo]>>, HostError> {
        let Some(digest) = self.state.installed_digest(extension)? else {
            return Ok(None);
        };
        let release = self.pool.release(extension, &digest)?;
        Ok(Some(release.spec.action_infos.clone()))
    }

    /// [`Self::actions`] when memory holds the answer (no database read,
    /// no compilation, nothing that blocks): what a surface asks first on
    /// its async thread. `None`: ask [`Self::actions`].
    pub fn actions_in_memory(&self, extension: &str) -> Option<Option<Arc<[ActionInfo]>>> {
        match self.state.installed_digest_in_memory(extension)? {
            None => Some(None),
            Some(digest) => {
                let release = self.pool.cached_release(&digest)?;
                Some(Some(release.spec.action_infos.clone()))
            }
        }
    }

    /// A file of the installed release's panel (a path relative to the
    /// directory of the manifest's `panel.entry`); `None` if the extension
    /// has no panel or no such file. Never serves files outside that
    /// directory (the component and the manifest stay private).
    pub fn panel_file(&self, extension: &str, path: &str) -> Result<Option<Vec<u8>>, HostError> {
        let clean = !path.is_empty()
            && path
                .split('/')
                .all(|part| !part.is_empty() && part != "." && part != "..");
        if !clean {
            return Ok(None);
        }
        let Some((dir, _)) = self.panel_location(extension)? else {
            return Ok(None);
        };
        Ok(self
            .state
            .release_file(extension, &format!("{dir}{path}"))?)
    }

    /// The file name of the panel's entry page inside its directory
    /// (e.g. `index.html`), if the extension has a panel.
    pub fn panel_entry(&self, extension: &str) -> Result<Option<String>, HostError> {
        Ok(self.panel_location(extension)?.map(|(_, entry)| entry))
    }

    /// The installed release's panel directory (`""` or ending in `/`) and
    /// entry file name, from its manifest's `panel.entry`.
    fn panel_location(&self, extension: &str) -> Result<Option<(String, String)>, HostError> {
        let Some(stored) = self.state.release(extension)? else {
            return Ok(None);
        };
        let manifest = extension_release::Manifest::from_toml(&stored.manifest)
            .map_err(|e| HostError::StoredManifest(e.to_string()))?;
        Ok(manifest
            .panel
            .map(|panel| match panel.entry.rsplit_once('/') {
                Some((dir, file)) => (format!("{dir}/"), file.to_string()),
                None => (String::new(), panel.entry),
            }))
    }

    /// Issues a short-lived token that reaches only `project`, for the
    /// panel of `extension`, on behalf of `caller` (whose token must reach
    /// the project, with the extension granted to it). The caller's own
    /// token is never handed out.
    pub fn panel_session(
        &self,
        caller: &Caller,
        extension: &str,
        project: &str,
        ttl: Duration,
    ) -> Result<PanelSession, InvokeError> {
        let access = self
            .caller_access(caller)
            .map_err(|e| InvokeError::Internal(format!("the host state is unavailable: {e}")))?
            .ok_or(InvokeError::Unauthenticated)?;
        let granted = access
            .projects
            .get(project)
            .ok_or_else(|| InvokeError::NoProjectAccess {
                project: project.to_string(),
            })?;
        if !granted.iter().any(|e| e == extension) {
            return Err(InvokeError::NotGranted {
                extension: extension.to_string(),
                project: project.to_string(),
            });
        }
        // Never outlive the caller's own token.
        let remaining = (access.expires_at - state::now_secs()).max(1) as u64;
        let ttl = ttl.min(MAX_SESSION_TTL).min(Duration::from_secs(remaining));
        let _ = self.state.prune_expired_tokens(3600);
        let token = self
            .issue_token(&access.user, &[project.to_string()], ttl)
            .map_err(|e| InvokeError::Internal(format!("issuing a session failed: {e}")))?;
        let generation = self
            .generation(extension, project)
            .map_err(|e| InvokeError::Internal(format!("the host state is unavailable: {e}")))?;
        Ok(PanelSession { token, generation })
    }
}

//! Verified install, upgrade and uninstall. A release is checked
//! completely (signature by a trusted publisher key, every digest, no
//! unlisted file, component validity, WIT version, imports within the
//! declared capabilities, schemas that compile, a component the host can
//! link) before one transaction stores it: nothing is half-installed.

use std::path::Path;
use std::sync::Arc;

use extension_release::component::{self, ComponentError};
use extension_release::{ReleaseBundle, TrustStore, VerifiedRelease, VerifyError};

use crate::host::{Host, LoadedRelease};
use crate::runtime;
use crate::spec::ExtensionSpec;
use crate::state::{NewRelease, StateError};

/// The versions of `platform:extension` this host implements.
pub const SUPPORTED_WIT_VERSIONS: &[&str] = &["0.1.0"];

/// Why a release was not verified, installed or removed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("trusted publisher keys: {0}")]
    TrustStore(String),
    #[error("release refused: {0}")]
    Verify(#[from] VerifyError),
    #[error("component refused: {0}")]
    Component(#[from] ComponentError),
    #[error("manifest refused: {0}")]
    Manifest(String),
    #[error("component refused: the host cannot run it: {0}")]
    Runtime(String),
    #[error("{0}")]
    State(#[from] StateError),
}

/// A verified or installed release, as operators see it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReleaseSummary {
    pub extension_id: String,
    pub name: String,
    pub version: String,
    /// SHA-256 of the signed manifest.
    pub digest: String,
    pub key_id: String,
    pub capabilities: Vec<String>,
    pub actions: Vec<String>,
    /// Approved capabilities (installed releases only).
    pub approved: Vec<String>,
}

fn summary(release: &VerifiedRelease) -> ReleaseSummary {
    let manifest = &release.manifest;
    ReleaseSummary {
        extension_id: manifest.extension.id.clone(),
        name: manifest.extension.name.clone(),
        version: manifest.extension.version.clone(),
        digest: release.digest(),
        key_id: release.key_id.to_string(),
        capabilities: manifest.capability_ids().into_iter().collect(),
        actions: manifest.actions.iter().map(|a| a.name.clone()).collect(),
        approved: Vec::new(),
    }
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
        Ok(summary(&release))
    }

    /// Verifies and installs a release of an extension that is not installed.
    pub fn install_release(
        &self,
        dir: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ReleaseSummary, InstallError> {
        self.store(dir, false, progress)
    }

    /// Verifies a release and replaces the installed one of the same
    /// extension. Approvals belong to a release: approve the new one.
    pub fn upgrade_release(
        &self,
        dir: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ReleaseSummary, InstallError> {
        self.store(dir, true, progress)
    }

    /// Removes an installed release with its approvals and grants. The
    /// projects' documents stay.
    pub fn uninstall(&self, extension: &str) -> Result<ReleaseSummary, InstallError> {
        let removed = self.state.remove_release(extension)?;
        self.evict(&removed.digest);
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

    fn store(
        &self,
        dir: &Path,
        upgrade: bool,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ReleaseSummary, InstallError> {
        let (release, loaded) = self.verified(dir, progress)?;
        let summary = summary(&release);
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
            self.evict(&previous.digest);
        }
        self.releases
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(loaded.digest.clone(), Arc::new(loaded));
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

    fn verified(
        &self,
        dir: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<(VerifiedRelease, LoadedRelease), InstallError> {
        progress("reading trusted publisher keys");
        let trust = TrustStore::load_dir(&self.trust_dir)
            .map_err(|e| InstallError::TrustStore(e.to_string()))?;
        progress("verifying the signature and every file digest");
        let release = ReleaseBundle::read_dir(dir)?.verify(&trust)?;
        progress("inspecting the component (validity, WIT version, imports)");
        let info = component::inspect(release.component())?;
        component::check_against_manifest(&release.manifest, &info, SUPPORTED_WIT_VERSIONS)?;
        let spec =
            ExtensionSpec::from_manifest(&release.manifest).map_err(InstallError::Manifest)?;
        progress("compiling the component");
        let component = runtime::compile(&self.engine, release.component())
            .map_err(|e| InstallError::Runtime(e.to_string()))?;
        self.linker
            .instantiate_pre(&component)
            .map_err(|e| InstallError::Runtime(e.to_string()))?;
        let loaded = LoadedRelease {
            digest: release.digest(),
            spec: Arc::new(spec),
            component,
        };
        Ok((release, loaded))
    }
}

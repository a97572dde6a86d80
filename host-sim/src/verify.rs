//! Release verification: a release is checked completely (signature by a
//! trusted publisher key, every digest, no unlisted file, component
//! validity, WIT version, imports within the declared capabilities, schemas
//! that compile, a component the host can link) before anything is stored.
//! The host's install, upgrade and uninstall (`Host::install_release` …)
//! store what [`verify`] accepted in one transaction: nothing is
//! half-installed.

use std::path::Path;
use std::sync::Arc;

use extension_release::component::{self, ComponentError};
use extension_release::{ReleaseBundle, TrustStore, VerifiedRelease, VerifyError};
use wasmtime::Engine;
use wasmtime::component::Linker;

use crate::sandbox::{self, CompiledRelease, StoreData};
use crate::spec::ExtensionSpec;
use crate::state::StateError;

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

/// What operators are shown of a verified release.
pub fn summary(release: &VerifiedRelease) -> ReleaseSummary {
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

/// Runs every check of an install on the release in `dir`, compiling its
/// component for `engine` and linking it with `linker`; stores nothing.
/// `progress` is told about each step.
pub fn verify(
    engine: &Engine,
    linker: &Linker<StoreData>,
    trust_dir: &Path,
    dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<(VerifiedRelease, CompiledRelease), InstallError> {
    progress("reading trusted publisher keys");
    let trust =
        TrustStore::load_dir(trust_dir).map_err(|e| InstallError::TrustStore(e.to_string()))?;
    progress("verifying the signature and every file digest");
    let release = ReleaseBundle::read_dir(dir)?.verify(&trust)?;
    progress("inspecting the component (validity, WIT version, imports)");
    let info = component::inspect(release.component())?;
    component::check_against_manifest(&release.manifest, &info, SUPPORTED_WIT_VERSIONS)?;
    let spec = ExtensionSpec::from_manifest(&release.manifest).map_err(InstallError::Manifest)?;
    progress("compiling the component");
    let component = sandbox::compile(engine, release.component())
        .map_err(|e| InstallError::Runtime(e.to_string()))?;
    linker
        .instantiate_pre(&component)
        .map_err(|e| InstallError::Runtime(e.to_string()))?;
    let compiled = CompiledRelease {
        digest: release.digest(),
        spec: Arc::new(spec),
        component,
    };
    Ok((release, compiled))
}

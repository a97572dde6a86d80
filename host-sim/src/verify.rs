//! Release verification: a release is checked completely (signature by a
//! trusted publisher key, every digest, no unlisted file, component
//! validity, WIT version, imports within the declared capabilities, schemas
//! that compile, a component the host can link) before anything is stored.
//! The host's install, upgrade and uninstall (`Host::install_release` …)
//! store what [`verify`] accepted in one transaction: nothing is
//! half-installed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use extension_release::component::{self, ComponentError};
use extension_release::{Manifest, ReleaseBundle, TrustStore, VerifiedRelease, VerifyError};
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
    /// Signed by a key the host does not trust: where a trusted key goes.
    #[error(
        "release refused: the release is signed by key {key_id}, which this host does not trust; \
         to trust it, put the publisher's public key file (the `.pub` that `host-sim publisher \
         keygen` wrote beside the key) into {} (the trusted-publishers directory; \
         `--trust-dir` or HOST_SIM_TRUST_DIR names another)",
        trust_dir.display()
    )]
    UntrustedKey {
        key_id: extension_release::KeyId,
        trust_dir: PathBuf,
    },
    #[error("component refused: {0}")]
    Component(#[from] ComponentError),
    #[error("manifest refused: {0}")]
    Manifest(String),
    #[error("component refused: the host cannot run it: {0}")]
    Runtime(String),
    #[error("{0}")]
    State(#[from] StateError),
    /// A signed release into a development state, or a development build
    /// into an operator's state.
    #[error("{0}")]
    Development(&'static str),
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
    let release = ReleaseBundle::read_dir(dir)?
        .verify(&trust)
        .map_err(|e| match e {
            VerifyError::UntrustedKey { key_id } => InstallError::UntrustedKey {
                key_id,
                trust_dir: trust_dir.to_owned(),
            },
            other => other.into(),
        })?;
    let compiled = check_component(
        engine,
        linker,
        &release.manifest,
        release.component(),
        release.digest(),
        None,
        progress,
    )?;
    Ok((release, compiled))
}

/// Every check of a release but the signature: the component against its
/// manifest (validity, WIT version, imports), the schemas, compiling and
/// linking it.
fn check_component(
    engine: &Engine,
    linker: &Linker<StoreData>,
    manifest: &Manifest,
    bytes: &[u8],
    digest: String,
    compile_cache: Option<&Path>,
    progress: &mut dyn FnMut(&str),
) -> Result<CompiledRelease, InstallError> {
    progress("inspecting the component (validity, WIT version, imports)");
    let info = component::inspect(bytes)?;
    component::check_against_manifest(manifest, &info, SUPPORTED_WIT_VERSIONS)?;
    let spec = ExtensionSpec::from_manifest(manifest).map_err(InstallError::Manifest)?;
    progress("compiling the component");
    let component = sandbox::compile_cached(engine, bytes, compile_cache)
        .map_err(|e| InstallError::Runtime(e.to_string()))?;
    linker
        .instantiate_pre(&component)
        .map_err(|e| InstallError::Runtime(e.to_string()))?;
    Ok(CompiledRelease {
        digest,
        spec: Arc::new(spec),
        component,
    })
}

/// An unsigned build of `host-sim dev` and the in-process test host: the
/// manifest as its developer wrote it and the files it names.
#[derive(Debug, Clone)]
pub struct DevelopmentBuild {
    pub manifest: Manifest,
    pub manifest_text: String,
    pub files: BTreeMap<String, Vec<u8>>,
    /// SHA-256 over the manifest and every file's digest: a new build of
    /// either is a new release.
    pub digest: String,
}

/// The key id development builds are stored under (no publisher signed them).
pub const DEVELOPMENT_KEY_ID: &str = "development (unsigned)";

/// Checks an unsigned development build as [`verify`] checks a release,
/// except for the signature and the file list (which only a signed
/// release has). With `compile_cache` the component is loaded from there
/// when it was compiled before ([`sandbox::compile_cached`]).
pub fn verify_development(
    engine: &Engine,
    linker: &Linker<StoreData>,
    manifest_text: &str,
    files: BTreeMap<String, Vec<u8>>,
    compile_cache: Option<&Path>,
    progress: &mut dyn FnMut(&str),
) -> Result<(DevelopmentBuild, CompiledRelease), InstallError> {
    progress("reading the manifest");
    let manifest =
        Manifest::from_toml(manifest_text).map_err(|e| InstallError::Manifest(e.to_string()))?;
    for (field, path) in manifest.required_files() {
        if !files.contains_key(path) {
            return Err(InstallError::Manifest(format!(
                "the {field} `{path}` is missing from the development build"
            )));
        }
    }
    let mut digest_input = manifest_text.as_bytes().to_vec();
    for (path, bytes) in &files {
        digest_input.extend_from_slice(
            format!("\n{path} {}", extension_release::sha256_hex(bytes)).as_bytes(),
        );
    }
    let digest = extension_release::sha256_hex(&digest_input);
    let component = &files[&manifest.extension.component];
    let compiled = check_component(
        engine,
        linker,
        &manifest,
        component,
        digest.clone(),
        compile_cache,
        progress,
    )?;
    Ok((
        DevelopmentBuild {
            manifest,
            manifest_text: manifest_text.to_owned(),
            files,
            digest,
        },
        compiled,
    ))
}

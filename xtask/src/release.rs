//! `cargo xtask release`: build everything a release ships and sign it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use extension_release::{Manifest, PublisherKey, ReleaseBundle, TrustStore};

use crate::toolchain::WasmToolchain;
use crate::{guests, panel};

#[derive(clap::Args)]
pub struct Args {
    /// Where to write the release (default: target/release-bundle/<id>-<version>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The publisher's private key (PKCS#8 PEM); created on first use.
    /// Default: $PUBLISHER_KEY_FILE, else ~/.config/platform-extensions/publisher-dev.pem.
    #[arg(long)]
    pub key: Option<PathBuf>,
}

fn default_key_path() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("PUBLISHER_KEY_FILE") {
        return Ok(path.into());
    }
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .context("neither XDG_CONFIG_HOME nor HOME is set; pass --key")?;
    Ok(config.join("platform-extensions/publisher-dev.pem"))
}

/// Where the release build writes the publisher's public key for hosts to trust.
pub fn trusted_keys_dir() -> PathBuf {
    crate::target_root().join("release-bundle/trusted-publishers")
}

/// A release written and checked.
pub struct Built {
    /// The release directory.
    pub dir: PathBuf,
    /// SHA-256 of the signed manifest: what a host calls the release's digest.
    pub manifest_digest: String,
}

pub fn run(args: &Args, toolchain: &WasmToolchain) -> Result<Built> {
    let root = crate::workspace_root();
    let source =
        std::fs::read_to_string(root.join("manifest.toml")).context("cannot read manifest.toml")?;
    let manifest = Manifest::from_toml(&source).context("manifest.toml")?;

    let component = guests::build(toolchain, &[guests::PLUGIN.package.to_owned()])?;
    let panel_dir = panel::build(toolchain)?;

    let mut files = BTreeMap::new();
    files.insert(
        manifest.extension.component.clone(),
        std::fs::read(&component[0])?,
    );
    let panel_prefix = manifest
        .panel
        .as_ref()
        .and_then(|p| Path::new(&p.entry).parent())
        .map(|p| p.to_string_lossy().into_owned())
        .context("manifest.toml declares no [panel] entry")?;
    for entry in std::fs::read_dir(&panel_dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        files.insert(
            format!("{panel_prefix}/{name}"),
            std::fs::read(entry.path())?,
        );
    }

    let key_path = args.key.clone().map_or_else(default_key_path, Ok)?;
    let (key, created) = PublisherKey::load_or_create(&key_path)
        .with_context(|| format!("publisher key {}", key_path.display()))?;
    let public = key.public();
    if created {
        crate::step(format!(
            "created a development publisher key at {} (keep it out of the repository)",
            key_path.display()
        ));
    }
    let out = args.out.clone().unwrap_or_else(|| {
        crate::target_root().join(format!(
            "release-bundle/{}-{}",
            manifest.extension.id, manifest.extension.version
        ))
    });
    crate::step(format!("signing the release into {}", out.display()));
    let written = extension_release::write_release(&source, &files, &key, &out)?;

    let trust_dir = trusted_keys_dir();
    std::fs::create_dir_all(&trust_dir)?;
    let trusted_key = trust_dir.join(format!("{}.pub", public.key_id()));
    std::fs::write(&trusted_key, public.to_line("development publisher") + "\n")?;

    // Check what was written the way a host will.
    let verified = ReleaseBundle::read_dir(&out)?.verify(&TrustStore::from_keys([public]))?;
    let info = extension_release::component::inspect(verified.component())?;
    extension_release::component::check_against_manifest(
        &verified.manifest,
        &info,
        &[extension_release::WIT_VERSION],
    )?;
    if verified.files.len() != files.len() {
        bail!("the release lost files between writing and reading");
    }

    println!("    publisher key id  {}", public.key_id());
    println!("    public key        {}", public.to_line(""));
    println!("    trust it from     {}", trusted_key.display());
    for (path, digest) in &written.files {
        println!("    {digest}  {path}");
    }
    println!("    manifest sha256   {}", written.manifest_digest);
    Ok(Built {
        dir: out,
        manifest_digest: written.manifest_digest,
    })
}

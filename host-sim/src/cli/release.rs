//! `release …` and `publisher …`: a publisher's signing keys, signing a
//! staged release, and the operator's verify, install, upgrade, list and
//! uninstall.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use extension_release::PublisherKey;
use serde_json::json;

use crate::{CliError, print_json};

#[derive(Subcommand)]
pub(crate) enum ReleaseCommand {
    /// Sign the release staged in DIR in place with a publisher key: DIR
    /// holds the source manifest.toml and every file it names (component,
    /// panel files); the manifest gets the digests of every file and
    /// manifest.toml.sig the Ed25519 signature.
    Sign {
        dir: PathBuf,
        /// The publisher's private key (from `host-sim publisher keygen`).
        #[arg(long)]
        key: PathBuf,
    },
    /// Run every install check on a release directory without installing it.
    Verify { dir: PathBuf },
    /// Verify and install a release of an extension that is not installed.
    Install { dir: PathBuf },
    /// Verify a release and replace the installed one (approve it again afterwards).
    Upgrade { dir: PathBuf },
    /// List installed releases and their approvals.
    List,
    /// Remove an installed release, its approvals and its grants.
    Uninstall { extension: String },
}

#[derive(Subcommand)]
pub(crate) enum PublisherCommand {
    /// Generate a publisher key: the private key at OUT (mode 0600, never
    /// overwritten) and its public key at OUT.pub, the file operators put
    /// into their trusted-publishers directory.
    Keygen {
        #[arg(long)]
        out: PathBuf,
        /// Comment on the public key's line, e.g. who publishes with it.
        #[arg(long, default_value = "")]
        comment: String,
    },
}

/// `publisher keygen`: a new key at `out`, its public key at `out.pub`.
pub(crate) fn keygen(out: &std::path::Path, comment: &str) -> Result<ExitCode, CliError> {
    let public_path = public_key_path(out);
    for path in [out, public_path.as_path()] {
        if path.exists() {
            return Err(CliError::Usage(format!(
                "--out: {} exists; a key is never overwritten (choose another path)",
                path.display()
            )));
        }
    }
    let key = PublisherKey::generate();
    key.save(out).map_err(|e| CliError::Usage(e.to_string()))?;
    let public = key.public();
    std::fs::write(&public_path, public.to_line(comment) + "\n")
        .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", public_path.display())))?;
    eprintln!(
        "✓ publisher key {} written; keep {} private, and give operators {} for their trusted-publishers directory",
        public.key_id(),
        out.display(),
        public_path.display()
    );
    print_json(&json!({
        "key_id": public.key_id().to_string(),
        "private_key": out.display().to_string(),
        "public_key": public_path.display().to_string(),
    }));
    Ok(ExitCode::SUCCESS)
}

fn public_key_path(private: &std::path::Path) -> PathBuf {
    let mut name = private.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// `release sign DIR --key K`.
pub(crate) fn sign(dir: &std::path::Path, key: &std::path::Path) -> Result<ExitCode, CliError> {
    let key = PublisherKey::load(key).map_err(|e| CliError::Usage(format!("--key: {e}")))?;
    if !dir.is_dir() {
        return Err(CliError::Usage(format!(
            "DIR: {} is not a directory holding manifest.toml and the release's files",
            dir.display()
        )));
    }
    let written =
        extension_release::sign_dir(dir, &key).map_err(|e| CliError::Signing(e.to_string()))?;
    eprintln!(
        "✓ signed {} with key {}; verify it with `host-sim release verify {}`",
        dir.display(),
        written.key_id,
        dir.display()
    );
    print_json(&json!({
        "dir": written.dir.display().to_string(),
        "key_id": written.key_id.to_string(),
        "digest": written.manifest_digest,
        "files": written.files,
    }));
    Ok(ExitCode::SUCCESS)
}

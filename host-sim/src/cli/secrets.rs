//! `host-sim secrets`: the master key that seals the stored secrets (the
//! bindings' provider secrets, the tracking challenge key), with the same
//! commands and words as `mail-service secrets`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use host_sim::Host;
use host_sim::state::MasterKey;
use secrets_at_rest::wording;

use crate::{CliError, print_json};

#[derive(Subcommand)]
pub(crate) enum SecretsCommand {
    /// Write a new random master key (64 hex digits, mode 0600) to FILE,
    /// which must not exist. Prints its id.
    GenerateKey { file: PathBuf },
    /// The state's master keys, how many stored values each protects, and
    /// which key seals new values (JSON).
    Status,
    /// Re-seal every stored secret under the key in --new-key-file while
    /// the host serves (run with --master-key-file naming the current key).
    /// Running processes pick the new key up from the state. Interrupted,
    /// run it again: it goes on where it stopped.
    Rotate {
        #[arg(long)]
        new_key_file: PathBuf,
    },
    /// Remove a retired master key (one that protects no value and is not
    /// the newest) with the copy of the new key sealed under it; restart
    /// every process with the new key file first.
    Forget { key_id: String },
}

fn key_error(e: secrets_at_rest::KeyError) -> CliError {
    CliError::Usage(e.to_string())
}

/// `generate-key` needs no state.
pub(crate) fn generate_key(file: &Path) -> Result<ExitCode, CliError> {
    let key = MasterKey::create_file(file).map_err(key_error)?;
    eprintln!("{}", wording::key_written(file));
    println!("{}", key.id());
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn run(host: &Host, command: SecretsCommand) -> Result<ExitCode, CliError> {
    match command {
        SecretsCommand::GenerateKey { file } => return generate_key(&file),
        SecretsCommand::Status => print_json(&serde_json::json!(host.secrets_status()?)),
        SecretsCommand::Rotate { new_key_file } => {
            let new = MasterKey::read_file(&new_key_file).map_err(key_error)?;
            let id = new.id().to_string();
            let resealed = host.rotate_secrets(new)?;
            eprintln!("{}", wording::rotation_done(resealed, &id));
        }
        SecretsCommand::Forget { key_id } => {
            host.forget_master_key(&key_id)?;
            eprintln!("{}", wording::forgotten(&key_id));
        }
    }
    Ok(ExitCode::SUCCESS)
}

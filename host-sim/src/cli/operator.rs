//! The operator's project commands: grants, bindings, project settings
//! and tokens.

use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use host_sim::Secret;

use crate::CliError;

#[derive(Args)]
pub(crate) struct GrantArgs {
    #[arg(long)]
    pub(crate) extension: String,
    #[arg(long)]
    pub(crate) project: String,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum AuthArg {
    /// `Authorization: Bearer <secret>`
    Bearer,
    /// `x-umami-api-key: <secret>`
    XUmamiApiKey,
}

#[derive(Subcommand)]
pub(crate) enum BindingCommand {
    /// Set a project's binding; the secret is read from stdin (first line) unless --secret-env/--secret-file.
    Set {
        #[arg(long)]
        project: String,
        /// Binding name as the manifest declares it, e.g. `provider`.
        #[arg(long)]
        name: String,
        /// Public origin, e.g. `https://analytics.example.net`.
        #[arg(long)]
        origin: String,
        #[arg(long, value_enum, default_value = "bearer")]
        auth: AuthArg,
        /// Read the secret from this environment variable.
        #[arg(long, conflicts_with = "secret_file")]
        secret_env: Option<String>,
        /// Read the secret from this file (first line).
        #[arg(long)]
        secret_file: Option<PathBuf>,
        /// Timeout of one call, in milliseconds.
        #[arg(long, default_value_t = 5000)]
        timeout_ms: u64,
    },
    /// Show bindings (origin, auth style, timeout; never the secret).
    Show {
        #[arg(long)]
        project: Option<String>,
    },
}

#[derive(Subcommand)]
pub(crate) enum ProjectCommand {
    /// Set a project's public settings.
    Set {
        project: String,
        /// Origin that serves the tracking script for this project.
        #[arg(long, conflicts_with = "clear_tracking_origin")]
        tracking_origin: Option<String>,
        #[arg(long)]
        clear_tracking_origin: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum TokenCommand {
    /// Issue a token for a user with access to projects; printed once.
    Issue {
        #[arg(long)]
        user: String,
        #[arg(long = "project", required = true)]
        projects: Vec<String>,
        /// Lifetime, e.g. `3600s`, `90m`, `24h`, `7d`.
        #[arg(long, default_value = "24h", value_parser = parse_ttl)]
        ttl: Duration,
    },
}

pub(crate) fn parse_ttl(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not like 90m, 24h or 7d"))?;
    let seconds = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        _ => return Err(format!("`{text}`: the unit is one of s, m, h, d")),
    };
    if seconds == 0 {
        return Err("the lifetime must be positive".into());
    }
    Ok(Duration::from_secs(seconds))
}

pub(crate) fn read_secret(
    env: Option<&str>,
    file: Option<&std::path::Path>,
) -> Result<Secret, CliError> {
    let raw = if let Some(var) = env {
        std::env::var(var)
            .map_err(|_| CliError::Usage(format!("environment variable {var} is not set")))?
    } else if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", path.display())))?;
        text.lines().next().unwrap_or_default().to_string()
    } else {
        let stdin = std::io::stdin();
        if stdin.is_terminal() {
            eprint!("secret for the binding (one line): ");
        }
        let mut line = String::new();
        stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| CliError::Usage(format!("cannot read the secret from stdin: {e}")))?;
        line
    };
    let secret = raw.trim_end_matches(['\r', '\n']).to_string();
    if secret.is_empty() {
        return Err(CliError::Usage("the secret is empty".into()));
    }
    Ok(Secret::new(secret))
}

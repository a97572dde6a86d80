//! `host-sim`: the operator CLI of the extension host.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use host_sim::{AuthStyle, Caller, Host, HostConfig, HostError, InstallError, InvokeRequest};
use serde_json::{Value, json};

mod cli;

use cli::operator::{
    AuthArg, BindingCommand, GrantArgs, ProjectCommand, TokenCommand, parse_ttl, read_secret,
};
use cli::release::{PublisherCommand, ReleaseCommand, keygen, sign};
use cli::secrets::SecretsCommand;
use cli::serve::{DevArgs, dev, serve};
use cli::tracking::TrackingCommand;

/// Exit codes (also listed in `--help`).
mod exit {
    pub const FAILED: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const REFUSED: u8 = 3;
    pub const STALE: u8 = 4;
    pub const INVALID_INPUT: u8 = 5;
    pub const LIMIT: u8 = 6;
    pub const DNS_NOT_VERIFIED: u8 = 7;
    pub const DNS_RETRY: u8 = 8;
    pub const TLS_TIMEOUT: u8 = 9;
    pub const CERTIFICATE_WARNING: u8 = 10;
    pub const SCHEMA_TOO_NEW: u8 = db_lifecycle::EXIT_SCHEMA_TOO_NEW;
}

const EXIT_CODES: &str = "Exit codes:
  0  success
  1  the operation failed (state, I/O, internal error, extension error)
  2  usage error (bad arguments or values; `backup` to a file that exists)
  3  refused: release verification failed, or an invocation was
     unauthenticated / forbidden, or a tracking-domain step refused
     (hostname rules, bound elsewhere, steps out of order)
  4  stale runtime generation (invoke)
  5  invalid input (invoke)
  6  a sandbox limit stopped the invocation (invoke)
  7  a DNS record is missing or wrong (tracking-domain verify)
  8  a DNS lookup failed, retry later (tracking-domain verify)
  9  no valid certificate before the timeout (tracking-domain wait-tls)
  10 a tracking hostname's certificate expires soon or cannot be checked (tracking-domain check)
  11 the state's schema is newer than this binary (a newer release migrated
     it): run that release, or restore the backup taken before the upgrade";

#[derive(Parser)]
#[command(
    name = "host-sim",
    version,
    about = "Operate the extension host: verified releases, approvals, grants, bindings, project settings, tokens, and invocations.",
    after_help = EXIT_CODES
)]
struct Cli {
    /// Directory of the operator state (database, trusted publisher keys).
    #[arg(
        long,
        global = true,
        env = "HOST_SIM_STATE_DIR",
        default_value = ".host-sim"
    )]
    state_dir: PathBuf,
    /// SQLite database file [default: <state-dir>/host-sim.sqlite3].
    #[arg(long, global = true, env = "HOST_SIM_DB")]
    db: Option<PathBuf>,
    /// Directory of trusted publisher keys, `*.pub` [default: <state-dir>/trusted-publishers].
    #[arg(long, global = true, env = "HOST_SIM_TRUST_DIR")]
    trust_dir: Option<PathBuf>,
    /// File holding the master key (64 hex digits) that seals the stored
    /// secrets [default: <state-dir>/master.key, made on the first open].
    #[arg(long, global = true, env = "HOST_SIM_MASTER_KEY_FILE")]
    master_key_file: Option<PathBuf>,
    /// Log filter for the host log on stderr (e.g. `info`, `host_sim=debug`)
    /// [default: `warn`; for `dev`, `warn,host_sim::guest=debug`: the
    /// extension's own log lines are shown while developing].
    #[arg(long, global = true, env = "HOST_SIM_LOG")]
    log: Option<String>,
    /// Host log lines: `text` for people, `json` (one object a line, with
    /// the request's fields) for log collectors.
    #[arg(
        long,
        global = true,
        env = "HOST_SIM_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Sign, verify, install, upgrade, list and uninstall releases.
    #[command(subcommand)]
    Release(ReleaseCommand),
    /// A publisher's signing keys.
    #[command(subcommand)]
    Publisher(PublisherCommand),
    /// Approve capabilities of the installed release (all declared ones if none given).
    Approve {
        extension: String,
        /// Capability ids, e.g. `http:provider`, `documents`.
        capabilities: Vec<String>,
        /// Withdraw the approval instead.
        #[arg(long)]
        withdraw: bool,
    },
    /// Grant an installed extension to a project.
    Grant(GrantArgs),
    /// Revoke an extension's grant to a project (in-flight host calls are refused).
    Revoke(GrantArgs),
    /// Set or show a project's bindings (`show` never prints the secret).
    #[command(subcommand)]
    Binding(BindingCommand),
    /// Project settings.
    #[command(subcommand)]
    Project(ProjectCommand),
    /// Issue tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Run an action as a caller (for plugin developers); prints the JSON output or the error JSON.
    Invoke {
        #[arg(long, env = "HOST_SIM_TOKEN", hide_env_values = true)]
        token: String,
        #[arg(long)]
        project: String,
        #[arg(long)]
        action: String,
        /// The extension [default: the one installed extension with this action].
        #[arg(long)]
        extension: Option<String>,
        /// JSON input of the action.
        #[arg(long, default_value = "{}")]
        input: String,
        /// The runtime generation the caller last saw.
        #[arg(long)]
        generation: Option<u64>,
    },
    /// Run an unsigned build for development: a throwaway development state
    /// (removed at exit), the build approved and granted to a dev project, a
    /// token (printed), the API, MCP server and console as `serve` runs them,
    /// and a new runtime generation whenever the manifest or component
    /// changes (in-flight calls finish on the old one).
    Dev(DevArgs),
    /// Connect a project's own tracking hostname: add, verify, status,
    /// remove (each step refuses to run before the previous one holds).
    #[command(subcommand)]
    TrackingDomain(TrackingCommand),
    /// The master key that seals the stored secrets (the bindings' provider
    /// secrets, the tracking challenge key): generate-key, status, rotate,
    /// forget.
    #[command(subcommand)]
    Secrets(SecretsCommand),
    /// Copy the live state database to a new file while the host serves
    /// (SQLite's online backup: one consistent snapshot, checked). Restore:
    /// stop the host, put the copy in place of the database (or pass --db
    /// naming it) with the master key it was written with.
    Backup {
        /// The file to write; it must not exist.
        #[arg(long)]
        to: PathBuf,
    },
    /// Serve the extension API, the MCP server and the console over HTTP until Ctrl-C.
    Serve {
        /// Address to listen on (port 0 picks a free port; the first line on stdout names it).
        #[arg(long, env = "HOST_SIM_LISTEN", default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// Lifetime of the project-scoped tokens the console hands to panels, e.g. `10m`.
        #[arg(long, default_value = "10m", value_parser = parse_ttl)]
        panel_session_ttl: Duration,
        /// A proxy in front of `serve` whose X-Forwarded-For the tracking
        /// ingress believes (an IP address; repeatable or comma-separated).
        /// Without it the visitor is the connection's address.
        #[arg(long = "trusted-proxy", value_delimiter = ',')]
        trusted_proxies: Vec<std::net::IpAddr>,
        /// Address of the operator listener serving Prometheus metrics at
        /// `/metrics` (keep it off the public network); unset: no metrics
        /// are recorded.
        #[arg(long, env = "HOST_SIM_METRICS_LISTEN")]
        metrics_listen: Option<std::net::SocketAddr>,
        #[command(flatten)]
        oauth: cli::serve::OAuthArgs,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_log = match cli.command {
        Command::Dev(_) => "warn,host_sim::guest=debug",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_new(cli.log.as_deref().unwrap_or(default_log))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs
            .json()
            .with_current_span(false)
            .with_span_list(true)
            .init(),
    }
    let Cli {
        state_dir,
        db,
        trust_dir,
        master_key_file,
        command,
        ..
    } = cli;
    match command {
        // A publisher's commands need no host state.
        Command::Publisher(PublisherCommand::Keygen { out, comment }) => {
            finish(keygen(&out, &comment))
        }
        Command::Release(ReleaseCommand::Sign { dir, key }) => finish(sign(&dir, &key)),
        Command::Secrets(SecretsCommand::GenerateKey { file }) => {
            finish(cli::secrets::generate_key(&file))
        }
        // Its own throwaway state.
        Command::Dev(args) => finish(dev(args)),
        command => {
            let mut config = HostConfig::new(&state_dir);
            config.db_path = db;
            // Reads the database only: the host is not opened.
            if let Command::Backup { to } = &command {
                return cli::backup::run(&config.db_path(), to);
            }
            config.trust_dir = trust_dir;
            if let Some(file) = master_key_file {
                config.master_key = host_sim::state::MasterKeySource::File(file);
            }
            run_on_host(config, command)
        }
    }
}

fn run_on_host(config: HostConfig, command: Command) -> ExitCode {
    let state_dir = config.state_dir.clone();
    let host = match Host::open(config) {
        Ok(host) => host,
        Err(e) => {
            eprintln!(
                "error: cannot open the host state in {}: {e}",
                state_dir.display()
            );
            return ExitCode::from(match e {
                HostError::State(host_sim::state::StateError::SchemaTooNew(_)) => {
                    exit::SCHEMA_TOO_NEW
                }
                _ => exit::FAILED,
            });
        }
    };
    finish(run(&std::sync::Arc::new(host), command))
}

/// The exit code of a command's result; prints the error.
fn finish(result: Result<ExitCode, CliError>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(match &e {
                CliError::Host(HostError::Install(
                    InstallError::Verify(_)
                    | InstallError::UntrustedKey { .. }
                    | InstallError::Component(_)
                    | InstallError::Manifest(_)
                    | InstallError::Runtime(_)
                    | InstallError::Development(_),
                )) => exit::REFUSED,
                CliError::Host(HostError::Tracking(host_sim::TrackingError::Resolver(_))) => {
                    exit::FAILED
                }
                CliError::Host(HostError::Tracking(
                    host_sim::TrackingError::NotConfirmed
                    | host_sim::TrackingError::MalformedPlanId(_),
                )) => exit::USAGE,
                CliError::Host(HostError::Tracking(host_sim::TrackingError::TlsTimeout(_))) => {
                    exit::TLS_TIMEOUT
                }
                CliError::Host(HostError::Tracking(host_sim::TrackingError::TlsSetup(_))) => {
                    exit::USAGE
                }
                CliError::Host(
                    HostError::Tracking(_)
                    | HostError::State(host_sim::state::StateError::Tracking(_)),
                ) => exit::REFUSED,
                CliError::Host(HostError::Invalid(_)) | CliError::Usage(_) => exit::USAGE,
                CliError::Host(_) | CliError::Signing(_) => exit::FAILED,
            })
        }
    }
}

/// Why a command failed: the host refused or failed, or the command line
/// itself was unusable.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("{0}")]
    Usage(String),
    #[error("cannot sign the release: {0}")]
    Signing(String),
}

impl From<InstallError> for CliError {
    fn from(error: InstallError) -> Self {
        CliError::Host(HostError::Install(error))
    }
}

fn print_json(value: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

fn progress(step: &str) {
    eprintln!("… {step}");
}

fn run(host: &std::sync::Arc<Host>, command: Command) -> Result<ExitCode, CliError> {
    match command {
        Command::TrackingDomain(command) => return cli::tracking::run(host, command),
        Command::Secrets(command) => return cli::secrets::run(host, command),
        Command::Serve {
            listen,
            panel_session_ttl,
            trusted_proxies,
            metrics_listen,
            oauth,
        } => {
            let banner = |base: &str| {
                eprintln!("host-sim serving on {base}");
                eprintln!("  console:  {base}/console");
                eprintln!("  API:      {base}/v1/plugins/<extension>/projects/<project>/api/");
                eprintln!("  MCP:      {base}/mcp");
                eprintln!("Press Ctrl-C to stop.");
            };
            let options = host_sim::serve::ServeOptions {
                panel_session_ttl,
                trusted_proxies,
                oauth: oauth.options(),
                ..Default::default()
            };
            return Ok(serve(
                host.clone(),
                listen,
                metrics_listen,
                options,
                &banner,
            ));
        }
        Command::Publisher(_)
        | Command::Dev(_)
        | Command::Backup { .. }
        | Command::Release(ReleaseCommand::Sign { .. }) => {
            unreachable!("answered before the host state is opened")
        }
        Command::Release(ReleaseCommand::Verify { dir }) => {
            let summary = host.verify_release(&dir, &mut progress)?;
            eprintln!(
                "✓ {} {} verifies (key {})",
                summary.extension_id, summary.version, summary.key_id
            );
            print_json(&json!(summary));
        }
        Command::Release(ReleaseCommand::Install { dir }) => {
            let summary = host.install_release(&dir, &mut progress)?;
            eprintln!(
                "✓ installed {} {}; approve its capabilities with `host-sim approve {}`",
                summary.extension_id, summary.version, summary.extension_id
            );
            print_json(&json!(summary));
        }
        Command::Release(ReleaseCommand::Upgrade { dir }) => {
            let summary = host.upgrade_release(&dir, &mut progress)?;
            eprintln!(
                "✓ upgraded {} to {}; approve its capabilities again with `host-sim approve {}`",
                summary.extension_id, summary.version, summary.extension_id
            );
            print_json(&json!(summary));
        }
        Command::Release(ReleaseCommand::List) => {
            print_json(&json!(host.releases()?));
        }
        Command::Release(ReleaseCommand::Uninstall { extension }) => {
            let removed = host.uninstall(&extension)?;
            eprintln!("✓ uninstalled {} {}", removed.extension_id, removed.version);
        }
        Command::Approve {
            extension,
            capabilities,
            withdraw,
        } => {
            let approved = if withdraw {
                host.unapprove(&extension, &capabilities)?
            } else {
                host.approve(&extension, &capabilities)?
            };
            print_json(&json!({ "extension": extension, "approved": approved }));
        }
        Command::Grant(GrantArgs { extension, project }) => {
            let generation = host.grant(&extension, &project)?;
            print_json(
                &json!({ "extension": extension, "project": project, "granted": true, "generation": generation }),
            );
        }
        Command::Revoke(GrantArgs { extension, project }) => {
            let existed = host.revoke(&extension, &project)?;
            if !existed {
                eprintln!("note: {extension} was not granted to {project}");
            }
            print_json(&json!({ "extension": extension, "project": project, "granted": false }));
        }
        Command::Binding(BindingCommand::Set {
            project,
            name,
            origin,
            auth,
            secret_env,
            secret_file,
            timeout_ms,
        }) => {
            let secret = read_secret(secret_env.as_deref(), secret_file.as_deref())?;
            let auth = match auth {
                AuthArg::Bearer => AuthStyle::Bearer,
                AuthArg::XUmamiApiKey => AuthStyle::UmamiApiKey,
            };
            let info = host.set_binding(
                &project,
                &name,
                &origin,
                secret,
                auth,
                Duration::from_millis(timeout_ms),
            )?;
            print_json(&json!(info));
        }
        Command::Binding(BindingCommand::Show { project }) => {
            print_json(&json!(host.bindings(project.as_deref())?));
        }
        Command::Project(ProjectCommand::Set {
            project,
            tracking_origin,
            clear_tracking_origin,
        }) => {
            if tracking_origin.is_none() && !clear_tracking_origin {
                return Err(CliError::Usage(
                    "nothing to set: use --tracking-origin URL or --clear-tracking-origin".into(),
                ));
            }
            let settings = host.set_tracking_origin(&project, tracking_origin.as_deref())?;
            print_json(&json!({ "project": project, "settings": settings }));
        }
        Command::Token(TokenCommand::Issue {
            user,
            projects,
            ttl,
        }) => {
            let issued = host.issue_token(&user, &projects, ttl)?;
            eprintln!("the token is shown once; the host keeps only its hash");
            print_json(&json!({
                "token": issued.token,
                "user": issued.user,
                "projects": issued.projects,
                "expires_at": issued.expires_at,
            }));
        }
        Command::Invoke {
            token,
            project,
            action,
            extension,
            input,
            generation,
        } => {
            let input: Value = serde_json::from_str(&input)
                .map_err(|e| CliError::Usage(format!("--input is not JSON: {e}")))?;
            let extension = match extension {
                Some(extension) => extension,
                None => host.extension_for_action(&action)?.ok_or_else(|| {
                    CliError::Usage(format!(
                        "no single installed extension has action {action}; pass --extension"
                    ))
                })?,
            };
            let invocation = host.invoke(
                &Caller::bearer(token),
                &InvokeRequest {
                    extension,
                    project,
                    action,
                    input,
                    generation,
                },
            );
            print_json(&invocation.to_json());
            return Ok(match &invocation.result {
                Ok(_) => ExitCode::SUCCESS,
                Err(error) => ExitCode::from(match error.code() {
                    "unauthenticated" | "forbidden" => exit::REFUSED,
                    "stale_generation" => exit::STALE,
                    "invalid_input" => exit::INVALID_INPUT,
                    "limit_exceeded" => exit::LIMIT,
                    _ => exit::FAILED,
                }),
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

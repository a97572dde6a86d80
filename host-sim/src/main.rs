//! `host-sim`: the operator CLI of the extension host.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use extension_release::PublisherKey;
use host_sim::{
    AuthStyle, Caller, Host, HostConfig, HostError, InstallError, InvokeRequest, Secret,
};
use serde_json::{Value, json};

/// Exit codes (also listed in `--help`).
mod exit {
    pub const FAILED: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const REFUSED: u8 = 3;
    pub const STALE: u8 = 4;
    pub const INVALID_INPUT: u8 = 5;
    pub const LIMIT: u8 = 6;
}

const EXIT_CODES: &str = "Exit codes:
  0  success
  1  the operation failed (state, I/O, internal error, extension error)
  2  usage error (bad arguments or values)
  3  refused: release verification failed, or an invocation was
     unauthenticated / forbidden
  4  stale runtime generation (invoke)
  5  invalid input (invoke)
  6  a sandbox limit stopped the invocation (invoke)";

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
    /// Log filter for the host log on stderr (e.g. `info`, `host_sim=debug`).
    #[arg(long, global = true, env = "HOST_SIM_LOG", default_value = "warn")]
    log: String,
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
    /// Serve the extension API, the MCP server and the console over HTTP until Ctrl-C.
    Serve {
        /// Address to listen on (port 0 picks a free port; the first line on stdout names it).
        #[arg(long, env = "HOST_SIM_LISTEN", default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// Lifetime of the project-scoped tokens the console hands to panels, e.g. `10m`.
        #[arg(long, default_value = "10m", value_parser = parse_ttl)]
        panel_session_ttl: Duration,
    },
}

#[derive(Subcommand)]
enum ReleaseCommand {
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

#[derive(Args)]
struct DevArgs {
    /// The extension's manifest.toml, as written (no signature needed).
    #[arg(long)]
    manifest: PathBuf,
    /// The built component, e.g. target/wasm32-wasip1/release/NAME.wasm.
    #[arg(long)]
    component: PathBuf,
    /// A binding of the dev project, repeatable:
    /// NAME=ORIGIN[,secret-file=F][,auth=bearer|x-umami-api-key][,timeout-ms=N].
    /// Without secret-file the host sends a random placeholder secret.
    #[arg(long = "binding", value_parser = parse_dev_binding)]
    bindings: Vec<DevBinding>,
    /// The project the build is granted to.
    #[arg(long, default_value = "dev")]
    project: String,
    /// Address to listen on (port 0 picks a free port; the first line on stdout names it).
    #[arg(long, env = "HOST_SIM_LISTEN", default_value = "127.0.0.1:8080")]
    listen: std::net::SocketAddr,
    /// How often to look for a new build, in milliseconds.
    #[arg(long, default_value_t = 250)]
    poll_ms: u64,
}

#[derive(Debug, Clone)]
struct DevBinding {
    name: String,
    origin: String,
    secret_file: Option<PathBuf>,
    auth: AuthStyle,
    timeout: Duration,
}

fn parse_dev_binding(text: &str) -> Result<DevBinding, String> {
    let mut parts = text.split(',');
    let first = parts.next().unwrap_or_default();
    let (name, origin) = first
        .split_once('=')
        .filter(|(name, origin)| !name.is_empty() && !origin.is_empty())
        .ok_or_else(|| format!("`{first}` is not NAME=ORIGIN"))?;
    let mut binding = DevBinding {
        name: name.to_owned(),
        origin: origin.to_owned(),
        secret_file: None,
        auth: AuthStyle::Bearer,
        timeout: Duration::from_secs(5),
    };
    for option in parts {
        match option.split_once('=') {
            Some(("secret-file", path)) if !path.is_empty() => {
                binding.secret_file = Some(PathBuf::from(path));
            }
            Some(("auth", "bearer")) => binding.auth = AuthStyle::Bearer,
            Some(("auth", "x-umami-api-key")) => binding.auth = AuthStyle::UmamiApiKey,
            Some(("timeout-ms", ms)) => {
                let ms: u64 = ms
                    .parse()
                    .map_err(|_| format!("timeout-ms=`{ms}` is not a number of milliseconds"))?;
                binding.timeout = Duration::from_millis(ms);
            }
            _ => {
                return Err(format!(
                    "`{option}` is not one of secret-file=F, auth=bearer|x-umami-api-key, timeout-ms=N"
                ));
            }
        }
    }
    Ok(binding)
}

#[derive(Subcommand)]
enum PublisherCommand {
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

#[derive(Args)]
struct GrantArgs {
    #[arg(long)]
    extension: String,
    #[arg(long)]
    project: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum AuthArg {
    /// `Authorization: Bearer <secret>`
    Bearer,
    /// `x-umami-api-key: <secret>`
    XUmamiApiKey,
}

#[derive(Subcommand)]
enum BindingCommand {
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
enum ProjectCommand {
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
enum TokenCommand {
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

fn parse_ttl(text: &str) -> Result<Duration, String> {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let Cli {
        state_dir,
        db,
        trust_dir,
        command,
        ..
    } = cli;
    match command {
        // A publisher's commands need no host state.
        Command::Publisher(PublisherCommand::Keygen { out, comment }) => {
            finish(keygen(&out, &comment))
        }
        Command::Release(ReleaseCommand::Sign { dir, key }) => finish(sign(&dir, &key)),
        // Its own throwaway state.
        Command::Dev(args) => finish(dev(args)),
        command => {
            let mut config = HostConfig::new(&state_dir);
            config.db_path = db;
            config.trust_dir = trust_dir;
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
            return ExitCode::from(exit::FAILED);
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
                    | InstallError::Component(_)
                    | InstallError::Manifest(_)
                    | InstallError::Runtime(_)
                    | InstallError::Development(_),
                )) => exit::REFUSED,
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

/// `publisher keygen`: a new key at `out`, its public key at `out.pub`.
fn keygen(out: &std::path::Path, comment: &str) -> Result<ExitCode, CliError> {
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
fn sign(dir: &std::path::Path, key: &std::path::Path) -> Result<ExitCode, CliError> {
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

/// `dev`: the build in a throwaway development state, served until Ctrl-C,
/// reloaded when it changes.
fn dev(args: DevArgs) -> Result<ExitCode, CliError> {
    let secrets = args
        .bindings
        .iter()
        .map(|binding| match &binding.secret_file {
            Some(path) => read_secret(None, Some(path.as_path())).map_err(|e| match e {
                CliError::Usage(message) => {
                    CliError::Usage(format!("--binding {}: {message}", binding.name))
                }
                other => other,
            }),
            None => Ok(Secret::new(format!(
                "dev-placeholder-{}",
                uuid::Uuid::new_v4().simple()
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let scratch = tempfile::Builder::new()
        .prefix("host-sim-dev-")
        .tempdir()
        .map_err(|e| CliError::Usage(format!("cannot create the development state: {e}")))?;
    let host = std::sync::Arc::new(
        Host::open(HostConfig::development(scratch.path().join("state")))
            .map_err(CliError::Host)?,
    );
    let build = host_sim::dev::DevBuild {
        manifest: args.manifest.clone(),
        component: args.component.clone(),
    };
    let installed = build.install(&host).map_err(|e| match e {
        host_sim::dev::DevError::Install(e) => CliError::Host(HostError::Install(e)),
        read => CliError::Usage(read.to_string()),
    })?;
    let extension = installed.extension_id.clone();
    host.grant(&extension, &args.project)?;
    for (binding, secret) in args.bindings.iter().zip(secrets) {
        host.set_binding(
            &args.project,
            &binding.name,
            &binding.origin,
            secret,
            binding.auth,
            binding.timeout,
        )?;
    }
    let token = host
        .issue_token(
            "developer",
            std::slice::from_ref(&args.project),
            Duration::from_secs(7 * 86400),
        )?
        .token;
    let generation = host.generation(&extension, &args.project)?;
    eprintln!(
        "✓ running {extension} {} (development build, unsigned) in {}, generation {generation}",
        installed.version,
        scratch.path().display()
    );
    let watched = host.clone();
    let project = args.project.clone();
    let watcher = host_sim::dev::watch(
        host.clone(),
        build,
        Duration::from_millis(args.poll_ms.max(10)),
        move |reload| match reload {
            host_sim::dev::Reload::Installed(summary) => {
                let generation = watched
                    .generation(&summary.extension_id, &project)
                    .unwrap_or_default();
                println!("reloaded generation {generation}");
                let _ = std::io::stdout().flush();
                eprintln!(
                    "✓ reloaded {} {}: generation {generation}",
                    summary.extension_id, summary.version
                );
            }
            host_sim::dev::Reload::Failed(error) => {
                println!("reload failed");
                let _ = std::io::stdout().flush();
                eprintln!("✗ the new build was refused, the previous one keeps running: {error}");
            }
        },
    );
    let banner = |base: &str| {
        println!("token {token}");
        println!("project {}", args.project);
        println!("extension {extension}");
        let _ = std::io::stdout().flush();
        eprintln!(
            "host-sim dev serving {extension} on {base} (development state: unsigned builds, thrown away at exit)"
        );
        eprintln!(
            "  token:    {token}   (project {}, valid 7 days)",
            args.project
        );
        eprintln!("  console:  {base}/console");
        eprintln!(
            "  API:      {base}/v1/plugins/{extension}/projects/{}/api/",
            args.project
        );
        eprintln!("  MCP:      {base}/mcp");
        eprintln!(
            "Rebuild the component (or edit the manifest) to reload; Ctrl-C stops and removes the state."
        );
    };
    let code = serve(host, args.listen, Duration::from_secs(600), &banner);
    drop(watcher);
    drop(scratch);
    Ok(code)
}

/// Runs the HTTP surfaces until Ctrl-C or SIGTERM; in-flight requests
/// finish. `banner` tells the user where, after the `listening` line.
fn serve(
    host: std::sync::Arc<Host>,
    listen: std::net::SocketAddr,
    panel_session_ttl: Duration,
    banner: &dyn Fn(&str),
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILED);
        }
    };
    let options = host_sim::serve::ServeOptions {
        panel_session_ttl,
        ..Default::default()
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("error: cannot listen on {listen}: {e} (is another server using it? pick another with --listen)");
                return ExitCode::from(exit::FAILED);
            }
        };
        let address = listener.local_addr().unwrap_or(listen);
        let base = format!("http://{address}");
        println!("listening {base}");
        let _ = std::io::stdout().flush();
        banner(&base);
        let router = host_sim::serve::router(host, options);
        match host_sim::serve::run(listener, router, shutdown_signal()).await {
            Ok(()) => {
                eprintln!("host-sim stopped");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: the server failed: {e}");
                ExitCode::from(exit::FAILED)
            }
        }
    })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
    eprintln!("stopping: finishing in-flight requests…");
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
        Command::Serve {
            listen,
            panel_session_ttl,
        } => {
            let banner = |base: &str| {
                eprintln!("host-sim serving on {base}");
                eprintln!("  console:  {base}/console");
                eprintln!("  API:      {base}/v1/plugins/<extension>/projects/<project>/api/");
                eprintln!("  MCP:      {base}/mcp");
                eprintln!("Press Ctrl-C to stop.");
            };
            return Ok(serve(host.clone(), listen, panel_session_ttl, &banner));
        }
        Command::Publisher(_) | Command::Dev(_) | Command::Release(ReleaseCommand::Sign { .. }) => {
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

fn read_secret(env: Option<&str>, file: Option<&std::path::Path>) -> Result<Secret, CliError> {
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

//! `serve` and `dev`: the HTTP surfaces until Ctrl-C, on the operator's
//! state or on a throwaway development state.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use host_sim::{AuthStyle, Host, HostConfig, HostError, Secret};

use crate::cli::operator::{parse_ttl, read_secret};
use crate::{CliError, exit};

#[derive(Args)]
pub(crate) struct DevArgs {
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

/// How `serve` runs the MCP server's OAuth authorization server.
#[derive(Args)]
pub(crate) struct OAuthArgs {
    /// The server's public base URL (e.g. https://host.example): the
    /// OAuth issuer, and `<URL>/mcp` the resource its tokens are bound to.
    /// Unset: http://<Host header> of each request, allowed only when
    /// listening on loopback (development).
    #[arg(long, env = "HOST_SIM_PUBLIC_URL", value_parser = parse_public_url)]
    public_url: Option<String>,
    /// Lifetime of an OAuth access token, e.g. `15m`.
    #[arg(long, default_value = "15m", value_parser = parse_ttl)]
    oauth_access_token_ttl: Duration,
    /// Lifetime of an OAuth refresh token (each use rotates it), e.g. `30d`.
    #[arg(long, default_value = "30d", value_parser = parse_ttl)]
    oauth_refresh_token_ttl: Duration,
    /// Switch off Dynamic Client Registration (`/oauth/register`).
    #[arg(long)]
    no_dynamic_client_registration: bool,
    /// Switch off clients identified by a Client ID Metadata Document URL.
    #[arg(long)]
    no_client_metadata_documents: bool,
    /// Fetch client metadata documents from loopback and private addresses
    /// (and over plain http to loopback): for development only.
    #[arg(long)]
    allow_private_client_metadata: bool,
}

fn parse_public_url(text: &str) -> Result<String, String> {
    let url =
        url::Url::parse(text).map_err(|e| format!("`{text}` is not an absolute URL ({e})"))?;
    if !matches!(url.scheme(), "https" | "http")
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return Err(format!(
            "`{text}` must be an http(s) base URL without query or fragment"
        ));
    }
    Ok(text.trim_end_matches('/').to_string())
}

impl OAuthArgs {
    pub(crate) fn options(&self) -> host_sim::serve::OAuthOptions {
        let mut options = host_sim::serve::OAuthOptions {
            public_url: self.public_url.clone(),
            dynamic_registration: !self.no_dynamic_client_registration,
            client_metadata_documents: !self.no_client_metadata_documents,
            ..Default::default()
        };
        options.lifetimes.access_token = self.oauth_access_token_ttl;
        options.lifetimes.refresh_token = self.oauth_refresh_token_ttl;
        options.metadata_fetch.allow_private_addresses = self.allow_private_client_metadata;
        options
    }
}

/// `dev`: the build in a throwaway development state, served until Ctrl-C,
/// reloaded when it changes.
pub(crate) fn dev(args: DevArgs) -> Result<ExitCode, CliError> {
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
    let mut config = HostConfig::development(scratch.path().join("state"));
    // A restart on the same build loads the component, not compiles it.
    config.compile_cache = host_sim::testing::default_compile_cache();
    let host = std::sync::Arc::new(Host::open(config).map_err(CliError::Host)?);
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
    let options = host_sim::serve::ServeOptions {
        panel_session_ttl: Duration::from_secs(600),
        ..Default::default()
    };
    let code = serve(host, args.listen, None, options, &banner);
    drop(watcher);
    drop(scratch);
    Ok(code)
}

/// Runs the HTTP surfaces until Ctrl-C or SIGTERM; in-flight requests
/// finish. `banner` tells the user where, after the `listening` line.
pub(crate) fn serve(
    host: std::sync::Arc<Host>,
    listen: std::net::SocketAddr,
    metrics_listen: Option<std::net::SocketAddr>,
    options: host_sim::serve::ServeOptions,
    banner: &dyn Fn(&str),
) -> ExitCode {
    if !listen.ip().is_loopback() && options.oauth.public_url.is_none() {
        eprintln!(
            "error: --listen {listen} is reachable from other machines, but no --public-url is set: \
             the OAuth issuer and the audience of its tokens would be taken from each request's \
             Host header, which a client chooses. Pass the address people use, e.g. \
             --public-url https://host.example (or HOST_SIM_PUBLIC_URL), or listen on loopback"
        );
        return ExitCode::from(exit::USAGE);
    }
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
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("error: cannot listen on {listen}: {e} (is another server using it? pick another with --listen)");
                return ExitCode::from(exit::FAILED);
            }
        };
        if let Some(metrics_listen) = metrics_listen {
            match tokio::net::TcpListener::bind(metrics_listen).await {
                Ok(listener) => {
                    let address = listener.local_addr().unwrap_or(metrics_listen);
                    eprintln!("metrics on http://{address}/metrics");
                    host_sim::serve::metrics::spawn(listener, host.clone());
                }
                Err(e) => {
                    eprintln!("error: cannot listen on {metrics_listen} for metrics: {e} (pick another with --metrics-listen)");
                    return ExitCode::from(exit::FAILED);
                }
            }
        }
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

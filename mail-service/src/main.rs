//! `mail-service`: the server and the operator commands.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use mail_service::config::{ServeArgs, StorageArgs};
use mail_service::feedback::listener::FeedbackListener;
use mail_service::model::{Permission, ReportOutcome};
use mail_service::service::FeedbackSource;
use mail_service::service::{DEFAULT_RATE_LIMIT, MailService, Settings};
use mail_service::smtp_sink::{SinkMode, SmtpSink};
use mail_service::store::Store;
use mail_service::transport::Transport;

const EXIT_CODES: &str = "Exit codes:
  0  success
  1  the command failed (storage, I/O, a refused master key, ...)
  2  usage error: bad arguments; `backup` on PostgreSQL (use pg_dump) or
     to a file that exists
  11 the database's schema is newer than this binary (a newer release
     migrated it): run that release, or restore the backup taken before
     the upgrade";

#[derive(Parser)]
#[command(
    name = "mail-service",
    version,
    about = "Transactional mail HTTP API",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(flatten)]
    storage: StorageArgs,
    /// Log lines on stderr: `text` for people, `json` (one object a line,
    /// with the request's span fields) for log collectors.
    #[arg(
        long,
        env = "MAIL_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP API.
    Serve(Box<ServeArgs>),
    /// Manage tenants (accounts).
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// Manage API keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Settle an email whose handoff outcome is unknown, after checking the
    /// provider's logs for its Message-ID. Its idempotency key is released:
    /// from then on it replays the original answer.
    Reconcile {
        email_id: i64,
        #[arg(long, value_enum)]
        outcome: ReconcileOutcome,
    },
    /// Manage sending domains.
    #[command(subcommand)]
    Domain(DomainCommand),
    /// Feedback mail (bounces, delays, deliveries, complaints).
    #[command(subcommand)]
    Feedback(FeedbackCommand),
    /// The master key that seals the stored secrets (DKIM keys, webhook
    /// signing secrets, the return-path tag key).
    #[command(subcommand)]
    Secrets(SecretsCommand),
    /// Copy the live SQLite database to a new file while the service
    /// serves (SQLite's online backup: one consistent snapshot, checked).
    /// Restore: stop the node, put the copy in place of `<data-dir>/mail.db`
    /// (or point --data-dir at its directory) with the master key it was
    /// written with. PostgreSQL: use pg_dump (exit 2 says how).
    Backup {
        /// The file to write; it must not exist.
        #[arg(long)]
        to: std::path::PathBuf,
    },
    /// Run a loopback SMTP sink (for trying the SMTP transport locally).
    SmtpSink {
        #[arg(long, default_value_t = 2525)]
        port: u16,
        #[arg(long, value_enum, default_value = "accept")]
        mode: SinkMode,
    },
}

#[derive(Subcommand)]
enum SecretsCommand {
    /// Write a new random master key (64 hex digits, mode 0600) to FILE,
    /// which must not exist. Prints its id.
    GenerateKey { file: std::path::PathBuf },
    /// The database's master keys, how many stored values each protects,
    /// and which key seals new values (JSON).
    Status,
    /// Re-seal every stored secret under the key in --new-key-file while
    /// the service serves (run with --master-key-file naming the current
    /// key). Nodes pick the new key up from the database. Interrupted, run
    /// it again: it goes on where it stopped.
    Rotate {
        #[arg(long)]
        new_key_file: std::path::PathBuf,
        /// How long to wait for writes begun under the old key before the
        /// last pass.
        #[arg(long, default_value_t = 2_000)]
        settle_ms: u64,
    },
    /// Remove a retired master key (one that protects no value and is not
    /// the newest) with the copy of the new key sealed under it; restart
    /// every node with the new key file first.
    Forget { key_id: String },
}

#[derive(Subcommand)]
enum TenantCommand {
    /// Create a tenant.
    Create {
        name: String,
        #[arg(long, default_value_t = DEFAULT_RATE_LIMIT)]
        rate_limit: i64,
    },
    /// List tenants.
    List,
    /// Change a tenant's request limit per minute.
    SetRateLimit { name: String, per_minute: i64 },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Create an API key (and the tenant if it does not exist). Prints the
    /// key once on stdout; only its hash is stored.
    Create {
        #[arg(long)]
        tenant: String,
        #[arg(long, default_value = "default")]
        name: String,
        #[arg(long, default_value = "full_access", value_parser = parse_permission)]
        permission: Permission,
    },
    /// List a tenant's keys (never the secrets).
    List {
        #[arg(long)]
        tenant: String,
    },
    /// Revoke a key by id.
    Revoke { id: i64 },
}

#[derive(Subcommand)]
enum DomainCommand {
    /// FOR LOCAL USE ONLY: mark a tenant's domain verified without looking
    /// at DNS (creating it, with its DKIM key, if missing), so the file
    /// transport's quick start can send. Mail "from" it is then DKIM-signed
    /// with a key no DNS publishes. Never use it for a domain you send real
    /// mail from: verify with `POST /domains/{id}/verify` instead.
    MarkVerified {
        #[arg(long)]
        tenant: String,
        /// The domain, e.g. example.com.
        domain: String,
    },
}

#[derive(Subcommand)]
enum FeedbackCommand {
    /// Read one feedback message (a delivery status notification or a
    /// complaint report) from standard input and apply it, for a relay that
    /// pipes what reaches the return-path addresses. Prints the outcome as
    /// JSON: `applied`, `quarantined` (kept with the reason) or `duplicate`.
    /// Exits 1 when it could not be stored or is larger than --max-bytes
    /// (the relay should keep it and retry).
    Ingest {
        /// The envelope recipient the relay received it for (its return
        /// path); without it the report's own headers are searched.
        #[arg(long)]
        recipient: Option<String>,
        /// Largest message accepted, in bytes.
        #[arg(long, default_value_t = 10 * 1024 * 1024)]
        max_bytes: u64,
    },
    /// How many reports were kept (applied, quarantined) and the latest
    /// ones, newest first (the quarantine with `--outcome quarantined`).
    Reports {
        #[arg(long, value_parser = parse_report_outcome)]
        outcome: Option<ReportOutcome>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
}

fn parse_report_outcome(s: &str) -> Result<ReportOutcome, String> {
    s.parse()
        .map_err(|e: mail_service::model::UnknownValue| e.to_string())
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ReconcileOutcome {
    Sent,
    NotSent,
}

fn parse_permission(s: &str) -> Result<Permission, String> {
    s.parse()
        .map_err(|e: mail_service::model::UnknownValue| e.to_string())
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "mail_service=info".into()),
        )
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs.init(),
        // Every line a request causes carries its `request` span (request
        // id, route) in `spans`.
        LogFormat::Json => logs
            .json()
            .with_current_span(false)
            .with_span_list(true)
            .init(),
    }
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}

/// The exit code of a failed command (see `EXIT_CODES`).
fn exit_code(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<db_lifecycle::SchemaTooNew>().is_some() {
        return db_lifecycle::EXIT_SCHEMA_TOO_NEW;
    }
    match e.downcast_ref::<mail_service::backup::BackupRefused>() {
        Some(refused) => refused.exit_code(),
        None => 1,
    }
}

async fn operator(storage: &StorageArgs) -> anyhow::Result<MailService> {
    let store = Store::open(&storage.storage(), &storage.master_key()).await?;
    let transport = Transport::File(storage.data_dir.join("outbox"));
    Ok(MailService::start(
        store,
        transport,
        mail_service::system_clock(),
        Settings::default(),
    )
    .await?)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let store = Store::open(&cli.storage.storage(), &cli.storage.master_key()).await?;
            let backend = store.backend();
            let transport = args.transport(&cli.storage).map_err(anyhow::Error::msg)?;
            tracing::info!(storage = store.backend(), transport = %transport.describe(), listen = %args.listen, "starting");
            let service = MailService::start(
                store,
                transport,
                mail_service::system_clock(),
                args.settings(),
            )
            .await?;
            service.sweep().await?;
            if let Some(addr) = &args.metrics_listen {
                let listener = tokio::net::TcpListener::bind(addr).await?;
                eprintln!("metrics on http://{}/metrics", listener.local_addr()?);
                let from_start = mail_service::metrics::FromStart {
                    routes: mail_service::http::served_routes(),
                    sqlite: backend == "sqlite",
                };
                mail_service::http::metrics_listener::spawn(listener, service.clone(), &from_start);
            }
            let _feedback = match &args.feedback_listen {
                None => None,
                Some(addr) => {
                    let tls = match (&args.feedback_tls_cert_file, &args.feedback_tls_key_file) {
                        (Some(cert), Some(key)) => Some(
                            mail_service::feedback::listener::tls_acceptor(cert, key)
                                .map_err(anyhow::Error::msg)?,
                        ),
                        _ => None,
                    };
                    let starttls = if tls.is_some() { ", STARTTLS" } else { "" };
                    let listener = tokio::net::TcpListener::bind(addr).await?;
                    let running = FeedbackListener::start_with_tls(
                        listener,
                        service.clone(),
                        args.feedback_limits(),
                        tls,
                    )?;
                    eprintln!("feedback SMTP listener on {}{starttls}", running.addr());
                    Some(running)
                }
            };
            let listener = tokio::net::TcpListener::bind(&args.listen).await?;
            eprintln!(
                "mail-service listening on http://{}",
                listener.local_addr()?
            );
            mail_service::serve(
                listener,
                service,
                Duration::from_millis(args.sweep_interval_ms),
                shutdown_signal(),
            )
            .await?;
        }
        Command::Tenant(TenantCommand::Create { name, rate_limit }) => {
            let tenant = operator(&cli.storage)
                .await?
                .create_tenant(&name, rate_limit)
                .await?;
            println!("{}", serde_json::to_string_pretty(&tenant)?);
        }
        Command::Tenant(TenantCommand::List) => {
            let tenants = operator(&cli.storage).await?.list_tenants().await?;
            println!("{}", serde_json::to_string_pretty(&tenants)?);
        }
        Command::Tenant(TenantCommand::SetRateLimit { name, per_minute }) => {
            operator(&cli.storage)
                .await?
                .set_rate_limit(&name, per_minute)
                .await?;
            eprintln!("tenant {name}: {per_minute} requests per minute");
        }
        Command::Key(KeyCommand::Create {
            tenant,
            name,
            permission,
        }) => {
            let (record, secret) = operator(&cli.storage)
                .await?
                .create_api_key(&tenant, &name, permission)
                .await?;
            eprintln!(
                "created API key {} ({}) for tenant {tenant}; it is shown once:",
                record.id, record.permission
            );
            println!("{secret}");
        }
        Command::Key(KeyCommand::List { tenant }) => {
            let keys = operator(&cli.storage).await?.list_api_keys(&tenant).await?;
            println!("{}", serde_json::to_string_pretty(&keys)?);
        }
        Command::Key(KeyCommand::Revoke { id }) => {
            operator(&cli.storage).await?.revoke_api_key(id).await?;
            eprintln!("API key {id} revoked");
        }
        Command::Reconcile { email_id, outcome } => {
            let sent = matches!(outcome, ReconcileOutcome::Sent);
            operator(&cli.storage)
                .await?
                .reconcile(email_id, sent)
                .await?;
            eprintln!(
                "email {email_id} reconciled as {}",
                if sent { "sent" } else { "failed" }
            );
        }
        Command::Domain(DomainCommand::MarkVerified { tenant, domain }) => {
            let domain = operator(&cli.storage)
                .await?
                .mark_domain_verified(&tenant, &domain)
                .await?;
            eprintln!(
                "domain {} ({}) of tenant {tenant} marked verified WITHOUT a DNS check (local use only)",
                domain.name, domain.id
            );
        }
        Command::Feedback(FeedbackCommand::Ingest {
            recipient,
            max_bytes,
        }) => {
            use tokio::io::AsyncReadExt;
            let mut raw = Vec::new();
            tokio::io::stdin()
                .take(max_bytes + 1)
                .read_to_end(&mut raw)
                .await?;
            if raw.len() as u64 > max_bytes {
                anyhow::bail!("the message is larger than {max_bytes} bytes; nothing was stored");
            }
            let outcome = operator(&cli.storage)
                .await?
                .ingest_feedback(&raw, FeedbackSource::Stdin { recipient })
                .await?;
            println!("{}", serde_json::to_string(&outcome)?);
        }
        Command::Feedback(FeedbackCommand::Reports { outcome, limit }) => {
            let service = operator(&cli.storage).await?;
            let counts: serde_json::Map<String, serde_json::Value> = service
                .feedback_report_counts()
                .await?
                .into_iter()
                .map(|(o, n)| (o.as_str().to_string(), n.into()))
                .collect();
            let reports = service
                .feedback_reports(outcome, limit.clamp(1, 1000))
                .await?;
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({"counts": counts, "reports": reports})
                )?
            );
        }
        Command::Secrets(SecretsCommand::GenerateKey { file }) => {
            let key = secrets_at_rest::MasterKey::create_file(&file)?;
            eprintln!("{}", secrets_at_rest::wording::key_written(&file));
            println!("{}", key.id());
        }
        Command::Secrets(SecretsCommand::Status) => {
            let store = Store::open(&cli.storage.storage(), &cli.storage.master_key()).await?;
            let status = store.secrets_status().await?;
            println!("{}", serde_json::to_string_pretty(&status)?);
        }
        Command::Secrets(SecretsCommand::Rotate {
            new_key_file,
            settle_ms,
        }) => {
            let new = secrets_at_rest::MasterKey::read_file(&new_key_file)?;
            let store = Store::open(&cli.storage.storage(), &cli.storage.master_key()).await?;
            let id = new.id().to_string();
            let resealed = store
                .rotate_secrets(new, Duration::from_millis(settle_ms))
                .await?;
            eprintln!("{}", secrets_at_rest::wording::rotation_done(resealed, &id));
        }
        Command::Secrets(SecretsCommand::Forget { key_id }) => {
            let store = Store::open(&cli.storage.storage(), &cli.storage.master_key()).await?;
            store.forget_master_key(&key_id).await?;
            eprintln!("{}", secrets_at_rest::wording::forgotten(&key_id));
        }
        Command::Backup { to } => {
            let report = mail_service::backup::backup(&cli.storage.storage(), &to).await?;
            eprintln!("{}", report.summary());
        }
        Command::SmtpSink { port, mode } => {
            let sink = SmtpSink::start(port, mode).await?;
            eprintln!("smtp sink on 127.0.0.1:{} answering {mode:?}", sink.port());
            shutdown_signal().await;
        }
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

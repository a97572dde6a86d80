//! Configuration shared by `serve` and the operator commands: flags with
//! environment fallbacks. Without any, the service runs embedded: SQLite in
//! the data directory and the file transport.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::feedback::listener::ListenerLimits;
use crate::model::EndpointPolicy;
use crate::service::{DnsProtocol, DnsSettings, Settings, WebhookSettings};
use crate::store::{MasterKeySource, StorageConfig};
use crate::transport::{SmtpConfig, SmtpSecurity, Transport};

#[derive(Debug, Clone, Args)]
pub struct StorageArgs {
    /// Directory for the embedded SQLite database and the file transport.
    #[arg(
        long,
        env = "MAIL_DATA_DIR",
        default_value = "mail-data",
        global = true
    )]
    pub data_dir: PathBuf,
    /// PostgreSQL URL; when set, PostgreSQL is used instead of SQLite.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// PostgreSQL schema to use (created if missing).
    #[arg(long, env = "MAIL_DATABASE_SCHEMA", global = true)]
    pub database_schema: Option<String>,
    /// PostgreSQL pool size per process.
    #[arg(
        long,
        env = "MAIL_DB_MAX_CONNECTIONS",
        default_value_t = 10,
        global = true
    )]
    pub db_max_connections: u32,
    /// How long an SQLite write waits for another process holding the
    /// database (an operator command) before the request fails with 503.
    #[arg(
        long,
        env = "MAIL_SQLITE_BUSY_TIMEOUT_MS",
        default_value_t = 10_000,
        global = true
    )]
    pub sqlite_busy_timeout_ms: u64,
    /// File holding the master key (64 hex digits) that seals the stored
    /// secrets. Default: `<data-dir>/master.key`, made on the first start
    /// (SQLite only; PostgreSQL needs it, the same file on every node).
    #[arg(long, env = "MAIL_MASTER_KEY_FILE", global = true)]
    pub master_key_file: Option<PathBuf>,
}

impl StorageArgs {
    pub fn master_key(&self) -> MasterKeySource {
        match &self.master_key_file {
            Some(file) => MasterKeySource::File(file.clone()),
            None => MasterKeySource::BesideData,
        }
    }

    pub fn storage(&self) -> StorageConfig {
        match &self.database_url {
            Some(url) => StorageConfig::Postgres {
                url: url.clone(),
                schema: self.database_schema.clone(),
                max_connections: self.db_max_connections,
            },
            None => StorageConfig::Sqlite {
                path: self.data_dir.join("mail.db"),
                busy_timeout: Duration::from_millis(self.sqlite_busy_timeout_ms),
            },
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "MAIL_LISTEN", default_value = "127.0.0.1:8025")]
    pub listen: String,
    /// Upstream SMTP host; without it messages go to `<data-dir>/outbox`.
    #[arg(long, env = "MAIL_SMTP_HOST")]
    pub smtp_host: Option<String>,
    #[arg(long, env = "MAIL_SMTP_PORT", default_value_t = 587)]
    pub smtp_port: u16,
    #[arg(
        long,
        env = "MAIL_SMTP_SECURITY",
        value_enum,
        default_value = "starttls"
    )]
    pub smtp_security: SmtpSecurity,
    #[arg(long, env = "MAIL_SMTP_USERNAME")]
    pub smtp_username: Option<String>,
    /// The relay password. Prefer `--smtp-password-file`: a flag is visible
    /// in process lists, an environment variable to the process's user.
    #[arg(
        long,
        env = "MAIL_SMTP_PASSWORD",
        hide_env_values = true,
        conflicts_with = "smtp_password_file"
    )]
    pub smtp_password: Option<String>,
    /// A file holding the relay password (one line; a final newline is
    /// ignored). Read once at start.
    #[arg(long, env = "MAIL_SMTP_PASSWORD_FILE")]
    pub smtp_password_file: Option<PathBuf>,
    /// PEM certificates to trust for the relay's TLS besides the public
    /// roots (a private relay's CA).
    #[arg(long, env = "MAIL_SMTP_CA_FILE")]
    pub smtp_ca_file: Option<PathBuf>,
    /// Name sent in EHLO.
    #[arg(long, env = "MAIL_SMTP_HELO", default_value = "localhost")]
    pub smtp_helo: String,
    /// Bound on each SMTP step, including the wait for the reply to the data.
    #[arg(long, env = "MAIL_SMTP_TIMEOUT_MS", default_value_t = 30_000)]
    pub smtp_timeout_ms: u64,
    /// Directory of the file transport (default `<data-dir>/outbox`).
    #[arg(long, env = "MAIL_OUTBOX_DIR")]
    pub outbox_dir: Option<PathBuf>,
    /// The file transport without DKIM signatures, for the send_load
    /// benchmark's CPU bound only; refused with `--smtp-host`.
    #[arg(long, env = "MAIL_BENCH_UNSIGNED", hide = true)]
    pub bench_unsigned: bool,
    /// Upper bound of one handoff; a `sending` email older than this (plus
    /// 30 s) belongs to a stopped node and is declared `unknown`.
    #[arg(long, env = "MAIL_HANDOFF_LEASE_MS", default_value_t = 120_000)]
    pub handoff_lease_ms: u64,
    /// How many scheduled emails this node hands off at the same time.
    #[arg(long, env = "MAIL_SCHEDULER_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub scheduler_concurrency: u32,
    /// How often an idle scheduler looks for emails scheduled on other
    /// nodes (it wakes earlier for the next due email it knows of).
    #[arg(long, env = "MAIL_SCHEDULER_POLL_MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub scheduler_poll_ms: u64,
    /// How often abandoned handoffs are swept and old rate windows dropped.
    #[arg(long, env = "MAIL_SWEEP_INTERVAL_MS", default_value_t = 30_000)]
    pub sweep_interval_ms: u64,
    /// Nameservers domain verification asks (`IP[:PORT]`, comma-separated);
    /// unset: the system's resolver configuration.
    #[arg(long, env = "MAIL_DNS_NAMESERVERS", value_delimiter = ',', value_parser = parse_nameserver)]
    pub dns_nameservers: Vec<std::net::SocketAddr>,
    /// How the nameservers are reached.
    #[arg(
        long,
        env = "MAIL_DNS_PROTOCOL",
        value_enum,
        default_value = "udp-and-tcp"
    )]
    pub dns_protocol: DnsProtocol,
    /// Bound on one DNS lookup; past it the record is `temporary_failure`.
    #[arg(long, env = "MAIL_DNS_TIMEOUT_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub dns_timeout_ms: u64,
    /// The service's host in the records domains publish: SPF
    /// `include:spf.<host>`, bounce MX `feedback-smtp.<host>`.
    #[arg(
        long,
        env = "MAIL_SENDING_HOST",
        default_value = "mail-service.example"
    )]
    pub sending_host: String,
    /// How long a domain keeps being re-checked after a verify request.
    #[arg(long, env = "MAIL_DOMAIN_VERIFY_PERIOD_MS", default_value_t = 72 * 60 * 60 * 1000)]
    pub domain_verify_period_ms: u64,
    /// How often a domain under verification is re-checked.
    #[arg(long, env = "MAIL_DOMAIN_RECHECK_INTERVAL_MS", default_value_t = 5 * 60 * 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub domain_recheck_interval_ms: u64,
    /// The waits between webhook delivery attempts, in milliseconds,
    /// comma-separated (each gets up to a tenth more at random); after the
    /// last the event is given up and the endpoint disabled. Default: 5 s,
    /// 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
    #[arg(
        long,
        env = "MAIL_WEBHOOK_RETRY_SCHEDULE_MS",
        value_delimiter = ',',
        default_value = "5000,300000,1800000,7200000,18000000,36000000,36000000"
    )]
    pub webhook_retry_schedule_ms: Vec<u64>,
    /// How often an idle webhook dispatcher looks for due deliveries.
    #[arg(long, env = "MAIL_WEBHOOK_POLL_MS", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    pub webhook_poll_ms: u64,
    /// Bound on one webhook delivery attempt (connect, request, answer).
    #[arg(long, env = "MAIL_WEBHOOK_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub webhook_timeout_ms: u64,
    /// Webhook deliveries this node makes at the same time.
    #[arg(long, env = "MAIL_WEBHOOK_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub webhook_concurrency: u32,
    /// Allow webhook endpoints at private, loopback, link-local and other
    /// non-public addresses (on-premises receivers, tests). Off by default.
    #[arg(long, env = "MAIL_WEBHOOK_ALLOW_PRIVATE_ADDRESSES")]
    pub webhook_allow_private_addresses: bool,
    /// Allow plain `http://` webhook endpoints on a loopback address (local
    /// development). Off by default.
    #[arg(long, env = "MAIL_WEBHOOK_ALLOW_HTTP_LOOPBACK")]
    pub webhook_allow_http_loopback: bool,
    /// Address of the feedback SMTP listener (bounces and complaint
    /// reports, the `feedback-smtp` MX); unset: no listener.
    #[arg(long, env = "MAIL_FEEDBACK_LISTEN")]
    pub feedback_listen: Option<String>,
    /// PEM certificate chain of the feedback listener: with
    /// `--feedback-tls-key-file` it offers STARTTLS (MTAs that deliver only
    /// over TLS need it).
    #[arg(
        long,
        env = "MAIL_FEEDBACK_TLS_CERT_FILE",
        requires = "feedback_tls_key_file"
    )]
    pub feedback_tls_cert_file: Option<PathBuf>,
    /// PEM private key of `--feedback-tls-cert-file`.
    #[arg(
        long,
        env = "MAIL_FEEDBACK_TLS_KEY_FILE",
        requires = "feedback_tls_cert_file"
    )]
    pub feedback_tls_key_file: Option<PathBuf>,
    /// Largest feedback message the listener takes, in bytes.
    #[arg(long, env = "MAIL_FEEDBACK_MAX_BYTES", default_value_t = 10 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1024..))]
    pub feedback_max_bytes: u64,
    /// Messages one peer address may send the listener per minute.
    #[arg(long, env = "MAIL_FEEDBACK_RATE_PER_MINUTE", default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..))]
    pub feedback_rate_per_minute: u32,
    /// Address of the operator listener serving Prometheus metrics at
    /// `/metrics` (keep it off the public network); unset: no metrics
    /// are recorded.
    #[arg(long, env = "MAIL_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
}

/// `IP` (port 53) or `IP:PORT`.
fn parse_nameserver(text: &str) -> Result<std::net::SocketAddr, String> {
    let text = text.trim();
    if let Ok(ip) = text.parse::<std::net::IpAddr>() {
        return Ok(std::net::SocketAddr::new(ip, 53));
    }
    text.parse()
        .map_err(|_| format!("`{text}` is not IP or IP:PORT (e.g. 192.0.2.53 or 127.0.0.1:5353)"))
}

impl ServeArgs {
    /// The feedback listener's limits.
    pub fn feedback_limits(&self) -> ListenerLimits {
        ListenerLimits {
            max_message_bytes: self.feedback_max_bytes as usize,
            messages_per_minute: self.feedback_rate_per_minute,
            ..ListenerLimits::default()
        }
    }

    /// The relay (files read, the combination checked), or the file
    /// transport without `--smtp-host`. Errors name the flag and never
    /// quote the password.
    pub fn transport(&self, storage: &StorageArgs) -> Result<Transport, String> {
        let Some(host) = &self.smtp_host else {
            let dir = self
                .outbox_dir
                .clone()
                .unwrap_or_else(|| storage.data_dir.join("outbox"));
            return Ok(if self.bench_unsigned {
                Transport::FileUnsigned(dir)
            } else {
                Transport::File(dir)
            });
        };
        if self.bench_unsigned {
            return Err(
                "--bench-unsigned (MAIL_BENCH_UNSIGNED): only with the file transport; \
                 a relay's mail is always DKIM-signed"
                    .to_owned(),
            );
        }
        let password = match &self.smtp_password_file {
            None => self.smtp_password.clone(),
            Some(file) => {
                let text = std::fs::read_to_string(file).map_err(|e| {
                    format!(
                        "--smtp-password-file {}: cannot be read: {e}",
                        file.display()
                    )
                })?;
                use std::os::unix::fs::PermissionsExt;
                if std::fs::metadata(file).is_ok_and(|m| m.permissions().mode() & 0o077 != 0) {
                    tracing::warn!(
                        file = %file.display(),
                        "the relay password file can be read by other users; chmod 600 it"
                    );
                }
                let line = text.strip_suffix('\n').unwrap_or(&text);
                let line = line.strip_suffix('\r').unwrap_or(line);
                if line.is_empty() || line.contains('\n') {
                    return Err(format!(
                        "--smtp-password-file {}: must hold the password on one line",
                        file.display()
                    ));
                }
                Some(line.to_string())
            }
        };
        if password.is_some() && self.smtp_username.is_none() {
            return Err("a relay password needs --smtp-username".to_string());
        }
        let ca_pem =
            match &self.smtp_ca_file {
                None => None,
                Some(file) => Some(std::fs::read(file).map_err(|e| {
                    format!("--smtp-ca-file {}: cannot be read: {e}", file.display())
                })?),
            };
        Transport::smtp(SmtpConfig {
            host: host.clone(),
            port: self.smtp_port,
            security: self.smtp_security,
            username: self.smtp_username.clone(),
            password,
            hello_name: self.smtp_helo.clone(),
            timeout: Duration::from_millis(self.smtp_timeout_ms),
            ca_pem,
        })
    }

    pub fn settings(&self) -> Settings {
        Settings {
            handoff_lease: Duration::from_millis(self.handoff_lease_ms),
            scheduler_concurrency: self.scheduler_concurrency as usize,
            scheduler_poll: Duration::from_millis(self.scheduler_poll_ms),
            dns: DnsSettings {
                nameservers: self.dns_nameservers.clone(),
                protocol: self.dns_protocol,
                timeout: Duration::from_millis(self.dns_timeout_ms),
            },
            sending_host: self.sending_host.clone(),
            domain_verify_period: Duration::from_millis(self.domain_verify_period_ms),
            domain_recheck_interval: Duration::from_millis(self.domain_recheck_interval_ms),
            webhooks: WebhookSettings {
                retry_schedule: self
                    .webhook_retry_schedule_ms
                    .iter()
                    .map(|ms| Duration::from_millis(*ms))
                    .collect(),
                poll: Duration::from_millis(self.webhook_poll_ms),
                timeout: Duration::from_millis(self.webhook_timeout_ms),
                concurrency: self.webhook_concurrency as usize,
                policy: EndpointPolicy {
                    allow_http_loopback: self.webhook_allow_http_loopback,
                    allow_private: self.webhook_allow_private_addresses,
                },
                ..WebhookSettings::default()
            },
            ..Settings::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        storage: StorageArgs,
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn transport(args: &[&str]) -> Result<Transport, String> {
        let cli = Cli::try_parse_from(std::iter::once("mail-service").chain(args.iter().copied()))
            .expect("the flags parse");
        cli.serve.transport(&cli.storage)
    }

    #[test]
    fn unsigned_mail_is_only_for_the_benchmark_s_file_transport() {
        assert!(matches!(transport(&[]), Ok(Transport::File(_))));
        assert!(matches!(
            transport(&["--bench-unsigned"]),
            Ok(Transport::FileUnsigned(_))
        ));
        let refused = transport(&["--bench-unsigned", "--smtp-host", "relay.example"])
            .map(|t| t.describe())
            .unwrap_err();
        assert!(
            refused.starts_with(
                "--bench-unsigned (MAIL_BENCH_UNSIGNED): only with the file transport"
            ),
            "{refused}"
        );
    }
}

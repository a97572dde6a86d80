//! `tracking-domain …`: the operator flow that connects a project's own
//! tracking hostname, one step at a time (each refuses to run before the
//! previous one holds; running a step again resumes it).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use host_sim::tracking::dns::{DnsOptions, DnsReport, RecordCheck};
use host_sim::tracking::ingress;
use host_sim::tracking::tls::TlsOptions;
use host_sim::{EdgeRemoval, Host};
use serde_json::json;

use crate::{CliError, exit, print_json};

#[derive(Subcommand)]
pub(crate) enum TrackingCommand {
    /// Set the operator's settings: the ingress target every tracking
    /// hostname's CNAME must lead to, the console's host (always reserved)
    /// and further reserved hostnames. Values not given are kept.
    Configure {
        /// The provider's ingress host, e.g. `ingress.analytics.example`.
        #[arg(long)]
        ingress_target: Option<String>,
        /// The console's host (or origin); never usable as a tracking domain.
        #[arg(long)]
        console_host: Option<String>,
        /// Hostnames the platform keeps (comma-separated; replaces the list).
        #[arg(long, value_delimiter = ',')]
        reserved: Option<Vec<String>>,
    },
    /// Step 1: check HOSTNAME and print the two DNS records to create.
    ///
    /// Checks: the name is valid (IDNA-normalised), not an IP address, not a
    /// wildcard, not the apex of its domain (a CNAME cannot live there;
    /// public suffix list), not reserved (the list, the console's host, the
    /// ingress target, every binding's origin host such as the provider's),
    /// and not bound to another project. Prints a TXT challenge bound to
    /// this project and hostname and the CNAME to the ingress target.
    Add(DomainArgs),
    /// Step 2: ask DNS for the TXT challenge and the CNAME.
    ///
    /// Real queries (the system's resolver, or --nameserver). Each record is
    /// found, missing, wrong value (a TXT value made for another project or
    /// hostname is never accepted; a CNAME chain must end at the ingress
    /// target) or lookup failed (SERVFAIL, timeout: retry, nothing is
    /// wrong yet). Both found moves the domain to `verified`.
    /// Exit 0 verified, 7 a record is missing or wrong, 8 a lookup failed.
    Verify {
        #[command(flatten)]
        domain: DomainArgs,
        #[command(flatten)]
        dns: DnsArgs,
    },
    /// Show each tracking domain's step, its records as last verified, its
    /// TLS state, the expiry of the certificate a routed hostname serves
    /// (one handshake each, through --address/--roots like wait-tls) and
    /// the command that moves it on.
    Status {
        #[arg(long)]
        project: Option<String>,
        #[arg(long)]
        hostname: Option<String>,
        #[command(flatten)]
        edge: EdgeArgs,
    },
    /// Step 3a: show the reviewed routing as a diff against the applied one.
    ///
    /// Every domain at `verified` or later is routed to its project's
    /// `provider` binding origin, exposing exactly GET /script.js,
    /// POST /api/send and the preflight OPTIONS /api/send (no prefix, no
    /// other path of the provider); the last line names the plan's id.
    Plan,
    /// Step 3b: apply exactly the plan (with --plan ID: only if the routing
    /// is still the one that plan was made from). Domains routed for the
    /// first time move to `routed`.
    Apply {
        /// Confirm: apply the routing `plan` shows.
        #[arg(long)]
        yes: bool,
        /// The id `plan` printed; refused if the plan changed since.
        #[arg(long)]
        plan: Option<String>,
    },
    /// Step 4: wait until HOSTNAME serves a valid certificate.
    ///
    /// Repeats a TLS handshake to HOSTNAME:443 (or --address/--port) until
    /// the certificate chains to the roots (--roots PEM, or Mozilla's), is
    /// valid for the hostname and stays valid --min-validity-days more.
    /// Shows each failed attempt's reason; then moves the domain to
    /// `tls-ready`. Exit 9 with the last reason when --timeout passes.
    WaitTls {
        #[command(flatten)]
        domain: DomainArgs,
        /// Give up after this long, e.g. `90s`, `10m`.
        #[arg(long, default_value = "10m", value_parser = parse_duration)]
        timeout: Duration,
        /// Time between attempts, e.g. `5s`.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        interval: Duration,
        #[command(flatten)]
        edge: EdgeArgs,
        /// Days the certificate must stay valid.
        #[arg(long, default_value_t = 7)]
        min_validity_days: u64,
    },
    /// Step 5: make the tracking hostname the project's public
    /// `tracking_origin` (`https://HOSTNAME`; a new runtime generation), so
    /// the configuration's script loads from it and sends to it
    /// (`data-host-url`); the dashboard link stays on the provider. Needs
    /// the domain at `tls-ready` and the edge serving it: `GET
    /// https://HOSTNAME/script.js` (certificate checked against --roots)
    /// must answer the provider's script byte for byte, and the CORS
    /// preflight of `/api/send` must allow the tracker's POST; otherwise
    /// exit 3 with the reason.
    Activate {
        #[command(flatten)]
        domain: DomainArgs,
        #[command(flatten)]
        edge: EdgeArgs,
    },
    /// Print the applied routing for a real edge: an nginx server block per
    /// hostname (`location =`, raw-URI and method checks) or a Kubernetes
    /// Ingress (`pathType: Exact`).
    Export {
        #[command(subcommand)]
        format: ExportFormat,
    },
    /// Undo a tracking domain's steps in reverse order (activation, routing,
    /// then the domain), one commit each; a run that was interrupted
    /// resumes when run again. Before the domain is forgotten, the edge
    /// must no longer serve it: `https://HOSTNAME/script.js` is asked
    /// (like `activate`) and while it still answers the provider's script
    /// remove stops (exit 3) with the domain unrouted at `verified`:
    /// re-export and reload the edge, then run remove again. When the edge
    /// cannot be asked (the name does not resolve, no connection) it stops
    /// too: nothing is forgotten on a guess. From its first step the domain
    /// is out of the desired routing, so no `apply` routes it again.
    Remove {
        #[command(flatten)]
        domain: DomainArgs,
        #[command(flatten)]
        edge: EdgeArgs,
        /// Skip the edge check: you removed HOSTNAME from the edge yourself.
        #[arg(long)]
        removed_from_edge: bool,
    },
    /// Undo a removal that stopped: the domain is desired again, and the
    /// next `apply` routes it.
    Keep {
        #[command(flatten)]
        domain: DomainArgs,
    },
    /// For cron: check the certificate each routed tracking hostname
    /// serves; warn (exit 10) when one expires within --warn-days or
    /// cannot be checked. Prints each hostname's expiry.
    Check {
        #[command(flatten)]
        edge: EdgeArgs,
        /// Warn when fewer days than this remain.
        #[arg(long, default_value_t = 14)]
        warn_days: u64,
    },
}

/// Where the edge is and which roots its certificates chain to.
#[derive(Args)]
pub(crate) struct EdgeArgs {
    /// Connect here instead of the hostname's addresses (IP:PORT).
    #[arg(long)]
    address: Option<SocketAddr>,
    #[arg(long, default_value_t = 443)]
    port: u16,
    /// Trusted roots, a PEM bundle [default: Mozilla's roots].
    #[arg(long)]
    roots: Option<std::path::PathBuf>,
    /// Resolve the hostname through this nameserver, IP:PORT (repeatable)
    /// [default: the system's resolver]; --address skips the lookup.
    #[arg(
        long = "nameserver",
        env = "HOST_SIM_NAMESERVERS",
        value_delimiter = ','
    )]
    nameservers: Vec<SocketAddr>,
}

impl EdgeArgs {
    fn options(&self) -> TlsOptions {
        TlsOptions {
            address: self.address,
            port: self.port,
            roots: self.roots.clone(),
            ..TlsOptions::default()
        }
    }

    /// [`options`](Self::options) for one hostname: with --nameserver and
    /// no --address, the address that nameserver gives.
    fn options_for(&self, hostname: &str) -> Result<TlsOptions, CliError> {
        let mut options = self.options();
        if options.address.is_none() && !self.nameservers.is_empty() {
            let dns = DnsOptions {
                nameservers: self.nameservers.clone(),
                ..DnsOptions::default()
            };
            let name = host_sim::tracking::hostname::normalize(hostname)
                .map_err(|e| CliError::Usage(e.to_string()))?;
            options.address = Some(
                host_sim::tracking::dns::address(&dns, &name, self.port)
                    .map_err(|e| CliError::Usage(format!("--nameserver: {e}")))?,
            );
        }
        Ok(options)
    }
}

#[derive(Subcommand)]
pub(crate) enum ExportFormat {
    /// nginx server blocks (include them in the http block).
    Nginx {
        /// The `listen` parameters.
        #[arg(long, default_value = "443 ssl")]
        listen: String,
        /// Certificates at DIR/<hostname>/fullchain.pem and privkey.pem.
        #[arg(long, default_value = "/etc/ssl/tracking")]
        certificate_dir: String,
        /// A proxy in front of nginx whose X-Forwarded-For is believed
        /// (`set_real_ip_from`; an IP address, repeatable or comma-separated).
        /// Without it the visitor is the connection's address.
        #[arg(long = "trusted-proxy", value_delimiter = ',')]
        trusted_proxies: Vec<std::net::IpAddr>,
        /// Leave out the `default_server` that closes connections for other
        /// hosts (only where your configuration already has one for this
        /// listen that does the same).
        #[arg(long)]
        without_default_server: bool,
    },
    /// Kubernetes Ingress objects.
    Kubernetes {
        /// The Service in front of the provider.
        #[arg(long, default_value = "umami")]
        service: String,
        #[arg(long, default_value_t = 3000)]
        port: u16,
        #[arg(long, default_value = "nginx")]
        ingress_class: String,
    },
}

#[derive(Args)]
pub(crate) struct DomainArgs {
    #[arg(long)]
    project: String,
    /// The tracking hostname, e.g. `track.shop.example`.
    #[arg(long)]
    hostname: String,
}

#[derive(Args)]
pub(crate) struct DnsArgs {
    /// A nameserver to ask, IP:PORT (repeatable) [default: the system's resolver].
    #[arg(
        long = "nameserver",
        env = "HOST_SIM_NAMESERVERS",
        value_delimiter = ','
    )]
    nameservers: Vec<SocketAddr>,
    /// How long one DNS query may take, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    dns_timeout_ms: u64,
}

impl DnsArgs {
    fn options(&self) -> DnsOptions {
        DnsOptions {
            nameservers: self.nameservers.clone(),
            timeout: Duration::from_millis(self.dns_timeout_ms),
        }
    }
}

pub(crate) fn run(host: &Host, command: TrackingCommand) -> Result<ExitCode, CliError> {
    match command {
        TrackingCommand::Configure {
            ingress_target,
            console_host,
            reserved,
        } => {
            let settings = host.configure_tracking(
                ingress_target.as_deref(),
                console_host.as_deref(),
                reserved,
            )?;
            print_json(&json!(settings));
        }
        TrackingCommand::Add(DomainArgs { project, hostname }) => {
            let records = host.add_tracking_domain(&project, &hostname)?;
            eprintln!(
                "✓ {} is a tracking domain of {project} (step {}). Create these records, then run \
                 `host-sim tracking-domain verify --project {project} --hostname {}`:",
                records.domain.hostname, records.domain.step, records.domain.hostname
            );
            eprintln!("  {}. TXT \"{}\"", records.txt_name, records.txt_value);
            eprintln!("  {}. CNAME {}.", records.cname_name, records.cname_target);
            print_json(&json!({
                "hostname": records.domain.hostname,
                "project": records.domain.project_id,
                "step": records.domain.step,
                "records": [
                    { "type": "TXT", "name": records.txt_name, "value": records.txt_value },
                    { "type": "CNAME", "name": records.cname_name, "value": records.cname_target },
                ],
            }));
        }
        TrackingCommand::Verify { domain, dns } => {
            let (stored, report) =
                host.verify_tracking_domain(&domain.project, &domain.hostname, &dns.options())?;
            for record in [&report.txt, &report.cname] {
                eprintln!("{}", record_line(record));
            }
            print_json(&json!({ "hostname": stored.hostname, "step": stored.step, "dns": report }));
            return Ok(verify_exit(&report, &stored.hostname));
        }
        TrackingCommand::Status {
            project,
            hostname,
            edge,
        } => {
            let domains = match (&project, &hostname) {
                (Some(project), Some(hostname)) => vec![host.tracking_domain(project, hostname)?],
                (_, None) => host.tracking_domains(project.as_deref())?,
                (None, Some(_)) => {
                    return Err(CliError::Usage(
                        "--hostname needs --project (the domain's project)".into(),
                    ));
                }
            };
            for domain in &domains {
                eprintln!(
                    "{} (project {}): step {}; next: {}",
                    domain.hostname,
                    domain.project_id,
                    domain.step,
                    domain.step.next_command()
                );
                match domain
                    .dns_report
                    .clone()
                    .and_then(|r| serde_json::from_value::<DnsReport>(r).ok())
                {
                    Some(report) => {
                        for record in [&report.txt, &report.cname] {
                            eprintln!("{}", record_line(record));
                        }
                    }
                    None => eprintln!("  DNS: not verified yet"),
                }
                eprintln!("  TLS: {}", domain.step.tls_state());
            }
            if domains.is_empty() {
                eprintln!(
                    "no tracking domains{}; add one with `host-sim tracking-domain add`",
                    project
                        .as_deref()
                        .map(|p| format!(" of project {p}"))
                        .unwrap_or_default()
                );
            }
            let certificates = host.tracking_certificates(project.as_deref(), &|hostname| {
                edge.options_for(hostname)
                    .map(|options| TlsOptions {
                        attempt_timeout: Duration::from_secs(3),
                        ..options
                    })
                    .map_err(|e| e.to_string())
            })?;
            let certificates: Vec<_> = certificates
                .into_iter()
                .filter(|c| domains.iter().any(|d| d.hostname == c.hostname))
                .collect();
            for certificate in &certificates {
                eprintln!("{}", certificate_line(certificate));
            }
            let shown: Vec<_> = domains
                .iter()
                .map(|domain| {
                    let mut value = json!(domain);
                    if let Some(c) = certificates.iter().find(|c| c.hostname == domain.hostname) {
                        value["certificate"] = json!(c);
                    }
                    value
                })
                .collect();
            print_json(&json!(shown));
        }
        TrackingCommand::Check { edge, warn_days } => {
            let certificates = host.tracking_certificates(None, &|hostname| {
                edge.options_for(hostname).map_err(|e| e.to_string())
            })?;
            let mut warned = false;
            for certificate in &certificates {
                let line = certificate_line(certificate);
                match certificate.days_left {
                    Some(days) if days >= warn_days as i64 => eprintln!("✓ {}", line.trim()),
                    _ => {
                        warned = true;
                        eprintln!("✗ {} (warning: fewer than {warn_days} days)", line.trim());
                    }
                }
            }
            if certificates.is_empty() {
                eprintln!("no routed tracking domains: nothing to check");
            }
            print_json(&json!({ "warn_days": warn_days, "certificates": certificates }));
            if warned {
                return Ok(ExitCode::from(exit::CERTIFICATE_WARNING));
            }
        }
        TrackingCommand::Plan => {
            let plan = host.tracking_plan()?;
            print!("{}", plan.render());
            if !plan.changes.is_empty() {
                eprintln!(
                    "apply exactly this with `host-sim tracking-domain apply --yes --plan {}`",
                    plan.id
                );
            }
        }
        TrackingCommand::Apply { yes, plan } => {
            let applied = host.apply_tracking_plan(yes, plan.as_deref())?;
            eprint!("{}", applied.render());
            eprintln!(
                "✓ applied plan {}; next for each routed domain: tracking-domain wait-tls",
                applied.id
            );
            print_json(&json!(applied));
        }
        TrackingCommand::WaitTls {
            domain,
            timeout,
            interval,
            edge,
            min_validity_days,
        } => {
            let options = TlsOptions {
                min_validity: Duration::from_secs(min_validity_days * 86400),
                attempt_timeout: interval.clamp(Duration::from_secs(1), Duration::from_secs(10)),
                ..edge.options_for(&domain.hostname)?
            };
            let attempts = host.wait_tls(
                &domain.project,
                &domain.hostname,
                &options,
                timeout,
                interval,
                &mut |attempt, reason| {
                    if attempt == 1 {
                        eprintln!(
                            "… waiting up to {}s for a valid certificate on {}",
                            timeout.as_secs(),
                            domain.hostname
                        );
                    }
                    eprintln!("… attempt {attempt}: {reason}")
                },
            )?;
            eprintln!(
                "✓ {} serves a valid certificate (attempt {attempts}); next: tracking-domain activate",
                domain.hostname
            );
            print_json(
                &json!({ "hostname": domain.hostname, "tls": "valid", "attempts": attempts }),
            );
        }
        TrackingCommand::Activate {
            domain: DomainArgs { project, hostname },
            edge,
        } => {
            let origin =
                host.activate_tracking_domain(&project, &hostname, &edge.options_for(&hostname)?)?;
            eprintln!(
                "✓ {project}'s tracking script now loads from {origin} (new runtime generation); the dashboard stays on the provider"
            );
            print_json(
                &json!({ "project": project, "hostname": hostname, "tracking_origin": origin, "step": "active" }),
            );
        }
        TrackingCommand::Export { format } => {
            let routes = host.tracking_routes()?;
            let text = match format {
                ExportFormat::Nginx {
                    listen,
                    certificate_dir,
                    trusted_proxies,
                    without_default_server,
                } => ingress::nginx(
                    &routes,
                    &ingress::NginxOptions {
                        listen,
                        certificate_dir,
                        trusted_proxies,
                        default_server: !without_default_server,
                    },
                ),
                ExportFormat::Kubernetes {
                    service,
                    port,
                    ingress_class,
                } => ingress::kubernetes(
                    &routes,
                    &ingress::KubernetesOptions {
                        service,
                        port,
                        ingress_class,
                    },
                ),
            };
            print!("{text}");
        }
        TrackingCommand::Keep {
            domain: DomainArgs { project, hostname },
        } => {
            host.keep_tracking_domain(&project, &hostname)?;
            eprintln!(
                "✓ {hostname} is kept: it is in the desired routing again (`tracking-domain plan`, then `apply`)"
            );
            print_json(&json!({ "project": project, "hostname": hostname, "kept": true }));
        }
        TrackingCommand::Remove {
            domain: DomainArgs { project, hostname },
            edge,
            removed_from_edge,
        } => {
            let edge = if removed_from_edge {
                EdgeRemoval::RemovedElsewhere
            } else {
                EdgeRemoval::Check(edge.options_for(&hostname)?)
            };
            let removed = host.remove_tracking_domain(&project, &hostname, &edge, &mut |step| {
                eprintln!("… {hostname}: {step}")
            })?;
            if removed {
                eprintln!("✓ removed {hostname} from {project}");
            } else {
                eprintln!("note: {hostname} was not a tracking domain of {project}");
            }
            print_json(&json!({ "project": project, "hostname": hostname, "removed": removed }));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `250ms`, `5s`, `10m`, `1h`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not like 250ms, 5s, 10m or 1h"))?;
    let duration = match unit {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(format!("`{text}`: the unit is one of ms, s, m, h")),
    };
    if duration.is_zero() {
        return Err("the duration must be positive".into());
    }
    Ok(duration)
}

fn certificate_line(certificate: &host_sim::CertificateState) -> String {
    match (
        certificate.expires_at,
        certificate.days_left,
        &certificate.error,
    ) {
        (Some(at), Some(days), _) => format!(
            "  certificate of {}: expires {} ({days} days left)",
            certificate.hostname,
            expiry_date(at)
        ),
        (_, _, Some(error)) => format!(
            "  certificate of {}: cannot be checked: {error}",
            certificate.hostname
        ),
        _ => format!("  certificate of {}: unknown", certificate.hostname),
    }
}

/// `2026-12-24 10:00 UTC`.
fn expiry_date(unix: u64) -> String {
    let format = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute] UTC");
    time::OffsetDateTime::from_unix_timestamp(unix as i64)
        .ok()
        .and_then(|t| t.format(&format).ok())
        .unwrap_or_else(|| format!("at {unix} s after the epoch"))
}

fn record_line(record: &RecordCheck) -> String {
    format!(
        "  {} {} (expected {}): {}",
        record.record_type,
        record.name,
        record.expected,
        record.state.describe()
    )
}

fn verify_exit(report: &DnsReport, hostname: &str) -> ExitCode {
    if report.verified() {
        eprintln!("✓ {hostname}: both records found; next: tracking-domain plan");
        ExitCode::SUCCESS
    } else if report.retryable() {
        eprintln!("… {hostname}: a lookup failed; run verify again later");
        ExitCode::from(exit::DNS_RETRY)
    } else {
        eprintln!("✗ {hostname}: create or fix the records above, then run verify again");
        ExitCode::from(exit::DNS_NOT_VERIFIED)
    }
}

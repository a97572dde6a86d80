//! DNS lookups for domain verification: hickory-resolver on the configured
//! nameservers (the system's when none are given). A lookup ends as found
//! records, nothing there (NXDOMAIN, or the name without that type), or a
//! temporary failure (SERVFAIL, timeout, no nameserver reachable).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::{Resolver, TokioResolver};

/// Which transports the resolver uses to reach the nameservers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DnsProtocol {
    /// UDP, and TCP for truncated answers (the normal way).
    UdpAndTcp,
    Udp,
    Tcp,
}

#[derive(Debug, Clone)]
pub struct DnsSettings {
    /// Nameservers to ask; empty: the system's (`/etc/resolv.conf`).
    pub nameservers: Vec<SocketAddr>,
    pub protocol: DnsProtocol,
    /// Bound on one lookup.
    pub timeout: Duration,
}

impl Default for DnsSettings {
    fn default() -> Self {
        DnsSettings {
            nameservers: Vec::new(),
            protocol: DnsProtocol::UdpAndTcp,
            timeout: Duration::from_secs(5),
        }
    }
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    Records(Vec<RData>),
    /// NXDOMAIN, or the name exists without records of that type.
    Nothing,
    /// DNS could not answer now (SERVFAIL, timeout, ...).
    Temporary(String),
}

#[derive(Clone)]
pub struct Dns {
    resolver: Result<Arc<TokioResolver>, String>,
    timeout: Duration,
}

impl Dns {
    pub fn new(settings: &DnsSettings) -> Dns {
        let mut options = ResolverOpts::default();
        options.timeout = settings.timeout;
        options.attempts = 1;
        // Verification must see a record as soon as it is published.
        options.cache_size = 0;
        let resolver = if settings.nameservers.is_empty() {
            Resolver::builder_tokio()
                .map_err(|e| format!("the system's DNS configuration could not be read ({e})"))
                .and_then(|b| b.with_options(options).build().map_err(|e| e.to_string()))
                .map(Arc::new)
        } else {
            let servers = settings
                .nameservers
                .iter()
                .map(|addr| {
                    let mut server = match settings.protocol {
                        DnsProtocol::UdpAndTcp => NameServerConfig::udp_and_tcp(addr.ip()),
                        DnsProtocol::Udp => NameServerConfig::udp(addr.ip()),
                        DnsProtocol::Tcp => NameServerConfig::tcp(addr.ip()),
                    };
                    for connection in &mut server.connections {
                        connection.port = addr.port();
                    }
                    server
                })
                .collect();
            options.try_tcp_on_error = settings.protocol == DnsProtocol::UdpAndTcp;
            Resolver::builder_with_config(
                ResolverConfig::from_parts(None, vec![], servers),
                TokioRuntimeProvider::default(),
            )
            .with_options(options)
            .build()
            .map(Arc::new)
            .map_err(|e| e.to_string())
        };
        Dns {
            resolver,
            timeout: settings.timeout,
        }
    }

    /// The bound of one whole lookup (twice the per-attempt timeout).
    pub fn bound(&self) -> Duration {
        self.timeout * 2
    }

    pub async fn lookup(&self, name: &str, record_type: RecordType) -> Found {
        let resolver = match &self.resolver {
            Ok(r) => r,
            Err(e) => return Found::Temporary(e.clone()),
        };
        let fqdn = format!("{}.", name.trim_end_matches('.'));
        // The resolver bounds each attempt; this bounds the whole lookup.
        match tokio::time::timeout(self.bound(), resolver.lookup(fqdn, record_type)).await {
            Err(_) => Found::Temporary(format!("no answer within {:?}", self.bound())),
            Ok(Ok(lookup)) => {
                Found::Records(lookup.answers().iter().map(|r| r.data.clone()).collect())
            }
            Ok(Err(e)) if e.is_nx_domain() || e.is_no_records_found() => Found::Nothing,
            Ok(Err(e)) => Found::Temporary(e.to_string()),
        }
    }
}

/// The TXT records among `data`, each as its strings joined.
pub fn txt_values(data: &[RData]) -> Vec<String> {
    data.iter()
        .filter_map(|d| match d {
            RData::TXT(txt) => Some(
                txt.txt_data
                    .iter()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect::<String>(),
            ),
            _ => None,
        })
        .collect()
}

/// The MX records among `data` as (preference, exchange without the final
/// dot, lower-case).
pub fn mx_values(data: &[RData]) -> Vec<(u16, String)> {
    data.iter()
        .filter_map(|d| match d {
            RData::MX(mx) => Some((
                mx.preference,
                mx.exchange
                    .to_string()
                    .trim_end_matches('.')
                    .to_ascii_lowercase(),
            )),
            _ => None,
        })
        .collect()
}

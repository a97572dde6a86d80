//! The DNS half of a tracking domain's verification: real queries through
//! hickory-resolver (the nameservers the operator names, or the system's
//! resolver), each record reported as found, missing, wrong value or
//! lookup failed. A failed lookup (SERVFAIL, timeout) is retryable: it says
//! nothing about the record, so it is never reported as missing.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::{Resolver, TokioResolver};

use super::challenge::{CHALLENGE_PREFIX, challenge_name};

/// CNAMEs followed from the hostname before the chain counts as a loop.
const MAX_CNAME_HOPS: usize = 8;

/// Where the queries go.
#[derive(Debug, Clone)]
pub struct DnsOptions {
    /// The nameservers to ask (UDP, then TCP for truncated answers); empty:
    /// the system's resolver configuration (`/etc/resolv.conf`).
    pub nameservers: Vec<SocketAddr>,
    /// How long one query may take.
    pub timeout: Duration,
}

impl Default for DnsOptions {
    fn default() -> Self {
        Self {
            nameservers: Vec::new(),
            timeout: Duration::from_secs(5),
        }
    }
}

/// What DNS says about one record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RecordState {
    /// The record holds the expected value.
    Found,
    /// No such record at the name.
    Missing,
    /// The record exists with other values (for a CNAME: the chain that was
    /// followed).
    WrongValue { found: Vec<String>, note: String },
    /// The lookup itself failed (SERVFAIL, timeout, unreachable server):
    /// retryable, says nothing about the record.
    LookupFailed { reason: String },
}

impl RecordState {
    pub fn is_found(&self) -> bool {
        matches!(self, RecordState::Found)
    }

    /// One line for an operator.
    pub fn describe(&self) -> String {
        match self {
            RecordState::Found => "found".into(),
            RecordState::Missing => "missing".into(),
            RecordState::WrongValue { found, note } => {
                format!("wrong value ({note}): {}", found.join(", "))
            }
            RecordState::LookupFailed { reason } => {
                format!("lookup failed, retry later: {reason}")
            }
        }
    }
}

/// One record to create and what DNS said about it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordCheck {
    /// `TXT` or `CNAME`.
    pub record_type: String,
    pub name: String,
    pub expected: String,
    #[serde(flatten)]
    pub state: RecordState,
}

/// The two records of a tracking domain, as DNS answered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DnsReport {
    pub txt: RecordCheck,
    pub cname: RecordCheck,
}

impl DnsReport {
    pub fn verified(&self) -> bool {
        self.txt.state.is_found() && self.cname.state.is_found()
    }

    /// Whether a retry could change the answer without the operator
    /// touching DNS (a lookup failed).
    pub fn retryable(&self) -> bool {
        [&self.txt.state, &self.cname.state]
            .iter()
            .any(|state| matches!(state, RecordState::LookupFailed { .. }))
    }
}

/// A failure to set up the resolver (not a DNS answer).
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the DNS resolver: {0}")]
pub struct ResolverError(String);

/// Asks DNS about `hostname`'s challenge TXT record (it must hold
/// `expected_txt`) and its CNAME (it must lead to `ingress_target`,
/// directly or through a chain). Names compare case-insensitively and
/// without the final dot.
pub fn check(
    options: &DnsOptions,
    hostname: &str,
    expected_txt: &str,
    ingress_target: &str,
) -> Result<DnsReport, ResolverError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ResolverError(e.to_string()))?;
    let resolver = resolver(options)?;
    let txt_name = challenge_name(hostname);
    let txt = runtime.block_on(check_txt(&resolver, &txt_name, expected_txt));
    let cname = runtime.block_on(check_cname(&resolver, hostname, ingress_target));
    Ok(DnsReport {
        txt: RecordCheck {
            record_type: "TXT".into(),
            name: txt_name,
            expected: expected_txt.to_string(),
            state: txt,
        },
        cname: RecordCheck {
            record_type: "CNAME".into(),
            name: hostname.to_string(),
            expected: normal_name(ingress_target),
            state: cname,
        },
    })
}

/// The first address `hostname` resolves to through `options`' nameservers
/// (CNAMEs followed), with `port`: where `wait-tls`, `activate` and
/// `remove` connect when the operator names nameservers.
pub fn address(options: &DnsOptions, hostname: &str, port: u16) -> Result<SocketAddr, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let resolver = resolver(options).map_err(|e| e.to_string())?;
    let found = runtime
        .block_on(resolver.lookup_ip(fqdn(hostname)))
        .map_err(|e| format!("cannot resolve {hostname}: {e}"))?;
    found
        .iter()
        .next()
        .map(|ip| SocketAddr::new(ip, port))
        .ok_or_else(|| format!("{hostname} has no address"))
}

fn resolver(options: &DnsOptions) -> Result<TokioResolver, ResolverError> {
    let mut resolver_options = ResolverOpts::default();
    resolver_options.timeout = options.timeout;
    resolver_options.attempts = 1;
    // Every verification asks afresh.
    resolver_options.cache_size = 0;
    let builder = if options.nameservers.is_empty() {
        Resolver::builder_tokio().map_err(|e| {
            ResolverError(format!(
                "the system's resolver configuration: {e} (name nameservers with --nameserver)"
            ))
        })?
    } else {
        let servers = options
            .nameservers
            .iter()
            .map(|address| {
                let mut server = NameServerConfig::udp_and_tcp(address.ip());
                for connection in &mut server.connections {
                    connection.port = address.port();
                }
                server
            })
            .collect();
        Resolver::builder_with_config(
            ResolverConfig::from_parts(None, vec![], servers),
            TokioRuntimeProvider::default(),
        )
    };
    builder
        .with_options(resolver_options)
        .build()
        .map_err(|e| ResolverError(e.to_string()))
}

/// A name as compared: lower case, no final dot.
fn normal_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn fqdn(name: &str) -> String {
    format!("{}.", name.trim_end_matches('.'))
}

/// The answer's records of `record_type`, `None` when the name has none
/// (NXDOMAIN or no data), or the lookup's failure.
async fn answers(
    resolver: &TokioResolver,
    name: &str,
    record_type: RecordType,
) -> Result<Option<Vec<RData>>, String> {
    match resolver.lookup(fqdn(name), record_type).await {
        Ok(lookup) => {
            let data: Vec<RData> = lookup
                .answers()
                .iter()
                .filter(|record| record.record_type() == record_type)
                .map(|record| record.data.clone())
                .collect();
            Ok((!data.is_empty()).then_some(data))
        }
        Err(e) if e.is_nx_domain() || e.is_no_records_found() => Ok(None),
        Err(NetError::Timeout) => Err(format!("no answer for {name} {record_type} in time")),
        Err(NetError::Dns(DnsError::ResponseCode(ResponseCode::ServFail))) => Err(format!(
            "the nameserver answered SERVFAIL for {name} {record_type}"
        )),
        Err(e) => Err(format!("{name} {record_type}: {e}")),
    }
}

async fn check_txt(resolver: &TokioResolver, name: &str, expected: &str) -> RecordState {
    let data = match answers(resolver, name, RecordType::TXT).await {
        Ok(Some(data)) => data,
        Ok(None) => return RecordState::Missing,
        Err(reason) => return RecordState::LookupFailed { reason },
    };
    // A TXT record's character strings form one value.
    let values: Vec<String> = data
        .iter()
        .filter_map(|d| match d {
            RData::TXT(txt) => Some(
                txt.txt_data
                    .iter()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect::<String>(),
            ),
            _ => None,
        })
        .collect();
    if values
        .iter()
        .any(|value| value.trim().eq_ignore_ascii_case(expected))
    {
        return RecordState::Found;
    }
    let note = if values
        .iter()
        .any(|value| value.trim().starts_with(CHALLENGE_PREFIX))
    {
        "a challenge issued for another project or hostname is never accepted"
    } else {
        "no value is this project's challenge"
    };
    RecordState::WrongValue {
        found: values,
        note: note.into(),
    }
}

/// No CNAME at `name`: an address record there is what blocks it (a
/// name with an A or AAAA record cannot also hold a CNAME).
async fn address_instead(resolver: &TokioResolver, name: &str, target: &str) -> RecordState {
    let mut found = Vec::new();
    for record_type in [RecordType::A, RecordType::AAAA] {
        if let Ok(Some(data)) = answers(resolver, name, record_type).await {
            found.extend(data.iter().map(|d| format!("{record_type} {d}")));
        }
    }
    if found.is_empty() {
        return RecordState::Missing;
    }
    RecordState::WrongValue {
        found,
        note: format!(
            "an address record sits where the CNAME to {target} belongs; replace it with the CNAME"
        ),
    }
}

async fn check_cname(resolver: &TokioResolver, hostname: &str, target: &str) -> RecordState {
    let target = normal_name(target);
    let mut chain: Vec<String> = Vec::new();
    let mut name = normal_name(hostname);
    for _ in 0..MAX_CNAME_HOPS {
        let next = match answers(resolver, &name, RecordType::CNAME).await {
            Ok(Some(data)) => data.iter().find_map(|d| match d {
                RData::CNAME(cname) => Some(normal_name(&cname.0.to_string())),
                _ => None,
            }),
            Ok(None) => None,
            Err(reason) => return RecordState::LookupFailed { reason },
        };
        match next {
            Some(next) if next == target => return RecordState::Found,
            Some(next) => {
                chain.push(next.clone());
                name = next;
            }
            None if chain.is_empty() => return address_instead(resolver, &name, &target).await,
            None => {
                return RecordState::WrongValue {
                    found: chain,
                    note: "the CNAME chain ends elsewhere".into(),
                };
            }
        }
    }
    RecordState::WrongValue {
        found: chain,
        note: format!("more than {MAX_CNAME_HOPS} CNAMEs: a loop or an overly long chain"),
    }
}

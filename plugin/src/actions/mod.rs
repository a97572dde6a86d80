//! The three actions and [`invoke`], the entry point the component exports.
//!
//! The project's website is a mapping document (`site/mapping`) that points
//! at a provider website whose id is derived from the project and the domain.
//! When the domain changes the id changes: a new website is created and the
//! old one is left on the provider with its history (nothing is deleted).

mod configuration;
mod input;
mod mapping;

use extension_guest::action::{Json, NoInput};
use serde::Serialize;
use uuid::Uuid;

use crate::calendar::{self, DAY_MS};
use crate::domain::{normalize_domain, normalize_name};
use crate::error::{ActionError, ErrorCode};
use crate::host::{DocumentError, Host, LogLevel, Precondition};
use crate::provider::{Created, Provider};
use crate::website_id::website_id;

pub use configuration::{Configuration, Origins};
pub use input::{ProvisionInput, StatsInput};
pub use mapping::Mapping;
use mapping::{document_error, read_mapping, read_stored};

pub const PROVISION: &str = "analytics.provision";
pub const CONFIGURATION: &str = "analytics.configuration";
pub const STATS: &str = "analytics.stats";

/// The document collection the manifest declares, and the mapping's id.
pub const COLLECTION: &str = "site";
pub const MAPPING_ID: &str = "mapping";

/// 2000-01-01T00:00:00Z: the earliest `start_at`/`end_at`.
pub const EARLIEST_MS: i64 = 946_684_800_000;
/// The longest statistics range.
pub const MAX_RANGE_MS: i64 = 366 * DAY_MS;
/// How far in the future `end_at` may lie.
pub const MAX_FUTURE_MS: i64 = DAY_MS;

/// Compare-and-set rounds before a provision gives up on a mapping that keeps
/// changing under it.
const MAX_PROVISION_ATTEMPTS: usize = 5;

extension_guest::actions! {
    PROVISION => |host, input: ProvisionInput| provision(host, &input).map(Json),
    CONFIGURATION => |host, NoInput| configuration(host).map(Json),
    STATS => |host, input: StatsInput| stats(host, &input).map(Json),
}

/// Runs `action` on a JSON `input` and answers a JSON output; a failure is
/// also written to the host log.
pub fn invoke<H: Host + ?Sized>(
    host: &H,
    action: &str,
    input: &str,
) -> Result<String, ActionError> {
    let result = dispatch(host, action, input);
    if let Err(e) = &result {
        let level = match e.code {
            ErrorCode::InvalidInput | ErrorCode::NotProvisioned => LogLevel::Info,
            _ => LogLevel::Warn,
        };
        host.log(level, &format!("{action} failed: {e}"));
    }
    result
}

fn to_json<T: Serialize>(value: &T) -> String {
    // Plain structs of strings and integers always serialize.
    serde_json::to_string(value).unwrap_or_default()
}
/// Makes the provider's website match `name` and `domain`: create it when
/// missing, rename it when it differs, nothing otherwise.
fn ensure_website<H: Host + ?Sized>(
    provider: &Provider<'_, H>,
    id: Uuid,
    name: &str,
    domain: &str,
) -> Result<(), ActionError> {
    let existing = match provider.find_website(id)? {
        Some(existing) => existing,
        None => match provider.create_website(id, name, domain)? {
            Created::Created => return Ok(()),
            Created::Existing(existing) => existing,
        },
    };
    if existing.name != name || existing.domain != domain {
        provider.update_website(id, name, domain)?;
    }
    Ok(())
}

/// `analytics.provision`: validate, derive the website id, converge the
/// provider's website and the mapping document (compare-and-set), answer the
/// configuration. The same input again makes no write anywhere.
pub fn provision<H: Host + ?Sized>(
    host: &H,
    input: &ProvisionInput,
) -> Result<Configuration, ActionError> {
    let name = normalize_name(&input.name)?;
    let domain = normalize_domain(&input.domain)?;
    let invocation = host.invocation();
    let origins = Origins::from_settings(&invocation.settings)?;
    let id = website_id(&invocation.project_id, &domain);
    let provider = Provider::new(host);

    for _ in 0..MAX_PROVISION_ATTEMPTS {
        let stored = read_stored(host)?;
        ensure_website(&provider, id, &name, &domain)?;
        let previous = stored.as_ref().and_then(|s| s.mapping.as_ref().ok());
        if let (Some(stored), Some(previous)) = (&stored, previous)
            && previous.website_id == id
            && previous.name == name
            && previous.domain == domain
        {
            return Ok(Configuration::new(
                &invocation.project_id,
                previous,
                stored.revision,
                &origins,
            ));
        }
        let now = host.now_ms();
        let mapping = Mapping {
            website_id: id,
            name: name.clone(),
            domain: domain.clone(),
            created_at: previous
                .filter(|p| p.website_id == id)
                .map_or(now, |p| p.created_at),
            updated_at: now,
        };
        let condition = stored
            .as_ref()
            .map_or(Precondition::Absent, |s| Precondition::Revision(s.revision));
        match host.put_document(COLLECTION, MAPPING_ID, &to_json(&mapping), condition) {
            Ok(revision) => {
                if let Some(previous) = previous.filter(|p| p.website_id != id) {
                    host.log(
                        LogLevel::Info,
                        &format!(
                            "the project moved from website {} to {id}; the old website stays on the provider",
                            previous.website_id
                        ),
                    );
                }
                return Ok(Configuration::new(
                    &invocation.project_id,
                    &mapping,
                    revision,
                    &origins,
                ));
            }
            Err(DocumentError::Conflict(_)) => {
                host.log(
                    LogLevel::Debug,
                    "the site mapping changed concurrently; converging again",
                );
            }
            Err(e) => return Err(document_error(e)),
        }
    }
    Err(ActionError::internal(
        "the site mapping kept changing during the provision; try again",
    ))
}

/// `analytics.configuration`: the stored mapping plus script, origins and
/// dashboard URL.
pub fn configuration<H: Host + ?Sized>(host: &H) -> Result<Configuration, ActionError> {
    let invocation = host.invocation();
    let (mapping, revision) = read_mapping(host)?;
    let origins = Origins::from_settings(&invocation.settings)?;
    Ok(Configuration::new(
        &invocation.project_id,
        &mapping,
        revision,
        &origins,
    ))
}

/// One UTC day of the stats series.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StatsDay {
    /// `YYYY-MM-DD`.
    pub date: String,
    pub pageviews: u64,
    pub visitors: u64,
}

/// The stats output (`definitions.stats` of the manifest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub website_id: Uuid,
    pub start_at: i64,
    pub end_at: i64,
    pub visitors: u64,
    pub visits: u64,
    pub pageviews: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bounces: Option<u64>,
    /// Seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub totaltime: Option<u64>,
    /// Every UTC day the range touches, zero-filled; only with `unit=day`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series: Option<Vec<StatsDay>>,
}

/// `analytics.stats`: totals of `[start_at, end_at)` and, with `unit=day`, a
/// zero-filled series of every UTC day the range touches.
pub fn stats<H: Host + ?Sized>(host: &H, input: &StatsInput) -> Result<Stats, ActionError> {
    input.validate(host.now_ms())?;
    let (mapping, _) = read_mapping(host)?;
    let provider = Provider::new(host);
    let id = mapping.website_id;
    let totals = provider.stats(id, input.start_at, input.end_at)?;
    let series = if input.daily {
        let counts = provider.daily(id, input.start_at, input.end_at)?;
        let first = calendar::day_of_ms(input.start_at);
        let last = calendar::day_of_ms(input.end_at - 1);
        Some(
            (first..=last)
                .map(|day| {
                    let c = counts.get(&day).copied().unwrap_or_default();
                    StatsDay {
                        date: calendar::format_day(day),
                        pageviews: c.pageviews,
                        visitors: c.visitors,
                    }
                })
                .collect(),
        )
    } else {
        None
    };
    Ok(Stats {
        website_id: id,
        start_at: input.start_at,
        end_at: input.end_at,
        visitors: totals.visitors,
        visits: totals.visits,
        pageviews: totals.pageviews,
        bounces: totals.bounces,
        totaltime: totals.totaltime,
        series,
    })
}

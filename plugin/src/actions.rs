//! The three actions and [`invoke`], the entry point the component exports.
//!
//! The project's website is a mapping document (`site/mapping`) that points
//! at a provider website whose id is derived from the project and the domain.
//! When the domain changes the id changes: a new website is created and the
//! old one is left on the provider with its history (nothing is deleted).

use extension_guest::action::{self, Input, Json, NoInput};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::answers;
use crate::calendar::{self, DAY_MS};
use crate::domain::{normalize_domain, normalize_name};
use crate::error::{ActionError, ErrorCode};
use crate::host::{DocumentError, Host, LogLevel, Precondition, ProjectSettings};
use crate::provider::{Created, Provider};
use crate::website_id::website_id;

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

/// Input of `analytics.provision`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProvisionInput {
    pub name: String,
    pub domain: String,
}

impl Input for ProvisionInput {
    fn from_json(input: &str) -> Result<Self, ActionError> {
        let object = action::object(input, &["name", "domain"])?;
        Ok(Self {
            name: action::required_string(&object, "name")?,
            domain: action::required_string(&object, "domain")?,
        })
    }
}

/// Input of `analytics.stats`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatsInput {
    pub start_at: i64,
    pub end_at: i64,
    /// Add a per-UTC-day series.
    pub daily: bool,
}

impl Input for StatsInput {
    fn from_json(input: &str) -> Result<Self, ActionError> {
        Self::parse(input)
    }
}

impl StatsInput {
    /// The fields `analytics.stats` takes.
    pub const FIELDS: &[&str] = &["start_at", "end_at", "unit"];

    /// Reads the input straight into its fields (every stats call runs
    /// this, so no JSON tree is built); the errors and their order are
    /// those of the other actions' [`action::object`] reading.
    pub fn parse(input: &str) -> Result<Self, ActionError> {
        let Ok(fields) = serde_json::from_str::<StatsFields>(input) else {
            return Err(ActionError::invalid_input(action::NOT_AN_OBJECT));
        };
        if let Some(unknown) = &fields.unknown {
            return Err(action::unknown_field(unknown, Self::FIELDS));
        }
        let daily = match fields.unit {
            InputField::Absent | InputField::Null => false,
            InputField::Day => true,
            _ => {
                return Err(ActionError::invalid_input(
                    "unit: must be \"day\" (or left out)",
                ));
            }
        };
        Ok(Self {
            start_at: fields.start_at.ms("start_at")?,
            end_at: fields.end_at.ms("end_at")?,
            daily,
        })
    }

    /// Order, length and bounds of the range, against `now_ms`.
    pub fn validate(&self, now_ms: i64) -> Result<(), ActionError> {
        for (key, value) in [("start_at", self.start_at), ("end_at", self.end_at)] {
            if value < EARLIEST_MS {
                return Err(ActionError::invalid_input(format!(
                    "{key}: must not be before 2000-01-01T00:00:00Z ({EARLIEST_MS})"
                )));
            }
        }
        if self.end_at <= self.start_at {
            return Err(ActionError::invalid_input("end_at: must be after start_at"));
        }
        if self.end_at - self.start_at > MAX_RANGE_MS {
            return Err(ActionError::new(
                ErrorCode::InvalidInput,
                format!("end_at: the range must cover at most 366 days ({MAX_RANGE_MS} ms)"),
            ));
        }
        if self.end_at > now_ms.saturating_add(MAX_FUTURE_MS) {
            return Err(ActionError::invalid_input(
                "end_at: must not be more than one day in the future",
            ));
        }
        Ok(())
    }
}

/// One field of the stats input as read, before its rule applies.
#[derive(Default)]
enum InputField {
    #[default]
    Absent,
    Null,
    /// A JSON integer that fits in an `i64`.
    Integer(i64),
    /// The string `"day"`.
    Day,
    /// Anything else.
    Other,
}

impl InputField {
    /// The value of a required Unix-milliseconds field.
    fn ms(self, key: &str) -> Result<i64, ActionError> {
        match self {
            InputField::Integer(ms) => Ok(ms),
            InputField::Absent | InputField::Null => Err(action::missing(key)),
            _ => Err(ActionError::invalid_input(format!(
                "{key}: must be an integer number of Unix milliseconds"
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for InputField {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(InputFieldVisitor)
    }
}

struct InputFieldVisitor;

impl<'de> serde::de::Visitor<'de> for InputFieldVisitor {
    type Value = InputField;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_i64<E>(self, v: i64) -> Result<InputField, E> {
        Ok(InputField::Integer(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<InputField, E> {
        Ok(i64::try_from(v).map_or(InputField::Other, InputField::Integer))
    }

    fn visit_f64<E>(self, _: f64) -> Result<InputField, E> {
        Ok(InputField::Other)
    }

    fn visit_bool<E>(self, _: bool) -> Result<InputField, E> {
        Ok(InputField::Other)
    }

    fn visit_str<E>(self, v: &str) -> Result<InputField, E> {
        Ok(if v == "day" {
            InputField::Day
        } else {
            InputField::Other
        })
    }

    fn visit_unit<E>(self) -> Result<InputField, E> {
        Ok(InputField::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<InputField, A::Error> {
        answers::drain_seq(seq)?;
        Ok(InputField::Other)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<InputField, A::Error> {
        answers::drain_map(map)?;
        Ok(InputField::Other)
    }
}

/// The stats input as read: a key sent twice keeps its last value, and of
/// the unknown keys the first in sorted order is kept (as a JSON object
/// read into a sorted map would report it).
#[derive(Default)]
struct StatsFields {
    start_at: InputField,
    end_at: InputField,
    unit: InputField,
    unknown: Option<String>,
}

impl<'de> Deserialize<'de> for StatsFields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(StatsFieldsVisitor)
    }
}

struct StatsFieldsVisitor;

impl<'de> serde::de::Visitor<'de> for StatsFieldsVisitor {
    type Value = StatsFields;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<StatsFields, A::Error> {
        let mut fields = StatsFields::default();
        while let Some(key) = map.next_key::<StatsKey>()? {
            let slot = match key {
                StatsKey::StartAt => &mut fields.start_at,
                StatsKey::EndAt => &mut fields.end_at,
                StatsKey::Unit => &mut fields.unit,
                StatsKey::Unknown(key) => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    if fields.unknown.as_ref().is_none_or(|first| key < *first) {
                        fields.unknown = Some(key);
                    }
                    continue;
                }
            };
            *slot = map.next_value()?;
        }
        Ok(fields)
    }
}

/// A key of the stats input; only an unknown one is copied.
enum StatsKey {
    StartAt,
    EndAt,
    Unit,
    Unknown(String),
}

impl<'de> Deserialize<'de> for StatsKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl serde::de::Visitor<'_> for KeyVisitor {
            type Value = StatsKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E>(self, v: &str) -> Result<StatsKey, E> {
                Ok(match v {
                    "start_at" => StatsKey::StartAt,
                    "end_at" => StatsKey::EndAt,
                    "unit" => StatsKey::Unit,
                    other => StatsKey::Unknown(other.to_owned()),
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// The stored mapping of a project to its provider website.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub website_id: Uuid,
    pub name: String,
    pub domain: String,
    /// When this website id was first mapped (Unix ms).
    pub created_at: i64,
    /// When the mapping was last written (Unix ms).
    pub updated_at: i64,
}

/// A mapping document as read: its revision and body (`Err` when the body is
/// not a mapping, which a provision repairs).
struct Stored {
    revision: u64,
    mapping: Result<Mapping, ()>,
}

fn document_error(error: DocumentError) -> ActionError {
    match error {
        DocumentError::Conflict(_) => {
            ActionError::internal("the site mapping changed during the request; try again")
        }
        DocumentError::Invalid(_) => {
            ActionError::internal("the document service refused the site mapping as invalid")
        }
        DocumentError::Denied(_) => ActionError::new(
            ErrorCode::Forbidden,
            "the host denied access to the project's documents (grant or documents capability missing)",
        ),
        DocumentError::LimitExceeded(_) => ActionError::new(
            ErrorCode::LimitExceeded,
            "the document service's size or call limit was reached",
        ),
        DocumentError::Unavailable(_) => {
            ActionError::internal("the document service is unavailable; try again")
        }
    }
}

fn read_stored<H: Host + ?Sized>(host: &H) -> Result<Option<Stored>, ActionError> {
    let document = host
        .get_document(COLLECTION, MAPPING_ID)
        .map_err(document_error)?;
    Ok(document.map(|d| Stored {
        revision: d.revision,
        mapping: serde_json::from_str(&d.body).map_err(|_| ()),
    }))
}

/// The mapping for reading actions: `not_provisioned` when absent.
fn read_mapping<H: Host + ?Sized>(host: &H) -> Result<(Mapping, u64), ActionError> {
    match read_stored(host)? {
        None => Err(ActionError::new(
            ErrorCode::NotProvisioned,
            "the project has no analytics website yet; run analytics.provision with a name and a domain first",
        )),
        Some(Stored {
            revision,
            mapping: Ok(mapping),
        }) => Ok((mapping, revision)),
        Some(Stored {
            mapping: Err(()), ..
        }) => Err(ActionError::internal(
            "the stored site mapping is unreadable; run analytics.provision again to repair it",
        )),
    }
}

/// The provider and tracking origins of the invoking project.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origins {
    pub provider: String,
    pub tracking_override: Option<String>,
}

fn parse_origin(setting: &str, value: &str) -> Result<String, ActionError> {
    let origin = value.trim().trim_end_matches('/');
    let host = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    match host {
        Some(host)
            if !host.is_empty()
                && !host.contains(['/', '?', '#', '@', '"', '\'', '<', '>', '\\'])
                && !host.chars().any(|c| c.is_whitespace() || c.is_control()) =>
        {
            Ok(origin.to_owned())
        }
        _ => Err(ActionError::new(
            ErrorCode::ProviderUnavailable,
            format!(
                "the project's {setting} setting is not an http(s) origin; an operator must correct it"
            ),
        )),
    }
}

impl Origins {
    pub fn from_settings(settings: &ProjectSettings) -> Result<Self, ActionError> {
        let provider = match settings.provider_origin.as_deref().map(str::trim) {
            Some(origin) if !origin.is_empty() => parse_origin("provider-origin", origin)?,
            _ => {
                return Err(ActionError::new(
                    ErrorCode::ProviderUnavailable,
                    "the project's provider-origin setting is not set; an operator must configure the analytics provider",
                ));
            }
        };
        let tracking_override = match settings.tracking_origin.as_deref().map(str::trim) {
            Some(origin) if !origin.is_empty() => Some(parse_origin("tracking-origin", origin)?),
            _ => None,
        };
        Ok(Self {
            provider,
            tracking_override,
        })
    }

    /// Where the script is served and events are sent.
    pub fn tracking(&self) -> &str {
        self.tracking_override.as_deref().unwrap_or(&self.provider)
    }
}

/// The configuration output (`definitions.configuration` of the manifest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Configuration {
    pub project_id: String,
    pub website_id: Uuid,
    pub name: String,
    pub domain: String,
    pub revision: u64,
    pub tracking_script: String,
    pub script_url: String,
    pub domain_restriction: Vec<String>,
    pub tracking_origin: String,
    pub dashboard_url: String,
}

/// Escapes a value for a double-quoted HTML attribute.
fn attribute(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

impl Configuration {
    pub fn new(project_id: &str, mapping: &Mapping, revision: u64, origins: &Origins) -> Self {
        let tracking_origin = origins.tracking().to_owned();
        let script_url = format!("{tracking_origin}/script.js");
        let host_url = origins
            .tracking_override
            .as_deref()
            .map(|origin| format!(" data-host-url=\"{}\"", attribute(origin)))
            .unwrap_or_default();
        let tracking_script = format!(
            "<script defer src=\"{}\" data-website-id=\"{}\" data-domains=\"{}\"{host_url}></script>",
            attribute(&script_url),
            mapping.website_id,
            attribute(&mapping.domain),
        );
        Self {
            project_id: project_id.to_owned(),
            website_id: mapping.website_id,
            name: mapping.name.clone(),
            domain: mapping.domain.clone(),
            revision,
            tracking_script,
            script_url,
            domain_restriction: vec![mapping.domain.clone()],
            tracking_origin,
            dashboard_url: format!("{}/websites/{}", origins.provider, mapping.website_id),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn attribute_values_are_escaped() {
        assert_eq!(
            attribute(r#"a&b"c'd<e>f"#),
            "a&amp;b&quot;c&#39;d&lt;e&gt;f"
        );
        assert_eq!(attribute("www.example.com"), "www.example.com");
    }

    #[test]
    fn origins_come_from_the_project_settings() {
        let settings = |provider: Option<&str>, tracking: Option<&str>| ProjectSettings {
            provider_origin: provider.map(str::to_owned),
            tracking_origin: tracking.map(str::to_owned),
        };
        let plain =
            Origins::from_settings(&settings(Some("https://a.example.net/"), None)).unwrap();
        assert_eq!(plain.tracking(), "https://a.example.net");
        let blank_override =
            Origins::from_settings(&settings(Some("https://a.example.net"), Some(" "))).unwrap();
        assert_eq!(blank_override.tracking_override, None);
        let custom = Origins::from_settings(&settings(
            Some("https://a.example.net"),
            Some("https://t.example.com"),
        ))
        .unwrap();
        assert_eq!(
            (custom.provider.as_str(), custom.tracking()),
            ("https://a.example.net", "https://t.example.com")
        );
        for bad in [
            "",
            "ftp://a.example.net",
            "https://",
            "https://a.example.net/path",
            "https://user@a.example.net",
        ] {
            let err = Origins::from_settings(&settings(Some(bad), None)).unwrap_err();
            assert_eq!(err.code, ErrorCode::ProviderUnavailable, "{bad:?}");
        }
    }

    /// The stats input read as a JSON tree, the way the other actions read
    /// theirs: the oracle of the typed reader.
    fn parse_stats_as_tree(input: &str) -> Result<StatsInput, ActionError> {
        let object = action::object(input, StatsInput::FIELDS)?;
        let daily = match object.get("unit") {
            None | Some(Value::Null) => false,
            Some(Value::String(unit)) if unit == "day" => true,
            Some(_) => {
                return Err(ActionError::invalid_input(
                    "unit: must be \"day\" (or left out)",
                ));
            }
        };
        let ms = |key: &str| match object.get(key) {
            None | Some(Value::Null) => {
                Err(ActionError::invalid_input(format!("{key}: is required")))
            }
            Some(value) => value.as_i64().ok_or_else(|| {
                ActionError::invalid_input(format!(
                    "{key}: must be an integer number of Unix milliseconds"
                ))
            }),
        };
        Ok(StatsInput {
            start_at: ms("start_at")?,
            end_at: ms("end_at")?,
            daily,
        })
    }

    fn outcome(result: Result<StatsInput, ActionError>) -> Result<StatsInput, (ErrorCode, String)> {
        result.map_err(|e| (e.code, e.message))
    }

    #[test]
    fn the_typed_stats_reader_agrees_with_the_tree_reader_on_odd_inputs() {
        for input in [
            r#"{"start_at":1,"end_at":2}"#,
            r#"{"start_at":1,"end_at":2,"unit":"day"}"#,
            r#"{"start_at":1,"end_at":2,"unit":null}"#,
            r#"{"start_at":1,"end_at":2,"unit":"week"}"#,
            r#"{"start_at":1,"end_at":2,"unit":1}"#,
            r#"{"start_at":1.5,"end_at":2}"#,
            r#"{"start_at":1e3,"end_at":2}"#,
            r#"{"start_at":9223372036854775808,"end_at":2}"#,
            r#"{"start_at":-9223372036854775808,"end_at":2}"#,
            r#"{"start_at":"1","end_at":2}"#,
            r#"{"start_at":[1],"end_at":{"a":1}}"#,
            r#"{"start_at":null}"#,
            r#"{"end_at":1}"#,
            r#"{"start_at":1,"start_at":"x","end_at":2}"#,
            r#"{"start_at":"x","start_at":1,"end_at":2}"#,
            r#"{"zz":1,"aa":2,"start_at":1}"#,
            r#"{"unit":"bad","b":1,"aé":2,"a":3}"#,
            r#"{"start_at":5,"end_at":6}"#,
            "{}",
            "[]",
            "null",
            "\"day\"",
            "",
            "{",
            r#"{"start_at":1,"end_at":2} x"#,
        ] {
            assert_eq!(
                outcome(StatsInput::parse(input)),
                outcome(parse_stats_as_tree(input)),
                "{input}"
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

        /// Objects of known, unknown and repeated keys with values of every
        /// kind read the same both ways.
        #[test]
        fn the_typed_stats_reader_agrees_with_the_tree_reader(
            entries in proptest::collection::vec(
                (
                    proptest::sample::select(vec!["start_at", "end_at", "unit", "aa", "zz", "b\\u00e9", "start_\\u0061t"]),
                    proptest::sample::select(vec![
                        "null", "0", "-1", "1795262400000", "9223372036854775807",
                        "9223372036854775808", "1.0", "2e3", "\"day\"", "\"d\\u0061y\"",
                        "\"x\"", "true", "[]", "[1,{}]", "{}", "{\"a\":[null]}",
                    ]),
                ),
                0..6,
            )
        ) {
            let body: Vec<String> = entries.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let input = format!("{{{}}}", body.join(","));
            proptest::prop_assert_eq!(
                outcome(StatsInput::parse(&input)),
                outcome(parse_stats_as_tree(&input)),
                "{}", input
            );
        }
    }

    #[test]
    fn the_range_limit_is_366_days_to_the_millisecond() {
        let now = 1_795_262_400_000;
        let range = |start_at, end_at| StatsInput {
            start_at,
            end_at,
            daily: false,
        };
        assert!(range(now - MAX_RANGE_MS, now).validate(now).is_ok());
        assert!(range(now - MAX_RANGE_MS - 1, now).validate(now).is_err());
        assert!(range(now, now + MAX_FUTURE_MS).validate(now).is_ok());
        assert!(range(now, now + MAX_FUTURE_MS + 1).validate(now).is_err());
    }
}

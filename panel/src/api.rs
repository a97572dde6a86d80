//! The host API as the panel sees it: response shapes (field names as in
//! `manifest.toml`'s `definitions`), the session message, how an error answer
//! maps to what the panel shows, and the seven-day range it asks for.
//!
//! Everything here is plain Rust so it is tested natively; the browser-only
//! transport lives in `app`.

use serde::Deserialize;

/// `definitions.configuration`: the project's website configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Configuration {
    pub project_id: String,
    pub website_id: String,
    pub name: String,
    pub domain: String,
    pub revision: u64,
    pub tracking_script: String,
    pub script_url: String,
    pub domain_restriction: Vec<String>,
    pub tracking_origin: String,
    pub dashboard_url: String,
}

/// `definitions.stats`: totals for a range, with the per-day series when
/// asked for with `unit=day`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Stats {
    pub website_id: String,
    pub start_at: i64,
    pub end_at: i64,
    pub visitors: u64,
    pub visits: u64,
    pub pageviews: u64,
    #[serde(default)]
    pub bounces: Option<u64>,
    #[serde(default)]
    pub totaltime: Option<u64>,
    #[serde(default)]
    pub series: Vec<DayPoint>,
}

/// One UTC day of the series.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DayPoint {
    /// `YYYY-MM-DD`.
    pub date: String,
    pub pageviews: u64,
    pub visitors: u64,
}

/// Body of `POST /site`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SiteInput {
    pub name: String,
    pub domain: String,
}

/// The one error shape of every surface: `{"error":{"code","message"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

/// What went wrong with one API call, already sorted by what the panel does
/// about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// 401 `unauthenticated`: the session expired; ask the console for a new
    /// one and retry once.
    Unauthenticated,
    /// 404 `not_provisioned`: no website yet; show the setup form.
    NotProvisioned,
    /// 422 `invalid_input`: the message names the field first.
    Invalid(String),
    /// 409 `stale_generation`: the extension was upgraded or its access
    /// changed; only a reload helps.
    StaleGeneration,
    /// 502 `provider_unavailable`: the analytics provider is down; retrying
    /// later may help.
    ProviderUnavailable,
    /// Any other answer (`forbidden`, `provider_rejected`, ...): shown with
    /// the host's message, which never carries a secret.
    Other { code: String, message: String },
    /// The request did not get an answer at all.
    Network,
}

impl Failure {
    /// Sorts a non-2xx answer by its status and body.
    pub fn from_response(status: u16, body: &str) -> Failure {
        let detail = serde_json::from_str::<ErrorBody>(body)
            .ok()
            .map(|b| b.error);
        let code = detail.as_ref().map(|d| d.code.as_str());
        match (status, code) {
            (401, _) | (_, Some("unauthenticated")) => Failure::Unauthenticated,
            (_, Some("not_provisioned")) => Failure::NotProvisioned,
            (_, Some("stale_generation")) => Failure::StaleGeneration,
            (_, Some("provider_unavailable")) => Failure::ProviderUnavailable,
            (_, Some("invalid_input")) => {
                Failure::Invalid(detail.map(|d| d.message).unwrap_or_default())
            }
            (_, _) => match detail {
                Some(d) => Failure::Other {
                    code: d.code,
                    message: d.message,
                },
                None => Failure::Other {
                    code: format!("http_{status}"),
                    message: format!("The console answered with HTTP status {status}."),
                },
            },
        }
    }

    /// The sentence shown for failures that have no state of their own.
    pub fn message(&self) -> String {
        match self {
            Failure::Unauthenticated => {
                "Your console session has expired. Reload the page to sign in again.".into()
            }
            Failure::NotProvisioned => "Website analytics is not set up yet.".into(),
            Failure::Invalid(message) => message.clone(),
            Failure::StaleGeneration => {
                "This extension was updated or its access changed. Reload to continue.".into()
            }
            Failure::ProviderUnavailable => {
                "The analytics provider is not reachable right now. Try again in a moment.".into()
            }
            Failure::Other { message, .. } => message.clone(),
            Failure::Network => {
                "The console could not be reached. Check your connection and try again.".into()
            }
        }
    }
}

/// The `platform.session` message the console posts into the iframe.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub token: String,
    pub generation: u64,
    pub api_base: String,
    pub expires_at: i64,
}

/// Messages the panel accepts from the console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMessage {
    Session(Session),
}

impl HostMessage {
    /// Reads a message posted by the console; anything else is ignored.
    pub fn parse(json: &str) -> Option<HostMessage> {
        #[derive(Deserialize)]
        struct Tagged {
            #[serde(rename = "type")]
            kind: String,
        }
        let tagged: Tagged = serde_json::from_str(json).ok()?;
        match tagged.kind.as_str() {
            "platform.session" => serde_json::from_str(json).ok().map(HostMessage::Session),
            _ => None,
        }
    }
}

/// Messages the panel posts to the console (`window.parent`).
pub mod outgoing {
    pub const READY: &str = r#"{"type":"platform.ready"}"#;
    pub const SESSION_EXPIRED: &str = r#"{"type":"platform.session-expired"}"#;
    pub const RELOAD: &str = r#"{"type":"platform.reload"}"#;

    /// The height of the panel's content in CSS pixels, sent whenever it
    /// changes: the console sizes the iframe to it (within its own bounds),
    /// so the panel never scrolls inside the frame.
    pub fn resize(height: u32) -> String {
        format!(r#"{{"type":"platform.resize","height":{height}}}"#)
    }
}

/// Inline messages of the setup form.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FormErrors {
    pub name: Option<String>,
    pub domain: Option<String>,
    /// A message that names no field of the form.
    pub form: Option<String>,
}

impl FormErrors {
    pub fn is_empty(&self) -> bool {
        self.name.is_none() && self.domain.is_none() && self.form.is_none()
    }

    /// Places a 422 message (`"domain: must be a hostname ..."`) under the
    /// field it names, or at the form level when it names no field here.
    pub fn from_invalid_input(message: &str) -> FormErrors {
        let mut errors = FormErrors::default();
        match message.split_once(':') {
            Some((field, rule)) if field.trim() == "name" => {
                errors.name = Some(sentence(rule));
            }
            Some((field, rule)) if field.trim() == "domain" => {
                errors.domain = Some(sentence(rule));
            }
            _ => errors.form = Some(sentence(message)),
        }
        errors
    }

    /// The form's messages after a failed submit that is not a whole-panel
    /// state: a 422 goes under its field, anything else above the buttons.
    pub fn from_failure(failure: &Failure) -> FormErrors {
        match failure {
            Failure::Invalid(message) => FormErrors::from_invalid_input(message),
            other => FormErrors {
                form: Some(other.message()),
                ..FormErrors::default()
            },
        }
    }

    /// The obvious rules checked before asking the API (which stays the
    /// authority on everything else).
    pub fn check(input: &SiteInput) -> FormErrors {
        FormErrors {
            name: input
                .name
                .trim()
                .is_empty()
                .then(|| "Enter a website name.".to_string()),
            domain: input
                .domain
                .trim()
                .is_empty()
                .then(|| "Enter the public domain of your site.".to_string()),
            form: None,
        }
    }
}

/// `" must be 1 to 100 characters"` → `"Must be 1 to 100 characters."`
fn sentence(text: &str) -> String {
    let text = text.trim();
    let mut chars = text.chars();
    let mut out: String = match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => return String::new(),
    };
    if !out.ends_with(['.', '!', '?']) {
        out.push('.');
    }
    out
}

pub const DAY_MS: i64 = 86_400_000;

/// The range the panel asks `/stats` for: the last seven UTC days, today
/// included. `start_at` is 00:00 UTC six days before today, `end_at` is now
/// (exclusive), so the daily series has seven entries and the last one is
/// today so far.
pub fn last_seven_days(now_ms: i64) -> (i64, i64) {
    let today_start = now_ms.div_euclid(DAY_MS) * DAY_MS;
    (today_start - 6 * DAY_MS, now_ms)
}

/// The stats path and query for a range.
pub fn stats_path(start_at: i64, end_at: i64) -> String {
    format!("/stats?start_at={start_at}&end_at={end_at}&unit=day")
}

/// A calendar date in the proleptic Gregorian calendar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Date {
    pub year: i64,
    pub month: u32,
    pub day: u32,
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

impl Date {
    /// Parses `YYYY-MM-DD`.
    pub fn parse(text: &str) -> Option<Date> {
        let mut parts = text.splitn(3, '-');
        let year = parts.next()?.parse().ok()?;
        let month: u32 = parts.next()?.parse().ok()?;
        let day: u32 = parts.next()?.parse().ok()?;
        ((1..=12).contains(&month) && (1..=31).contains(&day)).then_some(Date { year, month, day })
    }

    /// The UTC date of a Unix timestamp in milliseconds.
    pub fn from_unix_ms(ms: i64) -> Date {
        // Howard Hinnant's civil_from_days.
        let z = ms.div_euclid(DAY_MS) + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Date { year, month, day }
    }

    /// Days since 1970-01-01.
    fn days_since_epoch(self) -> i64 {
        // Howard Hinnant's days_from_civil.
        let year = self.year - i64::from(self.month <= 2);
        let era = year.div_euclid(400);
        let yoe = year - era * 400;
        let month = i64::from(self.month);
        let mp = if month > 2 { month - 3 } else { month + 9 };
        let doy = (153 * mp + 2) / 5 + i64::from(self.day) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }

    /// `"Mon"` .. `"Sun"`.
    pub fn weekday(self) -> &'static str {
        // 1970-01-01 was a Thursday (index 3).
        WEEKDAYS[(self.days_since_epoch() + 3).rem_euclid(7) as usize]
    }

    /// `"Nov"`.
    pub fn month_name(self) -> &'static str {
        MONTHS[(self.month - 1) as usize]
    }

    /// `"21 Nov"`.
    pub fn short(self) -> String {
        format!("{} {}", self.day, self.month_name())
    }

    /// `"Sat 21 Nov 2026"`.
    pub fn long(self) -> String {
        format!(
            "{} {} {} {}",
            self.weekday(),
            self.day,
            self.month_name(),
            self.year
        )
    }
}

/// The range as people read it, from the first to the last day of the series
/// (or of the requested range when there is no series): `"15–21 Nov 2026"`.
pub fn range_label(stats: &Stats) -> String {
    let from_series = stats
        .series
        .first()
        .zip(stats.series.last())
        .and_then(|(a, b)| Some((Date::parse(&a.date)?, Date::parse(&b.date)?)));
    let (first, last) = from_series.unwrap_or_else(|| {
        (
            Date::from_unix_ms(stats.start_at),
            Date::from_unix_ms(stats.end_at - 1),
        )
    });
    if first.year != last.year {
        format!(
            "{} {} – {} {}",
            first.short(),
            first.year,
            last.short(),
            last.year
        )
    } else if first.month != last.month {
        format!("{} – {} {}", first.short(), last.short(), last.year)
    } else {
        format!("{}–{} {}", first.day, last.short(), last.year)
    }
}

/// `12345` → `"12,345"`.
pub fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resize_message_carries_the_height_as_a_number() {
        let message: serde_json::Value = serde_json::from_str(&outgoing::resize(1234)).unwrap();
        assert_eq!(
            message,
            serde_json::json!({"type": "platform.resize", "height": 1234})
        );
    }

    #[test]
    fn error_answers_are_sorted_by_code() {
        let body = |code: &str| format!(r#"{{"error":{{"code":"{code}","message":"m"}}}}"#);
        assert_eq!(
            Failure::from_response(401, &body("unauthenticated")),
            Failure::Unauthenticated
        );
        assert_eq!(
            Failure::from_response(404, &body("not_provisioned")),
            Failure::NotProvisioned
        );
        assert_eq!(
            Failure::from_response(409, &body("stale_generation")),
            Failure::StaleGeneration
        );
        assert_eq!(
            Failure::from_response(502, &body("provider_unavailable")),
            Failure::ProviderUnavailable
        );
        assert_eq!(
            Failure::from_response(422, &body("invalid_input")),
            Failure::Invalid("m".into())
        );
        assert_eq!(
            Failure::from_response(502, &body("provider_rejected")),
            Failure::Other {
                code: "provider_rejected".into(),
                message: "m".into()
            }
        );
        assert_eq!(
            Failure::from_response(403, &body("forbidden")),
            Failure::Other {
                code: "forbidden".into(),
                message: "m".into()
            }
        );
    }

    #[test]
    fn a_body_that_is_not_the_error_shape_still_gives_a_message() {
        let failure = Failure::from_response(500, "<html>oops</html>");
        assert_eq!(
            failure,
            Failure::Other {
                code: "http_500".into(),
                message: "The console answered with HTTP status 500.".into()
            }
        );
        assert_eq!(
            Failure::from_response(401, ""),
            Failure::Unauthenticated,
            "a bare 401 is an expired session"
        );
    }

    #[test]
    fn invalid_input_lands_under_the_field_it_names() {
        assert_eq!(
            FormErrors::from_invalid_input(
                "domain: must be a hostname without scheme, path or port"
            ),
            FormErrors {
                domain: Some("Must be a hostname without scheme, path or port.".into()),
                ..FormErrors::default()
            }
        );
        assert_eq!(
            FormErrors::from_invalid_input("name: must be 1 to 100 characters"),
            FormErrors {
                name: Some("Must be 1 to 100 characters.".into()),
                ..FormErrors::default()
            }
        );
        assert_eq!(
            FormErrors::from_invalid_input("body: must be a JSON object"),
            FormErrors {
                form: Some("Body: must be a JSON object.".into()),
                ..FormErrors::default()
            }
        );
        assert_eq!(
            FormErrors::from_invalid_input("request is too large"),
            FormErrors {
                form: Some("Request is too large.".into()),
                ..FormErrors::default()
            }
        );
    }

    #[test]
    fn empty_fields_are_caught_before_the_api_is_asked() {
        let errors = FormErrors::check(&SiteInput {
            name: "  ".into(),
            domain: String::new(),
        });
        assert!(errors.name.is_some() && errors.domain.is_some());
        assert!(
            FormErrors::check(&SiteInput {
                name: "Shop".into(),
                domain: "shop.example".into()
            })
            .is_empty()
        );
    }

    #[test]
    fn session_messages_are_read_and_others_ignored() {
        let msg = r#"{"type":"platform.session","token":"t0k","generation":7,
            "apiBase":"http://host/v1/plugins/managed-analytics/projects/p1/api",
            "projectId":"p1","expiresAt":1795000000000}"#;
        assert_eq!(
            HostMessage::parse(msg),
            Some(HostMessage::Session(Session {
                token: "t0k".into(),
                generation: 7,
                api_base: "http://host/v1/plugins/managed-analytics/projects/p1/api".into(),
                expires_at: 1_795_000_000_000,
            }))
        );
        assert_eq!(HostMessage::parse(r#"{"type":"something.else"}"#), None);
        assert_eq!(
            HostMessage::parse(r#"{"type":"platform.session","token":1}"#),
            None
        );
        assert_eq!(HostMessage::parse("not json"), None);
    }

    #[test]
    fn the_range_is_seven_utc_days_ending_now() {
        // 2026-11-21T05:25:00Z
        let now = 1_795_238_700_000;
        let (start, end) = last_seven_days(now);
        assert_eq!(end, now);
        assert_eq!(start % DAY_MS, 0);
        assert_eq!(
            Date::from_unix_ms(start),
            Date {
                year: 2026,
                month: 11,
                day: 15
            }
        );
        assert_eq!(
            stats_path(start, end),
            "/stats?start_at=1794700800000&end_at=1795238700000&unit=day"
        );
    }

    #[test]
    fn dates_round_trip_and_know_their_weekday() {
        for ms in [0, 951_782_400_000, 1_795_238_700_000, -86_400_000] {
            let date = Date::from_unix_ms(ms);
            assert_eq!(date.days_since_epoch(), ms.div_euclid(DAY_MS));
        }
        assert_eq!(Date::parse("2026-11-21").unwrap().weekday(), "Sat");
        assert_eq!(Date::parse("2000-02-29").unwrap().long(), "Tue 29 Feb 2000");
        assert_eq!(Date::parse("2026-13-01"), None);
        assert_eq!(Date::parse("yesterday"), None);
    }

    #[test]
    fn range_labels_collapse_what_is_shared() {
        let stats = |first: &str, last: &str| Stats {
            website_id: "w".into(),
            start_at: 0,
            end_at: 1,
            visitors: 0,
            visits: 0,
            pageviews: 0,
            bounces: None,
            totaltime: None,
            series: [first, last]
                .iter()
                .map(|d| DayPoint {
                    date: d.to_string(),
                    pageviews: 0,
                    visitors: 0,
                })
                .collect(),
        };
        assert_eq!(
            range_label(&stats("2026-11-15", "2026-11-21")),
            "15–21 Nov 2026"
        );
        assert_eq!(
            range_label(&stats("2026-10-28", "2026-11-03")),
            "28 Oct – 3 Nov 2026"
        );
        assert_eq!(
            range_label(&stats("2026-12-29", "2027-01-04")),
            "29 Dec 2026 – 4 Jan 2027"
        );
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(group_thousands(0), "0");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1000), "1,000");
        assert_eq!(group_thousands(1_234_567), "1,234,567");
    }
}

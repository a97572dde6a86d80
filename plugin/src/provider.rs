//! The Umami provider as the plugin sees it: requests through the host's
//! `provider` binding and parsers for every response shape Umami is known to
//! send (v2 `{value, prev}`, v3 flat numbers, v3.0.0-on-Postgres strings and
//! `null`s).
//!
//! Error messages describe what happened (method, path, status); they never
//! copy a response body or a binding's detail, which could hold a secret.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::answers;
use crate::error::{ActionError, ErrorCode};
use crate::host::{BindingError, Host, HttpRequest, HttpResponse, LogLevel, PROVIDER_BINDING};

/// A website as the provider stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteWebsite {
    pub name: String,
    pub domain: String,
}

/// Totals of a time range. `bounces` and `totaltime` are absent when the
/// provider did not send them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub visitors: u64,
    pub visits: u64,
    pub pageviews: u64,
    pub bounces: Option<u64>,
    pub totaltime: Option<u64>,
}

/// Page views and visitors (sessions) of one UTC day.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DayCounts {
    pub pageviews: u64,
    pub visitors: u64,
}

/// The outcome of a create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Created {
    Created,
    /// The id existed already (Umami answers a duplicate id with an empty
    /// 500); this is what a re-read found.
    Existing(RemoteWebsite),
}

fn unusable(method: &str, path: &str, what: &str) -> ActionError {
    ActionError::new(
        ErrorCode::ProviderRejected,
        format!("the provider's answer to {method} {path} was unusable: {what}"),
    )
}

/// Maps an HTTP status that is not the expected success.
pub fn status_error(method: &str, path: &str, status: u16) -> ActionError {
    match status {
        401 | 403 => ActionError::new(
            ErrorCode::ProviderRejected,
            format!(
                "the provider refused {method} {path} (HTTP {status}); the binding's credentials are wrong or lack the rights"
            ),
        ),
        408 | 429 | 500..=599 => ActionError::new(
            ErrorCode::ProviderUnavailable,
            format!("the provider answered HTTP {status} to {method} {path}"),
        ),
        _ => ActionError::new(
            ErrorCode::ProviderRejected,
            format!("the provider answered HTTP {status} to {method} {path}"),
        ),
    }
}

/// Maps a binding failure without copying the host's detail.
pub fn binding_error(method: &str, path: &str, error: &BindingError) -> ActionError {
    match error {
        BindingError::NotGranted(_) => ActionError::new(
            ErrorCode::Forbidden,
            "the extension is not granted to this project",
        ),
        BindingError::CapabilityDenied(_) => ActionError::new(
            ErrorCode::Forbidden,
            format!(
                "the host refused {method} {path}: it is outside the approved `provider` capability"
            ),
        ),
        BindingError::NotBound(_) => ActionError::new(
            ErrorCode::ProviderUnavailable,
            "the project has no `provider` binding configured; an operator must bind the analytics provider",
        ),
        BindingError::InvalidRequest(_) => ActionError::internal(format!(
            "the host refused {method} {path} as a malformed request"
        )),
        BindingError::Timeout(_) => ActionError::new(
            ErrorCode::ProviderUnavailable,
            format!("the provider did not answer {method} {path} in time"),
        ),
        BindingError::Unavailable(_) => ActionError::new(
            ErrorCode::ProviderUnavailable,
            format!("the provider could not be reached for {method} {path}"),
        ),
        BindingError::ResponseTooLarge(_) => ActionError::new(
            ErrorCode::ProviderRejected,
            format!("the provider's answer to {method} {path} exceeded the host's size limit"),
        ),
        BindingError::LimitExceeded(_) => ActionError::new(
            ErrorCode::LimitExceeded,
            "the invocation used up its budget of host calls",
        ),
    }
}

/// Parses a stats answer of any known shape.
pub fn parse_stats(body: &[u8]) -> Result<Totals, &'static str> {
    let answer: answers::StatsAnswer = answers::object(body)?;
    let required = |field: answers::Field, missing: &'static str| match field.0 {
        None => Err(missing),
        Some(read) => Ok(read?.unwrap_or(0)),
    };
    let optional = |field: answers::Field| field.0.unwrap_or(Ok(None));
    Ok(Totals {
        visitors: required(answer.visitors, "`visitors` is missing")?,
        visits: required(answer.visits, "`visits` is missing")?,
        pageviews: required(answer.pageviews, "`pageviews` is missing")?,
        bounces: optional(answer.bounces)?,
        totaltime: optional(answer.totaltime)?,
    })
}

/// Parses a `pageviews` series answer into counts per UTC day.
pub fn parse_daily(body: &[u8]) -> Result<BTreeMap<i64, DayCounts>, &'static str> {
    let answer: answers::DailyAnswer = answers::object(body)?;
    let mut days: BTreeMap<i64, DayCounts> = BTreeMap::new();
    // `visitors` picks the field (a plain branch: a function pointer here
    // is an indirect call, which a fresh instance resolves through the host).
    let mut add = |points: Vec<answers::Point>, visitors: bool| -> Result<(), &'static str> {
        for point in points {
            let day = point.day?;
            let y = point.count?.unwrap_or(0);
            let counts = days.entry(day).or_default();
            let slot = if visitors {
                &mut counts.visitors
            } else {
                &mut counts.pageviews
            };
            *slot = slot.saturating_add(y);
        }
        Ok(())
    };
    add(answer.pageviews.points(false)?, false)?;
    add(answer.sessions.points(true)?, true)?;
    Ok(days)
}

/// Parses a website answer: `null` is a missing website (admin accounts).
pub fn parse_website(body: &[u8]) -> Result<Option<RemoteWebsite>, &'static str> {
    let value: Value = serde_json::from_slice(body).map_err(|_| "it is not JSON")?;
    match value {
        Value::Null => Ok(None),
        Value::Object(website) => {
            let field = |key: &str| website.get(key).and_then(Value::as_str).map(str::to_owned);
            match (field("name"), field("domain")) {
                (Some(name), Some(domain)) => Ok(Some(RemoteWebsite { name, domain })),
                _ => Err("the website has no name or domain"),
            }
        }
        _ => Err("it is neither a website nor null"),
    }
}

/// `/api/websites/{id}{suffix}`, written without `core::fmt` (every stats
/// call builds two).
fn website_path(id: Uuid, suffix: &str) -> String {
    let mut path = String::with_capacity(50 + suffix.len());
    path.push_str("/api/websites/");
    path.push_str(id.hyphenated().encode_lower(&mut Uuid::encode_buffer()));
    path.push_str(suffix);
    path
}

/// `startAt={start_at}&endAt={end_at}{rest}`, likewise.
fn range_query(start_at: i64, end_at: i64, rest: &str) -> String {
    let mut digits = itoa::Buffer::new();
    let mut query = String::with_capacity(48 + rest.len());
    query.push_str("startAt=");
    query.push_str(digits.format(start_at));
    query.push_str("&endAt=");
    query.push_str(digits.format(end_at));
    query.push_str(rest);
    query
}

/// The provider behind the host's `provider` binding.
pub struct Provider<'h, H: Host + ?Sized> {
    host: &'h H,
}

impl<'h, H: Host + ?Sized> Provider<'h, H> {
    pub fn new(host: &'h H) -> Self {
        Self { host }
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        query: Option<String>,
        body: Option<Value>,
    ) -> Result<HttpResponse, ActionError> {
        let mut headers = vec![("accept".to_owned(), "application/json".to_owned())];
        if body.is_some() {
            headers.push(("content-type".to_owned(), "application/json".to_owned()));
        }
        let request = HttpRequest {
            binding: PROVIDER_BINDING.to_owned(),
            method: method.to_owned(),
            path: path.to_owned(),
            query,
            headers,
            body: body.map(|b| b.to_string().into_bytes()),
        };
        self.host
            .send(request)
            .map_err(|e| binding_error(method, path, &e))
    }

    /// Tells a missing website from bad credentials after a 401: a non-admin
    /// Umami account gets 401 for both.
    fn verify_credentials(&self) -> Result<(), ActionError> {
        let path = "/api/auth/verify";
        let response = self.send("POST", path, None, None)?;
        match response.status {
            200..=299 => Ok(()),
            status => Err(status_error("POST", path, status)),
        }
    }

    /// Reads a website; `None` when the provider does not have it.
    pub fn find_website(&self, id: Uuid) -> Result<Option<RemoteWebsite>, ActionError> {
        let path = website_path(id, "");
        let response = self.send("GET", &path, None, None)?;
        match response.status {
            200 => parse_website(&response.body).map_err(|what| unusable("GET", &path, what)),
            401 => {
                self.verify_credentials()?;
                Ok(None)
            }
            status => Err(status_error("GET", &path, status)),
        }
    }

    /// Creates a website with a caller-chosen id. A 5xx may be Umami's answer
    /// to a duplicate id (another provision got there first), so the website
    /// is read again before the error counts.
    pub fn create_website(
        &self,
        id: Uuid,
        name: &str,
        domain: &str,
    ) -> Result<Created, ActionError> {
        let path = "/api/websites";
        let body = json!({"id": id, "name": name, "domain": domain});
        let response = self.send("POST", path, None, Some(body))?;
        match response.status {
            200..=299 => {
                self.host.log(
                    LogLevel::Info,
                    &format!("created website {id} on the provider"),
                );
                Ok(Created::Created)
            }
            status @ 500..=599 => match self.find_website(id)? {
                Some(existing) => Ok(Created::Existing(existing)),
                None => Err(status_error("POST", path, status)),
            },
            status => Err(status_error("POST", path, status)),
        }
    }

    /// Sets a website's name and domain.
    pub fn update_website(&self, id: Uuid, name: &str, domain: &str) -> Result<(), ActionError> {
        let path = website_path(id, "");
        let response = self.send(
            "POST",
            &path,
            None,
            Some(json!({"name": name, "domain": domain})),
        )?;
        match response.status {
            200..=299 => {
                self.host.log(
                    LogLevel::Info,
                    &format!("updated website {id} on the provider"),
                );
                Ok(())
            }
            status => Err(status_error("POST", &path, status)),
        }
    }

    /// Totals of `[start_at, end_at)`.
    pub fn stats(&self, id: Uuid, start_at: i64, end_at: i64) -> Result<Totals, ActionError> {
        let path = website_path(id, "/stats");
        let query = range_query(start_at, end_at, "");
        let response = self.send("GET", &path, Some(query), None)?;
        match response.status {
            200 => parse_stats(&response.body).map_err(|what| unusable("GET", &path, what)),
            status => Err(status_error("GET", &path, status)),
        }
    }

    /// Page views and visitors per UTC day; days without traffic are absent.
    pub fn daily(
        &self,
        id: Uuid,
        start_at: i64,
        end_at: i64,
    ) -> Result<BTreeMap<i64, DayCounts>, ActionError> {
        let path = website_path(id, "/pageviews");
        let query = range_query(start_at, end_at, "&unit=day&timezone=UTC");
        let response = self.send("GET", &path, Some(query), None)?;
        match response.status {
            200 => parse_daily(&response.body).map_err(|what| unusable("GET", &path, what)),
            status => Err(status_error("GET", &path, status)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::VecDeque;

    use super::*;
    use crate::calendar::days_from_civil;
    use crate::host::{Document, DocumentError, Invocation, Precondition};

    /// A host that answers binding calls from a script and records them.
    #[derive(Default)]
    struct Scripted {
        answers: RefCell<VecDeque<(u16, &'static str)>>,
        requests: RefCell<Vec<String>>,
    }

    impl Scripted {
        fn new(answers: &[(u16, &'static str)]) -> Self {
            Self {
                answers: RefCell::new(answers.iter().copied().collect()),
                ..Self::default()
            }
        }

        fn requests(&self) -> Vec<String> {
            self.requests.borrow().clone()
        }
    }

    impl Host for Scripted {
        fn invocation(&self) -> Invocation {
            Invocation::default()
        }
        fn send(&self, request: HttpRequest) -> Result<HttpResponse, BindingError> {
            self.requests
                .borrow_mut()
                .push(format!("{} {}", request.method, request.path));
            let (status, body) = self
                .answers
                .borrow_mut()
                .pop_front()
                .expect("a scripted answer");
            Ok(HttpResponse {
                status,
                headers: Vec::new(),
                body: body.as_bytes().to_vec(),
            })
        }
        fn get_document(&self, _: &str, _: &str) -> Result<Option<Document>, DocumentError> {
            Ok(None)
        }
        fn put_document(
            &self,
            _: &str,
            _: &str,
            _: &str,
            _: Precondition,
        ) -> Result<u64, DocumentError> {
            Ok(1)
        }
        fn delete_document(
            &self,
            _: &str,
            _: &str,
            _: Precondition,
        ) -> Result<bool, DocumentError> {
            Ok(false)
        }
        fn log(&self, _: LogLevel, _: &str) {}
    }

    const ID: Uuid = Uuid::from_u128(0x1234_5678_9abc_5def_8123_4567_89ab_cdef);

    #[test]
    fn paths_and_queries_match_their_formatted_forms() {
        let id = Uuid::from_u128(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        for suffix in ["", "/stats", "/pageviews"] {
            assert_eq!(
                website_path(id, suffix),
                format!("/api/websites/{id}{suffix}")
            );
        }
        for (start, end) in [(0, 1), (-1, i64::MAX), (i64::MIN, 1_795_262_400_000)] {
            assert_eq!(
                range_query(start, end, "&unit=day"),
                format!("startAt={start}&endAt={end}&unit=day")
            );
        }
    }

    #[test]
    fn a_duplicate_create_converges_on_the_existing_website() {
        let host = Scripted::new(&[
            (500, ""),
            (200, r#"{"name":"Shop","domain":"shop.example.com"}"#),
        ]);
        let created = Provider::new(&host).create_website(ID, "Shop", "shop.example.com");
        assert_eq!(
            created,
            Ok(Created::Existing(RemoteWebsite {
                name: "Shop".into(),
                domain: "shop.example.com".into()
            }))
        );
        assert_eq!(
            host.requests(),
            [
                "POST /api/websites".to_owned(),
                format!("GET /api/websites/{ID}")
            ]
        );
    }

    #[test]
    fn a_failed_create_of_a_still_missing_website_is_unavailable() {
        let host = Scripted::new(&[(503, "token=abc"), (200, "null")]);
        let err = Provider::new(&host)
            .create_website(ID, "Shop", "shop.example.com")
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::ProviderUnavailable);
        assert_eq!(
            err.message,
            "the provider answered HTTP 503 to POST /api/websites"
        );
    }

    #[test]
    fn a_401_lookup_asks_verify_to_tell_missing_from_bad_credentials() {
        let missing = Scripted::new(&[(401, ""), (200, "{}")]);
        assert_eq!(Provider::new(&missing).find_website(ID), Ok(None));
        assert_eq!(
            missing.requests(),
            [
                format!("GET /api/websites/{ID}"),
                "POST /api/auth/verify".to_owned()
            ]
        );

        let revoked = Scripted::new(&[(401, ""), (401, "")]);
        let err = Provider::new(&revoked).find_website(ID).unwrap_err();
        assert_eq!(err.code, ErrorCode::ProviderRejected);
    }

    #[test]
    fn unusable_answers_are_described_not_copied() {
        let host = Scripted::new(&[(200, r#"{"token":"leaked-value","pageviews":"#)]);
        let err = Provider::new(&host).stats(ID, 0, 1).unwrap_err();
        assert_eq!(err.code, ErrorCode::ProviderRejected);
        assert_eq!(
            err.message,
            format!(
                "the provider's answer to GET /api/websites/{ID}/stats was unusable: it is not JSON"
            )
        );
    }

    fn totals(body: &str) -> Result<Totals, &'static str> {
        parse_stats(body.as_bytes())
    }

    #[test]
    fn stats_of_every_generation_parse() {
        let want = Totals {
            visitors: 2,
            visits: 3,
            pageviews: 5,
            bounces: Some(1),
            totaltime: Some(42),
        };
        let v3 = r#"{"pageviews":5,"visitors":2,"visits":3,"bounces":1,"totaltime":42,
                     "comparison":{"pageviews":1,"visitors":1,"visits":1,"bounces":1,"totaltime":0}}"#;
        let v2 = r#"{"pageviews":{"value":5,"prev":1},"visitors":{"value":2,"prev":1},
                     "visits":{"value":3,"prev":1},"bounces":{"value":1,"prev":1},"totaltime":{"value":42,"prev":0}}"#;
        let postgres = r#"{"pageviews":"5","visitors":"2","visits":"3","bounces":"1","totaltime":"42",
                           "comparison":{"pageviews":"0","visitors":"0","visits":"0","bounces":null,"totaltime":null}}"#;
        let v2_strings = r#"{"pageviews":{"value":"5","prev":"1"},"visitors":{"value":"2"},"visits":{"value":3},
                             "bounces":{"value":"1"},"totaltime":{"value":42.4}}"#;
        for body in [v3, v2, postgres, v2_strings] {
            assert_eq!(totals(body), Ok(want), "{body}");
        }
    }

    #[test]
    fn nulls_and_absent_optional_fields() {
        let body = r#"{"pageviews":null,"visitors":"0","visits":0,"bounces":null}"#;
        assert_eq!(
            totals(body),
            Ok(Totals {
                visitors: 0,
                visits: 0,
                pageviews: 0,
                bounces: None,
                totaltime: None
            })
        );
    }

    #[test]
    fn unusable_stats_are_refused() {
        let cases = [
            ("", "it is not JSON"),
            (r#"{"pageviews":{"value":"#, "it is not JSON"),
            ("null", "it is not a JSON object"),
            ("[1,2]", "it is not a JSON object"),
            (r#"{"pageviews":1,"visits":1}"#, "`visitors` is missing"),
            (
                r#"{"pageviews":-1,"visitors":1,"visits":1}"#,
                "a count is negative or out of range",
            ),
            (
                r#"{"pageviews":"many","visitors":1,"visits":1}"#,
                "a count is not a number",
            ),
            (
                r#"{"pageviews":{"prev":1},"visitors":1,"visits":1}"#,
                "a count object has no `value`",
            ),
            (
                r#"{"pageviews":[1],"visitors":1,"visits":1}"#,
                "a count is not a number",
            ),
        ];
        for (body, why) in cases {
            assert_eq!(totals(body), Err(why), "{body}");
        }
    }

    #[test]
    fn daily_series_of_every_date_format_parse() {
        let body = r#"{"pageviews":[{"x":"2026-11-19 00:00:00","y":3},{"x":"2026-11-21T05:00:00Z","y":"2"},
                                    {"x":"2026-11-21T09:00:00.000Z","y":1}],
                       "sessions":[{"x":"2026-11-19 00:00:00","y":2},{"x":"2026-11-21","y":null}]}"#;
        let days = parse_daily(body.as_bytes()).unwrap();
        let d19 = days_from_civil(2026, 11, 19);
        let d21 = days_from_civil(2026, 11, 21);
        assert_eq!(days.len(), 2);
        assert_eq!(
            days[&d19],
            DayCounts {
                pageviews: 3,
                visitors: 2
            }
        );
        assert_eq!(
            days[&d21],
            DayCounts {
                pageviews: 3,
                visitors: 0
            }
        );
        assert!(parse_daily(br#"{"pageviews":[]}"#).unwrap().is_empty());
        assert_eq!(
            parse_daily(br#"{"pageviews":[{"x":"yesterday","y":1}]}"#),
            Err("a point's date is not a known format")
        );
        assert_eq!(
            parse_daily(br#"{"sessions":[]}"#),
            Err("a series is not a list of points")
        );
    }

    #[test]
    fn every_odd_shape_is_named_in_field_order() {
        for (body, want) in [
            (r#""text""#, Err("it is not a JSON object")),
            (
                r#"{"visitors":true,"visits":1,"pageviews":1}"#,
                Err("a count is not a number"),
            ),
            (
                r#"{"visitors":{"value":{"value":1}},"visits":1,"pageviews":1}"#,
                Err("a count object has no `value`"),
            ),
            // The first problem in field order wins, not in body order.
            (
                r#"{"pageviews":"x","visits":-2,"visitors":{"value":null}}"#,
                Err("a count is negative or out of range"),
            ),
        ] {
            assert_eq!(
                totals(body).map(|t| t.visitors),
                want.map(|_: ()| 0),
                "{body}"
            );
        }
        let nulls = totals(r#"{"visitors":{"value":null},"visits":1e20,"pageviews":1}"#);
        assert_eq!(nulls, Err("a count is negative or out of range"));
    }

    #[test]
    fn odd_points_and_series_are_named() {
        for (body, why) in [
            (r#"{"pageviews":[1]}"#, "a point has no date"),
            (r#"{"pageviews":[{"y":1}]}"#, "a point has no date"),
            (
                r#"{"pageviews":[{"x":1.5,"y":1}]}"#,
                "a point's time is not an integer",
            ),
            (
                r#"{"pageviews":[{"x":18446744073709551615,"y":1}]}"#,
                "a point's time is not an integer",
            ),
            (
                r#"{"pageviews":[{"x":"2026-11-19","y":"lots"}]}"#,
                "a count is not a number",
            ),
            (
                r#"{"pageviews":{"x":1}}"#,
                "a series is not a list of points",
            ),
            (r#"{"pageviews":null}"#, "a series is not a list of points"),
            (
                r#"{"pageviews":[],"sessions":"none"}"#,
                "a series is not a list of points",
            ),
        ] {
            assert_eq!(parse_daily(body.as_bytes()), Err(why), "{body}");
        }
        let ms = days_from_civil(2026, 11, 19) * 86_400_000 + 5;
        let days = parse_daily(
            format!(r#"{{"pageviews":[{{"x":{ms},"y":2}},{{"x":"2026-11-19"}}],"sessions":null}}"#)
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(
            days[&days_from_civil(2026, 11, 19)],
            DayCounts {
                pageviews: 2,
                visitors: 0
            }
        );
    }

    #[test]
    fn websites_parse_and_null_is_missing() {
        assert_eq!(parse_website(b"null"), Ok(None));
        assert_eq!(
            parse_website(
                br#"{"id":"x","name":"Shop","domain":"shop.example.com","resetAt":null}"#
            ),
            Ok(Some(RemoteWebsite {
                name: "Shop".into(),
                domain: "shop.example.com".into()
            }))
        );
        assert!(parse_website(b"").is_err());
        assert!(parse_website(br#"{"name":"Shop"}"#).is_err());
        assert!(parse_website(b"[]").is_err());
    }

    #[test]
    fn statuses_map_to_codes() {
        let cases = [
            (401, ErrorCode::ProviderRejected),
            (403, ErrorCode::ProviderRejected),
            (400, ErrorCode::ProviderRejected),
            (404, ErrorCode::ProviderRejected),
            (429, ErrorCode::ProviderUnavailable),
            (500, ErrorCode::ProviderUnavailable),
            (503, ErrorCode::ProviderUnavailable),
        ];
        for (status, code) in cases {
            let e = status_error("GET", "/api/websites/x", status);
            assert_eq!(e.code, code, "{status}");
            assert!(
                e.message.contains(&format!("HTTP {status}"))
                    && e.message.contains("GET /api/websites/x")
            );
        }
    }

    #[test]
    fn binding_errors_map_to_codes_without_the_hosts_detail() {
        let detail = "detail-from-host".to_owned();
        let cases = [
            (
                BindingError::NotGranted(detail.clone()),
                ErrorCode::Forbidden,
            ),
            (
                BindingError::CapabilityDenied(detail.clone()),
                ErrorCode::Forbidden,
            ),
            (
                BindingError::NotBound(detail.clone()),
                ErrorCode::ProviderUnavailable,
            ),
            (
                BindingError::InvalidRequest(detail.clone()),
                ErrorCode::Internal,
            ),
            (
                BindingError::Timeout(detail.clone()),
                ErrorCode::ProviderUnavailable,
            ),
            (
                BindingError::Unavailable(detail.clone()),
                ErrorCode::ProviderUnavailable,
            ),
            (
                BindingError::ResponseTooLarge(detail.clone()),
                ErrorCode::ProviderRejected,
            ),
            (
                BindingError::LimitExceeded(detail.clone()),
                ErrorCode::LimitExceeded,
            ),
        ];
        for (error, code) in cases {
            let mapped = binding_error("GET", "/api/websites/x", &error);
            assert_eq!(mapped.code, code, "{error:?}");
            assert!(!mapped.message.contains(&detail), "{}", mapped.message);
        }
    }
}

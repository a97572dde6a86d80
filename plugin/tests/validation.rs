//! Bad input is refused with `invalid_input`, a message naming the field and
//! the rule, and before anything reaches the provider.

mod support;

use managed_analytics::{ErrorCode, invoke};
use serde_json::json;
use support::{DAY_MS, NOW_MS, TestHost, start_fake};

#[test]
fn provision_input_table() {
    let fake = start_fake();
    let host = TestHost::for_fake(&fake);
    let cases = [
        ("not json", "input: must be a JSON object"),
        ("[]", "input: must be a JSON object"),
        (r#"{"domain":"example.com"}"#, "name: is required"),
        (r#"{"name":"Shop"}"#, "domain: is required"),
        (
            r#"{"name":7,"domain":"example.com"}"#,
            "name: must be a string",
        ),
        (
            r#"{"name":"Shop","domain":"example.com","id":"x"}"#,
            "id: unknown field; allowed fields are name, domain",
        ),
        (
            r#"{"name":"  ","domain":"example.com"}"#,
            "name: must not be empty",
        ),
        (
            r#"{"name":"Shop","domain":"https://example.com"}"#,
            "domain: must be a hostname without a scheme",
        ),
        (
            r#"{"name":"Shop","domain":"example.com:443"}"#,
            "domain: must be a hostname without a port",
        ),
        (
            r#"{"name":"Shop","domain":"example.com/shop"}"#,
            "domain: must be a hostname without a path",
        ),
        (
            r#"{"name":"Shop","domain":"203.0.113.9"}"#,
            "domain: must be a hostname, not an IP address",
        ),
        (
            r#"{"name":"Shop","domain":"localhost"}"#,
            "domain: must be a public hostname, not localhost",
        ),
    ];
    for (input, message) in cases {
        let err = invoke(&host, "analytics.provision", input).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidInput, "{input}");
        assert!(err.message.starts_with(message), "{input}: {}", err.message);
    }
    let long_name = json!({"name": "x".repeat(101), "domain": "example.com"}).to_string();
    let err = invoke(&host, "analytics.provision", &long_name).unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (
            ErrorCode::InvalidInput,
            "name: must be at most 100 characters"
        )
    );
    let long_domain =
        json!({"name": "Shop", "domain": format!("{}.example.com", "a".repeat(250))}).to_string();
    let err = invoke(&host, "analytics.provision", &long_domain).unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (
            ErrorCode::InvalidInput,
            "domain: must be at most 253 characters"
        )
    );

    assert!(host.sent().is_empty(), "nothing reached the provider");
    assert_eq!(fake.writes(), 0);
}

#[test]
fn an_internationalized_domain_is_stored_in_ascii() {
    let fake = start_fake();
    let host = TestHost::for_fake(&fake);
    let out = invoke(
        &host,
        "analytics.provision",
        &json!({"name": "Bücher", "domain": "Bücher.Example"}).to_string(),
    )
    .unwrap();
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["domain"], "xn--bcher-kva.example");
    assert_eq!(out["domain_restriction"], json!(["xn--bcher-kva.example"]));
    assert_eq!(out["name"], "Bücher");
}

#[test]
fn stats_range_table() {
    let fake = start_fake();
    let host = TestHost::for_fake(&fake);
    invoke(
        &host,
        "analytics.provision",
        &support::provision_input("Shop", "shop.example.com"),
    )
    .unwrap();

    let end = NOW_MS;
    let ok = |start: i64, end: i64| json!({"start_at": start, "end_at": end}).to_string();
    // The 366-day boundary passes exactly at 366 days.
    assert!(invoke(&host, "analytics.stats", &ok(end - 366 * DAY_MS, end)).is_ok());
    assert!(invoke(&host, "analytics.stats", &ok(end - 7 * DAY_MS, end)).is_ok());
    // Up to a day ahead is fine (clocks and time zones).
    assert!(invoke(&host, "analytics.stats", &ok(end - DAY_MS, end + DAY_MS)).is_ok());
    assert!(
        invoke(
            &host,
            "analytics.stats",
            &ok(946_684_800_000, 946_684_800_000 + DAY_MS)
        )
        .is_ok()
    );

    let cases = [
        (
            ok(end - 366 * DAY_MS - 1, end),
            "end_at: the range must cover at most 366 days (31622400000 ms)",
        ),
        (ok(end, end), "end_at: must be after start_at"),
        (ok(end, end - 1), "end_at: must be after start_at"),
        (
            ok(946_684_799_999, end),
            "start_at: must not be before 2000-01-01T00:00:00Z (946684800000)",
        ),
        (
            ok(-5, end),
            "start_at: must not be before 2000-01-01T00:00:00Z (946684800000)",
        ),
        (
            ok(end, end + DAY_MS + 1),
            "end_at: must not be more than one day in the future",
        ),
        (
            json!({"start_at": 1.5e12, "end_at": end}).to_string(),
            "start_at: must be an integer number of Unix milliseconds",
        ),
        (
            json!({"start_at": "1700000000000", "end_at": end}).to_string(),
            "start_at: must be an integer number of Unix milliseconds",
        ),
        (json!({"end_at": end}).to_string(), "start_at: is required"),
        (
            json!({"start_at": end - DAY_MS}).to_string(),
            "end_at: is required",
        ),
        (
            json!({"start_at": end - DAY_MS, "end_at": end, "unit": "week"}).to_string(),
            "unit: must be \"day\" (or left out)",
        ),
        (
            json!({"start_at": end - DAY_MS, "end_at": end, "from": 1}).to_string(),
            "from: unknown field; allowed fields are start_at, end_at, unit",
        ),
    ];
    let sent_before = host.sent().len();
    for (input, message) in cases {
        let err = invoke(&host, "analytics.stats", &input).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (ErrorCode::InvalidInput, message),
            "{input}"
        );
    }
    assert_eq!(
        host.sent().len(),
        sent_before,
        "refused ranges never reach the provider"
    );
}

#[test]
fn configuration_takes_no_fields_and_unknown_actions_are_refused() {
    let host = TestHost::new(None);
    let err = invoke(&host, "analytics.configuration", r#"{"x":1}"#).unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (
            ErrorCode::InvalidInput,
            "x: unknown field; this action takes no fields"
        )
    );
    let err = invoke(&host, "analytics.delete", "{}").unwrap_err();
    assert_eq!(err.code, ErrorCode::NotImplemented);
    assert!(
        err.message.starts_with(
            "action `analytics.delete` is declared in the manifest but not implemented"
        )
    );
}

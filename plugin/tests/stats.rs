//! The panel shows stats: totals and a zero-filled daily series computed from
//! page views the fake recorded, in every provider response generation.

mod support;

use managed_analytics::website_id::website_id;
use managed_analytics::{ErrorCode, invoke};
use serde_json::{Value, json};
use support::{DAY_MS, NOW_MS, PROJECT, TestHost, provision_input, start_fake};
use umami_fake::ResponseShape;

const BROWSER_A: &str = "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0";
const BROWSER_B: &str = "Mozilla/5.0 (Macintosh) Safari/605.1.15";

/// Midnight UTC of the tests' "now".
const TODAY: i64 = NOW_MS - NOW_MS % DAY_MS;

fn stats(host: &TestHost, input: Value) -> Value {
    let out = invoke(host, "analytics.stats", &input.to_string())
        .unwrap_or_else(|e| panic!("stats failed: {e}"));
    serde_json::from_str(&out).unwrap()
}

#[test]
fn stats_before_setup_is_not_provisioned() {
    let fake = start_fake();
    let host = TestHost::for_fake(&fake);
    let err = invoke(
        &host,
        "analytics.stats",
        &json!({"start_at": NOW_MS - DAY_MS, "end_at": NOW_MS}).to_string(),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::NotProvisioned);
    assert!(host.sent().is_empty());
}

#[test]
fn every_response_generation_gives_the_same_numbers_and_series() {
    let fake = start_fake();
    let host = TestHost::for_fake(&fake);
    invoke(
        &host,
        "analytics.provision",
        &provision_input("Shop", "shop.example.com"),
    )
    .unwrap();
    let id = website_id(PROJECT, "shop.example.com");
    // Six days ago: visitor A reads two pages 90 s apart; visitor B bounces.
    let day1 = TODAY - 6 * DAY_MS + 10 * 3_600_000;
    fake.record_event(id, "/", day1, BROWSER_A, "198.51.100.1")
        .unwrap();
    fake.record_event(id, "/pricing", day1 + 90_000, BROWSER_A, "198.51.100.1")
        .unwrap();
    fake.record_event(id, "/", day1 + 5_000, BROWSER_B, "198.51.100.2")
        .unwrap();
    // Today: visitor A comes back.
    fake.record_event(id, "/", TODAY + 3_600_000, BROWSER_A, "198.51.100.1")
        .unwrap();
    // Outside the range: eight days ago.
    fake.record_event(id, "/", TODAY - 8 * DAY_MS, BROWSER_B, "198.51.100.2")
        .unwrap();

    let range = json!({"start_at": TODAY - 6 * DAY_MS, "end_at": TODAY + DAY_MS, "unit": "day"});
    let mut answers = Vec::new();
    for shape in [
        ResponseShape::V3,
        ResponseShape::V2,
        ResponseShape::V3Postgres,
    ] {
        fake.set_shape(shape);
        answers.push(stats(&host, range.clone()));
    }
    let v3 = &answers[0];
    assert_eq!(v3["website_id"], id.to_string());
    assert_eq!(
        (
            v3["visitors"].as_u64(),
            v3["visits"].as_u64(),
            v3["pageviews"].as_u64()
        ),
        (Some(2), Some(3), Some(4))
    );
    assert_eq!(
        (v3["bounces"].as_u64(), v3["totaltime"].as_u64()),
        (Some(2), Some(90))
    );
    let series = v3["series"].as_array().unwrap();
    assert_eq!(
        series.len(),
        7,
        "every UTC day of the range, quiet ones included"
    );
    assert_eq!(
        series[0],
        json!({"date": "2026-11-15", "pageviews": 3, "visitors": 2})
    );
    for quiet in &series[1..6] {
        assert_eq!(
            (quiet["pageviews"].as_u64(), quiet["visitors"].as_u64()),
            (Some(0), Some(0))
        );
    }
    assert_eq!(
        series[6],
        json!({"date": "2026-11-21", "pageviews": 1, "visitors": 1})
    );
    let (required, properties) = support::manifest_definition("stats");
    for field in &required {
        assert!(v3.get(field).is_some(), "missing {field}");
    }
    for field in v3.as_object().unwrap().keys() {
        assert!(properties.contains(field), "{field} is not in the manifest");
    }
    assert_eq!(answers[1], answers[0], "v2 answers the same");
    assert_eq!(
        answers[2], answers[0],
        "v3.0.0 on Postgres answers the same"
    );
}

#[test]
fn without_unit_there_is_no_series_and_a_quiet_range_is_zeros() {
    let fake = start_fake();
    fake.set_shape(ResponseShape::V3Postgres);
    let host = TestHost::for_fake(&fake);
    invoke(
        &host,
        "analytics.provision",
        &provision_input("Shop", "shop.example.com"),
    )
    .unwrap();
    let out = stats(
        &host,
        json!({"start_at": TODAY - 7 * DAY_MS, "end_at": TODAY}),
    );
    // Postgres sends null sums for a range without visits: left out.
    assert_eq!(
        out,
        json!({"website_id": website_id(PROJECT, "shop.example.com"), "start_at": TODAY - 7 * DAY_MS,
               "end_at": TODAY, "visitors": 0, "visits": 0, "pageviews": 0})
    );
    assert!(host.sent().iter().all(|r| !r.ends_with("/pageviews")));
}

#[test]
fn a_range_not_on_day_boundaries_covers_every_day_it_touches() {
    let fake = start_fake();
    let host = TestHost::for_fake(&fake);
    invoke(
        &host,
        "analytics.provision",
        &provision_input("Shop", "shop.example.com"),
    )
    .unwrap();
    let out = stats(
        &host,
        json!({"start_at": TODAY - DAY_MS - 1, "end_at": TODAY + 1, "unit": "day"}),
    );
    let dates: Vec<&str> = out["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["date"].as_str().unwrap())
        .collect();
    assert_eq!(dates, ["2026-11-19", "2026-11-20", "2026-11-21"]);
}

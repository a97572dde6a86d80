//! `GET /analytics`: totals and a zero-filled per-day (UTC) series of a
//! domain's email events, counted on write in the same transaction.

mod common;

use common::{Backend, TestApp, email};
use mail_service::clock::Clock;
use serde_json::{Value, json};

const DAY: i64 = 86_400_000;

async fn acme_domain_id(app: &TestApp) -> String {
    let list = app.get("/domains").await.body;
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "acme.test")
        .map(|d| d["id"].as_str().unwrap().to_string())
        .unwrap()
}

fn totals(body: &Value) -> Value {
    body["totals"].clone()
}

async fn events_are_counted_per_day_and_zero_filled(b: Backend) {
    let app = TestApp::start(b).await;
    let id = acme_domain_id(&app).await;
    let path = |days: u32| format!("/analytics?domain_id={id}&days={days}");

    let empty = app.get(&path(7)).await;
    empty.expect(200, "");
    assert_eq!(empty.body["object"], "analytics");
    assert_eq!(empty.body["domain"], "acme.test");
    assert_eq!(empty.body["series"].as_array().unwrap().len(), 7);
    assert_eq!(
        totals(&empty.body),
        json!({"accepted": 0, "sent": 0, "failed": 0, "unknown": 0, "suppressed": 0, "scheduled": 0, "canceled": 0, "delivered": 0, "delivery_delayed": 0, "bounced": 0, "complained": 0})
    );

    // Day 1: two sent, one suppressed, one scheduled for tomorrow, one
    // scheduled and canceled.
    app.send(&email()).await.expect(200, "");
    app.send(&email()).await.expect(200, "");
    app.call(
        "POST",
        "/suppressions",
        Some(&app.full_key),
        &[],
        Some(
            json!({"email": "gone@example.test"})
                .to_string()
                .into_bytes(),
        ),
    )
    .await
    .expect(200, "");
    let mut gone = email();
    gone["to"] = json!("gone@example.test");
    app.send(&gone).await.expect(200, "");
    let mut tomorrow = email();
    tomorrow["scheduled_at"] = json!(mail_service::clock::rfc3339(app.clock.now_ms() + DAY));
    app.send(&tomorrow).await.expect(200, "");
    let canceled = app.send(&tomorrow).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    app.call(
        "POST",
        &format!("/emails/{canceled}/cancel"),
        Some(&app.full_key),
        &[],
        None,
    )
    .await
    .expect(200, "");

    // Day 2: the scheduled one is handed off.
    app.clock.advance_ms(DAY);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 1);

    let week = app.get(&path(7)).await.body;
    assert_eq!(
        totals(&week),
        json!({"accepted": 5, "sent": 3, "failed": 0, "unknown": 0, "suppressed": 1, "scheduled": 2, "canceled": 1, "delivered": 0, "delivery_delayed": 0, "bounced": 0, "complained": 0})
    );
    let series = week["series"].as_array().unwrap();
    assert_eq!(series.len(), 7);
    let today = &series[6];
    let yesterday = &series[5];
    assert_eq!(today["date"], week["to"]);
    assert_eq!(series[0]["date"], week["from"]);
    assert_eq!(
        (yesterday["accepted"].as_i64(), yesterday["sent"].as_i64()),
        (Some(5), Some(2))
    );
    assert_eq!(
        (
            yesterday["scheduled"].as_i64(),
            yesterday["canceled"].as_i64()
        ),
        (Some(2), Some(1))
    );
    assert_eq!(yesterday["suppressed"], 1);
    assert_eq!(
        (today["accepted"].as_i64(), today["sent"].as_i64()),
        (Some(0), Some(1))
    );
    for day in &series[..5] {
        assert!(
            [
                "accepted",
                "sent",
                "failed",
                "unknown",
                "suppressed",
                "scheduled",
                "canceled"
            ]
            .iter()
            .all(|k| day[*k] == 0),
            "zero-filled: {day}"
        );
    }
    // Dates are consecutive UTC days.
    let dates: Vec<&str> = series.iter().map(|d| d["date"].as_str().unwrap()).collect();
    let mut sorted = dates.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, dates);

    // Longer periods hold the same events; 90 days of series.
    let quarter = app.get(&path(90)).await.body;
    assert_eq!(quarter["series"].as_array().unwrap().len(), 90);
    assert_eq!(totals(&quarter), totals(&week));
    assert_eq!(
        app.get(&path(30)).await.body["series"]
            .as_array()
            .unwrap()
            .len(),
        30
    );

    // Six days later the first day has left the 7-day window, the second
    // is its oldest day.
    app.clock.advance_ms(6 * DAY);
    let later = app.get(&path(7)).await.body;
    assert_eq!(later["totals"]["accepted"], 0);
    assert_eq!(later["totals"]["sent"], 1);
}

async fn parameters_are_checked_and_access_is_full_only(b: Backend) {
    let app = TestApp::start(b).await;
    let id = acme_domain_id(&app).await;
    for (query, name, starts) in [
        ("", "missing_required_field", "domain_id:"),
        (
            "?domain_id=abc",
            "validation_error",
            "domain_id: must match",
        ),
        (
            &format!("?domain_id={id}&days=14") as &str,
            "validation_error",
            "days: must be 7, 30 or 90",
        ),
        (
            &format!("?domain_id={id}&days=seven"),
            "validation_error",
            "days: must be 7, 30 or 90",
        ),
        (
            &format!("?domain_id={id}&period=7"),
            "validation_error",
            "period: unknown query parameter",
        ),
    ] {
        let r = app.get(&format!("/analytics{query}")).await;
        r.expect(422, name);
        assert!(r.message().starts_with(starts), "{query}: {}", r.message());
    }
    app.get("/analytics?domain_id=123")
        .await
        .expect(404, "not_found");
    app.call(
        "GET",
        &format!("/analytics?domain_id={id}"),
        Some(&app.send_key),
        &[],
        None,
    )
    .await
    .expect(403, "restricted_api_key");
    app.call(
        "GET",
        &format!("/analytics?domain_id={id}"),
        None,
        &[],
        None,
    )
    .await
    .expect(401, "missing_api_key");
    // Another tenant cannot read this domain's figures.
    let (_, other) = app
        .service
        .create_api_key("globex", "ops", mail_service::model::Permission::FullAccess)
        .await
        .unwrap();
    app.call(
        "GET",
        &format!("/analytics?domain_id={id}"),
        Some(&other),
        &[],
        None,
    )
    .await
    .expect(404, "not_found");
}

/// `GET /emails/metrics` (Resend's shape) reads the same counters as
/// `/analytics`.
async fn email_metrics_read_the_same_counters(b: Backend) {
    let app = TestApp::start(b).await;
    let id = acme_domain_id(&app).await;
    app.send(&email()).await.expect(200, "");
    app.send(&email()).await.expect(200, "");
    app.post(
        &app.full_key,
        "/suppressions",
        json!({"email": "gone@example.test"}),
    )
    .await
    .expect(200, "");
    let mut gone = email();
    gone["to"] = json!("gone@example.test");
    app.send(&gone).await.expect(200, "");
    app.clock.advance_ms(DAY);
    app.send(&email()).await.expect(200, "");

    let metrics = app.get("/emails/metrics").await;
    metrics.expect(200, "");
    let m = &metrics.body;
    assert_eq!(m["object"], "metrics");
    assert_eq!(m["granularity"], "daily");
    assert_eq!(m["dimensions"], json!([]));
    assert!(m.get("data").is_none(), "no dimensions, no data: {m}");
    let analytics = app.get(&format!("/analytics?domain_id={id}")).await.body;
    assert_eq!(
        (m["start_date"].clone(), m["end_date"].clone()),
        (analytics["from"].clone(), analytics["to"].clone())
    );
    for (metric, status) in mail_service::service::METRICS {
        assert_eq!(m["totals"][metric], analytics["totals"][status], "{metric}");
    }
    assert_eq!(
        (
            m["totals"]["received"].as_i64(),
            m["totals"]["sent"].as_i64(),
            m["totals"]["suppressed"].as_i64()
        ),
        (Some(4), Some(3), Some(1))
    );

    // By day: zero-filled, the same figures as the series.
    let by_day = app
        .get("/emails/metrics?dimensions=period&metrics=sent,received")
        .await
        .body;
    assert_eq!(by_day["metrics"], json!(["sent", "received"]));
    assert_eq!(by_day["totals"], json!({"sent": 3, "received": 4}));
    let rows = by_day["data"].as_array().unwrap();
    assert_eq!(rows.len(), 7);
    let series = analytics["series"].as_array().unwrap();
    for (row, day) in rows.iter().zip(series) {
        assert_eq!(row["period"], day["date"]);
        assert_eq!(row["sent"], day["sent"]);
        assert_eq!(row["received"], day["accepted"]);
    }
    // By domain, and for one domain by id.
    let by_domain = app.get("/emails/metrics?dimensions=domain").await.body;
    assert_eq!(by_domain["data"][0]["domain_id"], id.as_str());
    assert_eq!(by_domain["data"][0]["domain_name"], "acme.test");
    assert_eq!(by_domain["data"][0]["sent"], 3);
    let one = app
        .get(&format!("/emails/metrics?domain_id={id}"))
        .await
        .body;
    assert_eq!(one["totals"], m["totals"]);
    // A range of its own: today only.
    let today = m["end_date"].as_str().unwrap();
    let only_today = app
        .get(&format!(
            "/emails/metrics?start_date={today}&end_date={today}T23:00:00Z"
        ))
        .await
        .body;
    assert_eq!(only_today["totals"]["sent"], 1);

    for (query, starts) in [
        ("metrics=opened", "metrics: `opened` is not counted here"),
        ("granularity=hourly", "granularity: must be `daily`"),
        ("timezone=Europe/Paris", "timezone: must be `UTC`"),
        ("dimensions=email", "dimensions: `email` is not served"),
        ("email_id=1", "email_id: is not served"),
        ("broadcast_id=1", "broadcast_id: is not served"),
        (
            "start_date=2030-01-02&end_date=2030-01-01",
            "start_date: must not be after end_date",
        ),
        (
            "start_date=2030-01-01&end_date=2030-06-01",
            "start_date: the range may span at most 90 days",
        ),
        ("start_date=soon", "start_date: `soon` is not a date"),
        ("domain_id=abc", "domain_id: `abc` must match"),
        ("color=red", "color: unknown query parameter"),
    ] {
        let r = app.get(&format!("/emails/metrics?{query}")).await;
        r.expect(422, "validation_error");
        assert!(r.message().starts_with(starts), "{query}: {}", r.message());
    }
    app.get("/emails/metrics?domain_id=123")
        .await
        .expect(404, "not_found");
    app.call("GET", "/emails/metrics", Some(&app.send_key), &[], None)
        .await
        .expect(403, "restricted_api_key");
}

on_both_backends!(
    email_metrics_read_the_same_counters,
    events_are_counted_per_day_and_zero_filled,
    parameters_are_checked_and_access_is_full_only,
);

//! The fake behaves like the Umami server the design page describes.

use serde_json::{Value, json};
use umami_fake::{FakeConfig, FakeHandle, Fault, ResponseShape, UmamiFake};

const SECRET: &str = "fake-secret-7f3a9c";
const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0";
const DAY_MS: i64 = 86_400_000;

struct Answer {
    status: u16,
    content_type: Option<String>,
    header: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }
}

fn call(method: &str, url: &str, headers: &[(&str, &str)], body: Option<Value>) -> Answer {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = ureq::http::Request::builder().method(method).uri(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let result = match body {
        Some(body) => agent.run(
            request
                .header("content-type", "application/json")
                .body(body.to_string())
                .unwrap(),
        ),
        None => agent.run(request.body(()).unwrap()),
    };
    let mut response = result.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let header: Vec<(String, String)> = response
        .headers()
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or_default().to_owned()))
        .collect();
    Answer {
        status: response.status().as_u16(),
        content_type: response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned()),
        header,
        body: response.body_mut().read_to_string().unwrap(),
    }
}

fn api(fake: &FakeHandle, method: &str, path: &str, body: Option<Value>) -> Answer {
    let bearer = format!("Bearer {SECRET}");
    call(
        method,
        &format!("{}{path}", fake.base_url()),
        &[("Authorization", &bearer)],
        body,
    )
}

fn start() -> FakeHandle {
    UmamiFake::start(FakeConfig::new(SECRET)).unwrap()
}

fn create(fake: &FakeHandle, id: &str) {
    let answer = api(
        fake,
        "POST",
        "/api/websites",
        Some(json!({"id": id, "name": "Shop", "domain": "shop.example.com"})),
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
}

const ID: &str = "8b0c5a3e-3f1e-5a7b-9c2d-4e5f6a7b8c9d";

#[test]
fn api_requires_the_secret_in_either_header() {
    let fake = start();
    let url = format!("{}/api/auth/verify", fake.base_url());
    let missing = call("POST", &url, &[], None);
    assert_eq!(missing.status, 401);
    assert_eq!(missing.json()["error"]["code"], "unauthorized");
    assert_eq!(
        call("POST", &url, &[("Authorization", "Bearer wrong")], None).status,
        401
    );
    assert_eq!(
        call("POST", &url, &[("x-umami-api-key", SECRET)], None).status,
        200
    );
    assert_eq!(api(&fake, "POST", "/api/auth/verify", None).status, 200);
}

#[test]
fn login_hands_out_the_token_and_me_echoes_it() {
    let fake = start();
    let url = format!("{}/api/auth/login", fake.base_url());
    let wrong = call(
        "POST",
        &url,
        &[],
        Some(json!({"username": "admin", "password": "nope"})),
    );
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.json()["error"]["code"], "incorrect-username-password");
    let ok = call(
        "POST",
        &url,
        &[],
        Some(json!({"username": "admin", "password": "umami"})),
    );
    assert_eq!(ok.json()["token"], SECRET);
    assert!(api(&fake, "GET", "/api/me", None).body.contains(SECRET));
}

#[test]
fn websites_follow_umamis_quirks() {
    let fake = start();
    let path = format!("/api/websites/{ID}");
    let missing = api(&fake, "GET", &path, None);
    assert_eq!((missing.status, missing.body.as_str()), (200, "null"));
    assert_eq!(
        api(&fake, "GET", "/api/websites/not-a-uuid", None).status,
        500
    );

    create(&fake, ID);
    let website = api(&fake, "GET", &path, None).json();
    assert_eq!(
        (website["id"].as_str(), website["name"].as_str()),
        (Some(ID), Some("Shop"))
    );

    let duplicate = api(
        &fake,
        "POST",
        "/api/websites",
        Some(json!({"id": ID, "name": "Shop", "domain": "shop.example.com"})),
    );
    assert_eq!(
        (
            duplicate.status,
            duplicate.body.as_str(),
            duplicate.content_type
        ),
        (500, "", None)
    );

    let no_name = api(
        &fake,
        "POST",
        "/api/websites",
        Some(json!({"domain": "a.example.com"})),
    );
    assert_eq!(no_name.status, 400);
    assert_eq!(no_name.json()["error"]["code"], "bad-request");

    let renamed = api(
        &fake,
        "POST",
        &path,
        Some(json!({"name": "Store", "domain": "shop.example.com"})),
    );
    assert_eq!(renamed.json()["name"], "Store");
    assert_eq!((fake.creates(), fake.renames(), fake.writes()), (1, 1, 2));
}

#[test]
fn a_non_admin_account_gets_401_for_missing_and_foreign_websites() {
    let fake = start();
    fake.set_admin(false);
    let foreign = "1b2c3d4e-5f60-4172-8394-a5b6c7d8e9f0";
    assert!(fake.insert_website(
        foreign.parse().unwrap(),
        "Other".into(),
        "other.example".into(),
        umami_fake::OTHER_USER_ID
    ));
    assert_eq!(
        api(&fake, "GET", &format!("/api/websites/{ID}"), None).status,
        401
    );
    assert_eq!(
        api(&fake, "GET", &format!("/api/websites/{foreign}"), None).status,
        401
    );
    assert_eq!(api(&fake, "POST", "/api/auth/verify", None).status, 200);
    create(&fake, ID);
    assert_eq!(
        api(&fake, "GET", &format!("/api/websites/{ID}"), None).status,
        200
    );
}

#[test]
fn send_records_browser_page_views_only() {
    let fake = start();
    create(&fake, ID);
    let url = format!("{}/api/send", fake.base_url());
    let event = json!({"type": "event", "payload": {"website": ID, "url": "/pricing"}});
    let curl = call(
        "POST",
        &url,
        &[("User-Agent", "curl/8.5.0")],
        Some(event.clone()),
    );
    assert_eq!(curl.json(), json!({"beep": "boop"}));
    assert!(fake.events().is_empty());

    let browser = call(
        "POST",
        &url,
        &[
            ("User-Agent", BROWSER),
            ("X-Forwarded-For", "198.51.100.7, 10.0.0.1"),
        ],
        Some(event),
    );
    assert_eq!(browser.status, 200);
    let body = browser.json();
    assert!(
        body["sessionId"].is_string() && body["visitId"].is_string() && body["cache"].is_string()
    );
    assert!(
        browser
            .header
            .iter()
            .any(|(n, v)| n.eq_ignore_ascii_case("access-control-allow-origin") && v == "*")
    );
    let events = fake.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].url, "/pricing");

    let unknown =
        json!({"type": "event", "payload": {"website": "0b2c3d4e-5f60-4172-8394-a5b6c7d8e9f0"}});
    let answer = call("POST", &url, &[("User-Agent", BROWSER)], Some(unknown));
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (400, "Website not found.")
    );
}

#[test]
fn script_is_served_like_umamis() {
    let fake = start();
    let answer = call("GET", &format!("{}/script.js", fake.base_url()), &[], None);
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.content_type.as_deref(),
        Some("application/javascript")
    );
    let header = |name: &str| {
        answer
            .header
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(
        header("cache-control"),
        Some("public, max-age=86400, must-revalidate")
    );
    assert_eq!(header("access-control-allow-origin"), Some("*"));
    assert!(answer.body.contains("/api/send") && answer.body.contains("data-host-url"));
}

fn seed_traffic(fake: &FakeHandle, day0: i64) {
    let id = ID.parse().unwrap();
    fake.record_event(id, "/", day0 + 1_000, BROWSER, "192.0.2.1")
        .unwrap();
    fake.record_event(id, "/a", day0 + 61_000, BROWSER, "192.0.2.1")
        .unwrap();
    fake.record_event(id, "/", day0 + 2 * DAY_MS, BROWSER, "192.0.2.2")
        .unwrap();
}

#[test]
fn stats_come_in_every_shape_from_real_counts() {
    let fake = start();
    create(&fake, ID);
    let day0 = 1_763_683_200_000; // 2025-11-21T00:00:00Z
    seed_traffic(&fake, day0);
    let path = format!(
        "/api/websites/{ID}/stats?startAt={day0}&endAt={}",
        day0 + 3 * DAY_MS
    );

    let v3 = api(&fake, "GET", &path, None).json();
    assert_eq!(
        v3,
        json!({"pageviews": 3, "visitors": 2, "visits": 2, "bounces": 1, "totaltime": 60,
               "comparison": {"pageviews": 0, "visitors": 0, "visits": 0, "bounces": 0, "totaltime": 0}})
    );
    fake.set_shape(ResponseShape::V2);
    let v2 = api(&fake, "GET", &path, None).json();
    assert_eq!(v2["visitors"], json!({"value": 2, "prev": 0}));
    fake.set_shape(ResponseShape::V3Postgres);
    let pg = api(&fake, "GET", &path, None).json();
    assert_eq!(
        (pg["pageviews"].clone(), pg["totaltime"].clone()),
        (json!("3"), json!("60"))
    );
    assert_eq!(pg["comparison"]["bounces"], Value::Null);
}

#[test]
fn daily_pageviews_leave_quiet_days_out() {
    let fake = start();
    create(&fake, ID);
    let day0 = 1_763_683_200_000;
    seed_traffic(&fake, day0);
    let path = format!(
        "/api/websites/{ID}/pageviews?startAt={day0}&endAt={}&unit=day&timezone=UTC",
        day0 + 3 * DAY_MS
    );
    let series = api(&fake, "GET", &path, None).json();
    assert_eq!(
        series["pageviews"],
        json!([{"x": "2025-11-21 00:00:00", "y": 2}, {"x": "2025-11-23 00:00:00", "y": 1}])
    );
    assert_eq!(
        series["sessions"][0],
        json!({"x": "2025-11-21 00:00:00", "y": 1})
    );
}

#[test]
fn faults_apply_to_the_api_and_are_switched_by_the_control_api() {
    let fake = start();
    let control = |body: Value| {
        call(
            "PUT",
            &format!("{}/__fake/fault", fake.base_url()),
            &[],
            Some(body),
        )
    };

    assert_eq!(control(json!({"mode": "server_error"})).status, 200);
    assert_eq!(fake.fault(), Fault::ServerError);
    assert_eq!(api(&fake, "POST", "/api/auth/verify", None).status, 500);
    // The script and the control API are never faulted.
    assert_eq!(
        call("GET", &format!("{}/script.js", fake.base_url()), &[], None).status,
        200
    );

    control(json!({"mode": "unauthorized"}));
    assert_eq!(api(&fake, "POST", "/api/auth/verify", None).status, 401);

    control(json!({"mode": "malformed_json"}));
    let malformed = api(&fake, "GET", &format!("/api/websites/{ID}"), None);
    assert_eq!(malformed.status, 200);
    assert!(serde_json::from_str::<Value>(&malformed.body).is_err());

    control(json!({"mode": "slow", "delay_ms": 150}));
    let started = std::time::Instant::now();
    assert_eq!(api(&fake, "POST", "/api/auth/verify", None).status, 200);
    assert!(started.elapsed().as_millis() >= 150);

    control(json!({"mode": "none"}));
    let shape = call(
        "PUT",
        &format!("{}/__fake/shape", fake.base_url()),
        &[],
        Some(json!({"shape": "v2"})),
    );
    assert_eq!(shape.status, 200);
    assert_eq!(fake.shape(), ResponseShape::V2);

    create(&fake, ID);
    let recorded = call(
        "POST",
        &format!("{}/__fake/events", fake.base_url()),
        &[],
        Some(json!({"website_id": ID, "timestamp_ms": 1_763_683_200_000_i64})),
    );
    assert_eq!(recorded.status, 201);
    let state = call(
        "GET",
        &format!("{}/__fake/state", fake.base_url()),
        &[],
        None,
    )
    .json();
    assert_eq!(
        (state["writes"].as_u64(), state["events"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        call(
            "POST",
            &format!("{}/__fake/reset", fake.base_url()),
            &[],
            None
        )
        .status,
        204
    );
    assert_eq!(fake.writes(), 0);
}

//! Managed analytics, end to end: the real plugin component from the signed
//! release runs inside host-sim (the one invocation function every surface
//! calls) and reaches an Umami fake on loopback only through the host's
//! `provider` binding.
//!
//! An operator installs the verified release, approves it, grants it to a
//! project and binds the provider; a customer provisions a website, places
//! the tracking script, browsers send page views over real HTTP, and the
//! stats the panel asks for show exactly that traffic. The provider's
//! credential shows up in no result, no error and no log line.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Barrier;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use host_sim::serve::http_status;
use host_sim::{AuthStyle, Invocation, Secret};
use managed_analytics::website_id::website_id;
use serde_json::{Value, json};
use support::{EXTENSION, Platform};
use umami_fake::{Fault, ResponseShape};
use uuid::Uuid;

const DAY_MS: i64 = 86_400_000;
const HOUR_MS: i64 = 3_600_000;
const BINDING_TIMEOUT: Duration = Duration::from_millis(1500);

const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:140.0) Gecko/20100101 Firefox/140.0";
const SAFARI: &str = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 Version/18.0 Safari/605.1.15";
const CHROME: &str =
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/141.0 Safari/537.36";
const CURL: &str = "curl/8.14.1";

// ---- the host's log, captured for the whole test process -----------------

/// Every log line of this test process: everything at trace but the
/// compiler's (cranelift, regalloc2, wasmtime, wasmparser, wit-*), which
/// stays at info.
fn captured_logs() -> String {
    log_capture::capture(
        "trace,cranelift=info,regalloc2=info,wasmtime=info,wasmparser=info,wit_=info",
    );
    log_capture::captured()
}

// ---- the flows' vocabulary ---------------------------------------------------

/// A platform for one test: its own project, its own provider secret.
fn platform(project: &str) -> Platform {
    captured_logs();
    let secret = format!("umami-key-{}", Uuid::new_v4().simple());
    Platform::start(project, &secret, BINDING_TIMEOUT)
}

fn ok(invocation: &Invocation) -> &Value {
    invocation
        .result
        .as_ref()
        .unwrap_or_else(|_| panic!("invocation failed: {}", invocation.to_json()))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn midnight(ms: i64) -> i64 {
    ms - ms.rem_euclid(DAY_MS)
}

/// Midnight (UTC) of today. A story that records "today's" page views must
/// not straddle midnight: within a few seconds of it, wait for the new day.
fn today_with_room_for_the_story() -> i64 {
    let now = now_ms();
    let next = midnight(now) + DAY_MS;
    if next - now < 10_000 {
        std::thread::sleep(Duration::from_millis((next - now + 1) as u64));
        return next;
    }
    midnight(now)
}

fn date(day_start_ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(day_start_ms / 1000)
        .unwrap()
        .date()
        .to_string()
}

/// The value of `name="..."` in an HTML tag.
fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

/// A browser's keep-alive HTTP client.
fn http_client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .build()
        .expect("an HTTP client")
}

/// What a browser (or a bot) sends to `/api/send` for one page view; the
/// visitor's IP arrives in `X-Forwarded-For`, as behind the ingress.
fn send_pageview(
    client: &reqwest::blocking::Client,
    origin: &str,
    website: &str,
    domain: &str,
    url: &str,
    user_agent: &str,
    ip: &str,
) -> Value {
    let body = json!({"type": "event", "payload": {
        "website": website, "hostname": domain, "url": url, "language": "en-US",
        "screen": "1920x1080", "title": "Shop", "referrer": ""
    }});
    let response = client
        .post(format!("{origin}/api/send"))
        .header("User-Agent", user_agent)
        .header("X-Forwarded-For", ip)
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .expect("the provider's /api/send answers");
    assert_eq!(response.status(), 200, "/api/send for {user_agent}");
    response.json().expect("a JSON answer")
}

/// Fails when the secret shows up anywhere a person or a client could read.
fn assert_secret_absent(platform: &Platform, what: &str, text: &str) {
    assert!(
        !text.contains(&platform.secret),
        "{what} holds the provider secret: {text}"
    );
}

fn assert_logs_hold_no_secret(platform: &Platform, request_ids: &[&str]) {
    let logs = captured_logs();
    for id in request_ids {
        assert!(
            logs.contains(id),
            "the host logged nothing for request {id}; is the log captured?"
        );
    }
    assert_secret_absent(platform, "the host log", &logs);
}

// ---- the stories ---------------------------------------------------------------

#[test]
fn a_customer_provisions_tracks_visits_and_reads_exactly_that_traffic() {
    let shop = platform("acme-shop");
    let browser = http_client();

    // Setup: name and domain in, configuration out.
    let config = shop.provision("Acme Shop", "Shop.Example.COM");
    let id = website_id("acme-shop", "shop.example.com");
    assert_eq!(config["website_id"], id.to_string());
    assert_eq!(config["domain"], "shop.example.com");
    assert_eq!(config["domain_restriction"], json!(["shop.example.com"]));
    assert_eq!(config["tracking_origin"], shop.fake.base_url());
    assert_eq!(
        config["dashboard_url"],
        format!("{}/websites/{id}", shop.fake.base_url())
    );
    let script = config["tracking_script"].as_str().unwrap();
    assert_eq!(
        attribute(script, "src"),
        Some(format!("{}/script.js", shop.fake.base_url()).as_str())
    );
    assert_eq!(attribute(script, "data-website-id"), Some(&*id.to_string()));
    assert_eq!(attribute(script, "data-domains"), Some("shop.example.com"));
    assert_eq!(attribute(script, "data-host-url"), None);
    assert_eq!(
        ok(&shop.invoke("analytics.configuration", json!({}))),
        &config,
        "the configuration reads back what setup answered"
    );

    // The page loads the script from where the tag says.
    let loaded = browser
        .get(config["script_url"].as_str().unwrap())
        .header("User-Agent", FIREFOX)
        .send()
        .unwrap();
    assert_eq!(loaded.status(), 200);
    assert!(
        loaded
            .headers()
            .get("content-type")
            .is_some_and(|t| t.to_str().unwrap().contains("javascript"))
    );
    assert!(!loaded.text().unwrap().is_empty());

    // Earlier this week (recorded at past times on the provider).
    let today = today_with_room_for_the_story();
    let past: [(i64, &str, &str, &str); 4] = [
        (
            today - 5 * DAY_MS + 9 * HOUR_MS,
            FIREFOX,
            "198.51.100.7",
            "/",
        ),
        (
            today - 5 * DAY_MS + 9 * HOUR_MS + 60_000,
            FIREFOX,
            "198.51.100.7",
            "/docs",
        ),
        (
            today - 5 * DAY_MS + 14 * HOUR_MS,
            CHROME,
            "203.0.113.9",
            "/",
        ),
        (
            today - 2 * DAY_MS + 20 * HOUR_MS,
            SAFARI,
            "192.0.2.44",
            "/blog",
        ),
    ];
    for (at, agent, ip, url) in past {
        shop.fake
            .record_event(id, url, at, agent, ip)
            .expect("the website exists on the provider");
    }

    // Today, over real HTTP, with what the tag tells the script: the
    // tracking origin (no data-host-url: where the script came from), the
    // website id and the domain it may count.
    let origin = config["tracking_origin"].as_str().unwrap();
    let website = attribute(script, "data-website-id").unwrap();
    let domain = attribute(script, "data-domains").unwrap();
    let today_views = [
        (FIREFOX, "198.51.100.7", "/"),
        (FIREFOX, "198.51.100.7", "/pricing"),
        (SAFARI, "192.0.2.44", "/"),
    ];
    let mut visits_today = BTreeSet::new();
    let mut sessions_today = BTreeSet::new();
    for (agent, ip, url) in today_views {
        let answer = send_pageview(&browser, origin, website, domain, url, agent, ip);
        visits_today.insert(answer["visitId"].as_str().unwrap().to_owned());
        sessions_today.insert(answer["sessionId"].as_str().unwrap().to_owned());
    }
    // curl is not a browser: answered, not counted.
    let bot = send_pageview(&browser, origin, website, domain, "/", CURL, "192.0.2.99");
    assert_eq!(bot, json!({"beep": "boop"}));
    assert_eq!(sessions_today.len(), 2);

    // The panel's question: the last seven UTC days, per day.
    let start = today - 6 * DAY_MS;
    let end = today + DAY_MS;
    let range = json!({"start_at": start, "end_at": end, "unit": "day"});
    let stats = ok(&shop.invoke("analytics.stats", range.clone())).clone();
    assert_eq!(stats["website_id"], website);
    assert_eq!(
        (stats["start_at"].as_i64(), stats["end_at"].as_i64()),
        (Some(start), Some(end))
    );
    // Visitors: Firefox, Chrome, Safari. Visits: three earlier (distinct
    // hours or visitors) plus today's. Page views: four earlier, three today.
    assert_eq!(stats["visitors"], 3);
    assert_eq!(stats["visits"], 3 + visits_today.len());
    assert_eq!(stats["pageviews"], 7);

    let mut expected: BTreeMap<String, (u64, u64)> =
        (0..7).map(|d| (date(start + d * DAY_MS), (0, 0))).collect();
    expected.insert(date(today - 5 * DAY_MS), (3, 2));
    expected.insert(date(today - 2 * DAY_MS), (1, 1));
    expected.insert(date(today), (3, 2));
    let series: BTreeMap<String, (u64, u64)> = stats["series"]
        .as_array()
        .expect("unit=day adds a series")
        .iter()
        .map(|d| {
            (
                d["date"].as_str().unwrap().to_owned(),
                (
                    d["pageviews"].as_u64().unwrap(),
                    d["visitors"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    assert_eq!(
        stats["series"].as_array().unwrap().len(),
        7,
        "one entry per UTC day"
    );
    assert_eq!(series, expected, "zero-filled, per UTC day");

    // Without unit=day: the same totals, no series.
    let totals =
        ok(&shop.invoke("analytics.stats", json!({"start_at": start, "end_at": end}))).clone();
    assert!(totals.get("series").is_none());
    for key in ["visitors", "visits", "pageviews"] {
        assert_eq!(totals[key], stats[key], "{key}");
    }

    // Every response generation of Umami gives the same answer.
    for shape in [
        ResponseShape::V2,
        ResponseShape::V3Postgres,
        ResponseShape::V3,
    ] {
        shop.fake.set_shape(shape);
        let again = shop.invoke("analytics.stats", range.clone());
        assert_eq!(ok(&again), &stats, "{shape:?}");
    }

    let last = shop.invoke("analytics.stats", range);
    assert_secret_absent(&shop, "the stats result", &last.to_json().to_string());
    assert_logs_hold_no_secret(&shop, &[&last.request_id]);
}

#[test]
fn provisioning_is_idempotent_renames_in_place_and_moves_with_the_domain() {
    let shop = platform("acme-blog");
    let first = shop.provision("Acme Blog", "blog.example.com");
    assert_eq!(shop.fake.writes(), 1, "the first setup creates the website");
    assert_eq!(first["revision"], 1);

    let again = shop.provision("Acme Blog", "blog.example.com");
    assert_eq!(again, first, "same input, same answer, revision included");
    assert_eq!(
        shop.fake.writes(),
        1,
        "the same input makes no provider write"
    );

    let renamed = shop.provision("Acme Engineering Blog", "blog.example.com");
    assert_eq!(renamed["website_id"], first["website_id"]);
    assert_eq!(renamed["name"], "Acme Engineering Blog");
    assert_eq!(renamed["revision"], 2);
    assert_eq!((shop.fake.creates(), shop.fake.renames()), (1, 1));
    let id: Uuid = first["website_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        shop.fake.website(id).unwrap().name,
        "Acme Engineering Blog",
        "renamed on the provider"
    );

    let moved = shop.provision("Acme Engineering Blog", "engineering.example.com");
    let new_id = website_id("acme-blog", "engineering.example.com");
    assert_ne!(moved["website_id"], first["website_id"]);
    assert_eq!(moved["website_id"], new_id.to_string());
    assert_eq!(
        moved["domain_restriction"],
        json!(["engineering.example.com"])
    );
    assert_eq!((shop.fake.creates(), shop.fake.renames()), (2, 1));
    assert!(
        shop.fake.website(id).is_some(),
        "the old website stays on the provider with its history"
    );
    assert_eq!(
        ok(&shop.invoke("analytics.configuration", json!({}))),
        &moved
    );
}

#[test]
fn two_concurrent_provisions_of_one_project_leave_one_website_and_one_mapping() {
    let shop = platform("acme-twins");
    let start = Barrier::new(2);
    let answers: Vec<Invocation> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    shop.invoke(
                        "analytics.provision",
                        json!({"name": "Twins", "domain": "twins.example.com"}),
                    )
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let outputs: Vec<&Value> = answers.iter().map(ok).collect();
    assert_eq!(outputs[0]["website_id"], outputs[1]["website_id"]);
    assert_eq!(
        outputs[0]["website_id"],
        website_id("acme-twins", "twins.example.com").to_string()
    );
    assert_eq!(shop.fake.websites().len(), 1, "one website on the provider");
    assert_eq!(shop.fake.creates(), 1);
    let documents = shop.host.state().documents("acme-twins").unwrap();
    let mappings: Vec<_> = documents
        .iter()
        .map(|stored| {
            (
                stored.extension_id.as_str(),
                stored.collection.as_str(),
                stored.id.as_str(),
                stored.document.revision,
            )
        })
        .collect();
    assert_eq!(mappings, [(EXTENSION, "site", "mapping", 1)], "one mapping");
}

#[test]
fn configuration_before_setup_is_not_provisioned() {
    let shop = platform("acme-new");
    let invocation = shop.invoke("analytics.configuration", json!({}));
    let error = invocation.result.as_ref().unwrap_err();
    assert_eq!(
        (error.code(), http_status(error).as_u16()),
        ("not_provisioned", 404)
    );
    let body = invocation.to_json();
    assert_eq!(body["error"]["code"], "not_provisioned");
    assert_eq!(body["request_id"], invocation.request_id);
    assert!(shop.fake.websites().is_empty());
}

#[test]
fn a_tracking_origin_override_moves_the_script_but_not_the_dashboard() {
    let shop = platform("acme-custom");
    shop.provision("Acme", "www.acme.example");
    let tracking = "https://t.acme.example";
    shop.host
        .set_tracking_origin("acme-custom", Some(tracking))
        .unwrap();

    let config = ok(&shop.invoke("analytics.configuration", json!({}))).clone();
    let id = website_id("acme-custom", "www.acme.example");
    assert_eq!(config["tracking_origin"], tracking);
    assert_eq!(config["script_url"], format!("{tracking}/script.js"));
    let script = config["tracking_script"].as_str().unwrap();
    assert_eq!(
        attribute(script, "src"),
        Some(&*format!("{tracking}/script.js"))
    );
    assert_eq!(attribute(script, "data-host-url"), Some(tracking));
    assert_eq!(attribute(script, "data-website-id"), Some(&*id.to_string()));
    assert_eq!(attribute(script, "data-domains"), Some("www.acme.example"));
    assert_eq!(
        config["dashboard_url"],
        format!("{}/websites/{id}", shop.fake.base_url()),
        "the dashboard stays on the provider origin"
    );
}

#[test]
fn provider_faults_become_502s_that_leak_no_secret() {
    let shop = platform("acme-faults");
    shop.provision("Acme", "faults.example.com");
    let now = now_ms();
    let range = json!({"start_at": now - 7 * DAY_MS, "end_at": now, "unit": "day"});
    let mut request_ids = Vec::new();

    let cases = [
        (Fault::ServerError, "provider_unavailable"),
        (Fault::Unauthorized, "provider_rejected"),
        (Fault::MalformedJson, "provider_rejected"),
    ];
    for (fault, code) in cases {
        shop.fake.set_fault(fault.clone());
        for (action, input) in [
            ("analytics.stats", range.clone()),
            (
                "analytics.provision",
                json!({"name": "Acme renamed", "domain": "faults.example.com"}),
            ),
        ] {
            let invocation = shop.invoke(action, input);
            let error = invocation.result.as_ref().unwrap_err();
            assert_eq!(
                (error.code(), http_status(error).as_u16()),
                (code, 502),
                "{fault:?} {action}: {error}"
            );
            assert_secret_absent(&shop, "an error", &invocation.to_json().to_string());
            assert_secret_absent(&shop, "an invocation", &format!("{invocation:?}"));
            request_ids.push(invocation.request_id.clone());
        }
    }

    // Slower than the binding's timeout: cut off at the timeout.
    shop.host
        .set_binding(
            "acme-faults",
            "provider",
            &shop.fake.base_url(),
            Secret::new(shop.secret.clone()),
            AuthStyle::Bearer,
            Duration::from_millis(200),
        )
        .unwrap();
    shop.fake.set_fault(Fault::Slow { delay_ms: 1_500 });
    let started = Instant::now();
    let slow = shop.invoke("analytics.stats", range.clone());
    let waited = started.elapsed();
    let error = slow.result.as_ref().unwrap_err();
    assert_eq!(
        (error.code(), http_status(error).as_u16()),
        ("provider_unavailable", 502),
        "{error}"
    );
    assert!(
        waited < Duration::from_millis(1_000),
        "the binding's 200 ms timeout ended the call, not the provider ({waited:?})"
    );
    assert_secret_absent(&shop, "an error", &slow.to_json().to_string());
    request_ids.push(slow.request_id.clone());

    // The provider recovers; so does the extension. Nothing was renamed.
    shop.fake.set_fault(Fault::None);
    let healthy = shop.invoke("analytics.stats", range);
    ok(&healthy);
    assert_secret_absent(&shop, "a result", &healthy.to_json().to_string());
    assert_eq!(shop.fake.renames(), 0);
    let bindings = format!("{:?}", shop.host.bindings(Some("acme-faults")).unwrap());
    assert_secret_absent(&shop, "the operator's binding listing", &bindings);

    let ids: Vec<&str> = request_ids.iter().map(String::as_str).collect();
    assert_logs_hold_no_secret(&shop, &ids);
}

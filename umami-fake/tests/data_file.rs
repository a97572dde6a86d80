//! With a data file, the fake's websites and page views survive a restart
//! (the demo reruns against the same provider data).

use std::net::SocketAddr;
use std::path::Path;

use serde_json::{Value, json};
use umami_fake::{FakeConfig, FakeHandle, UmamiFake};

const SECRET: &str = "fake-secret-data-file";
const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0";
const ID: &str = "2d3c4b5a-6f7e-5d8c-9b0a-1f2e3d4c5b6a";

fn start(path: &Path) -> FakeHandle {
    UmamiFake::with_data_file(FakeConfig::new(SECRET), path)
        .expect("the data file loads")
        .spawn(SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("the fake starts")
}

fn post(url: &str, headers: &[(&str, &str)], body: Value) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = ureq::http::Request::builder()
        .method("POST")
        .uri(url)
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut response = agent
        .run(request.body(body.to_string()).unwrap())
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    (
        response.status().as_u16(),
        response.body_mut().read_to_string().unwrap(),
    )
}

fn get_json(url: &str) -> Value {
    let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
    let mut response = agent
        .run(ureq::http::Request::builder().uri(url).body(()).unwrap())
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap()
}

fn page_view(fake: &FakeHandle, url: &str) {
    let (status, body) = post(
        &format!("{}/api/send", fake.base_url()),
        &[("user-agent", BROWSER), ("x-forwarded-for", "192.0.2.7")],
        json!({"type": "event", "payload": {"website": ID, "hostname": "shop.example.com", "url": url}}),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("sessionId"), "recorded: {body}");
}

#[test]
fn websites_and_page_views_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("provider.json");

    let fake = start(&path);
    assert!(fake.websites().is_empty(), "a missing file starts empty");
    let (status, body) = post(
        &format!("{}/api/websites", fake.base_url()),
        &[("authorization", &format!("Bearer {SECRET}"))],
        json!({"id": ID, "name": "Shop", "domain": "shop.example.com"}),
    );
    assert_eq!(status, 200, "{body}");
    page_view(&fake, "/");
    page_view(&fake, "/pricing");
    drop(fake);

    let leftovers: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(leftovers, ["provider.json"], "no temporary file stays");

    let fake = start(&path);
    let state = get_json(&format!("{}/__fake/state", fake.base_url()));
    assert_eq!(state["websites"][0]["id"], ID);
    assert_eq!(state["websites"][0]["name"], "Shop");
    assert_eq!(state["events"], 2);
    assert_eq!(state["writes"], 0, "counters belong to one run");
    let urls: Vec<String> = fake.events().into_iter().map(|e| e.url).collect();
    assert_eq!(urls, ["/", "/pricing"]);

    // The restarted fake keeps recording into the same file.
    page_view(&fake, "/contact");
    drop(fake);
    let fake = start(&path);
    assert_eq!(fake.events().len(), 3);

    // A reset empties the file too.
    let (status, _) = post(&format!("{}/__fake/reset", fake.base_url()), &[], json!({}));
    assert_eq!(status, 204);
    drop(fake);
    let fake = start(&path);
    assert!(fake.websites().is_empty() && fake.events().is_empty());
}

#[test]
fn a_file_that_is_not_a_data_file_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("provider.json");
    std::fs::write(&path, "not json").unwrap();
    let error = UmamiFake::with_data_file(FakeConfig::new(SECRET), &path)
        .err()
        .expect("a foreign file is refused");
    assert!(error.to_string().contains("provider.json"), "{error}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "not json",
        "and left alone"
    );
}

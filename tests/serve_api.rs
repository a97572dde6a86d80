//! `host-sim serve` over real HTTP on loopback: the extension API (each
//! action, authentication, authorization, generations, bad bodies, the one
//! error shape), the console's sign-in and panel sessions, and the panel
//! files served from the installed release.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use serde_json::Value;
use support::{EXTENSION, Platform, Served};
use umami_fake::Fault;

const SECRET: &str = "provider-secret-never-shown";
const DAY_MS: i64 = 86_400_000;

fn client() -> Client {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

struct Api {
    platform: Platform,
    served: Served,
    client: Client,
}

/// Everything an answer carried, checked for the one error shape and for
/// the provider secret.
struct Answer {
    status: StatusCode,
    request_id: String,
    generation: Option<u64>,
    body: Value,
}

impl Answer {
    fn read(response: Response) -> Answer {
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().unwrap();
        assert!(
            !text.contains(SECRET),
            "an answer shows the provider secret"
        );
        let request_id = headers
            .get("x-request-id")
            .expect("every answer has X-Request-Id")
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(request_id.len(), 32, "{request_id}");
        let body: Value = serde_json::from_str(&text).expect("a JSON body");
        if !status.is_success() {
            assert_eq!(
                body["request_id"], request_id,
                "the error names the request id of its header: {body}"
            );
            assert!(body["error"]["code"].is_string(), "{body}");
            assert!(
                !body["error"]["message"].as_str().unwrap().is_empty(),
                "{body}"
            );
        }
        Answer {
            status,
            request_id,
            generation: headers
                .get("x-runtime-generation")
                .map(|v| v.to_str().unwrap().parse().unwrap()),
            body,
        }
    }

    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }
}

impl Api {
    fn start(project: &str) -> Api {
        let platform = Platform::start(project, SECRET, Duration::from_secs(2));
        let served = platform.serve();
        Api {
            platform,
            served,
            client: client(),
        }
    }

    fn url(&self, route: &str) -> String {
        format!("{}{route}", self.platform.api_base(&self.served))
    }

    fn get(&self, route: &str, token: Option<&str>) -> Answer {
        let mut request = self.client.get(self.url(route));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        Answer::read(request.send().unwrap())
    }

    fn post(&self, route: &str, token: &str, body: &str) -> Answer {
        Answer::read(
            self.client
                .post(self.url(route))
                .bearer_auth(token)
                .header("Content-Type", "application/json")
                .body(body.to_string())
                .send()
                .unwrap(),
        )
    }

    fn provision(&self) -> Answer {
        self.post(
            "/site",
            &self.platform.token,
            r#"{"name":"Corner Shop","domain":"shop.example.com"}"#,
        )
    }
}

fn week() -> (i64, i64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let end = now - now % DAY_MS + DAY_MS;
    (end - 7 * DAY_MS, end)
}

#[test]
fn each_action_answers_with_its_output_a_request_id_and_the_generation() {
    let api = Api::start("shop");
    let token = api.platform.token.clone();

    let before = api.get("/configuration", Some(&token));
    assert_eq!(before.status, StatusCode::NOT_FOUND);
    assert_eq!(before.code(), "not_provisioned");

    let provisioned = api.provision();
    assert_eq!(provisioned.status, StatusCode::OK, "{}", provisioned.body);
    let generation = api.platform.host.generation(EXTENSION, "shop").unwrap();
    assert_eq!(provisioned.generation, Some(generation));
    let website = provisioned.body["website_id"].as_str().unwrap().to_string();
    assert!(
        provisioned.body["tracking_script"]
            .as_str()
            .unwrap()
            .contains(&website)
    );

    let config = api.get("/configuration", Some(&token));
    assert_eq!(config.status, StatusCode::OK);
    assert_eq!(config.body, provisioned.body);
    assert_ne!(config.request_id, provisioned.request_id);

    let (start, end) = week();
    for view in 0..3 {
        api.platform
            .fake
            .record_event(
                website.parse().unwrap(),
                "/",
                end - DAY_MS + view * 1000,
                "Mozilla/5.0 (serve test)",
                "198.51.100.7",
            )
            .unwrap();
    }
    let stats = api.get(
        &format!("/stats?start_at={start}&end_at={end}&unit=day"),
        Some(&token),
    );
    assert_eq!(stats.status, StatusCode::OK, "{}", stats.body);
    assert_eq!(stats.body["pageviews"], 3);
    assert_eq!(stats.body["visitors"], 1);
    let series = stats.body["series"].as_array().unwrap();
    assert_eq!(series.len(), 7);
    assert_eq!(series[6]["pageviews"], 3);
    assert_eq!(series[0]["pageviews"], 0);

    // The caller's generation is carried by a header.
    let current = api
        .client
        .get(api.url("/configuration"))
        .bearer_auth(&token)
        .header("X-Runtime-Generation", generation.to_string())
        .send()
        .unwrap();
    assert_eq!(Answer::read(current).status, StatusCode::OK);
}

#[test]
fn missing_malformed_unknown_and_expired_tokens_are_401() {
    let api = Api::start("shop");
    let missing = api.get("/configuration", None);
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
    assert_eq!(missing.code(), "unauthenticated");

    let unknown = api.get("/configuration", Some("hst_0000"));
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);

    let basic = api
        .client
        .get(api.url("/configuration"))
        .header("Authorization", "Basic dXNlcjpwYXNz")
        .send()
        .unwrap();
    let www = basic.headers().get("www-authenticate").cloned();
    assert_eq!(Answer::read(basic).status, StatusCode::UNAUTHORIZED);
    assert!(www.unwrap().to_str().unwrap().starts_with("Bearer"));

    let expired = api
        .platform
        .host
        .issue_token("customer", &["shop".into()], Duration::from_secs(1))
        .unwrap();
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(
        api.get("/configuration", Some(&expired.token)).status,
        StatusCode::UNAUTHORIZED
    );

    // Unknown tokens learn nothing about routes or extensions.
    let probe = Answer::read(
        api.client
            .get(format!(
                "{}/v1/plugins/not-installed/projects/shop/api/anything",
                api.served.base_url
            ))
            .bearer_auth("hst_0000")
            .send()
            .unwrap(),
    );
    assert_eq!(probe.status, StatusCode::UNAUTHORIZED);
}

#[test]
fn projects_out_of_reach_and_extensions_not_granted_are_403() {
    let api = Api::start("shop");
    let host = &api.platform.host;
    let elsewhere = host
        .issue_token("stranger", &["elsewhere".into()], Duration::from_secs(600))
        .unwrap();
    let refused = api.get("/configuration", Some(&elsewhere.token));
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.code(), "forbidden");
    assert!(refused.message().contains("no access to project shop"));

    // A project the caller reaches but the extension is not granted to.
    let both = host
        .issue_token(
            "customer",
            &["shop".into(), "ungranted".into()],
            Duration::from_secs(600),
        )
        .unwrap();
    let ungranted = Answer::read(
        api.client
            .get(format!(
                "{}/v1/plugins/{EXTENSION}/projects/ungranted/api/configuration",
                api.served.base_url
            ))
            .bearer_auth(&both.token)
            .send()
            .unwrap(),
    );
    assert_eq!(ungranted.status, StatusCode::FORBIDDEN);
    assert!(
        ungranted.message().contains("not granted"),
        "{}",
        ungranted.message()
    );

    // Revoking the grant refuses the very next call.
    assert_eq!(api.provision().status, StatusCode::OK);
    host.revoke(EXTENSION, "shop").unwrap();
    let revoked = api.get("/configuration", Some(&api.platform.token));
    assert_eq!(revoked.status, StatusCode::FORBIDDEN);
}

#[test]
fn a_stale_or_malformed_generation_is_refused() {
    let api = Api::start("shop");
    let token = &api.platform.token;
    let current = api.platform.host.generation(EXTENSION, "shop").unwrap();
    let with_generation = |value: &str| {
        Answer::read(
            api.client
                .get(api.url("/configuration"))
                .bearer_auth(token)
                .header("X-Runtime-Generation", value)
                .send()
                .unwrap(),
        )
    };
    let stale = with_generation(&(current + 7).to_string());
    assert_eq!(stale.status, StatusCode::CONFLICT);
    assert_eq!(stale.code(), "stale_generation");

    // An operator change bumps the generation: what the panel held is stale.
    api.platform.host.revoke(EXTENSION, "shop").unwrap();
    api.platform.host.grant(EXTENSION, "shop").unwrap();
    let after_regrant = with_generation(&current.to_string());
    assert_eq!(after_regrant.status, StatusCode::CONFLICT);

    let malformed = with_generation("seven");
    assert_eq!(malformed.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(malformed.message().contains("X-Runtime-Generation"));
}

#[test]
fn bad_bodies_and_queries_are_413_or_422_and_store_nothing() {
    let api = Api::start("shop");
    let token = &api.platform.token;
    let cases: &[(&str, &str)] = &[
        ("{\"name\": \"Shop\", ", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        // An empty body is `{}`: the schema names the first missing field.
        ("", "name"),
        (r#"{"name":"Shop"}"#, "domain"),
        (
            r#"{"name":"Shop","domain":"shop.example.com","extra":1}"#,
            "extra",
        ),
        (r#"{"name":"","domain":"shop.example.com"}"#, "name"),
        (r#"{"name":"Shop","domain":"localhost"}"#, "domain"),
    ];
    for (body, names) in cases {
        let answer = api.post("/site", token, body);
        assert_eq!(
            answer.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {}",
            answer.body
        );
        assert!(
            answer.message().contains(names),
            "{body}: {}",
            answer.message()
        );
    }

    let huge = format!(
        r#"{{"name":"Shop","domain":"shop.example.com","pad":"{}"}}"#,
        "x".repeat(300 << 10)
    );
    let too_large = api.post("/site", token, &huge);
    assert_eq!(too_large.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(too_large.code(), "payload_too_large");

    let (start, end) = week();
    for (query, names) in [
        (format!("start_at=soon&end_at={end}"), "start_at"),
        (format!("start_at={start}"), "end_at"),
        (
            format!("start_at={start}&start_at={start}&end_at={end}"),
            "start_at",
        ),
        (format!("start_at={end}&end_at={start}"), "end_at"),
        (format!("start_at={start}&end_at={end}&unit=hour"), "unit"),
    ] {
        let answer = api.get(&format!("/stats?{query}"), Some(token));
        assert_eq!(
            answer.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}: {}",
            answer.body
        );
        assert!(
            answer.message().contains(names),
            "{query}: {}",
            answer.message()
        );
    }

    // Nothing reached the provider or the documents.
    assert_eq!(api.platform.fake.writes(), 0);
    assert_eq!(
        api.get("/configuration", Some(token)).code(),
        "not_provisioned"
    );
}

#[test]
fn unknown_routes_and_methods_get_the_error_shape() {
    let api = Api::start("shop");
    let token = &api.platform.token;
    let unknown = api.get("/nothing-here", Some(token));
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.code(), "not_found");

    let wrong_method = api.get("/site", Some(token));
    assert_eq!(wrong_method.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(wrong_method.message().contains("POST"));

    let not_installed = Answer::read(
        api.client
            .get(format!(
                "{}/v1/plugins/not-installed/projects/shop/api/stats",
                api.served.base_url
            ))
            .bearer_auth(token)
            .send()
            .unwrap(),
    );
    assert_eq!(not_installed.status, StatusCode::NOT_FOUND);

    let elsewhere = Answer::read(
        api.client
            .get(format!("{}/v2/whatever", api.served.base_url))
            .send()
            .unwrap(),
    );
    assert_eq!(elsewhere.status, StatusCode::NOT_FOUND);
}

#[test]
fn provider_faults_are_502_with_nothing_of_the_secret() {
    let api = Api::start("shop");
    assert_eq!(api.provision().status, StatusCode::OK);
    let (start, end) = week();
    for fault in [
        Fault::ServerError,
        Fault::Unauthorized,
        Fault::MalformedJson,
    ] {
        api.platform.fake.set_fault(fault.clone());
        let answer = api.get(
            &format!("/stats?start_at={start}&end_at={end}"),
            Some(&api.platform.token),
        );
        assert_eq!(
            answer.status,
            StatusCode::BAD_GATEWAY,
            "{fault:?}: {}",
            answer.body
        );
        assert!(
            ["provider_unavailable", "provider_rejected"].contains(&answer.code()),
            "{fault:?}: {}",
            answer.body
        );
    }
}

#[test]
fn panels_in_sandboxed_iframes_may_call_the_api_across_origins() {
    let api = Api::start("shop");
    let preflight = api
        .client
        .request(reqwest::Method::OPTIONS, api.url("/stats"))
        .header("Origin", "null")
        .header("Access-Control-Request-Method", "GET")
        .header(
            "Access-Control-Request-Headers",
            "authorization,x-runtime-generation",
        )
        .send()
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let headers = preflight.headers();
    assert_eq!(headers["access-control-allow-origin"], "*");
    let allowed = headers["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(allowed.contains("authorization") && allowed.contains("x-runtime-generation"));
}

/// The console: sign in, the project page, a panel session.
mod console {
    use super::*;

    fn sign_in(api: &Api, token: &str) -> reqwest::blocking::Response {
        api.client
            .post(format!("{}/console/sign-in", api.served.base_url))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .header("Origin", &api.served.base_url)
            .body(format!("token={token}"))
            .send()
            .unwrap()
    }

    fn session_cookie(response: &reqwest::blocking::Response) -> String {
        let cookie = response.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(cookie.contains("HttpOnly"), "{cookie}");
        assert!(cookie.contains("SameSite=Strict"), "{cookie}");
        assert!(cookie.contains("Path=/console"), "{cookie}");
        cookie.split(';').next().unwrap().to_string()
    }

    fn new_session(api: &Api, cookie: &str, project: &str) -> Answer {
        Answer::read(
            api.client
                .post(format!(
                    "{}/console/api/projects/{project}/extensions/{EXTENSION}/session",
                    api.served.base_url
                ))
                .header("Cookie", cookie)
                .send()
                .unwrap(),
        )
    }

    #[test]
    fn signing_in_keeps_the_token_on_the_server() {
        let api = Api::start("shop");
        let form = api
            .client
            .get(format!("{}/console", api.served.base_url))
            .send()
            .unwrap();
        assert_eq!(form.status(), StatusCode::OK);
        assert!(
            form.headers()["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("frame-ancestors 'none'")
        );
        let html = form.text().unwrap();
        assert!(html.contains("<label for=\"token\">"), "{html}");

        let refused = sign_in(&api, "hst_not-a-token");
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        assert!(refused.headers().get("set-cookie").is_none());
        assert!(refused.text().unwrap().contains("unknown or has expired"));

        let cross_site = api
            .client
            .post(format!("{}/console/sign-in", api.served.base_url))
            .header("Origin", "http://evil.example")
            .body(format!("token={}", api.platform.token))
            .send()
            .unwrap();
        assert_eq!(cross_site.status(), StatusCode::FORBIDDEN);

        let signed_in = sign_in(&api, &api.platform.token);
        assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
        assert_eq!(signed_in.headers()["location"], "/console/projects/shop");
        let cookie = session_cookie(&signed_in);
        assert!(!cookie.contains(&api.platform.token));

        let page = api
            .client
            .get(format!("{}/console/projects/shop", api.served.base_url))
            .header("Cookie", &cookie)
            .send()
            .unwrap();
        assert_eq!(page.status(), StatusCode::OK);
        let html = page.text().unwrap();
        assert!(
            !html.contains(&api.platform.token),
            "the page shows the token"
        );
        assert!(
            html.contains("sandbox=\"allow-scripts allow-forms\""),
            "{html}"
        );
        assert!(html.contains(&format!("src=\"/v1/plugins/{EXTENSION}/panel/index.html\"")));
        assert!(html.contains("/console/console.js"));

        let signed_out = api
            .client
            .post(format!("{}/console/sign-out", api.served.base_url))
            .header("Cookie", &cookie)
            .send()
            .unwrap();
        assert_eq!(signed_out.status(), StatusCode::SEE_OTHER);
        assert_eq!(
            new_session(&api, &cookie, "shop").status,
            StatusCode::UNAUTHORIZED
        );
    }

    #[test]
    fn panel_sessions_are_short_lived_and_reach_one_project() {
        let api = Api::start("shop");
        let host = &api.platform.host;
        host.grant(EXTENSION, "other-shop").unwrap();
        let user = host
            .issue_token(
                "customer",
                &["shop".into(), "other-shop".into()],
                Duration::from_secs(3600),
            )
            .unwrap();
        let signed_in = sign_in(&api, &user.token);
        assert_eq!(signed_in.headers()["location"], "/console");
        let cookie = session_cookie(&signed_in);

        let session = new_session(&api, &cookie, "shop");
        assert_eq!(session.status, StatusCode::OK, "{}", session.body);
        let panel_token = session.body["token"].as_str().unwrap().to_string();
        assert_ne!(panel_token, user.token);
        assert_eq!(
            session.body["generation"],
            host.generation(EXTENSION, "shop").unwrap()
        );
        assert_eq!(
            session.body["apiBase"],
            format!("/v1/plugins/{EXTENSION}/projects/shop/api")
        );
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let expires = session.body["expiresAt"].as_i64().unwrap();
        assert!(
            expires > now_ms && expires <= now_ms + 601_000,
            "{expires} vs {now_ms}"
        );

        // It works for its project and nowhere else.
        assert_eq!(
            api.get("/configuration", Some(&panel_token)).code(),
            "not_provisioned"
        );
        let other = Answer::read(
            api.client
                .get(format!(
                    "{}/v1/plugins/{EXTENSION}/projects/other-shop/api/configuration",
                    api.served.base_url
                ))
                .bearer_auth(&panel_token)
                .send()
                .unwrap(),
        );
        assert_eq!(other.status, StatusCode::FORBIDDEN);

        // No session for a project the user cannot reach, none without
        // the cookie, none for another site.
        assert_eq!(
            new_session(&api, &cookie, "elsewhere").status,
            StatusCode::FORBIDDEN
        );
        let anonymous = Answer::read(
            api.client
                .post(format!(
                    "{}/console/api/projects/shop/extensions/{EXTENSION}/session",
                    api.served.base_url
                ))
                .send()
                .unwrap(),
        );
        assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
        let cross_site = Answer::read(
            api.client
                .post(format!(
                    "{}/console/api/projects/shop/extensions/{EXTENSION}/session",
                    api.served.base_url
                ))
                .header("Cookie", &cookie)
                .header("Origin", "http://evil.example")
                .send()
                .unwrap(),
        );
        assert_eq!(cross_site.status, StatusCode::FORBIDDEN);
    }

    #[test]
    fn panel_files_come_from_the_installed_release_and_nothing_else_does() {
        let api = Api::start("shop");
        let base = format!("{}/v1/plugins/{EXTENSION}/panel", api.served.base_url);
        let expected = [
            ("index.html", "text/html"),
            ("panel.js", "text/javascript"),
            ("panel_bg.wasm", "application/wasm"),
            ("style.css", "text/css"),
        ];
        let release = workspace_tests::release_dir();
        for (file, content_type) in expected {
            let response = api.client.get(format!("{base}/{file}")).send().unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{file}");
            let headers = response.headers().clone();
            assert!(
                headers["content-type"]
                    .to_str()
                    .unwrap()
                    .starts_with(content_type),
                "{file}"
            );
            assert_eq!(headers["access-control-allow-origin"], "*", "{file}");
            let bytes = response.bytes().unwrap();
            assert_eq!(
                bytes.as_ref(),
                std::fs::read(release.join("panel").join(file)).unwrap(),
                "{file} is the release's own"
            );
        }
        for outside in [
            "../plugin.wasm",
            "../manifest.toml",
            "%2e%2e/plugin.wasm",
            "missing.js",
        ] {
            let response = api.client.get(format!("{base}/{outside}")).send().unwrap();
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{outside}");
        }
        let response = api
            .client
            .get(format!(
                "{}/v1/plugins/not-installed/panel/index.html",
                api.served.base_url
            ))
            .send()
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }
}

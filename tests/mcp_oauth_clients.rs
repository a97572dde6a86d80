//! Clients written by others, and clients that describe themselves, against
//! the host's MCP authorization server: the official MCP Python SDK's
//! `OAuthClientProvider` (`mcp` on PyPI, pinned in
//! `tests/mcp_oauth/requirements.txt`, installed by `cargo xtask test`
//! into `target/mcp-python-venv`) and rmcp's OAuth client run the flow
//! headless, their "browser" signing in to the console as the test user and
//! approving; and clients identified by a Client ID Metadata Document,
//! fetched under the outbound rules (no private address, size and time
//! bounds).

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use host_sim::serve::ServeOptions;
use serde_json::{Value, json};
use support::oauth::{
    REDIRECT_URI, STATS, Web, authorize_path, default_setup, logged, pkce, query, setup, week,
};

// ---- Client ID Metadata Documents ------------------------------------------

/// A one-route HTTP server on loopback answering every request with the
/// body `make` writes for its origin, after `delay`.
fn document_server(make: impl Fn(&str) -> String, delay: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let body = make(&origin);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let body = body.clone();
            std::thread::spawn(move || {
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer);
                std::thread::sleep(delay);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(body.as_bytes());
            });
        }
    });
    origin
}

fn metadata_options() -> ServeOptions {
    let mut options = ServeOptions::default();
    options.oauth.metadata_fetch.allow_private_addresses = true;
    options.oauth.metadata_fetch.timeout = Duration::from_secs(1);
    options
}

#[test]
fn a_client_metadata_document_names_the_client_and_its_url_is_the_client_id() {
    let s = setup(metadata_options());
    let document = |origin: &str| {
        json!({"client_id": format!("{origin}/client.json"), "client_name": "Documented assistant",
               "redirect_uris": [REDIRECT_URI], "token_endpoint_auth_method": "none"})
        .to_string()
    };
    let client_id = format!("{}/client.json", document_server(document, Duration::ZERO));
    let (cookie, _) = s.web.sign_in(&s.person, None);
    let pair = pkce();
    let authorize = authorize_path(&client_id, &pair.challenge, Some("S256"), "s");
    let (request, page) = s
        .web
        .open_consent(&authorize, &cookie)
        .expect("a consent page");
    assert!(page.contains("Documented assistant"), "{page}");
    let location = s.web.decide(&cookie, &request, &["shop"], &["read"], true);
    let (status, tokens) = s.web.token(&[
        ("grant_type", "authorization_code"),
        ("code", &query(&location)["code"]),
        ("redirect_uri", REDIRECT_URI),
        ("client_id", &client_id),
        ("code_verifier", &pair.verifier),
    ]);
    assert_eq!(status, 200, "{tokens}");

    // A document that names another URL is not that client.
    let impostor = |_: &str| {
        json!({"client_id": "https://app.example/client.json", "redirect_uris": [REDIRECT_URI]})
            .to_string()
    };
    let client_id = format!("{}/client.json", document_server(impostor, Duration::ZERO));
    let page = s.web.get(
        &authorize_path(&client_id, &pair.challenge, Some("S256"), "s"),
        Some(&cookie),
    );
    assert_eq!(page.status().as_u16(), 400);
    assert!(page.text().unwrap().contains("exactly its own URL"));
}

#[test]
fn a_client_metadata_url_on_a_private_address_is_refused() {
    let s = default_setup();
    let (cookie, _) = s.web.sign_in(&s.person, None);
    let pair = pkce();
    for (client_id, why) in [
        ("https://127.0.0.1:9/client.json", "loopback"),
        ("https://10.1.2.3/client.json", "private"),
        ("https://169.254.169.254/client.json", "link-local"),
        ("http://127.0.0.1:9/client.json", "https://"),
    ] {
        let page = s.web.get(
            &authorize_path(client_id, &pair.challenge, Some("S256"), "s"),
            Some(&cookie),
        );
        assert_eq!(page.status().as_u16(), 400, "{client_id}");
        assert!(page.headers().get("location").is_none());
        let text = page.text().unwrap();
        assert!(
            text.contains("invalid_client") && text.contains(why),
            "{client_id}: {text}"
        );
    }
}

#[test]
fn an_oversized_or_slow_client_metadata_document_is_refused() {
    let s = setup(metadata_options());
    let (cookie, _) = s.web.sign_in(&s.person, None);
    let pair = pkce();
    let big = document_server(
        |_| format!("{{\"pad\":\"{}\"}}", "x".repeat(8 * 1024)),
        Duration::ZERO,
    );
    let slow = document_server(|_| "{}".into(), Duration::from_secs(3));
    for (client_id, why) in [
        (format!("{big}/client.json"), "larger than 5120 bytes"),
        (format!("{slow}/client.json"), "did not arrive within 1 s"),
    ] {
        let page = s.web.get(
            &authorize_path(&client_id, &pair.challenge, Some("S256"), "s"),
            Some(&cookie),
        );
        assert_eq!(page.status().as_u16(), 400, "{client_id}");
        let text = page.text().unwrap();
        assert!(text.contains(why), "{client_id}: {text}");
    }
}

// ---- the official MCP Python SDK -------------------------------------------

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp_oauth/sdk_oauth_client.py")
}

/// The interpreter with the pinned SDK (`target/mcp-python-venv`, which
/// `cargo xtask test` installs), if this machine has one.
fn python() -> Option<PathBuf> {
    let python = workspace_tests::workspace_root().join("target/mcp-python-venv/bin/python");
    let works = Command::new(&python)
        .args(["-c", "import mcp.client.auth"])
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        return Some(python);
    }
    let message = format!(
        "the MCP Python SDK is not installed at {}: run `cargo xtask test`, or `python3 -m venv \
         target/mcp-python-venv && target/mcp-python-venv/bin/pip install -r tests/mcp_oauth/requirements.txt`",
        python.display()
    );
    assert!(std::env::var_os("CI").is_none(), "CI is set: {message}");
    eprintln!("\n******** SKIPPED: {message} ********\n");
    None
}

#[test]
fn the_python_sdks_oauth_client_connects_lists_tools_calls_stats_and_refreshes() {
    let Some(python) = python() else {
        return;
    };
    let mut options = ServeOptions::default();
    options.oauth.lifetimes.access_token = Duration::from_secs(2);
    let s = setup(options);
    let output = Command::new(python)
        .arg(script())
        .env("HOST_SIM_BASE", &s.served.base_url)
        .env("HOST_SIM_PERSON_TOKEN", &s.person)
        .env("HOST_SIM_PROJECT", "shop")
        // Later starts of the same client on other loopback ports, each a
        // whole authorization, tools/list and call on one connection.
        .env("HOST_SIM_LOOPBACK_RUNS", "20")
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the SDK's flow failed:\n{stdout}\n{stderr}"
    );
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the script's last line is its JSON report ({e}):\n{stdout}"));
    assert!(
        report["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == STATS),
        "{report}"
    );
    assert_eq!(report["refreshed"], true, "{report}");
    assert_eq!(report["scope"], "read write");
    assert_eq!(report["loopback_runs"], 20, "{report}");
    let log = logged();
    for secret in report["secrets"].as_array().unwrap() {
        let secret = secret.as_str().unwrap();
        assert!(
            !log.contains(secret),
            "a secret of the SDK's flow was logged"
        );
    }
    // The app shows up in the person's connected apps.
    let (cookie, _) = s.web.sign_in(&s.person, None);
    let page = s.web.get("/console/apps", Some(&cookie)).text().unwrap();
    assert!(page.contains("MCP Python SDK test"), "{page}");
}

// ---- rmcp's OAuth client -----------------------------------------------------

/// The person's side for a client that made its own authorization URL:
/// sign in, approve `shop` with both scopes; the redirect the client gets.
fn person_approves(base: &str, person: &str, authorization_url: &str) -> String {
    let web = Web::new(base);
    let path = authorization_url
        .strip_prefix(base)
        .expect("the authorization endpoint is this server's");
    let (cookie, next) = web.sign_in(person, Some(path));
    assert_eq!(next, path);
    let (request, page) = web.open_consent(path, &cookie).expect("a consent page");
    assert!(page.contains("rmcp test"), "{page}");
    web.decide(&cookie, &request, &["shop"], &["read", "write"], true)
}

#[test]
fn rmcps_oauth_client_connects_lists_tools_calls_stats_and_refreshes() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::auth::{
        AuthClient, AuthorizationManager, AuthorizationRequest, AuthorizationSession,
    };
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    // rmcp refreshes 30 s before expiry: a 32 s token is refreshed after 3 s.
    let mut options = ServeOptions::default();
    options.oauth.lifetimes.access_token = Duration::from_secs(32);
    let s = setup(options);
    let base = s.served.base_url.clone();
    let mcp_url = format!("{base}/mcp");
    // The project has its website before the client calls stats. A host
    // invocation blocks (its binding calls run on their own runtime), so it
    // runs here, outside the test's async runtime.
    s.platform.provision("Shop", "shop.example");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut manager = AuthorizationManager::new(mcp_url.as_str())
            .await
            .expect("a manager");
        let resolved = manager.resolve_metadata().await.expect("discovery");
        manager.set_metadata(resolved.metadata);
        let request = AuthorizationRequest::new(REDIRECT_URI)
            .with_client_name("rmcp test")
            .with_scopes(["read", "write"]);
        let session = AuthorizationSession::new(manager, request)
            .await
            .map_err(|(_, e)| e)
            .expect("registration and the authorization URL");
        let url = session.get_authorization_url().to_string();
        let person = s.person.clone();
        let web_base = base.clone();
        let location =
            tokio::task::spawn_blocking(move || person_approves(&web_base, &person, &url))
                .await
                .unwrap();
        session
            .handle_callback_url(&location)
            .await
            .expect("the code exchange (state and iss checked)");
        let first = session.auth_manager.get_access_token().await.unwrap();
        let client = AuthClient::new(reqwest013::Client::default(), session.auth_manager);
        let manager = client.auth_manager.clone();
        let transport = StreamableHttpClientTransport::with_client(
            client,
            StreamableHttpClientTransportConfig::with_uri(mcp_url.as_str()),
        );
        let service = ().serve(transport).await.expect("initialize");
        let tools = service.list_all_tools().await.expect("tools/list");
        assert!(tools.iter().any(|t| t.name == STATS));
        let Value::Object(arguments) = week() else {
            unreachable!()
        };
        let stats = service
            .call_tool(CallToolRequestParams::new(STATS).with_arguments(arguments.clone()))
            .await
            .expect("stats");
        assert_eq!(stats.is_error, Some(false), "{stats:?}");
        tokio::time::sleep(Duration::from_secs(3)).await;
        let again = service
            .call_tool(CallToolRequestParams::new(STATS).with_arguments(arguments))
            .await
            .expect("stats after the refresh");
        assert_eq!(again.is_error, Some(false), "{again:?}");
        let second = manager.lock().await.get_access_token().await.unwrap();
        assert_ne!(first, second, "the client refreshed its access token");
        let _ = service.cancel().await;
    });
}

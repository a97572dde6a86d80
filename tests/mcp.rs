//! Managed analytics through the host's MCP server (`host-sim serve`,
//! `/mcp`), driven by rmcp's own streamable HTTP client.
//!
//! An assistant connects with the customer's bearer token, finds the three
//! analytics tools with the manifest's schemas plus `project_id`, provisions
//! a website, reads its configuration and the last seven days of traffic.
//! Refusals and failures come back as `isError` results in the one error
//! shape; unknown tools and missing arguments are protocol errors; requests
//! without a valid token never reach MCP. The provider's key shows up in no
//! result.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::ErrorData;
use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorCode, Tool};
use rmcp::service::{RoleClient, RunningService, ServiceError, ServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use support::{EXTENSION, Platform, Served};
use umami_fake::Fault;
use uuid::Uuid;

const DAY_MS: i64 = 86_400_000;
const HOUR_MS: i64 = 3_600_000;
const PROVISION: &str = "plugin__managed_analytics__provision";
const CONFIGURATION: &str = "plugin__managed_analytics__configuration";
const STATS: &str = "plugin__managed_analytics__stats";
const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:140.0) Gecko/20100101 Firefox/140.0";
const SAFARI: &str = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 Version/18.0 Safari/605.1.15";

type Client = RunningService<RoleClient, ()>;

fn platform(project: &str) -> Platform {
    let secret = format!("umami-key-{}", Uuid::new_v4().simple());
    Platform::start(project, &secret, Duration::from_millis(1500))
}

fn mcp_url(served: &Served) -> String {
    format!("{}/mcp", served.base_url)
}

/// A runtime for the client side of a story.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the MCP client")
}

/// rmcp's client over streamable HTTP with `Authorization: Bearer <token>`,
/// after the `initialize` handshake.
async fn connect(
    served: &Served,
    token: &str,
) -> Result<Client, rmcp::service::ClientInitializeError> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(mcp_url(served)).auth_header(token),
    );
    ().serve(transport).await
}

/// Every answer a story saw, serialized, to check for the provider's key.
#[derive(Default)]
struct Seen(Vec<String>);

impl Seen {
    fn result(&mut self, result: &CallToolResult) -> CallToolResult {
        self.0
            .push(serde_json::to_string(result).expect("a result serializes"));
        result.clone()
    }

    fn tools(&mut self, tools: &[Tool]) {
        self.0
            .push(serde_json::to_string(tools).expect("tools serialize"));
    }

    fn error(&mut self, error: &ServiceError) {
        self.0.push(format!("{error} {error:?}"));
    }

    fn assert_no_secret(&self, secret: &str) {
        assert!(!self.0.is_empty());
        for answer in &self.0 {
            assert!(!answer.contains(secret), "the secret leaked: {answer}");
        }
    }
}

async fn call(client: &Client, seen: &mut Seen, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object");
    };
    match client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
    {
        Ok(result) => seen.result(&result),
        Err(error) => panic!("{tool} answered a protocol error: {error}"),
    }
}

/// A call the server refuses with a JSON-RPC error, and that error.
async fn protocol_error(
    client: &Client,
    seen: &mut Seen,
    tool: &str,
    arguments: Value,
) -> ErrorData {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object");
    };
    match client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
    {
        Ok(result) => panic!("{tool} answered a result, not a protocol error: {result:?}"),
        Err(error) => {
            seen.error(&error);
            match error {
                ServiceError::McpError(data) => data,
                other => panic!("{tool} failed outside JSON-RPC: {other}"),
            }
        }
    }
}

/// The output of a successful call: its `structuredContent`, which the
/// text content repeats as JSON.
fn output(tool: &str, result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(false), "{tool} failed: {result:?}");
    let structured = result
        .structured_content
        .clone()
        .unwrap_or_else(|| panic!("{tool} has structuredContent"));
    assert_eq!(text_json(result), structured);
    structured
}

/// The error of an `isError` result: `{"error":{"code","message"},"request_id"}`.
fn failure(tool: &str, result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(true), "{tool} succeeded: {result:?}");
    let structured = result
        .structured_content
        .clone()
        .unwrap_or_else(|| panic!("{tool}'s error has structuredContent"));
    assert_eq!(text_json(result), structured);
    assert!(structured["error"]["message"].is_string(), "{structured}");
    let request_id = structured["request_id"].as_str().expect("a request id");
    assert!(!request_id.is_empty());
    structured
}

fn text_json(result: &CallToolResult) -> Value {
    let [content] = result.content.as_slice() else {
        panic!("one content block: {result:?}");
    };
    let text = &content.as_text().expect("a text block").text;
    serde_json::from_str(text).expect("the text is the JSON")
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn sorted_names(tools: &[Tool]) -> Vec<String> {
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    names
}

fn tool<'a>(tools: &'a [Tool], name: &str) -> &'a Tool {
    tools
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("tool {name} is listed"))
}

#[test]
fn an_assistant_provisions_and_reads_analytics_over_mcp() {
    let shop = platform("shop");
    let served = shop.serve();
    let mut seen = Seen::default();
    runtime().block_on(async {
        let client = connect(&served, &shop.token)
            .await
            .expect("the customer's token initializes");
        let server = client.peer_info().expect("the server introduced itself");
        let implementation = server.server_info.as_ref().expect("server info");
        assert_eq!(implementation.name, "host-sim");
        assert!(server.capabilities.tools.is_some());
        assert!(
            server
                .instructions
                .as_deref()
                .unwrap()
                .contains("project_id")
        );

        // The tools: the manifest's three, each with its input schema and a
        // required project_id naming the customer's project.
        let tools = client.list_all_tools().await.expect("tools/list");
        seen.tools(&tools);
        assert_eq!(sorted_names(&tools), [CONFIGURATION, PROVISION, STATS]);
        for t in &tools {
            let schema = Value::Object((*t.input_schema).clone());
            assert_eq!(schema["type"], "object", "{}", t.name);
            assert_eq!(schema["properties"]["project_id"]["type"], "string");
            assert_eq!(schema["properties"]["project_id"]["enum"], json!(["shop"]));
            assert_eq!(schema["required"][0], "project_id", "{}", t.name);
            assert!(t.description.as_deref().is_some_and(|d| !d.is_empty()));
            let output_schema = t.output_schema.as_ref().expect("an output schema");
            assert_eq!(output_schema["type"], "object");
        }
        let stats_schema = Value::Object((*tool(&tools, STATS).input_schema).clone());
        assert_eq!(
            stats_schema["required"],
            json!(["project_id", "start_at", "end_at"])
        );
        assert_eq!(stats_schema["properties"]["start_at"]["type"], "integer");
        assert_eq!(stats_schema["properties"]["end_at"]["type"], "integer");
        assert_eq!(stats_schema["properties"]["unit"]["enum"], json!(["day"]));
        let provision_schema = Value::Object((*tool(&tools, PROVISION).input_schema).clone());
        assert_eq!(
            provision_schema["required"],
            json!(["project_id", "name", "domain"])
        );
        assert_eq!(provision_schema["additionalProperties"], false);
        assert!(
            tool(&tools, STATS).output_schema.as_ref().unwrap()["properties"]["pageviews"]
                .is_object()
        );

        // Before provisioning there is nothing to configure: a tool error.
        let early = call(
            &client,
            &mut seen,
            CONFIGURATION,
            json!({"project_id": "shop"}),
        )
        .await;
        assert_eq!(
            failure(CONFIGURATION, &early)["error"]["code"],
            "not_provisioned"
        );

        let site = output(
            PROVISION,
            &call(
                &client,
                &mut seen,
                PROVISION,
                json!({"project_id": "shop", "name": "Shop", "domain": "www.example.com"}),
            )
            .await,
        );
        let website_id = site["website_id"]
            .as_str()
            .expect("a website id")
            .to_owned();
        assert_eq!(site["project_id"], "shop");
        assert_eq!(site["domain"], "www.example.com");
        let script = site["tracking_script"].as_str().expect("a tracking script");
        assert!(script.contains(&website_id), "{script}");

        let config = output(
            CONFIGURATION,
            &call(
                &client,
                &mut seen,
                CONFIGURATION,
                json!({"project_id": "shop"}),
            )
            .await,
        );
        assert_eq!(config["website_id"], website_id.as_str());
        assert_eq!(config["tracking_script"], site["tracking_script"]);

        // Traffic of the last week: Firefox twice in one hour three days
        // ago and once yesterday (two visits), Safari once two days ago.
        let now = now_ms();
        let id: Uuid = website_id.parse().unwrap();
        let three_days_ago = (now - 3 * DAY_MS).div_euclid(HOUR_MS) * HOUR_MS;
        for (at, agent, ip, url) in [
            (three_days_ago + 60_000, FIREFOX, "198.51.100.7", "/"),
            (
                three_days_ago + 120_000,
                FIREFOX,
                "198.51.100.7",
                "/pricing",
            ),
            (now - DAY_MS, FIREFOX, "198.51.100.7", "/"),
            (now - 2 * DAY_MS, SAFARI, "192.0.2.44", "/blog"),
        ] {
            shop.fake
                .record_event(id, url, at, agent, ip)
                .expect("the website exists on the provider");
        }
        let week = json!({"project_id": "shop", "start_at": now - 7 * DAY_MS, "end_at": now});
        let stats = output(STATS, &call(&client, &mut seen, STATS, week.clone()).await);
        assert_eq!(stats["website_id"], website_id.as_str());
        assert_eq!(
            (&stats["visitors"], &stats["visits"], &stats["pageviews"]),
            (&json!(2), &json!(3), &json!(4)),
            "{stats}"
        );

        // Input the action refuses is a tool error, not a protocol error.
        let backwards = call(
            &client,
            &mut seen,
            STATS,
            json!({"project_id": "shop", "start_at": now, "end_at": now - DAY_MS}),
        )
        .await;
        assert_eq!(failure(STATS, &backwards)["error"]["code"], "invalid_input");

        // What the server cannot route is a JSON-RPC error.
        let unknown = protocol_error(
            &client,
            &mut seen,
            "plugin__managed_analytics__delete_everything",
            json!({"project_id": "shop"}),
        )
        .await;
        assert_eq!(unknown.code, ErrorCode::INVALID_PARAMS);
        let no_project = protocol_error(&client, &mut seen, CONFIGURATION, json!({})).await;
        assert_eq!(no_project.code, ErrorCode::INVALID_PARAMS);
        assert!(no_project.message.contains("project_id"), "{no_project:?}");
        let numeric_project =
            protocol_error(&client, &mut seen, CONFIGURATION, json!({"project_id": 7})).await;
        assert_eq!(numeric_project.code, ErrorCode::INVALID_PARAMS);
        assert!(numeric_project.message.contains("project_id"));

        client.cancel().await.expect("the client stops");
    });
    seen.assert_no_secret(&shop.secret);
}

#[test]
fn provider_failures_are_error_results_without_the_secret() {
    let shop = platform("shop");
    let served = shop.serve();
    let mut seen = Seen::default();
    runtime().block_on(async {
        let client = connect(&served, &shop.token).await.expect("initialize");
        output(
            PROVISION,
            &call(
                &client,
                &mut seen,
                PROVISION,
                json!({"project_id": "shop", "name": "Shop", "domain": "shop.example.org"}),
            )
            .await,
        );
        let now = now_ms();
        let week = json!({"project_id": "shop", "start_at": now - 7 * DAY_MS, "end_at": now});
        for (fault, code) in [
            (Fault::Unauthorized, "provider_rejected"),
            (Fault::ServerError, "provider_unavailable"),
        ] {
            shop.fake.set_fault(fault.clone());
            let result = call(&client, &mut seen, STATS, week.clone()).await;
            assert_eq!(failure(STATS, &result)["error"]["code"], code, "{fault:?}");
        }
        shop.fake.set_fault(Fault::None);
        output(STATS, &call(&client, &mut seen, STATS, week).await);
        client.cancel().await.expect("the client stops");
    });
    seen.assert_no_secret(&shop.secret);
}

#[test]
fn the_tools_follow_the_tokens_projects_and_the_grants() {
    let shop = platform("shop");
    let served = shop.serve();
    let mut seen = Seen::default();
    let elsewhere = shop
        .host
        .issue_token("other", &["elsewhere".into()], Duration::from_secs(600))
        .expect("a token for another project")
        .token;
    runtime().block_on(async {
        // A project without the extension: no tools, and a tool name is
        // unknown to this token.
        let other = connect(&served, &elsewhere).await.expect("initialize");
        let tools = other.list_all_tools().await.expect("tools/list");
        assert!(tools.is_empty(), "{tools:?}");
        let unknown = protocol_error(
            &other,
            &mut seen,
            CONFIGURATION,
            json!({"project_id": "shop"}),
        )
        .await;
        assert_eq!(unknown.code, ErrorCode::INVALID_PARAMS);

        // Once its own project has the extension, the token has the tools,
        // for its project only; the customer's project stays forbidden.
        shop.host.grant(EXTENSION, "elsewhere").expect("grant");
        let tools = other.list_all_tools().await.expect("tools/list");
        seen.tools(&tools);
        assert_eq!(sorted_names(&tools), [CONFIGURATION, PROVISION, STATS]);
        let schema = Value::Object((*tool(&tools, CONFIGURATION).input_schema).clone());
        assert_eq!(
            schema["properties"]["project_id"]["enum"],
            json!(["elsewhere"])
        );
        let refused = call(
            &other,
            &mut seen,
            PROVISION,
            json!({"project_id": "shop", "name": "Not mine", "domain": "evil.example.net"}),
        )
        .await;
        assert_eq!(failure(PROVISION, &refused)["error"]["code"], "forbidden");
        assert_eq!(shop.fake.creates(), 0, "nothing reached the provider");

        // Revoking the grant takes the customer's tools away at once.
        let customer = connect(&served, &shop.token).await.expect("initialize");
        assert_eq!(
            customer.list_all_tools().await.expect("tools/list").len(),
            3
        );
        shop.host.revoke(EXTENSION, &shop.project).expect("revoke");
        let tools = customer.list_all_tools().await.expect("tools/list");
        assert!(tools.is_empty(), "{tools:?}");
        let gone = protocol_error(
            &customer,
            &mut seen,
            CONFIGURATION,
            json!({"project_id": "shop"}),
        )
        .await;
        assert_eq!(gone.code, ErrorCode::INVALID_PARAMS);

        other.cancel().await.expect("the client stops");
        customer.cancel().await.expect("the client stops");
    });
    seen.assert_no_secret(&shop.secret);
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"0"}}}"#;

fn post(url: &str, token: Option<&str>, body: &str) -> reqwest::blocking::Response {
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .build()
        .expect("an HTTP client");
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_owned());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().expect("the server answers")
}

#[test]
fn requests_without_a_valid_token_never_reach_mcp() {
    let shop = platform("shop");
    let served = shop.serve();
    let url = mcp_url(&served);

    for token in [None, Some("not-a-token")] {
        let response = post(&url, token, INITIALIZE);
        assert_eq!(response.status(), 401, "{token:?}");
        let challenge = response
            .headers()
            .get("www-authenticate")
            .expect("a WWW-Authenticate challenge")
            .to_str()
            .unwrap()
            .to_owned();
        assert!(challenge.starts_with("Bearer"), "{challenge}");
        let body: Value = response.json().expect("a JSON error");
        assert_eq!(body["error"]["code"], "unauthenticated");
        assert!(body["request_id"].is_string());
    }

    // The same body with the customer's token is an MCP answer, and an
    // unknown method is a JSON-RPC error, not an HTTP one.
    let response = post(&url, Some(&shop.token), INITIALIZE);
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().expect("a JSON-RPC answer");
    assert_eq!(answer["result"]["serverInfo"]["name"], "host-sim");
    let response = post(
        &url,
        Some(&shop.token),
        r#"{"jsonrpc":"2.0","id":2,"method":"no/such/method","params":{}}"#,
    );
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().expect("a JSON-RPC answer");
    assert_eq!(answer["id"], 2);
    assert_eq!(answer["error"]["code"], -32601, "{answer}");

    runtime().block_on(async {
        let refused = connect(&served, "not-a-token")
            .await
            .expect_err("a bad token does not initialize");
        assert!(refused.is_authorization_required(), "{refused}");
    });
}

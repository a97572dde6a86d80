//! The client and browser sides of the MCP server's OAuth flow, over plain
//! HTTP (reqwest, redirects not followed, cookies by hand): registering a
//! client, signing in to the console and deciding on the consent page,
//! the token endpoint, and JSON-RPC posts to `/mcp`.

use std::collections::HashMap;
use std::time::Duration;

use host_sim::serve::ServeOptions;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use reqwest::blocking::{Client, Response};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Platform, Served, serve_host_with};

/// Where the test's client says it wants the answer; never contacted (the
/// test reads the `Location` the server answers with).
pub const REDIRECT_URI: &str = "http://127.0.0.1:9/callback";

/// A PKCE pair (RFC 7636, S256).
#[derive(Debug, Clone)]
pub struct Pkce {
    pub verifier: String,
    pub challenge: String,
}

pub fn pkce() -> Pkce {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    let verifier = URL_SAFE_NO_PAD.encode(bytes);
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    Pkce {
        verifier,
        challenge,
    }
}

/// The query parameters of a URL (a `Location`).
pub fn query(url: &str) -> HashMap<String, String> {
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or_default();
    form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// What one completed authorization handed the client, and what it sent.
#[derive(Debug, Clone)]
pub struct Grant {
    pub client_id: String,
    pub client_secret: Option<String>,
    pub code: String,
    pub verifier: String,
    pub access_token: String,
    pub refresh_token: String,
    pub scope: String,
}

impl Grant {
    /// Every secret of the grant, to look for where none may be.
    pub fn secrets(&self) -> Vec<String> {
        let mut all = vec![
            self.code.clone(),
            self.verifier.clone(),
            self.access_token.clone(),
            self.refresh_token.clone(),
        ];
        all.extend(self.client_secret.clone());
        all
    }
}

/// One party speaking HTTP to the server.
pub struct Web {
    pub base: String,
    client: Client,
}

impl Web {
    pub fn new(base: &str) -> Self {
        Self {
            base: base.to_string(),
            client: Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("an HTTP client"),
        }
    }

    fn url(&self, path: &str) -> String {
        if path.starts_with("http") {
            path.to_string()
        } else {
            format!("{}{path}", self.base)
        }
    }

    pub fn get(&self, path: &str, cookie: Option<&str>) -> Response {
        let mut request = self.client.get(self.url(path));
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        request.send().expect("the server answers")
    }

    /// A same-origin form post of the console.
    pub fn post_form(&self, path: &str, form: &[(&str, &str)], cookie: Option<&str>) -> Response {
        let mut request = self
            .client
            .post(self.url(path))
            .header("origin", &self.base)
            .form(form);
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        request.send().expect("the server answers")
    }

    /// Dynamic Client Registration: the status and the JSON answer.
    pub fn register(&self, metadata: &Value) -> (u16, Value) {
        let response = self
            .client
            .post(self.url("/oauth/register"))
            .json(metadata)
            .send()
            .expect("the server answers");
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    /// Registers a public client (or with `confidential`, one with a secret)
    /// redirecting to [`REDIRECT_URI`].
    pub fn public_client(&self, name: &str, confidential: bool) -> (String, Option<String>) {
        let method = if confidential {
            "client_secret_post"
        } else {
            "none"
        };
        let (status, client) = self.register(&json!({
            "client_name": name,
            "redirect_uris": [REDIRECT_URI],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": method,
        }));
        assert_eq!(status, 201, "{client}");
        (
            client["client_id"].as_str().unwrap().to_string(),
            client["client_secret"].as_str().map(str::to_string),
        )
    }

    /// Signs in to the console with the person's token; the cookie and
    /// where the console sends the browser next.
    pub fn sign_in(&self, token: &str, next: Option<&str>) -> (String, String) {
        let mut form = vec![("token", token)];
        if let Some(next) = next {
            form.push(("next", next));
        }
        let response = self.post_form("/console/sign-in", &form, None);
        assert_eq!(
            response.status().as_u16(),
            303,
            "sign-in answers a redirect"
        );
        let cookie = response.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_string();
        let location = response.headers()["location"].to_str().unwrap().to_string();
        (cookie, location)
    }

    /// Opens an authorization request as a signed-in person: the consent
    /// page's pending request id (and the page), or the answer if there
    /// is no consent page.
    pub fn open_consent(
        &self,
        authorize: &str,
        cookie: &str,
    ) -> Result<(String, String), Response> {
        let page = self.get(authorize, Some(cookie));
        if page.status().as_u16() != 200 {
            return Err(page);
        }
        let html = page.text().unwrap();
        let marker = "name=\"request\" value=\"";
        let Some(start) = html.find(marker) else {
            panic!("no consent form on the page:\n{html}");
        };
        let rest = &html[start + marker.len()..];
        Ok((rest[..rest.find('"').unwrap()].to_string(), html))
    }

    /// The person's decision; the `Location` the client is sent to.
    pub fn decide(
        &self,
        cookie: &str,
        request: &str,
        projects: &[&str],
        scopes: &[&str],
        approve: bool,
    ) -> String {
        let mut form = vec![("request", request)];
        form.extend(projects.iter().map(|p| ("project", *p)));
        form.extend(scopes.iter().map(|s| ("scope", *s)));
        form.push(("decision", if approve { "approve" } else { "deny" }));
        let response = self.post_form("/console/authorize", &form, Some(cookie));
        assert_eq!(
            response.status().as_u16(),
            303,
            "the decision redirects to the client: {}",
            response.text().unwrap_or_default()
        );
        response.headers()["location"].to_str().unwrap().to_string()
    }

    /// The token endpoint: status and JSON answer.
    pub fn token(&self, form: &[(&str, &str)]) -> (u16, Value) {
        let response = self
            .client
            .post(self.url("/oauth/token"))
            .form(form)
            .send()
            .expect("the server answers");
        (
            response.status().as_u16(),
            response.json().unwrap_or(Value::Null),
        )
    }

    /// A JSON-RPC message posted to `/mcp` (with `host` instead of the
    /// URL's host when given).
    pub fn mcp(&self, token: Option<&str>, message: &Value, host: Option<&str>) -> Response {
        let mut request = self
            .client
            .post(self.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(message.to_string());
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(host) = host {
            request = request.header("host", host);
        }
        request.send().expect("the server answers")
    }

    /// The whole flow for a registered client: authorization request,
    /// sign-in, consent to `projects` and `scopes`, code exchange.
    pub fn connect_app(
        &self,
        person_token: &str,
        projects: &[&str],
        scopes: &[&str],
        confidential: bool,
    ) -> Grant {
        let client = self.public_client("Test assistant", confidential);
        self.consent_again(person_token, client, projects, scopes)
    }

    /// The flow for a client already registered (`client`: its id and
    /// secret), as when a person approves it once more.
    pub fn consent_again(
        &self,
        person_token: &str,
        (client_id, client_secret): (String, Option<String>),
        projects: &[&str],
        scopes: &[&str],
    ) -> Grant {
        let pkce = pkce();
        let authorize = authorize_path(&client_id, &pkce.challenge, Some("S256"), "st-1");
        let (cookie, next) = self.sign_in(person_token, Some(&authorize));
        assert_eq!(next, authorize, "sign-in continues to the consent page");
        let (request, _) = self
            .open_consent(&authorize, &cookie)
            .expect("a consent page");
        let location = self.decide(&cookie, &request, projects, scopes, true);
        let answer = query(&location);
        assert_eq!(answer["state"], "st-1");
        assert_eq!(answer["iss"], format!("{}/", self.base));
        let code = answer["code"].clone();
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", REDIRECT_URI),
            ("client_id", client_id.as_str()),
            ("code_verifier", pkce.verifier.as_str()),
        ];
        let resource = format!("{}/mcp", self.base);
        form.push(("resource", &resource));
        if let Some(secret) = &client_secret {
            form.push(("client_secret", secret));
        }
        let (status, tokens) = self.token(&form);
        assert_eq!(status, 200, "{tokens}");
        assert_eq!(tokens["token_type"], "Bearer");
        Grant {
            client_id,
            client_secret,
            code,
            verifier: pkce.verifier,
            access_token: tokens["access_token"].as_str().unwrap().to_string(),
            refresh_token: tokens["refresh_token"].as_str().unwrap().to_string(),
            scope: tokens["scope"].as_str().unwrap().to_string(),
        }
    }

    /// The refresh grant for `grant`'s client.
    pub fn refresh(&self, grant: &Grant, refresh_token: &str) -> (u16, Value) {
        let mut form = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("client_id", grant.client_id.as_str()),
        ];
        if let Some(secret) = &grant.client_secret {
            form.push(("client_secret", secret));
        }
        self.token(&form)
    }
}

/// `/console/authorize?…` for a client redirecting to [`REDIRECT_URI`].
pub fn authorize_path(
    client_id: &str,
    challenge: &str,
    method: Option<&str>,
    state: &str,
) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    query
        .append_pair("response_type", "code")
        .append_pair("client_id", client_id)
        .append_pair("redirect_uri", REDIRECT_URI)
        .append_pair("state", state)
        .append_pair("scope", "read write");
    if !challenge.is_empty() {
        query.append_pair("code_challenge", challenge);
    }
    if let Some(method) = method {
        query.append_pair("code_challenge_method", method);
    }
    format!("/console/authorize?{}", query.finish())
}

/// The JSON-RPC `tools/call` of `tool` with `arguments`.
pub fn tools_call(tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
}

/// The JSON-RPC `tools/list`.
pub fn tools_list() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
}

pub const STATS: &str = "plugin__managed_analytics__stats";
pub const PROVISION: &str = "plugin__managed_analytics__provision";

// ---- the log of this test process -----------------------------------------

/// Every log line of the process, at trace for the host and the HTTP
/// stacks on both sides.
pub fn log() {
    log_capture::capture(
        "info,host_sim=trace,tower_http=trace,axum=trace,rmcp=trace,hyper=trace,hyper_util=trace,reqwest=trace",
    );
}

pub fn logged() -> String {
    log();
    log_capture::captured()
}

// ---- a platform with a person who has two projects -------------------------

pub struct Setup {
    pub platform: Platform,
    pub served: Served,
    pub web: Web,
    /// The person's operator-issued token (the console sign-in).
    pub person: String,
}

pub fn setup(options: ServeOptions) -> Setup {
    log();
    let secret = format!("umami-key-{}", uuid::Uuid::new_v4().simple());
    let platform = Platform::start("shop", &secret, Duration::from_millis(1500));
    platform
        .host
        .grant(super::EXTENSION, "blog")
        .expect("grant blog");
    let person = platform
        .host
        .issue_token(
            "customer",
            &["shop".to_string(), "blog".to_string()],
            Duration::from_secs(3600),
        )
        .expect("a person's token")
        .token;
    let served = serve_host_with(platform.host.clone(), false, options);
    let web = Web::new(&served.base_url);
    Setup {
        platform,
        served,
        web,
        person,
    }
}

pub fn default_setup() -> Setup {
    setup(ServeOptions::default())
}

/// The JSON-RPC result (or error) of an MCP answer.
pub fn rpc(response: reqwest::blocking::Response) -> Value {
    assert_eq!(response.status().as_u16(), 200, "an MCP answer");
    response.json().expect("a JSON-RPC answer")
}

pub fn error_of(response: reqwest::blocking::Response) -> (u16, Option<String>, Value) {
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    (status, challenge, response.json().unwrap_or(Value::Null))
}

pub fn week() -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    json!({"project_id": "shop", "start_at": now - 7 * 86_400_000, "end_at": now})
}

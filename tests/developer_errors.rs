//! What a plugin developer is told when the manifest and the code disagree:
//! the analytics plugin's component in the in-process test host (a
//! development host) under manifests changed the way a developer gets them
//! wrong. Each error names the fix.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use host_sim::testing::{ProviderResponse, TestHost};
use host_sim::{AuthStyle, Host, HostConfig, Secret};
use serde_json::json;
use workspace_tests::{manifest_without_panel as manifest, release_dir};

fn component() -> Vec<u8> {
    std::fs::read(release_dir().join("plugin.wasm")).expect("`cargo xtask release` built it")
}

#[test]
fn a_binding_call_outside_the_manifest_names_the_allow_rule_to_add() {
    let narrowed = without_the_website_rule();
    let host = TestHost::from_bytes(&narrowed, component())
        .binding("provider", |_| ProviderResponse::status(500))
        .build()
        .unwrap();
    let refused = host
        .invoke(
            "analytics.provision",
            json!({ "name": "Shop", "domain": "www.example.com" }),
        )
        .unwrap_err();
    // The extension's own mistake, not the caller's: no 403.
    assert_eq!(refused.code(), "extension_fault", "{refused}");
    let message = refused.to_string();
    // The plugin's own words first, then the development host's.
    assert!(
        message.starts_with("the host refused GET /api/websites/"),
        "{message}"
    );
    let detail = message
        .split_once(" (the host refused: ")
        .map(|(_, detail)| detail)
        .unwrap_or_else(|| panic!("no host detail in {message}"));
    let website = detail
        .strip_prefix("binding provider: GET /api/websites/")
        .and_then(|rest| rest.split_once(':'))
        .map(|(id, _)| id)
        .unwrap_or_else(|| panic!("{detail}"));
    assert_eq!(
        detail,
        format!(
            "binding provider: GET /api/websites/{website}: outside the approved capability \
             http:provider; to allow it, add {{ method = \"GET\", path = \"/api/websites/{website}\" }} \
             to [capabilities.http.provider] allow in manifest.toml)"
        )
    );
    assert!(
        host.requests("provider").is_empty(),
        "nothing left the host"
    );
}

#[test]
fn a_declared_action_without_a_handler_is_refused_at_install() {
    let extra = manifest().replace(
        "[[actions]]\nname = \"analytics.stats\"",
        "[[actions]]\nname = \"analytics.export\"\n\
         description = \"Not written yet.\"\n\
         http = { method = \"GET\", route = \"/export\" }\n\
         mcp_tool = \"plugin__managed_analytics__export\"\n\
         capabilities = []\n\
         [actions.input_schema]\ntype = \"object\"\n\n\
         [[actions]]\nname = \"analytics.stats\"",
    );
    assert_ne!(extra, manifest());
    let Err(refused) = TestHost::from_bytes(&extra, component()).build() else {
        panic!("a build without a handler for analytics.export was accepted");
    };
    assert_eq!(
        refused.to_string(),
        "the development build was refused: component refused: manifest.toml declares the action \
         `analytics.export`, but the component's code does not implement it (it implements \
         analytics.provision, analytics.configuration, analytics.stats): add its handler to \
         `impl manifest::Actions` (or to `actions!`) and build the component again, or remove \
         the action from manifest.toml"
    );
}

#[test]
fn a_handler_the_manifest_does_not_declare_is_refused_at_install() {
    let manifest = manifest();
    let (before, stats) = manifest
        .split_once("[[actions]]\nname = \"analytics.stats\"")
        .unwrap();
    // The stats action and its schemas end the manifest's actions; keep the
    // shared `[definitions]` after them.
    let rest = stats
        .find("\n[definitions")
        .map(|at| &stats[at..])
        .unwrap_or("");
    let without_stats = format!("{before}{rest}");
    let Err(refused) = TestHost::from_bytes(&without_stats, component()).build() else {
        panic!("a build with an undeclared handler was accepted");
    };
    assert_eq!(
        refused.to_string(),
        "the development build was refused: component refused: the component implements the \
         action `analytics.stats`, which manifest.toml does not declare: add an [[actions]] entry \
         for it (docs/manifest.md), or remove its handler"
    );
}

/// The rule of provision's first call taken out of the manifest: the
/// analytics plugin's `GET /api/websites/{id}` becomes a call outside its
/// capability.
fn without_the_website_rule() -> String {
    let rule = "  { method = \"GET\", path = \"/api/websites/{id}\" },\n";
    let narrowed = manifest().replace(rule, "");
    assert_ne!(narrowed, manifest(), "the rule is in the manifest");
    narrowed
}

/// `host-sim dev`'s host with the narrowed build, served: an HTTP caller
/// of an action that fails on the extension's own binding mistake gets 502
/// `extension_fault` (not 403: the caller did nothing forbidden), and the
/// call is listed in the developer view's recent invocations with the
/// host's refusal, as calls from the view's own forms are.
#[test]
fn an_extension_s_own_binding_mistake_is_its_fault_and_listed_in_the_developer_view() {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::open(HostConfig::development(dir.path().join("state"))).unwrap();
    let narrowed = without_the_website_rule();
    let component_name = extension_release::Manifest::from_toml(&narrowed)
        .unwrap()
        .extension
        .component;
    let installed = host
        .install_development(
            &narrowed,
            BTreeMap::from([(component_name, component())]),
            &mut |_| {},
        )
        .unwrap();
    let extension = installed.extension_id;
    host.grant(&extension, "dev").unwrap();
    host.set_binding(
        "dev",
        "provider",
        "http://127.0.0.1:9",
        Secret::new("dev-provider-secret"),
        AuthStyle::Bearer,
        Duration::from_secs(2),
    )
    .unwrap();
    let token = host
        .issue_token("developer", &["dev".to_owned()], Duration::from_secs(600))
        .unwrap()
        .token;
    let served = support::serve_host(Arc::new(host), false);
    let client = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    let answer = client
        .post(format!(
            "{}/v1/plugins/{extension}/projects/dev/api/site",
            served.base_url
        ))
        .bearer_auth(&token)
        .json(&json!({ "name": "Shop", "domain": "www.example.com" }))
        .send()
        .unwrap();
    assert_eq!(answer.status(), 502);
    let body: serde_json::Value = answer.json().unwrap();
    assert_eq!(body["error"]["code"], "extension_fault", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("(the host refused: binding provider: GET /api/websites/")
            && message.contains("outside the approved capability http:provider"),
        "{message}"
    );

    // The developer view lists the API's call.
    let signed_in = client
        .post(format!("{}/console/sign-in", served.base_url))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Origin", &served.base_url)
        .body(format!("token={token}"))
        .send()
        .unwrap();
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let view = client
        .get(format!(
            "{}/console/projects/dev/extensions/{extension}/develop",
            served.base_url
        ))
        .header("Cookie", &cookie)
        .send()
        .unwrap();
    assert_eq!(view.status(), 200);
    let html = view.text().unwrap();
    let recent = html
        .split_once("id=\"recent-heading\"")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("{html}"));
    assert!(
        recent
            .contains("<h3>analytics.provision <span class=\"status\">extension_fault</span></h3>"),
        "{recent}"
    );
    assert!(recent.contains(", from the HTTP API, request "), "{recent}");
    assert!(
        recent.contains("outside the approved capability http:provider"),
        "{recent}"
    );
    assert!(!recent.contains("dev-provider-secret"), "{recent}");
}

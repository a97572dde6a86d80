//! What a plugin developer is told when the manifest and the code disagree:
//! the analytics plugin's component in the in-process test host (a
//! development host) under manifests changed the way a developer gets them
//! wrong. Each error names the fix.

use host_sim::testing::{ProviderResponse, TestHost};
use serde_json::json;
use workspace_tests::{manifest_without_panel as manifest, release_dir};

fn component() -> Vec<u8> {
    std::fs::read(release_dir().join("plugin.wasm")).expect("`cargo xtask release` built it")
}

#[test]
fn a_binding_call_outside_the_manifest_names_the_allow_rule_to_add() {
    let rule = "  { method = \"GET\", path = \"/api/websites/{id}\" },\n";
    let narrowed = manifest().replace(rule, "");
    assert_ne!(narrowed, manifest(), "the rule is in the manifest");
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
    assert_eq!(refused.code(), "forbidden", "{refused}");
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

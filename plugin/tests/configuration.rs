//! The customer copies the tracking script: the configuration is the stored
//! mapping plus script, domain restriction, tracking origin and dashboard URL.

mod support;

use managed_analytics::host::{Host, Precondition};
use managed_analytics::{ErrorCode, invoke};
use serde_json::{Value, json};
use support::TestHost;

/// A project whose mapping was stored by an earlier provision.
fn provisioned(host: &TestHost) {
    let mapping = json!({
        "website_id": managed_analytics::website_id::website_id(support::PROJECT, "www.example.com"),
        "name": "Example & Co",
        "domain": "www.example.com",
        "created_at": 1_795_000_000_000_i64,
        "updated_at": 1_795_000_000_000_i64,
    });
    host.put_document(
        "site",
        "mapping",
        &mapping.to_string(),
        Precondition::Absent,
    )
    .unwrap();
}

fn configuration(host: &TestHost) -> Value {
    serde_json::from_str(&invoke(host, "analytics.configuration", "{}").unwrap()).unwrap()
}

#[test]
fn before_setup_the_configuration_is_not_provisioned() {
    let err = invoke(&TestHost::new(None), "analytics.configuration", "{}").unwrap_err();
    assert_eq!(err.code, ErrorCode::NotProvisioned);
    assert_eq!(err.code.http_status(), 404);
}

#[test]
fn the_script_loads_from_the_provider_origin_by_default() {
    let host = TestHost::new(None);
    provisioned(&host);
    let out = configuration(&host);
    assert_eq!(out["tracking_origin"], support::PROVIDER_ORIGIN);
    assert!(
        !out["tracking_script"]
            .as_str()
            .unwrap()
            .contains("data-host-url")
    );
    insta::assert_json_snapshot!("configuration_default_origin", out);
}

#[test]
fn a_tracking_origin_override_serves_the_script_and_receives_events() {
    let host = TestHost::new(None).with_tracking_origin("https://stats.example.com/");
    provisioned(&host);
    let out = configuration(&host);
    assert_eq!(out["script_url"], "https://stats.example.com/script.js");
    assert_eq!(
        out["dashboard_url"].as_str().unwrap(),
        format!(
            "{}/websites/{}",
            support::PROVIDER_ORIGIN,
            out["website_id"].as_str().unwrap()
        ),
        "the dashboard stays on the provider origin"
    );
    insta::assert_json_snapshot!("configuration_tracking_origin_override", out);
}

#[test]
fn the_output_has_every_field_the_manifest_requires() {
    let host = TestHost::new(None);
    provisioned(&host);
    let out = configuration(&host);
    let (required, properties) = support::manifest_definition("configuration");
    for field in &required {
        assert!(out.get(field).is_some(), "missing {field}");
    }
    for field in out.as_object().unwrap().keys() {
        assert!(properties.contains(field), "{field} is not in the manifest");
    }
}

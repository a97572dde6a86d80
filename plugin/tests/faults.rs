//! The provider misbehaves: every failure maps to the design page's code, and
//! no message or log line carries the secret (the fake echoes it in its fault
//! bodies, and this test host, unlike the real one, does not redact).

mod support;

use managed_analytics::host::ProjectSettings;
use managed_analytics::{ErrorCode, invoke};
use serde_json::json;
use support::{DAY_MS, NOW_MS, SECRET, TestHost, provision_input, start_fake};
use umami_fake::Fault;

fn stats_input() -> String {
    json!({"start_at": NOW_MS - 7 * DAY_MS, "end_at": NOW_MS, "unit": "day"}).to_string()
}

#[test]
fn provider_faults_map_to_codes_and_leak_nothing() {
    let fake = start_fake();
    let host = TestHost::for_fake(&fake);
    invoke(
        &host,
        "analytics.provision",
        &provision_input("Shop", "shop.example.com"),
    )
    .unwrap();

    let cases = [
        (
            Fault::ServerError,
            ErrorCode::ProviderUnavailable,
            "HTTP 500",
        ),
        (Fault::Unauthorized, ErrorCode::ProviderRejected, "HTTP 401"),
        (
            Fault::MalformedJson,
            ErrorCode::ProviderRejected,
            "unusable: it is not JSON",
        ),
        // Longer than the test host's 700 ms deadline.
        (
            Fault::Slow { delay_ms: 1_500 },
            ErrorCode::ProviderUnavailable,
            "did not answer",
        ),
    ];
    for (fault, code, says) in cases {
        fake.set_fault(fault.clone());
        for (action, input) in [
            (
                "analytics.provision",
                provision_input("Shop renamed", "shop.example.com"),
            ),
            ("analytics.stats", stats_input()),
        ] {
            let err = invoke(&host, action, &input).unwrap_err();
            assert_eq!(err.code, code, "{fault:?} {action}: {}", err.message);
            assert!(
                err.message.contains(says),
                "{fault:?} {action}: {}",
                err.message
            );
            assert!(
                !err.message.contains(SECRET),
                "{fault:?} {action}: {}",
                err.message
            );
            assert!(
                !err.message.contains("token"),
                "{fault:?} {action}: {}",
                err.message
            );
        }
    }
    host.assert_logs_hold_no_secret();
    // The configuration needs only the stored mapping: it keeps working.
    assert!(invoke(&host, "analytics.configuration", "{}").is_ok());
    assert_eq!(fake.renames(), 0);
    assert_eq!(
        host.mapping_revision(),
        Some(1),
        "a failed provision leaves the mapping alone"
    );
}

#[test]
fn wrong_credentials_are_rejected_even_for_an_admin_lookup() {
    let fake = start_fake();
    let host = TestHost::for_fake(&fake).with_secret("an-old-revoked-key-81c2");
    let err = invoke(
        &host,
        "analytics.provision",
        &provision_input("Shop", "shop.example.com"),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::ProviderRejected);
    assert_eq!(
        err.message,
        "the provider refused POST /api/auth/verify (HTTP 401); the binding's credentials are wrong or lack the rights"
    );
    assert_eq!(fake.writes(), 0);
}

#[test]
fn an_unreachable_or_unbound_provider_is_unavailable() {
    // A port nobody listens on: bind, learn the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host = TestHost::new(Some(format!("http://127.0.0.1:{port}")));
    let err = invoke(
        &host,
        "analytics.provision",
        &provision_input("Shop", "shop.example.com"),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::ProviderUnavailable);
    assert!(
        err.message.starts_with("the provider could not be reached"),
        "{}",
        err.message
    );

    let unbound = TestHost::new(None);
    let err = invoke(
        &unbound,
        "analytics.provision",
        &provision_input("Shop", "shop.example.com"),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::ProviderUnavailable);
    assert!(
        err.message.contains("no `provider` binding"),
        "{}",
        err.message
    );
}

#[test]
fn a_missing_or_broken_provider_origin_setting_is_reported_before_any_write() {
    let fake = start_fake();
    let mut host = TestHost::for_fake(&fake);
    host.invocation.settings = ProjectSettings {
        provider_origin: None,
        tracking_origin: None,
    };
    let err = invoke(
        &host,
        "analytics.provision",
        &provision_input("Shop", "shop.example.com"),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::ProviderUnavailable);
    assert!(
        err.message.contains("provider-origin setting is not set"),
        "{}",
        err.message
    );

    host.invocation.settings.provider_origin = Some("analytics.example.net".into());
    let err = invoke(
        &host,
        "analytics.provision",
        &provision_input("Shop", "shop.example.com"),
    )
    .unwrap_err();
    assert!(
        err.message
            .contains("provider-origin setting is not an http(s) origin"),
        "{}",
        err.message
    );

    host.invocation.settings.provider_origin = Some("https://analytics.example.net".into());
    host.invocation.settings.tracking_origin = Some("https://t.example.com/\"><script>".into());
    let err = invoke(
        &host,
        "analytics.provision",
        &provision_input("Shop", "shop.example.com"),
    )
    .unwrap_err();
    assert!(
        err.message
            .contains("tracking-origin setting is not an http(s) origin"),
        "{}",
        err.message
    );
    assert!(host.sent().is_empty());
    assert_eq!(fake.writes(), 0);
}

//! What the webhook stories share: settings with a compressed retry
//! schedule, a loopback-friendly endpoint policy, registering a receiver,
//! and one dispatcher round on the injected clock.

use std::time::Duration;

use mail_service::model::EndpointPolicy;
use mail_service::service::{Settings, WebhookSettings};
use serde_json::{Value, json};

use super::receiver::Receiver;
use super::{Backend, Resp, TestApp, email};

/// The compressed schedule of these stories: 1 s, 2 s, 3 s.
pub fn schedule() -> Vec<Duration> {
    vec![
        Duration::from_secs(1),
        Duration::from_secs(2),
        Duration::from_secs(3),
    ]
}

pub fn settings(policy: EndpointPolicy) -> Settings {
    Settings {
        webhooks: WebhookSettings {
            retry_schedule: schedule(),
            timeout: Duration::from_millis(500),
            policy,
            ..WebhookSettings::default()
        },
        ..Settings::default()
    }
}

/// Loopback receivers over plain HTTP, as the operator may allow.
pub fn local() -> EndpointPolicy {
    EndpointPolicy {
        allow_http_loopback: true,
        allow_private: true,
    }
}

pub async fn local_app(b: Backend) -> TestApp {
    TestApp::with(b, None, settings(local())).await
}

pub async fn register(app: &TestApp, endpoint: &str, events: &[&str]) -> Resp {
    app.post(
        &app.full_key,
        "/webhooks",
        json!({"endpoint": endpoint, "events": events}),
    )
    .await
}

/// Registers `receiver` for `events`; its id, and the receiver trusts the
/// secret.
pub async fn subscribe(app: &TestApp, receiver: &Receiver, events: &[&str]) -> String {
    let created = register(app, &receiver.url(), events).await;
    created.ok();
    let secret = created.body["signing_secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"));
    receiver.trust(secret);
    created.body["id"].as_str().unwrap().to_string()
}

pub async fn send(app: &TestApp) -> String {
    let sent = app.send(&email()).await;
    sent.ok();
    sent.body["id"].as_str().unwrap().to_string()
}

pub async fn dispatch(app: &TestApp) -> usize {
    app.service.deliver_due_webhooks().await.expect("dispatch")
}

/// Moves the clock past the `n`th wait of the schedule (with its jitter).
pub fn past_wait(app: &TestApp, n: usize) {
    let wait = schedule()[n].as_millis() as i64;
    app.clock.advance_ms(wait + wait / 10 + 1);
}

pub async fn events_of(app: &TestApp, webhook: &str) -> Vec<Value> {
    let list = app.get(&format!("/webhooks/{webhook}/events")).await;
    list.ok();
    list.body["data"].as_array().unwrap().clone()
}

pub async fn patch(app: &TestApp, webhook: &str, body: Value) -> Resp {
    app.call(
        "PATCH",
        &format!("/webhooks/{webhook}"),
        Some(&app.full_key),
        &[],
        Some(body.to_string().into_bytes()),
    )
    .await
}

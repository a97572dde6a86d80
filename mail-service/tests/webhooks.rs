//! Webhooks through the HTTP API and the dispatcher, with a receiver on
//! loopback that checks every delivery with an independent verifier (the
//! Standard Webhooks reference library, `standardwebhooks`) and records
//! duplicates. The dispatcher runs one round at a time on the injected
//! clock, so the retry schedule is walked without waiting.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use common::receiver::{Answer, Receiver};
use common::{Backend, Resp, TestApp, email};
use dns_fixture::{DnsFixture, Record};
use mail_service::clock::Clock;
use mail_service::model::{EndpointPolicy, SigningSecret, signature};
use mail_service::service::{
    DnsProtocol, DnsSettings, Settings, WebhookDispatcher, WebhookSettings,
};
use mail_service::store::{AttemptOutcome, WebhookAttempt};
use serde_json::{Value, json};

/// The compressed schedule of these stories: 1 s, 2 s, 3 s.
fn schedule() -> Vec<Duration> {
    vec![
        Duration::from_secs(1),
        Duration::from_secs(2),
        Duration::from_secs(3),
    ]
}

fn settings(policy: EndpointPolicy) -> Settings {
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
fn local() -> EndpointPolicy {
    EndpointPolicy {
        allow_http_loopback: true,
        allow_private: true,
    }
}

async fn local_app(b: Backend) -> TestApp {
    TestApp::with(b, None, settings(local())).await
}

async fn register(app: &TestApp, endpoint: &str, events: &[&str]) -> Resp {
    app.post(
        &app.full_key,
        "/webhooks",
        json!({"endpoint": endpoint, "events": events}),
    )
    .await
}

/// Registers `receiver` for `events`; its id, and the receiver trusts the
/// secret.
async fn subscribe(app: &TestApp, receiver: &Receiver, events: &[&str]) -> String {
    let created = register(app, &receiver.url(), events).await;
    created.ok();
    let secret = created.body["signing_secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"));
    receiver.trust(secret);
    created.body["id"].as_str().unwrap().to_string()
}

async fn send(app: &TestApp) -> String {
    let sent = app.send(&email()).await;
    sent.ok();
    sent.body["id"].as_str().unwrap().to_string()
}

async fn dispatch(app: &TestApp) -> usize {
    app.service.deliver_due_webhooks().await.expect("dispatch")
}

/// Moves the clock past the `n`th wait of the schedule (with its jitter).
fn past_wait(app: &TestApp, n: usize) {
    let wait = schedule()[n].as_millis() as i64;
    app.clock.advance_ms(wait + wait / 10 + 1);
}

async fn events_of(app: &TestApp, webhook: &str) -> Vec<Value> {
    let list = app.get(&format!("/webhooks/{webhook}/events")).await;
    list.ok();
    list.body["data"].as_array().unwrap().clone()
}

async fn a_sent_email_reaches_the_receiver_signed(b: Backend) {
    let app = local_app(b).await;
    let receiver = Receiver::start().await;
    let webhook = subscribe(&app, &receiver, &["email.sent", "email.failed"]).await;
    let id = send(&app).await;
    assert_eq!(dispatch(&app).await, 1);

    let seen = receiver.seen();
    assert_eq!(seen.len(), 1);
    let delivery = &seen[0];
    assert_eq!(
        delivery.verified,
        vec![true],
        "the reference verifier accepts it"
    );
    assert!(delivery.id.starts_with("msg_"));
    assert_eq!(delivery.header("svix-id"), delivery.id);
    assert_eq!(
        delivery.header("svix-signature"),
        delivery.header("webhook-signature")
    );
    assert_eq!(
        delivery.header("svix-timestamp"),
        delivery.header("webhook-timestamp")
    );
    assert_eq!(delivery.header("content-type"), "application/json");
    let body = delivery.json();
    assert_eq!(body["type"], "email.sent");
    assert!(body["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(body["data"]["email_id"], id.as_str());
    assert_eq!(body["data"]["from"], "Acme <billing@acme.test>");
    assert_eq!(body["data"]["to"], json!(["ada@example.test"]));
    assert_eq!(body["data"]["subject"], "Your invoice");

    // The delivery and its attempt, as the account sees them.
    let events = events_of(&app, &webhook).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "email.sent");
    assert_eq!(events[0]["status"], "success");
    assert_eq!(
        format!("msg_{}", events[0]["id"].as_str().unwrap()),
        delivery.id
    );
    let event = app
        .get(&format!(
            "/webhooks/{webhook}/events/{}",
            events[0]["id"].as_str().unwrap()
        ))
        .await;
    event.ok();
    assert_eq!(event.body["object"], "webhook_event");
    assert_eq!(event.body["payload"], body);
    assert_eq!(event.body["attempts"][0]["http_status_code"], 200);
    assert_eq!(event.body["attempts"][0]["response"], "thanks");
    assert_eq!(event.body["attempts"][0]["error_class"], Value::Null);

    // Nothing more is due; a type it did not subscribe to is not sent.
    assert_eq!(dispatch(&app).await, 0);
    let scheduled = app
        .send(&json!({"from": "billing@acme.test", "to": "bob@example.test", "subject": "Later", "text": "x",
            "scheduled_at": time_in(3600)}))
        .await;
    scheduled.ok();
    assert_eq!(dispatch(&app).await, 0);
    assert_eq!(receiver.seen().len(), 1);
}

/// An RFC 3339 time `secs` from the app clock's start (near now).
fn time_in(secs: i64) -> String {
    let t = time::OffsetDateTime::now_utc() + time::Duration::seconds(secs);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

async fn each_event_type_is_sent_from_the_state_change(b: Backend) {
    let app = local_app(b).await;
    let receiver = Receiver::start().await;
    subscribe(
        &app,
        &receiver,
        &[
            "email.scheduled",
            "email.canceled",
            "email.suppressed",
            "email.sent",
        ],
    )
    .await;
    let scheduled = app
        .send(&json!({"from": "billing@acme.test", "to": ["bob@example.test"], "subject": "Later", "text": "x",
            "scheduled_at": time_in(3600)}))
        .await;
    scheduled.ok();
    let scheduled_id = scheduled.body["id"].as_str().unwrap().to_string();
    app.post(
        &app.full_key,
        &format!("/emails/{scheduled_id}/cancel"),
        json!({}),
    )
    .await
    .ok();
    app.post(
        &app.full_key,
        "/suppressions",
        json!({"email": "eve@example.test"}),
    )
    .await
    .ok();
    let suppressed = app
        .send(&json!({"from": "billing@acme.test", "to": "eve@example.test", "subject": "Hi", "text": "x"}))
        .await;
    let suppressed_id = suppressed.body["id"].as_str().unwrap().to_string();
    while dispatch(&app).await > 0 {}
    let mut seen: Vec<(String, String)> = receiver
        .seen()
        .iter()
        .map(|d| {
            assert_eq!(d.verified, vec![true]);
            let body = d.json();
            (
                body["type"].as_str().unwrap().to_string(),
                body["data"]["email_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    seen.sort();
    let mut expected = vec![
        ("email.canceled".to_string(), scheduled_id.clone()),
        ("email.scheduled".to_string(), scheduled_id.clone()),
        ("email.suppressed".to_string(), suppressed_id.clone()),
    ];
    expected.sort();
    assert_eq!(seen, expected);
    let suppressed_event = receiver
        .seen()
        .into_iter()
        .map(|d| d.json())
        .find(|b| b["type"] == "email.suppressed")
        .unwrap();
    assert_eq!(suppressed_event["data"]["to"], json!(["eve@example.test"]));
    assert!(suppressed_event["data"]["suppressed"]["message"].is_string());
}

async fn a_receiver_down_then_up_gets_it_with_the_same_id(b: Backend) {
    let app = local_app(b).await;
    // A port nothing listens on yet.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}/hook");
    let created = register(&app, &endpoint, &["email.sent"]).await;
    created.ok();
    let secret = created.body["signing_secret"].as_str().unwrap().to_string();
    let webhook = created.body["id"].as_str().unwrap().to_string();
    send(&app).await;

    assert_eq!(dispatch(&app).await, 1, "first attempt: connection refused");
    assert_eq!(dispatch(&app).await, 0, "not due before its retry time");
    let events = events_of(&app, &webhook).await;
    assert_eq!(events[0]["status"], "attempting");
    assert!(events[0]["next_attempt_at"].is_string());

    // Up, but failing: a 500 is retried.
    let receiver = Receiver::start_on(port).await;
    receiver.trust(&secret);
    receiver.plan(&[Answer::Status(500)]);
    past_wait(&app, 0);
    assert_eq!(dispatch(&app).await, 1);
    past_wait(&app, 1);
    assert_eq!(dispatch(&app).await, 1);

    let seen = receiver.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].id, seen[1].id,
        "every attempt carries the same webhook-id"
    );
    assert!(seen.iter().all(|d| d.verified == vec![true]));
    assert_eq!(seen[0].body, seen[1].body);
    let events = events_of(&app, &webhook).await;
    assert_eq!(events[0]["status"], "success");
    assert_eq!(events[0]["attempt_count"], 3);
    let attempts = app
        .get(&format!(
            "/webhooks/{webhook}/events/{}/attempts",
            events[0]["id"].as_str().unwrap()
        ))
        .await;
    attempts.ok();
    let classes: Vec<(Value, Value)> = attempts.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["http_status_code"].clone(), a["error_class"].clone()))
        .collect();
    assert_eq!(
        classes,
        vec![
            (json!(200), Value::Null),
            (json!(500), json!("http_status")),
            (Value::Null, json!("connect")),
        ],
        "newest first"
    );
    receiver.stop();
}

async fn a_slow_receiver_times_out_and_is_retried(b: Backend) {
    let app = local_app(b).await;
    let receiver = Receiver::start().await;
    let webhook = subscribe(&app, &receiver, &["email.sent"]).await;
    receiver.plan(&[Answer::Slow(Duration::from_secs(3))]);
    send(&app).await;
    assert_eq!(dispatch(&app).await, 1);
    let events = events_of(&app, &webhook).await;
    let event = app
        .get(&format!(
            "/webhooks/{webhook}/events/{}",
            events[0]["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(event.body["status"], "attempting");
    assert_eq!(event.body["attempts"][0]["error_class"], "timeout");
    assert!(event.body["attempts"][0]["duration_ms"].as_i64().unwrap() < 2_000);
    past_wait(&app, 0);
    assert_eq!(dispatch(&app).await, 1);
    let seen = receiver.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].id, seen[1].id);
    assert_eq!(events_of(&app, &webhook).await[0]["status"], "success");
}

async fn gone_disables_the_endpoint(b: Backend) {
    let app = local_app(b).await;
    let receiver = Receiver::start().await;
    let webhook = subscribe(&app, &receiver, &["email.sent"]).await;
    receiver.plan(&[Answer::Status(410)]);
    send(&app).await;
    assert_eq!(dispatch(&app).await, 1);
    let got = app.get(&format!("/webhooks/{webhook}")).await;
    got.ok();
    assert_eq!(got.body["status"], "disabled");
    assert!(
        got.body["disabled_reason"]
            .as_str()
            .unwrap()
            .contains("410")
    );
    assert_eq!(events_of(&app, &webhook).await[0]["status"], "failed");
    // A disabled webhook gets no new events.
    send(&app).await;
    app.clock.advance_ms(60_000);
    assert_eq!(dispatch(&app).await, 0);
    assert_eq!(events_of(&app, &webhook).await.len(), 1);

    // Enabled again, it gets the next one; a replay sends the old one again
    // with its id.
    patch(&app, &webhook, json!({"status": "enabled"}))
        .await
        .ok();
    send(&app).await;
    let old = events_of(&app, &webhook).await[1]["id"]
        .as_str()
        .unwrap()
        .to_string();
    app.post(
        &app.full_key,
        &format!("/webhooks/{webhook}/events/{old}/replay"),
        json!({}),
    )
    .await
    .ok();
    assert_eq!(dispatch(&app).await, 2);
    let seen = receiver.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0].id, format!("msg_{old}"));
    assert!(seen.iter().filter(|d| d.id == seen[0].id).count() == 2);
}

async fn an_endpoint_failing_the_whole_schedule_is_disabled(b: Backend) {
    let app = local_app(b).await;
    let receiver = Receiver::start().await;
    let webhook = subscribe(&app, &receiver, &["email.sent"]).await;
    receiver.plan(&vec![Answer::Status(503); 4]);
    send(&app).await;
    assert_eq!(dispatch(&app).await, 1);
    for n in 0..3 {
        past_wait(&app, n);
        assert_eq!(dispatch(&app).await, 1, "retry {n}");
    }
    let got = app.get(&format!("/webhooks/{webhook}")).await;
    assert_eq!(got.body["status"], "disabled");
    let reason = got.body["disabled_reason"].as_str().unwrap();
    assert!(reason.contains("4 attempts"), "{reason}");
    let events = events_of(&app, &webhook).await;
    assert_eq!(events[0]["status"], "failed");
    assert_eq!(events[0]["attempt_count"], 4);
    assert_eq!(events[0]["next_attempt_at"], Value::Null);
    app.clock.advance_ms(3_600_000);
    assert_eq!(dispatch(&app).await, 0);
    assert_eq!(receiver.seen().len(), 4);
}

async fn a_rotated_secret_signs_beside_the_old_one(b: Backend) {
    let mut with_grace = settings(local());
    with_grace.webhooks.secret_grace = Duration::from_secs(60);
    let app = TestApp::with(b, None, with_grace).await;
    let receiver = Receiver::start().await;
    let webhook = subscribe(&app, &receiver, &["email.sent"]).await;
    let rotated = app
        .post(
            &app.full_key,
            &format!("/webhooks/{webhook}/signing-secret/rotate"),
            json!({}),
        )
        .await;
    rotated.ok();
    let new_secret = rotated.body["signing_secret"].as_str().unwrap().to_string();
    receiver.trust(&new_secret);
    send(&app).await;
    dispatch(&app).await;
    let delivery = &receiver.seen()[0];
    assert_eq!(
        delivery.verified,
        vec![true, true],
        "old and new both verify"
    );
    assert_eq!(delivery.header("webhook-signature").split(' ').count(), 2);
    // After the grace period only the new one signs (the receiver's
    // verifier allows five minutes of clock skew).
    app.clock.advance_ms(61_000);
    send(&app).await;
    dispatch(&app).await;
    let seen = receiver.seen();
    let last = seen.last().unwrap();
    assert_eq!(last.header("webhook-signature").split(' ').count(), 1);
    assert_eq!(last.verified, vec![false, true]);
}

async fn patch(app: &TestApp, webhook: &str, body: Value) -> Resp {
    app.call(
        "PATCH",
        &format!("/webhooks/{webhook}"),
        Some(&app.full_key),
        &[],
        Some(body.to_string().into_bytes()),
    )
    .await
}

async fn the_secret_is_shown_once_and_never_listed(b: Backend) {
    let app = local_app(b).await;
    let receiver = Receiver::start().await;
    let created = register(&app, &receiver.url(), &["email.sent"]).await;
    let secret = created.body["signing_secret"].as_str().unwrap().to_string();
    let webhook = created.body["id"].as_str().unwrap().to_string();
    for path in ["/webhooks".to_string(), format!("/webhooks/{webhook}")] {
        let got = app.get(&path).await;
        got.ok();
        assert!(!got.body.to_string().contains(&secret[6..]), "{path}");
    }
    let got = app.get(&format!("/webhooks/{webhook}")).await;
    assert_eq!(got.body["events"], json!(["email.sent"]));
    assert_eq!(got.body["endpoint"], receiver.url());
    // Its Debug output (what a log line would print) does not hold it.
    let stored = app
        .store
        .webhook(
            app.service
                .list_tenants()
                .await
                .unwrap()
                .iter()
                .find(|t| t.name == "acme")
                .unwrap()
                .id,
            webhook.parse().unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    assert!(!format!("{stored:?}").contains(&secret[6..]));
    // Nor an attempt's record.
    send(&app).await;
    dispatch(&app).await;
    let events = events_of(&app, &webhook).await;
    let event = app
        .get(&format!(
            "/webhooks/{webhook}/events/{}",
            events[0]["id"].as_str().unwrap()
        ))
        .await;
    assert!(!event.body.to_string().contains(&secret[6..]));
}

async fn registration_checks_every_field(b: Backend) {
    let app = local_app(b).await;
    let receiver = Receiver::start().await;
    for (body, field) in [
        (json!({"endpoint": 7, "events": ["email.sent"]}), "endpoint"),
        (
            json!({"endpoint": receiver.url(), "events": "email.sent"}),
            "events",
        ),
        (json!({"endpoint": receiver.url(), "events": []}), "events"),
        (
            json!({"endpoint": receiver.url(), "events": ["email.sent", "email.opened"]}),
            "events[1]",
        ),
        (
            json!({"endpoint": "ftp://x.example/", "events": ["email.sent"]}),
            "endpoint",
        ),
        (
            json!({"endpoint": receiver.url(), "events": ["email.sent"], "secret": "x"}),
            "secret",
        ),
    ] {
        let refused = app.post(&app.full_key, "/webhooks", body).await;
        refused.expect(422, "validation_error");
        assert!(
            refused.message().starts_with(&format!("{field}:")),
            "{}",
            refused.message()
        );
    }
    for (body, field) in [
        (json!({"events": ["email.sent"]}), "endpoint"),
        (json!({"endpoint": receiver.url()}), "events"),
    ] {
        let refused = app.post(&app.full_key, "/webhooks", body).await;
        refused.expect(422, "missing_required_field");
        assert_eq!(refused.message(), format!("{field}: is required"));
    }
    // Nothing was stored.
    assert_eq!(app.get("/webhooks").await.body["data"], json!([]));
    // A sending key may not manage webhooks.
    app.post(
        &app.send_key,
        "/webhooks",
        json!({"endpoint": receiver.url(), "events": ["email.sent"]}),
    )
    .await
    .expect(403, "restricted_api_key");
    // Update and delete.
    let webhook = subscribe(&app, &receiver, &["email.sent"]).await;
    patch(
        &app,
        &webhook,
        json!({"events": ["email.bounced", "email.delivered"]}),
    )
    .await
    .ok();
    patch(&app, &webhook, json!({"status": "paused"}))
        .await
        .expect(422, "validation_error");
    patch(&app, &webhook, json!({"enabled": false})).await.ok();
    let got = app.get(&format!("/webhooks/{webhook}")).await;
    assert_eq!(
        got.body["events"],
        json!(["email.delivered", "email.bounced"])
    );
    assert_eq!(got.body["status"], "disabled");
    let deleted = app
        .call(
            "DELETE",
            &format!("/webhooks/{webhook}"),
            Some(&app.full_key),
            &[],
            None,
        )
        .await;
    deleted.ok();
    assert_eq!(deleted.body["deleted"], true);
    app.get(&format!("/webhooks/{webhook}"))
        .await
        .expect(404, "not_found");
}

async fn private_targets_are_refused(b: Backend) {
    let dns = DnsFixture::start().expect("dns fixture");
    dns.set("hooks.internal.test", [Record::a([10, 1, 2, 3])]);
    dns.set(
        "loop.internal.test",
        [Record::aaaa(std::net::Ipv6Addr::LOCALHOST)],
    );
    dns.set("meta.internal.test", [Record::a([169, 254, 169, 254])]);
    let mut strict = settings(EndpointPolicy::default());
    strict.dns = DnsSettings {
        nameservers: vec![dns.addr()],
        protocol: DnsProtocol::Udp,
        timeout: Duration::from_millis(500),
    };
    let app = TestApp::with(b, None, strict).await;
    for endpoint in [
        "http://127.0.0.1:9/hook",
        "https://127.0.0.1/hook",
        "https://10.0.0.8/hook",
        "https://192.168.1.1/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/hook",
        "https://[::ffff:10.0.0.8]/hook",
        "https://[::ffff:127.0.0.1]/hook",
        "https://[fd00:ec2::254]/hook",
        "http://hooks.example.com/hook",
    ] {
        let refused = register(&app, endpoint, &["email.sent"]).await;
        refused.expect(422, "validation_error");
        assert!(refused.message().starts_with("endpoint:"), "{endpoint}");
    }
    // Names are checked when they are resolved, at each delivery.
    let mut webhooks = Vec::new();
    for host in [
        "hooks.internal.test",
        "loop.internal.test",
        "meta.internal.test",
    ] {
        let created = register(&app, &format!("https://{host}/hook"), &["email.sent"]).await;
        created.ok();
        webhooks.push(created.body["id"].as_str().unwrap().to_string());
    }
    send(&app).await;
    assert_eq!(dispatch(&app).await, 3);
    for webhook in webhooks {
        let events = events_of(&app, &webhook).await;
        let event = app
            .get(&format!(
                "/webhooks/{webhook}/events/{}",
                events[0]["id"].as_str().unwrap()
            ))
            .await;
        let attempt = &event.body["attempts"][0];
        assert_eq!(attempt["error_class"], "forbidden_address", "{attempt}");
        assert_eq!(attempt["http_status_code"], Value::Null);
        assert!(
            attempt["response"]
                .as_str()
                .unwrap()
                .contains("which is refused")
        );
    }
}

async fn redirects_are_not_followed(b: Backend) {
    let app = local_app(b).await;
    let receiver = Receiver::start().await;
    let elsewhere = Receiver::start().await;
    let webhook = subscribe(&app, &receiver, &["email.sent"]).await;
    receiver.plan(&[Answer::Redirect(elsewhere.url())]);
    send(&app).await;
    assert_eq!(dispatch(&app).await, 1);
    assert_eq!(receiver.seen().len(), 1);
    assert_eq!(elsewhere.seen().len(), 0, "the redirect was not followed");
    let events = events_of(&app, &webhook).await;
    assert_eq!(events[0]["status"], "attempting");
    let attempts = app
        .get(&format!(
            "/webhooks/{webhook}/events/{}/attempts",
            events[0]["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(attempts.body["data"][0]["http_status_code"], 302);
}

async fn a_domain_status_change_is_sent(b: Backend) {
    let app = local_app(b).await;
    let receiver = Receiver::start().await;
    subscribe(&app, &receiver, &["domain.updated"]).await;
    let created = app
        .post(&app.full_key, "/domains", json!({"name": "news.acme.test"}))
        .await;
    created.ok();
    assert_eq!(dispatch(&app).await, 0, "adding a domain changes no status");
    app.service
        .mark_domain_verified("acme", "news.acme.test")
        .await
        .unwrap();
    assert_eq!(dispatch(&app).await, 1);
    let seen = receiver.seen();
    assert_eq!(seen[0].verified, vec![true]);
    let body = seen[0].json();
    assert_eq!(body["type"], "domain.updated");
    assert_eq!(body["data"]["id"], created.body["id"]);
    assert_eq!(body["data"]["name"], "news.acme.test");
    assert_eq!(body["data"]["status"], "verified");
    assert!(body["data"]["records"].is_array());
    // Sending from it changes no domain: nothing more.
    send(&app).await;
    assert_eq!(dispatch(&app).await, 0);
}

async fn a_stopped_nodes_lease_runs_out_and_another_node_delivers(b: Backend) {
    let app = local_app(b).await;
    let receiver = Receiver::start().await;
    subscribe(&app, &receiver, &["email.sent"]).await;
    send(&app).await;
    // A node claims the event for a minute and stops before recording an
    // attempt (whether or not its request reached the receiver).
    let now = app.clock.now_ms();
    let claim = 7;
    assert_eq!(
        app.store
            .claim_webhook_events(claim, now, now + 60_000, 16)
            .await
            .unwrap(),
        1
    );
    let stale = app.store.claimed_webhook_events(claim).await.unwrap();
    assert_eq!(dispatch(&app).await, 0, "leased to the stopped node");
    app.clock.advance_ms(60_001);
    assert_eq!(dispatch(&app).await, 1, "due again when the lease ran out");
    assert_eq!(receiver.seen().len(), 1);
    assert_eq!(receiver.seen()[0].verified, vec![true]);
    // A late record of the stopped node's attempt changes nothing.
    let late = WebhookAttempt {
        id: 0,
        event_id: stale[0].id,
        attempted_at: now,
        status_code: Some(200),
        error_class: None,
        response: String::new(),
        duration_ms: 1,
    };
    assert!(
        !app.store
            .record_attempt(claim, &stale[0], &late, &AttemptOutcome::Delivered, now)
            .await
            .unwrap()
    );
    assert_eq!(
        app.db.count("SELECT count(*) FROM webhook_attempts").await,
        1
    );
}

async fn a_slow_endpoint_does_not_hold_up_the_others(b: Backend) {
    let mut slow_ok = settings(local());
    slow_ok.webhooks.timeout = Duration::from_secs(10);
    slow_ok.webhooks.poll = Duration::from_millis(50);
    let app = TestApp::with(b, None, slow_ok).await;
    let slow = Receiver::start().await;
    let fast = Receiver::start().await;
    let slow_id = subscribe(&app, &slow, &["email.sent"]).await;
    subscribe(&app, &fast, &["email.sent"]).await;
    slow.plan(&[
        Answer::Slow(Duration::from_secs(4)),
        Answer::Slow(Duration::from_secs(4)),
    ]);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let dispatcher = tokio::spawn(WebhookDispatcher::new(app.service.clone()).run(stopped));
    send(&app).await;
    let arrived = |r: &Receiver, n: usize| {
        let r = r.clone();
        async move {
            let started = std::time::Instant::now();
            while r.seen().len() < n {
                assert!(
                    started.elapsed() < Duration::from_secs(2),
                    "{n} deliveries within 2 s"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    arrived(&fast, 1).await;
    arrived(&slow, 1).await;
    // The slow endpoint takes 4 s to answer; the next event reaches the
    // fast one meanwhile (within 2 s).
    send(&app).await;
    arrived(&fast, 2).await;
    assert!(
        events_of(&app, &slow_id)
            .await
            .iter()
            .all(|e| e["status"] == "pending"),
        "the slow endpoint has not answered yet"
    );
    let _ = stop.send(true);
    dispatcher.await.unwrap();
    // Stopping waited for the deliveries under way.
    let slow_events = events_of(&app, &slow_id).await;
    assert_eq!(slow_events.len(), 2);
    assert!(slow_events.iter().all(|e| e["status"] == "success"));
}

on_both_backends!(
    a_sent_email_reaches_the_receiver_signed,
    a_slow_endpoint_does_not_hold_up_the_others,
    a_stopped_nodes_lease_runs_out_and_another_node_delivers,
    a_domain_status_change_is_sent,
    each_event_type_is_sent_from_the_state_change,
    a_receiver_down_then_up_gets_it_with_the_same_id,
    a_slow_receiver_times_out_and_is_retried,
    gone_disables_the_endpoint,
    an_endpoint_failing_the_whole_schedule_is_disabled,
    a_rotated_secret_signs_beside_the_old_one,
    the_secret_is_shown_once_and_never_listed,
    registration_checks_every_field,
    private_targets_are_refused,
    redirects_are_not_followed,
);

/// Every log line written while a webhook is registered, delivered,
/// retried and rotated, at every level, from every crate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_log_line_holds_a_signing_secret() {
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let writer = lines.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .try_init()
        .expect("the only subscriber of this test binary");

    let app = local_app(Backend::Sqlite).await;
    let receiver = Receiver::start().await;
    let created = register(&app, &receiver.url(), &["email.sent"]).await;
    let first = created.body["signing_secret"].as_str().unwrap().to_string();
    let webhook = created.body["id"].as_str().unwrap().to_string();
    receiver.plan(&[Answer::Status(500)]);
    send(&app).await;
    dispatch(&app).await;
    let rotated = app
        .post(
            &app.full_key,
            &format!("/webhooks/{webhook}/signing-secret/rotate"),
            json!({}),
        )
        .await;
    let second = rotated.body["signing_secret"].as_str().unwrap().to_string();
    past_wait(&app, 0);
    dispatch(&app).await;
    assert_eq!(receiver.seen().len(), 2);

    let logged = String::from_utf8_lossy(&lines.0.lock().unwrap()).into_owned();
    assert!(
        logged.contains("webhook attempt"),
        "the attempts were logged"
    );
    for secret in [&first, &second] {
        assert!(!logged.contains(&secret[6..]), "a secret in the log");
    }
}

/// The reference verifier and our signer agree on the Standard Webhooks
/// test vector, and the verifier refuses a tampered body, id or timestamp
/// and a timestamp outside its tolerance.
#[test]
fn signatures_verify_only_untampered_and_fresh() {
    let secret: SigningSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse().unwrap();
    let key = secret.key().unwrap();
    let body = br#"{"test": 2432232314}"#;
    assert_eq!(
        signature(
            std::slice::from_ref(&key),
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            body
        ),
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    );
    let verifier = standardwebhooks::Webhook::new(secret.reveal()).unwrap();
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let headers = |id: &str, ts: i64, sig: &str| {
        let mut h = HeaderMap::new();
        h.insert("webhook-id", id.parse().unwrap());
        h.insert("webhook-timestamp", ts.to_string().parse().unwrap());
        h.insert("webhook-signature", sig.parse().unwrap());
        h
    };
    let signed = signature(std::slice::from_ref(&key), "msg_1", now, body);
    assert!(
        verifier
            .verify(body, &headers("msg_1", now, &signed))
            .is_ok()
    );
    assert!(
        verifier
            .verify(br#"{"test": 2432232315}"#, &headers("msg_1", now, &signed))
            .is_err(),
        "tampered body"
    );
    assert!(
        verifier
            .verify(body, &headers("msg_2", now, &signed))
            .is_err(),
        "tampered id"
    );
    assert!(
        verifier
            .verify(body, &headers("msg_1", now + 1, &signed))
            .is_err(),
        "tampered timestamp"
    );
    let old = now - 10 * 60;
    let stale = signature(std::slice::from_ref(&key), "msg_1", old, body);
    assert!(
        verifier
            .verify(body, &headers("msg_1", old, &stale))
            .is_err(),
        "outside the tolerance"
    );
    let other = SigningSecret::generate();
    let two = signature(&[other.key().unwrap(), key], "msg_1", now, body);
    assert!(
        verifier.verify(body, &headers("msg_1", now, &two)).is_ok(),
        "one valid signature among several"
    );
}

//! Webhook endpoints: registration and its checks, the signing secret
//! (shown once, rotated, never listed or logged), the signature against the
//! Standard Webhooks test vector and its reference verifier, and where
//! deliveries may go (no private addresses, no redirects). Deliveries
//! themselves: `webhooks.rs`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use common::receiver::{Answer, Receiver};
use common::webhooks::*;
use common::{Backend, TestApp};
use dns_fixture::{DnsFixture, Record};
use mail_service::model::{EndpointPolicy, SigningSecret, signature};
use mail_service::service::{DnsProtocol, DnsSettings};
use serde_json::{Value, json};

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
    // Resend's Python SDK repeats the id as `webhook_id`: the path's own is
    // accepted, another refused naming the field; other unknown properties
    // are still refused.
    let wrong = patch(&app, &webhook, json!({"webhook_id": "1", "enabled": true})).await;
    wrong.expect(422, "validation_error");
    assert!(
        wrong
            .message()
            .starts_with("webhook_id: must be the id in the path"),
        "{}",
        wrong.message()
    );
    let unknown = patch(
        &app,
        &webhook,
        json!({"webhook_id": webhook, "color": "red"}),
    )
    .await;
    unknown.expect(422, "validation_error");
    assert!(
        unknown.message().starts_with("color: unknown property"),
        "{}",
        unknown.message()
    );
    patch(
        &app,
        &webhook,
        json!({"webhook_id": webhook, "enabled": false}),
    )
    .await
    .ok();
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

on_both_backends!(
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

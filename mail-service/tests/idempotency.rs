//! `Idempotency-Key`: scoped to tenant + method + path, compared by body
//! hash, replayed for 24 hours, refused while in flight or with another
//! body, and correct under concurrency, across processes and after a node
//! stops mid-handoff.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{Backend, ServerProcess, TestApp, TestDb, email, http_client, smtp};
use mail_service::model::Permission;
use mail_service::service::Settings;
use mail_service::smtp_sink::{SinkMode, SmtpSink};
use mail_service::store::{NewEmail, Reservation};
use serde_json::json;

async fn replay_returns_the_identical_answer(b: Backend) {
    let app = TestApp::start(b).await;
    let first = app.send_with_key("invoice-7", &email()).await;
    first.expect(200, "");
    // Same content, other key order and spacing: the same request.
    let reordered = r#"{ "text": "Thanks!", "subject": "Your invoice",
        "to": ["ada@example.test"], "from": "Acme <billing@acme.test>" }"#;
    let again = app
        .call(
            "POST",
            "/emails",
            Some(&app.send_key),
            &[("idempotency-key", "invoice-7")],
            Some(reordered.as_bytes().to_vec()),
        )
        .await;
    assert_eq!((again.status, &again.body), (200, &first.body));
    assert_eq!(again.header("etag"), first.header("etag"));
    assert_eq!(app.outbox_count(), 1);

    // Just inside the window it still replays; just after, the key is free.
    app.clock.advance_ms(24 * 3600 * 1000 - 1);
    assert_eq!(
        app.send_with_key("invoice-7", &email()).await.body,
        first.body
    );
    app.clock.advance_ms(2);
    let fresh = app.send_with_key("invoice-7", &email()).await;
    fresh.expect(200, "");
    assert_ne!(fresh.body, first.body);
    assert_eq!(app.outbox_count(), 2);
}

async fn different_body_is_409(b: Backend) {
    let app = TestApp::start(b).await;
    app.send_with_key("k1", &email()).await.expect(200, "");
    let mut other = email();
    other["subject"] = json!("Another subject");
    let resp = app.send_with_key("k1", &other).await;
    resp.expect(409, "invalid_idempotent_request");
    assert!(resp.message().starts_with("Idempotency-Key"));
    assert_eq!(app.outbox_count(), 1);
}

async fn keys_are_scoped_by_path_and_tenant(b: Backend) {
    let app = TestApp::start(b).await;
    app.send_with_key("shared", &email()).await.expect(200, "");
    // Same key on the batch endpoint: another scope.
    app.batch(&[("idempotency-key", "shared")], &json!([email()]))
        .await
        .expect(200, "");
    // Same key for another tenant.
    let (_, other_key) = app
        .service
        .create_api_key("globex", "app", Permission::SendingAccess)
        .await
        .unwrap();
    app.service
        .mark_domain_verified("globex", "acme.test")
        .await
        .unwrap();
    app.call(
        "POST",
        "/emails",
        Some(&other_key),
        &[("idempotency-key", "shared")],
        Some(email().to_string().into_bytes()),
    )
    .await
    .expect(200, "");
    assert_eq!(app.outbox_count(), 3);
    // Batch replay.
    let first = app
        .batch(&[("idempotency-key", "b-1")], &json!([email(), email()]))
        .await;
    let again = app
        .batch(&[("idempotency-key", "b-1")], &json!([email(), email()]))
        .await;
    assert_eq!((again.status, &again.body), (200, &first.body));
    assert_eq!(app.outbox_count(), 5);
}

/// Sends `n` concurrent requests with one key; returns (status, id) pairs.
async fn fire(
    n: usize,
    send: impl Fn(usize) -> tokio::task::JoinHandle<(u16, serde_json::Value)>,
) -> Vec<(u16, serde_json::Value)> {
    let handles: Vec<_> = (0..n).map(send).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

#[track_caller]
fn exactly_one_message(results: &[(u16, serde_json::Value)], sink: &SmtpSink) {
    let ids: HashSet<String> = results
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, b)| b["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 1, "every 200 carries the same id: {results:?}");
    for (status, body) in results {
        assert!(
            *status == 200 || (*status == 409 && body["name"] == "concurrent_idempotent_requests"),
            "unexpected answer {status} {body}"
        );
    }
    assert_eq!(
        sink.received().len(),
        1,
        "exactly one message reached the provider"
    );
}

async fn fifty_concurrent_requests_send_once(b: Backend) {
    let sink = SmtpSink::start(0, SinkMode::Accept).await.unwrap();
    let app = TestApp::with(
        b,
        Some(smtp(sink.port(), Duration::from_secs(5))),
        Settings::default(),
    )
    .await;
    let burst: Vec<_> = (0..50)
        .map(|_| app.spawn_post("/emails", "burst", &email()))
        .collect();
    let mut results = Vec::new();
    for r in burst {
        let r = r.await.expect("task");
        results.push((r.status, r.body));
    }
    exactly_one_message(&results, &sink);
}

async fn two_processes_on_one_postgres_send_once(b: Backend) {
    assert_eq!(b, Backend::Postgres);
    let sink = SmtpSink::start(0, SinkMode::Accept).await.unwrap();
    let db = TestDb::new(Backend::Postgres);
    let (key, _) = common::provision_keys(&db).await;
    let smtp_env = common::smtp_env(sink.port());
    let a = ServerProcess::start(&db.env(), &smtp_env);
    let b2 = ServerProcess::start(&db.env(), &smtp_env);
    let client = http_client();
    let body = email();
    let results = fire(50, |i| {
        let base = if i % 2 == 0 {
            a.base.clone()
        } else {
            b2.base.clone()
        };
        let (client, key, body) = (client.clone(), key.clone(), body.clone());
        tokio::spawn(async move {
            let r = client
                .post(format!("{base}/emails"))
                .bearer_auth(key)
                .header("idempotency-key", "cross-node")
                .json(&body)
                .send()
                .await
                .expect("request");
            (r.status().as_u16(), r.json().await.expect("json"))
        })
    })
    .await;
    exactly_one_message(&results, &sink);
}

async fn a_node_that_stops_mid_handoff_leaves_the_key_unknown(b: Backend) {
    let app = TestApp::start(b).await;
    // What a node leaves behind when it dies after reserving: the key in
    // flight and the email `sending`.
    let principal = app.service.authenticate(&app.send_key).await.unwrap();
    let now = app.service.now_ms();
    let id = app.service.next_id();
    let body = email();
    let reservation = Reservation {
        tenant_id: principal.tenant_id,
        scope: "POST /emails".into(),
        key: "orphan".into(),
        body_hash: mail_service::service::body_hash(&body),
        replay_cutoff: now - 1,
    };
    let orphan = NewEmail {
        id,
        tenant_id: principal.tenant_id,
        api_key_id: principal.api_key_id,
        from_addr: "billing@acme.test".into(),
        from_domain: "acme.test".into(),
        to_addrs: "[]".into(),
        subject: "Your invoice".into(),
        payload: body.to_string(),
        message_id: format!("<{id}@acme.test>"),
        scheduled_at: None,
        batch_id: None,
        request_id: None,
    };
    app.store
        .reserve_and_store(Some(&reservation), &[orphan], now, now + 60_000, None)
        .await
        .unwrap();

    app.send_with_key("orphan", &body)
        .await
        .expect(409, "concurrent_idempotent_requests");
    app.clock.advance_ms(60_001);
    let resp = app.send_with_key("orphan", &body).await;
    resp.expect(409, "handoff_unknown");
    assert_eq!(resp.body["email_id"], id.to_string());
    assert_eq!(
        app.get(&format!("/emails/{id}")).await.body["status"],
        "unknown"
    );
    assert_eq!(app.outbox_count(), 0, "nothing was resent");
}

on_both_backends!(
    replay_returns_the_identical_answer,
    different_body_is_409,
    keys_are_scoped_by_path_and_tenant,
    fifty_concurrent_requests_send_once,
    a_node_that_stops_mid_handoff_leaves_the_key_unknown,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_processes_one_key() {
    two_processes_on_one_postgres_send_once(Backend::Postgres).await
}

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

/// How far a node got before it died, after reserving a key.
#[derive(Clone, Copy)]
enum Reached {
    /// The reservation: no mark that the handoff began.
    Reservation,
    /// The mark, written apart just before the transport connects.
    Mark,
    /// The reservation with its email already marked, as a send whose
    /// recipients were screened clear is stored.
    ReservationMarked,
}

/// What a node leaves behind when it dies after reserving key `key` for
/// `body`: the key in flight and the email `sending`, both leased for a
/// minute, with or without the mark it writes before the transport
/// connects (`reached`). Returns the email's id.
async fn orphaned_reservation(
    app: &TestApp,
    key: &str,
    body: &serde_json::Value,
    reached: Reached,
) -> i64 {
    let marked_with_it = matches!(reached, Reached::ReservationMarked);
    let (id, key) = app.reserve_email(key, body, marked_with_it).await;
    if let Reached::Mark = reached {
        let now = app.service.now_ms();
        assert!(
            app.store
                .begin_handoff(id, Some(&key), now, now + 60_000)
                .await
                .unwrap()
        );
    }
    id
}

async fn a_node_that_stops_mid_handoff_leaves_the_key_unknown(b: Backend) {
    let app = TestApp::start(b).await;
    let body = email();
    for (key, reached) in [
        ("orphan", Reached::Mark),
        ("orphan-marked-with-reservation", Reached::ReservationMarked),
    ] {
        let id = orphaned_reservation(&app, key, &body, reached).await;

        app.send_with_key(key, &body)
            .await
            .expect(409, "concurrent_idempotent_requests");
        app.clock.advance_ms(60_001);
        let resp = app.send_with_key(key, &body).await;
        resp.expect(409, "handoff_unknown");
        assert_eq!(resp.body["email_id"], id.to_string());
        assert_eq!(
            app.get(&format!("/emails/{id}")).await.body["status"],
            "unknown"
        );
    }
    assert_eq!(app.outbox_count(), 0, "nothing was resent");
}

/// A node that died after reserving but before the handoff began (no
/// mark): nothing reached the relay, so the email is `failed` (not sent),
/// not `unknown`, and the key is released: the client's retry with it is
/// sent, once.
async fn a_node_that_stops_before_the_handoff_releases_the_key(b: Backend) {
    let app = TestApp::start(b).await;
    let body = email();
    let id = orphaned_reservation(&app, "never-began", &body, Reached::Reservation).await;
    app.send_with_key("never-began", &body)
        .await
        .expect(409, "concurrent_idempotent_requests");
    app.clock.advance_ms(60_001);
    let retry = app.send_with_key("never-began", &body).await;
    retry.expect(200, "");
    assert_ne!(retry.body["id"], id.to_string(), "sent as a new email");
    let orphan = app.get(&format!("/emails/{id}")).await;
    assert_eq!(orphan.body["status"], "failed", "{}", orphan.body);
    assert_eq!(app.outbox_count(), 1, "sent once, by the retry");
    // From then on the key replays the retry's answer.
    let replay = app.send_with_key("never-began", &body).await;
    assert_eq!((replay.status, &replay.body), (200, &retry.body));
    assert_eq!(app.outbox_count(), 1);
}

/// A keyed batch whose node stops during its first item's handoff: its key
/// is held one handoff lease past that item's start, not one per item, so
/// the client's retry gets a definite answer after one lease; the item
/// whose handoff began is `unknown`, the items that never began are
/// `failed` (not sent).
async fn a_keyed_batch_cut_off_is_settled_after_one_lease(b: Backend) {
    let sink = SmtpSink::start(0, SinkMode::Stall).await.unwrap();
    let settings = Settings {
        handoff_lease: Duration::from_secs(60),
        ..Settings::default()
    };
    let app = TestApp::with(
        b,
        Some(smtp(sink.port(), Duration::from_secs(60))),
        settings,
    )
    .await;
    let items = json!([email(), email(), email(), email(), email()]);
    let cut_off = app.spawn_post("/emails/batch", "batch-5", &items);
    let started = std::time::Instant::now();
    while sink.received().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "item 0 reached the relay"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The node stops: its request ends without an answer.
    cut_off.abort();
    let _ = cut_off.await;
    app.call(
        "POST",
        "/emails/batch",
        Some(&app.send_key),
        &[("idempotency-key", "batch-5")],
        Some(items.to_string().into_bytes()),
    )
    .await
    .expect(409, "concurrent_idempotent_requests");
    // One lease (the handoff bound plus its 30 s margin) after item 0
    // began; five items' worth would be 450 s.
    app.clock.advance_ms(90_001);
    let retry = app
        .call(
            "POST",
            "/emails/batch",
            Some(&app.send_key),
            &[("idempotency-key", "batch-5")],
            Some(items.to_string().into_bytes()),
        )
        .await;
    retry.expect(409, "handoff_unknown");
    let unknown = app
        .db
        .count("SELECT count(*) FROM emails WHERE status = 'unknown'")
        .await;
    let not_sent = app
        .db
        .count("SELECT count(*) FROM emails WHERE status = 'failed' AND handoff_detail LIKE 'not sent:%'")
        .await;
    assert_eq!(
        (unknown, not_sent),
        (1, 4),
        "item 0 unknown, items 1-4 not sent"
    );
    assert_eq!(sink.received().len(), 1, "nothing resent");
}

on_both_backends!(
    replay_returns_the_identical_answer,
    different_body_is_409,
    keys_are_scoped_by_path_and_tenant,
    fifty_concurrent_requests_send_once,
    a_node_that_stops_mid_handoff_leaves_the_key_unknown,
    a_node_that_stops_before_the_handoff_releases_the_key,
    a_keyed_batch_cut_off_is_settled_after_one_lease,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_processes_one_key() {
    two_processes_on_one_postgres_send_once(Backend::Postgres).await
}

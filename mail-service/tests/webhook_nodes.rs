//! Webhook deliveries across processes: events committed by a node killed
//! with SIGKILL before its dispatcher sent them are delivered after a
//! restart, and two nodes on one PostgreSQL database deliver every event,
//! none twice (a duplicate needs a node to stop mid-attempt). Counted at a
//! receiver on loopback that verifies each delivery independently.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::receiver::Receiver;
use common::{Backend, ServerProcess, TestDb, email, http_client};
use serde_json::{Value, json};

/// The operator flags that let `serve` call a receiver on loopback.
fn local_receiver_env(poll_ms: u64) -> Vec<(&'static str, String)> {
    vec![
        ("MAIL_WEBHOOK_ALLOW_PRIVATE_ADDRESSES", "true".into()),
        ("MAIL_WEBHOOK_ALLOW_HTTP_LOOPBACK", "true".into()),
        ("MAIL_WEBHOOK_POLL_MS", poll_ms.to_string()),
    ]
}

async fn register(base: &str, key: &str, receiver: &Receiver) {
    let resp = http_client()
        .post(format!("{base}/webhooks"))
        .bearer_auth(key)
        .json(&json!({"endpoint": receiver.url(), "events": ["email.sent"]}))
        .send()
        .await
        .expect("register");
    assert_eq!(resp.status().as_u16(), 200);
    let body: Value = resp.json().await.unwrap();
    receiver.trust(body["signing_secret"].as_str().unwrap());
}

async fn send(base: &str, key: &str) -> String {
    let resp = http_client()
        .post(format!("{base}/emails"))
        .bearer_auth(key)
        .json(&email())
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);
    let body: Value = resp.json().await.unwrap();
    body["id"].as_str().unwrap().to_string()
}

/// How many deliveries the receiver saw per email id, once it has seen
/// `expected` distinct ones (or the limit passed).
async fn delivered(
    receiver: &Receiver,
    expected: usize,
    limit: Duration,
) -> HashMap<String, usize> {
    let started = Instant::now();
    loop {
        let mut per_email: HashMap<String, usize> = HashMap::new();
        for d in receiver.seen() {
            assert_eq!(d.verified, vec![true], "every delivery verifies");
            let body = d.json();
            assert_eq!(body["type"], "email.sent");
            *per_email
                .entry(body["data"]["email_id"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        if per_email.len() >= expected || started.elapsed() > limit {
            return per_email;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn killed_between_commit_and_delivery(b: Backend) {
    let db = TestDb::new(b);
    let (send_key, full_key) = common::provision_keys(&db).await;
    let receiver = Receiver::start().await;
    // The dispatcher's one round runs at start; the next would come after
    // ten minutes, so what is committed now waits in the outbox.
    let mut server = ServerProcess::start(&db.env(), &local_receiver_env(600_000));
    register(&server.base, &full_key, &receiver).await;
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(send(&server.base, &send_key).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        receiver.seen().len(),
        0,
        "nothing was delivered before the kill"
    );
    server.kill();
    let pending = db
        .count("SELECT count(*) FROM webhook_events WHERE status = 'pending'")
        .await;
    assert_eq!(pending, 20, "the events were committed with the emails");

    let _restarted = ServerProcess::start(&db.env(), &local_receiver_env(100));
    let per_email = delivered(&receiver, ids.len(), Duration::from_secs(30)).await;
    for id in &ids {
        assert_eq!(per_email.get(id), Some(&1), "email {id} delivered once");
    }
    let ids_sent: Vec<String> = receiver.seen().iter().map(|d| d.id.clone()).collect();
    let mut unique = ids_sent.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids_sent.len(), "no webhook-id twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_nodes_deliver_each_event_once() {
    let db = TestDb::new(Backend::Postgres);
    let (send_key, full_key) = common::provision_keys(&db).await;
    let receiver = Receiver::start().await;
    let a = ServerProcess::start(&db.env(), &local_receiver_env(50));
    let b = ServerProcess::start(&db.env(), &local_receiver_env(50));
    register(&a.base, &full_key, &receiver).await;
    let mut ids = Vec::new();
    for i in 0..200 {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        ids.push(send(base, &send_key).await);
    }
    let per_email = delivered(&receiver, ids.len(), Duration::from_secs(60)).await;
    // Late duplicates would come within a poll or two.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let per_email_after = delivered(&receiver, ids.len(), Duration::ZERO).await;
    assert_eq!(per_email, per_email_after);
    for id in &ids {
        assert_eq!(per_email.get(id), Some(&1), "email {id} delivered once");
    }
    let delivered_rows = db
        .count("SELECT count(*) FROM webhook_events WHERE status = 'delivered'")
        .await;
    assert_eq!(delivered_rows, 200);
}

on_both_backends!(killed_between_commit_and_delivery);

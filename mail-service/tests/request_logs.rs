//! A log collector reads `serve --log-format json`: every line a request
//! causes carries that request's id (`x-request-id`), also the lines that
//! come later from elsewhere: the handoff of an email scheduled by the
//! request (the scheduler's `scheduled_handoff` span) and the deliveries of
//! the webhook events its emails caused (the dispatcher's
//! `webhook_delivery` span), which take the id stored with the email.

mod common;

use std::time::{Duration, Instant};

use common::receiver::Receiver;
use common::{Backend, ServerProcess, TestDb, email, http_client, provision_keys};
use mail_service::clock::rfc3339;
use serde_json::{Value, json};

/// The request id a JSON line carries: its own field, or its spans'.
fn request_id_of(line: &Value) -> Option<i64> {
    line["fields"]["request_id"].as_i64().or_else(|| {
        line["spans"]
            .as_array()?
            .iter()
            .find_map(|span| span["request_id"].as_i64())
    })
}

fn message(line: &Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or_default()
}

/// The JSON lines of `server` whose request id is `id`: their messages.
fn messages_of(lines: &[Value], id: i64) -> Vec<String> {
    lines
        .iter()
        .filter(|l| request_id_of(l) == Some(id))
        .map(|l| message(l).to_string())
        .collect()
}

fn json_lines(server: &ServerProcess) -> Vec<Value> {
    server
        .stderr_lines()
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_a_request_causes_carries_its_id_also_the_later_ones_sqlite() {
    every_line_a_request_causes_carries_its_id(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_a_request_causes_carries_its_id_also_the_later_ones_postgres() {
    every_line_a_request_causes_carries_its_id(Backend::Postgres).await;
}

async fn every_line_a_request_causes_carries_its_id(backend: Backend) {
    let db = TestDb::new(backend);
    let (send_key, full_key) = provision_keys(&db).await;
    let receiver = Receiver::start().await;
    let server = ServerProcess::start(
        &db.env(),
        &[
            ("MAIL_LOG_FORMAT", "json".into()),
            ("RUST_LOG", "mail_service=info".into()),
            ("MAIL_WEBHOOK_ALLOW_PRIVATE_ADDRESSES", "true".into()),
            ("MAIL_WEBHOOK_ALLOW_HTTP_LOOPBACK", "true".into()),
            ("MAIL_WEBHOOK_POLL_MS", "50".into()),
            ("MAIL_SCHEDULER_POLL_MS", "100".into()),
        ],
    );
    let client = http_client();
    let post = |key: &str, path: &str, body: Value| {
        client
            .post(format!("{}{path}", server.base))
            .bearer_auth(key)
            .json(&body)
    };
    let hook = post(
        &full_key,
        "/webhooks",
        json!({"endpoint": receiver.url(), "events": ["email.sent", "email.scheduled"]}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(hook.status(), 200);

    let now = post(&send_key, "/emails", email()).send().await.unwrap();
    assert_eq!(now.status(), 200);
    let now_id: i64 = now.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut later = email();
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        + 1_500;
    later["scheduled_at"] = json!(rfc3339(at));
    let scheduled = post(&send_key, "/emails", later).send().await.unwrap();
    assert_eq!(scheduled.status(), 200);
    let scheduled_id: i64 = scheduled.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(now_id, scheduled_id);

    // email.sent of the first; email.scheduled and, once due and handed
    // off, email.sent of the second.
    let started = Instant::now();
    let mut lines = json_lines(&server);
    while receiver.seen().len() < 3
        || messages_of(&lines, scheduled_id)
            .iter()
            .filter(|m| *m == "webhook attempt")
            .count()
            < 2
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "deliveries: {}, lines: {lines:#?}",
            receiver.seen().len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        lines = json_lines(&server);
    }

    let immediate = messages_of(&lines, now_id);
    assert_eq!(
        immediate.iter().filter(|m| *m == "request").count(),
        1,
        "{immediate:?}"
    );
    assert!(immediate.contains(&"handoff".to_string()), "{immediate:?}");
    assert!(
        immediate.contains(&"webhook attempt".to_string()),
        "{immediate:?}"
    );
    let later = messages_of(&lines, scheduled_id);
    assert_eq!(
        later.iter().filter(|m| *m == "request").count(),
        1,
        "{later:?}"
    );
    assert_eq!(
        later.iter().filter(|m| *m == "webhook attempt").count(),
        2,
        "{later:?}"
    );
    // The scheduled email's handoff ran in the scheduler, later, in a span
    // of its own that names the accepting request.
    let handoff = lines
        .iter()
        .find(|l| {
            message(l) == "handoff"
                && l["spans"]
                    .as_array()
                    .is_some_and(|spans| spans.iter().any(|s| s["name"] == "scheduled_handoff"))
        })
        .expect("the scheduled handoff's line");
    assert_eq!(request_id_of(handoff), Some(scheduled_id), "{handoff}");
    // Every line about one of the two emails carries its request's id.
    for line in &lines {
        let email_id = line["fields"]["email_id"].as_i64().or_else(|| {
            line["spans"]
                .as_array()?
                .iter()
                .find_map(|s| s["email_id"].as_i64())
        });
        if email_id.is_some() {
            let id = request_id_of(line);
            assert!(
                id == Some(now_id) || id == Some(scheduled_id),
                "a line about an email without its request id: {line}"
            );
        }
    }
    // No secret in the log.
    let log = server.stderr_lines().join("\n");
    for secret in [send_key.as_str(), full_key.as_str(), "whsec_"] {
        assert!(!log.contains(secret), "the log holds `{secret}`");
    }
}

//! A node killed with SIGKILL in the middle of a stream of sends: after a
//! restart every email that was answered 200 is stored as sent, every
//! message the provider saw is stored, and nothing was sent twice — also
//! when clients retry their unanswered requests with the same keys.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Backend, ServerProcess, TestDb, email, http_client};
use mail_service::smtp_sink::{SinkMode, SmtpSink};

async fn killed_during_a_stream_of_sends(b: Backend) {
    let sink = SmtpSink::start(0, SinkMode::Accept).await.unwrap();
    let db = TestDb::new(b);
    let (send_key, full_key) = common::provision_keys(&db).await;
    let smtp_env = common::smtp_env(sink.port());
    let mut server = ServerProcess::start(&db.env(), &smtp_env);
    let client = http_client();
    // key -> Some(id) when answered 200, None when unanswered.
    let answers: Arc<Mutex<HashMap<String, Option<String>>>> = Arc::default();
    let mut writers = Vec::new();
    for w in 0..6 {
        let (client, base, key, answers) = (
            client.clone(),
            server.base.clone(),
            send_key.clone(),
            answers.clone(),
        );
        writers.push(tokio::spawn(async move {
            for n in 0.. {
                let idem = format!("w{w}-{n}");
                answers.lock().unwrap().insert(idem.clone(), None);
                let sent = client
                    .post(format!("{base}/emails"))
                    .bearer_auth(&key)
                    .header("idempotency-key", &idem)
                    .json(&email())
                    .send()
                    .await;
                let Ok(resp) = sent else { return };
                if resp.status().as_u16() == 200
                    && let Ok(body) = resp.json::<serde_json::Value>().await
                {
                    answers
                        .lock()
                        .unwrap()
                        .insert(idem, body["id"].as_str().map(str::to_string));
                }
            }
        }));
    }
    // Let a stream build up, then kill without warning.
    let started = std::time::Instant::now();
    while answers
        .lock()
        .unwrap()
        .values()
        .filter(|v| v.is_some())
        .count()
        < 60
        && started.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill();
    for w in writers {
        let _ = w.await;
    }
    let answers = answers.lock().unwrap().clone();
    let accepted: Vec<String> = answers.values().flatten().cloned().collect();
    assert!(
        accepted.len() >= 60,
        "the stream was running ({} accepted)",
        accepted.len()
    );

    let server = ServerProcess::start(&db.env(), &smtp_env);
    for id in &accepted {
        let resp = client
            .get(format!("{}/emails/{id}", server.base))
            .bearer_auth(&full_key)
            .send()
            .await
            .unwrap();
        assert_eq!(
            resp.status().as_u16(),
            200,
            "answered 200 before the crash, so stored: {id}"
        );
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["status"], "sent");
    }
    // Clients retry what went unanswered, with the same keys.
    for (idem, id) in &answers {
        if id.is_some() {
            continue;
        }
        let resp = client
            .post(format!("{}/emails", server.base))
            .bearer_auth(&send_key)
            .header("idempotency-key", idem)
            .json(&email())
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body: serde_json::Value = resp.json().await.unwrap();
        assert!(
            status == 200 || (status == 409 && body["name"] == "concurrent_idempotent_requests"),
            "retry of {idem}: {status} {body}"
        );
    }
    // Nothing reached the provider twice, and everything it saw is stored.
    let mut seen: HashMap<String, usize> = HashMap::new();
    for message in sink.received() {
        *seen
            .entry(message.message_id().expect("Message-ID"))
            .or_default() += 1;
    }
    assert!(
        seen.values().all(|n| *n == 1),
        "a message was sent twice: {seen:?}"
    );
    for message_id in seen.keys() {
        let id = message_id
            .trim_matches(['<', '>'])
            .split('@')
            .next()
            .unwrap();
        let resp = client
            .get(format!("{}/emails/{id}", server.base))
            .bearer_auth(&full_key)
            .send()
            .await
            .unwrap();
        assert_eq!(
            resp.status().as_u16(),
            200,
            "the provider saw {message_id}, so it is stored"
        );
    }
    for id in &accepted {
        assert!(seen.contains_key(&format!("<{id}@acme.test>")));
    }
}

on_both_backends!(killed_during_a_stream_of_sends);

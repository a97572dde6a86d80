//! A master key rotation while mail is sent: `mail-service secrets rotate`
//! runs as its own process while 200 `POST /emails` come in on 8
//! connections (send_load's traffic, at a small scale). Every send is
//! answered, every message reaches the SMTP sink signed and verifies with
//! dkimpy, every `email.sent` webhook verifies with the Standard Webhooks
//! reference library, and at the end the old key is forgotten and the
//! service still signs and delivers.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::dkim::{dkimpy_verify_all, verifier};
use common::receiver::Receiver;
use common::webhooks::{local, settings, subscribe};
use common::{Backend, TestApp, email};
use dns_fixture::{DnsFixture, Record};
use mail_service::smtp_sink::{SinkMode, SmtpSink};
use secrets_at_rest::MasterKey;

on_both_backends!(a_rotation_under_load_loses_no_send_no_signature_and_no_webhook);

const SENDS: usize = 200;
const CONNECTIONS: usize = 8;

/// Publishes acme.test's DKIM key (the stories' operator-marked sender).
async fn publish_dkim_key(app: &TestApp, dns: &DnsFixture) {
    let list = app.get("/domains").await;
    let id = list.body["data"][0]["id"].as_str().unwrap().to_string();
    let domain = app.get(&format!("/domains/{id}")).await.body;
    let value = domain["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["record"] == "DKIM" && r["type"] == "TXT")
        .map(|r| r["value"].as_str().unwrap().to_string())
        .unwrap();
    let strings: Vec<String> = value
        .as_bytes()
        .chunks(200)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect();
    dns.set(
        "mailservice._domainkey.acme.test",
        [Record::txt_strings(strings)],
    );
}

/// Delivers due webhook events until `receiver` has seen `n` distinct
/// events (a minute at most).
async fn deliver_until(app: &TestApp, receiver: &Receiver, n: usize) -> BTreeMap<String, bool> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut seen = BTreeMap::new();
        for delivery in receiver.seen() {
            let verified = delivery.verified.iter().any(|v| *v);
            *seen.entry(delivery.id.clone()).or_insert(false) |= verified;
        }
        if seen.len() >= n {
            return seen;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} webhook events delivered",
            seen.len()
        );
        app.service.deliver_due_webhooks().await.expect("dispatch");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn a_rotation_under_load_loses_no_send_no_signature_and_no_webhook(backend: Backend) {
    let Some(python) = verifier() else { return };
    let dns = DnsFixture::start().unwrap();
    let sink = SmtpSink::start(0, SinkMode::Accept).await.unwrap();
    let app = TestApp::with(
        backend,
        Some(common::smtp(sink.port(), Duration::from_secs(5))),
        settings(local()),
    )
    .await;
    publish_dkim_key(&app, &dns).await;
    let receiver = Receiver::start().await;
    subscribe(&app, &receiver, &["email.sent"]).await;
    let old_id = app.store.secrets_status().await.unwrap().current;
    let old_file = app.db.dir.path().join("master.key");
    let new_file = app.db.dir.path().join("new.key");
    let new_id = MasterKey::create_file(&new_file).unwrap().id().to_string();

    // The rotation, as the operator runs it, next to the serving app.
    let rotation = Command::new(env!("CARGO_BIN_EXE_mail-service"))
        .args(["secrets", "rotate", "--new-key-file"])
        .arg(&new_file)
        .args(["--settle-ms", "500"])
        .envs(app.db.env())
        .env("MAIL_MASTER_KEY_FILE", &old_file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rotation = std::thread::spawn(move || {
        let out = rotation.wait_with_output().unwrap();
        (out, Instant::now())
    });

    // 200 sends from 8 clients, each one after the other with a pause,
    // spread over a few seconds.
    let started = Instant::now();
    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (router, key) = (app.router.clone(), app.send_key.clone());
            let body = email().to_string();
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for _ in 0..SENDS / CONNECTIONS {
                    let answer = common::call_router(
                        router.clone(),
                        "POST",
                        "/emails",
                        Some(&key),
                        &[],
                        Some(body.clone().into_bytes()),
                    )
                    .await;
                    statuses.push((answer.status, answer.body.to_string()));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                (statuses, Instant::now())
            })
        })
        .collect();
    let mut answered = 0;
    let mut last_answer = started;
    for worker in workers {
        let (statuses, done) = worker.await.unwrap();
        for (status, body) in statuses {
            assert_eq!(status, 200, "{body}");
            answered += 1;
        }
        last_answer = last_answer.max(done);
    }
    let total = SENDS;
    assert_eq!(answered, total, "every send answered 200");
    let (out, rotated_at) = rotation.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        rotated_at > started && rotated_at < last_answer,
        "the rotation ran while the sends came in"
    );
    let status = app.store.secrets_status().await.unwrap();
    assert_eq!(status.current, new_id);
    assert_eq!(status.keys[0].values, 0, "{status:?}");

    // Every message signed, and dkimpy agrees.
    let messages: Vec<String> = sink.received().into_iter().map(|m| m.data).collect();
    assert_eq!(messages.len(), total);
    assert!(messages.iter().all(|m| m.starts_with("DKIM-Signature:")));
    let verdicts = dkimpy_verify_all(&python, &messages, &dns);
    assert_eq!(
        verdicts.iter().filter(|ok| **ok).count(),
        total,
        "every message verifies"
    );

    // Every email.sent webhook delivered and verified.
    let events = deliver_until(&app, &receiver, total).await;
    assert_eq!(events.len(), total);
    assert!(events.values().all(|ok| *ok), "every webhook verifies");

    // The old key goes; the service goes on signing and delivering.
    app.store.forget_master_key(&old_id).await.unwrap();
    app.send(&email()).await.ok();
    let last = sink.received().pop().unwrap().data;
    assert!(dkimpy_verify_all(&python, &[last], &dns)[0]);
    let events = deliver_until(&app, &receiver, total + 1).await;
    assert!(events.values().all(|ok| *ok));
}

//! Webhook deliveries: each event from its state change, signed, retried on
//! the schedule with the same id, disabled by 410 or an exhausted schedule,
//! leased across nodes. A receiver on loopback checks every delivery with
//! an independent verifier (the Standard Webhooks reference library,
//! `standardwebhooks`) and records duplicates. The dispatcher runs one
//! round at a time on the injected clock, so the retry schedule is walked
//! without waiting. Registration, secrets and where deliveries may go:
//! `webhook_endpoints.rs`.

mod common;

use std::time::Duration;

use common::receiver::{Answer, Receiver};
use common::webhooks::*;
use common::{Backend, TestApp};
use mail_service::clock::Clock;
use mail_service::service::WebhookDispatcher;
use mail_service::store::{AttemptOutcome, WebhookAttempt};
use serde_json::{Value, json};

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
    // In the shape GET /domains/{id} answers: DMARC apart.
    assert!(
        body["data"]["records"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["record"] != "DMARC")
    );
    assert_eq!(body["data"]["dmarc"]["record"], "DMARC");
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
);

//! The handoff to the upstream SMTP server, against the loopback sink:
//! accepted, rejected (5xx), deferred (4xx), connection dropped after DATA,
//! no reply, upstream down; and a batch that fails part-way.

mod common;

use std::time::Duration;

use common::{Backend, TestApp, email, smtp, smtp_config};
use mail_service::service::Settings;
use mail_service::smtp_sink::{SinkMode, SmtpSink};
use serde_json::json;

async fn app_with_sink(b: Backend, mode: SinkMode, timeout: Duration) -> (TestApp, SmtpSink) {
    let sink = SmtpSink::start(0, mode).await.expect("sink");
    let app = TestApp::with(b, Some(smtp(sink.port(), timeout)), Settings::default()).await;
    (app, sink)
}

async fn accepted_message_is_stored_as_sent(b: Backend) {
    let (app, sink) = app_with_sink(b, SinkMode::Accept, Duration::from_secs(5)).await;
    let mut body = email();
    body["cc"] = json!("cc@example.test");
    body["bcc"] = json!(["hidden@example.test"]);
    body["html"] = json!("<p>Thanks!</p>");
    body["headers"] = json!({"X-Entity-Ref-ID": "123"});
    let resp = app.send(&body).await;
    resp.expect(200, "");
    assert_eq!(resp.header("etag"), Some("\"2\""));
    let id = resp.body["id"].as_str().unwrap().to_string();

    let received = sink.received();
    assert_eq!(received.len(), 1);
    let message = &received[0];
    assert_eq!(
        message.message_id().as_deref(),
        Some(format!("<{id}@acme.test>").as_str())
    );
    assert_eq!(
        message.rcpt_to.len(),
        3,
        "to, cc and bcc are envelope recipients"
    );
    assert!(
        !message
            .data
            .to_ascii_lowercase()
            .contains("hidden@example.test"),
        "Bcc is not in the headers"
    );
    assert!(message.data.contains("X-Entity-Ref-ID: 123"));

    let stored = app.get(&format!("/emails/{id}")).await;
    stored.expect(200, "");
    assert_eq!(stored.body["status"], "sent");
    assert_eq!(stored.header("etag"), Some("\"2\""));
    assert_eq!(stored.body["subject"], "Your invoice");
}

async fn rejected_5xx_is_502_handoff_failed_and_replayed(b: Backend) {
    let (app, sink) = app_with_sink(b, SinkMode::Reject, Duration::from_secs(5)).await;
    let first = app.send_with_key("order-1", &email()).await;
    first.expect(502, "handoff_failed");
    assert_eq!(first.body["status"], "failed");
    let id = first.body["email_id"].as_str().unwrap().to_string();
    assert!(first.message().contains("550"), "{}", first.message());
    assert_eq!(
        app.get(&format!("/emails/{id}")).await.body["status"],
        "failed"
    );
    // The outcome is definite, so it is a completed answer: replayed as is.
    let again = app.send_with_key("order-1", &email()).await;
    assert_eq!((again.status, &again.body), (502, &first.body));
    assert_eq!(sink.received().len(), 1, "never resent");
    assert!(sink.possibly_delivered().is_empty());
}

async fn deferred_4xx_is_502_handoff_failed(b: Backend) {
    let (app, sink) = app_with_sink(b, SinkMode::Defer, Duration::from_secs(5)).await;
    let resp = app.send(&email()).await;
    resp.expect(502, "handoff_failed");
    assert_eq!(resp.body["status"], "failed");
    assert!(resp.message().contains("deferred"), "{}", resp.message());
    assert_eq!(sink.received().len(), 1, "no automatic retry of a deferral");
}

async fn drop_after_data_is_unknown_and_keeps_the_key_reserved(b: Backend) {
    let (app, sink) = app_with_sink(b, SinkMode::DropAfterData, Duration::from_secs(5)).await;
    let first = app.send_with_key("welcome-42", &email()).await;
    first.expect(502, "handoff_failed");
    assert_eq!(first.body["status"], "unknown");
    assert!(
        first
            .message()
            .contains("new Idempotency-Key may deliver it twice"),
        "{}",
        first.message()
    );
    let id = first.body["email_id"].as_str().unwrap().to_string();
    assert_eq!(
        app.get(&format!("/emails/{id}")).await.body["status"],
        "unknown"
    );
    assert_eq!(sink.possibly_delivered().len(), 1);

    // A retry with the same key does not send again, even once the sink
    // would accept and after the 24 h replay window.
    sink.set_mode(SinkMode::Accept);
    let retry = app.send_with_key("welcome-42", &email()).await;
    retry.expect(409, "handoff_unknown");
    assert_eq!(retry.body["email_id"], id.as_str());
    app.clock.advance_ms(25 * 3600 * 1000);
    app.send_with_key("welcome-42", &email())
        .await
        .expect(409, "handoff_unknown");
    assert_eq!(sink.received().len(), 1);

    // A new key is the caller's (dangerous) choice: it is a new message.
    let dangerous = app.send_with_key("welcome-42-again", &email()).await;
    dangerous.expect(200, "");
    assert_ne!(dangerous.body["id"], id.as_str());
    assert_eq!(
        sink.possibly_delivered().len(),
        2,
        "the provider may now hold two copies"
    );

    // The operator checks the provider and reconciles: the key is released
    // and replays the original answer.
    app.service
        .reconcile(id.parse().unwrap(), true)
        .await
        .unwrap();
    assert_eq!(
        app.get(&format!("/emails/{id}")).await.body["status"],
        "sent"
    );
    let replay = app.send_with_key("welcome-42", &email()).await;
    assert_eq!((replay.status, &replay.body), (502, &first.body));
    assert_eq!(sink.received().len(), 2);
}

async fn no_reply_times_out_as_unknown(b: Backend) {
    let (app, sink) = app_with_sink(b, SinkMode::Stall, Duration::from_millis(300)).await;
    let resp = app.send(&email()).await;
    resp.expect(502, "handoff_failed");
    assert_eq!(resp.body["status"], "unknown");
    assert_eq!(sink.received().len(), 1);
}

async fn upstream_down_is_502_not_sent(b: Backend) {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let app = TestApp::with(
        b,
        Some(smtp(port, Duration::from_secs(2))),
        Settings::default(),
    )
    .await;
    let resp = app.send(&email()).await;
    resp.expect(502, "handoff_failed");
    assert_eq!(resp.body["status"], "failed");
    let id = resp.body["email_id"].as_str().unwrap();
    assert_eq!(
        app.get(&format!("/emails/{id}")).await.body["status"],
        "failed"
    );
    assert!(
        !resp.message().contains("relay-password"),
        "no secret in errors"
    );
}

async fn refused_login_is_502_and_never_shows_the_password(b: Backend) {
    let sink = SmtpSink::start(0, SinkMode::Accept).await.unwrap();
    let mut config = smtp_config(sink.port(), Duration::from_secs(5));
    config.username = Some("reject-me".into());
    let transport = mail_service::transport::Transport::smtp(config).unwrap();
    let app = TestApp::with(b, Some(transport), Settings::default()).await;
    let resp = app.send(&email()).await;
    resp.expect(502, "handoff_failed");
    assert_eq!(resp.body["status"], "failed");
    assert!(resp.message().contains("535"), "{}", resp.message());
    let id = resp.body["email_id"].as_str().unwrap();
    let stored = app.get(&format!("/emails/{id}")).await;
    let logs = app.get("/logs?limit=100").await;
    for text in [
        resp.body.to_string(),
        stored.body.to_string(),
        logs.body.to_string(),
    ] {
        assert!(
            !text.contains("relay-password-S3CRET"),
            "password leaked: {text}"
        );
    }
    assert!(sink.received().is_empty());
}

async fn batch_stops_at_the_first_failed_handoff(b: Backend) {
    let (app, sink) = app_with_sink(b, SinkMode::Accept, Duration::from_secs(5)).await;
    let mut bad = email();
    bad["to"] = json!("reject-me@example.test");
    let items = json!([email(), email(), bad, email()]);
    let resp = app.batch(&[], &items).await;
    resp.expect(502, "handoff_failed");
    assert_eq!(resp.body["failed_index"], 2);
    assert_eq!(resp.body["data"].as_array().unwrap().len(), 2);
    let failed = resp.body["failed_email_id"].as_str().unwrap();
    assert_eq!(resp.body["email_id"], failed);
    assert_eq!(
        app.get(&format!("/emails/{failed}")).await.body["status"],
        "failed"
    );
    assert_eq!(
        sink.possibly_delivered().len(),
        2,
        "items after the failure are not sent"
    );
}

async fn batch_validation_modes(b: Backend) {
    let (app, sink) = app_with_sink(b, SinkMode::Accept, Duration::from_secs(5)).await;
    let mut invalid = email();
    invalid["to"] = json!("nobody");
    let items = json!([email(), invalid, email()]);
    let strict = app.batch(&[], &items).await;
    strict.expect(422, "validation_error");
    assert!(
        strict.message().starts_with("[1].to"),
        "{}",
        strict.message()
    );
    assert!(sink.received().is_empty(), "strict: nothing is sent");

    let permissive = app
        .batch(&[("x-batch-validation", "permissive")], &items)
        .await;
    permissive.expect(200, "");
    assert_eq!(permissive.body["data"].as_array().unwrap().len(), 2);
    assert_eq!(permissive.body["errors"][0]["index"], 1);
    assert_eq!(sink.received().len(), 2);

    app.batch(&[("x-batch-validation", "lenient")], &items)
        .await
        .expect(422, "validation_error");
    let mut with_attachment = email();
    with_attachment["attachments"] = json!([{"content": "aGk="}]);
    let resp = app.batch(&[], &json!([with_attachment])).await;
    resp.expect(422, "validation_error");
    assert!(resp.message().starts_with("[0].attachments"));
}

on_both_backends!(
    accepted_message_is_stored_as_sent,
    rejected_5xx_is_502_handoff_failed_and_replayed,
    deferred_4xx_is_502_handoff_failed,
    drop_after_data_is_unknown_and_keeps_the_key_reserved,
    no_reply_times_out_as_unknown,
    upstream_down_is_502_not_sent,
    refused_login_is_502_and_never_shows_the_password,
    batch_stops_at_the_first_failed_handoff,
    batch_validation_modes,
);

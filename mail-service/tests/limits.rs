//! Every limit of the contract at its boundary: the last allowed value is
//! accepted and the next one is refused with the right status, name and a
//! message naming the field.

mod common;

use base64::Engine;
use common::{Backend, TestApp, email};
use serde_json::{Value, json};

fn with(field: &str, value: Value) -> Value {
    let mut body = email();
    body[field] = value;
    body
}

#[track_caller]
fn refused(resp: &common::Resp, status: u16, name: &str, field: &str) {
    resp.expect(status, name);
    assert!(
        resp.message().starts_with(field),
        "message should name `{field}`: {}",
        resp.message()
    );
}

fn addresses(n: usize) -> Value {
    json!(
        (0..n)
            .map(|i| format!("user{i}@example.test"))
            .collect::<Vec<_>>()
    )
}

async fn recipients_50_pass_51_fail(b: Backend) {
    let app = TestApp::start(b).await;
    for field in ["to", "cc", "bcc", "reply_to"] {
        app.send(&with(field, addresses(50))).await.expect(200, "");
        let resp = app.send(&with(field, addresses(51))).await;
        refused(&resp, 422, "validation_error", field);
        assert!(resp.message().contains("at most 50"), "{}", resp.message());
    }
    refused(
        &app.send(&with("to", json!([]))).await,
        422,
        "validation_error",
        "to",
    );
    refused(
        &app.send(&with("to", json!("not an address"))).await,
        422,
        "validation_error",
        "to",
    );
    refused(
        &app.send(&with("cc", json!(["ok@example.test", "bad"])))
            .await,
        422,
        "validation_error",
        "cc[1]",
    );
    app.send(&with("to", json!("Ada Lovelace <ada@example.test>")))
        .await
        .expect(200, "");
}

async fn subject_bytes_and_line_breaks(b: Backend) {
    let app = TestApp::start(b).await;
    // 'é' is two bytes in UTF-8: 499 of them are 998 bytes.
    let at_limit = "é".repeat(499);
    app.send(&with("subject", json!(at_limit)))
        .await
        .expect(200, "");
    let over = format!("{at_limit}a");
    refused(
        &app.send(&with("subject", json!(over))).await,
        422,
        "validation_error",
        "subject",
    );
    for broken in ["a\nb", "a\rb", "a\r\nBcc: x@evil.test"] {
        refused(
            &app.send(&with("subject", json!(broken))).await,
            422,
            "validation_error",
            "subject",
        );
    }
    let mut missing = email();
    missing.as_object_mut().unwrap().remove("subject");
    refused(
        &app.send(&missing).await,
        422,
        "missing_required_field",
        "subject",
    );
}

async fn text_plus_html_512_kib(b: Backend) {
    let app = TestApp::start(b).await;
    let half = "x".repeat(256 * 1024);
    let mut body = with("text", json!(half));
    body["html"] = json!(half);
    app.send(&body).await.expect(200, "");
    body["html"] = json!(format!("{half}x"));
    refused(&app.send(&body).await, 422, "validation_error", "text");
}

async fn text_or_html_is_required(b: Backend) {
    let app = TestApp::start(b).await;
    let mut neither = email();
    neither.as_object_mut().unwrap().remove("text");
    let resp = app.send(&neither).await;
    refused(&resp, 422, "validation_error", "text");
    assert!(resp.message().contains("html"), "{}", resp.message());
    refused(
        &app.send(&with("text", json!(""))).await,
        422,
        "validation_error",
        "text",
    );
    refused(
        &app.batch(&[], &json!([email(), neither])).await,
        422,
        "validation_error",
        "[1].text",
    );
    assert_eq!(app.outbox_count(), 0, "nothing empty was sent");
    let mut html_only = neither.clone();
    html_only["html"] = json!("<p>Thanks!</p>");
    app.send(&html_only).await.expect(200, "");
    app.send(&with("text", json!("x"))).await.expect(200, "");
}

async fn headers_50_pass_51_fail(b: Backend) {
    let app = TestApp::start(b).await;
    let headers = |n: usize| -> Value {
        (0..n)
            .map(|i| (format!("X-Custom-{i}"), json!("v")))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    app.send(&with("headers", headers(50)))
        .await
        .expect(200, "");
    refused(
        &app.send(&with("headers", headers(51))).await,
        422,
        "validation_error",
        "headers",
    );
    refused(
        &app.send(&with("headers", json!({"Message-ID": "<x@y>"})))
            .await,
        422,
        "validation_error",
        "headers.Message-ID",
    );
}

async fn tags_count_and_pattern(b: Backend) {
    let app = TestApp::start(b).await;
    let tags = |n: usize| {
        json!(
            (0..n)
                .map(|i| json!({"name": format!("t{i}"), "value": "v"}))
                .collect::<Vec<_>>()
        )
    };
    app.send(&with("tags", tags(50))).await.expect(200, "");
    refused(
        &app.send(&with("tags", tags(51))).await,
        422,
        "validation_error",
        "tags",
    );
    let long = "a".repeat(256);
    app.send(&with("tags", json!([{"name": long, "value": "A-z_09"}])))
        .await
        .expect(200, "");
    let too_long = "a".repeat(257);
    refused(
        &app.send(&with("tags", json!([{"name": too_long, "value": "v"}])))
            .await,
        422,
        "validation_error",
        "tags[0].name",
    );
    for bad in ["", "a b", "é", "a.b"] {
        refused(
            &app.send(&with("tags", json!([{"name": "ok", "value": bad}])))
                .await,
            422,
            "validation_error",
            "tags[0].value",
        );
    }
    refused(
        &app.send(&with("tags", json!([{"name": "ok"}]))).await,
        422,
        "missing_required_field",
        "tags[0].value",
    );
    refused(
        &app.send(&with(
            "tags",
            json!([{"name": "a", "value": "b", "x": "c"}]),
        ))
        .await,
        422,
        "validation_error",
        "tags[0].x",
    );
}

async fn attachments_count_and_decoded_size(b: Backend) {
    let app = TestApp::start(b).await;
    let small = json!({"content": base64::engine::general_purpose::STANDARD.encode(b"hello"), "filename": "a.txt"});
    let list = |n: usize| json!(vec![small.clone(); n]);
    app.send(&with("attachments", list(10)))
        .await
        .expect(200, "");
    refused(
        &app.send(&with("attachments", list(11))).await,
        422,
        "invalid_attachment",
        "attachments",
    );

    let encode = |n: usize| base64::engine::general_purpose::STANDARD.encode(vec![7u8; n]);
    let two_mib = 2 * 1024 * 1024;
    app.send(&with(
        "attachments",
        json!([{"content": encode(two_mib), "content_type": "application/pdf"}]),
    ))
    .await
    .expect(200, "");
    refused(
        &app.send(&with(
            "attachments",
            json!([{"content": encode(two_mib + 1)}]),
        ))
        .await,
        422,
        "invalid_attachment",
        "attachments[0].content",
    );
    refused(
        &app.send(&with("attachments", json!([{"content": "%%%"}])))
            .await,
        422,
        "invalid_attachment",
        "attachments[0].content",
    );
    refused(
        &app.send(&with(
            "attachments",
            json!([{"path": "https://x.test/a.pdf"}]),
        ))
        .await,
        422,
        "invalid_attachment",
        "attachments[0].path",
    );
    refused(
        &app.send(&with("attachments", json!([{"filename": "a"}])))
            .await,
        422,
        "missing_required_field",
        "attachments[0].content",
    );
    // An inline image referenced from the HTML.
    let mut inline = with(
        "attachments",
        json!([{"content": encode(10), "content_type": "image/png", "content_id": "logo"}]),
    );
    inline["html"] = json!("<img src=\"cid:logo@acme.test\">");
    app.send(&inline).await.expect(200, "");
}

async fn body_4_000_000_bytes(b: Backend) {
    let app = TestApp::start(b).await;
    let padded = |len: usize| {
        let mut bytes = email().to_string().into_bytes();
        bytes.resize(len, b' ');
        bytes
    };
    let send = |bytes: Vec<u8>| app.call("POST", "/emails", Some(&app.send_key), &[], Some(bytes));
    send(padded(4_000_000)).await.expect(200, "");
    send(padded(4_000_001))
        .await
        .expect(413, "payload_too_large");
    app.call(
        "POST",
        "/emails",
        Some(&app.send_key),
        &[("content-type", "text/plain")],
        Some(email().to_string().into_bytes()),
    )
    .await
    .expect(415, "unsupported_media_type");
    refused(
        &send(b"{not json".to_vec()).await,
        422,
        "validation_error",
        "body",
    );
    refused(&send(b"[]".to_vec()).await, 422, "validation_error", "body");
    refused(
        &app.send(&with("colour", json!("blue"))).await,
        422,
        "validation_error",
        "colour",
    );
}

async fn batch_1_to_100(b: Backend) {
    let app = TestApp::start(b).await;
    let items = |n: usize| json!(vec![email(); n]);
    let ok = app.batch(&[], &items(100)).await;
    ok.expect(200, "");
    assert_eq!(ok.body["data"].as_array().unwrap().len(), 100);
    refused(
        &app.batch(&[], &items(101)).await,
        422,
        "validation_error",
        "body",
    );
    refused(
        &app.batch(&[], &items(0)).await,
        422,
        "validation_error",
        "body",
    );
    assert_eq!(app.outbox_count(), 100);
}

async fn idempotency_key_1_to_256(b: Backend) {
    let app = TestApp::start(b).await;
    app.send_with_key(&"k".repeat(256), &email())
        .await
        .expect(200, "");
    refused(
        &app.send_with_key(&"k".repeat(257), &email()).await,
        422,
        "invalid_idempotency_key",
        "Idempotency-Key",
    );
    refused(
        &app.send_with_key("", &email()).await,
        422,
        "invalid_idempotency_key",
        "Idempotency-Key",
    );
}

async fn log_limit_and_cursor(b: Backend) {
    let app = TestApp::start(b).await;
    app.get("/logs?limit=100").await.expect(200, "");
    refused(
        &app.get("/logs?limit=101").await,
        422,
        "validation_error",
        "limit",
    );
    refused(
        &app.get("/logs?limit=0").await,
        422,
        "validation_error",
        "limit",
    );
    // 200 characters pass the length rule (and are then not a cursor of
    // ours); 201 fail the length rule.
    let resp = app.get(&format!("/logs?cursor={}", "a".repeat(200))).await;
    refused(&resp, 422, "validation_error", "cursor");
    assert!(resp.message().contains("nextCursor"), "{}", resp.message());
    let resp = app.get(&format!("/logs?cursor={}", "a".repeat(201))).await;
    refused(&resp, 422, "validation_error", "cursor");
    assert!(resp.message().contains("at most 200"), "{}", resp.message());
}

async fn id_pattern(b: Backend) {
    let app = TestApp::start(b).await;
    app.get("/emails/1234567890123456789")
        .await
        .expect(404, "not_found");
    app.get("/emails/9999999999999999999")
        .await
        .expect(404, "not_found");
    for bad in ["12345678901234567890", "0", "01", "abc", "-1"] {
        refused(
            &app.get(&format!("/emails/{bad}")).await,
            422,
            "validation_error",
            "id",
        );
        refused(
            &app.get(&format!("/logs/{bad}")).await,
            422,
            "validation_error",
            "id",
        );
    }
}

on_both_backends!(
    recipients_50_pass_51_fail,
    subject_bytes_and_line_breaks,
    text_plus_html_512_kib,
    text_or_html_is_required,
    headers_50_pass_51_fail,
    tags_count_and_pattern,
    attachments_count_and_decoded_size,
    body_4_000_000_bytes,
    batch_1_to_100,
    idempotency_key_1_to_256,
    log_limit_and_cursor,
    id_pattern,
);

//! DKIM: a message sent from a verified domain, captured at the SMTP sink,
//! verifies with an independent verifier (Python's dkimpy, which fetches
//! the public key from the test's DNS server on loopback with dnspython);
//! a tampered copy does not (`common::dkim` says what the verifier needs).

mod common;

use std::time::Duration;

use common::dkim::{dkimpy_verifies, verifier};
use common::{Backend, TestApp, email};
use dns_fixture::{DnsFixture, Record};
use mail_service::service::{DnsProtocol, DnsSettings, Settings};
use mail_service::smtp_sink::{SinkMode, SmtpSink};
use serde_json::{Value, json};

async fn signed_mail_verifies_independently_and_a_tampered_copy_does_not(b: Backend) {
    let Some(python) = verifier() else { return };
    let dns = DnsFixture::start().unwrap();
    let sink = SmtpSink::start(0, SinkMode::Accept).await.unwrap();
    let settings = Settings {
        dns: DnsSettings {
            nameservers: vec![dns.addr()],
            protocol: DnsProtocol::UdpAndTcp,
            timeout: Duration::from_millis(500),
        },
        sending_host: "mail.test".into(),
        ..Settings::default()
    };
    let app = TestApp::with(
        b,
        Some(common::smtp(sink.port(), Duration::from_secs(5))),
        settings,
    )
    .await;
    let created = app
        .call(
            "POST",
            "/domains",
            Some(&app.full_key),
            &[],
            Some(json!({"name": "shop.example"}).to_string().into_bytes()),
        )
        .await;
    created.ok();
    let d = created.body;
    let id = d["id"].as_str().unwrap();
    // Publish every record the domain asks for.
    let records = d["records"].as_array().unwrap();
    let value = |kind: &str, t: &str| -> String {
        records
            .iter()
            .find(|r| r["record"] == kind && r["type"] == t)
            .map(|r| r["value"].as_str().unwrap().to_string())
            .unwrap()
    };
    dns.set(
        "send.shop.example",
        [
            Record::mx(10, value("SPF", "MX")),
            Record::txt(value("SPF", "TXT")),
        ],
    );
    let dkim_value = value("DKIM", "TXT");
    let strings: Vec<String> = dkim_value
        .as_bytes()
        .chunks(200)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect();
    dns.set(
        "mailservice._domainkey.shop.example",
        [Record::txt_strings(strings)],
    );
    app.call(
        "POST",
        &format!("/domains/{id}/verify"),
        Some(&app.full_key),
        &[],
        Some(b"{}".to_vec()),
    )
    .await
    .ok();
    // The check runs in the background.
    app.service.domain_checks_settled().await;
    assert_eq!(
        app.get(&format!("/domains/{id}")).await.body["status"],
        "verified"
    );

    let mut message = email();
    message["from"] = json!("Shop <hello@shop.example>");
    message["to"] = json!(["ada@example.test"]);
    message["cc"] = json!("Bob <bob@example.test>");
    message["subject"] = json!("Your order ünd more");
    message["html"] = json!("<p>Thanks for your order</p>");
    let sent = app.send(&message).await;
    sent.expect(200, "");
    let received = sink.received();
    assert_eq!(received.len(), 1);
    let data = &received[0].data;
    assert!(data.starts_with("DKIM-Signature:"), "{data}");
    assert!(
        data.contains("d=shop.example") && data.contains("s=mailservice"),
        "{data}"
    );
    assert!(
        dkimpy_verifies(&python, data, &dns),
        "dkimpy refused: {data}"
    );

    // Tampered copies: a header, the body.
    let subject = data.replace("Subject: Your order", "Subject: Our order");
    assert_ne!(
        &subject, data,
        "the subject line is where the test expects it"
    );
    assert!(!dkimpy_verifies(&python, &subject, &dns));
    let body = data.replace("Thanks!", "Thanks?");
    assert_ne!(&body, data);
    assert!(!dkimpy_verifies(&python, &body, &dns));

    // Another key published under the selector: the message no longer
    // verifies (the verifier really uses the DNS record).
    dns.set(
        "mailservice._domainkey.shop.example",
        [Record::txt("v=DKIM1; k=rsa; p=MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDDmzRmJRQxLEuyYiyMg4suA2SyMwR5ENIHO9hSK6Ryk7tzGdMTZM9vfZgQKe6qD6MMwT8Ih9gWGbtJCzsTJBjvMkTkJi3TGFuHuXxd8XGjhdzR4k2EBH6lq4dR3KSgYuehEKnGZJxRIZPeWsFp3s5ydSZFfBUdRCTJTQKdeBbtTQIDAQAB")],
    );
    assert!(!dkimpy_verifies(&python, data, &dns));
}

async fn mail_from_an_operator_marked_domain_is_signed_too(b: Backend) {
    // The stories' own sender, acme.test, was marked verified by the
    // operator's command: it has a key and its mail is signed too.
    let sink = SmtpSink::start(0, SinkMode::Accept).await.unwrap();
    let app = TestApp::with(
        b,
        Some(common::smtp(sink.port(), Duration::from_secs(5))),
        Settings::default(),
    )
    .await;
    app.send(&email()).await.expect(200, "");
    let data = sink.received()[0].data.clone();
    assert!(
        data.starts_with("DKIM-Signature:") && data.contains("d=acme.test"),
        "{data}"
    );
    let value: Value = app.get("/domains").await.body;
    assert_eq!(value["data"][0]["name"], "acme.test");
}

on_both_backends!(
    signed_mail_verifies_independently_and_a_tampered_copy_does_not,
    mail_from_an_operator_marked_domain_is_signed_too,
);

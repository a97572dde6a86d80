//! mail-service against a real MTA (see `common::mta`): Debian's Postfix as
//! the relay, with STARTTLS and SASL authentication required, Debian's
//! OpenDKIM checking every signature, and Postfix's own bounces coming
//! back to the feedback listener over STARTTLS.

mod common;

use std::time::Duration;

use common::mta::{Mta, MtaOptions, PASSWORD, USER};
use common::receiver::Receiver;
use common::{Backend, TestApp, email};
use dns_fixture::{DnsFixture, Record};
use mail_service::feedback::listener::{FeedbackListener, ListenerLimits, tls_acceptor};
use mail_service::service::{Settings, WebhookSettings};
use mail_service::transport::{SmtpConfig, SmtpSecurity, Transport};
use serde_json::{Value, json};

/// The relay's submission port as an operator configures it: STARTTLS with
/// the private CA, the relay user.
fn relay(mta: &Mta, port: u16, password: &str) -> Transport {
    Transport::smtp(SmtpConfig {
        host: "127.0.0.1".into(),
        port,
        security: SmtpSecurity::Starttls,
        username: Some(USER.into()),
        password: Some(password.into()),
        hello_name: "mail.test".into(),
        timeout: Duration::from_secs(10),
        ca_pem: Some(mta.ca_pem.clone()),
    })
    .unwrap()
}

/// The test's DNS server and the MTA (OpenDKIM asking that server);
/// `None` when the MTA's packages are missing (see [`Mta::start`]).
fn mta_with_dns(feedback: Option<(Vec<String>, u16)>) -> Option<(DnsFixture, Mta)> {
    let dns = DnsFixture::start().unwrap();
    let mta = Mta::start(MtaOptions {
        dns: dns.addr(),
        feedback,
        verify_dkim: true,
    })?;
    Some((dns, mta))
}

fn settings() -> Settings {
    Settings {
        webhooks: WebhookSettings {
            policy: common::webhooks::local(),
            ..WebhookSettings::default()
        },
        ..Settings::default()
    }
}

/// Publishes acme.test's DKIM key (as the domain's records ask) in `dns`.
async fn publish_dkim(app: &TestApp, dns: &DnsFixture) {
    let domains = app.get("/domains").await;
    domains.ok();
    let acme = domains.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "acme.test")
        .expect("acme.test is a domain of the tenant")["id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = app.get(&format!("/domains/{acme}")).await;
    shown.ok();
    let dkim = shown.body["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["record"] == "DKIM" && r["type"] == "TXT")
        .expect("a DKIM record")
        .clone();
    let value = dkim["value"].as_str().unwrap();
    let strings: Vec<String> = value
        .as_bytes()
        .chunks(200)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect();
    dns.set(
        &format!("{}.acme.test", dkim["name"].as_str().unwrap()),
        [Record::txt_strings(strings)],
    );
}

/// The header line starting with `start`, its folded lines joined.
fn unfolded_header(message: &str, start: &str) -> Option<String> {
    let mut lines = message.lines().skip_while(|l| !l.starts_with(start));
    let first = lines.next()?;
    let folded = lines.take_while(|l| l.starts_with([' ', '\t']));
    let all: Vec<&str> = std::iter::once(first)
        .chain(folded)
        .map(str::trim)
        .collect();
    Some(all.join(" "))
}

fn to(address: &str) -> Value {
    let mut message = email();
    message["to"] = json!([address]);
    message
}

/// A send through Postfix lands in the Maildir with OpenDKIM's `dkim=pass`,
/// and the email is `sent` with its `email.sent` webhook.
async fn a_send_through_postfix_passes_opendkim(b: Backend) {
    let Some((dns, mta)) = mta_with_dns(None) else {
        return;
    };
    let app = TestApp::with(
        b,
        Some(relay(&mta, mta.submission_port, PASSWORD)),
        settings(),
    )
    .await;
    publish_dkim(&app, &dns).await;
    let receiver = Receiver::start().await;
    common::webhooks::subscribe(&app, &receiver, &["email.sent"]).await;

    let sent = app.send(&to("ada@rcpt.test")).await;
    sent.expect(200, "");
    let id = sent.body["id"].as_str().unwrap().to_string();
    let delivered = mta.wait_delivered("ada", 1);
    let message = &delivered[0];
    let results = unfolded_header(message, "Authentication-Results: relay.test;")
        .unwrap_or_else(|| panic!("no Authentication-Results from OpenDKIM:\n{message}"));
    assert!(
        results.contains("dkim=pass") && results.contains("header.d=acme.test"),
        "OpenDKIM did not pass the signature: {results}\n{message}\nDNS queries: {:?}",
        dns.queries()
    );
    assert!(message.contains(&format!("Message-ID: <{id}@acme.test>")) || message.contains(&id));
    // Postfix says it came over TLS, authenticated as the relay user.
    mta.wait_log(&[
        "postfix/submission/smtpd",
        "sasl_username=sender@relay.test",
    ]);

    let shown = app.get(&format!("/emails/{id}")).await;
    assert_eq!(shown.body["status"], "sent", "{}", shown.body);
    assert_eq!(common::webhooks::dispatch(&app).await, 1);
    let seen = receiver.seen();
    assert_eq!(seen[0].verified, vec![true]);
    assert_eq!(seen[0].json()["type"], "email.sent");
    assert!(!mta.log().contains(PASSWORD));
}

/// A wrong password: 502 with the relay's own refusal and the email's id,
/// nothing delivered, the password nowhere.
async fn a_wrong_password_is_502_with_the_relays_words(b: Backend) {
    let Some((_dns, mta)) = mta_with_dns(None) else {
        return;
    };
    let wrong = "not-the-Relay-password";
    let app = TestApp::with(b, Some(relay(&mta, mta.submission_port, wrong)), settings()).await;
    let resp = app.send(&to("ada@rcpt.test")).await;
    resp.expect(502, "handoff_failed");
    let message = resp.message().to_string();
    assert!(
        message.contains("535") && message.contains("authentication failed"),
        "{message}"
    );
    let id = resp.body["email_id"].as_str().expect("the email's id");
    let shown = app.get(&format!("/emails/{id}")).await;
    assert_eq!(shown.body["status"], "failed");
    let logs = app.get("/logs?limit=100").await;
    for text in [&message, &shown.body.to_string(), &logs.body.to_string()] {
        assert!(!text.contains(wrong) && !text.contains(PASSWORD), "{text}");
    }
    mta.wait_log(&["authentication failed"]);
    assert!(mta.delivered("ada").is_empty());
}

/// A relay that offers no STARTTLS while it is required gets nothing: no
/// AUTH, no MAIL FROM in clear.
async fn a_relay_without_starttls_gets_nothing_in_clear(b: Backend) {
    let Some((_dns, mta)) = mta_with_dns(None) else {
        return;
    };
    let app = TestApp::with(
        b,
        Some(relay(&mta, mta.cleartext_port, PASSWORD)),
        settings(),
    )
    .await;
    let resp = app.send(&to("ada@rcpt.test")).await;
    resp.expect(502, "handoff_failed");
    assert!(resp.message().contains("STARTTLS"), "{}", resp.message());
    // Postfix saw a connection and nothing else.
    let line = mta.wait_log(&["postfix/cleartext/smtpd", "disconnect from"]);
    assert!(
        !line.contains("mail=") && !line.contains("auth="),
        "only EHLO and QUIT were sent: {line}"
    );
    assert!(mta.delivered("ada").is_empty());
}

/// Postfix bounces an unknown user with its own DSN to the return path,
/// which it delivers to the feedback listener over STARTTLS: `bounced`,
/// suppressed, `email.bounced` signed, and the next send is `suppressed`.
async fn a_postfix_bounce_comes_back_over_tls(b: Backend) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let Some((dns, mta)) = mta_with_dns(Some((vec!["send.acme.test".into()], port))) else {
        return;
    };
    let app = TestApp::with(
        b,
        Some(relay(&mta, mta.submission_port, PASSWORD)),
        settings(),
    )
    .await;
    publish_dkim(&app, &dns).await;
    let tls = tls_acceptor(&mta.listener_cert, &mta.listener_key).unwrap();
    let _listener = FeedbackListener::start_with_tls(
        listener,
        app.service.clone(),
        ListenerLimits::default(),
        Some(tls),
    )
    .unwrap();
    let receiver = Receiver::start().await;
    common::webhooks::subscribe(&app, &receiver, &["email.bounced"]).await;

    let sent = app.send(&to("nobody@rcpt.test")).await;
    sent.expect(200, "");
    let id = sent.body["id"].as_str().unwrap().to_string();
    mta.wait_log(&["to=<nobody@rcpt.test>", "status=bounced"]);
    mta.wait_log(&["TLS connection established to 127.0.0.1[127.0.0.1]:"]);
    let delivered = mta.wait_log(&["to=<bounces+", "status=sent", "Applied as report"]);
    assert!(delivered.contains(&format!(":{port}")), "{delivered}");

    let shown = app.get(&format!("/emails/{id}")).await;
    assert_eq!(shown.body["last_event"], "bounced", "{}", shown.body);
    app.get("/suppressions/nobody@rcpt.test")
        .await
        .expect(200, "");
    assert_eq!(common::webhooks::dispatch(&app).await, 1);
    let seen = receiver.seen();
    assert_eq!(seen[0].verified, vec![true]);
    let event = seen[0].json();
    assert_eq!(event["type"], "email.bounced", "{event}");
    assert_eq!(event["data"]["recipient"], "nobody@rcpt.test", "{event}");

    let next = app.send(&to("nobody@rcpt.test")).await;
    next.expect(200, "");
    let next_id = next.body["id"].as_str().unwrap();
    assert_eq!(
        app.get(&format!("/emails/{next_id}")).await.body["status"],
        "suppressed"
    );
}

/// A relay that defers at RCPT (450): the email is `failed` with the
/// relay's words (README "Relays"), and a retry with the same
/// Idempotency-Key answers the same without a second attempt.
async fn a_deferral_at_rcpt_fails_once_and_a_keyed_retry_sends_nothing(b: Backend) {
    let Some((_dns, mta)) = mta_with_dns(None) else {
        return;
    };
    let app = TestApp::with(
        b,
        Some(relay(&mta, mta.submission_port, PASSWORD)),
        settings(),
    )
    .await;
    let first = app.send_with_key("order-77", &to("busy@rcpt.test")).await;
    first.expect(502, "handoff_failed");
    assert!(
        first.message().contains("450") && first.message().contains("Mailbox busy"),
        "{}",
        first.message()
    );
    let again = app.send_with_key("order-77", &to("busy@rcpt.test")).await;
    assert_eq!(again.status, first.status);
    assert_eq!(again.body, first.body);
    // Postfix's log daemon writes a moment after the session: wait for the
    // first refusal's line, and give a second attempt's as long again to
    // show before counting.
    let started = std::time::Instant::now();
    mta.wait_log(&["NOQUEUE: reject: RCPT", "busy@rcpt.test"]);
    std::thread::sleep(started.elapsed().max(std::time::Duration::from_millis(500)));
    let refusals = mta
        .log()
        .lines()
        .filter(|l| l.contains("NOQUEUE: reject: RCPT") && l.contains("busy@rcpt.test"))
        .count();
    assert_eq!(refusals, 1, "one attempt only:\n{}", mta.log());
}

on_both_backends!(
    a_send_through_postfix_passes_opendkim,
    a_wrong_password_is_502_with_the_relays_words,
    a_relay_without_starttls_gets_nothing_in_clear,
    a_postfix_bounce_comes_back_over_tls,
    a_deferral_at_rcpt_fails_once_and_a_keyed_retry_sends_nothing,
);

//! The feedback SMTP listener: it bounds size, rate, idle time and
//! connections; `serve --feedback-listen` runs it; and the whole loop on
//! loopback: an email out through SMTP with its return path, its bounce
//! back through the listener, the event on the email, the signed webhook,
//! the suppression and the next send not handed off. Reading and applying
//! reports: `feedback.rs`.

mod common;

use std::path::Path;
use std::time::Duration;

use common::feedback::{CORPUS, fill};
use common::receiver::Receiver;
use common::{Backend, TestApp, email};
use mail_service::feedback::listener::{FeedbackListener, ListenerLimits};
use mail_service::service::{Settings, WebhookSettings};
use mail_service::smtp_sink::{SinkMode, SmtpSink};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A minimal SMTP client: sends each line and reads one reply (multi-line
/// replies are read to their last line).
struct Client {
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
}

impl Client {
    async fn connect(addr: std::net::SocketAddr) -> (Client, String) {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (r, w) = stream.into_split();
        let mut client = Client {
            reader: BufReader::new(r),
            writer: w,
        };
        let greeting = client.reply().await;
        (client, greeting)
    }

    async fn reply(&mut self) -> String {
        let mut all = String::new();
        loop {
            let mut line = String::new();
            tokio::time::timeout(Duration::from_secs(30), self.reader.read_line(&mut line))
                .await
                .expect("a reply")
                .unwrap();
            all.push_str(&line);
            if line.len() < 4 || line.as_bytes()[3] != b'-' {
                return all;
            }
        }
    }

    async fn say(&mut self, line: &str) -> String {
        self.writer
            .write_all(format!("{line}\r\n").as_bytes())
            .await
            .unwrap();
        self.reply().await
    }

    /// MAIL, RCPT, DATA and the message; the reply to its end.
    async fn send(&mut self, rcpt: &str, message: &[u8]) -> String {
        let r = self.say("MAIL FROM:<>").await;
        if !r.starts_with("250") {
            return r;
        }
        assert!(
            self.say(&format!("RCPT TO:<{rcpt}>"))
                .await
                .starts_with("250")
        );
        assert!(self.say("DATA").await.starts_with("354"));
        let text = String::from_utf8_lossy(message).replace("\r\n", "\n");
        for line in text.lines() {
            let stuffed = if line.starts_with('.') {
                format!(".{line}")
            } else {
                line.to_string()
            };
            self.writer
                .write_all(format!("{stuffed}\r\n").as_bytes())
                .await
                .unwrap();
        }
        self.say(".").await
    }
}

fn listener_on(app: &TestApp, limits: ListenerLimits) -> FeedbackListener {
    let std = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(std).unwrap();
    FeedbackListener::start(listener, app.service.clone(), limits).unwrap()
}

async fn the_listener_bounds_size_and_rate(b: Backend) {
    let app = TestApp::start(b).await;
    let limits = ListenerLimits {
        max_message_bytes: 4096,
        messages_per_minute: 3,
        ..ListenerLimits::default()
    };
    let listener = listener_on(&app, limits);
    let (mut c, greeting) = Client::connect(listener.addr()).await;
    assert!(greeting.starts_with("220"), "{greeting}");
    let ehlo = c.say("EHLO relay.example").await;
    assert!(ehlo.contains("250-SIZE 4096"), "{ehlo}");
    // A declared size over the limit: refused before the data.
    let r = c.say("MAIL FROM:<> SIZE=5000").await;
    assert!(r.starts_with("552"), "{r}");
    // Data growing past it: read to its end, refused, nothing kept.
    let big = format!("Subject: x\r\n\r\n{}\r\n", "y".repeat(5000));
    let r = c.send("bounces+1-x@send.acme.test", big.as_bytes()).await;
    assert!(r.starts_with("552"), "{r}");
    assert_eq!(
        app.db.count("SELECT count(*) FROM feedback_reports").await,
        0
    );
    // Unreadable mail is kept in quarantine and answered 250; the session
    // goes on.
    let r = c
        .send("postmaster@send.acme.test", b"\x00\xff not mail")
        .await;
    assert!(r.starts_with("250") && r.contains("quarantined"), "{r}");
    // The third message of the minute passes, the fourth is refused (the
    // oversized one counted too: the count is of messages started).
    let r = c
        .send("postmaster@send.acme.test", b"Subject: three\r\n\r\nx")
        .await;
    assert!(r.starts_with("250"), "{r}");
    let r = c
        .send("postmaster@send.acme.test", b"Subject: four\r\n\r\nx")
        .await;
    assert!(r.starts_with("450"), "{r}");
    assert_eq!(
        app.db
            .count("SELECT count(*) FROM feedback_reports WHERE outcome = 'quarantined'")
            .await,
        2
    );
    assert!(c.say("QUIT").await.starts_with("221"));
}

async fn idle_and_excess_connections_are_let_go(b: Backend) {
    let app = TestApp::start(b).await;
    let listener = listener_on(
        &app,
        ListenerLimits {
            max_connections: 1,
            read_timeout: Duration::from_millis(300),
            ..ListenerLimits::default()
        },
    );
    let (mut idle, greeting) = Client::connect(listener.addr()).await;
    assert!(greeting.starts_with("220"), "{greeting}");
    // One connection is all it serves: the next is told to come back.
    let (_, refused) = Client::connect(listener.addr()).await;
    assert!(refused.starts_with("421"), "{refused}");
    // The idle one is closed when its read times out...
    let mut rest = String::new();
    let closed = tokio::time::timeout(Duration::from_secs(30), idle.reader.read_line(&mut rest))
        .await
        .expect("closed by the listener");
    assert_eq!(closed.unwrap(), 0, "{rest}");
    // ...and its slot serves the next one (released just after the close).
    let mut greeting = String::new();
    for _ in 0..50 {
        greeting = Client::connect(listener.addr()).await.1;
        if greeting.starts_with("220") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(greeting.starts_with("220"), "{greeting}");
}

/// `serve --feedback-listen`: the listener runs beside the API in the
/// server process, on the same database.
async fn serve_runs_the_listener_when_asked(b: Backend) {
    let db = common::TestDb::new(b);
    let (send_key, full_key) = common::provision_keys(&db).await;
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let server = common::ServerProcess::start(
        &db.env(),
        &[("MAIL_FEEDBACK_LISTEN", format!("127.0.0.1:{port}"))],
    );
    let http = common::http_client();
    let sent: Value = http
        .post(format!("{}/emails", server.base))
        .bearer_auth(&send_key)
        .json(&email())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = sent["id"].as_str().expect("an id").to_string();
    let written = std::fs::read_to_string(db.dir.path().join(format!("outbox/{id}.eml"))).unwrap();
    let return_path = written
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("Return-Path: <"))
        .and_then(|l| l.strip_suffix('>'))
        .expect("a return path")
        .to_string();
    let delivered = fill(
        &std::fs::read(Path::new(CORPUS).join("postfix_delivered.eml")).unwrap(),
        &return_path,
        &format!("<{id}@acme.test>"),
        &["ada@example.test"],
    );
    let (mut c, greeting) = Client::connect(([127, 0, 0, 1], port).into()).await;
    assert!(greeting.starts_with("220"), "{greeting}");
    let r = c.send(&return_path, &delivered).await;
    assert!(r.starts_with("250 2.0.0 Applied"), "{r}");
    let shown: Value = http
        .get(format!("{}/emails/{id}", server.base))
        .bearer_auth(&full_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shown["last_event"], "delivered", "{shown}");
    assert_eq!(shown["status"], "sent");
}

/// The whole loop on loopback: the email goes out through SMTP with its
/// return path, the bounce comes back through the listener, the email
/// shows it, the tenant's webhook gets `email.bounced`, the address is
/// suppressed, and the next email to it is not handed off.
async fn a_bounce_travels_the_whole_loop(b: Backend) {
    let sink = SmtpSink::start(0, SinkMode::Accept).await.unwrap();
    let settings = Settings {
        webhooks: WebhookSettings {
            policy: common::webhooks::local(),
            ..WebhookSettings::default()
        },
        ..Settings::default()
    };
    let app = TestApp::with(
        b,
        Some(common::smtp(sink.port(), Duration::from_secs(10))),
        settings,
    )
    .await;
    let receiver = Receiver::start().await;
    let created = app
        .post(
            &app.full_key,
            "/webhooks",
            json!({"endpoint": receiver.url(), "events": ["email.bounced"]}),
        )
        .await;
    created.ok();
    receiver.trust(created.body["signing_secret"].as_str().unwrap());
    let r = app.send(&email()).await;
    r.expect(200, "");
    let id = r.body["id"].as_str().unwrap().to_string();
    let received = sink.received();
    assert_eq!(received.len(), 1);
    let return_path = received[0]
        .mail_from
        .trim_start_matches('<')
        .split('>')
        .next()
        .unwrap()
        .to_string();
    assert!(
        return_path.starts_with(&format!("bounces+{id}-"))
            && return_path.ends_with("@send.acme.test"),
        "{return_path}"
    );

    let listener = listener_on(&app, ListenerLimits::default());
    let bounce = fill(
        &std::fs::read(Path::new(CORPUS).join("gmail_bounce.eml")).unwrap(),
        &return_path,
        &format!("<{id}@acme.test>"),
        &["ada@example.test"],
    );
    let (mut c, _) = Client::connect(listener.addr()).await;
    c.say("EHLO mx.google.com").await;
    let r = c.send(&return_path, &bounce).await;
    assert!(r.starts_with("250 2.0.0 Applied"), "{r}");

    let shown = app.get(&format!("/emails/{id}")).await;
    assert_eq!(shown.body["last_event"], "bounced", "{}", shown.body);
    assert_eq!(shown.body["events"][0]["recipient"], "ada@example.test");
    assert_eq!(shown.body["events"][0]["status"], "5.1.1");
    app.get("/suppressions/ada@example.test")
        .await
        .expect(200, "");

    // The tenant's webhook gets `email.bounced`, signed: the receiver's
    // reference verifier accepts it.
    assert_eq!(
        app.service.deliver_due_webhooks().await.expect("dispatch"),
        1
    );
    let seen = receiver.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].verified, vec![true], "the signature verifies");
    let event = seen[0].json();
    assert_eq!(event["type"], "email.bounced", "{event}");
    assert_eq!(event["data"]["email_id"], id.as_str(), "{event}");
    assert_eq!(event["data"]["recipient"], "ada@example.test", "{event}");
    assert_eq!(event["data"]["bounce"]["type"], "Permanent", "{event}");

    // The next email to the address is accepted and not handed off.
    let next = app.send(&email()).await;
    next.expect(200, "");
    let next_id = next.body["id"].as_str().unwrap();
    let next_shown = app.get(&format!("/emails/{next_id}")).await;
    assert_eq!(next_shown.body["status"], "suppressed");
    assert_eq!(
        sink.received().len(),
        1,
        "nothing more reached the upstream"
    );
}

/// With a certificate the listener offers STARTTLS; a command pipelined
/// behind STARTTLS in clear is discarded, never run inside the encrypted
/// session (RFC 3207), and the session starts over there.
async fn starttls_starts_over_and_drops_what_was_pipelined(b: Backend) {
    use rustls::pki_types::ServerName;
    let app = TestApp::start(b).await;
    let dir = tempfile::tempdir().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = params.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, leaf.pem()).unwrap();
    std::fs::write(&key, leaf_key.serialize_pem()).unwrap();
    let tls = mail_service::feedback::listener::tls_acceptor(&cert, &key).unwrap();
    let std = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std.set_nonblocking(true).unwrap();
    let listener = FeedbackListener::start_with_tls(
        tokio::net::TcpListener::from_std(std).unwrap(),
        app.service.clone(),
        ListenerLimits::default(),
        Some(tls),
    )
    .unwrap();
    // The key file's bytes never show in its errors.
    let Err(err) = mail_service::feedback::listener::tls_acceptor(&key, &key) else {
        panic!("a key is not a certificate chain");
    };
    assert!(
        err.contains("not a PEM certificate") || err.contains("holds no certificate"),
        "{err}"
    );

    let mut stream = BufReader::new(
        tokio::net::TcpStream::connect(listener.addr())
            .await
            .unwrap(),
    );
    let mut line = String::new();
    stream.read_line(&mut line).await.unwrap();
    stream
        .get_mut()
        .write_all(b"EHLO mx.test\r\n")
        .await
        .unwrap();
    let mut ehlo = String::new();
    while !ehlo.contains("250 ") {
        stream.read_line(&mut ehlo).await.unwrap();
    }
    assert!(ehlo.contains("250-STARTTLS"), "{ehlo}");
    stream
        .get_mut()
        .write_all(b"STARTTLS\r\nMAIL FROM:<injected@evil.test>\r\n")
        .await
        .unwrap();
    line.clear();
    stream.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("220"), "{line}");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let encrypted = connector
        .connect(
            ServerName::try_from("127.0.0.1").unwrap(),
            stream.into_inner(),
        )
        .await
        .expect("the TLS handshake");
    let mut encrypted = BufReader::new(encrypted);
    // The injected MAIL FROM was dropped: a new MAIL is not "sender
    // already given", and EHLO no longer offers STARTTLS.
    encrypted
        .get_mut()
        .write_all(b"EHLO mx.test\r\n")
        .await
        .unwrap();
    let mut again = String::new();
    while !again.contains("250 ") {
        encrypted.read_line(&mut again).await.unwrap();
    }
    assert!(
        again.starts_with("250-") && !again.contains("STARTTLS"),
        "{again}"
    );
    encrypted
        .get_mut()
        .write_all(b"MAIL FROM:<>\r\n")
        .await
        .unwrap();
    line.clear();
    encrypted.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("250 2.1.0"), "{line}");
    encrypted
        .get_mut()
        .write_all(b"STARTTLS\r\n")
        .await
        .unwrap();
    line.clear();
    encrypted.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("502"), "no second STARTTLS: {line}");
}

on_both_backends!(
    starttls_starts_over_and_drops_what_was_pipelined,
    the_listener_bounds_size_and_rate,
    idle_and_excess_connections_are_let_go,
    serve_runs_the_listener_when_asked,
    a_bounce_travels_the_whole_loop,
);

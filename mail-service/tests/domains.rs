//! Sending domains through the HTTP API, verified against a real DNS
//! server on loopback (`dns-fixture`, over UDP and over TCP): each record
//! missing, wrong and present, SERVFAIL, timeouts, partial states, the
//! background re-checks and the end of the verification period; and the
//! rule that mail goes out only from a verified domain of the tenant.

mod common;

use std::time::Duration;

use base64::Engine;
use common::{Backend, TestApp, email};
use dns_fixture::{DnsFixture, Fault, Record};
use mail_service::clock::Clock;
use mail_service::service::{DnsProtocol, DnsSettings, Settings};
use serde_json::{Value, json};

const HOUR: i64 = 60 * 60 * 1000;

async fn app_with_dns(b: Backend, dns: &DnsFixture, protocol: DnsProtocol) -> TestApp {
    let settings = Settings {
        dns: DnsSettings {
            nameservers: vec![dns.addr()],
            protocol,
            timeout: Duration::from_millis(300),
        },
        sending_host: "mail.test".into(),
        ..Settings::default()
    };
    TestApp::with(b, None, settings).await
}

async fn create(app: &TestApp, name: &str) -> Value {
    let r = app
        .post(&app.full_key, "/domains", json!({"name": name}))
        .await;
    r.ok();
    r.body
}

async fn verify(app: &TestApp, id: &str) -> Value {
    let r = app
        .post(&app.full_key, &format!("/domains/{id}/verify"), json!({}))
        .await;
    r.ok();
    assert_eq!(r.body, json!({"object": "domain", "id": id}));
    // The check runs in the background: its outcome shows once it ends.
    app.service.domain_checks_settled().await;
    app.get(&format!("/domains/{id}")).await.body
}

/// A record of the domain: `records` holds Resend's kinds, the DMARC
/// recommendation is `dmarc`.
fn record<'a>(domain: &'a Value, kind: &str, record_type: &str) -> &'a Value {
    if kind == "DMARC" {
        let dmarc = &domain["dmarc"];
        assert_eq!(dmarc["type"], record_type, "{domain}");
        assert_eq!(dmarc["record"], "DMARC", "{domain}");
        return dmarc;
    }
    domain["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["record"] == kind && r["type"] == record_type)
        .unwrap_or_else(|| panic!("no {kind} {record_type} in {domain}"))
}

fn statuses(domain: &Value) -> Vec<String> {
    domain["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {}: {}",
                r["record"].as_str().unwrap(),
                r["type"].as_str().unwrap(),
                r["status"].as_str().unwrap()
            )
        })
        .collect()
}

/// Publishes records of `domain` at the fixture: `which` among
/// "mx", "spf", "dkim", "dmarc".
fn publish(dns: &DnsFixture, domain: &Value, which: &[&str]) {
    let name = domain["name"].as_str().unwrap();
    let at = |r: &Value| format!("{}.{name}", r["name"].as_str().unwrap());
    let mx = record(domain, "SPF", "MX");
    let spf = record(domain, "SPF", "TXT");
    let mut return_path = Vec::new();
    if which.contains(&"mx") {
        return_path.push(Record::mx(10, mx["value"].as_str().unwrap()));
    }
    if which.contains(&"spf") {
        return_path.push(Record::txt(spf["value"].as_str().unwrap()));
    }
    dns.set(&at(mx), return_path);
    let dkim = record(domain, "DKIM", "TXT");
    if which.contains(&"dkim") {
        dns.set(
            &at(dkim),
            [Record::txt_strings(chunks(dkim["value"].as_str().unwrap()))],
        );
    } else {
        dns.remove(&at(dkim));
    }
    let dmarc = record(domain, "DMARC", "TXT");
    if which.contains(&"dmarc") {
        dns.set(&at(dmarc), [Record::txt(dmarc["value"].as_str().unwrap())]);
    }
}

/// A long TXT value as character strings of at most 255 bytes.
fn chunks(value: &str) -> Vec<String> {
    value
        .as_bytes()
        .chunks(200)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect()
}

fn from(domain: &str) -> Value {
    let mut e = email();
    e["from"] = json!(format!("Shop <hello@{domain}>"));
    e
}

async fn every_endpoint_needs_full_access(b: Backend) {
    let dns = DnsFixture::start().unwrap();
    let app = app_with_dns(b, &dns, DnsProtocol::UdpAndTcp).await;
    let id = create(&app, "shop.example").await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let body = Some(json!({"name": "other.example"}).to_string().into_bytes());
    let empty = Some(b"{}".to_vec());
    for (method, path, body) in [
        ("POST", "/domains".to_string(), body.clone()),
        ("GET", "/domains".to_string(), None),
        ("GET", format!("/domains/{id}"), None),
        ("POST", format!("/domains/{id}/verify"), empty.clone()),
        ("DELETE", format!("/domains/{id}"), None),
    ] {
        app.call(method, &path, Some(&app.send_key), &[], body.clone())
            .await
            .expect(403, "restricted_api_key");
        app.call(method, &path, None, &[], body.clone())
            .await
            .expect(401, "missing_api_key");
    }
    let listed = app.get("/domains").await;
    // acme.test (the stories' sender) and shop.example: nothing else.
    assert_eq!(listed.body["data"].as_array().unwrap().len(), 2);
    assert_eq!(
        app.get(&format!("/domains/{id}")).await.body["status"],
        "not_started"
    );
}

async fn a_domain_carries_its_records_and_never_its_private_key(b: Backend) {
    let dns = DnsFixture::start().unwrap();
    let app = app_with_dns(b, &dns, DnsProtocol::UdpAndTcp).await;
    let d = app
        .post(
            &app.full_key,
            "/domains",
            json!({"name": "Bücher.Example", "custom_return_path": "Bounce"}),
        )
        .await;
    d.ok();
    let d = d.body;
    assert_eq!(d["object"], "domain");
    assert_eq!(d["name"], "xn--bcher-kva.example");
    assert_eq!(d["status"], "not_started");
    assert_eq!(d["custom_return_path"], "bounce");
    let mx = record(&d, "SPF", "MX");
    assert_eq!(
        (
            mx["name"].as_str(),
            mx["value"].as_str(),
            mx["priority"].as_u64()
        ),
        (Some("bounce"), Some("feedback-smtp.mail.test"), Some(10))
    );
    let spf = record(&d, "SPF", "TXT");
    assert_eq!(
        (spf["name"].as_str(), spf["value"].as_str()),
        (Some("bounce"), Some("v=spf1 include:spf.mail.test ~all"))
    );
    let dmarc = record(&d, "DMARC", "TXT");
    assert_eq!(
        (dmarc["name"].as_str(), dmarc["required"].as_bool()),
        (Some("_dmarc"), Some(false))
    );
    let dkim = record(&d, "DKIM", "TXT");
    assert_eq!(dkim["name"], "mailservice._domainkey");
    let value = dkim["value"].as_str().unwrap();
    let p = value.strip_prefix("v=DKIM1; k=rsa; p=").expect(value);
    let spki = base64::engine::general_purpose::STANDARD.decode(p).unwrap();
    // SubjectPublicKeyInfo of an RSA-2048 key: 294 bytes.
    assert_eq!(spki.len(), 294, "an RSA-2048 public key");
    for r in d["records"].as_array().unwrap() {
        assert_eq!(r["status"], "not_started");
        assert_eq!(r["ttl"], "Auto");
    }
    // The private key as stored never appears in an answer.
    let id = d["id"].as_str().unwrap();
    let stored: String = app
        .db
        .text(&format!(
            "SELECT dkim_private_key FROM domains WHERE id = {id}"
        ))
        .await;
    assert!(stored.len() > 1000);
    for answer in [
        app.get(&format!("/domains/{id}")).await.body.to_string(),
        app.get("/domains").await.body.to_string(),
        app.call("GET", "/openapi.json", None, &[], None)
            .await
            .body
            .to_string(),
    ] {
        assert!(!answer.contains(&stored[..64]), "the private key leaked");
        assert!(!answer.contains("dkim_private_key"));
    }

    // One name is one domain per tenant; bad input names the field.
    app.post(
        &app.full_key,
        "/domains",
        json!({"name": "BÜCHER.example."}),
    )
    .await
    .expect(409, "conflict");
    for (body, name, field) in [
        (json!({}), "missing_required_field", "name:"),
        (
            json!({"name": "localhost"}),
            "validation_error",
            "name: `localhost`",
        ),
        (
            json!({"name": "a_b.example"}),
            "validation_error",
            "name: `a_b.example`",
        ),
        (
            json!({"name": "ok.example", "custom_return_path": "a.b"}),
            "validation_error",
            "custom_return_path:",
        ),
        (
            json!({"name": "ok.example", "region": "eu-west-1"}),
            "validation_error",
            "region:",
        ),
        (
            json!({"name": "ok.example", "color": 1}),
            "validation_error",
            "color: unknown property",
        ),
    ] {
        let r = app.post(&app.full_key, "/domains", body.clone()).await;
        r.expect(422, name);
        assert!(r.message().starts_with(field), "{body}: {}", r.message());
    }
    app.get("/domains/ok.example")
        .await
        .expect(422, "validation_error");
    app.get("/domains/123").await.expect(404, "not_found");
    app.post(&app.full_key, "/domains/123/verify", json!({}))
        .await
        .expect(404, "not_found");

    // Paging in the list shape.
    create(&app, "two.example").await;
    let page = app.get("/domains?limit=2").await;
    assert_eq!(page.body["object"], "list");
    assert_eq!(page.body["has_more"], true);
    let next = page.body["nextCursor"].as_str().unwrap();
    let rest = app.get(&format!("/domains?limit=2&cursor={next}")).await;
    assert_eq!(rest.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(rest.body["has_more"], false);
    assert_eq!(rest.body["data"][0]["name"], "acme.test");

    // Delete.
    let gone = app
        .call(
            "DELETE",
            &format!("/domains/{id}"),
            Some(&app.full_key),
            &[],
            None,
        )
        .await;
    gone.ok();
    assert_eq!(
        gone.body,
        json!({"object": "domain", "id": id, "deleted": true})
    );
    app.get(&format!("/domains/{id}"))
        .await
        .expect(404, "not_found");
}

async fn verification_over(b: Backend, protocol: DnsProtocol) {
    let dns = DnsFixture::start().unwrap();
    let app = app_with_dns(b, &dns, protocol).await;
    let d = create(&app, "shop.example").await;
    let id = d["id"].as_str().unwrap().to_string();

    // Nothing published: pending while it is retried.
    let now = verify(&app, &id).await;
    assert_eq!(now["status"], "pending", "{now}");
    assert!(
        statuses(&now).iter().all(|s| s.ends_with("pending")),
        "{:?}",
        statuses(&now)
    );

    // MX only: partially verified.
    publish(&dns, &d, &["mx"]);
    let now = verify(&app, &id).await;
    assert_eq!(now["status"], "partially_verified", "{:?}", statuses(&now));
    assert_eq!(record(&now, "SPF", "MX")["status"], "verified");
    assert_eq!(record(&now, "SPF", "TXT")["status"], "pending");

    // A wrong SPF and a DKIM record with another key: not verified.
    dns.set(
        "send.shop.example",
        [
            Record::mx(10, "feedback-smtp.mail.test"),
            Record::txt("v=spf1 include:other.test ~all"),
        ],
    );
    dns.set(
        "mailservice._domainkey.shop.example",
        [Record::txt(
            "v=DKIM1; k=rsa; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAwrong",
        )],
    );
    let now = verify(&app, &id).await;
    assert_eq!(now["status"], "partially_verified");
    assert_eq!(record(&now, "SPF", "TXT")["status"], "pending");
    assert_eq!(record(&now, "DKIM", "TXT")["status"], "pending");

    // SERVFAIL on the DKIM name: a temporary failure, not a failure.
    publish(&dns, &d, &["mx", "spf"]);
    dns.fault("mailservice._domainkey.shop.example", Fault::ServFail);
    let now = verify(&app, &id).await;
    assert_eq!(now["status"], "temporary_failure", "{:?}", statuses(&now));
    assert_eq!(record(&now, "DKIM", "TXT")["status"], "temporary_failure");
    assert_eq!(record(&now, "SPF", "TXT")["status"], "verified");

    // No answer at all (timeout): also temporary.
    dns.fault("mailservice._domainkey.shop.example", Fault::NoAnswer);
    let now = verify(&app, &id).await;
    assert_eq!(now["status"], "temporary_failure");
    assert_eq!(record(&now, "DKIM", "TXT")["status"], "temporary_failure");
    dns.clear_fault("mailservice._domainkey.shop.example");

    // Not yet verified: sending from it is refused.
    let refused = app.send(&from("shop.example")).await;
    refused.expect(403, "validation_error");
    assert!(
        refused
            .message()
            .starts_with("from: the domain shop.example is not verified for this account"),
        "{}",
        refused.message()
    );

    // Everything published (DMARC is only recommended): verified.
    publish(&dns, &d, &["mx", "spf", "dkim"]);
    let now = verify(&app, &id).await;
    assert_eq!(now["status"], "verified", "{:?}", statuses(&now));
    assert_eq!(record(&now, "DMARC", "TXT")["status"], "pending");
    app.send(&from("shop.example")).await.ok();
    app.send(&from("SHOP.example")).await.ok();

    // The records vanish: still sending while it is re-checked, as a
    // temporary failure.
    dns.remove("send.shop.example");
    let now = verify(&app, &id).await;
    assert_eq!(now["status"], "temporary_failure");
    app.send(&from("shop.example")).await.ok();

    let asked: Vec<String> = dns.queries().into_iter().map(|q| q.protocol).collect();
    let expected = match protocol {
        DnsProtocol::Tcp => "tcp",
        _ => "udp",
    };
    assert!(
        asked.iter().all(|p| p == expected) || protocol == DnsProtocol::UdpAndTcp,
        "{asked:?}"
    );
    assert!(asked.iter().any(|p| p == expected));
}

async fn verification_over_udp(b: Backend) {
    verification_over(b, DnsProtocol::Udp).await;
}

async fn verification_over_tcp(b: Backend) {
    verification_over(b, DnsProtocol::Tcp).await;
}

async fn verification_goes_on_in_the_background_and_ends(b: Backend) {
    let dns = DnsFixture::start().unwrap();
    let app = app_with_dns(b, &dns, DnsProtocol::UdpAndTcp).await;
    let d = create(&app, "later.example").await;
    let id = d["id"].as_str().unwrap().to_string();
    let partial = create(&app, "half.example").await;
    let partial_id = partial["id"].as_str().unwrap().to_string();
    assert_eq!(verify(&app, &id).await["status"], "pending");
    publish(&dns, &partial, &["dkim"]);
    assert_eq!(
        verify(&app, &partial_id).await["status"],
        "partially_verified"
    );

    // Published after the request: the next background check finds them
    // (none before the re-check interval).
    publish(&dns, &d, &["mx", "spf", "dkim", "dmarc"]);
    assert_eq!(app.service.recheck_domains().await.unwrap(), 0);
    app.clock.advance_ms(5 * 60 * 1000);
    assert_eq!(app.service.recheck_domains().await.unwrap(), 2);
    let now = app.get(&format!("/domains/{id}")).await.body;
    assert_eq!(now["status"], "verified");
    assert_eq!(record(&now, "DMARC", "TXT")["status"], "verified");

    // The period (72 h) ends: the last check settles the other one.
    app.clock.advance_ms(72 * HOUR);
    assert_eq!(app.service.recheck_domains().await.unwrap(), 1);
    let settled = app.get(&format!("/domains/{partial_id}")).await.body;
    assert_eq!(
        settled["status"],
        "partially_failed",
        "{:?}",
        statuses(&settled)
    );
    assert_eq!(record(&settled, "SPF", "MX")["status"], "failed");
    // And it is no longer re-checked.
    app.clock.advance_ms(HOUR);
    assert_eq!(app.service.recheck_domains().await.unwrap(), 0);

    // Nothing at all when the period ends: failed.
    let never = create(&app, "never.example").await;
    let never_id = never["id"].as_str().unwrap().to_string();
    verify(&app, &never_id).await;
    app.clock.advance_ms(73 * HOUR);
    app.service.recheck_domains().await.unwrap();
    assert_eq!(
        app.get(&format!("/domains/{never_id}")).await.body["status"],
        "failed"
    );
}

async fn a_deleted_domain_stops_sending_and_accepted_mail_keeps_its_record(b: Backend) {
    let dns = DnsFixture::start().unwrap();
    let app = app_with_dns(b, &dns, DnsProtocol::UdpAndTcp).await;
    let d = create(&app, "shop.example").await;
    let id = d["id"].as_str().unwrap().to_string();
    publish(&dns, &d, &["mx", "spf", "dkim"]);
    assert_eq!(verify(&app, &id).await["status"], "verified");
    let sent = app.send(&from("shop.example")).await;
    sent.ok();
    let sent_id = sent.body["id"].as_str().unwrap().to_string();
    let mut later = from("shop.example");
    later["scheduled_at"] = json!(mail_service::clock::rfc3339(app.clock.now_ms() + 60_000));
    let scheduled = app.send(&later).await;
    scheduled.ok();
    let scheduled_id = scheduled.body["id"].as_str().unwrap().to_string();

    app.call(
        "DELETE",
        &format!("/domains/{id}"),
        Some(&app.full_key),
        &[],
        None,
    )
    .await
    .ok();
    app.send(&from("shop.example"))
        .await
        .expect(403, "validation_error");
    // A batch names the item.
    let r = app
        .batch(&[], &json!([email(), from("shop.example")]))
        .await;
    r.expect(403, "validation_error");
    assert!(
        r.message().starts_with("[1].from: the domain shop.example"),
        "{}",
        r.message()
    );
    // Accepted mail keeps its record; the scheduled one is not sent.
    assert_eq!(
        app.get(&format!("/emails/{sent_id}")).await.body["status"],
        "sent"
    );
    let before = app.outbox_count();
    app.clock.advance_ms(60_000);
    app.service.dispatch_due().await.unwrap();
    let stored = app.get(&format!("/emails/{scheduled_id}")).await.body;
    assert_eq!(stored["status"], "failed");
    assert!(
        stored["handoff_detail"]
            .as_str()
            .unwrap()
            .starts_with("not sent: from: the domain shop.example is not verified"),
        "{stored}"
    );
    assert_eq!(app.outbox_count(), before);
}

/// A nameserver that takes every query and never answers.
async fn verify_never_waits_for_a_silent_resolver(b: Backend) {
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let settings = Settings {
        dns: DnsSettings {
            nameservers: vec![silent.local_addr().unwrap()],
            protocol: DnsProtocol::Udp,
            // One lookup is bounded by 2 s: four after one another would
            // take 8 s; at the same time, under one deadline, 2 s.
            timeout: Duration::from_millis(1000),
        },
        sending_host: "mail.test".into(),
        ..common::webhooks::settings(common::webhooks::local())
    };
    let app = TestApp::with(b, None, settings).await;
    common::webhooks::register(&app, "http://127.0.0.1:9/hook", &["domain.updated"])
        .await
        .ok();
    let d = create(&app, "quiet.example").await;
    let id = d["id"].as_str().unwrap().to_string();

    let asked = std::time::Instant::now();
    let answer = app
        .post(&app.full_key, &format!("/domains/{id}/verify"), json!({}))
        .await;
    let waited = asked.elapsed();
    answer.ok();
    assert_eq!(answer.body, json!({"object": "domain", "id": id}));
    assert!(waited < Duration::from_secs(1), "verify waited {waited:?}");
    let meanwhile = app.get(&format!("/domains/{id}")).await.body;
    assert_eq!(meanwhile["status"], "pending");

    // The check ends at its one deadline, well before four lookups in a row
    // could.
    tokio::time::timeout(Duration::from_secs(6), app.service.domain_checks_settled())
        .await
        .expect("the background check ends at its deadline");
    let after = app.get(&format!("/domains/{id}")).await.body;
    assert_eq!(after["status"], "temporary_failure", "{after}");
    assert!(
        statuses(&after)
            .iter()
            .all(|s| s.ends_with("temporary_failure")),
        "{:?}",
        statuses(&after)
    );
    assert_eq!(after["dmarc"]["status"], "temporary_failure");
    // And the outcome is announced (after the event of the move from
    // not_started to pending), in the shape GET answers.
    let data = app
        .db
        .text("SELECT data FROM webhook_events WHERE event_type = 'domain.updated' ORDER BY id DESC LIMIT 1")
        .await;
    let data: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(data["id"], id.as_str());
    assert_eq!(data["status"], "temporary_failure");
    assert!(
        data["records"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["record"] != "DMARC")
    );
    assert_eq!(data["records"], after["records"]);
    assert_eq!(data["dmarc"], after["dmarc"]);
    assert_eq!(data["capabilities"], after["capabilities"]);

    // A verify whose outcome is the same status announces it too.
    let before = app
        .db
        .count("SELECT count(*) FROM webhook_events WHERE event_type = 'domain.updated'")
        .await;
    app.post(&app.full_key, &format!("/domains/{id}/verify"), json!({}))
        .await
        .ok();
    app.service.domain_checks_settled().await;
    assert_eq!(
        app.db
            .count("SELECT count(*) FROM webhook_events WHERE event_type = 'domain.updated'")
            .await,
        before + 1
    );
}

on_both_backends!(
    verify_never_waits_for_a_silent_resolver,
    every_endpoint_needs_full_access,
    a_domain_carries_its_records_and_never_its_private_key,
    verification_over_udp,
    verification_over_tcp,
    verification_goes_on_in_the_background_and_ends,
    a_deleted_domain_stops_sending_and_accepted_mail_keeps_its_record,
);

//! Clients written by others, unchanged: Resend's official Rust SDK
//! (`resend-rs` 0.35.1 from crates.io, pinned exactly as a dev-dependency,
//! without a TLS feature) drives a `mail-service serve` process on each
//! backend, its base URL set through its own `Config`. Every endpoint the
//! SDK shares with the service is called through the SDK and its answer
//! parsed by the SDK's own types; what the service does not have answers a
//! `not_found` the SDK parses as its error.
//!
//! resend-rs has no `webhooks.verify`: a delivery is checked with the
//! Standard Webhooks reference library (the receiver of the webhook
//! stories) and its body parsed as the SDK's `events::Event`.

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use common::receiver::Receiver;
use common::{Backend, SdkServer, TestDb};
use resend_rs::events::{EmailEventType, Event};
use resend_rs::list_opts::ListOptions;
use resend_rs::types::{
    AddSuppressionOptions, BatchAddSuppressionOptions, BatchRemoveSuppressionOptions,
    BatchValidation, CreateApiKeyOptions, CreateDomainOptions, CreateEmailBaseOptions,
    CreateWebhookOptions, DomainChanges, DomainRecord, DomainRecordStatus, DomainStatus,
    EmailEvent, ErrorResponse, GetEmailMetricsOptions, Metric, MetricsGranularity,
    SuppressionOrigin, Tag, UpdateEmailOptions, UpdateWebhookOptions, WebhookStatus,
};
use resend_rs::{Config, Resend};

const FROM: &str = "Acme <billing@acme.test>";

/// Where the SDKs go: the server and a full-access key.
struct Target {
    base: String,
    key: String,
    /// The server's file transport.
    outbox: std::path::PathBuf,
}

impl Target {
    /// The SDK pointed at the server, as its documentation configures it.
    /// Each story makes its own: a `Resend` paces its requests (a burst of
    /// 9, then one per 1.1 s), which a story's timing must not include.
    fn sdk(&self) -> Resend {
        self.sdk_with(reqwest_for_resend::Client::new())
    }

    fn sdk_with(&self, client: reqwest_for_resend::Client) -> Resend {
        let url = self.base.parse().expect("server URL");
        let config = Config::builder(&self.key).base_url(url).client(client);
        Resend::with_config(config.build())
    }
}

fn email(subject: &str) -> CreateEmailBaseOptions {
    CreateEmailBaseOptions::new(FROM, ["ada@example.test"], subject)
        .with_text("Thanks!")
        .with_html("<p>Thanks!</p>")
        .with_tag(Tag::new("category", "invoice"))
}

/// The service's error as the SDK parses it.
#[track_caller]
fn refused<T: std::fmt::Debug>(
    result: resend_rs::Result<T>,
    status: u16,
    name: &str,
) -> ErrorResponse {
    match result {
        Err(resend_rs::Error::Resend(e)) => {
            assert_eq!((e.status_code, e.name.as_str()), (status, name), "{e}");
            e
        }
        other => panic!("expected the SDK's error {status} {name}, got {other:?}"),
    }
}

async fn until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn in_minutes(minutes: i64) -> String {
    (time::OffsetDateTime::now_utc() + time::Duration::minutes(minutes))
        .replace_nanosecond(0)
        .expect("whole seconds")
        .format(&time::format_description::well_known::Rfc3339)
        .expect("RFC 3339")
}

async fn emails(target: &Target) {
    let resend = &target.sdk();
    let sent = resend.emails.send(email("Invoice 1")).await.expect("send");
    let got = resend.emails.get(&sent.id).await.expect("get");
    assert_eq!(got.id, sent.id);
    assert_eq!(got.subject, "Invoice 1");
    assert_eq!(got.to, ["ada@example.test"]);
    assert_eq!(got.last_event, EmailEvent::Sent);

    let key = format!("rust-{}", uuid::Uuid::new_v4());
    let first = resend
        .emails
        .send(email("Once").with_idempotency_key(&key))
        .await
        .expect("first");
    let again = resend
        .emails
        .send(email("Once").with_idempotency_key(&key))
        .await
        .expect("replayed");
    assert_eq!(again.id, first.id, "one email under one key");

    let bad = CreateEmailBaseOptions::new(FROM, ["not an address"], "x").with_text("x");
    let e = refused(resend.emails.send(bad).await, 422, "validation_error");
    assert!(e.message.starts_with("to"), "{}", e.message);

    // resend-rs sends an attachment's content as an array of bytes, which
    // Resend's API takes besides base64 text; the message carries it.
    let pdf = vec![0x25, 0x50, 0x44, 0x46, 0x00, 0xff, 0xfe];
    let attached = email("Attached").with_attachment(pdf);
    let sent = resend
        .emails
        .send(attached)
        .await
        .expect("an attachment as bytes");
    let message = std::fs::read_to_string(target.outbox.join(format!("{}.eml", sent.id)))
        .expect("the message is in the outbox");
    assert!(
        message.contains("JVBERgD//g=="),
        "the attachment's bytes, base64: {message}"
    );

    let batch = resend
        .batch
        .send(vec![email("Batch 1"), email("Batch 2")])
        .await
        .expect("batch");
    assert_eq!(batch.len(), 2);
    let nobody = CreateEmailBaseOptions::new("nobody", ["ada@example.test"], "Bad").with_text("x");
    let permissive = resend
        .batch
        .send_with_batch_validation(vec![email("Good"), nobody], BatchValidation::Permissive)
        .await
        .expect("permissive batch");
    assert_eq!(permissive.data.len(), 1);
    assert_eq!(permissive.errors.len(), 1);
    assert_eq!(permissive.errors[0].index, 1);

    let page = resend
        .emails
        .list(ListOptions::default().with_limit(1))
        .await
        .expect("list");
    assert!(page.has_more);
    assert_eq!(page.data[0].subject, "Good");
    let next = resend
        .emails
        .list(
            ListOptions::default()
                .with_limit(1)
                .list_after(&page.data[0].id),
        )
        .await
        .expect("next page");
    assert_ne!(next.data[0].id, page.data[0].id);
    println!("ok emails: send, get, idempotency, a refusal, batch (both modes), list");
}

/// `PATCH /emails/{id}` needs `If-Match` (the contract); resend-rs has no
/// option for a header, so the update goes through an SDK whose HTTP client
/// sends the ETag as a default header.
async fn scheduling(target: &Target) {
    let resend = &target.sdk();
    let (base, key) = (&target.base, &target.key);
    let sent = resend
        .emails
        .send(email("Later").with_scheduled_at(&in_minutes(60)))
        .await
        .expect("scheduled");
    let got = resend.emails.get(&sent.id).await.expect("get");
    assert_eq!(got.last_event, EmailEvent::Scheduled);
    assert!(got.scheduled_at.is_some());

    let later = in_minutes(120);
    let move_it = || UpdateEmailOptions::new().with_scheduled_at(&later);
    let e = refused(
        resend.emails.update(&sent.id, move_it()).await,
        428,
        "precondition_required",
    );
    assert!(
        e.message.starts_with("If-Match: required")
            && e.message.contains("ETag header of GET /emails/{id}"),
        "the refusal says which header and where its value comes from: {}",
        e.message
    );

    // The ETag, read from GET /emails/{id} with the SDK's own client.
    let etag = resend
        .client()
        .get(format!("{base}/emails/{}", sent.id))
        .bearer_auth(key)
        .send()
        .await
        .expect("GET answers")
        .headers()
        .get("etag")
        .expect("an ETag")
        .clone();
    let mut headers = reqwest_for_resend::header::HeaderMap::new();
    headers.insert("if-match", etag);
    let client = reqwest_for_resend::Client::builder()
        .default_headers(headers)
        .build()
        .expect("client");
    let with_if_match = target.sdk_with(client);
    let moved = with_if_match
        .emails
        .update(&sent.id, move_it())
        .await
        .expect("update with If-Match");
    assert_eq!(moved.id, sent.id);
    let stale = with_if_match.emails.update(&sent.id, move_it()).await;
    refused(stale, 409, "stale_revision");
    let got = resend.emails.get(&sent.id).await.expect("get");
    let at = got.scheduled_at.expect("scheduled_at");
    assert!(at.starts_with(&later[..19]), "{at} is {later}");

    let canceled = resend.emails.cancel(&sent.id).await.expect("cancel");
    assert_eq!(canceled.id, sent.id);
    let got = resend.emails.get(&sent.id).await.expect("get");
    assert_eq!(got.last_event, EmailEvent::Canceled);
    refused(resend.emails.cancel(&sent.id).await, 409, "invalid_state");
    println!("ok emails: scheduled, update (428 without If-Match, then with it), cancel");
}

async fn metrics(target: &Target) {
    let resend = &target.sdk();
    let m = resend
        .emails
        .metrics(GetEmailMetricsOptions::default())
        .await
        .expect("metrics");
    assert_eq!(m.granularity, MetricsGranularity::Daily);
    assert!(m.totals["sent"] >= 1.0, "{:?}", m.totals);
    assert!(m.data.is_none());
    let by_day = resend
        .emails
        .metrics(
            GetEmailMetricsOptions::default()
                .with_period_dimension()
                .with_metrics([Metric::Sent, Metric::Received]),
        )
        .await
        .expect("metrics by day");
    let days = by_day.data.expect("one row per day");
    assert_eq!(days.len(), 7);
    let sent: f64 = days.iter().map(|d| d.metrics["sent"]).sum();
    assert_eq!(sent, by_day.totals["sent"]);
    let opened = GetEmailMetricsOptions::default().with_metric(Metric::Opened);
    refused(resend.emails.metrics(opened).await, 422, "validation_error");
    println!("ok emails.metrics: totals, by day, a metric the service does not count");
}

async fn domains(target: &Target) {
    let resend = &target.sdk();
    let name = format!("rust-{}.example", uuid::Uuid::new_v4().simple());
    let created = resend
        .domains
        .create(CreateDomainOptions::new(&name).with_custom_return_path("bounce"))
        .await
        .expect("create");
    assert_eq!(created.name, name);
    assert!(matches!(created.status, DomainStatus::NotStarted));
    let records = created.records.expect("records");
    let kinds: Vec<String> = records
        .iter()
        .map(|r| match r {
            DomainRecord::DomainSpfRecord(r) => format!("SPF {:?}", r.r#type),
            DomainRecord::DomainDkimRecord(r) => format!("DKIM {:?}", r.r#type),
            other => panic!("a record kind the service does not publish: {other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["SPF MX", "SPF TXT", "DKIM TXT"]);
    let id = created.id;
    assert_eq!(resend.domains.get(&id).await.expect("get").id, id);
    let listed = resend
        .domains
        .list(ListOptions::default().with_limit(100))
        .await
        .expect("list");
    assert!(listed.data.iter().any(|d| d.id == id));

    let fresh = target.sdk();
    let started = Instant::now();
    let verified = fresh.domains.verify(&id).await.expect("verify");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "verify answers at once"
    );
    assert_eq!(verified.id, id);
    until("the background check", || async {
        let domain = resend.domains.get(&id).await.expect("get");
        domain.records.expect("records").iter().all(|r| match r {
            DomainRecord::DomainSpfRecord(r) => !matches!(r.status, DomainRecordStatus::NotStarted),
            DomainRecord::DomainDkimRecord(r) => {
                !matches!(r.status, DomainRecordStatus::NotStarted)
            }
            _ => false,
        })
    })
    .await;
    let checked = resend.domains.get(&id).await.expect("get");
    assert!(matches!(checked.status, DomainStatus::Pending));

    // Tracking and TLS settings are not the service's: absent, and the SDK
    // reads the answer as its error.
    let changes = DomainChanges::new().with_open_tracking(false);
    refused(resend.domains.update(&id, changes).await, 404, "not_found");

    let deleted = resend.domains.delete(&id).await.expect("delete");
    assert!(deleted.deleted);
    refused(resend.domains.get(&id).await, 404, "not_found");
    println!("ok domains: create, get, list, verify (answered at once), update (absent), delete");
}

async fn suppressions(target: &Target) {
    let resend = &target.sdk();
    let added = resend
        .suppressions
        .add(AddSuppressionOptions::new().with_email("Gone@Example.test"))
        .await
        .expect("add");
    let entry = resend
        .suppressions
        .get("gone@example.test")
        .await
        .expect("get in another case");
    assert_eq!(entry.id, added.id);
    assert_eq!(entry.email, "Gone@example.test");
    assert!(matches!(entry.origin, SuppressionOrigin::Manual));
    assert!(entry.source_id.is_none());
    let listed = resend
        .suppressions
        .list(ListOptions::default().with_limit(10))
        .await
        .expect("list");
    assert!(listed.data.iter().any(|s| s.id == added.id));

    // A case variant of the suppressed address is not mailed: the email's
    // `last_event` is `suppressed`, a value Resend documents (its Node and
    // Python SDKs read it) and resend-rs 0.35.1's `EmailEvent` lacks.
    let sent = resend
        .emails
        .send(CreateEmailBaseOptions::new(FROM, ["GONE@example.test"], "x").with_text("x"))
        .await
        .expect("send");
    match resend.emails.get(&sent.id).await {
        Err(resend_rs::Error::Http(e)) if e.is_decode() => {
            assert!(format!("{e:?}").contains("suppressed"), "{e:?}")
        }
        other => panic!("resend-rs 0.35.1 cannot read `suppressed`; got {other:?}"),
    }

    let removed = resend
        .suppressions
        .remove("gone@EXAMPLE.test")
        .await
        .expect("remove");
    assert_eq!(removed.id, added.id);
    assert!(removed.deleted);

    let batch = resend
        .suppressions
        .batch_add(BatchAddSuppressionOptions::from(vec![
            "a@x.test", "A@x.test", "b@x.test",
        ]))
        .await
        .expect("batch add");
    assert_eq!(batch.data.len(), 2, "one entry per mailbox");
    let gone = resend
        .suppressions
        .batch_remove(
            BatchRemoveSuppressionOptions::new().add_emails(["a@X.test", "nobody@x.test"]),
        )
        .await
        .expect("batch remove by address");
    assert_eq!(gone.data.len(), 1);
    assert_eq!(gone.data[0].id, batch.data[0].id);
    let gone = resend
        .suppressions
        .batch_remove(BatchRemoveSuppressionOptions::new().add_ids([batch.data[1].id.to_string()]))
        .await
        .expect("batch remove by id");
    assert!(gone.data[0].deleted);
    println!("ok suppressions: add, get, list, remove, batch add and remove, any case");
}

async fn logs(target: &Target) {
    let resend = &target.sdk();
    let page = resend
        .logs
        .list(ListOptions::default().with_limit(5))
        .await
        .expect("list (every status non-zero, as the SDK's type wants)");
    assert_eq!(page.data.len(), 5);
    let first = &page.data[0];
    let one = resend.logs.get(&first.id).await.expect("get");
    assert_eq!(
        (one.id, one.endpoint),
        (first.id.clone(), first.endpoint.clone())
    );
    assert_eq!(one.response_status, first.response_status);
    println!("ok logs: list, get");
}

async fn webhooks(target: &Target) {
    let resend = &target.sdk();
    let receiver = Receiver::start().await;
    let created = resend
        .webhooks
        .create(CreateWebhookOptions::new(
            receiver.url(),
            [EmailEventType::EmailSent],
        ))
        .await
        .expect("create");
    let (id, secret) = (created.id, created.signing_secret);
    assert!(secret.starts_with("whsec_"));
    receiver.trust(&secret);
    let got = resend.webhooks.get(&id).await.expect("get");
    assert_eq!(
        (got.status.as_str(), got.endpoint.as_str()),
        ("enabled", receiver.url().as_str())
    );
    let listed = resend
        .webhooks
        .list(ListOptions::default())
        .await
        .expect("list");
    assert!(listed.data.iter().any(|w| w.id == id));

    let sent = resend.emails.send(email("Hook")).await.expect("send");
    until("the delivery", || async { !receiver.seen().is_empty() }).await;
    let delivery = receiver.seen().remove(0);
    assert_eq!(
        delivery.verified,
        [true],
        "signed with the webhook's secret"
    );
    let tampered = String::from_utf8(delivery.body.clone())
        .expect("UTF-8")
        .replace("Hook", "Hack");
    let verifier = standardwebhooks::Webhook::new(&secret).expect("secret");
    assert!(
        verifier
            .verify(tampered.as_bytes(), &delivery.headers)
            .is_err()
    );
    match serde_json::from_slice::<Event>(&delivery.body).expect("the SDK's Event") {
        Event::EmailEvent(event) => {
            assert!(matches!(event.r#type, EmailEventType::EmailSent));
            assert_eq!(event.data.email_id, sent.id);
        }
        other => panic!("an email event, not {other:?}"),
    }

    let events = resend
        .webhooks
        .list_events(&id, ListOptions::default())
        .await
        .expect("events");
    let event_id = events.data[0].id.clone();
    assert_eq!(format!("msg_{event_id}"), delivery.id);
    let one = resend
        .webhooks
        .get_event(&id, &event_id)
        .await
        .expect("event");
    assert_eq!(one.payload, delivery.json());
    let attempts = resend
        .webhooks
        .list_event_attempts(&id, &event_id, ListOptions::default())
        .await
        .expect("attempts");
    assert_eq!(attempts.data[0].http_status_code, 200);
    let replayed = resend
        .webhooks
        .replay_event(&id, &event_id)
        .await
        .expect("replay");
    assert_eq!(replayed.id, event_id);
    until("the replay", || async { receiver.seen().len() >= 2 }).await;
    assert_eq!(
        receiver.seen()[1].id,
        delivery.id,
        "a replay keeps the webhook-id"
    );

    let rotated = resend
        .webhooks
        .rotate_signing_secret(&id)
        .await
        .expect("rotate");
    assert_ne!(rotated.signing_secret, secret);
    let changes = UpdateWebhookOptions::default()
        .with_status(WebhookStatus::Disabled)
        .with_events([EmailEventType::EmailFailed]);
    assert_eq!(
        resend
            .webhooks
            .update(&id, changes)
            .await
            .expect("update")
            .id,
        id
    );
    let after = resend.webhooks.get(&id).await.expect("get");
    assert_eq!(after.status, "disabled");
    assert_eq!(after.events.len(), 1);
    assert!(resend.webhooks.delete(&id).await.expect("delete"));
    receiver.stop();
    println!(
        "ok webhooks: create, get, list, a delivery (Standard Webhooks verifier, the SDK's Event), \
         events, attempts, replay, rotate, update, delete"
    );
}

/// API keys over HTTP are not the service's (operators issue them with
/// `mail-service key`): the SDK reads the answer as its error.
async fn absent(target: &Target) {
    let resend = &target.sdk();
    refused(
        resend.api_keys.list(ListOptions::default()).await,
        404,
        "not_found",
    );
    refused(
        resend.api_keys.create(CreateApiKeyOptions::new("ci")).await,
        404,
        "not_found",
    );
    println!("ok absent: api_keys answer not_found");
}

async fn resend_rust_sdk(b: Backend) {
    let db = TestDb::new(b);
    let (_, full_key) = common::provision_keys(&db).await;
    let sdk_server = SdkServer::start(&db);
    let target = Target {
        base: sdk_server.server.base.clone(),
        key: full_key,
        outbox: db.dir.path().join("outbox"),
    };
    assert_eq!(target.sdk().base_url().trim_end_matches('/'), target.base);
    // `emails` lists before `suppressions` stores an email resend-rs cannot
    // read.
    emails(&target).await;
    scheduling(&target).await;
    metrics(&target).await;
    domains(&target).await;
    suppressions(&target).await;
    logs(&target).await;
    webhooks(&target).await;
    absent(&target).await;
}

on_both_backends!(resend_rust_sdk);

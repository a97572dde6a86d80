//! Scheduled sending: an email with `scheduled_at` waits as `scheduled`
//! until the scheduler hands it off (once); `PATCH /emails/{id}` moves it
//! under `If-Match`; `POST /emails/{id}/cancel` stops it. The clock is the
//! test's: stories move it and run one scheduler pass (`dispatch_due`).

mod common;

use std::time::Duration;

use common::{Backend, Resp, TestApp, email, smtp};
use mail_service::clock::rfc3339;
use mail_service::service::Settings;
use mail_service::smtp_sink::{SinkMode, SmtpSink};
use serde_json::{Value, json};

const MINUTE: i64 = 60_000;
const DAY: i64 = 24 * 60 * MINUTE;

fn at(app: &TestApp, offset_ms: i64) -> String {
    rfc3339(app.service.now_ms() + offset_ms)
}

fn scheduled(when: &str) -> Value {
    let mut body = email();
    body["scheduled_at"] = json!(when);
    body
}

async fn schedule(app: &TestApp, offset_ms: i64) -> String {
    let resp = app.send(&scheduled(&at(app, offset_ms))).await;
    resp.expect(200, "");
    assert_eq!(resp.header("etag"), Some("\"1\""));
    resp.body["id"].as_str().unwrap().to_string()
}

async fn patch(app: &TestApp, id: &str, if_match: Option<&str>, body: &Value) -> Resp {
    let headers: Vec<(&str, &str)> = if_match.map(|m| ("if-match", m)).into_iter().collect();
    app.call(
        "PATCH",
        &format!("/emails/{id}"),
        Some(&app.full_key),
        &headers,
        Some(body.to_string().into_bytes()),
    )
    .await
}

async fn cancel(app: &TestApp, id: &str, headers: &[(&str, &str)], body: Option<&str>) -> Resp {
    app.call(
        "POST",
        &format!("/emails/{id}/cancel"),
        Some(&app.full_key),
        headers,
        body.map(|b| b.as_bytes().to_vec()),
    )
    .await
}

async fn status(app: &TestApp, id: &str) -> Value {
    let resp = app.get(&format!("/emails/{id}")).await;
    resp.expect(200, "");
    resp.body
}

async fn a_scheduled_email_waits_and_is_handed_off_once(b: Backend) {
    let app = TestApp::start(b).await;
    let id = schedule(&app, 10 * MINUTE).await;
    let stored = status(&app, &id).await;
    assert_eq!(
        (&stored["status"], &stored["last_event"]),
        (&json!("scheduled"), &json!("scheduled"))
    );
    assert_eq!(stored["scheduled_at"], at(&app, 10 * MINUTE));
    assert_eq!(app.service.dispatch_due().await.unwrap(), 0, "not due yet");
    app.clock.advance_ms(10 * MINUTE - 1);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 0, "1 ms early");
    app.clock.advance_ms(1);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 1);
    let sent = status(&app, &id).await;
    assert_eq!(
        (&sent["status"], &sent["last_event"]),
        (&json!("sent"), &json!("sent"))
    );
    assert_eq!(app.outbox_count(), 1);
    app.clock.advance_ms(DAY);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 0, "never twice");
    assert_eq!(app.outbox_count(), 1);
}

async fn scheduled_at_window_and_formats(b: Backend) {
    let app = TestApp::start(b).await;
    let now = app.service.now_ms();
    // The window's edges: 60 s in the past (clock skew; due at once) and
    // 30 days ahead are allowed, one millisecond further is not.
    for (offset, allowed) in [
        (-MINUTE, true),
        (-MINUTE - 1, false),
        (30 * DAY, true),
        (30 * DAY + 1, false),
    ] {
        let resp = app.send(&scheduled(&rfc3339(now + offset))).await;
        if allowed {
            resp.expect(200, "");
        } else {
            resp.expect(422, "validation_error");
            assert!(
                resp.message().starts_with("scheduled_at: must "),
                "{}",
                resp.message()
            );
        }
    }
    let past = app.send(&scheduled(&rfc3339(now - 5 * MINUTE))).await;
    assert!(
        past.message()
            .contains("60 seconds in the past (it is 5 min 0 s before"),
        "{}",
        past.message()
    );
    let ahead = app.send(&scheduled(&rfc3339(now + 31 * DAY))).await;
    assert!(
        ahead.message().contains("at most 30 days ahead"),
        "{}",
        ahead.message()
    );

    // Time zones: the same instant however it is written; answered in UTC.
    let clock = time::OffsetDateTime::from_unix_timestamp(now / 1000 + 3600).unwrap();
    let utc = rfc3339((now / 1000 + 3600) * 1000);
    for offset in [(5, 30), (-8, 0), (0, 0)] {
        let zone = time::UtcOffset::from_hms(offset.0, offset.1, 0).unwrap();
        let local = clock
            .to_offset(zone)
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
        let resp = app.send(&scheduled(&local)).await;
        resp.expect(200, "");
        let stored = status(&app, resp.body["id"].as_str().unwrap()).await;
        assert_eq!(stored["scheduled_at"], utc.as_str(), "{local}");
    }
    // Fractional seconds: milliseconds kept, finer digits dropped.
    let fraction = format!("{}.123987Z", &utc[..19]);
    let resp = app.send(&scheduled(&fraction)).await;
    resp.expect(200, "");
    assert_eq!(
        status(&app, resp.body["id"].as_str().unwrap()).await["scheduled_at"],
        format!("{}.123Z", &utc[..19])
    );
    // Not RFC 3339 with an offset, or not a string.
    for bad in [
        json!("2030-01-01T09:00:00"),
        json!("tomorrow"),
        json!("in 1 min"),
        json!(1893456000),
    ] {
        let resp = app.send(&scheduled_value(bad.clone())).await;
        resp.expect(422, "validation_error");
        assert!(
            resp.message().starts_with("scheduled_at: "),
            "{bad}: {}",
            resp.message()
        );
    }
    assert_eq!(
        app.service.dispatch_due().await.unwrap(),
        1,
        "only the one 60 s in the past is due"
    );

    // A leap second is read as the last millisecond of its minute.
    let leap_day_end = 1_483_228_799_000; // 2016-12-31T23:59:59Z
    app.clock
        .advance_ms(leap_day_end - 30_000 - app.service.now_ms());
    let resp = app.send(&scheduled("2016-12-31T23:59:60Z")).await;
    resp.expect(200, "");
    let leap = status(&app, resp.body["id"].as_str().unwrap()).await;
    assert_eq!(leap["scheduled_at"], "2016-12-31T23:59:59.999Z");
    app.send(&scheduled("2016-12-31T12:00:60Z"))
        .await
        .expect(422, "validation_error");
}

fn scheduled_value(value: Value) -> Value {
    let mut body = email();
    body["scheduled_at"] = value;
    body
}

async fn reschedule_needs_the_current_revision(b: Backend) {
    let app = TestApp::start(b).await;
    let id = schedule(&app, 10 * MINUTE).await;
    let later = json!({"scheduled_at": at(&app, 20 * MINUTE)});

    patch(&app, &id, None, &later)
        .await
        .expect(428, "precondition_required");
    for malformed in ["1", "*", "W/\"1\"", "\"1\", \"2\"", "\"one\""] {
        let resp = patch(&app, &id, Some(malformed), &later).await;
        resp.expect(400, "invalid_if_match");
        assert!(
            resp.message().starts_with("If-Match: "),
            "{}",
            resp.message()
        );
    }
    let stale = patch(&app, &id, Some("\"7\""), &later).await;
    stale.expect(409, "stale_revision");
    assert!(
        stale.message().contains("it is at revision 1 now"),
        "{}",
        stale.message()
    );
    assert_eq!(stale.body["email_id"], id.as_str());

    // The body: only scheduled_at, required, in its window.
    patch(
        &app,
        &id,
        Some("\"1\""),
        &json!({"scheduled_at": at(&app, MINUTE), "subject": "x"}),
    )
    .await
    .expect(422, "validation_error");
    patch(&app, &id, Some("\"1\""), &json!({}))
        .await
        .expect(422, "missing_required_field");
    patch(
        &app,
        &id,
        Some("\"1\""),
        &json!({"scheduled_at": at(&app, 31 * DAY)}),
    )
    .await
    .expect(422, "validation_error");
    let sending_key = app
        .call(
            "PATCH",
            &format!("/emails/{id}"),
            Some(&app.send_key),
            &[("if-match", "\"1\"")],
            Some(later.to_string().into_bytes()),
        )
        .await;
    sending_key.expect(403, "restricted_api_key");
    patch(&app, "4242", Some("\"1\""), &later)
        .await
        .expect(404, "not_found");
    // Resend's Python SDK repeats the id in the body: another id is
    // refused naming the field; the path's own id is accepted (below).
    for other in [json!("4242"), json!(4242), json!(""), json!(null)] {
        let r = patch(
            &app,
            &id,
            Some("\"1\""),
            &json!({"id": other, "scheduled_at": at(&app, 20 * MINUTE)}),
        )
        .await;
        r.expect(422, "validation_error");
        assert!(
            r.message().starts_with("id: must be the id in the path"),
            "{}",
            r.message()
        );
    }

    let with_id = json!({"id": id, "scheduled_at": at(&app, 20 * MINUTE)});
    let moved = patch(&app, &id, Some("\"1\""), &with_id).await;
    moved.expect(200, "");
    assert_eq!(moved.header("etag"), Some("\"2\""));
    assert_eq!(
        moved.body,
        json!({"object": "email", "id": id, "scheduled_at": at(&app, 20 * MINUTE)})
    );
    let stored = status(&app, &id).await;
    assert_eq!(stored["scheduled_at"], at(&app, 20 * MINUTE));
    assert_eq!(
        app.get(&format!("/emails/{id}")).await.header("etag"),
        Some("\"2\"")
    );
    // The old revision is stale now.
    patch(&app, &id, Some("\"1\""), &later)
        .await
        .expect(409, "stale_revision");

    // Not due at the old time, due at the new one.
    app.clock.advance_ms(10 * MINUTE);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 0);
    app.clock.advance_ms(10 * MINUTE);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 1);

    // Sent: too late, and the answer says why.
    let late = patch(
        &app,
        &id,
        Some("\"4\""),
        &json!({"scheduled_at": at(&app, MINUTE)}),
    )
    .await;
    late.expect(409, "invalid_state");
    assert_eq!(late.body["status"], "sent");
    assert!(
        late.message().contains(
            "is sent: it was handed off to the provider; only a scheduled email can be rescheduled"
        ),
        "{}",
        late.message()
    );
    // An email sent without a schedule cannot be rescheduled either.
    let now_sent = app.send(&email()).await;
    let now_id = now_sent.body["id"].as_str().unwrap();
    patch(&app, now_id, Some("\"2\""), &later)
        .await
        .expect(409, "invalid_state");
}

async fn cancel_stops_a_scheduled_email(b: Backend) {
    let app = TestApp::start(b).await;
    let id = schedule(&app, MINUTE).await;
    cancel(&app, &id, &[], Some("{\"reason\":\"x\"}"))
        .await
        .expect(422, "validation_error");
    cancel(&app, &id, &[("if-match", "\"9\"")], None)
        .await
        .expect(409, "stale_revision");
    let done = cancel(&app, &id, &[], None).await;
    done.expect(200, "");
    assert_eq!(done.body, json!({"object": "email", "id": id}));
    assert_eq!(done.header("etag"), Some("\"2\""));
    let stored = status(&app, &id).await;
    assert_eq!(
        (&stored["status"], &stored["last_event"]),
        (&json!("canceled"), &json!("canceled"))
    );
    app.clock.advance_ms(DAY);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 0);
    assert_eq!(
        app.outbox_count(),
        0,
        "a canceled email is never handed off"
    );

    let again = cancel(&app, &id, &[], None).await;
    again.expect(409, "invalid_state");
    assert_eq!(again.body["status"], "canceled");
    patch(
        &app,
        &id,
        Some("\"2\""),
        &json!({"scheduled_at": at(&app, MINUTE)}),
    )
    .await
    .expect(409, "invalid_state");

    // With If-Match and an empty object body, as other clients send it.
    let other = schedule(&app, MINUTE).await;
    cancel(&app, &other, &[("if-match", "\"1\"")], Some("{}"))
        .await
        .expect(200, "");
    let sent = app.send(&email()).await;
    let sent_id = sent.body["id"].as_str().unwrap();
    let late = cancel(&app, sent_id, &[], None).await;
    late.expect(409, "invalid_state");
    assert_eq!(late.body["status"], "sent");
}

async fn concurrent_reschedules_with_one_revision_one_wins(b: Backend) {
    let app = TestApp::start(b).await;
    let id = schedule(&app, 10 * MINUTE).await;
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (router, key, id) = (app.router.clone(), app.full_key.clone(), id.clone());
            let body = json!({"scheduled_at": at(&app, (11 + i) * MINUTE)});
            tokio::spawn(async move {
                common::call_router(
                    router,
                    "PATCH",
                    &format!("/emails/{id}"),
                    Some(&key),
                    &[("if-match", "\"1\"")],
                    Some(body.to_string().into_bytes()),
                )
                .await
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        let resp = task.await.unwrap();
        match resp.status {
            200 => winners.push(resp.body["scheduled_at"].clone()),
            _ => {
                resp.expect(409, "stale_revision");
            }
        }
    }
    assert_eq!(winners.len(), 1, "exactly one reschedule wins");
    let stored = status(&app, &id).await;
    assert_eq!(stored["scheduled_at"], winners[0]);
    assert_eq!(stored["revision"], 2);
}

/// A due email, a reschedule (or a cancel) and the scheduler's claim at the
/// same moment: exactly one wins, the loser's answer says so, and the email
/// is handed off once or not at all.
async fn a_change_racing_the_claim_loses_cleanly(b: Backend) {
    let app = TestApp::start(b).await;
    let (mut changes_won, mut claims_won) = (0, 0);
    for round in 0..30 {
        let id = schedule(&app, 0).await;
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(2));
        let claim = {
            let (service, start) = (app.service.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                service.dispatch_due().await
            })
        };
        let change = {
            let (router, key, id) = (app.router.clone(), app.full_key.clone(), id.clone());
            let later = json!({"scheduled_at": at(&app, 10 * MINUTE)}).to_string();
            tokio::spawn(async move {
                start.wait().await;
                let (method, path, body) = if round % 2 == 0 {
                    ("PATCH", format!("/emails/{id}"), Some(later.into_bytes()))
                } else {
                    ("POST", format!("/emails/{id}/cancel"), None)
                };
                common::call_router(
                    router,
                    method,
                    &path,
                    Some(&key),
                    &[("if-match", "\"1\"")],
                    body,
                )
                .await
            })
        };
        let dispatched = claim.await.unwrap().unwrap();
        let resp = change.await.unwrap();
        let stored = status(&app, &id).await;
        if resp.status == 200 {
            changes_won += 1;
            assert_eq!(
                dispatched, 0,
                "round {round}: the change won, nothing was claimed"
            );
            let expected = if round % 2 == 0 {
                "scheduled"
            } else {
                "canceled"
            };
            assert_eq!(stored["status"], expected, "round {round}");
        } else {
            claims_won += 1;
            resp.expect(409, "invalid_state");
            assert!(["sending", "sent"].contains(&resp.body["status"].as_str().unwrap()));
            assert_eq!(dispatched, 1, "round {round}");
            assert_eq!(stored["status"], "sent");
        }
        // Whatever won, a later pass hands nothing off again now.
        assert_eq!(app.service.dispatch_due().await.unwrap(), 0);
    }
    assert_eq!(
        app.outbox_count(),
        claims_won,
        "each claimed email handed off once"
    );
    eprintln!("changes won {changes_won}, claims won {claims_won}");
}

async fn a_batch_with_a_scheduled_item_is_accepted_for_the_scheduler(b: Backend) {
    let app = TestApp::start(b).await;
    let mut later = email();
    later["scheduled_at"] = json!(at(&app, 30 * MINUTE));
    let body = json!([later, email()]);
    let resp = app.batch(&[("idempotency-key", "mixed-1")], &body).await;
    assert_eq!(resp.status, 202, "{}", resp.body);
    assert_eq!(resp.body["status"], "processing");
    let batch_id = resp.body["id"].as_str().unwrap().to_string();
    let ids: Vec<String> = resp.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(
        app.outbox_count(),
        0,
        "nothing handed off inside the request"
    );
    let first = status(&app, &ids[0]).await;
    let second = status(&app, &ids[1]).await;
    assert_eq!(first["scheduled_at"], at(&app, 30 * MINUTE));
    assert_eq!(
        second["scheduled_at"],
        at(&app, 0),
        "no scheduled_at: due at once"
    );
    assert_eq!(
        (&first["batch_id"], &second["batch_id"]),
        (&json!(batch_id), &json!(batch_id))
    );
    // The same key replays the same answer.
    let replay = app.batch(&[("idempotency-key", "mixed-1")], &body).await;
    assert_eq!((replay.status, &replay.body), (202, &resp.body));

    assert_eq!(app.service.dispatch_due().await.unwrap(), 1);
    app.clock.advance_ms(30 * MINUTE);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 1);
    assert_eq!(app.outbox_count(), 2);

    // A batch without scheduled items still hands off in the request.
    let now = app.batch(&[], &json!([email()])).await;
    now.expect(200, "");
    assert!(now.body.get("status").is_none());
    // Window errors name the item.
    let mut far = email();
    far["scheduled_at"] = json!(at(&app, 31 * DAY));
    let strict = app.batch(&[], &json!([email(), far.clone()])).await;
    strict.expect(422, "validation_error");
    assert!(
        strict.message().starts_with("[1].scheduled_at: "),
        "{}",
        strict.message()
    );
    let mut soon = email();
    soon["scheduled_at"] = json!(at(&app, MINUTE));
    let permissive = app
        .batch(&[("x-batch-validation", "permissive")], &json!([soon, far]))
        .await;
    assert_eq!(permissive.status, 202);
    assert_eq!(permissive.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(permissive.body["errors"][0]["index"], 1);
}

async fn a_scheduled_send_replays_under_its_key(b: Backend) {
    let app = TestApp::start(b).await;
    let body = scheduled(&at(&app, MINUTE));
    let first = app.send_with_key("sched-1", &body).await;
    first.expect(200, "");
    let again = app.send_with_key("sched-1", &body).await;
    assert_eq!((again.status, &again.body), (200, &first.body));
    app.send_with_key("sched-1", &scheduled(&at(&app, 2 * MINUTE)))
        .await
        .expect(409, "invalid_idempotent_request");
    app.clock.advance_ms(MINUTE);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 1);
    // Still the recorded answer, and nothing is sent again.
    let after = app.send_with_key("sched-1", &body).await;
    assert_eq!((after.status, &after.body), (200, &first.body));
    assert_eq!(app.service.dispatch_due().await.unwrap(), 0);
    assert_eq!(app.outbox_count(), 1);
}

/// Scheduled handoffs follow the rules of immediate ones: a refusal is
/// `failed`, a handoff that may have happened is `unknown`; neither is
/// retried.
async fn a_scheduled_handoff_is_never_retried(b: Backend) {
    let sink = SmtpSink::start(0, SinkMode::DropAfterData).await.unwrap();
    let app = TestApp::with(
        b,
        Some(smtp(sink.port(), Duration::from_secs(5))),
        Settings::default(),
    )
    .await;
    let unknown = schedule(&app, MINUTE).await;
    app.clock.advance_ms(MINUTE);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 1);
    let stored = status(&app, &unknown).await;
    assert_eq!(
        (&stored["status"], &stored["last_event"]),
        (&json!("unknown"), &json!("queued"))
    );
    sink.set_mode(SinkMode::Reject);
    let failed = schedule(&app, MINUTE).await;
    app.clock.advance_ms(MINUTE);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 1);
    assert_eq!(status(&app, &failed).await["status"], "failed");
    sink.set_mode(SinkMode::Accept);
    app.clock.advance_ms(DAY);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 0);
    assert_eq!(sink.received().len(), 2, "each handed off once");
}

/// A node that claimed a due email, began its handoff and died before
/// recording the outcome: when the lease has run out the sweeper declares
/// it `unknown`; nothing hands it off again.
async fn a_claim_whose_node_died_becomes_unknown(b: Backend) {
    let app = TestApp::start(b).await;
    let id = schedule(&app, 0).await;
    let now = app.service.now_ms();
    let claimed = app
        .store
        .claim_due(app.service.next_id(), now, now + MINUTE, 10)
        .await
        .unwrap();
    assert_eq!(claimed, 1);
    // Its handoff began: the mark written before the transport connects.
    let began = app
        .store
        .begin_handoff(id.parse().unwrap(), None, now, now + MINUTE)
        .await
        .unwrap();
    assert!(began);
    assert_eq!(status(&app, &id).await["status"], "sending");
    // Claimed (due and its handoff under way): too late to move or cancel,
    // whatever the revision, and the answer says why.
    let etag = app.get(&format!("/emails/{id}")).await;
    let current = etag.header("etag").unwrap().to_string();
    assert_eq!(current, "\"2\"", "the claim is a revision");
    let moved = patch(
        &app,
        &id,
        Some(&current),
        &json!({"scheduled_at": at(&app, 10 * MINUTE)}),
    )
    .await;
    moved.expect(409, "invalid_state");
    assert_eq!(moved.body["status"], "sending");
    assert!(
        moved
            .message()
            .contains("is sending: its handoff has started"),
        "{}",
        moved.message()
    );
    let canceled = cancel(&app, &id, &[("if-match", &current)], None).await;
    canceled.expect(409, "invalid_state");
    assert_eq!(canceled.body["status"], "sending");
    assert_eq!(
        app.service.sweep().await.unwrap(),
        0,
        "the lease still runs"
    );
    app.clock.advance_ms(MINUTE + 1);
    assert_eq!(app.service.sweep().await.unwrap(), 1);
    assert_eq!(status(&app, &id).await["status"], "unknown");
    let late = cancel(&app, &id, &[], None).await;
    late.expect(409, "invalid_state");
    assert!(
        late.message()
            .contains("its handoff has an unknown outcome"),
        "{}",
        late.message()
    );
    assert_eq!(app.service.dispatch_due().await.unwrap(), 0);
    assert_eq!(app.outbox_count(), 0);
}

/// A node that claimed a due email and died before its handoff began (no
/// mark): nothing reached the relay, so once the lease has run out the
/// sweeper hands it back to the scheduler instead of declaring it
/// `unknown`, and it is sent once.
async fn a_claim_whose_handoff_never_began_goes_back_to_scheduled(b: Backend) {
    let app = TestApp::start(b).await;
    let id = schedule(&app, 0).await;
    let now = app.service.now_ms();
    let claimed = app
        .store
        .claim_due(app.service.next_id(), now, now + MINUTE, 10)
        .await
        .unwrap();
    assert_eq!(claimed, 1);
    app.clock.advance_ms(MINUTE + 1);
    handed_back_and_sent_once(&app, &id).await;
}

/// The sweep hands a claimed email whose handoff never began back to the
/// scheduler, which sends it once, and never again.
async fn handed_back_and_sent_once(app: &TestApp, id: &str) {
    assert_eq!(app.service.sweep().await.unwrap(), 1);
    assert_eq!(status(app, id).await["status"], "scheduled");
    assert_eq!(app.service.dispatch_due().await.unwrap(), 1);
    assert_eq!(status(app, id).await["status"], "sent");
    app.clock.advance_ms(DAY);
    assert_eq!(app.service.sweep().await.unwrap(), 0);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 0);
    assert_eq!(app.outbox_count(), 1, "sent once");
}

/// A storage error as the scheduler picks a due email up (its database
/// connection cut, here: the domains it reads are gone for a moment) is
/// not a permanent outcome: the email is not marked `failed`; it stays
/// claimed, and once its lease has run out the sweeper hands it back to
/// the scheduler, which sends it once.
async fn a_storage_error_before_a_scheduled_handoff_is_retried(b: Backend) {
    let app = TestApp::start(b).await;
    let id = schedule(&app, MINUTE).await;
    app.clock.advance_ms(MINUTE);
    app.db
        .execute("ALTER TABLE domains RENAME TO domains_away")
        .await;
    assert_eq!(app.service.dispatch_due().await.unwrap(), 1, "claimed");
    app.db
        .execute("ALTER TABLE domains_away RENAME TO domains")
        .await;
    let stored = status(&app, &id).await;
    assert_eq!(stored["status"], "sending", "claimed, not failed: {stored}");
    assert_eq!(app.outbox_count(), 0);
    // The claim's lease: the handoff bound plus its 30 s margin.
    app.clock.advance_ms(3 * MINUTE);
    handed_back_and_sent_once(&app, &id).await;
}

async fn the_list_finds_scheduled_mail(b: Backend) {
    let app = TestApp::start(b).await;
    let mut scheduled_ids = Vec::new();
    for minutes in 1..=3 {
        scheduled_ids.push(schedule(&app, minutes * MINUTE).await);
    }
    let sent = app.send(&email()).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    scheduled_ids.reverse();

    let ids = |resp: &Resp| -> Vec<String> {
        resp.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect()
    };
    let all = app.get("/emails").await;
    all.expect(200, "");
    assert_eq!(all.body["object"], "list");
    assert_eq!(all.body["has_more"], false);
    assert_eq!(all.body["nextCursor"], Value::Null);
    let mut newest_first = vec![sent.clone()];
    newest_first.extend(scheduled_ids.iter().cloned());
    assert_eq!(ids(&all), newest_first);
    let entry = &all.body["data"][1];
    assert_eq!(
        (&entry["status"], &entry["last_event"]),
        (&json!("scheduled"), &json!("scheduled"))
    );
    assert!(
        entry.get("text").is_none() && entry.get("html").is_none(),
        "no bodies in a list"
    );

    let only = app.get("/emails?status=scheduled").await;
    assert_eq!(ids(&only), scheduled_ids);

    // Pages: by the opaque cursor, or by Resend's `after` (an id).
    let first = app.get("/emails?limit=2").await;
    assert_eq!(ids(&first), newest_first[..2]);
    assert_eq!(first.body["has_more"], true);
    let cursor = first.body["nextCursor"].as_str().unwrap();
    let second = app.get(&format!("/emails?limit=2&cursor={cursor}")).await;
    assert_eq!(ids(&second), newest_first[2..]);
    assert_eq!(second.body["has_more"], false);
    let after = app
        .get(&format!("/emails?limit=2&after={}", newest_first[1]))
        .await;
    assert_eq!(ids(&after), newest_first[2..]);

    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("status=delivered", "status"),
        ("after=abc", "after"),
        ("after=1&cursor=x", "after"),
        ("before=1", "before"),
    ] {
        let resp = app.get(&format!("/emails?{query}")).await;
        resp.expect(422, "validation_error");
        assert!(
            resp.message().starts_with(&format!("{field}: ")),
            "{query}: {}",
            resp.message()
        );
    }
    app.call("GET", "/emails", Some(&app.send_key), &[], None)
        .await
        .expect(403, "restricted_api_key");
}

on_both_backends!(
    the_list_finds_scheduled_mail,
    a_scheduled_email_waits_and_is_handed_off_once,
    scheduled_at_window_and_formats,
    reschedule_needs_the_current_revision,
    cancel_stops_a_scheduled_email,
    concurrent_reschedules_with_one_revision_one_wins,
    a_change_racing_the_claim_loses_cleanly,
    a_batch_with_a_scheduled_item_is_accepted_for_the_scheduler,
    a_scheduled_send_replays_under_its_key,
    a_scheduled_handoff_is_never_retried,
    a_claim_whose_node_died_becomes_unknown,
    a_claim_whose_handoff_never_began_goes_back_to_scheduled,
    a_storage_error_before_a_scheduled_handoff_is_retried,
);

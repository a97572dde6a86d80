//! The suppression list through the HTTP API: one address is one entry
//! whatever its domain's case or script, suppressed recipients are removed
//! when an email's handoff is due, and an email left with no recipient is
//! `suppressed`, never handed off.

mod common;

use common::{Backend, Resp, TestApp, email};
use mail_service::clock::Clock;
use mail_service::store::ScreenedStart;
use serde_json::{Value, json};

async fn suppress(app: &TestApp, address: &str) -> Resp {
    app.post(&app.full_key, "/suppressions", json!({"email": address}))
        .await
}

fn outbox_text(app: &TestApp, id: &str) -> String {
    std::fs::read_to_string(app.outbox.join(format!("{id}.eml"))).unwrap()
}

async fn every_endpoint_needs_full_access(b: Backend) {
    let app = TestApp::start(b).await;
    let added = suppress(&app, "ada@example.test").await;
    added.expect(200, "");
    let id = added.body["id"].as_str().unwrap().to_string();
    let body = Some(
        json!({"email": "bob@example.test"})
            .to_string()
            .into_bytes(),
    );
    for (method, path, body) in [
        ("POST", "/suppressions".to_string(), body.clone()),
        ("GET", "/suppressions".to_string(), None),
        ("GET", "/suppressions/ada@example.test".to_string(), None),
        ("GET", format!("/suppressions/{id}"), None),
        ("DELETE", "/suppressions/ada@example.test".to_string(), None),
    ] {
        app.call(method, &path, Some(&app.send_key), &[], body.clone())
            .await
            .expect(403, "restricted_api_key");
        app.call(method, &path, None, &[], body.clone())
            .await
            .expect(401, "missing_api_key");
    }
    // Nothing was changed by the refused calls.
    app.get("/suppressions/ada@example.test")
        .await
        .expect(200, "");
    app.get("/suppressions/bob@example.test")
        .await
        .expect(404, "not_found");
}

async fn one_address_is_one_entry(b: Backend) {
    let app = TestApp::start(b).await;
    let first = app
        .post(
            &app.full_key,
            "/suppressions",
            json!({"email": "Ada@Bücher.Example", "reason": "hard bounce"}),
        )
        .await;
    first.expect(200, "");
    assert_eq!(first.body["object"], "suppression");
    assert_eq!(first.body["email"], "Ada@xn--bcher-kva.example");
    assert_eq!(first.body["reason"], "hard bounce");
    let id = first.body["id"].as_str().unwrap().to_string();
    // The same address in another spelling of its domain: the same entry.
    for again in [
        "Ada@BÜCHER.example",
        "Ada@xn--bcher-kva.EXAMPLE",
        " Ada@bücher.example ",
    ] {
        let r = suppress(&app, again).await;
        r.expect(200, "");
        assert_eq!(r.body["id"], id.as_str(), "{again}");
        assert_eq!(r.body["reason"], "hard bounce", "{again}");
    }
    // Any case of the whole address is the same mailbox (the safe side):
    // the same entry, shown as first suppressed.
    let same = suppress(&app, "ADA@bücher.example").await;
    same.expect(200, "");
    assert_eq!(same.body["id"], id.as_str());
    assert_eq!(same.body["email"], "Ada@xn--bcher-kva.example");
    assert_eq!(same.body["origin"], "manual");
    assert_eq!(same.body["source_id"], Value::Null);
    let other = suppress(&app, "bob@bücher.example").await;
    assert_ne!(other.body["id"], id.as_str());

    let list = app.get("/suppressions").await;
    list.expect(200, "");
    assert_eq!(list.body["object"], "list");
    assert_eq!(list.body["data"].as_array().unwrap().len(), 2);
    assert_eq!(list.body["has_more"], false);
    assert_eq!(list.body["nextCursor"], Value::Null);

    // Found by id, by the address in any spelling (percent-encoded in the
    // path), and not found for an address that is not on the list.
    for key in [
        id.clone(),
        "Ada@xn--bcher-kva.example".to_string(),
        "Ada@B%C3%BCcher.EXAMPLE".to_string(),
        "ada@xn--bcher-kva.example".to_string(),
    ] {
        let r = app.get(&format!("/suppressions/{key}")).await;
        r.expect(200, "");
        assert_eq!(r.body["id"], id.as_str(), "{key}");
    }
    app.get("/suppressions/nobody@example.test")
        .await
        .expect(404, "not_found");
    app.get("/suppressions/123456789")
        .await
        .expect(404, "not_found");

    // Bad input names the field and the rule; nothing is stored.
    for (body, name, field) in [
        (json!({}), "missing_required_field", "email:"),
        (
            json!({"email": "not-an-address"}),
            "validation_error",
            "email: `not-an-address`",
        ),
        (
            json!({"email": 5}),
            "validation_error",
            "email: must be a string",
        ),
        (
            json!({"email": "a@b.test", "color": "red"}),
            "validation_error",
            "color: unknown property",
        ),
        (
            json!({"email": "a@b.test", "reason": "x".repeat(257)}),
            "validation_error",
            "reason: must be at most 256",
        ),
        (
            json!(["a@b.test"]),
            "validation_error",
            "body: must be a JSON object",
        ),
    ] {
        let r = app.post(&app.full_key, "/suppressions", body.clone()).await;
        r.expect(422, name);
        assert!(r.message().starts_with(field), "{body}: {}", r.message());
    }
    app.get("/suppressions/not-an-address")
        .await
        .expect(422, "validation_error");
    assert_eq!(
        app.get("/suppressions").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // Delete by address in another spelling; then it is gone.
    let deleted = app
        .call(
            "DELETE",
            "/suppressions/Ada@B%C3%9CCHER.example",
            Some(&app.full_key),
            &[],
            None,
        )
        .await;
    deleted.expect(200, "");
    assert_eq!(
        deleted.body,
        json!({"object": "suppression", "id": id, "email": "Ada@xn--bcher-kva.example", "deleted": true})
    );
    app.call(
        "DELETE",
        "/suppressions/Ada@bücher.example",
        Some(&app.full_key),
        &[],
        None,
    )
    .await
    .expect(404, "not_found");
    app.get(&format!("/suppressions/{id}"))
        .await
        .expect(404, "not_found");
    // By id as well.
    let other_id = other.body["id"].as_str().unwrap();
    app.call(
        "DELETE",
        &format!("/suppressions/{other_id}"),
        Some(&app.full_key),
        &[],
        None,
    )
    .await
    .expect(200, "");
    assert_eq!(app.get("/suppressions").await.body["data"], json!([]));
}

async fn list_pages_with_a_cursor(b: Backend) {
    let app = TestApp::start(b).await;
    for i in 0..5 {
        suppress(&app, &format!("user{i}@example.test"))
            .await
            .expect(200, "");
    }
    let mut seen = Vec::new();
    let mut path = "/suppressions?limit=2".to_string();
    loop {
        let page = app.get(&path).await;
        page.expect(200, "");
        let data = page.body["data"].as_array().unwrap();
        seen.extend(
            data.iter()
                .map(|s| s["email"].as_str().unwrap().to_string()),
        );
        let has_more = page.body["has_more"].as_bool().unwrap();
        assert_eq!(has_more, !page.body["nextCursor"].is_null());
        if !has_more {
            break;
        }
        path = format!(
            "/suppressions?limit=2&cursor={}",
            page.body["nextCursor"].as_str().unwrap()
        );
    }
    // Newest first, each once.
    let expected: Vec<String> = (0..5)
        .rev()
        .map(|i| format!("user{i}@example.test"))
        .collect();
    assert_eq!(seen, expected);
    app.get("/suppressions?limit=0")
        .await
        .expect(422, "validation_error");
    app.get("/suppressions?cursor=bG9nczox")
        .await
        .expect(422, "validation_error");
    app.get("/suppressions?color=red")
        .await
        .expect(422, "validation_error");
}

async fn suppressed_recipients_are_removed_at_send_time(b: Backend) {
    let app = TestApp::start(b).await;
    suppress(&app, "gone@Example.TEST").await.expect(200, "");
    suppress(&app, "also-gone@bücher.example")
        .await
        .expect(200, "");

    // Partly suppressed: handed off to the rest; the email records who was
    // dropped.
    let mut partly = email();
    partly["to"] = json!(["ada@example.test", "gone@example.test"]);
    partly["cc"] = json!("Also <also-gone@BÜCHER.example>");
    partly["bcc"] = json!(["bob@example.test"]);
    let sent = app.send(&partly).await;
    sent.expect(200, "");
    let id = sent.body["id"].as_str().unwrap().to_string();
    let stored = app.get(&format!("/emails/{id}")).await;
    assert_eq!(stored.body["status"], "sent");
    assert_eq!(
        stored.body["suppressed_recipients"],
        json!(["gone@example.test", "also-gone@xn--bcher-kva.example"])
    );
    // The request as accepted is kept; the message went to the others only.
    assert_eq!(
        stored.body["to"],
        json!(["ada@example.test", "gone@example.test"])
    );
    let eml = outbox_text(&app, &id);
    assert!(eml.contains("ada@example.test"), "{eml}");
    assert!(!eml.contains("gone@"), "{eml}");
    assert!(!eml.to_lowercase().contains("also-gone"), "{eml}");

    // Every recipient suppressed: accepted (200 {id}), never handed off,
    // status `suppressed`.
    let before = app.outbox_count();
    let mut all = email();
    all["to"] = json!(["gone@EXAMPLE.test"]);
    all["bcc"] = json!(["also-gone@xn--bcher-kva.example"]);
    let answer = app.send(&all).await;
    answer.expect(200, "");
    let id = answer.body["id"].as_str().unwrap().to_string();
    let stored = app.get(&format!("/emails/{id}")).await;
    assert_eq!(stored.body["status"], "suppressed");
    assert_eq!(stored.body["last_event"], "suppressed");
    assert_eq!(
        stored.body["suppressed_recipients"],
        json!(["gone@example.test", "also-gone@xn--bcher-kva.example"])
    );
    assert!(
        stored.body["handoff_detail"]
            .as_str()
            .unwrap()
            .contains("every recipient is on the suppression list"),
        "{}",
        stored.body
    );
    assert_eq!(app.outbox_count(), before);
    let listed = app.get("/emails?status=suppressed").await;
    assert_eq!(listed.body["data"][0]["id"], id.as_str());

    // A batch: the suppressed item is recorded as such and the batch goes on.
    let mut ok = email();
    ok["to"] = json!("ada@example.test");
    let r = app.batch(&[], &json!([all.clone(), ok])).await;
    r.expect(200, "");
    let ids: Vec<String> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(
        app.get(&format!("/emails/{}", ids[0])).await.body["status"],
        "suppressed"
    );
    assert_eq!(
        app.get(&format!("/emails/{}", ids[1])).await.body["status"],
        "sent"
    );

    // Removed from the list: mail reaches the address again.
    app.call(
        "DELETE",
        "/suppressions/gone@example.test",
        Some(&app.full_key),
        &[],
        None,
    )
    .await
    .expect(200, "");
    let mut again = email();
    again["to"] = json!("gone@example.test");
    let id = app.send(&again).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let stored = app.get(&format!("/emails/{id}")).await;
    assert_eq!(stored.body["status"], "sent");
    assert_eq!(stored.body["suppressed_recipients"], json!([]));
}

async fn a_scheduled_email_is_screened_when_it_is_due(b: Backend) {
    let app = TestApp::start(b).await;
    let mut later = email();
    later["to"] = json!("ada@example.test");
    later["scheduled_at"] = json!(mail_service::clock::rfc3339(app.clock.now_ms() + 60_000));
    let id = app.send(&later).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Suppressed after it was accepted, before it is due.
    suppress(&app, "ada@example.test").await.expect(200, "");
    app.clock.advance_ms(60_000);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 1);
    let stored = app.get(&format!("/emails/{id}")).await;
    assert_eq!(stored.body["status"], "suppressed");
    assert_eq!(
        stored.body["suppressed_recipients"],
        json!(["ada@example.test"])
    );
    assert_eq!(app.outbox_count(), 0);
}

async fn the_other_tenant_list_is_not_ours(b: Backend) {
    let app = TestApp::start(b).await;
    let (_, other) = app
        .service
        .create_api_key("globex", "ops", mail_service::model::Permission::FullAccess)
        .await
        .unwrap();
    app.post(
        &other,
        "/suppressions",
        json!({"email": "ada@example.test"}),
    )
    .await
    .expect(200, "");
    app.get("/suppressions/ada@example.test")
        .await
        .expect(404, "not_found");
    let sent = app.send(&email()).await;
    let id = sent.body["id"].as_str().unwrap();
    assert_eq!(
        app.get(&format!("/emails/{id}")).await.body["status"],
        "sent"
    );
}

/// `Gone@Example.com` is suppressed: `gone@example.com` and every other case
/// of it is refused at every handoff, the immediate one, a batch's and a
/// scheduled one's; the entry still shows the address as it was suppressed.
async fn case_variants_are_refused_at_every_handoff(b: Backend) {
    let app = TestApp::start(b).await;
    suppress(&app, "Gone@Example.com").await.expect(200, "");
    let before = app.outbox_count();

    let mut now = email();
    now["to"] = json!("gone@example.com");
    let id = app.send(&now).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let stored = app.get(&format!("/emails/{id}")).await;
    assert_eq!(stored.body["status"], "suppressed", "{}", stored.body);

    let mut in_batch = email();
    in_batch["to"] = json!("GONE@EXAMPLE.COM");
    let r = app.batch(&[], &json!([in_batch])).await;
    r.expect(200, "");
    let id = r.body["data"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(
        app.get(&format!("/emails/{id}")).await.body["status"],
        "suppressed"
    );

    let mut later = email();
    later["to"] = json!("gOnE@example.COM");
    later["scheduled_at"] = json!(mail_service::clock::rfc3339(app.clock.now_ms() + 60_000));
    let id = app.send(&later).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    app.clock.advance_ms(60_000);
    assert_eq!(app.service.dispatch_due().await.unwrap(), 1);
    let stored = app.get(&format!("/emails/{id}")).await;
    assert_eq!(stored.body["status"], "suppressed");
    assert_eq!(
        stored.body["suppressed_recipients"],
        json!(["gOnE@example.com"])
    );
    assert_eq!(app.outbox_count(), before, "nothing was handed off");

    let entry = app.get("/suppressions/gone@example.com").await;
    entry.expect(200, "");
    assert_eq!(entry.body["email"], "Gone@example.com");
    assert_eq!(
        app.get("/suppressions").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

async fn batch_routes_add_and_remove(b: Backend) {
    let app = TestApp::start(b).await;
    let added = app
        .post(
            &app.full_key,
            "/suppressions/batch/add",
            json!({"emails": ["a@x.test", "A@X.TEST", "b@x.test"]}),
        )
        .await;
    added.expect(200, "");
    let data = added.body["data"].as_array().unwrap().clone();
    assert_eq!(data.len(), 2, "one entry per mailbox: {data:?}");
    assert!(
        data.iter()
            .all(|e| e["object"] == "suppression" && e["origin"] == "manual")
    );
    assert_eq!(data[0]["email"], "a@x.test");
    // Again, with one new: the existing entries are answered.
    let again = app
        .post(
            &app.full_key,
            "/suppressions/batch/add",
            json!({"emails": ["B@x.test", "c@x.test"]}),
        )
        .await;
    again.expect(200, "");
    assert_eq!(again.body["data"][0]["id"], data[1]["id"]);
    assert_eq!(
        app.get("/suppressions").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // Bad input names the field; nothing is stored or removed.
    for (path, body, field) in [
        ("add", json!({"emails": []}), "emails: must hold 1 to 100"),
        (
            "add",
            json!({"emails": vec!["a@x.test"; 101]}),
            "emails: must hold 1 to 100",
        ),
        (
            "add",
            json!({"emails": ["d@x.test", "nope"]}),
            "emails[1]: `nope`",
        ),
        (
            "add",
            json!({"emails": ["d@x.test"], "x": 1}),
            "x: unknown property",
        ),
        ("add", json!({}), "emails"),
        (
            "remove",
            json!({"emails": ["a@x.test"], "ids": ["1"]}),
            "ids: give either",
        ),
        ("remove", json!({}), "emails"),
        ("remove", json!({"ids": ["abc"]}), "ids[0]: must match"),
    ] {
        let r = app
            .post(
                &app.full_key,
                &format!("/suppressions/batch/{path}"),
                body.clone(),
            )
            .await;
        assert_eq!(r.status, 422, "{body}: {}", r.body);
        assert!(r.message().starts_with(field), "{body}: {}", r.message());
    }
    assert_eq!(
        app.get("/suppressions").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // Removed by address (any case) and by id; misses are left out.
    let removed = app
        .post(
            &app.full_key,
            "/suppressions/batch/remove",
            json!({"emails": ["A@x.test", "nobody@x.test", "a@X.test"]}),
        )
        .await;
    removed.expect(200, "");
    assert_eq!(
        removed.body,
        json!({"data": [{"object": "suppression", "id": data[0]["id"], "email": "a@x.test", "deleted": true}]})
    );
    let removed = app
        .post(
            &app.full_key,
            "/suppressions/batch/remove",
            json!({"ids": [data[1]["id"], "9999999999999999999", "123"]}),
        )
        .await;
    removed.expect(200, "");
    assert_eq!(removed.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(removed.body["data"][0]["id"], data[1]["id"]);
    let left = app.get("/suppressions").await;
    assert_eq!(left.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(left.body["data"][0]["email"], "c@x.test");
    // The origin filter.
    assert_eq!(
        app.get("/suppressions?origin=bounce").await.body["data"],
        json!([])
    );
    assert_eq!(
        app.get("/suppressions?origin=manual").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    app.get("/suppressions?origin=other")
        .await
        .expect(422, "validation_error");
}

/// The store's screen-and-mark (one statement on PostgreSQL): a listed
/// recipient leaves the email unmarked and the key's lease as it was; a
/// clear list marks the handoff begun and renews the key's lease; an email
/// no longer `sending` is not marked.
async fn the_handoff_is_marked_only_when_no_recipient_is_listed(b: Backend) {
    let app = TestApp::start(b).await;
    suppress(&app, "gone@example.test").await.expect(200, "");
    let (id, key) = app.reserve_email("screened", &email(), false).await;
    let (tenant, now) = (key.tenant_id, app.service.now_ms());
    let state = |what: &'static str| {
        let sql = match what {
            "mark" => format!(
                "SELECT count(*) FROM emails WHERE id = {id} AND handoff_began_at IS NOT NULL"
            ),
            _ => "SELECT lease_until FROM idempotency_keys WHERE idem_key = 'screened'".to_string(),
        };
        let db = &app.db;
        async move { db.count(&sql).await }
    };
    let listed = vec![
        "ada@example.test".to_string(),
        "GONE@example.test".to_string(),
    ];
    let screened = app
        .store
        .begin_handoff_if_clear(tenant, &listed, (id, Some(&key)), now, now + 90_000)
        .await
        .unwrap();
    assert_eq!(
        screened,
        ScreenedStart::Suppressed(vec!["gone@example.test".into()])
    );
    assert_eq!(
        (state("mark").await, state("lease").await),
        (0, now + 60_000)
    );

    let clear = vec!["ada@example.test".to_string()];
    let screened = app
        .store
        .begin_handoff_if_clear(tenant, &clear, (id, Some(&key)), now, now + 90_000)
        .await
        .unwrap();
    assert_eq!(screened, ScreenedStart::Began(true));
    assert_eq!(
        (state("mark").await, state("lease").await),
        (1, now + 90_000)
    );

    app.db
        .execute(&format!(
            "UPDATE emails SET status = 'sent' WHERE id = {id}"
        ))
        .await;
    let screened = app
        .store
        .begin_handoff_if_clear(tenant, &clear, (id, None), now, now + 120_000)
        .await
        .unwrap();
    assert_eq!(screened, ScreenedStart::Began(false));
    assert_eq!(state("lease").await, now + 90_000);
}

/// An immediate send reads the list with its sender's domain, in one
/// statement on PostgreSQL, before it stores anything: a list that cannot be
/// read refuses the request and leaves nothing behind, and the same keyed
/// request sends once the list is back.
async fn an_unreadable_list_refuses_a_send_before_anything_is_stored(b: Backend) {
    let app = TestApp::start(b).await;
    suppress(&app, "gone@example.test").await.expect(200, "");
    let tenant = app
        .db
        .count("SELECT tenant_id FROM domains WHERE name = 'acme.test'")
        .await;
    let recipients = ["ada@example.test".to_string(), "GONE@example.test".into()];
    let (domain, listed) = app
        .store
        .sending_domain_screened(tenant, "acme.test", &recipients)
        .await
        .unwrap()
        .expect("the domain");
    assert_eq!(
        (domain.key.name.as_str(), listed),
        ("acme.test", vec!["gone@example.test".to_string()])
    );

    app.db
        .execute("ALTER TABLE suppressions RENAME TO suppressions_away")
        .await;
    let refused = app.send_with_key("unreadable", &email()).await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    for table in ["emails", "idempotency_keys"] {
        let rows = app.db.count(&format!("SELECT count(*) FROM {table}")).await;
        assert_eq!(rows, 0, "{table}");
    }
    assert_eq!(app.outbox_count(), 0);

    app.db
        .execute("ALTER TABLE suppressions_away RENAME TO suppressions")
        .await;
    let sent = app.send_with_key("unreadable", &email()).await;
    sent.expect(200, "");
    assert_eq!(app.outbox_count(), 1);
}

on_both_backends!(
    an_unreadable_list_refuses_a_send_before_anything_is_stored,
    the_handoff_is_marked_only_when_no_recipient_is_listed,
    case_variants_are_refused_at_every_handoff,
    batch_routes_add_and_remove,
    every_endpoint_needs_full_access,
    one_address_is_one_entry,
    list_pages_with_a_cursor,
    suppressed_recipients_are_removed_at_send_time,
    a_scheduled_email_is_screened_when_it_is_due,
    the_other_tenant_list_is_not_ours,
);

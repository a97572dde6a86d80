//! What the database says, precisely: a duplicate is a conflict, a stored
//! value the code does not know is an error (never a silent default), and
//! the operator's commands report both. And what the write path does when a
//! write fails: the request gets 503, nothing of it is half written, the
//! requests written beside it are not harmed, and the service recovers.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Backend, TestApp, TestDb, call_router, email};
use mail_service::clock::rfc3339;
use mail_service::error::Error;
use mail_service::service::Settings;
use mail_service::store::StorageConfig;
use serde_json::{Value, json};

async fn a_duplicate_tenant_is_a_conflict(b: Backend) {
    let app = TestApp::start(b).await;
    app.service.create_tenant("globex", 120).await.unwrap();
    let err = app.service.create_tenant("globex", 120).await.unwrap_err();
    assert_eq!(
        err,
        Error::Conflict {
            what: "tenant `globex` already exists".into()
        }
    );
    // A key for an existing tenant joins it instead of failing.
    app.service
        .create_api_key(
            "globex",
            "app",
            mail_service::model::Permission::SendingAccess,
        )
        .await
        .unwrap();
    assert_eq!(app.service.list_api_keys("globex").await.unwrap().len(), 1);
    assert!(matches!(
        app.service.set_rate_limit("initech", 10).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        app.service.set_rate_limit("globex", 0).await,
        Err(Error::Validation { .. })
    ));
}

async fn the_cli_reports_conflicts_and_unknown_tenants(b: Backend) {
    let db = TestDb::new(b);
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_mail-service"))
            .args(args)
            .envs(db.env())
            .output()
            .expect("cli runs")
    };
    assert!(run(&["tenant", "create", "demo"]).status.success());
    let again = run(&["tenant", "create", "demo"]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&again.stderr).trim(),
        "error: tenant `demo` already exists"
    );
    let missing = run(&["key", "list", "--tenant", "nobody"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("tenant `nobody` not found"));
    let zero = run(&["tenant", "set-rate-limit", "demo", "0"]);
    assert_eq!(zero.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&zero.stderr).contains("rate_limit: must be at least 1"));
}

async fn an_unknown_stored_status_is_an_error(b: Backend) {
    let app = TestApp::start(b).await;
    let id = app.send(&email()).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    app.db
        .execute(&format!(
            "UPDATE emails SET status = 'teleported' WHERE id = {id}"
        ))
        .await;
    let resp = app.get(&format!("/emails/{id}")).await;
    resp.expect(500, "internal_server_error");
    assert!(
        resp.message().contains("unknown email status `teleported`"),
        "{}",
        resp.message()
    );
}

async fn a_broken_reservation_is_an_error_not_an_empty_one(b: Backend) {
    let app = TestApp::start(b).await;
    app.send_with_key("k-1", &email()).await.expect(200, "");
    app.send_with_key("k-2", &email()).await.expect(200, "");
    app.db
        .execute("UPDATE idempotency_keys SET email_ids = '[1,' WHERE idem_key = 'k-1'")
        .await;
    app.db
        .execute("UPDATE idempotency_keys SET outcome = '{\"kind\":\"teleported\"}' WHERE idem_key = 'k-2'")
        .await;
    for key in ["k-1", "k-2"] {
        let resp = app.send_with_key(key, &email()).await;
        resp.expect(500, "internal_server_error");
    }
    assert_eq!(app.outbox_count(), 2, "nothing was sent again");
}

/// A trigger that makes inserting an email with the subject `poison` fail,
/// as a full disk or a broken constraint would.
async fn poison_emails(db: &TestDb, backend: Backend) {
    match backend {
        Backend::Sqlite => {
            db.execute(
                "CREATE TRIGGER poison BEFORE INSERT ON emails WHEN NEW.subject = 'poison' \
                 BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
            )
            .await
        }
        Backend::Postgres => {
            db.execute(
                "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN IF NEW.subject = 'poison' THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$; \
                 CREATE TRIGGER poison BEFORE INSERT ON emails FOR EACH ROW EXECUTE FUNCTION poison()",
            )
            .await
        }
    }
}

async fn a_failing_write_leaves_nothing_half_written(b: Backend) {
    let app = TestApp::start(b).await;
    poison_emails(&app.db, b).await;
    let mut poison = email();
    poison["subject"] = json!("poison");
    // One batch whose second email cannot be stored, among sends that can:
    // on SQLite they are committed in the same groups.
    let batch = json!([email(), poison]);
    let mut requests = vec![app.spawn_post("/emails/batch", "poisoned", &batch)];
    for n in 0..20 {
        requests.push(app.spawn_post("/emails", &format!("fine-{n}"), &email()));
    }
    let mut answers = Vec::new();
    for r in requests {
        answers.push(r.await.unwrap());
    }
    answers[0].expect(503, "service_unavailable");
    for fine in &answers[1..] {
        fine.expect(200, "");
    }
    // Neither the key nor the batch's first email was kept.
    assert_eq!(
        app.db
            .count("SELECT count(*) FROM idempotency_keys WHERE idem_key = 'poisoned'")
            .await,
        0
    );
    assert_eq!(app.db.count("SELECT count(*) FROM emails").await, 20);
    assert_eq!(app.outbox_count(), 20);
    let log = app
        .get(&format!(
            "/logs/{}",
            answers[0].header("x-request-id").unwrap()
        ))
        .await;
    assert_eq!(log.body["status"], 503, "the failure is in the request log");

    // Once the fault is gone the same request goes through, once.
    app.db
        .execute(match b {
            Backend::Sqlite => "DROP TRIGGER poison",
            Backend::Postgres => "DROP TRIGGER poison ON emails",
        })
        .await;
    let retried = app
        .spawn_post("/emails/batch", "poisoned", &batch)
        .await
        .unwrap();
    retried.expect(200, "");
    assert_eq!(retried.body["data"].as_array().unwrap().len(), 2);
    assert_eq!(app.outbox_count(), 22);
}

/// A trigger that makes the commit of a transaction that inserted an email
/// with the subject `poison-commit` fail (a deferred foreign key checked at
/// COMMIT), as a disk error at commit would: every statement has run, the
/// commit is refused.
async fn poison_commits(db: &TestDb, backend: Backend) {
    match backend {
        Backend::Sqlite => {
            db.execute(
                "CREATE TABLE poison_parent (id INTEGER PRIMARY KEY); \
                 CREATE TABLE poison_child (parent INTEGER REFERENCES poison_parent(id) DEFERRABLE INITIALLY DEFERRED); \
                 CREATE TRIGGER poison_commit AFTER INSERT ON emails WHEN NEW.subject = 'poison-commit' \
                 BEGIN INSERT INTO poison_child VALUES (1); END",
            )
            .await
        }
        Backend::Postgres => {
            db.execute(
                "CREATE TABLE poison_parent (id BIGINT PRIMARY KEY); \
                 CREATE TABLE poison_child (parent BIGINT REFERENCES poison_parent(id) DEFERRABLE INITIALLY DEFERRED); \
                 CREATE FUNCTION poison_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN IF NEW.subject = 'poison-commit' THEN INSERT INTO poison_child VALUES (1); END IF; RETURN NEW; END $$; \
                 CREATE TRIGGER poison_commit AFTER INSERT ON emails FOR EACH ROW EXECUTE FUNCTION poison_commit()",
            )
            .await
        }
    }
}

/// The commit itself fails after every statement of a unit ran. On SQLite
/// that unit shares its transaction with the units committed beside it
/// (group commit): the whole group is refused and nothing of any of its
/// units is written, not even the statements that ran. A request whose
/// first units were in it gets 503 and keeps nothing; one whose handoff mark
/// was in it was not sent and is answered 502 `failed`; one whose outcome
/// was in it was sent and is answered 502 `unknown`. The requests in other
/// groups are not harmed, and the writer goes on. On PostgreSQL only the
/// poisoned request fails.
async fn a_failing_commit_is_503_for_its_group_and_nothing_is_written(b: Backend) {
    let app = TestApp::start(b).await;
    poison_commits(&app.db, b).await;
    let mut poison = email();
    poison["subject"] = json!("poison-commit");
    let mut requests = vec![app.spawn_post("/emails", "poisoned", &poison)];
    for n in 0..30 {
        requests.push(app.spawn_post("/emails", &format!("beside-{n}"), &email()));
    }
    let mut answers = Vec::new();
    for r in requests {
        answers.push(r.await.unwrap());
    }
    answers[0].expect(503, "service_unavailable");
    let (mut refused, mut unrecorded, mut not_begun) = (0, 0, 0);
    for (n, answer) in answers.iter().enumerate().skip(1) {
        let key = format!("beside-{}", n - 1);
        let kept = app
            .db
            .count(&format!(
                "SELECT count(*) FROM idempotency_keys WHERE idem_key = '{key}'"
            ))
            .await;
        match answer.status {
            200 => {
                let id = answer.body["id"].as_str().unwrap();
                let stored = app.get(&format!("/emails/{id}")).await;
                assert_eq!(stored.body["status"], "sent", "{key}");
                assert_eq!(kept, 1, "{key}");
            }
            // Its outcome shared the refused group: handed off but not
            // recorded, so it is `unknown` to the caller and never resent.
            502 if answer.body["status"] == "unknown" => {
                answer.expect(502, "handoff_failed");
                assert_eq!(kept, 1, "{key}");
                unrecorded += 1;
            }
            // Its handoff mark shared the refused group: the handoff never
            // began, so it was not sent, and it is recorded as failed.
            502 => {
                answer.expect(502, "handoff_failed");
                assert_eq!(answer.body["status"], "failed", "{key}");
                let id = answer.body["email_id"].as_str().unwrap();
                let stored = app.get(&format!("/emails/{id}")).await;
                assert_eq!(stored.body["status"], "failed", "{key}");
                assert_eq!(kept, 1, "{key}");
                not_begun += 1;
            }
            _ => {
                answer.expect(503, "service_unavailable");
                assert_eq!(kept, 0, "{key}: refused, so nothing of it is kept");
                refused += 1;
            }
        }
    }
    if b == Backend::Postgres {
        assert_eq!(
            refused + unrecorded + not_begun,
            0,
            "PostgreSQL commits each request on its own"
        );
    }
    let stored = answers.len() - 1 - refused;
    let sent = stored - not_begun;
    assert_eq!(
        app.db
            .count("SELECT count(*) FROM idempotency_keys WHERE idem_key = 'poisoned'")
            .await,
        0
    );
    assert_eq!(
        app.db.count("SELECT count(*) FROM emails").await,
        stored as i64
    );
    assert_eq!(app.db.count("SELECT count(*) FROM poison_child").await, 0);
    assert_eq!(app.outbox_count(), sent);
    eprintln!(
        "{b:?}: {refused} requests refused with the poisoned commit, {unrecorded} outcomes unrecorded, {not_begun} handoffs not begun, {sent} handed off"
    );

    // The writer goes on: the refused requests, retried under their keys,
    // each send once; the poisoned one once the fault is gone.
    for (n, answer) in answers.iter().enumerate().skip(1) {
        if answer.status == 503 {
            app.spawn_post("/emails", &format!("beside-{}", n - 1), &email())
                .await
                .unwrap()
                .expect(200, "");
        }
    }
    app.db
        .execute(match b {
            Backend::Sqlite => "DROP TRIGGER poison_commit",
            Backend::Postgres => "DROP TRIGGER poison_commit ON emails",
        })
        .await;
    app.spawn_post("/emails", "poisoned", &poison)
        .await
        .unwrap()
        .expect(200, "");
    // A request whose handoff never began keeps its recorded failure (its
    // key replays it); every other one was sent once.
    assert_eq!(app.outbox_count(), 31 - not_begun);
    assert_eq!(app.db.count("SELECT count(*) FROM emails").await, 31);
}

async fn a_locked_database_is_503_and_the_writer_recovers(b: Backend) {
    assert_eq!(b, Backend::Sqlite);
    let mut db = TestDb::new(b);
    // Another process (an operator's tool) holds the write lock longer than
    // the service waits for it.
    if let StorageConfig::Sqlite { busy_timeout, .. } = &mut db.storage {
        *busy_timeout = Duration::from_millis(200);
    }
    let app = TestApp::on(db, None, Settings::default()).await;
    let holder = app.db.hold_sqlite_write_lock().await;
    for n in 0..3 {
        app.send_with_key(&format!("locked-{n}"), &email())
            .await
            .expect(503, "service_unavailable");
    }
    drop(holder);

    // The writer goes on: the same keys now send, each once.
    for n in 0..3 {
        app.send_with_key(&format!("locked-{n}"), &email())
            .await
            .expect(200, "");
    }
    assert_eq!(app.outbox_count(), 3);
    assert_eq!(app.db.count("SELECT count(*) FROM emails").await, 3);
}

on_both_backends!(
    a_duplicate_tenant_is_a_conflict,
    the_cli_reports_conflicts_and_unknown_tenants,
    an_unknown_stored_status_is_an_error,
    a_broken_reservation_is_an_error_not_an_empty_one,
    a_failing_write_leaves_nothing_half_written,
    a_failing_commit_is_503_for_its_group_and_nothing_is_written,
);

/// Many clients at once, each sending batches of which every other item is
/// scheduled: a batch stores and counts its emails in one statement, and
/// the statements share the day's counter rows (`email_day_counts`). None
/// is refused (PostgreSQL once broke deadlocks between two of them and the
/// loser was answered 503), and every email is counted once.
async fn concurrent_batches_are_all_stored_and_counted_once(b: Backend) {
    const CLIENTS: usize = 16;
    const BATCHES: usize = 6;
    let app = TestApp::start(b).await;
    let later = rfc3339(app.service.now_ms() + 3_600_000);
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let (router, key, later) = (app.router.clone(), app.send_key.clone(), later.clone());
        clients.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for n in 0..BATCHES {
                // 60 to 100 items: each batch counts itself in all 32 rows
                // of the day (16 shards, accepted and scheduled), and
                // batches of different sizes aggregate them in different
                // orders.
                let size = 60 + (client * 7 + n * 13) % 41;
                let items: Vec<Value> = (0..size)
                    .map(|i| {
                        let mut item = email();
                        if i % 2 == 1 {
                            item["scheduled_at"] = json!(later);
                        }
                        item
                    })
                    .collect();
                let body = Value::Array(items).to_string().into_bytes();
                let resp = call_router(
                    router.clone(),
                    "POST",
                    "/emails/batch",
                    Some(&key),
                    &[],
                    Some(body),
                )
                .await;
                answers.push((resp.status, resp.body.to_string(), size));
            }
            answers
        }));
    }
    let mut stored = 0;
    for client in clients {
        for (status, body, size) in client.await.unwrap() {
            assert_eq!(status, 202, "a batch was refused: {body}");
            stored += size as i64;
        }
    }
    assert_eq!(app.db.count("SELECT count(*) FROM emails").await, stored);
    let counted = |status: &str| {
        format!("SELECT CAST(sum(count) AS BIGINT) FROM email_day_counts WHERE status = '{status}'")
    };
    // A batch with a scheduled item is stored whole as scheduled (its
    // other items are due at once, for the scheduler).
    assert_eq!(app.db.count(&counted("accepted")).await, stored);
    assert_eq!(app.db.count(&counted("scheduled")).await, stored);
}

/// The day's counter rows of tenant `acme` and `acme.test`, created at 0
/// for every status a batch counts and every shard, so that the triggers
/// update them (and a story can lock them) instead of inserting them.
async fn counter_rows_exist(app: &TestApp) {
    let day = app.service.now_ms() / 86_400_000;
    app.db
        .execute(&format!(
            "INSERT INTO email_day_counts (tenant_id, domain, day, status, shard, count) \
             SELECT t.id, 'acme.test', {day}, s.status, g, 0 FROM tenants t \
             CROSS JOIN (VALUES ('accepted'), ('scheduled')) AS s(status) \
             CROSS JOIN generate_series(0, 15) AS g WHERE t.name = 'acme'"
        ))
        .await;
}

/// A batch counts itself in the day's counter rows in one order, the
/// rows' key order (tenant, domain, day, status, shard), whatever order its
/// aggregate produced: two batches that share rows then queue on the first
/// one instead of each holding a row the other waits for (PostgreSQL's
/// deadlock, once answered 503). A probe trigger writes down each row as
/// it is updated.
async fn a_batch_takes_its_counter_rows_in_key_order(b: Backend) {
    assert_eq!(b, Backend::Postgres);
    let app = TestApp::start(b).await;
    counter_rows_exist(&app).await;
    app.db
        .execute(
            "CREATE TABLE counter_order (n BIGSERIAL PRIMARY KEY, status TEXT, shard BIGINT); \
             CREATE FUNCTION counter_order() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN INSERT INTO counter_order (status, shard) VALUES (NEW.status, NEW.shard); RETURN NEW; END $$; \
             CREATE TRIGGER counter_order BEFORE UPDATE ON email_day_counts \
             FOR EACH ROW EXECUTE FUNCTION counter_order()",
        )
        .await;
    let later = rfc3339(app.service.now_ms() + 3_600_000);
    for size in [40, 23, 77] {
        app.db.execute("DELETE FROM counter_order").await;
        let items: Vec<Value> = (0..size)
            .map(|i| {
                let mut item = email();
                if i % 2 == 1 {
                    item["scheduled_at"] = json!(later);
                }
                item
            })
            .collect();
        app.batch(&[], &Value::Array(items)).await.expect(202, "");
        let taken = app
            .db
            .text("SELECT string_agg(status || ':' || shard, ' ' ORDER BY n) FROM counter_order")
            .await;
        let mut in_key_order: Vec<(&str, i64)> = taken
            .split(' ')
            .map(|row| {
                let (status, shard) = row.split_once(':').unwrap();
                (status, shard.parse().unwrap())
            })
            .collect();
        assert_eq!(in_key_order.len(), 32, "{taken}");
        in_key_order.sort();
        let sorted: Vec<String> = in_key_order
            .iter()
            .map(|(status, shard)| format!("{status}:{shard}"))
            .collect();
        assert_eq!(taken, sorted.join(" "), "a batch of {size}");
    }
}

/// PostgreSQL breaks a deadlock by rolling back one of the transactions in
/// it (SQLSTATE 40P01). A unit rolled back that way is run again, and the
/// request that wrote it does not see the deadlock. Here another
/// connection holds the day's counter rows while a keyed send stores its
/// email (its statement reserves the key, then counts the email and waits
/// for the rows), then reserves the same key itself and so waits for the
/// send: a deadlock, and the send, which waited first, is rolled back.
/// The other connection gives up; the send's second run stores, counts and
/// answers once.
async fn a_unit_rolled_back_by_a_deadlock_is_run_again(b: Backend) {
    use sqlx::Connection;
    assert_eq!(b, Backend::Postgres);
    let app = TestApp::start(b).await;
    counter_rows_exist(&app).await;
    let mut other = app.db.pg_connection().await;
    let mut tx = other.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM email_day_counts FOR UPDATE")
        .execute(&mut *tx)
        .await
        .unwrap();

    let mut body = email();
    body["scheduled_at"] = json!(rfc3339(app.service.now_ms() + 3_600_000));
    let send = app.spawn_post("/emails", "deadlocked", &body);
    let waiting =
        "SELECT count(*) FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))";
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sqlx::query_scalar::<_, i64>(waiting)
        .fetch_one(&mut *tx)
        .await
        .unwrap()
        == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the send never waited for the counter rows"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The same key: this waits for the send's uncommitted reservation,
    // which waits for this transaction. PostgreSQL rolls the send back
    // (after `deadlock_timeout`) and this insert goes through.
    sqlx::query(
        "INSERT INTO idempotency_keys (tenant_id, scope, idem_key, body_hash, state, email_ids, lease_until, created_at) \
         SELECT id, 'POST /emails', 'deadlocked', 'other', 'in_flight', '[]', 0, 0 FROM tenants WHERE name = 'acme' \
         ON CONFLICT DO NOTHING",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();

    let answer = send.await.unwrap();
    answer.expect(200, "");
    assert_eq!(app.db.count("SELECT count(*) FROM emails").await, 1);
    let counted = |status: &str| {
        format!("SELECT CAST(sum(count) AS BIGINT) FROM email_day_counts WHERE status = '{status}'")
    };
    assert_eq!(app.db.count(&counted("accepted")).await, 1);
    assert_eq!(app.db.count(&counted("scheduled")).await, 1);
    let again = app
        .spawn_post("/emails", "deadlocked", &body)
        .await
        .unwrap();
    assert_eq!(again.body, answer.body, "the key replays the one answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_concurrent_batches_are_all_stored_and_counted_once() {
    concurrent_batches_are_all_stored_and_counted_once(Backend::Postgres).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_batch_takes_its_counter_rows_in_key_order() {
    a_batch_takes_its_counter_rows_in_key_order(Backend::Postgres).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_unit_rolled_back_by_a_deadlock_is_run_again() {
    a_unit_rolled_back_by_a_deadlock_is_run_again(Backend::Postgres).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_locked_database_is_503_and_the_writer_recovers() {
    a_locked_database_is_503_and_the_writer_recovers(Backend::Sqlite).await
}

//! Feedback mail: every sent email carries a return path that names it;
//! delivery reports and complaints sent back to it become events on the
//! email, analytics counts and suppressions. The corpus under
//! `tests/feedback/corpus` holds real-world-shaped reports (Postfix, Exim,
//! Gmail, Microsoft; multi-recipient; 8-bit; malformed), each with its
//! expected reading and outcome as insta snapshots. Forged reports change
//! nothing. The SMTP listener and the whole loop: `feedback_listener.rs`.

mod common;

use std::path::Path;
use std::time::Duration;

use common::feedback::{CORPUS, corpus, fill};
use common::{Backend, TestApp, email};
use mail_service::feedback::report;
use mail_service::model::Permission;
use mail_service::service::{FeedbackSource, Ingested};
use serde_json::{Value, json};

// ---- the parser, on its own ---------------------------------------------

#[test]
fn every_corpus_report_reads_as_its_snapshot_says() {
    let corpus = corpus();
    assert!(corpus.len() >= 12, "corpus: {}", corpus.len());
    for (name, raw) in corpus {
        let filled = fill(
            &raw,
            "bounces+382405310377107456-abcdefghijklmnop@send.acme.test",
            "<382405310377107456@acme.test>",
            &["ada@example.test", "bob@example.test"],
        );
        let read = match report::parse(&filled) {
            Ok(r) => json!({"report": r}),
            Err(e) => json!({"unreadable": e.0}),
        };
        insta::assert_json_snapshot!(format!("corpus_read__{name}"), read);
    }
}

/// A hang detector, not a benchmark: a message of at most 64 KiB that
/// takes longer than this to read means the parser is not linear.
const READ_BOUND: Duration = Duration::from_secs(10);

fn read_bounded(raw: &[u8]) {
    let started = std::time::Instant::now();
    let _ = report::parse(raw);
    assert!(
        started.elapsed() < READ_BOUND,
        "reading {} bytes took {:?}",
        raw.len(),
        started.elapsed()
    );
}

/// One edit of a corpus message: bytes replaced, removed or repeated.
#[derive(Debug, Clone)]
enum Edit {
    Replace(usize, Vec<u8>),
    Remove(usize, usize),
    Repeat(usize, usize, usize),
}

fn apply(raw: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = raw.to_vec();
    for edit in edits {
        if out.is_empty() {
            break;
        }
        match edit {
            Edit::Replace(at, bytes) => {
                let at = at % out.len();
                let end = (at + bytes.len()).min(out.len());
                out.splice(at..end, bytes.iter().copied());
            }
            Edit::Remove(at, len) => {
                let at = at % out.len();
                let end = (at + len).min(out.len());
                out.drain(at..end);
            }
            Edit::Repeat(at, len, times) => {
                let at = at % out.len();
                let end = (at + len).min(out.len());
                let piece = out[at..end].to_vec();
                for _ in 0..*times {
                    out.splice(at..at, piece.iter().copied());
                }
            }
        }
        out.truncate(64 * 1024);
    }
    out
}

fn edit() -> impl proptest::strategy::Strategy<Value = Edit> {
    use proptest::prelude::*;
    prop_oneof![
        (
            any::<usize>(),
            proptest::collection::vec(
                prop_oneof![
                    Just(b'\n'),
                    Just(b'-'),
                    Just(b':'),
                    Just(b';'),
                    Just(b'.'),
                    any::<u8>()
                ],
                1..16
            )
        )
            .prop_map(|(at, b)| Edit::Replace(at, b)),
        (any::<usize>(), 1usize..200).prop_map(|(at, len)| Edit::Remove(at, len)),
        (any::<usize>(), 1usize..80, 1usize..40).prop_map(|(at, len, n)| Edit::Repeat(at, len, n)),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Any bytes at all: an answer (a report or a reason), no panic.
    #[test]
    fn arbitrary_bytes_never_panic_the_reader(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4096)) {
        read_bounded(&raw);
    }

    /// Corpus messages with edits where parsers break (boundaries, field
    /// separators, line ends): no panic, read in bounded time.
    #[test]
    fn mutated_corpus_reports_never_panic_the_reader(
        pick in 0usize..64,
        edits in proptest::collection::vec(edit(), 1..8),
    ) {
        let corpus = corpus();
        let (_, raw) = &corpus[pick % corpus.len()];
        let filled = fill(raw, "bounces+1-aaaaaaaaaaaaaaaa@send.acme.test", "<1@acme.test>", &["ada@example.test", "bob@example.test"]);
        read_bounded(&apply(&filled, &edits));
    }
}

// ---- the service ---------------------------------------------------------

/// Sends one email to `to` and answers its id and the return path the
/// file transport wrote in front of it.
async fn sent(app: &TestApp, to: &[&str]) -> (String, String) {
    let mut body = email();
    body["to"] = json!(to);
    let r = app.send(&body).await;
    r.expect(200, "");
    let id = r.body["id"].as_str().unwrap().to_string();
    let text = std::fs::read_to_string(app.outbox.join(format!("{id}.eml"))).unwrap();
    let first = text.lines().next().unwrap();
    let return_path = first
        .strip_prefix("Return-Path: <")
        .and_then(|r| r.strip_suffix('>'))
        .unwrap_or_else(|| panic!("no return path in front of the message: {first}"))
        .to_string();
    (id, return_path)
}

fn stdin() -> FeedbackSource {
    FeedbackSource::Stdin { recipient: None }
}

/// An outcome with its generated ids replaced, for a snapshot.
fn redacted(outcome: &Ingested, email_id: &str) -> Value {
    let mut v = serde_json::to_value(outcome).unwrap();
    if let Some(o) = v.as_object_mut() {
        o.remove("report_id");
        if o.get("email_id").and_then(Value::as_str) == Some(email_id) {
            o.insert("email_id".into(), json!("{email}"));
        }
    }
    serde_json::from_str(&v.to_string().replace(email_id, "{email}")).unwrap()
}

async fn corpus_outcomes_are_as_their_snapshot_says(b: Backend) {
    let app = TestApp::start(b).await;
    let mut outcomes = serde_json::Map::new();
    for (name, raw) in corpus() {
        // Fresh recipients per report, so one report's suppressions do not
        // touch the next one's email.
        let domain = if name.contains("8bit") {
            "bücher.example"
        } else {
            "example.test"
        };
        let (first, second) = (format!("{name}@{domain}"), format!("{name}.2@{domain}"));
        let to: Vec<&str> = if name.contains("multi") {
            vec![&first, &second]
        } else {
            vec![&first]
        };
        let (id, return_path) = sent(&app, &to).await;
        let message_id = format!("<{id}@acme.test>");
        let filled = fill(&raw, &return_path, &message_id, &to);
        let outcome = app
            .service
            .ingest_feedback(&filled, stdin())
            .await
            .expect("stored");
        let shown = app.get(&format!("/emails/{id}")).await;
        shown.expect(200, "");
        outcomes.insert(
            name,
            json!({
                "outcome": redacted(&outcome, &id),
                "last_event": shown.body["last_event"],
                "events": shown.body["events"].as_array().unwrap().iter()
                    .map(|e| json!([e["type"], e["recipient"], e["status"]]))
                    .collect::<Vec<_>>(),
            }),
        );
    }
    insta::assert_json_snapshot!("corpus_outcomes", outcomes);
}

async fn a_bounce_suppresses_and_counts_once(b: Backend) {
    let app = TestApp::start(b).await;
    let (id, return_path) = sent(&app, &["ada@example.test"]).await;
    let bounce = fill(
        &std::fs::read(Path::new(CORPUS).join("postfix_bounce.eml")).unwrap(),
        &return_path,
        &format!("<{id}@acme.test>"),
        &["ada@example.test"],
    );
    let first = app.service.ingest_feedback(&bounce, stdin()).await.unwrap();
    assert!(matches!(first, Ingested::Applied { .. }), "{first:?}");
    // The same report again (a relay's retry): one report, one event.
    let again = app.service.ingest_feedback(&bounce, stdin()).await.unwrap();
    assert_eq!(again, Ingested::Duplicate);
    let shown = app.get(&format!("/emails/{id}")).await;
    assert_eq!(shown.body["status"], "sent");
    assert_eq!(shown.body["last_event"], "bounced");
    assert_eq!(shown.body["events"].as_array().unwrap().len(), 1);
    let entry = app.get("/suppressions/ada@example.test").await;
    entry.expect(200, "");
    let reason = entry.body["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(&format!("bounced: 5.1.1 for email {id} (550 5.1.1")),
        "{reason}"
    );
    // Resend's fields: what added it, and the email that bounced.
    assert_eq!(entry.body["origin"], "bounce");
    assert_eq!(entry.body["source_id"], id.as_str());
    // Analytics count the event once, beside the email's own statuses.
    let domain_id = app.get("/domains").await.body["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let totals = app.get(&format!("/analytics?domain_id={domain_id}")).await;
    assert_eq!(totals.body["totals"]["bounced"], 1, "{}", totals.body);
    assert_eq!(totals.body["totals"]["sent"], 1, "{}", totals.body);
    assert_eq!(totals.body["totals"]["delivered"], 0, "{}", totals.body);
    // The suppression is removable through the API, as any other.
    app.call(
        "DELETE",
        "/suppressions/ada@example.test",
        Some(&app.full_key),
        &[],
        None,
    )
    .await
    .expect(200, "");
}

async fn forged_reports_change_nothing(b: Backend) {
    let app = TestApp::start(b).await;
    // Another tenant with an email of its own.
    let (_, other_key) = app
        .service
        .create_api_key("globex", "app", Permission::SendingAccess)
        .await
        .unwrap();
    app.service
        .set_rate_limit("globex", 1_000_000)
        .await
        .unwrap();
    app.service
        .mark_domain_verified("globex", "globex.test")
        .await
        .unwrap();
    let theirs = app
        .post(
            &other_key,
            "/emails",
            json!({"from": "ops@globex.test", "to": "carol@example.test", "subject": "Hi", "text": "x"}),
        )
        .await;
    theirs.expect(200, "");
    let their_id = theirs.body["id"].as_str().unwrap().to_string();
    let (our_id, our_path) = sent(&app, &["ada@example.test"]).await;
    let template = std::fs::read(Path::new(CORPUS).join("postfix_bounce.eml")).unwrap();

    // Our token with their email id (and their domain): the tag does not match.
    for forged in [
        our_path.replace(&our_id, &their_id),
        our_path
            .replace(&our_id, &their_id)
            .replace("acme.test", "globex.test"),
    ] {
        let report = fill(
            &template,
            &forged,
            &format!("<{their_id}@globex.test>"),
            &["carol@example.test"],
        );
        let outcome = app.service.ingest_feedback(&report, stdin()).await.unwrap();
        let Ingested::Quarantined { reason, .. } = &outcome else {
            panic!("applied a forged report: {outcome:?}");
        };
        assert!(reason.contains("does not match"), "{reason}");
    }
    // A made-up tag on our own email.
    let tag = our_path
        .split('-')
        .nth(1)
        .unwrap()
        .split('@')
        .next()
        .unwrap();
    let made_up = our_path.replace(tag, "aaaaaaaaaaaaaaaa");
    let report = fill(&template, &made_up, "<x@acme.test>", &["ada@example.test"]);
    let outcome = app.service.ingest_feedback(&report, stdin()).await.unwrap();
    assert!(
        matches!(outcome, Ingested::Quarantined { .. }),
        "{outcome:?}"
    );
    // Our true return path, but about an address that is not a recipient
    // of the email: nobody is suppressed on the report's word.
    let report = fill(&template, &our_path, "<x@acme.test>", &["ceo@acme.test"]);
    let outcome = app.service.ingest_feedback(&report, stdin()).await.unwrap();
    let Ingested::Quarantined { reason, .. } = &outcome else {
        panic!("applied a report about a stranger: {outcome:?}");
    };
    assert!(reason.contains("names no recipient"), "{reason}");
    // Nor about a recipient the suppression list removed at the handoff:
    // the message never went there.
    app.post(
        &app.full_key,
        "/suppressions",
        json!({"email": "bob@example.test"}),
    )
    .await
    .expect(200, "");
    let (two_id, two_path) = sent(&app, &["ada@example.test", "bob@example.test"]).await;
    let report = fill(
        &template,
        &two_path,
        &format!("<{two_id}@acme.test>"),
        &["bob@example.test"],
    );
    let outcome = app.service.ingest_feedback(&report, stdin()).await.unwrap();
    assert!(
        matches!(outcome, Ingested::Quarantined { .. }),
        "{outcome:?}"
    );
    app.call(
        "DELETE",
        "/suppressions/bob@example.test",
        Some(&app.full_key),
        &[],
        None,
    )
    .await
    .expect(200, "");

    assert_eq!(
        app.db.count("SELECT count(*) FROM email_events").await,
        0,
        "no event recorded"
    );
    assert_eq!(app.db.count("SELECT count(*) FROM suppressions").await, 0);
    assert_eq!(
        app.db
            .count("SELECT count(*) FROM feedback_reports WHERE outcome = 'quarantined' AND raw_base64 IS NOT NULL")
            .await,
        5,
        "every forged report is kept, with its message"
    );
    for id in [&our_id, &their_id] {
        let status = app
            .db
            .text(&format!("SELECT status FROM emails WHERE id = {id}"))
            .await;
        assert_eq!(status, "sent");
    }
}

async fn a_report_about_an_email_not_sent_is_quarantined(b: Backend) {
    let app = TestApp::start(b).await;
    let mut body = email();
    body["scheduled_at"] = json!("2099-01-01T00:00:00Z");
    let far = app.send(&body).await;
    // Farther than 30 days ahead is refused; schedule within the window.
    assert_eq!(far.status, 422);
    let at = mail_service::clock::rfc3339(app.service.now_ms() + 3_600_000);
    body["scheduled_at"] = json!(at);
    let r = app.send(&body).await;
    r.expect(200, "");
    let id = r.body["id"].as_str().unwrap().to_string();
    // The service minted no return path for it yet; one made with the
    // service's own key would still be refused by the email's status, and a
    // guessed one by its tag.
    let guessed = format!("bounces+{id}-aaaaaaaaaaaaaaaa@send.acme.test");
    let report = fill(
        &std::fs::read(Path::new(CORPUS).join("postfix_bounce.eml")).unwrap(),
        &guessed,
        "<x@acme.test>",
        &["ada@example.test"],
    );
    let outcome = app.service.ingest_feedback(&report, stdin()).await.unwrap();
    assert!(
        matches!(outcome, Ingested::Quarantined { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        app.get(&format!("/emails/{id}")).await.body["last_event"],
        "scheduled"
    );
}

/// `mail-service feedback ingest < message.eml`, as a relay pipes it.
async fn the_operator_command_reads_one_report_from_stdin(b: Backend) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let app = TestApp::start(b).await;
    let (id, return_path) = sent(&app, &["ada@example.test"]).await;
    let delayed = fill(
        &std::fs::read(Path::new(CORPUS).join("postfix_delayed.eml")).unwrap(),
        &return_path,
        &format!("<{id}@acme.test>"),
        &["ada@example.test"],
    );
    let run = |args: &[&str], input: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mail-service"))
            .args(args)
            .envs(app.db.env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mail-service runs");
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, _) = run(&["feedback", "ingest", "--help"], b"");
    assert_eq!(code, Some(0));
    assert!(stdout.contains("--recipient"), "{stdout}");

    let (code, stdout, stderr) = run(
        &["feedback", "ingest", "--recipient", &return_path],
        &delayed,
    );
    assert_eq!(code, Some(0), "{stderr}");
    let outcome: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(outcome["outcome"], "applied", "{outcome}");
    assert_eq!(outcome["events"][0]["type"], "delivery_delayed");
    assert_eq!(
        app.get(&format!("/emails/{id}")).await.body["last_event"],
        "delivery_delayed"
    );
    // Again: the same report is one report.
    let (code, stdout, _) = run(&["feedback", "ingest"], &delayed);
    assert_eq!(
        (code, stdout.trim()),
        (Some(0), r#"{"outcome":"duplicate"}"#)
    );
    // Too large: refused with exit 1 (the relay keeps it), nothing stored.
    let (code, _, stderr) = run(&["feedback", "ingest", "--max-bytes", "1024"], &delayed);
    assert_eq!(code, Some(1));
    assert!(
        stderr.starts_with("error: the message is larger than 1024 bytes"),
        "{stderr}"
    );
    // Unreadable: kept in quarantine, listed for the operator.
    let (code, stdout, _) = run(
        &["feedback", "ingest"],
        b"Subject: hello\r\n\r\nnot a report",
    );
    assert_eq!(code, Some(0));
    assert!(stdout.contains(r#""outcome":"quarantined""#), "{stdout}");
    let (code, stdout, _) = run(&["feedback", "reports", "--outcome", "quarantined"], b"");
    assert_eq!(code, Some(0));
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(listed["counts"], json!({"applied": 1, "quarantined": 1}));
    let reports = listed["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 1, "{listed}");
    assert_eq!(reports[0]["source"], "stdin");
    assert!(
        reports[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("not a report")
    );
    assert!(
        reports[0].get("raw_base64").is_none(),
        "the message is not listed"
    );
    assert_eq!(
        app.db.count("SELECT count(*) FROM feedback_reports").await,
        2
    );
}

/// Exim's bounce for a mailbox that vanished after the relay took the
/// message may carry no `Diagnostic-Code`. No diagnostic text reads the
/// same in the email's events and in the `email.bounced` webhook: an empty
/// string (Resend's `bounce.message` is always a string).
async fn a_bounce_without_diagnostic_text_reads_the_same_in_events_and_webhooks(b: Backend) {
    let app = common::webhooks::local_app(b).await;
    app.post(
        &app.full_key,
        "/webhooks",
        json!({"endpoint": "http://127.0.0.1:9/hook", "events": ["email.bounced"]}),
    )
    .await
    .ok();
    let to = ["ada@example.test", "bob@example.test"];
    let (id, return_path) = sent(&app, &to).await;
    let exim = std::fs::read_to_string(Path::new(CORPUS).join("exim_multi_recipient.eml")).unwrap();
    let without: String = exim
        .lines()
        .filter(|line| !line.starts_with("Diagnostic-Code:"))
        .map(|line| format!("{line}\n"))
        .collect();
    let bounce = fill(
        without.as_bytes(),
        &return_path,
        &format!("<{id}@acme.test>"),
        &to,
    );
    let outcome = app.service.ingest_feedback(&bounce, stdin()).await.unwrap();
    assert!(matches!(outcome, Ingested::Applied { .. }), "{outcome:?}");

    let shown = app.get(&format!("/emails/{id}")).await;
    let events = shown.body["events"].as_array().unwrap();
    assert_eq!(events.len(), 2, "{}", shown.body);
    for event in events {
        assert_eq!(event["type"], "bounced");
        assert_eq!(event["diagnostic"], json!(""), "{event}");
    }
    let hooks = app
        .db
        .count("SELECT count(*) FROM webhook_events WHERE event_type = 'email.bounced'")
        .await;
    assert_eq!(hooks, 2);
    let data: Value = serde_json::from_str(
        &app.db
            .text("SELECT data FROM webhook_events WHERE event_type = 'email.bounced' ORDER BY id LIMIT 1")
            .await,
    )
    .unwrap();
    assert_eq!(data["bounce"]["message"], json!(""), "{data}");
    assert_eq!(data["bounce"]["message"], events[0]["diagnostic"]);
}

on_both_backends!(
    a_bounce_without_diagnostic_text_reads_the_same_in_events_and_webhooks,
    corpus_outcomes_are_as_their_snapshot_says,
    a_bounce_suppresses_and_counts_once,
    forged_reports_change_nothing,
    a_report_about_an_email_not_sent_is_quarantined,
    the_operator_command_reads_one_report_from_stdin,
);

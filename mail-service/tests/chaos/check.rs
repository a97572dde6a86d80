//! The chaos run's invariants, checked from the database, the relay's log
//! (the SMTP sink) and the webhook receiver's log, and the printed table.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, UNIX_EPOCH};

use mail_service::smtp_sink::{Received, SinkMode, SmtpSink};
use serde_json::Value;
use sqlx::Connection;

use super::common::receiver::Receiver;
use super::common::{TestDb, pg_url};
use super::traffic::{Kind, Record, Records};
use super::{Fault, RATE_LIMIT};

async fn connect(db: &TestDb) -> sqlx::PgConnection {
    let mut conn = sqlx::PgConnection::connect(&pg_url()).await.unwrap();
    let schema = db.schema.as_deref().expect("a PostgreSQL schema");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SET search_path TO {schema}")))
        .execute(&mut conn)
        .await
        .unwrap();
    conn
}

/// Waits until no email is `sending` or `scheduled` and no webhook event
/// is pending (a killed node's handoffs settle when their lease runs out),
/// at most `limit`. Whether it settled, and how long it took.
pub async fn settle(db: &TestDb, limit: Duration) -> (bool, Duration) {
    let started = Instant::now();
    loop {
        let open = db
            .count(
                "SELECT (SELECT count(*) FROM emails WHERE status IN ('sending', 'scheduled')) \
                 + (SELECT count(*) FROM webhook_events WHERE status = 'pending')",
            )
            .await;
        if open == 0 || started.elapsed() > limit {
            return (open == 0, started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How long after a fault ended a 503 is still put down to it (a cut
/// connection is noticed when it is next used).
pub const FAULT_AFTERMATH: Duration = Duration::from_secs(1);

/// 503 answers whose request overlapped no fault (from its start to
/// `FAULT_AFTERMATH` after its end), and those that did: the storage is
/// unavailable only when a fault makes it so, so the first must be 0.
fn count_unavailable(records: &[Record], during_faults: &[(Instant, Instant)]) -> (usize, usize) {
    let unavailable = records.iter().filter(|r| r.status == 503);
    let (inside, outside): (Vec<&Record>, Vec<&Record>) = unavailable.partition(|r| {
        during_faults
            .iter()
            .any(|(began, ended)| r.sent_at <= *ended && *began <= r.answered_at)
    });
    (outside.len(), inside.len())
}

/// One invariant: how many cases held, how many did not, the first that
/// did not.
#[derive(Default)]
struct Check {
    passed: usize,
    failed: usize,
    first_failure: Option<String>,
}

impl Check {
    fn record(&mut self, held: bool, case: impl FnOnce() -> String) {
        if held {
            self.passed += 1;
        } else {
            self.failed += 1;
            if self.first_failure.is_none() {
                self.first_failure = Some(case());
            }
        }
    }
}

pub struct Report {
    checks: Vec<(&'static str, Check)>,
    answers: BTreeMap<(Kind, String), usize>,
    /// 503 answers outside any injected fault, and during one.
    unavailable: (usize, usize),
}

fn id_of(received: &Received) -> Option<i64> {
    received
        .message_id()?
        .trim_matches(['<', '>'])
        .split('@')
        .next()?
        .parse()
        .ok()
}

fn subject_of(received: &Received) -> String {
    received
        .data
        .lines()
        .find_map(|line| line.strip_prefix("Subject: "))
        .unwrap_or_default()
        .to_string()
}

fn ms(at: std::time::SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn ids(value: &Value) -> Vec<i64> {
    match value {
        Value::Array(items) => items
            .iter()
            .filter_map(|i| i["id"].as_str()?.parse().ok())
            .collect(),
        _ => Vec::new(),
    }
}

impl Report {
    pub async fn gather(
        db: &TestDb,
        records: &Records,
        (sink, receiver): (&SmtpSink, &Receiver),
        stderr: &[String],
        during_faults: &[(Instant, Instant)],
        settled: (bool, Duration),
    ) -> Report {
        let mut conn = connect(db).await;
        let rows: Vec<(i64, String, Option<i64>, i64)> =
            sqlx::query_as("SELECT id, status, scheduled_at, created_at FROM emails")
                .fetch_all(&mut conn)
                .await
                .unwrap();
        let emails: HashMap<i64, String> =
            rows.iter().map(|(id, s, _, _)| (*id, s.clone())).collect();
        // (due, created) as stored, for the failure messages.
        let times: HashMap<i64, (Option<i64>, i64)> =
            rows.iter().map(|(id, _, at, c)| (*id, (*at, *c))).collect();
        let events: Vec<(i64, String, String)> =
            sqlx::query_as("SELECT id, event_type, status FROM webhook_events")
                .fetch_all(&mut conn)
                .await
                .unwrap();
        let windows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT created_at - created_at % 60000 AS w, count(*) FROM request_logs \
             WHERE tenant_id IS NOT NULL AND status <> 429 GROUP BY w",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let received = sink.received();
        let mut by_id: HashMap<i64, Vec<&Received>> = HashMap::new();
        let mut by_subject: HashMap<String, usize> = HashMap::new();
        for r in &received {
            by_id.entry(id_of(r).unwrap_or(-1)).or_default().push(r);
            *by_subject.entry(subject_of(r)).or_default() += 1;
        }
        let receipts = |id: i64| by_id.get(&id).map(Vec::as_slice).unwrap_or_default();
        let status = |id: i64| emails.get(&id).map(String::as_str).unwrap_or("missing");

        let records = records.all();
        let mut answers = BTreeMap::new();
        let mut sent = Check::default();
        let mut unknown = Check::default();
        let mut failed = Check::default();
        let mut scheduled = Check::default();
        let mut keys = Check::default();
        let (mut seen_sent, mut seen_unknown, mut seen_failed) =
            (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        let mut first_answer: HashMap<String, Value> = HashMap::new();
        for record in &records {
            let answer = match (record.status, record.body["status"].as_str()) {
                (0, _) => "no answer".to_string(),
                (502, Some(s)) => format!("502 {} ({s})", record.name()),
                (200, _) => "200".to_string(),
                (code, _) => format!("{code} {}", record.name()),
            };
            *answers.entry((record.request.kind, answer)).or_default() += 1;
            let request = &record.request;
            // Answered as sent: the ids of a 200, and the items a failed
            // batch sent before its failure.
            let mut answered_sent = Vec::new();
            match (record.status, request.kind) {
                (200, Kind::Scheduled) => {
                    let id: i64 = record.body["id"].as_str().unwrap_or("-1").parse().unwrap();
                    let at = request.scheduled_at.unwrap();
                    let got = receipts(id);
                    let once = match status(id) {
                        "sent" => got.len() == 1,
                        "unknown" | "failed" => got.len() <= 1,
                        _ => false,
                    };
                    let on_time = got.iter().all(|r| ms(r.mail_from_at) >= at);
                    scheduled.record(once && on_time, || {
                        format!(
                            "scheduled email {id} of key {:?} ({}): {} receipt(s), due {at} (stored as (due, created): {:?}), received (MAIL FROM, connected, subject) {:?}",
                            request.key,
                            status(id),
                            got.len(),
                            times.get(&id),
                            got.iter()
                                .map(|r| (ms(r.mail_from_at), ms(r.connected_at), subject_of(r)))
                                .collect::<Vec<_>>()
                        )
                    });
                }
                (200, Kind::Batch) => answered_sent.extend(ids(&record.body["data"])),
                (200, _) => answered_sent.extend(
                    record.body["id"]
                        .as_str()
                        .and_then(|s| s.parse::<i64>().ok()),
                ),
                (502, _) => {
                    answered_sent.extend(ids(&record.body["data"]));
                    let id: i64 = record.body["email_id"]
                        .as_str()
                        .unwrap_or("-1")
                        .parse()
                        .unwrap_or(-1);
                    let got = receipts(id);
                    if record.body["status"] == "unknown" {
                        if seen_unknown.insert(id) {
                            let held = matches!(status(id), "unknown") && got.len() <= 1;
                            unknown.record(held, || {
                                format!(
                                    "email {id} answered unknown is {} with {} receipt(s)",
                                    status(id),
                                    got.len()
                                )
                            });
                        }
                    } else if seen_failed.insert(id) {
                        let held = status(id) == "failed"
                            && got.len() <= 1
                            && got.iter().all(|r| r.mode != SinkMode::Accept);
                        failed.record(held, || {
                            format!(
                                "email {id} answered failed is {} with {} receipt(s)",
                                status(id),
                                got.len()
                            )
                        });
                    }
                }
                _ => {}
            }
            for id in answered_sent {
                if seen_sent.insert(id) {
                    let got = receipts(id);
                    let held =
                        status(id) == "sent" && got.len() == 1 && got[0].mode == SinkMode::Accept;
                    sent.record(held, || {
                        format!(
                            "email {id} answered sent is {} with {} receipt(s)",
                            status(id),
                            got.len()
                        )
                    });
                }
            }
            // Every definite answer for a key is the first one, replayed.
            if let Some(key) = &request.key
                && matches!(record.status, 200 | 502)
            {
                let first = first_answer
                    .entry(key.clone())
                    .or_insert_with(|| record.body.clone());
                let same = |v: &Value| {
                    let mut v = v.clone();
                    if let Some(o) = v.as_object_mut() {
                        o.remove("request_id");
                    }
                    v
                };
                keys.record(same(first) == same(&record.body), || {
                    format!("key {key}: answered {} then {}", first, record.body)
                });
            }
        }
        for (subject, count) in &by_subject {
            keys.record(*count == 1, || {
                format!("the relay received `{subject}` {count} times")
            });
        }
        let mut rows = Check::default();
        for r in &received {
            let id = id_of(r).unwrap_or(-1);
            rows.record(emails.contains_key(&id), || {
                format!("the relay received {:?}, which has no row", r.message_id())
            });
        }
        let deliveries = receiver.seen();
        let mut webhooks = Check::default();
        let mut ids_of_event: HashMap<(String, String), BTreeSet<String>> = HashMap::new();
        for d in &deliveries {
            let body = d.json();
            let key = (
                body["type"].as_str().unwrap_or_default().to_string(),
                body["data"]["email_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
            ids_of_event.entry(key).or_default().insert(d.id.clone());
            webhooks.record(d.verified.first() == Some(&true), || {
                format!("delivery {} has no valid signature", d.id)
            });
        }
        for (event, ids) in &ids_of_event {
            webhooks.record(ids.len() == 1, || {
                format!("event {event:?} was delivered under several ids: {ids:?}")
            });
        }
        for (id, event_type, state) in &events {
            let msg = format!("msg_{id}");
            let delivered = deliveries.iter().any(|d| d.id == msg);
            webhooks.record(delivered, || {
                format!("{event_type} event {id} ({state}) was never delivered")
            });
        }
        let mut limit = Check::default();
        for (window, count) in &windows {
            limit.record(*count <= RATE_LIMIT, || {
                format!("{count} requests passed in the window at {window} (limit {RATE_LIMIT})")
            });
        }
        let mut panics = Check::default();
        panics.record(!stderr.iter().any(|l| l.contains("panicked")), || {
            stderr
                .iter()
                .find(|l| l.contains("panicked"))
                .cloned()
                .unwrap_or_default()
        });
        let unavailable = count_unavailable(&records, during_faults);
        let mut unavailable_check = Check::default();
        unavailable_check.record(unavailable.0 == 0, || {
            format!(
                "{} request(s) answered 503 outside any injected fault",
                unavailable.0
            )
        });
        let mut settled_check = Check::default();
        settled_check.record(settled.0, || {
            format!(
                "emails still sending or scheduled, or webhook events pending, after {:?}",
                settled.1
            )
        });
        Report {
            checks: vec![
                ("answered sent: stored sent, relayed exactly once", sent),
                ("answered unknown: stays unknown, never resent", unknown),
                ("answered failed: stored failed, never accepted", failed),
                ("every relayed message has a row", rows),
                ("one send per request body; keys replay one answer", keys),
                ("scheduled: sent once, not before its time", scheduled),
                ("webhooks: delivered, signed, one id per event", webhooks),
                ("rate limit held across both nodes", limit),
                ("no node panicked", panics),
                ("everything settled after the run", settled_check),
                ("no 503 outside injected faults", unavailable_check),
            ],
            answers,
            unavailable,
        }
    }

    pub fn failed(&self) -> usize {
        self.checks.iter().map(|(_, c)| c.failed).sum()
    }

    pub fn print(
        &self,
        faults: &BTreeMap<Fault, usize>,
        traffic_for: Duration,
        settled: (bool, Duration),
    ) {
        println!(
            "\nchaos: {:.0} s of traffic, settled in {:.0} s",
            traffic_for.as_secs_f64(),
            settled.1.as_secs_f64()
        );
        println!("\n{:<44} {:>8}", "fault injected", "count");
        for (fault, count) in faults {
            let name = match fault {
                Fault::KillNode => "node SIGKILLed and restarted",
                Fault::CutDbConnections => "nodes' DB connections cut (pg_terminate_backend)",
                Fault::SmtpRefuses => "relay refuses (550) for 0.8 s",
                Fault::SmtpStalls => "relay stalls after DATA for 0.8 s",
                Fault::SmtpDropsAfterData => "relay drops after DATA for 0.8 s",
                Fault::Webhook500 => "webhook receiver answers 500 (x4)",
                Fault::WebhookTimeout => "webhook receiver times out (x2)",
            };
            println!("{name:<44} {count:>8}");
        }
        println!("\n{:<10} {:<52} {:>8}", "request", "answer", "count");
        for ((kind, answer), count) in &self.answers {
            println!(
                "{:<10} {answer:<52} {count:>8}",
                format!("{kind:?}").to_lowercase()
            );
        }
        println!(
            "\n503 answers outside injected faults: {}\n503 answers during injected faults: {}",
            self.unavailable.0, self.unavailable.1
        );
        println!("\n{:<56} {:>7} {:>7}", "invariant", "passed", "failed");
        for (name, check) in &self.checks {
            println!("{name:<56} {:>7} {:>7}", check.passed, check.failed);
            if let Some(first) = &check.first_failure {
                println!("    first failure: {first}");
            }
        }
    }
}

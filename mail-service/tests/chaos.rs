//! Faults under load (issue 36): two `mail-service serve` nodes on one
//! PostgreSQL database behind this test's own round robin, clients sending
//! single, batch, scheduled and keyed mail (and retrying with the same key),
//! while a fault loop kills a node (SIGKILL, then a restart), cuts the
//! nodes' database connections (`pg_terminate_backend`), makes the SMTP
//! relay refuse, stall or drop the connection after the data, and makes the
//! webhook receiver answer 500 or time out. After the run every invariant
//! is checked from the database, the relay's log and the receiver's log,
//! not from the nodes' answers, and a table is printed. A 503 is expected
//! only while a fault makes the storage unavailable: the table counts the
//! 503 answers outside injected faults, and more than 0 fails the run.
//!
//! `cargo xtask chaos --minutes N` runs it for N minutes (`CHAOS_SECS`); the
//! ordinary suite for 20 s (about a minute with the settling).

mod common;

#[path = "chaos/check.rs"]
mod check;
#[path = "chaos/traffic.rs"]
mod traffic;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::receiver::{Answer, Receiver};
use common::{Backend, ServerProcess, TestDb};
use mail_service::smtp_sink::{SinkMode, SmtpSink};
use serde_json::json;

/// The tenant's limit: reached by the clients in bursts, so the check
/// that both nodes held it together means something.
pub const RATE_LIMIT: i64 = 3_000;
/// A fault every this often.
const FAULT_EVERY: Duration = Duration::from_secs(3);

/// The nodes behind the round robin: their base URLs (a restarted node
/// listens on a new port) and the stderr of every process that ran.
pub struct Nodes {
    pub bases: Mutex<Vec<String>>,
    processes: Mutex<Vec<ServerProcess>>,
    stderr: Mutex<Vec<String>>,
    env: Vec<(String, String)>,
}

impl Nodes {
    fn start(env: Vec<(String, String)>, count: usize) -> Nodes {
        let processes: Vec<ServerProcess> = (0..count)
            .map(|_| ServerProcess::start(&env, &[]))
            .collect();
        Nodes {
            bases: Mutex::new(processes.iter().map(|p| p.base.clone()).collect()),
            processes: Mutex::new(processes),
            stderr: Mutex::default(),
            env,
        }
    }

    /// The base URL of the `n`th request's node.
    pub fn pick(&self, n: usize) -> String {
        let bases = self.bases.lock().unwrap();
        bases[n % bases.len()].clone()
    }

    /// SIGKILL of node `i`, then a new process in its place.
    fn kill_and_restart(&self, i: usize) {
        let mut old = {
            let mut processes = self.processes.lock().unwrap();
            let fresh = ServerProcess::start(&self.env, &[]);
            self.bases.lock().unwrap()[i] = fresh.base.clone();
            std::mem::replace(&mut processes[i], fresh)
        };
        old.kill();
        self.stderr.lock().unwrap().extend(old.stderr_lines());
    }

    /// Every stderr line of every process so far.
    fn stderr(&self) -> Vec<String> {
        let mut lines = self.stderr.lock().unwrap().clone();
        for p in self.processes.lock().unwrap().iter() {
            lines.extend(p.stderr_lines());
        }
        lines
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillNode,
    CutDbConnections,
    SmtpRefuses,
    SmtpStalls,
    SmtpDropsAfterData,
    Webhook500,
    WebhookTimeout,
}

const FAULTS: [Fault; 7] = [
    Fault::KillNode,
    Fault::SmtpRefuses,
    Fault::CutDbConnections,
    Fault::Webhook500,
    Fault::KillNode,
    Fault::SmtpStalls,
    Fault::WebhookTimeout,
];

fn run_for() -> Duration {
    let secs = std::env::var("CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    Duration::from_secs(secs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_on_postgres_under_faults_lose_nothing_and_send_nothing_twice() {
    let run_for = run_for();
    let sink = SmtpSink::start(0, SinkMode::Accept).await.unwrap();
    let receiver = Receiver::start().await;
    let db = TestDb::new(Backend::Postgres);
    let (send_key, full_key) = common::provision_keys(&db).await;
    db.execute(&format!(
        "UPDATE tenants SET rate_limit_per_minute = {RATE_LIMIT}"
    ))
    .await;
    let schema = db.schema.clone().unwrap();
    // The nodes' connections carry a name of their own, so the fault cuts
    // theirs and no other test's.
    let app_name = format!("chaos_{schema}");
    let mut env: Vec<(String, String)> = db
        .env()
        .into_iter()
        .map(|(k, v)| match k.as_str() {
            "DATABASE_URL" => (k, format!("{v}?application_name={app_name}")),
            _ => (k, v),
        })
        .collect();
    for (k, v) in common::smtp_env(sink.port()) {
        env.push((k.into(), v));
    }
    for (k, v) in [
        ("MAIL_HANDOFF_LEASE_MS", "3000"),
        ("MAIL_SMTP_TIMEOUT_MS", "2000"),
        ("MAIL_SWEEP_INTERVAL_MS", "1000"),
        ("MAIL_SCHEDULER_POLL_MS", "200"),
        ("MAIL_WEBHOOK_POLL_MS", "100"),
        ("MAIL_WEBHOOK_TIMEOUT_MS", "1000"),
        (
            "MAIL_WEBHOOK_RETRY_SCHEDULE_MS",
            "300,600,1000,2000,3000,5000,8000,10000",
        ),
        ("MAIL_WEBHOOK_ALLOW_PRIVATE_ADDRESSES", "true"),
        ("MAIL_WEBHOOK_ALLOW_HTTP_LOOPBACK", "true"),
    ] {
        env.push((k.into(), v.into()));
    }
    let nodes = Arc::new(Nodes::start(env, 2));
    let client = common::http_client();
    let hook = client
        .post(format!("{}/webhooks", nodes.pick(0)))
        .bearer_auth(&full_key)
        .json(&json!({"endpoint": receiver.url(), "events": ["email.sent", "email.failed"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(hook.status().as_u16(), 200, "webhook registered");
    let hook: serde_json::Value = hook.json().await.unwrap();
    receiver.trust(hook["signing_secret"].as_str().unwrap());

    eprintln!(
        "chaos: two nodes on PostgreSQL schema {schema}, {} s of traffic and faults",
        run_for.as_secs()
    );
    let started = Instant::now();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let records = traffic::Records::default();
    let clients: Vec<_> = (0..6)
        .map(|c| {
            let client = traffic::Client {
                id: c,
                http: client.clone(),
                key: send_key.clone(),
                nodes: nodes.clone(),
                records: records.clone(),
                stop: stop.clone(),
            };
            tokio::spawn(client.run())
        })
        .collect();

    let mut injected: BTreeMap<Fault, usize> = BTreeMap::new();
    let mut during_faults: Vec<(Instant, Instant)> = Vec::new();
    let mut kills = 0_usize;
    for (n, fault) in FAULTS.iter().cycle().enumerate() {
        if started.elapsed() + FAULT_EVERY > run_for {
            break;
        }
        tokio::time::sleep(FAULT_EVERY).await;
        let fault = match fault {
            // Every other stall of the relay is a drop after the data.
            Fault::SmtpStalls if n % 2 == 0 => Fault::SmtpDropsAfterData,
            other => *other,
        };
        *injected.entry(fault).or_default() += 1;
        let fault_began = Instant::now();
        match fault {
            Fault::KillNode => {
                let nodes = nodes.clone();
                kills += 1;
                tokio::task::spawn_blocking(move || nodes.kill_and_restart(kills % 2))
                    .await
                    .unwrap();
            }
            Fault::CutDbConnections => {
                db.execute(&format!(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{app_name}'"
                ))
                .await;
            }
            Fault::SmtpRefuses | Fault::SmtpStalls | Fault::SmtpDropsAfterData => {
                sink.set_mode(match fault {
                    Fault::SmtpRefuses => SinkMode::Reject,
                    Fault::SmtpStalls => SinkMode::Stall,
                    _ => SinkMode::DropAfterData,
                });
                tokio::time::sleep(Duration::from_millis(800)).await;
                sink.set_mode(SinkMode::Accept);
            }
            Fault::Webhook500 => receiver.plan(&vec![Answer::Status(500); 4]),
            Fault::WebhookTimeout => {
                receiver.plan(&vec![Answer::Slow(Duration::from_millis(1500)); 2])
            }
        }
        during_faults.push((fault_began, Instant::now() + check::FAULT_AFTERMATH));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let traffic_for = started.elapsed();
    sink.set_mode(SinkMode::Accept);

    // Settling: a killed node's handoffs are settled by the sweeper when
    // their lease (3 s + 30 s) runs out; scheduled mail comes due; every
    // webhook event is delivered.
    let settled = check::settle(&db, Duration::from_secs(120)).await;
    let report = check::Report::gather(
        &db,
        &records,
        (&sink, &receiver),
        &nodes.stderr(),
        &during_faults,
        settled,
    )
    .await;
    report.print(&injected, traffic_for, settled);
    assert!(
        report.failed() == 0,
        "{} invariant check(s) failed (see the table above)",
        report.failed()
    );
}

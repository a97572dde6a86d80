//! Load benchmark: `mail-service serve` runs as its own process on loopback
//! with the file transport; this process loads it with concurrent
//! `POST /emails` and prints accepted sends per second and the p50/p99
//! latency, on SQLite and on PostgreSQL. In the same run, in slices
//! interleaved with the API load, it measures the raw rate of the same
//! database doing the row writes one accepted send costs (request log insert
//! and update, rate-window upsert, email insert with its handoff mark, and its
//! outcome) in the units the service writes them in, through the same store (so on SQLite through the
//! same group-committing writer), with the API's number of writers and with
//! 4, and prints the ratio of the API's rate to the best raw rate. In the
//! sixth of ten rounds `mail-service secrets rotate` re-seals the stored
//! secrets (the DKIM key every send signs with among them) under a new
//! master key while the metrics-off server's API load runs, so the server
//! goes on with a key it meets for the first time; the API's rate in the
//! round before the rotation's and in the round after it are printed side
//! by side, next to the same comparison over the same distance without a
//! rotation (twice: before and after it), because the rate drifts as the
//! database grows; the ratio corrected by that drift is the rotation's
//! effect (the rotation's own round, whose process shares the machine, is
//! reported apart).
//!
//! Where the CPU goes: around the metrics-off API slices and the raw slices
//! with the API's number of writers, it reads the busy CPU time of the whole
//! machine and, within it, the server's, PostgreSQL's processes' and this
//! process's, and prints each per send: on a machine the load saturates,
//! the ratio of the two rates is the ratio of these costs.
//!
//! Metrics on and off in the same run: a second server on the same
//! database runs with the operator listener (`MAIL_METRICS_LISTEN`, so the
//! Prometheus recorder records every request, send and commit); its API
//! slices alternate with the first's (off, on, then on, off), and the ratio
//! of its rate to the first's is printed (the warm-up and rotation rounds
//! left out).
//!
//! `cargo bench -p mail-service --bench send_load`
//! Environment: MAIL_BENCH_SECONDS (default 15, per load kind), MAIL_BENCH_CONCURRENCY
//! (default 16), MAIL_BENCH_ONLY (`sqlite` or `postgres`), MAIL_DB_MAX_CONNECTIONS
//! (the PostgreSQL pool, default 10 as the service's), MAIL_TEST_DATABASE_URL
//! (default postgres://postgres@127.0.0.1:5432/test), MAIL_BENCH_OUTBOX_IN
//! (the parent of the outbox directory; default /dev/shm where it exists,
//! see `main`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mail_service::model::{EmailStatus, Permission, Principal};
use mail_service::service::MailService;
use mail_service::store::{EmailUpdate, NewEmail, NewLog, RateHit, Started, StorageConfig, Store};

mod support;
use support::RATE_LIMIT;
use support::load::{Samples, load_api};

/// CPU seconds spent during some slices: the whole machine's and the
/// mail-service server's, the database's (PostgreSQL's processes) and this
/// process's (the load generator, or the raw writers) within it.
#[derive(Debug, Default, Clone, Copy)]
struct Cpu {
    machine: f64,
    server: f64,
    database: f64,
    this: f64,
}

impl Cpu {
    fn now(server: u32) -> Cpu {
        Cpu {
            machine: soak_fixture::machine_cpu_seconds(),
            server: soak_fixture::cpu_seconds(server),
            database: soak_fixture::cpu_seconds_of_processes("postgres"),
            this: soak_fixture::cpu_seconds(std::process::id()),
        }
    }

    /// Adds what was spent since `before`.
    fn add_since(&mut self, before: Cpu, server: u32) {
        let now = Cpu::now(server);
        self.machine += now.machine - before.machine;
        self.server += now.server - before.server;
        self.database += now.database - before.database;
        self.this += now.this - before.this;
    }

    /// Per send, in µs: the machine's, then the server's, PostgreSQL's
    /// (when the database is a server of its own) and this process's.
    fn per_send(&self, sends: usize, database_server: bool) -> String {
        let per = |s: f64| s * 1e6 / sends.max(1) as f64;
        let database = if database_server {
            format!(", database {:.0}", per(self.database))
        } else {
            String::new()
        };
        format!(
            "{:.0} µs (mail-service {:.0}{database}, load process {:.0})",
            per(self.machine),
            per(self.server),
            per(self.this)
        )
    }
}

/// The row writes of one accepted `POST /emails`, in the units the service
/// writes them in: the request log and the rate count, the email with the
/// mark that its handoff began, its outcome, the log's completion.
async fn raw_send(store: &Store, email: &NewEmail, log: &NewLog, now: i64) {
    let hit = RateHit {
        tenant_id: email.tenant_id,
        window_start: now - now % 60_000,
    };
    // The service re-checks the principal it remembers in the same unit.
    let principal = Principal {
        tenant_id: email.tenant_id,
        api_key_id: email.api_key_id,
        permission: Permission::SendingAccess,
        rate_limit_per_minute: RATE_LIMIT,
    };
    let started = store
        .request_started(log, Some(hit), Some(&principal))
        .await
        .expect("log and rate");
    assert!(matches!(started, Started::Counted(Some(_))));
    // Stored with its handoff marked as begun, as the service stores a send
    // whose recipients are clear.
    store
        .reserve_and_store(
            None,
            std::slice::from_ref(email),
            (now, now + 60_000),
            None,
            true,
        )
        .await
        .expect("email and its handoff mark");
    let sent = EmailUpdate {
        id: email.id,
        status: EmailStatus::Sent,
        detail: None,
    };
    store
        .finish_handoff(&[sent], None, now)
        .await
        .expect("outcome");
    store
        .finish_log(log.id, 200, 1)
        .await
        .expect("log finished");
}

async fn load_raw(
    store: &Store,
    service: &MailService,
    tenant: i64,
    key_id: i64,
    seconds: u64,
    concurrency: usize,
) -> (Vec<Duration>, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (store, service, stop) = (store.clone(), service.clone(), stop.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let now = service.now_ms();
                    let id = service.next_id();
                    let email = NewEmail {
                        id,
                        tenant_id: tenant,
                        api_key_id: key_id,
                        from_addr: "Bench <bench@example.com>".into(),
                        from_domain: "example.com".into(),
                        to_addrs: "[\"rcpt@example.com\"]".into(),
                        subject: "Load test".into(),
                        payload: r#"{"from":"Bench <bench@example.com>","subject":"Load test","text":"Hello from the benchmark","to":["rcpt@example.com"]}"#.into(),
                        message_id: format!("<{id}@example.com>"),
                        scheduled_at: None,
                        batch_id: None,
                        request_id: None,
                    };
                    let log = NewLog {
                        id: service.next_id(),
                        tenant_id: Some(tenant),
                        api_key_id: Some(key_id),
                        method: "POST".into(),
                        path: "/emails".into(),
                        user_agent: None,
                        created_at: now,
                    };
                    raw_send(&store, &email, &log, now).await;
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.unwrap());
    }
    (all, started.elapsed().as_secs_f64())
}

/// Starts `mail-service secrets rotate` to a new key written to
/// `new_key_file`, on the database `env` names (the server's environment),
/// while the server serves.
fn rotate(env: &[(String, String)], new_key_file: &std::path::Path) -> std::process::Child {
    secrets_at_rest::MasterKey::create_file(new_key_file).expect("new master key file");
    std::process::Command::new(env!("CARGO_BIN_EXE_mail-service"))
        .args(["secrets", "rotate", "--settle-ms", "200", "--new-key-file"])
        .arg(new_key_file)
        .env("RUST_LOG", "warn")
        .envs(env.iter().cloned())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the rotation starts")
}

/// The rounds of a run, in order. Each round has one API slice per server
/// and the raw slices; the rotation runs during the metrics-off server's
/// slice of its round. Between `ControlFirst` and `ControlBefore`, and
/// between `ControlAfter` and `ControlLast`, is one round without a
/// rotation, as `Before` and `After` have the rotation's round between
/// them: the control pairs measure how much the rate moves over that
/// distance as the databases grow, once before and once after the
/// rotation, so a steady drift cancels in the corrected ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Round {
    WarmUp,
    ControlFirst,
    ControlGap,
    ControlBefore,
    Before,
    Rotation,
    After,
    ControlAfter,
    ControlGapAfter,
    ControlLast,
}

impl Round {
    const ORDER: [Round; 10] = [
        Round::WarmUp,
        Round::ControlFirst,
        Round::ControlGap,
        Round::ControlBefore,
        Round::Before,
        Round::Rotation,
        Round::After,
        Round::ControlAfter,
        Round::ControlGapAfter,
        Round::ControlLast,
    ];
}

async fn run(
    label: &str,
    storage: StorageConfig,
    env: Vec<(String, String)>,
    dir: &std::path::Path,
    seconds: u64,
    concurrency: usize,
) {
    let Some((store, service, record, key)) =
        support::bench_tenant(label, &storage, dir, "load").await
    else {
        return;
    };
    let (mut child, base) = support::serve(&env);
    let mut with_metrics = env.clone();
    with_metrics.push(("MAIL_METRICS_LISTEN".into(), "127.0.0.1:0".into()));
    let (mut child_on, base_on, metrics) = support::serve_noting_metrics(&with_metrics);
    // Interleave short slices of API load and raw load so both see the same
    // background load on a shared machine; the raw side runs with the API's
    // number of writers and with 4 (more writers than the database likes
    // only adds contention on hot rows), and the best raw rate is the
    // storage's limit. The API with metrics on and off alternate which
    // goes first. The rounds (see `Round`) warm the servers up, then
    // measure the master key rotation against a control: the metrics-off
    // server's rate in the round before the rotation's against the round
    // after it, and the same two-round distance twice without a rotation
    // (before and after it), whose ratio is the drift of a growing
    // database; the metrics comparison leaves the warm-up and the
    // rotation's own round out.
    let rounds = Round::ORDER.len() as u64;
    let slice = (seconds / rounds).max(1);
    let mut api = Samples::default();
    let mut api_on = Samples::default();
    let mut raw_same = Samples::default();
    let mut raw_four = Samples::default();
    let (mut api_cpu, mut raw_cpu, mut raw_counted) = (Cpu::default(), Cpu::default(), 0);
    let server_pid = child.id();
    let mut by_round = std::collections::HashMap::new();
    let mut rotation = None;
    let mut errors = 0;
    for (index, round) in Round::ORDER.into_iter().enumerate() {
        for on in [index % 2 == 1, index % 2 == 0] {
            let target = if on { &base_on } else { &base };
            let child = (round == Round::Rotation && !on)
                .then(|| rotate(&env, &dir.join(format!("{label}-rotated.key"))));
            let cpu_before = Cpu::now(server_pid);
            let (latencies, elapsed, e) =
                load_api(target, &key, "rcpt@example.com", slice, concurrency).await;
            errors += e;
            if let Some(child) = child {
                let out = child.wait_with_output().expect("the rotation ends");
                let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
                assert!(out.status.success(), "secrets rotate failed: {said}");
                rotation = Some((latencies.len() as f64 / elapsed, e, said));
                continue;
            }
            if matches!(round, Round::WarmUp | Round::Rotation) {
                continue;
            }
            if on {
                api_on.add(latencies, elapsed);
                continue;
            }
            by_round.insert(round, latencies.len() as f64 / elapsed);
            api_cpu.add_since(cpu_before, server_pid);
            api.add(latencies, elapsed);
        }
        let cpu_before = Cpu::now(server_pid);
        let (latencies, elapsed) = load_raw(
            &store,
            &service,
            record.tenant_id,
            record.id,
            slice,
            concurrency,
        )
        .await;
        if !matches!(round, Round::WarmUp | Round::Rotation) {
            raw_cpu.add_since(cpu_before, server_pid);
            raw_counted += latencies.len();
        }
        raw_same.add(latencies, elapsed);
        let (latencies, elapsed) =
            load_raw(&store, &service, record.tenant_id, record.id, slice, 4).await;
        raw_four.add(latencies, elapsed);
    }
    // The metrics-on server did record (its counter of accepted emails).
    let exposition = reqwest::get(format!(
        "http://{}/metrics",
        metrics.expect("the metrics listener")
    ))
    .await
    .expect("/metrics answers")
    .text()
    .await
    .expect("the exposition");
    let accepted: f64 = exposition
        .lines()
        .filter(|l| l.starts_with("mail_emails_accepted_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    for server in [&mut child, &mut child_on] {
        let _ = server.kill();
        let _ = server.wait();
    }
    let api = api.figures();
    let api_on = api_on.figures();
    let raw_same = raw_same.figures();
    let raw_four = raw_four.figures();
    for (variant, figures) in [("off", &api), ("on ", &api_on)] {
        println!(
            "{label:<9} API POST /emails, metrics {variant}: {:>7.0}/s  p50 {:>6.2} ms  p99 {:>6.2} ms  ({} sent, {concurrency} connections)",
            figures.rate, figures.p50_ms, figures.p99_ms, figures.count
        );
    }
    println!(
        "{label:<9} errors: {errors}; the metrics-on server counted {accepted} accepted emails"
    );
    for (writers, raw) in [(concurrency, &raw_same), (4, &raw_four)] {
        println!(
            "{label:<9} raw same row writes:       {:>7.0}/s  p50 {:>6.2} ms  p99 {:>6.2} ms  ({} emails, {writers} writers)",
            raw.rate, raw.p50_ms, raw.p99_ms, raw.count
        );
    }
    println!(
        "{label:<9} ratio API / best raw rate: {:.2} (metrics off), {:.2} (on)",
        api.rate / raw_same.rate.max(raw_four.rate),
        api_on.rate / raw_same.rate.max(raw_four.rate)
    );
    println!(
        "{label:<9} CPU per send, whole machine: API (metrics off) {}; raw ({concurrency} writers) {}",
        api_cpu.per_send(api.count, store.backend() == "postgres"),
        raw_cpu.per_send(raw_counted, store.backend() == "postgres")
    );
    if store.backend() == "postgres" {
        // On a machine the load saturates, rates go as the inverse of the
        // CPU per send; the API cannot cost less than the raw writes'
        // database work plus its own server's and load generator's.
        let per = |seconds: f64, sends: usize| seconds * 1e6 / sends.max(1) as f64;
        let floor = per(raw_cpu.database, raw_counted)
            + per(api_cpu.server, api.count)
            + per(api_cpu.this, api.count);
        println!(
            "{label:<9} the API's floor: {floor:.0} µs per send (the raw writes' database CPU + the server's + the load process's), where its ratio to raw would be {:.2}",
            per(raw_cpu.machine, raw_counted) / floor
        );
    }
    println!(
        "{label:<9} ratio metrics on / off: {:.3} (rate), {:.3} (p50), {:.3} (p99)",
        api_on.rate / api.rate,
        api_on.p50_ms / api.p50_ms,
        api_on.p99_ms / api.p99_ms
    );
    if let Some((rate, rotation_errors, said)) = rotation {
        println!(
            "{label:<9} secrets rotate under load: {rate:.0}/s accepted in its round, {rotation_errors} errors ({said})"
        );
    }
    let rate = |round| by_round[&round];
    let drift = [
        rate(Round::ControlBefore) / rate(Round::ControlFirst),
        rate(Round::ControlLast) / rate(Round::ControlAfter),
    ];
    let drift = (drift[0] * drift[1]).sqrt();
    let (before, after) = (rate(Round::Before), rate(Round::After));
    println!(
        "{label:<9} API before / after the rotation: {before:>7.0}/s / {after:>7.0}/s  (after/before {:.3}; the same distance without a rotation {drift:.3}; corrected {:.3})",
        after / before,
        after / before / drift
    );
    store.close().await;
}

#[tokio::main]
async fn main() {
    // The bench's own store reports storage errors with their cause.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "mail_service=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let seconds = support::load_seconds(1, 15);
    let concurrency = support::env_or("MAIL_BENCH_CONCURRENCY", 16) as usize;

    let only = std::env::var("MAIL_BENCH_ONLY").ok();
    let wanted = |kind: &str| only.as_deref().is_none_or(|o| o == kind);
    // The databases live on disk (the system's temporary directory). The
    // file transport's outbox, the stand-in for the provider, lives on a
    // memory file system when there is one: on ext4 each new file searches
    // for a free inode that was not freed recently, so after earlier runs
    // (or other programs) deleted many files, creating the outbox files
    // took most of the server's CPU time (90% in a profile: ext4
    // `find_inode_bit`, `recently_deleted`) and the API's rate fell run
    // after run (6,081, 3,135, 822/s) while the database's stayed put. The
    // figure then measured the file system's history, not the service.
    // MAIL_BENCH_OUTBOX_IN names another parent directory (the system's
    // temporary directory to include the disk). Every directory lives
    // until every figure is taken, so no deletion slows the second kind.
    let outbox_parent = std::env::var("MAIL_BENCH_OUTBOX_IN").unwrap_or_else(|_| {
        if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm".into()
        } else {
            std::env::temp_dir().display().to_string()
        }
    });
    println!(
        "outbox (file transport) in {outbox_parent}; databases in {}",
        std::env::temp_dir().display()
    );
    let dir = tempfile::tempdir().unwrap();
    let pg_dir = tempfile::tempdir().unwrap();
    let outboxes = tempfile::tempdir_in(&outbox_parent).expect("outbox directory");
    let outbox = |kind: &str| -> (String, String) {
        (
            "MAIL_OUTBOX_DIR".into(),
            outboxes.path().join(kind).display().to_string(),
        )
    };

    if wanted("sqlite") {
        let sqlite = StorageConfig::sqlite(dir.path().join("mail.db"));
        run(
            "sqlite",
            sqlite,
            vec![
                ("MAIL_DATA_DIR".into(), dir.path().display().to_string()),
                outbox("sqlite"),
            ],
            dir.path(),
            seconds,
            concurrency,
        )
        .await;
    }

    if wanted("postgres") {
        let pg = support::BenchSchema::new();
        // The service's pool size (its default unless set), for the server
        // and for the raw writers alike.
        let connections = support::env_or("MAIL_DB_MAX_CONNECTIONS", 10);
        let mut env = pg.serve_env(pg_dir.path());
        env.push(("MAIL_DB_MAX_CONNECTIONS".into(), connections.to_string()));
        env.push(outbox("postgres"));
        run(
            "postgres",
            pg.storage(connections as u32),
            env,
            pg_dir.path(),
            seconds,
            concurrency,
        )
        .await;
        pg.drop().await;
    }
}

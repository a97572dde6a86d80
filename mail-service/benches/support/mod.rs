//! What the benchmarks share: a bench tenant with a key, no effective
//! rate limit and `example.com` marked verified, and a `mail-service serve` process on loopback.

// Used by the load benchmarks only.
#[allow(dead_code)]
pub mod load;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mail_service::model::{ApiKey, Permission};
use mail_service::service::{MailService, Settings};
use mail_service::store::{MasterKeySource, StorageConfig, Store};
use mail_service::transport::Transport;

/// The number in the environment variable `name`, or `default`.
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether `cargo bench` runs this (it passes `--bench`); without it
/// (`cargo test --benches`, `--all-targets`) a benchmark makes a short
/// smoke run.
pub fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// Seconds of load per kind: `MAIL_BENCH_SECONDS` (default `default`)
/// when measuring, `smoke` in a smoke run.
#[allow(dead_code)] // the load benchmarks use it, not every benchmark
pub fn load_seconds(smoke: u64, default: u64) -> u64 {
    if measuring() {
        env_or("MAIL_BENCH_SECONDS", default)
    } else {
        smoke
    }
}

/// The bench tenant's limit: high enough never to refuse.
pub const RATE_LIMIT: i64 = 1_000_000_000;

/// Opens `storage`, starts a service on it (file transport into
/// `dir/outbox`) and creates the tenant `bench` with a sending key named
/// `key_name`. `None`, after saying so, when the database cannot be opened.
pub async fn bench_tenant(
    label: &str,
    storage: &StorageConfig,
    dir: &Path,
    key_name: &str,
) -> Option<(Store, MailService, ApiKey, String)> {
    let key = match storage {
        StorageConfig::Postgres {
            schema: Some(schema),
            ..
        } => MasterKeySource::File(bench_key_file(schema)),
        _ => MasterKeySource::BesideData,
    };
    let store = match Store::open(storage, &key).await {
        Ok(s) => s,
        Err(e) => {
            println!("{label}: cannot open the database ({e:#}); skipped");
            return None;
        }
    };
    let service = MailService::start(
        store.clone(),
        Transport::File(dir.join("outbox")),
        mail_service::system_clock(),
        Settings::default(),
    )
    .await
    .unwrap();
    let (record, key) = service
        .create_api_key("bench", key_name, Permission::SendingAccess)
        .await
        .unwrap();
    service.set_rate_limit("bench", RATE_LIMIT).await.unwrap();
    // The benchmarks send from example.com: the operator's local-use path.
    service
        .mark_domain_verified("bench", "example.com")
        .await
        .unwrap();
    Some((store, service, record, key))
}

/// Starts `mail-service serve` on a free loopback port with `env`; answers
/// the process and its base URL. The server's other stderr lines are
/// passed on.
pub fn serve(env: &[(String, String)]) -> (Child, String) {
    let (child, base, _) = serve_noting_metrics(env);
    (child, base)
}

/// [`serve`], and the operator listener's address when the environment
/// turned it on (`MAIL_METRICS_LISTEN`).
pub fn serve_noting_metrics(env: &[(String, String)]) -> (Child, String, Option<String>) {
    // MAIL_BENCH_SERVER: another build of the server to load (an A/B of two
    // builds on one machine, run after run), against this build's raw side.
    let server = std::env::var_os("MAIL_BENCH_SERVER")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_mail-service").into());
    let mut child = Command::new(server)
        .arg("serve")
        .env("MAIL_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "warn")
        .envs(env.iter().cloned())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("server starts");
    let metrics_on = env.iter().any(|(k, _)| k == "MAIL_METRICS_LISTEN");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        let mut metrics = None;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("metrics on http://") {
                metrics = Some(addr.trim_end_matches("/metrics").to_string());
                continue;
            }
            match line.strip_prefix("mail-service listening on ") {
                Some(addr) if tx.is_some() => {
                    let _ = tx
                        .take()
                        .map(|tx| tx.send((addr.to_string(), metrics.take())));
                }
                _ => eprintln!("server: {line}"),
            }
        }
    });
    let (base, metrics) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("server address");
    assert_eq!(metrics.is_some(), metrics_on, "the metrics listener");
    (child, base, metrics)
}

/// A fresh PostgreSQL schema for one benchmark run, on the test database
/// (`MAIL_TEST_DATABASE_URL`, by default the local `test` database).
pub struct BenchSchema {
    pub url: String,
    pub schema: String,
}

/// The master key file of a benchmark schema (PostgreSQL mode needs one;
/// the bench's own store and its server share it).
fn bench_key_file(schema: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("mail-{schema}.key"))
}

impl BenchSchema {
    pub fn new() -> BenchSchema {
        let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
        mail_service_key(&bench_key_file(&schema));
        BenchSchema {
            url: std::env::var("MAIL_TEST_DATABASE_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into()),
            schema,
        }
    }

    /// The store of the benchmark's own process, with this pool size.
    pub fn storage(&self, max_connections: u32) -> StorageConfig {
        StorageConfig::Postgres {
            url: self.url.clone(),
            schema: Some(self.schema.clone()),
            max_connections,
        }
    }

    /// What `mail-service serve` needs to run on it, with `data_dir` as its
    /// data directory.
    pub fn serve_env(&self, data_dir: &Path) -> Vec<(String, String)> {
        vec![
            ("MAIL_DATA_DIR".into(), data_dir.display().to_string()),
            ("DATABASE_URL".into(), self.url.clone()),
            ("MAIL_DATABASE_SCHEMA".into(), self.schema.clone()),
            (
                "MAIL_MASTER_KEY_FILE".into(),
                bench_key_file(&self.schema).display().to_string(),
            ),
        ]
    }

    /// Drops the schema once the run is over (best effort: a schema left
    /// behind is only clutter, named `bench_…`).
    pub async fn drop(self) {
        if let Ok(pool) = sqlx::PgPool::connect(&self.url).await {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA IF EXISTS {} CASCADE",
                self.schema
            )))
            .execute(&pool)
            .await;
        }
        let _ = std::fs::remove_file(bench_key_file(&self.schema));
    }
}

/// Writes a new master key to `path`.
fn mail_service_key(path: &Path) {
    secrets_at_rest::MasterKey::create_file(path).expect("master key file");
}

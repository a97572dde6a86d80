//! Test harness: an app on a fresh SQLite file or a fresh PostgreSQL schema,
//! requests through the router in process, and server processes for the
//! multi-process and crash stories.
#![allow(dead_code)]

pub mod dkim;
pub mod feedback;
pub mod mta;
pub mod receiver;
pub mod webhooks;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request};
use mail_service::clock::ManualClock;
use mail_service::model::Permission;
use mail_service::service::{MailService, Settings};
use mail_service::store::{KeyRef, MasterKeySource, NewEmail, Reservation, StorageConfig, Store};
use mail_service::transport::{SmtpConfig, SmtpSecurity, Transport};
use serde_json::{Value, json};
use tower::ServiceExt;

/// PostgreSQL used by the tests; override with this variable.
pub const PG_URL_VAR: &str = "MAIL_TEST_DATABASE_URL";
pub const PG_DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

pub fn pg_url() -> String {
    std::env::var(PG_URL_VAR).unwrap_or_else(|_| PG_DEFAULT_URL.to_string())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs each listed `async fn name(backend: Backend)` once per backend.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Postgres).await
                }
            )*
        }
    };
}

enum Outside {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

/// An isolated database: a SQLite file in a temporary directory, or a
/// PostgreSQL schema dropped when this is dropped.
pub struct TestDb {
    pub dir: tempfile::TempDir,
    pub storage: StorageConfig,
    pub schema: Option<String>,
}

impl TestDb {
    pub fn new(backend: Backend) -> TestDb {
        let dir = tempfile::tempdir().expect("temporary directory");
        match backend {
            Backend::Sqlite => TestDb {
                storage: StorageConfig::sqlite(dir.path().join("mail.db")),
                dir,
                schema: None,
            },
            Backend::Postgres => {
                let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
                // PostgreSQL mode needs a master key; the nodes share it.
                secrets_at_rest::MasterKey::create_file(&dir.path().join("master.key"))
                    .expect("master key");
                TestDb {
                    storage: StorageConfig::Postgres {
                        url: pg_url(),
                        schema: Some(schema.clone()),
                        max_connections: 8,
                    },
                    dir,
                    schema: Some(schema),
                }
            }
        }
    }

    pub async fn store(&self) -> Store {
        if self.schema.is_some() {
            // One direct attempt first: a pool would retry until its timeout.
            use sqlx::Connection;
            let attempt = tokio::time::timeout(
                Duration::from_secs(5),
                sqlx::PgConnection::connect(&pg_url()),
            )
            .await;
            if let Err(e) = attempt
                .map_err(|_| "timed out".to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
            {
                panic!(
                    "PostgreSQL is not reachable at {} ({e}). The PostgreSQL tests need it; set {PG_URL_VAR} to another URL",
                    pg_url()
                );
            }
        }
        match Store::open(&self.storage, &self.master_key()).await {
            Ok(s) => s,
            Err(e) => panic!(
                "cannot open the test database ({e:#}). PostgreSQL tests need a server at {} (set {PG_URL_VAR} to another URL)",
                pg_url()
            ),
        }
    }

    /// The master key the service processes of this database use: the
    /// embedded default beside the SQLite file, a file in the test's
    /// directory for PostgreSQL.
    pub fn master_key(&self) -> MasterKeySource {
        match self.schema {
            None => MasterKeySource::BesideData,
            Some(_) => MasterKeySource::File(self.dir.path().join("master.key")),
        }
    }

    /// A connection of its own, as an operator's tool (or a fault) would
    /// open beside the service.
    async fn outside_connection(&self) -> Outside {
        use sqlx::Connection;
        match &self.storage {
            StorageConfig::Sqlite { path, .. } => Outside::Sqlite(
                sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
                    .await
                    .expect("sqlite"),
            ),
            StorageConfig::Postgres { url, schema, .. } => {
                let mut conn = sqlx::PgConnection::connect(url).await.expect("postgres");
                let schema = schema.as_deref().expect("test schema");
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SET search_path TO {schema}")))
                    .execute(&mut conn)
                    .await
                    .expect("search path");
                Outside::Postgres(conn)
            }
        }
    }

    /// PostgreSQL: a connection of its own to the test schema, for a story
    /// that holds a transaction open beside the service.
    pub async fn pg_connection(&self) -> sqlx::PgConnection {
        match self.outside_connection().await {
            Outside::Postgres(conn) => conn,
            Outside::Sqlite(_) => panic!("only the PostgreSQL stories hold a connection"),
        }
    }

    /// Runs SQL on this database from outside the service.
    pub async fn execute(&self, sql: &str) {
        let sql = sqlx::AssertSqlSafe(sql.to_string());
        match self.outside_connection().await {
            Outside::Sqlite(mut conn) => sqlx::raw_sql(sql).execute(&mut conn).await.map(drop),
            Outside::Postgres(mut conn) => sqlx::raw_sql(sql).execute(&mut conn).await.map(drop),
        }
        .expect("sql runs");
    }

    /// The integer a query (`SELECT count(*) ...`) answers, read from outside
    /// the service.
    pub async fn count(&self, sql: &str) -> i64 {
        let sql = sqlx::AssertSqlSafe(sql.to_string());
        match self.outside_connection().await {
            Outside::Sqlite(mut conn) => sqlx::query_scalar(sql).fetch_one(&mut conn).await,
            Outside::Postgres(mut conn) => sqlx::query_scalar(sql).fetch_one(&mut conn).await,
        }
        .expect("query runs")
    }

    pub async fn text(&self, sql: &str) -> String {
        let sql = sqlx::AssertSqlSafe(sql.to_string());
        match self.outside_connection().await {
            Outside::Sqlite(mut conn) => sqlx::query_scalar(sql).fetch_one(&mut conn).await,
            Outside::Postgres(mut conn) => sqlx::query_scalar(sql).fetch_one(&mut conn).await,
        }
        .expect("query runs")
    }

    /// SQLite: another connection that takes the write lock and keeps it
    /// until the returned connection ends its transaction.
    pub async fn hold_sqlite_write_lock(&self) -> sqlx::SqliteConnection {
        match self.outside_connection().await {
            Outside::Sqlite(mut conn) => {
                sqlx::raw_sql("BEGIN IMMEDIATE")
                    .execute(&mut conn)
                    .await
                    .expect("write lock");
                conn
            }
            Outside::Postgres(_) => panic!("only SQLite has one write lock"),
        }
    }

    /// Environment for a `mail-service` process using this database.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![(
            "MAIL_DATA_DIR".to_string(),
            self.dir.path().display().to_string(),
        )];
        if let Some(schema) = &self.schema {
            env.push(("DATABASE_URL".into(), pg_url()));
            env.push(("MAIL_DATABASE_SCHEMA".into(), schema.clone()));
            env.push((
                "MAIL_MASTER_KEY_FILE".into(),
                self.dir.path().join("master.key").display().to_string(),
            ));
        }
        env
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some(schema) = self.schema.clone() else {
            return;
        };
        // Drop from a separate thread with its own runtime: this may run
        // inside (or after) the test's runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                use sqlx::Connection;
                if let Ok(mut conn) = sqlx::PgConnection::connect(&pg_url()).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP SCHEMA IF EXISTS {schema} CASCADE"
                    )))
                    .execute(&mut conn)
                    .await;
                    let _ = conn.close().await;
                }
            })
        })
        .join();
    }
}

pub fn smtp(port: u16, timeout: Duration) -> Transport {
    Transport::smtp(smtp_config(port, timeout)).unwrap()
}

/// The test sink on loopback, in clear, with a user and password.
pub fn smtp_config(port: u16, timeout: Duration) -> SmtpConfig {
    SmtpConfig {
        host: "127.0.0.1".into(),
        port,
        security: SmtpSecurity::None,
        username: Some("relay-user".into()),
        password: Some("relay-password-S3CRET".into()),
        hello_name: "test.local".into(),
        timeout,
        ca_pem: None,
    }
}

pub struct TestApp {
    pub db: TestDb,
    /// The app's own storage handle, for stories that set up rows directly.
    pub store: Store,
    pub service: MailService,
    pub router: Router,
    pub clock: ManualClock,
    pub full_key: String,
    pub send_key: String,
    pub outbox: PathBuf,
}

pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn name(&self) -> &str {
        self.body["name"].as_str().unwrap_or_default()
    }

    pub fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or_default()
    }

    /// A 200 whose body may have a `name` of its own (a domain).
    #[track_caller]
    pub fn ok(&self) -> &Self {
        assert_eq!(self.status, 200, "unexpected answer: {}", self.body);
        self
    }

    #[track_caller]
    pub fn expect(&self, status: u16, name: &str) -> &Self {
        assert_eq!(
            (self.status, self.name()),
            (status, name),
            "unexpected answer: {}",
            self.body
        );
        self
    }
}

impl TestApp {
    /// An app with the file transport.
    pub async fn start(backend: Backend) -> TestApp {
        Self::with(backend, None, Settings::default()).await
    }

    pub async fn with(
        backend: Backend,
        transport: Option<Transport>,
        settings: Settings,
    ) -> TestApp {
        Self::on(TestDb::new(backend), transport, settings).await
    }

    /// An app on a database prepared by the caller.
    pub async fn on(db: TestDb, transport: Option<Transport>, settings: Settings) -> TestApp {
        let store = db.store().await;
        let outbox = db.dir.path().join("outbox");
        let transport = transport.unwrap_or_else(|| Transport::File(outbox.clone()));
        let clock = ManualClock::starting_now();
        let service =
            MailService::start(store.clone(), transport, Arc::new(clock.clone()), settings)
                .await
                .expect("service starts");
        let (_, full_key) = service
            .create_api_key("acme", "ops", Permission::FullAccess)
            .await
            .expect("full key");
        let (_, send_key) = service
            .create_api_key("acme", "app", Permission::SendingAccess)
            .await
            .expect("sending key");
        // Most stories send more than 120 requests a minute; the rate-limit
        // story sets the default back.
        service
            .set_rate_limit("acme", 1_000_000)
            .await
            .expect("rate limit");
        // The stories send from acme.test: verified the operator's way.
        service
            .mark_domain_verified("acme", "acme.test")
            .await
            .expect("domain");
        let router = mail_service::http::router(service.clone());
        TestApp {
            db,
            store,
            service,
            router,
            clock,
            full_key,
            send_key,
            outbox,
        }
    }

    pub async fn call(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Resp {
        call_router(self.router.clone(), method, path, key, headers, body).await
    }
    pub async fn send(&self, body: &Value) -> Resp {
        self.call(
            "POST",
            "/emails",
            Some(&self.send_key),
            &[],
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    pub async fn send_with_key(&self, idempotency_key: &str, body: &Value) -> Resp {
        self.call(
            "POST",
            "/emails",
            Some(&self.send_key),
            &[("idempotency-key", idempotency_key)],
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    /// Sends `POST path` with the sending key and an `Idempotency-Key` on a
    /// task of its own, so that many can run at once.
    pub fn spawn_post(
        &self,
        path: &'static str,
        idempotency_key: &str,
        body: &Value,
    ) -> tokio::task::JoinHandle<Resp> {
        let (router, send_key) = (self.router.clone(), self.send_key.clone());
        let (key, body) = (idempotency_key.to_string(), body.to_string());
        tokio::spawn(async move {
            call_router(
                router,
                "POST",
                path,
                Some(&send_key),
                &[("idempotency-key", &key)],
                Some(body.into_bytes()),
            )
            .await
        })
    }

    pub async fn batch(&self, headers: &[(&str, &str)], body: &Value) -> Resp {
        self.call(
            "POST",
            "/emails/batch",
            Some(&self.send_key),
            headers,
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.call("GET", path, Some(&self.full_key), &[], None)
            .await
    }

    /// `POST path` with a JSON body, authenticated with `key`.
    pub async fn post(&self, key: &str, path: &str, body: Value) -> Resp {
        self.call(
            "POST",
            path,
            Some(key),
            &[],
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    /// Stores an email from billing@acme.test and reserves `key` for
    /// `body` (scope `POST /emails`) as a send does before its handoff, with
    /// a lease of a minute from now (with `begun`, marked as handed off in
    /// the same unit, as a send with clear recipients is); the email's id
    /// and the key.
    pub async fn reserve_email(&self, key: &str, body: &Value, begun: bool) -> (i64, KeyRef) {
        let principal = self.service.authenticate(&self.send_key).await.unwrap();
        let now = self.service.now_ms();
        let id = self.service.next_id();
        let reservation = Reservation {
            tenant_id: principal.tenant_id,
            scope: "POST /emails".into(),
            key: key.into(),
            body_hash: mail_service::service::body_hash(body),
            replay_cutoff: now - 1,
        };
        let email = NewEmail {
            id,
            tenant_id: principal.tenant_id,
            api_key_id: principal.api_key_id,
            from_addr: "billing@acme.test".into(),
            from_domain: "acme.test".into(),
            to_addrs: "[]".into(),
            subject: "Your invoice".into(),
            payload: body.to_string(),
            message_id: format!("<{id}@acme.test>"),
            scheduled_at: None,
            batch_id: None,
            request_id: None,
        };
        self.store
            .reserve_and_store(
                Some(&reservation),
                &[email],
                (now, now + 60_000),
                None,
                begun,
            )
            .await
            .unwrap();
        let key = KeyRef {
            tenant_id: principal.tenant_id,
            scope: "POST /emails".into(),
            key: key.into(),
        };
        (id, key)
    }

    /// Messages written by the file transport.
    pub fn outbox_count(&self) -> usize {
        std::fs::read_dir(&self.outbox)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".eml"))
                    .count()
            })
            .unwrap_or(0)
    }
}

pub async fn call_router(
    router: Router,
    method: &str,
    path: &str,
    key: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Resp {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(key) = key {
        req = req.header("authorization", format!("Bearer {key}"));
    }
    let has_body = body.is_some();
    if has_body
        && !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
    {
        req = req.header("content-type", "application/json");
    }
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let req = req
        .body(body.map(Body::from).unwrap_or_else(Body::empty))
        .expect("request");
    let response = router.oneshot(req).await.expect("infallible");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)))
    };
    Resp {
        status,
        headers,
        body,
    }
}

pub fn email() -> Value {
    json!({
        "from": "Acme <billing@acme.test>",
        "to": ["ada@example.test"],
        "subject": "Your invoice",
        "text": "Thanks!",
    })
}

/// Keys of tenant `acme` (its rate limit out of the way) on a database no
/// server uses yet, for the stories that run `mail-service serve`
/// processes: (sending_access, full_access).
pub async fn provision_keys(db: &TestDb) -> (String, String) {
    let store = db.store().await;
    let service = MailService::start(
        store.clone(),
        Transport::File(db.dir.path().join("outbox")),
        mail_service::system_clock(),
        Settings::default(),
    )
    .await
    .expect("service starts");
    let (_, send) = service
        .create_api_key("acme", "app", Permission::SendingAccess)
        .await
        .expect("sending key");
    let (_, full) = service
        .create_api_key("acme", "ops", Permission::FullAccess)
        .await
        .expect("full key");
    service
        .set_rate_limit("acme", 1_000_000)
        .await
        .expect("rate limit");
    service
        .mark_domain_verified("acme", "acme.test")
        .await
        .expect("domain");
    store.close().await;
    (send, full)
}

/// The environment that points a `mail-service serve` process at the sink.
pub fn smtp_env(sink_port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("MAIL_SMTP_HOST", "127.0.0.1".to_string()),
        ("MAIL_SMTP_PORT", sink_port.to_string()),
        ("MAIL_SMTP_SECURITY", "none".to_string()),
    ]
}

/// A `mail-service serve` process on a free loopback port, its stderr kept.
pub struct ServerProcess {
    pub child: Child,
    pub base: String,
    stderr: Arc<std::sync::Mutex<Vec<String>>>,
}

impl ServerProcess {
    pub fn start(env: &[(String, String)], extra: &[(&str, String)]) -> ServerProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mail-service"));
        cmd.arg("serve")
            .env("MAIL_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("mail-service binary starts");
        let stderr = child.stderr.take().expect("stderr");
        let kept: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let lines = kept.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("mail-service listening on ") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(addr.to_string());
                    }
                } else if line.starts_with("error") {
                    eprintln!("server: {line}");
                }
                lines.lock().unwrap().push(line);
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("server printed its address within 30 s");
        ServerProcess {
            child,
            base,
            stderr: kept,
        }
    }

    /// Every line the server wrote to stderr so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `mail-service serve` process as the SDK tests meet it: domain
/// verification asks a DNS server on loopback that publishes nothing (so a
/// verify gets real, negative answers at once), and webhooks may call a
/// receiver of the SDK's script on loopback, polled every 50 ms.
pub struct SdkServer {
    pub server: ServerProcess,
    _dns: dns_fixture::DnsFixture,
}

impl SdkServer {
    pub fn start(db: &TestDb) -> SdkServer {
        let dns = dns_fixture::DnsFixture::start().expect("dns fixture");
        let server = ServerProcess::start(
            &db.env(),
            &[
                ("MAIL_DNS_NAMESERVERS", dns.addr().to_string()),
                ("MAIL_WEBHOOK_ALLOW_PRIVATE_ADDRESSES", "true".into()),
                ("MAIL_WEBHOOK_ALLOW_HTTP_LOOPBACK", "true".into()),
                ("MAIL_WEBHOOK_POLL_MS", "50".into()),
            ],
        );
        SdkServer { server, _dns: dns }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

//! Backups of a service that keeps sending: `mail-service backup` copies
//! the live SQLite file (one consistent snapshot, never a torn file), and a
//! PostgreSQL deployment's `pg_dump` does the same; a restored copy holds
//! every email accepted before the backup began and reads it through the
//! API, but only with the master key it was written with: without it (or
//! with another) the service refuses, naming the key it needs.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Backend, TestApp, call_router, email, pg_url};
use mail_service::service::{MailService, Settings};
use mail_service::store::{MasterKeySource, StorageConfig, Store};
use mail_service::transport::Transport;
use secrets_at_rest::MasterKey;

/// Emails sent through the API by a few tasks until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<(Instant, String)>>>,
}

impl Load {
    fn start(app: &TestApp, senders: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..senders)
            .map(|_| {
                let (router, key, stop) = (app.router.clone(), app.send_key.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut accepted = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let body = email().to_string().into_bytes();
                        let resp = call_router(
                            router.clone(),
                            "POST",
                            "/emails",
                            Some(&key),
                            &[],
                            Some(body),
                        )
                        .await;
                        assert_eq!(resp.status, 200, "a send during the backup: {}", resp.body);
                        let id = resp.body["id"].as_str().expect("id").to_string();
                        accepted.push((Instant::now(), id));
                    }
                    accepted
                })
            })
            .collect();
        Load { stop, tasks }
    }

    /// Stops the senders; every email accepted, with when its answer came.
    async fn finish(self) -> Vec<(Instant, String)> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for task in self.tasks {
            all.extend(task.await.expect("sender"));
        }
        all
    }
}

/// Runs `command` off the runtime, so the senders keep going meanwhile.
async fn output(mut command: Command) -> Output {
    tokio::task::spawn_blocking(move || command.output().expect("command runs"))
        .await
        .expect("command thread")
}

fn mail_service(env: &[(String, String)], args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mail-service"));
    command
        .args(args)
        .envs(env.iter().cloned())
        .env("RUST_LOG", "warn");
    command
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A service on `storage` with the master key `key`, as a restored node.
async fn node(storage: &StorageConfig, key: &MasterKeySource, dir: &Path) -> (Store, axum::Router) {
    let store = Store::open(storage, key)
        .await
        .expect("the restored copy opens");
    let service = MailService::start(
        store.clone(),
        Transport::File(dir.join("outbox")),
        mail_service::system_clock(),
        Settings::default(),
    )
    .await
    .expect("service starts");
    (store, mail_service::http::router(service))
}

/// Every email in `ids` reads through the API of `router`.
async fn every_email_reads(router: &axum::Router, full_key: &str, ids: &[String]) {
    for id in ids {
        let resp = call_router(
            router.clone(),
            "GET",
            &format!("/emails/{id}"),
            Some(full_key),
            &[],
            None,
        )
        .await;
        assert_eq!(
            resp.status, 200,
            "email {id} after the restore: {}",
            resp.body
        );
        assert_eq!(resp.body["id"], id.as_str());
        assert_eq!(resp.body["subject"], "Your invoice");
    }
}

/// The ids accepted before `began`, and how many came after.
fn split(accepted: &[(Instant, String)], began: Instant) -> (Vec<String>, usize) {
    let before: Vec<String> = accepted
        .iter()
        .filter(|(at, _)| *at < began)
        .map(|(_, id)| id.clone())
        .collect();
    let after = accepted.len() - before.len();
    (before, after)
}

/// A directory holding `copy` as `mail.db`, as an operator restores it.
fn restored(copy: &Path, key: Option<&Path>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(copy, dir.path().join("mail.db")).unwrap();
    if let Some(key) = key {
        std::fs::copy(key, dir.path().join("master.key")).unwrap();
    }
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_holds_every_email_accepted_before_it_and_needs_its_master_key() {
    let app = TestApp::start(Backend::Sqlite).await;
    let key_file = app.db.dir.path().join("master.key");
    let key_id = MasterKey::read_file(&key_file).unwrap().id().to_string();
    let load = Load::start(&app, 4);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let out_dir = tempfile::tempdir().unwrap();
    let copy = out_dir.path().join("mail-backup.db");
    let began = Instant::now();
    let out = output(mail_service(
        &app.db.env(),
        &["backup", "--to", copy.to_str().unwrap()],
    ))
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let accepted = load.finish().await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains(&format!("backup written to {}", copy.display()))
            && said.contains(&format!("open only with master key {key_id}")),
        "{said}"
    );
    let (before, after) = split(&accepted, began);
    assert!(
        !before.is_empty() && after > 0,
        "sends went on: {} before, {after} after",
        before.len()
    );

    let check = rusqlite::Connection::open(&copy).unwrap();
    let verdict: String = check
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(verdict, "ok");
    drop(check);

    // Restored with its key: every email accepted before the backup reads.
    let with_key = restored(&copy, Some(&key_file));
    let storage = StorageConfig::sqlite(with_key.path().join("mail.db"));
    let (store, router) = node(&storage, &MasterKeySource::BesideData, with_key.path()).await;
    every_email_reads(&router, &app.full_key, &before).await;
    store.close().await;

    // Without the key: refused, naming the key it needs; no key is made.
    let without = restored(&copy, None);
    let storage = StorageConfig::sqlite(without.path().join("mail.db"));
    let e = Store::open(&storage, &MasterKeySource::BesideData)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("sealed under master key {key_id}"))
            && e.contains(
                "a database restored from a backup needs the master key it was written with"
            ),
        "{e}"
    );
    assert!(
        !without.path().join("master.key").exists(),
        "no new key was made"
    );
    let env = vec![(
        "MAIL_DATA_DIR".to_string(),
        without.path().display().to_string(),
    )];
    let out = output(mail_service(&env, &["tenant", "list"])).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(&key_id), "{}", stderr(&out));
    assert!(!without.path().join("master.key").exists());

    // With another key: refused the same way, the key never shown.
    let wrong = without.path().join("other.key");
    let other = MasterKey::create_file(&wrong).unwrap();
    let e = Store::open(&storage, &MasterKeySource::File(wrong.clone()))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("(id {})", other.id()))
            && e.contains(&key_id)
            && e.contains("needs the master key it was written with"),
        "{e}"
    );
    for file in [&key_file, &wrong] {
        let secret = std::fs::read_to_string(file).unwrap();
        assert!(!e.contains(secret.trim()) && !said.contains(secret.trim()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_never_overwrites_a_file_and_postgres_is_pointed_at_pg_dump() {
    let app = TestApp::start(Backend::Sqlite).await;
    let target = app.db.dir.path().join("old-backup.db");
    std::fs::write(&target, b"last week's backup").unwrap();
    let out = output(mail_service(
        &app.db.env(),
        &["backup", "--to", target.to_str().unwrap()],
    ))
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("never overwrites"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"last week's backup");

    let env = vec![
        (
            "MAIL_DATA_DIR".to_string(),
            app.db.dir.path().display().to_string(),
        ),
        ("DATABASE_URL".to_string(), pg_url()),
        (
            "MAIL_DATABASE_SCHEMA".to_string(),
            "deployment_a".to_string(),
        ),
    ];
    let fresh: PathBuf = app.db.dir.path().join("pg.db");
    let out = output(mail_service(
        &env,
        &["backup", "--to", fresh.to_str().unwrap()],
    ))
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("pg_dump --format=custom --schema=deployment_a --file=mail.dump")
            && stderr(&out).contains("pg_restore"),
        "{}",
        stderr(&out)
    );
    assert!(!fresh.exists());
}

/// A new, empty PostgreSQL database; its URL.
async fn new_database(name: &str) -> String {
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect(&pg_url())
        .await
        .expect("postgres");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .expect("create database");
    admin.close().await.unwrap();
    let mut url = url::Url::parse(&pg_url()).unwrap();
    url.set_path(&format!("/{name}"));
    url.to_string()
}

async fn drop_database(name: &str) {
    use sqlx::Connection;
    if let Ok(mut admin) = sqlx::PgConnection::connect(&pg_url()).await {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut admin)
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_dump_under_load_restores_into_a_new_database_with_every_accepted_email() {
    let app = TestApp::start(Backend::Postgres).await;
    let schema = app.db.schema.clone().unwrap();
    let load = Load::start(&app, 4);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let dump = app.db.dir.path().join("mail.dump");
    let mut pg_dump = Command::new("pg_dump");
    pg_dump.args([
        "--format=custom",
        &format!("--schema={schema}"),
        &format!("--file={}", dump.display()),
        &pg_url(),
    ]);
    let began = Instant::now();
    let out = output(pg_dump).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let accepted = load.finish().await;
    assert_eq!(out.status.code(), Some(0), "pg_dump: {}", stderr(&out));
    let (before, after) = split(&accepted, began);
    assert!(
        !before.is_empty() && after > 0,
        "sends went on: {} before, {after} after",
        before.len()
    );

    let name = format!("restore_{}", uuid::Uuid::new_v4().simple());
    let url = new_database(&name).await;
    let mut pg_restore = Command::new("pg_restore");
    pg_restore.args([&format!("--dbname={url}"), dump.to_str().unwrap()]);
    let out = output(pg_restore).await;
    assert_eq!(out.status.code(), Some(0), "pg_restore: {}", stderr(&out));

    let storage = StorageConfig::Postgres {
        url,
        schema: Some(schema),
        max_connections: 4,
    };
    // Another key is refused: the dump holds the secrets sealed, not the key.
    let wrong = app.db.dir.path().join("other.key");
    MasterKey::create_file(&wrong).unwrap();
    let e = Store::open(&storage, &MasterKeySource::File(wrong))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("needs the master key it was written with"),
        "{e}"
    );

    let (store, router) = node(&storage, &app.db.master_key(), app.db.dir.path()).await;
    every_email_reads(&router, &app.full_key, &before).await;
    store.close().await;
    drop_database(&name).await;
}

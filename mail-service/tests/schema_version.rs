//! An older binary started on a database a newer release migrated refuses
//! with both versions and what to do, exits 11, and writes nothing: not a
//! row, not a migration, not a master key file.

mod common;

use std::process::Command;

use common::{Backend, TestApp, email};
use db_lifecycle::SchemaTooNew;
use mail_service::store::Store;
use sha2::{Digest, Sha256};

/// A migration this binary does not carry.
const NEWER: i64 = 99_990_101;

/// The newest migration of `backend` in the source tree (the binary's).
fn known(backend: Backend) -> i64 {
    let dir = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    std::fs::read_dir(format!("{}/migrations/{dir}", env!("CARGO_MANIFEST_DIR")))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.split('_').next()?.parse::<i64>().ok()
        })
        .max()
        .unwrap()
}

/// What the database holds, as a value to compare.
async fn fingerprint(app: &TestApp, backend: Backend) -> String {
    let db = &app.db;
    let rows = format!(
        "migrations {} emails {} nodes {} keys {}",
        db.count("SELECT count(*) FROM _sqlx_migrations").await,
        db.count("SELECT count(*) FROM emails").await,
        db.count("SELECT count(*) FROM nodes").await,
        db.count("SELECT count(*) FROM master_keys").await,
    );
    match backend {
        // Every byte of the file (its WAL emptied first).
        Backend::Sqlite => {
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").await;
            let bytes = std::fs::read(db.dir.path().join("mail.db")).unwrap();
            format!("{rows} sha256 {}", hex::encode(Sha256::digest(&bytes)))
        }
        Backend::Postgres => {
            let migrations = db
                .text(
                    "SELECT md5(string_agg(version::text || description || success::text, ',' ORDER BY version)) FROM _sqlx_migrations",
                )
                .await;
            format!("{rows} migrations md5 {migrations}")
        }
    }
}

async fn an_older_binary_refuses_a_newer_schema_and_changes_nothing(backend: Backend) {
    let app = TestApp::start(backend).await;
    app.send(&email()).await.ok();
    app.store.close().await;
    let checksum = match backend {
        Backend::Sqlite => "X'00'",
        Backend::Postgres => "'\\x00'::bytea",
    };
    app.db
        .execute(&format!(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES ({NEWER}, 'from a newer release', TRUE, {checksum}, 0)"
        ))
        .await;
    // SQLite: the key file moved away, to see that none is made.
    let key_file = app.db.dir.path().join("master.key");
    let kept_key = app.db.dir.path().join("kept.key");
    if backend == Backend::Sqlite {
        std::fs::rename(&key_file, &kept_key).unwrap();
    }
    let before = fingerprint(&app, backend).await;

    let e = Store::open(&app.db.storage, &app.db.master_key())
        .await
        .unwrap_err();
    let refused = e
        .downcast_ref::<SchemaTooNew>()
        .unwrap_or_else(|| panic!("not a schema refusal: {e:#}"));
    assert_eq!((refused.found, refused.known), (NEWER, known(backend)));

    let out = Command::new(env!("CARGO_BIN_EXE_mail-service"))
        .args(["tenant", "list"])
        .envs(app.db.env())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(11), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "is at schema version {NEWER}, this binary knows up to {}: run a newer release, or restore the backup taken before the upgrade",
            known(backend)
        )) && stderr.contains("nothing was changed"),
        "{stderr}"
    );

    assert_eq!(fingerprint(&app, backend).await, before);
    if backend == Backend::Sqlite {
        assert!(!key_file.exists(), "no master key file was made");
        std::fs::rename(&kept_key, &key_file).unwrap();
    }

    // The release that knows the migration (here: the record taken back
    // out) opens the same database again.
    app.db
        .execute(&format!(
            "DELETE FROM _sqlx_migrations WHERE version = {NEWER}"
        ))
        .await;
    Store::open(&app.db.storage, &app.db.master_key())
        .await
        .expect("opens again")
        .close()
        .await;
}

on_both_backends!(an_older_binary_refuses_a_newer_schema_and_changes_nothing);

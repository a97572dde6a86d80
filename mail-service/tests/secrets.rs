//! Secrets at rest: the DKIM private keys, webhook signing secrets and the
//! return-path tag key are stored sealed under the master key. A copied
//! database file or a `pg_dump` holds none of them in any usual encoding; a
//! sealed value moved to another row, truncated, or met with another key is
//! refused with an error naming whose secret it is, and nothing is
//! overwritten; a rotation re-seals everything under a new key, goes on
//! after being killed, and leaves the old key removable.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
use common::webhooks::{local_app, register};
use common::{Backend, TestApp, TestDb, pg_url};
use mail_service::store::{MasterKeySource, Store};
use secrets_at_rest::MasterKey;

on_both_backends!(
    no_secret_is_in_the_database_files_or_a_dump,
    a_sealed_value_moved_or_truncated_is_refused_and_nothing_is_overwritten,
    a_wrong_master_key_is_refused_and_changes_nothing,
    plain_text_secrets_are_sealed_on_the_first_start_with_a_key,
    a_rotation_reseals_everything_and_the_old_key_can_go,
    a_killed_rotation_finishes_when_run_again,
);

async fn tenant_id(db: &TestDb) -> i64 {
    db.count("SELECT id FROM tenants WHERE name = 'acme'").await
}

/// Every stored secret value as the database holds it (sealed).
async fn stored_values(db: &TestDb) -> String {
    db.text(
        "SELECT COALESCE((SELECT string_agg(dkim_private_key, ' ') FROM domains), '') || '|' || \
         COALESCE((SELECT string_agg(secret || ' ' || COALESCE(previous_secret, ''), ' ') FROM webhooks), '') || '|' || \
         COALESCE((SELECT string_agg(value, ' ') FROM service_secrets), '')",
    )
    .await
}

/// The plain secrets of the app: each DKIM key (PKCS#8 DER), each webhook
/// secret (`whsec_...`, and its key bytes), the return-path tag key.
struct Plain {
    dkim_der: Vec<Vec<u8>>,
    webhook: Vec<String>,
    verp: String,
}

impl Plain {
    /// Each secret's bytes in raw, base64, base64url and hex form.
    fn forms(&self) -> Vec<(String, Vec<u8>)> {
        let mut raw: Vec<(String, Vec<u8>)> = Vec::new();
        for (i, der) in self.dkim_der.iter().enumerate() {
            raw.push((format!("dkim {i}"), der.clone()));
        }
        for (i, secret) in self.webhook.iter().enumerate() {
            raw.push((format!("webhook {i}"), secret.as_bytes().to_vec()));
            let key = STANDARD
                .decode(secret.strip_prefix("whsec_").unwrap())
                .unwrap();
            raw.push((format!("webhook key {i}"), key));
        }
        raw.push(("verp".into(), self.verp.as_bytes().to_vec()));
        raw.push(("verp key".into(), hex::decode(&self.verp).unwrap()));
        let mut forms = Vec::new();
        for (name, bytes) in raw {
            forms.push((format!("{name} raw"), bytes.clone()));
            forms.push((
                format!("{name} base64"),
                STANDARD.encode(&bytes).into_bytes(),
            ));
            forms.push((
                format!("{name} base64url"),
                URL_SAFE.encode(&bytes).into_bytes(),
            ));
            forms.push((
                format!("{name} base64url unpadded"),
                URL_SAFE_NO_PAD.encode(&bytes).into_bytes(),
            ));
            forms.push((format!("{name} hex"), hex::encode(&bytes).into_bytes()));
            forms.push((
                format!("{name} HEX"),
                hex::encode_upper(&bytes).into_bytes(),
            ));
        }
        forms
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// An app with one secret of every kind: its DKIM key (acme.test), a
/// second domain's, a webhook with a rotated secret (so a previous one is
/// stored too) and the return-path tag key.
async fn app_with_every_secret(backend: Backend) -> (TestApp, Plain) {
    let app = local_app(backend).await;
    app.post(
        &app.full_key,
        "/domains",
        serde_json::json!({"name": "second.test"}),
    )
    .await
    .ok();
    let created = register(&app, "http://127.0.0.1:9/hook", &["email.sent"]).await;
    created.ok();
    let first = created.body["signing_secret"].as_str().unwrap().to_string();
    let id = created.body["id"].as_str().unwrap().to_string();
    let rotated = app
        .post(
            &app.full_key,
            &format!("/webhooks/{id}/signing-secret/rotate"),
            serde_json::json!({}),
        )
        .await;
    rotated.ok();
    let second = rotated.body["signing_secret"].as_str().unwrap().to_string();
    let tenant = tenant_id(&app.db).await;
    let mut dkim_der = Vec::new();
    for name in ["acme.test", "second.test"] {
        let domain = app
            .store
            .sending_domain(tenant, name)
            .await
            .unwrap()
            .unwrap();
        dkim_der.push(STANDARD.decode(&domain.key.dkim_private_key).unwrap());
    }
    let verp = app.store.service_secret("verp", "unused", 0).await.unwrap();
    (
        app,
        Plain {
            dkim_der,
            webhook: vec![first, second],
            verp,
        },
    )
}

/// What an outsider with the files gets: the SQLite database and its WAL,
/// or a `pg_dump` of the schema.
fn outside_copy(db: &TestDb) -> Vec<(String, Vec<u8>)> {
    match &db.schema {
        None => ["mail.db", "mail.db-wal"]
            .iter()
            .filter_map(|f| {
                let path = db.dir.path().join(f);
                std::fs::read(&path).ok().map(|b| (f.to_string(), b))
            })
            .collect(),
        Some(schema) => {
            let out = Command::new("pg_dump")
                .args(["--schema", schema, "--dbname", &pg_url()])
                .output()
                .expect("pg_dump runs (apt-get install postgresql-client)");
            assert!(
                out.status.success(),
                "pg_dump: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            vec![("pg_dump".into(), out.stdout)]
        }
    }
}

async fn no_secret_is_in_the_database_files_or_a_dump(backend: Backend) {
    let (app, plain) = app_with_every_secret(backend).await;
    let copies = outside_copy(&app.db);
    let sealed = stored_values(&app.db).await;
    // The search reads what holds the data: each sealed value is found.
    for value in sealed.split(['|', ' ']).filter(|v| !v.is_empty()) {
        assert!(value.starts_with("enc1:"), "not sealed: a stored secret");
        assert!(
            copies
                .iter()
                .any(|(_, bytes)| contains(bytes, value.as_bytes())),
            "the copies do not hold the sealed value {value}"
        );
    }
    let forms = plain.forms();
    assert_eq!(forms.len(), 8 * 6);
    for (file, bytes) in &copies {
        for (form, needle) in &forms {
            assert!(!contains(bytes, needle), "{file} holds the {form}");
        }
    }
}

async fn a_sealed_value_moved_or_truncated_is_refused_and_nothing_is_overwritten(backend: Backend) {
    let (app, _plain) = app_with_every_secret(backend).await;
    let tenant = tenant_id(&app.db).await;
    let acme = app
        .db
        .text("SELECT dkim_private_key FROM domains WHERE name = 'acme.test'")
        .await;
    let second_id = app
        .db
        .count("SELECT id FROM domains WHERE name = 'second.test'")
        .await;

    // acme.test's sealed key copied into second.test's row.
    app.db
        .execute(&format!(
            "UPDATE domains SET dkim_private_key = '{acme}' WHERE name = 'second.test'"
        ))
        .await;
    let e = app
        .store
        .sending_domain(tenant, "second.test")
        .await
        .unwrap_err();
    let message = e.to_string();
    assert!(
        message.contains(&format!("the DKIM key of domain {second_id}"))
            && message.contains("copied from another row"),
        "{message}"
    );
    assert!(!message.contains(&acme[10..]), "the error shows the value");
    // Sending from it is refused, not sent unsigned.
    let mut email = common::email();
    email["from"] = "x@second.test".into();
    app.db
        .execute(
            "UPDATE domains SET status = 'verified', verified_at = 1 WHERE name = 'second.test'",
        )
        .await;
    let answer = app.send(&email).await;
    assert!(answer.status >= 500, "{}", answer.body);
    assert_eq!(app.outbox_count(), 0);

    // A truncated value.
    let cut = &acme[..acme.len() - 20];
    app.db
        .execute(&format!(
            "UPDATE domains SET dkim_private_key = '{cut}' WHERE name = 'second.test'"
        ))
        .await;
    let e = app
        .store
        .sending_domain(tenant, "second.test")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("the DKIM key of domain"), "{e}");

    // Nothing was overwritten: the rows hold what was put there, acme.test
    // still signs.
    assert_eq!(
        app.db
            .text("SELECT dkim_private_key FROM domains WHERE name = 'second.test'")
            .await,
        cut
    );
    assert_eq!(
        app.db
            .text("SELECT dkim_private_key FROM domains WHERE name = 'acme.test'")
            .await,
        acme
    );
    app.send(&common::email()).await.ok();

    // A webhook secret moved to another webhook is refused as well.
    let other = register(&app, "http://127.0.0.1:9/other", &["email.sent"]).await;
    let other_id = other.body["id"].as_str().unwrap().to_string();
    app.db
        .execute(&format!(
            "UPDATE webhooks SET secret = (SELECT secret FROM webhooks WHERE id <> {other_id} ORDER BY id LIMIT 1) WHERE id = {other_id}"
        ))
        .await;
    let e = app
        .store
        .webhook(tenant, other_id.parse().unwrap())
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("the signing secret of webhook {other_id}")),
        "{e}"
    );
}

async fn a_wrong_master_key_is_refused_and_changes_nothing(backend: Backend) {
    let (app, _plain) = app_with_every_secret(backend).await;
    let before = stored_values(&app.db).await;
    let wrong = app.db.dir.path().join("wrong.key");
    let key = MasterKey::create_file(&wrong).unwrap();
    let e = Store::open(&app.db.storage, &MasterKeySource::File(wrong.clone()))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("(id {})", key.id()))
            && e.contains("is not a key of this database")
            && e.contains("nothing was changed"),
        "{e}"
    );
    let key_text = std::fs::read_to_string(&wrong).unwrap();
    assert!(!e.contains(key_text.trim()));
    assert_eq!(stored_values(&app.db).await, before);
    assert_eq!(app.db.count("SELECT count(*) FROM master_keys").await, 1);

    // The process refuses to start too, naming the file.
    let out = Command::new(env!("CARGO_BIN_EXE_mail-service"))
        .args(["secrets", "status"])
        .envs(app.db.env())
        .env("MAIL_MASTER_KEY_FILE", &wrong)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not a key of this database"), "{stderr}");
    assert!(stderr.contains(&wrong.display().to_string()), "{stderr}");
    assert_eq!(stored_values(&app.db).await, before);
}

async fn plain_text_secrets_are_sealed_on_the_first_start_with_a_key(backend: Backend) {
    let (app, plain) = app_with_every_secret(backend).await;
    let tenant = tenant_id(&app.db).await;
    let dkim = STANDARD.encode(&plain.dkim_der[0]);
    // The database as a version without master keys left it.
    app.store.close().await;
    app.db
        .execute(&format!(
            "DELETE FROM master_key_wraps; DELETE FROM master_keys; \
             UPDATE domains SET dkim_private_key = '{dkim}' WHERE name = 'acme.test'; \
             UPDATE webhooks SET secret = '{}', previous_secret = '{}'; \
             UPDATE service_secrets SET value = '{}'",
            plain.webhook[1], plain.webhook[0], plain.verp
        ))
        .await;
    let store = app.db.store().await;
    let status = store.secrets_status().await.unwrap();
    assert_eq!(status.plain_text, 0);
    assert_eq!(status.keys.len(), 1);
    assert_eq!(status.keys[0].values, 5, "{status:?}");
    assert!(!stored_values(&app.db).await.contains(&dkim));
    let domain = store
        .sending_domain(tenant, "acme.test")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(domain.key.dkim_private_key, dkim);
    assert_eq!(
        store.service_secret("verp", "x", 0).await.unwrap(),
        plain.verp
    );
}

fn key_file(db: &TestDb, name: &str) -> (std::path::PathBuf, String) {
    let path = db.dir.path().join(name);
    let key = MasterKey::create_file(&path).unwrap();
    (path, key.id().to_string())
}

fn old_key(db: &TestDb) -> MasterKeySource {
    match db.master_key() {
        MasterKeySource::BesideData => MasterKeySource::File(db.dir.path().join("master.key")),
        file => file,
    }
}

async fn a_rotation_reseals_everything_and_the_old_key_can_go(backend: Backend) {
    let (app, plain) = app_with_every_secret(backend).await;
    let tenant = tenant_id(&app.db).await;
    let old_id = app.store.secrets_status().await.unwrap().current;
    let (new_file, new_id) = key_file(&app.db, "new.key");

    let resealed = app
        .store
        .rotate_secrets(MasterKey::read_file(&new_file).unwrap(), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(resealed, 5);
    let status = app.store.secrets_status().await.unwrap();
    assert_eq!(status.current, new_id);
    let values: Vec<(String, u64)> = status
        .keys
        .iter()
        .map(|k| (k.id.clone(), k.values))
        .collect();
    assert_eq!(values, vec![(old_id.clone(), 0), (new_id.clone(), 5)]);

    // A node still started with the old key reads the new values; so does
    // one started with the new key only.
    for source in [old_key(&app.db), MasterKeySource::File(new_file.clone())] {
        let node = Store::open(&app.db.storage, &source).await.unwrap();
        let domain = node
            .sending_domain(tenant, "acme.test")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            STANDARD.decode(&domain.key.dkim_private_key).unwrap(),
            plain.dkim_der[0]
        );
        assert_eq!(
            node.service_secret("verp", "x", 0).await.unwrap(),
            plain.verp
        );
        node.close().await;
    }
    // The running service goes on sending and signing.
    app.send(&common::email()).await.ok();

    // The old key is removed; from then on it opens nothing.
    app.store.forget_master_key(&old_id).await.unwrap();
    let e = Store::open(&app.db.storage, &old_key(&app.db))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("is not a key of this database"),
        "{e}"
    );
    let e = app.store.forget_master_key(&new_id).await.unwrap_err();
    assert!(e.to_string().contains("still protects 5 values"), "{e}");
}

fn run_cli(db: &TestDb, key: &Path, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_mail-service"))
        .args(args)
        .envs(db.env())
        .env("MAIL_MASTER_KEY_FILE", key)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

async fn a_killed_rotation_finishes_when_run_again(backend: Backend) {
    let (app, plain) = app_with_every_secret(backend).await;
    let tenant = tenant_id(&app.db).await;
    let MasterKeySource::File(old_file) = old_key(&app.db) else {
        unreachable!()
    };
    let (new_file, new_id) = key_file(&app.db, "new.key");
    let new_arg = new_file.display().to_string();

    // Killed while it waits for writes begun under the old key: the new key
    // is recorded and values are re-sealed, the rotation is not finished.
    let mut first = run_cli(
        &app.db,
        &old_file,
        &[
            "secrets",
            "rotate",
            "--new-key-file",
            &new_arg,
            "--settle-ms",
            "600000",
        ],
    );
    let like =
        format!("SELECT count(*) FROM domains WHERE dkim_private_key LIKE 'enc1:{new_id}:%'");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while app.db.count(&like).await < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the rotation did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let unfinished =
        format!("SELECT count(*) FROM master_key_wraps WHERE wrapping_key_id = '{new_id}'");
    assert_eq!(
        app.db.count(&unfinished).await,
        1,
        "the rotation had finished"
    );
    // Meanwhile the service serves.
    app.send(&common::email()).await.ok();

    let rerun = run_cli(
        &app.db,
        &old_file,
        &[
            "secrets",
            "rotate",
            "--new-key-file",
            &new_arg,
            "--settle-ms",
            "0",
        ],
    );
    let out = rerun.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(app.db.count(&unfinished).await, 0);

    let status = app.store.secrets_status().await.unwrap();
    assert_eq!(status.current, new_id);
    assert!(
        status
            .keys
            .iter()
            .all(|k| (k.id == new_id) == (k.values == 5)),
        "{status:?}"
    );
    let node = Store::open(&app.db.storage, &MasterKeySource::File(new_file))
        .await
        .unwrap();
    let domain = node
        .sending_domain(tenant, "second.test")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        STANDARD.decode(&domain.key.dkim_private_key).unwrap(),
        plain.dkim_der[1]
    );

    // `secrets status` says the same, as JSON.
    let out = run_cli(&app.db, &old_file, &["secrets", "status"])
        .wait_with_output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["current"], new_id.as_str());
    assert_eq!(json["plain_text"], 0);
}

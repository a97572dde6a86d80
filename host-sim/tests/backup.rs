//! The operator state over time: `host-sim backup` copies the live state
//! while bindings are being written (one consistent snapshot, checked), a
//! restored copy opens only with the master key it was written with (the
//! refusal names the key, never shows it, and makes no new key), and a
//! host older than the state's schema refuses, exits 11 and writes nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use host_sim::state::{DB_FILE, MasterKey, MasterKeySource, StateError};
use host_sim::{AuthStyle, Host, HostConfig, HostError, Secret};
use sha2::{Digest, Sha256};

const PROVIDER_SECRET: &str = "umami-api-key-4b1d77e0c2a95f38";

fn open(state: &Path, key: Option<&Path>) -> Result<Host, HostError> {
    let mut config = HostConfig::new(state);
    if let Some(file) = key {
        config.master_key = MasterKeySource::File(file.to_path_buf());
    }
    Host::open(config)
}

fn bind(host: &Host, project: &str) {
    host.set_binding(
        project,
        "provider",
        "https://provider.example",
        Secret::new(PROVIDER_SECRET),
        AuthStyle::Bearer,
        Duration::from_secs(5),
    )
    .unwrap();
}

/// Whether the provider secret of `project` opens as an invocation reads it.
fn secret_opens(host: &Host, project: &str) -> Result<bool, StateError> {
    let snapshot = host
        .state()
        .invocation_snapshot("hst_none", "ext", project)?;
    let expected = Secret::new(PROVIDER_SECRET);
    Ok(snapshot.bindings.iter().any(|b| b.secret == expected))
}

fn host_sim(state: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_host-sim"));
    command
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("HOST_SIM_DB")
        .env_remove("HOST_SIM_MASTER_KEY_FILE");
    command
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A state directory holding `copy` as its database, as an operator
/// restores it.
fn restored(copy: &Path, key: Option<&Path>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(copy, dir.path().join(DB_FILE)).unwrap();
    if let Some(key) = key {
        std::fs::copy(key, dir.path().join("master.key")).unwrap();
    }
    dir
}

#[test]
fn a_backup_under_writes_holds_every_earlier_binding_and_needs_its_master_key() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let host = Arc::new(open(&state, None).unwrap());
    let key_file = state.join("master.key");
    let key_id = MasterKey::read_file(&key_file).unwrap().id().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (host, stop) = (host.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut written = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let project = format!("p{i}");
                bind(&host, &project);
                written.push((Instant::now(), project));
                i += 1;
            }
            written
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let copy = dir.path().join("state-backup.sqlite3");
    let began = Instant::now();
    let out = host_sim(&state, &["backup", "--to", copy.to_str().unwrap()])
        .output()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!("backup written to {}", copy.display()))
            && said.contains(&format!("open only with master key {key_id}")),
        "{said}"
    );
    let before: Vec<&String> = written
        .iter()
        .filter(|(at, _)| *at < began)
        .map(|(_, p)| p)
        .collect();
    assert!(
        !before.is_empty() && before.len() < written.len(),
        "writes went on"
    );
    let check = rusqlite::Connection::open(&copy).unwrap();
    let verdict: String = check
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(verdict, "ok");
    drop(check);

    // Restored with its key: every binding written before the backup, its
    // secret opened.
    let with_key = restored(&copy, Some(&key_file));
    let back = open(with_key.path(), None).unwrap();
    for project in &before {
        assert!(secret_opens(&back, project).unwrap(), "{project}");
    }
    drop(back);

    // Without it: refused, naming the key; no key is made.
    let without = restored(&copy, None);
    let e = open(without.path(), None).err().unwrap().to_string();
    assert!(
        e.contains(&format!("sealed under master key {key_id}"))
            && e.contains(
                "a database restored from a backup needs the master key it was written with"
            ),
        "{e}"
    );
    assert!(!without.path().join("master.key").exists());
    let out = host_sim(without.path(), &["binding", "show"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(&key_id), "{}", stderr(&out));
    assert!(!without.path().join("master.key").exists());

    // With another key: refused too; no key file's content is ever shown.
    let wrong: PathBuf = dir.path().join("other.key");
    let other = MasterKey::create_file(&wrong).unwrap();
    let e = open(without.path(), Some(&wrong))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains(&format!("(id {})", other.id()))
            && e.contains("needs the master key it was written with"),
        "{e}"
    );
    for file in [&key_file, &wrong] {
        let secret = std::fs::read_to_string(file).unwrap();
        assert!(!e.contains(secret.trim()) && !said.contains(secret.trim()));
    }
}

#[test]
fn a_backup_never_overwrites_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    drop(open(&state, None).unwrap());
    let target = dir.path().join("old-backup.sqlite3");
    std::fs::write(&target, b"last week's backup").unwrap();
    let out = host_sim(&state, &["backup", "--to", target.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("never overwrites"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"last week's backup");
}

#[test]
fn an_older_host_refuses_a_newer_schema_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let host = open(&state, None).unwrap();
    bind(&host, "p1");
    drop(host);
    let db = state.join(DB_FILE);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let known: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    conn.pragma_update(None, "user_version", known + 1).unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    drop(conn);
    // The key file moved away, to see that none is made.
    let key_file = state.join("master.key");
    std::fs::rename(&key_file, dir.path().join("kept.key")).unwrap();
    let digest = || hex::encode(Sha256::digest(std::fs::read(&db).unwrap()));
    let before = digest();

    match open(&state, None) {
        Err(HostError::State(StateError::SchemaTooNew(e))) => {
            assert_eq!((e.found, e.known), (known + 1, known));
        }
        Err(e) => panic!("not a schema refusal: {e}"),
        Ok(_) => panic!("a newer schema was opened"),
    }
    let out = host_sim(&state, &["binding", "show"]).output().unwrap();
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(11), "{said}");
    assert!(
        said.contains(&format!(
            "is at schema version {}, this binary knows up to {known}: run a newer release, or restore the backup taken before the upgrade",
            known + 1
        )) && said.contains("nothing was changed"),
        "{said}"
    );
    assert_eq!(digest(), before, "the database is unchanged");
    assert!(!key_file.exists(), "no master key file was made");
}

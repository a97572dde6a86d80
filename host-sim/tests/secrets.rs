//! Secrets at rest in the operator state: each binding's provider secret
//! and the tracking challenge key are stored sealed under the master key.
//! A copied state directory's database and WAL hold none of them in any
//! usual encoding; a sealed value moved to another row, truncated, or met
//! with another key is refused with an error naming whose secret it is,
//! and nothing is overwritten; an older state's plain text is sealed on
//! the first open with a key; a rotation re-seals everything under a new
//! key, goes on after being killed, and leaves the old key removable.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
use hmac::Mac;
use host_sim::state::{DB_FILE, MasterKey, MasterKeySource, StateError};
use host_sim::{AuthStyle, Host, HostConfig, HostError, Secret};
use secrets_at_rest::Keyring;

const PROVIDER_SECRET: &str = "umami-api-key-7f3c9a61d2b84e05";
const OTHER_SECRET: &str = "second-provider-secret-58e1b0c4";

/// A host over `state` with the key in `key` (or beside the state).
fn open(state: &Path, key: Option<&Path>) -> Result<Host, HostError> {
    let mut config = HostConfig::new(state);
    if let Some(file) = key {
        config.master_key = MasterKeySource::File(file.to_path_buf());
    }
    Host::open(config)
}

fn bind(host: &Host, project: &str, name: &str, secret: &str) {
    host.set_binding(
        project,
        name,
        "https://provider.example",
        Secret::new(secret),
        AuthStyle::Bearer,
        Duration::from_secs(5),
    )
    .unwrap();
}

/// The secrets of `project`'s bindings as an invocation reads them.
fn secrets_read(host: &Host, project: &str) -> Result<Vec<(String, String)>, StateError> {
    let snapshot = host
        .state()
        .invocation_snapshot("hst_none", "ext", project)?;
    Ok(snapshot
        .bindings
        .iter()
        .map(|b| (b.name.clone(), format!("{:?}", b.secret)))
        .collect())
}

/// A state with one secret of every kind: two bindings' provider secrets
/// and the tracking challenge key (made by the first tracking domain).
/// Answers the challenge key's bytes, opened from the state the way an
/// outsider holding the master key would.
fn state_with_every_secret(dir: &Path) -> (Host, Vec<u8>) {
    let host = open(&dir.join("state"), None).unwrap();
    bind(&host, "p1", "provider", PROVIDER_SECRET);
    bind(&host, "p2", "provider", OTHER_SECRET);
    host.configure_tracking(Some("ingress.provider.example"), None, None)
        .unwrap();
    let records = host
        .add_tracking_domain("p1", "stats.shop.example")
        .unwrap();
    let key = challenge_key(dir);
    // The key opened is the one the host signs challenges with.
    let mut mac =
        <hmac::Hmac<sha2::Sha256> as hmac::digest::KeyInit>::new_from_slice(&key).unwrap();
    mac.update(b"p1\nstats.shop.example");
    assert_eq!(
        records.txt_value,
        format!(
            "host-sim-verify={}",
            hex::encode(mac.finalize().into_bytes())
        )
    );
    (host, key)
}

fn db(dir: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(dir.join("state").join(DB_FILE)).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn
}

fn text(dir: &Path, sql: &str) -> String {
    db(dir).query_row(sql, [], |r| r.get(0)).unwrap()
}

fn execute(dir: &Path, sql: &str) {
    db(dir).execute_batch(sql).unwrap();
}

fn challenge_key(dir: &Path) -> Vec<u8> {
    let key = MasterKey::read_file(&dir.join("state/master.key")).unwrap();
    let sealed = text(
        dir,
        "SELECT challenge_key FROM tracking_settings WHERE id = 1",
    );
    let opened = Keyring::new(key)
        .open_text("host-sim/challenge/tracking_settings=1", &sealed)
        .unwrap();
    hex::decode(opened.as_str()).unwrap()
}

/// Every stored secret value as the state holds it.
fn stored_values(dir: &Path) -> String {
    text(
        dir,
        "SELECT (SELECT group_concat(secret, ' ') FROM bindings) || ' ' || \
         (SELECT challenge_key FROM tracking_settings)",
    )
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Each secret's bytes in raw, base64, base64url and hex form.
fn forms(secrets: &[(&str, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    let mut forms = Vec::new();
    for (name, bytes) in secrets {
        forms.push((format!("{name} raw"), bytes.clone()));
        forms.push((
            format!("{name} base64"),
            STANDARD.encode(bytes).into_bytes(),
        ));
        forms.push((
            format!("{name} base64url"),
            URL_SAFE.encode(bytes).into_bytes(),
        ));
        forms.push((
            format!("{name} base64url unpadded"),
            URL_SAFE_NO_PAD.encode(bytes).into_bytes(),
        ));
        forms.push((format!("{name} hex"), hex::encode(bytes).into_bytes()));
        forms.push((format!("{name} HEX"), hex::encode_upper(bytes).into_bytes()));
    }
    forms
}

#[test]
fn no_secret_is_in_the_database_or_its_wal() {
    let dir = tempfile::tempdir().unwrap();
    let (host, key) = state_with_every_secret(dir.path());
    let files: Vec<(String, Vec<u8>)> = [DB_FILE.to_string(), format!("{DB_FILE}-wal")]
        .iter()
        .filter_map(|f| {
            std::fs::read(dir.path().join("state").join(f))
                .ok()
                .map(|b| (f.clone(), b))
        })
        .collect();
    assert_eq!(files.len(), 2, "the database and its WAL, the host running");
    // The search reads what holds the data: each sealed value is found.
    let stored = stored_values(dir.path());
    for value in stored.split(' ') {
        assert!(value.starts_with("enc1:"), "not sealed: a stored secret");
        assert!(
            files.iter().any(|(_, b)| contains(b, value.as_bytes())),
            "the files do not hold the sealed value {value}"
        );
    }
    let forms = forms(&[
        ("provider secret", PROVIDER_SECRET.as_bytes().to_vec()),
        ("other secret", OTHER_SECRET.as_bytes().to_vec()),
        ("challenge key", key),
    ]);
    assert_eq!(forms.len(), 3 * 6);
    for (file, bytes) in &files {
        for (form, needle) in &forms {
            assert!(!contains(bytes, needle), "{file} holds the {form}");
        }
    }
    drop(host);
}

#[test]
fn a_sealed_value_moved_or_truncated_is_refused_and_nothing_is_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let (host, _key) = state_with_every_secret(dir.path());
    let p1 = text(
        dir.path(),
        "SELECT secret FROM bindings WHERE project_id = 'p1'",
    );

    // p1's sealed secret copied into p2's row.
    execute(
        dir.path(),
        &format!("UPDATE bindings SET secret = '{p1}' WHERE project_id = 'p2'"),
    );
    let e = secrets_read(&host, "p2").unwrap_err().to_string();
    assert!(
        e.contains("the secret of binding `provider` of project p2")
            && e.contains("copied from another row"),
        "{e}"
    );
    assert!(
        !e.contains(&p1[10..]) && !e.contains(PROVIDER_SECRET),
        "{e}"
    );
    assert_eq!(
        secrets_read(&host, "p1").unwrap(),
        [("provider".to_string(), "Secret([redacted])".to_string())]
    );

    // A truncated value.
    let cut = &p1[..p1.len() - 12];
    execute(
        dir.path(),
        &format!("UPDATE bindings SET secret = '{cut}' WHERE project_id = 'p2'"),
    );
    let e = secrets_read(&host, "p2").unwrap_err().to_string();
    assert!(
        e.contains("the secret of binding `provider` of project p2"),
        "{e}"
    );

    // A binding's sealed secret moved into the challenge key's row.
    execute(
        dir.path(),
        &format!("UPDATE tracking_settings SET challenge_key = '{p1}'"),
    );
    let e = host
        .add_tracking_domain("p2", "www.other.example")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the tracking challenge key") && e.contains("copied from another row"),
        "{e}"
    );

    // Nothing was overwritten, not even by a reopening.
    let before = stored_values(dir.path());
    drop(host);
    let host = open(&dir.path().join("state"), None).unwrap();
    assert_eq!(stored_values(dir.path()), before);
    assert!(before.contains(cut) && before.contains(&p1));
    drop(host);
}

fn host_sim(state: &Path, key: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_host-sim"));
    command
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("HOST_SIM_DB")
        .env("HOST_SIM_MASTER_KEY_FILE", key)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_wrong_master_key_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (host, _key) = state_with_every_secret(dir.path());
    drop(host);
    let before = stored_values(dir.path());
    let wrong = dir.path().join("wrong.key");
    let key = MasterKey::create_file(&wrong).unwrap();
    let e = open(&dir.path().join("state"), Some(&wrong))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains(&format!("(id {})", key.id()))
            && e.contains("is not a key of this database")
            && e.contains("nothing was changed")
            && e.contains("--master-key-file"),
        "{e}"
    );
    let key_text = std::fs::read_to_string(&wrong).unwrap();
    assert!(!e.contains(key_text.trim()));
    assert_eq!(stored_values(dir.path()), before);

    // The CLI refuses too, naming the file and the flag.
    let out = host_sim(&dir.path().join("state"), &wrong, &["secrets", "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = stderr(&out);
    assert!(
        stderr.contains("is not a key of this database")
            && stderr.contains(&wrong.display().to_string())
            && stderr.contains("--master-key-file"),
        "{stderr}"
    );
    assert_eq!(stored_values(dir.path()), before);
    assert_eq!(
        text(dir.path(), "SELECT count(*) || '' FROM master_keys"),
        "1"
    );
}

#[test]
fn the_first_open_makes_the_key_says_so_once_and_seals_an_older_states_plain_text() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let beside = state.join("master.key");
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_host-sim"))
            .arg("--state-dir")
            .arg(&state)
            .args(["binding", "show"])
            .env_remove("HOST_SIM_MASTER_KEY_FILE")
            .env_remove("HOST_SIM_DB")
            .output()
            .unwrap()
    };
    let first = run();
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(
        stderr(&first).contains(&format!(
            "created the master key {} (mode 0600)",
            beside.display()
        )),
        "{}",
        stderr(&first)
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&beside).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let again = run();
    assert!(!stderr(&again).contains("created the master key"));

    // The state as a version without master keys left it: plain text.
    let (host, key) = state_with_every_secret(dir.path());
    drop(host);
    execute(
        dir.path(),
        &format!(
            "DELETE FROM master_key_wraps; DELETE FROM master_keys; \
             UPDATE bindings SET secret = '{PROVIDER_SECRET}' WHERE project_id = 'p1'; \
             UPDATE bindings SET secret = '{OTHER_SECRET}' WHERE project_id = 'p2'; \
             UPDATE tracking_settings SET challenge_key = '{}'",
            hex::encode(&key)
        ),
    );
    std::fs::remove_file(&beside).unwrap();
    let host = open(&state, None).unwrap();
    let status = host.secrets_status().unwrap();
    assert_eq!(status.plain_text, 0);
    assert_eq!(status.keys.len(), 1);
    assert_eq!(status.keys[0].values, 3, "{status:?}");
    let stored = stored_values(dir.path());
    assert!(!stored.contains(PROVIDER_SECRET) && !stored.contains(&hex::encode(&key)));
    assert_eq!(challenge_key(dir.path()), key);
    assert_eq!(secrets_read(&host, "p1").unwrap().len(), 1);
}

fn key_file(dir: &Path, name: &str) -> (PathBuf, String) {
    let path = dir.join(name);
    let key = MasterKey::create_file(&path).unwrap();
    (path, key.id().to_string())
}

#[test]
fn a_rotation_reseals_everything_and_the_old_key_can_go() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (host, key) = state_with_every_secret(dir.path());
    let old_file = state.join("master.key");
    let old_id = host.secrets_status().unwrap().current;
    let (new_file, new_id) = key_file(dir.path(), "new.key");

    let resealed = host
        .rotate_secrets(MasterKey::read_file(&new_file).unwrap())
        .unwrap();
    assert_eq!(resealed, 3);
    let status = host.secrets_status().unwrap();
    assert_eq!(status.current, new_id);
    let values: Vec<(String, u64)> = status
        .keys
        .iter()
        .map(|k| (k.id.clone(), k.values))
        .collect();
    assert_eq!(values, vec![(old_id.clone(), 0), (new_id.clone(), 3)]);

    // A process still started with the old key reads the new values; so
    // does one started with the new key only; the running host goes on.
    for file in [&old_file, &new_file] {
        let other = open(&state, Some(file)).unwrap();
        assert_eq!(secrets_read(&other, "p2").unwrap().len(), 1);
        other
            .add_tracking_domain("p2", "www.other.example")
            .unwrap();
    }
    assert_eq!(secrets_read(&host, "p1").unwrap().len(), 1);
    bind(&host, "p3", "provider", "written-after-the-rotation");
    assert_eq!(host.secrets_status().unwrap().keys[1].values, 4);

    // The old key is removed; from then on it opens nothing.
    host.forget_master_key(&old_id).unwrap();
    let e = open(&state, Some(&old_file)).err().unwrap().to_string();
    assert!(e.contains("is not a key of this database"), "{e}");
    let e = host.forget_master_key(&new_id).unwrap_err().to_string();
    assert!(
        e.contains("still protects 4 values and seals new ones"),
        "{e}"
    );
    let reopened = open(&state, Some(&new_file)).unwrap();
    assert_eq!(secrets_read(&reopened, "p3").unwrap().len(), 1);
    assert!(!stored_values(dir.path()).contains(&hex::encode(&key)));
}

/// Many bindings, written as an older state would have (plain text) and
/// sealed by the first open, so a rotation takes long enough to be killed.
const MANY: usize = 20_000;

fn count_under(dir: &Path, key_id: &str) -> usize {
    let n: i64 = db(dir)
        .query_row(
            "SELECT count(*) FROM bindings WHERE secret LIKE ?1",
            [format!("enc1:{key_id}:%")],
            |r| r.get(0),
        )
        .unwrap();
    n as usize
}

#[test]
fn a_killed_rotation_finishes_when_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (host, _key) = state_with_every_secret(dir.path());
    let old_id = host.secrets_status().unwrap().current;
    drop(host);
    {
        let mut conn = db(dir.path());
        let tx = conn.transaction().unwrap();
        for i in 0..MANY {
            tx.execute(
                "INSERT INTO bindings (project_id, name, origin, secret, auth_style, timeout_ms, updated_at)
                 VALUES (?1, 'provider', 'https://provider.example', ?2, 'bearer', 5000, 0)",
                [format!("bulk-{i}"), format!("bulk-secret-{i}")],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    let host = open(&state, None).unwrap();
    // The bindings' secrets, and the challenge key.
    let bindings = MANY + 2;
    let total = bindings + 1;
    assert_eq!(host.secrets_status().unwrap().keys[0].values, total as u64);
    let old_file = state.join("master.key");
    let (new_file, new_id) = key_file(dir.path(), "new.key");
    let new_arg = new_file.display().to_string();

    let mut rotation = host_sim(
        &state,
        &old_file,
        &["secrets", "rotate", "--new-key-file", &new_arg],
    )
    .spawn()
    .unwrap();
    // Killed (SIGKILL) as soon as it has re-sealed some values.
    let deadline = Instant::now() + Duration::from_secs(60);
    // Values are re-sealed in the order they are stored: the first one
    // under the new key is found at once.
    let watcher = db(dir.path());
    let started = format!(
        "SELECT count(*) FROM (SELECT 1 FROM bindings WHERE secret LIKE 'enc1:{new_id}:%' LIMIT 1)"
    );
    while watcher
        .query_row(&started, [], |r| r.get::<_, i64>(0))
        .unwrap()
        == 0
    {
        assert!(Instant::now() < deadline, "the rotation did not start");
        assert!(
            rotation.try_wait().unwrap().is_none(),
            "the rotation ended early"
        );
    }
    rotation.kill().unwrap();
    rotation.wait().unwrap();
    let midway = count_under(dir.path(), &new_id);
    assert!(
        midway > 0 && midway < bindings,
        "killed midway: {midway} of {bindings} re-sealed"
    );
    let status = host.secrets_status().unwrap();
    assert_eq!(status.current, new_id, "the new key was recorded");
    // Meanwhile the host reads values under either key.
    assert_eq!(secrets_read(&host, "bulk-0").unwrap().len(), 1);
    assert_eq!(
        secrets_read(&host, &format!("bulk-{}", MANY - 1))
            .unwrap()
            .len(),
        1
    );

    let out = host_sim(
        &state,
        &old_file,
        &["secrets", "rotate", "--new-key-file", &new_arg],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "rotation done: {} values re-sealed; every stored secret is sealed under {new_id}",
            total - midway
        )),
        "{}",
        stderr(&out)
    );
    let out = host_sim(&state, &new_file, &["secrets", "status"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["current"], new_id.as_str());
    assert_eq!(json["plain_text"], 0);
    assert_eq!(json["keys"][0]["values"], 0);
    assert_eq!(json["keys"][1]["values"], total as u64);
    let out = host_sim(&state, &new_file, &["secrets", "forget", &old_id])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("master key {old_id} forgotten")));
}

//! Relay benchmark: the rate of `POST /emails` when the handoff goes to a
//! real relay, next to the file transport's in the same run. Debian's
//! Postfix relays (STARTTLS and SASL required: the MTA of `tests/mta.rs`,
//! without its OpenDKIM milter, whose resolver fails under concurrent
//! messages, see `MtaOptions::verify_dkim`), and two `mail-service serve`
//! processes on one SQLite database, one with the file transport and one
//! with the relay (its pooled connections), are loaded in alternating
//! slices. It prints both rates, their ratio, and how many messages
//! Postfix delivered.
//!
//! `cargo bench -p mail-service --bench relay_load`
//! Environment: MAIL_BENCH_SECONDS (default 10, per transport),
//! MAIL_BENCH_CONCURRENCY (default 16). Needs root and Debian's postfix,
//! opendkim and sasl2-bin (skipped, said so, without them).

#[allow(dead_code)]
#[path = "../tests/common/mta.rs"]
mod mta;
// The benchmarks share `support`; this one uses its tenant and server.
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use dns_fixture::DnsFixture;
use mail_service::store::StorageConfig;
use mta::{Mta, MtaOptions, PASSWORD, USER};
use support::load::{Samples, load_api};

#[tokio::main]
async fn main() {
    let seconds = support::load_seconds(1, 10);
    let concurrency = support::env_or("MAIL_BENCH_CONCURRENCY", 16) as usize;
    let dns = DnsFixture::start().expect("the DNS fixture starts");
    let Some(mta) = Mta::start(MtaOptions {
        dns: dns.addr(),
        feedback: None,
        verify_dkim: false,
    }) else {
        println!("relay_load: skipped (Postfix or OpenDKIM is missing)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let storage = StorageConfig::sqlite(dir.path().join("mail.db"));
    let Some((store, _service, _record, key)) =
        support::bench_tenant("sqlite", &storage, dir.path(), "relay").await
    else {
        return;
    };
    let password_file = dir.path().join("relay.password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    std::fs::set_permissions(
        &password_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let ca_file = dir.path().join("relay-ca.pem");
    std::fs::write(&ca_file, &mta.ca_pem).unwrap();
    let data_dir = (
        "MAIL_DATA_DIR".to_string(),
        dir.path().display().to_string(),
    );
    let file_env = vec![
        data_dir.clone(),
        (
            "MAIL_OUTBOX_DIR".into(),
            dir.path().join("outbox").display().to_string(),
        ),
    ];
    let relay_env = vec![
        data_dir,
        ("MAIL_SMTP_HOST".into(), "127.0.0.1".into()),
        ("MAIL_SMTP_PORT".into(), mta.submission_port.to_string()),
        ("MAIL_SMTP_SECURITY".into(), "starttls".into()),
        ("MAIL_SMTP_CA_FILE".into(), ca_file.display().to_string()),
        ("MAIL_SMTP_USERNAME".into(), USER.into()),
        (
            "MAIL_SMTP_PASSWORD_FILE".into(),
            password_file.display().to_string(),
        ),
    ];
    let (mut file_server, file_base) = support::serve(&file_env);
    let (mut relay_server, relay_base) = support::serve(&relay_env);

    let rounds = 4;
    let slice = (seconds / rounds).max(1);
    let mut file = Samples::default();
    let mut relay = Samples::default();
    let mut errors = 0;
    for round in 0..rounds {
        for relayed in [round % 2 == 1, round % 2 == 0] {
            let (base, samples) = if relayed {
                (&relay_base, &mut relay)
            } else {
                (&file_base, &mut file)
            };
            let (latencies, elapsed, e) =
                load_api(base, &key, "ada@rcpt.test", slice, concurrency).await;
            samples.add(latencies, elapsed);
            errors += e;
        }
    }
    let file = file.figures();
    let relay = relay.figures();
    // Postfix has accepted every relayed message; its deliveries follow.
    let deadline = Instant::now() + Duration::from_secs(120);
    while mta.delivered("ada").len() < relay.count && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for server in [&mut file_server, &mut relay_server] {
        let _ = server.kill();
        let _ = server.wait();
    }
    for (name, figures) in [("file transport", &file), ("Postfix relay ", &relay)] {
        println!(
            "sqlite    POST /emails, {name}: {:>7.0}/s  p50 {:>6.2} ms  p99 {:>6.2} ms  ({} sent, {concurrency} connections)",
            figures.rate, figures.p50_ms, figures.p99_ms, figures.count
        );
    }
    println!(
        "sqlite    ratio relay / file: {:.2} (rate); errors: {errors}; Postfix delivered {} of {} relayed",
        relay.rate / file.rate,
        mta.delivered("ada").len(),
        relay.count
    );
    store.close().await;
}

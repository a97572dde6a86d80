//! An operator connects a project's tracking hostname: `add` refuses what
//! cannot be one, `verify` asks a real DNS server on loopback
//! (hickory-server, `dns-fixture`) over UDP and TCP and reports each record
//! as found, missing, wrong value or lookup failed.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use dns_fixture::{DnsFixture, Fault, Record};
use host_sim::state::{StateError, Step, TrackingRefusal};
use host_sim::tracking::dns::{DnsOptions, RecordState};
use host_sim::tracking::hostname::HostnameError;
use host_sim::{AuthStyle, Host, HostConfig, HostError, Secret, TrackingError};

const INGRESS: &str = "ingress.provider.example";

fn host() -> (tempfile::TempDir, Host) {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::open(HostConfig::new(dir.path())).unwrap();
    host.configure_tracking(
        Some(INGRESS),
        Some("https://console.platform.example"),
        Some(vec!["status.platform.example".into()]),
    )
    .unwrap();
    host.set_binding(
        "p1",
        "provider",
        "https://umami.provider.example",
        Secret::new("provider-secret-never-shown".to_string()),
        AuthStyle::Bearer,
        Duration::from_secs(5),
    )
    .unwrap();
    (dir, host)
}

fn options(dns: &DnsFixture) -> DnsOptions {
    DnsOptions {
        nameservers: vec![dns.addr()],
        timeout: Duration::from_millis(400),
    }
}

#[test]
fn add_refuses_apex_ip_wildcard_invalid_reserved_and_bound_hostnames() {
    let (_dir, host) = host();
    let refused = |hostname: &str| match host.add_tracking_domain("p1", hostname) {
        Err(HostError::Tracking(error)) => error,
        other => panic!("{hostname}: {other:?}"),
    };
    assert!(matches!(
        refused("shop.example"),
        TrackingError::Hostname(HostnameError::Apex { .. })
    ));
    assert!(matches!(
        refused("track.a.localhost"),
        TrackingError::Hostname(HostnameError::SpecialUse { .. })
    ));
    assert!(
        refused("shop.example")
            .to_string()
            .contains("a CNAME cannot live")
    );
    assert!(matches!(
        refused("192.0.2.10"),
        TrackingError::Hostname(HostnameError::Ip { .. })
    ));
    assert!(matches!(
        refused("*.shop.example"),
        TrackingError::Hostname(HostnameError::Wildcard { .. })
    ));
    assert!(matches!(
        refused("tr ack.shop.example"),
        TrackingError::Hostname(HostnameError::Invalid { .. })
    ));
    for (reserved, why) in [
        ("status.platform.example", "reserved list"),
        ("Console.Platform.Example.", "console"),
        ("umami.provider.example", "binding `provider`"),
        (INGRESS, "ingress target"),
    ] {
        let error = refused(reserved);
        assert!(
            matches!(&error, TrackingError::Reserved { why: w, .. } if w.contains(why)),
            "{reserved}: {error}"
        );
    }
    assert!(
        host.tracking_domains(None).unwrap().is_empty(),
        "nothing stored"
    );

    let first = host
        .add_tracking_domain("p1", "Track.Shop.Example.")
        .unwrap();
    assert_eq!(first.domain.hostname, "track.shop.example");
    assert_eq!(first.domain.step, Step::Added);
    assert_eq!(first.txt_name, "_host-sim-challenge.track.shop.example");
    assert_eq!(first.cname_target, INGRESS);
    let again = host
        .add_tracking_domain("p1", "track.shop.example")
        .unwrap();
    assert_eq!(again.txt_value, first.txt_value, "add again resumes");

    match host.add_tracking_domain("p2", "TRACK.shop.example") {
        Err(HostError::State(StateError::Tracking(TrackingRefusal::BoundElsewhere {
            project,
            ..
        }))) => assert_eq!(project, "p1"),
        other => panic!("{other:?}"),
    }
    let other = host.add_tracking_domain("p2", "t.other.example").unwrap();
    assert_ne!(
        other.txt_value, first.txt_value,
        "each (project, hostname) has its own challenge"
    );
}

#[test]
fn verify_reports_missing_records_and_moves_on_once_both_are_found() {
    let (_dir, host) = host();
    let dns = DnsFixture::start().unwrap();
    let added = host
        .add_tracking_domain("p1", "track.shop.example")
        .unwrap();

    let (domain, report) = host
        .verify_tracking_domain("p1", "track.shop.example", &options(&dns))
        .unwrap();
    assert_eq!(report.txt.state, RecordState::Missing);
    assert_eq!(report.cname.state, RecordState::Missing);
    assert!(!report.retryable());
    assert_eq!(domain.step, Step::Added);

    dns.set(&added.txt_name, [Record::txt(&added.txt_value)]);
    let (domain, report) = host
        .verify_tracking_domain("p1", "track.shop.example", &options(&dns))
        .unwrap();
    assert_eq!(report.txt.state, RecordState::Found);
    assert_eq!(report.cname.state, RecordState::Missing);
    assert_eq!(domain.step, Step::Added, "one record is not enough");

    dns.set("track.shop.example", [Record::cname(INGRESS)]);
    let (domain, report) = host
        .verify_tracking_domain("p1", "track.shop.example", &options(&dns))
        .unwrap();
    assert!(report.verified(), "{report:?}");
    assert_eq!(domain.step, Step::Verified);
    assert_eq!(
        host.tracking_domain("p1", "track.shop.example")
            .unwrap()
            .dns_report
            .unwrap()["cname"]["state"],
        "found",
        "status shows the last report"
    );
}

#[test]
fn a_wrong_cname_and_a_txt_of_another_project_are_wrong_values() {
    let (_dir, host) = host();
    let dns = DnsFixture::start().unwrap();
    let ours = host
        .add_tracking_domain("p1", "track.shop.example")
        .unwrap();
    // Project p2's challenge for its own hostname, and a CNAME elsewhere.
    let theirs = host.add_tracking_domain("p2", "t.other.example").unwrap();
    dns.set(&ours.txt_name, [Record::txt(&theirs.txt_value)]);
    dns.set(
        "track.shop.example",
        [Record::cname("ingress.competitor.example")],
    );
    let (domain, report) = host
        .verify_tracking_domain("p1", "track.shop.example", &options(&dns))
        .unwrap();
    match &report.txt.state {
        RecordState::WrongValue { found, note } => {
            assert_eq!(found, std::slice::from_ref(&theirs.txt_value));
            assert!(note.contains("another project"), "{note}");
        }
        other => panic!("{other:?}"),
    }
    match &report.cname.state {
        RecordState::WrongValue { found, .. } => {
            assert_eq!(found, &["ingress.competitor.example".to_string()])
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(domain.step, Step::Added);
}

#[test]
fn an_address_record_where_the_cname_belongs_is_a_wrong_value_not_missing() {
    let (_dir, host) = host();
    let dns = DnsFixture::start().unwrap();
    host.add_tracking_domain("p1", "track.shop.example")
        .unwrap();
    dns.set("track.shop.example", [Record::a([192, 0, 2, 10])]);
    let (_, report) = host
        .verify_tracking_domain("p1", "track.shop.example", &options(&dns))
        .unwrap();
    match &report.cname.state {
        RecordState::WrongValue { found, note } => {
            assert_eq!(found, &["A 192.0.2.10".to_string()]);
            assert!(
                note.contains("address record sits where the CNAME"),
                "{note}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn servfail_and_timeouts_are_retryable_lookup_failures_not_missing_records() {
    let (_dir, host) = host();
    let dns = DnsFixture::start().unwrap();
    let added = host
        .add_tracking_domain("p1", "track.shop.example")
        .unwrap();
    dns.set(&added.txt_name, [Record::txt(&added.txt_value)]);
    dns.set("track.shop.example", [Record::cname(INGRESS)]);
    dns.fault(&added.txt_name, Fault::ServFail);
    dns.fault("track.shop.example", Fault::NoAnswer);
    let (domain, report) = host
        .verify_tracking_domain("p1", "track.shop.example", &options(&dns))
        .unwrap();
    assert!(
        matches!(&report.txt.state, RecordState::LookupFailed { reason } if reason.contains("SERVFAIL")),
        "{:?}",
        report.txt.state
    );
    assert!(
        matches!(&report.cname.state, RecordState::LookupFailed { reason } if reason.contains("in time")),
        "{:?}",
        report.cname.state
    );
    assert!(report.retryable() && !report.verified());
    assert_eq!(domain.step, Step::Added);

    dns.clear_fault(&added.txt_name);
    dns.clear_fault("track.shop.example");
    let (domain, _) = host
        .verify_tracking_domain("p1", "track.shop.example", &options(&dns))
        .unwrap();
    assert_eq!(domain.step, Step::Verified, "the retry succeeds");
}

#[test]
fn cname_chains_and_case_and_trailing_dot_variants_verify() {
    let (_dir, host) = host();
    let dns = DnsFixture::start().unwrap();
    let added = host
        .add_tracking_domain("p1", "track.shop.example")
        .unwrap();
    dns.set(
        &format!("{}.", added.txt_name.to_uppercase()),
        [Record::txt(added.txt_value.to_uppercase())],
    );
    dns.set("TRACK.Shop.Example.", [Record::cname("hop1.cdn.example.")]);
    dns.set("hop1.cdn.example", [Record::cname("HOP2.cdn.example")]);
    dns.set(
        "hop2.cdn.example",
        [Record::cname("Ingress.Provider.Example.")],
    );
    let (domain, report) = host
        .verify_tracking_domain("p1", "Track.SHOP.example.", &options(&dns))
        .unwrap();
    assert!(report.verified(), "{report:?}");
    assert_eq!(domain.step, Step::Verified);

    // A chain that ends elsewhere names the chain it followed.
    let other = host.add_tracking_domain("p1", "t2.shop.example").unwrap();
    dns.set(&other.txt_name, [Record::txt(&other.txt_value)]);
    dns.set("t2.shop.example", [Record::cname("hop1.elsewhere.example")]);
    dns.set(
        "hop1.elsewhere.example",
        [Record::cname("end.elsewhere.example")],
    );
    dns.set("end.elsewhere.example", [Record::a([192, 0, 2, 1])]);
    let (_, report) = host
        .verify_tracking_domain("p1", "t2.shop.example", &options(&dns))
        .unwrap();
    assert_eq!(
        report.cname.state,
        RecordState::WrongValue {
            found: vec![
                "hop1.elsewhere.example".into(),
                "end.elsewhere.example".into()
            ],
            note: "the CNAME chain ends elsewhere".into(),
        }
    );
}

#[test]
fn an_answer_too_large_for_udp_is_asked_again_over_tcp() {
    let (_dir, host) = host();
    let dns = DnsFixture::start().unwrap();
    let added = host
        .add_tracking_domain("p1", "track.shop.example")
        .unwrap();
    // Other TXT records at the challenge name: together far beyond a UDP answer.
    let mut records: Vec<Record> = (0..12)
        .map(|i| Record::txt(format!("{i:02}{}", "x".repeat(240))))
        .collect();
    records.push(Record::txt(&added.txt_value));
    dns.set(&added.txt_name, records);
    dns.set("track.shop.example", [Record::cname(INGRESS)]);
    let (_, report) = host
        .verify_tracking_domain("p1", "track.shop.example", &options(&dns))
        .unwrap();
    assert!(report.verified(), "{report:?}");
    let protocols: Vec<String> = dns
        .queries()
        .into_iter()
        .filter(|q| q.record_type == "TXT")
        .map(|q| q.protocol)
        .collect();
    assert!(
        protocols.contains(&"udp".to_string()) && protocols.contains(&"tcp".to_string()),
        "{protocols:?}"
    );
}

#[test]
fn steps_refuse_a_hostname_of_another_project_and_remove_forgets_an_unrouted_one() {
    let (_dir, host) = host();
    let dns = DnsFixture::start().unwrap();
    host.add_tracking_domain("p1", "track.shop.example")
        .unwrap();
    assert!(matches!(
        host.verify_tracking_domain("p2", "track.shop.example", &options(&dns)),
        Err(HostError::State(StateError::Tracking(
            TrackingRefusal::BoundElsewhere { .. }
        )))
    ));
    assert!(matches!(
        host.verify_tracking_domain("p1", "never.shop.example", &options(&dns)),
        Err(HostError::State(StateError::Tracking(
            TrackingRefusal::Unknown { .. }
        )))
    ));
    assert!(
        host.remove_tracking_domain(
            "p1",
            "track.shop.example",
            &host_sim::EdgeRemoval::Check(Default::default()),
            &mut |_| {},
        )
        .unwrap()
    );
    assert!(
        !host
            .remove_tracking_domain(
                "p1",
                "track.shop.example",
                &host_sim::EdgeRemoval::Check(Default::default()),
                &mut |_| {},
            )
            .unwrap()
    );
    host.add_tracking_domain("p2", "track.shop.example")
        .expect("free again after remove");
}

// ---- the CLI ---------------------------------------------------------------

fn cli(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_host-sim"))
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_cli_prints_the_records_and_verify_exits_by_what_dns_said() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let dns = DnsFixture::start().unwrap();
    let nameserver = dns.addr().to_string();
    let ok = |out: &Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        )
    };
    ok(&cli(
        state,
        &["tracking-domain", "configure", "--ingress-target", INGRESS],
    ));
    let apex = cli(
        state,
        &[
            "tracking-domain",
            "add",
            "--project",
            "p1",
            "--hostname",
            "shop.example",
        ],
    );
    assert_eq!(apex.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&apex.stderr).contains("a CNAME cannot live"));

    let added = cli(
        state,
        &[
            "tracking-domain",
            "add",
            "--project",
            "p1",
            "--hostname",
            "track.shop.example",
        ],
    );
    ok(&added);
    let printed: serde_json::Value = serde_json::from_slice(&added.stdout).unwrap();
    let txt = printed["records"][0]["value"].as_str().unwrap().to_string();
    assert_eq!(printed["records"][1]["value"], INGRESS);

    let verify = |expect: i32| {
        let out = cli(
            state,
            &[
                "tracking-domain",
                "verify",
                "--project",
                "p1",
                "--hostname",
                "track.shop.example",
                "--nameserver",
                &nameserver,
                "--dns-timeout-ms",
                "400",
            ],
        );
        assert_eq!(
            out.status.code(),
            Some(expect),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(verify(7).contains("missing"));
    dns.set(
        "_host-sim-challenge.track.shop.example",
        [Record::txt(&txt)],
    );
    dns.set("track.shop.example", [Record::cname(INGRESS)]);
    dns.fault("track.shop.example", Fault::ServFail);
    assert!(verify(8).contains("lookup failed"));
    dns.clear_fault("track.shop.example");
    assert!(verify(0).contains("both records found"));

    let status = cli(
        state,
        &[
            "tracking-domain",
            "status",
            "--project",
            "p1",
            "--hostname",
            "track.shop.example",
        ],
    );
    ok(&status);
    let stderr = String::from_utf8_lossy(&status.stderr);
    assert!(stderr.contains("step verified"), "{stderr}");
    assert!(stderr.contains("CNAME track.shop.example"), "{stderr}");
    assert!(stderr.contains("TLS: not checked"), "{stderr}");

    // The challenge key never leaves the state: no output of any step shows
    // it (opened here with the state's master key, as only the host does).
    let sealed: String = rusqlite::Connection::open(state.join("host-sim.sqlite3"))
        .unwrap()
        .query_row("SELECT challenge_key FROM tracking_settings", [], |r| {
            r.get(0)
        })
        .unwrap();
    let master = secrets_at_rest::MasterKey::read_file(&state.join("master.key")).unwrap();
    let key_hex = secrets_at_rest::Keyring::new(master)
        .open_text("host-sim/challenge/tracking_settings=1", &sealed)
        .unwrap()
        .to_string();
    assert_eq!(key_hex.len(), 128);
    for args in [
        &["tracking-domain", "status"][..],
        &["tracking-domain", "configure"][..],
        &["tracking-domain", "plan"][..],
    ] {
        let out = cli(state, args);
        let shown = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !shown.contains(&key_hex),
            "{args:?} shows the challenge key"
        );
    }
    assert!(!String::from_utf8_lossy(&added.stdout).contains(&key_hex));

    for (step, checks) in [
        ("add", "not the apex of its domain"),
        ("verify", "lookup failed (SERVFAIL, timeout"),
    ] {
        let help = cli(state, &["tracking-domain", step, "--help"]);
        assert!(
            String::from_utf8_lossy(&help.stdout).contains(checks),
            "{step} --help"
        );
    }
}

//! The edge is checked, not assumed: `activate` refuses until
//! `https://HOST/script.js` (certificate checked against the roots) answers
//! the provider's script and the preflight of `/api/send` is allowed, and
//! `remove` refuses to forget a hostname the edge still serves. Run against
//! Debian's nginx with a private CA, restarted on the same port with each
//! new export (`nginx -t` checks each one first).

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::Provider;
use common::nginx::{free_port, start_nginx};
use common::tls::Ca;
use common::tracking::{HOSTNAME, SECRET, routed};
use host_sim::state::Step;
use host_sim::tracking::edge::{self, Probe};
use host_sim::tracking::ingress::{self, NginxOptions};
use host_sim::tracking::tls::TlsOptions;
use host_sim::{EdgeRemoval, Host, HostError, TrackingError};

fn step(host: &Host) -> Option<Step> {
    host.tracking_domain("p1", HOSTNAME).ok().map(|d| d.step)
}

/// Requests that reached the provider through an edge (they carry the
/// edge's `X-Forwarded-For`; the checks' own requests to the provider
/// origin do not).
fn through_the_edge(provider: &Provider) -> usize {
    provider
        .requests()
        .iter()
        .filter(|r| r.headers.iter().any(|(k, _)| k == "x-forwarded-for"))
        .count()
}

/// Waits until `done` holds.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn activate_needs_the_script_served_and_remove_needs_it_gone_from_the_edge() {
    let provider = Provider::start(SECRET);
    let (_dir, host) = routed(&provider);
    let certificates = tempfile::tempdir().unwrap();
    let ca = Ca::new("Test Root");
    ca.leaf_files(certificates.path(), HOSTNAME);
    let roots = ca.pem_file(certificates.path());
    let port = free_port();
    let listen = format!("127.0.0.1:{port} ssl");
    let certificate_dir = certificates.path().display().to_string();
    let edge_options = TlsOptions {
        address: Some(SocketAddr::from(([127, 0, 0, 1], port))),
        roots: Some(roots),
        attempt_timeout: Duration::from_secs(5),
        ..TlsOptions::default()
    };

    // Point 1 of the issue: a valid certificate, served by a block that
    // answers 404 to everything.
    let broken = format!(
        "server {{\n    listen {listen};\n    server_name {HOSTNAME};\n    \
         ssl_certificate {certificate_dir}/{HOSTNAME}/fullchain.pem;\n    \
         ssl_certificate_key {certificate_dir}/{HOSTNAME}/privkey.pem;\n    \
         location / {{ return 404; }}\n}}\n"
    );
    let prefix = tempfile::tempdir().unwrap();
    let Some(mut nginx) = start_nginx(prefix.path(), &broken, port) else {
        return;
    };
    host.wait_tls(
        "p1",
        HOSTNAME,
        &edge_options,
        Duration::from_secs(10),
        Duration::from_millis(200),
        &mut |_, _| {},
    )
    .expect("the certificate is valid");
    assert_eq!(step(&host), Some(Step::TlsReady));
    match host.activate_tracking_domain("p1", HOSTNAME, &edge_options) {
        Err(HostError::Tracking(TrackingError::NotServed { reason, .. })) => assert!(
            reason.contains("https://track.shop.example/script.js answers 404"),
            "{reason}"
        ),
        other => panic!("activated over a 404 edge: {other:?}"),
    }
    assert_eq!(step(&host), Some(Step::TlsReady), "nothing activated");
    assert_eq!(
        host.state().project_settings("p1").unwrap().tracking_origin,
        None
    );

    // The export, reloaded: the script is the provider's, the preflight allowed.
    let export = |host: &Host| {
        ingress::nginx(
            &host.tracking_routes().unwrap(),
            &NginxOptions {
                listen: listen.clone(),
                certificate_dir: certificate_dir.clone(),
                ..NginxOptions::default()
            },
        )
    };
    drop(nginx);
    nginx = start_nginx(prefix.path(), &export(&host), port).unwrap();
    eventually("the reloaded export serves the script", || {
        edge::probe(HOSTNAME, &provider.origin(), &edge_options).unwrap() == Probe::Served
    });
    let origin = host
        .activate_tracking_domain("p1", HOSTNAME, &edge_options)
        .expect("the edge serves the provider's script");
    assert_eq!(origin, format!("https://{HOSTNAME}"));
    assert_eq!(step(&host), Some(Step::Active));

    // remove while nginx still runs the old export: refused, the domain
    // stays (unrouted, verified) until the edge stops serving it.
    match host.remove_tracking_domain(
        "p1",
        HOSTNAME,
        &EdgeRemoval::Check(edge_options.clone()),
        &mut |_| {},
    ) {
        Err(HostError::Tracking(TrackingError::StillServed { reason, .. })) => {
            assert!(reason.contains("still answers 200"), "{reason}")
        }
        other => panic!("removed while the edge serves it: {other:?}"),
    }
    assert_eq!(step(&host), Some(Step::Verified));
    assert!(host.tracking_routes().unwrap().is_empty());
    let refused = host
        .remove_tracking_domain(
            "p1",
            HOSTNAME,
            &EdgeRemoval::Check(edge_options.clone()),
            &mut |_| {},
        )
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("re-export") && refused.contains("--removed-from-edge"),
        "{refused}"
    );

    // The stopped removal stays out of the routing: the plan wants nothing
    // back, and an apply (made for any other reason) routes nothing.
    let plan = host.tracking_plan().unwrap();
    assert!(plan.desired.is_empty(), "{}", plan.render());
    host.apply_tracking_plan(true, None).unwrap();
    assert!(host.tracking_routes().unwrap().is_empty());

    // "Cannot tell" is not "gone". The certificate does not verify (a
    // private CA without --roots): the edge still answers the script to a
    // visitor who clicks through, so remove stops.
    let without_roots = TlsOptions {
        roots: None,
        ..edge_options.clone()
    };
    match host.remove_tracking_domain(
        "p1",
        HOSTNAME,
        &EdgeRemoval::Check(without_roots),
        &mut |_| {},
    ) {
        Err(HostError::Tracking(TrackingError::StillServed { reason, .. })) => assert!(
            reason.contains("still answers 200") && reason.contains("does not verify"),
            "{reason}"
        ),
        other => panic!("removed past an unverified certificate: {other:?}"),
    }
    // The name no longer resolves (the customer deleted the CNAME first):
    // the edge cannot be asked, so remove stops and says what to do.
    let by_name = TlsOptions {
        address: None,
        ..edge_options.clone()
    };
    match host.remove_tracking_domain("p1", HOSTNAME, &EdgeRemoval::Check(by_name), &mut |_| {}) {
        Err(HostError::Tracking(error @ TrackingError::EdgeUnknown { .. })) => {
            let text = error.to_string();
            assert!(
                text.contains("does not resolve")
                    && text.contains("--address")
                    && text.contains("--removed-from-edge"),
                "{text}"
            );
        }
        other => panic!("removed a name it could not ask about: {other:?}"),
    }
    assert_eq!(step(&host), Some(Step::Verified), "nothing forgotten");

    // `keep` undoes the stopped removal: the domain is desired again.
    host.keep_tracking_domain("p1", HOSTNAME).unwrap();
    let plan = host.tracking_plan().unwrap();
    assert_eq!(plan.desired.len(), 1, "{}", plan.render());
    assert!(matches!(
        host.keep_tracking_domain("p1", HOSTNAME),
        Err(HostError::Tracking(TrackingError::NotBeingRemoved { .. }))
    ));
    // And the removal starts again, out of the routing once more.
    match host.remove_tracking_domain(
        "p1",
        HOSTNAME,
        &EdgeRemoval::Check(edge_options.clone()),
        &mut |_| {},
    ) {
        Err(HostError::Tracking(TrackingError::StillServed { .. })) => {}
        other => panic!("removed while the edge serves it: {other:?}"),
    }
    assert!(host.tracking_plan().unwrap().desired.is_empty());

    // The export of the empty routing is a valid configuration that still
    // listens (nginx -t in reload) and answers nobody.
    let empty = export(&host);
    assert!(!empty.contains(HOSTNAME), "{empty}");
    drop(nginx);
    let _nginx = start_nginx(prefix.path(), &empty, port).unwrap();
    eventually(
        "the reloaded empty export no longer serves the hostname",
        || {
            matches!(
                edge::probe(HOSTNAME, &provider.origin(), &edge_options).unwrap(),
                Probe::NotServed(_)
            )
        },
    );
    let counted = through_the_edge(&provider);
    let mut undone = Vec::new();
    assert!(
        host.remove_tracking_domain(
            "p1",
            HOSTNAME,
            &EdgeRemoval::Check(edge_options.clone()),
            &mut |s| undone.push(s.to_string())
        )
        .unwrap()
    );
    assert_eq!(undone.len(), 2, "{undone:?}");
    assert!(
        undone[0].starts_with("edge: no longer serves it")
            && undone[0].contains("refuses the TLS handshake"),
        "{undone:?}"
    );
    assert_eq!(undone[1], "domain forgotten");
    assert_eq!(step(&host), None);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        "still listening"
    );
    assert!(matches!(
        edge::probe(HOSTNAME, &provider.origin(), &edge_options).unwrap(),
        Probe::NotServed(_)
    ));
    assert_eq!(
        through_the_edge(&provider),
        counted,
        "nothing reached the provider through the edge after the reload"
    );
}

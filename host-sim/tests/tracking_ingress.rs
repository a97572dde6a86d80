//! The reviewed routing of a verified tracking domain: `plan` shows it as a
//! diff, `apply` applies exactly that plan, and the routing exposes only
//! `GET /script.js` and `POST /api/send` (+ the preflight), matched
//! exactly: on `host-sim serve` itself, and through Debian's nginx running
//! the exported configuration. A near miss is 404 and never reaches the
//! provider.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use common::Provider;
use common::nginx::{free_port, start_nginx};
use common::tracking::{HOSTNAME, INGRESS, SECRET, routed, verified};
use dns_fixture::{DnsFixture, Record};
use host_sim::state::{StateError, Step, TrackingRefusal};
use host_sim::tracking::dns::DnsOptions;
use host_sim::tracking::ingress::{self, Change, NginxOptions};
use host_sim::{AuthStyle, Host, HostConfig, HostError, Secret, TrackingError};

#[test]
fn apply_needs_yes_and_applies_exactly_the_reviewed_plan() {
    let provider = Provider::start(SECRET);
    let (_dir, host) = verified(&provider);
    let plan = host.tracking_plan().unwrap();
    assert!(
        matches!(plan.changes.as_slice(), [Change::Add { route }] if route.hostname == HOSTNAME && route.provider_origin == provider.origin())
    );
    let shown = plan.render();
    assert!(
        shown.contains("+ track.shop.example (project p1)")
            && shown.contains("GET /script.js, POST /api/send, OPTIONS /api/send (exact)"),
        "{shown}"
    );

    assert!(matches!(
        host.apply_tracking_plan(false, Some(&plan.id)),
        Err(HostError::Tracking(TrackingError::NotConfirmed))
    ));
    // Between review and apply, the provider origin changes: the plan moved.
    host.set_binding(
        "p1",
        "provider",
        "http://127.0.0.1:9",
        Secret::new(SECRET.to_string()),
        AuthStyle::Bearer,
        Duration::from_secs(5),
    )
    .unwrap();
    assert!(matches!(
        host.apply_tracking_plan(true, Some(&plan.id)),
        Err(HostError::State(StateError::Tracking(
            TrackingRefusal::PlanChanged { .. }
        )))
    ));
    assert!(
        host.tracking_routes().unwrap().is_empty(),
        "nothing applied"
    );
    assert_eq!(
        host.tracking_domain("p1", HOSTNAME).unwrap().step,
        Step::Verified
    );

    let reviewed = host.tracking_plan().unwrap();
    let applied = host.apply_tracking_plan(true, Some(&reviewed.id)).unwrap();
    assert_eq!(applied, reviewed);
    assert_eq!(host.tracking_routes().unwrap().to_vec(), reviewed.desired);
    assert_eq!(
        host.tracking_domain("p1", HOSTNAME).unwrap().step,
        Step::Routed
    );
    assert!(host.tracking_plan().unwrap().changes.is_empty());

    // remove undoes the routing, then forgets the domain.
    let mut undone = Vec::new();
    assert!(
        host.remove_tracking_domain(
            "p1",
            HOSTNAME,
            &host_sim::EdgeRemoval::RemovedElsewhere,
            &mut |s| undone.push(s.to_string())
        )
        .unwrap()
    );
    assert_eq!(
        undone,
        [
            "routing removed",
            "edge: removal confirmed by the operator",
            "domain forgotten"
        ]
    );
    assert!(host.tracking_routes().unwrap().is_empty());
}

#[test]
fn a_verified_domain_of_a_project_without_a_provider_binding_cannot_be_planned() {
    let provider = Provider::start(SECRET);
    let (dir, host) = verified(&provider);
    drop(host);
    let host = Host::open(HostConfig::new(dir.path())).unwrap();
    let dns = DnsFixture::start().unwrap();
    let added = host.add_tracking_domain("p2", "t.bakery.example").unwrap();
    dns.set(&added.txt_name, [Record::txt(&added.txt_value)]);
    dns.set("t.bakery.example", [Record::cname(INGRESS)]);
    host.verify_tracking_domain(
        "p2",
        "t.bakery.example",
        &DnsOptions {
            nameservers: vec![dns.addr()],
            timeout: Duration::from_secs(2),
        },
    )
    .unwrap();
    match host.tracking_plan() {
        Err(HostError::Tracking(TrackingError::NoProvider { project, hostname })) => {
            assert_eq!(
                (project.as_str(), hostname.as_str()),
                ("p2", "t.bakery.example")
            )
        }
        other => panic!("{other:?}"),
    }
}

// ---- the ingress, over the wire -------------------------------------------

/// Headers a visitor (or an attacker) adds: none may reach the provider,
/// and none may change the visitor address it sees.
const FORGED: &[(&str, &str)] = &[
    ("X-Forwarded-For", "203.0.113.9"),
    ("True-Client-IP", "198.51.100.1"),
    ("CF-Connecting-IP", "198.51.100.2"),
    ("X-Real-IP", "198.51.100.3"),
    ("X-Client-IP", "198.51.100.4"),
    ("Forwarded", "for=198.51.100.5"),
    ("Authorization", "Bearer visitor-should-not-pass"),
    ("Cookie", "session=visitor"),
    ("x-umami-api-key", "forged-key"),
    ("X-Original-URL", "/api/websites"),
    ("X-HTTP-Method-Override", "DELETE"),
    ("Accept", "text/forged"),
    ("Referer", "https://shop.example/private?order=1"),
];

/// Headers a browser sends that do reach the provider.
const ALLOWED: &[(&str, &str)] = &[
    ("User-Agent", "Visitor-Browser/1.0"),
    ("Accept-Language", "de-CH"),
    ("Origin", "https://shop.example"),
    ("x-umami-cache", "cache-token"),
];

/// One raw HTTP/1.1 request (the path exactly as written) with the
/// visitor's and the forged headers: its status, or `None` when the server
/// closed the connection without an answer.
fn try_request(address: SocketAddr, method: &str, path: &str, host: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let body = if method == "POST" {
        r#"{"type":"event","payload":{"website":"w","url":"/"}}"#
    } else {
        ""
    };
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
    for (name, value) in ALLOWED.iter().chain(FORGED) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    write!(
        stream,
        "{head}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    if answer.is_empty() {
        return None;
    }
    Some(
        answer
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {answer:?}")),
    )
}

fn request(address: SocketAddr, method: &str, path: &str, host: &str) -> u16 {
    try_request(address, method, path, host)
        .unwrap_or_else(|| panic!("{method} {path} (Host {host}): closed without an answer"))
}

/// The near misses of the issue: none may reach the provider.
const NEAR_MISSES: &[(&str, &str)] = &[
    ("GET", "/api/websites"),
    ("GET", "/api/me"),
    ("GET", "/script.js/"),
    ("GET", "//script.js"),
    ("GET", "/SCRIPT.JS"),
    ("POST", "/api/send/x"),
    ("POST", "/api/%73end"),
    ("GET", "/script.js/../api/me"),
    ("GET", "/api/send"),
    ("POST", "/script.js"),
    ("DELETE", "/api/send"),
    ("PUT", "/api/send"),
    ("HEAD", "/script.js"),
    ("GET", "/"),
    ("GET", "/login"),
];

/// Headers the edge itself sets on the way to the provider.
const EDGE_OWN: &[&str] = &[
    "host",
    "x-forwarded-for",
    "content-length",
    "connection",
    "accept",
    "transfer-encoding",
];

/// The two paths (and the preflight) arrive with the allowlisted headers
/// only, the connection's address as the only `X-Forwarded-For` (whatever
/// the visitor forged) and nothing that authenticates; every near miss is
/// 404 and the provider sees none of them.
fn assert_exact_routing(address: SocketAddr, provider: &Provider, via: &str) {
    let before = provider.requests().len();
    for (method, path) in NEAR_MISSES {
        assert_eq!(
            request(address, method, path, HOSTNAME),
            404,
            "{via}: {method} {path}"
        );
    }
    assert_eq!(
        provider.requests().len(),
        before,
        "{via}: a near miss reached the provider: {:#?}",
        &provider.requests()[before..]
    );
    for (method, path) in ingress::EXPOSED {
        request(address, method, path, HOSTNAME);
    }
    let seen = provider.requests()[before..].to_vec();
    assert_eq!(
        seen.iter()
            .map(|s| (s.method.as_str(), s.target.as_str()))
            .collect::<Vec<_>>(),
        ingress::EXPOSED.to_vec(),
        "{via}"
    );
    for request in &seen {
        let header = |name: &str| {
            request
                .headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        for (name, value) in ALLOWED {
            assert_eq!(
                header(&name.to_ascii_lowercase()).as_deref(),
                Some(*value),
                "{via}: {name}"
            );
        }
        assert_eq!(
            header("x-forwarded-for").as_deref(),
            Some("127.0.0.1"),
            "{via}: the visitor address is the connection's, whatever was forged"
        );
        for (name, _) in request.headers.iter() {
            assert!(
                ingress::FORWARDED_REQUEST_HEADERS.contains(&name.as_str())
                    || EDGE_OWN.contains(&name.as_str()),
                "{via}: {name} is outside the allowlist: {request:?}"
            );
        }
        assert_ne!(header("accept").as_deref(), Some("text/forged"), "{via}");
        assert!(
            request.headers.iter().all(|(_, v)| !v.contains(SECRET)
                && !v.contains("198.51.100")
                && !v.contains("203.0.113")
                && !v.contains("forged")),
            "{via}: a secret or forged value travelled: {request:?}"
        );
    }
}

/// Hosts that are not exactly the tracking hostname reach neither the
/// tracking block nor, through it, the provider.
const OTHER_HOSTS: &[&str] = &[
    "localhost",
    "TRACK.shop.example",
    "track.shop.example.",
    "track.shop.example:8443",
];

#[test]
fn serve_routes_an_applied_hostname_to_exactly_the_two_paths() {
    let provider = Provider::start(SECRET);
    let (_dir, host) = verified(&provider);
    let host = Arc::new(host);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let address = listener.local_addr().unwrap();
    let router = host_sim::serve::router(host.clone(), Default::default());
    runtime.spawn(host_sim::serve::run(
        listener,
        router,
        std::future::pending(),
    ));

    // Before apply the hostname is nobody's: the host's own 404, no forwarding.
    assert_eq!(request(address, "GET", "/script.js", HOSTNAME), 404);
    assert!(provider.requests().is_empty());

    let plan = host.tracking_plan().unwrap();
    host.apply_tracking_plan(true, Some(&plan.id)).unwrap();
    assert_exact_routing(address, &provider, "host-sim serve");
    assert_eq!(
        request(address, "GET", "/healthz", "127.0.0.1"),
        200,
        "other hosts reach the surfaces"
    );
    assert_eq!(
        request(address, "GET", "/healthz", HOSTNAME),
        404,
        "the tracking hostname does not"
    );
    let before = provider.requests().len();
    let provider_host = provider.origin().trim_start_matches("http://").to_string();
    for host in OTHER_HOSTS.iter().copied().chain([provider_host.as_str()]) {
        let status = request(address, "GET", "/script.js", host);
        let expected = if host.starts_with("track.") || host.starts_with("TRACK.") {
            421
        } else {
            404
        };
        assert_eq!(status, expected, "Host {host}");
    }
    assert_eq!(
        provider.requests().len(),
        before,
        "no other Host reached the provider"
    );
}

// ---- Debian's nginx with the exported configuration -----------------------

#[test]
fn nginx_with_the_exported_config_forwards_only_the_exact_paths() {
    let provider = Provider::start(SECRET);
    let (_dir, host) = routed(&provider);

    let port = free_port();
    let exported = ingress::nginx(
        &host.tracking_routes().unwrap(),
        &NginxOptions {
            listen: format!("127.0.0.1:{port}"),
            certificate_dir: String::new(),
            ..NginxOptions::default()
        },
    );
    let prefix = tempfile::tempdir().unwrap();
    let Some(_nginx) = start_nginx(prefix.path(), &exported, port) else {
        return;
    };
    let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert_exact_routing(address, &provider, "nginx");

    // nginx's own answers do not announce its version (server_tokens off).
    let mut stream = TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET /login HTTP/1.1\r\nHost: {HOSTNAME}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert!(
        answer
            .lines()
            .any(|l| l.eq_ignore_ascii_case("server: nginx")),
        "{answer}"
    );
    assert!(!answer.contains("nginx/"), "the version shows: {answer}");

    // Any other Host: the connection closes without an answer.
    let before = provider.requests().len();
    let provider_host = provider.origin().trim_start_matches("http://").to_string();
    for host in OTHER_HOSTS.iter().copied().chain([provider_host.as_str()]) {
        assert_eq!(
            try_request(address, "GET", "/script.js", host),
            None,
            "nginx answered Host {host}"
        );
    }
    assert_eq!(provider.requests().len(), before);
}

#[test]
fn nginx_behind_a_trusted_proxy_takes_the_proxy_s_entry_not_the_visitor_s() {
    let provider = Provider::start(SECRET);
    let (_dir, host) = routed(&provider);
    let port = free_port();
    let exported = ingress::nginx(
        &host.tracking_routes().unwrap(),
        &NginxOptions {
            listen: format!("127.0.0.1:{port}"),
            certificate_dir: String::new(),
            trusted_proxies: vec!["127.0.0.1".parse().unwrap()],
            ..NginxOptions::default()
        },
    );
    let prefix = tempfile::tempdir().unwrap();
    let Some(_nginx) = start_nginx(prefix.path(), &exported, port) else {
        return;
    };
    // The trusted proxy (here: the test, on 127.0.0.1) appended the
    // visitor's address 192.0.2.44 to what the visitor forged.
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /script.js HTTP/1.1\r\nHost: {HOSTNAME}\r\n\
         X-Forwarded-For: 203.0.113.9, 192.0.2.44\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let seen = provider.requests();
    let forwarded = seen
        .last()
        .and_then(|r| r.headers.iter().find(|(k, _)| k == "x-forwarded-for"))
        .map(|(_, v)| v.as_str());
    assert_eq!(forwarded, Some("192.0.2.44"));
}

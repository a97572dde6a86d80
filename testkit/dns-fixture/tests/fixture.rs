//! The fixture as a resolver sees it: hickory-resolver pointed at it over
//! UDP only and over TCP only.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use dns_fixture::{DnsFixture, Fault, Record};
use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::{Resolver, TokioResolver};

#[derive(Clone, Copy, Debug)]
enum Transport {
    Udp,
    Tcp,
}

fn resolver(dns: &DnsFixture, transport: Transport, timeout: Duration) -> TokioResolver {
    let addr = dns.addr();
    let mut server = match transport {
        Transport::Udp => NameServerConfig::udp(addr.ip()),
        Transport::Tcp => NameServerConfig::tcp(addr.ip()),
    };
    for connection in &mut server.connections {
        connection.port = addr.port();
    }
    let mut options = ResolverOpts::default();
    options.timeout = timeout;
    options.attempts = 1;
    options.cache_size = 0;
    options.try_tcp_on_error = false;
    Resolver::builder_with_config(
        ResolverConfig::from_parts(None, vec![], vec![server]),
        TokioRuntimeProvider::default(),
    )
    .with_options(options)
    .build()
    .expect("a resolver")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The record data of a lookup's answers, by type.
fn answers(
    resolver: &TokioResolver,
    rt: &tokio::runtime::Runtime,
    name: &str,
    record_type: RecordType,
) -> Result<Vec<RData>, NetError> {
    rt.block_on(resolver.lookup(name, record_type))
        .map(|lookup| lookup.answers().iter().map(|r| r.data.clone()).collect())
}

fn txt_strings(data: &[RData]) -> Vec<Vec<String>> {
    data.iter()
        .filter_map(|d| match d {
            RData::TXT(txt) => Some(
                txt.txt_data
                    .iter()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

#[test]
fn every_record_type_is_answered_over_udp_and_tcp() {
    let dns = DnsFixture::start().unwrap();
    dns.set(
        "host.example",
        [
            Record::a([192, 0, 2, 7]),
            Record::aaaa(Ipv6Addr::LOCALHOST),
            Record::txt("v=spf1 -all"),
            Record::txt_strings(["first part ", "second part"]),
            Record::mx(10, "mx.example"),
        ],
    );
    let rt = runtime();
    for transport in [Transport::Udp, Transport::Tcp] {
        let resolver = resolver(&dns, transport, Duration::from_secs(2));
        let a = answers(&resolver, &rt, "host.example.", RecordType::A).unwrap();
        assert!(
            matches!(a.as_slice(), [RData::A(ip)] if ip.0 == Ipv4Addr::new(192, 0, 2, 7)),
            "{transport:?}: {a:?}"
        );
        let aaaa = answers(&resolver, &rt, "host.example.", RecordType::AAAA).unwrap();
        assert!(matches!(aaaa.as_slice(), [RData::AAAA(ip)] if ip.0 == Ipv6Addr::LOCALHOST));
        let mut txt =
            txt_strings(&answers(&resolver, &rt, "host.example.", RecordType::TXT).unwrap());
        txt.sort();
        assert_eq!(
            txt,
            vec![
                vec!["first part ".to_string(), "second part".to_string()],
                vec!["v=spf1 -all".to_string()],
            ],
            "{transport:?}: a multi-string TXT record keeps its strings apart"
        );
        let mx = answers(&resolver, &rt, "host.example.", RecordType::MX).unwrap();
        assert!(
            matches!(mx.as_slice(), [RData::MX(mx)] if mx.preference == 10 && mx.exchange.to_string() == "mx.example."),
            "{transport:?}: {mx:?}"
        );
    }
    let protocols: Vec<String> = dns.queries().into_iter().map(|q| q.protocol).collect();
    assert!(protocols.contains(&"udp".to_string()) && protocols.contains(&"tcp".to_string()));
}

#[test]
fn names_are_case_insensitive_and_the_final_dot_is_optional() {
    let dns = DnsFixture::start().unwrap();
    dns.set("Track.Shop.Example.", [Record::txt("x")]);
    let rt = runtime();
    let resolver = resolver(&dns, Transport::Udp, Duration::from_secs(2));
    for asked in [
        "track.shop.example.",
        "TRACK.SHOP.EXAMPLE.",
        "track.shop.example",
    ] {
        let txt = txt_strings(&answers(&resolver, &rt, asked, RecordType::TXT).unwrap());
        assert_eq!(txt, vec![vec!["x".to_string()]], "{asked}");
    }
}

#[test]
fn a_cname_chain_is_followed_to_its_end() {
    let dns = DnsFixture::start().unwrap();
    dns.set("track.shop.example", [Record::cname("edge.cdn.example")]);
    dns.set(
        "edge.cdn.example",
        [Record::cname("ingress.provider.example")],
    );
    dns.set("ingress.provider.example", [Record::a([192, 0, 2, 1])]);
    let rt = runtime();
    let resolver = resolver(&dns, Transport::Udp, Duration::from_secs(2));
    let chain = answers(&resolver, &rt, "track.shop.example.", RecordType::A).unwrap();
    let cnames: Vec<String> = chain
        .iter()
        .filter_map(|d| match d {
            RData::CNAME(c) => Some(c.0.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(cnames, ["edge.cdn.example.", "ingress.provider.example."]);
    assert!(chain.iter().any(|d| matches!(d, RData::A(_))), "{chain:?}");
}

#[test]
fn records_change_while_it_runs() {
    let dns = DnsFixture::start().unwrap();
    let rt = runtime();
    let resolver = resolver(&dns, Transport::Udp, Duration::from_secs(2));
    let missing = answers(&resolver, &rt, "late.example.", RecordType::TXT).unwrap_err();
    assert!(missing.is_nx_domain(), "{missing:?}");

    dns.set("late.example", [Record::txt("one")]);
    let txt = txt_strings(&answers(&resolver, &rt, "late.example.", RecordType::TXT).unwrap());
    assert_eq!(txt, vec![vec!["one".to_string()]]);

    dns.set("late.example", [Record::txt("two")]);
    let txt = txt_strings(&answers(&resolver, &rt, "late.example.", RecordType::TXT).unwrap());
    assert_eq!(txt, vec![vec!["two".to_string()]], "set replaces");

    dns.set("late.example", [Record::a([192, 0, 2, 9])]);
    let no_txt = answers(&resolver, &rt, "late.example.", RecordType::TXT).unwrap_err();
    assert!(
        no_txt.is_no_records_found() && !no_txt.is_nx_domain(),
        "the name exists without TXT: {no_txt:?}"
    );

    dns.remove("late.example");
    let gone = answers(&resolver, &rt, "late.example.", RecordType::A).unwrap_err();
    assert!(gone.is_nx_domain(), "{gone:?}");
}

#[test]
fn a_servfail_fault_is_answered_as_such_over_both_transports() {
    let dns = DnsFixture::start().unwrap();
    dns.set("broken.example", [Record::txt("never seen")]);
    dns.fault("BROKEN.example.", Fault::ServFail);
    let rt = runtime();
    for transport in [Transport::Udp, Transport::Tcp] {
        let resolver = resolver(&dns, transport, Duration::from_secs(2));
        let error = answers(&resolver, &rt, "broken.example.", RecordType::TXT).unwrap_err();
        assert!(
            matches!(
                &error,
                NetError::Dns(DnsError::ResponseCode(ResponseCode::ServFail))
            ),
            "{transport:?}: {error:?}"
        );
    }
    dns.clear_fault("broken.example");
    let resolver = resolver(&dns, Transport::Udp, Duration::from_secs(2));
    let txt = txt_strings(&answers(&resolver, &rt, "broken.example.", RecordType::TXT).unwrap());
    assert_eq!(txt, vec![vec!["never seen".to_string()]], "cleared");
}

#[test]
fn a_no_answer_fault_makes_the_client_time_out_over_both_transports() {
    let dns = DnsFixture::start().unwrap();
    dns.set("silent.example", [Record::a([192, 0, 2, 3])]);
    dns.fault("silent.example", Fault::NoAnswer);
    let rt = runtime();
    for transport in [Transport::Udp, Transport::Tcp] {
        let resolver = resolver(&dns, transport, Duration::from_millis(300));
        let started = Instant::now();
        let error = answers(&resolver, &rt, "silent.example.", RecordType::A).unwrap_err();
        assert!(
            matches!(error, NetError::Timeout),
            "{transport:?}: {error:?}"
        );
        assert!(started.elapsed() >= Duration::from_millis(300));
    }
    let asked = dns
        .queries()
        .into_iter()
        .filter(|q| q.name == "silent.example." && q.record_type == "A")
        .count();
    assert!(asked >= 2, "the queries arrived; they were not answered");
    // Other names are unaffected.
    dns.set("fine.example", [Record::a([192, 0, 2, 4])]);
    let resolver = resolver(&dns, Transport::Udp, Duration::from_secs(2));
    assert!(answers(&resolver, &rt, "fine.example.", RecordType::A).is_ok());
}

#[test]
#[should_panic(expected = "a CNAME must be the only record")]
fn a_cname_beside_other_records_is_refused() {
    let dns = DnsFixture::start().unwrap();
    dns.set(
        "mixed.example",
        [Record::cname("a.example"), Record::txt("no")],
    );
}

#[test]
fn it_works_inside_an_async_test_too() {
    let dns = DnsFixture::start().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        dns.set("inside.example", [Record::a([192, 0, 2, 5])]);
        let resolver = resolver(&dns, Transport::Tcp, Duration::from_secs(2));
        let lookup = resolver
            .lookup("inside.example.", RecordType::A)
            .await
            .unwrap();
        assert_eq!(lookup.answers().len(), 1);
    });
}

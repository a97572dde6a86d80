//! A tracking domain ready for the edge tests: a host with p1's provider
//! binding and `track.shop.example` verified against DNS on loopback, and
//! routed.

use std::time::Duration;

use dns_fixture::{DnsFixture, Record};
use host_sim::state::Step;
use host_sim::tracking::dns::DnsOptions;
use host_sim::{AuthStyle, Host, HostConfig, Secret};

use super::Provider;

pub const INGRESS: &str = "ingress.provider.example";
pub const HOSTNAME: &str = "track.shop.example";
/// The provider secret of p1's binding.
pub const SECRET: &str = "provider-secret-of-p1";

/// A host with a provider binding for p1 and `track.shop.example` verified
/// against DNS on loopback.
pub fn verified(provider: &Provider) -> (tempfile::TempDir, Host) {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::open(HostConfig::new(dir.path())).unwrap();
    host.configure_tracking(Some(INGRESS), None, None).unwrap();
    host.set_binding(
        "p1",
        "provider",
        &provider.origin(),
        Secret::new(SECRET.to_string()),
        AuthStyle::Bearer,
        Duration::from_secs(5),
    )
    .unwrap();
    let dns = DnsFixture::start().unwrap();
    let added = host.add_tracking_domain("p1", HOSTNAME).unwrap();
    dns.set(&added.txt_name, [Record::txt(&added.txt_value)]);
    dns.set(HOSTNAME, [Record::cname(INGRESS)]);
    let options = DnsOptions {
        nameservers: vec![dns.addr()],
        timeout: Duration::from_secs(2),
    };
    let (domain, _) = host
        .verify_tracking_domain("p1", HOSTNAME, &options)
        .unwrap();
    assert_eq!(domain.step, Step::Verified);
    (dir, host)
}

/// [`verified`], with the reviewed routing plan applied.
pub fn routed(provider: &Provider) -> (tempfile::TempDir, Host) {
    let (dir, host) = verified(provider);
    let plan = host.tracking_plan().unwrap();
    host.apply_tracking_plan(true, Some(&plan.id)).unwrap();
    (dir, host)
}

//! Tracking hostname normalisation (IDNA, apex, addresses).

use std::net::IpAddr;

use host_sim::tracking::hostname::{host_of, normalize};

/// A hostname an operator or customer types: a name that is accepted is
/// its own normal form (lower-case ASCII, no final dot, at most 253
/// characters), is a DNS name to a browser too (the URL standard's host
/// parser reads it as that very name, not as an address or an error), and
/// every spelling the ingress meets (case, final dot, port, an origin
/// around it) leads back to it.
pub fn tracking_hostname(data: &[u8]) {
    let Some(input) = crate::text(data) else {
        return;
    };
    let Ok(name) = normalize(input) else {
        return;
    };
    assert_eq!(
        normalize(&name).as_deref(),
        Ok(name.as_str()),
        "not idempotent"
    );
    assert!(name.len() <= 253 && !name.ends_with('.'), "`{name}`");
    assert!(
        name.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'),
        "`{name}` is not lower-case ASCII"
    );
    assert!(name.parse::<IpAddr>().is_err(), "`{name}` is an address");
    let url = url::Url::parse(&format!("https://{name}/script.js"))
        .unwrap_or_else(|e| panic!("`{name}` (from {input:?}) is no host to a browser: {e}"));
    assert_eq!(
        url.host(),
        Some(url::Host::Domain(name.as_str())),
        "a browser reads `{name}` (from {input:?}) as another host"
    );
    for spelling in [
        name.clone(),
        name.to_ascii_uppercase(),
        format!("{name}."),
        format!("{name}:443"),
        format!("{}.:8443", name.to_ascii_uppercase()),
        format!("https://{name}/script.js"),
    ] {
        assert_eq!(host_of(&spelling), name, "host_of({spelling:?})");
    }
}

//! Where an outgoing request of a service may go: the rules both
//! products apply to a URL a customer or a client names (mail-service's
//! webhook endpoints, host-sim's Client ID Metadata Documents), so a
//! request on someone's behalf cannot reach the machine's own network.
//!
//! [`check_url`] checks the URL as written (scheme, credentials, address
//! literals); [`check_address`] checks every address its host name
//! resolves to, at the time of each request (each service's resolver
//! calls it, and the connection goes to the addresses it checked).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fn rule(text: impl Into<String>) -> String {
    text.into()
}

/// Who may be reached: what the operator allows beyond public HTTPS.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointPolicy {
    /// Plain `http://` to a loopback address (local development, tests).
    pub allow_http_loopback: bool,
    /// Private, loopback, link-local and other non-public addresses.
    pub allow_private: bool,
}

/// Longest endpoint URL accepted.
pub const MAX_ENDPOINT_CHARS: usize = 2048;

/// Checks a URL as given: an absolute `https://` URL with a host and no
/// credentials; `http://` only to a loopback address when the policy allows
/// it; an address literal must be one the policy allows. The error is the
/// rule broken, worded to follow the name of the field ("must be …").
/// Host names are checked when they are resolved, at every request
/// ([`check_address`] on each address).
pub fn check_url(text: &str, policy: EndpointPolicy) -> Result<url::Url, String> {
    if text.chars().count() > MAX_ENDPOINT_CHARS {
        return Err(rule(format!(
            "must be at most {MAX_ENDPOINT_CHARS} characters"
        )));
    }
    let url = url::Url::parse(text).map_err(|e| rule(format!("is not an absolute URL ({e})")))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(rule("must not carry credentials (user:password@)"));
    }
    let host = url.host().ok_or_else(|| rule("must have a host"))?;
    let literal = match host {
        url::Host::Ipv4(a) => Some(IpAddr::V4(a)),
        url::Host::Ipv6(a) => Some(IpAddr::V6(a)),
        url::Host::Domain(_) => None,
    };
    match url.scheme() {
        "https" => {}
        "http"
            if policy.allow_http_loopback
                && (literal.is_some_and(|a| a.is_loopback())
                    || url.host_str() == Some("localhost")) => {}
        "http" => {
            return Err(rule(
                "must be an https:// URL (plain http is allowed only to a loopback address, when the operator enables it)",
            ));
        }
        other => {
            return Err(rule(format!("must be an https:// URL, not `{other}:`")));
        }
    }
    if let Some(address) = literal {
        check_address(address, policy)
            .map_err(|why| rule(format!("points to a {why} address, which is refused")))?;
    }
    Ok(url)
}

/// Refuses an address a request must not reach unless the policy allows
/// non-public addresses: what kind of address it is.
pub fn check_address(address: IpAddr, policy: EndpointPolicy) -> Result<(), &'static str> {
    match non_public(address) {
        Some(kind) if !policy.allow_private => Err(kind),
        _ => Ok(()),
    }
}

/// What kind of non-public address this is, or None for a public one. An
/// IPv6 address that carries an IPv4 address the network delivers to is
/// judged by that IPv4 address (every one it may carry: see
/// [`carried_ipv4`]).
fn non_public(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(a) => non_public_v4(a),
        IpAddr::V6(a) => match carried_ipv4(a) {
            Some(carried) => carried.into_iter().flatten().find_map(non_public_v4),
            None => non_public_v6(a),
        },
    }
}

/// The IPv4 addresses an IPv6 address carries, when its prefix is one
/// whose traffic is delivered to an IPv4 address written inside it:
/// - IPv4-mapped `::ffff:a.b.c.d`;
/// - NAT64's well-known prefix `64:ff9b::/96` (RFC 6052): the last 32 bits;
/// - NAT64's local-use prefix `64:ff9b:1::/48` (RFC 8215): the operator
///   picks the prefix length within it, so the IPv4 address may sit where
///   RFC 6052 puts it for a /48, /56, /64 or /96 prefix: all four;
/// - 6to4 `2002::/16` (RFC 3056): bits 16 to 47;
/// - Teredo `2001::/32` (RFC 4380): the server at bits 32 to 63 and the
///   client in the last 32 bits, inverted.
fn carried_ipv4(a: Ipv6Addr) -> Option<[Option<Ipv4Addr>; 4]> {
    let o = a.octets();
    let v4 = |b: [u8; 4]| Some(Ipv4Addr::from(b));
    let s = a.segments();
    if let Some(mapped) = a.to_ipv4_mapped() {
        Some([Some(mapped), None, None, None])
    } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        Some([v4([o[12], o[13], o[14], o[15]]), None, None, None])
    } else if s[..3] == [0x64, 0xff9b, 1] {
        // RFC 6052 2.2: bits 64 to 71 (octet 8) are never part of it.
        Some([
            v4([o[6], o[7], o[9], o[10]]),
            v4([o[7], o[9], o[10], o[11]]),
            v4([o[9], o[10], o[11], o[12]]),
            v4([o[12], o[13], o[14], o[15]]),
        ])
    } else if s[0] == 0x2002 {
        Some([v4([o[2], o[3], o[4], o[5]]), None, None, None])
    } else if s[..2] == [0x2001, 0] {
        Some([
            v4([o[4], o[5], o[6], o[7]]),
            v4([!o[12], !o[13], !o[14], !o[15]]),
            None,
            None,
        ])
    } else {
        None
    }
}

fn non_public_v4(a: Ipv4Addr) -> Option<&'static str> {
    let o = a.octets();
    if a.is_loopback() {
        Some("loopback")
    } else if a.is_private() {
        Some("private")
    } else if a.is_link_local() {
        // 169.254.169.254 is the cloud metadata service.
        Some("link-local (metadata)")
    } else if a.is_unspecified() || o[0] == 0 {
        Some("unspecified")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Some("shared (carrier-grade NAT)")
    } else if a.is_multicast() || a.is_broadcast() || o[0] >= 240 {
        Some("multicast or reserved")
    } else if (o[0] == 192 && o[1] == 0 && o[2] == 0) || (o[0] == 198 && (o[1] & 0xfe) == 18) {
        Some("special-purpose")
    } else {
        None
    }
}

fn non_public_v6(a: Ipv6Addr) -> Option<&'static str> {
    let first = a.segments()[0];
    if a.is_loopback() {
        Some("loopback")
    } else if a.is_unspecified() {
        Some("unspecified")
    } else if (first & 0xfe00) == 0xfc00 {
        // Includes fd00:ec2::254, a cloud metadata address.
        Some("private (unique local)")
    } else if (first & 0xffc0) == 0xfe80 {
        Some("link-local")
    } else if a.is_multicast() {
        Some("multicast or reserved")
    } else if a.segments()[..6] == [0, 0, 0, 0, 0, 0] {
        Some("IPv4-compatible (deprecated)")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_must_be_public_https() {
        let strict = EndpointPolicy::default();
        assert!(check_url("https://hooks.example.com/x", strict).is_ok());
        for refused in [
            "http://hooks.example.com/x",
            "ftp://hooks.example.com/x",
            "https://user:pw@hooks.example.com/x",
            "https://10.0.0.5/x",
            "https://127.0.0.1/x",
            "https://169.254.169.254/latest/meta-data",
            "https://[::1]/x",
            "https://[::ffff:10.0.0.1]/x",
            "https://[::ffff:127.0.0.1]/x",
            "https://[64:ff9b::a00:1]/x",
            "https://[fd00:ec2::254]/x",
            "https://[fe80::1]/x",
            "https://0.0.0.0/x",
            "not a url",
        ] {
            let rule = check_url(refused, strict).unwrap_err();
            assert!(
                rule.starts_with("must")
                    || rule.starts_with("is not")
                    || rule.starts_with("points"),
                "{refused}: {rule}"
            );
        }
        let local = EndpointPolicy {
            allow_http_loopback: true,
            allow_private: true,
        };
        assert!(check_url("http://127.0.0.1:9/x", local).is_ok());
        assert!(check_url("http://10.0.0.1/x", local).is_err());
    }

    fn refused(address: &str) -> Option<&'static str> {
        check_address(address.parse().unwrap(), EndpointPolicy::default()).err()
    }

    #[test]
    fn ipv6_forms_that_carry_an_ipv4_address_are_judged_by_it() {
        // 6to4: 2002:AABB:CCDD::/48 is the IPv4 address AA.BB.CC.DD.
        assert_eq!(refused("2002:7f00:0001::"), Some("loopback"));
        assert_eq!(refused("2002:a00:1::1"), Some("private"));
        assert_eq!(refused("2002:a9fe:a9fe::"), Some("link-local (metadata)"));
        assert_eq!(refused("2002:5db8:d822::1"), None);
        // NAT64's well-known prefix.
        assert_eq!(refused("64:ff9b::127.0.0.1"), Some("loopback"));
        assert_eq!(refused("64:ff9b::93.184.216.34"), None);
        // NAT64's local-use prefix: an IPv4 address refused plainly, at any
        // RFC 6052 position within the /48, is refused there; a public one
        // passes only when every position reads as public.
        for loopback_inside in [
            "64:ff9b:1:7f00:1::",
            "64:ff9b:1:7f:0:1::",
            "64:ff9b:1:0:7f:0:100:0",
            "64:ff9b:1::127.0.0.1",
        ] {
            assert!(refused(loopback_inside).is_some(), "{loopback_inside}");
        }
        assert_eq!(refused("64:ff9b:1:5db8:d8:2200:5db8:d822"), None);
        // Teredo: the client is the last 32 bits inverted (127.0.0.1 is
        // 80ff:fffe); the server, bits 32 to 63, is judged too.
        assert_eq!(refused("2001:0:5db8:d822:0:0:80ff:fffe"), Some("loopback"));
        assert_eq!(refused("2001:0:a00:1:0:0:a2db:27dd"), Some("private"));
        assert_eq!(refused("2001:0:5db8:d822:0:0:a247:27dd"), None);
        // Outside those prefixes nothing is read as IPv4.
        assert_eq!(refused("2001:db8:7f00:1::"), None);
        assert_eq!(refused("2003:7f00:1::"), None);
        for url in [
            "https://[2002:7f00:0001::]/x",
            "https://[64:ff9b:1::a9fe:a9fe]/x",
            "https://[2001:0:5db8:d822::80ff:fffe]/x",
        ] {
            let rule = check_url(url, EndpointPolicy::default()).unwrap_err();
            assert!(rule.starts_with("points to a "), "{url}: {rule}");
        }
    }

    /// The ways of carrying an IPv4 address in IPv6 that say where it is
    /// (IPv4-mapped, NAT64's well-known prefix, 6to4, Teredo's client with
    /// a public server), written for `a`.
    fn carriers(a: Ipv4Addr) -> Vec<Ipv6Addr> {
        let n = u32::from(a);
        let (high, low) = ((n >> 16) as u16, n as u16);
        let t = !n;
        vec![
            a.to_ipv6_mapped(),
            Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, high, low),
            Ipv6Addr::new(0x2002, high, low, 0, 0, 0, 0, 1),
            Ipv6Addr::new(0x2001, 0, 0x5db8, 0xd822, 0, 0, (t >> 16) as u16, t as u16),
        ]
    }

    /// `a` under NAT64's local-use prefix at each RFC 6052 position (a /48,
    /// /56, /64 and /96 prefix; octet 8 is always 0).
    fn local_use(a: Ipv4Addr) -> Vec<Ipv6Addr> {
        let [w, x, y, z] = a.octets();
        let positions = [
            [6, 7, 9, 10],
            [7, 9, 10, 11],
            [9, 10, 11, 12],
            [12, 13, 14, 15],
        ];
        positions
            .iter()
            .map(|at| {
                let mut o = [0u8; 16];
                o[..6].copy_from_slice(&[0, 0x64, 0xff, 0x9b, 0, 1]);
                for (i, byte) in at.iter().zip([w, x, y, z]) {
                    o[*i] = byte;
                }
                Ipv6Addr::from(o)
            })
            .collect()
    }

    proptest::proptest! {
        #[test]
        fn an_embedded_ipv4_address_is_judged_as_written_plainly(bits in proptest::prelude::any::<u32>()) {
            let a = Ipv4Addr::from(bits);
            let plainly = non_public_v4(a).is_some();
            for carrier in carriers(a) {
                let carried = non_public(IpAddr::V6(carrier)).is_some();
                proptest::prop_assert_eq!(carried, plainly, "{} in {}", a, carrier);
            }
            if plainly {
                for carrier in local_use(a) {
                    proptest::prop_assert!(non_public(IpAddr::V6(carrier)).is_some(), "{} in {}", a, carrier);
                }
            }
        }
    }
}

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

/// What kind of non-public address this is (IPv4-mapped and NAT64 IPv6
/// addresses are judged by the IPv4 address inside), or None for a public
/// one.
fn non_public(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(a) => non_public_v4(a),
        IpAddr::V6(a) => {
            if let Some(v4) = a.to_ipv4_mapped() {
                return non_public_v4(v4);
            }
            let s = a.segments();
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                let v4 =
                    Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
                return non_public_v4(v4);
            }
            non_public_v6(a)
        }
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
}

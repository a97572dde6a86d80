//! Which hostnames can become a tracking domain: IDNA-normalised, not an IP,
//! not a wildcard, not an apex (a CNAME cannot live beside the SOA and NS
//! records of a zone's apex), and, checked by the host against its
//! settings, not reserved by the platform.
//!
//! The apex rule uses the public suffix list (the `psl` crate): a hostname
//! that is its own registrable domain (`shop.example`, `shop.co.uk`) or a
//! public suffix itself (`co.uk`) is an apex. Names under a suffix the list
//! does not know (`.example`, `.test`) follow its default rule: the last
//! label is the suffix.

use std::net::IpAddr;

/// Why a hostname cannot be a tracking domain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostnameError {
    #[error("hostname `{hostname}` is not a valid domain name: {reason}")]
    Invalid { hostname: String, reason: String },
    #[error("hostname `{hostname}` is an IP address; a tracking domain is a DNS name with a CNAME")]
    Ip { hostname: String },
    #[error(
        "hostname `{hostname}` is a wildcard; a tracking domain is one name, verified and routed alone"
    )]
    Wildcard { hostname: String },
    #[error(
        "hostname `{hostname}` is the apex of its domain, where a CNAME cannot live (the zone's SOA and NS records are there); use a subdomain such as `track.{hostname}`"
    )]
    Apex { hostname: String },
    #[error(
        "hostname `{hostname}` is a public suffix; nobody can prove ownership of it, use a name under a domain you own"
    )]
    PublicSuffix { hostname: String },
    #[error(
        "hostname `{hostname}` is under `.{tld}`, a special-use name that never resolves on the public internet; use a name under a domain you own"
    )]
    SpecialUse { hostname: String, tld: String },
}

/// Top-level names reserved for special uses (RFC 6761, 6762, 7686,
/// 9476, ICANN's `.internal`): a visitor's browser can never reach them.
const SPECIAL_USE: &[&str] = &[
    "localhost",
    "invalid",
    "local",
    "onion",
    "alt",
    "internal",
    "arpa",
];

/// The longest DNS name in its text form, without the final dot.
const MAX_NAME: usize = 253;
const MAX_LABEL: usize = 63;

/// `input` as the lower-case ASCII (punycode) name it stands for, without a
/// final dot, or why it cannot be a tracking domain.
pub fn normalize(input: &str) -> Result<String, HostnameError> {
    let shown = input.escape_debug().to_string();
    let trimmed = input.trim();
    let invalid = |reason: &str| HostnameError::Invalid {
        hostname: shown.clone(),
        reason: reason.to_string(),
    };
    if trimmed.is_empty() {
        return Err(invalid("it is empty"));
    }
    if trimmed.contains('*') {
        return Err(HostnameError::Wildcard { hostname: shown });
    }
    let bare = trimmed.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().is_ok() {
        return Err(HostnameError::Ip { hostname: shown });
    }
    let without_dot = trimmed.strip_suffix('.').unwrap_or(trimmed);
    if without_dot.is_empty() || without_dot.ends_with('.') {
        return Err(invalid("it has an empty label"));
    }
    let ascii = idna::domain_to_ascii_strict(without_dot)
        .map_err(|_| invalid("it is not a valid internationalised domain name (IDNA)"))?;
    if ascii.len() > MAX_NAME {
        return Err(invalid("it is longer than 253 characters"));
    }
    let labels: Vec<&str> = ascii.split('.').collect();
    for label in &labels {
        if label.is_empty() {
            return Err(invalid("it has an empty label"));
        }
        if label.len() > MAX_LABEL {
            return Err(invalid("a label is longer than 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(invalid(
                "a label holds a character other than letters, digits and `-`",
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(invalid("a label starts or ends with `-`"));
        }
    }
    if labels.len() < 2 {
        return Err(HostnameError::Apex { hostname: ascii });
    }
    if labels.last().is_some_and(|top| is_url_number(top)) {
        return Err(HostnameError::Ip { hostname: shown });
    }
    if let Some(tld) = labels
        .last()
        .copied()
        .filter(|top| SPECIAL_USE.contains(top))
    {
        return Err(HostnameError::SpecialUse {
            tld: tld.to_string(),
            hostname: ascii,
        });
    }
    if psl::suffix_str(&ascii) == Some(ascii.as_str()) {
        return Err(HostnameError::PublicSuffix { hostname: ascii });
    }
    if psl::domain_str(&ascii) == Some(ascii.as_str()) {
        return Err(HostnameError::Apex { hostname: ascii });
    }
    Ok(ascii)
}

/// Whether a (lower-case) label is a number to the URL standard's host
/// parser: decimal, or hexadecimal after `0x` (even none). A browser reads
/// a name whose last label is one as an IPv4 address, and refuses it when
/// the rest is not one (`t.shop.0x10`): such a name is no tracking domain.
fn is_url_number(label: &str) -> bool {
    label.bytes().all(|b| b.is_ascii_digit())
        || label
            .strip_prefix("0x")
            .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The host part of an origin or a bare host, normalised for comparison
/// (lower case, no final dot, no port): what "reserved" compares against.
pub fn host_of(origin_or_host: &str) -> String {
    let rest = origin_or_host
        .split_once("://")
        .map_or(origin_or_host, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host.starts_with('[') {
        host.split_inclusive(']').next().unwrap_or(host)
    } else {
        host.split(':').next().unwrap_or(host)
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    idna::domain_to_ascii(&host).unwrap_or(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalised_to_lower_case_ascii_without_the_final_dot() {
        assert_eq!(
            normalize("Track.Shop.Example.").unwrap(),
            "track.shop.example"
        );
        assert_eq!(
            normalize("  stats.bücher.example ").unwrap(),
            "stats.xn--bcher-kva.example"
        );
        assert_eq!(
            normalize("t.shop.co.uk").unwrap(),
            "t.shop.co.uk",
            "a name under a registrable domain of a two-level suffix"
        );
    }

    #[test]
    fn an_apex_is_refused_with_the_reason_and_a_subdomain_to_use() {
        for apex in ["shop.example", "Shop.Example.", "shop.co.uk", "example"] {
            let error = normalize(apex).unwrap_err();
            assert!(
                matches!(error, HostnameError::Apex { .. }),
                "{apex}: {error:?}"
            );
        }
        let message = normalize("shop.example").unwrap_err().to_string();
        assert!(message.contains("a CNAME cannot live"), "{message}");
        assert!(message.contains("track.shop.example"), "{message}");
        assert!(matches!(
            normalize("co.uk").unwrap_err(),
            HostnameError::PublicSuffix { .. }
        ));
    }

    #[test]
    fn ips_wildcards_and_broken_names_are_refused() {
        // The last three end in a number to a browser's URL parser (found
        // by the fuzz target `tracking_hostname`: accepted, then no
        // browser could load the script from them).
        for ip in [
            "192.0.2.1",
            "::1",
            "[2001:db8::1]",
            "10.0.0",
            "t.shop.0x10",
            "t.shop.0x",
            "T.Shop.0XfF.",
        ] {
            assert!(
                matches!(normalize(ip), Err(HostnameError::Ip { .. })),
                "{ip}"
            );
        }
        for wildcard in ["*.shop.example", "t*.shop.example"] {
            assert!(matches!(
                normalize(wildcard),
                Err(HostnameError::Wildcard { .. })
            ));
        }
        for broken in [
            "",
            "track..shop.example",
            "-t.shop.example",
            "t_x.shop.example",
            "t x.shop.example",
            &format!("{}.shop.example", "a".repeat(64)),
            ".",
        ] {
            assert!(
                matches!(normalize(broken), Err(HostnameError::Invalid { .. })),
                "{broken:?}: {:?}",
                normalize(broken)
            );
        }
    }

    #[test]
    fn special_use_names_are_refused() {
        for name in [
            "track.a.localhost",
            "t.shop.local",
            "t.x.invalid",
            "t.x.onion",
        ] {
            assert!(
                matches!(normalize(name), Err(HostnameError::SpecialUse { .. })),
                "{name}: {:?}",
                normalize(name)
            );
        }
        let message = normalize("track.a.localhost").unwrap_err().to_string();
        assert!(message.contains("`.localhost`"), "{message}");
    }

    #[test]
    fn host_of_takes_the_host_from_an_origin_or_a_host() {
        assert_eq!(host_of("https://Umami.Example:3000/x"), "umami.example");
        assert_eq!(host_of("console.example."), "console.example");
        assert_eq!(host_of("http://127.0.0.1:8080"), "127.0.0.1");
    }
}

//! The webhook endpoint URL check, differentially: no way of writing a URL
//! reaches an address the check refuses when the address is written
//! plainly.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use mail_service::error::Error;
use mail_service::model::{EndpointPolicy, validate_endpoint};

const FIELD: &str = "endpoint";

/// First byte even: the rest is a URL as a stranger writes it. Odd: the
/// rest picks an address and a way of writing it (decimal, octal, hex,
/// short forms, IPv4-mapped, NAT64 (well-known and local-use), 6to4 and
/// Teredo IPv6, trailing dot, userinfo, full-width digits,
/// percent-encoding, expanded IPv6), which must be
/// judged as the plain address is. Either way, an accepted URL whose
/// connection goes to an address without a DNS look-up (its host is an
/// address literal, or a name a resolver reads as one) goes to one that
/// is accepted written plainly; a refusal is a 422 naming the field.
pub fn webhook_url(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        if let Some(text) = crate::text(rest) {
            check(text);
        }
        return;
    }
    if rest.len() < 18 {
        return;
    }
    let address = if rest[0] & 1 == 0 {
        IpAddr::V4(Ipv4Addr::new(rest[1], rest[2], rest[3], rest[4]))
    } else {
        let octets: [u8; 16] = rest[1..17].try_into().expect("16 bytes");
        IpAddr::V6(Ipv6Addr::from(octets))
    };
    let host = written(address, rest[0] >> 1);
    let suffix = match rest[17] % 3 {
        0 => "/",
        1 => ":443/hooks",
        _ => "/?x=1#y",
    };
    let url = format!("https://{host}{suffix}");
    let refused_plainly = validate_endpoint(FIELD, &plain_url(address), policy()).is_err();
    let accepted = check(&url);
    if refused_plainly && let Some(target) = accepted {
        panic!("`{url}` (a spelling of {address}) is accepted and reaches {target:?}");
    }
}

fn policy() -> EndpointPolicy {
    EndpointPolicy::default()
}

fn plain_url(address: IpAddr) -> String {
    match address {
        IpAddr::V4(a) => format!("https://{a}/"),
        IpAddr::V6(a) => format!("https://[{a}]/"),
    }
}

/// Checks one URL; for an accepted one, the address its connection goes
/// to without DNS (`Some(None)` for a name that DNS resolves, where every
/// answer is checked again).
fn check(text: &str) -> Option<Option<IpAddr>> {
    let url = match validate_endpoint(FIELD, text, policy()) {
        Ok(url) => url,
        Err(error) => {
            match &error {
                Error::Validation { field, .. } => assert_eq!(field, FIELD, "{error}"),
                other => panic!("refused with a non-field error: {other:?}"),
            }
            return None;
        }
    };
    let target = literal_target(&url);
    if let Some(address) = target {
        assert!(
            validate_endpoint(FIELD, &plain_url(address), policy()).is_ok(),
            "`{text}` is accepted and connects to {address}, which written plainly is refused"
        );
    }
    Some(target)
}

/// Where the HTTP client connects without a look-up: an address host, or a
/// name that parses as an address (std's parser, as the connector tries,
/// and the classic `inet_aton` forms a system resolver accepts).
fn literal_target(url: &url::Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(a) => Some(IpAddr::V4(a)),
        url::Host::Ipv6(a) => Some(IpAddr::V6(a)),
        url::Host::Domain(name) => {
            let name = name.strip_suffix('.').unwrap_or(name);
            name.parse::<IpAddr>()
                .ok()
                .or_else(|| inet_aton(name).map(IpAddr::V4))
        }
    }
}

/// `inet_aton` as glibc reads a name: one to four parts, each decimal,
/// octal (leading 0) or hex (0x) digits only (no sign: `from_str_radix`
/// takes a leading `+`, glibc's `strtoul` stops at it and the name is no
/// address); the last part fills the remaining bytes.
fn inet_aton(name: &str) -> Option<Ipv4Addr> {
    let digits = |text: &str, radix: u32| {
        (!text.is_empty() && text.chars().all(|c| c.is_digit(radix)))
            .then(|| u64::from_str_radix(text, radix).ok())
            .flatten()
    };
    let parts: Vec<u64> = name
        .split('.')
        .map(|part| {
            if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
                digits(hex, 16)
            } else if part.len() > 1 && part.starts_with('0') {
                digits(&part[1..], 8)
            } else {
                digits(part, 10)
            }
        })
        .collect::<Option<_>>()?;
    let (last, init) = parts.split_last()?;
    if parts.len() > 4 || init.iter().any(|p| *p > 255) {
        return None;
    }
    let room = 8 * (4 - init.len() as u32);
    if room < 64 && *last >= 1u64 << room {
        return None;
    }
    let value = init
        .iter()
        .enumerate()
        .fold(*last, |acc, (i, p)| acc | (p << (24 - 8 * i as u32)));
    Some(Ipv4Addr::from(u32::try_from(value).ok()?))
}

/// `address` written in the `form`-th way.
fn written(address: IpAddr, form: u8) -> String {
    let v4 = match address {
        IpAddr::V4(a) => a,
        IpAddr::V6(a) => {
            return match form % 4 {
                0 => format!("[{a}]"),
                1 => {
                    let s = a.segments().map(|s| format!("{s:04x}")).join(":");
                    format!("[{s}]")
                }
                2 => format!("[{}]", a.to_string().to_uppercase()),
                _ => format!("u@[{a}]"),
            };
        }
    };
    let [a, b, c, d] = v4.octets();
    let n = u32::from(v4);
    let (high, low) = (n >> 16, n & 0xffff);
    match form % 21 {
        0 => v4.to_string(),
        1 => n.to_string(),
        2 => format!("0x{n:x}"),
        3 => format!("0{a:o}.0{b:o}.0{c:o}.0{d:o}"),
        4 => format!("{a}.{}", n & 0x00ff_ffff),
        5 => format!("{a}.{b}.{}", n & 0xffff),
        6 => format!("[::ffff:{v4}]"),
        7 => format!("[::ffff:{:x}:{:x}]", n >> 16, n & 0xffff),
        8 => format!("[64:ff9b::{v4}]"),
        9 => format!("{v4}."),
        10 => format!("user@{v4}"),
        11 => v4
            .to_string()
            .chars()
            .map(|c| match c {
                '0'..='9' => char::from_u32(0xff10 + (c as u32 - '0' as u32)).expect("a digit"),
                _ => '\u{3002}',
            })
            .collect(),
        12 => v4
            .to_string()
            .bytes()
            .map(|b| format!("%{b:02x}"))
            .collect(),
        13 => format!("0x{a:02x}.0x{b:02x}.0x{c:02x}.0x{d:02x}"),
        14 => format!("[::{v4}]"),
        15 => format!("{v4}.:443"),
        // 6to4 (2002:AABB:CCDD::/48).
        16 => format!("[2002:{high:x}:{low:x}::1]"),
        // NAT64's local-use prefix, at its /96 and its /48 position.
        17 => format!("[64:ff9b:1::{v4}]"),
        18 => format!(
            "[64:ff9b:1:{:x}:{c:x}:{:x}00::]",
            u16::from_be_bytes([a, b]),
            d
        ),
        // Teredo: the client inverted in the last 32 bits, a public server.
        19 => format!("[2001:0:5db8:d822::{:x}:{:x}]", !n >> 16, !n & 0xffff),
        // Teredo: the address as the server.
        _ => format!("[2001:0:{high:x}:{low:x}::a247:27dd]"),
    }
}

#[cfg(test)]
mod tests {
    use super::inet_aton;
    use std::net::Ipv4Addr;

    #[test]
    fn inet_aton_reads_what_glibc_reads_and_no_signed_part() {
        assert_eq!(inet_aton("0x7f.1"), Some(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(inet_aton("017700000001"), Some(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(inet_aton("10.0.513"), Some(Ipv4Addr::new(10, 0, 2, 1)));
        // Found by `cargo xtask fuzz --smoke` (webhook_url): the model read
        // `0x+A2` as 0.0.0.162 because `from_str_radix` takes a sign; glibc
        // does not, so the name goes to DNS like any other.
        assert_eq!(inet_aton("0x+A2"), None);
        assert_eq!(inet_aton("0+7.1"), None);
        assert_eq!(inet_aton("+1"), None);
        assert_eq!(inet_aton("0x"), None);
    }
}

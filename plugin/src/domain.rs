//! Validation of the provision input: the website name and the public domain.
//!
//! Normalizing a domain: trim, lowercase, IDNA to ASCII; no scheme, path,
//! port, userinfo, wildcard, IP literal or `localhost`; at most 253 bytes.

use std::net::{Ipv4Addr, Ipv6Addr};

use idna::uts46::{AsciiDenyList, DnsLength, Hyphens, Uts46};

use crate::error::ActionError;

/// Umami's limit for a website name, counted as Umami (JavaScript) counts:
/// in UTF-16 code units.
pub const NAME_MAX_CHARS: usize = 100;
/// The DNS limit for a hostname in ASCII form.
pub const DOMAIN_MAX_BYTES: usize = 253;
const LABEL_MAX_BYTES: usize = 63;

/// Trims the website name and checks it: 1 to 100 characters, no control
/// characters.
pub fn normalize_name(input: &str) -> Result<String, ActionError> {
    let name = input.trim();
    if name.is_empty() {
        return Err(ActionError::invalid_input("name: must not be empty"));
    }
    if name.encode_utf16().count() > NAME_MAX_CHARS {
        return Err(ActionError::invalid_input(format!(
            "name: must be at most {NAME_MAX_CHARS} characters"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(ActionError::invalid_input(
            "name: must not contain control characters (line breaks, tabs)",
        ));
    }
    Ok(name.to_owned())
}

fn reject(rule: &str) -> ActionError {
    ActionError::invalid_input(format!("domain: {rule}"))
}

/// Normalizes a public hostname to its lowercase ASCII (IDNA) form.
pub fn normalize_domain(input: &str) -> Result<String, ActionError> {
    let domain = input.trim();
    if domain.is_empty() {
        return Err(reject("must not be empty"));
    }
    if domain.chars().count() > DOMAIN_MAX_BYTES {
        return Err(reject(&format!(
            "must be at most {DOMAIN_MAX_BYTES} characters"
        )));
    }
    if domain.contains("://") {
        return Err(reject(
            "must be a hostname without a scheme, e.g. www.example.com instead of https://www.example.com",
        ));
    }
    if domain.contains('@') {
        return Err(reject("must not contain user information (`@`)"));
    }
    if domain.contains(['/', '\\', '?', '#']) {
        return Err(reject(
            "must be a hostname without a path, query or fragment",
        ));
    }
    if domain.starts_with('[') || domain.parse::<Ipv6Addr>().is_ok() {
        return Err(reject("must be a hostname, not an IP address"));
    }
    if domain.contains(':') {
        return Err(reject("must be a hostname without a port"));
    }
    if domain.contains('*') {
        return Err(reject("must be one hostname, not a wildcard"));
    }
    if domain.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(reject("must not contain spaces or control characters"));
    }
    // The absolute form `example.com.` names the same host.
    let domain = domain.strip_suffix('.').unwrap_or(domain);
    // STD3 rules and hyphen checks as in strict mode; lengths are checked
    // below with messages of their own.
    let ascii = Uts46::new()
        .to_ascii(
            domain.to_lowercase().as_bytes(),
            AsciiDenyList::STD3,
            Hyphens::Check,
            DnsLength::Ignore,
        )
        .map(|ascii| ascii.into_owned())
        .map_err(|_| {
        reject("must be a valid hostname: letters, digits and hyphens in dot-separated labels (internationalized names are allowed)")
    })?;
    if ascii.len() > DOMAIN_MAX_BYTES {
        return Err(reject(&format!(
            "must be at most {DOMAIN_MAX_BYTES} bytes in its ASCII (IDNA) form"
        )));
    }
    let labels: Vec<&str> = ascii.split('.').collect();
    if labels.iter().any(|l| l.is_empty()) {
        return Err(reject("must not contain empty labels (`..`)"));
    }
    if labels.iter().any(|l| l.len() > LABEL_MAX_BYTES) {
        return Err(reject(&format!(
            "each label must be at most {LABEL_MAX_BYTES} bytes in its ASCII (IDNA) form"
        )));
    }
    let last = labels.last().copied().unwrap_or_default();
    if ascii.parse::<Ipv4Addr>().is_ok() || last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(reject("must be a hostname, not an IP address"));
    }
    if last == "localhost" {
        return Err(reject("must be a public hostname, not localhost"));
    }
    if labels.len() < 2 {
        return Err(reject(
            "must be a public hostname with at least two labels, e.g. example.com",
        ));
    }
    Ok(ascii)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn domains_normalize_or_fail_with_the_rule() {
        let long_label = "a".repeat(64);
        let too_long = format!("{}.example.com", ["abcdefghi"; 25].join("."));
        let idn_too_long = format!("{}.example", ["bücher"; 20].join("."));
        assert!(idn_too_long.chars().count() <= 253);
        let just_fits = format!("{}.com", "a.".repeat(124).trim_end_matches('.'));
        assert_eq!(just_fits.len(), 251);
        let cases: Vec<(&str, Result<&str, &str>)> = vec![
            ("www.example.com", Ok("www.example.com")),
            ("  WWW.Example.COM  ", Ok("www.example.com")),
            ("example.com.", Ok("example.com")),
            ("bücher.example", Ok("xn--bcher-kva.example")),
            ("BÜCHER.example", Ok("xn--bcher-kva.example")),
            ("xn--bcher-kva.example", Ok("xn--bcher-kva.example")),
            ("例え.テスト", Ok("xn--r8jz45g.xn--zckzah")),
            ("shop-1.example.co.uk", Ok("shop-1.example.co.uk")),
            (just_fits.as_str(), Ok(just_fits.as_str())),
            ("", Err("must not be empty")),
            ("   ", Err("must not be empty")),
            ("https://www.example.com", Err("without a scheme")),
            ("www.example.com/blog", Err("without a path")),
            ("www.example.com?x=1", Err("without a path")),
            ("www.example.com:8080", Err("without a port")),
            ("user@www.example.com", Err("user information")),
            ("*.example.com", Err("wildcard")),
            ("192.168.0.1", Err("not an IP address")),
            ("[::1]", Err("not an IP address")),
            ("::1", Err("not an IP address")),
            ("２５５.０.０.１", Err("not an IP address")),
            ("10.0.0.300", Err("not an IP address")),
            ("localhost", Err("not localhost")),
            ("LOCALHOST.", Err("not localhost")),
            ("app.localhost", Err("not localhost")),
            ("intranet", Err("at least two labels")),
            ("a..example.com", Err("empty labels")),
            ("-bad.example.com", Err("valid hostname")),
            ("bad_name.example.com", Err("valid hostname")),
            ("exa mple.com", Err("spaces")),
            (long_label.as_str(), Err("at most 63 bytes")),
            (
                idn_too_long.as_str(),
                Err("at most 253 bytes in its ASCII (IDNA) form"),
            ),
            (too_long.as_str(), Err("at most 253")),
        ];
        for (input, expected) in cases {
            let got = normalize_domain(input);
            match (expected, got) {
                (Ok(want), Ok(got)) => assert_eq!(got, want, "input {input:?}"),
                (Err(rule), Err(e)) => {
                    assert_eq!(e.code, ErrorCode::InvalidInput, "input {input:?}");
                    assert!(e.message.starts_with("domain: "), "{}", e.message);
                    assert!(e.message.contains(rule), "input {input:?}: {}", e.message);
                }
                (want, got) => panic!("input {input:?}: expected {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn names_are_trimmed_and_bounded() {
        assert_eq!(normalize_name("  My shop ").unwrap(), "My shop");
        assert_eq!(
            normalize_name(&"ä".repeat(100)).unwrap().chars().count(),
            100
        );
        let cases = [
            ("", "must not be empty"),
            ("   ", "must not be empty"),
            ("line\nbreak", "control characters"),
        ];
        for (input, rule) in cases {
            let e = normalize_name(input).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidInput);
            assert!(
                e.message.starts_with("name: ") && e.message.contains(rule),
                "{}",
                e.message
            );
        }
        let e = normalize_name(&"x".repeat(101)).unwrap_err();
        assert!(
            e.message.contains("at most 100 characters"),
            "{}",
            e.message
        );
    }
}

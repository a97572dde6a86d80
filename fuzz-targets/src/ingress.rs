//! The tracking ingress router, differentially: forwarded if and only if
//! the request is exactly one of the three exposed pairs.

use axum::http::{HeaderMap, HeaderValue, Method, Uri, header};
use host_sim::serve::{IngressDecision, ingress_decision};
use host_sim::state::TrackingRoute;

const HOSTNAME: &str = "track.shop.example";

/// The three requests a tracking hostname forwards, written independently
/// of `tracking::ingress::EXPOSED`.
const ALLOWED: [(&[u8], &[u8]); 3] = [
    (b"GET", b"/script.js"),
    (b"POST", b"/api/send"),
    (b"OPTIONS", b"/api/send"),
];

/// The input is `METHOD SP TARGET [LF HOST]` as bytes from the request
/// line (and the `Host` header; the route's exact hostname when absent).
/// Whatever the HTTP server would accept (a method token, a request
/// target `http::Uri` parses, a header value) is decided by the ingress
/// router, which forwards it if and only if the `Host` is the hostname
/// exactly (or with `:443`) and the method and the raw path (the target
/// before any `?`, in origin form; the path of an absolute-form target)
/// are byte for byte one of the three allowed pairs. Another spelling of
/// the hostname is misdirected, never passed to the other surfaces.
pub fn ingress_router(data: &[u8]) {
    let (line, host) = match data.iter().position(|b| *b == b'\n') {
        Some(at) => (&data[..at], Some(&data[at + 1..])),
        None => (data, None),
    };
    let Some(space) = line.iter().position(|b| *b == b' ') else {
        return;
    };
    let (method_bytes, target) = (&line[..space], &line[space + 1..]);
    let (Ok(method), Ok(uri)) = (Method::from_bytes(method_bytes), Uri::try_from(target)) else {
        return;
    };
    let host = host.unwrap_or(HOSTNAME.as_bytes());
    let Ok(host_value) = HeaderValue::from_bytes(host) else {
        return;
    };
    let mut headers = HeaderMap::new();
    headers.insert(header::HOST, host_value);
    let routes = [TrackingRoute {
        hostname: HOSTNAME.into(),
        project_id: "shop".into(),
        provider_origin: "https://provider.example".into(),
    }];
    let decision = ingress_decision(&routes, &headers, &method, &uri);
    let exact_host = host == HOSTNAME.as_bytes() || host == format!("{HOSTNAME}:443").as_bytes();
    let path = raw_path(target);
    let allowed = ALLOWED
        .iter()
        .any(|(m, p)| *m == method_bytes && Some(*p) == path);
    let forwarded = matches!(decision, IngressDecision::Forward(_));
    assert_eq!(
        forwarded,
        exact_host && allowed,
        "{} {} with Host {:?}: {decision:?}",
        String::from_utf8_lossy(method_bytes),
        String::from_utf8_lossy(target),
        String::from_utf8_lossy(host),
    );
    // A spelling of the tracking hostname never reaches the API, console
    // or MCP server.
    let names_it = std::str::from_utf8(host).is_ok_and(|h| {
        let h = h.split(':').next().unwrap_or(h).trim_end_matches('.');
        h.eq_ignore_ascii_case(HOSTNAME)
    });
    if names_it {
        assert_ne!(
            decision,
            IngressDecision::PassThrough,
            "Host {host:?} passed"
        );
    }
}

/// The path of a request target as sent: origin form up to `?` (or `#`);
/// absolute form (`scheme://authority/path`) the part after the authority.
fn raw_path(target: &[u8]) -> Option<&[u8]> {
    let end = |bytes: &[u8]| {
        bytes
            .iter()
            .position(|b| matches!(b, b'?' | b'#'))
            .unwrap_or(bytes.len())
    };
    if target.starts_with(b"/") {
        return Some(&target[..end(target)]);
    }
    let scheme_end = target.windows(3).position(|w| w == b"://")?;
    let rest = &target[scheme_end + 3..];
    let rest = &rest[..end(rest)];
    let path = &rest[rest.iter().position(|b| *b == b'/')?..];
    Some(path)
}

//! The shape of what a guest may send through a binding, and of what an
//! operator may bind: methods, paths, queries and headers of a request;
//! origins and secrets of a binding. Pure functions, no state.

use reqwest::header::{HeaderName, HeaderValue};

use crate::bindings::platform::extension::http_binding::Request;
use crate::secret::Secret;

/// Methods a guest may use.
const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

/// Request headers a guest may never set (the binding's auth header is
/// added to this list per binding).
const REFUSED_REQUEST_HEADERS: &[&str] = &[
    "authorization",
    "cookie",
    "host",
    "x-umami-api-key",
    "proxy-authorization",
    "content-length",
    "transfer-encoding",
    "connection",
];

/// The request's own shape: method, path, query and headers.
pub(super) fn check_shape(request: &Request) -> Result<(), String> {
    if !METHODS
        .iter()
        .any(|method| method.eq_ignore_ascii_case(&request.method))
    {
        return Err(format!("method must be one of {}", METHODS.join(", ")));
    }
    check_path(&request.path)?;
    if let Some(query) = &request.query
        && !query.bytes().all(|b| b.is_ascii_graphic() && b != b'#')
    {
        return Err("the query must be printable ASCII without `#` or spaces".into());
    }
    for (name, value) in &request.headers {
        if REFUSED_REQUEST_HEADERS
            .iter()
            .any(|refused| name.eq_ignore_ascii_case(refused))
            || name
                .get(..6)
                .is_some_and(|prefix| prefix.eq_ignore_ascii_case("proxy-"))
        {
            return Err(format!(
                "header {} is set by the host",
                name.to_ascii_lowercase()
            ));
        }
        if HeaderName::from_bytes(name.as_bytes()).is_err() || HeaderValue::from_str(value).is_err()
        {
            return Err(format!("header {} is malformed", printable(name)));
        }
    }
    Ok(())
}

/// An absolute path without dot segments, empty segments, encoded slashes
/// or dots, backslashes, query or fragment: what the allow rule matched is
/// what the origin sees.
fn check_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err("the path must start with `/`".into());
    }
    if path.len() > 2048 {
        return Err("the path is longer than 2048 bytes".into());
    }
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&b);
    if !path.bytes().all(allowed) {
        return Err("the path has characters outside RFC 3986 path characters".into());
    }
    let encoded = |w: &[u8]| {
        w[0] == b'%'
            && matches!(
                (w[1], w[2].to_ascii_lowercase()),
                (b'2', b'f') | (b'5', b'c') | (b'2', b'e') | (b'0', b'0')
            )
    };
    if path.as_bytes().windows(3).any(encoded) {
        return Err("the path has an encoded slash, backslash, dot or NUL".into());
    }
    if path.len() > 1
        && path[1..]
            .split('/')
            .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        return Err("the path has an empty or dot segment".into());
    }
    Ok(())
}

/// Why an operator-supplied origin was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    #[error("the origin must start with http:// or https://")]
    Scheme,
    #[error("the origin must not carry credentials (user@); set the secret instead")]
    Credentials,
    #[error("the origin must be scheme://host[:port] without path, query or fragment")]
    NotAnOrigin,
}

/// Validates an operator-supplied origin: `http(s)://host[:port]`, no
/// userinfo, path, query or fragment. Answers it without a trailing `/`.
pub fn check_origin(origin: &str) -> Result<String, OriginError> {
    let trimmed = origin.trim().trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("https://")
        .or_else(|| trimmed.strip_prefix("http://"))
        .ok_or(OriginError::Scheme)?;
    if rest.contains('@') {
        return Err(OriginError::Credentials);
    }
    if rest.contains(['/', '?', '#']) || rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(OriginError::NotAnOrigin);
    }
    Ok(trimmed.to_string())
}

/// Why a binding's secret was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("the secret is empty")]
    Empty,
    #[error("the secret has characters that cannot go in an HTTP header")]
    NotAHeaderValue,
}

/// A secret for a binding: non-empty, one line, sendable as a header.
pub fn check_secret(secret: &str) -> Result<Secret, SecretError> {
    let secret = secret.trim_end_matches(['\r', '\n']);
    if secret.is_empty() {
        return Err(SecretError::Empty);
    }
    if HeaderValue::from_str(secret).is_err() {
        return Err(SecretError::NotAHeaderValue);
    }
    Ok(Secret::new(secret))
}

/// "binding NAME: METHOD PATH", the subject of a call's errors and log
/// lines; formatted only when one is written.
pub(super) struct What<'a> {
    pub binding: &'a str,
    pub method: &'a str,
    pub path: &'a str,
}

impl std::fmt::Display for What<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "binding {}: {} {}",
            self.binding,
            printable(self.method),
            printable(self.path)
        )
    }
}

/// A guest-supplied string made safe for an error message.
pub(super) fn printable(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(200)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if text.chars().count() > 200 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_with_tricks_are_refused() {
        for bad in [
            "api/x",
            "/api/../me",
            "/api/./x",
            "/api//x",
            "/api/%2e%2e/me",
            "/api/%2F",
            "/api/a%2Eb",
            "/api/%5c",
            "/api/x%5C",
            "/api/%00",
            "/api/x?y",
            "/api/x#y",
            "/api/x\\y",
            "/api/x y",
        ] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
        for good in [
            "/",
            "/api/websites/123",
            "/api/items/a-b_c.d~e",
            "/api/a%20b",
            "/api/2f%",
            "/api/%2",
        ] {
            assert!(check_path(good).is_ok(), "{good}");
        }
    }

    fn request(headers: &[(&str, &str)]) -> Request {
        Request {
            binding: "provider".into(),
            method: "get".into(),
            path: "/api/items/1".into(),
            query: Some("a=1&b=2".into()),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: None,
        }
    }

    #[test]
    fn guests_cannot_set_credential_or_framing_headers() {
        assert!(check_shape(&request(&[("accept", "application/json")])).is_ok());
        for name in [
            "Authorization",
            "cookie",
            "Host",
            "X-Umami-Api-Key",
            "proxy-authorization",
            "content-length",
        ] {
            let error = check_shape(&request(&[(name, "x")])).unwrap_err();
            assert!(error.contains("set by the host"), "{name}: {error}");
        }
        assert!(check_shape(&request(&[("x-ok", "line\r\nbreak")])).is_err());
        let mut bad_method = request(&[]);
        bad_method.method = "CONNECT".into();
        assert!(check_shape(&bad_method).is_err());
        let mut bad_query = request(&[]);
        bad_query.query = Some("a=1#frag".into());
        assert!(check_shape(&bad_query).is_err());
    }

    #[test]
    fn origins_without_credentials_or_paths() {
        assert_eq!(
            check_origin("http://127.0.0.1:80/").unwrap(),
            "http://127.0.0.1:80"
        );
        assert_eq!(
            check_origin("https://user:pw@example.net"),
            Err(OriginError::Credentials)
        );
        assert_eq!(
            check_origin("https://example.net/api"),
            Err(OriginError::NotAnOrigin)
        );
        assert_eq!(check_origin("ftp://example.net"), Err(OriginError::Scheme));
        assert_eq!(check_origin("https://"), Err(OriginError::Scheme));
    }

    #[test]
    fn secrets_are_one_header_value() {
        assert_eq!(check_secret("tok\n").unwrap().expose(), "tok");
        assert_eq!(check_secret("\r\n").unwrap_err(), SecretError::Empty);
        assert_eq!(
            check_secret("a\u{7f}b").unwrap_err(),
            SecretError::NotAHeaderValue
        );
    }
}

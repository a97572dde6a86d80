//! The console's session cookie and sign-in form.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use host_sim::serve::{CONSOLE_COOKIE, ConsoleSessions, sign_in_token};

/// First byte even: the rest is `Cookie` header values (a newline between
/// headers) sent to a console with one open session; the request is
/// signed in if and only if one `name=value` pair (split on `;`, trimmed)
/// is the console cookie with exactly that session's id, and signing out
/// with a request that is not signed in leaves the session open. Odd: the
/// rest is a sign-in form body; the token read from it is trimmed, and
/// only a body with a field yields one.
pub fn console_session(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 1 {
        let body = String::from_utf8_lossy(rest);
        let token = sign_in_token(&body);
        assert_eq!(token, token.trim(), "an untrimmed token");
        if !token.is_empty() {
            assert!(
                body.contains('='),
                "a token read from a form without fields: {body:?}"
            );
        }
        return;
    }
    let sessions = ConsoleSessions::default();
    let id = sessions.open(
        "token of the fuzzed session".into(),
        Duration::from_secs(3600),
    );
    let mut headers = HeaderMap::new();
    // The session's id may be named by the input: `$ID` stands for it.
    let values: Vec<Vec<u8>> = rest
        .split(|b| *b == b'\n')
        .take(4)
        .map(|v| String::from_utf8_lossy(v).replace("$ID", &id).into_bytes())
        .collect();
    for value in &values {
        let Ok(value) = HeaderValue::from_bytes(value) else {
            return;
        };
        headers.append(header::COOKIE, value);
    }
    // Header values of visible ASCII only are read (others are not text).
    let first_match = values
        .iter()
        .filter(|v| v.iter().all(|b| *b == b'\t' || (0x20..0x7f).contains(b)))
        .filter_map(|v| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == CONSOLE_COOKIE)
        .map(|(_, value)| value);
    let expected = first_match == Some(id.as_str());
    assert_eq!(
        sessions.caller(&headers).is_some(),
        expected,
        "cookies {values:?} against session {id}"
    );
    sessions.close(&headers);
    let still_open = {
        let mut own = HeaderMap::new();
        let cookie = format!("{CONSOLE_COOKIE}={id}");
        own.insert(
            header::COOKIE,
            HeaderValue::from_str(&cookie).expect("ASCII"),
        );
        sessions.caller(&own).is_some()
    };
    assert_eq!(still_open, !expected, "sign-out closed the wrong session");
}

//! Binding secrets: a type that never prints itself, and the redaction that
//! every byte from a provider and every guest log line passes through.

use std::fmt;
use std::sync::Arc;

use memchr::memmem;

/// A binding's credential. It has no `Display`, its `Debug` prints
/// `[redacted]`, and only [`crate::capabilities::http`] reads it (to build
/// the auth header) and the redactor (to remove it from what the guest sees).
/// Clones share one value and its redaction needles, worked out once.
#[derive(Clone)]
pub struct Secret(Arc<SecretInner>);

struct SecretInner {
    value: String,
    /// The forms redaction looks for, longest first, each with its
    /// searcher built once (building one costs more than a short search).
    needles: Vec<memmem::Finder<'static>>,
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.0.value == other.0.value
    }
}

impl Eq for Secret {}

/// What replaces a secret wherever it would have been shown.
pub const REDACTED: &str = "[redacted]";

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        let value = value.into();
        let needles = needles(&value);
        Self(Arc::new(SecretInner { value, needles }))
    }

    /// The raw value; call sites are the auth header and redaction only.
    pub(crate) fn expose(&self) -> &str {
        &self.0.value
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(")?;
        f.write_str(REDACTED)?;
        f.write_str(")")
    }
}

/// Replaces every occurrence of any of `secrets` (and of their JSON-escaped
/// form) in `bytes` with [`REDACTED`]; what holds none comes back as it was,
/// uncopied.
pub fn redact_bytes(bytes: Vec<u8>, secrets: &[Secret]) -> Vec<u8> {
    let mut out = bytes;
    for needle in secrets.iter().flat_map(|s| &s.0.needles) {
        if needle.find(&out).is_some() {
            out = replace_all(&out, needle, REDACTED.as_bytes());
        }
    }
    out
}

/// [`redact_bytes`] for text.
pub fn redact_str(text: String, secrets: &[Secret]) -> String {
    let found = secrets
        .iter()
        .flat_map(|s| &s.0.needles)
        .any(|needle| needle.find(text.as_bytes()).is_some());
    if !found {
        return text;
    }
    // A UTF-8 needle only matches whole characters, so nothing is lost.
    String::from_utf8_lossy(&redact_bytes(text.into_bytes(), secrets)).into_owned()
}

fn needles(raw: &str) -> Vec<memmem::Finder<'static>> {
    if raw.is_empty() {
        return Vec::new();
    }
    // The raw value, its JSON string escape, and both with `/` as `\/`.
    let escaped = serde_json::to_string(raw).unwrap_or_default();
    let escaped = escaped.trim_matches('"').to_string();
    let mut needles = Vec::new();
    for form in [raw.to_string(), escaped] {
        let slashed = form.replace('/', "\\/");
        for needle in [form, slashed] {
            if !needle.is_empty() && !needles.contains(&needle) {
                needles.push(needle);
            }
        }
    }
    // Longest first, so a shorter form never splits a longer occurrence.
    needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
    needles
        .iter()
        .map(|needle| memmem::Finder::new(needle).into_owned())
        .collect()
}

fn replace_all(haystack: &[u8], needle: &memmem::Finder<'_>, with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut rest = 0;
    let length = needle.needle().len();
    for at in needle.find_iter(haystack) {
        // Occurrences overlapping one already replaced are skipped.
        if at < rest {
            continue;
        }
        out.extend_from_slice(&haystack[rest..at]);
        out.extend_from_slice(with);
        rest = at + length;
    }
    out.extend_from_slice(&haystack[rest..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("tok-123");
        assert_eq!(format!("{s:?}"), "Secret([redacted])");
    }

    #[test]
    fn redacts_raw_and_json_escaped_occurrences() {
        let secrets = [Secret::new("a/b\"c")];
        let body = br#"{"token":"a\/b\"c","raw":"a/b"c"}"#;
        let out = String::from_utf8(redact_bytes(body.to_vec(), &secrets)).unwrap();
        assert!(!out.contains("a\\/b"), "{out}");
        assert_eq!(out.matches(REDACTED).count(), 2, "{out}");
        assert_eq!(redact_str("x a/b\"c y".into(), &secrets), "x [redacted] y");
    }

    #[test]
    fn every_occurrence_goes_leftmost_first_and_clones_compare_by_value() {
        let secrets = [Secret::new("aa")];
        assert_eq!(
            redact_bytes(b"aaa-aa".to_vec(), &secrets),
            b"[redacted]a-[redacted]"
        );
        assert_eq!(
            redact_str("aaa-aa".into(), &secrets),
            "[redacted]a-[redacted]"
        );
        assert_eq!(redact_str("é aa é".into(), &secrets), "é [redacted] é");
        assert_eq!(redact_bytes(b"no match".to_vec(), &secrets), b"no match");
        assert_eq!(secrets[0].clone(), Secret::new("aa"));
    }

    #[test]
    fn empty_secret_changes_nothing() {
        assert_eq!(redact_bytes(b"abc".to_vec(), &[Secret::new("")]), b"abc");
    }
}

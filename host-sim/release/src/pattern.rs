//! Path patterns of HTTP capabilities: `/api/websites/{id}/stats`.
//!
//! A pattern is a sequence of `/`-separated segments. A literal segment
//! matches itself exactly; `{name}` matches exactly one non-empty segment made
//! of unreserved URL characters (`A-Z a-z 0-9 - . _ ~`), never `.` or `..`.
//! There are no wildcards across segments, no percent-decoding and no query:
//! what is not spelled out is refused.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    source: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("path pattern `{pattern}`: {rule}")]
pub struct PatternError {
    pub pattern: String,
    pub rule: &'static str,
}

fn is_unreserved(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~')
}

impl PathPattern {
    pub fn parse(pattern: &str) -> Result<Self, PatternError> {
        let fail = |rule| PatternError {
            pattern: pattern.to_owned(),
            rule,
        };
        let rest = pattern
            .strip_prefix('/')
            .ok_or_else(|| fail("must start with `/`"))?;
        if rest.is_empty() {
            return Ok(Self {
                source: pattern.to_owned(),
                segments: Vec::new(),
            });
        }
        let mut segments = Vec::new();
        for segment in rest.split('/') {
            if let Some(name) = segment.strip_prefix('{') {
                let name = name
                    .strip_suffix('}')
                    .ok_or_else(|| fail("a `{` segment must end with `}`"))?;
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(fail("a parameter name must be letters, digits or `_`"));
                }
                segments.push(Segment::Param);
            } else {
                if segment.is_empty() {
                    return Err(fail("must not contain empty segments"));
                }
                if segment == "." || segment == ".." || !segment.chars().all(is_unreserved) {
                    return Err(fail(
                        "literal segments must be unreserved URL characters, not `.` or `..`",
                    ));
                }
                segments.push(Segment::Literal(segment.to_owned()));
            }
        }
        Ok(Self {
            source: pattern.to_owned(),
            segments,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether `path` (no query string) matches this pattern.
    pub fn matches(&self, path: &str) -> bool {
        let Some(rest) = path.strip_prefix('/') else {
            return false;
        };
        if rest.is_empty() {
            return self.segments.is_empty();
        }
        let mut parts = rest.split('/');
        for segment in &self.segments {
            let Some(part) = parts.next() else {
                return false;
            };
            let ok = match segment {
                Segment::Literal(literal) => part == literal,
                Segment::Param => {
                    !part.is_empty()
                        && part != "."
                        && part != ".."
                        && part.chars().all(is_unreserved)
                }
            };
            if !ok {
                return false;
            }
        }
        parts.next().is_none()
    }
}

impl fmt::Display for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::PathPattern;
    use proptest::prelude::*;

    #[test]
    fn matches_literals_and_one_segment_parameters() {
        let p = PathPattern::parse("/api/websites/{id}/stats").unwrap();
        assert!(p.matches("/api/websites/0b9f1c3e-1f7e-5a3e-9c1d-2f3e4a5b6c7d/stats"));
        for path in [
            "/api/websites//stats",
            "/api/websites/../stats",
            "/api/websites/a/b/stats",
            "/api/websites/a/stats/",
            "/api/websites/a/statsx",
            "/api/websites/a%2Fb/stats",
            "/api/websites/a",
            "api/websites/a/stats",
            "/api/me",
        ] {
            assert!(!p.matches(path), "{path} must not match");
        }
    }

    #[test]
    fn refuses_malformed_patterns() {
        for bad in [
            "api",
            "/api//x",
            "/api/{",
            "/api/{}",
            "/api/..",
            "/a b",
            "/api/{a-b}",
        ] {
            assert!(PathPattern::parse(bad).is_err(), "{bad} must be refused");
        }
        assert!(PathPattern::parse("/").unwrap().matches("/"));
    }

    proptest! {
        #[test]
        fn a_literal_pattern_matches_only_itself(a in "[a-z]{1,8}", b in "[a-z]{1,8}", other in "[a-z/%.]{0,20}") {
            let path = format!("/{a}/{b}");
            let p = PathPattern::parse(&path).unwrap();
            prop_assert!(p.matches(&path));
            prop_assert_eq!(p.matches(&other), other == path);
        }
    }
}

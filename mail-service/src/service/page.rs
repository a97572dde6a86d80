//! Pagination shared by every list: newest first by id, a page size of 1 to
//! 100 (default 20) and an opaque cursor (at most 200 characters) naming the
//! list it came from and the last id of the previous page.

use base64::Engine;

use crate::error::Error;

pub const MAX_PAGE_LIMIT: i64 = 100;
pub const DEFAULT_PAGE_LIMIT: i64 = 20;
pub const MAX_CURSOR_CHARS: usize = 200;

/// One page of a list; `has_more` is `next_cursor.is_some()`.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    pub fn has_more(&self) -> bool {
        self.next_cursor.is_some()
    }

    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            items: self.items.into_iter().map(f).collect(),
            next_cursor: self.next_cursor,
        }
    }
}

/// A checked page request: read `limit + 1` rows with ids below `before_id`
/// and hand them to `PageRequest::page`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// The list this cursor belongs to (`logs`, `domains`, ...).
    kind: &'static str,
    pub limit: i64,
    pub before_id: Option<i64>,
}

impl PageRequest {
    /// Checks `limit` and `cursor` as given in the query string.
    pub fn parse(
        kind: &'static str,
        limit: Option<&str>,
        cursor: Option<&str>,
    ) -> Result<PageRequest, Error> {
        let limit = match limit {
            None => DEFAULT_PAGE_LIMIT,
            Some(raw) => match raw.parse::<i64>() {
                Ok(n) if (1..=MAX_PAGE_LIMIT).contains(&n) => n,
                _ => {
                    return Err(Error::validation(
                        "limit",
                        format!("must be an integer from 1 to {MAX_PAGE_LIMIT}"),
                    ));
                }
            },
        };
        let before_id = cursor.map(|c| decode_cursor(kind, c)).transpose()?;
        Ok(PageRequest {
            kind,
            limit,
            before_id,
        })
    }

    /// How many rows to read: one more than the page, to know whether a next
    /// page exists.
    pub fn fetch(&self) -> i64 {
        self.limit + 1
    }

    /// The page out of up to `limit + 1` rows read newest first.
    pub fn page<T>(&self, mut rows: Vec<T>, id_of: impl Fn(&T) -> i64) -> Page<T> {
        let next_cursor = if rows.len() as i64 > self.limit {
            rows.truncate(self.limit as usize);
            rows.last()
                .map(|last| encode_cursor(self.kind, id_of(last)))
        } else {
            None
        };
        Page {
            items: rows,
            next_cursor,
        }
    }
}

fn encode_cursor(kind: &str, id: i64) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{kind}:{id}"))
}

fn decode_cursor(kind: &str, cursor: &str) -> Result<i64, Error> {
    if cursor.chars().count() > MAX_CURSOR_CHARS {
        return Err(Error::validation(
            "cursor",
            format!("must be at most {MAX_CURSOR_CHARS} characters"),
        ));
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| {
            s.strip_prefix(kind)
                .and_then(|rest| rest.strip_prefix(':'))
                .and_then(|n| n.parse().ok())
        })
        .ok_or_else(|| {
            Error::validation(
                "cursor",
                format!("is not a nextCursor value returned by this list ({kind})"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_belongs_to_its_list() {
        let logs = PageRequest::parse("logs", Some("2"), None).unwrap();
        let page = logs.page(vec![30, 20, 10], |id| *id);
        assert_eq!(page.items, [30, 20]);
        let cursor = page.next_cursor.unwrap();
        assert!(cursor.len() <= MAX_CURSOR_CHARS);
        let next = PageRequest::parse("logs", None, Some(&cursor)).unwrap();
        assert_eq!((next.before_id, next.limit), (Some(20), DEFAULT_PAGE_LIMIT));
        let err = PageRequest::parse("domains", None, Some(&cursor)).unwrap_err();
        assert!(err.to_string().starts_with("cursor: is not a nextCursor"));
        assert!(!logs.page(vec![30, 20], |id| *id).has_more());
    }

    #[test]
    fn limits_at_their_boundaries() {
        for ok in ["1", "100"] {
            assert!(PageRequest::parse("logs", Some(ok), None).is_ok());
        }
        for bad in ["0", "101", "x", ""] {
            assert!(
                PageRequest::parse("logs", Some(bad), None).is_err(),
                "{bad}"
            );
        }
        let long = "a".repeat(201);
        assert!(PageRequest::parse("logs", None, Some(&long)).is_err());
    }
}

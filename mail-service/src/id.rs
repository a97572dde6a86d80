//! Identifiers: decimal strings matching `^[1-9][0-9]{0,18}$`, time-ordered
//! and unique across nodes. Layout of the 63-bit value: 41 bits of
//! milliseconds since 2024-01-01, 10 bits of node number, 12 bits of sequence.
//! The node number comes from a row the node registers in the database at
//! start, so two live nodes never share one (up to 1024 concurrent nodes).

use std::sync::Mutex;

const EPOCH_MS: i64 = 1_704_067_200_000; // 2024-01-01T00:00:00Z
const NODE_BITS: u32 = 10;
const SEQ_BITS: u32 = 12;
const MAX_SEQ: i64 = (1 << SEQ_BITS) - 1;

/// The pattern every ID matches, as shown in errors.
pub const ID_PATTERN: &str = "^[1-9][0-9]{0,18}$";

#[derive(Debug)]
pub struct IdGenerator {
    node: i64,
    state: Mutex<(i64, i64)>,
}

impl IdGenerator {
    pub fn new(node_registration: i64) -> Self {
        Self {
            node: node_registration.rem_euclid(1 << NODE_BITS),
            state: Mutex::new((0, 0)),
        }
    }

    /// A new ID. Uses the wall clock (not the injectable one) so IDs stay
    /// ordered and unique whatever a test does to its clock; when the clock
    /// stands still or goes back, the sequence carries into the next
    /// millisecond instead of waiting.
    pub fn next(&self) -> i64 {
        use crate::clock::{Clock, SystemClock};
        let now = SystemClock.now_ms() - EPOCH_MS;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (last_ms, seq) = *state;
        let (ms, seq) = if now > last_ms {
            (now, 0)
        } else if seq < MAX_SEQ {
            (last_ms, seq + 1)
        } else {
            (last_ms + 1, 0)
        };
        *state = (ms, seq);
        (ms << (NODE_BITS + SEQ_BITS)) | (self.node << SEQ_BITS) | seq
    }
}

/// What a path segment says about an ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParsedId {
    /// Matches the pattern and names a possible row.
    Id(i64),
    /// Matches the pattern but is beyond the 63-bit range: no row has it.
    OutOfRange,
    /// Does not match the pattern.
    Invalid,
}

/// Parses an ID from a path segment.
pub fn parse_id(text: &str) -> ParsedId {
    let bytes = text.as_bytes();
    let valid = !bytes.is_empty()
        && bytes.len() <= 19
        && bytes[0] != b'0'
        && bytes.iter().all(u8::is_ascii_digit);
    if !valid {
        return ParsedId::Invalid;
    }
    match text.parse::<u64>().ok().and_then(|v| i64::try_from(v).ok()) {
        Some(id) => ParsedId::Id(id),
        None => ParsedId::OutOfRange,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_are_unique_ordered_and_match_the_pattern() {
        let generator = IdGenerator::new(7);
        let mut last = 0;
        for _ in 0..20_000 {
            let id = generator.next();
            assert!(id > last);
            assert_eq!(parse_id(&id.to_string()), ParsedId::Id(id));
            last = id;
        }
    }

    #[test]
    fn nodes_never_collide() {
        let a = IdGenerator::new(1);
        let b = IdGenerator::new(2);
        let ids_a: std::collections::HashSet<i64> = (0..5000).map(|_| a.next()).collect();
        assert!((0..5000).all(|_| !ids_a.contains(&b.next())));
    }

    #[test]
    fn id_pattern_boundaries() {
        assert_eq!(parse_id("1"), ParsedId::Id(1));
        assert_eq!(parse_id("9223372036854775807"), ParsedId::Id(i64::MAX));
        assert_eq!(parse_id("9999999999999999999"), ParsedId::OutOfRange);
        for bad in ["12345678901234567890", "0", "01", "", "12a", "+1"] {
            assert_eq!(parse_id(bad), ParsedId::Invalid, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn parse_agrees_with_the_pattern(s in "\\PC{0,22}") {
            let matches = !s.is_empty() && s.len() <= 19 && !s.starts_with('0')
                && s.chars().all(|c| c.is_ascii_digit());
            prop_assert_eq!(parse_id(&s) != ParsedId::Invalid, matches);
        }
    }
}

//! `scheduled_at`: how it is read and the window it must lie in.

use crate::error::Error;

/// How far in the past `scheduled_at` may lie (clock skew between the
/// caller and the service, and the request's own time on the wire); such
/// an email is due at once.
pub const SCHEDULE_PAST_TOLERANCE_MS: i64 = 60_000;
/// How far ahead `scheduled_at` may lie.
pub const MAX_SCHEDULE_AHEAD_MS: i64 = 30 * 24 * 60 * 60 * 1000;

/// Reads a `scheduled_at` value: an RFC 3339 date-time with a UTC offset
/// (the profile of ISO 8601 the contract's `date-time` format names), as
/// Unix milliseconds. Digits finer than a millisecond are dropped; a leap
/// second (`23:59:60`) is the last millisecond of its minute.
pub fn parse_scheduled_at(field: &str, text: &str) -> Result<i64, Error> {
    let parsed = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|_| {
            Error::validation(
                field,
                format!(
                    "`{text}` is not an RFC 3339 date-time with a UTC offset; use e.g. 2030-01-01T09:00:00Z or 2030-01-01T10:00:00+01:00"
                ),
            )
        })?;
    let ms = parsed.unix_timestamp_nanos().div_euclid(1_000_000);
    i64::try_from(ms).map_err(|_| Error::validation(field, "is out of range"))
}

/// Checks that `at` (Unix ms) lies in the scheduling window seen from
/// `now`: at most `SCHEDULE_PAST_TOLERANCE_MS` in the past, at most
/// `MAX_SCHEDULE_AHEAD_MS` ahead (both bounds included).
pub fn check_schedule_window(field: &str, at: i64, now: i64) -> Result<(), Error> {
    let earliest = now - SCHEDULE_PAST_TOLERANCE_MS;
    let latest = now + MAX_SCHEDULE_AHEAD_MS;
    if at < earliest {
        return Err(Error::validation(
            field,
            format!(
                "must not be more than {} seconds in the past (it is {} before the service's time {})",
                SCHEDULE_PAST_TOLERANCE_MS / 1000,
                crate::clock::span(now - at),
                crate::clock::rfc3339(now)
            ),
        ));
    }
    if at > latest {
        return Err(Error::validation(
            field,
            format!(
                "must be at most 30 days ahead (the latest allowed now is {})",
                crate::clock::rfc3339(latest)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduled_at_reads_rfc3339_with_an_offset() {
        let read = |s: &str| parse_scheduled_at("scheduled_at", s).map(crate::clock::rfc3339);
        for (given, read_as) in [
            ("2030-01-01T09:00:00Z", "2030-01-01T09:00:00Z"),
            // Offsets are applied; -00:00 and lower-case t/z are RFC 3339 too.
            ("2030-01-01T09:00:00.5+05:30", "2030-01-01T03:30:00.5Z"),
            ("2029-12-31T23:00:00-10:00", "2030-01-01T09:00:00Z"),
            ("2030-01-01T09:00:00-00:00", "2030-01-01T09:00:00Z"),
            ("2030-01-01t09:00:00z", "2030-01-01T09:00:00Z"),
            // Milliseconds are kept, finer digits dropped.
            (
                "2030-01-01T09:00:00.123456789123Z",
                "2030-01-01T09:00:00.123Z",
            ),
            ("2030-01-01T09:00:00.0009Z", "2030-01-01T09:00:00Z"),
            // A leap second is the last millisecond of its minute.
            ("2016-12-31T23:59:60Z", "2016-12-31T23:59:59.999Z"),
            ("2016-12-31T18:59:60-05:00", "2016-12-31T23:59:59.999Z"),
        ] {
            assert_eq!(read(given).as_deref(), Ok(read_as), "{given}");
        }
        for refused in [
            "2030-01-01T09:00:00",
            "2030-01-01",
            "2030-01-01T09:00Z",
            "2030-01-01T24:00:00Z",
            "2030-02-30T09:00:00Z",
            "2017-06-15T12:30:60Z",
            "tomorrow",
            "in 1 min",
            "1893456000",
        ] {
            let err = read(refused).unwrap_err();
            assert!(
                err.to_string().starts_with("scheduled_at: `"),
                "{refused}: {err}"
            );
        }
    }

    #[test]
    fn schedule_window_edges() {
        let now = 1_900_000_000_000;
        let ok = |at| check_schedule_window("scheduled_at", at, now).is_ok();
        assert!(ok(now - SCHEDULE_PAST_TOLERANCE_MS));
        assert!(!ok(now - SCHEDULE_PAST_TOLERANCE_MS - 1));
        assert!(ok(now + MAX_SCHEDULE_AHEAD_MS));
        assert!(!ok(now + MAX_SCHEDULE_AHEAD_MS + 1));
        let past = check_schedule_window("scheduled_at", now - 200_000, now).unwrap_err();
        assert!(
            past.to_string()
                .contains("not be more than 60 seconds in the past (it is 3 min 20 s before"),
            "{past}"
        );
    }
}

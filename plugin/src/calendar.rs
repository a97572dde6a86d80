//! UTC calendar arithmetic for the daily series: day numbers (days since
//! 1970-01-01) and the date formats Umami sends as `x`.

pub const DAY_MS: i64 = 86_400_000;

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `YYYY-MM-DD` of a day number. Written digit by digit: the daily series
/// formats one per day, and `core::fmt` is slow in the component.
pub fn format_day(days: i64) -> String {
    let (y, m, d) = civil_from_days(days);
    let Ok(year) = u32::try_from(y) else {
        return format!("{y:04}-{m:02}-{d:02}");
    };
    if year > 9999 {
        return format!("{y:04}-{m:02}-{d:02}");
    }
    let digit = |n: u32| char::from(b'0' + (n % 10) as u8);
    let mut text = String::with_capacity(10);
    text.extend([year / 1000, year / 100, year / 10, year].map(digit));
    text.push('-');
    text.extend([m / 10, m].map(digit));
    text.push('-');
    text.extend([d / 10, d].map(digit));
    text
}

/// The UTC day a Unix-milliseconds instant falls on.
pub fn day_of_ms(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS)
}

/// A non-empty run of ASCII digits as a number (`None` past `i64`).
fn digits(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = |n: i64, &b: &u8| i64::from(b - b'0') + n * 10;
    if bytes.len() <= 18 {
        // Eighteen digits always fit: no overflow checks, which on wasm32
        // cost a call to a 128-bit multiply per digit.
        return Some(bytes.iter().fold(0, value));
    }
    bytes.iter().try_fold(0i64, |n, &b| {
        n.checked_mul(10)?.checked_add(i64::from(b - b'0'))
    })
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Seconds east of UTC of a zone suffix: `""`, `Z`, `+HH`, `+HHMM`, `+HH:MM`
/// (colons anywhere after the sign are ignored).
fn zone_offset_seconds(zone: &[u8]) -> Option<i64> {
    let (sign, rest) = match zone {
        [] | [b'Z' | b'z'] => return Some(0),
        [b'+', rest @ ..] => (1, rest),
        [b'-', rest @ ..] => (-1, rest),
        _ => return None,
    };
    let mut packed = [0u8; 4];
    let mut len = 0;
    for &b in rest.iter().filter(|&&b| b != b':') {
        *packed.get_mut(len)? = b;
        len += 1;
    }
    let (h, m) = match len {
        2 => (digits(&packed[..2])?, 0),
        4 => (digits(&packed[..2])?, digits(&packed[2..])?),
        _ => return None,
    };
    (h < 24 && m < 60).then_some(sign * (h * 3600 + m * 60))
}

/// The UTC day of a date or date-time as Umami sends it: `2026-11-21`,
/// `2026-11-21 00:00:00`, `2026-11-21T05:00:00Z`, with fractions or offsets.
///
/// Works on bytes: the daily series parses one of these per point, and in
/// the component this is the plugin's hottest code.
pub fn parse_day(text: &str) -> Option<i64> {
    let text = text.trim().as_bytes();
    let (date, rest) = text.split_at_checked(10)?;
    let [y0, y1, y2, y3, b'-', m0, m1, b'-', d0, d1] = *date else {
        return None;
    };
    let year = digits(&[y0, y1, y2, y3])?;
    let (month, day) = (digits(&[m0, m1])? as u32, digits(&[d0, d1])? as u32);
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let rest = match rest {
        [] => return Some(days),
        [b'T' | b't' | b' ', rest @ ..] => rest,
        _ => return None,
    };
    let zone_at = rest
        .iter()
        .position(|b| matches!(b, b'Z' | b'z' | b'+' | b'-'))
        .unwrap_or(rest.len());
    let (time, zone) = rest.split_at(zone_at);
    let time = time.split(|&b| b == b'.').next()?;
    let mut fields = time.split(|&b| b == b':');
    let hour = digits(fields.next()?)?;
    let minute = digits(fields.next()?)?;
    let second = fields.next().map_or(Some(0), digits)?;
    if fields.next().is_some() || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - zone_offset_seconds(zone)?;
    Some(seconds.div_euclid(86_400))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_numbers_round_trip() {
        for days in [-1, 0, 1, 10_957, 19_000, 20_413, 20_778, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(format_day(0), "1970-01-01");
        assert_eq!(format_day(10_957), "2000-01-01");
        assert_eq!(format_day(days_from_civil(2024, 2, 29)), "2024-02-29");
        for (y, m, d) in [
            (0, 1, 1),
            (7, 3, 9),
            (999, 12, 31),
            (9999, 12, 31),
            (10000, 1, 1),
            (-1, 6, 15),
        ] {
            assert_eq!(
                format_day(days_from_civil(y, m, d)),
                format!("{y:04}-{m:02}-{d:02}")
            );
        }
    }

    #[test]
    fn digit_runs_of_any_length_read_up_to_the_i64_limit() {
        assert_eq!(digits(b""), None);
        assert_eq!(digits(b"12a"), None);
        assert_eq!(digits(b"007"), Some(7));
        assert_eq!(
            digits("9".repeat(18).as_bytes()),
            Some(999_999_999_999_999_999)
        );
        assert_eq!(digits(format!("{}5", "0".repeat(40)).as_bytes()), Some(5));
        assert_eq!(digits(i64::MAX.to_string().as_bytes()), Some(i64::MAX));
        assert_eq!(digits(b"9223372036854775808"), None);
        assert_eq!(digits("9".repeat(19).as_bytes()), None);
    }

    #[test]
    fn umamis_date_formats_parse_to_utc_days() {
        let nov21 = days_from_civil(2026, 11, 21);
        let cases = [
            ("2026-11-21", Some(nov21)),
            ("2026-11-21 00:00:00", Some(nov21)),
            ("2026-11-21T05:00:00Z", Some(nov21)),
            ("2026-11-21T23:59:59.999Z", Some(nov21)),
            ("2026-11-21T00:00:00.000+00:00", Some(nov21)),
            ("2026-11-21T22:00:00-05:00", Some(nov21 + 1)),
            ("2026-11-21T01:00:00+0200", Some(nov21 - 1)),
            ("2026-11-21T05:00", Some(nov21)),
            ("2026-02-30", None),
            ("2026-13-01 00:00:00", None),
            ("21.11.2026", None),
            ("2026-11-21X05:00:00", None),
            ("2026-11-21T25:00:00Z", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_day(text), want, "{text:?}");
        }
    }

    #[test]
    fn instants_fall_on_utc_days() {
        assert_eq!(day_of_ms(0), 0);
        assert_eq!(day_of_ms(DAY_MS - 1), 0);
        assert_eq!(day_of_ms(-1), -1);
    }
}

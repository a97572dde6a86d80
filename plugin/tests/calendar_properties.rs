//! `calendar::parse_day` works on bytes for speed. It must answer exactly
//! what a plain `str`-based reading of the same formats answers (the
//! reference below, which is how the parser was first written), for the
//! date shapes Umami sends and for near misses of them.

use managed_analytics::calendar::{days_from_civil, parse_day};
use proptest::prelude::*;

fn digits(s: &str) -> Option<i64> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn zone_offset_seconds(zone: &str) -> Option<i64> {
    match zone {
        "" | "Z" | "z" => return Some(0),
        _ => {}
    }
    let (sign, rest) = match zone.as_bytes().first()? {
        b'+' => (1, &zone[1..]),
        b'-' => (-1, &zone[1..]),
        _ => return None,
    };
    let rest = rest.replace(':', "");
    let (h, m) = match rest.len() {
        2 => (digits(&rest)?, 0),
        4 => (digits(&rest[..2])?, digits(&rest[2..])?),
        _ => return None,
    };
    (h < 24 && m < 60).then_some(sign * (h * 3600 + m * 60))
}

fn reference(text: &str) -> Option<i64> {
    let text = text.trim();
    let date = text.get(..10)?;
    let mut parts = date.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let (year, month, day) = (digits(y)?, digits(m)? as u32, digits(d)? as u32);
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let rest = &text[10..];
    if rest.is_empty() {
        return Some(days);
    }
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let zone_at = rest.find(['Z', 'z', '+', '-']).unwrap_or(rest.len());
    let (time, zone) = rest.split_at(zone_at);
    let time = time.split('.').next()?;
    let mut fields = time.split(':');
    let hour = digits(fields.next()?)?;
    let minute = digits(fields.next()?)?;
    let second = fields.next().map_or(Some(0), digits)?;
    if fields.next().is_some() || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - zone_offset_seconds(zone)?;
    Some(seconds.div_euclid(86_400))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Umami's shapes and their near misses: fields just inside and just
    /// outside their ranges, in the right places or almost, with optional
    /// times, fractions and zones.
    #[test]
    fn date_like_texts_parse_as_the_reference_does(
        year in prop_oneof![Just("2024".to_string()), Just("1999".to_string()), "[0-9]{3,5}"],
        month in 0u32..=13,
        day in 0u32..=32,
        date_separator in prop::sample::select(vec!["-", "/", ""]),
        time in prop::option::of((
            prop::sample::select(vec!["T", "t", " ", "_", ""]),
            0i64..=25,
            0i64..=61,
            prop::option::of(0i64..=61),
            prop::sample::select(vec!["", ".5", ".999", ".", ":07"]),
            prop::sample::select(vec!["", "Z", "z", "+02", "-0530", "+05:30", "+24", "-00:60", "+1", "é"]),
        )),
        padding in prop::sample::select(vec!["", " ", "\t"]),
    ) {
        let mut text = format!("{padding}{year}{date_separator}{month:02}-{day:02}");
        if let Some((separator, hour, minute, second, fraction, zone)) = time {
            text += &format!("{separator}{hour:02}:{minute:02}");
            if let Some(second) = second {
                text += &format!(":{second:02}");
            }
            text += fraction;
            text += zone;
        }
        text += padding;
        prop_assert_eq!(parse_day(&text), reference(&text), "{:?}", text);
    }

    #[test]
    fn any_text_parses_as_the_reference_does(text in ".{0,40}") {
        prop_assert_eq!(parse_day(&text), reference(&text), "{:?}", text);
    }
}

#[test]
fn every_day_of_a_leap_year_round_trips_in_each_format() {
    for day in days_from_civil(2024, 1, 1)..days_from_civil(2025, 1, 1) {
        let date = managed_analytics::calendar::format_day(day);
        for text in [
            date.clone(),
            format!("{date} 00:00:00"),
            format!("{date}T23:59:59.999Z"),
            format!("{date}T00:30:00+00:30"),
        ] {
            assert_eq!(parse_day(&text), Some(day), "{text}");
            assert_eq!(reference(&text), Some(day), "{text}");
        }
    }
}

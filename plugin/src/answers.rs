//! Typed readers of Umami's stats and page-view answers.
//!
//! Every value is read straight into what the plugin keeps (no JSON tree,
//! no map per object), and a value of an unexpected shape does not fail
//! the parse: it is kept as the reason it is unusable, so the answer's
//! problems are reported in a fixed field order, whatever order the
//! provider sent them in. Only malformed JSON fails while parsing.

use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::calendar;

/// A count as read: a number, `None` for `null`, or why it is not a count.
pub type Read = Result<Option<u64>, &'static str>;

const NOT_A_NUMBER: &str = "a count is not a number";
const OUT_OF_RANGE: &str = "a count is negative or out of range";
const NO_VALUE: &str = "a count object has no `value`";
const NOT_A_SERIES: &str = "a series is not a list of points";
const NO_DATE: &str = "a point has no date";
const NOT_AN_INTEGER: &str = "a point's time is not an integer";
const UNKNOWN_DATE: &str = "a point's date is not a known format";

fn of_f64(f: f64) -> Read {
    if (0.0..1e18).contains(&f) {
        Ok(Some(f.round() as u64))
    } else {
        Err(OUT_OF_RANGE)
    }
}

fn of_str(s: &str) -> Read {
    let s = s.trim();
    match s.parse::<u64>() {
        Ok(v) => Ok(Some(v)),
        Err(_) => of_f64(s.parse::<f64>().map_err(|_| NOT_A_NUMBER)?),
    }
}

/// Skips a sequence's elements.
pub(crate) fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Skips a map's entries.
pub(crate) fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Reads a count of any shape Umami sends: a number, a numeric string,
/// `null`, or (not `nested`) a v2 `{value, prev}` object.
#[derive(Clone, Copy)]
struct Count {
    nested: bool,
}

impl<'de> DeserializeSeed<'de> for Count {
    type Value = Read;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Read, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Count {
    type Value = Read;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a count")
    }

    fn visit_u64<E>(self, v: u64) -> Result<Read, E> {
        Ok(Ok(Some(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Read, E> {
        Ok(u64::try_from(v).map(Some).map_err(|_| OUT_OF_RANGE))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Read, E> {
        Ok(of_f64(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Read, E> {
        Ok(of_str(v))
    }

    fn visit_unit<E>(self) -> Result<Read, E> {
        Ok(Ok(None))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Read, E> {
        Ok(Err(NOT_A_NUMBER))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Read, A::Error> {
        drain_seq(seq)?;
        Ok(Err(NOT_A_NUMBER))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Read, A::Error> {
        if self.nested {
            drain_map(map)?;
            return Ok(Err(NO_VALUE));
        }
        let mut value = Err(NO_VALUE);
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Value => value = map.next_value_seed(Count { nested: true })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(value)
    }
}

/// The keys this module looks at; anything else is skipped unread.
enum Key {
    Value,
    X,
    Y,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "value" => Key::Value,
                    "x" => Key::X,
                    "y" => Key::Y,
                    _ => Key::Other,
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// A count field of an answer: `None` when absent.
#[derive(Default)]
pub struct Field(pub Option<Read>);

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Count { nested: false }
            .deserialize(deserializer)
            .map(|read| Field(Some(read)))
    }
}

/// A stats answer (v2 or v3; `comparison` and anything else is skipped).
#[derive(Deserialize)]
pub struct StatsAnswer {
    #[serde(default)]
    pub visitors: Field,
    #[serde(default)]
    pub visits: Field,
    #[serde(default)]
    pub pageviews: Field,
    #[serde(default)]
    pub bounces: Field,
    #[serde(default)]
    pub totaltime: Field,
}

/// A page-view answer: two series of points.
#[derive(Deserialize)]
pub struct DailyAnswer {
    #[serde(default)]
    pub pageviews: Series,
    #[serde(default)]
    pub sessions: Series,
}

/// A series as read.
#[derive(Default)]
pub enum Series {
    #[default]
    Absent,
    Null,
    Points(Vec<Point>),
    /// Anything but a list or `null`.
    Unusable,
}

impl Series {
    /// The points; an absent or `null` series is empty when `optional`.
    pub fn points(self, optional: bool) -> Result<Vec<Point>, &'static str> {
        match self {
            Series::Points(points) => Ok(points),
            Series::Absent | Series::Null if optional => Ok(Vec::new()),
            _ => Err(NOT_A_SERIES),
        }
    }
}

impl<'de> Deserialize<'de> for Series {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SeriesVisitor;
        impl<'de> Visitor<'de> for SeriesVisitor {
            type Value = Series;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a series")
            }
            fn visit_unit<E>(self) -> Result<Series, E> {
                Ok(Series::Null)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Series, A::Error> {
                let mut points = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(400));
                while let Some(point) = seq.next_element::<Point>()? {
                    points.push(point);
                }
                Ok(Series::Points(points))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Series, A::Error> {
                drain_map(map)?;
                Ok(Series::Unusable)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Series, E> {
                Ok(Series::Unusable)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Series, E> {
                Ok(Series::Unusable)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Series, E> {
                Ok(Series::Unusable)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Series, E> {
                Ok(Series::Unusable)
            }
            fn visit_str<E>(self, _: &str) -> Result<Series, E> {
                Ok(Series::Unusable)
            }
        }
        deserializer.deserialize_any(SeriesVisitor)
    }
}

/// One point of a series: its UTC day (or why there is none) and its count.
pub struct Point {
    pub day: Result<i64, &'static str>,
    pub count: Read,
}

impl Default for Point {
    fn default() -> Self {
        Self {
            day: Err(NO_DATE),
            count: Ok(None),
        }
    }
}

impl<'de> Deserialize<'de> for Point {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PointVisitor;
        impl<'de> Visitor<'de> for PointVisitor {
            type Value = Point;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a point")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Point, A::Error> {
                let mut point = Point::default();
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::X => point.day = map.next_value_seed(Day)?,
                        Key::Y => point.count = map.next_value_seed(Count { nested: false })?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(point)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Point, A::Error> {
                drain_seq(seq)?;
                Ok(Point::default())
            }
            fn visit_unit<E>(self) -> Result<Point, E> {
                Ok(Point::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<Point, E> {
                Ok(Point::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<Point, E> {
                Ok(Point::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<Point, E> {
                Ok(Point::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<Point, E> {
                Ok(Point::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<Point, E> {
                Ok(Point::default())
            }
        }
        deserializer.deserialize_any(PointVisitor)
    }
}

/// A point's `x`: a date string in one of Umami's formats or Unix ms.
struct Day;

impl<'de> DeserializeSeed<'de> for Day {
    type Value = Result<i64, &'static str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Day {
    type Value = Result<i64, &'static str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a date")
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(calendar::parse_day(v).ok_or(UNKNOWN_DATE))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Ok(calendar::day_of_ms(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(i64::try_from(v)
            .map(calendar::day_of_ms)
            .map_err(|_| NOT_AN_INTEGER))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Err(NOT_AN_INTEGER))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Err(NO_DATE))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Err(NO_DATE))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq)?;
        Ok(Err(NO_DATE))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map)?;
        Ok(Err(NO_DATE))
    }
}

/// Parses `body` as a JSON object of type `T`: "it is not JSON" or "it is
/// not a JSON object" otherwise. A key the answer sends twice counts as
/// malformed.
pub fn object<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, &'static str> {
    if body.trim_ascii_start().first() == Some(&b'{') {
        return serde_json::from_slice(body).map_err(|_| "it is not JSON");
    }
    match serde_json::from_slice::<IgnoredAny>(body) {
        Ok(_) => Err("it is not a JSON object"),
        Err(_) => Err("it is not JSON"),
    }
}

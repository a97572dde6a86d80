//! The actions' inputs, read with the guest crate's rules; the stats input is
//! read straight into its fields, without a JSON tree.

use extension_guest::action::{self, Input};
use serde::Deserialize;

use super::{EARLIEST_MS, MAX_FUTURE_MS, MAX_RANGE_MS};
use crate::answers;
use crate::error::{ActionError, ErrorCode};

/// Input of `analytics.provision`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProvisionInput {
    pub name: String,
    pub domain: String,
}

impl Input for ProvisionInput {
    fn from_json(input: &str) -> Result<Self, ActionError> {
        let object = action::object(input, &["name", "domain"])?;
        Ok(Self {
            name: action::required_string(&object, "name")?,
            domain: action::required_string(&object, "domain")?,
        })
    }
}

/// Input of `analytics.stats`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatsInput {
    pub start_at: i64,
    pub end_at: i64,
    /// Add a per-UTC-day series.
    pub daily: bool,
}

impl Input for StatsInput {
    fn from_json(input: &str) -> Result<Self, ActionError> {
        Self::parse(input)
    }
}

impl StatsInput {
    /// The fields `analytics.stats` takes.
    pub const FIELDS: &[&str] = &["start_at", "end_at", "unit"];

    /// Reads the input straight into its fields (every stats call runs
    /// this, so no JSON tree is built); the errors and their order are
    /// those of the other actions' [`action::object`] reading.
    pub fn parse(input: &str) -> Result<Self, ActionError> {
        let Ok(fields) = serde_json::from_str::<StatsFields>(input) else {
            return Err(ActionError::invalid_input(action::NOT_AN_OBJECT));
        };
        if let Some(unknown) = &fields.unknown {
            return Err(action::unknown_field(unknown, Self::FIELDS));
        }
        let daily = match fields.unit {
            InputField::Absent | InputField::Null => false,
            InputField::Day => true,
            _ => {
                return Err(ActionError::invalid_input(
                    "unit: must be \"day\" (or left out)",
                ));
            }
        };
        Ok(Self {
            start_at: fields.start_at.ms("start_at")?,
            end_at: fields.end_at.ms("end_at")?,
            daily,
        })
    }

    /// Order, length and bounds of the range, against `now_ms`.
    pub fn validate(&self, now_ms: i64) -> Result<(), ActionError> {
        for (key, value) in [("start_at", self.start_at), ("end_at", self.end_at)] {
            if value < EARLIEST_MS {
                return Err(ActionError::invalid_input(format!(
                    "{key}: must not be before 2000-01-01T00:00:00Z ({EARLIEST_MS})"
                )));
            }
        }
        if self.end_at <= self.start_at {
            return Err(ActionError::invalid_input("end_at: must be after start_at"));
        }
        if self.end_at - self.start_at > MAX_RANGE_MS {
            return Err(ActionError::new(
                ErrorCode::InvalidInput,
                format!("end_at: the range must cover at most 366 days ({MAX_RANGE_MS} ms)"),
            ));
        }
        if self.end_at > now_ms.saturating_add(MAX_FUTURE_MS) {
            return Err(ActionError::invalid_input(
                "end_at: must not be more than one day in the future",
            ));
        }
        Ok(())
    }
}

/// One field of the stats input as read, before its rule applies.
#[derive(Default)]
enum InputField {
    #[default]
    Absent,
    Null,
    /// A JSON integer that fits in an `i64`.
    Integer(i64),
    /// The string `"day"`.
    Day,
    /// Anything else.
    Other,
}

impl InputField {
    /// The value of a required Unix-milliseconds field.
    fn ms(self, key: &str) -> Result<i64, ActionError> {
        match self {
            InputField::Integer(ms) => Ok(ms),
            InputField::Absent | InputField::Null => Err(action::missing(key)),
            _ => Err(ActionError::invalid_input(format!(
                "{key}: must be an integer number of Unix milliseconds"
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for InputField {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(InputFieldVisitor)
    }
}

struct InputFieldVisitor;

impl<'de> serde::de::Visitor<'de> for InputFieldVisitor {
    type Value = InputField;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_i64<E>(self, v: i64) -> Result<InputField, E> {
        Ok(InputField::Integer(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<InputField, E> {
        Ok(i64::try_from(v).map_or(InputField::Other, InputField::Integer))
    }

    fn visit_f64<E>(self, _: f64) -> Result<InputField, E> {
        Ok(InputField::Other)
    }

    fn visit_bool<E>(self, _: bool) -> Result<InputField, E> {
        Ok(InputField::Other)
    }

    fn visit_str<E>(self, v: &str) -> Result<InputField, E> {
        Ok(if v == "day" {
            InputField::Day
        } else {
            InputField::Other
        })
    }

    fn visit_unit<E>(self) -> Result<InputField, E> {
        Ok(InputField::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<InputField, A::Error> {
        answers::drain_seq(seq)?;
        Ok(InputField::Other)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<InputField, A::Error> {
        answers::drain_map(map)?;
        Ok(InputField::Other)
    }
}

/// The stats input as read: a key sent twice keeps its last value, and of
/// the unknown keys the first in sorted order is kept (as a JSON object
/// read into a sorted map would report it).
#[derive(Default)]
struct StatsFields {
    start_at: InputField,
    end_at: InputField,
    unit: InputField,
    unknown: Option<String>,
}

impl<'de> Deserialize<'de> for StatsFields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(StatsFieldsVisitor)
    }
}

struct StatsFieldsVisitor;

impl<'de> serde::de::Visitor<'de> for StatsFieldsVisitor {
    type Value = StatsFields;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<StatsFields, A::Error> {
        let mut fields = StatsFields::default();
        while let Some(key) = map.next_key::<StatsKey>()? {
            let slot = match key {
                StatsKey::StartAt => &mut fields.start_at,
                StatsKey::EndAt => &mut fields.end_at,
                StatsKey::Unit => &mut fields.unit,
                StatsKey::Unknown(key) => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    if fields.unknown.as_ref().is_none_or(|first| key < *first) {
                        fields.unknown = Some(key);
                    }
                    continue;
                }
            };
            *slot = map.next_value()?;
        }
        Ok(fields)
    }
}

/// A key of the stats input; only an unknown one is copied.
enum StatsKey {
    StartAt,
    EndAt,
    Unit,
    Unknown(String),
}

impl<'de> Deserialize<'de> for StatsKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl serde::de::Visitor<'_> for KeyVisitor {
            type Value = StatsKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E>(self, v: &str) -> Result<StatsKey, E> {
                Ok(match v {
                    "start_at" => StatsKey::StartAt,
                    "end_at" => StatsKey::EndAt,
                    "unit" => StatsKey::Unit,
                    other => StatsKey::Unknown(other.to_owned()),
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// The stats input read as a JSON tree, the way the other actions read
    /// theirs: the oracle of the typed reader.
    fn parse_stats_as_tree(input: &str) -> Result<StatsInput, ActionError> {
        let object = action::object(input, StatsInput::FIELDS)?;
        let daily = match object.get("unit") {
            None | Some(Value::Null) => false,
            Some(Value::String(unit)) if unit == "day" => true,
            Some(_) => {
                return Err(ActionError::invalid_input(
                    "unit: must be \"day\" (or left out)",
                ));
            }
        };
        let ms = |key: &str| match object.get(key) {
            None | Some(Value::Null) => {
                Err(ActionError::invalid_input(format!("{key}: is required")))
            }
            Some(value) => value.as_i64().ok_or_else(|| {
                ActionError::invalid_input(format!(
                    "{key}: must be an integer number of Unix milliseconds"
                ))
            }),
        };
        Ok(StatsInput {
            start_at: ms("start_at")?,
            end_at: ms("end_at")?,
            daily,
        })
    }

    fn outcome(result: Result<StatsInput, ActionError>) -> Result<StatsInput, (ErrorCode, String)> {
        result.map_err(|e| (e.code, e.message))
    }

    #[test]
    fn the_typed_stats_reader_agrees_with_the_tree_reader_on_odd_inputs() {
        for input in [
            r#"{"start_at":1,"end_at":2}"#,
            r#"{"start_at":1,"end_at":2,"unit":"day"}"#,
            r#"{"start_at":1,"end_at":2,"unit":null}"#,
            r#"{"start_at":1,"end_at":2,"unit":"week"}"#,
            r#"{"start_at":1,"end_at":2,"unit":1}"#,
            r#"{"start_at":1.5,"end_at":2}"#,
            r#"{"start_at":1e3,"end_at":2}"#,
            r#"{"start_at":9223372036854775808,"end_at":2}"#,
            r#"{"start_at":-9223372036854775808,"end_at":2}"#,
            r#"{"start_at":"1","end_at":2}"#,
            r#"{"start_at":[1],"end_at":{"a":1}}"#,
            r#"{"start_at":null}"#,
            r#"{"end_at":1}"#,
            r#"{"start_at":1,"start_at":"x","end_at":2}"#,
            r#"{"start_at":"x","start_at":1,"end_at":2}"#,
            r#"{"zz":1,"aa":2,"start_at":1}"#,
            r#"{"unit":"bad","b":1,"aé":2,"a":3}"#,
            r#"{"start_at":5,"end_at":6}"#,
            "{}",
            "[]",
            "null",
            "\"day\"",
            "",
            "{",
            r#"{"start_at":1,"end_at":2} x"#,
        ] {
            assert_eq!(
                outcome(StatsInput::parse(input)),
                outcome(parse_stats_as_tree(input)),
                "{input}"
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

        /// Objects of known, unknown and repeated keys with values of every
        /// kind read the same both ways.
        #[test]
        fn the_typed_stats_reader_agrees_with_the_tree_reader(
            entries in proptest::collection::vec(
                (
                    proptest::sample::select(vec!["start_at", "end_at", "unit", "aa", "zz", "b\\u00e9", "start_\\u0061t"]),
                    proptest::sample::select(vec![
                        "null", "0", "-1", "1795262400000", "9223372036854775807",
                        "9223372036854775808", "1.0", "2e3", "\"day\"", "\"d\\u0061y\"",
                        "\"x\"", "true", "[]", "[1,{}]", "{}", "{\"a\":[null]}",
                    ]),
                ),
                0..6,
            )
        ) {
            let body: Vec<String> = entries.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let input = format!("{{{}}}", body.join(","));
            proptest::prop_assert_eq!(
                outcome(StatsInput::parse(&input)),
                outcome(parse_stats_as_tree(&input)),
                "{}", input
            );
        }
    }

    #[test]
    fn the_range_limit_is_366_days_to_the_millisecond() {
        let now = 1_795_262_400_000;
        let range = |start_at, end_at| StatsInput {
            start_at,
            end_at,
            daily: false,
        };
        assert!(range(now - MAX_RANGE_MS, now).validate(now).is_ok());
        assert!(range(now - MAX_RANGE_MS - 1, now).validate(now).is_err());
        assert!(range(now, now + MAX_FUTURE_MS).validate(now).is_ok());
        assert!(range(now, now + MAX_FUTURE_MS + 1).validate(now).is_err());
    }
}

//! The service's resources and their validation: shared helpers for enums
//! stored as text here; the Email resource (`email`), its scheduling
//! (`schedule`), accounts (`account`) and stored rows (`records`) in their
//! own files. Every rule of the contract's tables and of its section 8 is
//! checked before anything is stored; each error names the field and the rule.

/// An enum stored as text: `as_str` for writing, `FromStr`/`TryFrom<String>`
/// for reading (an unknown text is an `UnknownValue` error), serde in the
/// same snake_case form.
macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &[$name] = &[$($name::$variant),+];

            /// The stored (and serialized) text.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::model::UnknownValue;
            fn from_str(s: &str) -> Result<Self, $crate::model::UnknownValue> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err($crate::model::UnknownValue {
                        what: $what,
                        value: other.to_string(),
                        expected: &[$($text),+],
                    }),
                }
            }
        }

        $crate::model::decode_from_text!([] $name);
    };
}

/// `sqlx::Type` and `sqlx::Decode` for a type read from a TEXT column
/// through its `FromStr`, on every database: a text that does not parse is a
/// decode error naming the column and the value.
macro_rules! decode_from_text {
    ([$($generics:tt)*] $name:ty) => {
        impl<DB: sqlx::Database, $($generics)*> sqlx::Type<DB> for $name
        where
            String: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <String as sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <String as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'r, DB: sqlx::Database, $($generics)*> sqlx::Decode<'r, DB> for $name
        where
            String: sqlx::Decode<'r, DB>,
        {
            fn decode(
                value: <DB as sqlx::Database>::ValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                Ok(<String as sqlx::Decode<'r, DB>>::decode(value)?.parse()?)
            }
        }
    };
}
pub(crate) use decode_from_text;

mod account;
mod domain;
mod email;
mod feedback;
mod records;
mod schedule;
mod suppression;
mod webhook;

pub use account::{ApiKey, Permission, Principal, Tenant};
pub use domain::{
    DEFAULT_RETURN_PATH, DKIM_SELECTOR, DnsRecord, Domain, DomainStatus, RecordStatus,
    domain_capabilities, domain_json, domain_status, normalize_domain_name, records_for,
    split_records, validate_return_path,
};
pub use email::*;
pub use feedback::{EmailEvent, FeedbackKind, FeedbackReport, ReportOutcome};
pub use records::{EmailStatus, JsonText, KeyState, RequestLog, StoredEmail};
pub use schedule::{
    MAX_SCHEDULE_AHEAD_MS, SCHEDULE_PAST_TOLERANCE_MS, check_schedule_window, parse_scheduled_at,
};
pub use suppression::{
    MAX_SUPPRESSION_REASON_CHARS, Suppression, SuppressionOrigin, normalize_address, normalized,
    suppression_key, validate_reason,
};
pub use webhook::{
    DeliveryStatus, EndpointPolicy, EventType, MAX_ENDPOINT_CHARS, SECRET_PREFIX, SigningSecret,
    Webhook, WebhookStatus, check_address, events_column, parse_events, signature,
    validate_endpoint,
};

/// A stored or given text that names no value of its enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{value}` (expected one of: {})", expected.join(", "))]
pub struct UnknownValue {
    pub what: &'static str,
    pub value: String,
    pub expected: &'static [&'static str],
}

/// The body of a `PATCH` on a resource, with the field the SDKs repeat the
/// path's id in (`id` for Resend's `emails.update`, `webhook_id` for
/// `webhooks.update`) taken out: accepted when it names the same resource
/// as the path (the same decimal id, as a string or a number), refused
/// naming the field otherwise. Every other property is left for the
/// caller's own check of unknown properties.
pub fn without_path_id(
    body: &serde_json::Value,
    fields: &[&str],
    path_id: i64,
) -> Result<serde_json::Value, crate::error::Error> {
    use serde_json::Value;
    let Value::Object(obj) = body else {
        return Ok(body.clone());
    };
    let mut rest = obj.clone();
    for field in fields {
        let Some(given) = rest.remove(*field) else {
            continue;
        };
        let same = match &given {
            Value::String(s) => {
                s.parse::<i64>().ok() == Some(path_id) && !s.starts_with(['+', '0'])
            }
            Value::Number(n) => n.as_i64() == Some(path_id),
            _ => false,
        };
        if !same {
            return Err(crate::error::Error::validation(
                *field,
                format!(
                    "must be the id in the path ({path_id}) when given; the resource is named by the path"
                ),
            ));
        }
    }
    Ok(Value::Object(rest))
}

#[cfg(test)]
mod path_id_tests {
    use super::without_path_id;
    use serde_json::json;

    #[test]
    fn the_path_id_may_be_repeated_but_not_changed() {
        let body = json!({"id": "42", "scheduled_at": "x"});
        assert_eq!(
            without_path_id(&body, &["id"], 42).unwrap(),
            json!({"scheduled_at": "x"})
        );
        assert_eq!(
            without_path_id(&json!({"id": 42}), &["id"], 42).unwrap(),
            json!({})
        );
        for other in [
            json!("43"),
            json!("042"),
            json!(null),
            json!(true),
            json!(43),
        ] {
            let err = without_path_id(&json!({"id": other}), &["id"], 42).unwrap_err();
            assert!(err.to_string().starts_with("id: "), "{err}");
        }
        // Other properties are the caller's to judge.
        assert_eq!(
            without_path_id(&json!({"webhook_id": "1", "x": 1}), &["id"], 1).unwrap(),
            json!({"webhook_id": "1", "x": 1})
        );
    }
}

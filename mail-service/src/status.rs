//! Enums stored as text, and the one the error names: where an email
//! stands (`EmailStatus`). `text_enum!` makes every stored enum of `model`
//! (`as_str` for writing, `FromStr` for reading, serde in the same form);
//! a text that names no value is an [`UnknownValue`], never a default.
//! This module stands below `error` so that `Error::NotScheduled` can carry
//! the status while `model` uses the error.

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
            type Err = $crate::status::UnknownValue;
            fn from_str(s: &str) -> Result<Self, $crate::status::UnknownValue> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err($crate::status::UnknownValue {
                        what: $what,
                        value: other.to_string(),
                        expected: &[$($text),+],
                    }),
                }
            }
        }

        $crate::status::decode_from_text!([] $name);
    };
}

pub(crate) use text_enum;

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

/// A stored or given text that names no value of its enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{value}` (expected one of: {})", expected.join(", "))]
pub struct UnknownValue {
    pub what: &'static str,
    pub value: String,
    pub expected: &'static [&'static str],
}

text_enum!(
    /// Where an email stands.
    EmailStatus, "email status" {
        /// Waiting for its `scheduled_at`; can be rescheduled or canceled.
        Scheduled = "scheduled",
        /// Stored and being handed to the provider (holds a lease).
        Sending = "sending",
        /// The provider accepted it.
        Sent = "sent",
        /// The provider did not accept it; it was not sent.
        Failed = "failed",
        /// The handoff's outcome is not known; it may have been sent.
        Unknown = "unknown",
        /// Not sent: canceled while scheduled, or a batch item after one
        /// that failed.
        Canceled = "canceled",
        /// Not handed off: every recipient was on the tenant's suppression
        /// list when its handoff was due.
        Suppressed = "suppressed",
    }
);

impl EmailStatus {
    /// The nearest value of Resend's `last_event` vocabulary; `status`
    /// keeps the exact state beside it. `sending` and `unknown` are
    /// `queued`: accepted, and not known to be sent or failed.
    pub fn last_event(self) -> &'static str {
        match self {
            EmailStatus::Scheduled => "scheduled",
            EmailStatus::Sending | EmailStatus::Unknown => "queued",
            EmailStatus::Sent => "sent",
            EmailStatus::Failed => "failed",
            EmailStatus::Canceled => "canceled",
            EmailStatus::Suppressed => "suppressed",
        }
    }
}

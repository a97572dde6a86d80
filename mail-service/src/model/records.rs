//! Stored emails and request logs as the service reads them back, with their
//! statuses as enums (`EmailStatus` stands below the error, in
//! `crate::status`). Statuses are stored as text and parsed on every read:
//! a value the code does not know is an error, never a default.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::EmailPayload;
use crate::status::{EmailStatus, text_enum};

text_enum!(
    /// Where an idempotency reservation stands.
    KeyState, "idempotency key state" {
        /// Its request is running (until its lease ends).
        InFlight = "in_flight",
        /// Its answer is recorded and replayed.
        Completed = "completed",
        /// Its handoff's outcome is unknown; reserved until reconciled.
        Unknown = "unknown",
    }
);

/// A JSON document stored as text, parsed on read; a document that does not
/// parse is an error.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonText<T>(pub T);

impl<T: DeserializeOwned> std::str::FromStr for JsonText<T> {
    type Err = serde_json::Error;
    fn from_str(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text).map(JsonText)
    }
}

super::decode_from_text!([T: DeserializeOwned] JsonText<T>);

/// A stored email.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredEmail {
    pub id: i64,
    pub status: EmailStatus,
    pub revision: i64,
    /// The request's fields as accepted (attachments included).
    pub payload: JsonText<EmailPayload>,
    pub message_id: String,
    pub handoff_detail: Option<String>,
    /// When it is (or was) due, for a scheduled email.
    pub scheduled_at: Option<i64>,
    /// The batch it was accepted in, for a batch answered 202.
    pub batch_id: Option<i64>,
    /// Recipients removed at the handoff because they were suppressed.
    pub suppressed_recipients: Option<JsonText<Vec<String>>>,
    pub created_at: i64,
    pub updated_at: i64,
    /// The latest event feedback mail recorded for it (any recipient).
    pub last_feedback: Option<super::FeedbackKind>,
}

impl StoredEmail {
    /// Resend's `last_event`: the latest feedback event when there is one
    /// (`delivered`, `delivery_delayed`, `bounced`, `complained`), else the
    /// status's word.
    pub fn last_event(&self) -> &'static str {
        match self.last_feedback {
            Some(kind) => kind.as_str(),
            None => self.status.last_event(),
        }
    }
}

/// One request log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct RequestLog {
    pub id: i64,
    pub api_key_id: Option<i64>,
    pub method: String,
    pub path: String,
    /// 0 while the request is unfinished.
    pub status: i64,
    pub duration_ms: Option<i64>,
    pub user_agent: Option<String>,
    pub created_at: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_and_refuse_unknown_values() {
        for s in EmailStatus::ALL {
            assert_eq!(s.as_str().parse::<EmailStatus>().unwrap(), *s);
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for s in KeyState::ALL {
            assert_eq!(s.as_str().parse::<KeyState>().unwrap(), *s);
        }
        assert_eq!(
            "delivered".parse::<EmailStatus>().unwrap_err().to_string(),
            "unknown email status `delivered` (expected one of: scheduled, sending, sent, failed, unknown, canceled, suppressed)"
        );
        assert!("".parse::<KeyState>().is_err());
    }

    #[test]
    fn json_text_refuses_a_broken_document() {
        assert_eq!(
            "[1,2]".parse::<JsonText<Vec<i64>>>().unwrap(),
            JsonText(vec![1, 2])
        );
        assert!("[1,".parse::<JsonText<Vec<i64>>>().is_err());
        assert!("".parse::<JsonText<Vec<i64>>>().is_err());
    }
}

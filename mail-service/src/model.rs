//! The service's resources and their validation: the enums stored as text
//! are made with `crate::status`'s helpers; the Email resource (`email`),
//! its scheduling (`schedule`), accounts (`account`) and stored rows
//! (`records`) in their own files. Every rule of the contract's tables and
//! of its section 8 is checked before anything is stored; each error names
//! the field and the rule.

pub(crate) use crate::status::decode_from_text;

mod account;
mod domain;
mod email;
mod feedback;
mod records;
mod schedule;
mod suppression;
mod webhook;

pub use crate::status::{EmailStatus, UnknownValue};
pub use account::{ApiKey, Permission, Principal, Tenant};
pub use domain::{
    DEFAULT_RETURN_PATH, DKIM_SELECTOR, DnsRecord, Domain, DomainStatus, RecordStatus,
    domain_capabilities, domain_json, domain_status, normalize_domain_name, records_for,
    split_records, validate_return_path,
};
pub use email::*;
pub use feedback::{EmailEvent, FeedbackKind, FeedbackReport, ReportOutcome};
pub use records::{JsonText, KeyState, RequestLog, StoredEmail};
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

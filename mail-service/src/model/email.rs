//! The Email, Tag and Attachment resources and their validation. Every rule of
//! the contract's tables and of its section 8 is checked here, before anything
//! is stored; each error names the field and the rule.

use std::collections::BTreeMap;

use lettre::message::Mailbox;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::schedule::parse_scheduled_at;
use crate::error::Error;
use attachments::{attachments_field, decode_attachments};

mod attachments;

pub const MAX_BODY_BYTES: usize = 4_000_000;
pub const MAX_RECIPIENTS: usize = 50;
pub const MAX_SUBJECT_BYTES: usize = 998;
pub const MAX_TEXT_PLUS_HTML_BYTES: usize = 512 * 1024;
pub const MAX_HEADERS: usize = 50;
pub const MAX_TAGS: usize = 50;
pub const MAX_TAG_PART_CHARS: usize = 256;
pub const MAX_ATTACHMENTS: usize = 10;
pub const MAX_ATTACHMENT_BYTES: usize = 2 * 1024 * 1024;
pub const MAX_BATCH: usize = 100;
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 256;

/// Header names the service sets itself; callers may not override them.
const RESERVED_HEADERS: &[&str] = &[
    "from",
    "to",
    "cc",
    "bcc",
    "reply-to",
    "subject",
    "message-id",
    "date",
    "mime-version",
    "content-type",
    "content-transfer-encoding",
    "content-disposition",
    "content-id",
    "return-path",
    "sender",
    "dkim-signature",
];

/// One address or a list of addresses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Recipients {
    One(String),
    /// At most 50 addresses.
    Many(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Tag {
    /// `^[A-Za-z0-9_-]{1,256}$`
    #[schema(pattern = "^[A-Za-z0-9_-]{1,256}$")]
    pub name: String,
    /// `^[A-Za-z0-9_-]{1,256}$`
    #[schema(pattern = "^[A-Za-z0-9_-]{1,256}$")]
    pub value: String,
}

/// An attachment carried inline as base64; by URL or path is not supported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Attachment {
    /// Base64 content, at most 2 MiB decoded.
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// Local part of the content id; the transport appends `@<sender-domain>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_id: Option<String>,
}

/// The fields of one message (a batch item has exactly these).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MessageFields {
    /// `email@example.com` or `Name <email@example.com>`.
    pub from: String,
    pub to: Recipients,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cc: Option<Recipients>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bcc: Option<Recipients>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<Recipients>,
    /// At most 998 UTF-8 bytes, no line breaks.
    pub subject: String,
    /// Plain-text body. At least one of `text` and `html` is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// HTML body. At least one of `text` and `html` is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    /// At most 50 properties; no reserved names, no line breaks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_items = 50)]
    pub tags: Option<Vec<Tag>>,
    /// When to hand the message off: an RFC 3339 date-time with a UTC
    /// offset (`2030-01-01T09:00:00Z`, `2030-01-01T10:00:00.5+01:00`), at
    /// most 60 seconds in the past and at most 30 days ahead. Millisecond
    /// precision (finer digits are dropped); a leap second `:60` is read as
    /// the last millisecond of its minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<String>,
}

/// Body of `PATCH /emails/{id}`. Unknown properties are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Reschedule {
    /// The new due time; the same rules as `scheduled_at` of an email.
    pub scheduled_at: String,
}

/// Body of `POST /emails`. Unknown properties are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EmailPayload {
    #[serde(flatten)]
    pub message: MessageFields,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_items = 10)]
    pub attachments: Option<Vec<Attachment>>,
}

/// A decoded attachment, ready for the transport.
#[derive(Debug, Clone)]
pub struct DecodedAttachment {
    pub bytes: Vec<u8>,
    pub filename: Option<String>,
    pub content_type: Option<String>,
    pub content_id: Option<String>,
}

/// An email that passed every rule.
#[derive(Debug, Clone)]
pub struct ValidatedEmail {
    pub payload: EmailPayload,
    pub from: Mailbox,
    pub to: Vec<Mailbox>,
    pub cc: Vec<Mailbox>,
    pub bcc: Vec<Mailbox>,
    pub reply_to: Vec<Mailbox>,
    pub attachments: Vec<DecodedAttachment>,
    /// `scheduled_at` in Unix milliseconds (its window is checked against
    /// the service's clock by `check_schedule_window`).
    pub scheduled_at: Option<i64>,
}

/// Properties accepted in a message; `attachments` only on `POST /emails`.
pub const MESSAGE_FIELDS: &[&str] = &[
    "from",
    "to",
    "cc",
    "bcc",
    "reply_to",
    "subject",
    "text",
    "html",
    "headers",
    "tags",
    "scheduled_at",
];

/// Validates the body of `POST /emails`.
pub fn validate_email(body: &Value) -> Result<ValidatedEmail, Error> {
    validate(body, true)
}

/// Validates one item of `POST /emails/batch` (no attachments).
pub fn validate_batch_item(body: &Value) -> Result<ValidatedEmail, Error> {
    validate(body, false)
}

/// The items of a `POST /emails/batch` body: a JSON array of 1 to
/// [`MAX_BATCH`] values (each then checked by [`validate_batch_item`]).
pub fn batch_items(body: &Value) -> Result<&[Value], Error> {
    let Value::Array(items) = body else {
        return Err(Error::validation(
            "body",
            format!("must be a JSON array of 1 to {MAX_BATCH} emails"),
        ));
    };
    if items.is_empty() {
        return Err(Error::validation("body", "must contain at least 1 email"));
    }
    if items.len() > MAX_BATCH {
        return Err(Error::validation(
            "body",
            format!(
                "must contain at most {MAX_BATCH} emails (got {})",
                items.len()
            ),
        ));
    }
    Ok(items)
}

fn validate(body: &Value, allow_attachments: bool) -> Result<ValidatedEmail, Error> {
    let Value::Object(obj) = body else {
        return Err(Error::validation("body", "must be a JSON object"));
    };
    for key in obj.keys() {
        let known =
            MESSAGE_FIELDS.contains(&key.as_str()) || (allow_attachments && key == "attachments");
        if key == "attachments" && !known {
            return Err(Error::validation(
                key.clone(),
                "is not allowed in batch items",
            ));
        }
        if !known {
            return Err(Error::unknown_property(
                key,
                "additional properties are not allowed",
            ));
        }
    }

    let from_text: String = required(obj, "from")?;
    let from = parse_mailbox("from", &from_text)?;
    let to_field: Recipients = required(obj, "to")?;
    let to = parse_recipients("to", &to_field, true)?;
    let cc_field: Option<Recipients> = optional(obj, "cc")?;
    let cc = parse_optional_recipients("cc", cc_field.as_ref())?;
    let bcc_field: Option<Recipients> = optional(obj, "bcc")?;
    let bcc = parse_optional_recipients("bcc", bcc_field.as_ref())?;
    let reply_field: Option<Recipients> = optional(obj, "reply_to")?;
    let reply_to = parse_optional_recipients("reply_to", reply_field.as_ref())?;

    let subject: String = required(obj, "subject")?;
    if subject.len() > MAX_SUBJECT_BYTES {
        return Err(Error::validation(
            "subject",
            format!(
                "must be at most {MAX_SUBJECT_BYTES} UTF-8 bytes (got {})",
                subject.len()
            ),
        ));
    }
    if subject.contains(['\r', '\n']) {
        return Err(Error::validation("subject", "must not contain line breaks"));
    }

    let text: Option<String> = optional(obj, "text")?;
    let html: Option<String> = optional(obj, "html")?;
    if [&text, &html]
        .iter()
        .all(|part| part.as_deref().is_none_or(str::is_empty))
    {
        return Err(Error::validation(
            "text",
            "missing `html` or `text` field: give at least one of them, not empty",
        ));
    }
    let body_bytes = text.as_ref().map_or(0, String::len) + html.as_ref().map_or(0, String::len);
    if body_bytes > MAX_TEXT_PLUS_HTML_BYTES {
        return Err(Error::validation(
            "text",
            format!(
                "text plus html must be at most {MAX_TEXT_PLUS_HTML_BYTES} bytes together (got {body_bytes})"
            ),
        ));
    }

    let headers: Option<BTreeMap<String, String>> = optional(obj, "headers")?;
    if let Some(headers) = &headers {
        validate_headers(headers)?;
    }
    let tags: Option<Vec<Tag>> = optional(obj, "tags")?;
    if let Some(tags) = &tags {
        validate_tags(tags)?;
    }
    let attachments: Option<Vec<Attachment>> = if allow_attachments {
        attachments_field(obj)?
    } else {
        None
    };
    let decoded = match &attachments {
        Some(list) => decode_attachments(list)?,
        None => Vec::new(),
    };
    let scheduled_text: Option<String> = optional(obj, "scheduled_at")?;
    let scheduled_at = scheduled_text
        .as_deref()
        .map(|text| parse_scheduled_at("scheduled_at", text))
        .transpose()?;

    Ok(ValidatedEmail {
        payload: EmailPayload {
            message: MessageFields {
                from: from_text,
                to: to_field,
                cc: cc_field,
                bcc: bcc_field,
                reply_to: reply_field,
                subject,
                text,
                html,
                headers,
                tags,
                scheduled_at: scheduled_text,
            },
            attachments,
        },
        from,
        to,
        cc,
        bcc,
        reply_to,
        attachments: decoded,
        scheduled_at,
    })
}

fn type_error(field: &str, value: &Value, expected: &str) -> Error {
    let got = match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    Error::validation(field, format!("must be {expected} (got {got})"))
}

fn expected_shape(field: &str) -> &'static str {
    match field {
        "to" | "cc" | "bcc" | "reply_to" => "a string or an array of strings",
        "headers" => "an object of string values",
        "tags" => "an array of {name, value} objects",
        "attachments" => "an array of attachment objects",
        _ => "a string",
    }
}

fn required<T: serde::de::DeserializeOwned>(
    obj: &Map<String, Value>,
    field: &str,
) -> Result<T, Error> {
    match obj.get(field) {
        None | Some(Value::Null) => Err(Error::MissingField {
            field: field.to_string(),
        }),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|_| type_error(field, v, expected_shape(field))),
    }
}

fn optional<T: serde::de::DeserializeOwned>(
    obj: &Map<String, Value>,
    field: &str,
) -> Result<Option<T>, Error> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            check_nested(field, v)?;
            serde_json::from_value(v.clone())
                .map(Some)
                .map_err(|_| type_error(field, v, expected_shape(field)))
        }
    }
}

/// Names the exact element of a tag array that is malformed.
fn check_nested(field: &str, value: &Value) -> Result<(), Error> {
    if field != "tags" {
        return Ok(());
    }
    let Value::Array(items) = value else {
        return Ok(());
    };
    if items.len() > MAX_TAGS {
        return Err(Error::validation(
            "tags",
            format!("must have at most {MAX_TAGS} items (got {})", items.len()),
        ));
    }
    for (i, item) in items.iter().enumerate() {
        let Value::Object(tag) = item else {
            return Err(type_error(
                &format!("tags[{i}]"),
                item,
                "an object {name, value}",
            ));
        };
        for key in tag.keys() {
            if key != "name" && key != "value" {
                return Err(Error::validation(
                    format!("tags[{i}].{key}"),
                    "unknown property (a tag has only name and value)",
                ));
            }
        }
        for part in ["name", "value"] {
            match tag.get(part) {
                None | Some(Value::Null) => {
                    return Err(Error::MissingField {
                        field: format!("tags[{i}].{part}"),
                    });
                }
                Some(Value::String(_)) => {}
                Some(other) => {
                    return Err(type_error(&format!("tags[{i}].{part}"), other, "a string"));
                }
            }
        }
    }
    Ok(())
}

fn parse_mailbox(field: &str, text: &str) -> Result<Mailbox, Error> {
    text.parse::<Mailbox>().map_err(|_| {
        Error::validation(
            field,
            format!(
                "`{text}` is not a valid address; use `email@example.com` or `Name <email@example.com>`"
            ),
        )
    })
}

fn parse_optional_recipients(field: &str, r: Option<&Recipients>) -> Result<Vec<Mailbox>, Error> {
    match r {
        Some(r) => parse_recipients(field, r, false),
        None => Ok(Vec::new()),
    }
}

fn parse_recipients(field: &str, r: &Recipients, required: bool) -> Result<Vec<Mailbox>, Error> {
    let list: Vec<&String> = match r {
        Recipients::One(one) => vec![one],
        Recipients::Many(many) => many.iter().collect(),
    };
    if required && list.is_empty() {
        return Err(Error::validation(
            field,
            "must contain at least one address",
        ));
    }
    if list.len() > MAX_RECIPIENTS {
        return Err(Error::validation(
            field,
            format!(
                "must have at most {MAX_RECIPIENTS} addresses (got {})",
                list.len()
            ),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, text)| {
            let name = match r {
                Recipients::One(_) => field.to_string(),
                Recipients::Many(_) => format!("{field}[{i}]"),
            };
            parse_mailbox(&name, text)
        })
        .collect()
}

fn validate_headers(headers: &BTreeMap<String, String>) -> Result<(), Error> {
    if headers.len() > MAX_HEADERS {
        return Err(Error::validation(
            "headers",
            format!(
                "must have at most {MAX_HEADERS} properties (got {})",
                headers.len()
            ),
        ));
    }
    for (name, value) in headers {
        let field = format!("headers.{name}");
        let name_ok = !name.is_empty()
            && name.len() <= 76
            && name.bytes().all(|b| (33..=126).contains(&b) && b != b':');
        if !name_ok {
            return Err(Error::validation(
                field,
                "header name must be 1 to 76 printable ASCII characters without ':' or spaces",
            ));
        }
        if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(Error::validation(
                field,
                "is set by the service and cannot be overridden",
            ));
        }
        if value.contains(['\r', '\n']) {
            return Err(Error::validation(field, "must not contain line breaks"));
        }
    }
    Ok(())
}

fn tag_part_ok(s: &str) -> bool {
    (1..=MAX_TAG_PART_CHARS).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn validate_tags(tags: &[Tag]) -> Result<(), Error> {
    for (i, tag) in tags.iter().enumerate() {
        for (part, value) in [("name", &tag.name), ("value", &tag.value)] {
            if !tag_part_ok(value) {
                return Err(Error::validation(
                    format!("tags[{i}].{part}"),
                    "must match ^[A-Za-z0-9_-]{1,256}$",
                ));
            }
        }
    }
    Ok(())
}

/// Checks an `Idempotency-Key` value: 1 to 256 characters.
pub fn validate_idempotency_key(key: &str) -> Result<(), Error> {
    let chars = key.chars().count();
    if chars == 0 || chars > MAX_IDEMPOTENCY_KEY_CHARS {
        return Err(Error::InvalidIdempotencyKey {
            rule: format!("must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} characters (got {chars})"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"from": "Acme <a@acme.test>", "to": "b@example.test", "subject": "hi", "text": "x"})
    }

    #[test]
    fn a_property_with_an_empty_name_is_refused_naming_the_body() {
        let mut body = base();
        body[""] = json!(1);
        for error in [validate_email(&body), validate_batch_item(&body)].map(Result::unwrap_err) {
            assert_eq!(
                error.to_string(),
                "body: has a property with an empty name (additional properties are not allowed)"
            );
        }
    }

    #[test]
    fn minimal_email_passes() {
        let v = validate_email(&base()).unwrap();
        assert_eq!(v.to.len(), 1);
        assert_eq!(v.from.email.to_string(), "a@acme.test");
    }

    #[test]
    fn missing_fields_are_named() {
        for field in ["from", "to", "subject"] {
            let mut body = base();
            body.as_object_mut().unwrap().remove(field);
            assert_eq!(
                validate_email(&body).unwrap_err(),
                Error::MissingField {
                    field: field.into()
                }
            );
        }
    }

    #[test]
    fn type_errors_name_the_field() {
        let mut body = base();
        body["cc"] = json!(5);
        let err = validate_email(&body).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cc: must be a string or an array of strings (got a number)"
        );
    }

    #[test]
    fn text_or_html_is_required() {
        for (text, html) in [(None, None), (Some(""), None), (Some(""), Some(""))] {
            let mut body = base();
            body.as_object_mut().unwrap().remove("text");
            if let Some(t) = text {
                body["text"] = json!(t);
            }
            if let Some(h) = html {
                body["html"] = json!(h);
            }
            let err = validate_email(&body).unwrap_err();
            assert!(
                matches!(&err, Error::Validation { field, .. } if field == "text"),
                "{text:?} {html:?}: {err}"
            );
        }
        let mut html_only = base();
        html_only.as_object_mut().unwrap().remove("text");
        html_only["html"] = json!("<p>hi</p>");
        assert!(validate_email(&html_only).is_ok());
        assert!(validate_batch_item(&html_only).is_ok());
    }

    #[test]
    fn batch_items_refuse_attachments() {
        let mut body = base();
        body["attachments"] = json!([]);
        assert_eq!(
            validate_batch_item(&body).unwrap_err().to_string(),
            "attachments: is not allowed in batch items"
        );
    }

    #[test]
    fn attachment_by_path_is_refused() {
        let mut body = base();
        body["attachments"] = json!([{"path": "https://x.test/a.pdf"}]);
        let err = validate_email(&body).unwrap_err();
        assert!(
            matches!(err, Error::InvalidAttachment { ref field, .. } if field == "attachments[0].path")
        );
    }

    #[test]
    fn attachment_content_may_be_an_array_of_bytes() {
        let mut body = base();
        body["attachments"] = json!([{"filename": "a.txt", "content": [104, 105]}]);
        let email = validate_email(&body).unwrap();
        assert_eq!(email.attachments[0].bytes, b"hi");
        assert_eq!(
            email.payload.attachments.as_ref().unwrap()[0].content,
            "aGk="
        );
        for (content, field) in [
            (json!([104, 256]), "attachments[0].content[1]"),
            (json!([-1]), "attachments[0].content[0]"),
            (json!(["h"]), "attachments[0].content[0]"),
        ] {
            body["attachments"] = json!([{ "content": content }]);
            let err = validate_email(&body).unwrap_err();
            assert!(
                matches!(err, Error::InvalidAttachment { field: ref f, .. } if f == field),
                "{err:?}"
            );
        }
    }

    #[test]
    fn reserved_and_broken_headers_are_refused() {
        for (name, value) in [
            ("Subject", "x"),
            ("X-Ok", "a\r\nBcc: evil@x.test"),
            ("Bad Name", "x"),
        ] {
            let mut body = base();
            body["headers"] = json!({ name: value });
            let err = validate_email(&body).unwrap_err();
            assert!(
                err.to_string().starts_with(&format!("headers.{name}:")),
                "{err}"
            );
        }
    }

    proptest! {
        #[test]
        fn tag_rule_matches_the_pattern(s in "[A-Za-z0-9_\\- .!é]{0,260}") {
            let expected = !s.is_empty() && s.len() <= 256
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            prop_assert_eq!(tag_part_ok(&s), expected);
        }

        #[test]
        fn subject_rule(s in "\\PC{0,10}[\r\n]?\\PC{0,10}") {
            let mut body = base();
            body["subject"] = json!(s.clone());
            let ok = validate_email(&body).is_ok();
            prop_assert_eq!(ok, !s.contains(['\r', '\n']) && s.len() <= MAX_SUBJECT_BYTES);
        }
    }
}

//! The Email, Tag and Attachment resources and their validation. Every rule of
//! the contract's tables and of its section 8 is checked here, before anything
//! is stored; each error names the field and the rule.

use std::collections::BTreeMap;

use base64::Engine;
use lettre::message::Mailbox;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::error::Error;

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
mod records;

pub use account::{ApiKey, Permission, Principal, Tenant};
pub use records::{EmailStatus, JsonText, KeyState, RequestLog, StoredEmail};

/// A stored or given text that names no value of its enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{value}` (expected one of: {})", expected.join(", "))]
pub struct UnknownValue {
    pub what: &'static str,
    pub value: String,
    pub expected: &'static [&'static str],
}

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
/// How far in the past `scheduled_at` may lie (clock skew between the
/// caller and the service, and the request's own time on the wire); such
/// an email is due at once.
pub const SCHEDULE_PAST_TOLERANCE_MS: i64 = 60_000;
/// How far ahead `scheduled_at` may lie.
pub const MAX_SCHEDULE_AHEAD_MS: i64 = 30 * 24 * 60 * 60 * 1000;

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

fn validate(body: &Value, allow_attachments: bool) -> Result<ValidatedEmail, Error> {
    let Value::Object(obj) = body else {
        return Err(Error::validation("body", "must be a JSON object"));
    };
    for key in obj.keys() {
        let known =
            MESSAGE_FIELDS.contains(&key.as_str()) || (allow_attachments && key == "attachments");
        if !known {
            let rule = if key == "attachments" {
                "is not allowed in batch items"
            } else {
                "unknown property (additional properties are not allowed)"
            };
            return Err(Error::validation(key.clone(), rule));
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

fn attachments_field(obj: &Map<String, Value>) -> Result<Option<Vec<Attachment>>, Error> {
    let Some(value) = obj.get("attachments") else {
        return Ok(None);
    };
    let items = match value {
        Value::Null => return Ok(None),
        Value::Array(items) => items,
        other => {
            return Err(type_error(
                "attachments",
                other,
                "an array of attachment objects",
            ));
        }
    };
    if items.len() > MAX_ATTACHMENTS {
        return Err(Error::attachment(
            "attachments",
            format!(
                "must have at most {MAX_ATTACHMENTS} items (got {})",
                items.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let field = format!("attachments[{i}]");
        let Value::Object(map) = item else {
            return Err(Error::attachment(field, "must be an object"));
        };
        for key in map.keys() {
            match key.as_str() {
                "content" | "filename" | "content_type" | "content_id" => {}
                "path" | "url" => {
                    return Err(Error::attachment(
                        format!("{field}.{key}"),
                        "attachments by URL or by path are not supported; send the content as base64",
                    ));
                }
                _ => {
                    return Err(Error::attachment(
                        format!("{field}.{key}"),
                        "unknown property (allowed: content, filename, content_type, content_id)",
                    ));
                }
            }
        }
        match map.get("content") {
            None | Some(Value::Null) => {
                return Err(Error::MissingField {
                    field: format!("{field}.content"),
                });
            }
            Some(Value::String(_)) => {}
            Some(_) => {
                return Err(Error::attachment(
                    format!("{field}.content"),
                    "must be a base64 string",
                ));
            }
        }
        for part in ["filename", "content_type", "content_id"] {
            if let Some(v) = map.get(part)
                && !(v.is_string() || v.is_null())
            {
                return Err(Error::attachment(
                    format!("{field}.{part}"),
                    "must be a string",
                ));
            }
        }
        let attachment: Attachment = serde_json::from_value(item.clone())
            .map_err(|e| Error::attachment(field.clone(), e.to_string()))?;
        out.push(attachment);
    }
    Ok(Some(out))
}

fn decode_attachments(list: &[Attachment]) -> Result<Vec<DecodedAttachment>, Error> {
    list.iter()
        .enumerate()
        .map(|(i, a)| {
            let field = format!("attachments[{i}]");
            // A quick bound before decoding: 4 base64 characters carry 3 bytes.
            if a.content.len() / 4 * 3 > MAX_ATTACHMENT_BYTES + 3 {
                return Err(Error::attachment(
                    format!("{field}.content"),
                    format!("must be at most {MAX_ATTACHMENT_BYTES} bytes decoded"),
                ));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(a.content.as_bytes())
                .map_err(|_| Error::attachment(format!("{field}.content"), "must be valid base64"))?;
            if bytes.len() > MAX_ATTACHMENT_BYTES {
                return Err(Error::attachment(
                    format!("{field}.content"),
                    format!(
                        "must be at most {MAX_ATTACHMENT_BYTES} bytes decoded (got {})",
                        bytes.len()
                    ),
                ));
            }
            if let Some(ct) = &a.content_type
                && lettre::message::header::ContentType::parse(ct).is_err()
            {
                return Err(Error::attachment(
                    format!("{field}.content_type"),
                    "must be a MIME type such as application/pdf",
                ));
            }
            if let Some(cid) = &a.content_id {
                let ok = !cid.is_empty()
                    && cid.len() <= 256
                    && cid
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~.".contains(c));
                if !ok {
                    return Err(Error::attachment(
                        format!("{field}.content_id"),
                        "must be the local part of a content id (1 to 256 characters of letters, digits and !#$%&'*+-/=?^_`{|}~.)",
                    ));
                }
            }
            if let Some(name) = &a.filename
                && (name.is_empty() || name.contains(['\r', '\n', '/', '\\']))
            {
                return Err(Error::attachment(
                    format!("{field}.filename"),
                    "must be a non-empty file name without line breaks or path separators",
                ));
            }
            Ok(DecodedAttachment {
                bytes,
                filename: a.filename.clone(),
                content_type: a.content_type.clone(),
                content_id: a.content_id.clone(),
            })
        })
        .collect()
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

//! The `attachments` of `POST /emails`: their shape (content as a base64
//! string or an array of bytes; never by URL or path) and their decoding
//! for the transport.

use base64::Engine;
use serde_json::{Map, Value};

use super::{Attachment, DecodedAttachment, MAX_ATTACHMENT_BYTES, MAX_ATTACHMENTS, type_error};
use crate::error::Error;

pub(super) fn attachments_field(
    obj: &Map<String, Value>,
) -> Result<Option<Vec<Attachment>>, Error> {
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
        let mut item = item.clone();
        match map.get("content") {
            None | Some(Value::Null) => {
                return Err(Error::MissingField {
                    field: format!("{field}.content"),
                });
            }
            Some(Value::String(_)) => {}
            // Resend's API also takes the bytes themselves, and its Rust
            // SDK sends them so; kept as base64 like every other.
            Some(Value::Array(bytes)) => {
                item["content"] = Value::String(bytes_as_base64(bytes, &field)?);
            }
            Some(_) => {
                return Err(Error::attachment(
                    format!("{field}.content"),
                    "must be a base64 string or an array of bytes (integers 0 to 255)",
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
        let attachment: Attachment = serde_json::from_value(item)
            .map_err(|e| Error::attachment(field.clone(), e.to_string()))?;
        out.push(attachment);
    }
    Ok(Some(out))
}

/// An attachment's content given as an array of bytes, as base64.
fn bytes_as_base64(items: &[Value], field: &str) -> Result<String, Error> {
    if items.len() > MAX_ATTACHMENT_BYTES {
        return Err(Error::attachment(
            format!("{field}.content"),
            format!(
                "must be at most {MAX_ATTACHMENT_BYTES} bytes (got {})",
                items.len()
            ),
        ));
    }
    let bytes = items
        .iter()
        .enumerate()
        .map(|(j, v)| {
            v.as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .ok_or_else(|| {
                    Error::attachment(
                        format!("{field}.content[{j}]"),
                        "must be an integer from 0 to 255 (a byte)",
                    )
                })
        })
        .collect::<Result<Vec<u8>, Error>>()?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

pub(super) fn decode_attachments(list: &[Attachment]) -> Result<Vec<DecodedAttachment>, Error> {
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

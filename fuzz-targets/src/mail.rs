//! mail-service's request parsers and its feedback parsers.

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::HeaderValue;
use axum::http::request::Parts;
use mail_service::error::Error;
use mail_service::feedback::report::{self, MAX_DIAGNOSTIC_CHARS, MAX_RECIPIENTS};
use mail_service::feedback::verp::VerpKey;
use mail_service::http::error::status_and_name;
use mail_service::http::extract::{IdempotencyHeader, IfMatchHeader, JsonBody, LogQueryParams};
use mail_service::model::{
    MAX_IDEMPOTENCY_KEY_CHARS, batch_items, check_schedule_window, validate_batch_item,
    validate_email,
};
use mail_service::service::{CheckedLogQuery, LogQuery};
use mail_service::transport::{build_message, message_id_for};

use crate::block_on;

/// The service's clock in the targets (2027-01-15, Unix ms).
const NOW_MS: i64 = 1_800_000_000_000;

/// Asserts a refusal is a 422 whose message starts with the field it names.
fn assert_names_a_field(error: &Error) {
    let (status, name) = status_and_name(error);
    assert_eq!(
        status.as_u16(),
        422,
        "refused as {status} ({name}) instead of 422: {error}"
    );
    let field = match error {
        Error::Validation { field, .. }
        | Error::MissingField { field }
        | Error::InvalidAttachment { field, .. } => field.as_str(),
        Error::InvalidIdempotencyKey { .. } => "Idempotency-Key",
        other => panic!("a 422 that names no field: {other:?}"),
    };
    assert!(!field.is_empty(), "an empty field name: {error:?}");
    assert!(
        error.to_string().starts_with(field),
        "the message does not start with its field `{field}`: {error}"
    );
}

/// `POST /emails` (first byte even) or `POST /emails/batch` (odd): the JSON
/// body extractor, then validation. A refusal is a 422 naming a field; an
/// accepted email passes the schedule window or is refused the same way,
/// and always builds into a MIME message (validation never accepts what
/// the handoff cannot encode).
pub fn email_json(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let request = Request::builder()
        .method("POST")
        .uri(if mode & 1 == 0 {
            "/emails"
        } else {
            "/emails/batch"
        })
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
        .expect("a request");
    let value = match block_on(JsonBody::from_request(request, &())) {
        Ok(JsonBody(value)) => value,
        Err(error) => return assert_names_a_field(&error),
    };
    let validated = if mode & 1 == 0 {
        validate_email(&value).map(|email| vec![email])
    } else {
        batch_items(&value).and_then(|items| {
            items
                .iter()
                .enumerate()
                .map(|(index, item)| validate_batch_item(item).map_err(|e| e.at_index(index)))
                .collect()
        })
    };
    let emails = match validated {
        Ok(emails) => emails,
        Err(error) => return assert_names_a_field(&error),
    };
    for email in emails {
        if let Some(at) = email.scheduled_at
            && let Err(error) = check_schedule_window("scheduled_at", at, NOW_MS)
        {
            assert_names_a_field(&error);
        }
        let message = build_message(&email, &message_id_for(1, &email))
            .unwrap_or_else(|e| panic!("accepted, but the handoff cannot build it: {e}"));
        assert!(!message.formatted().is_empty());
    }
}

/// Request parts carrying `name: value` for each value (a header the HTTP
/// server would accept), or `None` when a value is not one.
fn parts_with(name: &str, values: &[&[u8]]) -> Option<Parts> {
    let mut builder = Request::builder().method("POST").uri("/emails");
    for value in values {
        builder = builder.header(name, HeaderValue::from_bytes(value).ok()?);
    }
    Some(builder.body(()).expect("a request").into_parts().0)
}

/// The `Idempotency-Key` (first byte even) and `If-Match` (odd; a newline
/// separates repeated headers) extractors. A key is 1 to 256 visible
/// characters or a 422; an `If-Match` is accepted only as one strong ETag
/// `"N"` exactly as the service sends it (a weak, listed, padded or
/// otherwise spelled tag would not match under strong comparison), and is
/// refused with 400, never a 500.
pub fn idempotency_if_match(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        let Some(mut parts) = parts_with("idempotency-key", &[rest]) else {
            return;
        };
        match block_on(IdempotencyHeader::from_request_parts(&mut parts, &())) {
            Ok(IdempotencyHeader(key)) => {
                assert!(key.is_some(), "a present header read as absent");
                let text = std::str::from_utf8(rest).expect("an accepted key is text");
                let chars = text.chars().count();
                assert!((1..=MAX_IDEMPOTENCY_KEY_CHARS).contains(&chars));
            }
            Err(error) => {
                assert_names_a_field(&error);
                assert!(matches!(error, Error::InvalidIdempotencyKey { .. }));
            }
        }
        return;
    }
    let values: Vec<&[u8]> = rest.split(|b| *b == b'\n').take(4).collect();
    let Some(mut parts) = parts_with("if-match", &values) else {
        return;
    };
    match block_on(IfMatchHeader::from_request_parts(&mut parts, &())) {
        Ok(IfMatchHeader(Some(tag))) => {
            assert_eq!(values.len(), 1, "several If-Match headers accepted");
            let sent = std::str::from_utf8(values[0]).expect("an accepted tag is text");
            assert!(tag.0 >= 1, "revision {} accepted", tag.0);
            assert_eq!(
                sent.trim(),
                format!("\"{}\"", tag.0),
                "`{sent}` accepted as revision {}, which the service tags otherwise",
                tag.0
            );
        }
        Ok(IfMatchHeader(None)) => panic!("a present If-Match read as absent"),
        Err(error) => {
            let (status, _) = status_and_name(&error);
            assert_eq!(
                status.as_u16(),
                400,
                "If-Match refused with {status}: {error}"
            );
            assert!(error.to_string().starts_with("If-Match: "), "{error}");
        }
    }
}

/// `GET /logs?QUERY`: the query extractor and the log query's checks (the
/// page size, the cursor, the method and status filters). A refusal is a
/// 422 naming the parameter; an accepted page's next cursor leads back to
/// the id it was made from.
pub fn log_cursor(data: &[u8]) {
    let Some(query) = crate::text(data) else {
        return;
    };
    let Ok(request) = Request::builder().uri(format!("/logs?{query}")).body(()) else {
        return;
    };
    let mut parts = request.into_parts().0;
    let checked = block_on(LogQueryParams::from_request_parts(&mut parts, &()))
        .and_then(|LogQueryParams(query): LogQueryParams| LogQuery::check(&query));
    let CheckedLogQuery { page, .. } = match checked {
        Ok(checked) => checked,
        Err(error) => return assert_names_a_field(&error),
    };
    assert!((1..=100).contains(&page.limit), "limit {}", page.limit);
    // A full page read below the cursor: its next cursor names its last row.
    let top = page.before_id.unwrap_or(i64::MAX).saturating_sub(1);
    let rows: Vec<i64> = (0..page.fetch()).map(|i| top.saturating_sub(i)).collect();
    let next = page.page(rows, |id| *id);
    let last = *next.items.last().expect("a full page has rows");
    let cursor = next.next_cursor.expect("a full page has a next cursor");
    let again = LogQuery {
        cursor: Some(cursor.clone()),
        ..LogQuery::default()
    }
    .check()
    .unwrap_or_else(|e| panic!("the service's own cursor {cursor} is refused: {e}"));
    assert_eq!(again.page.before_id, Some(last), "cursor {cursor}");
}

/// The feedback report parser (DSN, ARF, RFC 3464 text, 8-bit): never a
/// panic; what it reads stays within its bounds; the same bytes read the
/// same.
pub fn feedback_report(data: &[u8]) {
    // `report::parse` contains a panic of the MIME parser (the report is
    // then unreadable). libFuzzer's panic hook would abort before that
    // unwinding, so a plain one is in place while the parser runs; a panic
    // that leaves `parse` still fails the target.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| eprintln!("{info}")));
    let (first, second) = (report::parse(data), report::parse(data));
    std::panic::set_hook(hook);
    assert_eq!(first, second, "the parser is not deterministic");
    if let Ok(report) = &first {
        assert!(report.recipients.len() <= MAX_RECIPIENTS);
        for recipient in &report.recipients {
            if let Some(diagnostic) = &recipient.diagnostic {
                assert!(diagnostic.chars().count() <= MAX_DIAGNOSTIC_CHARS);
            }
        }
    }
}

/// The return-path (VERP) token check. First byte even: the rest is an
/// address from a report, which never verifies without the key. Odd: a
/// genuine return path made from fuzzed (id, domain) with a fuzzed edit
/// applied; the genuine one verifies to its email, and an edited one
/// verifies, if at all, to the same email and domain (case, brackets and
/// spaces aside), never to another.
pub fn verp_token(data: &[u8]) {
    let key = VerpKey::new(b"fuzz verp key");
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        if let Some(address) = crate::text(rest) {
            assert!(key.verify(address).is_err(), "`{address}` forged a token");
        }
        return;
    }
    if rest.len() < 10 {
        return;
    }
    let id = (i64::from_le_bytes(rest[..8].try_into().expect("8 bytes")) & i64::MAX).max(1);
    let (edit_at, edit) = (rest[8], rest[9]);
    let domain: String = rest[10..]
        .iter()
        .map(|b| match b % 38 {
            n @ 0..26 => char::from(b'a' + n),
            n @ 26..36 => char::from(b'0' + (n - 26)),
            36 => '.',
            _ => '-',
        })
        .take(60)
        .collect();
    if domain.is_empty() {
        return;
    }
    let genuine = key.return_path(id, &domain);
    let verified = key
        .verify(&genuine)
        .unwrap_or_else(|e| panic!("the genuine {genuine} is refused: {e}"));
    assert_eq!(
        (verified.email_id, verified.domain.as_str()),
        (id, domain.as_str())
    );
    let mut edited = genuine.clone().into_bytes();
    let at = usize::from(edit_at) % edited.len();
    match edit % 4 {
        0 => edited[at] = edit,
        1 => {
            edited.remove(at);
        }
        2 => edited.insert(at, edit),
        _ => edited[at] = edited[at].to_ascii_uppercase(),
    }
    let Ok(edited) = String::from_utf8(edited) else {
        return;
    };
    if let Ok(v) = key.verify(&edited) {
        assert_eq!(
            (v.email_id, v.domain.as_str()),
            (id, domain.as_str()),
            "`{edited}` (an edit of {genuine}) verifies to another email"
        );
    }
}

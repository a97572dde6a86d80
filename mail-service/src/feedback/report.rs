//! Reading feedback mail: RFC 3464 delivery status notifications (and RFC
//! 6533's `message/global-delivery-status`) and RFC 5965 complaint reports
//! (ARF). The MIME structure, header fields and encodings are mail-parser's
//! work; this module only reads the report's fields. A message that is not
//! one of these reports, or whose fields break the RFCs' rules, is an error
//! naming what is wrong: the caller keeps it (quarantine), never drops it.
//!
//! Pure and bounded: no I/O, linear in the input (mail-parser never panics
//! and bounds its nesting), property-tested with arbitrary and mutated input.

use mail_parser::{Message, MessageParser, MimeHeaders, PartType};
use serde::Serialize;

use crate::model::FeedbackKind;

/// Longest diagnostic text kept (the rest is cut).
pub const MAX_DIAGNOSTIC_CHARS: usize = 500;
/// More recipient blocks than this in one report: refused (a DSN covers the
/// recipients of one message, at most 150 here).
pub const MAX_RECIPIENTS: usize = 1000;

/// What a report says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub kind: ReportKind,
    /// Where the report says it was sent, most telling first: the envelope
    /// recipient a final delivery recorded (`Delivered-To`,
    /// `X-Original-To`, `Envelope-To`), the `To` of the report, a
    /// complaint's `Original-Mail-From`, the original message's
    /// `Return-Path`. The service looks for its return-path
    /// token there when the envelope does not carry one.
    pub return_path_candidates: Vec<String>,
    /// The `Message-ID` of the message the report is about, when included.
    pub original_message_id: Option<String>,
    /// One entry per recipient the report is about; a complaint that names
    /// no recipient has none.
    pub recipients: Vec<RecipientFeedback>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportKind {
    DeliveryStatus,
    Complaint,
}

/// What the report says about one recipient.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecipientFeedback {
    /// `Final-Recipient` of a DSN, `Original-Rcpt-To` (or the original
    /// `To`) of a complaint.
    pub address: String,
    /// `Original-Recipient` of a DSN (the address as the sender gave it).
    pub original_address: Option<String>,
    pub kind: FeedbackKind,
    /// A DSN's `Status` (`5.1.1`); a complaint's `Feedback-Type`.
    pub status: String,
    /// A DSN's `Diagnostic-Code` (without its type), cut to 500 characters.
    pub diagnostic: Option<String>,
}

/// Why a message is not a report this service can apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{0}")]
pub struct Unreadable(pub String);

fn unreadable(why: impl Into<String>) -> Unreadable {
    Unreadable(why.into())
}

/// Reads one message.
pub fn parse(raw: &[u8]) -> Result<Report, Unreadable> {
    // mail-parser has panicked on crafted MIME before (its issues #14, #63,
    // #120, #145), and 0.11.9 has a `debug_assert!` that a malformed
    // multipart report reaches (found by the fuzz target `feedback_report`).
    // Its parse only reads `raw`, so a panic leaves nothing half-changed:
    // the message is unreadable and kept in quarantine, never a dead session.
    let message = std::panic::catch_unwind(|| MessageParser::default().parse(raw))
        .map_err(|_| unreadable("the MIME structure cannot be read (the parser failed on it)"))?
        .ok_or_else(|| unreadable("not a MIME message: no header section"))?;
    let (ctype, subtype) = message
        .content_type()
        .map(|ct| {
            (
                ct.ctype().to_ascii_lowercase(),
                ct.subtype().unwrap_or_default().to_ascii_lowercase(),
            )
        })
        .unwrap_or_else(|| ("text".into(), "plain".into()));
    if (ctype.as_str(), subtype.as_str()) != ("multipart", "report") {
        return Err(unreadable(format!(
            "not a report: Content-Type is {ctype}/{subtype}, expected multipart/report (RFC 6522)"
        )));
    }
    let report_type = message
        .content_type()
        .and_then(|ct| ct.attribute("report-type"))
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    // The envelope recipient as the final delivery recorded it, then the
    // report's `To`.
    let top = fields(message.raw_message());
    let mut candidates: Vec<String> = ["Delivered-To", "X-Original-To", "Envelope-To"]
        .iter()
        .filter_map(|name| value_of(&top, name))
        .map(bare)
        .collect();
    candidates.extend(recipients_of(&message));
    let original = original_headers(&message);
    let original_fields = original.as_deref().map(fields).unwrap_or_default();
    let original_message_id = value_of(&original_fields, "Message-ID").map(bare);
    let report = match report_type.as_str() {
        "delivery-status" | "global-delivery-status" => {
            let part = part_of(&message, &["delivery-status", "global-delivery-status"])
                .ok_or_else(|| {
                    unreadable("a delivery-status report without a message/delivery-status part")
                })?;
            Report {
                kind: ReportKind::DeliveryStatus,
                return_path_candidates: Vec::new(),
                original_message_id,
                recipients: delivery_status(part)?,
            }
        }
        "feedback-report" => {
            let part = part_of(&message, &["feedback-report"]).ok_or_else(|| {
                unreadable("a feedback report without a message/feedback-report part")
            })?;
            let fields = fields(part);
            let feedback_type = value_of(&fields, "Feedback-Type")
                .map(|t| t.to_ascii_lowercase())
                .ok_or_else(|| unreadable("feedback report: Feedback-Type is missing"))?;
            if !matches!(
                feedback_type.as_str(),
                "abuse" | "fraud" | "virus" | "other"
            ) {
                return Err(unreadable(format!(
                    "feedback report: Feedback-Type `{feedback_type}` is not a complaint"
                )));
            }
            if let Some(from) = value_of(&fields, "Original-Mail-From") {
                candidates.push(bare(from));
            }
            let mut named: Vec<String> = fields
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("Original-Rcpt-To"))
                .map(|(_, v)| bare(v))
                .filter(|a| !a.is_empty())
                .collect();
            if named.is_empty()
                && let Some(o) = original
                    .as_deref()
                    .and_then(|o| MessageParser::default().parse_headers(o))
            {
                named = recipients_of(&o);
            }
            Report {
                kind: ReportKind::Complaint,
                return_path_candidates: Vec::new(),
                original_message_id,
                recipients: named
                    .into_iter()
                    .map(|address| RecipientFeedback {
                        address,
                        original_address: None,
                        kind: FeedbackKind::Complained,
                        status: feedback_type.clone(),
                        diagnostic: None,
                    })
                    .collect(),
            }
        }
        "" => return Err(unreadable("multipart/report without a report-type")),
        other => {
            return Err(unreadable(format!(
                "report-type `{other}` is neither delivery-status nor feedback-report"
            )));
        }
    };
    if let Some(path) = value_of(&original_fields, "Return-Path") {
        candidates.push(bare(path));
    }
    candidates.retain(|c| !c.is_empty());
    let mut seen = std::collections::HashSet::new();
    candidates.retain(|c| seen.insert(c.to_ascii_lowercase()));
    Ok(Report {
        return_path_candidates: candidates,
        ..report
    })
}

/// The per-recipient blocks of a `message/delivery-status` body.
fn delivery_status(body: &[u8]) -> Result<Vec<RecipientFeedback>, Unreadable> {
    let text = String::from_utf8_lossy(body).replace("\r\n", "\n");
    let mut recipients = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let fields = fields(block.as_bytes());
        let Some(final_recipient) = value_of(&fields, "Final-Recipient") else {
            continue; // the per-message block (Reporting-MTA, ...)
        };
        let n = recipients.len() + 1;
        if n > MAX_RECIPIENTS {
            return Err(unreadable(format!(
                "more than {MAX_RECIPIENTS} recipients in one report"
            )));
        }
        let address = typed_address(final_recipient);
        if address.is_empty() {
            return Err(unreadable(format!(
                "recipient {n}: Final-Recipient has no address"
            )));
        }
        let action = value_of(&fields, "Action")
            .map(|a| a.to_ascii_lowercase())
            .ok_or_else(|| unreadable(format!("recipient {n} ({address}): Action is missing")))?;
        let status = value_of(&fields, "Status")
            .and_then(|s| s.split_whitespace().next())
            .map(str::to_string)
            .filter(|s| is_status_code(s))
            .ok_or_else(|| {
                unreadable(format!(
                    "recipient {n} ({address}): Status is missing or not a status code (RFC 3463 class.subject.detail)"
                ))
            })?;
        let kind = match (action.as_str(), status.as_bytes()[0]) {
            ("failed", b'5') => FeedbackKind::Bounced,
            ("failed", b'4') | ("delayed", _) => FeedbackKind::DeliveryDelayed,
            ("delivered" | "relayed" | "expanded", _) => FeedbackKind::Delivered,
            ("failed", _) => {
                return Err(unreadable(format!(
                    "recipient {n} ({address}): Action failed with the success status {status}"
                )));
            }
            (other, _) => {
                return Err(unreadable(format!(
                    "recipient {n} ({address}): unknown Action `{other}`"
                )));
            }
        };
        let diagnostic = value_of(&fields, "Diagnostic-Code").map(|d| {
            let text = d.split_once(';').map(|(_, t)| t).unwrap_or(d).trim();
            text.chars()
                .filter(|c| !c.is_control())
                .take(MAX_DIAGNOSTIC_CHARS)
                .collect()
        });
        recipients.push(RecipientFeedback {
            address,
            original_address: value_of(&fields, "Original-Recipient")
                .map(typed_address)
                .filter(|a| !a.is_empty()),
            kind,
            status,
            diagnostic,
        });
    }
    if recipients.is_empty() {
        return Err(unreadable(
            "the delivery-status part names no recipient (no Final-Recipient)",
        ));
    }
    Ok(recipients)
}

/// `2.0.0`, `4.4.7`, `5.1.1`: class 2, 4 or 5, then two numbers of 1..3 digits.
fn is_status_code(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 3
        && matches!(parts[0], "2" | "4" | "5")
        && parts[1..]
            .iter()
            .all(|p| (1..=3).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The address of `rfc822; ada@example.test` (or `utf-8; ...`), without
/// angle brackets.
fn typed_address(value: &str) -> String {
    bare(value.split_once(';').map(|(_, a)| a).unwrap_or(value))
}

fn bare(value: &str) -> String {
    value
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .trim()
        .to_string()
}

/// The body of the first part whose type is `message/<one of subtypes>`.
fn part_of<'a>(message: &'a Message<'_>, subtypes: &[&str]) -> Option<&'a [u8]> {
    message.parts.iter().skip(1).find_map(|part| {
        let ct = part.content_type()?;
        let is = ct.ctype().eq_ignore_ascii_case("message")
            && ct
                .subtype()
                .is_some_and(|s| subtypes.iter().any(|w| s.eq_ignore_ascii_case(w)));
        is.then(|| part.contents())
    })
}

/// The header section of the original message a report carries
/// (`message/rfc822`, `message/global`, `text/rfc822-headers`,
/// `message/global-headers`), parsed on its own.
fn original_headers(message: &Message<'_>) -> Option<Vec<u8>> {
    message.parts.iter().skip(1).find_map(|part| {
        let ct = part.content_type()?;
        let sub = ct.subtype()?.to_ascii_lowercase();
        let original = match ct.ctype().to_ascii_lowercase().as_str() {
            "message" => matches!(sub.as_str(), "rfc822" | "global" | "global-headers"),
            "text" => sub == "rfc822-headers",
            _ => false,
        };
        if !original {
            return None;
        }
        Some(match &part.body {
            PartType::Message(m) => m.raw_message().to_vec(),
            _ => part.contents().to_vec(),
        })
    })
}

/// The header fields of a block, in order: (name, unfolded raw value).
fn fields(block: &[u8]) -> Vec<(String, String)> {
    let Some(parsed) = MessageParser::default().parse_headers(block) else {
        return Vec::new();
    };
    parsed
        .headers()
        .iter()
        .map(|h| (h.name().to_string(), raw_value(block, h)))
        .collect()
}

fn raw_value(block: &[u8], h: &mail_parser::Header<'_>) -> String {
    let bytes = block
        .get(h.offset_start as usize..h.offset_end as usize)
        .unwrap_or_default();
    let text = String::from_utf8_lossy(bytes);
    text.split(['\r', '\n'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn value_of<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// The addresses of a message's `To`.
fn recipients_of(message: &Message<'_>) -> Vec<String> {
    message
        .to()
        .map(|a| {
            a.iter()
                .filter_map(|addr| addr.address())
                .map(|s| s.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    /// Found by the fuzz target `feedback_report`: a malformed multipart
    /// report that trips a debug assertion inside mail-parser 0.11.9. It is
    /// read as unreadable (quarantined) or as a report, never a panic.
    #[test]
    fn a_report_that_trips_the_mime_parser_is_not_a_panic() {
        for raw in [
            &include_bytes!(
                "../../../fuzz/corpus/feedback_report/regression_mime_parser_assertion_1"
            )[..],
            &include_bytes!(
                "../../../fuzz/corpus/feedback_report/regression_mime_parser_assertion_2"
            )[..],
        ] {
            let _ = super::parse(raw);
        }
    }

    use super::*;

    #[test]
    fn the_envelope_recipient_of_a_final_delivery_comes_first() {
        let raw = "Delivered-To: bounces+1-aaaa@send.acme.test\r\n\
                   To: Postmaster <postmaster@acme.test>\r\n\
                   Content-Type: multipart/report; report-type=delivery-status; boundary=b\r\n\r\n\
                   --b\r\nContent-Type: message/delivery-status\r\n\r\n\
                   Reporting-MTA: dns; mx.example\r\n\r\n\
                   Final-Recipient: rfc822; ada@example.test\r\nAction: delivered\r\nStatus: 2.0.0\r\n\r\n\
                   --b--\r\n";
        let report = parse(raw.as_bytes()).unwrap();
        assert_eq!(
            report.return_path_candidates,
            ["bounces+1-aaaa@send.acme.test", "postmaster@acme.test"]
        );
        assert_eq!(report.recipients[0].kind, FeedbackKind::Delivered);
    }

    #[test]
    fn status_codes_follow_rfc_3463() {
        for ok in ["2.0.0", "4.4.7", "5.1.10", "5.999.999"] {
            assert!(is_status_code(ok), "{ok}");
        }
        for bad in [
            "", "5", "5.1", "3.0.0", "5.1.1.1", "5.a.1", "5.1234.1", "5..1",
        ] {
            assert!(!is_status_code(bad), "{bad}");
        }
    }
}

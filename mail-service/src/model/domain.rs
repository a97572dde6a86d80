//! The Domain resource: its name rules, the DNS records the customer
//! publishes (each with its own status) and how their statuses make the
//! domain's, in Resend's vocabulary.

use serde::{Deserialize, Serialize};

use super::JsonText;
use crate::error::Error;
use crate::status::text_enum;

/// The return-path subdomain when none is given (Resend's default).
pub const DEFAULT_RETURN_PATH: &str = "send";
/// The DKIM selector of every domain's key.
pub const DKIM_SELECTOR: &str = "mailservice";

text_enum!(
    /// Where a domain stands (Resend's vocabulary).
    DomainStatus, "domain status" {
        /// Created; no verification requested yet.
        NotStarted = "not_started",
        /// Verification requested; no required record verified yet, and
        /// it is still being retried.
        Pending = "pending",
        /// Every required record (SPF TXT, MX, DKIM) is published.
        Verified = "verified",
        /// Some required records are verified, the others not yet; still
        /// being retried.
        PartiallyVerified = "partially_verified",
        /// Some required records are verified, the others were not found
        /// (or are wrong) when the retry period ended.
        PartiallyFailed = "partially_failed",
        /// No required record was found when the retry period ended.
        Failed = "failed",
        /// DNS could not answer (SERVFAIL, timeout) for a record that is not
        /// verified; retried like `pending`.
        TemporaryFailure = "temporary_failure",
    }
);

text_enum!(
    /// Where one DNS record stands.
    RecordStatus, "record status" {
        NotStarted = "not_started",
        /// Not found yet (or wrong) while verification is retried.
        Pending = "pending",
        Verified = "verified",
        /// Not found or wrong.
        Failed = "failed",
        /// DNS could not answer (SERVFAIL, timeout).
        TemporaryFailure = "temporary_failure",
    }
);

/// One DNS record to publish, as Resend's SDKs read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DnsRecord {
    /// `SPF`, `DKIM` or `DMARC` (the MX of the return path is part of SPF,
    /// as in Resend).
    pub record: String,
    /// The name relative to the domain (`send`, `mailservice._domainkey`).
    pub name: String,
    /// `TXT` or `MX`.
    #[serde(rename = "type")]
    pub record_type: String,
    /// Always `Auto`.
    pub ttl: String,
    #[schema(value_type = String)]
    pub status: RecordStatus,
    pub value: String,
    /// MX only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<u16>,
    /// Whether the domain's status depends on it (DMARC is recommended).
    pub required: bool,
}

/// A stored domain. The private key is not part of it: it is read only by
/// the signer.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Domain {
    pub id: i64,
    pub name: String,
    pub return_path: String,
    pub dkim_selector: String,
    pub status: DomainStatus,
    pub records: JsonText<Vec<DnsRecord>>,
    pub verified_at: Option<i64>,
    pub verify_until: Option<i64>,
    pub checked_at: Option<i64>,
    pub created_at: i64,
}

impl DomainStatus {
    /// Whether mail from a domain in this status may be sent: verified, or
    /// verified before (`verified_at`) and now only unreachable in DNS
    /// (`temporary_failure`).
    pub fn may_send(self, verified_at: Option<i64>) -> bool {
        match self {
            DomainStatus::Verified => true,
            DomainStatus::TemporaryFailure => verified_at.is_some(),
            _ => false,
        }
    }
}

/// The domain's status from its records' after a check; `retrying` while
/// the period of background re-verification runs.
pub fn domain_status(records: &[DnsRecord], retrying: bool) -> DomainStatus {
    let required: Vec<RecordStatus> = records
        .iter()
        .filter(|r| r.required)
        .map(|r| r.status)
        .collect();
    let verified = required
        .iter()
        .filter(|s| **s == RecordStatus::Verified)
        .count();
    if verified == required.len() {
        DomainStatus::Verified
    } else if required.contains(&RecordStatus::TemporaryFailure) {
        DomainStatus::TemporaryFailure
    } else if verified == 0 {
        if retrying {
            DomainStatus::Pending
        } else {
            DomainStatus::Failed
        }
    } else if retrying {
        DomainStatus::PartiallyVerified
    } else {
        DomainStatus::PartiallyFailed
    }
}

/// The records of Resend's kinds (`SPF`, `DKIM`) and the DMARC
/// recommendation apart: the SDKs parse `records` into a closed set of
/// kinds, so DMARC is answered in a field of its own.
pub fn split_records(records: Vec<DnsRecord>) -> (Vec<DnsRecord>, Option<DnsRecord>) {
    let (dmarc, records): (Vec<DnsRecord>, Vec<DnsRecord>) =
        records.into_iter().partition(|r| r.record == "DMARC");
    (records, dmarc.into_iter().next())
}

/// A domain as `GET /domains/{id}` answers it (also the `data` of its
/// `domain.updated` events).
pub fn domain_json(d: &Domain) -> serde_json::Value {
    let (records, dmarc) = split_records(d.records.0.clone());
    serde_json::json!({
        "object": "domain",
        "id": d.id.to_string(),
        "name": d.name,
        "status": d.status,
        "region": "us-east-1",
        "custom_return_path": d.return_path,
        "records": records,
        "dmarc": dmarc,
        "capabilities": domain_capabilities(),
        "created_at": crate::clock::rfc3339(d.created_at),
    })
}

/// Resend's `capabilities` of a domain: it sends; the service receives no
/// mail for it.
pub fn domain_capabilities() -> serde_json::Value {
    serde_json::json!({"sending": "enabled", "receiving": "disabled"})
}

/// Checks and normalises a domain name: lower-case, IDNA ASCII, at least
/// two labels of 1 to 63 letters, digits or hyphens (not at either end),
/// at most 253 characters.
pub fn normalize_domain_name(field: &str, text: &str) -> Result<String, Error> {
    let invalid = |why: &str| Error::validation(field, format!("`{text}` {why}"));
    let trimmed = text.trim().trim_end_matches('.');
    if trimmed.is_empty() {
        return Err(invalid("is not a domain name"));
    }
    let ascii =
        idna::domain_to_ascii(trimmed).map_err(|_| invalid("is not a valid (IDNA) domain name"))?;
    if ascii.len() > 253 {
        return Err(invalid("is longer than 253 characters"));
    }
    let labels: Vec<&str> = ascii.split('.').collect();
    if labels.len() < 2 {
        return Err(invalid("must have at least two labels (e.g. example.com)"));
    }
    for label in labels {
        if !label_ok(label) {
            return Err(invalid(
                "has a label that is not 1 to 63 letters, digits or hyphens (not at either end)",
            ));
        }
    }
    Ok(ascii)
}

/// Checks a custom return-path subdomain: one label.
pub fn validate_return_path(field: &str, text: &str) -> Result<String, Error> {
    let lower = text.to_ascii_lowercase();
    if label_ok(&lower) {
        Ok(lower)
    } else {
        Err(Error::validation(
            field,
            format!(
                "`{text}` must be one label of 1 to 63 letters, digits or hyphens (not at either end)"
            ),
        ))
    }
}

fn label_ok(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && !label.starts_with('-')
        && !label.ends_with('-')
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The records a new domain must publish, not started. `spf_host` is the
/// service's SPF include and bounce MX host.
pub fn records_for(
    return_path: &str,
    selector: &str,
    public_key_b64: &str,
    sending_host: &str,
) -> Vec<DnsRecord> {
    let record =
        |record: &str, name: String, record_type: &str, value: String, priority, required| {
            DnsRecord {
                record: record.into(),
                name,
                record_type: record_type.into(),
                ttl: "Auto".into(),
                status: RecordStatus::NotStarted,
                value,
                priority,
                required,
            }
        };
    vec![
        record(
            "SPF",
            return_path.to_string(),
            "MX",
            format!("feedback-smtp.{sending_host}"),
            Some(10),
            true,
        ),
        record(
            "SPF",
            return_path.to_string(),
            "TXT",
            format!("v=spf1 include:spf.{sending_host} ~all"),
            None,
            true,
        ),
        record(
            "DKIM",
            format!("{selector}._domainkey"),
            "TXT",
            format!("v=DKIM1; k=rsa; p={public_key_b64}"),
            None,
            true,
        ),
        record(
            "DMARC",
            "_dmarc".to_string(),
            "TXT",
            "v=DMARC1; p=none;".to_string(),
            None,
            false,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_names_are_normalised_and_checked() {
        let n = |s| normalize_domain_name("name", s);
        assert_eq!(n("Example.COM").unwrap(), "example.com");
        assert_eq!(n("bücher.example.").unwrap(), "xn--bcher-kva.example");
        for bad in [
            "",
            "localhost",
            "-a.example",
            "a-.example",
            "a..example",
            "a b.example",
            &format!("{}.example", "a".repeat(64)),
        ] {
            let err = n(bad).unwrap_err().to_string();
            assert!(err.starts_with("name: `"), "{bad}: {err}");
        }
        assert_eq!(
            validate_return_path("custom_return_path", "Bounce").unwrap(),
            "bounce"
        );
        assert!(validate_return_path("custom_return_path", "a.b").is_err());
        assert!(validate_return_path("custom_return_path", "").is_err());
    }

    #[test]
    fn the_domain_status_follows_its_required_records() {
        let with = |statuses: [RecordStatus; 4]| {
            let mut records = records_for("send", "s", "KEY", "mail.test");
            for (r, s) in records.iter_mut().zip(statuses) {
                r.status = s;
            }
            records
        };
        use RecordStatus::*;
        assert_eq!(
            domain_status(&with([Verified, Verified, Verified, Failed]), true),
            DomainStatus::Verified
        );
        assert_eq!(
            domain_status(&with([Verified, Failed, Verified, Verified]), true),
            DomainStatus::PartiallyVerified
        );
        assert_eq!(
            domain_status(&with([Verified, Failed, Verified, Verified]), false),
            DomainStatus::PartiallyFailed
        );
        assert_eq!(
            domain_status(&with([Failed, Failed, Failed, Verified]), true),
            DomainStatus::Pending
        );
        assert_eq!(
            domain_status(&with([Failed, Failed, Failed, Verified]), false),
            DomainStatus::Failed
        );
        assert_eq!(
            domain_status(&with([Verified, TemporaryFailure, Verified, Failed]), false),
            DomainStatus::TemporaryFailure
        );
    }
}

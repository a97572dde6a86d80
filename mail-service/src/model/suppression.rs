//! The Suppression resource and the one rule that makes an address one
//! entry: the local part is kept as given, the domain is lower-cased and
//! turned into its ASCII (IDNA) form.

use lettre::Address;
use serde::Serialize;

use crate::error::Error;
use crate::status::text_enum;

/// Longest `reason` accepted.
pub const MAX_SUPPRESSION_REASON_CHARS: usize = 256;

text_enum!(
    /// What put an address on the list (Resend's `origin`).
    SuppressionOrigin, "suppression origin" {
        /// Added through the API.
        Manual = "manual",
        /// A hard bounce of an email to it.
        Bounce = "bounce",
        /// A complaint about an email to it.
        Complaint = "complaint",
    }
);

/// A stored suppression.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Suppression {
    pub id: i64,
    /// The normalised address, in the case it was first suppressed with.
    pub email: String,
    pub reason: Option<String>,
    pub created_at: i64,
    pub origin: SuppressionOrigin,
    /// The email whose bounce or complaint added it; none for `manual`.
    pub source_id: Option<i64>,
}

/// What the list matches a normalised address by: every ASCII letter in
/// lower case, the local part's too. Mailbox providers treat local parts
/// case-insensitively in practice, so a suppressed mailbox is never mailed
/// again through a case variant (the safe side). Letters outside ASCII keep
/// their case (the same rule the migration applied with SQL's `lower`).
pub fn suppression_key(normalized: &str) -> String {
    normalized.to_ascii_lowercase()
}

/// Normalises a bare address given by a caller (`field` names it in the
/// error): `Ada@Exämple.TEST` → `Ada@xn--exmple-cua.test`.
pub fn normalize_address(field: &str, text: &str) -> Result<String, Error> {
    let invalid = |why: &str| Error::validation(field, format!("`{text}` {why}"));
    let trimmed = text.trim();
    let (local, domain) = trimmed
        .rsplit_once('@')
        .ok_or_else(|| invalid("is not an email address (no `@`)"))?;
    if local.is_empty() || domain.is_empty() {
        return Err(invalid("is not an email address"));
    }
    let ascii = idna::domain_to_ascii(domain)
        .map_err(|_| invalid("has a domain that is not a valid (IDNA) domain name"))?;
    let address = Address::new(local, &ascii)
        .map_err(|e| invalid(&format!("is not a valid email address ({e})")))?;
    Ok(address.to_string())
}

/// The normalised form of an address that already passed validation (a
/// recipient of an email).
pub fn normalized(address: &Address) -> String {
    let domain = address.domain();
    let ascii = idna::domain_to_ascii(domain).unwrap_or_else(|_| domain.to_ascii_lowercase());
    format!("{}@{}", address.user(), ascii)
}

/// Checks the optional `reason` of a new suppression.
pub fn validate_reason(reason: Option<&str>) -> Result<(), Error> {
    match reason {
        Some(r) if r.chars().count() > MAX_SUPPRESSION_REASON_CHARS => Err(Error::validation(
            "reason",
            format!("must be at most {MAX_SUPPRESSION_REASON_CHARS} characters"),
        )),
        Some(r) if r.chars().any(char::is_control) => Err(Error::validation(
            "reason",
            "must not contain control characters",
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_is_one_entry() {
        let n = |s| normalize_address("email", s).unwrap();
        assert_eq!(n("Ada@Example.TEST"), "Ada@example.test");
        assert_eq!(n(" ada@example.test "), "ada@example.test");
        assert_eq!(n("ada@EXÄMPLE.test"), n("ada@xn--exmple-cua.test"));
        assert_eq!(n("ada@bücher.example"), "ada@xn--bcher-kva.example");
        // The local part is the mailbox owner's: it keeps its case.
        assert_ne!(n("Ada@example.test"), n("ada@example.test"));
        // ... but the list matches it whatever its case.
        assert_eq!(
            suppression_key(&n("Ada@Example.TEST")),
            suppression_key(&n("ada@example.test"))
        );
        let parsed: Address = "Ada@BÜCHER.example".parse().unwrap();
        assert_eq!(normalized(&parsed), n("Ada@bücher.example"));
    }

    #[test]
    fn refusals_name_the_field() {
        for bad in [
            "",
            "ada",
            "@example.test",
            "ada@",
            "a b@example.test",
            "ada@exa mple.test",
        ] {
            let err = normalize_address("email", bad).unwrap_err().to_string();
            assert!(err.starts_with("email: `"), "{bad}: {err}");
        }
        assert!(validate_reason(Some(&"x".repeat(257))).is_err());
        assert!(validate_reason(Some("bounced\n")).is_err());
        assert!(validate_reason(Some("hard bounce")).is_ok());
    }
}

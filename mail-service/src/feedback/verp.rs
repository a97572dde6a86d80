//! Return-path tokens (VERP): every outgoing message's envelope sender is
//! `bounces+<email id>-<tag>@<return-path domain>`, where the tag is the
//! first 80 bits of HMAC-SHA256(key, "<email id>@<return-path domain>"),
//! base32. A report sent back to that address names its email without a
//! look-up, and nobody without the key can make an address that names
//! another email or another domain. The local part is at most
//! `8 + 19 + 1 + 16 = 44` characters (SMTP allows 64).

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Local-part prefix of every return path.
pub const LOCAL_PREFIX: &str = "bounces+";
/// Bytes of the HMAC kept in the tag.
const TAG_BYTES: usize = 10;

/// The key of the tokens (shared by every node through the database).
/// `Debug` never shows it.
#[derive(Clone)]
pub struct VerpKey(Vec<u8>);

impl std::fmt::Debug for VerpKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VerpKey(<redacted>)")
    }
}

/// Why an address is not a valid return path of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(
        "`{0}` is not a return-path address of this service (no `bounces+<id>-<tag>` local part)"
    )]
    NotOurs(String),
    #[error(
        "the return-path token of `{0}` does not match its email and domain (forged or altered)"
    )]
    Mismatch(String),
}

/// An address that passed the check: the email it names and the domain it
/// was sent on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub email_id: i64,
    pub domain: String,
}

impl VerpKey {
    pub fn new(key: &[u8]) -> VerpKey {
        VerpKey(key.to_vec())
    }

    fn mac(&self, email_id: i64, domain: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any size");
        mac.update(format!("{email_id}@{}", domain.to_ascii_lowercase()).as_bytes());
        mac
    }

    /// The return path of email `email_id` on `domain` (the sending
    /// domain's return-path subdomain, e.g. `send.acme.example`).
    pub fn return_path(&self, email_id: i64, domain: &str) -> String {
        let tag = self.mac(email_id, domain).finalize().into_bytes();
        let tag = data_encoding::BASE32_NOPAD
            .encode(&tag[..TAG_BYTES])
            .to_ascii_lowercase();
        format!(
            "{LOCAL_PREFIX}{email_id}-{tag}@{}",
            domain.to_ascii_lowercase()
        )
    }

    /// Checks an address (`<...>` and spaces allowed around it): which
    /// email it names, if the tag is right. The comparison is in constant
    /// time; the case of the address does not matter (relays may change it).
    pub fn verify(&self, address: &str) -> Result<Verified, TokenError> {
        let trimmed = address
            .trim()
            .trim_start_matches('<')
            .trim_end_matches('>')
            .trim();
        let not_ours = || TokenError::NotOurs(trimmed.chars().take(200).collect());
        let (local, domain) = trimmed.rsplit_once('@').ok_or_else(not_ours)?;
        let rest = local
            .get(..LOCAL_PREFIX.len())
            .filter(|p| p.eq_ignore_ascii_case(LOCAL_PREFIX))
            .map(|_| &local[LOCAL_PREFIX.len()..])
            .ok_or_else(not_ours)?;
        let (id, tag) = rest.split_once('-').ok_or_else(not_ours)?;
        let email_id: i64 = id
            .parse()
            .ok()
            .filter(|n| *n > 0 && id.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(not_ours)?;
        if domain.is_empty() {
            return Err(not_ours());
        }
        let tag = data_encoding::BASE32_NOPAD
            .decode(tag.to_ascii_uppercase().as_bytes())
            .ok()
            .filter(|t| t.len() == TAG_BYTES)
            .ok_or_else(|| TokenError::Mismatch(trimmed.to_string()))?;
        self.mac(email_id, domain)
            .verify_truncated_left(&tag)
            .map_err(|_| TokenError::Mismatch(trimmed.to_string()))?;
        Ok(Verified {
            email_id,
            domain: domain.to_ascii_lowercase(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_return_path_names_its_email_and_nothing_else() {
        let key = VerpKey::new(b"k1");
        let rp = key.return_path(382405310377107456, "send.Acme.test");
        assert!(rp.starts_with("bounces+382405310377107456-"), "{rp}");
        assert!(rp.ends_with("@send.acme.test"), "{rp}");
        assert!(rp.split('@').next().unwrap().len() <= 64);
        assert_eq!(
            key.verify(&format!("<{}>", rp.to_uppercase())).unwrap(),
            Verified {
                email_id: 382405310377107456,
                domain: "send.acme.test".into()
            }
        );
        // Another key, another id, another domain: refused.
        assert!(matches!(
            VerpKey::new(b"k2").verify(&rp),
            Err(TokenError::Mismatch(_))
        ));
        let other_id = rp.replace("382405310377107456", "382405310377107457");
        assert!(matches!(
            key.verify(&other_id),
            Err(TokenError::Mismatch(_))
        ));
        let other_domain = rp.replace("acme.test", "evil.test");
        assert!(matches!(
            key.verify(&other_domain),
            Err(TokenError::Mismatch(_))
        ));
        for not_ours in [
            "postmaster@acme.test",
            "bounces+x-y@acme.test",
            "bounces+1@a",
            "",
        ] {
            assert!(
                matches!(key.verify(not_ours), Err(TokenError::NotOurs(_))),
                "{not_ours}"
            );
        }
        assert_eq!(format!("{key:?}"), "VerpKey(<redacted>)");
    }
}

//! The TXT challenge that proves a project's operator controls a hostname's
//! DNS: `HMAC-SHA-256(host key, project id ‖ hostname)`, so the value for
//! one project cannot be replayed for another, nor for another hostname.

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub use crate::state::tracking::CHALLENGE_KEY_LEN as KEY_LEN;

/// The label under the hostname that holds the challenge.
pub const CHALLENGE_LABEL: &str = "_host-sim-challenge";

/// The prefix of the challenge's TXT value.
pub const CHALLENGE_PREFIX: &str = "host-sim-verify=";

/// The name of the TXT record for `hostname` (normalised).
pub fn challenge_name(hostname: &str) -> String {
    format!("{CHALLENGE_LABEL}.{hostname}")
}

/// The TXT value that binds `hostname` (normalised) to `project`, under the
/// host's challenge key. The key never leaves the state; the value is
/// public.
pub fn challenge_value(key: &[u8; KEY_LEN], project: &str, hostname: &str) -> String {
    let mut mac = <Hmac<Sha256> as hmac::digest::KeyInit>::new(key.into());
    // A separator no project id or hostname holds keeps the pair unambiguous.
    mac.update(project.as_bytes());
    mac.update(b"\n");
    mac.update(hostname.as_bytes());
    format!(
        "{CHALLENGE_PREFIX}{}",
        hex::encode(mac.finalize().into_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_is_bound_to_the_project_the_hostname_and_the_key() {
        let key = &[7u8; KEY_LEN];
        let value = challenge_value(key, "p1", "track.shop.example");
        assert!(value.starts_with(CHALLENGE_PREFIX) && value.len() == CHALLENGE_PREFIX.len() + 64);
        assert_eq!(value, challenge_value(key, "p1", "track.shop.example"));
        assert_ne!(value, challenge_value(key, "p2", "track.shop.example"));
        assert_ne!(value, challenge_value(key, "p1", "t.shop.example"));
        assert_ne!(
            value,
            challenge_value(&[8u8; KEY_LEN], "p1", "track.shop.example")
        );
        assert_eq!(
            challenge_name("track.shop.example"),
            "_host-sim-challenge.track.shop.example"
        );
    }
}

//! The release format of platform extensions.
//!
//! A **release** is a directory holding `manifest.toml`, `manifest.toml.sig`
//! and the files the manifest lists (the component and the panel assets).
//! The manifest's `[release.files]` table holds the SHA-256 of every file;
//! the signature is an Ed25519 signature by a publisher key over the exact
//! bytes of `manifest.toml`. So one signature covers every byte of every file.
//!
//! - [`Manifest`]: the model of `manifest.toml` and its validation;
//!   [`ManifestError`]: a refusal located by line, column and table, and
//!   [`ManifestError::render`], the one text every tool shows for it.
//! - [`PublisherKey`], [`TrustStore`]: publisher keys and the keys a host trusts.
//! - [`write_release`], [`ReleaseBundle::verify`]: producing and checking a release.
//! - [`component`]: what a component imports and exports, checked against the
//!   capabilities its manifest declares.

pub mod component;
mod diagnostic;
mod manifest;
mod pattern;
mod release;
mod signing;

pub use diagnostic::{ManifestError, ManifestErrorKind, Position};
pub use manifest::{
    Action, ActionRoute, Capabilities, DocumentsCapability, ExtensionInfo, HttpCapability,
    HttpRule, Manifest, PanelInfo, ReleaseInfo,
};
pub use pattern::{PathPattern, PatternError};
pub use release::{
    MANIFEST_FILE, ReleaseBundle, SIGNATURE_FILE, VerifiedRelease, VerifyError, WriteError,
    WrittenRelease, sign_dir, sign_manifest, write_release,
};
pub use signing::{KeyError, KeyId, PublicKey, PublisherKey, TrustStore};

/// The WIT package every extension is built against (see `wit/`).
pub const WIT_PACKAGE: &str = "platform:extension";

/// The version of [`WIT_PACKAGE`] this workspace defines in `wit/extension-host.wit`.
pub const WIT_VERSION: &str = "0.1.0";

/// SHA-256 of `bytes` as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    #[test]
    fn wit_version_matches_the_wit_package() {
        let wit = include_str!("../../../wit/extension-host.wit");
        let expected = format!("package {}@{};", super::WIT_PACKAGE, super::WIT_VERSION);
        assert!(
            wit.lines().any(|line| line.trim() == expected),
            "wit/extension-host.wit must declare `{expected}`"
        );
    }
}

//! An operator receives a signed release: it verifies with the trusted
//! publisher key, its component imports only what the host offers, and any
//! change to any byte of any file, or a signature by another key, is caught.

use std::collections::BTreeSet;

use extension_release::component::{self, ALLOWED_WASI_INTERFACES};
use extension_release::{
    MANIFEST_FILE, PublisherKey, ReleaseBundle, SIGNATURE_FILE, TrustStore, VerifyError,
    WIT_VERSION,
};
use workspace_tests::{copy_release, release_dir, trusted_keys_dir};

fn trust() -> TrustStore {
    let store = TrustStore::load_dir(&trusted_keys_dir()).unwrap();
    assert!(!store.is_empty(), "no trusted publisher key was written");
    store
}

fn verify(dir: &std::path::Path, trust: &TrustStore) -> Result<(), VerifyError> {
    ReleaseBundle::read_dir(dir)?.verify(trust).map(|_| ())
}

#[test]
fn the_release_verifies_and_its_component_imports_only_what_the_host_offers() {
    let verified = ReleaseBundle::read_dir(&release_dir())
        .unwrap()
        .verify(&trust())
        .unwrap();
    let manifest = &verified.manifest;
    let listed = &manifest.release.as_ref().unwrap().files;
    assert!(listed.contains_key("plugin.wasm"));
    assert!(listed.contains_key("panel/index.html"));
    assert!(listed.contains_key("panel/panel_bg.wasm"));

    let info = component::inspect(verified.component()).unwrap();
    component::check_against_manifest(manifest, &info, &[WIT_VERSION]).unwrap();
    assert_eq!(info.wit_version(), Some(WIT_VERSION));
    let host: BTreeSet<String> = ["context", "http-binding", "documents", "log"]
        .iter()
        .map(|i| format!("platform:extension/{i}@{WIT_VERSION}"))
        .collect();
    for import in &info.imports {
        let interface = import.split('@').next().unwrap();
        assert!(
            host.contains(import) || ALLOWED_WASI_INTERFACES.contains(&interface),
            "unexpected import {import}"
        );
        assert!(!import.starts_with("wasi:sockets") && !import.starts_with("wasi:http"));
    }
    // The plugin is a bare module, not a wasip1 one behind the preview1
    // adapter: of WASI it imports the wall clock only.
    let wasi: Vec<&str> = info
        .imports
        .iter()
        .filter(|import| import.starts_with("wasi:"))
        .map(|import| import.split('@').next().unwrap())
        .collect();
    assert_eq!(wasi, ["wasi:clocks/wall-clock"]);
    assert_eq!(
        info.exports,
        vec![format!("platform:extension/extension@{WIT_VERSION}")]
    );
}

#[test]
fn changing_any_byte_of_any_file_is_detected() {
    let trust = trust();
    let files: Vec<String> = {
        let verified = ReleaseBundle::read_dir(&release_dir()).unwrap();
        let mut files: Vec<String> = verified.files.keys().cloned().collect();
        files.extend([MANIFEST_FILE.to_owned(), SIGNATURE_FILE.to_owned()]);
        files
    };
    for file in &files {
        let len = std::fs::metadata(release_dir().join(file)).unwrap().len() as usize;
        for position in [0, len / 2, len - 1] {
            let tmp = tempfile::tempdir().unwrap();
            let dir = copy_release(tmp.path());
            let path = dir.join(file);
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[position] ^= 0x01;
            std::fs::write(&path, &bytes).unwrap();
            let err = verify(&dir, &trust).expect_err(&format!("{file}@{position} changed"));
            let expected = match file.as_str() {
                MANIFEST_FILE => matches!(err, VerifyError::BadSignature { .. }),
                SIGNATURE_FILE => matches!(
                    err,
                    VerifyError::BadSignature { .. }
                        | VerifyError::SignatureFormat
                        | VerifyError::UntrustedKey { .. }
                        | VerifyError::SignedByAnotherKey { .. }
                        | VerifyError::KeyMismatch { .. }
                ),
                _ => matches!(&err, VerifyError::DigestMismatch { path, .. } if path == file),
            };
            assert!(expected, "{file}@{position}: unexpected error {err}");
        }
    }
}

#[test]
fn added_and_removed_files_are_detected() {
    let trust = trust();
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release(tmp.path());
    std::fs::write(dir.join("panel/extra.js"), "alert(1)").unwrap();
    assert!(matches!(
        verify(&dir, &trust),
        Err(VerifyError::UnlistedFile(path)) if path == "panel/extra.js"
    ));

    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release(tmp.path());
    std::fs::remove_file(dir.join("plugin.wasm")).unwrap();
    assert!(matches!(
        verify(&dir, &trust),
        Err(VerifyError::MissingFile(path)) if path == "plugin.wasm"
    ));
}

#[test]
fn a_release_signed_by_an_untrusted_key_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_release(tmp.path());
    let stranger = PublisherKey::generate();
    // Sign the very same manifest with a key the host does not trust.
    let manifest = std::fs::read(dir.join(MANIFEST_FILE)).unwrap();
    std::fs::write(
        dir.join(SIGNATURE_FILE),
        extension_release::sign_manifest(&manifest, &stranger),
    )
    .unwrap();
    let err = verify(&dir, &trust()).unwrap_err();
    assert!(
        matches!(&err, VerifyError::UntrustedKey { key_id } if *key_id == stranger.public().key_id()),
        "{err}"
    );
    assert!(err.to_string().contains("does not trust"), "{err}");
    // And it verifies once the operator trusts that key.
    verify(&dir, &TrustStore::from_keys([stranger.public()])).unwrap();
}

//! Release verification: a signed release with any change is never
//! accepted.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use extension_release::{Manifest, PublisherKey, ReleaseBundle, TrustStore, write_release};

/// The source manifest of the workspace's extension.
const SOURCE_MANIFEST: &str = include_str!("../../manifest.toml");

/// One signed release (every file the manifest names, plus a panel asset)
/// and a trust store holding its publisher's key.
fn signed() -> &'static (ReleaseBundle, TrustStore) {
    static SIGNED: OnceLock<(ReleaseBundle, TrustStore)> = OnceLock::new();
    SIGNED.get_or_init(|| {
        let manifest = Manifest::from_toml(SOURCE_MANIFEST).expect("the workspace manifest");
        let mut files: BTreeMap<String, Vec<u8>> = manifest
            .required_files()
            .map(|(field, path)| {
                (
                    path.clone(),
                    format!("{field} of the fuzzed release").into(),
                )
            })
            .collect();
        files.insert("panel/style.css".into(), b"body { margin: 0 }".to_vec());
        let key = PublisherKey::generate();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let out = dir.path().join("release");
        write_release(SOURCE_MANIFEST, &files, &key, &out).expect("a signed release");
        let bundle = ReleaseBundle::read_dir(&out).expect("the release reads back");
        let trust = TrustStore::from_keys([key.public()]);
        bundle
            .clone()
            .verify(&trust)
            .expect("the unchanged release verifies");
        (bundle, trust)
    })
}

/// First byte even: the rest is a list of 4-byte edits applied to a
/// genuine signed release (a byte of the manifest, of the signature file or
/// of a file set, removed or inserted; a file renamed, added or dropped).
/// A release that still verifies is byte for byte the one that was
/// signed. Odd: the rest is a manifest's text, read as the host reads one,
/// and a signature file beside the genuine manifest: never a panic.
pub fn release_verify(data: &[u8]) {
    let (genuine, trust) = signed();
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 1 {
        if let Some(text) = crate::text(rest) {
            let _ = Manifest::from_toml(text);
            let forged = ReleaseBundle {
                signature: text.to_string(),
                ..genuine.clone()
            };
            if forged.verify(trust).is_ok() {
                assert_eq!(text, genuine.signature, "another signature file verifies");
            }
        }
        return;
    }
    let mut bundle = genuine.clone();
    for edit in rest.chunks_exact(4) {
        apply(&mut bundle, edit);
    }
    if let Ok(verified) = bundle.clone().verify(trust) {
        assert!(
            verified.manifest_bytes == genuine.manifest_bytes
                && verified.signature == genuine.signature
                && verified.files == genuine.files,
            "a changed release verifies"
        );
    }
}

/// One edit `[what, at_hi, at_lo, value]`.
fn apply(bundle: &mut ReleaseBundle, edit: &[u8]) {
    let (what, value) = (edit[0], edit[3]);
    let at = usize::from(u16::from_be_bytes([edit[1], edit[2]]));
    let edit_bytes = |bytes: &mut Vec<u8>| match what >> 4 & 3 {
        0 if !bytes.is_empty() => {
            let i = at % bytes.len();
            bytes[i] = value;
        }
        1 if !bytes.is_empty() => {
            bytes.remove(at % bytes.len());
        }
        _ => bytes.insert(at % (bytes.len() + 1), value),
    };
    match what % 6 {
        0 => edit_bytes(&mut bundle.manifest_bytes),
        1 => {
            let mut signature = std::mem::take(&mut bundle.signature).into_bytes();
            edit_bytes(&mut signature);
            bundle.signature = String::from_utf8_lossy(&signature).into_owned();
        }
        2 => {
            let paths: Vec<String> = bundle.files.keys().cloned().collect();
            if let Some(path) = paths.get(at % paths.len().max(1)) {
                edit_bytes(bundle.files.get_mut(path).expect("listed"));
            }
        }
        3 => {
            let paths: Vec<String> = bundle.files.keys().cloned().collect();
            if let Some(path) = paths.get(at % paths.len().max(1)) {
                let bytes = bundle.files.remove(path).expect("listed");
                let mut renamed = path.clone().into_bytes();
                edit_bytes(&mut renamed);
                bundle
                    .files
                    .insert(String::from_utf8_lossy(&renamed).into_owned(), bytes);
            }
        }
        4 => {
            bundle
                .files
                .insert(format!("panel/extra-{value}.js"), vec![value; at % 64]);
        }
        _ => {
            let paths: Vec<String> = bundle.files.keys().cloned().collect();
            if let Some(path) = paths.get(at % paths.len().max(1)) {
                bundle.files.remove(path);
            }
        }
    }
}

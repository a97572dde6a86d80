//! Writing a signed release and verifying one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::diagnostic::ManifestError;
use crate::manifest::{Manifest, is_release_path};
use crate::signing::{KeyId, PublicKey, PublisherKey, TrustStore};

pub const MANIFEST_FILE: &str = "manifest.toml";
pub const SIGNATURE_FILE: &str = "manifest.toml.sig";

/// What [`write_release`] produced.
#[derive(Debug, Clone)]
pub struct WrittenRelease {
    pub dir: PathBuf,
    pub key_id: KeyId,
    /// Path inside the release → SHA-256 hex.
    pub files: BTreeMap<String, String>,
    /// SHA-256 of the signed manifest bytes.
    pub manifest_digest: String,
}

/// A release read into memory, not yet trusted.
#[derive(Debug, Clone)]
pub struct ReleaseBundle {
    pub manifest_bytes: Vec<u8>,
    pub signature: String,
    /// Every other file of the release, by path inside the release.
    pub files: BTreeMap<String, Vec<u8>>,
}

/// A release whose signature, digests and file list were checked.
#[derive(Debug, Clone)]
pub struct VerifiedRelease {
    pub manifest: Manifest,
    pub manifest_bytes: Vec<u8>,
    pub signature: String,
    pub files: BTreeMap<String, Vec<u8>>,
    pub key_id: KeyId,
}

impl VerifiedRelease {
    pub fn component(&self) -> &[u8] {
        &self.files[&self.manifest.extension.component]
    }

    /// SHA-256 of the signed manifest: identifies this release.
    pub fn digest(&self) -> String {
        crate::sha256_hex(&self.manifest_bytes)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot read the release at {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("the release has no {0}")]
    Missing(&'static str),
    #[error("{SIGNATURE_FILE} is not `ed25519 <key id> <base64 signature> <base64 public key>`")]
    SignatureFormat,
    #[error("the release is signed by key {key_id}, which this host does not trust")]
    UntrustedKey { key_id: KeyId },
    /// `certain`: the signature file carries the trusted key itself, so the
    /// signature was made with it and the manifest changed since; a
    /// signature without its public key (the older format) cannot tell that
    /// from a signature by another key under this key's id.
    #[error(
        "the signature of {MANIFEST_FILE} does not verify with key {key_id}: {}",
        if *certain {
            "the manifest was changed after signing"
        } else {
            "the manifest was changed after signing, or another key signed it"
        }
    )]
    BadSignature { key_id: KeyId, certain: bool },
    #[error(
        "{SIGNATURE_FILE} names key {named}, but the signature was made with key {signer}: \
         sign again with the key {named}, or have the operator trust {signer}"
    )]
    SignedByAnotherKey { named: KeyId, signer: KeyId },
    #[error(
        "{SIGNATURE_FILE} names key {named} but carries the public key {carried}, \
         and the signature verifies with neither: the file was altered"
    )]
    KeyMismatch { named: KeyId, carried: KeyId },
    #[error("the signed manifest is invalid: {0}")]
    Manifest(#[from] ManifestError),
    #[error("the signed manifest has no [release.files] table")]
    NoFileList,
    #[error("the manifest lists `{0}`, which the release does not contain")]
    MissingFile(String),
    #[error("`{0}` is in the release but not listed in the signed manifest")]
    UnlistedFile(String),
    #[error(
        "`{path}` does not match its SHA-256 in the signed manifest (expected {expected}, found {found})"
    )]
    DigestMismatch {
        path: String,
        expected: String,
        found: String,
    },
    #[error("the manifest's {field} `{path}` is not listed in [release.files]")]
    Unlisted { field: &'static str, path: String },
}

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("source manifest: {0}")]
    Manifest(#[from] ManifestError),
    #[error("the source manifest must not contain a [release] table; the release build writes it")]
    HasReleaseTable,
    #[error("`{0}` is not a relative path inside the release")]
    BadPath(String),
    #[error("the release does not contain the {field} `{path}`")]
    MissingFile { field: &'static str, path: String },
    #[error("cannot read the release's files: {0}")]
    Read(String),
    #[error("{dir} has no {MANIFEST_FILE}")]
    NoManifest { dir: String },
    #[error("cannot write {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// One `manifest.toml.sig`: the id of the key it names, the signature and,
/// since signatures carry it, the public key that made it (which lets a
/// refusal tell "another key signed" from "the manifest changed").
struct SignatureFile {
    key_id: KeyId,
    signature: [u8; 64],
    public: Option<PublicKey>,
}

fn signature_line(file: &SignatureFile) -> String {
    let mut line = format!("ed25519 {} {}", file.key_id, BASE64.encode(file.signature));
    if let Some(public) = &file.public {
        line.push(' ');
        line.push_str(&public.to_base64());
    }
    line.push('\n');
    line
}

/// The text of `manifest.toml.sig` for `manifest_bytes` signed by `key`.
pub fn sign_manifest(manifest_bytes: &[u8], key: &PublisherKey) -> String {
    signature_line(&SignatureFile {
        key_id: key.public().key_id(),
        signature: key.sign(manifest_bytes),
        public: Some(key.public()),
    })
}

/// Parses exactly what [`signature_line`] writes (with or without the
/// public key): one line, single spaces, one trailing newline. Any other
/// byte makes the file invalid, so no byte of it can change unnoticed.
fn parse_signature(text: &str) -> Option<SignatureFile> {
    let mut parts = text.strip_suffix('\n')?.split(' ');
    if parts.next()? != "ed25519" {
        return None;
    }
    let key_id = KeyId::parse(parts.next()?)?;
    let signature: [u8; 64] = BASE64.decode(parts.next()?).ok()?.try_into().ok()?;
    let public = match parts.next() {
        None => None,
        Some(key) => Some(PublicKey::from_base64(key)?),
    };
    let parsed = parts.next().is_none().then_some(SignatureFile {
        key_id,
        signature,
        public,
    })?;
    (signature_line(&parsed) == text).then_some(parsed)
}

/// Checks `file` over `manifest` against the trusted keys: the key it names
/// must be trusted, the key it carries (if any) must be that key, and the
/// signature must verify with it. A refusal says which of these failed.
fn check_signature(
    file: &SignatureFile,
    manifest: &[u8],
    trust: &TrustStore,
) -> Result<(), VerifyError> {
    let named = file.key_id;
    if let Some(carried) = &file.public
        && carried.key_id() != named
    {
        return Err(if carried.verify(manifest, &file.signature) {
            VerifyError::SignedByAnotherKey {
                named,
                signer: carried.key_id(),
            }
        } else {
            VerifyError::KeyMismatch {
                named,
                carried: carried.key_id(),
            }
        });
    }
    let key = trust
        .get(&named)
        .ok_or(VerifyError::UntrustedKey { key_id: named })?;
    if let Some(carried) = &file.public
        && carried != key
    {
        // The same 8-byte id for another key: no signature by the trusted key.
        return Err(VerifyError::KeyMismatch {
            named,
            carried: carried.key_id(),
        });
    }
    if !key.verify(manifest, &file.signature) {
        return Err(VerifyError::BadSignature {
            key_id: named,
            certain: file.public.is_some(),
        });
    }
    Ok(())
}

/// The exact manifest bytes a release signs: the source manifest followed by
/// the generated `[release.files]` table (sorted by path). Deterministic for
/// the same inputs.
fn release_manifest_text(source: &str, files: &BTreeMap<String, String>) -> String {
    let mut text = source.trim_end().to_owned();
    text.push_str(
        "\n\n# Written by the release build: the SHA-256 of every file of this release.\n\
         # The Ed25519 signature in manifest.toml.sig covers these exact bytes.\n\
         [release.files]\n",
    );
    for (path, digest) in files {
        text.push_str(&format!("{} = \"{digest}\"\n", toml_key(path)));
    }
    text
}

fn toml_key(path: &str) -> String {
    serde_json::to_string(path).expect("a string always serializes")
}

/// Writes a signed release into `out_dir` (created; an existing release
/// there is replaced): `manifest.toml` (the source manifest plus
/// `[release.files]`), `manifest.toml.sig` and every file of `files`.
pub fn write_release(
    source_manifest: &str,
    files: &BTreeMap<String, Vec<u8>>,
    key: &PublisherKey,
    out_dir: &Path,
) -> Result<WrittenRelease, WriteError> {
    let manifest = Manifest::from_toml(source_manifest)?;
    if manifest.release.is_some() {
        return Err(WriteError::HasReleaseTable);
    }
    for path in files.keys() {
        if !is_release_path(path) || path == MANIFEST_FILE || path == SIGNATURE_FILE {
            return Err(WriteError::BadPath(path.clone()));
        }
    }
    for (field, path) in manifest.required_files() {
        if !files.contains_key(path) {
            return Err(WriteError::MissingFile {
                field,
                path: path.clone(),
            });
        }
    }
    let digests: BTreeMap<String, String> = files
        .iter()
        .map(|(path, bytes)| (path.clone(), crate::sha256_hex(bytes)))
        .collect();
    let text = release_manifest_text(source_manifest, &digests);
    // The written manifest must itself be valid (it is what hosts parse).
    Manifest::from_toml(&text)?;
    let key_id = key.public().key_id();

    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| WriteError::Io { path, source }
    };
    if out_dir.exists() {
        std::fs::remove_dir_all(out_dir).map_err(io(out_dir))?;
    }
    std::fs::create_dir_all(out_dir).map_err(io(out_dir))?;
    for (path, bytes) in files {
        let target = out_dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&target, bytes).map_err(io(&target))?;
    }
    let manifest_path = out_dir.join(MANIFEST_FILE);
    std::fs::write(&manifest_path, &text).map_err(io(&manifest_path))?;
    let sig_path = out_dir.join(SIGNATURE_FILE);
    std::fs::write(&sig_path, sign_manifest(text.as_bytes(), key)).map_err(io(&sig_path))?;
    Ok(WrittenRelease {
        dir: out_dir.to_owned(),
        key_id,
        files: digests,
        manifest_digest: crate::sha256_hex(text.as_bytes()),
    })
}

/// Signs the release staged in `dir` in place: `dir` holds the source
/// `manifest.toml` (without a `[release]` table) and every file of the
/// release (the component, the panel's files). A `manifest.toml.sig` left
/// from an earlier signing is replaced. The signed release is written beside
/// `dir` first and then takes its place, so a failure leaves `dir` as it was.
pub fn sign_dir(dir: &Path, key: &PublisherKey) -> Result<WrittenRelease, WriteError> {
    let mut files = BTreeMap::new();
    read_tree(dir, dir, &mut files).map_err(|e| WriteError::Read(e.to_string()))?;
    let source = files
        .remove(MANIFEST_FILE)
        .ok_or_else(|| WriteError::NoManifest {
            dir: dir.display().to_string(),
        })?;
    files.remove(SIGNATURE_FILE);
    let source = String::from_utf8(source)
        .map_err(|_| WriteError::Manifest(ManifestError::syntax("not UTF-8")))?;
    // The real path: `.` or `..` name no directory to put beside.
    let real = dir
        .canonicalize()
        .map_err(|e| WriteError::Read(format!("{}: {e}", dir.display())))?;
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| WriteError::BadPath(dir.display().to_string()))?;
    let staging = real.with_file_name(format!(".{name}.signing"));
    let written = write_release(&source, &files, key, &staging);
    let written = match written {
        Ok(written) => written,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
    };
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| WriteError::Io { path, source }
    };
    let previous = real.with_file_name(format!(".{name}.unsigned"));
    if previous.exists() {
        std::fs::remove_dir_all(&previous).map_err(io(&previous))?;
    }
    std::fs::rename(&real, &previous).map_err(io(dir))?;
    std::fs::rename(&staging, &real).map_err(io(dir))?;
    std::fs::remove_dir_all(&previous).map_err(io(&previous))?;
    Ok(WrittenRelease {
        dir: dir.to_owned(),
        ..written
    })
}

impl ReleaseBundle {
    /// Reads every file under `dir`. Symbolic links are refused.
    pub fn read_dir(dir: &Path) -> Result<Self, VerifyError> {
        let mut files = BTreeMap::new();
        read_tree(dir, dir, &mut files)?;
        let manifest_bytes = files
            .remove(MANIFEST_FILE)
            .ok_or(VerifyError::Missing(MANIFEST_FILE))?;
        let signature = files
            .remove(SIGNATURE_FILE)
            .ok_or(VerifyError::Missing(SIGNATURE_FILE))?;
        let signature = String::from_utf8(signature).map_err(|_| VerifyError::SignatureFormat)?;
        Ok(Self {
            manifest_bytes,
            signature,
            files,
        })
    }

    /// Checks, in this order: the signature's format, that its key is
    /// trusted, the signature over the manifest bytes, the manifest, and then
    /// that the files are exactly those listed, each with its digest.
    pub fn verify(self, trust: &TrustStore) -> Result<VerifiedRelease, VerifyError> {
        let file = parse_signature(&self.signature).ok_or(VerifyError::SignatureFormat)?;
        check_signature(&file, &self.manifest_bytes, trust)?;
        let key_id = file.key_id;
        let text = std::str::from_utf8(&self.manifest_bytes)
            .map_err(|_| VerifyError::Manifest(ManifestError::syntax("not UTF-8")))?;
        let manifest = Manifest::from_toml(text)?;
        let listed = &manifest
            .release
            .as_ref()
            .ok_or(VerifyError::NoFileList)?
            .files;
        for (path, expected) in listed {
            let bytes = self
                .files
                .get(path)
                .ok_or_else(|| VerifyError::MissingFile(path.clone()))?;
            let found = crate::sha256_hex(bytes);
            if &found != expected {
                return Err(VerifyError::DigestMismatch {
                    path: path.clone(),
                    expected: expected.clone(),
                    found,
                });
            }
        }
        if let Some(extra) = self.files.keys().find(|p| !listed.contains_key(*p)) {
            return Err(VerifyError::UnlistedFile(extra.clone()));
        }
        for (field, path) in manifest.required_files() {
            if !listed.contains_key(path) {
                return Err(VerifyError::Unlisted {
                    field,
                    path: path.clone(),
                });
            }
        }
        Ok(VerifiedRelease {
            manifest,
            manifest_bytes: self.manifest_bytes,
            signature: self.signature,
            files: self.files,
            key_id,
        })
    }
}

fn read_tree(
    root: &Path,
    dir: &Path,
    files: &mut BTreeMap<String, Vec<u8>>,
) -> Result<(), VerifyError> {
    let read_err = |path: &Path, reason: String| VerifyError::Read {
        path: path.display().to_string(),
        reason,
    };
    let entries = std::fs::read_dir(dir).map_err(|e| read_err(dir, e.to_string()))?;
    for entry in entries {
        let entry = entry.map_err(|e| read_err(dir, e.to_string()))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| read_err(&path, e.to_string()))?;
        if kind.is_dir() {
            read_tree(root, &path, files)?;
        } else if kind.is_file() {
            let relative = path
                .strip_prefix(root)
                .expect("walked below the root")
                .to_str()
                .ok_or_else(|| read_err(&path, "the file name is not UTF-8".into()))?
                .replace(std::path::MAIN_SEPARATOR, "/");
            let bytes = std::fs::read(&path).map_err(|e| read_err(&path, e.to_string()))?;
            files.insert(relative, bytes);
        } else {
            return Err(read_err(&path, "symbolic links are not allowed".into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = include_str!("../../../manifest.toml");

    fn sample_files() -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([
            ("plugin.wasm".to_owned(), b"\0asm component bytes".to_vec()),
            ("panel/index.html".to_owned(), b"<!doctype html>".to_vec()),
            ("panel/panel.js".to_owned(), b"export default 1".to_vec()),
        ])
    }

    #[test]
    fn a_written_release_verifies_and_is_deterministic() {
        let key = PublisherKey::generate();
        let trust = TrustStore::from_keys([key.public()]);
        let dir = tempfile::tempdir().unwrap();
        let a = write_release(SOURCE, &sample_files(), &key, &dir.path().join("a")).unwrap();
        let b = write_release(SOURCE, &sample_files(), &key, &dir.path().join("b")).unwrap();
        assert_eq!(a.manifest_digest, b.manifest_digest);
        let verified = ReleaseBundle::read_dir(&a.dir)
            .unwrap()
            .verify(&trust)
            .unwrap();
        assert_eq!(verified.component(), b"\0asm component bytes");
        assert_eq!(verified.files.len(), 3);
        assert_eq!(verified.key_id, key.public().key_id());
    }

    #[test]
    fn a_release_without_its_component_is_not_written() {
        let key = PublisherKey::generate();
        let dir = tempfile::tempdir().unwrap();
        let mut files = sample_files();
        files.remove("plugin.wasm");
        let err = write_release(SOURCE, &files, &key, dir.path()).unwrap_err();
        assert!(err.to_string().contains("plugin.wasm"), "{err}");
    }

    #[test]
    fn a_staged_release_is_signed_in_place() {
        let key = PublisherKey::generate();
        let trust = TrustStore::from_keys([key.public()]);
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("staged");
        std::fs::create_dir_all(dir.join("panel")).unwrap();
        std::fs::write(dir.join(MANIFEST_FILE), SOURCE).unwrap();
        for (path, bytes) in sample_files() {
            std::fs::write(dir.join(&path), bytes).unwrap();
        }
        let written = sign_dir(&dir, &key).unwrap();
        assert_eq!(written.dir, dir);
        assert_eq!(written.files.len(), 3);
        let verified = ReleaseBundle::read_dir(&dir)
            .unwrap()
            .verify(&trust)
            .unwrap();
        assert_eq!(verified.key_id, key.public().key_id());
        assert_eq!(
            std::fs::read_dir(root.path()).unwrap().count(),
            1,
            "no staging directory is left"
        );

        // Signed again: the signed manifest is no source manifest.
        let err = sign_dir(&dir, &key).unwrap_err();
        assert!(matches!(err, WriteError::HasReleaseTable), "{err}");
        assert!(
            ReleaseBundle::read_dir(&dir)
                .unwrap()
                .verify(&trust)
                .is_ok()
        );

        let empty = root.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let err = sign_dir(&empty, &key).unwrap_err().to_string();
        assert!(err.contains("has no manifest.toml"), "{err}");
    }

    #[test]
    fn signature_lines_parse_strictly() {
        let key = PublisherKey::generate();
        let line = sign_manifest(b"x", &key);
        assert!(parse_signature(&line).is_some());
        // The older line without the public key still parses.
        let short = line.rsplit_once(' ').unwrap().0.to_owned() + "\n";
        assert!(parse_signature(&short).is_some_and(|f| f.public.is_none()));
        assert!(parse_signature(&format!("{} extra\n", line.trim())).is_none());
        assert!(parse_signature(&line.replace('\n', "\x0b")).is_none());
        assert!(parse_signature(&line.replace(' ', "  ")).is_none());
        assert!(parse_signature(line.trim()).is_none());
        assert!(parse_signature("ed25519 zz AAAA").is_none());
    }

    /// What a refused signature says: another key, or a changed manifest.
    #[test]
    fn refusals_tell_another_key_from_a_changed_manifest() {
        let trusted = PublisherKey::generate();
        let other = PublisherKey::generate();
        let trust = TrustStore::from_keys([trusted.public()]);
        let manifest = b"the signed manifest".as_slice();
        let (t, o) = (trusted.public().key_id(), other.public().key_id());

        // Made with another key, relabelled with the trusted key's id.
        let relabelled =
            sign_manifest(manifest, &other).replacen(&o.to_string(), &t.to_string(), 1);
        let file = parse_signature(&relabelled).unwrap();
        let err = check_signature(&file, manifest, &trust).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "manifest.toml.sig names key {t}, but the signature was made with key {o}: \
                 sign again with the key {t}, or have the operator trust {o}"
            )
        );

        // Made with the trusted key over other bytes: the manifest changed.
        let file = parse_signature(&sign_manifest(manifest, &trusted)).unwrap();
        let err = check_signature(&file, b"the changed manifest", &trust).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the signature of manifest.toml does not verify with key {t}: \
                 the manifest was changed after signing"
            )
        );

        // The older format cannot tell the two apart, and says so.
        let old = format!("ed25519 {t} {}\n", BASE64.encode(other.sign(manifest)));
        let err = check_signature(&parse_signature(&old).unwrap(), manifest, &trust).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("the manifest was changed after signing, or another key signed it"),
            "{err}"
        );
        let old = format!("ed25519 {t} {}\n", BASE64.encode(trusted.sign(manifest)));
        check_signature(&parse_signature(&old).unwrap(), manifest, &trust).unwrap();

        // A carried key that is neither the named one nor the signer's.
        let swapped = sign_manifest(manifest, &trusted).replacen(
            &trusted.public().to_base64(),
            &other.public().to_base64(),
            1,
        );
        let err = check_signature(&parse_signature(&swapped).unwrap(), manifest, &trust);
        assert!(
            matches!(err, Err(VerifyError::KeyMismatch { named, carried }) if named == t && carried == o)
        );
    }
}

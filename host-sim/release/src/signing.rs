//! Publisher keys (Ed25519) and the set of keys a host trusts.
//!
//! - A private key is a PKCS#8 PEM file (readable by OpenSSL), written with
//!   mode 0600.
//! - A public key file (`*.pub`) is one line: `ed25519 <base64 of 32 bytes> [comment]`.
//! - A key id is the first 16 hex characters of the SHA-256 of the public key.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read key file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot write key file {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("key file {path} is not {expected}")]
    Format {
        path: String,
        expected: &'static str,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId([u8; 8]);

impl KeyId {
    pub fn parse(text: &str) -> Option<Self> {
        let bytes = hex::decode(text).ok()?;
        Some(Self(bytes.try_into().ok()?))
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    pub fn key_id(&self) -> KeyId {
        let digest = crate::sha256_hex(self.0.as_bytes());
        KeyId::parse(&digest[..16]).expect("16 hex characters are 8 bytes")
    }

    /// The one-line text of a `.pub` file.
    pub fn to_line(&self, comment: &str) -> String {
        format!("ed25519 {} {comment}", self.to_base64())
            .trim_end()
            .to_owned()
    }

    pub fn from_line(line: &str) -> Option<Self> {
        let mut parts = line.split_whitespace();
        if parts.next()? != "ed25519" {
            return None;
        }
        Self::from_base64(parts.next()?)
    }

    /// The key's 32 bytes in standard base64, as `.pub` files and
    /// signature files write it.
    pub fn to_base64(&self) -> String {
        BASE64.encode(self.0.as_bytes())
    }

    /// `None` for text that is not the base64 of an Ed25519 public key.
    pub fn from_base64(text: &str) -> Option<Self> {
        let bytes: [u8; 32] = BASE64.decode(text).ok()?.try_into().ok()?;
        VerifyingKey::from_bytes(&bytes).ok().map(Self)
    }

    pub fn verify(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        self.0
            .verify_strict(message, &Signature::from_bytes(signature))
            .is_ok()
    }
}

/// A publisher's signing key. Never printed, never in the repository.
pub struct PublisherKey(SigningKey);

impl fmt::Debug for PublisherKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublisherKey({})", self.public().key_id())
    }
}

impl PublisherKey {
    pub fn generate() -> Self {
        Self(SigningKey::generate(&mut rand::rngs::OsRng))
    }

    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.0.sign(message).to_bytes()
    }

    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        SigningKey::from_pkcs8_pem(&text)
            .map(Self)
            .map_err(|_| KeyError::Format {
                path: path.display().to_string(),
                expected: "an Ed25519 private key in PKCS#8 PEM",
            })
    }

    /// Writes the key with mode 0600, creating parent directories.
    pub fn save(&self, path: &Path) -> Result<(), KeyError> {
        let write_err = |source| KeyError::Write {
            path: path.display().to_string(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(write_err)?;
        }
        let pem = self
            .0
            .to_pkcs8_pem(Default::default())
            .expect("an Ed25519 key always encodes as PKCS#8");
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(path).map_err(write_err)?;
        std::io::Write::write_all(&mut file, pem.as_bytes()).map_err(write_err)
    }

    /// Loads the key at `path`, or creates it there when there is none.
    /// Answers the key and whether it was created.
    pub fn load_or_create(path: &Path) -> Result<(Self, bool), KeyError> {
        if path.exists() {
            return Ok((Self::load(path)?, false));
        }
        let key = Self::generate();
        key.save(path)?;
        Ok((key, true))
    }
}

/// The publisher keys a host accepts releases from.
#[derive(Debug, Clone, Default)]
pub struct TrustStore {
    keys: BTreeMap<KeyId, PublicKey>,
}

impl TrustStore {
    pub fn from_keys(keys: impl IntoIterator<Item = PublicKey>) -> Self {
        Self {
            keys: keys.into_iter().map(|k| (k.key_id(), k)).collect(),
        }
    }

    /// Every `*.pub` file in `dir`. A missing directory is an empty store.
    pub fn load_dir(dir: &Path) -> Result<Self, KeyError> {
        let mut store = Self::default();
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(store),
            Err(source) => {
                return Err(KeyError::Read {
                    path: dir.display().to_string(),
                    source,
                });
            }
        };
        let mut paths: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "pub"))
            .collect();
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path).map_err(|source| KeyError::Read {
                path: path.display().to_string(),
                source,
            })?;
            let key = text
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
                .and_then(PublicKey::from_line)
                .ok_or_else(|| KeyError::Format {
                    path: path.display().to_string(),
                    expected: "`ed25519 <base64 public key> [comment]`",
                })?;
            store.add(key);
        }
        Ok(store)
    }

    pub fn add(&mut self, key: PublicKey) {
        self.keys.insert(key.key_id(), key);
    }

    pub fn get(&self, id: &KeyId) -> Option<&PublicKey> {
        self.keys.get(id)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/publisher.pem");
        let (key, created) = PublisherKey::load_or_create(&path).unwrap();
        assert!(created);
        let (again, created) = PublisherKey::load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(key.public(), again.public());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }

        let line = key.public().to_line("dev");
        std::fs::write(dir.path().join("dev.pub"), format!("# comment\n{line}\n")).unwrap();
        let store = TrustStore::load_dir(dir.path()).unwrap();
        assert_eq!(store.len(), 1);
        let sig = key.sign(b"hello");
        let trusted = store.get(&key.public().key_id()).unwrap();
        assert!(trusted.verify(b"hello", &sig));
        assert!(!trusted.verify(b"hellp", &sig));
    }

    #[test]
    fn a_malformed_public_key_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x.pub"), "ssh-rsa AAAA").unwrap();
        let err = TrustStore::load_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("x.pub"), "{err}");
        assert!(
            TrustStore::load_dir(&dir.path().join("absent"))
                .unwrap()
                .is_empty()
        );
    }
}

//! Secrets at rest: every secret a service stores (a DKIM private key, a
//! webhook signing secret, a provider key) is sealed with AES-256-GCM under
//! a 256-bit *master key* that never enters the database.
//!
//! - A [`MasterKey`] comes from a file holding 64 hex digits (never from a
//!   command-line argument); [`MasterKey::load_or_create`] makes one with
//!   mode 0600 for the embedded default.
//! - A sealed value is text: `enc1:<key id>:<base64url(nonce ‖ ciphertext ‖
//!   tag)>`. The nonce is random per value; the key id names the master key
//!   that sealed it, so values sealed under two keys can live side by side
//!   while a rotation runs.
//! - The *binding* (the AEAD's associated data) names the value's row and
//!   purpose (`mail-service/dkim/tenant=4/domain=17`): a sealed value copied
//!   into another row, or truncated, or opened with another key is refused.
//! - A [`Keyring`] holds the keys a process can use: the one it was started
//!   with and those it unwrapped (a rotation stores the new key sealed under
//!   the old one, and the old under the new, so every node reads both).
//!
//! Neither keys nor plain text appear in `Debug` output or in errors.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::Path;

use aws_lc_rs::aead::{AES_256_GCM, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
pub use zeroize::Zeroizing;

/// Bytes of a master key.
pub const KEY_LEN: usize = 32;
/// Bytes of a GCM tag.
const TAG_LEN: usize = 16;
/// The prefix of every sealed value.
const PREFIX: &str = "enc1:";

/// Why a master key could not be read or made. Never shows key material.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("master key file {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "master key file {path}: must hold 64 hex digits (a 256-bit key) and nothing else; make one with the `secrets generate-key` command"
    )]
    Format { path: String },
    #[error("the system random source failed")]
    Random,
    #[error("key {key_id}: the stored copy of this master key could not be unwrapped")]
    Unwrap { key_id: String },
    /// The embedded default's key file is missing beside a database whose
    /// secrets are sealed (a backup restored without its key): no new key
    /// is made, which would only be refused.
    #[error(
        "{database} holds secrets sealed under master key {known}, and there is no key file at {path}: a database restored from a backup needs the master key it was written with; put that key's file there or pass --master-key-file naming it; refusing to start, nothing was changed"
    )]
    MissingForDatabase {
        path: String,
        database: String,
        known: String,
    },
}

/// Why a sealed value was refused. Never shows the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("the stored value is not sealed (plain text where a sealed secret belongs)")]
    NotSealed,
    #[error("the sealed value is malformed or truncated")]
    Malformed,
    #[error("the value is sealed under master key {key_id}, which this process does not hold")]
    UnknownKey { key_id: String },
    #[error(
        "the sealed value does not open under master key {key_id} for this row: it was altered, truncated or copied from another row"
    )]
    Refused { key_id: String },
}

/// A 256-bit master key and its id (the first 8 bytes of a SHA-256 over a
/// label and the key, in hex: names the key, reveals nothing of it).
pub struct MasterKey {
    id: String,
    bytes: Zeroizing<[u8; KEY_LEN]>,
    aead: RandomizedNonceKey,
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MasterKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Clone for MasterKey {
    fn clone(&self) -> MasterKey {
        MasterKey::from_bytes(&self.bytes)
    }
}

impl MasterKey {
    /// A new random key.
    pub fn generate() -> Result<MasterKey, KeyError> {
        let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
        aws_lc_rs::rand::fill(&mut bytes[..]).map_err(|_| KeyError::Random)?;
        Ok(MasterKey::from_bytes(&bytes))
    }

    fn from_bytes(bytes: &[u8; KEY_LEN]) -> MasterKey {
        let mut labelled = Zeroizing::new(Vec::with_capacity(KEY_LEN + 16));
        labelled.extend_from_slice(b"secrets-at-rest key id\0");
        labelled.extend_from_slice(bytes);
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &labelled);
        MasterKey {
            id: hex::encode(&digest.as_ref()[..8]),
            bytes: Zeroizing::new(*bytes),
            aead: RandomizedNonceKey::new(&AES_256_GCM, bytes)
                .expect("a 32-byte key is a valid AES-256 key"),
        }
    }

    /// The key's id (16 hex digits).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Reads a key file: 64 hex digits, surrounding white space allowed.
    pub fn read_file(path: &Path) -> Result<MasterKey, KeyError> {
        let shown = path.display().to_string();
        let text =
            Zeroizing::new(
                std::fs::read_to_string(path).map_err(|source| KeyError::Io {
                    path: shown.clone(),
                    source,
                })?,
            );
        let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
        hex::decode_to_slice(text.trim(), &mut bytes[..])
            .map_err(|_| KeyError::Format { path: shown })?;
        Ok(MasterKey::from_bytes(&bytes))
    }

    /// Writes a new random key to `path`, which must not exist, readable by
    /// its owner only (mode 0600 on Unix).
    pub fn create_file(path: &Path) -> Result<MasterKey, KeyError> {
        let key = MasterKey::generate()?;
        let io = |source| KeyError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(path).map_err(io)?;
        let text = Zeroizing::new(format!("{}\n", hex::encode(&key.bytes[..])));
        file.write_all(text.as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(key)
    }

    /// The key in `path`, made there first when the file does not exist;
    /// true when it was made now.
    pub fn load_or_create(path: &Path) -> Result<(MasterKey, bool), KeyError> {
        match MasterKey::create_file(path) {
            Ok(key) => Ok((key, true)),
            Err(KeyError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                Ok((MasterKey::read_file(path)?, false))
            }
            Err(e) => Err(e),
        }
    }

    fn seal(&self, binding: &str, plain: &[u8]) -> String {
        let mut in_out = Vec::with_capacity(plain.len() + TAG_LEN);
        in_out.extend_from_slice(plain);
        let nonce = self
            .aead
            .seal_in_place_append_tag(Aad::from(binding.as_bytes()), &mut in_out)
            .expect("AES-GCM sealing of an in-memory buffer cannot fail");
        let mut blob = Vec::with_capacity(NONCE_LEN + in_out.len());
        let nonce: &[u8; NONCE_LEN] = nonce.as_ref();
        blob.extend_from_slice(nonce);
        blob.extend_from_slice(&in_out);
        format!("{PREFIX}{}:{}", self.id, URL_SAFE_NO_PAD.encode(blob))
    }

    fn open(&self, binding: &str, blob: &[u8]) -> Result<Zeroizing<Vec<u8>>, OpenError> {
        if blob.len() < NONCE_LEN + TAG_LEN {
            return Err(OpenError::Malformed);
        }
        let (nonce, sealed) = blob.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| OpenError::Malformed)?;
        let mut in_out = Zeroizing::new(sealed.to_vec());
        let refused = || OpenError::Refused {
            key_id: self.id.clone(),
        };
        let plain_len = self
            .aead
            .open_in_place(nonce, Aad::from(binding.as_bytes()), &mut in_out)
            .map_err(|_| refused())?
            .len();
        in_out.truncate(plain_len);
        Ok(in_out)
    }
}

/// True when `stored` has the sealed form (it may still not open).
pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with(PREFIX)
}

/// The id of the key that sealed `stored`, when it has the sealed form.
pub fn sealed_by(stored: &str) -> Option<&str> {
    stored
        .strip_prefix(PREFIX)?
        .split_once(':')
        .map(|(id, _)| id)
}

/// The binding of a wrapped master key.
fn wrap_binding(key_id: &str) -> String {
    format!("secrets-at-rest/master-key/{key_id}")
}

/// The keys a process holds, by id, and which of them seals new values.
#[derive(Clone)]
pub struct Keyring {
    keys: BTreeMap<String, MasterKey>,
    current: String,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("keys", &self.keys.keys().collect::<Vec<_>>())
            .field("current", &self.current)
            .finish()
    }
}

impl Keyring {
    /// A keyring of one key, which seals.
    pub fn new(key: MasterKey) -> Keyring {
        let current = key.id.clone();
        Keyring {
            keys: BTreeMap::from([(current.clone(), key)]),
            current,
        }
    }

    /// Adds a key (it does not seal until `set_current`).
    pub fn insert(&mut self, key: MasterKey) {
        self.keys.entry(key.id.clone()).or_insert(key);
    }

    pub fn holds(&self, key_id: &str) -> bool {
        self.keys.contains_key(key_id)
    }

    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Makes a held key the one that seals; false when it is not held.
    pub fn set_current(&mut self, key_id: &str) -> bool {
        if self.holds(key_id) {
            self.current = key_id.to_string();
            true
        } else {
            false
        }
    }

    pub fn current(&self) -> &str {
        &self.current
    }

    /// Seals `plain` under the current key, bound to `binding`.
    pub fn seal(&self, binding: &str, plain: &[u8]) -> String {
        self.keys[&self.current].seal(binding, plain)
    }

    /// Seals `plain` under the held key `key_id` (a rotation's new key).
    pub fn seal_with(&self, key_id: &str, binding: &str, plain: &[u8]) -> Option<String> {
        Some(self.keys.get(key_id)?.seal(binding, plain))
    }

    /// Opens a sealed value bound to `binding`.
    pub fn open(&self, binding: &str, stored: &str) -> Result<Zeroizing<Vec<u8>>, OpenError> {
        let rest = stored.strip_prefix(PREFIX).ok_or(OpenError::NotSealed)?;
        let (key_id, blob) = rest.split_once(':').ok_or(OpenError::Malformed)?;
        let key = self.keys.get(key_id).ok_or_else(|| OpenError::UnknownKey {
            key_id: key_id.to_string(),
        })?;
        let blob = URL_SAFE_NO_PAD
            .decode(blob)
            .map_err(|_| OpenError::Malformed)?;
        key.open(binding, &blob)
    }

    /// Opens a sealed value that holds text.
    pub fn open_text(&self, binding: &str, stored: &str) -> Result<Zeroizing<String>, OpenError> {
        let bytes = self.open(binding, stored)?;
        std::str::from_utf8(&bytes)
            .map(|s| Zeroizing::new(s.to_string()))
            .map_err(|_| OpenError::Malformed)
    }

    /// The held key `key_id` sealed under the held key `wrapping_id`, for
    /// storing beside the data so a process holding `wrapping_id` can use
    /// `key_id` too.
    pub fn wrap(&self, wrapping_id: &str, key_id: &str) -> Option<String> {
        let key = self.keys.get(key_id)?;
        self.seal_with(wrapping_id, &wrap_binding(key_id), &key.bytes[..])
    }

    /// Unwraps a stored copy of key `key_id` with a held key and adds it.
    pub fn unwrap_into(&mut self, key_id: &str, wrapped: &str) -> Result<(), KeyError> {
        let failed = || KeyError::Unwrap {
            key_id: key_id.to_string(),
        };
        let bytes = self
            .open(&wrap_binding(key_id), wrapped)
            .map_err(|_| failed())?;
        let bytes: &[u8; KEY_LEN] = bytes.as_slice().try_into().map_err(|_| failed())?;
        let key = MasterKey::from_bytes(bytes);
        if key.id != key_id {
            return Err(failed());
        }
        self.insert(key);
        Ok(())
    }
}

/// A master key as a database lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKey {
    pub id: String,
    /// Its place in the order of rotations; the highest seals new values.
    pub seq: i64,
    /// When it was recorded (the service's clock unit).
    pub created_at: i64,
}

/// A copy of key `key_id` sealed under `wrapping_key_id`, as stored.
#[derive(Clone)]
pub struct StoredWrap {
    pub key_id: String,
    pub wrapping_key_id: String,
    pub wrapped: String,
}

impl Keyring {
    /// Takes in what a database lists: unwraps every stored key reachable
    /// from the held ones (a chain of rotations), then seals with the newest
    /// held key of `keys`.
    pub fn learn(&mut self, keys: &[StoredKey], wraps: &[StoredWrap]) -> Result<(), KeyError> {
        loop {
            let mut learned = false;
            for w in wraps {
                if !self.holds(&w.key_id) && self.holds(&w.wrapping_key_id) {
                    self.unwrap_into(&w.key_id, &w.wrapped)?;
                    learned = true;
                }
            }
            if !learned {
                break;
            }
        }
        if let Some(newest) = keys
            .iter()
            .filter(|k| self.holds(&k.id))
            .max_by_key(|k| k.seq)
        {
            self.current = newest.id.clone();
        }
        Ok(())
    }
}

mod database;
pub use database::{
    Adoption, DEFAULT_KEY_FILE, ForgetRefused, KeyStatus, LoadedKey, MasterKeySource, Rotation,
    RotationRefused, SecretsStatus, UnknownMasterKey, adopt, wording,
};

#[cfg(test)]
mod tests;

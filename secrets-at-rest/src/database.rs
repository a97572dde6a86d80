//! What every service that stores sealed values decides the same way,
//! without database code: where the master key comes from, whether a
//! database takes the key a process was started with, how many values each
//! key protects, how a rotation starts (or resumes) and when a retired key
//! may go; and the words the `secrets` commands print. Each service reads
//! and writes its own `master_keys` and `master_key_wraps` tables and hands
//! their rows here.

use std::path::{Path, PathBuf};

use crate::{KeyError, Keyring, MasterKey, OpenError, StoredKey, StoredWrap};

/// The file a key is made in, beside the data, on a first start without one.
pub const DEFAULT_KEY_FILE: &str = "master.key";

/// Where the master key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterKeySource {
    /// `master.key` beside the data, made (mode 0600) on the first start.
    BesideData,
    /// A file holding 64 hex digits (`--master-key-file`).
    File(PathBuf),
}

/// A master key as read (or made) at start.
#[derive(Debug)]
pub struct LoadedKey {
    pub key: MasterKey,
    /// The file it came from, for messages.
    pub label: String,
    /// The file, when it was made now (say so once).
    pub created: Option<PathBuf>,
}

impl MasterKeySource {
    /// The key: read from its file, or for [`MasterKeySource::BesideData`]
    /// `dir/master.key`, made first (with `dir`) when it does not exist.
    pub fn load(&self, dir: &Path) -> Result<LoadedKey, KeyError> {
        match self {
            MasterKeySource::File(path) => Ok(LoadedKey {
                key: MasterKey::read_file(path)?,
                label: path.display().to_string(),
                created: None,
            }),
            MasterKeySource::BesideData => {
                let file = dir.join(DEFAULT_KEY_FILE);
                if !dir.as_os_str().is_empty() {
                    std::fs::create_dir_all(dir).map_err(|source| KeyError::Io {
                        path: dir.display().to_string(),
                        source,
                    })?;
                }
                let (key, created) = MasterKey::load_or_create(&file)?;
                Ok(LoadedKey {
                    key,
                    label: file.display().to_string(),
                    created: created.then(|| file.clone()),
                })
            }
        }
    }
}

impl MasterKeySource {
    /// [`MasterKeySource::load`] for a database (named `database` in
    /// messages) that lists the master keys `known`: beside such a
    /// database the default key file is never made, since a new key would
    /// only be refused (a backup restored without its key).
    pub fn load_for(
        &self,
        dir: &Path,
        known: &[String],
        database: &str,
    ) -> Result<LoadedKey, KeyError> {
        let file = dir.join(DEFAULT_KEY_FILE);
        if *self == MasterKeySource::BesideData && !known.is_empty() && !file.exists() {
            return Err(KeyError::MissingForDatabase {
                path: file.display().to_string(),
                database: database.to_string(),
                known: known.join(", "),
            });
        }
        self.load(dir)
    }
}

/// What a process does with the key it was started with, given the keys a
/// database lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adoption {
    /// The database has no key yet: record this one (`seq` 1) and seal every
    /// plain-text value under it, in one transaction.
    First,
    /// The key is one of the database's.
    Known,
}

/// A start with a key the database does not know: refused before anything
/// is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the master key {label} (id {held}) is not a key of this database (its keys: {known}); refusing to start, nothing was changed; pass --master-key-file naming the database's key (a database restored from a backup needs the master key it was written with)"
)]
pub struct UnknownMasterKey {
    pub label: String,
    pub held: String,
    pub known: String,
}

/// Whether a database listing `known` takes the key `held` (read from
/// `label`).
pub fn adopt(known: &[StoredKey], held: &str, label: &str) -> Result<Adoption, UnknownMasterKey> {
    if known.is_empty() {
        return Ok(Adoption::First);
    }
    if known.iter().any(|k| k.id == held) {
        return Ok(Adoption::Known);
    }
    Err(UnknownMasterKey {
        label: label.to_string(),
        held: held.to_string(),
        known: known
            .iter()
            .map(|k| k.id.as_str())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// How many stored values each master key protects (`secrets status`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SecretsStatus {
    /// The key that seals new values.
    pub current: String,
    pub keys: Vec<KeyStatus>,
    /// Values still in plain text (0 once a process with a key has started).
    pub plain_text: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct KeyStatus {
    pub id: String,
    pub seq: i64,
    pub created_at: i64,
    /// Stored values sealed under it.
    pub values: u64,
    /// The keys a copy of it is stored sealed under.
    pub wrapped_under: Vec<String>,
}

impl SecretsStatus {
    /// Counts `values` (every stored secret, sealed or not) by the key that
    /// sealed them; `keys` in the order of `seq`.
    pub fn count<'a>(
        keys: &[StoredKey],
        wraps: &[StoredWrap],
        values: impl IntoIterator<Item = &'a str>,
    ) -> SecretsStatus {
        let mut plain_text = 0;
        let mut by_key = std::collections::BTreeMap::<&str, u64>::new();
        for value in values {
            match crate::sealed_by(value) {
                Some(id) => *by_key.entry(id).or_default() += 1,
                None => plain_text += 1,
            }
        }
        let mut keys = keys.to_vec();
        keys.sort_by_key(|k| k.seq);
        SecretsStatus {
            current: keys.last().map(|k| k.id.clone()).unwrap_or_default(),
            plain_text,
            keys: keys
                .iter()
                .map(|k| KeyStatus {
                    id: k.id.clone(),
                    seq: k.seq,
                    created_at: k.created_at,
                    values: by_key.get(k.id.as_str()).copied().unwrap_or(0),
                    wrapped_under: wraps
                        .iter()
                        .filter(|w| w.key_id == k.id)
                        .map(|w| w.wrapping_key_id.clone())
                        .collect(),
                })
                .collect(),
        }
    }

    /// Whether `key_id` may be removed: it must be listed, not the newest
    /// and protect no value.
    pub fn may_forget(&self, key_id: &str) -> Result<(), ForgetRefused> {
        let Some(key) = self.keys.iter().find(|k| k.id == key_id) else {
            return Err(ForgetRefused::Unknown {
                key_id: key_id.to_string(),
            });
        };
        if self.current == key_id || key.values > 0 {
            return Err(ForgetRefused::InUse {
                key_id: key_id.to_string(),
                values: key.values,
                current: self.current == key_id,
            });
        }
        Ok(())
    }
}

/// Why a key may not be forgotten.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForgetRefused {
    #[error("master key {key_id} not found")]
    Unknown { key_id: String },
    #[error(
        "master key {key_id} still protects {values} values{}; rotate first",
        if *current { " and seals new ones" } else { "" }
    )]
    InUse {
        key_id: String,
        values: u64,
        current: bool,
    },
}

/// A rotation to a new key, as [`Keyring::begin_rotation`] planned it.
#[derive(Clone)]
pub struct Rotation {
    pub new_id: String,
    /// The key it rotates away from ("" for a database without keys).
    pub previous: String,
    /// What to record in one transaction before re-sealing anything: the
    /// new key's row (the next `seq`) and its copies (the new key sealed
    /// under the previous one and the other way round). `None` when the
    /// rotation resumes one that was interrupted.
    pub record: Option<[StoredWrap; 2]>,
}

impl std::fmt::Debug for Rotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rotation")
            .field("new_id", &self.new_id)
            .field("previous", &self.previous)
            .field("resuming", &self.record.is_none())
            .finish()
    }
}

/// Why a rotation cannot start. Each names the option to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RotationRefused {
    #[error(
        "the rotation needs the current master key {previous}; start it with --master-key-file naming that key"
    )]
    CurrentKeyNotHeld { previous: String },
    #[error(
        "the key {new_id} was this database's key before; rotate to a new key (`secrets generate-key`)"
    )]
    KeyUsedBefore { new_id: String },
}

impl RotationRefused {
    /// The command-line option the refusal is about.
    pub fn option(&self) -> &'static str {
        match self {
            RotationRefused::CurrentKeyNotHeld { .. } => "master-key-file",
            RotationRefused::KeyUsedBefore { .. } => "new-key-file",
        }
    }
}

impl Keyring {
    /// Starts (or resumes) a rotation to `new` over the keys a database
    /// lists (`known`, any order): adds `new` to the ring and answers what
    /// to record. The caller re-seals every value not sealed under
    /// `new_id` with [`Keyring::reseal`], each write conditional on the
    /// value read, and at the end deletes the copies sealed under `new_id`.
    pub fn begin_rotation(
        &mut self,
        known: &[StoredKey],
        new: MasterKey,
    ) -> Result<Rotation, RotationRefused> {
        let mut known = known.to_vec();
        known.sort_by_key(|k| k.seq);
        let new_id = new.id().to_string();
        let newest = known.last().map(|k| k.id.clone()).unwrap_or_default();
        let resuming = newest == new_id;
        let previous = if resuming {
            known
                .iter()
                .rev()
                .nth(1)
                .map(|k| k.id.clone())
                .unwrap_or_default()
        } else {
            newest
        };
        if !previous.is_empty() && !self.holds(&previous) {
            return Err(RotationRefused::CurrentKeyNotHeld { previous });
        }
        if !resuming && known.iter().any(|k| k.id == new_id) {
            return Err(RotationRefused::KeyUsedBefore { new_id });
        }
        self.insert(new);
        let record = (!resuming).then(|| {
            let wrap = |key_id: &str, wrapping_key_id: &str| StoredWrap {
                key_id: key_id.to_string(),
                wrapping_key_id: wrapping_key_id.to_string(),
                wrapped: self
                    .wrap(wrapping_key_id, key_id)
                    .expect("both keys are held"),
            };
            [wrap(&new_id, &previous), wrap(&previous, &new_id)]
        });
        Ok(Rotation {
            new_id,
            previous,
            record,
        })
    }

    /// `stored` sealed under the held key `key_id` for `binding`: plain
    /// text is sealed, a sealed value is opened first (refused values stay
    /// refused: the caller overwrites nothing).
    pub fn reseal(&self, binding: &str, stored: &str, key_id: &str) -> Result<String, OpenError> {
        let plain = if crate::is_sealed(stored) {
            self.open(binding, stored)?
        } else {
            crate::Zeroizing::new(stored.as_bytes().to_vec())
        };
        self.seal_with(key_id, binding, &plain)
            .ok_or_else(|| OpenError::UnknownKey {
                key_id: key_id.to_string(),
            })
    }
}

/// The words both services' `secrets` commands print.
pub mod wording {
    use std::path::Path;

    /// After `secrets generate-key FILE` (stderr; the id goes to stdout).
    pub fn key_written(file: &Path) -> String {
        format!("master key written to {} (mode 0600)", file.display())
    }

    /// The one notice of a first start that made the key beside the data.
    pub fn key_created(file: &Path) -> String {
        format!(
            "created the master key {} (mode 0600): the stored secrets are sealed under it; keep a copy apart from the database backups",
            file.display()
        )
    }

    /// After `secrets rotate`.
    pub fn rotation_done(resealed: u64, new_id: &str) -> String {
        format!(
            "rotation done: {resealed} values re-sealed; every stored secret is sealed under {new_id}. Restart the nodes with the new key file, then `secrets forget` the old key"
        )
    }

    /// After `secrets forget KEY_ID`.
    pub fn forgotten(key_id: &str) -> String {
        format!("master key {key_id} forgotten")
    }
}

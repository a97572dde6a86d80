//! Secrets at rest: each binding's provider secret and the tracking
//! challenge key are stored sealed (AES-256-GCM, `secrets-at-rest`) under
//! the master key the process was started with, bound to their row and
//! purpose. Only this module seals and opens: `bindings` and `tracking`
//! hand it a [`Slot`] and get plain text back.
//!
//! The state lists the master keys by id (`master_keys`, the highest `seq`
//! seals new values) and holds each key a rotation added sealed under the
//! key before it and the other way round (`master_key_wraps`), so a process
//! started with either key reads every value while a rotation runs. A value
//! is sealed inside the write transaction that stores it, with the key list
//! read in that transaction: SQLite has one writer, so once a rotation
//! recorded its key no write seals under the old one, and a rotation needs
//! no settling time.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use rusqlite::{Connection, OptionalExtension, params};
use secrets_at_rest::{
    Adoption, Keyring, MasterKey, OpenError, SecretsStatus, StoredKey, StoredWrap, Zeroizing,
};

use super::error::{Result, StateError};
use super::{State, now_secs};

/// Values re-sealed per transaction while a rotation runs.
const ROTATION_BATCH: usize = 64;

/// The keys this process holds.
pub(super) struct Sealer {
    ring: RwLock<Keyring>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer").finish_non_exhaustive()
    }
}

/// Whose secret a stored value is: the binding (associated data) it is
/// sealed to, so it opens in this row and for this purpose only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Slot {
    /// A project's binding's provider secret.
    Binding { project_id: String, name: String },
    /// The host's tracking challenge key (the one `tracking_settings` row).
    Challenge,
}

impl Slot {
    fn binding(&self) -> String {
        match self {
            // JSON keeps (project, name) unambiguous whatever they hold.
            Slot::Binding { project_id, name } => {
                format!("host-sim/binding/{}", serde_json::json!([project_id, name]))
            }
            Slot::Challenge => "host-sim/challenge/tracking_settings=1".into(),
        }
    }

    /// How an error names it (never its value).
    fn describe(&self) -> String {
        match self {
            Slot::Binding { project_id, name } => {
                format!("the secret of binding `{name}` of project {project_id}")
            }
            Slot::Challenge => "the tracking challenge key".into(),
        }
    }

    /// The statement that replaces the value, if it is still `old`.
    fn replace(&self, conn: &Connection, old: &str, new: &str) -> Result<usize> {
        Ok(match self {
            Slot::Binding { project_id, name } => conn.execute(
                "UPDATE bindings SET secret = ?1 WHERE project_id = ?2 AND name = ?3 AND secret = ?4",
                params![new, project_id, name, old],
            )?,
            Slot::Challenge => conn.execute(
                "UPDATE tracking_settings SET challenge_key = ?1 WHERE id = 1 AND challenge_key = ?2",
                params![new, old],
            )?,
        })
    }
}

fn refused(slot: &Slot, source: OpenError) -> StateError {
    tracing::error!(secret = %slot.describe(), error = %source, "a stored secret was refused");
    StateError::Sealed {
        what: slot.describe(),
        source,
    }
}

fn key_rows(conn: &Connection) -> Result<Vec<StoredKey>> {
    let mut statement =
        conn.prepare_cached("SELECT id, seq, created_at FROM master_keys ORDER BY seq")?;
    let rows = statement.query_map([], |r| {
        Ok(StoredKey {
            id: r.get(0)?,
            seq: r.get(1)?,
            created_at: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn wrap_rows(conn: &Connection) -> Result<Vec<StoredWrap>> {
    let mut statement =
        conn.prepare_cached("SELECT key_id, wrapping_key_id, wrapped FROM master_key_wraps")?;
    let rows = statement.query_map([], |r| {
        Ok(StoredWrap {
            key_id: r.get(0)?,
            wrapping_key_id: r.get(1)?,
            wrapped: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Every stored secret value, with whose it is.
fn stored_secrets(conn: &Connection) -> Result<Vec<(Slot, String)>> {
    let mut all = Vec::new();
    let mut statement =
        conn.prepare_cached("SELECT project_id, name, secret FROM bindings WHERE secret <> ''")?;
    let rows = statement.query_map([], |r| {
        Ok((
            Slot::Binding {
                project_id: r.get(0)?,
                name: r.get(1)?,
            },
            r.get(2)?,
        ))
    })?;
    for row in rows {
        all.push(row?);
    }
    let challenge: Option<String> = conn
        .prepare_cached("SELECT challenge_key FROM tracking_settings WHERE id = 1")?
        .query_row([], |r| r.get(0))
        .optional()?;
    all.extend(challenge.map(|value| (Slot::Challenge, value)));
    Ok(all)
}

impl Sealer {
    pub(super) fn new(key: MasterKey) -> Sealer {
        Sealer {
            ring: RwLock::new(Keyring::new(key)),
        }
    }

    fn ring(&self) -> RwLockReadGuard<'_, Keyring> {
        self.ring.read().unwrap_or_else(|p| p.into_inner())
    }

    fn ring_mut(&self) -> RwLockWriteGuard<'_, Keyring> {
        self.ring.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Unwraps every stored key reachable from the held ones and seals from
    /// then on with the newest held key.
    fn refresh(&self, conn: &Connection) -> Result<()> {
        let keys = key_rows(conn)?;
        let wraps = wrap_rows(conn)?;
        Ok(self.ring_mut().learn(&keys, &wraps)?)
    }

    /// Seals `plain` for `slot` under the newest key, read in `tx` (the
    /// write transaction that stores the value).
    pub(super) fn seal(&self, tx: &Connection, slot: &Slot, plain: &[u8]) -> Result<String> {
        self.refresh(tx)?;
        Ok(self.ring().seal(&slot.binding(), plain))
    }

    /// Opens the sealed `stored` value of `slot`; a key this process does
    /// not hold yet is looked up among the stored wrapped keys once.
    pub(super) fn open(
        &self,
        conn: &Connection,
        slot: &Slot,
        stored: &str,
    ) -> Result<Zeroizing<Vec<u8>>> {
        let binding = slot.binding();
        let first = self.ring().open(&binding, stored);
        match first {
            Err(OpenError::UnknownKey { .. }) => {
                self.refresh(conn)?;
                self.ring()
                    .open(&binding, stored)
                    .map_err(|e| refused(slot, e))
            }
            other => other.map_err(|e| refused(slot, e)),
        }
    }

    /// [`Sealer::open`] for a value that holds text.
    pub(super) fn open_text(&self, conn: &Connection, slot: &Slot, stored: &str) -> Result<String> {
        let bytes = self.open(conn, slot, stored)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| refused(slot, OpenError::Malformed))
    }

    /// Seals every plain-text value in `tx` under the current key; answers
    /// how many.
    fn seal_plain_text(&self, tx: &Connection) -> Result<u64> {
        let mut sealed = 0;
        let current = self.ring().current().to_string();
        for (slot, value) in stored_secrets(tx)? {
            if !secrets_at_rest::is_sealed(&value) {
                let new = self.reseal(&slot, &value, &current)?;
                sealed += slot.replace(tx, &value, &new)? as u64;
            }
        }
        Ok(sealed)
    }

    fn reseal(&self, slot: &Slot, value: &str, key_id: &str) -> Result<String> {
        self.ring()
            .reseal(&slot.binding(), value, key_id)
            .map_err(|e| refused(slot, e))
    }
}

impl State {
    /// At open: makes sure this process's key is one of the state's. A
    /// first open with a key records it and seals every plain-text value,
    /// in one transaction; a key the state does not know is refused before
    /// anything is written.
    pub(super) fn adopt_master_key(&self, label: &str) -> Result<()> {
        let held = self.secrets.ring().current().to_string();
        let (adoption, plain) = {
            let conn = self.conn();
            let adoption = secrets_at_rest::adopt(&key_rows(&conn)?, &held, label)?;
            let plain = stored_secrets(&conn)?
                .iter()
                .any(|(_, value)| !secrets_at_rest::is_sealed(value));
            (adoption, plain)
        };
        if adoption == Adoption::Known && !plain {
            return Ok(());
        }
        let sealed = self.write(|tx| {
            // Checked again inside the transaction: another process may
            // have recorded its key since.
            if secrets_at_rest::adopt(&key_rows(tx)?, &held, label)? == Adoption::First {
                tx.execute(
                    "INSERT INTO master_keys (id, seq, created_at) VALUES (?1, 1, ?2)",
                    params![held, now_secs()],
                )?;
            }
            self.secrets.refresh(tx)?;
            self.secrets.seal_plain_text(tx)
        })?;
        tracing::info!(key = %held, sealed, "plain-text secrets sealed under the master key");
        Ok(())
    }

    /// How many stored values each master key protects.
    pub fn secrets_status(&self) -> Result<SecretsStatus> {
        let conn = self.conn();
        let values = stored_secrets(&conn)?;
        Ok(SecretsStatus::count(
            &key_rows(&conn)?,
            &wrap_rows(&conn)?,
            values.iter().map(|(_, value)| value.as_str()),
        ))
    }

    /// Re-seals every stored value under `new` while other processes
    /// serve: `new` is recorded as the newest key with a copy sealed under
    /// the current key (so a process started with the current key picks it
    /// up) and the current sealed under `new`; then the values are re-sealed
    /// in small transactions, each replacing a value only if it is still the
    /// one read. Run again after an interruption, it goes on where it
    /// stopped. Answers how many values it re-sealed.
    pub fn rotate_secrets(&self, new: MasterKey) -> Result<u64> {
        let rotation = {
            let conn = self.conn();
            self.secrets.refresh(&conn)?;
            let known = key_rows(&conn)?;
            self.secrets.ring_mut().begin_rotation(&known, new)?
        };
        let new_id = rotation.new_id;
        if let Some(wraps) = rotation.record {
            self.write(|tx| {
                tx.execute(
                    "INSERT INTO master_keys (id, seq, created_at)
                     SELECT ?1, COALESCE(MAX(seq), 0) + 1, ?2 FROM master_keys",
                    params![new_id, now_secs()],
                )?;
                for w in &wraps {
                    tx.execute(
                        "INSERT INTO master_key_wraps (key_id, wrapping_key_id, wrapped) VALUES (?1, ?2, ?3)",
                        params![w.key_id, w.wrapping_key_id, w.wrapped],
                    )?;
                }
                Ok(())
            })?;
        }
        let mut resealed = 0;
        loop {
            let pending: Vec<(Slot, String)> = stored_secrets(&self.conn())?
                .into_iter()
                .filter(|(_, value)| secrets_at_rest::sealed_by(value) != Some(new_id.as_str()))
                .collect();
            if pending.is_empty() {
                break;
            }
            for batch in pending.chunks(ROTATION_BATCH) {
                resealed += self.write(|tx| {
                    let mut n = 0;
                    for (slot, value) in batch {
                        let new = self.secrets.reseal(slot, value, &new_id)?;
                        n += slot.replace(tx, value, &new)? as u64;
                    }
                    Ok(n)
                })?;
            }
        }
        // Nothing is sealed under the old key any more: drop its copy under
        // the new one (processes started with the old key keep the copy of
        // the new key sealed under it until `secrets forget`).
        self.write(|tx| {
            tx.execute(
                "DELETE FROM master_key_wraps WHERE wrapping_key_id = ?1",
                [&new_id],
            )?;
            Ok(())
        })?;
        Ok(resealed)
    }

    /// Removes a retired key: refused while it is the newest key or any
    /// value is still sealed under it. Processes started with it refuse to
    /// start from then on.
    pub fn forget_master_key(&self, key_id: &str) -> Result<()> {
        self.secrets_status()?.may_forget(key_id)?;
        self.write(|tx| {
            tx.execute(
                "DELETE FROM master_key_wraps WHERE key_id = ?1 OR wrapping_key_id = ?1",
                [key_id],
            )?;
            tx.execute("DELETE FROM master_keys WHERE id = ?1", [key_id])?;
            Ok(())
        })
    }
}

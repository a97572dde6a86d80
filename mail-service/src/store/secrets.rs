//! Secrets at rest: the DKIM private keys, the webhook signing secrets and
//! the return-path tag key are stored sealed (AES-256-GCM, `secrets-at-rest`)
//! under the master key the process was started with, bound to their row and
//! purpose. Only this module seals and opens; the rest of the store hands it
//! a `Slot` (whose secret) and gets plain text back.
//!
//! The database lists the master keys by id (`master_keys`, the highest
//! `seq` seals new values) and holds each key a rotation added sealed under
//! the key before it and the other way round (`master_key_wraps`), so a node
//! started with either key reads every value while a rotation runs, and
//! picks the new key up the first time it meets it.

use std::sync::RwLock;
use std::time::Duration;

use secrets_at_rest::{
    Adoption, ForgetRefused, Keyring, MasterKey, OpenError, StoredKey, StoredWrap, Zeroizing,
};
pub use secrets_at_rest::{DEFAULT_KEY_FILE, KeyStatus, MasterKeySource, SecretsStatus};

use super::unit::Param;
use super::*;

/// The keys this process holds.
pub(super) struct Sealer {
    ring: RwLock<Keyring>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer").finish_non_exhaustive()
    }
}

impl Sealer {
    pub(super) fn new(key: MasterKey) -> Sealer {
        Sealer {
            ring: RwLock::new(Keyring::new(key)),
        }
    }

    fn ring(&self) -> std::sync::RwLockReadGuard<'_, Keyring> {
        self.ring.read().unwrap_or_else(|p| p.into_inner())
    }

    fn ring_mut(&self) -> std::sync::RwLockWriteGuard<'_, Keyring> {
        self.ring.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whose secret a stored value is: the binding (associated data) it is
/// sealed to, so it opens in this row and for this purpose only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Slot {
    Dkim {
        tenant_id: i64,
        domain_id: i64,
    },
    Webhook {
        tenant_id: i64,
        webhook_id: i64,
    },
    /// A key the service makes once (`verp`: the return-path tag key).
    Service {
        name: String,
    },
}

impl Slot {
    fn binding(&self) -> String {
        match self {
            Slot::Dkim {
                tenant_id,
                domain_id,
            } => format!("mail-service/dkim/tenant={tenant_id}/domain={domain_id}"),
            Slot::Webhook {
                tenant_id,
                webhook_id,
            } => format!("mail-service/webhook/tenant={tenant_id}/webhook={webhook_id}"),
            Slot::Service { name } => format!("mail-service/return-path/{name}"),
        }
    }

    /// How an error names it (never its value).
    fn describe(&self) -> String {
        match self {
            Slot::Dkim {
                tenant_id,
                domain_id,
            } => format!("the DKIM key of domain {domain_id} (tenant {tenant_id})"),
            Slot::Webhook {
                tenant_id,
                webhook_id,
            } => format!("the signing secret of webhook {webhook_id} (tenant {tenant_id})"),
            Slot::Service { name } => format!("the service secret `{name}`"),
        }
    }
}

/// One stored secret value, as the upgrade and a rotation see it.
struct Stored {
    slot: Slot,
    column: Column,
    value: String,
}

#[derive(Debug, Clone, Copy)]
enum Column {
    DkimKey,
    WebhookSecret,
    WebhookPrevious,
    Service,
}

impl Stored {
    /// The step that replaces the value, if it is still the one read.
    fn replace(&self, new: String) -> Step {
        let (sql, key) = match (&self.column, &self.slot) {
            (Column::DkimKey, Slot::Dkim { domain_id, .. }) => (
                "UPDATE domains SET dkim_private_key = $1 WHERE id = $2 AND dkim_private_key = $3",
                Param::Int(*domain_id),
            ),
            (Column::WebhookSecret, Slot::Webhook { webhook_id, .. }) => (
                "UPDATE webhooks SET secret = $1 WHERE id = $2 AND secret = $3",
                Param::Int(*webhook_id),
            ),
            (Column::WebhookPrevious, Slot::Webhook { webhook_id, .. }) => (
                "UPDATE webhooks SET previous_secret = $1 WHERE id = $2 AND previous_secret = $3",
                Param::Int(*webhook_id),
            ),
            (Column::Service, Slot::Service { name }) => (
                "UPDATE service_secrets SET value = $1 WHERE name = $2 AND value = $3",
                Param::Text(name.clone()),
            ),
            _ => unreachable!("a column is read with its own slot"),
        };
        Step::rows(
            sql,
            vec![Param::Text(new), key, Param::Text(self.value.clone())],
        )
    }
}

#[derive(sqlx::FromRow)]
struct KeyRow {
    id: String,
    seq: i64,
    created_at: i64,
}

#[derive(sqlx::FromRow)]
struct WrapRow {
    key_id: String,
    wrapping_key_id: String,
    wrapped: String,
}

/// Values re-sealed per unit while a rotation runs.
const ROTATION_BATCH: usize = 64;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn refused(slot: &Slot, e: OpenError) -> Error {
    tracing::error!(secret = %slot.describe(), error = %e, "a stored secret was refused");
    Error::StoredDataInvalid {
        detail: format!("{}: {e}", slot.describe()),
    }
}

impl Store {
    /// Seals `plain` for `slot` under the newest key (read afresh, so a
    /// rotation another process started is followed at once).
    pub(crate) async fn seal(&self, slot: &Slot, plain: &str) -> Result<String, Error> {
        self.refresh_keys().await?;
        Ok(self.secrets.ring().seal(&slot.binding(), plain.as_bytes()))
    }

    /// Opens the sealed `stored` value of `slot`; a key this process does
    /// not hold yet is looked up among the stored wrapped keys once.
    pub(crate) async fn open_secret(
        &self,
        slot: &Slot,
        stored: &str,
    ) -> Result<Zeroizing<String>, Error> {
        let binding = slot.binding();
        let first = self.secrets.ring().open_text(&binding, stored);
        match first {
            Err(OpenError::UnknownKey { .. }) => {
                self.refresh_keys().await?;
                self.secrets
                    .ring()
                    .open_text(&binding, stored)
                    .map_err(|e| refused(slot, e))
            }
            other => other.map_err(|e| refused(slot, e)),
        }
    }

    async fn master_key_rows(&self) -> Result<Vec<StoredKey>, Error> {
        let rows: Vec<KeyRow> = on_db!(self, pool => {
            sqlx::query_as("SELECT id, seq, created_at FROM master_keys ORDER BY seq")
                .fetch_all(pool)
                .await?
        });
        Ok(rows
            .into_iter()
            .map(|k| StoredKey {
                id: k.id,
                seq: k.seq,
                created_at: k.created_at,
            })
            .collect())
    }

    async fn wrap_rows(&self) -> Result<Vec<StoredWrap>, Error> {
        let rows: Vec<WrapRow> = on_db!(self, pool => {
            sqlx::query_as("SELECT key_id, wrapping_key_id, wrapped FROM master_key_wraps")
                .fetch_all(pool)
                .await?
        });
        Ok(rows
            .into_iter()
            .map(|w| StoredWrap {
                key_id: w.key_id,
                wrapping_key_id: w.wrapping_key_id,
                wrapped: w.wrapped,
            })
            .collect())
    }

    /// Unwraps every stored key this process can reach from the ones it
    /// holds, and seals from then on with the newest held key.
    async fn refresh_keys(&self) -> Result<(), Error> {
        let keys = self.master_key_rows().await?;
        let wraps = self.wrap_rows().await?;
        self.secrets
            .ring_mut()
            .learn(&keys, &wraps)
            .map_err(|e| Error::StoredDataInvalid {
                detail: e.to_string(),
            })
    }

    /// Every stored secret value, with whose it is.
    async fn stored_secrets(&self) -> Result<Vec<Stored>, Error> {
        let domains: Vec<(i64, i64, String)> = on_db!(self, pool => {
            sqlx::query_as("SELECT tenant_id, id, dkim_private_key FROM domains")
                .fetch_all(pool)
                .await?
        });
        let webhooks: Vec<(i64, i64, String, Option<String>)> = on_db!(self, pool => {
            sqlx::query_as("SELECT tenant_id, id, secret, previous_secret FROM webhooks")
                .fetch_all(pool)
                .await?
        });
        let services: Vec<(String, String)> = on_db!(self, pool => {
            sqlx::query_as("SELECT name, value FROM service_secrets")
                .fetch_all(pool)
                .await?
        });
        let mut all = Vec::new();
        for (tenant_id, domain_id, value) in domains {
            all.push(Stored {
                slot: Slot::Dkim {
                    tenant_id,
                    domain_id,
                },
                column: Column::DkimKey,
                value,
            });
        }
        for (tenant_id, webhook_id, secret, previous) in webhooks {
            let slot = Slot::Webhook {
                tenant_id,
                webhook_id,
            };
            if let Some(value) = previous {
                all.push(Stored {
                    slot: slot.clone(),
                    column: Column::WebhookPrevious,
                    value,
                });
            }
            all.push(Stored {
                slot,
                column: Column::WebhookSecret,
                value: secret,
            });
        }
        for (name, value) in services {
            all.push(Stored {
                slot: Slot::Service { name },
                column: Column::Service,
                value,
            });
        }
        Ok(all)
    }

    /// The step that stores `value` re-sealed under `key_id` (plain text is
    /// sealed; a sealed value is opened first, and refused values stop
    /// everything: nothing is overwritten).
    fn reseal(&self, value: &Stored, key_id: &str) -> Result<Step, Error> {
        let sealed = self
            .secrets
            .ring()
            .reseal(&value.slot.binding(), &value.value, key_id)
            .map_err(|e| refused(&value.slot, e))?;
        Ok(value.replace(sealed))
    }

    /// At open: makes sure this process's key is one of the database's (a
    /// first start with a key records it and seals every plain-text value,
    /// in one unit); refuses, having written nothing, when it is not.
    pub(super) async fn adopt_master_key(&self, label: &str) -> Result<(), anyhow::Error> {
        let held = self.secrets.ring().current().to_string();
        let known = self.master_key_rows().await?;
        if secrets_at_rest::adopt(&known, &held, label)? == Adoption::First {
            let mut steps = vec![
                Step::rows(
                    "INSERT INTO master_keys (id, seq, created_at) SELECT $1, 1, $2 \
                     WHERE NOT EXISTS (SELECT 1 FROM master_keys)",
                    params![&held, now_ms()],
                )
                .abort_if_zero(),
            ];
            for value in self.stored_secrets().await? {
                if !secrets_at_rest::is_sealed(&value.value) {
                    steps.push(self.reseal(&value, &held)?);
                }
            }
            let sealed = steps.len() - 1;
            if self.write(Unit::new(steps)).await? == Ran::RolledBack {
                // Another node recorded its key first: check against it.
                return Box::pin(self.adopt_master_key(label)).await;
            }
            tracing::info!(key = %held, sealed, "master key recorded; stored secrets sealed under it");
            return Ok(());
        }
        self.refresh_keys().await?;
        let current = self.secrets.ring().current().to_string();
        let mut steps = Vec::new();
        for value in self.stored_secrets().await? {
            if !secrets_at_rest::is_sealed(&value.value) {
                steps.push(self.reseal(&value, &current)?);
            }
        }
        if !steps.is_empty() {
            let n = steps.len();
            self.write(Unit::new(steps)).await?;
            tracing::info!(sealed = n, "plain-text secrets sealed");
        }
        Ok(())
    }

    /// How many stored values each master key protects.
    pub async fn secrets_status(&self) -> Result<SecretsStatus, Error> {
        self.refresh_keys().await?;
        let keys = self.master_key_rows().await?;
        let wraps = self.wrap_rows().await?;
        let values = self.stored_secrets().await?;
        Ok(SecretsStatus::count(
            &keys,
            &wraps,
            values.iter().map(|v| v.value.as_str()),
        ))
    }

    /// Re-seals every stored value under `new`, while the service serves:
    /// `new` is recorded as the newest key with a copy sealed under the
    /// current key (so nodes started with it pick `new` up and seal with it
    /// from their next write) and the current sealed under `new`; then the
    /// values are re-sealed in small units, each replacing a value only if
    /// it is still the one read. Run again after an interruption, it goes
    /// on where it stopped. `settle` is how long it waits for writes that
    /// began under the old key before its last pass. Answers how many
    /// values it re-sealed.
    pub async fn rotate_secrets(&self, new: MasterKey, settle: Duration) -> Result<u64, Error> {
        self.refresh_keys().await?;
        let known = self.master_key_rows().await?;
        let rotation = self
            .secrets
            .ring_mut()
            .begin_rotation(&known, new)
            .map_err(|e| Error::Validation {
                field: e.option().into(),
                rule: e.to_string(),
            })?;
        let new_id = rotation.new_id;
        if let Some(wraps) = rotation.record {
            let mut steps = vec![Step::rows(
                "INSERT INTO master_keys (id, seq, created_at) SELECT $1, COALESCE(MAX(seq), 0) + 1, $2 FROM master_keys",
                params![&new_id, now_ms()],
            )];
            for w in wraps {
                steps.push(Step::rows(
                    "INSERT INTO master_key_wraps (key_id, wrapping_key_id, wrapped) VALUES ($1, $2, $3)",
                    params![w.key_id, w.wrapping_key_id, w.wrapped],
                ));
            }
            self.write(Unit::new(steps)).await?;
        }
        self.refresh_keys().await?;
        let mut resealed = 0;
        let mut settled = false;
        loop {
            let pending: Vec<Stored> = self
                .stored_secrets()
                .await?
                .into_iter()
                .filter(|v| secrets_at_rest::sealed_by(&v.value) != Some(new_id.as_str()))
                .collect();
            if pending.is_empty() {
                if settled {
                    break;
                }
                tokio::time::sleep(settle).await;
                settled = true;
                continue;
            }
            settled = false;
            for batch in pending.chunks(ROTATION_BATCH) {
                let steps = batch
                    .iter()
                    .map(|v| self.reseal(v, &new_id))
                    .collect::<Result<Vec<_>, _>>()?;
                let n = steps.len() as u64;
                self.write(Unit::new(steps)).await?;
                resealed += n;
            }
        }
        // Nothing is sealed under the old key any more: drop its copy under
        // the new one (nodes still started with the old key keep the copy
        // of the new key sealed under it until `secrets forget`).
        self.write_one(Step::rows(
            "DELETE FROM master_key_wraps WHERE wrapping_key_id = $1",
            params![&new_id],
        ))
        .await?;
        Ok(resealed)
    }

    /// Removes a retired key from the database: refused while it is the
    /// newest key or any value is still sealed under it. Nodes started with
    /// it refuse to start from then on.
    pub async fn forget_master_key(&self, key_id: &str) -> Result<(), Error> {
        let status = self.secrets_status().await?;
        status.may_forget(key_id).map_err(|e| match e {
            ForgetRefused::Unknown { .. } => Error::NotFound {
                what: format!("master key {key_id}"),
            },
            in_use => Error::Conflict {
                what: in_use.to_string(),
            },
        })?;
        self.write(Unit::new(vec![
            Step::rows(
                "DELETE FROM master_key_wraps WHERE key_id = $1 OR wrapping_key_id = $1",
                params![key_id],
            ),
            Step::rows("DELETE FROM master_keys WHERE id = $1", params![key_id]),
        ]))
        .await?;
        Ok(())
    }
}

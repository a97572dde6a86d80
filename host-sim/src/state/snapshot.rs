//! What one invocation's checks read, in one read transaction, reused by
//! every invocation of the same (token, extension, project) while the
//! state's version holds; a token's expiry is applied at each use.

use std::collections::BTreeSet;
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::access::{approvals, generation, is_granted};
use super::bindings::{Binding, project_bindings};
use super::changes::StateVersion;
use super::error::Result;
use super::secrets::Sealer;
use super::settings::{ProjectSettings, project_settings};
use super::{State, now_secs, token_hash};

/// Everything the invocation checks read, at one version of the state, so
/// the checks see one consistent state.
#[derive(Debug, Clone)]
pub struct InvocationSnapshot {
    /// The token's user, if the token exists and has not expired.
    pub user: Option<String>,
    /// The resource the token was minted for (`None`: operator-issued;
    /// see `access::audience_accepts`).
    pub audience: Option<String>,
    /// The scopes the token was granted (`None`: every scope).
    pub scope: Option<String>,
    /// The token names the project and the user still has access to it.
    pub project_access: bool,
    pub granted: bool,
    /// Digest of the installed release.
    pub release_digest: Option<String>,
    pub approved: BTreeSet<String>,
    pub generation: u64,
    pub settings: ProjectSettings,
    /// The project's bindings, secrets included (for the binding calls and
    /// for redaction; never shown).
    pub bindings: Vec<Binding>,
    /// The version all of the above was read at (none if a commit was
    /// under way).
    pub version: Option<StateVersion>,
}

/// (token hash, extension, project).
pub(super) type SnapshotKey = (String, String, String);

/// A snapshot as the database holds it, shared by every invocation that
/// reads it while the version holds; the token's expiry is applied when it
/// is used ([`StoredSnapshot::at`]).
#[derive(Clone)]
pub(super) struct StoredSnapshot {
    token_expires_at: Option<i64>,
    snapshot: Arc<InvocationSnapshot>,
}

impl StoredSnapshot {
    fn at(&self, now: i64) -> Arc<InvocationSnapshot> {
        let live = self
            .token_expires_at
            .is_some_and(|expires_at| expires_at > now);
        if live || (self.snapshot.user.is_none() && !self.snapshot.project_access) {
            return self.snapshot.clone();
        }
        Arc::new(InvocationSnapshot {
            user: None,
            project_access: false,
            ..(*self.snapshot).clone()
        })
    }
}

impl State {
    /// Reads everything the invocation checks need, in one read transaction.
    pub fn invocation_snapshot(
        &self,
        token: &str,
        extension_id: &str,
        project_id: &str,
    ) -> Result<Arc<InvocationSnapshot>> {
        let key = (
            token_hash(token),
            extension_id.to_string(),
            project_id.to_string(),
        );
        let now = now_secs();
        let stored = self.cached(&self.snapshots, key, |key, version| {
            let mut conn = self.conn();
            // One read transaction: one snapshot even against other
            // processes writing the file, and one lock of the database
            // instead of one per query.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
            let stored = read_snapshot(&tx, &self.secrets, key, version)?;
            tx.finish()?;
            Ok(stored)
        })?;
        Ok(stored.at(now))
    }
}

/// Everything the invocation checks read, at `version`; `user` is the
/// token's user whether or not the token has expired.
fn read_snapshot(
    conn: &Connection,
    sealer: &Sealer,
    (hash, extension_id, project_id): &SnapshotKey,
    version: Option<StateVersion>,
) -> Result<StoredSnapshot> {
    let token: Option<(String, i64, Option<String>, Option<String>)> = conn
        .prepare_cached(
            "SELECT user_id, expires_at, audience, scope FROM tokens WHERE token_hash = ?1",
        )?
        .query_row([hash], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .optional()?;
    let project_access = match &token {
        None => false,
        Some((user, ..)) => conn
            .prepare_cached(
                "SELECT 1 FROM token_projects tp JOIN user_projects up
                   ON up.project_id = tp.project_id AND up.user_id = ?2
                 WHERE tp.token_hash = ?1 AND tp.project_id = ?3",
            )?
            .query_row(params![hash, user, project_id], |_| Ok(()))
            .optional()?
            .is_some(),
    };
    let granted = is_granted(conn, extension_id, project_id)?;
    let release_digest: Option<String> = conn
        .prepare_cached("SELECT digest FROM releases WHERE extension_id = ?1")?
        .query_row([extension_id], |r| r.get(0))
        .optional()?;
    let approved = match &release_digest {
        Some(digest) => approvals(conn, extension_id, digest)?,
        None => BTreeSet::new(),
    };
    let (user, token_expires_at, audience, scope) = match token {
        Some((user, expires_at, audience, scope)) => {
            (Some(user), Some(expires_at), audience, scope)
        }
        None => (None, None, None, None),
    };
    Ok(StoredSnapshot {
        token_expires_at,
        snapshot: Arc::new(InvocationSnapshot {
            user,
            audience,
            scope,
            project_access,
            granted,
            release_digest,
            approved,
            generation: generation(conn, extension_id, project_id)?,
            settings: project_settings(conn, project_id)?,
            bindings: project_bindings(conn, sealer, project_id)?,
            version,
        }),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::tests::open;
    use super::super::{DB_FILE, NewRelease};
    use super::*;

    #[test]
    fn a_repeated_snapshot_sees_a_revoke_from_another_process() {
        let (dir, state) = open();
        state
            .store_token("hst_t", "u", &["p1".into()], now_secs() + 60)
            .unwrap();
        let release = NewRelease {
            extension_id: "ext",
            version: "1.0.0",
            digest: "d1",
            manifest: "",
            key_id: "k",
            files: &BTreeMap::new(),
        };
        state.store_release(&release, false).unwrap();
        state.grant("ext", "p1").unwrap();
        for _ in 0..2 {
            let snapshot = state.invocation_snapshot("hst_t", "ext", "p1").unwrap();
            assert!(snapshot.granted && snapshot.project_access);
        }
        let other = super::super::tests::open_at(&dir.path().join(DB_FILE));
        other.revoke("ext", "p1").unwrap();
        assert!(
            !state
                .invocation_snapshot("hst_t", "ext", "p1")
                .unwrap()
                .granted
        );
    }

    #[test]
    fn a_snapshot_read_before_a_token_expired_does_not_outlive_it() {
        let (_dir, state) = open();
        let key = (token_hash("hst_t"), "ext".to_string(), "p1".to_string());
        state
            .store_token("hst_t", "u", &["p1".into()], now_secs() + 60)
            .unwrap();
        let conn = state.conn();
        let stored = read_snapshot(&conn, &state.secrets, &key, state.version()).unwrap();
        assert!(stored.clone().at(now_secs()).project_access);
        let later = stored.at(now_secs() + 61);
        assert!(later.user.is_none() && !later.project_access);
    }
}

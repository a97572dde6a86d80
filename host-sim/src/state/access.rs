//! Who may run what: the operator's approvals of a release's capabilities,
//! grants of extensions to projects, the runtime generation of every
//! (extension, project), and users' tokens with the projects they reach.

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::error::{Result, StateError};
use super::{State, now_secs, token_hash};

/// What a token reaches now (see [`State::token_access`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenAccess {
    pub user: String,
    /// Unix seconds.
    pub expires_at: i64,
    /// The scopes an authorization-server token was granted (`read`,
    /// `write`); `None` for an operator-issued token (every scope).
    pub scope: Option<String>,
    /// Project → extensions granted to it.
    pub projects: BTreeMap<String, Vec<String>>,
}

/// The call-time check of one capability (see [`State::capability_check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapabilityCheck {
    /// The extension is granted to the project.
    pub granted: bool,
    /// The operator approved the capability for the installed release.
    pub approved: bool,
}

impl State {
    /// Sets the approval of `capabilities` for the installed release with
    /// `digest`. Bumps the extension's generations.
    pub fn set_approval(
        &self,
        extension_id: &str,
        digest: &str,
        capabilities: &[String],
        approved: bool,
    ) -> Result<()> {
        self.write(|tx| {
            let installed: Option<String> = tx
                .query_row(
                    "SELECT digest FROM releases WHERE extension_id = ?1",
                    [extension_id],
                    |r| r.get(0),
                )
                .optional()?;
            if installed.as_deref() != Some(digest) {
                return Err(StateError::ReleaseChanged {
                    extension: extension_id.to_string(),
                });
            }
            for capability in capabilities {
                if approved {
                    tx.execute(
                        "INSERT OR IGNORE INTO approvals (extension_id, digest, capability, approved_at)
                         VALUES (?1, ?2, ?3, ?4)",
                        params![extension_id, digest, capability, now_secs()],
                    )?;
                } else {
                    tx.execute(
                        "DELETE FROM approvals WHERE extension_id = ?1 AND digest = ?2 AND capability = ?3",
                        params![extension_id, digest, capability],
                    )?;
                }
            }
            bump_extension(tx, extension_id)?;
            Ok(())
        })
    }

    pub fn approvals(&self, extension_id: &str, digest: &str) -> Result<BTreeSet<String>> {
        approvals(&self.conn(), extension_id, digest)
    }

    /// Grants an installed extension to a project (idempotent; bumps).
    pub fn grant(&self, extension_id: &str, project_id: &str) -> Result<u64> {
        self.write(|tx| {
            let installed = tx
                .query_row(
                    "SELECT 1 FROM releases WHERE extension_id = ?1",
                    [extension_id],
                    |_| Ok(()),
                )
                .optional()?
                .is_some();
            if !installed {
                return Err(StateError::NotInstalled {
                    extension: extension_id.to_string(),
                });
            }
            tx.execute(
                "INSERT OR IGNORE INTO grants (extension_id, project_id, granted_at) VALUES (?1, ?2, ?3)",
                params![extension_id, project_id, now_secs()],
            )?;
            bump_pair(tx, extension_id, project_id)
        })
    }

    /// Revokes a grant; answers whether one existed. Bumps the generation.
    pub fn revoke(&self, extension_id: &str, project_id: &str) -> Result<bool> {
        self.write(|tx| {
            let removed = tx.execute(
                "DELETE FROM grants WHERE extension_id = ?1 AND project_id = ?2",
                params![extension_id, project_id],
            )?;
            bump_pair(tx, extension_id, project_id)?;
            Ok(removed > 0)
        })
    }

    /// The current runtime generation of (extension, project); 0 if nothing
    /// ever moved it.
    pub fn generation(&self, extension_id: &str, project_id: &str) -> Result<u64> {
        generation(&self.conn(), extension_id, project_id)
    }

    /// What a host call re-checks: the grant, and the approval of
    /// `capability` for the release with `digest`, as they are now.
    pub fn capability_check(
        &self,
        extension_id: &str,
        project_id: &str,
        digest: &str,
        capability: &str,
    ) -> Result<CapabilityCheck> {
        let conn = self.conn();
        let granted = is_granted(&conn, extension_id, project_id)?;
        let approved = conn
            .prepare_cached(
                "SELECT 1 FROM approvals WHERE extension_id = ?1 AND digest = ?2 AND capability = ?3",
            )?
            .query_row(params![extension_id, digest, capability], |_| Ok(()))
            .optional()?
            .is_some();
        Ok(CapabilityCheck { granted, approved })
    }

    /// Stores a token (hashed) for `user` with access to `projects`, giving
    /// the user access to those projects.
    pub fn store_token(
        &self,
        token: &str,
        user_id: &str,
        projects: &[String],
        expires_at: i64,
    ) -> Result<()> {
        let hash = token_hash(token);
        self.write(|tx| {
            tx.execute(
                "INSERT INTO tokens (token_hash, user_id, issued_at, expires_at) VALUES (?1, ?2, ?3, ?4)",
                params![hash, user_id, now_secs(), expires_at],
            )?;
            for project in projects {
                tx.execute(
                    "INSERT OR IGNORE INTO user_projects (user_id, project_id) VALUES (?1, ?2)",
                    params![user_id, project],
                )?;
                tx.execute(
                    "INSERT OR IGNORE INTO token_projects (token_hash, project_id) VALUES (?1, ?2)",
                    params![hash, project],
                )?;
            }
            Ok(())
        })
    }

    /// Takes a user's access to a project away (their tokens stop working
    /// for it at the next invocation).
    pub fn remove_project_access(&self, user_id: &str, project_id: &str) -> Result<bool> {
        self.write(|tx| {
            Ok(tx.execute(
                "DELETE FROM user_projects WHERE user_id = ?1 AND project_id = ?2",
                params![user_id, project_id],
            )? > 0)
        })
    }

    /// The token's user, expiry, scopes and the projects it can reach now
    /// (named by the token and still the user's), with each project's
    /// granted extensions; `None` for an unknown or expired token, or one
    /// bound to a resource other than `resource` (see [`audience_accepts`]).
    pub fn token_access(&self, token: &str, resource: Option<&str>) -> Result<Option<TokenAccess>> {
        let conn = self.conn();
        let hash = token_hash(token);
        let Some((user, expires_at, audience, scope)) = conn
            .prepare_cached(
                "SELECT user_id, expires_at, audience, scope FROM tokens
                  WHERE token_hash = ?1 AND expires_at > ?2",
            )?
            .query_row(params![hash, now_secs()], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get(3)?,
                ))
            })
            .optional()?
        else {
            return Ok(None);
        };
        if !audience_accepts(audience.as_deref(), resource) {
            return Ok(None);
        }
        let mut stmt = conn.prepare_cached(
            "SELECT tp.project_id, g.extension_id
               FROM token_projects tp
               JOIN user_projects up ON up.project_id = tp.project_id AND up.user_id = ?2
               LEFT JOIN grants g ON g.project_id = tp.project_id
              WHERE tp.token_hash = ?1
              ORDER BY tp.project_id, g.extension_id",
        )?;
        let rows = stmt.query_map(params![hash, user], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
        })?;
        let mut projects: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for row in rows {
            let (project, extension) = row?;
            let granted = projects.entry(project).or_default();
            granted.extend(extension);
        }
        Ok(Some(TokenAccess {
            user,
            expires_at,
            scope,
            projects,
        }))
    }

    /// Deletes tokens that expired more than `grace_secs` ago; returns how many.
    pub fn prune_expired_tokens(&self, grace_secs: i64) -> Result<usize> {
        self.write(|tx| {
            Ok(tx.execute(
                "DELETE FROM tokens WHERE expires_at <= ?1",
                params![now_secs().saturating_sub(grace_secs)],
            )?)
        })
    }
}

/// Whether a token minted for `audience` may be used at a surface that is
/// `resource`: an operator-issued token (no audience) anywhere; a token of
/// the authorization server (RFC 8707) only at the very resource it was
/// minted for, so never at the HTTP API or the console (`None`).
pub fn audience_accepts(audience: Option<&str>, resource: Option<&str>) -> bool {
    match audience {
        None => true,
        Some(audience) => resource == Some(audience),
    }
}

pub(super) fn approvals(
    conn: &Connection,
    extension_id: &str,
    digest: &str,
) -> Result<BTreeSet<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT capability FROM approvals WHERE extension_id = ?1 AND digest = ?2",
    )?;
    let rows = stmt.query_map(params![extension_id, digest], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn is_granted(conn: &Connection, extension_id: &str, project_id: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM grants WHERE extension_id = ?1 AND project_id = ?2")?
        .query_row(params![extension_id, project_id], |_| Ok(()))
        .optional()?
        .is_some())
}

pub(super) fn generation(conn: &Connection, extension_id: &str, project_id: &str) -> Result<u64> {
    Ok(conn
        .prepare_cached(
            "SELECT generation FROM generations WHERE extension_id = ?1 AND project_id = ?2",
        )?
        .query_row(params![extension_id, project_id], |r| r.get::<_, i64>(0))
        .optional()?
        .unwrap_or(0) as u64)
}

/// The generation of (extension, project) moves by one.
fn bump_pair(tx: &Transaction<'_>, extension_id: &str, project_id: &str) -> Result<u64> {
    Ok(tx.query_row(
        "INSERT INTO generations (extension_id, project_id, generation) VALUES (?1, ?2, 1)
         ON CONFLICT (extension_id, project_id) DO UPDATE SET generation = generation + 1
         RETURNING generation",
        params![extension_id, project_id],
        |r| r.get::<_, i64>(0),
    )? as u64)
}

/// Every generation of the extension moves by one.
pub(super) fn bump_extension(tx: &Transaction<'_>, extension_id: &str) -> Result<()> {
    tx.execute(
        "UPDATE generations SET generation = generation + 1 WHERE extension_id = ?1",
        [extension_id],
    )?;
    Ok(())
}

/// Every generation of the project moves by one.
pub(super) fn bump_project(tx: &Transaction<'_>, project_id: &str) -> Result<()> {
    tx.execute(
        "UPDATE generations SET generation = generation + 1 WHERE project_id = ?1",
        [project_id],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::open;
    use super::super::{DB_FILE, NewRelease};
    use super::*;

    #[test]
    fn a_capability_check_names_grant_and_approval_separately() {
        let (_dir, state) = open();
        let files = BTreeMap::new();
        state
            .store_release(
                &NewRelease {
                    extension_id: "ext",
                    version: "1",
                    digest: "d1",
                    manifest: "",
                    key_id: "k",
                    files: &files,
                },
                false,
            )
            .unwrap();
        let check = |state: &State| {
            state
                .capability_check("ext", "p1", "d1", "documents")
                .unwrap()
        };
        assert_eq!(
            check(&state),
            CapabilityCheck {
                granted: false,
                approved: false
            }
        );
        state.grant("ext", "p1").unwrap();
        state
            .set_approval("ext", "d1", &["documents".into()], true)
            .unwrap();
        assert_eq!(
            check(&state),
            CapabilityCheck {
                granted: true,
                approved: true
            }
        );
        assert!(matches!(
            state.set_approval("ext", "d0", &["documents".into()], true),
            Err(StateError::ReleaseChanged { .. })
        ));
        assert!(matches!(
            state.grant("other", "p1"),
            Err(StateError::NotInstalled { .. })
        ));
    }

    #[test]
    fn tokens_are_stored_hashed_and_expire() {
        let (dir, state) = open();
        state
            .store_token("hst_secret-token", "u", &["p1".into()], now_secs() + 60)
            .unwrap();
        state
            .store_token("hst_old", "u", &["p1".into()], now_secs() - 1)
            .unwrap();
        assert!(
            state
                .invocation_snapshot("hst_secret-token", "ext", "p1")
                .unwrap()
                .project_access
        );
        assert!(
            state
                .invocation_snapshot("hst_old", "ext", "p1")
                .unwrap()
                .user
                .is_none()
        );
        assert!(state.token_access("hst_old", None).unwrap().is_none());
        drop(state);
        let raw = std::fs::read(dir.path().join(DB_FILE)).unwrap();
        let needle = b"hst_secret-token";
        assert!(!raw.windows(needle.len()).any(|w| w == needle));
    }
}

//! What the MCP server's OAuth authorization server keeps: registered
//! clients, connected apps (a person's consent to a client: its projects
//! and scopes), one-time authorization codes and rotating refresh tokens.
//! Codes, refresh tokens, access tokens and client secrets are stored as
//! SHA-256 hashes only; the callers hash ([`super::token_hash`]).
//!
//! Access tokens are rows of `tokens` with an `audience` (the resource
//! they were minted for), a `scope`, their `app_id` and `family_id`, and
//! `token_projects` rows for the consented projects only (never a
//! `user_projects` row: consent cannot give a person access they lack).

use rusqlite::{OptionalExtension, Transaction, params};

use super::error::{Result, StateError};
use super::{State, now_secs};

/// A client the authorization server knows by registration (RFC 7591).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredClient {
    pub client_id: String,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    /// SHA-256 of the client secret of a confidential client; `None` for a
    /// public client (`token_endpoint_auth_method: none`).
    pub secret_hash: Option<String>,
    /// `none`, `client_secret_post` or `client_secret_basic`.
    pub auth_method: String,
    /// The registration request's metadata, as stored.
    pub metadata: String,
}

/// A person's consent, and the code it yields.
#[derive(Debug, Clone)]
pub struct Consent<'a> {
    pub user: &'a str,
    pub client_id: &'a str,
    pub client_name: &'a str,
    pub redirect_host: &'a str,
    pub scope: &'a str,
    pub projects: &'a [String],
    pub code_hash: &'a str,
    pub redirect_uri: &'a str,
    pub code_challenge: &'a str,
    pub resource: &'a str,
    pub code_expires_at: i64,
}

/// An authorization code as stored, claimed by its first redemption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedCode {
    pub app_id: String,
    pub client_id: String,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub resource: String,
    pub scope: String,
    pub expires_at: i64,
}

/// What redeeming a code found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeClaim {
    Unknown,
    /// Redeemed before: the tokens issued from it are revoked now.
    Reused,
    /// This redemption holds the code (the family the tokens join).
    Claimed(ClaimedCode),
}

/// The pair of tokens one grant issues.
#[derive(Debug, Clone)]
pub struct NewTokens<'a> {
    pub app_id: &'a str,
    pub family_id: &'a str,
    pub client_id: &'a str,
    pub resource: &'a str,
    pub scope: &'a str,
    pub access_hash: &'a str,
    pub access_expires_at: i64,
    pub refresh_hash: &'a str,
    pub refresh_expires_at: i64,
}

/// A refresh token as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRefresh {
    pub family_id: String,
    pub app_id: String,
    pub client_id: String,
    pub resource: String,
    pub scope: String,
    pub expires_at: i64,
}

/// What presenting a refresh token found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefreshClaim {
    Unknown,
    /// Used before: its whole family (every token of that authorization)
    /// is revoked now.
    Reused,
    /// This request holds the token; it is spent.
    Claimed(StoredRefresh),
}

/// A connected app as the console lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectedApp {
    pub app_id: String,
    pub client_id: String,
    pub client_name: String,
    pub redirect_host: String,
    pub scope: String,
    pub projects: Vec<String>,
    pub updated_at: i64,
}

impl State {
    /// Stores a registered client.
    pub fn register_oauth_client(&self, client: &StoredClient) -> Result<()> {
        let uris = serde_json::to_string(&client.redirect_uris)
            .map_err(|e| StateError::Corrupt(format!("redirect_uris: {e}")))?;
        self.write(|tx| {
            tx.execute(
                "INSERT INTO oauth_clients (client_id, auth_method, client_name, redirect_uris, secret_hash, metadata, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    client.client_id,
                    client.auth_method,
                    client.client_name,
                    uris,
                    client.secret_hash,
                    client.metadata,
                    now_secs()
                ],
            )?;
            Ok(())
        })
    }

    /// A registered client by its id.
    pub fn oauth_client(&self, client_id: &str) -> Result<Option<StoredClient>> {
        let conn = self.conn();
        let row = conn
            .prepare_cached(
                "SELECT auth_method, client_name, redirect_uris, secret_hash, metadata
                   FROM oauth_clients WHERE client_id = ?1",
            )?
            .query_row([client_id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })
            .optional()?;
        let Some((auth_method, client_name, uris, secret_hash, metadata)) = row else {
            return Ok(None);
        };
        let redirect_uris = serde_json::from_str(&uris)
            .map_err(|e| StateError::Corrupt(format!("redirect_uris of {client_id}: {e}")))?;
        Ok(Some(StoredClient {
            client_id: client_id.to_string(),
            client_name,
            redirect_uris,
            secret_hash,
            auth_method,
            metadata,
        }))
    }

    /// Records a person's consent (their connected app for the client,
    /// whose projects and scopes the consent replaces) and its one-time
    /// code. The app's earlier codes and tokens end: a consent bounds every
    /// token of the client, so approving it again narrower narrows it at
    /// once. Answers the app's id.
    pub fn consent(&self, consent: &Consent<'_>) -> Result<String> {
        self.write(|tx| {
            let now = now_secs();
            let app_id: String = tx.query_row(
                "INSERT INTO oauth_apps (app_id, user_id, client_id, client_name, redirect_host, scope, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)
                 ON CONFLICT (user_id, client_id) DO UPDATE SET
                    client_name = excluded.client_name, redirect_host = excluded.redirect_host,
                    scope = excluded.scope, updated_at = excluded.updated_at
                 RETURNING app_id",
                params![
                    uuid::Uuid::new_v4().simple().to_string(),
                    consent.user,
                    consent.client_id,
                    consent.client_name,
                    consent.redirect_host,
                    consent.scope,
                    now
                ],
                |r| r.get(0),
            )?;
            end_authorizations(tx, &app_id)?;
            tx.execute("DELETE FROM oauth_app_projects WHERE app_id = ?1", [&app_id])?;
            for project in consent.projects {
                tx.execute(
                    "INSERT INTO oauth_app_projects (app_id, project_id) VALUES (?1, ?2)",
                    params![app_id, project],
                )?;
            }
            tx.execute(
                "INSERT INTO oauth_codes (code_hash, app_id, client_id, redirect_uri, code_challenge, resource, scope, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    consent.code_hash,
                    app_id,
                    consent.client_id,
                    consent.redirect_uri,
                    consent.code_challenge,
                    consent.resource,
                    consent.scope,
                    consent.code_expires_at
                ],
            )?;
            Ok(app_id)
        })
    }

    /// Claims a code for the token family `family_id`: the first
    /// redemption holds it whatever follows; a later one finds it
    /// [`CodeClaim::Reused`] and revokes what the first was issued.
    pub fn claim_code(&self, code_hash: &str, family_id: &str) -> Result<CodeClaim> {
        self.write(|tx| {
            let row = tx
                .query_row(
                    "SELECT app_id, client_id, redirect_uri, code_challenge, resource, scope, expires_at, family_id
                       FROM oauth_codes WHERE code_hash = ?1",
                    [code_hash],
                    |r| {
                        Ok((
                            ClaimedCode {
                                app_id: r.get(0)?,
                                client_id: r.get(1)?,
                                redirect_uri: r.get(2)?,
                                code_challenge: r.get(3)?,
                                resource: r.get(4)?,
                                scope: r.get(5)?,
                                expires_at: r.get(6)?,
                            },
                            r.get::<_, Option<String>>(7)?,
                        ))
                    },
                )
                .optional()?;
            match row {
                None => Ok(CodeClaim::Unknown),
                Some((_, Some(family))) => {
                    revoke_family(tx, &family)?;
                    Ok(CodeClaim::Reused)
                }
                Some((code, None)) => {
                    tx.execute(
                        "UPDATE oauth_codes SET family_id = ?2 WHERE code_hash = ?1",
                        params![code_hash, family_id],
                    )?;
                    Ok(CodeClaim::Claimed(code))
                }
            }
        })
    }

    /// Stores an access token and its refresh token for the app's
    /// consented projects. `false` when the app was revoked meanwhile
    /// (nothing stored).
    pub fn store_oauth_tokens(&self, tokens: &NewTokens<'_>) -> Result<bool> {
        self.write(|tx| {
            let user: Option<String> = tx
                .query_row(
                    "SELECT user_id FROM oauth_apps WHERE app_id = ?1",
                    [tokens.app_id],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(user) = user else {
                return Ok(false);
            };
            let now = now_secs();
            tx.execute(
                "INSERT INTO tokens (token_hash, user_id, issued_at, expires_at, audience, scope, app_id, family_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    tokens.access_hash,
                    user,
                    now,
                    tokens.access_expires_at,
                    tokens.resource,
                    tokens.scope,
                    tokens.app_id,
                    tokens.family_id
                ],
            )?;
            tx.execute(
                "INSERT INTO token_projects (token_hash, project_id)
                 SELECT ?1, project_id FROM oauth_app_projects WHERE app_id = ?2",
                params![tokens.access_hash, tokens.app_id],
            )?;
            tx.execute(
                "INSERT INTO oauth_refresh_tokens (token_hash, family_id, app_id, client_id, resource, scope, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    tokens.refresh_hash,
                    tokens.family_id,
                    tokens.app_id,
                    tokens.client_id,
                    tokens.resource,
                    tokens.scope,
                    tokens.refresh_expires_at
                ],
            )?;
            Ok(true)
        })
    }

    /// Spends a refresh token: the first use holds it; a second use of a
    /// spent token revokes its family (RFC 9700 §4.14: the token was
    /// stolen, or its owner's copy was).
    pub fn claim_refresh(&self, refresh_hash: &str) -> Result<RefreshClaim> {
        self.write(|tx| {
            let row = tx
                .query_row(
                    "SELECT family_id, app_id, client_id, resource, scope, expires_at, used_at
                       FROM oauth_refresh_tokens WHERE token_hash = ?1",
                    [refresh_hash],
                    |r| {
                        Ok((
                            StoredRefresh {
                                family_id: r.get(0)?,
                                app_id: r.get(1)?,
                                client_id: r.get(2)?,
                                resource: r.get(3)?,
                                scope: r.get(4)?,
                                expires_at: r.get(5)?,
                            },
                            r.get::<_, Option<i64>>(6)?,
                        ))
                    },
                )
                .optional()?;
            match row {
                None => Ok(RefreshClaim::Unknown),
                Some((stored, Some(_))) => {
                    revoke_family(tx, &stored.family_id)?;
                    Ok(RefreshClaim::Reused)
                }
                Some((stored, None)) => {
                    tx.execute(
                        "UPDATE oauth_refresh_tokens SET used_at = ?2 WHERE token_hash = ?1",
                        params![refresh_hash, now_secs()],
                    )?;
                    Ok(RefreshClaim::Claimed(stored))
                }
            }
        })
    }

    /// The person's connected apps, newest consent first.
    pub fn connected_apps(&self, user: &str) -> Result<Vec<ConnectedApp>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT a.app_id, a.client_id, a.client_name, a.redirect_host, a.scope, a.updated_at,
                    group_concat(p.project_id, char(10))
               FROM oauth_apps a LEFT JOIN oauth_app_projects p ON p.app_id = a.app_id
              WHERE a.user_id = ?1
              GROUP BY a.app_id
              ORDER BY a.updated_at DESC, a.app_id",
        )?;
        let rows = stmt.query_map([user], |r| {
            let projects: Option<String> = r.get(6)?;
            let mut projects: Vec<String> = projects
                .map(|p| p.split('\n').map(str::to_string).collect())
                .unwrap_or_default();
            projects.sort();
            Ok(ConnectedApp {
                app_id: r.get(0)?,
                client_id: r.get(1)?,
                client_name: r.get(2)?,
                redirect_host: r.get(3)?,
                scope: r.get(4)?,
                updated_at: r.get(5)?,
                projects,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Disconnects one of the person's apps: its access and refresh tokens,
    /// codes and consent go at once. Answers whether it existed.
    pub fn revoke_app(&self, user: &str, app_id: &str) -> Result<bool> {
        self.write(|tx| {
            let removed = tx.execute(
                "DELETE FROM oauth_apps WHERE app_id = ?1 AND user_id = ?2",
                params![app_id, user],
            )?;
            if removed == 0 {
                return Ok(false);
            }
            tx.execute("DELETE FROM oauth_app_projects WHERE app_id = ?1", [app_id])?;
            end_authorizations(tx, app_id)?;
            Ok(true)
        })
    }

    /// Deletes expired codes and refresh tokens; returns how many.
    pub fn prune_oauth(&self) -> Result<usize> {
        self.write(|tx| {
            let now = now_secs();
            Ok(
                tx.execute("DELETE FROM oauth_codes WHERE expires_at <= ?1", [now])?
                    + tx.execute(
                        "DELETE FROM oauth_refresh_tokens WHERE expires_at <= ?1",
                        [now],
                    )?,
            )
        })
    }
}

/// Every code, access and refresh token the app was issued. A new consent
/// ends them (the client's new code carries what the person approved now,
/// so no older token can hold more), and so does a disconnect.
fn end_authorizations(tx: &Transaction<'_>, app_id: &str) -> Result<()> {
    tx.execute("DELETE FROM oauth_codes WHERE app_id = ?1", [app_id])?;
    tx.execute(
        "DELETE FROM oauth_refresh_tokens WHERE app_id = ?1",
        [app_id],
    )?;
    tx.execute(
        "DELETE FROM token_projects WHERE token_hash IN (SELECT token_hash FROM tokens WHERE app_id = ?1)",
        [app_id],
    )?;
    tx.execute("DELETE FROM tokens WHERE app_id = ?1", [app_id])?;
    Ok(())
}

/// Every access and refresh token of one authorization.
fn revoke_family(tx: &Transaction<'_>, family_id: &str) -> Result<()> {
    tx.execute(
        "DELETE FROM token_projects WHERE token_hash IN (SELECT token_hash FROM tokens WHERE family_id = ?1)",
        [family_id],
    )?;
    tx.execute("DELETE FROM tokens WHERE family_id = ?1", [family_id])?;
    tx.execute(
        "DELETE FROM oauth_refresh_tokens WHERE family_id = ?1",
        [family_id],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::open;
    use super::super::token_hash;
    use super::*;

    fn consent<'a>(projects: &'a [String], code_hash: &'a str) -> Consent<'a> {
        Consent {
            user: "u",
            client_id: "c1",
            client_name: "Assistant",
            redirect_host: "127.0.0.1",
            scope: "read",
            projects,
            code_hash,
            redirect_uri: "http://127.0.0.1:9/cb",
            code_challenge: "challenge",
            resource: "http://h/mcp",
            code_expires_at: now_secs() + 60,
        }
    }

    fn tokens<'a>(
        app_id: &'a str,
        family: &'a str,
        access: &'a str,
        refresh: &'a str,
    ) -> NewTokens<'a> {
        NewTokens {
            app_id,
            family_id: family,
            client_id: "c1",
            resource: "http://h/mcp",
            scope: "read",
            access_hash: access,
            access_expires_at: now_secs() + 60,
            refresh_hash: refresh,
            refresh_expires_at: now_secs() + 600,
        }
    }

    #[test]
    fn a_code_redeemed_twice_revokes_what_the_first_redemption_got() {
        let (_dir, state) = open();
        state
            .store_token("hst_person", "u", &["p1".into()], now_secs() + 600)
            .unwrap();
        let projects = vec!["p1".to_string()];
        let app = state.consent(&consent(&projects, "code-1")).unwrap();
        let CodeClaim::Claimed(code) = state.claim_code("code-1", "fam").unwrap() else {
            panic!("the first redemption holds the code");
        };
        assert_eq!(code.app_id, app);
        let access = token_hash("hso_a");
        assert!(
            state
                .store_oauth_tokens(&tokens(&app, "fam", &access, "r1"))
                .unwrap()
        );
        let reached = state.token_access("hso_a", Some("http://h/mcp")).unwrap();
        assert_eq!(reached.unwrap().projects.len(), 1);
        assert_eq!(
            state.claim_code("code-1", "fam2").unwrap(),
            CodeClaim::Reused
        );
        assert!(
            state
                .token_access("hso_a", Some("http://h/mcp"))
                .unwrap()
                .is_none()
        );
        assert_eq!(state.claim_refresh("r1").unwrap(), RefreshClaim::Unknown);
    }

    #[test]
    fn a_spent_refresh_token_presented_again_revokes_its_family() {
        let (_dir, state) = open();
        state
            .store_token("hst_person", "u", &["p1".into()], now_secs() + 600)
            .unwrap();
        let projects = vec!["p1".to_string()];
        let app = state.consent(&consent(&projects, "code-1")).unwrap();
        let (a1, a2) = (token_hash("hso_1"), token_hash("hso_2"));
        state
            .store_oauth_tokens(&tokens(&app, "fam", &a1, "r1"))
            .unwrap();
        assert!(matches!(
            state.claim_refresh("r1").unwrap(),
            RefreshClaim::Claimed(_)
        ));
        state
            .store_oauth_tokens(&tokens(&app, "fam", &a2, "r2"))
            .unwrap();
        assert!(
            state
                .token_access("hso_2", Some("http://h/mcp"))
                .unwrap()
                .is_some()
        );
        assert_eq!(state.claim_refresh("r1").unwrap(), RefreshClaim::Reused);
        assert!(
            state
                .token_access("hso_2", Some("http://h/mcp"))
                .unwrap()
                .is_none()
        );
        assert_eq!(state.claim_refresh("r2").unwrap(), RefreshClaim::Unknown);
    }

    #[test]
    fn revoking_an_app_ends_its_tokens_and_lists_it_no_more() {
        let (_dir, state) = open();
        state
            .store_token(
                "hst_person",
                "u",
                &["p1".into(), "p2".into()],
                now_secs() + 600,
            )
            .unwrap();
        let projects = vec!["p2".to_string(), "p1".to_string()];
        let app = state.consent(&consent(&projects, "code-1")).unwrap();
        let access = token_hash("hso_a");
        state
            .store_oauth_tokens(&tokens(&app, "fam", &access, "r1"))
            .unwrap();
        let apps = state.connected_apps("u").unwrap();
        assert_eq!(apps.len(), 1);
        assert_eq!(apps[0].projects, ["p1", "p2"]);
        assert!(!state.revoke_app("someone-else", &app).unwrap());
        assert!(state.revoke_app("u", &app).unwrap());
        assert!(state.connected_apps("u").unwrap().is_empty());
        assert!(
            state
                .token_access("hso_a", Some("http://h/mcp"))
                .unwrap()
                .is_none()
        );
        assert_eq!(state.claim_refresh("r1").unwrap(), RefreshClaim::Unknown);
    }
}

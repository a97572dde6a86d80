//! Installed releases: the verified manifest's exact bytes and every file,
//! at most one release per extension.

use std::collections::BTreeMap;

use rusqlite::{OptionalExtension, params};

use super::access::bump_extension;
use super::error::{Result, StateError};
use super::{State, now_secs};

/// A release as installed: the verified manifest bytes and every file.
#[derive(Debug, Clone)]
pub struct StoredRelease {
    pub extension_id: String,
    pub version: String,
    pub digest: String,
    pub manifest: String,
    pub key_id: String,
    pub installed_at: i64,
}

/// What a new or upgraded release puts into the database.
pub struct NewRelease<'a> {
    pub extension_id: &'a str,
    pub version: &'a str,
    pub digest: &'a str,
    pub manifest: &'a str,
    pub key_id: &'a str,
    pub files: &'a BTreeMap<String, Vec<u8>>,
}

const RELEASE_COLUMNS: &str = "extension_id, version, digest, manifest, key_id, installed_at";

/// Puts `release` and its files in place of the extension's current ones
/// (inside the caller's transaction; approvals are the caller's).
fn replace_release_rows(tx: &rusqlite::Transaction<'_>, release: &NewRelease<'_>) -> Result<()> {
    tx.execute(
        "DELETE FROM releases WHERE extension_id = ?1",
        [release.extension_id],
    )?;
    tx.execute(
        "DELETE FROM release_files WHERE extension_id = ?1",
        [release.extension_id],
    )?;
    tx.execute(
        &format!("INSERT INTO releases ({RELEASE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
        params![
            release.extension_id,
            release.version,
            release.digest,
            release.manifest,
            release.key_id,
            now_secs()
        ],
    )?;
    for (path, bytes) in release.files {
        tx.execute(
            "INSERT INTO release_files (extension_id, path, bytes) VALUES (?1, ?2, ?3)",
            params![release.extension_id, path, bytes],
        )?;
    }
    Ok(())
}

fn release_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredRelease> {
    Ok(StoredRelease {
        extension_id: r.get(0)?,
        version: r.get(1)?,
        digest: r.get(2)?,
        manifest: r.get(3)?,
        key_id: r.get(4)?,
        installed_at: r.get(5)?,
    })
}

impl State {
    /// The digest of `extension_id`'s installed release (`None`: not
    /// installed), reused while the state's version holds.
    pub fn installed_digest(&self, extension_id: &str) -> Result<Option<String>> {
        self.cached(&self.digests, extension_id.to_string(), |key, _| {
            Ok(self
                .conn()
                .prepare_cached("SELECT digest FROM releases WHERE extension_id = ?1")?
                .query_row([key], |r| r.get(0))
                .optional()?)
        })
    }

    /// [`Self::installed_digest`] if it can be answered without the
    /// database (read at the state's current version); `None` otherwise.
    pub fn installed_digest_in_memory(&self, extension_id: &str) -> Option<Option<String>> {
        let version = self.version()?;
        super::lock(&self.digests).get(version, &extension_id.to_string())
    }

    pub fn release(&self, extension_id: &str) -> Result<Option<StoredRelease>> {
        let conn = self.conn();
        Ok(conn
            .prepare_cached(&format!(
                "SELECT {RELEASE_COLUMNS} FROM releases WHERE extension_id = ?1"
            ))?
            .query_row([extension_id], release_row)
            .optional()?)
    }

    pub fn releases(&self) -> Result<Vec<StoredRelease>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {RELEASE_COLUMNS} FROM releases ORDER BY extension_id"
        ))?;
        let rows = stmt.query_map([], release_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn release_file(&self, extension_id: &str, path: &str) -> Result<Option<Vec<u8>>> {
        let conn = self.conn();
        Ok(conn
            .prepare_cached(
                "SELECT bytes FROM release_files WHERE extension_id = ?1 AND path = ?2",
            )?
            .query_row(params![extension_id, path], |r| r.get(0))
            .optional()?)
    }

    /// Stores a verified release. `upgrade` replaces an installed one (and
    /// drops the old release's approvals); otherwise an installed extension
    /// is refused. Bumps the extension's generations. One transaction.
    pub fn store_release(&self, release: &NewRelease<'_>, upgrade: bool) -> Result<()> {
        self.write(|tx| {
            let existing: Option<String> = tx
                .query_row(
                    "SELECT version FROM releases WHERE extension_id = ?1",
                    [release.extension_id],
                    |r| r.get(0),
                )
                .optional()?;
            match (existing, upgrade) {
                (Some(version), false) => {
                    return Err(StateError::AlreadyInstalled {
                        extension: release.extension_id.to_string(),
                        version,
                    });
                }
                (None, true) => {
                    return Err(StateError::NothingToUpgrade {
                        extension: release.extension_id.to_string(),
                    });
                }
                _ => {}
            }
            tx.execute(
                "DELETE FROM approvals WHERE extension_id = ?1",
                [release.extension_id],
            )?;
            replace_release_rows(tx, release)?;
            bump_extension(tx, release.extension_id)?;
            Ok(())
        })
    }

    /// Stores a development build of `host-sim dev`, installing or replacing
    /// the extension's release, with `approved` approved for it: one
    /// transaction, so no invocation sees the build unapproved. The
    /// approvals of the release it replaces stay (and those of any earlier
    /// one go), so invocations still running on the previous build finish
    /// with what they were allowed. Bumps the extension's generations.
    pub fn store_development_release(
        &self,
        release: &NewRelease<'_>,
        approved: &[String],
    ) -> Result<()> {
        self.write(|tx| {
            let previous: Option<String> = tx
                .query_row(
                    "SELECT digest FROM releases WHERE extension_id = ?1",
                    [release.extension_id],
                    |r| r.get(0),
                )
                .optional()?;
            tx.execute(
                "DELETE FROM approvals WHERE extension_id = ?1 AND digest <> ?2 AND digest <> ?3",
                params![
                    release.extension_id,
                    release.digest,
                    previous.as_deref().unwrap_or(release.digest)
                ],
            )?;
            replace_release_rows(tx, release)?;
            for capability in approved {
                tx.execute(
                    "INSERT OR IGNORE INTO approvals (extension_id, digest, capability, approved_at)
                     VALUES (?1, ?2, ?3, ?4)",
                    params![release.extension_id, release.digest, capability, now_secs()],
                )?;
            }
            bump_extension(tx, release.extension_id)?;
            Ok(())
        })
    }

    /// Removes a release, its approvals and its grants (documents stay with
    /// their projects). Bumps the generations so cached instances go.
    pub fn remove_release(&self, extension_id: &str) -> Result<StoredRelease> {
        self.write(|tx| {
            let release = tx
                .query_row(
                    &format!("SELECT {RELEASE_COLUMNS} FROM releases WHERE extension_id = ?1"),
                    [extension_id],
                    release_row,
                )
                .optional()?
                .ok_or_else(|| StateError::NotInstalled {
                    extension: extension_id.to_string(),
                })?;
            tx.execute(
                "DELETE FROM releases WHERE extension_id = ?1",
                [extension_id],
            )?;
            tx.execute(
                "DELETE FROM approvals WHERE extension_id = ?1",
                [extension_id],
            )?;
            tx.execute("DELETE FROM grants WHERE extension_id = ?1", [extension_id])?;
            bump_extension(tx, extension_id)?;
            Ok(release)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::open;
    use super::*;

    fn release(version: &str) -> NewRelease<'_> {
        static FILES: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        NewRelease {
            extension_id: "ext",
            version,
            digest: version,
            manifest: "",
            key_id: "k",
            files: &FILES,
        }
    }

    #[test]
    fn install_upgrade_and_removal_are_refused_with_typed_errors() {
        let (_dir, state) = open();
        assert!(matches!(
            state.store_release(&release("1"), true),
            Err(StateError::NothingToUpgrade { .. })
        ));
        state.store_release(&release("1"), false).unwrap();
        match state.store_release(&release("2"), false) {
            Err(StateError::AlreadyInstalled { extension, version }) => {
                assert_eq!((extension.as_str(), version.as_str()), ("ext", "1"));
            }
            other => panic!("{other:?}"),
        }
        state.store_release(&release("2"), true).unwrap();
        assert_eq!(state.release("ext").unwrap().unwrap().version, "2");
        assert_eq!(state.remove_release("ext").unwrap().version, "2");
        assert!(matches!(
            state.remove_release("ext"),
            Err(StateError::NotInstalled { .. })
        ));
    }

    #[test]
    fn the_installed_digest_is_answered_from_memory_only_while_the_version_holds() {
        let (_dir, state) = open();
        assert_eq!(state.installed_digest_in_memory("ext"), None, "never read");
        assert_eq!(state.installed_digest("ext").unwrap(), None);
        assert_eq!(state.installed_digest_in_memory("ext"), Some(None));
        state.store_release(&release("1"), false).unwrap();
        assert_eq!(
            state.installed_digest_in_memory("ext"),
            None,
            "a commit voids what memory held"
        );
        assert_eq!(state.installed_digest("ext").unwrap().as_deref(), Some("1"));
        state.store_release(&release("2"), true).unwrap();
        assert_eq!(state.installed_digest("ext").unwrap().as_deref(), Some("2"));
        assert_eq!(
            state.installed_digest_in_memory("ext"),
            Some(Some("2".to_string()))
        );
    }
}

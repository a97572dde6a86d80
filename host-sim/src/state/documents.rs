//! The document service's storage: JSON documents per (project,
//! extension, collection, id) with revisions and compare-and-set writes.
//! Reads are reused while the state's version holds.

use rusqlite::{Connection, OptionalExtension, params};

use super::error::Result;
use super::{State, now_secs};

/// One stored document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDocument {
    pub revision: u64,
    pub body: String,
}

/// A document of a project, with where it lives (operator inspection).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectDocument {
    pub extension_id: String,
    pub collection: String,
    pub id: String,
    pub document: StoredDocument,
}

/// The write condition of the document service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    None,
    Absent,
    Revision(u64),
}

/// A write's result: the new state or the stored revision on conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome<T> {
    Done(T),
    /// The condition did not hold; carries the stored revision (0: absent).
    Conflict(u64),
}

/// Scope of a document call: always the invoking project and extension.
#[derive(Debug, Clone, Copy)]
pub struct DocumentScope<'a> {
    pub project_id: &'a str,
    pub extension_id: &'a str,
}

/// (project, extension, collection, id).
pub(super) type DocumentKey = (String, String, String, String);

impl State {
    pub fn document(
        &self,
        scope: DocumentScope<'_>,
        collection: &str,
        id: &str,
    ) -> Result<Option<StoredDocument>> {
        get_document(&self.conn(), scope, collection, id)
    }

    /// [`Self::document`], reused while the state stays at one version.
    pub fn document_cached(
        &self,
        scope: DocumentScope<'_>,
        collection: &str,
        id: &str,
    ) -> Result<Option<StoredDocument>> {
        let key = (
            scope.project_id.to_string(),
            scope.extension_id.to_string(),
            collection.to_string(),
            id.to_string(),
        );
        self.cached(&self.documents, key, |_, _| {
            self.document(scope, collection, id)
        })
    }

    pub fn put_document(
        &self,
        scope: DocumentScope<'_>,
        collection: &str,
        id: &str,
        body: &str,
        condition: Condition,
    ) -> Result<WriteOutcome<u64>> {
        self.write(|tx| {
            let stored = get_document(tx, scope, collection, id)?;
            let current = stored.as_ref().map(|d| d.revision).unwrap_or(0);
            if !condition_holds(condition, current) {
                return Ok(WriteOutcome::Conflict(current));
            }
            let revision = current + 1;
            tx.execute(
                "INSERT INTO documents (project_id, extension_id, collection, id, revision, body, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (project_id, extension_id, collection, id) DO UPDATE SET
                   revision = excluded.revision, body = excluded.body, updated_at = excluded.updated_at",
                params![
                    scope.project_id,
                    scope.extension_id,
                    collection,
                    id,
                    revision as i64,
                    body,
                    now_secs()
                ],
            )?;
            Ok(WriteOutcome::Done(revision))
        })
    }

    pub fn delete_document(
        &self,
        scope: DocumentScope<'_>,
        collection: &str,
        id: &str,
        condition: Condition,
    ) -> Result<WriteOutcome<bool>> {
        self.write(|tx| {
            let current = get_document(tx, scope, collection, id)?
                .map(|d| d.revision)
                .unwrap_or(0);
            if !condition_holds(condition, current) {
                return Ok(WriteOutcome::Conflict(current));
            }
            let removed = tx.execute(
                "DELETE FROM documents WHERE project_id = ?1 AND extension_id = ?2 AND collection = ?3 AND id = ?4",
                params![scope.project_id, scope.extension_id, collection, id],
            )?;
            Ok(WriteOutcome::Done(removed > 0))
        })
    }

    /// Every document of a project (operator inspection and tests).
    pub fn documents(&self, project_id: &str) -> Result<Vec<ProjectDocument>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT extension_id, collection, id, revision, body FROM documents
             WHERE project_id = ?1 ORDER BY extension_id, collection, id",
        )?;
        let rows = stmt.query_map([project_id], |r| {
            Ok(ProjectDocument {
                extension_id: r.get(0)?,
                collection: r.get(1)?,
                id: r.get(2)?,
                document: StoredDocument {
                    revision: r.get::<_, i64>(3)? as u64,
                    body: r.get(4)?,
                },
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

fn get_document(
    conn: &Connection,
    scope: DocumentScope<'_>,
    collection: &str,
    id: &str,
) -> Result<Option<StoredDocument>> {
    Ok(conn
        .prepare_cached(
            "SELECT revision, body FROM documents
             WHERE project_id = ?1 AND extension_id = ?2 AND collection = ?3 AND id = ?4",
        )?
        .query_row(
            params![scope.project_id, scope.extension_id, collection, id],
            |r| {
                Ok(StoredDocument {
                    revision: r.get::<_, i64>(0)? as u64,
                    body: r.get(1)?,
                })
            },
        )
        .optional()?)
}

fn condition_holds(condition: Condition, current: u64) -> bool {
    match condition {
        Condition::None => true,
        Condition::Absent => current == 0,
        Condition::Revision(r) => current == r && r != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::super::DB_FILE;
    use super::super::tests::open;
    use super::*;

    const P1: DocumentScope<'static> = DocumentScope {
        project_id: "p1",
        extension_id: "ext",
    };

    #[test]
    fn documents_are_reused_only_while_the_version_holds() {
        let (dir, state) = open();
        state
            .put_document(P1, "site", "a", "1", Condition::Absent)
            .unwrap();
        let read = |state: &State| state.document_cached(P1, "site", "a").unwrap().unwrap();
        assert_eq!(read(&state).body, "1");
        // Another process writes: the next read sees it.
        let other = super::super::tests::open_at(&dir.path().join(DB_FILE));
        other
            .put_document(P1, "site", "a", "2", Condition::Revision(1))
            .unwrap();
        assert_eq!(read(&state).body, "2");
        // While a commit is under way nothing cached is used.
        let in_flight = other.changes.begin();
        other
            .conn()
            .execute(
                "UPDATE documents SET body = '3', revision = 3 WHERE id = 'a'",
                [],
            )
            .unwrap();
        assert_eq!(read(&state).body, "3");
        drop(in_flight);
        assert_eq!(read(&state).body, "3");
    }

    #[test]
    fn documents_have_revisions_and_compare_and_set() {
        let (_dir, state) = open();
        assert_eq!(
            state
                .put_document(P1, "site", "a", "1", Condition::Absent)
                .unwrap(),
            WriteOutcome::Done(1)
        );
        assert_eq!(
            state
                .put_document(P1, "site", "a", "2", Condition::Absent)
                .unwrap(),
            WriteOutcome::Conflict(1)
        );
        assert_eq!(
            state
                .put_document(P1, "site", "a", "2", Condition::Revision(1))
                .unwrap(),
            WriteOutcome::Done(2)
        );
        assert_eq!(
            state
                .put_document(P1, "site", "a", "3", Condition::Revision(1))
                .unwrap(),
            WriteOutcome::Conflict(2)
        );
        let other = DocumentScope {
            project_id: "p2",
            extension_id: "ext",
        };
        assert_eq!(state.document(other, "site", "a").unwrap(), None);
        assert_eq!(
            state.documents("p1").unwrap(),
            [ProjectDocument {
                extension_id: "ext".into(),
                collection: "site".into(),
                id: "a".into(),
                document: StoredDocument {
                    revision: 2,
                    body: "2".into()
                },
            }]
        );
        assert_eq!(
            state
                .delete_document(P1, "site", "a", Condition::Revision(1))
                .unwrap(),
            WriteOutcome::Conflict(2)
        );
        assert_eq!(
            state
                .delete_document(P1, "site", "a", Condition::None)
                .unwrap(),
            WriteOutcome::Done(true)
        );
        assert_eq!(
            state
                .delete_document(P1, "site", "a", Condition::None)
                .unwrap(),
            WriteOutcome::Done(false)
        );
    }
}

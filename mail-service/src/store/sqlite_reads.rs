//! SQLite reads on the calling thread, for the reads every send makes (its
//! `from` domain, its recipients against the suppression list).
//!
//! A read through the sqlx pool is a hop to that connection's worker thread
//! and back: two context switches, more than the read itself costs (an
//! index lookup of a few microseconds on pages already in memory). These
//! connections run the statement on the request's own thread instead. In
//! WAL mode a reader never waits for the writer or for a checkpoint, so the
//! thread is held only for the read; the busy timeout is the sqlx readers'
//! own, for the rare lock a reader can meet (a WAL being recovered).
//! Every other read keeps the sqlx pool and its one `FromRow` mapping.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::Connection;

use crate::error::Error;

use super::sqlite::failed;

/// Idle connections kept for the next reads; more are opened when more
/// threads read at once, and dropped when they come back to a full stack.
const KEPT: usize = 8;

#[derive(Debug, Clone)]
pub(crate) struct Readers {
    path: Arc<PathBuf>,
    busy_timeout: Duration,
    idle: Arc<Mutex<Vec<Connection>>>,
}

impl Readers {
    pub fn new(path: &Path, busy_timeout: Duration) -> Readers {
        Readers {
            path: Arc::new(path.to_path_buf()),
            busy_timeout,
            idle: Arc::default(),
        }
    }

    /// Runs `read` on an idle connection (or a new one) on this thread.
    pub fn read<T>(
        &self,
        read: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, Error> {
        let idle = self.lock().pop();
        let conn = match idle {
            Some(conn) => conn,
            None => self.open().map_err(|e| failed(&e))?,
        };
        let result = read(&conn).map_err(|e| failed(&e));
        let mut idle = self.lock();
        if idle.len() < KEPT {
            idle.push(conn);
        }
        result
    }

    fn open(&self) -> rusqlite::Result<Connection> {
        let conn = Connection::open(self.path.as_path())?;
        conn.busy_timeout(self.busy_timeout)?;
        // No memory map (the sqlx readers' default too): a mapped reader
        // maps the file anew each time a commit has grown it, and unmapping
        // the old map interrupts every core to flush its TLB; under steady
        // sends that was one remap of the whole file per send (strace) and
        // 3–6 % of the server's CPU (perf).
        conn.execute_batch("PRAGMA query_only = ON;")?;
        Ok(conn)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A TEXT column read through its type's `FromStr` (the stored enums).
pub(crate) fn parsed<T>(row: &rusqlite::Row<'_>, column: usize) -> rusqlite::Result<T>
where
    T: std::str::FromStr,
    T::Err: std::error::Error + Send + Sync + 'static,
{
    row.get::<_, String>(column)?.parse().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Text, Box::new(e))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_see_committed_writes_and_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode = WAL; CREATE TABLE t (n INTEGER); INSERT INTO t VALUES (1);",
            )
            .unwrap();
        let readers = Readers::new(&path, Duration::from_millis(100));
        let count = || {
            readers
                .read(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)))
                .unwrap()
        };
        assert_eq!(count(), 1);
        writer.execute("INSERT INTO t VALUES (2)", []).unwrap();
        // The same (kept) connection sees the later commit.
        assert_eq!(count(), 2);
        let refused = readers.read(|c| c.execute("INSERT INTO t VALUES (3)", []));
        assert!(
            matches!(refused, Err(Error::Unavailable { .. })),
            "{refused:?}"
        );
        assert_eq!(count(), 2);
    }

    #[test]
    fn a_stored_text_that_does_not_parse_is_an_error_naming_it() {
        let conn = Connection::open_in_memory().unwrap();
        let read = conn.query_row("SELECT 'nonsense'", [], |r| {
            parsed::<crate::model::DomainStatus>(r, 0)
        });
        let e = read.unwrap_err().to_string();
        assert!(e.contains("nonsense"), "{e}");
    }
}

//! A service database over time, decided once for mail-service and
//! host-sim:
//!
//! - [`backup_sqlite`]: a consistent copy of a live SQLite database in WAL
//!   mode, made with SQLite's online backup API while the service keeps
//!   writing (never a file copy, which tears under writes), checked, and put
//!   in place only when complete; never over an existing file.
//! - [`SchemaTooNew`]: the refusal of a binary started on a database whose
//!   schema a newer release wrote, before anything is written, with the exit
//!   code both services end with ([`EXIT_SCHEMA_TOO_NEW`]).
//!
//! Each service keeps its own schema and its own way of counting versions
//! (mail-service: sqlx's migration table; host-sim: `PRAGMA user_version`).

mod backup;

pub use backup::{BackupError, BackupReport, Progress, ProgressPrinter, backup_sqlite};

/// The exit code of a command refused because the database's schema is
/// newer than the binary (both services).
pub const EXIT_SCHEMA_TOO_NEW: u8 = 11;

/// The exit code of a usage error (clap's own), also a backup refused
/// because its target exists or the backend has its own tool.
pub const EXIT_USAGE: u8 = 2;

/// A binary started on a database a newer release migrated: refused before
/// anything is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the database {database} is at schema version {found}, this binary knows up to {known}: run a newer release, or restore the backup taken before the upgrade; refusing to start, nothing was changed"
)]
pub struct SchemaTooNew {
    /// How the database is named in messages (a file, a PostgreSQL schema).
    pub database: String,
    pub found: i64,
    pub known: i64,
}

impl SchemaTooNew {
    /// Refuses a database at schema version `found` when this binary knows
    /// versions up to `known` only.
    pub fn check(database: impl std::fmt::Display, found: i64, known: i64) -> Result<(), Self> {
        if found > known {
            return Err(SchemaTooNew {
                database: database.to_string(),
                found,
                known,
            });
        }
        Ok(())
    }
}

//! `mail-service backup --to PATH`: a consistent copy of the live SQLite
//! database while the service keeps serving (SQLite's online backup, see
//! `db-lifecycle`). PostgreSQL has its own tool, `pg_dump`; the command
//! says how to use it instead.

use std::path::{Path, PathBuf};

use db_lifecycle::{BackupError, BackupReport, ProgressPrinter, backup_sqlite};

use crate::store::StorageConfig;

/// Why `backup` made no copy.
#[derive(Debug, thiserror::Error)]
pub enum BackupRefused {
    #[error(
        "`backup` copies the embedded SQLite database; this node uses PostgreSQL, whose backup tool is pg_dump: \
         `pg_dump --format=custom{schema} --file=mail.dump \"$DATABASE_URL\"`, restored with \
         `pg_restore --dbname=NEW_DATABASE_URL mail.dump` (see \"Operating over time\" in mail-service/README.md). \
         The master key file is not in the dump: keep it, apart from the dump"
    )]
    Postgres { schema: String },
    #[error(transparent)]
    Failed(#[from] BackupError),
}

impl BackupRefused {
    /// 2 (usage) for PostgreSQL and a target that exists; 1 when the copy
    /// failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            BackupRefused::Postgres { .. } => db_lifecycle::EXIT_USAGE,
            BackupRefused::Failed(e) => e.exit_code(),
        }
    }
}

/// Copies the database of `storage` to `to` (which must not exist),
/// printing the progress of a large database on stderr.
pub async fn backup(storage: &StorageConfig, to: &Path) -> Result<BackupReport, BackupRefused> {
    let source: PathBuf = match storage {
        StorageConfig::Sqlite { path, .. } => path.clone(),
        StorageConfig::Postgres { schema, .. } => {
            return Err(BackupRefused::Postgres {
                schema: schema
                    .as_ref()
                    .map(|s| format!(" --schema={s}"))
                    .unwrap_or_default(),
            });
        }
    };
    let target = to.to_path_buf();
    let copied = tokio::task::spawn_blocking(move || {
        let mut printer = ProgressPrinter::default();
        backup_sqlite(&source, &target, &mut |p| printer.report(p))
    })
    .await
    .map_err(|e| BackupError::Io {
        path: to.to_path_buf(),
        source: std::io::Error::other(format!("the backup thread ended: {e}")),
    })?;
    Ok(copied?)
}

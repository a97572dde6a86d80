//! `host-sim backup --to PATH`: a consistent copy of the live state
//! database while the host serves (SQLite's online backup, see
//! `db-lifecycle`), without opening the host.

use std::path::Path;
use std::process::ExitCode;

use db_lifecycle::{ProgressPrinter, backup_sqlite};

/// Copies the state database at `db` to `to` (which must not exist),
/// printing the progress of a large state on stderr.
pub(crate) fn run(db: &Path, to: &Path) -> ExitCode {
    let mut printer = ProgressPrinter::default();
    match backup_sqlite(db, to, &mut |p| printer.report(p)) {
        Ok(report) => {
            eprintln!("{}", report.summary());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

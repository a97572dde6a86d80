//! The online backup of a live database: one consistent snapshot under
//! writes, every commit made before it, the progress after every step, and
//! never a file overwritten.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use db_lifecycle::{BackupError, EXIT_USAGE, Progress, ProgressPrinter, backup_sqlite};
use rusqlite::Connection;

/// The pages the backup copies per step (4 MiB of 4 KiB pages).
const PAGES_PER_STEP: u64 = 1024;

/// A WAL database with `rows` rows of 4 KiB and a counter each write moves
/// in the same transaction as its row.
fn database(path: &Path, rows: i64) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; \
         CREATE TABLE rows (id INTEGER PRIMARY KEY, body BLOB NOT NULL); \
         CREATE TABLE counter (n INTEGER NOT NULL); INSERT INTO counter VALUES (0);",
    )
    .unwrap();
    for _ in 0..rows {
        write_one(&conn);
    }
    conn
}

fn write_one(conn: &Connection) {
    conn.execute_batch(
        "BEGIN IMMEDIATE; INSERT INTO rows (body) VALUES (randomblob(4096)); \
         UPDATE counter SET n = n + 1; COMMIT;",
    )
    .unwrap();
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".partial-"))
        .collect()
}

#[test]
fn a_backup_under_writes_is_one_consistent_snapshot_holding_every_earlier_commit() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("live.db");
    drop(database(&source, 3000));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (source, stop) = (source.clone(), stop.clone());
        std::thread::spawn(move || {
            let conn = Connection::open(&source).unwrap();
            conn.busy_timeout(Duration::from_secs(10)).unwrap();
            let mut written = 0;
            while !stop.load(Ordering::Relaxed) {
                write_one(&conn);
                written += 1;
            }
            written
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let before = count(
        &Connection::open(&source).unwrap(),
        "SELECT count(*) FROM rows",
    );
    let target = dir.path().join("copy.db");
    let mut seen = Vec::new();
    let report = backup_sqlite(&source, &target, &mut |p| seen.push(p)).unwrap();
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    assert!(written > 0, "the writer wrote during the backup");

    let copy = Connection::open(&target).unwrap();
    let verdict: String = copy
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(verdict, "ok");
    let rows = count(&copy, "SELECT count(*) FROM rows");
    assert_eq!(
        rows,
        count(&copy, "SELECT n FROM counter"),
        "rows and counter from one snapshot"
    );
    assert!(rows >= before, "{rows} rows, {before} committed before");
    assert!(report.pages > PAGES_PER_STEP, "several steps");
    assert!(seen.len() > 1, "progress after every step: {seen:?}");
    assert!(seen.windows(2).all(|w| w[0].copied <= w[1].copied));
    assert_eq!(
        seen.last(),
        Some(&Progress {
            copied: report.pages,
            total: report.pages
        })
    );
    assert_eq!(report.bytes, std::fs::metadata(&target).unwrap().len());
    assert!(report.master_keys.is_empty());
    assert!(leftovers(dir.path()).is_empty());
}

#[test]
fn an_existing_target_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("live.db");
    drop(database(&source, 3));
    let target = dir.path().join("copy.db");
    std::fs::write(&target, b"yesterday's backup").unwrap();
    let e = backup_sqlite(&source, &target, &mut |_| {}).unwrap_err();
    assert!(matches!(e, BackupError::TargetExists { .. }), "{e}");
    assert_eq!(e.exit_code(), EXIT_USAGE);
    assert!(e.to_string().contains("never overwrites"), "{e}");
    assert_eq!(std::fs::read(&target).unwrap(), b"yesterday's backup");
    assert!(leftovers(dir.path()).is_empty());
}

#[test]
fn a_missing_database_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("nothing.db");
    let target = dir.path().join("copy.db");
    let e = backup_sqlite(&source, &target, &mut |_| {}).unwrap_err();
    assert!(matches!(e, BackupError::NoDatabase { .. }), "{e}");
    assert!(!source.exists() && !target.exists());
}

#[test]
fn the_report_names_the_master_keys_the_copy_needs() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("live.db");
    let conn = database(&source, 1);
    conn.execute_batch(
        "CREATE TABLE master_keys (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, created_at INTEGER NOT NULL); \
         INSERT INTO master_keys VALUES ('bbbb000011112222', 2, 0), ('aaaa000011112222', 1, 0);",
    )
    .unwrap();
    let target = dir.path().join("copy.db");
    let report = backup_sqlite(&source, &target, &mut |_| {}).unwrap();
    assert_eq!(report.master_keys, ["aaaa000011112222", "bbbb000011112222"]);
    assert!(
        report
            .summary()
            .contains("aaaa000011112222, bbbb000011112222")
    );
}

#[test]
fn progress_is_printed_at_most_once_a_second() {
    let mut printer = ProgressPrinter::default();
    let start = Instant::now();
    let half = Progress {
        copied: 512,
        total: 1024,
    };
    assert_eq!(
        printer.line_at(half, start),
        None,
        "a small backup prints none"
    );
    let later = start + Duration::from_millis(1500);
    assert_eq!(
        printer.line_at(half, later).as_deref(),
        Some("backup: 50% (512 of 1024 pages, 2 s)")
    );
    assert_eq!(
        printer.line_at(half, later + Duration::from_millis(500)),
        None
    );
    assert!(
        printer
            .line_at(half, later + Duration::from_secs(1))
            .is_some()
    );
}

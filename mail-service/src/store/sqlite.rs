//! SQLite's write path: one writer thread owns the only write connection and
//! commits the units of concurrent requests together (group commit).
//!
//! The thread takes every unit waiting in its queue (up to `MAX_GROUP`),
//! runs them in one `BEGIN IMMEDIATE` transaction, each unit of more than
//! one step inside a savepoint of its own, commits once, and only then
//! answers each unit's caller. A unit whose statement fails is rolled back
//! to its savepoint and answered with its error; the others still commit.
//! When the transaction itself cannot begin or commit (another process holds
//! the database past the busy timeout, an I/O error), every unit of the
//! group is answered with the error and nothing of it is written; the next
//! group starts afresh. When the queue is empty after the first unit, the
//! thread yields its core once before committing, so a unit being made on
//! the other core can join the group. Readers never wait for the writer:
//! they use their own pool (WAL mode). Checkpoints (copying the WAL into the database file,
//! with its fsync) run on a thread of their own every `CHECKPOINT_EVERY`,
//! never inside a commit, so they do not stall the writer.
//!
//! Those checkpoints are `PASSIVE`: they never wait, so under steady writes
//! and reads there is nearly always a reader on the WAL and the writer never
//! gets to start it over; the file grew to several times the database
//! (295 MB beside 67 MB in a 10-minute soak). So once the WAL file passes
//! `WAL_LIMIT` the checkpoint thread runs one `TRUNCATE` checkpoint, which
//! waits (the busy timeout) for the readers to move off the WAL, holds new
//! writes back while it copies what is left, and cuts the file to zero;
//! `journal_size_limit` cuts it to the limit whenever the writer starts it
//! over by itself. A WAL that has seen steady writes keeps its blocks
//! allocated up to the limit (`allocate_ahead`), so the writer's appends do
//! not wait for the file system's allocation while a checkpoint writes the
//! file back, and a held lock is tried again every `BUSY_RETRY`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::ToSqlOutput;
use rusqlite::{Connection, OptionalExtension, ToSql};
use tokio::sync::{mpsc, oneshot};

use crate::error::Error;

use super::unit::{self, Param, Ran, Step, Unit, Yields};

/// At most this many units share one transaction.
const MAX_GROUP: usize = 512;
/// How often the checkpoint thread copies the WAL into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);
/// How long a `TRUNCATE` checkpoint waits for readers before it gives up
/// until its next turn. While it waits it holds off the writer, so it must
/// give up well before the writer's own busy timeout runs out (with the
/// same 5 s on both, a loaded machine let the writer time out first and a
/// send fail with "storage is not available").
const CHECKPOINT_WAIT: Duration = Duration::from_secs(1);
/// The WAL size past which the checkpoint thread truncates it (and what
/// `journal_size_limit` keeps of it when it is started over).
const WAL_LIMIT: u64 = 64 << 20;
/// A WAL that grew past this (a quarter of its limit, when that is less)
/// has its blocks allocated ahead, up to its limit, from then on.
const ALLOCATE_AHEAD_PAST: u64 = 4 << 20;

type Reply = oneshot::Sender<Result<Ran, Error>>;

enum Request {
    Run(Unit, Reply),
    /// Finish what is queued before it, close the connection, then answer.
    Close(oneshot::Sender<()>),
}

/// The handle every clone of the store shares.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    requests: mpsc::UnboundedSender<Request>,
}

impl Writer {
    /// Opens the write connection and starts the writer thread.
    pub fn start(path: &Path, busy_timeout: Duration) -> anyhow::Result<Writer> {
        Self::start_bounded(path, busy_timeout, WAL_LIMIT)
    }

    /// `start`, with the WAL kept to `wal_limit` bytes.
    fn start_bounded(
        path: &Path,
        busy_timeout: Duration,
        wal_limit: u64,
    ) -> anyhow::Result<Writer> {
        let conn = open(path, busy_timeout)?;
        let checkpoints = open(path, busy_timeout.min(CHECKPOINT_WAIT))?;
        for conn in [&conn, &checkpoints] {
            conn.pragma_update(None, "journal_size_limit", wal_limit as i64)?;
        }
        let wal = wal_file(path);
        // The checkpoint thread runs until the writer thread ends.
        let (writer_alive, writer_gone) = std::sync::mpsc::channel::<()>();
        let checkpointer = std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || {
                wait_for_locks_up_to(busy_timeout.min(CHECKPOINT_WAIT));
                checkpoint(checkpoints, &wal, wal_limit, writer_gone)
            })?;
        let (requests, queue) = mpsc::unbounded_channel();
        let path = path.to_path_buf();
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || {
                serve(
                    conn,
                    queue,
                    path,
                    busy_timeout,
                    (writer_alive, checkpointer),
                )
            })?;
        Ok(Writer { requests })
    }

    /// Runs the unit in the next group; answers once that group committed
    /// (or failed).
    pub async fn run(&self, unit: Unit) -> Result<Ran, Error> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(Request::Run(unit, reply))
            .map_err(|_| closed())?;
        // A reply dropped unanswered: the writer gave up on this unit's
        // group (see `commit_group_or_recover`); nothing of it committed.
        answer.await.map_err(|_| unavailable())?
    }

    /// Queues the unit without waiting for its answer: the writer runs its
    /// queue in order, so a unit `run` after it sees it committed.
    pub fn submit(&self, unit: Unit) -> Result<(), Error> {
        let (reply, _) = oneshot::channel();
        self.requests
            .send(Request::Run(unit, reply))
            .map_err(|_| closed())
    }

    /// Lets the queued units finish and closes the write connection.
    pub async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.requests.send(Request::Close(done)).is_ok() {
            let _ = closed.await;
        }
    }
}

fn closed() -> Error {
    Error::Unavailable {
        detail: "storage is closed".into(),
    }
}

/// How long a connection of the writer or the checkpoint thread sleeps
/// before it tries a lock another connection holds again. SQLite's own busy
/// handler sleeps 1, 2, 5, 10 … 100 ms between tries: the writer, meeting
/// a checkpoint's lock for a moment, slept a millisecond or more after it
/// was gone with every request waiting behind it, and a `TRUNCATE`
/// checkpoint waiting so for the last reader held the writes back as long
/// (perf sched under `send_bound`: the cores idle for 1–20 ms at a time).
const BUSY_RETRY: Duration = Duration::from_micros(100);

thread_local! {
    /// The busy timeout of the connection this thread uses, and when the
    /// lock it waits for was first met.
    static BUSY_WAIT: std::cell::Cell<(Duration, Option<std::time::Instant>)> =
        const { std::cell::Cell::new((Duration::ZERO, None)) };
}

/// Sets how long a connection opened by [`open`] waits for a lock when it
/// is used on this thread (the writer thread and the checkpoint thread
/// each set their own connection's).
fn wait_for_locks_up_to(timeout: Duration) {
    BUSY_WAIT.with(|wait| wait.set((timeout, None)));
}

/// The busy handler of [`open`]'s connections: tries again every
/// `BUSY_RETRY` until this thread's busy timeout has passed since the
/// lock was first met (`tries` is 0 then).
fn retry_soon(tries: i32) -> bool {
    BUSY_WAIT.with(|wait| {
        let (timeout, first) = wait.get();
        let now = std::time::Instant::now();
        let first = match first {
            Some(first) if tries > 0 => first,
            _ => now,
        };
        wait.set((timeout, Some(first)));
        if now.duration_since(first) >= timeout {
            return false;
        }
        std::thread::sleep(BUSY_RETRY);
        true
    })
}

/// A connection that waits up to `busy_timeout` for a lock on the thread
/// that opens it (the setup's statements) and, through `retry_soon`, on
/// the thread that says so with `wait_for_locks_up_to`.
fn open(path: &Path, busy_timeout: Duration) -> rusqlite::Result<Connection> {
    wait_for_locks_up_to(busy_timeout);
    let conn = Connection::open(path)?;
    conn.busy_handler(Some(retry_soon))?;
    // WAL + NORMAL: a commit survives a crash of the process (the crash test
    // covers it); see README for power loss.
    // No checkpoint inside a commit: the checkpoint thread does them. The
    // writer keeps the hot pages of the indexes it inserts into in its own
    // cache (64 MiB) and reads the rest through a memory map.
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
         PRAGMA wal_autocheckpoint = 0; PRAGMA cache_size = -65536; PRAGMA mmap_size = 268435456;",
    )?;
    Ok(conn)
}

/// The WAL file of the database at `path`.
fn wal_file(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// Copies what the WAL holds into the database file, without blocking the
/// writer (`PASSIVE`); once everything is copied, the writer starts the WAL
/// over from its beginning. When readers keep it from doing so and the file
/// passes `wal_limit`, a `TRUNCATE` checkpoint waits for them and cuts it.
fn checkpoint(
    conn: Connection,
    wal: &Path,
    wal_limit: u64,
    writer_gone: std::sync::mpsc::Receiver<()>,
) {
    let mut steady_writes = false;
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
        writer_gone.recv_timeout(CHECKPOINT_EVERY)
    {
        let size = std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0);
        steady_writes |= size > ALLOCATE_AHEAD_PAST.min(wal_limit / 4);
        let mode = if size > wal_limit {
            "TRUNCATE"
        } else {
            "PASSIVE"
        };
        // One row: (busy, frames in the WAL, frames copied); busy when a
        // `TRUNCATE` could not get every reader off the WAL in time.
        let ran = conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
            row.get::<_, i64>(0)
        });
        match ran {
            Ok(busy) if busy != 0 && mode == "TRUNCATE" => {
                tracing::warn!(
                    wal_bytes = size,
                    "sqlite WAL over its limit and busy; retrying"
                )
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "sqlite checkpoint failed; retrying"),
        }
        if steady_writes {
            allocate_ahead(wal, wal_limit);
        }
    }
}

/// Allocates the WAL's blocks up to `wal_limit` without changing its size
/// (`fallocate` with `KEEP_SIZE`), unless they are. The writer appends to
/// the WAL while the checkpoint's fsync writes it back; on ext4 each append
/// into blocks not yet allocated waited for that writeback's allocation
/// (`ext4_da_get_block_prep`, perf sched: the writer in D state with every
/// request behind it). Into allocated blocks it does not. A `TRUNCATE`
/// frees them all, so this runs after every checkpoint of a WAL that has
/// seen steady writes; the file's size, and what `journal_size_limit`
/// keeps, are as before.
#[cfg(target_os = "linux")]
fn allocate_ahead(wal: &Path, wal_limit: u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(file) = std::fs::OpenOptions::new().write(true).open(wal) else {
        return;
    };
    if file.metadata().is_ok_and(|m| m.blocks() * 512 >= wal_limit) {
        return;
    }
    let keep_size = rustix::fs::FallocateFlags::KEEP_SIZE;
    if let Err(e) = rustix::fs::fallocate(&file, keep_size, 0, wal_limit) {
        tracing::debug!(error = %e, "the WAL's blocks could not be allocated ahead");
    }
}

/// Elsewhere the file system allocates as the WAL grows.
#[cfg(not(target_os = "linux"))]
fn allocate_ahead(_wal: &Path, _wal_limit: u64) {}

/// The writer thread: groups what is queued, commits, answers; ends when
/// asked to close or when every handle is gone.
fn serve(
    mut conn: Connection,
    mut queue: mpsc::UnboundedReceiver<Request>,
    path: PathBuf,
    busy_timeout: Duration,
    checkpointer: (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>),
) {
    wait_for_locks_up_to(busy_timeout);
    let mut closing = None;
    while let Some(request) = queue.blocking_recv() {
        let mut group = Vec::new();
        let mut next = Some(request);
        let mut yielded = false;
        while let Some(request) = next.take() {
            match request {
                Request::Run(unit, reply) => group.push((unit, reply)),
                Request::Close(done) => closing = Some(done),
            }
            if closing.is_none() && group.len() < MAX_GROUP {
                next = queue.try_recv().ok();
                // Once per group, an empty queue gives the core away before
                // the commit: a request running beside the writer (the other
                // core busy with a signature, say) queues its unit into this
                // group instead of the next, which halves the pages written
                // per send at the signed rate. On an idle machine the yield
                // returns at once.
                if next.is_none() && !yielded {
                    yielded = true;
                    std::thread::yield_now();
                    next = queue.try_recv().ok();
                }
            }
        }
        if !group.is_empty() && !commit_group_or_recover(&conn, group) {
            // The connection is left inside a transaction it cannot end (or
            // a fault interrupted it): a fresh one starts clean, and dropping
            // the old one rolls back whatever it had not committed.
            match open(&path, busy_timeout) {
                Ok(fresh) => conn = fresh,
                Err(e) => {
                    tracing::error!(error = %e, "sqlite writer could not reopen the database")
                }
            }
        }
        if closing.is_some() {
            break;
        }
    }
    drop(conn);
    let (writer_alive, checkpoint_thread) = checkpointer;
    drop(writer_alive);
    let _ = checkpoint_thread.join();
    if let Some(done) = closing {
        let _ = done.send(());
    }
}

/// `commit_group`, surviving a panic inside it (a bug in a statement's
/// handling, a fault in the driver): the group's callers, whose replies are
/// dropped unanswered, get 503 (`Writer::run`), its transaction is never
/// committed, and the writer goes on with a fresh connection instead of
/// ending and leaving every later request without storage.
fn commit_group_or_recover(conn: &Connection, group: Vec<(Unit, Reply)>) -> bool {
    let units = group.len();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| commit_group(conn, group))) {
        Ok(usable) => usable,
        Err(_) => {
            tracing::error!(
                units,
                "sqlite writer panicked in a group; nothing of it was committed; reopening the connection"
            );
            false
        }
    }
}

/// Runs the group in one transaction and answers every unit. Returns false
/// when the connection could not be brought back out of the transaction.
fn commit_group(conn: &Connection, group: Vec<(Unit, Reply)>) -> bool {
    let units: Vec<&Unit> = group.iter().map(|(unit, _)| unit).collect();
    let started = std::time::Instant::now();
    let outcome = run_group(conn, &units);
    metrics::histogram!(crate::metrics::SQLITE_COMMIT_DURATION)
        .record(started.elapsed().as_secs_f64());
    metrics::histogram!(crate::metrics::SQLITE_GROUP_UNITS).record(units.len() as f64);
    let mut usable = true;
    let answers: Vec<Result<Ran, Error>> = match outcome {
        Ok(answers) => answers,
        Err(e) => {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
                usable = conn.is_autocommit();
            }
            tracing::error!(error = %e, units = units.len(), "sqlite group commit failed; nothing of it was written");
            units.iter().map(|_| Err(unavailable())).collect()
        }
    };
    for ((_, reply), answer) in group.into_iter().zip(answers) {
        let _ = reply.send(answer);
    }
    usable
}

fn run_group(conn: &Connection, units: &[&Unit]) -> rusqlite::Result<Vec<Result<Ran, Error>>> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    let mut answers = Vec::with_capacity(units.len());
    for unit in units {
        match run_unit(conn, unit) {
            // SQLite ended the whole transaction itself (I/O error, disk
            // full): the units before this one are gone too.
            Err(e) if conn.is_autocommit() => return Err(e),
            ran => answers.push(ran.map_err(|e| storage_error(e, unit))),
        }
    }
    conn.prepare_cached("COMMIT")?.execute([])?;
    Ok(answers)
}

/// One unit; more than one step runs in a savepoint so that a failure or an
/// abort undoes only this unit.
fn run_unit(conn: &Connection, unit: &Unit) -> rusqlite::Result<Ran> {
    if unit.steps.len() == 1 {
        return run_steps(conn, unit);
    }
    conn.prepare_cached("SAVEPOINT unit")?.execute([])?;
    let ran = run_steps(conn, unit);
    if !matches!(ran, Ok(Ran::Committed(_) | Ran::Stopped(_))) {
        conn.prepare_cached("ROLLBACK TO unit")?.execute([])?;
    }
    conn.prepare_cached("RELEASE unit")?.execute([])?;
    ran
}

fn run_steps(conn: &Connection, unit: &Unit) -> rusqlite::Result<Ran> {
    let mut yields = Vec::with_capacity(unit.steps.len());
    for step in &unit.steps {
        if let Some(end) = unit::record(step, execute(conn, step)?, &mut yields) {
            return Ok(end);
        }
    }
    Ok(Ran::Committed(yields))
}

fn execute(conn: &Connection, step: &Step) -> rusqlite::Result<i64> {
    #[cfg(test)]
    if step.sql == tests::PANIC {
        panic!("a fault injected by a test of the writer");
    }
    let mut statement = conn.prepare_cached(step.sql)?;
    let params = rusqlite::params_from_iter(&step.params);
    match step.yields {
        Yields::Rows => statement.execute(params).map(|n| n as i64),
        Yields::Value => Ok(statement
            .query_row(params, |row| row.get::<_, i64>(0))
            .optional()?
            .unwrap_or(0)),
    }
}

impl ToSql for Param {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        match self {
            Param::Int(v) => v.to_sql(),
            Param::OptInt(v) => v.to_sql(),
            Param::Text(v) => v.to_sql(),
            Param::OptText(v) => v.to_sql(),
            Param::Ints(_) | Param::OptInts(_) | Param::Texts(_) | Param::OptTexts(_) => {
                Err(rusqlite::Error::ToSqlConversionFailure(
                    "array parameters are for PostgreSQL's unnest; a SQLite unit writes one row per step"
                        .into(),
                ))
            }
        }
    }
}

fn unavailable() -> Error {
    Error::Unavailable {
        detail: "storage is not available".into(),
    }
}

fn storage_error(e: rusqlite::Error, unit: &Unit) -> Error {
    use rusqlite::ffi::{SQLITE_CONSTRAINT_PRIMARYKEY, SQLITE_CONSTRAINT_UNIQUE};
    match e.sqlite_error() {
        Some(failure)
            if failure.extended_code == SQLITE_CONSTRAINT_UNIQUE
                || failure.extended_code == SQLITE_CONSTRAINT_PRIMARYKEY =>
        {
            unit.conflict(&e.to_string())
        }
        _ => failed(&e),
    }
}

/// A statement that failed for a reason other than a conflict: logged, and
/// answered as storage being unavailable (the database's words stay in
/// the log).
pub(super) fn failed(e: &rusqlite::Error) -> Error {
    tracing::error!(error = %e, "storage error");
    unavailable()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::unit::params;

    /// A step whose execution panics (test builds only).
    pub(super) const PANIC: &str = "-- panic in the writer";

    fn count(sql: &'static str) -> Unit {
        Unit::one(Step::value(sql, vec![]))
    }

    async fn rows(writer: &Writer) -> i64 {
        writer
            .run(count("SELECT count(*) FROM t"))
            .await
            .expect("the writer answers")
            .last()
    }

    /// A writer of a fresh database `dir/w.db` with one table `t (n)`,
    /// waiting `busy_timeout` for another connection's lock.
    async fn writer_of_table_t(dir: &Path, busy_timeout: Duration) -> Writer {
        let writer = Writer::start(&dir.join("w.db"), busy_timeout).unwrap();
        writer
            .run(Unit::one(Step::rows(
                "CREATE TABLE t (n INTEGER PRIMARY KEY)",
                vec![],
            )))
            .await
            .unwrap();
        writer
    }

    /// A submitted unit is not waited for, and a unit run after it finds it
    /// committed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_unit_run_after_submitted_ones_finds_them_committed() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer_of_table_t(dir.path(), Duration::from_secs(1)).await;
        for n in 0..100 {
            writer
                .submit(Unit::one(Step::rows(
                    "INSERT INTO t (n) VALUES ($1)",
                    params![n],
                )))
                .unwrap();
        }
        assert_eq!(rows(&writer).await, 100);
    }

    /// A panic inside a group: every caller of that group gets 503, nothing
    /// of the group is written (not even the steps that ran before the
    /// fault), and the writer goes on serving with a fresh connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_writer_answers_503_writes_nothing_and_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer_of_table_t(dir.path(), Duration::from_secs(1)).await;

        let poisoned = Unit::new(vec![
            Step::rows("INSERT INTO t (n) VALUES ($1)", params![1]),
            Step::rows(PANIC, vec![]),
        ]);
        let beside: Vec<_> = (2..40)
            .map(|n| {
                let writer = writer.clone();
                tokio::spawn(async move {
                    writer
                        .run(Unit::one(Step::rows(
                            "INSERT INTO t (n) VALUES ($1)",
                            params![n],
                        )))
                        .await
                })
            })
            .collect();
        let answer = writer.run(poisoned).await;
        assert!(
            matches!(answer, Err(Error::Unavailable { .. })),
            "the faulted unit is 503: {answer:?}"
        );
        let mut committed = 0;
        for unit in beside {
            match unit.await.unwrap() {
                Ok(_) => committed += 1,
                Err(Error::Unavailable { .. }) => {}
                Err(other) => panic!("a unit beside the fault: {other:?}"),
            }
        }

        // Only what was answered as committed is there; the faulted unit's
        // first step, which ran, is not.
        assert_eq!(rows(&writer).await, committed);
        let first = writer
            .run(count("SELECT count(*) FROM t WHERE n = 1"))
            .await
            .unwrap();
        assert_eq!(first.last(), 0, "nothing of the faulted unit is written");

        // The writer recovered: new units commit.
        writer
            .run(Unit::one(Step::rows(
                "INSERT INTO t (n) VALUES ($1)",
                params![100],
            )))
            .await
            .unwrap();
        assert_eq!(rows(&writer).await, committed + 1);
        writer.close().await;
    }

    /// Another connection holding the write lock for a moment: the unit
    /// waits for it (in short retries, within the busy timeout) and
    /// commits; held past the timeout, the unit is 503.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_unit_waits_out_a_lock_held_for_a_moment_but_not_past_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer_of_table_t(dir.path(), Duration::from_millis(600)).await;
        let path = dir.path().join("w.db");
        let hold = |for_how_long: Duration| {
            let other = Connection::open(&path).unwrap();
            other.execute_batch("BEGIN IMMEDIATE").unwrap();
            std::thread::spawn(move || {
                std::thread::sleep(for_how_long);
                other.execute_batch("COMMIT").unwrap();
            })
        };
        let insert = |n: i64| Unit::one(Step::rows("INSERT INTO t (n) VALUES ($1)", params![n]));

        let holder = hold(Duration::from_millis(100));
        writer
            .run(insert(1))
            .await
            .expect("committed once the lock was free");
        holder.join().unwrap();

        let holder = hold(Duration::from_millis(1500));
        let answer = writer.run(insert(2)).await;
        assert!(
            matches!(answer, Err(Error::Unavailable { .. })),
            "{answer:?}"
        );
        holder.join().unwrap();
        assert_eq!(rows(&writer).await, 1);
        writer.close().await;
    }

    fn bytes(file: &Path) -> u64 {
        std::fs::metadata(file).map(|m| m.len()).unwrap_or(0)
    }

    /// Steady writes while readers are always on the WAL: with `PASSIVE`
    /// checkpoints alone the writer never got to start the WAL over and the
    /// file only grew; now it is cut back to its limit while the readers
    /// go on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_wal_stays_bounded_under_steady_writes_and_reads() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        const LIMIT: u64 = 1 << 20;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let writer = Writer::start_bounded(&path, Duration::from_secs(5), LIMIT).unwrap();
        writer
            .run(Unit::one(Step::rows(
                "CREATE TABLE t (n INTEGER PRIMARY KEY, body TEXT)",
                vec![],
            )))
            .await
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (path, stop) = (path.clone(), stop.clone());
                std::thread::spawn(move || {
                    let conn = Connection::open(&path).unwrap();
                    conn.busy_timeout(Duration::from_secs(5)).unwrap();
                    let mut reads = 0_u64;
                    while !stop.load(Ordering::Relaxed) {
                        conn.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))
                            .unwrap();
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        let wal = wal_file(&path);
        let mut peak = 0;
        // 8 MiB of rows, eight times the limit.
        for n in 0..4096_i64 {
            writer
                .run(Unit::one(Step::rows(
                    "INSERT INTO t (n, body) VALUES ($1, $2)",
                    params![n, "x".repeat(2048)],
                )))
                .await
                .unwrap();
            peak = peak.max(bytes(&wal));
        }
        let started = std::time::Instant::now();
        while bytes(&wal) > LIMIT {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the WAL stays at {} bytes, over its limit of {LIMIT}, while readers read",
                bytes(&wal)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The WAL, cut back to its limit, keeps its blocks allocated up to
        // it (the checkpoint thread's next turn allocates them again).
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::MetadataExt;
            let allocated = || std::fs::metadata(&wal).map_or(0, |m| m.blocks() * 512);
            let started = std::time::Instant::now();
            while allocated() < LIMIT {
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "the WAL has {} bytes allocated, less than its limit of {LIMIT}",
                    allocated()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(
                bytes(&wal) <= LIMIT,
                "allocating ahead kept the file's size"
            );
        }
        stop.store(true, Ordering::Relaxed);
        let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(reads > 0);
        eprintln!(
            "WAL peak {peak} bytes, {} bytes after the writes, database {} bytes, {reads} reads",
            bytes(&wal),
            bytes(&path)
        );
        assert_eq!(rows(&writer).await, 4096);
        writer.close().await;
    }
}

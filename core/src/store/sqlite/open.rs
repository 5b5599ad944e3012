//! Opening the database: connection options and pragmas, migrations, the reader pool, the
//! writer thread ([`super::writer`]), the checkpointer ([`super::checkpoint`]) and the scan
//! of processed updates into the hot-session cache. [`SqliteStore::connect`] is called by
//! the binary, the tests and `kaiwa bench`.

use super::batch::BATCH_CHECKS;
use super::checkpoint::{
    PAGE_SIZE, RESTART_WAIT, WAL_RESTART_BYTES, checkpoints, frames_in, page_size_of,
};
use super::writer::{WriteGate, group_commit};
use super::{MAX_BATCH, SqliteStore};
use crate::store::db::Db;

/// The checkpointer's stop signal and its task.
type Checkpointer = (oneshot::Sender<()>, tokio::task::JoinHandle<()>);
use crate::store::StoreError;
use crate::store::hot::HotSessions;
use sqlx::ConnectOptions;
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Reads every processed update id into the hot-session cache's filter, a page at a time (a
/// short read each: one long read would keep the WAL from restarting), then lets the cache
/// answer "not processed". On an error the cache never does, and every turn reads the
/// database as before.
pub(super) async fn scan_processed(pool: SqlitePool, hot: Arc<HotSessions>) {
    let started = std::time::Instant::now();
    // in the primary key's order: platform, message id, chat
    let mut after = (String::new(), String::new(), String::new());
    let mut total = 0usize;
    loop {
        let page: Result<Vec<(String, String, String)>, _> = sqlx::query_as(
            "SELECT platform, message_id, chat FROM processed_updates \
             WHERE (platform, message_id, chat) > (?, ?, ?) ORDER BY platform, message_id, chat LIMIT ?",
        )
        .bind(&after.0)
        .bind(&after.1)
        .bind(&after.2)
        .bind(SCAN_PAGE)
        .fetch_all(&pool)
        .await;
        let page = match page {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the processed updates: every turn reads the database");
                return;
            }
        };
        total += page.len();
        let full = page.len() as i64 == SCAN_PAGE;
        hot.add_processed(
            page.iter()
                .map(|(p, m, c)| (p.as_str(), c.as_str(), m.as_str())),
        );
        match page.into_iter().last() {
            Some(last) if full => after = last,
            _ => break,
        }
    }
    hot.mark_complete();
    tracing::debug!(
        updates = total,
        ms = started.elapsed().as_millis() as u64,
        "processed updates read for the hot-session cache"
    );
}

/// Rows per page of [`scan_processed`] (a few in tests, so that they read several pages).
pub(super) const SCAN_PAGE: i64 = if cfg!(test) { 3 } else { 10_000 };

/// The SQLite schema, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// Applies the migrations not yet applied. SQLite has no advisory lock (sqlx takes none):
/// two processes starting on a new file both try the first migration and one fails
/// (`UNIQUE constraint failed: _sqlx_migrations`, or a table that exists). Each migration
/// is a transaction of its own, so the loser tries again and finds it applied.
async fn migrate(writer: &SqlitePool) -> Result<(), StoreError> {
    let mut tries = 0;
    loop {
        match MIGRATOR.run(writer).await {
            Ok(()) => return Ok(()),
            Err(sqlx::migrate::MigrateError::VersionMissing(version)) => {
                return Err(StoreError::NewerDatabase(version));
            }
            Err(e) if tries < 20 => {
                tries += 1;
                tracing::debug!(error = %e, tries, "migrations raced another process; trying again");
                tokio::time::sleep(Duration::from_millis(50 * tries)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

impl SqliteStore {
    /// Opens (creating file and parent folder if missing) and migrates the database at `url`
    /// (`sqlite://path/to.db`, `sqlite::memory:`).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        // past twice the restart point the writer checkpoints by itself (a long read kept
        // the WAL from restarting, or the checkpointer fell behind)
        Self::connect_tuned(url, WAL_RESTART_BYTES, 2 * WAL_RESTART_BYTES).await
    }

    /// [`SqliteStore::connect`], the checkpointer restarting the WAL once it holds
    /// `restart_bytes` of frames and the writer checkpointing past `writer_bytes`.
    pub(super) async fn connect_tuned(
        url: &str,
        restart_bytes: i64,
        writer_bytes: i64,
    ) -> Result<Self, StoreError> {
        let (options, filename, in_memory) = connect_options(url)?;
        // sqlx pings a pooled connection before lending it by default: for SQLite that is a
        // round trip to the connection's worker thread (two thread wake-ups) before every
        // read and every batch, and nothing can hang up on an embedded database
        let pool_options = || SqlitePoolOptions::new().test_before_acquire(false);
        let single = || {
            pool_options()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        };
        let writer = open_writer(single(), &options, writer_bytes).await?;
        migrate(&writer).await?;
        let pool = if in_memory {
            // every connection to :memory: is its own database: share the one
            writer.clone()
        } else {
            // a read is one short statement (WAL: never blocked by the writer); more
            // connections than cores only add threads and page caches (2 MB each)
            let readers = std::thread::available_parallelism().map_or(2, |n| n.get() * 2);
            pool_options()
                .max_connections(readers.clamp(2, 8) as u32)
                .connect_with(options.clone())
                .await
                .map_err(StoreError::db("opening the database"))?
        };
        let (jobs, queue) = mpsc::channel(4 * MAX_BATCH);
        // the writer's own thread: on the shared runtime each of its statements would queue
        // behind every turn in progress, and every turn waits for the writer. The
        // checkpointer runs there too: while it restarts the WAL the writer waits for it,
        // and it must not wait for a turn of the shared runtime to be polled again.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Corrupt(format!("no runtime for the database writer: {e}")))?;
        let writer_tasks = runtime.handle().clone();
        let batches = writer.clone();
        let gate = WriteGate::default();
        let writing = gate.clone();
        let hot = Arc::new(HotSessions::default());
        let committed = hot.clone();
        let write_failures = Arc::new(AtomicU64::new(0));
        let failures = write_failures.clone();
        std::thread::Builder::new()
            .name("kaiwa-db-writer".into())
            .spawn(move || {
                runtime.block_on(group_commit(batches, queue, writing, committed, failures))
            })
            .map_err(|e| StoreError::Corrupt(format!("cannot start the database writer: {e}")))?;
        let restarts = Arc::new(AtomicU64::new(0));
        let checkpointer = match in_memory {
            true => None,
            false => Some(
                start_checkpointer(
                    &options,
                    &writer_tasks,
                    gate,
                    restart_bytes,
                    &filename,
                    &restarts,
                )
                .await?,
            ),
        };
        // the writer adds what it commits from now on; the updates processed before are read
        // aside, so that a large database does not hold up the start
        let scan = tokio::spawn(scan_processed(pool.clone(), hot.clone()));
        Ok(SqliteStore {
            db: Db::Sqlite {
                read: pool.clone(),
                write: writer.clone(),
            },
            pool,
            writer,
            jobs,
            checkpointer: std::sync::Mutex::new(checkpointer),
            restarts,
            write_failures,
            failures_reported: AtomicU64::new(0),
            hot,
            scan: std::sync::Mutex::new(Some(scan)),
            file: (!in_memory).then_some(filename),
            sole: std::sync::Mutex::new(None),
        })
    }
}

/// The connection options of `url` (WAL, normal sync, foreign keys, a 5 s busy timeout),
/// the database file's path, and whether it lives in memory. The file's folder is made.
fn connect_options(url: &str) -> Result<(SqliteConnectOptions, PathBuf, bool), StoreError> {
    let options = SqliteConnectOptions::from_str(url)
        .map_err(StoreError::db("parsing the database URL"))?
        .create_if_missing(true)
        // before the database file is made (sqlx sets it first); ignored by an existing one
        .page_size(PAGE_SIZE)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(5));
    let filename = options.get_filename().to_path_buf();
    let in_memory = url.contains(":memory:")
        || filename.as_os_str().is_empty()
        || filename.to_string_lossy() == ":memory:";
    if let Some(parent) = filename
        .parent()
        .filter(|p| !in_memory && !p.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent).map_err(|e| {
            StoreError::Corrupt(format!(
                "cannot create the database folder {}: {e}",
                parent.display()
            ))
        })?;
    }
    Ok((options, filename, in_memory))
}

/// The writer's one connection: the batch's checks, temporary tables in memory, and an
/// autocheckpoint only as a safety net: a checkpoint syncs the database file, and every turn
/// waiting for the writer would wait for that too ([`checkpoints`] does it aside).
async fn open_writer(
    pool_options: SqlitePoolOptions,
    options: &SqliteConnectOptions,
    writer_bytes: i64,
) -> Result<SqlitePool, StoreError> {
    pool_options
        .after_connect(move |conn, _| {
            Box::pin(async move {
                let frames = frames_in(writer_bytes, page_size_of(&mut *conn).await?);
                sqlx::Executor::execute(
                    &mut *conn,
                    // a number this code computed: nothing of a user's in it
                    sqlx::AssertSqlSafe(format!("PRAGMA wal_autocheckpoint = {frames}")),
                )
                .await?;
                sqlx::Executor::execute(conn, BATCH_CHECKS).await?;
                Ok(())
            })
        })
        .connect_with(
            options
                .clone()
                // a statement that changes many rows inside a transaction keeps the pages
                // it changes in a statement journal, which spills past 64 KiB to a temp
                // file (profiled under load: writes to it cost the writer 1 % of all CPU,
                // more with the large batches of a backlog); in memory it never does
                .pragma("temp_store", "MEMORY"),
        )
        .await
        .map_err(StoreError::db("opening the database"))
}

/// The checkpointer, on the writer's runtime: its own connection, which waits longer for
/// the writer than a turn would (see [`checkpoints`]).
async fn start_checkpointer(
    options: &SqliteConnectOptions,
    runtime: &tokio::runtime::Handle,
    gate: WriteGate,
    restart_bytes: i64,
    filename: &Path,
    restarts: &Arc<AtomicU64>,
) -> Result<Checkpointer, StoreError> {
    let mut conn = options
        .clone()
        .busy_timeout(RESTART_WAIT)
        .connect()
        .await
        .map_err(StoreError::db("opening the database"))?;
    let page_size = page_size_of(&mut conn)
        .await
        .map_err(StoreError::db("reading the page size"))?;
    let (stop, stopped) = oneshot::channel();
    let task = runtime.spawn(checkpoints(
        conn,
        stopped,
        gate,
        frames_in(restart_bytes, page_size),
        page_size,
        filename.to_path_buf(),
        restarts.clone(),
    ));
    Ok((stop, task))
}

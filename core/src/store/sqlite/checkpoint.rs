//! The WAL checkpointer: checkpoints the write-ahead log into the database file aside from
//! the writer, restarts the WAL once it is large, and keeps the part the writer overwrites
//! next in the page cache ([`super::wal_readahead`]). Started by [`super::open`], on the
//! writer's thread.

use super::wal_readahead::WalReadahead;
use super::writer::WriteGate;
use sqlx::Connection;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::oneshot;

/// Checkpoints the WAL into the database file every 50 ms on a connection of its own, and
/// restarts the WAL from its beginning once it holds `restart_frames` frames
/// ([`WAL_RESTART_BYTES`] of pages of `page_size` bytes), keeping the part of the WAL the
/// writer overwrites next cached ([`WalReadahead`]). Ends,
/// closing its connection, when `stop` fires or is dropped.
///
/// A PASSIVE checkpoint never blocks the writer or a reader, but under a steady stream of
/// turns it never catches up with the last frames either, and SQLite starts the WAL over
/// only when every frame is in the database file. The WAL would then grow until the
/// writer's own automatic checkpoint stopped a batch for two syncs of a large backlog and
/// then a third (a restarted WAL's header is synced before its first frame). Here the
/// restart is chosen: right after a PASSIVE pass (little is left to copy) the writer is
/// paused between batches ([`WriteGate`]) for a RESTART checkpoint, which needs no busy
/// handler to wait for the writer. Measurements: `docs/performance.md`, "WAL checkpoints".
pub(super) async fn checkpoints(
    mut conn: sqlx::SqliteConnection,
    mut stop: oneshot::Receiver<()>,
    gate: WriteGate,
    restart_frames: i64,
    page_size: u64,
    database: std::path::PathBuf,
    restarts: Arc<AtomicU64>,
) {
    // SQLite syncs the database file only when a checkpoint has copied the whole WAL: the
    // PASSIVE passes leave the pages they copy dirty in the page cache, and the RESTART's sync
    // flushed all of them while the writer waited (most of each pause). Flushed first,
    // beside the turns, they leave the RESTART
    // only what the last pass copied. (A read-only handle: fdatasync flushes the file's
    // pages whichever descriptor asks.)
    let file = match std::fs::File::open(&database) {
        Ok(file) => Some(Arc::new(file)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot open the database file to sync it before WAL restarts");
            None
        }
    };
    // every 50 ms: rarer passes hold the writer up longer each, more frequent ones copy
    // hot pages again and again (docs/performance.md, "WAL checkpoints"). With nothing
    // new in the WAL a PASSIVE checkpoint returns at once.
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // after a restart a long read held up, the next try waits (each try pauses the writer)
    let mut next_restart = tokio::time::Instant::now();
    // a restarted WAL starts over at the writer's next commit: until then every pass still
    // counts the frames it had, and restarting it again would only pause the writer and
    // sync the database for nothing (right after each restart under load, and at every
    // tick while the bot is idle after one)
    let mut restarted_at: Option<i64> = None;
    let mut readahead = WalReadahead::new(&database, page_size);
    let mut failing = Repeated::default();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {}
        }
        // (busy, frames in the WAL, frames in the database file)
        let frames = match sqlx::query_as::<_, (i64, i64, i64)>("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_one(&mut conn)
            .await
        {
            Ok((_, frames, _)) => {
                failing.recovered();
                frames
            }
            Err(e) => {
                // every tick while the disk is full: logged with backoff
                failing.failed(&e);
                continue;
            }
        };
        // the writer's next frames follow these, or begin the WAL it starts over
        readahead
            .ahead_of(if restarted_at == Some(frames) {
                0
            } else {
                frames
            })
            .await;
        if frames < restart_frames
            || restarted_at == Some(frames)
            || tokio::time::Instant::now() < next_restart
        {
            continue;
        }
        // the restarted WAL's first frames, cached before the writer comes back to them
        readahead.ahead_of(0).await;
        if let Some(file) = &file {
            sync_data(file).await;
            // a second pass copies what came during that sync, and a second sync flushes it
            if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&mut conn)
                .await
            {
                tracing::warn!(error = %e, "WAL checkpoint failed");
            }
            sync_data(file).await;
        }
        let started = std::time::Instant::now();
        let paused = gate.lock().await;
        let restart = sqlx::query_as::<_, (i64, i64, i64)>("PRAGMA wal_checkpoint(RESTART)")
            .fetch_one(&mut conn)
            .await;
        drop(paused);
        let paused_ms = started.elapsed().as_secs_f64() * 1000.0;
        match restart {
            Ok((0, left, _)) => {
                restarted_at = Some(left);
                restarts.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(frames, paused_ms, "WAL restarted");
            }
            Ok(_) => {
                tracing::debug!(frames, paused_ms, "WAL restart held up by a read");
                next_restart = tokio::time::Instant::now() + RESTART_BACKOFF;
            }
            Err(e) => {
                tracing::warn!(error = %e, "WAL restart failed");
                next_restart = tokio::time::Instant::now() + RESTART_BACKOFF;
            }
        }
    }
    if let Err(e) = conn.close().await {
        tracing::warn!(error = %e, "closing the checkpoint connection");
    }
}

/// `fdatasync` of the database file, off the writer's thread (it would hold up the batches).
pub(super) async fn sync_data(file: &Arc<std::fs::File>) {
    let file = file.clone();
    match tokio::task::spawn_blocking(move || file.sync_data()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "syncing the database file failed"),
        Err(e) => tracing::warn!(error = %e, "syncing the database file stopped"),
    }
}

/// WAL bytes past which the checkpointer restarts the WAL (a WAL file keeps its largest
/// size, reached only under a load the WAL cannot restart by itself under). Each restart
/// pauses the writer for a checkpoint's two syncs, and those pauses are what the slowest
/// turns wait for: a large WAL restarts rarely. Under a light load the WAL restarts on its
/// own, long before. Measurements: `docs/performance.md`, "WAL restart size".
pub(super) const WAL_RESTART_BYTES: i64 = 256 << 20;

/// The page size of a new database (SQLite's default is 4 KiB; an existing database keeps
/// the size it was made with). Every page a commit touches is a WAL frame that reaches the
/// disk at the next checkpoint, and most of a turn's pages are touched for one small row
/// (an index entry, a dedupe key, a message) or a session's ~2 KB state: smaller pages
/// write fewer bytes; 1 KiB pages write twice the frames and spill session states onto
/// overflow pages. Measurements: `docs/performance.md`, "Page size".
pub const PAGE_SIZE: u32 = 2048;

/// The page size of the database `conn` is open on (SQLite's smallest, 512, if it says less).
pub(super) async fn page_size_of(conn: &mut sqlx::SqliteConnection) -> Result<u64, sqlx::Error> {
    let page_size: i64 = sqlx::query_scalar("PRAGMA page_size")
        .fetch_one(&mut *conn)
        .await?;
    Ok(u64::try_from(page_size).unwrap_or(0).max(512))
}

/// WAL frames that make `bytes`, in pages of `page_size` bytes (at least one).
pub(super) fn frames_in(bytes: i64, page_size: u64) -> i64 {
    (bytes / i64::try_from(page_size).unwrap_or(i64::MAX)).max(1)
}

/// How long a WAL restart waits for readers of older frames (it pauses the writer).
pub(super) const RESTART_WAIT: Duration = Duration::from_millis(20);

/// How long the checkpointer waits before it tries again a restart that a read held up.
pub(super) const RESTART_BACKOFF: Duration = Duration::from_secs(1);

/// A failure that repeats every tick, logged at its first time and then at most once a
/// minute (with how many times it failed since), and once when it stops.
#[derive(Default)]
pub(super) struct Repeated {
    since: Option<std::time::Instant>,
    logged: Option<std::time::Instant>,
    count: u64,
}

impl Repeated {
    const EVERY: Duration = Duration::from_secs(60);

    pub(super) fn failed(&mut self, error: &sqlx::Error) -> bool {
        self.count += 1;
        self.since.get_or_insert_with(std::time::Instant::now);
        if self.logged.is_some_and(|t| t.elapsed() < Self::EVERY) {
            return false;
        }
        self.logged = Some(std::time::Instant::now());
        tracing::warn!(error = %error, failures = self.count, "WAL checkpoint failed");
        true
    }

    pub(super) fn recovered(&mut self) {
        if let Some(since) = self.since.take() {
            tracing::info!(failures = self.count, after = ?since.elapsed(), "WAL checkpoints work again");
        }
        self.logged = None;
        self.count = 0;
    }
}

#[cfg(test)]
mod repeated_tests {
    use super::*;

    #[test]
    fn a_repeating_failure_is_logged_once_a_minute() {
        let mut failing = Repeated::default();
        let error = sqlx::Error::PoolTimedOut;
        let logged: Vec<bool> = (0..100).map(|_| failing.failed(&error)).collect();
        assert_eq!(logged.iter().filter(|l| **l).count(), 1);
        failing.recovered();
        assert!(failing.failed(&error), "a new failure is logged again");
    }
}

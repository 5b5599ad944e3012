//! [`SqliteStore`]: the [`Store`] on SQLite through sqlx — WAL journal, foreign keys on, a
//! busy timeout, and the schema from `migrations/` applied by [`SqliteStore::connect`].
//!
//! A turn is one `BEGIN IMMEDIATE`-style write transaction; readers are not blocked (WAL).
//! `sqlite::memory:` works too (one connection, so every query sees the same database).

use super::hot::{HotChange, HotSessions, HotTurn};
use super::reading::{
    Insight, InsightKind, InteractionMode, Mood, MoodPhase, ProfileEntry, ProfileKind,
    ReadingChange, ReadingRecord, ReadingStatus, WeeklyReviewSubscription,
};
use super::wal_readahead::WalReadahead;
use super::{
    CommittedTurn, FlowState, LlmCallRecord, ProcessedUpdate, Role, SessionRecord, SessionStatus,
    Store, StoreError, StoredMessage, Submission, SubmissionRecord, SubmissionStatus, Ticket,
    TurnCommit, TurnLoad,
};
use crate::message::{Incoming, Platform, SessionKey, UserRef};
use crate::state::StateChange;
use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Row, SqlitePool};
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

pub struct SqliteStore {
    /// Readers (WAL lets them run beside the writer).
    pool: SqlitePool,
    /// The one writer connection: writes queue here, in tokio, instead of spinning in
    /// SQLite's busy handler (which sleeps whole milliseconds between tries). Turns and the
    /// inbox reach it through the group-commit thread; rarer writes (privacy, ledger) directly.
    writer: SqlitePool,
    /// Turns, inbox entries and delivery marks for the group-commit task ([`group_commit`]).
    jobs: mpsc::Sender<Job>,
    /// Stops the WAL checkpoint task ([`checkpoints`]); none for `:memory:`.
    checkpointer: std::sync::Mutex<Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>>,
    /// WAL restarts the checkpoint task made.
    restarts: Arc<AtomicU64>,
    /// Active sessions as the writer last committed them ([`super::hot`]).
    hot: Arc<HotSessions>,
    /// Reads the processed update ids into `hot` after the store opens.
    scan: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Most turns one transaction of the group-commit task carries.
const MAX_BATCH: usize = 256;

/// Work for the group-commit task; each job is answered once its transaction committed.
enum Job {
    Turn {
        commit: Box<TurnCommit>,
        after: Box<Prepared>,
        reply: oneshot::Sender<Result<CommittedTurn, StoreError>>,
    },
    /// A received message kept until its turn is done. Not answered: it commits with or
    /// before its turn, the next job its sender queues (see [`Store::inbox_put`]).
    InboxPut { entry: InboxEntry },
    /// Not answered: see [`Store::inbox_done`].
    InboxDone {
        platform: Platform,
        chat: String,
        message_id: String,
    },
    /// Not answered: a turn does not wait for its delivery mark.
    Delivered { ids: Vec<i64> },
    /// Answered once everything queued before it is committed (a clean shutdown).
    Flush(oneshot::Sender<()>),
}

/// A statement being built (several, for the fast path's [`Trip`]).
type Sql<'r> = sqlx::QueryBuilder<'r, sqlx::Sqlite>;

/// A row of the inbox: the message as JSON under its platform key.
struct InboxEntry {
    platform: Platform,
    chat: String,
    message_id: String,
    incoming: String,
    created_ms: i64,
}

fn writer_gone() -> StoreError {
    StoreError::Batch {
        message: "the database writer has stopped".into(),
        busy: false,
    }
}

/// Group commit, on the writer's own thread: every turn waiting when the writer becomes
/// free goes into one transaction — one statement each for all their sessions, processed
/// updates, messages and model calls, sent together ([`fast_batch`]); if anything is out of
/// the ordinary the batch is redone turn by turn, each in a savepoint, so a refused turn
/// (duplicate, conflict, failed statement) is rolled back alone and answered with its
/// error. One commit and one WAL append serve the whole batch; a lone turn still commits at
/// once, and under load a batch begins no sooner than [`COMMIT_GAP`] after the one before
/// ([`commit_delay`]).
async fn group_commit(
    writer: SqlitePool,
    mut jobs: mpsc::Receiver<Job>,
    gate: WriteGate,
    hot: Arc<HotSessions>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    // the ids of the next session and message the fast path creates; `None`: read them
    // from the database
    let mut next_ids = None;
    // when the last batch began, and how many turns it carried
    let mut last_began = std::time::Instant::now();
    let mut last_turns = 0;
    while jobs.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let flushing = batch.iter().any(|job| matches!(job, Job::Flush(_)));
        if let Some(wait) = commit_delay(last_turns, last_began.elapsed()).filter(|_| !flushing) {
            // a blocking sleep: tokio's timers count whole milliseconds, and this thread
            // runs only the writer and the checkpointer (whose 50 ms tick may slip by
            // less than the gap)
            std::thread::sleep(wait);
            while batch.len() < MAX_BATCH {
                match jobs.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
        }
        let (flushes, work): (Vec<_>, Vec<_>) = batch
            .drain(..)
            .partition(|job| matches!(job, Job::Flush(_)));
        batch.extend(work);
        let turns = batch.len();
        last_began = std::time::Instant::now();
        last_turns = batch
            .iter()
            .filter(|job| matches!(job, Job::Turn { .. }))
            .count();
        let span = tracing::trace_span!("group_commit", turns);
        let writing = gate.lock().await;
        write_batch(&writer, &mut batch, &hot, &mut next_ids)
            .instrument(span)
            .await;
        drop(writing);
        for flush in flushes {
            if let Job::Flush(done) = flush {
                let _ = done.send(());
            }
        }
    }
}

/// The least time from the start of one batch to the next while turns come faster than
/// the writer commits them one by one (PostgreSQL's `commit_delay` and `commit_siblings`,
/// for the same reason). Every commit writes the pages all turns share (the tails of
/// `messages` and `llm_calls`, the undelivered index, interior pages) once more, and every
/// WAL byte reaches the disk at the next checkpoint; on the bench VM the host takes vCPU
/// time for that I/O in a burst every 100 ms, stalling whatever runs there. Measured with
/// `kaiwa bench` at 5,000 turns/s × 100,000, 4 runs each, interleaved: 2.14–2.18 against
/// 2.80–3.37 million 512-byte blocks written, host steal 0.4–0.6 % against 3.0–3.7 %, a
/// sleeping thread's wake-up late by 0.9–1.4 ms at p99 against 3.3–4.3, p99 per turn
/// 5.2 / 8.1 / 10.7 / 9.7 against 8.3 / 29.6 / 17.5 / 21.5 ms; p50 1.3–1.5 against
/// 0.7–1.1 ms. While the VM's host was busy with others (p50 doubled for both) the steal
/// was still lower in every run but p99 no better: worse in 7 of 9 pairs, better in 2
/// (17–108 against 17–202 ms), the wake-up from the sleep likely late there. A single
/// session's turns (one a batch) and a closed loop's (batches far over 1 ms) are no slower.
/// Measured again once turns stopped writing a page each for their dedupe key (fewer pages
/// a turn, so the shared ones weigh more), VM quiet, 3 runs each: 1 ms 2.7–3.7 ms p99
/// (1.67 M blocks, steal ~0.1 %), 0.5 ms 4.5–5.7 (2.2 M, 0.6–1.3 %), none 6.4–7.6
/// (2.7–2.9 M, 2.5–2.8 %); p50 1.2 / 0.9 / 0.7 ms.
const COMMIT_GAP: Duration = Duration::from_millis(1);

/// How long the writer waits before it begins a batch, given how many turns the last one
/// carried and how long ago it began: a load that brought two turns or more to the last
/// batch brings more during the wait, so the rest of [`COMMIT_GAP`]; otherwise nothing (a
/// lone turn, or a single session's next, commits at once).
fn commit_delay(last_turns: usize, since_last: Duration) -> Option<Duration> {
    if last_turns < 2 {
        return None;
    }
    COMMIT_GAP
        .checked_sub(since_last)
        .filter(|wait| !wait.is_zero())
}

/// Held by the group-commit writer for each batch, and by the checkpointer while it
/// restarts the WAL: a writer that waits here wakes as soon as the restart is done (in
/// SQLite's busy handler it would sleep whole milliseconds between tries).
type WriteGate = std::sync::Arc<tokio::sync::Mutex<()>>;

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
/// then a third (a restarted WAL's header is synced before its first frame): measured at
/// 1,000 turns/s, a 15–25 ms stall every 0.7 s, most of a p99 of 19–22 ms. Here the
/// restart is chosen: right after a PASSIVE pass (little is left to copy) the writer is
/// paused between batches ([`WriteGate`]) for a RESTART checkpoint, which needs no busy
/// handler to wait for the writer (with fewer pages per commit, p99 7–9 ms at that load).
async fn checkpoints(
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
    // flushed all of them while the writer waited (16-21 ms of a 17-24 ms pause, measured
    // with strace at 1,000 turns/s). Flushed first, beside the turns, they leave the RESTART
    // only what the last pass copied. (A read-only handle: fdatasync flushes the file's
    // pages whichever descriptor asks.)
    let file = match std::fs::File::open(&database) {
        Ok(file) => Some(Arc::new(file)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot open the database file to sync it before WAL restarts");
            None
        }
    };
    // measured (kaiwa bench, 2 cores): every 1 s the checkpoint's I/O held the writer up
    // ~100 ms (p99 90 ms at 1,500 turns/s); every 100 ms p99 19 ms; every 25 ms p99 10 ms
    // but a quarter less throughput (hot pages copied again and again); every 50 ms p99
    // 12 ms at full throughput; with the restarts below, 150 ms measured no better than
    // 50. With nothing new in the WAL a PASSIVE checkpoint returns at once.
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // after a restart a long read held up, the next try waits (each try pauses the writer)
    let mut next_restart = tokio::time::Instant::now();
    // a restarted WAL starts over at the writer's next commit: until then every pass still
    // counts the frames it had, and restarting it again would only pause the writer and
    // sync the database for nothing (measured: right after each restart under load, and at
    // every tick while the bot is idle after one)
    let mut restarted_at: Option<i64> = None;
    let mut readahead = WalReadahead::new(&database, page_size);
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
            Ok((_, frames, _)) => frames,
            Err(e) => {
                tracing::warn!(error = %e, "WAL checkpoint failed");
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
async fn sync_data(file: &Arc<std::fs::File>) {
    let file = file.clone();
    match tokio::task::spawn_blocking(move || file.sync_data()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "syncing the database file failed"),
        Err(e) => tracing::warn!(error = %e, "syncing the database file stopped"),
    }
}

/// WAL bytes past which the checkpointer restarts the WAL (a WAL file keeps its largest
/// size, reached only under a load the WAL cannot restart by itself under). Each restart
/// pauses the writer for a checkpoint's two syncs (1–8 ms on the bench VM, tens of ms
/// when its host is busy), and those pauses are what the slowest turns wait for: measured
/// with `kaiwa bench` at 5,000 turns/s, 100,000 turns, every 64 MiB of 4 KiB frames made
/// 39–45 pauses in 20 s, 230–360 ms in all, p99 19–49 ms (6 runs); every 256 MiB of
/// 2 KiB frames 7–8 pauses, 37–151 ms in all, p99 9.6–31 ms (8 runs, interleaved with
/// those). (Half of those pauses were a second restart right after each one, since gone:
/// 3–4 restarts per 100,000 turns.) Under a light load the WAL restarts on its own, long
/// before.
const WAL_RESTART_BYTES: i64 = 256 << 20;

/// The page size of a new database (SQLite's default is 4 KiB; an existing database keeps
/// the size it was made with). Every page a commit touches is a WAL frame that reaches the
/// disk at the next checkpoint, and most of a turn's pages are touched for one small row
/// (an index entry, a dedupe key, a message) or a session's ~2 KB state. Measured with
/// `kaiwa bench` at 5,000 turns/s on the 2-core VM, whose host takes vCPU time for the
/// disk's work (`cpu_steal_pct`): 2 KiB pages wrote a third fewer bytes to disk than 4 KiB
/// ones (2.5–3.0 against 3.8–4.5 million 512-byte blocks for 100,000 turns), the host
/// took half as much (steal 2.2–3.4 % against 4.9–6.2 %) and a thread that only sleeps
/// woke late by 2.6–3.2 ms at p99 instead of 7.3–8.3. 1 KiB pages wrote less again but
/// twice the frames (a system call each, and session states over overflow pages), and
/// their WAL restarts paused the writer twice as long.
pub const PAGE_SIZE: u32 = 2048;

/// The page size of the database `conn` is open on (SQLite's smallest, 512, if it says less).
async fn page_size_of(conn: &mut sqlx::SqliteConnection) -> Result<u64, sqlx::Error> {
    let page_size: i64 = sqlx::query_scalar("PRAGMA page_size")
        .fetch_one(&mut *conn)
        .await?;
    Ok(u64::try_from(page_size).unwrap_or(0).max(512))
}

/// WAL frames that make `bytes`, in pages of `page_size` bytes (at least one).
fn frames_in(bytes: i64, page_size: u64) -> i64 {
    (bytes / i64::try_from(page_size).unwrap_or(i64::MAX)).max(1)
}

/// How long a WAL restart waits for readers of older frames (it pauses the writer).
const RESTART_WAIT: Duration = Duration::from_millis(20);

/// How long the checkpointer waits before it tries again a restart that a read held up.
const RESTART_BACKOFF: Duration = Duration::from_secs(1);

/// A turn's answer, sent once the batch's commit is known.
type Outcome = (
    Result<CommittedTurn, StoreError>,
    oneshot::Sender<Result<CommittedTurn, StoreError>>,
);

async fn write_batch(
    writer: &SqlitePool,
    batch: &mut Vec<Job>,
    hot: &HotSessions,
    next_ids: &mut Option<NextIds>,
) {
    let mut outcomes = Vec::with_capacity(batch.len());
    let mut changes = Vec::with_capacity(batch.len());
    let committed = run_batch(writer, batch, &mut outcomes, &mut changes, next_ids).await;
    let failure = committed.err().map(|e| {
        tracing::warn!(error = %e, "a batch of turns could not be committed");
        (e.to_string(), e.is_busy())
    });
    // before any turn is answered, so that the next turn of a session finds it moved on
    if failure.is_some() {
        // nothing was written (and were that uncertain, the database decides next time)
        changes = changes.into_iter().map(HotChange::into_dropped).collect();
    }
    hot.apply(changes);
    // the batch's failure, for each turn it carried
    let failed = || {
        failure.as_ref().map(|(message, busy)| StoreError::Batch {
            message: message.clone(),
            busy: *busy,
        })
    };
    // jobs the batch never reached (it failed before them)
    for job in batch.drain(..) {
        match job {
            Job::Turn { reply, .. } => {
                outcomes.push((Err(failed().unwrap_or_else(writer_gone)), reply));
            }
            Job::InboxPut { .. }
            | Job::InboxDone { .. }
            | Job::Delivered { .. }
            | Job::Flush(_) => {}
        }
    }
    for (result, reply) in outcomes {
        // a receiver that gave up (its turn was cancelled) is no error here
        let _ = reply.send(match failed() {
            Some(e) if result.is_ok() => Err(e),
            _ => result,
        });
    }
}

/// Runs the jobs of `batch` (draining it) in one transaction and commits: the fast path
/// when nothing is out of the ordinary, else turn by turn, each in a savepoint.
async fn run_batch(
    writer: &SqlitePool,
    batch: &mut Vec<Job>,
    outcomes: &mut Vec<Outcome>,
    changes: &mut Vec<HotChange>,
    next_ids: &mut Option<NextIds>,
) -> Result<(), StoreError> {
    if let Some(committed) = fast_batch(writer, batch, next_ids).await {
        let mut committed = committed.into_iter();
        for job in batch.drain(..) {
            match job {
                Job::Turn { reply, .. } => {
                    let turn = match committed.next() {
                        Some((turn, change)) => {
                            changes.push(change);
                            Ok(turn)
                        }
                        None => Err(writer_gone()),
                    };
                    outcomes.push((turn, reply));
                }
                Job::InboxPut { .. }
                | Job::InboxDone { .. }
                | Job::Delivered { .. }
                | Job::Flush(_) => {}
            }
        }
        return Ok(());
    }
    // sessions and messages created here take SQLite's ids
    *next_ids = None;
    let mut tx = writer
        .begin()
        .await
        .map_err(StoreError::db("starting a batch of turns"))?;
    let now_ms = ms(Utc::now());
    // the inbox first: no turn here reads it, and a clear never shares a batch with its
    // entry (it is queued once the turn behind that entry answered)
    write_inbox(&mut tx, batch, &[]).await?;
    let mut delivered = Vec::new();
    for job in batch.drain(..) {
        match job {
            Job::Turn {
                commit,
                after,
                reply,
            } => {
                sqlx::query("SAVEPOINT turn")
                    .execute(&mut *tx)
                    .await
                    .map_err(StoreError::db("starting a turn"))?;
                let dropped = HotChange::Dropped {
                    key: commit.session.key.clone(),
                    processed: commit.processed.clone(),
                };
                let result = match write_turn(&mut tx, *commit, &after, now_ms).await {
                    Ok((turn, change)) => {
                        changes.push(change);
                        Ok(turn)
                    }
                    Err(e) => {
                        changes.push(dropped);
                        sqlx::query("ROLLBACK TO turn")
                            .execute(&mut *tx)
                            .await
                            .map_err(StoreError::db("rolling a refused turn back"))?;
                        Err(e)
                    }
                };
                sqlx::query("RELEASE turn")
                    .execute(&mut *tx)
                    .await
                    .map_err(StoreError::db("finishing a turn"))?;
                outcomes.push((result, reply));
            }
            Job::Delivered { ids } => delivered.extend(ids),
            Job::InboxPut { .. } | Job::InboxDone { .. } | Job::Flush(_) => {}
        }
    }
    mark_delivered_in(&mut tx, &delivered).await?;
    tx.commit()
        .await
        .map_err(StoreError::db("committing a batch of turns"))
}

/// Reads every processed update id into the hot-session cache's filter, a page at a time (a
/// short read each: one long read would keep the WAL from restarting), then lets the cache
/// answer "not processed". On an error the cache never does, and every turn reads the
/// database as before.
async fn scan_processed(pool: SqlitePool, hot: Arc<HotSessions>) {
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
const SCAN_PAGE: i64 = if cfg!(test) { 3 } else { 10_000 };

const SESSION_COLUMNS: &str = "id, platform, chat, thread, user_id, flow, current_agent, language, country, \
     timezone, state, pending_options, status, version, created_ms, updated_ms";

impl SqliteStore {
    /// [`Store::forget_user`]'s deletions, in one transaction.
    async fn forget_user_rows(
        &self,
        platform: Platform,
        user: &str,
        keep_submissions: bool,
    ) -> Result<u64, StoreError> {
        let mut tx = self
            .writer
            .begin()
            .await
            .map_err(StoreError::db("starting to forget a user"))?;
        let p = platform.as_str();
        let mut deleted = 0;
        // children first, counted; the users row cascades to sessions, messages and tickets
        let mut statements = vec![
            "DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE platform = ?1 AND user_id = ?2)",
            "DELETE FROM helpdesk_tickets WHERE session_id IN (SELECT id FROM sessions WHERE platform = ?1 AND user_id = ?2)",
            "DELETE FROM insights WHERE record_id IN (SELECT id FROM reading_records WHERE platform = ?1 AND user_id = ?2)",
            "DELETE FROM moods WHERE record_id IN (SELECT id FROM reading_records WHERE platform = ?1 AND user_id = ?2)",
            "DELETE FROM reading_records WHERE platform = ?1 AND user_id = ?2",
            "DELETE FROM profile_entries WHERE platform = ?1 AND user_id = ?2",
            "DELETE FROM mentor_feedback WHERE platform = ?1 AND user_id = ?2",
            "DELETE FROM recommendations WHERE platform = ?1 AND user_id = ?2",
            "DELETE FROM weekly_reviews WHERE platform = ?1 AND user_id = ?2",
        ];
        if !keep_submissions {
            statements.push("DELETE FROM submissions WHERE platform = ?1 AND user_id = ?2");
        }
        statements.push("DELETE FROM sessions WHERE platform = ?1 AND user_id = ?2");
        statements.push("DELETE FROM users WHERE platform = ?1 AND user_id = ?2");
        for sql in statements {
            let done = sqlx::query(sql)
                .bind(p)
                .bind(user)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db("forgetting a user"))?;
            deleted += done.rows_affected();
        }
        tx.commit()
            .await
            .map_err(StoreError::db("forgetting a user"))?;
        Ok(deleted)
    }

    /// Opens (creating file and parent folder if missing) and migrates the database at `url`
    /// (`sqlite://path/to.db`, `sqlite::memory:`).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        // past twice the restart point the writer checkpoints by itself (a long read kept
        // the WAL from restarting, or the checkpointer fell behind)
        Self::connect_tuned(url, WAL_RESTART_BYTES, 2 * WAL_RESTART_BYTES).await
    }

    /// [`SqliteStore::connect`], the checkpointer restarting the WAL once it holds
    /// `restart_bytes` of frames and the writer checkpointing past `writer_bytes`.
    async fn connect_tuned(
        url: &str,
        restart_bytes: i64,
        writer_bytes: i64,
    ) -> Result<Self, StoreError> {
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
        // the writer checkpoints only as a safety net: a checkpoint syncs the database file,
        // and every turn waiting for the writer would wait for that too ([`checkpoints`]
        // does it aside)
        let writer = single()
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    let frames = frames_in(writer_bytes, page_size_of(&mut *conn).await?);
                    sqlx::Executor::execute(
                        &mut *conn,
                        format!("PRAGMA wal_autocheckpoint = {frames}").as_str(),
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
            .map_err(StoreError::db("opening the database"))?;
        sqlx::migrate!("../migrations").run(&writer).await?;
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
        std::thread::Builder::new()
            .name("kaiwa-db-writer".into())
            .spawn(move || runtime.block_on(group_commit(batches, queue, writing, committed)))
            .map_err(|e| StoreError::Corrupt(format!("cannot start the database writer: {e}")))?;
        let restarts = Arc::new(AtomicU64::new(0));
        let checkpointer = if in_memory {
            None
        } else {
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
            let task = writer_tasks.spawn(checkpoints(
                conn,
                stopped,
                gate,
                frames_in(restart_bytes, page_size),
                page_size,
                filename.clone(),
                restarts.clone(),
            ));
            Some((stop, task))
        };
        // the writer adds what it commits from now on; the updates processed before are read
        // aside, so that a large database does not hold up the start
        let scan = tokio::spawn(scan_processed(pool.clone(), hot.clone()));
        Ok(SqliteStore {
            pool,
            writer,
            jobs,
            checkpointer: std::sync::Mutex::new(checkpointer),
            restarts,
            hot,
            scan: std::sync::Mutex::new(Some(scan)),
        })
    }

    async fn submit(&self, job: Job) -> Result<(), StoreError> {
        self.jobs.send(job).await.map_err(|_| writer_gone())
    }

    /// How many times the checkpoint task restarted the WAL since the store opened.
    pub fn wal_restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// How many sessions the database holds, active or finished.
    pub async fn session_count(&self) -> Result<i64, StoreError> {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM sessions")
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db("counting sessions"))?;
        Ok(n)
    }

    /// The pool, for other stores of the same database (flows' own tables).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn from_ms(v: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(v).single().unwrap_or_default()
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

fn session_from_row(row: &SqliteRow) -> Result<SessionRecord, StoreError> {
    let get = |e: sqlx::Error| corrupt("session row", e);
    let platform: String = row.try_get("platform").map_err(get)?;
    let state: String = row.try_get("state").map_err(get)?;
    let pending: Option<String> = row.try_get("pending_options").map_err(get)?;
    let status: String = row.try_get("status").map_err(get)?;
    Ok(SessionRecord {
        id: row.try_get("id").map_err(get)?,
        key: SessionKey {
            platform: Platform::parse(&platform)
                .ok_or_else(|| corrupt("session platform", &platform))?,
            chat: row.try_get("chat").map_err(get)?,
            thread: row.try_get("thread").map_err(get)?,
            user: row.try_get("user_id").map_err(get)?,
        },
        flow: row.try_get("flow").map_err(get)?,
        current_agent: row.try_get("current_agent").map_err(get)?,
        language: row.try_get("language").map_err(get)?,
        country: row.try_get("country").map_err(get)?,
        timezone: row.try_get("timezone").map_err(get)?,
        state: FlowState::from_json(state).map_err(|e| corrupt("session state", e))?,
        pending_options: match pending {
            Some(p) => Some(serde_json::from_str(&p).map_err(|e| corrupt("pending options", e))?),
            None => None,
        },
        status: if status == "finished" {
            SessionStatus::Finished
        } else {
            SessionStatus::Active
        },
        version: row.try_get("version").map_err(get)?,
        created_at: from_ms(row.try_get("created_ms").map_err(get)?),
        updated_at: from_ms(row.try_get("updated_ms").map_err(get)?),
    })
}

fn message_from_row(row: &SqliteRow) -> Result<StoredMessage, StoreError> {
    let get = |e: sqlx::Error| corrupt("message row", e);
    let role: String = row.try_get("role").map_err(get)?;
    Ok(StoredMessage {
        id: row.try_get("id").map_err(get)?,
        session_id: row.try_get("session_id").map_err(get)?,
        role: Role::parse(&role).ok_or_else(|| corrupt("message role", &role))?,
        text: row.try_get("text").map_err(get)?,
        at: from_ms(row.try_get("created_ms").map_err(get)?),
    })
}

/// A model call's row: its session (the turn's, where the call names none) and the call.
type CallRow<'a> = (Option<i64>, &'a LlmCallRecord);

/// Model calls (of one turn or of a batch), in one statement.
async fn insert_llm_calls(
    conn: &mut sqlx::SqliteConnection,
    calls: &[CallRow<'_>],
) -> Result<(), StoreError> {
    execute_rows(conn, calls, "recording model calls", |sql, rows| {
        push_llm_calls(sql, rows)
    })
    .await?;
    Ok(())
}

fn push_llm_calls(sql: &mut Sql<'_>, calls: &[CallRow<'_>]) -> Result<(), StoreError> {
    let rows: Vec<_> = calls
        .iter()
        .map(|(session_id, call)| {
            (
                call.session_id.or(*session_id),
                call.agent.as_str(),
                call.model.as_str(),
                call.prompt_tokens,
                call.completion_tokens,
                call.latency_ms,
                call.error.as_deref(),
                ms(call.at),
            )
        })
        .collect();
    sql.push(
        "INSERT INTO llm_calls (session_id, agent, model, prompt_tokens, completion_tokens, latency_ms, error, created_ms) \
         SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6, value->>7 FROM ",
    );
    push_rows(sql, &rows)
}

/// A submission's row: its session, the session's place, the submission.
type SubmissionRow<'a> = (i64, &'a SessionKey, &'a Submission);

/// The submissions among `changes` (a turn's, of the session `session_id` at `key`).
fn submission_rows<'a>(
    session_id: i64,
    key: &'a SessionKey,
    changes: &'a [StateChange],
    rows: &mut Vec<SubmissionRow<'a>>,
) {
    rows.extend(changes.iter().filter_map(|change| match change {
        StateChange::SaveSubmission { submission } => Some((session_id, key, submission)),
        _ => None,
    }));
}

fn push_submissions(
    sql: &mut Sql<'_>,
    rows: &[SubmissionRow<'_>],
    now_ms: i64,
) -> Result<(), StoreError> {
    let json =
        |v: &serde_json::Value| serde_json::to_string(v).map_err(|e| corrupt("submission", e));
    let mut written = Vec::with_capacity(rows.len());
    for (session_id, key, s) in rows {
        written.push((
            *session_id,
            key.platform.as_str(),
            key.user.as_str(),
            s.applicant.as_str(),
            s.form_id.as_str(),
            s.variant.as_str(),
            s.status.as_str(),
            s.language.as_deref(),
            s.country.as_deref(),
            s.timezone.as_deref(),
            json(&s.values)?,
            json(&s.facts)?,
            json(&s.flags)?,
            s.audit.as_ref().map(json).transpose()?,
        ));
    }
    sql.push(
        "INSERT INTO submissions (session_id, platform, user_id, applicant, form_id, variant, status, language, \
         country, timezone, field_values, facts, flags, audit, created_ms) \
         SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6, value->>7, \
         value->>8, value->>9, value->>10, value->>11, value->>12, value->>13, ",
    );
    sql.push_bind(now_ms).push(" FROM ");
    push_rows(sql, &written)
}

fn submission_from_row(row: &SqliteRow) -> Result<SubmissionRecord, StoreError> {
    let get = |e: sqlx::Error| corrupt("submission row", e);
    let json = |col: &str| -> Result<serde_json::Value, StoreError> {
        let text: String = row.try_get(col).map_err(get)?;
        serde_json::from_str(&text).map_err(|e| corrupt("submission JSON", e))
    };
    let audit: Option<String> = row.try_get("audit").map_err(get)?;
    let status: String = row.try_get("status").map_err(get)?;
    Ok(SubmissionRecord {
        id: row.try_get("id").map_err(get)?,
        session_id: row.try_get("session_id").map_err(get)?,
        platform: row.try_get("platform").map_err(get)?,
        user_id: row.try_get("user_id").map_err(get)?,
        created_at: from_ms(row.try_get("created_ms").map_err(get)?),
        submission: Submission {
            applicant: row.try_get("applicant").map_err(get)?,
            form_id: row.try_get("form_id").map_err(get)?,
            variant: row.try_get("variant").map_err(get)?,
            status: if status == "submitted" {
                SubmissionStatus::Submitted
            } else {
                SubmissionStatus::Incomplete
            },
            language: row.try_get("language").map_err(get)?,
            country: row.try_get("country").map_err(get)?,
            timezone: row.try_get("timezone").map_err(get)?,
            values: json("field_values")?,
            facts: json("facts")?,
            flags: json("flags")?,
            audit: audit
                .map(|a| serde_json::from_str(&a).map_err(|e| corrupt("submission audit", e)))
                .transpose()?,
        },
    })
}

async fn record_id(
    conn: &mut sqlx::SqliteConnection,
    key: &SessionKey,
    title: &str,
) -> Result<i64, StoreError> {
    sqlx::query_scalar(
        "SELECT id FROM reading_records WHERE platform = ? AND user_id = ? AND title = ?",
    )
    .bind(key.platform.as_str())
    .bind(&key.user)
    .bind(title)
    .fetch_optional(&mut *conn)
    .await
    .map_err(StoreError::db("finding the reading record"))?
    .ok_or_else(|| StoreError::Corrupt(format!("no reading record {title:?} for this user")))
}

async fn apply_reading(
    conn: &mut sqlx::SqliteConnection,
    key: &SessionKey,
    change: &ReadingChange,
    now_ms: i64,
) -> Result<(), StoreError> {
    let (platform, user) = (key.platform.as_str(), key.user.as_str());
    let result = match change {
        ReadingChange::OpenRecord { title, author } => {
            sqlx::query(
                "INSERT INTO reading_records (platform, user_id, title, author, created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (platform, user_id, title) DO UPDATE SET updated_ms = excluded.updated_ms, \
                 author = COALESCE(reading_records.author, excluded.author)",
            )
            .bind(platform)
            .bind(user)
            .bind(title)
            .bind(author)
            .bind(now_ms)
            .bind(now_ms)
            .execute(&mut *conn)
            .await
        }
        ReadingChange::SetStatus { title, status } => {
            sqlx::query(
                "UPDATE reading_records SET status = ?1, updated_ms = ?2, \
                 started_ms = CASE WHEN ?1 != 'not_started' THEN COALESCE(started_ms, ?2) ELSE started_ms END, \
                 finished_ms = CASE WHEN ?1 = 'completed' THEN ?2 ELSE NULL END \
                 WHERE platform = ?3 AND user_id = ?4 AND title = ?5",
            )
            .bind(status.as_str())
            .bind(now_ms)
            .bind(platform)
            .bind(user)
            .bind(title)
            .execute(&mut *conn)
            .await
        }
        ReadingChange::SetMode { title, mode } => {
            sqlx::query("UPDATE reading_records SET interaction_mode = ?, updated_ms = ? WHERE platform = ? AND user_id = ? AND title = ?")
                .bind(mode.as_str())
                .bind(now_ms)
                .bind(platform)
                .bind(user)
                .bind(title)
                .execute(&mut *conn)
                .await
        }
        ReadingChange::AddInsight { title, kind, text } => {
            let id = record_id(conn, key, title).await?;
            sqlx::query("INSERT INTO insights (record_id, kind, text, created_ms) VALUES (?, ?, ?, ?)")
                .bind(id)
                .bind(kind.as_str())
                .bind(text)
                .bind(now_ms)
                .execute(&mut *conn)
                .await
        }
        ReadingChange::AddMood { title, phase, label, score } => {
            let id = record_id(conn, key, title).await?;
            sqlx::query("INSERT INTO moods (record_id, phase, label, score, created_ms) VALUES (?, ?, ?, ?, ?)")
                .bind(id)
                .bind(phase.as_str())
                .bind(label)
                .bind(i64::from((*score).clamp(1, 5)))
                .bind(now_ms)
                .execute(&mut *conn)
                .await
        }
        ReadingChange::AddProfileEntry { kind, text } => {
            sqlx::query("INSERT INTO profile_entries (platform, user_id, kind, text, created_ms) VALUES (?, ?, ?, ?, ?)")
                .bind(platform)
                .bind(user)
                .bind(kind.as_str())
                .bind(text)
                .bind(now_ms)
                .execute(&mut *conn)
                .await
        }
        ReadingChange::AddMentorFeedback { feedback_type, content } => {
            sqlx::query("INSERT INTO mentor_feedback (platform, user_id, feedback_type, content, created_ms) VALUES (?, ?, ?, ?, ?)")
                .bind(platform)
                .bind(user)
                .bind(feedback_type.as_str())
                .bind(content)
                .bind(now_ms)
                .execute(&mut *conn)
                .await
        }
        ReadingChange::SetWeeklyReview {
            enabled: false, ..
        } => {
            sqlx::query("DELETE FROM weekly_reviews WHERE platform = ? AND user_id = ?")
                .bind(platform)
                .bind(user)
                .execute(&mut *conn)
                .await
        }
        ReadingChange::SetWeeklyReview {
            enabled: true,
            timezone,
        } => {
            sqlx::query(
                "INSERT INTO weekly_reviews (platform, user_id, chat, thread, timezone, created_ms) VALUES (?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (platform, user_id) DO UPDATE SET chat = excluded.chat, thread = excluded.thread, \
                 timezone = excluded.timezone",
            )
            .bind(platform)
            .bind(user)
            .bind(&key.chat)
            .bind(&key.thread)
            .bind(timezone)
            .bind(now_ms)
            .execute(&mut *conn)
            .await
        }
        ReadingChange::AddRecommendation { title, reason } => {
            sqlx::query("INSERT INTO recommendations (platform, user_id, title, reason, created_ms) VALUES (?, ?, ?, ?, ?)")
                .bind(platform)
                .bind(user)
                .bind(title)
                .bind(reason)
                .bind(now_ms)
                .execute(&mut *conn)
                .await
        }
    };
    result.map_err(StoreError::db("saving reading data"))?;
    Ok(())
}

/// Sessions that go on, updated in one statement (two if some change status), each only if
/// its stored version is still the one the turn loaded. `sessions` carry the turn's changes and the
/// loaded version. Returns how many rows were updated (fewer: a session moved on).
async fn update_sessions(
    tx: &mut sqlx::SqliteConnection,
    sessions: Vec<SessionUpdate<'_>>,
    now_ms: i64,
) -> Result<u64, StoreError> {
    let (moved, staying) = session_rows(sessions);
    let mut updated = 0;
    for (rows, status) in [(&moved, true), (&staying, false)] {
        updated += execute_rows(tx, rows, "updating the sessions", |sql, rows| {
            push_session_updates(sql, rows, status, now_ms)
        })
        .await?;
    }
    Ok(updated)
}

/// The rows of `sessions`: those whose status changes, and the others. (SQLite rewrites
/// every index of a column in the SET list, changed or not: a session whose status stays
/// leaves `sessions_one_active`, a page per turn, alone.)
#[allow(clippy::type_complexity)]
fn session_rows(
    sessions: Vec<SessionUpdate<'_>>,
) -> (Vec<SessionUpdate<'_>>, Vec<SessionUpdate<'_>>) {
    sessions.into_iter().partition(|u| u.status_changed)
}

fn pending_json(session: &SessionRecord) -> Result<Option<String>, StoreError> {
    session
        .pending_options
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| corrupt("pending options", e))
}

/// `rows` updated, their status too if `status` ([`session_rows`]).
fn push_session_updates(
    sql: &mut Sql<'_>,
    rows: &[SessionUpdate<'_>],
    status: bool,
    now_ms: i64,
) -> Result<(), StoreError> {
    let mut states = Texts::default();
    let rows: Vec<_> = rows
        .iter()
        .map(|u| {
            let s = &u.after.session;
            (
                s.id,
                s.version,
                s.current_agent.as_deref(),
                s.language.as_deref(),
                s.country.as_deref(),
                s.timezone.as_deref(),
                states.add(s.state.as_json()),
                u.after.pending.as_deref(),
                s.status.as_str(),
            )
        })
        .collect();
    sql.push(
        "UPDATE sessions SET current_agent = v.value->>2, language = v.value->>3, country = v.value->>4, \
         timezone = v.value->>5, state = ",
    );
    states.push_text(sql, "v.value->6");
    sql.push(", pending_options = v.value->>7, ");
    if status {
        sql.push("status = v.value->>8, ");
    }
    sql.push("version = version + 1, updated_ms = ");
    sql.push_bind(now_ms).push(" FROM ");
    push_rows(sql, &rows)?;
    sql.push(" AS v WHERE sessions.id = v.value->>0 AND sessions.version = v.value->>1");
    Ok(())
}

/// Long texts of a statement's rows (sessions' states, a few KB each) bound as one BLOB,
/// each row carrying where its text lies in it, `[start, length]` ([`Texts::add`]): in the
/// rows' JSON ([`push_rows`]) each would be escaped on the way in and parsed back by
/// SQLite (profiled under load: 4 % of all CPU for the states), while a slice of a BLOB is
/// a copy.
#[derive(Default)]
struct Texts(Vec<u8>);

impl Texts {
    /// `text` appended; returns where a row finds it (SQLite's `substr` counts from 1).
    fn add(&mut self, text: &str) -> [usize; 2] {
        let start = self.0.len() + 1;
        self.0.extend_from_slice(text.as_bytes());
        [start, text.len()]
    }

    /// The text whose place is `place` (a JSON array `[start, length]` of the row,
    /// [`Texts::add`]), the BLOB bound here. (Every text came from a `&str` whole: the bytes
    /// are UTF-8, which `CAST` reads them as.)
    fn push_text(&mut self, sql: &mut Sql<'_>, place: &str) {
        sql.push("CAST(substr(")
            .push_bind(std::mem::take(&mut self.0))
            .push(format!(", {place}->>0, {place}->>1) AS TEXT)"));
    }
}

/// A session row to update: as the turn leaves it (with the version it loaded; its pending
/// options as written, [`Prepared`]), and whether the turn changed its status.
struct SessionUpdate<'a> {
    after: &'a Prepared,
    status_changed: bool,
}

impl<'a> SessionUpdate<'a> {
    fn of(commit: &TurnCommit, after: &'a Prepared) -> Self {
        SessionUpdate {
            after,
            status_changed: commit.session.status != after.session.status,
        }
    }
}

/// What a turn's rows need of its session, worked out by the turn's own task
/// ([`Store::commit_turn`], in parallel with the other turns) rather than on the writer's
/// thread, which every turn waits for: the session as the turn leaves it and its pending
/// options as JSON.
struct Prepared {
    session: SessionRecord,
    pending: Option<String>,
}

impl Prepared {
    fn of(commit: &TurnCommit) -> Result<Self, StoreError> {
        let session = applied(commit);
        let pending = pending_json(&session)?;
        Ok(Prepared { session, pending })
    }
}

/// The session as the turn leaves it (the commit's changes applied; not yet written).
fn applied(commit: &TurnCommit) -> SessionRecord {
    let mut session = commit.session.clone();
    for change in &commit.changes {
        session.apply(change);
    }
    session
}

/// A turn's session row (and the user's, for a new session; the previous session finished
/// first on a flow switch). Fails with [`StoreError::Conflict`] when the session moved on.
/// Returns the session as the turn leaves it.
async fn write_session(
    tx: &mut sqlx::SqliteConnection,
    commit: &TurnCommit,
    after: &Prepared,
    now_ms: i64,
) -> Result<SessionRecord, StoreError> {
    if let Some(previous) = commit.finish_session {
        let mut finish = Sql::new("");
        push_finished(&mut finish, &[previous], now_ms)?;
        finish
            .build()
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db("finishing the previous session"))?;
    }

    let mut session = after.session.clone();
    if session.is_new() {
        let users = [(&session.key, &commit.user)];
        let mut user = Sql::new("");
        push_users(&mut user, &users, now_ms)?;
        user.build()
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db("saving the user"))?;
        let rows = [(&session, after)];
        let mut insert = Sql::new("");
        push_new_sessions(&mut insert, &rows, now_ms)?;
        insert.push(" RETURNING id");
        let id: i64 = insert
            .build_query_scalar()
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::db("creating the session"))?;
        session.id = id;
        session.version = 1;
        session.created_at = from_ms(now_ms);
    } else {
        if update_sessions(tx, vec![SessionUpdate::of(commit, after)], now_ms).await? == 0 {
            return Err(StoreError::Conflict {
                session_id: session.id,
            });
        }
        session.version += 1;
    }
    session.updated_at = from_ms(now_ms);
    Ok(session)
}

/// Sessions a flow switch leaves behind, finished.
fn push_finished(sql: &mut Sql<'_>, ids: &[i64], now_ms: i64) -> Result<(), StoreError> {
    sql.push("UPDATE sessions SET status = 'finished', version = version + 1, updated_ms = ");
    sql.push_bind(now_ms)
        .push(" WHERE id IN (SELECT value FROM ");
    push_each(sql, ids)?;
    sql.push(")");
    Ok(())
}

/// The users of new sessions (sessions reference them), their names as they are now.
fn push_users(
    sql: &mut Sql<'_>,
    users: &[(&SessionKey, &UserRef)],
    now_ms: i64,
) -> Result<(), StoreError> {
    let rows: Vec<_> = users
        .iter()
        .map(|(key, user)| {
            (
                key.platform.as_str(),
                user.id.as_str(),
                user.display_name.as_str(),
            )
        })
        .collect();
    sql.push(
        "INSERT INTO users (platform, user_id, display_name, first_seen_ms, last_seen_ms) \
         SELECT value->>0, value->>1, value->>2, ",
    );
    sql.push_bind(now_ms)
        .push(", ")
        .push_bind(now_ms)
        .push(" FROM ");
    push_rows(sql, &rows)?;
    // (`WHERE true`: an upsert's SELECT needs a WHERE clause to be read as one)
    sql.push(
        " WHERE true ON CONFLICT (platform, user_id) DO UPDATE SET display_name = excluded.display_name, \
         last_seen_ms = excluded.last_seen_ms",
    );
    Ok(())
}

/// New sessions at version 1, their pending options as [`Prepared`] wrote them;
/// a session without an id yet (0) gets SQLite's.
fn push_new_sessions(
    sql: &mut Sql<'_>,
    sessions: &[(&SessionRecord, &Prepared)],
    now_ms: i64,
) -> Result<(), StoreError> {
    let mut states = Texts::default();
    let rows: Vec<_> = sessions
        .iter()
        .map(|(s, after)| {
            let key = &s.key;
            (
                (!s.is_new()).then_some(s.id),
                key.platform.as_str(),
                key.chat.as_str(),
                key.thread.as_str(),
                key.user.as_str(),
                s.flow.as_str(),
                s.current_agent.as_deref(),
                s.language.as_deref(),
                s.country.as_deref(),
                s.timezone.as_deref(),
                states.add(s.state.as_json()),
                after.pending.as_deref(),
                s.status.as_str(),
            )
        })
        .collect();
    sql.push(
        "INSERT INTO sessions (id, platform, chat, thread, user_id, flow, current_agent, language, country, \
         timezone, state, pending_options, status, version, created_ms, updated_ms) \
         SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6, value->>7, \
         value->>8, value->>9, ",
    );
    states.push_text(sql, "value->10");
    sql.push(", value->>11, value->>12, 1, ");
    sql.push_bind(now_ms)
        .push(", ")
        .push_bind(now_ms)
        .push(" FROM ");
    push_rows(sql, &rows)
}

/// A turn's other rows: reading data, tickets and feedback (its submissions go with the
/// messages: [`push_submissions`]).
async fn write_extras(
    tx: &mut sqlx::SqliteConnection,
    session: &SessionRecord,
    changes: &[StateChange],
    now_ms: i64,
) -> Result<(), StoreError> {
    let key = &session.key;
    for change in changes {
        match change {
            StateChange::Reading { change } => {
                apply_reading(tx, key, change, now_ms).await?;
            }
            StateChange::SaveTicket { ticket } => {
                let json = |v: &serde_json::Value| {
                    serde_json::to_string(v).map_err(|e| corrupt("ticket", e))
                };
                sqlx::query(
                    "INSERT INTO helpdesk_tickets (session_id, ticket_no, question, plan, sub_answers, answer, sources, \
                     feedback, created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(session.id)
                .bind(ticket.ticket_no)
                .bind(&ticket.question)
                .bind(json(&serde_json::json!(ticket.plan))?)
                .bind(json(&ticket.sub_answers)?)
                .bind(&ticket.answer)
                .bind(json(&serde_json::json!(ticket.sources))?)
                .bind(&ticket.feedback)
                .bind(now_ms)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db("saving the ticket"))?;
            }
            StateChange::SetTicketFeedback {
                ticket_no,
                feedback,
            } => {
                sqlx::query("UPDATE helpdesk_tickets SET feedback = ?, updated_ms = ? WHERE session_id = ? AND ticket_no = ?")
                    .bind(feedback)
                    .bind(now_ms)
                    .bind(session.id)
                    .bind(ticket_no)
                    .execute(&mut *tx)
                    .await
                    .map_err(StoreError::db("saving the feedback"))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// The statement `statement` builds for `rows` (none for no rows), run on `conn`. Returns
/// how many rows it changed.
async fn execute_rows<'r, T>(
    conn: &mut sqlx::SqliteConnection,
    rows: &'r [T],
    context: &'static str,
    statement: impl Fn(&mut Sql<'r>, &'r [T]) -> Result<(), StoreError>,
) -> Result<u64, StoreError> {
    if rows.is_empty() {
        return Ok(0);
    }
    let mut sql = Sql::new("");
    statement(&mut sql, rows)?;
    Ok(sql
        .build()
        .execute(&mut *conn)
        .await
        .map_err(StoreError::db(context))?
        .rows_affected())
}

/// The turns' platform updates marked processed. Returns how many were new (the others
/// were processed already).
async fn mark_processed(
    tx: &mut sqlx::SqliteConnection,
    updates: &[(&ProcessedUpdate, i64)],
    now_ms: i64,
) -> Result<u64, StoreError> {
    execute_rows(tx, updates, "marking the update processed", |sql, rows| {
        push_processed(sql, rows, true, now_ms)
    })
    .await
}

/// `updates` marked processed; one processed already is left as it is when `skip_known`,
/// else it fails the statement (its primary key).
fn push_processed(
    sql: &mut Sql<'_>,
    updates: &[(&ProcessedUpdate, i64)],
    skip_known: bool,
    now_ms: i64,
) -> Result<(), StoreError> {
    let rows: Vec<_> = updates
        .iter()
        .map(|(p, session_id)| {
            (
                p.platform.as_str(),
                p.chat.as_str(),
                p.message_id.as_str(),
                *session_id,
            )
        })
        .collect();
    sql.push(
        "INSERT INTO processed_updates (platform, chat, message_id, session_id, created_ms) \
         SELECT value->>0, value->>1, value->>2, value->>3, ",
    );
    sql.push_bind(now_ms).push(" FROM ");
    push_rows(sql, &rows)?;
    if skip_known {
        sql.push(" WHERE true ON CONFLICT DO NOTHING");
    }
    Ok(())
}

/// The turns' transcript messages. Returns the ids of the messages written, per session,
/// in order.
async fn insert_messages(
    tx: &mut sqlx::SqliteConnection,
    turns: &[(i64, &[StateChange])],
    now_ms: i64,
) -> Result<HashMap<i64, Vec<i64>>, StoreError> {
    let messages = message_rows(turns.iter().copied());
    if messages.is_empty() {
        return Ok(HashMap::new());
    }
    let mut insert = Sql::new("");
    push_messages(&mut insert, &messages, None, now_ms)?;
    let rows = insert
        .build()
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db("saving the messages"))?;
    messages_written(&rows)
}

/// A transcript message's row: session, role, text.
type MessageRow<'a> = (i64, Role, &'a str);

/// The transcript messages among the changes of each session's turn.
fn message_rows<'a>(turns: impl Iterator<Item = (i64, &'a [StateChange])>) -> Vec<MessageRow<'a>> {
    turns
        .flat_map(|(session_id, changes)| {
            changes.iter().filter_map(move |change| match change {
                StateChange::AddUserMessage { text } => {
                    Some((session_id, Role::User, text.as_str()))
                }
                StateChange::AddAssistantMessage { text } => {
                    Some((session_id, Role::Assistant, text.as_str()))
                }
                _ => None,
            })
        })
        .collect()
}

/// `messages` written, numbered from `first` (the fast path's ids, [`NextIds`]); with
/// none, SQLite numbers them and the statement returns each one's id and session.
fn push_messages(
    sql: &mut Sql<'_>,
    messages: &[MessageRow<'_>],
    first: Option<i64>,
    now_ms: i64,
) -> Result<(), StoreError> {
    let rows: Vec<_> = messages
        .iter()
        .zip(0..)
        .map(|((session_id, role, text), i)| {
            (
                *session_id,
                role.as_str(),
                *text,
                *role != Role::Assistant,
                first.map(|first| first + i),
            )
        })
        .collect();
    sql.push(
        "INSERT INTO messages (session_id, role, text, delivered, id, created_ms) \
         SELECT value->>0, value->>1, value->>2, value->>3, value->>4, ",
    );
    sql.push_bind(now_ms).push(" FROM ");
    push_rows(sql, &rows)?;
    if first.is_none() {
        sql.push(" RETURNING id, session_id");
    }
    Ok(())
}

/// The ids [`push_messages`] returned, per session, in order.
fn messages_written(rows: &[SqliteRow]) -> Result<HashMap<i64, Vec<i64>>, StoreError> {
    let mut written: HashMap<i64, Vec<i64>> = HashMap::new();
    for row in rows {
        let get = |e: sqlx::Error| corrupt("message row", e);
        written
            .entry(row.try_get("session_id").map_err(get)?)
            .or_default()
            .push(row.try_get("id").map_err(get)?);
    }
    // RETURNING order is unspecified; ids grow with insertion order
    for ids in written.values_mut() {
        ids.sort_unstable();
    }
    Ok(written)
}

/// A committed turn's answer and what it changed for the hot-session cache. `ids`: the ids
/// of the turn's messages ([`insert_messages`]), in the order of its changes.
fn turn_written(
    commit: &TurnCommit,
    session: SessionRecord,
    ids: Vec<i64>,
    now_ms: i64,
) -> (CommittedTurn, HotChange) {
    let said = message_rows(std::iter::once((session.id, commit.changes.as_slice())));
    let whole = said.len() == ids.len();
    let messages: Vec<StoredMessage> = said
        .into_iter()
        .zip(ids)
        .map(|((session_id, role, text), id)| StoredMessage {
            id,
            session_id,
            role,
            text: text.to_string(),
            at: from_ms(now_ms),
        })
        .collect();
    let assistant_message_ids = messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.id)
        .collect();
    // (one id per message, or the cache cannot tell what the turn wrote)
    let change = if whole {
        HotChange::Committed(Box::new(HotTurn {
            loaded_version: commit.session.version,
            session: session.clone(),
            processed: commit.processed.clone(),
            messages,
        }))
    } else {
        HotChange::Dropped {
            key: session.key.clone(),
            processed: commit.processed.clone(),
        }
    };
    (
        CommittedTurn {
            session,
            assistant_message_ids,
        },
        change,
    )
}

/// One turn's writes, inside the batch's transaction (the caller wraps it in a savepoint,
/// so a refused turn leaves nothing behind).
async fn write_turn(
    tx: &mut sqlx::SqliteConnection,
    commit: TurnCommit,
    after: &Prepared,
    now_ms: i64,
) -> Result<(CommittedTurn, HotChange), StoreError> {
    let session = write_session(tx, &commit, after, now_ms).await?;
    if let Some(p) = &commit.processed
        && mark_processed(tx, &[(p, session.id)], now_ms).await? == 0
    {
        return Err(StoreError::Duplicate {
            chat: p.chat.clone(),
            message_id: p.message_id.clone(),
        });
    }
    let mut ids = insert_messages(tx, &[(session.id, &commit.changes)], now_ms).await?;
    write_extras(tx, &session, &commit.changes, now_ms).await?;
    let mut submissions = Vec::new();
    submission_rows(session.id, &session.key, &commit.changes, &mut submissions);
    execute_rows(tx, &submissions, "saving the submission", |sql, rows| {
        push_submissions(sql, rows, now_ms)
    })
    .await?;
    let calls: Vec<_> = commit
        .llm_calls
        .iter()
        .map(|c| (Some(session.id), c))
        .collect();
    insert_llm_calls(tx, &calls).await?;
    let ids = ids.remove(&session.id).unwrap_or_default();
    Ok(turn_written(&commit, session, ids, now_ms))
}

/// The fast path of a batch, in one round trip to the connection's worker thread: `BEGIN`,
/// every row of the batch and `COMMIT` as one query ([`Trip`]). (Each trip wakes that
/// thread and then this one; measured at 5,000 turns/s, when the turns keep both cores
/// busy, a trip took ~190 µs, and a batch once made ~5 of them.) New sessions and messages
/// are numbered here, from `next_ids`, so that their rows go in the same query and no row
/// comes back (each returned row is one more hand-over between the threads); a turn's
/// reading data or ticket takes trips of its own ([`write_extras`]), and the `COMMIT` one
/// more. Anything out of the ordinary — a conflict, a duplicate, a failed statement, two
/// turns of one session — answers `None`, the transaction rolled back, and the batch is
/// redone turn by turn in savepoints.
async fn fast_batch(
    writer: &SqlitePool,
    batch: &[Job],
    next_ids: &mut Option<NextIds>,
) -> Option<Vec<(CommittedTurn, HotChange)>> {
    let mut conn = writer.acquire().await.ok()?;
    let first = match *next_ids {
        Some(ids) => ids,
        None => {
            let (session, message) = sqlx::query_as(
                "SELECT (SELECT coalesce(max(id), 0) + 1 FROM sessions), \
                 (SELECT coalesce(max(id), 0) + 1 FROM messages)",
            )
            .fetch_one(&mut *conn)
            .await
            .ok()?;
            NextIds { session, message }
        }
    };
    let (done, next) = match fast_writes(&mut conn, batch, first).await {
        Ok(Some(written)) => written,
        outcome => {
            if let Err(e) = &outcome {
                tracing::debug!(error = %e, "batch redone turn by turn");
            }
            rollback(&mut conn).await;
            return None;
        }
    };
    *next_ids = Some(next);
    Some(done)
}

/// The ids the fast path gives the next session and message it creates ([`fast_batch`]).
#[derive(Clone, Copy)]
struct NextIds {
    session: i64,
    message: i64,
}

/// A change [`write_extras`] writes (on the fast path, after the batch's [`Trip`]).
fn is_extra(change: &StateChange) -> bool {
    matches!(
        change,
        StateChange::Reading { .. }
            | StateChange::SaveTicket { .. }
            | StateChange::SetTicketFeedback { .. }
    )
}

/// Ends the transaction a fast batch began, unless its failure ended it already.
async fn rollback(conn: &mut sqlx::SqliteConnection) {
    if let Err(e) = sqlx::query("ROLLBACK").execute(&mut *conn).await {
        tracing::trace!(error = %e, "nothing to roll back");
    }
}

/// The fast path's writes, from `BEGIN` on ([`fast_batch`]); new sessions and messages
/// numbered from `first`. Returns the turns written and the next free ids.
#[allow(clippy::type_complexity)]
async fn fast_writes(
    conn: &mut sqlx::SqliteConnection,
    batch: &[Job],
    first: NextIds,
) -> Result<Option<(Vec<(CommittedTurn, HotChange)>, NextIds)>, StoreError> {
    let now_ms = ms(Utc::now());
    let (commits, afters): (Vec<&TurnCommit>, Vec<&Prepared>) = batch
        .iter()
        .filter_map(|job| match job {
            Job::Turn { commit, after, .. } => Some((commit.as_ref(), after.as_ref())),
            Job::InboxPut { .. }
            | Job::InboxDone { .. }
            | Job::Delivered { .. }
            | Job::Flush(_) => None,
        })
        .unzip();
    let mut next = first;
    let mut sessions: Vec<SessionRecord> = afters
        .iter()
        .map(|after| {
            let mut session = after.session.clone();
            if session.is_new() {
                session.id = next.session;
                next.session += 1;
            }
            session
        })
        .collect();
    let seen: std::collections::HashSet<i64> = sessions.iter().map(|s| s.id).collect();
    if seen.len() != sessions.len() {
        // two turns of one session: the second must see the first's version
        return Ok(None);
    }

    // every row of the batch, before the query borrows them
    let finished: Vec<i64> = commits.iter().filter_map(|c| c.finish_session).collect();
    let mut users = Vec::new();
    let mut created = Vec::new();
    let mut going_on = Vec::new();
    for ((commit, after), session) in commits.iter().zip(&afters).zip(&sessions) {
        if commit.session.is_new() {
            users.push((&session.key, &commit.user));
            created.push((session, *after));
        } else {
            going_on.push(SessionUpdate::of(commit, after));
        }
    }
    let (moved, staying) = session_rows(going_on);
    let processed: Vec<(&ProcessedUpdate, i64)> = commits
        .iter()
        .zip(&sessions)
        .filter_map(|(c, s)| c.processed.as_ref().map(|p| (p, s.id)))
        .collect();
    let messages = message_rows(
        commits
            .iter()
            .zip(&sessions)
            .map(|(c, s)| (s.id, c.changes.as_slice())),
    );
    let calls: Vec<CallRow> = commits
        .iter()
        .zip(&sessions)
        .flat_map(|(c, s)| c.llm_calls.iter().map(move |call| (Some(s.id), call)))
        .collect();
    let mut submissions = Vec::new();
    for (commit, session) in commits.iter().zip(&sessions) {
        submission_rows(session.id, &session.key, &commit.changes, &mut submissions);
    }
    let delivered: Vec<i64> = batch
        .iter()
        .flat_map(|job| match job {
            Job::Delivered { ids, .. } => ids.as_slice(),
            Job::Turn { .. } | Job::InboxPut { .. } | Job::InboxDone { .. } | Job::Flush(_) => &[],
        })
        .copied()
        .collect();
    let (put, done) = inbox_rows(batch, &commits);

    let mut trip = Trip::new("BEGIN IMMEDIATE");
    trip.add(Part::Any, &finished, |sql, ids| {
        push_finished(sql, ids, now_ms)
    })?;
    trip.add(Part::Any, &users, |sql, users| {
        push_users(sql, users, now_ms)
    })?;
    trip.add(Part::Any, &created, |sql, created| {
        push_new_sessions(sql, created, now_ms)
    })?;
    // each row: else a session moved on meanwhile (the turn by turn path names it)
    for (rows, status) in [(&moved, true), (&staying, false)] {
        trip.add(Part::EveryRow, rows, |sql, rows| {
            push_session_updates(sql, rows, status, now_ms)
        })?;
    }
    // an update processed already fails the query (its primary key: no check needed)
    trip.add(Part::Any, &processed, |sql, rows| {
        push_processed(sql, rows, false, now_ms)
    })?;
    trip.add(Part::Any, &messages, |sql, rows| {
        push_messages(sql, rows, Some(next.message), now_ms)
    })?;
    trip.add(Part::Any, &calls, push_llm_calls)?;
    trip.add(Part::Any, &submissions, |sql, rows| {
        push_submissions(sql, rows, now_ms)
    })?;
    trip.add(Part::Any, &delivered, push_delivered)?;
    trip.add(Part::Any, &put, push_inbox_put)?;
    trip.add(Part::Any, &done, push_inbox_done)?;
    // reading data and tickets take trips of their own, before the COMMIT
    let extras = commits.iter().any(|c| c.changes.iter().any(is_extra));
    if !extras {
        trip.finish("COMMIT");
    }
    trip.run(conn).await?;
    if extras {
        for (commit, session) in commits.iter().zip(&sessions) {
            write_extras(conn, session, &commit.changes, now_ms).await?;
        }
        sqlx::query("COMMIT")
            .execute(&mut *conn)
            .await
            .map_err(StoreError::db("committing a batch of turns"))?;
    }
    // committed: nothing below can fail
    let mut ids: HashMap<i64, Vec<i64>> = HashMap::new();
    for ((session_id, _, _), id) in messages.iter().zip(next.message..) {
        ids.entry(*session_id).or_default().push(id);
    }
    next.message += messages.len() as i64;
    for session in &mut sessions {
        if session.version == 0 {
            session.created_at = from_ms(now_ms);
        }
        session.version += 1;
        session.updated_at = from_ms(now_ms);
    }
    let done = commits
        .iter()
        .zip(sessions)
        .map(|(commit, session)| {
            let written = ids.remove(&session.id).unwrap_or_default();
            turn_written(commit, session, written, now_ms)
        })
        .collect();
    Ok(Some((done, next)))
}

/// Statements run as one query ([`fast_batch`]): `BEGIN IMMEDIATE`, the batch's writes, each
/// followed by a check where it must change one row per row it carries, and `COMMIT` when
/// nothing else is to be written. A check that fails ends the query with an error before
/// the `COMMIT` ([`BATCH_CHECKS`]), so a batch that commits in its trip is one round trip
/// to the connection's thread.
///
/// sqlx 0.8 runs every statement of a query on SQLite, binding the arguments in order
/// across them, and reports each statement's changes and rows; it marks that use as
/// deprecated, to go in a later major version (launchbadge/sqlx#3108). This is the one
/// place that relies on it (the version is pinned by `Cargo.lock`; the store's tests and
/// `kaiwa bench` run it with every batch): without it, each statement would cost a trip.
struct Trip<'r> {
    sql: Sql<'r>,
    /// statements in the query
    statements: usize,
}

/// What a statement of a [`Trip`] must do.
#[derive(Clone, Copy)]
enum Part {
    /// change one row for each of its rows
    EveryRow,
    Any,
}

/// Made on the writer's connection when it opens: a row inserted into `batch_refused` fails
/// its statement (and so ends a [`Trip`], its `COMMIT` not run). A trip's check inserts one
/// when the statement before it changed other than its number of rows: a session moved on
/// meanwhile.
const BATCH_CHECKS: &str = "CREATE TEMP TABLE IF NOT EXISTS batch_refused (changes INTEGER); \
    CREATE TEMP TRIGGER IF NOT EXISTS batch_refused_raises BEFORE INSERT ON batch_refused \
    BEGIN SELECT RAISE(ABORT, 'a statement of the batch did not change one row per row'); END";

impl<'r> Trip<'r> {
    fn new(first: &'static str) -> Self {
        Trip {
            sql: Sql::new(first),
            statements: 1,
        }
    }

    /// Appends the statement `statement` builds for `rows` (none for no rows), as
    /// [`execute_rows`] runs one, and for [`Part::EveryRow`] its check.
    fn add<T>(
        &mut self,
        part: Part,
        rows: &[T],
        statement: impl FnOnce(&mut Sql<'r>, &[T]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        self.sql.push("; ");
        statement(&mut self.sql, rows)?;
        self.statements += 1;
        if let Part::EveryRow = part {
            let n = i64::try_from(rows.len()).map_err(|e| corrupt("a batch's rows", e))?;
            self.sql
                .push("; INSERT INTO temp.batch_refused SELECT changes() WHERE changes() <> ")
                .push_bind(n);
            self.statements += 1;
        }
        Ok(())
    }

    /// Appends a last statement (`COMMIT`).
    fn finish(&mut self, last: &'static str) {
        self.sql.push("; ").push(last);
        self.statements += 1;
    }

    /// Runs the statements (prepared once per set of statements a batch needs: each one's
    /// text is the same for any number of rows, [`push_rows`]); they return no rows (each
    /// would be one more hand-over from the connection's thread). A failed statement or
    /// check ends the query with its error (the statements before it stay done: the caller
    /// rolls back).
    #[allow(deprecated)]
    async fn run(self, conn: &mut sqlx::SqliteConnection) -> Result<(), StoreError> {
        use futures::TryStreamExt;
        let Trip {
            mut sql,
            statements,
        } = self;
        let results: Vec<_> = sql
            .build()
            .fetch_many(&mut *conn)
            .try_collect()
            .await
            .map_err(StoreError::db("writing a batch of turns"))?;
        let done = results.iter().filter(|r| r.is_left()).count();
        if done != statements {
            return Err(corrupt(
                "a batch's statements",
                format!("{done} results for {statements} statements"),
            ));
        }
        Ok(())
    }
}

/// An inbox entry's key: platform, chat, message id.
type InboxKey<'a> = (&'a str, &'a str, &'a str);

/// The inbox entries `batch` keeps and those it clears, on the turn by turn path (the fast
/// one writes the same [`inbox_rows`] in its query).
async fn write_inbox(
    tx: &mut sqlx::SqliteConnection,
    batch: &[Job],
    committing: &[&TurnCommit],
) -> Result<(), StoreError> {
    let (put, done) = inbox_rows(batch, committing);
    execute_rows(tx, &put, "keeping a received message", |sql, rows| {
        push_inbox_put(sql, rows)
    })
    .await?;
    execute_rows(tx, &done, "clearing a handled message", |sql, rows| {
        push_inbox_done(sql, rows)
    })
    .await?;
    Ok(())
}

/// The inbox entries `batch` keeps and those it clears. A message whose turn is among
/// `committing` (the turns this same transaction commits) gets no entry: its dedupe row
/// marks it done, so a fast turn costs no inbox page.
#[allow(clippy::type_complexity)]
fn inbox_rows<'a>(
    batch: &'a [Job],
    committing: &[&'a TurnCommit],
) -> (Vec<&'a InboxEntry>, Vec<InboxKey<'a>>) {
    let turned: std::collections::HashSet<InboxKey<'_>> = committing
        .iter()
        .filter_map(|c| c.processed.as_ref())
        .map(|p| (p.platform.as_str(), p.chat.as_str(), p.message_id.as_str()))
        .collect();
    let mut put = Vec::new();
    let mut done = Vec::new();
    for job in batch {
        match job {
            Job::InboxPut { entry } => {
                let key = (
                    entry.platform.as_str(),
                    entry.chat.as_str(),
                    entry.message_id.as_str(),
                );
                if !turned.contains(&key) {
                    put.push(entry);
                }
            }
            Job::InboxDone {
                platform,
                chat,
                message_id,
            } => done.push((platform.as_str(), chat.as_str(), message_id.as_str())),
            Job::Turn { .. } | Job::Delivered { .. } | Job::Flush(_) => {}
        }
    }
    (put, done)
}

fn push_inbox_put(sql: &mut Sql<'_>, entries: &[&InboxEntry]) -> Result<(), StoreError> {
    let rows: Vec<_> = entries
        .iter()
        .map(|e| {
            (
                e.platform.as_str(),
                e.chat.as_str(),
                e.message_id.as_str(),
                e.incoming.as_str(),
                e.created_ms,
            )
        })
        .collect();
    sql.push(
        "INSERT INTO inbox (platform, chat, message_id, incoming, created_ms) \
         SELECT value->>0, value->>1, value->>2, value->>3, value->>4 FROM ",
    );
    push_rows(sql, &rows)?;
    sql.push(" WHERE true ON CONFLICT DO NOTHING");
    Ok(())
}

fn push_inbox_done(sql: &mut Sql<'_>, keys: &[InboxKey<'_>]) -> Result<(), StoreError> {
    sql.push(
        "DELETE FROM inbox WHERE (platform, chat, message_id) IN \
         (SELECT value->>0, value->>1, value->>2 FROM ",
    );
    push_rows(sql, keys)?;
    sql.push(")");
    Ok(())
}

async fn mark_delivered_in(
    tx: &mut sqlx::SqliteConnection,
    delivered: &[i64],
) -> Result<(), StoreError> {
    execute_rows(tx, delivered, "marking messages delivered", |sql, rows| {
        push_delivered(sql, rows)
    })
    .await?;
    Ok(())
}

fn push_delivered(sql: &mut Sql<'_>, ids: &[i64]) -> Result<(), StoreError> {
    sql.push("UPDATE messages SET delivered = 1 WHERE id IN (SELECT value FROM ");
    push_each(sql, ids)?;
    sql.push(")");
    Ok(())
}

/// `rows` as one JSON array bound as one argument (each row an array of its values, which
/// the statement reads as `value->>0`, `value->>1`, …) instead of one argument per value,
/// so that a statement's text — and the statement SQLite prepares for it once per
/// connection — is the same for any number of rows.
///
/// `json_each` gives each row back as JSON text, and every `value->>n` would parse that
/// text again (profiled under load: 6 % of all CPU time, for sessions' thirteen columns).
/// Each row is turned into SQLite's binary JSON once instead, in a subquery that SQLite
/// runs beside the statement rather than folding it into each column (an `OFFSET` keeps
/// it from doing that), and `->>` reads the binary form in place.
fn push_rows<T: serde::Serialize>(sql: &mut Sql<'_>, rows: &[T]) -> Result<(), StoreError> {
    sql.push("(SELECT jsonb(value) AS value FROM ");
    push_each(sql, rows)?;
    sql.push(" LIMIT -1 OFFSET 0)");
    Ok(())
}

/// `json_each(?)` of `items` as one JSON array: each item a row of the one column `value`
/// (as is for ids; [`push_rows`] for rows of several values).
fn push_each<T: serde::Serialize>(sql: &mut Sql<'_>, items: &[T]) -> Result<(), StoreError> {
    let json = serde_json::to_string(items).map_err(|e| corrupt("rows to write", e))?;
    sql.push("json_each(").push_bind(json).push(")");
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    async fn reading_records(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<Vec<ReadingRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, title, author, status, interaction_mode, started_ms, finished_ms FROM reading_records \
             WHERE platform = ? AND user_id = ? ORDER BY updated_ms DESC, id DESC",
        )
        .bind(platform.as_str())
        .bind(user)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("reading records"))?;
        rows.iter()
            .map(|row| {
                let get = |e: sqlx::Error| corrupt("reading record", e);
                let status: String = row.try_get("status").map_err(get)?;
                let mode: String = row.try_get("interaction_mode").map_err(get)?;
                Ok(ReadingRecord {
                    id: row.try_get("id").map_err(get)?,
                    title: row.try_get("title").map_err(get)?,
                    author: row.try_get("author").map_err(get)?,
                    status: ReadingStatus::parse(&status)
                        .ok_or_else(|| corrupt("reading status", &status))?,
                    mode: InteractionMode::parse(&mode)
                        .ok_or_else(|| corrupt("interaction mode", &mode))?,
                    started_at: row
                        .try_get::<Option<i64>, _>("started_ms")
                        .map_err(get)?
                        .map(from_ms),
                    finished_at: row
                        .try_get::<Option<i64>, _>("finished_ms")
                        .map_err(get)?
                        .map(from_ms),
                })
            })
            .collect()
    }

    async fn insights(&self, record_id: i64) -> Result<Vec<Insight>, StoreError> {
        let rows = sqlx::query(
            "SELECT kind, text, created_ms FROM insights WHERE record_id = ? ORDER BY id",
        )
        .bind(record_id)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("reading insights"))?;
        rows.iter()
            .map(|row| {
                let get = |e: sqlx::Error| corrupt("insight", e);
                let kind: String = row.try_get("kind").map_err(get)?;
                Ok(Insight {
                    kind: InsightKind::parse(&kind)
                        .ok_or_else(|| corrupt("insight kind", &kind))?,
                    text: row.try_get("text").map_err(get)?,
                    at: from_ms(row.try_get("created_ms").map_err(get)?),
                })
            })
            .collect()
    }

    async fn moods(&self, record_id: i64) -> Result<Vec<Mood>, StoreError> {
        let rows = sqlx::query(
            "SELECT phase, label, score, created_ms FROM moods WHERE record_id = ? ORDER BY id",
        )
        .bind(record_id)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("reading moods"))?;
        rows.iter()
            .map(|row| {
                let get = |e: sqlx::Error| corrupt("mood", e);
                let phase: String = row.try_get("phase").map_err(get)?;
                Ok(Mood {
                    phase: MoodPhase::parse(&phase).ok_or_else(|| corrupt("mood phase", &phase))?,
                    label: row.try_get("label").map_err(get)?,
                    score: row.try_get::<i64, _>("score").map_err(get)?.clamp(1, 5) as u8,
                    at: from_ms(row.try_get("created_ms").map_err(get)?),
                })
            })
            .collect()
    }

    async fn profile_entries(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<Vec<ProfileEntry>, StoreError> {
        let rows = sqlx::query("SELECT kind, text, created_ms FROM profile_entries WHERE platform = ? AND user_id = ? ORDER BY id")
            .bind(platform.as_str())
            .bind(user)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("reading the profile"))?;
        rows.iter()
            .map(|row| {
                let get = |e: sqlx::Error| corrupt("profile entry", e);
                let kind: String = row.try_get("kind").map_err(get)?;
                Ok(ProfileEntry {
                    kind: ProfileKind::parse(&kind)
                        .ok_or_else(|| corrupt("profile kind", &kind))?,
                    text: row.try_get("text").map_err(get)?,
                    at: from_ms(row.try_get("created_ms").map_err(get)?),
                })
            })
            .collect()
    }

    async fn weekly_reviews(&self) -> Result<Vec<WeeklyReviewSubscription>, StoreError> {
        let rows = sqlx::query(
            "SELECT platform, user_id, chat, thread, timezone, created_ms FROM weekly_reviews ORDER BY platform, user_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("reading the weekly review list"))?;
        rows.iter()
            .map(|row| {
                let get = |e: sqlx::Error| corrupt("weekly review", e);
                let platform: String = row.try_get("platform").map_err(get)?;
                Ok(WeeklyReviewSubscription {
                    key: SessionKey {
                        platform: Platform::parse(&platform)
                            .ok_or_else(|| corrupt("platform", &platform))?,
                        chat: row.try_get("chat").map_err(get)?,
                        thread: row.try_get("thread").map_err(get)?,
                        user: row.try_get("user_id").map_err(get)?,
                    },
                    timezone: row.try_get("timezone").map_err(get)?,
                    since: from_ms(row.try_get("created_ms").map_err(get)?),
                })
            })
            .collect()
    }

    async fn tickets(&self, session_id: i64) -> Result<Vec<Ticket>, StoreError> {
        let rows =
            sqlx::query("SELECT * FROM helpdesk_tickets WHERE session_id = ? ORDER BY ticket_no")
                .bind(session_id)
                .fetch_all(&self.pool)
                .await
                .map_err(StoreError::db("reading tickets"))?;
        rows.iter()
            .map(|row| {
                let get = |e: sqlx::Error| corrupt("ticket row", e);
                let json = |col: &str| -> Result<serde_json::Value, StoreError> {
                    let text: String = row.try_get(col).map_err(get)?;
                    serde_json::from_str(&text).map_err(|e| corrupt("ticket JSON", e))
                };
                Ok(Ticket {
                    ticket_no: row.try_get("ticket_no").map_err(get)?,
                    question: row.try_get("question").map_err(get)?,
                    plan: serde_json::from_value(json("plan")?)
                        .map_err(|e| corrupt("ticket plan", e))?,
                    sub_answers: json("sub_answers")?,
                    answer: row.try_get("answer").map_err(get)?,
                    sources: serde_json::from_value(json("sources")?)
                        .map_err(|e| corrupt("ticket sources", e))?,
                    feedback: row.try_get("feedback").map_err(get)?,
                })
            })
            .collect()
    }

    async fn submissions(
        &self,
        form_id: Option<&str>,
    ) -> Result<Vec<SubmissionRecord>, StoreError> {
        let rows =
            sqlx::query("SELECT * FROM submissions WHERE (? IS NULL OR form_id = ?) ORDER BY id")
                .bind(form_id)
                .bind(form_id)
                .fetch_all(&self.pool)
                .await
                .map_err(StoreError::db("reading submissions"))?;
        rows.iter().map(submission_from_row).collect()
    }

    async fn active_session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions \
             WHERE platform = ? AND chat = ? AND thread = ? AND user_id = ? AND status = 'active'"
        ))
        .bind(key.platform.as_str())
        .bind(&key.chat)
        .bind(&key.thread)
        .bind(&key.user)
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::db("loading the active session"))?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn session(&self, id: i64) -> Result<Option<SessionRecord>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::db("loading a session"))?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn active_sessions(&self, limit: usize) -> Result<Vec<SessionRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE status = 'active' ORDER BY updated_ms DESC LIMIT ?"
        ))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("listing sessions"))?;
        rows.iter().map(session_from_row).collect()
    }

    async fn count_active_sessions(&self) -> Result<i64, StoreError> {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM sessions WHERE status = 'active'")
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db("counting active sessions"))?;
        Ok(n)
    }

    async fn is_processed(
        &self,
        platform: Platform,
        chat: &str,
        message_id: &str,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query(
            "SELECT 1 FROM processed_updates WHERE platform = ? AND chat = ? AND message_id = ?",
        )
        .bind(platform.as_str())
        .bind(chat)
        .bind(message_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::db("checking processed updates"))?;
        Ok(row.is_some())
    }

    async fn recent_messages(
        &self,
        session_id: i64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, session_id, role, text, created_ms FROM \
             (SELECT * FROM messages WHERE session_id = ? ORDER BY id DESC LIMIT ?) ORDER BY id",
        )
        .bind(session_id)
        .bind(limit.min(i64::MAX as usize) as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("loading messages"))?;
        rows.iter().map(message_from_row).collect()
    }

    async fn load_for_turn(
        &self,
        key: &SessionKey,
        message_id: &str,
        history: usize,
    ) -> Result<TurnLoad, StoreError> {
        if let Some(load) = self.hot.load(key, message_id, history) {
            return Ok(load);
        }
        let epoch = self.hot.epoch();
        // one round trip and one row: the dedupe check, the active session and its recent
        // messages (as one JSON array, so the session's columns are not repeated per message)
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT EXISTS (SELECT 1 FROM processed_updates WHERE platform = ?1 AND chat = ?2 AND message_id = ?3) AS dup, \
                 {}, CASE WHEN s.id IS NULL THEN NULL ELSE (SELECT json_group_array(json_array(m.id, m.role, m.text, m.created_ms)) \
                 FROM (SELECT id, role, text, created_ms FROM messages WHERE session_id = s.id ORDER BY id DESC LIMIT ?6) m) END AS history \
                 FROM (SELECT 1) LEFT JOIN sessions s ON s.platform = ?1 AND s.chat = ?2 AND s.thread = ?4 \
                 AND s.user_id = ?5 AND s.status = 'active'",
                SESSION_COLUMNS
                    .split(", ")
                    .map(|c| format!("s.{c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        });
        let row = sqlx::query(SQL.as_str())
            .bind(key.platform.as_str())
            .bind(&key.chat)
            .bind(message_id)
            .bind(&key.thread)
            .bind(&key.user)
            .bind(history.min(i64::MAX as usize) as i64)
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db("loading the session"))?;
        let dup: bool = row.try_get("dup").map_err(|e| corrupt("dedupe flag", e))?;
        let duplicate = dup && !message_id.is_empty();
        let id: Option<i64> = row.try_get("id").map_err(|e| corrupt("session row", e))?;
        let Some(session_id) = id else {
            return Ok(TurnLoad {
                duplicate,
                ..Default::default()
            });
        };
        let session = session_from_row(&row)?;
        let json: Option<String> = row
            .try_get("history")
            .map_err(|e| corrupt("message history", e))?;
        let rows: Vec<(i64, String, String, i64)> = match json {
            Some(json) => serde_json::from_str(&json).map_err(|e| corrupt("message history", e))?,
            None => Vec::new(),
        };
        let mut messages = rows
            .into_iter()
            .map(|(id, role, text, at)| {
                Ok(StoredMessage {
                    id,
                    session_id,
                    role: Role::parse(&role).ok_or_else(|| corrupt("message role", &role))?,
                    text,
                    at: from_ms(at),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        messages.sort_unstable_by_key(|m| m.id);
        self.hot
            .fill(epoch, &session, &messages, messages.len() < history);
        Ok(TurnLoad {
            duplicate,
            session: Some(session),
            history: messages,
        })
    }

    async fn commit_turn(&self, commit: TurnCommit) -> Result<CommittedTurn, StoreError> {
        let (reply, answer) = oneshot::channel();
        let after = Box::new(Prepared::of(&commit)?);
        self.submit(Job::Turn {
            commit: Box::new(commit),
            after,
            reply,
        })
        .await?;
        answer.await.unwrap_or_else(|_| Err(writer_gone()))
    }

    async fn mark_delivered(&self, message_ids: &[i64]) -> Result<(), StoreError> {
        if message_ids.is_empty() {
            return Ok(());
        }
        // rides along with the next batch of turns instead of a transaction of its own, and
        // the turn does not wait for that batch: the mark only records what the platform
        // took (a lost mark after a crash leaves a delivered message marked undelivered)
        self.submit(Job::Delivered {
            ids: message_ids.to_vec(),
        })
        .await
    }

    async fn undelivered(&self, session_id: i64) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, session_id, role, text, created_ms FROM messages WHERE session_id = ? AND delivered = 0 ORDER BY id",
        )
        .bind(session_id)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("loading undelivered messages"))?;
        rows.iter().map(message_from_row).collect()
    }

    async fn unreached_sessions(
        &self,
        platform: crate::message::Platform,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        // (the undelivered messages through `messages_undelivered`, a few at most)
        let rows = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions JOIN \
             (SELECT session_id, min(id) AS first FROM messages WHERE delivered = 0 GROUP BY session_id) AS u \
             ON sessions.id = u.session_id WHERE sessions.platform = ? ORDER BY u.first"
        ))
        .bind(platform.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("listing sessions with undelivered replies"))?;
        rows.iter().map(session_from_row).collect()
    }

    async fn record_llm_calls(&self, calls: &[LlmCallRecord]) -> Result<(), StoreError> {
        if calls.is_empty() {
            return Ok(());
        }
        let mut tx = self
            .writer
            .begin()
            .await
            .map_err(StoreError::db("starting a ledger write"))?;
        let calls: Vec<_> = calls.iter().map(|c| (None, c)).collect();
        insert_llm_calls(&mut tx, &calls).await?;
        tx.commit()
            .await
            .map_err(StoreError::db("committing the ledger"))
    }

    async fn llm_calls(&self, session_id: Option<i64>) -> Result<Vec<LlmCallRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT session_id, agent, model, prompt_tokens, completion_tokens, latency_ms, error, created_ms \
             FROM llm_calls WHERE (? IS NULL OR session_id = ?) ORDER BY id",
        )
        .bind(session_id)
        .bind(session_id)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("reading the model ledger"))?;
        rows.iter()
            .map(|row| {
                let get = |e: sqlx::Error| corrupt("ledger row", e);
                Ok(LlmCallRecord {
                    session_id: row.try_get("session_id").map_err(get)?,
                    agent: row.try_get("agent").map_err(get)?,
                    model: row.try_get("model").map_err(get)?,
                    prompt_tokens: row.try_get::<i64, _>("prompt_tokens").map_err(get)?.max(0)
                        as u64,
                    completion_tokens: row
                        .try_get::<i64, _>("completion_tokens")
                        .map_err(get)?
                        .max(0) as u64,
                    latency_ms: row.try_get::<i64, _>("latency_ms").map_err(get)?.max(0) as u64,
                    error: row.try_get("error").map_err(get)?,
                    at: from_ms(row.try_get("created_ms").map_err(get)?),
                })
            })
            .collect()
    }

    async fn llm_usage(&self) -> Result<Vec<super::LlmUsage>, StoreError> {
        let rows: Vec<(String, String, i64, i64, i64, i64, f64, i64)> = sqlx::query_as(
            "SELECT COALESCE(s.flow, '-'), c.agent, COUNT(*), COUNT(c.error), \
             COALESCE(SUM(c.prompt_tokens), 0), COALESCE(SUM(c.completion_tokens), 0), \
             COALESCE(AVG(c.latency_ms), 0.0), COALESCE(MAX(c.latency_ms), 0) \
             FROM llm_calls c LEFT JOIN sessions s ON s.id = c.session_id \
             GROUP BY 1, 2 ORDER BY 1, 2",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("summing the model ledger"))?;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(rows
            .into_iter()
            .map(
                |(flow, agent, calls, errors, p, c, avg, max)| super::LlmUsage {
                    flow,
                    agent,
                    calls: n(calls),
                    errors: n(errors),
                    prompt_tokens: n(p),
                    completion_tokens: n(c),
                    avg_latency_ms: avg,
                    max_latency_ms: n(max),
                },
            )
            .collect())
    }

    async fn forget_user(
        &self,
        platform: Platform,
        user: &str,
        keep_submissions: bool,
    ) -> Result<u64, StoreError> {
        // before (no read in flight fills the cache again) and after (nothing cached between)
        self.hot.forget_user(platform, user);
        let deleted = self
            .forget_user_rows(platform, user, keep_submissions)
            .await;
        self.hot.forget_user(platform, user);
        deleted
    }

    async fn user_data(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<serde_json::Value, StoreError> {
        use serde_json::{Value, json};
        let p = platform.as_str();
        // each query returns JSON rows built by SQLite itself
        let rows = |sql: &'static str| {
            let pool = self.pool.clone();
            let user = user.to_string();
            async move {
                let rows: Vec<(String,)> = sqlx::query_as(sql)
                    .bind(p)
                    .bind(&user)
                    .fetch_all(&pool)
                    .await
                    .map_err(StoreError::db("reading a user's data"))?;
                rows.into_iter()
                    .map(|(text,)| {
                        serde_json::from_str::<Value>(&text).map_err(|e| corrupt("user data", e))
                    })
                    .collect::<Result<Vec<Value>, StoreError>>()
            }
        };
        Ok(json!({
            "platform": p,
            "user": user,
            "profile": rows("SELECT json_object('display_name', display_name, 'first_seen_ms', first_seen_ms, 'last_seen_ms', last_seen_ms) FROM users WHERE platform = ?1 AND user_id = ?2").await?,
            "sessions": rows("SELECT json_object('id', s.id, 'flow', s.flow, 'status', s.status, 'chat', s.chat, 'thread', s.thread, 'language', s.language, 'country', s.country, 'timezone', s.timezone, 'created_ms', s.created_ms, 'messages', (SELECT json_group_array(json_object('role', m.role, 'text', m.text, 'created_ms', m.created_ms)) FROM (SELECT * FROM messages m WHERE m.session_id = s.id ORDER BY m.id) m)) FROM sessions s WHERE s.platform = ?1 AND s.user_id = ?2 ORDER BY s.id").await?,
            "submissions": rows("SELECT json_object('id', id, 'form', form_id, 'status', status, 'values', json(field_values), 'created_ms', created_ms) FROM submissions WHERE platform = ?1 AND user_id = ?2 ORDER BY id").await?,
            "help_desk_tickets": rows("SELECT json_object('question', t.question, 'answer', t.answer, 'feedback', t.feedback, 'created_ms', t.created_ms) FROM helpdesk_tickets t JOIN sessions s ON s.id = t.session_id WHERE s.platform = ?1 AND s.user_id = ?2 ORDER BY t.id").await?,
            "reading": rows("SELECT json_object('title', r.title, 'author', r.author, 'status', r.status, 'mode', r.interaction_mode, 'insights', (SELECT json_group_array(json_object('kind', i.kind, 'text', i.text, 'created_ms', i.created_ms)) FROM insights i WHERE i.record_id = r.id), 'moods', (SELECT json_group_array(json_object('phase', m.phase, 'label', m.label, 'score', m.score)) FROM moods m WHERE m.record_id = r.id)) FROM reading_records r WHERE r.platform = ?1 AND r.user_id = ?2 ORDER BY r.id").await?,
            "profile_entries": rows("SELECT json_object('kind', kind, 'text', text, 'created_ms', created_ms) FROM profile_entries WHERE platform = ?1 AND user_id = ?2 ORDER BY id").await?,
            "mentor_feedback": rows("SELECT json_object('type', feedback_type, 'content', content, 'created_ms', created_ms) FROM mentor_feedback WHERE platform = ?1 AND user_id = ?2 ORDER BY id").await?,
            "recommendations": rows("SELECT json_object('title', title, 'reason', reason, 'created_ms', created_ms) FROM recommendations WHERE platform = ?1 AND user_id = ?2 ORDER BY id").await?,
            "weekly_review": rows("SELECT json_object('chat', chat, 'thread', thread, 'timezone', timezone) FROM weekly_reviews WHERE platform = ?1 AND user_id = ?2").await?,
        }))
    }

    async fn delete_transcripts_before(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        // cached histories go, before and after (see forget_user)
        self.hot.clear();
        let done = sqlx::query(
            "DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE updated_ms < ?)",
        )
        .bind(ms(before))
        .execute(&self.writer)
        .await
        .map_err(StoreError::db("deleting old transcripts"));
        self.hot.clear();
        Ok(done?.rows_affected())
    }

    async fn inbox_put(&self, incoming: &Incoming) -> Result<(), StoreError> {
        // rides with the next batch of turns (an autocommit of its own per message halved
        // the turns a second the writer served)
        let entry = InboxEntry {
            platform: incoming.platform,
            chat: incoming.chat.clone(),
            message_id: incoming.message_id.clone(),
            incoming: serde_json::to_string(incoming).map_err(|e| corrupt("inbox entry", e))?,
            created_ms: ms(Utc::now()),
        };
        self.submit(Job::InboxPut { entry }).await
    }

    async fn inbox_done(
        &self,
        platform: Platform,
        chat: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        // rides with the next batch, unanswered (see [`Job::InboxDone`])
        self.submit(Job::InboxDone {
            platform,
            chat: chat.to_owned(),
            message_id: message_id.to_owned(),
        })
        .await
    }

    async fn inbox_pending(&self, platform: Platform) -> Result<Vec<Incoming>, StoreError> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT incoming FROM inbox WHERE platform = ? ORDER BY created_ms, rowid",
        )
        .bind(platform.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("reading the inbox"))?;
        rows.into_iter()
            .map(|(json,)| serde_json::from_str(&json).map_err(|e| corrupt("inbox entry", e)))
            .collect()
    }

    async fn close(&self) {
        let scan = self.scan.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(scan) = scan {
            scan.abort();
        }
        // what is queued for the writer (delivery marks, inbox clears) is written first
        let (reply, done) = oneshot::channel();
        if self.submit(Job::Flush(reply)).await.is_ok() {
            let _ = done.await;
        }
        let checkpointer = self
            .checkpointer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some((stop, task)) = checkpointer {
            let _ = stop.send(());
            let _ = task.await;
        }
        self.pool.close().await;
        self.writer.close().await;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::message::UserRef;
    use crate::store::ProcessedUpdate;
    use std::sync::Arc;

    pub(crate) fn key() -> SessionKey {
        SessionKey {
            platform: Platform::Console,
            chat: "c1".into(),
            thread: String::new(),
            user: "u1".into(),
        }
    }

    fn user() -> UserRef {
        UserRef {
            id: "u1".into(),
            display_name: "Aiko".into(),
        }
    }

    pub(crate) fn commit(
        session: SessionRecord,
        message_id: &str,
        changes: Vec<StateChange>,
    ) -> TurnCommit {
        TurnCommit {
            session,
            user: user(),
            finish_session: None,
            processed: Some(ProcessedUpdate {
                platform: Platform::Console,
                chat: "c1".into(),
                message_id: message_id.into(),
            }),
            changes,
            llm_calls: vec![LlmCallRecord {
                session_id: None,
                agent: "greeter".into(),
                model: "m".into(),
                prompt_tokens: 10,
                completion_tokens: 5,
                latency_ms: 7,
                error: None,
                at: Utc::now(),
            }],
        }
    }

    /// The session of `key()`, opened by the update "m1".
    pub(crate) async fn first_turn(store: &SqliteStore) -> CommittedTurn {
        store
            .commit_turn(commit(
                SessionRecord::draft(key(), "assistant"),
                "m1",
                vec![],
            ))
            .await
            .expect("commits")
    }

    /// An in-memory store holding one session, opened by the update "m1".
    async fn store_with_a_session() -> (SqliteStore, CommittedTurn) {
        let store = SqliteStore::connect("sqlite::memory:")
            .await
            .expect("opens");
        let first = first_turn(&store).await;
        (store, first)
    }

    #[test]
    fn only_a_batch_after_a_busy_one_waits_out_the_commit_gap() {
        // a lone turn last time (or none): the next batch begins at once
        assert_eq!(commit_delay(0, Duration::ZERO), None);
        assert_eq!(commit_delay(1, Duration::from_micros(10)), None);
        // two turns or more: the rest of the gap since the last batch began
        let since = Duration::from_micros(300);
        assert_eq!(commit_delay(2, since), Some(COMMIT_GAP - since));
        assert_eq!(commit_delay(40, Duration::ZERO), Some(COMMIT_GAP));
        // the gap is over already
        assert_eq!(commit_delay(2, COMMIT_GAP), None);
        assert_eq!(commit_delay(40, COMMIT_GAP * 3), None);
    }

    #[tokio::test]
    async fn a_session_survives_closing_and_reopening_the_database() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/nested/kaiwa.db", dir.path().display());
        let store = SqliteStore::connect(&url).await.expect("opens");
        let first = store
            .commit_turn(commit(
                SessionRecord::draft(key(), "assistant"),
                "m1",
                vec![
                    StateChange::AddUserMessage {
                        text: "hello".into(),
                    },
                    StateChange::SetLanguage {
                        language: "ja".into(),
                    },
                    StateChange::SetFlowState {
                        state: FlowState::of(&serde_json::json!({"step": 2})).expect("state"),
                    },
                    StateChange::AddAssistantMessage {
                        text: "こんにちは".into(),
                    },
                ],
            ))
            .await
            .expect("commits");
        assert_eq!(first.assistant_message_ids.len(), 1);
        let id = first.session.id;
        store.close().await;
        drop(store);

        let store = SqliteStore::connect(&url).await.expect("reopens");
        let session = store
            .active_session(&key())
            .await
            .expect("loads")
            .expect("exists");
        assert_eq!(session.id, id);
        assert_eq!(session.language.as_deref(), Some("ja"));
        assert_eq!(
            session.state.parse::<serde_json::Value>().expect("state"),
            serde_json::json!({"step": 2})
        );
        assert_eq!(session.version, 1);
        let messages = store.recent_messages(id, 10).await.expect("messages");
        assert_eq!(
            messages.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(),
            ["hello", "こんにちは"]
        );
        assert_eq!(store.undelivered(id).await.expect("undelivered").len(), 1);
        assert!(
            store
                .is_processed(Platform::Console, "c1", "m1")
                .await
                .expect("checks")
        );
        let ledger = store.llm_calls(Some(id)).await.expect("ledger");
        assert_eq!(ledger.len(), 1);
        assert_eq!(ledger[0].prompt_tokens, 10);

        assert_eq!(store.undelivered(id).await.expect("undelivered").len(), 1);
        store
            .mark_delivered(&first.assistant_message_ids)
            .await
            .expect("marks");
        // the mark rides with the writer's next batch; closing writes what is queued
        store.close().await;
        drop(store);
        let store = SqliteStore::connect(&url).await.expect("reopens");
        assert!(store.undelivered(id).await.expect("undelivered").is_empty());
        store.close().await;
    }

    #[tokio::test]
    async fn duplicates_and_stale_versions_are_refused_without_writing() {
        let (store, first) = store_with_a_session().await;
        let again = store
            .commit_turn(commit(
                first.session.clone(),
                "m1",
                vec![StateChange::AddUserMessage { text: "x".into() }],
            ))
            .await;
        assert!(matches!(again, Err(StoreError::Duplicate { .. })));

        store
            .commit_turn(commit(first.session.clone(), "m2", vec![]))
            .await
            .expect("second turn");
        let stale = store
            .commit_turn(commit(
                first.session.clone(),
                "m3",
                vec![StateChange::AddUserMessage { text: "y".into() }],
            ))
            .await;
        assert!(matches!(stale, Err(StoreError::Conflict { .. })));
        assert!(
            !store
                .is_processed(Platform::Console, "c1", "m3")
                .await
                .expect("checks")
        );
        assert!(
            store
                .recent_messages(first.session.id, 10)
                .await
                .expect("messages")
                .is_empty()
        );
    }

    fn turn_of(i: usize, session: SessionRecord, message_id: &str) -> TurnCommit {
        TurnCommit {
            user: UserRef {
                id: format!("u{i}"),
                display_name: format!("User {i}"),
            },
            processed: Some(ProcessedUpdate {
                platform: Platform::Console,
                chat: format!("c{i}"),
                message_id: message_id.into(),
            }),
            ..commit(
                session,
                message_id,
                vec![
                    StateChange::AddUserMessage {
                        text: format!("question {i} {message_id}"),
                    },
                    StateChange::AddAssistantMessage {
                        text: format!("answer {i} {message_id}"),
                    },
                ],
            )
        }
    }

    #[tokio::test]
    async fn turns_committed_together_are_refused_one_by_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/batch.db", dir.path().display());
        let store = SqliteStore::connect(&url).await.expect("opens");
        let key_of = |i: usize| SessionKey {
            platform: Platform::Console,
            chat: format!("c{i}"),
            thread: String::new(),
            user: format!("u{i}"),
        };
        // twenty new sessions at once: they queue for the writer and commit in batches
        let first: Vec<CommittedTurn> = futures::future::join_all((0..20).map(|i| {
            store.commit_turn(turn_of(
                i,
                SessionRecord::draft(key_of(i), "assistant"),
                "m1",
            ))
        }))
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .expect("all first turns commit");
        let ids: std::collections::HashSet<i64> = first.iter().map(|c| c.session.id).collect();
        assert_eq!(ids.len(), 20);
        assert!(first.iter().all(|c| c.assistant_message_ids.len() == 1));

        // then at once: a replayed update, a stale session and eighteen ordinary turns
        let mut stale = first[1].session.clone();
        stale.version = 0;
        let second = futures::future::join_all((0..20).map(|i| {
            let job = match i {
                0 => turn_of(0, first[0].session.clone(), "m1"),
                1 => turn_of(1, stale.clone(), "m2"),
                _ => turn_of(i, first[i].session.clone(), "m2"),
            };
            store.commit_turn(job)
        }))
        .await;
        assert!(matches!(second[0], Err(StoreError::Duplicate { .. })));
        assert!(matches!(second[1], Err(StoreError::Conflict { .. })));
        for (i, result) in second.iter().enumerate().skip(2) {
            let turn = result.as_ref().expect("an ordinary turn commits");
            assert_eq!(turn.session.version, 2);
            assert_eq!(turn.assistant_message_ids.len(), 1);
            let texts: Vec<String> = store
                .recent_messages(turn.session.id, 10)
                .await
                .expect("messages")
                .into_iter()
                .map(|m| m.text)
                .collect();
            assert_eq!(
                texts,
                [
                    format!("question {i} m1"),
                    format!("answer {i} m1"),
                    format!("question {i} m2"),
                    format!("answer {i} m2"),
                ]
            );
        }
        // the refused turns wrote nothing
        for c in &first[..2] {
            assert_eq!(
                store
                    .recent_messages(c.session.id, 10)
                    .await
                    .expect("messages")
                    .len(),
                2
            );
        }
        assert!(
            !store
                .is_processed(Platform::Console, "c1", "m2")
                .await
                .expect("checks")
        );
        assert_eq!(
            store.llm_calls(None).await.expect("ledger").len(),
            20 + 18,
            "model calls of refused turns are not kept with them"
        );
        store.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rarer_write_gets_the_writer_while_turns_keep_coming() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/kaiwa.db", dir.path().display());
        let store = Arc::new(SqliteStore::connect(&url).await.expect("opens"));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let turns = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut users = Vec::new();
        for u in 0..16 {
            let (store, stop, turns) = (store.clone(), stop.clone(), turns.clone());
            users.push(tokio::spawn(async move {
                let mut session = SessionRecord::draft(
                    SessionKey {
                        user: format!("u{u}"),
                        ..key()
                    },
                    "assistant",
                );
                let mut t = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    t += 1;
                    let changes = vec![StateChange::AddUserMessage { text: "hi".into() }];
                    let mut turn = commit(session, &format!("{u}-{t}"), changes);
                    turn.user.id = format!("u{u}");
                    session = store.commit_turn(turn).await.expect("commits").session;
                    turns.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = turns.load(std::sync::atomic::Ordering::SeqCst);
        let retention = store.delete_transcripts_before(Utc::now() - chrono::Duration::days(30));
        let deleted = tokio::time::timeout(Duration::from_secs(10), retention)
            .await
            .expect("the retention write is not starved")
            .expect("deletes");
        assert_eq!(deleted, 0, "every transcript is recent");
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for user in users {
            user.await.expect("a user's turns");
        }
        assert!(before > 0, "turns were coming when the write asked");
        store.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_wal_restarts_under_a_steady_stream_of_turns() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kaiwa.db");
        let url = format!("sqlite://{}", path.display());
        // the writer's own checkpoint out of the way: only the checkpointer restarts the WAL
        let store = Arc::new(
            SqliteStore::connect_tuned(&url, 64 * 1024, 1 << 30)
                .await
                .expect("opens"),
        );
        let (users, turns) = (32, 80);
        let mut tasks = Vec::new();
        for u in 0..users {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut session = SessionRecord::draft(
                    SessionKey {
                        user: format!("u{u}"),
                        ..key()
                    },
                    "assistant",
                );
                for t in 0..turns {
                    let mut turn = commit(
                        session,
                        &format!("{u}-{t}"),
                        vec![
                            StateChange::AddUserMessage {
                                text: "a question ".repeat(40),
                            },
                            StateChange::AddAssistantMessage {
                                text: "an answer ".repeat(60),
                            },
                        ],
                    );
                    turn.user.id = format!("u{u}");
                    session = store.commit_turn(turn).await.expect("commits").session;
                }
                session.id
            }));
        }
        let mut ids = Vec::new();
        for task in tasks {
            ids.push(task.await.expect("a user's turns"));
        }
        let wal = std::fs::metadata(dir.path().join("kaiwa.db-wal"))
            .expect("the WAL")
            .len();
        // every turn wrote several pages: without restarts the WAL holds them all (over
        // 20 MB here), with them what is written between two checkpoints (about 2 MB)
        assert!(wal < 8 << 20, "the WAL grew to {wal} bytes");
        for id in ids {
            let messages = store.recent_messages(id, 1000).await.expect("messages");
            assert_eq!(messages.len(), 2 * turns, "every turn of session {id} kept");
        }
        // the WAL starts over at the next commit: with none coming, the last restart is the
        // last (each one pauses the writer and syncs the database)
        tokio::time::sleep(Duration::from_millis(150)).await;
        let restarts = store.wal_restarts();
        assert!(restarts > 0, "the WAL was restarted");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            store.wal_restarts(),
            restarts,
            "an idle WAL restarted again"
        );
        store.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_read_holds_the_wal_restart_up_but_no_turn() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/kaiwa.db", dir.path().display());
        let store = SqliteStore::connect_tuned(&url, 64 * 1024, 1 << 30)
            .await
            .expect("opens");
        let connect = || async {
            SqliteConnectOptions::from_str(&url)
                .expect("url")
                .connect()
                .await
                .expect("a connection")
        };
        let (mut reader, mut probe) = (connect().await, connect().await);
        // frames in the WAL, as a PASSIVE checkpoint sees them
        async fn wal_frames(conn: &mut sqlx::SqliteConnection) -> i64 {
            let (_, frames, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                .fetch_one(conn)
                .await
                .expect("checkpoint");
            frames
        }
        let mut session = SessionRecord::draft(key(), "assistant");
        let mut turn = 0;
        let mut talk = async |store: &SqliteStore, turns: usize| {
            for _ in 0..turns {
                turn += 1;
                let changes = vec![StateChange::AddUserMessage {
                    text: "a long question ".repeat(100),
                }];
                let next = commit(session.clone(), &format!("m{turn}"), changes);
                session = store.commit_turn(next).await.expect("commits").session;
            }
        };
        talk(&store, 5).await;
        // an export, say: a read transaction open on an old snapshot
        sqlx::query("BEGIN")
            .execute(&mut reader)
            .await
            .expect("begins");
        sqlx::query("SELECT count(*) FROM messages")
            .execute(&mut reader)
            .await
            .expect("reads");
        let started = std::time::Instant::now();
        talk(&store, 200).await;
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "turns went on beside the read"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            wal_frames(&mut probe).await > 200,
            "the read kept the WAL from starting over"
        );
        sqlx::query("COMMIT")
            .execute(&mut reader)
            .await
            .expect("ends");
        // past the backoff, the next turns find the WAL restarted
        tokio::time::sleep(RESTART_BACKOFF + Duration::from_millis(200)).await;
        talk(&store, 5).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            wal_frames(&mut probe).await < 200,
            "the WAL started over once the read ended"
        );
        reader.close().await.expect("closes");
        probe.close().await.expect("closes");
        store.close().await;
    }

    fn incoming(message_id: &str) -> Incoming {
        Incoming {
            platform: Platform::Console,
            chat: "c1".into(),
            thread: String::new(),
            user: user(),
            message_id: message_id.into(),
            body: crate::message::Body::Text {
                text: format!("text of {message_id}"),
            },
            flow: None,
            flow_arg: None,
        }
    }

    /// The ids of the inbox's entries, in the order a start replays them.
    async fn pending_in_order(store: &SqliteStore) -> Vec<String> {
        store
            .inbox_pending(Platform::Console)
            .await
            .expect("inbox")
            .into_iter()
            .map(|m| m.message_id)
            .collect()
    }

    async fn pending_ids(store: &SqliteStore) -> Vec<String> {
        let mut ids = pending_in_order(store).await;
        ids.sort();
        ids
    }

    /// Holds the write lock from another connection (`COMMIT` on it lets go): the writer's
    /// batch in progress waits for it, and all queued meanwhile goes into the batch after it.
    pub(crate) async fn hold_the_writer(url: &str) -> sqlx::SqliteConnection {
        let mut other = SqliteConnectOptions::from_str(url)
            .expect("url")
            .connect()
            .await
            .expect("connects");
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut other)
            .await
            .expect("locks");
        other
    }

    /// A place of user `u1` on the console.
    fn place(chat: &str) -> SessionKey {
        SessionKey {
            platform: Platform::Console,
            chat: chat.into(),
            thread: String::new(),
            user: "u1".into(),
        }
    }

    /// [`commit`], its update received in the session's own chat.
    fn turn_in_place(session: SessionRecord, id: &str, changes: Vec<StateChange>) -> TurnCommit {
        let mut commit = commit(session, id, changes);
        if let Some(p) = commit.processed.as_mut() {
            p.chat = commit.session.key.chat.clone();
        }
        commit
    }

    /// `turns` committed in one batch: the writer held, they queue behind a first turn (a
    /// new session at `occupier`), then it is let go.
    async fn together(
        store: &SqliteStore,
        url: &str,
        occupier: &str,
        turns: Vec<TurnCommit>,
    ) -> Vec<Result<CommittedTurn, StoreError>> {
        let mut holder = hold_the_writer(url).await;
        let occupy = store.commit_turn(turn_in_place(
            SessionRecord::draft(place(occupier), "assistant"),
            occupier,
            vec![],
        ));
        let batch = futures::future::join_all(turns.into_iter().map(|t| store.commit_turn(t)));
        let release = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            sqlx::query("COMMIT")
                .execute(&mut holder)
                .await
                .expect("releases");
        };
        let (first, results, ()) = tokio::join!(occupy, batch, release);
        first.expect("the first turn commits");
        results
    }

    #[tokio::test]
    async fn sessions_with_replies_not_delivered_are_found_until_the_replies_are_marked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/kaiwa.db", dir.path().display());
        let store = SqliteStore::connect(&url).await.expect("opens");
        let mut turns = Vec::new();
        for (chat, id) in [("a", "m1"), ("b", "m2"), ("c", "m3")] {
            let session = SessionRecord::draft(place(chat), "assistant");
            let turn = store
                .commit_turn(turn_in_place(
                    session,
                    id,
                    said("hi", &format!("to {chat}")),
                ))
                .await
                .expect("commits");
            turns.push(turn);
        }
        // b's reply reached its user; a's and c's did not
        store
            .mark_delivered(&turns[1].assistant_message_ids)
            .await
            .expect("marks");
        store.close().await;
        let store = SqliteStore::connect(&url).await.expect("reopens");
        let unreached = store
            .unreached_sessions(Platform::Console)
            .await
            .expect("lists");
        let ids: Vec<i64> = unreached.iter().map(|s| s.id).collect();
        assert_eq!(ids, [turns[0].session.id, turns[2].session.id]);
        assert_eq!(unreached[1].key, place("c"));
        // another platform's sessions are not these
        assert!(
            store
                .unreached_sessions(Platform::Telegram)
                .await
                .expect("lists")
                .is_empty()
        );
        for turn in [&turns[0], &turns[2]] {
            store
                .mark_delivered(&turn.assistant_message_ids)
                .await
                .expect("marks");
        }
        store.close().await;
        let store = SqliteStore::connect(&url).await.expect("reopens");
        assert!(
            store
                .unreached_sessions(Platform::Console)
                .await
                .expect("lists")
                .is_empty()
        );
        store.close().await;
    }

    /// The fast path numbers messages itself (no row comes back from its query): the ids a
    /// turn reports are the stored ones, per session and in order, across batches of
    /// several sessions and after a batch SQLite numbered turn by turn.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn messages_numbered_by_the_writer_are_the_ones_stored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/ids.db", dir.path().display());
        let store = SqliteStore::connect(&url).await.expect("opens");
        let turn = |session: SessionRecord, id: &str, n: usize| {
            let mut changes = Vec::new();
            for k in 0..n {
                changes.extend(said(&format!("q {id} {k}"), &format!("a {id} {k}")));
            }
            turn_in_place(session, id, changes)
        };
        let ok = |r: Result<CommittedTurn, StoreError>| r.expect("commits");

        // two new sessions in one fast batch, with one and two exchanges
        let mut results = together(
            &store,
            &url,
            "z1",
            vec![
                turn(SessionRecord::draft(place("a"), "assistant"), "a1", 1),
                turn(SessionRecord::draft(place("b"), "assistant"), "b1", 2),
            ],
        )
        .await
        .into_iter();
        let (a1, b1) = (
            ok(results.next().expect("a1")),
            ok(results.next().expect("b1")),
        );
        // a stale turn sends its batch turn by turn: SQLite numbers those messages
        let mut stale = b1.session.clone();
        stale.version = 0;
        let mut results = together(
            &store,
            &url,
            "z2",
            vec![turn(stale, "b2", 1), turn(a1.session.clone(), "a2", 2)],
        )
        .await
        .into_iter();
        assert!(matches!(
            results.next(),
            Some(Err(StoreError::Conflict { .. }))
        ));
        let a2 = ok(results.next().expect("a2"));
        // and the fast path numbers from the database again
        let a3 = ok(store.commit_turn(turn(a2.session.clone(), "a3", 1)).await);
        let b3 = ok(store.commit_turn(turn(b1.session.clone(), "b3", 1)).await);

        for (session, turns) in [
            (
                a3.session.id,
                vec![("a1", 1, &a1), ("a2", 2, &a2), ("a3", 1, &a3)],
            ),
            (b3.session.id, vec![("b1", 2, &b1), ("b3", 1, &b3)]),
        ] {
            let stored = store.recent_messages(session, 50).await.expect("messages");
            let mut expected = Vec::new();
            let mut reported = Vec::new();
            for (id, n, committed) in turns {
                for k in 0..n {
                    expected.push(format!("q {id} {k}"));
                    expected.push(format!("a {id} {k}"));
                }
                reported.extend(committed.assistant_message_ids.iter().copied());
            }
            let texts: Vec<&str> = stored.iter().map(|m| m.text.as_str()).collect();
            assert_eq!(texts, expected);
            assert!(stored.windows(2).all(|w| w[0].id < w[1].id), "{stored:?}");
            let assistant: Vec<i64> = stored
                .iter()
                .filter(|m| m.role == Role::Assistant)
                .map(|m| m.id)
                .collect();
            assert_eq!(reported, assistant, "the ids each turn reported");
        }
        store.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_inbox_rides_with_the_turns_even_in_a_batch_redone_turn_by_turn() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/kaiwa.db", dir.path().display());
        let store = Arc::new(SqliteStore::connect(&url).await.expect("opens"));
        store.inbox_put(&incoming("m1")).await.expect("keeps m1");
        store.inbox_put(&incoming("m2")).await.expect("keeps m2");
        // kept as received, and again (a platform sending it twice) changes nothing
        store
            .inbox_put(&incoming("m2"))
            .await
            .expect("keeps m2 again");
        let first = first_turn(&store).await;
        // kept with or before the turn that follows (m1's own turn: no entry needed if the
        // writer took them in one batch)
        let kept = store.inbox_pending(Platform::Console).await.expect("inbox");
        assert!((1..=2).contains(&kept.len()), "{kept:?}");
        assert_eq!(kept.last(), Some(&incoming("m2")), "kept as received");
        assert!(kept.len() == 1 || kept[0] == incoming("m1"));

        // a turn queued for the writer, in the order of the calls; its answer comes later
        async fn turn(
            store: &SqliteStore,
            message_id: &str,
            session: SessionRecord,
        ) -> oneshot::Receiver<Result<CommittedTurn, StoreError>> {
            let mut commit = commit(session, message_id, vec![]);
            commit.user.id = commit.session.key.user.clone();
            let (reply, answer) = oneshot::channel();
            let commit = Box::new(commit);
            store
                .submit(Job::Turn {
                    after: Box::new(Prepared::of(&commit).expect("prepared")),
                    commit,
                    reply,
                })
                .await
                .expect("queues");
            answer
        }
        // the writer has taken all that was queued (and waits for the lock with it)
        async fn writer_took_all(store: &SqliteStore) {
            while store.jobs.capacity() < store.jobs.max_capacity() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        let newcomer = |user: &str| {
            let place = SessionKey {
                user: user.into(),
                ..key()
            };
            SessionRecord::draft(place, "assistant")
        };

        let mut other = hold_the_writer(&url).await;
        // another user's first turn: the one the writer is held up in
        let mut held = turn(&store, "m0", newcomer("u3")).await;
        writer_took_all(&store).await;
        store.inbox_put(&incoming("m3")).await.expect("queues m3");
        store
            .inbox_done(Platform::Console, "c1", "m1")
            .await
            .expect("queues the clear");
        // the update m1 again: refused as a duplicate, so this batch is redone turn by turn
        let again = turn(&store, "m1", first.session.clone()).await;
        store.inbox_put(&incoming("m4")).await.expect("queues m4");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(held.try_recv().is_err(), "the writer waits for the lock");
        sqlx::query("COMMIT")
            .execute(&mut other)
            .await
            .expect("unlocks");
        held.await.expect("answered").expect("commits");
        assert!(matches!(
            again.await.expect("answered"),
            Err(StoreError::Duplicate { .. })
        ));
        assert_eq!(pending_ids(&store).await, ["m2", "m3", "m4"]);

        // a message and its turn in one batch that commits: no entry is written for it
        let mut other = hold_the_writer(&url).await;
        let held = turn(&store, "m5", first.session.clone()).await;
        writer_took_all(&store).await;
        store.inbox_put(&incoming("m6")).await.expect("queues m6");
        // another user's (two turns of one session in a batch would take the slow path)
        let quick = turn(&store, "m6", newcomer("u2")).await;
        sqlx::query("COMMIT")
            .execute(&mut other)
            .await
            .expect("unlocks");
        held.await.expect("answered").expect("commits");
        quick.await.expect("answered").expect("commits");
        assert_eq!(pending_ids(&store).await, ["m2", "m3", "m4"]);
        assert!(
            store
                .is_processed(Platform::Console, "c1", "m6")
                .await
                .expect("checks")
        );

        // what was kept survives a restart; clears queued before a clean stop are written
        store
            .inbox_done(Platform::Console, "c1", "m2")
            .await
            .expect("queues");
        store.close().await;
        drop(store);
        other.close().await.expect("closes");
        let store = SqliteStore::connect(&url).await.expect("reopens");
        assert_eq!(pending_ids(&store).await, ["m3", "m4"]);
        store.close().await;
    }

    #[tokio::test]
    async fn updates_processed_and_messages_kept_before_the_upgrade_are_still_known() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/kaiwa.db", dir.path().display());
        // the database as the release before `processed_updates` went WITHOUT ROWID left it
        let earlier = dir.path().join("migrations");
        std::fs::create_dir(&earlier).expect("folder");
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
        for entry in std::fs::read_dir(root).expect("migrations") {
            let path = entry.expect("entry").path();
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            if name.as_str() < "20261122000007" {
                std::fs::copy(&path, earlier.join(&name)).expect("copies");
            }
        }
        let pool = SqlitePoolOptions::new()
            .connect_with(
                SqliteConnectOptions::from_str(&url)
                    .expect("url")
                    .create_if_missing(true),
            )
            .await
            .expect("opens");
        sqlx::migrate::Migrator::new(earlier.as_path())
            .await
            .expect("migrations")
            .run(&pool)
            .await
            .expect("migrates");
        sqlx::query(
            "INSERT INTO processed_updates (platform, chat, message_id, created_ms) \
             VALUES ('console', 'c1', 'm1', 1)",
        )
        .execute(&pool)
        .await
        .expect("inserts");
        // two messages left in the inbox, received in the same millisecond: m9 first
        for id in ["m9", "m10"] {
            sqlx::query(
                "INSERT INTO inbox (platform, chat, message_id, incoming, created_ms) \
                 VALUES ('console', 'c1', ?, ?, 5)",
            )
            .bind(id)
            .bind(serde_json::to_string(&incoming(id)).expect("JSON"))
            .execute(&pool)
            .await
            .expect("inserts");
        }
        pool.close().await;

        let store = SqliteStore::connect(&url).await.expect("upgrades");
        assert!(
            store
                .is_processed(Platform::Console, "c1", "m1")
                .await
                .expect("checks")
        );
        assert_eq!(
            pending_in_order(&store).await,
            ["m9", "m10"],
            "replayed in the order received"
        );
        let replay = store
            .commit_turn(commit(
                SessionRecord::draft(key(), "assistant"),
                "m1",
                vec![],
            ))
            .await;
        assert!(matches!(replay, Err(StoreError::Duplicate { .. })));
        store
            .commit_turn(commit(
                SessionRecord::draft(key(), "assistant"),
                "m2",
                vec![],
            ))
            .await
            .expect("a new update goes through");
        assert!(
            store
                .is_processed(Platform::Console, "c1", "m2")
                .await
                .expect("checks")
        );
        store.close().await;
    }

    #[tokio::test]
    async fn a_new_database_gets_small_pages_and_an_older_one_keeps_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let page_size = |store: &SqliteStore| {
            let pool = store.pool().clone();
            async move {
                sqlx::query_scalar::<_, i64>("PRAGMA page_size")
                    .fetch_one(&pool)
                    .await
                    .expect("page size")
            }
        };
        let fresh = format!("sqlite://{}/new.db", dir.path().display());
        let store = SqliteStore::connect(&fresh).await.expect("opens");
        assert_eq!(page_size(&store).await, i64::from(PAGE_SIZE));
        store.close().await;

        // a database made with SQLite's default pages (as every release before this one did)
        let older = format!("sqlite://{}/old.db", dir.path().display());
        let pool = SqlitePoolOptions::new()
            .connect_with(
                SqliteConnectOptions::from_str(&older)
                    .expect("url")
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal),
            )
            .await
            .expect("opens");
        sqlx::query("CREATE TABLE earlier (x INTEGER)")
            .execute(&pool)
            .await
            .expect("creates");
        pool.close().await;
        let store = SqliteStore::connect(&older).await.expect("migrates");
        assert_eq!(page_size(&store).await, 4096, "the file keeps its pages");
        let id = store
            .commit_turn(commit(
                SessionRecord::draft(key(), "assistant"),
                "m1",
                said("hello", "hi"),
            ))
            .await
            .expect("commits")
            .session
            .id;
        store.close().await;
        let store = SqliteStore::connect(&older).await.expect("reopens");
        let kept = store.recent_messages(id, 10).await.expect("reads");
        assert_eq!(kept.len(), 2, "the turn is kept");
        store.close().await;
    }

    /// A user's message and the reply to it.
    pub(crate) fn said(user: &str, assistant: &str) -> Vec<StateChange> {
        vec![
            StateChange::AddUserMessage { text: user.into() },
            StateChange::AddAssistantMessage {
                text: assistant.into(),
            },
        ]
    }

    fn submission() -> Submission {
        Submission {
            applicant: "山田 \"Yama\" 花子".into(),
            form_id: "engineer".into(),
            variant: "default".into(),
            status: SubmissionStatus::Submitted,
            language: Some("ja".into()),
            country: Some("JP".into()),
            timezone: None,
            values: serde_json::json!({ "full_name": "山田 花子", "years": 3 }),
            facts: serde_json::json!({ "skills": { "rust": true } }),
            flags: serde_json::json!([]),
            audit: Some(serde_json::json!({ "passed": true, "summary": "ok\nfine" })),
        }
    }

    #[tokio::test]
    async fn one_batch_carries_every_kind_of_row() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/kinds.db", dir.path().display());
        let store = SqliteStore::connect(&url).await.expect("opens");
        let turn = turn_in_place;
        let going = store
            .commit_turn(turn(
                SessionRecord::draft(place("a"), "assistant"),
                "a1",
                said("hi", "hello"),
            ))
            .await
            .expect("commits");
        let switched = store
            .commit_turn(turn(
                SessionRecord::draft(place("b"), "assistant"),
                "b1",
                said("hi", "hello"),
            ))
            .await
            .expect("commits");

        // the writer held: what follows queues, then commits as one batch
        let mut ending = said("my answers", "thank you");
        ending.push(StateChange::SaveSubmission {
            submission: submission(),
        });
        ending.push(StateChange::EndSession);
        let mut switch = turn(
            SessionRecord::draft(place("b"), "interview"),
            "b2",
            said("/interview", "welcome"),
        );
        switch.finish_session = Some(switched.session.id);
        let results = together(
            &store,
            &url,
            "z",
            vec![
                turn(SessionRecord::draft(place("c"), "interview"), "c1", ending),
                switch,
                turn(going.session.clone(), "a2", said("more", "sure")),
            ],
        )
        .await;
        let [ended, new, went_on]: [CommittedTurn; 3] = results
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .expect("every turn of the batch commits")
            .try_into()
            .expect("three");

        assert_eq!(ended.session.status, SessionStatus::Finished);
        assert_eq!(
            store.session(ended.session.id).await.expect("reads"),
            Some(ended.session.clone())
        );
        let saved = store.submissions(None).await.expect("reads");
        assert_eq!(saved.len(), 1);
        assert_eq!(saved[0].session_id, Some(ended.session.id));
        assert_eq!(saved[0].submission, submission());
        let old = store
            .session(switched.session.id)
            .await
            .expect("reads")
            .expect("kept");
        assert_eq!(old.status, SessionStatus::Finished);
        assert_eq!(
            store.active_session(&place("b")).await.expect("reads"),
            Some(new.session.clone())
        );
        assert_eq!(went_on.session.version, 2);
        let ids: std::collections::HashSet<i64> = [
            going.session.id,
            switched.session.id,
            ended.session.id,
            new.session.id,
        ]
        .into();
        assert_eq!(ids.len(), 4, "every session its own id");
        for (turn, texts) in [
            (&ended, vec!["my answers", "thank you"]),
            (&new, vec!["/interview", "welcome"]),
            (&went_on, vec!["hi", "hello", "more", "sure"]),
        ] {
            let stored: Vec<String> = store
                .recent_messages(turn.session.id, 10)
                .await
                .expect("reads")
                .into_iter()
                .map(|m| m.text)
                .collect();
            assert_eq!(stored, texts);
            assert_eq!(turn.assistant_message_ids.len(), 1);
        }
        for (chat, id) in [("c", "c1"), ("b", "b2"), ("a", "a2")] {
            assert!(
                store
                    .is_processed(Platform::Console, chat, id)
                    .await
                    .expect("reads")
            );
        }
        assert_eq!(store.llm_calls(None).await.expect("ledger").len(), 6);
        store.close().await;
    }

    #[tokio::test]
    async fn a_session_ended_on_a_later_turn_is_finished() {
        let (store, first) = store_with_a_session().await;
        let ended = store
            .commit_turn(commit(
                first.session.clone(),
                "m2",
                vec![StateChange::EndSession],
            ))
            .await
            .expect("commits");
        assert_eq!(ended.session.status, SessionStatus::Finished);
        assert!(store.active_session(&key()).await.expect("loads").is_none());
        // the turn after it starts a new session in the same place
        let next = store
            .commit_turn(commit(
                SessionRecord::draft(key(), "assistant"),
                "m3",
                vec![],
            ))
            .await
            .expect("a new session");
        assert_ne!(next.session.id, first.session.id);
        store.close().await;
    }

    #[tokio::test]
    async fn ending_a_session_frees_the_place_for_a_new_one() {
        let store = SqliteStore::connect("sqlite::memory:")
            .await
            .expect("opens");
        store
            .commit_turn(commit(
                SessionRecord::draft(key(), "assistant"),
                "m1",
                vec![StateChange::EndSession],
            ))
            .await
            .expect("commits");
        assert!(store.active_session(&key()).await.expect("loads").is_none());
        let next = store
            .commit_turn(commit(
                SessionRecord::draft(key(), "assistant"),
                "m2",
                vec![],
            ))
            .await
            .expect("a new session");
        assert_eq!(
            store
                .active_session(&key())
                .await
                .expect("loads")
                .map(|s| s.id),
            Some(next.session.id)
        );
    }
}

#[cfg(test)]
mod reading_tests {
    use super::*;
    use crate::message::UserRef;
    use crate::store::reading::*;

    fn key(user: &str) -> SessionKey {
        SessionKey {
            platform: Platform::Telegram,
            chat: format!("chat-{user}"),
            thread: String::new(),
            user: user.into(),
        }
    }

    async fn turn(store: &SqliteStore, user: &str, changes: Vec<ReadingChange>) {
        let session = store
            .active_session(&key(user))
            .await
            .expect("loads")
            .unwrap_or_else(|| SessionRecord::draft(key(user), "reading"));
        store
            .commit_turn(TurnCommit {
                session,
                user: UserRef {
                    id: user.into(),
                    display_name: user.into(),
                },
                finish_session: None,
                processed: None,
                changes: changes
                    .into_iter()
                    .map(|change| StateChange::Reading { change })
                    .collect(),
                llm_calls: vec![],
            })
            .await
            .expect("commit");
    }

    #[tokio::test]
    async fn reading_data_is_stored_per_user() {
        let store = SqliteStore::connect("sqlite::memory:")
            .await
            .expect("store");
        let title = "Kokoro".to_string();
        turn(
            &store,
            "aiko",
            vec![
                ReadingChange::OpenRecord {
                    title: title.clone(),
                    author: Some("Natsume Soseki".into()),
                },
                ReadingChange::AddMood {
                    title: title.clone(),
                    phase: MoodPhase::Before,
                    label: "curious".into(),
                    score: 4,
                },
                ReadingChange::SetStatus {
                    title: title.clone(),
                    status: ReadingStatus::Reading,
                },
                ReadingChange::AddInsight {
                    title: title.clone(),
                    kind: InsightKind::Question,
                    text: "Who is K?".into(),
                },
                ReadingChange::SetMode {
                    title: title.clone(),
                    mode: InteractionMode::Guided,
                },
                ReadingChange::AddProfileEntry {
                    kind: ProfileKind::Goal,
                    text: "read more classics".into(),
                },
            ],
        )
        .await;
        turn(
            &store,
            "ken",
            vec![ReadingChange::OpenRecord {
                title: title.clone(),
                author: None,
            }],
        )
        .await;

        let records = store
            .reading_records(Platform::Telegram, "aiko")
            .await
            .expect("records");
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].status, ReadingStatus::Reading);
        assert_eq!(records[0].mode, InteractionMode::Guided);
        assert!(records[0].started_at.is_some() && records[0].finished_at.is_none());
        let insights = store.insights(records[0].id).await.expect("insights");
        assert_eq!(insights[0].text, "Who is K?");
        assert_eq!(store.moods(records[0].id).await.expect("moods")[0].score, 4);
        assert_eq!(
            store
                .profile_entries(Platform::Telegram, "aiko")
                .await
                .expect("profile")
                .len(),
            1
        );
        // ken has his own record of the same book and sees nothing of aiko's
        let kens = store
            .reading_records(Platform::Telegram, "ken")
            .await
            .expect("records");
        assert_eq!(kens.len(), 1);
        assert_ne!(kens[0].id, records[0].id);
        assert!(
            store
                .insights(kens[0].id)
                .await
                .expect("insights")
                .is_empty()
        );
        assert!(
            store
                .profile_entries(Platform::Telegram, "ken")
                .await
                .expect("profile")
                .is_empty()
        );
    }
}

/// The hot-session cache seen through the store: what a turn reads is what the database holds.
#[cfg(test)]
mod hot_tests {
    use super::tests::{commit, first_turn, key, said};
    use super::*;
    use crate::store::hot::{HOT_HISTORY, HOT_SESSIONS};

    impl SqliteStore {
        /// Waits until the processed updates of the database are read into the cache.
        async fn scanned(&self) {
            let scan = self.scan.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(scan) = scan {
                scan.await.expect("the scan ends");
            }
        }
    }

    /// Runs `turns` turns on the session of `key()` the way the orchestrator does: read,
    /// then commit from what was read.
    async fn converse(store: &SqliteStore, first: usize, turns: usize) {
        for n in first..first + turns {
            let id = format!("m{n}");
            let load = store.load_for_turn(&key(), &id, 20).await.expect("loads");
            assert!(!load.duplicate, "{id} is new");
            let session = load.session.expect("an active session");
            let mut changes = said(&format!("answer {n}"), &format!("question {n}"));
            changes.push(StateChange::SetFlowState {
                state: FlowState::of(&serde_json::json!({ "step": n })).expect("state"),
            });
            store
                .commit_turn(commit(session, &id, changes))
                .await
                .expect("commits");
        }
    }

    async fn on_file() -> (tempfile::TempDir, String, SqliteStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/kaiwa.db", dir.path().display());
        let store = SqliteStore::connect(&url).await.expect("opens");
        store.scanned().await;
        (dir, url, store)
    }

    #[tokio::test]
    async fn texts_of_every_kind_are_stored_whole() {
        let (_dir, url, store) = on_file().await;
        let tricky = "quote \" backslash \\ escaped \\u0000 literal, tab\t, line\n, 絵文字 😀, nul \0 and after";
        store
            .commit_turn(commit(
                SessionRecord::draft(key(), "assistant"),
                "m0",
                said(tricky, "ok"),
            ))
            .await
            .expect("commits");
        let fresh = SqliteStore::connect(&url).await.expect("opens again");
        let stored = fresh.load_for_turn(&key(), "m1", 20).await.expect("loads");
        let cached = store.load_for_turn(&key(), "m1", 20).await.expect("loads");
        // (the rows go to SQLite as JSON: every escape comes back as it was, a NUL too)
        assert_eq!(stored.history[0].text, tricky);
        assert_eq!(cached.history[0].text, tricky);
        fresh.close().await;
        store.close().await;
    }

    #[tokio::test]
    async fn a_turn_reads_from_the_cache_exactly_what_the_database_holds() {
        let (_dir, url, store) = on_file().await;
        store
            .commit_turn(commit(
                SessionRecord::draft(key(), "assistant"),
                "m0",
                said("hello", "こんにちは"),
            ))
            .await
            .expect("commits");
        converse(&store, 1, 30).await;
        let cached = store.load_for_turn(&key(), "m99", 20).await.expect("loads");
        assert_eq!(cached.history.len(), 20);
        assert_eq!(store.hot.len(), 1);

        // a second store on the same file has nothing cached: it reads the database
        let fresh = SqliteStore::connect(&url).await.expect("opens again");
        let stored = fresh.load_for_turn(&key(), "m99", 20).await.expect("loads");
        assert_eq!(cached.session, stored.session);
        assert_eq!(cached.history, stored.history);
        assert_eq!(
            cached.session.as_ref().map(|s| s.version),
            Some(31),
            "one version per turn"
        );
        // more than the cache keeps: the database answers
        let all = store
            .load_for_turn(&key(), "m99", 100)
            .await
            .expect("loads");
        assert_eq!(all.history.len(), 62);
        assert_eq!(all.history[42..], stored.history[..]);
        const { assert!(HOT_HISTORY < 62) };
        fresh.close().await;

        // and it did not read it: a change behind the store's back is not seen (one bot
        // process per database)
        sqlx::query("UPDATE sessions SET language = 'xx'")
            .execute(&store.writer)
            .await
            .expect("updates");
        let again = store.load_for_turn(&key(), "m99", 20).await.expect("loads");
        assert_eq!(again.session, cached.session);
        store.close().await;
    }

    #[tokio::test]
    async fn an_update_processed_before_a_restart_is_still_a_duplicate() {
        let (_dir, url, store) = on_file().await;
        first_turn(&store).await;
        converse(&store, 2, 3).await;
        store.close().await;
        drop(store);

        let store = SqliteStore::connect(&url).await.expect("reopens");
        store.scanned().await;
        let load = store.load_for_turn(&key(), "m9", 20).await.expect("loads");
        assert!(!load.duplicate);
        assert_eq!(store.hot.len(), 1, "the read filled the cache");
        for id in ["m1", "m2", "m4"] {
            let load = store.load_for_turn(&key(), id, 20).await.expect("loads");
            assert!(load.duplicate, "{id} was processed before the restart");
        }
        // and one processed since, by this store
        converse(&store, 5, 1).await;
        let load = store.load_for_turn(&key(), "m5", 20).await.expect("loads");
        assert!(load.duplicate);
        store.close().await;
    }

    #[tokio::test]
    async fn forgetting_a_user_or_old_transcripts_drops_what_was_cached() {
        let (_dir, _url, store) = on_file().await;
        first_turn(&store).await;
        converse(&store, 2, 2).await;
        let load = store.load_for_turn(&key(), "m9", 20).await.expect("loads");
        assert_eq!(load.history.len(), 4);

        let deleted = store
            .delete_transcripts_before(Utc::now() + chrono::Duration::days(1))
            .await
            .expect("deletes");
        assert_eq!(deleted, 4);
        let load = store.load_for_turn(&key(), "m9", 20).await.expect("loads");
        assert!(load.session.is_some());
        assert!(load.history.is_empty(), "the transcript is gone");

        converse(&store, 4, 1).await;
        store
            .forget_user(Platform::Console, "u1", false)
            .await
            .expect("forgets");
        let load = store.load_for_turn(&key(), "m9", 20).await.expect("loads");
        assert!(load.session.is_none(), "the session is gone");
        assert!(load.history.is_empty());
        store.close().await;
    }

    #[tokio::test]
    async fn a_session_changed_behind_the_cache_costs_one_conflict() {
        let (_dir, _url, store) = on_file().await;
        first_turn(&store).await;
        converse(&store, 2, 1).await;
        sqlx::query("UPDATE sessions SET version = version + 1, language = 'de'")
            .execute(&store.writer)
            .await
            .expect("updates");
        let stale = store.load_for_turn(&key(), "m3", 20).await.expect("loads");
        let session = stale.session.expect("cached");
        assert_eq!(session.language, None);
        let refused = store
            .commit_turn(commit(session, "m3", said("a", "b")))
            .await;
        assert!(matches!(refused, Err(StoreError::Conflict { .. })));
        // the next read asks the database, and the turn goes through
        let load = store.load_for_turn(&key(), "m3", 20).await.expect("loads");
        let session = load.session.expect("active");
        assert_eq!(session.language.as_deref(), Some("de"));
        store
            .commit_turn(commit(session, "m3", said("a", "b")))
            .await
            .expect("commits");
        store.close().await;
    }

    #[tokio::test]
    async fn the_cache_keeps_at_most_its_number_of_sessions() {
        let store = SqliteStore::connect("sqlite::memory:")
            .await
            .expect("opens");
        store.scanned().await;
        let key_of = |n: usize| SessionKey {
            user: format!("u{n}"),
            ..key()
        };
        let turns = (0..HOT_SESSIONS + 8).map(|n| {
            let mut turn = commit(
                SessionRecord::draft(key_of(n), "assistant"),
                &format!("m{n}"),
                said("hi", "hello"),
            );
            turn.user.id = format!("u{n}");
            store.commit_turn(turn)
        });
        for turn in futures::future::join_all(turns).await {
            turn.expect("commits");
        }
        assert_eq!(store.hot.len(), HOT_SESSIONS);
        // what the cache let go is read from the database
        for n in [0, HOT_SESSIONS + 7] {
            let load = store
                .load_for_turn(&key_of(n), "next", 20)
                .await
                .expect("loads");
            assert_eq!(load.session.map(|s| s.key), Some(key_of(n)));
            assert_eq!(load.history.len(), 2);
        }
        store.close().await;
    }
}

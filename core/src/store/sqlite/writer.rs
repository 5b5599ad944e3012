//! The writer's side of the store: the group-commit task on its own thread, which takes
//! every job waiting when it is free (turns, inbox entries, delivery marks) into one
//! transaction. A batch goes through the fast path ([`super::batch`]) when nothing in it is
//! out of the ordinary, else turn by turn in savepoints ([`super::turn_by_turn`]), so that a
//! refused turn is rolled back and answered alone. Started by [`super::open`].

use super::batch::{NextIds, fast_batch};
use super::inbox::{mark_delivered_in, write_inbox};
use super::turn_by_turn::write_turn;
use super::{Job, MAX_BATCH, writer_gone};
use crate::store::hot::{HotChange, HotSessions};
use crate::store::rows::ms;
use crate::store::{CommittedTurn, StoreError};
use chrono::Utc;
use sqlx::SqlitePool;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

/// Group commit, on the writer's own thread: every turn waiting when the writer becomes
/// free goes into one transaction — one statement each for all their sessions, processed
/// updates, messages and model calls, sent together ([`fast_batch`]); if anything is out of
/// the ordinary the batch is redone turn by turn, each in a savepoint, so a refused turn
/// (duplicate, conflict, failed statement) is rolled back alone and answered with its
/// error. One commit and one WAL append serve the whole batch; a lone turn still commits at
/// once, and under load a batch begins no sooner than [`COMMIT_GAP`] after the one before
/// ([`commit_delay`]).
pub(super) async fn group_commit(
    writer: SqlitePool,
    mut jobs: mpsc::Receiver<Job>,
    gate: WriteGate,
    hot: Arc<HotSessions>,
    failures: Arc<AtomicU64>,
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
        let failure = write_batch(&writer, &mut batch, &hot, &mut next_ids)
            .instrument(span)
            .await;
        drop(writing);
        if failure.is_some() {
            // counted before any flush behind it is answered
            failures.fetch_add(1, Ordering::SeqCst);
        }
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
/// WAL byte reaches the disk at the next checkpoint: fewer, larger commits write fewer
/// bytes, which is what the slowest turns wait for on a virtual machine. A single
/// session's turns (one a batch) and a closed loop's are not delayed. Measurements:
/// `docs/performance.md`, "Commit gap".
pub(super) const COMMIT_GAP: Duration = Duration::from_millis(1);

/// How long the writer waits before it begins a batch, given how many turns the last one
/// carried and how long ago it began: a load that brought two turns or more to the last
/// batch brings more during the wait, so the rest of [`COMMIT_GAP`]; otherwise nothing (a
/// lone turn, or a single session's next, commits at once).
pub(super) fn commit_delay(last_turns: usize, since_last: Duration) -> Option<Duration> {
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
pub(super) type WriteGate = std::sync::Arc<tokio::sync::Mutex<()>>;

/// A turn's answer, sent once the batch's commit is known.
pub(super) type Outcome = (
    Result<CommittedTurn, StoreError>,
    oneshot::Sender<Result<CommittedTurn, StoreError>>,
);

/// Writes one batch and answers its turns; returns the batch's failure, if it failed.
pub(super) async fn write_batch(
    writer: &SqlitePool,
    batch: &mut Vec<Job>,
    hot: &HotSessions,
    next_ids: &mut Option<NextIds>,
) -> Option<StoreError> {
    let mut outcomes = Vec::with_capacity(batch.len());
    let mut changes = Vec::with_capacity(batch.len());
    let committed = run_batch(
        writer,
        batch,
        &mut outcomes,
        &mut changes,
        next_ids,
        WritePath::Fast,
    )
    .await;
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
    failed()
}

/// Which way [`run_batch`] writes a batch: the writer always tries the fast path first; the
/// `write_paths` tests also drive the turn-by-turn path alone, to compare what both write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WritePath {
    Fast,
    #[cfg_attr(not(test), allow(dead_code))]
    TurnByTurn,
}

/// Runs the jobs of `batch` (draining it) in one transaction and commits: the fast path
/// when nothing is out of the ordinary, else turn by turn, each in a savepoint.
pub(super) async fn run_batch(
    writer: &SqlitePool,
    batch: &mut Vec<Job>,
    outcomes: &mut Vec<Outcome>,
    changes: &mut Vec<HotChange>,
    next_ids: &mut Option<NextIds>,
    path: WritePath,
) -> Result<(), StoreError> {
    let fast = match path {
        WritePath::Fast => fast_batch(writer, batch, next_ids).await,
        WritePath::TurnByTurn => None,
    };
    if let Some(committed) = fast {
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

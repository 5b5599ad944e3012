//! [`SqliteStore`]: the store on SQLite through sqlx — WAL journal, foreign keys on, a
//! busy timeout, and the schema from `migrations/` applied by [`SqliteStore::connect`].
//! `sqlite::memory:` works too (one connection, so every query sees the same database).
//!
//! Where things are:
//! - `open`: connecting, pragmas, migrations, starting the writer and the checkpointer;
//! - `writer`: the group-commit task, one transaction per batch of jobs;
//! - `batch` (the fast path, a batch in one query) and `turn_by_turn` (turn by turn, in
//!   savepoints) — the two write paths; `statements` builds what both send, and the
//!   `write_paths` tests hold that they write the same rows;
//! - `rows`: decoders and the session as a turn leaves it;
//! - `reads`, `inbox`, `privacy`: the store's traits on it;
//! - `checkpoint` and `wal_readahead`: the WAL kept small and cached.

mod batch;
mod checkpoint;
mod inbox;
mod open;
mod rows;
mod statements;
mod turn_by_turn;
mod wal_readahead;
mod writer;

#[cfg(test)]
mod hot_tests;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
pub(crate) mod write_paths;

use super::db::{Db, OnDb};
use super::hot::HotSessions;
use super::queries::turns;
use super::{
    CommittedTurn, LlmCallRecord, SessionRecord, Store, StoreError, StoredMessage, TurnCommit,
    TurnLoad,
};
use crate::message::{Platform, SessionKey};
use crate::store::sqlite::inbox::InboxEntry;
use crate::store::sqlite::rows::Prepared;
use crate::store::sqlite::turn_by_turn::insert_llm_calls;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::SqlitePool;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{mpsc, oneshot};

/// The store on one SQLite database: a reader pool, one writer connection driven by the
/// group-commit thread, the WAL checkpointer and the hot-session cache.
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
    /// Batches the writer could not commit since the store opened.
    write_failures: Arc<AtomicU64>,
    /// `write_failures` as the last [`Store::check_writable`] saw it.
    failures_reported: AtomicU64,
    /// Active sessions as the writer last committed them ([`super::hot`]).
    hot: Arc<HotSessions>,
    /// Reads the processed update ids into `hot` after the store opens.
    scan: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The database file (none in memory).
    file: Option<std::path::PathBuf>,
    /// The lock of [`Store::claim_for_run`], held while the store is open.
    sole: std::sync::Mutex<Option<std::fs::File>>,
    /// The readers and the writer, for the queries both backends share ([`super::queries`]).
    db: Db,
}

impl OnDb for SqliteStore {
    fn db(&self) -> &Db {
        &self.db
    }
}

/// An exclusive lock on `<database>.run-lock` beside the database: this process's while
/// the file is open (the kernel lets go when the process ends, however it ends).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn sole_use(database: &std::path::Path) -> Result<std::fs::File, StoreError> {
    let mut path = database.as_os_str().to_owned();
    path.push(".run-lock");
    let path = std::path::PathBuf::from(path);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| StoreError::Corrupt(format!("cannot open {}: {e}", path.display())))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(file),
        Err(rustix::io::Errno::WOULDBLOCK) => {
            Err(StoreError::InUse(database.display().to_string()))
        }
        Err(e) => Err(StoreError::Corrupt(format!(
            "cannot lock {}: {e}",
            path.display()
        ))),
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn sole_use(_database: &std::path::Path) -> Result<std::fs::File, StoreError> {
    Err(StoreError::Corrupt("no file lock on this system".into()))
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
    /// before its turn, the next job its sender queues (see [`Inbox::inbox_put`]).
    InboxPut { entry: InboxEntry },
    /// Not answered: see [`Inbox::inbox_done`].
    InboxDone {
        platform: Platform,
        chat: String,
        message_id: String,
    },
    /// Not answered: a turn does not wait for its delivery mark.
    Delivered { ids: Vec<i64> },
    /// Answered once everything queued before it is written (a clean shutdown; an inbox
    /// entry made durable: see [`Inbox::inbox_keep`]).
    Flush(oneshot::Sender<()>),
}

/// A statement being built (several, for the fast path's [`Trip`]).
type Sql = sqlx::QueryBuilder<sqlx::Sqlite>;

fn writer_gone() -> StoreError {
    StoreError::Batch {
        message: "the database writer has stopped".into(),
        busy: false,
    }
}

impl SqliteStore {
    async fn submit(&self, job: Job) -> Result<(), StoreError> {
        self.jobs.send(job).await.map_err(|_| writer_gone())
    }

    /// How many times the checkpoint task restarted the WAL since the store opened.
    pub fn wal_restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// How many sessions the database holds, active or finished.
    pub async fn session_count(&self) -> Result<i64, StoreError> {
        turns::session_count(&self.db).await
    }

    /// The pool, for other stores of the same database (flows' own tables).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> super::Backend {
        super::Backend::Sqlite
    }

    async fn is_processed(
        &self,
        platform: Platform,
        chat: &str,
        message_id: &str,
    ) -> Result<bool, StoreError> {
        turns::is_processed(&self.db, platform, chat, message_id).await
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
        let load = turns::load_for_turn(&self.db, key, message_id, history).await?;
        if let Some(session) = &load.session {
            self.hot
                .fill(epoch, session, &load.history, load.history.len() < history);
        }
        Ok(load)
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
        turns::undelivered(&self.db, session_id).await
    }

    async fn unreached_sessions(
        &self,
        platform: crate::message::Platform,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        turns::unreached_sessions(&self.db, platform).await
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

    async fn forget_user(
        &self,
        platform: Platform,
        user: &str,
        keep_submissions: bool,
    ) -> Result<u64, StoreError> {
        // before (no read in flight fills the cache again) and after (nothing cached between)
        self.hot.forget_user(platform, user);
        let deleted =
            super::queries::privacy::forget_user_rows(&self.db, platform, user, keep_submissions)
                .await;
        self.hot.forget_user(platform, user);
        deleted
    }

    async fn delete_transcripts_before(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        // cached histories go, before and after (see forget_user)
        self.hot.clear();
        let done = turns::delete_transcripts_before(&self.db, before).await;
        self.hot.clear();
        done
    }

    async fn claim_for_run(&self) -> Result<(), StoreError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let lock = sole_use(file)?;
        *self.sole.lock().unwrap_or_else(|p| p.into_inner()) = Some(lock);
        Ok(())
    }

    async fn check_writable(&self) -> Result<(), StoreError> {
        // batches that failed since the last check (under traffic)
        let failures = self.write_failures.load(Ordering::SeqCst);
        if self.failures_reported.swap(failures, Ordering::SeqCst) != failures {
            return Err(StoreError::Batch {
                message: "a batch of writes could not be committed since the last check".into(),
                busy: false,
            });
        }
        // and a write of its own (when nothing else writes): a row in and out in one
        // committed transaction, whose commit appends to the WAL
        let mut tx = self
            .writer
            .begin()
            .await
            .map_err(StoreError::db("starting a write check"))?;
        sqlx::query(
            "INSERT OR REPLACE INTO inbox (platform, chat, message_id, incoming, created_ms) \
             VALUES ('health', '', '', '{}', 0)",
        )
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("writing a check row"))?;
        sqlx::query("DELETE FROM inbox WHERE platform = 'health'")
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db("removing the check row"))?;
        tx.commit()
            .await
            .map_err(StoreError::db("committing a write check"))
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

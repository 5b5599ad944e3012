//! [`PgStore`]: the store on PostgreSQL through sqlx, for a team that runs several
//! instances on the database it already keeps. Selected by a `postgres://` (or
//! `postgresql://`) database URL; the schema comes from `migrations/postgres/`, applied by
//! [`PgStore::connect`] under sqlx's advisory lock, so that instances started together
//! migrate once.
//!
//! Writes go through the instance's writer tasks (`writer`: group commit, a chat's jobs
//! always to the same writer, the turns that finish together in one transaction and one
//! WAL flush, their rows in multi-row statements). The sessions of the chats this instance
//! holds stay in a cache (`store/hot.rs`, fenced): another instance writes the same rows,
//! so an entry answers only for a chat lease's life after it was last confirmed, and the
//! optimistic session `version` checked by every commit (with the `processed_updates` key)
//! keeps a stale instance from writing over a newer turn: its commit fails, and its entry
//! goes.
//!
//! Where things are: `writer` (group commit), `share` (the writers an instance uses: both
//! alone, one among other instances), `batch` (a batch in one statement),
//! `single_turn` (one turn in one transaction, the writer's path for a turn out of the
//! ordinary), this file ([`Store`], [`Inbox`], connecting, the turn's one-row load). The
//! queries both backends share are in `store/queries/`.

mod batch;
mod share;
mod single_turn;
#[cfg(test)]
mod tests;
mod writer;

use super::{
    CommittedTurn, Inbox, LlmCallRecord, SessionRecord, Store, StoreError, StoredMessage,
    TurnCommit, TurnLoad,
};
use crate::message::{Incoming, Platform, SessionKey};
use crate::store::db::{Db, OnDb, Pool};
use crate::store::hot::HotSessions;
use crate::store::queries::turns;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgPool};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use writer::{Job, writer_gone};

/// The store on one PostgreSQL database: a connection pool, the writers' queues and the
/// cache of the sessions this instance holds.
pub struct PgStore {
    /// The readers' connections (and the ledger's and the write check's).
    pool: PgPool,
    /// The writers' connections.
    writing: PgPool,
    /// The connections leases are taken on: its commits do not wait for the disk (a lease
    /// lost with the server is a lease expired early; turns stay fenced by their
    /// sessions' versions).
    leasing: PgPool,
    /// Turns, inbox entries and clears, delivery marks for the writers ([`writer`]), one
    /// queue each: a chat's jobs always go to the same writer, in the order asked
    /// ([`share::Writers`]: how many of them are in use).
    writers: Arc<share::Writers>,
    /// Active sessions as this instance last committed or read them.
    hot: Arc<HotSessions>,
    /// Batches the writer could not commit since the store opened.
    write_failures: Arc<AtomicU64>,
    /// `write_failures` as the last [`Store::check_writable`] saw it.
    failures_reported: AtomicU64,
    /// The pool, for the queries both backends share ([`super::queries`]).
    db: Db,
}

impl OnDb for PgStore {
    fn db(&self) -> &Db {
        &self.db
    }

    fn leasing(&self) -> Pool<'_> {
        Pool::Postgres(&self.leasing)
    }
}

/// Most connections one instance opens, however large the server.
const MAX_CONNECTIONS: u32 = 8;

/// Most writers (each a connection in a transaction at a time) one instance runs.
const MAX_WRITERS: u32 = 2;

/// Jobs waiting for the writer before a sender waits too.
const QUEUE: usize = 4096;

impl PgStore {
    /// Connects to `url` (`postgres://user:password@host:port/database`) and applies the
    /// migrations not yet applied.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(StoreError::db("reading the database URL"))?
            .application_name("kaiwa");
        let connections = pool_size(&options).await?;
        // half the connections write, each its own chats' batches
        let writers = (connections / 2).clamp(1, MAX_WRITERS);
        // the rest read and take leases, half each (a burst of new chats takes a lease each)
        let leasers = ((connections - writers) / 2).max(1);
        let readers = connections - writers - leasers;
        let pool = pool_of(readers)
            .connect_with(options.clone())
            .await
            .map_err(StoreError::db("connecting to PostgreSQL"))?;
        match MIGRATOR.run(&pool).await {
            Ok(()) => {}
            Err(sqlx::migrate::MigrateError::VersionMissing(version)) => {
                return Err(StoreError::NewerDatabase(version));
            }
            Err(e) => return Err(e.into()),
        }
        let writing = pool_of(writers).connect_lazy_with(writer_options(options.clone()));
        let leasing =
            pool_of(leasers).connect_lazy_with(options.options([("synchronous_commit", "off")]));
        let hot = Arc::new(HotSessions::fenced(super::CHAT_LEASE_TTL));
        let write_failures = Arc::new(AtomicU64::new(0));
        let jobs: Vec<mpsc::Sender<Job>> = (0..writers)
            .map(|_| {
                let (jobs, queue) = mpsc::channel(QUEUE);
                tokio::spawn(writer::group_commit(
                    writing.clone(),
                    queue,
                    hot.clone(),
                    write_failures.clone(),
                ));
                jobs
            })
            .collect();
        let writers = Arc::new(share::Writers::new(jobs));
        let on = share::Database {
            db: Db::Postgres(pool.clone()),
            leasing: leasing.clone(),
        };
        tokio::spawn(share::keep_shared(on, Arc::downgrade(&writers)));
        Ok(PgStore {
            db: Db::Postgres(pool.clone()),
            pool,
            writing,
            leasing,
            writers,
            hot,
            write_failures,
            failures_reported: AtomicU64::new(0),
        })
    }

    /// Queues `job` to the writer of `chat`'s jobs (its turns, inbox entries and clears):
    /// always the same while the writers in use do not change, so that they commit in the
    /// order they were asked for.
    async fn submit(&self, platform: Platform, chat: &str, job: Job) -> Result<(), StoreError> {
        let routes = self.writers.routes().await;
        routes.send(routes.of(platform, chat), job).await
    }

    /// Everything queued for the writers before now is written (or failed).
    async fn flush(&self) -> Result<(), StoreError> {
        self.writers.flush().await
    }

    /// Counts the instances running on the database now and sets the writers this one uses
    /// to its share, as it does every `SHARE_EVERY`; the writers in use. For
    /// `kaiwa bench --instances`, whose instances all start at once.
    pub async fn count_instances(&self) -> Result<usize, StoreError> {
        self.writers.update(self).await
    }

    /// The pool, for other stores of the same database (coordination, flows' own tables).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// How many sessions the database holds, active or finished.
    pub async fn session_count(&self) -> Result<i64, StoreError> {
        turns::session_count(&self.db).await
    }
}

/// The writers' connections: their statements are the same few, over arrays, planned
/// once per connection instead of for every batch (planning the batch's statement costs
/// about as much as running it). Such a plan is made when the connection first writes,
/// maybe on a database just created: planned for empty tables, it would read every session
/// and every inbox entry for each batch ever after, as the tables grow. The writers touch
/// rows by their keys only, so their plans never scan a table.
fn writer_options(options: PgConnectOptions) -> PgConnectOptions {
    options.options([
        ("plan_cache_mode", "force_generic_plan"),
        ("enable_seqscan", "off"),
    ])
}

/// A pool of at most `connections`, waiting up to 10 s for one.
fn pool_of(connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(10))
}

/// The instance's connections, from the server's: its writers, readers and the leases'
/// connections (every turn's writes go through a writer, and a held chat's session is read
/// from the cache), never more than an eighth of the server's connections, so that eight
/// instances fit beside the team's other clients.
async fn pool_size(options: &PgConnectOptions) -> Result<u32, StoreError> {
    let mut probe = sqlx::PgConnection::connect_with(options)
        .await
        .map_err(StoreError::db("connecting to PostgreSQL"))?;
    let (max, reserved): (String, String) = sqlx::query_as(
        "SELECT current_setting('max_connections'), current_setting('superuser_reserved_connections')",
    )
    .fetch_one(&mut probe)
    .await
    .map_err(StoreError::db("reading the server's connection limit"))?;
    let _ = probe.close().await;
    let usable = max
        .parse::<u32>()
        .unwrap_or(100)
        .saturating_sub(reserved.parse::<u32>().unwrap_or(3));
    Ok((usable / 8).clamp(3, MAX_CONNECTIONS))
}

/// The PostgreSQL schema, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> super::Backend {
        super::Backend::Postgres
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
        if let Some(session) = &load.session
            && !load.duplicate
        {
            self.hot
                .fill(epoch, session, &load.history, load.history.len() < history);
        }
        Ok(load)
    }

    async fn commit_turn(&self, commit: TurnCommit) -> Result<CommittedTurn, StoreError> {
        let (reply, answer) = oneshot::channel();
        let routes = self.writers.routes().await;
        let queue = routes.of(commit.session.key.platform, &commit.session.key.chat);
        routes
            .send(
                queue,
                Job::Turn {
                    commit: Box::new(commit),
                    reply,
                },
            )
            .await?;
        drop(routes);
        answer.await.map_err(|_| writer_gone())?
    }

    async fn mark_delivered(&self, message_ids: &[i64]) -> Result<(), StoreError> {
        if message_ids.is_empty() {
            return Ok(());
        }
        // its turn is committed: any writer will do; answered once the mark is committed
        // (the instance that takes the chat over if this one dies resends what is not)
        let (done, committed) = oneshot::channel();
        let routes = self.writers.routes().await;
        routes
            .send(
                routes.any(message_ids[0].unsigned_abs()),
                Job::Delivered {
                    ids: message_ids.to_vec(),
                    done,
                },
            )
            .await?;
        drop(routes);
        committed.await.map_err(|_| writer_gone())?
    }

    async fn undelivered(&self, session_id: i64) -> Result<Vec<StoredMessage>, StoreError> {
        turns::undelivered(&self.db, session_id).await
    }

    async fn unreached_sessions(
        &self,
        platform: Platform,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        turns::unreached_sessions(&self.db, platform).await
    }

    async fn record_llm_calls(&self, calls: &[LlmCallRecord]) -> Result<(), StoreError> {
        if calls.is_empty() {
            return Ok(());
        }
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("starting a ledger write"))?;
        let mut columns = batch::CallColumns::default();
        for call in calls {
            columns.push(call, None);
        }
        columns.insert(&mut tx).await?;
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
        // the turns queued before it are written first; entries and reads in flight go
        self.flush().await?;
        self.hot.forget_user(platform, user);
        let deleted =
            super::queries::privacy::forget_user_rows(&self.db, platform, user, keep_submissions)
                .await?;
        self.hot.forget_user(platform, user);
        Ok(deleted)
    }

    async fn delete_transcripts_before(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        self.hot.clear();
        let done = turns::delete_transcripts_before(&self.db, before).await;
        self.hot.clear();
        done
    }

    async fn claim_for_run(&self) -> Result<(), StoreError> {
        // several instances share a PostgreSQL database (leases divide the work): this one
        // takes its place among them, and its share of its writers
        let writers = self.writers.claim(self).await?;
        tracing::info!(writers, "running among the instances on the database");
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
        // a row in and out in one committed transaction (a read-only standby or a full
        // disk fails it)
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("starting a write check"))?;
        sqlx::query(
            "INSERT INTO inbox (platform, chat, message_id, incoming, created_ms) VALUES ('health', '', '', '{}', 0) \
             ON CONFLICT DO NOTHING",
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
        if let Err(e) = self.flush().await {
            tracing::warn!(error = %e, "the writes queued at shutdown could not be written");
        }
        self.writers.leave(self).await;
        self.writing.close().await;
        self.leasing.close().await;
        self.pool.close().await;
    }
}

#[async_trait]
impl Inbox for PgStore {
    async fn inbox_put(&self, incoming: &Incoming) -> Result<(), StoreError> {
        self.submit(
            incoming.platform,
            &incoming.chat,
            Job::Keep {
                entries: vec![incoming.clone()],
                durable: None,
            },
        )
        .await
    }

    async fn inbox_done(
        &self,
        platform: Platform,
        chat: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        self.submit(
            platform,
            chat,
            Job::Done {
                platform,
                chat: chat.to_string(),
                message_id: message_id.to_string(),
            },
        )
        .await
    }

    async fn inbox_keep(&self, incoming: &[Incoming]) -> Result<(), StoreError> {
        if incoming.is_empty() {
            return Ok(());
        }
        // each chat's entries to its writer, all of them committed before the answer
        let routes = self.writers.routes().await;
        let mut by_writer: Vec<Vec<Incoming>> = vec![Vec::new(); routes.count()];
        for message in incoming {
            by_writer[routes.of(message.platform, &message.chat)].push(message.clone());
        }
        let mut waiting = Vec::new();
        for (queue, entries) in by_writer.into_iter().enumerate() {
            if entries.is_empty() {
                continue;
            }
            let (durable, committed) = oneshot::channel();
            routes
                .send(
                    queue,
                    Job::Keep {
                        entries,
                        durable: Some(durable),
                    },
                )
                .await?;
            waiting.push(committed);
        }
        drop(routes);
        for committed in waiting {
            committed.await.map_err(|_| writer_gone())??;
        }
        Ok(())
    }

    async fn inbox_pending(&self, platform: Platform) -> Result<Vec<Incoming>, StoreError> {
        turns::inbox_pending(&self.db, platform).await
    }
}

//! How many of an instance's writers take its chats: both while it is the only instance on
//! the database, one when others run there too.
//!
//! A writer's batch runs on one server backend. One instance alone runs two, so that a
//! batch is built and sent while the other commits. Every writer more makes the batches
//! smaller (the same turns spread over more queues) and the commits more frequent, and
//! the server's CPU per turn grows with the writers in all, not with the instances
//! (`docs/performance.md`, "Where two instances lose to one"). So an instance among
//! others sends all its chats to one writer: each instance still adds a writer of its
//! own, and the writers in all grow with the instances, never below one per instance.
//!
//! The instances count each other by their places: a lease each `kaiwa run` takes when it
//! claims the database ([`Writers::claim`]), renews while it runs and gives up when it
//! stops (a killed one's expires). An instance counts them when it claims its own, so it
//! starts with its share, and again every [`SHARE_EVERY`], so that the others see it come
//! and go. A chat's jobs must commit in the order asked: a change of the writers in use
//! first waits until everything queued is written, and nothing is queued meanwhile
//! ([`Writers::set`]).

use super::writer::{Job, writer_gone};
use crate::message::Platform;
use crate::store::db::{Db, OnDb, Pool, query};
use crate::store::{Leases, StoreError};
use sqlx::PgPool;
use std::sync::Weak;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, RwLock, RwLockReadGuard, mpsc, oneshot};

/// How often an instance counts the instances on its database.
pub(super) const SHARE_EVERY: Duration = Duration::from_millis(250);

/// The names of the instances' places (`running:` and the instance's own id).
const PLACE: &str = "running:";

/// How long a place lasts unrenewed: a killed instance is counted no longer.
const PLACE_TTL: Duration = crate::store::CHAT_LEASE_TTL;

/// How often a running instance renews its place.
const RENEW_PLACE_EVERY: Duration = Duration::from_secs(2);

/// The places not expired (`$1`: now, in milliseconds; `$2`: [`PLACE`]).
const RUNNING: &str =
    "SELECT count(*) FROM leases WHERE substr(name, 1, length($2)) = $2 AND expires_ms >= $1";

/// The store's database as its count sees it from a task of its own: the store's readers,
/// and its leases taken where the store takes them ([`OnDb`], as [`super::PgStore`]'s).
pub(super) struct Database {
    pub(super) db: Db,
    pub(super) leasing: PgPool,
}

impl OnDb for Database {
    fn db(&self) -> &Db {
        &self.db
    }

    fn leasing(&self) -> Pool<'_> {
        Pool::Postgres(&self.leasing)
    }
}

/// Where an instance stands among those on its database.
enum Place {
    /// Not claimed: a one-off command (`kaiwa db copy`), or a run not started yet.
    Unclaimed,
    /// Held, last renewed then.
    Held(Instant),
    /// Given up: the store is closing.
    Left,
}

/// The writers' queues, and how many of them take new jobs.
pub(super) struct Writers {
    jobs: Vec<mpsc::Sender<Job>>,
    /// Chats are spread over the first `in_use` queues; held (read) while a job is queued.
    in_use: RwLock<usize>,
    /// This instance's id: its place is the lease `running:{id}`, held by `id`.
    pub(super) id: String,
    /// Whether it holds its place (locked while the lease is written, so that a renewal
    /// never outlives the leaving).
    place: Mutex<Place>,
}

/// The queues in use, while jobs are sent to them.
pub(super) struct Routes<'a> {
    in_use: RwLockReadGuard<'a, usize>,
    jobs: &'a [mpsc::Sender<Job>],
}

impl Routes<'_> {
    /// The queue of `chat`'s jobs (its turns, inbox entries and clears): always the same
    /// while the writers in use do not change, so that they commit in the order asked.
    pub(super) fn of(&self, platform: Platform, chat: &str) -> usize {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (platform.as_str(), chat).hash(&mut hasher);
        (hasher.finish() % *self.in_use as u64) as usize
    }

    /// Any queue in use, by `key` (a job with no order to keep).
    pub(super) fn any(&self, key: u64) -> usize {
        (key % *self.in_use as u64) as usize
    }

    /// The queues in use.
    pub(super) fn count(&self) -> usize {
        *self.in_use
    }

    pub(super) async fn send(&self, queue: usize, job: Job) -> Result<(), StoreError> {
        self.jobs[queue].send(job).await.map_err(|_| writer_gone())
    }
}

impl Writers {
    /// All of `jobs` in use (until told of other instances).
    pub(super) fn new(jobs: Vec<mpsc::Sender<Job>>) -> Writers {
        let in_use = RwLock::new(jobs.len());
        Writers {
            jobs,
            in_use,
            id: uuid::Uuid::new_v4().simple().to_string(),
            place: Mutex::new(Place::Unclaimed),
        }
    }

    fn place_name(&self) -> String {
        format!("{PLACE}{}", self.id)
    }

    /// Takes this instance's place among those on `on`'s database, and sets the writers in
    /// use to its share at once. Nothing once it left.
    pub(super) async fn claim(&self, on: &impl OnDb) -> Result<usize, StoreError> {
        {
            let mut place = self.place.lock().await;
            if matches!(*place, Place::Left) {
                return Ok(self.in_use().await);
            }
            on.lease(&self.place_name(), &self.id, PLACE_TTL).await?;
            *place = Place::Held(Instant::now());
        }
        self.update(on).await
    }

    /// Renews this instance's place when [`RENEW_PLACE_EVERY`] has passed.
    async fn renew_when_due(&self, on: &impl OnDb) -> Result<(), StoreError> {
        let mut place = self.place.lock().await;
        if let Place::Held(at) = *place
            && at.elapsed() >= RENEW_PLACE_EVERY
        {
            on.lease(&self.place_name(), &self.id, PLACE_TTL).await?;
            *place = Place::Held(Instant::now());
        }
        Ok(())
    }

    /// Gives up this instance's place (a clean stop: the others count one less at once).
    pub(super) async fn leave(&self, on: &impl OnDb) {
        let mut place = self.place.lock().await;
        let held = matches!(*place, Place::Held(_));
        *place = Place::Left;
        if held && let Err(e) = on.release(&self.place_name(), &self.id).await {
            tracing::debug!(error = %e, "could not give up the instance's place (it expires)");
        }
    }

    /// The queues in use; a change of their number waits until these are dropped.
    pub(super) async fn routes(&self) -> Routes<'_> {
        Routes {
            in_use: self.in_use.read().await,
            jobs: &self.jobs,
        }
    }

    /// Everything queued before now is written (or failed).
    pub(super) async fn flush(&self) -> Result<(), StoreError> {
        let mut done = Vec::with_capacity(self.jobs.len());
        for queue in &self.jobs {
            let (tx, rx) = oneshot::channel();
            queue
                .send(Job::Flush(tx))
                .await
                .map_err(|_| writer_gone())?;
            done.push(rx);
        }
        for rx in done {
            rx.await.map_err(|_| writer_gone())?;
        }
        Ok(())
    }

    /// The writers in use now.
    pub(super) async fn in_use(&self) -> usize {
        *self.in_use.read().await
    }

    /// The writers an instance among `instances` (this one included) uses.
    pub(super) fn share_of(&self, instances: usize) -> usize {
        (self.jobs.len() / instances.max(1)).max(1)
    }

    /// `n` writers in use from now: once everything queued is written, nothing being
    /// queued meanwhile (a chat moving to another queue must not overtake its own jobs).
    /// No change, no wait: jobs are held back only when the writers in use do change.
    pub(super) async fn set(&self, n: usize) -> Result<(), StoreError> {
        let n = n.clamp(1, self.jobs.len().max(1));
        if self.in_use().await == n {
            return Ok(());
        }
        let mut in_use = self.in_use.write().await;
        if *in_use != n {
            self.flush().await?;
            *in_use = n;
        }
        Ok(())
    }

    /// Counts the instances on `on`'s database and sets the writers in use; their number.
    pub(super) async fn update(&self, on: &impl OnDb) -> Result<usize, StoreError> {
        // a store not claimed for a run counts the others only (`share_of` counts none as one)
        let share = self.share_of(count_running(on.db()).await?);
        self.set(share).await?;
        Ok(share)
    }
}

/// How many instances run on `db` (hold a place not expired).
async fn count_running(db: &Db) -> Result<usize, StoreError> {
    let running: i64 = query(RUNNING)
        .bind(crate::store::rows::ms(chrono::Utc::now()))
        .bind(PLACE)
        .fetch_one(db.read())
        .await
        .and_then(|row| row.at(0))
        .map_err(StoreError::db("counting the instances"))?;
    Ok(usize::try_from(running).unwrap_or(0))
}

/// Keeps this instance's place renewed and the writers in use to its share among those on
/// `on`'s database, until the store is gone (its writers with it) or closed.
pub(super) async fn keep_shared(on: Database, writers: Weak<Writers>) {
    let mut every = tokio::time::interval(SHARE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(writers) = writers.upgrade() else {
            return;
        };
        if on.leasing.is_closed() {
            return;
        }
        if let Err(e) = writers.renew_when_due(&on).await {
            // tried again at the next count; the place lasts a few renewals
            tracing::debug!(error = %e, "could not renew the instance's place on the database");
        }
        let before = writers.in_use().await;
        match writers.update(&on).await {
            Ok(now) if now != before => {
                tracing::info!(writers = now, "the instances on the database changed");
            }
            Ok(_) => {}
            // the writers in use stay: a count is tried again soon
            Err(e) => tracing::debug!(error = %e, "could not count the instances on the database"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writers(n: usize) -> (Writers, Vec<mpsc::Receiver<Job>>) {
        let (jobs, queues) = (0..n).map(|_| mpsc::channel(16)).unzip();
        (Writers::new(jobs), queues)
    }

    #[test]
    fn an_instance_among_others_uses_one_writer_and_never_none() {
        let (two, _queues) = writers(2);
        assert_eq!(two.share_of(0), 2);
        assert_eq!(two.share_of(1), 2);
        assert_eq!(two.share_of(2), 1);
        assert_eq!(two.share_of(7), 1);
        assert_eq!(writers(1).0.share_of(1), 1);
        assert_eq!(writers(4).0.share_of(2), 2);
    }

    #[tokio::test]
    async fn the_same_count_again_holds_nothing_back() {
        let (writers, _queues) = writers(2);
        // a job being queued: an unchanged count neither waits for it nor flushes
        let queuing = writers.routes().await;
        tokio::time::timeout(Duration::from_secs(1), writers.set(2))
            .await
            .expect("no wait")
            .expect("sets");
        drop(queuing);
        assert_eq!(writers.in_use().await, 2);
    }

    #[tokio::test]
    async fn a_change_waits_for_what_is_queued_and_moves_every_chat_to_the_writers_in_use() {
        let (writers, mut queues) = writers(2);
        let writers = std::sync::Arc::new(writers);
        // a chat of each queue
        let chats: Vec<String> = {
            let routes = writers.routes().await;
            let mut found = vec![None, None];
            for i in 0.. {
                let chat = format!("chat-{i}");
                found[routes.of(Platform::Telegram, &chat)].get_or_insert(chat);
                if found.iter().all(Option::is_some) {
                    break;
                }
            }
            found.into_iter().flatten().collect()
        };
        let setting = tokio::spawn({
            let writers = writers.clone();
            async move { writers.set(1).await }
        });
        // the change waits until both queues are written, and queues nothing meanwhile
        let mut flushes = Vec::new();
        for queue in &mut queues {
            match queue.recv().await {
                Some(Job::Flush(done)) => flushes.push(done),
                _ => panic!("a flush first"),
            }
        }
        let queuing = tokio::spawn({
            let writers = writers.clone();
            async move { writers.routes().await.count() }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!setting.is_finished(), "nothing written yet");
        assert!(!queuing.is_finished(), "a job waits for the change");
        for done in flushes {
            let _ = done.send(());
        }
        setting.await.expect("set").expect("sets");
        assert_eq!(queuing.await.expect("queued"), 1, "queued after the change");
        assert_eq!(writers.in_use().await, 1);
        let routes = writers.routes().await;
        for chat in &chats {
            assert_eq!(routes.of(Platform::Telegram, chat), 0);
        }
        assert_eq!(routes.any(7), 0);
    }
}

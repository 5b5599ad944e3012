//! Admission: what decides whether a message gets a turn at all — the per-user rate limit
//! and the per-session locks, whose queue is bounded (turns of one session never
//! interleave; other sessions run in parallel). Used by [`Orchestrator::handle`].

use crate::message::SessionKey;
use dashmap::DashMap;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use std::time::Instant;

/// At most `per_minute` messages per user and place in any 60 seconds (0: no limit).
#[derive(Default)]
pub(super) struct RateLimiter {
    pub(super) per_minute: usize,
    pub(super) recent: DashMap<SessionKey, Window>,
}

/// One key's messages in the last minute, and whether it was told to slow down since the
/// last one it was allowed.
#[derive(Default)]
pub(super) struct Window {
    times: VecDeque<Instant>,
    told: bool,
}

/// Whether a message may have a turn; a refused one says whether to tell the user (once
/// per burst: the first refusal after an allowed message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admit {
    Yes,
    Refused { tell: bool },
}

impl RateLimiter {
    pub(super) fn allow(&self, key: &SessionKey) -> Admit {
        if self.per_minute == 0 {
            return Admit::Yes;
        }
        let now = Instant::now();
        let window = Duration::from_secs(60);
        if self.recent.len() > 10_000 {
            self.recent.retain(|_, w| {
                w.times
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < window)
            });
        }
        let mut w = self.recent.entry(key.clone()).or_default();
        while w
            .times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= window)
        {
            w.times.pop_front();
        }
        if w.times.len() >= self.per_minute {
            let tell = !w.told;
            w.told = true;
            return Admit::Refused { tell };
        }
        w.times.push_back(now);
        w.told = false;
        Admit::Yes
    }
}

/// One async mutex per active session key; entries are dropped when no turn holds or awaits them.
#[derive(Default)]
pub(super) struct SessionLocks {
    map: DashMap<SessionKey, Arc<Slot>>,
}

#[derive(Default)]
struct Slot {
    lock: Arc<tokio::sync::Mutex<()>>,
    /// Messages of this session in the orchestrator: the one running and those waiting.
    queued: AtomicUsize,
    /// A refused message was answered since the queue last emptied (once per burst).
    told: std::sync::atomic::AtomicBool,
}

/// A session's queue is full: whether this refusal is the burst's first (to be answered).
pub(super) struct Full {
    pub(super) tell: bool,
}

pub(super) struct Lease<'a> {
    locks: &'a SessionLocks,
    key: SessionKey,
    slot: Arc<Slot>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl SessionLocks {
    /// Waits for the session's turn; [`Full`] (at once) when `max_waiting` messages already
    /// wait behind the running one.
    pub(super) async fn acquire(
        &self,
        key: &SessionKey,
        max_waiting: usize,
    ) -> Result<Lease<'_>, Full> {
        let slot = self.map.entry(key.clone()).or_default().clone();
        let mut lease = Lease {
            locks: self,
            key: key.clone(),
            slot,
            guard: None,
        };
        let before = lease.slot.queued.fetch_add(1, Ordering::SeqCst);
        if before > max_waiting {
            let tell = !lease.slot.told.swap(true, Ordering::SeqCst);
            return Err(Full { tell });
        }
        lease.guard = Some(lease.slot.lock.clone().lock_owned().await);
        Ok(lease)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if self.slot.queued.fetch_sub(1, Ordering::SeqCst) == 1 {
            // the queue emptied: the next burst is told again
            self.slot.told.store(false, Ordering::SeqCst);
        }
        self.guard = None;
        // ours and the map's: nobody else waits for this session (checked under the
        // shard's lock, which `acquire` takes to clone the slot)
        self.locks
            .map
            .remove_if(&self.key, |_, slot| Arc::strong_count(slot) <= 2);
    }
}

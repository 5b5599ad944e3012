//! Admission: what decides whether a message gets a turn at all — the per-user rate limit
//! and the per-session locks, whose queue is bounded (turns of one session never
//! interleave; other sessions run in parallel). Used by [`Orchestrator::handle`].

use super::*;
use dashmap::DashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// At most `per_minute` messages per user and place in any 60 seconds (0: no limit).
#[derive(Default)]
pub(super) struct RateLimiter {
    pub(super) per_minute: usize,
    pub(super) recent: DashMap<SessionKey, VecDeque<Instant>>,
}

impl RateLimiter {
    pub(super) fn allow(&self, key: &SessionKey) -> bool {
        if self.per_minute == 0 {
            return true;
        }
        let now = Instant::now();
        let window = Duration::from_secs(60);
        if self.recent.len() > 10_000 {
            self.recent.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < window)
            });
        }
        let mut times = self.recent.entry(key.clone()).or_default();
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= window)
        {
            times.pop_front();
        }
        if times.len() >= self.per_minute {
            return false;
        }
        times.push_back(now);
        true
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
}

pub(super) struct Lease<'a> {
    locks: &'a SessionLocks,
    key: SessionKey,
    slot: Arc<Slot>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl SessionLocks {
    /// Waits for the session's turn; `None` (at once) when `max_waiting` messages already
    /// wait behind the running one.
    pub(super) async fn acquire(&self, key: &SessionKey, max_waiting: usize) -> Option<Lease<'_>> {
        let slot = self.map.entry(key.clone()).or_default().clone();
        let mut lease = Lease {
            locks: self,
            key: key.clone(),
            slot,
            guard: None,
        };
        let before = lease.slot.queued.fetch_add(1, Ordering::SeqCst);
        if before > max_waiting {
            return None;
        }
        lease.guard = Some(lease.slot.lock.clone().lock_owned().await);
        Some(lease)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        self.slot.queued.fetch_sub(1, Ordering::SeqCst);
        self.guard = None;
        // ours and the map's: nobody else waits for this session (checked under the
        // shard's lock, which `acquire` takes to clone the slot)
        self.locks
            .map
            .remove_if(&self.key, |_, slot| Arc::strong_count(slot) <= 2);
    }
}

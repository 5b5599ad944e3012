//! [`Lanes`]: one queue per session, so that a session's messages run in order while every
//! other session goes on (one chat flooding, or waiting out a 429, delays nobody else).
//!
//! A lane exists while its worker runs: the first message of an idle session starts one
//! (the caller spawns [`Lanes::drain`]), later ones wait in its queue, and the worker ends
//! when the queue is empty. At most `max_waiting` messages wait behind the running one;
//! more overflow, and only the first overflow of a burst (until the queue empties) is to
//! be answered.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::Mutex;

/// What became of a pushed item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed<W> {
    /// The session was idle: spawn [`Lanes::drain`] for it.
    Start,
    /// It waits behind the session's running work.
    Queued,
    /// The queue is full; `work` was not taken. `tell`: the burst's first refusal.
    Overflow { work: W, tell: bool },
}

struct Lane<W> {
    queue: VecDeque<W>,
    /// The worker took its first work (until then the queue's head is not waiting).
    running: bool,
    told: bool,
}

impl<W> Lane<W> {
    fn waiting(&self) -> usize {
        self.queue.len() - usize::from(!self.running && !self.queue.is_empty())
    }
}

/// Per-key queues of work; see the module's documentation.
pub struct Lanes<K, W> {
    lanes: Mutex<HashMap<K, Lane<W>>>,
    max_waiting: usize,
}

impl<K: Hash + Eq + Clone, W> Lanes<K, W> {
    pub fn new(max_waiting: usize) -> Self {
        Lanes {
            lanes: Mutex::new(HashMap::new()),
            max_waiting,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, Lane<W>>> {
        self.lanes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `work` for `key`.
    pub fn push(&self, key: K, work: W) -> Pushed<W> {
        let mut lanes = self.lock();
        match lanes.get_mut(&key) {
            None => {
                lanes.insert(
                    key,
                    Lane {
                        queue: VecDeque::from([work]),
                        running: false,
                        told: false,
                    },
                );
                Pushed::Start
            }
            Some(lane) if lane.waiting() >= self.max_waiting => {
                let tell = !lane.told;
                lane.told = true;
                Pushed::Overflow { work, tell }
            }
            Some(lane) => {
                lane.queue.push_back(work);
                Pushed::Queued
            }
        }
    }

    /// The next work of `key`'s worker; `None` ends the worker (and the lane).
    fn next(&self, key: &K) -> Option<W> {
        let mut lanes = self.lock();
        let lane = lanes.get_mut(key)?;
        match lane.queue.pop_front() {
            Some(work) => {
                lane.running = true;
                Some(work)
            }
            None => {
                lanes.remove(key);
                None
            }
        }
    }

    /// Sessions with a running worker.
    pub fn busy(&self) -> usize {
        self.lock().len()
    }

    /// The worker of `key`: runs its work in order until the queue is empty.
    pub async fn drain<F, Fut>(&self, key: K, mut run: F)
    where
        F: FnMut(W) -> Fut,
        Fut: Future<Output = ()>,
    {
        while let Some(work) = self.next(&key) {
            run(work).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_lane_runs_in_order_and_ends_when_empty() {
        let lanes = Arc::new(Lanes::new(8));
        assert_eq!(lanes.push("a", 1), Pushed::Start);
        assert_eq!(lanes.push("a", 2), Pushed::Queued);
        assert_eq!(
            lanes.push("b", 10),
            Pushed::Start,
            "another key: its own lane"
        );
        let mut seen = Vec::new();
        lanes
            .drain("a", |w| {
                seen.push(w);
                async {}
            })
            .await;
        assert_eq!(seen, [1, 2]);
        assert_eq!(lanes.busy(), 1, "b's lane is still there");
        assert_eq!(lanes.push("a", 3), Pushed::Start, "a is idle again");
    }

    #[tokio::test]
    async fn an_overflow_is_told_once_per_burst() {
        let lanes = Lanes::new(2);
        assert_eq!(lanes.push("a", 0), Pushed::Start);
        assert_eq!(lanes.push("a", 1), Pushed::Queued);
        assert_eq!(
            lanes.push("a", 2),
            Pushed::Queued,
            "the first is not waiting: it runs"
        );
        assert_eq!(
            lanes.push("a", 3),
            Pushed::Overflow {
                work: 3,
                tell: true
            }
        );
        assert_eq!(
            lanes.push("a", 4),
            Pushed::Overflow {
                work: 4,
                tell: false
            }
        );
        let mut seen = Vec::new();
        lanes
            .drain("a", |w| {
                seen.push(w);
                async {}
            })
            .await;
        assert_eq!(seen, [0, 1, 2]);
        // the queue emptied: a new burst is told again
        for w in 0..3 {
            lanes.push("a", w);
        }
        assert_eq!(
            lanes.push("a", 9),
            Pushed::Overflow {
                work: 9,
                tell: true
            }
        );
    }
}

//! [`Lanes`]: one queue per session, so that a session's messages run in order while every
//! other session goes on (one chat flooding, or waiting out a 429, delays nobody else).
//!
//! A lane exists while its worker runs: the first message of an idle session starts one
//! (the caller spawns [`Lanes::drain`]), later ones wait in its queue, and the worker ends
//! when the queue is empty. At most `max_waiting` messages wait behind the running one;
//! more overflow, and only the first overflow of a burst (until the queue empties) is to
//! be answered.
//!
//! [`Scheduler`] is what both chat adapters run their turns on: the lanes with their
//! workers, and a `finish` that waits for them all.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use tokio::task::JoinSet;

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

/// The lanes with their workers: each key's work runs in order in one task, every key in
/// parallel; see the module's documentation.
pub struct Scheduler<K, W> {
    lanes: Arc<Lanes<K, W>>,
    workers: Mutex<JoinSet<()>>,
}

impl<K, W> Scheduler<K, W>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    W: Send + 'static,
{
    pub fn new(max_waiting: usize) -> Self {
        Scheduler {
            lanes: Arc::new(Lanes::new(max_waiting)),
            workers: Mutex::new(JoinSet::new()),
        }
    }

    fn workers(&self) -> std::sync::MutexGuard<'_, JoinSet<()>> {
        self.workers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `work` in `key`'s lane; an idle lane gets a worker that runs its work with
    /// `run`, in order. Returns the work a full queue refused, and whether this refusal is
    /// the burst's first (the one to answer).
    pub fn schedule<R, Fut>(&self, key: K, work: W, run: R) -> Option<(W, bool)>
    where
        R: Fn(W) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut workers = self.workers();
        let refused = match self.lanes.push(key.clone(), work) {
            Pushed::Start => {
                let lanes = self.lanes.clone();
                workers.spawn(async move { lanes.drain(key, run).await });
                None
            }
            Pushed::Queued => None,
            Pushed::Overflow { work, tell } => Some((work, tell)),
        };
        // finished workers are reaped as we go
        while workers.try_join_next().is_some() {}
        refused
    }

    /// Runs `task` beside the lanes (a refusal's answer); [`Scheduler::finish`] waits for it.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.workers().spawn(task);
    }

    /// Sessions with a worker running.
    pub fn busy(&self) -> usize {
        self.lanes.busy()
    }

    /// Waits until every worker ended, those started meanwhile included.
    pub async fn finish(&self) {
        loop {
            let mut workers = std::mem::take(&mut *self.workers());
            if workers.is_empty() {
                return;
            }
            while workers.join_next().await.is_some() {}
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

//! Kaiwa's platform adapters. Each translates its platform's events into
//! [`kaiwa_core::message::Incoming`], hands them to the orchestrator through the handle
//! adapters hold ([`kaiwa_core::orchestrator::ForAdapters`]), and renders the
//! [`kaiwa_core::message::Outgoing`] it gets back through an
//! [`kaiwa_core::orchestrator::Outbox`].
//!
//! - [`console`]: stdin / stdout, options as numbered lists (used by `kaiwa chat`).
//! - [`telegram`]: long polling (confirmed once stored), inline keyboards, forum topics.
//! - [`discord`]: serenity gateway, threads per question, buttons, select menus, embeds.
//! - [`slack`]: Socket Mode or the Events API, threads per question, Block Kit buttons,
//!   ephemeral answers to slash commands.
//!
//! - [`interaction`]: what the chat adapters share: reading a button press, the notices.
//! - [`intake`]: what the chat adapters do with what they received: once, to its
//!   session's lane or to the instance that holds its chat, the claims, the finish.
//! - [`lanes`]: one ordered queue per session, so no chat blocks another.
//!
//! Adapters hold no conversation state of their own beyond what rendering needs; sessions
//! live in the store.

/// The teloxide Kaiwa is built against: a host bot that mounts Kaiwa's handler uses this
/// one, so that the types match.
pub use teloxide;

/// The serenity Kaiwa is built against, for a host bot's client and event handlers.
pub use serenity;

pub mod console;
pub mod discord;
pub mod intake;
pub mod interaction;
pub mod lanes;
pub mod live_reply;
pub mod markup;
pub mod slack;
pub mod split;
pub mod telegram;

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// Why an adapter stopped.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    #[error("terminal I/O failed: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Orchestrator(#[from] kaiwa_core::orchestrator::OrchestratorError),
    #[error("adapter set-up: {0}")]
    Setup(String),
    #[error("{0}")]
    Platform(String),
    #[error(transparent)]
    Telegram(#[from] telegram::CallError),
}

/// Whether an adapter is connected to its platform, for `/healthz`.
#[derive(Debug)]
pub struct AdapterHealth {
    name: &'static str,
    state: AtomicU8,
    last_failure: Mutex<Option<Instant>>,
    /// What this instance does among several (`poller`: it long-polls), for `/healthz`.
    roles: Mutex<std::collections::BTreeMap<&'static str, bool>>,
    /// What else `/healthz` says about it (`shards`: the Discord shards it runs).
    info: Mutex<std::collections::BTreeMap<&'static str, String>>,
}

const STARTING: u8 = 0;
const CONNECTED: u8 = 1;
const FAILING: u8 = 2;
const STOPPED: u8 = 3;

/// A failure older than this no longer counts once the platform answered since.
const FAILURE_MEMORY: Duration = Duration::from_secs(60);

impl AdapterHealth {
    pub fn new(name: &'static str) -> Self {
        AdapterHealth {
            name,
            state: AtomicU8::new(STARTING),
            last_failure: Mutex::new(None),
            roles: Mutex::new(Default::default()),
            info: Mutex::new(Default::default()),
        }
    }

    /// Whether this instance plays `role` now (several instances share the work).
    pub fn set_role(&self, role: &'static str, active: bool) {
        self.roles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(role, active);
    }

    /// Sets what `/healthz` reports as `key` (e.g. `shards` = `"0-1/4"`).
    pub fn set_info(&self, key: &'static str, value: String) {
        self.info
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, value);
    }

    /// What was set with [`Self::set_info`].
    pub fn info(&self) -> Vec<(&'static str, String)> {
        let info = self.info.lock().unwrap_or_else(|p| p.into_inner());
        info.iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    /// The roles set so far and whether this instance plays each.
    pub fn roles(&self) -> Vec<(&'static str, bool)> {
        let roles = self.roles.lock().unwrap_or_else(|p| p.into_inner());
        roles.iter().map(|(r, a)| (*r, *a)).collect()
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The platform answered.
    pub fn ok(&self) {
        self.state.store(CONNECTED, Ordering::Relaxed);
    }

    /// The platform could not be reached.
    pub fn failed(&self) {
        self.state.store(FAILING, Ordering::Relaxed);
        *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    pub fn set_stopped(&self) {
        self.state.store(STOPPED, Ordering::Relaxed);
    }

    /// Connected now: it answered since the last failure, or that failure is long past
    /// (long polling retries quickly while the platform is down).
    pub fn is_connected(&self) -> bool {
        match self.state.load(Ordering::Relaxed) {
            CONNECTED => true,
            FAILING => self
                .last_failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some_and(|t| t.elapsed() > FAILURE_MEMORY),
            _ => false,
        }
    }
}

/// The ids of the most recent platform events, to drop a duplicate delivery before it costs
/// anything (the store's deduplication still guards every turn, across restarts).
pub struct SeenIds<T> {
    capacity: usize,
    seen: Mutex<(HashSet<T>, VecDeque<T>)>,
}

impl<T: Hash + Eq + Clone> SeenIds<T> {
    pub fn new(capacity: usize) -> Self {
        SeenIds {
            capacity: capacity.max(1),
            seen: Mutex::new((HashSet::new(), VecDeque::new())),
        }
    }

    /// Whether `id` was seen (and is still remembered).
    pub fn contains<Q>(&self, id: &Q) -> bool
    where
        T: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let guard = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        guard.0.contains(id)
    }

    /// `false` when `id` was seen before.
    pub fn first_sight(&self, id: T) -> bool {
        let mut guard = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let (set, order) = &mut *guard;
        if !set.insert(id.clone()) {
            return false;
        }
        order.push_back(id);
        if order.len() > self.capacity
            && let Some(old) = order.pop_front()
        {
            set.remove(&old);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_ids_forget_the_oldest() {
        let seen = SeenIds::new(2);
        assert!(seen.first_sight(1));
        assert!(!seen.first_sight(1));
        assert!(seen.first_sight(2));
        assert!(seen.first_sight(3));
        assert!(seen.first_sight(1), "1 was forgotten");
    }
}

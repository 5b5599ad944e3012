//! Several instances on one database (PostgreSQL): what only one instance may do at a time
//! is held by a lease in the store ([`crate::store::Leases`]), renewed by its holder and
//! taken by another once it expires (its holder died):
//! - a chat's turns: a message kept in the shared inbox (by whichever instance received
//!   it) is handled by the instance that holds its chat's lease, taken by the first that
//!   [`Orchestrator::claim`]s it; one turn per session at a time, in order, across instances;
//! - the Telegram poller and the scheduled jobs ([`Orchestrator::hold`]).
//!
//! A lease lasts [`LEASE_TTL`] and is renewed every [`RENEW_EVERY`]: an instance killed
//! mid-turn leaves its chats to another within `LEASE_TTL` plus a claim period.
//!
//! One instance alone (SQLite, the default) holds its leases just the same; nothing else
//! competes for them.

use super::Orchestrator;
use super::delivery::Resend;
use crate::message::{Incoming, Platform};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How long a lease lasts without renewal (a held chat's session is cached no longer).
pub const LEASE_TTL: Duration = crate::store::CHAT_LEASE_TTL;
/// How often a holder renews its leases.
pub const RENEW_EVERY: Duration = Duration::from_secs(2);
/// Most chats an instance takes in one claim: two instances claiming the same burst share
/// it rather than the first taking all of it.
const NEW_CHATS_PER_CLAIM: usize = 16;

/// This instance among others: its id, whether it shares its database with others, and
/// the chats it holds (with when each lease was last renewed).
#[derive(Debug)]
pub struct Instance {
    id: String,
    shared: bool,
    chats: std::sync::Mutex<HashMap<String, Instant>>,
}

impl Instance {
    /// An instance with a new id (`host-pid-random`); `shared`: other instances may run on
    /// the same database.
    pub fn new(shared: bool) -> Instance {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        let random = uuid::Uuid::new_v4().simple().to_string();
        Instance {
            id: format!("{host}-{}-{}", std::process::id(), &random[..8]),
            shared,
            chats: Default::default(),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn is_shared(&self) -> bool {
        self.shared
    }
}

fn chat_lease(platform: Platform, chat: &str) -> String {
    format!("chat:{}:{chat}", platform.as_str())
}

impl Orchestrator {
    /// This instance.
    pub fn instance(&self) -> &Instance {
        &self.instance
    }

    /// Takes or renews the lease `name` for this instance; false when another holds it (or
    /// the store cannot say: then nobody should act on it).
    pub(crate) async fn hold(&self, name: &str) -> bool {
        match self.store.lease(name, &self.instance.id, LEASE_TTL).await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, lease = name, "could not take or renew a lease");
                false
            }
        }
    }

    /// Lets go of `name` (a clean stop: another instance takes over at once).
    pub(crate) async fn let_go(&self, name: &str) {
        if let Err(e) = self.store.release(name, &self.instance.id).await {
            tracing::debug!(error = %e, lease = name, "could not release a lease");
        }
    }

    /// The messages of `platform` in the shared inbox that this instance is to handle,
    /// oldest first: those of chats it holds (renewed when due) and of up to a few chats
    /// free or left by a dead instance, which it takes. For a chat taken from a dead
    /// instance, the replies it committed and did not deliver are sent first (at least
    /// once: the reply in flight when it died may come twice). The caller hands them to
    /// their sessions' lanes, which drop ones already queued.
    pub(crate) async fn claim(
        &self,
        platform: Platform,
        outbox: &dyn super::Outbox,
    ) -> Vec<Incoming> {
        let pending = match self.store.inbox_pending(platform).await {
            Ok(pending) => pending,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the shared inbox");
                return Vec::new();
            }
        };
        let mut mine: HashSet<String> = HashSet::new();
        if pending.is_empty() {
            self.forget_idle_chats(platform, &mine);
            return pending;
        }
        let chats: Vec<&str> = {
            let mut seen = HashSet::new();
            pending
                .iter()
                .map(|m| m.chat.as_str())
                .filter(|c| seen.insert(*c))
                .collect()
        };
        let prefix = format!("chat:{}:", platform.as_str());
        let held: HashMap<String, crate::store::Lease> = match self.store.leases(&prefix).await {
            Ok(list) => list.into_iter().map(|l| (l.name.clone(), l)).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the chats' leases");
                return Vec::new();
            }
        };
        let now = chrono::Utc::now();
        let mut taken_over = Vec::new();
        let mut new_chats = 0;
        for chat in chats {
            let name = chat_lease(platform, chat);
            match held.get(&name) {
                Some(lease) if lease.holder == self.instance.id => {
                    if self.renew_when_due(&name).await {
                        mine.insert(chat.to_string());
                    }
                }
                Some(lease) if lease.expires_at > now => {}
                previous => {
                    if new_chats >= NEW_CHATS_PER_CLAIM || !self.take(&name).await {
                        continue;
                    }
                    new_chats += 1;
                    mine.insert(chat.to_string());
                    if let Some(dead) = previous
                        && dead.holder != self.instance.id
                    {
                        tracing::info!(chat, from = %dead.holder, "took over a chat from an instance that stopped");
                        taken_over.push(chat.to_string());
                    }
                }
            }
        }
        if new_chats > 0 {
            tracing::info!(
                chats = new_chats,
                platform = platform.as_str(),
                "took chats from the shared inbox"
            );
        }
        if !taken_over.is_empty() {
            self.resend_in_chats(platform, &taken_over, outbox).await;
        }
        self.forget_idle_chats(platform, &mine);
        pending
            .into_iter()
            .filter(|m| mine.contains(&m.chat))
            .collect()
    }

    /// Whether this instance holds `chat` now, renewing the lease when due: a message
    /// received here goes straight to its lane when it does; otherwise it waits in the
    /// shared inbox for the holder, or for the first instance to claim it (instances claim
    /// a few new chats at a time, so a burst of new chats is shared out).
    pub(crate) async fn holds_chat(&self, platform: Platform, chat: &str) -> bool {
        let name = chat_lease(platform, chat);
        match self.renewed_at(&name) {
            Some(at) if at.elapsed() < LEASE_TTL => self.renew_when_due(&name).await,
            _ => false,
        }
    }

    /// Takes `chat` for this instance if it is free (or its holder's lease expired), or
    /// renews this instance's lease when due; whether this instance holds it now. What an
    /// instance does before it handles a chat's message itself (`kaiwa bench --instances`).
    pub(crate) async fn hold_chat(&self, platform: Platform, chat: &str) -> bool {
        self.renew_when_due(&chat_lease(platform, chat)).await
    }

    /// Takes the lease of a chat (`name`) for this instance, noting when.
    async fn take(&self, name: &str) -> bool {
        let held = self.hold(name).await;
        if held {
            self.mark_renewed(name);
        }
        held
    }

    /// Renews this instance's lease `name` when [`RENEW_EVERY`] has passed since the last
    /// renewal; whether it holds it still.
    async fn renew_when_due(&self, name: &str) -> bool {
        self.renewed_at(name)
            .is_some_and(|at| at.elapsed() < RENEW_EVERY)
            || self.take(name).await
    }

    /// Lets go of every chat of `platform` this instance holds (a clean stop).
    pub(crate) async fn let_go_chats(&self, platform: Platform) {
        let prefix = format!("chat:{}:", platform.as_str());
        let names: Vec<String> = {
            let mut chats = self
                .instance
                .chats
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let names = chats
                .keys()
                .filter(|n| n.starts_with(&prefix))
                .cloned()
                .collect();
            chats.retain(|n, _| !n.starts_with(&prefix));
            names
        };
        for name in names {
            self.let_go(&name).await;
        }
    }

    fn renewed_at(&self, name: &str) -> Option<Instant> {
        let chats = self
            .instance
            .chats
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        chats.get(name).copied()
    }

    fn mark_renewed(&self, name: &str) {
        let mut chats = self
            .instance
            .chats
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        chats.insert(name.to_string(), Instant::now());
    }

    /// Chats with nothing left in the inbox are no longer renewed (their leases expire,
    /// and the next message may go to any instance).
    fn forget_idle_chats(&self, platform: Platform, busy: &HashSet<String>) {
        let prefix = format!("chat:{}:", platform.as_str());
        let mut chats = self
            .instance
            .chats
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        chats.retain(|name, _| !name.starts_with(&prefix) || busy.contains(&name[prefix.len()..]));
    }

    /// The replies committed and not delivered in `chats` (an instance died between a
    /// commit and its delivery), once per session.
    async fn resend_in_chats(
        &self,
        platform: Platform,
        chats: &[String],
        outbox: &dyn super::Outbox,
    ) {
        let sessions = match self.store.unreached_sessions(platform).await {
            Ok(sessions) => sessions,
            Err(e) => {
                tracing::warn!(error = %e, "could not list the replies left undelivered");
                return;
            }
        };
        for session in sessions.into_iter().filter(|s| chats.contains(&s.key.chat)) {
            self.send_undelivered(&session.key, &session, &[], Resend::AfterRestart, outbox)
                .await;
        }
    }
}

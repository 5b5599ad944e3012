//! The [`Orchestrator`]: takes one [`Incoming`] at a time per session and turns it into a
//! committed turn and delivered replies.
//!
//! For each message: take the session's lock (turns of one session never interleave, other
//! sessions run in parallel), skip an update already processed, load the session, let the
//! flow run, write the turn (messages, state changes, processed mark, model ledger) in one
//! store transaction, then deliver through the adapter's [`Outbox`] and notify the
//! [`AdminSink`]. Generic commands (`/start`, `/help`, `/end`, a flow's start command) and
//! stale button presses are handled here, so every flow behaves the same. A failing flow is
//! answered with an apology and leaves the session as it was.

use crate::admin::{AdminSink, DeliveryError};
use crate::flow::FlowRegistry;
use crate::llm::ModelRouter;
use crate::llm::stream::Tap;
use crate::message::{Body, Incoming, Outgoing, SessionKey};
use crate::metrics::{Metrics, kind};
use crate::store::{Store, StoreError};
use async_trait::async_trait;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::Instrument;

mod admission;
mod commands;
mod console;
mod delivery;
mod handles;
mod instances;
mod intake;
mod language;
mod notices;
mod people;
mod routing;
mod turn;
mod working;

use admission::{Admit, Full, RateLimiter, SessionLocks};
pub use commands::admin::{ADMIN_COMMANDS, AdminAccess};
pub use console::CONSOLE_LINK_VALID;
pub use handles::{ForAdapters, ForInstances, ForPeople};
pub use instances::{Instance, LEASE_TTL, RENEW_EVERY};
pub use intake::ActivePlace;
pub use notices::QUEUE_FULL;
use notices::RATE_LIMITED;
pub use people::AdminOutcome;
pub use working::Streamer;

/// How many recent messages a flow sees: the most any flow reads (the assistant's context
/// is the last 20; the interview's summary for its sub-agents the last 12). Each turn copies
/// them, so more than the flows read is paid for by every turn.
pub const HISTORY_LIMIT: usize = 20;

/// Where replies go: implemented by each adapter for its platform.
#[async_trait]
pub trait Outbox: Send + Sync {
    async fn deliver(&self, key: &SessionKey, items: &[Outgoing]) -> Result<(), DeliveryError>;

    /// Delivers `items` to the key's user in their private chat with the bot (a DM): a
    /// reply with personal data asked for in a shared place. `Ok(false)` when it cannot
    /// (the user never opened a private chat, or the platform has none).
    async fn deliver_privately(
        &self,
        key: &SessionKey,
        items: &[Outgoing],
    ) -> Result<bool, DeliveryError> {
        let _ = (key, items);
        Ok(false)
    }

    /// A live view of the reply being written for `key`, where the platform and the place
    /// can show one (a Telegram draft or edited message, a Discord edited message, the
    /// console); `None` elsewhere. `tap` is the reply's: a Stop the user gives goes to it.
    /// The turn's reply itself still goes through [`Outbox::deliver`], which replaces what
    /// was shown.
    fn streamer(&self, key: &SessionKey, tap: &Arc<Tap>) -> Option<Box<dyn Streamer>> {
        let _ = (key, tap);
        None
    }

    /// Delivers `item`, the stored reply `id` (a message of the transcript): a platform
    /// that can label a message with it does, for [`Outbox::already_shown`].
    async fn deliver_reply(
        &self,
        key: &SessionKey,
        item: &Outgoing,
        id: i64,
    ) -> Result<(), DeliveryError> {
        let _ = id;
        self.deliver(key, std::slice::from_ref(item)).await
    }

    /// Which of the stored replies `ids` — committed and not recorded as delivered (the
    /// process stopped, or the platform's answer was lost) — `key`'s place already shows:
    /// a platform whose history the bot can read tells (by the labels of
    /// [`Outbox::deliver_reply`]), and those are not sent again. `None`: it cannot tell,
    /// and all are sent again.
    async fn already_shown(&self, key: &SessionKey, ids: &[i64]) -> Option<Vec<bool>> {
        let _ = (key, ids);
        None
    }
}

/// What happened to one incoming message.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnReport {
    /// The session the turn ran in (0 when nothing was written).
    pub session_id: i64,
    pub outgoing: Vec<Outgoing>,
    /// The place's conversation is over (the flow ended it or `/end`). Not when a session
    /// that ended on its first turn left the one it was to replace going on.
    pub finished: bool,
    /// The update had been processed before; nothing was done.
    pub duplicate: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum OrchestratorError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub struct Orchestrator {
    store: Arc<dyn Store>,
    flows: FlowRegistry,
    models: ModelRouter,
    admin: Arc<dyn AdminSink>,
    locks: SessionLocks,
    max_message_chars: usize,
    metrics: Arc<Metrics>,
    rate: RateLimiter,
    max_waiting: usize,
    keep_submissions: bool,
    access: AdminAccess,
    /// Time for a turn's model work (`None`: each call's own timeout only).
    turn_budget: Option<Duration>,
    /// Places told of the current model outage.
    told: Mutex<(u64, std::collections::HashSet<SessionKey>)>,
    /// Sessions with a reply the platform did not take (in this process): the session's next
    /// delivery sends it first, and so does the same message coming again.
    unreached: Mutex<std::collections::HashSet<i64>>,
    /// This instance among others on the same database ([`instances`]).
    instance: Instance,
    /// Where to reach a user of each platform outside their turn (a decision, a person's
    /// reply): registered by the adapters as they start ([`people`]).
    outboxes: Mutex<std::collections::HashMap<crate::message::Platform, Arc<dyn Outbox>>>,
    /// The conversations people hold, as last read ([`people`]).
    holds: people::HoldCache,
    /// Where the browser console is served (`/console`'s links), if it is.
    console_url: std::sync::RwLock<Option<String>>,
}

/// Messages a user may send in a minute before "slow down" (per place).
pub const DEFAULT_RATE_PER_MINUTE: usize = 30;
/// Messages that may wait behind a session's running turn.
pub const DEFAULT_MAX_WAITING: usize = 8;

/// Messages longer than this are refused (issue: 4,000 characters).
pub const DEFAULT_MAX_MESSAGE_CHARS: usize = 4_000;

impl Orchestrator {
    pub fn new(
        store: Arc<dyn Store>,
        flows: FlowRegistry,
        models: ModelRouter,
        admin: Arc<dyn AdminSink>,
    ) -> Self {
        Orchestrator {
            store,
            flows,
            models,
            admin,
            locks: SessionLocks::default(),
            max_message_chars: DEFAULT_MAX_MESSAGE_CHARS,
            metrics: Arc::new(Metrics::default()),
            rate: RateLimiter {
                per_minute: DEFAULT_RATE_PER_MINUTE,
                ..RateLimiter::default()
            },
            max_waiting: DEFAULT_MAX_WAITING,
            keep_submissions: false,
            access: AdminAccess::default(),
            turn_budget: None,
            told: Mutex::new((0, std::collections::HashSet::new())),
            unreached: Mutex::new(std::collections::HashSet::new()),
            instance: Instance::new(false),
            outboxes: Mutex::default(),
            holds: people::HoldCache::default(),
            console_url: std::sync::RwLock::new(None),
        }
    }

    /// Shares the database with other instances (PostgreSQL): messages are handled by the
    /// instance holding their chat's lease ([`ForAdapters::claim`]).
    pub fn with_shared_database(mut self, shared: bool) -> Self {
        self.instance = Instance::new(shared);
        self
    }

    /// Longer messages get a clear reply and are not stored at all.
    pub fn with_max_message_chars(mut self, max: usize) -> Self {
        self.max_message_chars = max.max(1);
        self
    }

    /// At most `per_minute` messages per user and place in any minute (0: unlimited).
    pub fn with_rate_limit(mut self, per_minute: usize) -> Self {
        self.rate.per_minute = per_minute;
        self
    }

    /// At most `max_waiting` messages wait behind a session's running turn; more are refused.
    pub fn with_max_waiting(mut self, max_waiting: usize) -> Self {
        self.max_waiting = max_waiting;
        self
    }

    /// A turn's model work ends within `budget`: calls get what is left, then fail at once
    /// and agents answer by their floors ([`crate::llm::budget`]).
    pub fn with_turn_budget(mut self, budget: Duration) -> Self {
        self.turn_budget = Some(budget);
        self
    }

    /// `/forget` keeps interview submissions (for the hiring team) and says so.
    pub fn with_kept_submissions(mut self, keep: bool) -> Self {
        self.keep_submissions = keep;
        self
    }

    /// Who may use the admin commands, and where.
    pub fn with_admin_access(mut self, access: AdminAccess) -> Self {
        self.access = access;
        self
    }

    /// Turns, errors, model calls, queue: what `/metrics` serves.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn flows(&self) -> &FlowRegistry {
        &self.flows
    }

    /// Whether `/name` is one of Kaiwa's commands: a generic one, a flow's start or
    /// in-session command, a flow's id, `/cancel`, or an admin command. A bot that mounts
    /// Kaiwa beside its own handlers leaves every other command to them.
    pub(crate) fn knows_command(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        name == "cancel"
            || self.is_admin_command(&name)
            || self.flows.by_start_command(&name).is_some()
            || self.flows.menu_commands().iter().any(|c| c.name == name)
    }

    /// How many messages may wait behind a session's running turn (adapters that queue
    /// per session bound their queues the same).
    pub(crate) fn max_waiting(&self) -> usize {
        self.max_waiting
    }

    /// Handles one message: one turn, committed, then delivered through `outbox`.
    pub async fn handle(
        &self,
        incoming: Incoming,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        let key = incoming.key();
        let span = tracing::info_span!("turn", session = %key, message_id = %incoming.message_id);
        async {
            let admit = match incoming.body {
                Body::Open => Admit::Yes,
                _ => self.rate.allow(&key),
            };
            if let Admit::Refused { tell } = admit {
                tracing::info!(told = tell, "rate limit: message refused");
                self.metrics.error(kind::RATE_LIMITED);
                return self.refuse(&incoming, tell, RATE_LIMITED, outbox).await;
            }
            let waiting = self.metrics.queued();
            let _lease = match self.locks.acquire(&key, self.max_waiting).await {
                Ok(lease) => lease,
                Err(Full { tell }) => {
                    drop(waiting);
                    tracing::info!(told = tell, "session queue full: message refused");
                    self.metrics.error(kind::QUEUE_FULL);
                    return self.refuse(&incoming, tell, QUEUE_FULL, outbox).await;
                }
            };
            drop(waiting);
            let result = self.handle_locked(incoming, key, outbox, None).await;
            if result.is_err() {
                self.metrics.error(kind::STORE);
            }
            result
        }
        .instrument(span)
        .await
    }

    /// A message refused before its turn: answered with `notice` when `tell` (the first of
    /// a burst), else dropped without a word.
    async fn refuse(
        &self,
        incoming: &Incoming,
        tell: bool,
        notice: &str,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        if tell {
            // in the user's language when it is known; both otherwise
            let lang = self.notice_language(incoming).await;
            let text = notices::in_language(notice, lang.as_deref());
            return self.reply_only(incoming, None, text, outbox).await;
        }
        Ok(TurnReport {
            session_id: 0,
            outgoing: Vec::new(),
            finished: false,
            duplicate: false,
        })
    }
}

#[cfg(test)]
mod tests;

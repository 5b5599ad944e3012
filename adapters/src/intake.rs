//! The intake both chat adapters share: what they received goes, once, to its session's
//! lane here, or — several instances on one database — to the instance that holds its chat,
//! through the shared inbox's claims. An adapter receives (a poll, a webhook, a gateway
//! event), checks [`Intake::is_new`], keeps its messages in the inbox, then calls
//! [`Intake::hand_over`]; its [`Turns`] say how a piece of work runs and how a refused one
//! is answered. Everything else is here: the lanes ([`Scheduler`]), the ids already taken,
//! the claim loop, the leftovers of the last run and the finish.

use crate::SeenIds;
use crate::lanes::Scheduler;
use async_trait::async_trait;
use kaiwa_core::message::{Incoming, Platform};
use kaiwa_core::orchestrator::{ForAdapters, Outbox};
use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// How often an instance among several looks for messages of chats it holds or may take.
pub const CLAIM_EVERY: Duration = Duration::from_millis(250);

/// How many recent ids are remembered to drop duplicates before they cost anything.
const SEEN: usize = 4096;

/// What an adapter does with the work of its platform; the [`Intake`] does the rest.
#[async_trait]
pub trait Turns: Send + Sync + 'static {
    /// One thing to do in a session's lane (a turn, a press, an admin's action …).
    type Work: Send + 'static;
    /// A session's lane: its work runs in order, other lanes go on.
    type Lane: Hash + Eq + Clone + Send + Sync + 'static;

    const PLATFORM: Platform;

    /// Whether every message of a chat reaches the instance that received the chat's
    /// first (Discord's shards: a guild's events go to one instance), so that a message of
    /// a chat this instance holds may go straight to its lane; otherwise (Telegram's
    /// webhooks behind a load balancer) it waits for this instance's claim, which takes
    /// a chat's messages in the order they were kept, whoever kept them.
    const ONE_RECEIVER_PER_CHAT: bool;

    /// The outbox the turns reply through (the one registered with the orchestrator).
    fn outbox(&self) -> &dyn Outbox;

    /// A message kept in the inbox (claimed here, or left by the last run), as work in
    /// its lane; `None`: it names no place of this platform.
    fn kept(&self, incoming: Incoming) -> Option<(Self::Lane, Self::Work)>;

    /// The inbox entry `work` is (its message), if any.
    fn entry(work: &Self::Work) -> Option<&Incoming>;

    /// Does `work`, in its lane.
    async fn run(&self, work: Self::Work);

    /// `work` found its session's queue full (its entry is out of the inbox already);
    /// `tell`: the first refusal of a burst, to be answered.
    async fn refuse(&self, work: Self::Work, tell: bool);

    /// `work` waits in the shared inbox for another instance, which holds its chat.
    async fn left_for_holder(&self, work: Self::Work) {
        drop(work);
    }
}

/// The shared intake of one adapter; see the module's documentation.
pub struct Intake<T: Turns> {
    turns: Arc<T>,
    orchestrator: ForAdapters,
    lanes: Scheduler<T::Lane, T::Work>,
    /// Ids of what was received (a platform may deliver the same thing twice).
    received: SeenIds<String>,
    /// Inbox entries queued in a lane here (a claim lists them until they are answered).
    queued: SeenIds<String>,
    /// Several instances: the task claiming this instance's share of the shared inbox.
    claims: Mutex<Option<JoinHandle<()>>>,
    /// Wakes the claims before their period: a message of a chat this instance holds came.
    claim_now: Arc<Notify>,
}

impl<T: Turns> Intake<T> {
    /// The intake of `turns`; nothing runs before [`Intake::begin`] (or its two halves).
    pub fn new(turns: Arc<T>, orchestrator: ForAdapters) -> Arc<Intake<T>> {
        Arc::new(Intake {
            lanes: Scheduler::new(orchestrator.max_waiting()),
            turns,
            orchestrator,
            received: SeenIds::new(SEEN),
            queued: SeenIds::new(SEEN),
            claims: Mutex::new(None),
            claim_now: Arc::new(Notify::new()),
        })
    }

    /// One instance alone queues what its last run left ([`Intake::take_leftovers`]);
    /// among several, the claims begin ([`Intake::start_claims`]).
    pub async fn begin(self: &Arc<Self>) {
        if self.orchestrator.instance().is_shared() {
            self.start_claims();
        } else {
            self.take_leftovers().await;
        }
    }

    /// One instance alone, at start: the replies its last run committed and did not
    /// deliver are sent, then the messages it kept and did not answer go to their lanes.
    pub async fn take_leftovers(&self) {
        let left = self
            .orchestrator
            .left_by_last_run(T::PLATFORM, self.turns.outbox())
            .await;
        for incoming in left {
            self.queue_kept(incoming);
        }
    }

    /// Several instances: what any instance kept (and what a dead one left) comes through
    /// this instance's claims from now on, until [`Intake::finish`].
    pub fn start_claims(self: &Arc<Self>) {
        let task = tokio::spawn(Intake::claim_loop(Arc::downgrade(self)));
        let old = self
            .claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(task);
        if let Some(old) = old {
            old.abort();
        }
    }

    pub fn turns(&self) -> &Arc<T> {
        &self.turns
    }

    /// Whether `id` (what the platform calls the received thing) is new here: checked
    /// before anything is written, and remembered once handed over
    /// ([`Intake::hand_over`]), so that a delivery not stored comes again.
    pub fn is_new(&self, id: &str) -> bool {
        !self.received.contains(id)
    }

    /// Remembers `id` as received now; `false`: it was already (a duplicate delivery).
    pub fn first_sight(&self, id: String) -> bool {
        self.received.first_sight(id)
    }

    /// Received work (new: [`Intake::first_sight`]) whose message, if any, is in the
    /// inbox: to its lane here, unless another instance holds its chat (it waits in the
    /// shared inbox for that instance's claim) or the chat's messages come in order only
    /// through the claims (then this instance's claim is woken, when it holds the chat).
    pub async fn hand_over(&self, lane: T::Lane, work: T::Work) {
        if self.orchestrator.instance().is_shared()
            && let Some(incoming) = T::entry(&work)
        {
            let held = self
                .orchestrator
                .holds_chat(T::PLATFORM, &incoming.chat)
                .await;
            if !held {
                // another instance holds the chat (a turn of it may be running there)
                tracing::debug!("a message for a chat another instance holds, left in the inbox");
                self.turns.left_for_holder(work).await;
                return;
            }
            if !T::ONE_RECEIVER_PER_CHAT {
                self.claim_now.notify_one();
                return;
            }
        }
        self.queue(lane, work);
    }

    /// Queues `work` in its lane (a worker starts for an idle session); a full queue
    /// refuses it, answered once per burst. An inbox entry queued here already is dropped.
    fn queue(&self, lane: T::Lane, work: T::Work) {
        if let Some(incoming) = T::entry(&work)
            && !self.queued.first_sight(incoming.message_id.clone())
        {
            tracing::debug!("a message queued already");
            return;
        }
        let turns = self.turns.clone();
        let run = move |work| {
            let turns = turns.clone();
            async move { turns.run(work).await }
        };
        if let Some((work, tell)) = self.lanes.schedule(lane, work, run) {
            tracing::info!(told = tell, "session queue full: message refused");
            let (turns, orchestrator) = (self.turns.clone(), self.orchestrator.clone());
            self.lanes.spawn(async move {
                if let Some(incoming) = T::entry(&work) {
                    orchestrator.release(incoming).await;
                }
                turns.refuse(work, tell).await;
            });
        }
    }

    /// A message from the inbox to its lane.
    fn queue_kept(&self, incoming: Incoming) {
        match self.turns.kept(incoming) {
            Some((lane, work)) => self.queue(lane, work),
            None => {
                tracing::warn!(platform = %T::PLATFORM.as_str(), "a kept message names no place")
            }
        }
    }

    /// Several instances: every [`CLAIM_EVERY`] (or when woken), the messages of the chats
    /// this instance holds or takes ([`ForAdapters::claim`]) go to their lanes.
    async fn claim_loop(intake: Weak<Intake<T>>) {
        loop {
            let Some(this) = intake.upgrade() else { return };
            let claimed = this
                .orchestrator
                .claim(T::PLATFORM, this.turns.outbox())
                .await;
            for incoming in claimed {
                this.queue_kept(incoming);
            }
            // (a wake while no one waits is kept for the next wait: none is missed)
            let wake = this.claim_now.clone();
            drop(this);
            tokio::select! {
                () = tokio::time::sleep(CLAIM_EVERY) => {}
                () = wake.notified() => {}
            }
        }
    }

    /// Waits for the work queued and running (no more is claimed), then lets go of the
    /// chats this instance held.
    pub async fn finish(&self) {
        let claims = self.claims.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(claims) = claims {
            claims.abort();
        }
        self.lanes.finish().await;
        if self.orchestrator.instance().is_shared() {
            self.orchestrator.let_go_chats(T::PLATFORM).await;
        }
    }
}

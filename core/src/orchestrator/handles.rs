//! The orchestrator by who calls it. Each caller holds the handle that says what it may
//! do, and nothing more:
//! - [`ForAdapters`]: a platform adapter — keep what it received, hand a kept message to
//!   its turn, read a press against the pending options, its admin place's actions and
//!   replies, the leases of what only one instance may run (a poller, a shard);
//! - [`ForPeople`]: the people in the loop outside a chat — the browser console's actions
//!   and replies, idle holds handed back;
//! - [`ForInstances`]: one instance among several — leases, who holds a chat.
//!
//! The turn's own steps are the orchestrator's private methods (`turn.rs` and the files it
//! names); the builder, the flows and the store stay on [`Orchestrator`] for the code that
//! wires an instance together (`kaiwa::Kaiwa`, `kaiwa bench`).

use super::{ActivePlace, AdminOutcome, Instance, Orchestrator, OrchestratorError, Outbox};
use crate::admin::{AdminAction, NoticeRef};
use crate::flow::FlowRegistry;
use crate::message::{Incoming, OptionsRequest, Platform, SessionKey};
use crate::orchestrator::TurnReport;
use crate::store::console::ConsoleAdmin;
use std::sync::Arc;
use std::time::Duration;

impl Orchestrator {
    /// What a platform adapter may do.
    pub fn for_adapters(self: &Arc<Self>) -> ForAdapters {
        ForAdapters(self.clone())
    }

    /// What the people in the loop may do from outside a chat.
    pub fn for_people(self: &Arc<Self>) -> ForPeople {
        ForPeople(self.clone())
    }

    /// What an instance among several does to share the work.
    pub fn for_instances(self: &Arc<Self>) -> ForInstances {
        ForInstances(self.clone())
    }
}

/// What a platform adapter may do; see the module's documentation.
#[derive(Clone)]
pub struct ForAdapters(Arc<Orchestrator>);

impl ForAdapters {
    /// The flows, for the command menu a platform shows.
    pub fn flows(&self) -> &FlowRegistry {
        self.0.flows()
    }

    /// Whether `/name` is a command of Kaiwa's (a host's are left to it).
    pub fn knows_command(&self, name: &str) -> bool {
        self.0.knows_command(name)
    }

    /// How many messages may wait behind a session's running turn.
    pub fn max_waiting(&self) -> usize {
        self.0.max_waiting()
    }

    /// The adapter's one outbox: decisions and a person's replies reach users outside their
    /// turns through it.
    pub fn register_outbox(&self, platform: Platform, outbox: Arc<dyn Outbox>) {
        self.0.register_outbox(platform, outbox);
    }

    /// This instance: whether it shares its database with others.
    pub fn instance(&self) -> &Instance {
        self.0.instance()
    }

    /// Keeps received messages in the inbox, committed, before the platform is told.
    pub async fn keep(&self, messages: &[Incoming]) -> Result<(), OrchestratorError> {
        self.0.keep(messages).await
    }

    /// Keeps a received message without waiting for the commit.
    pub async fn accept(&self, incoming: &Incoming) {
        self.0.accept(incoming).await;
    }

    /// A kept message that gets no turn: out of the inbox.
    pub async fn release(&self, incoming: &Incoming) {
        self.0.release(incoming).await;
    }

    /// At start: the last run's undelivered replies sent, its unanswered messages returned.
    pub async fn left_by_last_run(&self, platform: Platform, outbox: &dyn Outbox) -> Vec<Incoming> {
        self.0.left_by_last_run(platform, outbox).await
    }

    /// A kept message's turn; its inbox entry cleared once done.
    pub async fn handle_kept(
        &self,
        incoming: Incoming,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        self.0.handle_kept(incoming, outbox).await
    }

    /// One message's turn (the console, which keeps nothing in the inbox).
    pub async fn handle(
        &self,
        incoming: Incoming,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        self.0.handle(incoming, outbox).await
    }

    /// The options pending in `key`'s session if a press of `request_id` answers them.
    pub async fn pending_options(
        &self,
        key: &SessionKey,
        request_id: &str,
    ) -> Result<Option<OptionsRequest>, OrchestratorError> {
        self.0.pending_options(key, request_id).await
    }

    /// The places with a conversation in progress, most recent first (a catch-up).
    pub async fn active_places(
        &self,
        platform: Platform,
        window: Duration,
        limit: usize,
    ) -> Result<Vec<ActivePlace>, OrchestratorError> {
        self.0.active_places(platform, window, limit).await
    }

    /// An admin's press (or command) in the admin place.
    pub async fn admin_action(
        &self,
        by: &SessionKey,
        name: &str,
        action: AdminAction,
    ) -> AdminOutcome {
        self.0.admin_action(by, name, action).await
    }

    /// A person's reply in the admin place to a conversation they hold.
    pub async fn staff_reply(
        &self,
        by: &SessionKey,
        name: &str,
        replying_to: &NoticeRef,
        message_id: &str,
        text: Option<&str>,
    ) -> Option<String> {
        self.0
            .staff_reply(by, name, replying_to, message_id, text)
            .await
    }

    /// Whether `incoming` was written in a place a person holds (it is theirs to answer).
    pub async fn staff_in_place(&self, incoming: &Incoming) -> bool {
        self.0.staff_in_place(incoming).await
    }

    /// Among several instances: the messages of the chats this one holds or takes.
    pub async fn claim(&self, platform: Platform, outbox: &dyn Outbox) -> Vec<Incoming> {
        self.0.claim(platform, outbox).await
    }

    /// Whether this instance holds `chat` now (renewing its lease when due).
    pub async fn holds_chat(&self, platform: Platform, chat: &str) -> bool {
        self.0.holds_chat(platform, chat).await
    }

    /// Lets go of the chats of `platform` this instance holds (a clean stop).
    pub async fn let_go_chats(&self, platform: Platform) {
        self.0.let_go_chats(platform).await;
    }

    /// Takes or renews the lease `name` (a poller, a shard).
    pub async fn hold(&self, name: &str) -> bool {
        self.0.hold(name).await
    }

    /// Lets go of the lease `name`.
    pub async fn let_go(&self, name: &str) {
        self.0.let_go(name).await;
    }
}

/// What the people in the loop may do from outside a chat; see the module's documentation.
#[derive(Clone)]
pub struct ForPeople(Arc<Orchestrator>);

impl ForPeople {
    /// The console's public address, for the links the admin commands hand out.
    pub fn serve_console_at(&self, public_url: &str) {
        self.0.serve_console_at(public_url);
    }

    /// Whether `admin` (signed in to the console) is still on the admin list.
    pub fn is_console_admin(&self, admin: &ConsoleAdmin) -> bool {
        self.0.is_console_admin(admin)
    }

    /// The admin list as a fingerprint: a session signed in under another list ends.
    pub fn admins_fingerprint(&self) -> String {
        self.0.admins_fingerprint()
    }

    /// A console admin's decision or hold.
    pub async fn console_action(&self, admin: &ConsoleAdmin, action: AdminAction) -> AdminOutcome {
        self.0.console_action(admin, action).await
    }

    /// A console admin's reply to the user of a session they hold.
    pub async fn console_reply(
        &self,
        admin: &ConsoleAdmin,
        session_id: i64,
        nonce: &str,
        text: &str,
    ) -> Option<String> {
        self.0.console_reply(admin, session_id, nonce, text).await
    }

    /// Holds idle longer than `idle` handed back to the bot; how many.
    pub async fn hand_back_idle(&self, idle: Duration) -> usize {
        self.0.hand_back_idle(idle).await
    }
}

/// What an instance among several does to share the work; see the module's documentation.
#[derive(Clone)]
pub struct ForInstances(Arc<Orchestrator>);

impl ForInstances {
    /// Takes or renews the lease `name` (the scheduled jobs, a poller).
    pub async fn hold(&self, name: &str) -> bool {
        self.0.hold(name).await
    }

    /// Lets go of the lease `name`.
    pub async fn let_go(&self, name: &str) {
        self.0.let_go(name).await;
    }

    /// Takes `chat` for this instance if free (or its holder's lease expired).
    pub async fn hold_chat(&self, platform: Platform, chat: &str) -> bool {
        self.0.hold_chat(platform, chat).await
    }
}

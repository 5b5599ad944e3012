//! The gateway's lifecycle and what arrives on it, to the handler of its kind: messages
//! ([`super::messages`]), component presses and slash commands ([`super::interactions`]);
//! the turns they become run through the shared intake ([`super::work`]).

use super::DiscordConfig;
use super::api::DiscordApi;
use super::places::{self, Parents, Place};
use super::work::Intake;
use crate::AdapterHealth;
use async_trait::async_trait;
use kaiwa_core::orchestrator::ForAdapters;
use serenity::all::{ChannelId, Context, EventHandler, Interaction, Message, Ready};
use std::sync::Arc;

pub(super) struct Handler {
    pub(super) api: DiscordApi,
    pub(super) orchestrator: ForAdapters,
    pub(super) config: DiscordConfig,
    pub(super) health: Arc<AdapterHealth>,
    /// thread id → parent channel id (looked up once per thread)
    pub(super) parents: Parents,
    /// What was received, to its session's lane ([`crate::intake`]).
    pub(super) intake: Arc<Intake>,
    /// Beside a host bot's handlers: other components and commands are left to them.
    pub(super) mounted: bool,
    /// A shard was ready already: what is done once per process (the last run's leftovers,
    /// the slash commands) is done.
    pub(super) started: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl EventHandler for Handler {
    async fn ready(&self, _ctx: Context, ready: Ready) {
        self.health.ok();
        let shard = ready.shard.map(|s| (s.id.0, s.total));
        tracing::info!(bot = %ready.user.name, ?shard, "Discord connected");
        self.api.http.set_application_id(ready.application.id);
        let first = !self.started.swap(true, std::sync::atomic::Ordering::SeqCst);
        // what the last run kept and did not answer goes first in its session's lane
        // (several instances: the claims hand out what any instance left)
        if first && !self.orchestrator.instance().is_shared() {
            self.intake.take_leftovers().await;
        }
        self.catch_up(shard).await;
        if first {
            let commands = self.orchestrator.flows().menu_commands();
            match self.api.set_commands(&commands).await {
                Ok(written) => tracing::debug!(written, "Discord slash commands registered"),
                Err(e) => {
                    tracing::warn!(error = %e, "could not register the Discord slash commands")
                }
            }
        }
    }

    async fn resume(&self, _ctx: Context, _: serenity::all::ResumedEvent) {
        self.health.ok();
        tracing::info!("Discord session resumed");
    }

    async fn message(&self, _ctx: Context, msg: Message) {
        self.on_message(msg).await;
    }

    async fn interaction_create(&self, ctx: Context, interaction: Interaction) {
        match interaction {
            Interaction::Component(component) => self.on_component(&ctx, component).await,
            Interaction::Command(command) => self.on_command(&ctx, command).await,
            _ => {}
        }
    }
}

impl Handler {
    /// The flow whose channel `channel` is, if any ([`places::flow_of_channel`]).
    pub(super) fn flow_of_channel(&self, channel: u64) -> Option<&'static str> {
        places::flow_of_channel(&self.config, channel)
    }

    /// Where a message in `channel` belongs ([`places::place_of`]).
    pub(super) async fn place_of(&self, channel: ChannelId, dm: bool) -> Option<Place> {
        places::place_of(&self.config, (&self.parents, &self.api), channel, dm).await
    }
}

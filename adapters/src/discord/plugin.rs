//! Kaiwa beside a host bot's own serenity event handlers: [`DiscordPlugin`].

use super::api::DiscordApi;
use super::gateway::Handler;
use super::{DiscordConfig, api};
use crate::AdapterHealth;
use async_trait::async_trait;
use kaiwa_core::orchestrator::ForAdapters;
use serenity::all::{ChannelId, Context, EventHandler, Interaction, Message, Ready};
use std::sync::Arc;

/// Kaiwa beside a host bot's own serenity [`EventHandler`]s: the host builds and runs the
/// client (and resumes its gateway); this handler takes only what is Kaiwa's and stays
/// silent on the rest:
///
/// - messages in its help-desk and reading channels, the threads it opened there, direct
///   messages (its DM flow) and its admin channel;
/// - its own components (custom ids in [`NAMESPACE`](super::NAMESPACE)) and its own slash commands, which it
///   registers one by one at `ready` (the host's commands stay).
///
/// A message it takes is in the store's inbox before the event handler returns; its turn runs
/// in the session's lane afterwards.
///
/// ```no_run
/// # async fn host(kaiwa: kaiwa_adapters::discord::DiscordPlugin, token: &str) -> serenity::Result<()> {
/// use kaiwa_adapters::discord::INTENTS;
/// use serenity::all::{ClientBuilder, Context, EventHandler, GatewayIntents, Message};
///
/// struct Host;
/// #[serenity::async_trait]
/// impl EventHandler for Host {
///     async fn message(&self, _ctx: Context, _msg: Message) { /* the host's own */ }
/// }
///
/// let mut client = ClientBuilder::new(token, INTENTS | GatewayIntents::GUILDS)
///     .event_handler(Host)
///     .event_handler(kaiwa.clone())
///     .await?;
/// client.start().await
/// # }
/// ```
#[derive(Clone)]
pub struct DiscordPlugin {
    handler: Arc<Handler>,
}

impl DiscordPlugin {
    /// Kaiwa's handler for a host's client. `config.token` is the bot's token (the same as
    /// the host's client); Kaiwa sends through its own REST client ([`DiscordApi`]).
    pub fn new(api: DiscordApi, config: DiscordConfig, orchestrator: ForAdapters) -> Self {
        let health = Arc::new(AdapterHealth::new("discord"));
        DiscordPlugin {
            handler: Arc::new(Handler::new(api, config, orchestrator, health, true)),
        }
    }

    /// Whether a message in `channel` (`dm`: a direct message channel) is Kaiwa's: a
    /// help-desk or reading channel or a thread in one, a DM (unless `dms` is off), or the
    /// admin channel. A host
    /// answers its own text commands only where this is `false`.
    pub async fn owns(&self, channel: ChannelId, dm: bool) -> bool {
        let handler = &self.handler;
        (dm && handler.config.dms)
            || handler.config.admin_channel_id == Some(channel.get())
            || handler.flow_of_channel(channel.get()).is_some()
            || handler.place_of(channel, false).await.is_some()
    }

    /// Kaiwa's slash commands, for a host that registers its application's commands in one
    /// bulk overwrite of its own (which would delete those Kaiwa registered): put these in
    /// its list. Kaiwa registers them itself at `ready` otherwise.
    pub fn commands(&self) -> Vec<serenity::all::CreateCommand> {
        let commands = self.handler.orchestrator.flows().menu_commands();
        commands.iter().map(api::command_builder).collect()
    }

    /// Connected or not, for a host's health check.
    pub fn health(&self) -> Arc<AdapterHealth> {
        self.handler.health.clone()
    }

    /// Waits for Kaiwa's queued and running turns (a host calls it when it stops).
    pub async fn finish(&self) {
        self.handler.intake.finish().await;
        self.handler.health.set_stopped();
    }
}

#[async_trait]
impl EventHandler for DiscordPlugin {
    async fn ready(&self, ctx: Context, ready: Ready) {
        self.handler.ready(ctx, ready).await;
    }

    async fn resume(&self, ctx: Context, resumed: serenity::all::ResumedEvent) {
        self.handler.resume(ctx, resumed).await;
    }

    async fn message(&self, ctx: Context, msg: Message) {
        self.handler.message(ctx, msg).await;
    }

    async fn interaction_create(&self, ctx: Context, interaction: Interaction) {
        self.handler.interaction_create(ctx, interaction).await;
    }
}

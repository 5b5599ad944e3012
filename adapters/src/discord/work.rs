//! Discord's work in the shared intake ([`crate::intake`]): a message kept in the inbox,
//! its turn in its session's lane, and how a refused one is answered.

use super::api::DiscordApi;
use super::outbox::DiscordOutbox;
use super::outbox::channel_of;
use crate::intake::Turns;
use crate::interaction::SAVE_FAILED;
use crate::split::truncate;
use async_trait::async_trait;
use kaiwa_core::message::{Body, Incoming, Platform, SessionKey};
use kaiwa_core::orchestrator::{ForAdapters, Outbox, QUEUE_FULL};
use serenity::all::{ChannelId, CommandInteraction, EditInteractionResponse, Http};
use std::sync::Arc;

/// The shared intake over Discord's turns.
pub(super) type Intake = crate::intake::Intake<DiscordTurns>;

/// A message kept in the inbox, waiting for its turn in its session's lane.
pub(super) struct Work {
    pub(super) incoming: Incoming,
    pub(super) reply_to: ChannelId,
    /// A slash command's interaction, answered once the turn is done.
    pub(super) command: Option<(Box<CommandInteraction>, Arc<Http>)>,
}

impl Work {
    /// Its session's lane: the session's key.
    pub(super) fn lane(&self) -> SessionKey {
        self.incoming.key()
    }
}

/// What a Discord turn needs: the REST client and the adapter's one outbox.
pub(super) struct DiscordTurns {
    pub(super) api: DiscordApi,
    /// Also the orchestrator's, for replies outside turns.
    pub(super) outbox: Arc<DiscordOutbox>,
    pub(super) orchestrator: ForAdapters,
}

/// Discord's work in the shared intake: a guild's events all reach the instance running
/// its shard, so a message of a chat this instance holds goes straight to its lane.
#[async_trait]
impl Turns for DiscordTurns {
    type Work = Work;
    type Lane = SessionKey;

    const PLATFORM: Platform = Platform::Discord;
    const ONE_RECEIVER_PER_CHAT: bool = true;

    fn outbox(&self) -> &dyn Outbox {
        self.outbox.as_ref()
    }

    fn kept(&self, incoming: Incoming) -> Option<(SessionKey, Work)> {
        let reply_to = channel_of(&incoming.chat, &incoming.thread)?;
        let work = Work {
            incoming,
            reply_to,
            command: None,
        };
        Some((work.lane(), work))
    }

    fn entry(work: &Work) -> Option<&Incoming> {
        Some(&work.incoming)
    }

    async fn run(&self, work: Work) {
        let Work {
            incoming,
            reply_to,
            command,
        } = work;
        let shown = shown_command(&incoming.body);
        if let Err(error) = self
            .orchestrator
            .handle_kept(incoming, self.outbox.as_ref())
            .await
        {
            tracing::error!(%error, channel = %reply_to, "turn not stored");
            if let Err(e) = self.api.send_text(reply_to, SAVE_FAILED, Vec::new()).await {
                tracing::warn!(error = %e, "could not tell the user");
            }
        }
        if let Some(command) = command {
            finish_command(command, &shown).await;
        }
    }

    /// Answered once per burst (a slash command always: its interaction waits for an
    /// answer).
    async fn refuse(&self, work: Work, tell: bool) {
        match work.command {
            Some((command, http)) => {
                let busy = EditInteractionResponse::new().content(QUEUE_FULL);
                if let Err(e) = command.edit_response(&http, busy).await {
                    tracing::warn!(error = %e, "could not answer a slash command");
                }
            }
            None if tell => {
                if let Err(e) = self
                    .api
                    .send_text(work.reply_to, QUEUE_FULL, Vec::new())
                    .await
                {
                    tracing::warn!(error = %e, "could not say the queue is full");
                }
            }
            None => {}
        }
    }

    /// A slash command's interaction is answered now: the turn runs at another instance.
    async fn left_for_holder(&self, work: Work) {
        if let Some(command) = work.command {
            finish_command(command, &shown_command(&work.incoming.body)).await;
        }
    }
}

/// How a slash command's message shows it (`/ask how do I …`); other messages: nothing.
pub(super) fn shown_command(body: &Body) -> String {
    match body {
        Body::Command { name, args } => format!("/{name} {args}"),
        _ => String::new(),
    }
}

/// A slash command's deferred answer replaced with the command as given: its turn's
/// replies are messages in the channel.
pub(super) async fn finish_command(command: (Box<CommandInteraction>, Arc<Http>), shown: &str) {
    let (command, http) = command;
    let done = EditInteractionResponse::new().content(truncate(shown.trim(), 200));
    if let Err(e) = command.edit_response(&http, done).await {
        tracing::warn!(error = %e, "could not finish a slash command");
    }
}

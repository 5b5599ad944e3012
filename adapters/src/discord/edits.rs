//! A reply shown while it is written ([`DiscordStreamer`]): its first sentence is posted
//! with a Stop button, edited in at most once a second, and the final reply is edited into
//! it with the button removed ([`DiscordOutbox`]'s delivery). A press of Stop ends the
//! model's answer where it is. Intermediate posts and edits are one try each: a 429 skips
//! them until its wait is over; the final edit is made with the usual retries.

use super::MESSAGE_LIMIT;
use super::api::{DiscordApi, delivery_error};
use crate::live_reply::{EDIT_EVERY, Streams, has_sentence};
use crate::split::truncate;
use async_trait::async_trait;
use kaiwa_core::admin::DeliveryError;
use kaiwa_core::llm::stream::Tap;
use kaiwa_core::message::SessionKey;
use kaiwa_core::orchestrator::Streamer;
use serenity::all::{ButtonStyle, ChannelId, CreateActionRow, CreateButton, CreateMessage};
use serenity::all::{EditMessage, MessageId};
use std::sync::Arc;
use std::time::Duration;

/// The Stop button's custom id.
pub const STOP_ID: &str = "kaiwa|stop";

pub(super) struct DiscordStreamer {
    pub(super) api: DiscordApi,
    pub(super) streams: Arc<Streams>,
    pub(super) key: SessionKey,
    pub(super) channel: ChannelId,
    pub(super) tap: Arc<Tap>,
    pub(super) message: Option<MessageId>,
}

/// The Stop button under a reply being written.
fn stop_row(lang_ja: bool) -> Vec<CreateActionRow> {
    vec![CreateActionRow::Buttons(vec![
        CreateButton::new(STOP_ID)
            .label(if lang_ja { "停止" } else { "Stop" })
            .style(ButtonStyle::Secondary),
    ])]
}

#[async_trait]
impl Streamer for DiscordStreamer {
    fn interval(&self) -> Duration {
        EDIT_EVERY
    }

    async fn show(&mut self, text: &str) -> Result<bool, DeliveryError> {
        let content = truncate(text, MESSAGE_LIMIT);
        let http = self.api.http.clone();
        match self.message {
            None => {
                if !has_sentence(text) {
                    return Ok(false);
                }
                let builder = CreateMessage::new()
                    .content(content)
                    .components(stop_row(kaiwa_core::i18n::has_japanese(text)));
                let sent = self
                    .channel
                    .send_message(&http, builder)
                    .await
                    .map_err(delivery_error)?;
                self.message = Some(sent.id);
                self.streams.set_shown(&self.key, sent.id.get());
                self.streams
                    .watch_stop(self.channel.get(), sent.id.get(), &self.tap);
                Ok(true)
            }
            Some(message) => {
                self.channel
                    .edit_message(&http, message, EditMessage::new().content(content))
                    .await
                    .map_err(delivery_error)?;
                self.streams.edited(&self.key);
                Ok(true)
            }
        }
    }

    async fn finish(self: Box<Self>) {
        if let Some(message) = self.message {
            self.streams.forget_stop(self.channel.get(), message.get());
        }
        // shown and not replaced by the reply (it was no text): removed
        if let Some(message) = self
            .streams
            .take_shown(&self.key)
            .and_then(|s| s.message.parse::<u64>().ok())
            .filter(|m| *m != 0)
        {
            let channel = self.channel;
            let deleted = self
                .api
                .call("deleteMessage", |http| async move {
                    channel.delete_message(&http, MessageId::new(message)).await
                })
                .await;
            if let Err(e) = deleted {
                tracing::debug!(error = %e, "could not remove a streamed message");
            }
        }
    }
}

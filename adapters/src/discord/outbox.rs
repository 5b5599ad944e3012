//! Where replies and admin notices go: [`DiscordOutbox`] renders a turn's [`Outgoing`]s in
//! the session's channel or thread, [`DiscordAdminSink`] posts embeds to the admin channel.

use super::MESSAGE_LIMIT;
use super::api::{DiscordApi, delivery_error};
use super::components::components;
use crate::split::{MAX_PIECES, split_capped, truncate};
use async_trait::async_trait;
use kaiwa_core::admin::{AdminNotice, AdminSink, DeliveryError, NoticeRef};
use kaiwa_core::message::{Outgoing, Platform, SessionKey};
use kaiwa_core::orchestrator::Outbox;
use serenity::all::{
    ChannelId, CreateActionRow, CreateButton, CreateEmbed, CreateMessage, Message, MessageId,
};
use std::sync::Arc;

/// Where a conversation's replies go: its thread, or its channel (`None`: not a channel id).
pub(super) fn channel_of(chat: &str, thread: &str) -> Option<ChannelId> {
    let id = if thread.is_empty() { chat } else { thread };
    id.parse::<u64>()
        .ok()
        .filter(|id| *id != 0)
        .map(ChannelId::new)
}

/// Where a session's replies go.
pub(super) fn target(key: &SessionKey) -> Result<ChannelId, DeliveryError> {
    channel_of(&key.chat, &key.thread).ok_or_else(|| {
        DeliveryError::Rejected(format!(
            "not a Discord channel: {}/{}",
            key.chat, key.thread
        ))
    })
}

/// Renders replies in a channel or thread.
pub struct DiscordOutbox {
    api: DiscordApi,
    streams: Arc<crate::live_reply::Streams>,
}

impl DiscordOutbox {
    pub fn new(api: DiscordApi) -> Self {
        DiscordOutbox {
            api,
            streams: Default::default(),
        }
    }

    /// The replies being streamed (a Stop press is given to them).
    pub fn streams(&self) -> &Arc<crate::live_reply::Streams> {
        &self.streams
    }

    /// A reply's text: edited into the message that showed it being written (its Stop
    /// button removed), if there is one; else sent.
    async fn send_reply(
        &self,
        key: &SessionKey,
        channel: ChannelId,
        text: &str,
    ) -> Result<Option<Message>, serenity::Error> {
        let Some((shown, message)) = self
            .streams
            .take_shown(key)
            .and_then(|s| s.message.parse::<u64>().ok().map(|m| (s, m)))
            .filter(|(_, m)| *m != 0)
        else {
            return self.api.send_text(channel, text, Vec::new()).await;
        };
        let message = serenity::all::MessageId::new(message);
        shown.wait_to_edit().await;
        let pieces = split_capped(text, MESSAGE_LIMIT, MAX_PIECES, |_| 1);
        let (first, rest) = pieces
            .split_first()
            .map_or((String::new(), &[][..]), |(f, r)| (f.clone(), r));
        let edited = self
            .api
            .call("editMessage", |http| {
                let edit = serenity::all::EditMessage::new()
                    .content(first.clone())
                    .components(Vec::new());
                async move { channel.edit_message(&http, message, edit).await }
            })
            .await;
        let mut last = match edited {
            Ok(m) => Some(m),
            // the streamed message is gone (deleted by someone): the reply goes anew
            Err(e) if is_refused(&e) => return self.api.send_text(channel, text, Vec::new()).await,
            Err(e) => return Err(e),
        };
        for piece in rest {
            last = self
                .api
                .send_text(channel, piece, Vec::new())
                .await?
                .or(last);
        }
        Ok(last)
    }
}

#[async_trait]
impl Outbox for DiscordOutbox {
    async fn deliver(&self, key: &SessionKey, items: &[Outgoing]) -> Result<(), DeliveryError> {
        let channel = target(key)?;
        for item in items {
            let sent = match item {
                Outgoing::Text { text } => self.send_reply(key, channel, text).await,
                Outgoing::Options(request) => {
                    self.api
                        .send_text(channel, &request.prompt, components(request, false))
                        .await
                }
                Outgoing::StartThread { title } => {
                    self.api
                        .send_text(channel, &format!("**{title}**"), Vec::new())
                        .await
                }
                Outgoing::Typing => self.api.typing(channel).await.map(|()| None),
            };
            sent.map_err(delivery_error)?;
        }
        Ok(())
    }

    async fn deliver_privately(
        &self,
        key: &SessionKey,
        items: &[Outgoing],
    ) -> Result<bool, DeliveryError> {
        let Some(user) = key.user.parse::<u64>().ok().filter(|u| *u != 0) else {
            return Ok(false);
        };
        let user = serenity::all::UserId::new(user);
        let dm = self
            .api
            .call("createDm", |http| async move {
                user.create_dm_channel(&http).await
            })
            .await;
        let channel = match dm {
            Ok(channel) => channel.id,
            Err(e) if is_refused(&e) => return Ok(false),
            Err(e) => return Err(delivery_error(e)),
        };
        for item in items {
            let Some(text) = item.transcript_text() else {
                continue;
            };
            match self.api.send_text(channel, &text, Vec::new()).await {
                Ok(_) => {}
                // DMs closed to the bot (Discord 50007)
                Err(e) if is_refused(&e) => return Ok(false),
                Err(e) => return Err(delivery_error(e)),
            }
        }
        Ok(true)
    }

    fn streamer(
        &self,
        key: &SessionKey,
        tap: &Arc<kaiwa_core::llm::stream::Tap>,
    ) -> Option<Box<dyn kaiwa_core::orchestrator::Streamer>> {
        let channel = target(key).ok()?;
        Some(Box::new(super::edits::DiscordStreamer {
            api: self.api.clone(),
            streams: self.streams.clone(),
            key: key.clone(),
            channel,
            tap: tap.clone(),
            message: None,
        }))
    }
}

/// A 4xx: the user cannot be reached that way (DMs closed, unknown user).
fn is_refused(e: &serenity::Error) -> bool {
    matches!(e, serenity::Error::Http(serenity::all::HttpError::UnsuccessfulRequest(r)) if r.status_code.is_client_error() && r.status_code.as_u16() != 429)
}

/// Audit summaries and handoffs as embeds in the admin channel.
pub struct DiscordAdminSink {
    api: DiscordApi,
    channel: ChannelId,
    /// The admins' language: the buttons' labels.
    language: String,
}

impl DiscordAdminSink {
    pub fn new(api: DiscordApi, admin_channel_id: u64) -> Self {
        DiscordAdminSink {
            api,
            channel: ChannelId::new(admin_channel_id.max(1)),
            language: "en".into(),
        }
    }

    /// Labels the notices' buttons in `language` (`en`, `ja`).
    pub fn with_language(mut self, language: &str) -> Self {
        self.language = language.to_string();
        self
    }
}

/// The embed of an admin notice (title, labelled fields, the body as description).
pub fn notice_embed(notice: &AdminNotice) -> CreateEmbed {
    let color = match notice.kind.as_str() {
        "handoff" => 0xE67E22,
        _ if notice
            .fields
            .iter()
            .any(|(k, v)| k == "Audit" && v == "FAILED") =>
        {
            0xC0392B
        }
        _ => 0x27AE60,
    };
    let mut embed = CreateEmbed::new()
        .title(truncate(
            &format!("[{}] {}", notice.kind, notice.title),
            256,
        ))
        .description(truncate(&notice.body, 4000))
        .color(color);
    for (label, value) in notice.fields.iter().take(25) {
        embed = embed.field(truncate(label, 256), truncate(value, 1024), true);
    }
    embed
}

#[async_trait]
impl AdminSink for DiscordAdminSink {
    /// The notice as an embed with its buttons in the admin channel, as a reply to the
    /// message of `replying_to` there; returns where it landed.
    async fn post(
        &self,
        notice: &AdminNotice,
        replying_to: &[NoticeRef],
    ) -> Result<Vec<NoticeRef>, DeliveryError> {
        let channel = self.channel;
        let embed = notice_embed(notice);
        let buttons: Vec<CreateButton> = notice
            .buttons(&self.language)
            .into_iter()
            .map(|(label, id)| CreateButton::new(id).label(label))
            .collect();
        let rows = if buttons.is_empty() {
            Vec::new()
        } else {
            vec![CreateActionRow::Buttons(buttons)]
        };
        let reply_to = replying_to
            .iter()
            .find(|r| r.platform == Platform::Discord && r.chat == channel.get().to_string())
            .and_then(|r| r.message_id.parse::<u64>().ok())
            .filter(|id| *id > 0)
            .map(MessageId::new);
        let sent = self
            .api
            .call("createMessage", |http| {
                let mut builder = CreateMessage::new()
                    .embed(embed.clone())
                    .components(rows.clone());
                if let Some(message) = reply_to {
                    builder = builder.reference_message((channel, message));
                }
                async move { channel.send_message(&http, builder).await }
            })
            .await
            .map_err(delivery_error)?;
        Ok(vec![NoticeRef {
            platform: Platform::Discord,
            chat: channel.get().to_string(),
            message_id: sent.id.get().to_string(),
        }])
    }
}

//! What the adapter sends: messages (HTML, split to Telegram's limit, at most
//! [`MAX_PIECES`]), typing, callback answers, keyboard edits, the command menu; and the
//! [`Outbox`] and [`AdminSink`] on top of them.

use super::api::{CallError, Repeat, TelegramApi, delivery_error};
use super::drafts::TelegramStreamer;
use super::{MESSAGE_LIMIT, Place};
pub use crate::markup::escape_html;
use crate::split::{MAX_PIECES, split_capped, truncate};
use async_trait::async_trait;
use kaiwa_core::admin::{AdminNotice, AdminSink, DeliveryError, NoticeRef};
use kaiwa_core::flow::CommandInfo;
use kaiwa_core::message::{Outgoing, Platform, SessionKey};
use kaiwa_core::orchestrator::Outbox;
use serde::Serialize;
use serde::de::IgnoredAny;
use teloxide::types::{
    BotCommand, ChatId, InlineKeyboardButton, InlineKeyboardMarkup, Me, MessageId,
};

#[derive(Serialize)]
struct SendMessage<'a> {
    chat_id: i64,
    text: &'a str,
    parse_mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_thread_id: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply_markup: Option<&'a InlineKeyboardMarkup>,
}

impl TelegramApi {
    /// Who the bot is.
    pub async fn get_me(&self) -> Result<Me, CallError> {
        self.call("getMe", &serde_json::json!({}), Repeat::Safe)
            .await
    }

    /// Sends `text` (plain text; escaped here) split to Telegram's limit; the keyboard, if
    /// any, goes on the last piece. A piece whose answer was lost counts as sent (it most
    /// likely arrived; sending it again would show it twice).
    pub async fn send_text(
        &self,
        place: Place,
        text: &str,
        markup: Option<InlineKeyboardMarkup>,
    ) -> Result<(), CallError> {
        let pieces = split_capped(text, MESSAGE_LIMIT, MAX_PIECES, html_cost);
        let last = pieces.len().saturating_sub(1);
        for (i, piece) in pieces.iter().enumerate() {
            let html = crate::markup::telegram_html(piece);
            let request = SendMessage {
                chat_id: place.chat.0,
                text: &html,
                parse_mode: "HTML",
                message_thread_id: place.topic.map(|t| t.0.0),
                reply_markup: markup.as_ref().filter(|_| i == last),
            };
            match self
                .call::<IgnoredAny>("sendMessage", &request, Repeat::Once)
                .await
            {
                Ok(_) => {}
                Err(CallError::Unknown(e)) => {
                    tracing::warn!(error = %e, "a message's answer was lost; not sending it again");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A sign of life while a turn works: in a private chat the native "Thinking…" draft
    /// (`sendMessageDraft` with empty text, Bot API 9.5+; the final message replaces it),
    /// elsewhere — or where the Bot API server has no drafts — the typing action.
    pub(super) async fn working(&self, place: Place) -> Result<(), CallError> {
        let private = place.chat.0 > 0 && place.topic.is_none();
        if private && !self.drafts_unsupported() {
            let request = serde_json::json!({
                "chat_id": place.chat.0,
                "draft_id": place.draft_id(),
                "text": "",
            });
            match self
                .call::<IgnoredAny>("sendMessageDraft", &request, Repeat::Safe)
                .await
            {
                Ok(_) => return Ok(()),
                // an older or self-hosted Bot API server: typing from now on
                Err(CallError::Api {
                    status: 400 | 404, ..
                }) => self.no_drafts(),
                Err(e) => return Err(e),
            }
        }
        self.typing(place).await
    }

    pub(super) async fn typing(&self, place: Place) -> Result<(), CallError> {
        let mut request = serde_json::json!({"chat_id": place.chat.0, "action": "typing"});
        if let Some(topic) = place.topic {
            request["message_thread_id"] = topic.0.0.into();
        }
        self.call::<IgnoredAny>("sendChatAction", &request, Repeat::Safe)
            .await
            .map(|_| ())
    }

    pub(super) async fn answer_callback(
        &self,
        id: &str,
        notice: Option<&str>,
    ) -> Result<(), CallError> {
        let request = match notice {
            Some(text) => {
                serde_json::json!({"callback_query_id": id, "text": text, "show_alert": true})
            }
            None => serde_json::json!({"callback_query_id": id}),
        };
        self.call::<IgnoredAny>("answerCallbackQuery", &request, Repeat::Safe)
            .await
            .map(|_| ())
    }

    /// Replaces an options message with its prompt and the choice, removing the keyboard.
    pub(super) async fn show_choice(
        &self,
        chat: ChatId,
        message: MessageId,
        text: &str,
    ) -> Result<(), CallError> {
        let html = escape_html(&truncate(text, MESSAGE_LIMIT - 16));
        let request = serde_json::json!({
            "chat_id": chat.0,
            "message_id": message.0,
            "text": html,
            "parse_mode": "HTML",
        });
        not_modified_is_ok(
            self.call::<IgnoredAny>("editMessageText", &request, Repeat::Safe)
                .await,
        )
    }

    pub(super) async fn update_keyboard(
        &self,
        chat: ChatId,
        message: MessageId,
        markup: &InlineKeyboardMarkup,
    ) -> Result<(), CallError> {
        let request = serde_json::json!({
            "chat_id": chat.0,
            "message_id": message.0,
            "reply_markup": markup,
        });
        not_modified_is_ok(
            self.call::<IgnoredAny>("editMessageReplyMarkup", &request, Repeat::Safe)
                .await,
        )
    }

    /// Registers Kaiwa's command menu, in English and in Japanese. `keep_others`: a host
    /// bot's commands stay (the lists are read first, and only Kaiwa's names are replaced);
    /// otherwise the menu is Kaiwa's alone.
    pub async fn set_commands(
        &self,
        commands: &[CommandInfo],
        keep_others: bool,
    ) -> Result<(), CallError> {
        /// Telegram's limit on a command menu.
        const MAX_COMMANDS: usize = 100;
        for ja in [false, true] {
            let mut scope = serde_json::json!({});
            if ja {
                scope["language_code"] = "ja".into();
            }
            let mut list: Vec<BotCommand> = Vec::new();
            if keep_others {
                let existing: Vec<BotCommand> =
                    self.call("getMyCommands", &scope, Repeat::Safe).await?;
                list.extend(
                    existing
                        .into_iter()
                        .filter(|c| !commands.iter().any(|k| k.name == c.command)),
                );
            }
            list.extend(commands.iter().map(|c| {
                let d = if ja {
                    c.description_ja
                } else {
                    c.description_en
                };
                BotCommand::new(c.name, d)
            }));
            list.truncate(MAX_COMMANDS);
            let mut request = scope;
            request["commands"] = serde_json::to_value(&list).unwrap_or_default();
            self.call::<IgnoredAny>("setMyCommands", &request, Repeat::Safe)
                .await?;
        }
        Ok(())
    }
}

fn not_modified_is_ok(result: Result<IgnoredAny, CallError>) -> Result<(), CallError> {
    match result {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_modified() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Telegram counts the text after entity parsing, in UTF-16 units.
fn html_cost(c: char) -> usize {
    c.len_utf16()
}

/// Renders replies in a chat.
pub struct TelegramOutbox {
    api: TelegramApi,
    streams: std::sync::Arc<crate::live_reply::Streams>,
    /// Private chats' drafts carry a Stop button (`can_stop`): the
    /// `stopped_message_generation` updates reach [`Self::streams`].
    stoppable: std::sync::atomic::AtomicBool,
}

impl TelegramOutbox {
    pub fn new(api: TelegramApi) -> Self {
        TelegramOutbox {
            api,
            streams: Default::default(),
            stoppable: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Whether drafts offer Stop: only where the stop updates come back to this outbox's
    /// [`Self::streams`] (a host's dispatcher drops them).
    pub fn set_stoppable(&self, stoppable: bool) {
        self.stoppable
            .store(stoppable, std::sync::atomic::Ordering::Relaxed);
    }

    /// The replies being streamed (a Stop update is given to them).
    pub fn streams(&self) -> &std::sync::Arc<crate::live_reply::Streams> {
        &self.streams
    }

    /// A reply's text: in place of the message that showed it being written, if there is
    /// one (its first piece edited in; the rest sent), else sent.
    async fn send_reply(
        &self,
        key: &SessionKey,
        place: Place,
        text: &str,
    ) -> Result<(), CallError> {
        let Some((shown, message)) = self
            .streams
            .take_shown(key)
            .and_then(|s| s.message.parse::<i32>().ok().map(|m| (s, m)))
        else {
            return self.api.send_text(place, text, None).await;
        };
        shown.wait_to_edit().await;
        let pieces = split_capped(text, MESSAGE_LIMIT, MAX_PIECES, html_cost);
        let (first, rest) = pieces
            .split_first()
            .map_or(("", &[][..]), |(f, r)| (f.as_str(), r));
        let request = serde_json::json!({
            "chat_id": place.chat.0,
            "message_id": message,
            "text": crate::markup::telegram_html(first),
            "parse_mode": "HTML",
        });
        match not_modified_is_ok(
            self.api
                .call::<IgnoredAny>("editMessageText", &request, Repeat::Safe)
                .await,
        ) {
            Ok(()) => {}
            // the streamed message is gone (deleted by someone): the reply goes anew
            Err(CallError::Api { .. }) => return self.api.send_text(place, text, None).await,
            Err(e) => return Err(e),
        }
        for piece in rest {
            self.api.send_text(place, piece, None).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl Outbox for TelegramOutbox {
    async fn deliver(&self, key: &SessionKey, items: &[Outgoing]) -> Result<(), DeliveryError> {
        let place = Place::from_key(key)?;
        for item in items {
            let sent = match item {
                Outgoing::Text { text } => self.send_reply(key, place, text).await,
                Outgoing::Options(request) => {
                    let markup = super::keyboard::keyboard(request, 0);
                    self.api
                        .send_text(place, &request.prompt, Some(markup))
                        .await
                }
                Outgoing::StartThread { title } => {
                    self.api
                        .send_text(place, &format!("— {title} —"), None)
                        .await
                }
                Outgoing::Typing => self.api.working(place).await,
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
        // a private chat's id is the user's
        let Ok(user) = key.user.parse::<i64>() else {
            return Ok(false);
        };
        let place = Place {
            chat: ChatId(user),
            topic: None,
        };
        for item in items {
            let Some(text) = item.transcript_text() else {
                continue;
            };
            match self.api.send_text(place, &text, None).await {
                Ok(()) => {}
                Err(e) if unreachable_privately(&e) => return Ok(false),
                Err(e) => return Err(delivery_error(e)),
            }
        }
        Ok(true)
    }

    fn streamer(
        &self,
        key: &SessionKey,
        tap: &std::sync::Arc<kaiwa_core::llm::stream::Tap>,
    ) -> Option<Box<dyn kaiwa_core::orchestrator::Streamer>> {
        let place = Place::from_key(key).ok()?;
        Some(Box::new(TelegramStreamer::new(
            self.api.clone(),
            self.streams.clone(),
            key,
            place,
            tap,
            self.stoppable.load(std::sync::atomic::Ordering::Relaxed),
        )))
    }
}

/// A private chat the user never opened (Telegram answers 403, or 400 "chat not found").
fn unreachable_privately(e: &CallError) -> bool {
    matches!(
        e,
        CallError::Api {
            status: 400 | 403,
            ..
        }
    )
}

/// Audit summaries and handoffs in the admin chat.
pub struct TelegramAdminSink {
    api: TelegramApi,
    chat: ChatId,
    /// The admins' language: the buttons' labels.
    language: String,
}

impl TelegramAdminSink {
    pub fn new(api: TelegramApi, admin_chat_id: i64) -> Self {
        TelegramAdminSink {
            api,
            chat: ChatId(admin_chat_id),
            language: "en".into(),
        }
    }

    /// Labels the notices' buttons in `language` (`en`, `ja`).
    pub fn with_language(mut self, language: &str) -> Self {
        self.language = language.to_string();
        self
    }
}

#[async_trait]
impl AdminSink for TelegramAdminSink {
    /// The notice in the admin chat, with its buttons, as a reply to the message of
    /// `replying_to` in this chat (a relayed message stays under its conversation); its
    /// last piece is where it landed.
    async fn post(
        &self,
        notice: &AdminNotice,
        replying_to: &[NoticeRef],
    ) -> Result<Vec<NoticeRef>, DeliveryError> {
        let chat = self.chat.0.to_string();
        let reply_to = replying_to
            .iter()
            .find(|r| r.platform == Platform::Telegram && r.chat == chat)
            .and_then(|r| r.message_id.parse::<i64>().ok());
        let buttons = notice.buttons(&self.language);
        let markup = (!buttons.is_empty()).then(|| {
            InlineKeyboardMarkup::new([buttons
                .into_iter()
                .map(|(label, data)| InlineKeyboardButton::callback(label, data))
                .collect::<Vec<_>>()])
        });
        let pieces = split_capped(&notice.to_text(), MESSAGE_LIMIT, MAX_PIECES, html_cost);
        let last = pieces.len().saturating_sub(1);
        let mut landed = Vec::new();
        for (i, piece) in pieces.iter().enumerate() {
            let mut request = serde_json::json!({
                "chat_id": self.chat.0,
                "text": crate::markup::telegram_html(piece),
                "parse_mode": "HTML",
            });
            if let Some(message) = reply_to.filter(|_| i == 0) {
                // a reply to a message deleted since is sent alone
                request["reply_parameters"] =
                    serde_json::json!({"message_id": message, "allow_sending_without_reply": true});
            }
            if let Some(markup) = markup.as_ref().filter(|_| i == last) {
                request["reply_markup"] = serde_json::to_value(markup).unwrap_or_default();
            }
            let sent: teloxide::types::Message = self
                .api
                .call("sendMessage", &request, Repeat::Once)
                .await
                .map_err(delivery_error)?;
            landed.push(NoticeRef {
                platform: Platform::Telegram,
                chat: chat.clone(),
                message_id: sent.id.0.to_string(),
            });
        }
        Ok(landed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            escape_html("a < b && c > d"),
            "a &lt; b &amp;&amp; c &gt; d"
        );
    }
}

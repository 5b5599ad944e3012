//! A reply shown while it is written ([`TelegramStreamer`]). In a private chat it is the
//! native draft: `sendMessageDraft` with the growing text under the same `draft_id` as the
//! "Thinking…" placeholder, with a Stop button (`can_stop`); the final `sendMessage`
//! replaces it (a draft is an ephemeral preview). In groups and forum topics — and where
//! the Bot API server has no drafts — the first sentence is sent as a message, edited at
//! most once a second, and the final text is edited into it ([`TelegramOutbox`]'s
//! delivery). Intermediate updates are one try each: a 429 skips them until its wait is
//! over; the final message is sent with the usual retries.
//!
//! [`TelegramOutbox`]: super::TelegramOutbox

use super::api::{CallError, TelegramApi, delivery_error};
use super::{MESSAGE_LIMIT, Place};
use crate::live_reply::{Budget, EDIT_EVERY, Streams, has_sentence};
use crate::markup::telegram_html;
use crate::split::truncate;
use async_trait::async_trait;
use kaiwa_core::admin::DeliveryError;
use kaiwa_core::message::SessionKey;
use kaiwa_core::orchestrator::Streamer;
use serde::de::IgnoredAny;
use std::sync::Arc;
use std::time::Duration;
use teloxide::types::Message;

/// Draft updates: frequent (they animate in place and send no notification).
const DRAFT_EVERY: Duration = Duration::from_millis(500);
/// Streamed changes in one group: Telegram takes about 20 messages a minute in a group,
/// edits included. Streaming takes at most 15 of them in any minute (posts and edits of
/// every reply streamed there), leaving room for final replies and buttons; past that a
/// reply waits, and its final text still comes whole.
const GROUP_BUDGET: Budget = Budget {
    changes: 15,
    per: Duration::from_secs(60),
};
/// One try of an intermediate update waits this long at most.
const UPDATE_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) struct TelegramStreamer {
    pub(super) api: TelegramApi,
    pub(super) streams: Arc<Streams>,
    pub(super) key: SessionKey,
    pub(super) place: Place,
    /// In a private chat with drafts: the draft's id.
    pub(super) draft: Option<i64>,
    /// The message showing the reply (groups, topics, no drafts).
    pub(super) message: Option<i32>,
    /// The draft carries a Stop button: its stop update reaches this process.
    pub(super) can_stop: bool,
}

impl TelegramStreamer {
    /// A group or supergroup (their ids are negative): it has a budget of messages.
    fn in_group(&self) -> bool {
        self.place.chat.0 < 0
    }

    /// A change of the streamed message, counted against the group's budget.
    fn counted(&self) {
        if self.in_group() {
            self.streams.count_change(self.place.chat.0, GROUP_BUDGET);
        }
    }

    pub(super) fn new(
        api: TelegramApi,
        streams: Arc<Streams>,
        key: &SessionKey,
        place: Place,
        tap: &Arc<kaiwa_core::llm::stream::Tap>,
        can_stop: bool,
    ) -> Self {
        let private = place.chat.0 > 0 && place.topic.is_none();
        let draft = (private && !api.drafts_unsupported()).then(|| place.draft_id());
        if let Some(draft) = draft
            && can_stop
        {
            streams.watch_stop(place.chat.0, draft, tap);
        }
        TelegramStreamer {
            api,
            streams,
            key: key.clone(),
            place,
            draft,
            message: None,
            can_stop,
        }
    }

    fn text(text: &str) -> String {
        telegram_html(&truncate(text.trim_end(), MESSAGE_LIMIT - 64))
    }

    async fn update(&self, method: &str, request: serde_json::Value) -> Result<(), CallError> {
        match self
            .api
            .request::<IgnoredAny>(method, &request, Some(UPDATE_TIMEOUT))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_modified() => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl Streamer for TelegramStreamer {
    fn interval(&self) -> Duration {
        if self.draft.is_some() {
            DRAFT_EVERY
        } else if self.in_group() {
            self.streams
                .pace(self.place.chat.0, EDIT_EVERY, GROUP_BUDGET)
        } else {
            EDIT_EVERY
        }
    }

    async fn show(&mut self, text: &str) -> Result<bool, DeliveryError> {
        let chat = self.place.chat.0;
        if let Some(draft) = self.draft {
            let request = serde_json::json!({
                "chat_id": chat,
                "draft_id": draft,
                "text": Self::text(text),
                "parse_mode": "HTML",
                "can_stop": self.can_stop,
            });
            return match self.update("sendMessageDraft", request).await {
                Ok(()) => Ok(true),
                Err(
                    e @ CallError::Api {
                        status: 400 | 404, ..
                    },
                ) => {
                    // no drafts here after all: the reply goes whole at the end
                    self.api.no_drafts();
                    Err(delivery_error(e))
                }
                Err(e) => Err(delivery_error(e)),
            };
        }
        match self.message {
            None => {
                if !has_sentence(text) {
                    return Ok(false);
                }
                if self.in_group() && self.streams.spent(self.place.chat.0, GROUP_BUDGET) {
                    // the group's budget is spent: the reply goes whole when it is done
                    return Ok(false);
                }
                let mut request = serde_json::json!({
                    "chat_id": chat,
                    "text": Self::text(text),
                    "parse_mode": "HTML",
                });
                if let Some(topic) = self.place.topic {
                    request["message_thread_id"] = topic.0.0.into();
                }
                let sent: Message = self
                    .api
                    .request("sendMessage", &request, Some(UPDATE_TIMEOUT))
                    .await
                    .map_err(delivery_error)?;
                self.message = Some(sent.id.0);
                self.streams.set_shown(&self.key, sent.id.0);
                self.counted();
                Ok(true)
            }
            Some(message) => {
                let request = serde_json::json!({
                    "chat_id": chat,
                    "message_id": message,
                    "text": Self::text(text),
                    "parse_mode": "HTML",
                });
                self.update("editMessageText", request)
                    .await
                    .map_err(delivery_error)?;
                self.streams.edited(&self.key);
                self.counted();
                Ok(true)
            }
        }
    }

    async fn finish(self: Box<Self>) {
        if let Some(draft) = self.draft {
            self.streams.forget_stop(self.place.chat.0, draft);
        }
        // shown and not replaced by the reply (it was no text): removed
        if let Some(shown) = self.streams.take_shown(&self.key)
            && let Ok(message) = shown.message.parse::<i32>()
        {
            let request = serde_json::json!({"chat_id": self.place.chat.0, "message_id": message});
            if let Err(e) = self
                .api
                .call::<IgnoredAny>("deleteMessage", &request, super::api::Repeat::Safe)
                .await
            {
                tracing::debug!(error = %e, "could not remove a streamed message");
            }
        }
    }
}

//! Where replies and admin notices go: [`SlackOutbox`] posts a turn's [`Outgoing`]s in the
//! session's channel and thread (`chat.postMessage`, `thread_ts`), [`SlackAdminSink`] posts
//! notices with their buttons to the admin channel, each session's notices in one thread.
//! A reply only its user may see (`/mydata` in a channel) is `chat.postEphemeral`.

use super::MESSAGE_LIMIT;
use super::api::{SlackApi, SlackError};
use super::blocks;
use crate::live_reply::{Budget, EDIT_EVERY, Streams, has_sentence};
use crate::markup::slack_mrkdwn;
use crate::split::{MAX_PIECES, split_capped, truncate};
use async_trait::async_trait;
use kaiwa_core::admin::{AdminNotice, AdminSink, DeliveryError, NoticeRef};
use kaiwa_core::llm::stream::Tap;
use kaiwa_core::message::{Outgoing, Platform, SessionKey};
use kaiwa_core::orchestrator::{Outbox, Streamer};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Streamed edits across the workspace: `chat.update` is a Tier 3 method (about 50 a
/// minute); streaming takes at most 40 of them in any minute, past that a reply waits and
/// its final text still comes whole.
const STREAM_BUDGET: Budget = Budget {
    changes: 40,
    per: Duration::from_secs(60),
};
/// The place the streaming budget is counted for (the whole workspace).
const WORKSPACE: &str = "slack";

/// A message's place: its channel and, in a thread, the thread's first message's `ts`.
fn place_json(key: &SessionKey) -> Value {
    let mut place = json!({"channel": key.chat});
    if !key.thread.is_empty() {
        place["thread_ts"] = key.thread.clone().into();
    }
    place
}

/// The metadata's event type of a message that is a stored reply.
const REPLY_LABEL: &str = "kaiwa_reply";

/// Labels a post with the stored reply it is (its metadata; Slack keeps it with the
/// message): after a restart, a reply the place shows is not sent again.
fn label(body: &mut Value, reply: Option<i64>) {
    if let Some(reply) = reply {
        body["metadata"] = json!({
            "event_type": REPLY_LABEL,
            "event_payload": {"reply": reply.to_string()},
        });
    }
}

/// Renders replies in a channel, a thread or a DM.
pub struct SlackOutbox {
    api: SlackApi,
    streams: Arc<Streams>,
}

impl SlackOutbox {
    pub fn new(api: SlackApi) -> Self {
        SlackOutbox {
            api,
            streams: Default::default(),
        }
    }

    /// The replies being streamed (a Stop press is given to them).
    pub fn streams(&self) -> &Arc<Streams> {
        &self.streams
    }

    /// `text` as messages at Slack's limit (cut past a few); the last labelled with
    /// `reply` (see [`label`]).
    async fn post_text(
        &self,
        key: &SessionKey,
        text: &str,
        reply: Option<i64>,
    ) -> Result<(), SlackError> {
        let pieces = split_capped(&slack_mrkdwn(text), MESSAGE_LIMIT, MAX_PIECES, |_| 1);
        let last = pieces.len().saturating_sub(1);
        for (i, piece) in pieces.into_iter().enumerate() {
            let mut body = place_json(key);
            body["text"] = piece.into();
            label(&mut body, reply.filter(|_| i == last));
            self.api.call("chat.postMessage", &body).await?;
        }
        Ok(())
    }

    /// A reply's text: edited into the message that showed it being written (its Stop
    /// button removed), if there is one; else posted.
    async fn send_reply(
        &self,
        key: &SessionKey,
        text: &str,
        reply: Option<i64>,
    ) -> Result<(), SlackError> {
        let Some(shown) = self.streams.take_shown(key) else {
            return self.post_text(key, text, reply).await;
        };
        shown.wait_to_edit().await;
        let pieces = split_capped(&slack_mrkdwn(text), MESSAGE_LIMIT, MAX_PIECES, |_| 1);
        let (first, rest) = pieces
            .split_first()
            .map_or((String::new(), &[][..]), |(f, r)| (f.clone(), r));
        let mut edit =
            json!({"channel": key.chat, "ts": shown.message, "text": first, "blocks": []});
        label(&mut edit, reply.filter(|_| rest.is_empty()));
        match self.api.call("chat.update", &edit).await {
            Ok(_) => {}
            // the streamed message is gone (deleted by someone): the reply goes anew
            Err(SlackError::Api { .. }) => return self.post_text(key, text, reply).await,
            Err(e) => return Err(e),
        }
        let last = rest.len().saturating_sub(1);
        for (i, piece) in rest.iter().enumerate() {
            let mut body = place_json(key);
            body["text"] = piece.clone().into();
            label(&mut body, reply.filter(|_| i == last));
            self.api.call("chat.postMessage", &body).await?;
        }
        Ok(())
    }

    /// An options request as its prompt with buttons (or a menu), labelled with `reply`.
    async fn post_options(
        &self,
        key: &SessionKey,
        request: &kaiwa_core::message::OptionsRequest,
        reply: Option<i64>,
    ) -> Result<(), SlackError> {
        let mut body = place_json(key);
        body["text"] = truncate(&slack_mrkdwn(&request.prompt), MESSAGE_LIMIT).into();
        body["blocks"] = blocks::options(request, None).into();
        label(&mut body, reply);
        self.api.call("chat.postMessage", &body).await.map(|_| ())
    }

    /// `items` as messages only `key`'s user sees, in the key's place.
    pub(super) async fn post_ephemeral(
        &self,
        key: &SessionKey,
        items: &[Outgoing],
    ) -> Result<(), DeliveryError> {
        for item in items {
            let mut body = place_json(key);
            body["user"] = key.user.clone().into();
            match item {
                Outgoing::Options(request) => {
                    body["text"] = truncate(&slack_mrkdwn(&request.prompt), MESSAGE_LIMIT).into();
                    body["blocks"] = blocks::options(request, None).into();
                }
                other => {
                    let Some(text) = other.transcript_text().filter(|t| !t.trim().is_empty())
                    else {
                        continue;
                    };
                    let text = slack_mrkdwn(&text);
                    for piece in split_capped(&text, MESSAGE_LIMIT, MAX_PIECES, |_| 1) {
                        let mut body = body.clone();
                        body["text"] = piece.into();
                        self.api.call("chat.postEphemeral", &body).await?;
                    }
                    continue;
                }
            }
            self.api.call("chat.postEphemeral", &body).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl Outbox for SlackOutbox {
    async fn deliver(&self, key: &SessionKey, items: &[Outgoing]) -> Result<(), DeliveryError> {
        for item in items {
            match item {
                Outgoing::Text { text } => self.send_reply(key, text, None).await?,
                Outgoing::Options(request) => self.post_options(key, request, None).await?,
                Outgoing::StartThread { title } => {
                    self.post_text(key, &format!("*{title}*"), None).await?;
                }
                Outgoing::Typing => {
                    // Slack's "is thinking…" exists in threads of apps with the assistant
                    // feature; elsewhere Slack refuses it and nothing is shown
                    if key.thread.is_empty() {
                        continue;
                    }
                    let status = json!({
                        "channel_id": key.chat,
                        "thread_ts": key.thread,
                        "status": "is thinking…",
                    });
                    if let Err(e) = self
                        .api
                        .call_once("assistant.threads.setStatus", &status)
                        .await
                    {
                        tracing::debug!(error = %e, "no thinking status here");
                    }
                }
            }
        }
        Ok(())
    }

    /// Slack shows a message to one user of a channel: the reply is posted there,
    /// ephemeral.
    async fn deliver_privately(
        &self,
        key: &SessionKey,
        items: &[Outgoing],
    ) -> Result<bool, DeliveryError> {
        self.post_ephemeral(key, items).await.map(|()| true)
    }

    /// A reply's text labelled with its id (the message's metadata).
    async fn deliver_reply(
        &self,
        key: &SessionKey,
        item: &Outgoing,
        id: i64,
    ) -> Result<(), DeliveryError> {
        match item {
            Outgoing::Text { text } => Ok(self.send_reply(key, text, Some(id)).await?),
            Outgoing::Options(request) => Ok(self.post_options(key, request, Some(id)).await?),
            _ => self.deliver(key, std::slice::from_ref(item)).await,
        }
    }

    /// The labels of the bot's recent messages in the place (a thread's replies, or the
    /// channel's history), read back.
    async fn already_shown(&self, key: &SessionKey, ids: &[i64]) -> Option<Vec<bool>> {
        let answer = if key.thread.is_empty() {
            let form = [
                ("channel", key.chat.as_str()),
                ("limit", "100"),
                ("include_all_metadata", "true"),
            ];
            self.api.call_form("conversations.history", &form).await
        } else {
            let form = [
                ("channel", key.chat.as_str()),
                ("ts", key.thread.as_str()),
                ("limit", "200"),
                ("include_all_metadata", "true"),
            ];
            self.api.call_form("conversations.replies", &form).await
        };
        let (answer, _) = match answer {
            Ok(answer) => answer,
            Err(e) => {
                tracing::info!(error = %e, "could not read what the place shows");
                return None;
            }
        };
        let labelled: Vec<&str> = answer["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["metadata"]["event_type"] == REPLY_LABEL)
            .filter_map(|m| m["metadata"]["event_payload"]["reply"].as_str())
            .collect();
        Some(
            ids.iter()
                .map(|id| labelled.contains(&id.to_string().as_str()))
                .collect(),
        )
    }

    fn streamer(&self, key: &SessionKey, tap: &Arc<Tap>) -> Option<Box<dyn Streamer>> {
        Some(Box::new(SlackStreamer {
            api: self.api.clone(),
            streams: self.streams.clone(),
            key: key.clone(),
            tap: tap.clone(),
            message: None,
        }))
    }
}

/// A turn's outbox where every reply is ephemeral: a slash command's (Slack shows a
/// command to nobody but who typed it, and so its answer).
pub(super) struct OnlyToThem<'a>(pub(super) &'a SlackOutbox);

#[async_trait]
impl Outbox for OnlyToThem<'_> {
    async fn deliver(&self, key: &SessionKey, items: &[Outgoing]) -> Result<(), DeliveryError> {
        self.0.post_ephemeral(key, items).await
    }

    async fn deliver_privately(
        &self,
        key: &SessionKey,
        items: &[Outgoing],
    ) -> Result<bool, DeliveryError> {
        self.0.post_ephemeral(key, items).await.map(|()| true)
    }
}

/// A reply shown while it is written: its first sentence is posted with a Stop button,
/// edited in at most once a second (within the workspace's budget of edits), and the final
/// reply is edited into it with the button removed. Intermediate posts and edits are one
/// try each.
struct SlackStreamer {
    api: SlackApi,
    streams: Arc<Streams>,
    key: SessionKey,
    tap: Arc<Tap>,
    /// The `ts` of the message showing the reply.
    message: Option<String>,
}

#[async_trait]
impl Streamer for SlackStreamer {
    fn interval(&self) -> Duration {
        self.streams.pace(WORKSPACE, EDIT_EVERY, STREAM_BUDGET)
    }

    async fn show(&mut self, text: &str) -> Result<bool, DeliveryError> {
        let text = truncate(text, blocks::SECTION);
        let shown = slack_mrkdwn(&text);
        match &self.message {
            None => {
                if !has_sentence(&text) || self.streams.spent(WORKSPACE, STREAM_BUDGET) {
                    return Ok(false);
                }
                let mut body = place_json(&self.key);
                body["text"] = shown.into();
                body["blocks"] = blocks::stop(&text).into();
                let sent = self.api.call_once("chat.postMessage", &body).await?;
                let Some(ts) = sent.get("ts").and_then(Value::as_str) else {
                    return Ok(false);
                };
                self.streams.count_change(WORKSPACE, STREAM_BUDGET);
                self.message = Some(ts.to_string());
                self.streams.set_shown(&self.key, ts);
                self.streams.watch_stop(&self.key.chat, ts, &self.tap);
                Ok(true)
            }
            Some(ts) => {
                let edit = json!({
                    "channel": self.key.chat,
                    "ts": ts,
                    "text": shown,
                    "blocks": blocks::stop(&text),
                });
                self.api.call_once("chat.update", &edit).await?;
                self.streams.count_change(WORKSPACE, STREAM_BUDGET);
                self.streams.edited(&self.key);
                Ok(true)
            }
        }
    }

    async fn finish(self: Box<Self>) {
        if let Some(ts) = &self.message {
            self.streams.forget_stop(&self.key.chat, ts);
        }
        // shown and not replaced by the reply (it was no text): removed
        if let Some(shown) = self.streams.take_shown(&self.key) {
            let delete = json!({"channel": self.key.chat, "ts": shown.message});
            if let Err(e) = self.api.call("chat.delete", &delete).await {
                tracing::debug!(error = %e, "could not remove a streamed message");
            }
        }
    }
}

/// Audit summaries and handoffs in the admin channel, with their buttons; the notices of
/// one session follow the first in its thread.
pub struct SlackAdminSink {
    api: SlackApi,
    channel: String,
    /// The admins' language: the buttons' labels.
    language: String,
}

impl SlackAdminSink {
    pub fn new(api: SlackApi, admin_channel_id: &str) -> Self {
        SlackAdminSink {
            api,
            channel: admin_channel_id.to_string(),
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
impl AdminSink for SlackAdminSink {
    /// The notice in the admin channel, in the thread of the notice it follows (`replying_to`
    /// there); where it landed is that thread (a person's reply in it reaches the session).
    async fn post(
        &self,
        notice: &AdminNotice,
        replying_to: &[NoticeRef],
    ) -> Result<Vec<NoticeRef>, DeliveryError> {
        let thread = replying_to
            .iter()
            .find(|r| r.platform == Platform::Slack && r.chat == self.channel)
            .map(|r| r.message_id.clone())
            .filter(|ts| !ts.is_empty());
        let mut body = json!({
            "channel": self.channel,
            "text": blocks::notice_text(notice),
            "blocks": blocks::notice(notice, &self.language),
        });
        if let Some(thread) = &thread {
            body["thread_ts"] = thread.clone().into();
        }
        let sent = self.api.call("chat.postMessage", &body).await?;
        let ts = sent
            .get("ts")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        Ok(vec![NoticeRef {
            platform: Platform::Slack,
            chat: self.channel.clone(),
            // a thread is known by its first message
            message_id: thread.unwrap_or(ts),
        }])
    }
}

//! What Slack delivers, by either transport (Socket Mode, the Events API), turned into
//! turns: a user's message, a press of a button, a slash command; and in the admin
//! channel a person's reply in a notice's thread or a press of a notice's button.
//!
//! Each is kept in the inbox, committed, before the delivery is acknowledged
//! ([`Receiver::event`] and its siblings return then): an event Slack delivers again (its
//! acknowledgement lost, the process killed) is a duplicate the store drops.

use super::SlackConfig;
use super::api::SlackApi;
use super::blocks::{self, STOP_ID};
use super::work::{Intake, Work};
use crate::AdapterHealth;
use crate::interaction::{
    ALREADY_COMPLETE, Press, STALE_NOTICE, TEXT_ONLY, chosen_values, pending_request, shown_choice,
};
use kaiwa_core::admin::{AdminAction, NoticeRef};
use kaiwa_core::message::{Body, Incoming, OptionsRequest, Platform, SessionKey, UserRef};
use kaiwa_core::orchestrator::{ForAdapters, OrchestratorError};
use serde_json::json;
use slack_morphism::events::{
    SlackCommandEvent, SlackEventCallbackBody, SlackInteractionBlockActionsEvent,
    SlackInteractionEvent, SlackMessageEvent, SlackPushEventCallback,
};
use slack_morphism::events::{SlackInteractionActionContainer, SlackMessageEventType};
use std::sync::Arc;

/// A delivery that could not be kept: not acknowledged, so that Slack delivers it again.
#[derive(Debug, thiserror::Error)]
#[error("a Slack event could not be kept: {0}")]
pub struct NotKept(#[from] OrchestratorError);

/// Where a message belongs: the session's channel and thread, and the flow a new session
/// runs.
struct Place {
    chat: String,
    thread: String,
    flow: Option<String>,
    flow_arg: Option<String>,
    /// Others read it (a channel, not a DM).
    shared: bool,
}

/// A press of one of the bot's buttons or menus, as Kaiwa reads it.
struct Pressed {
    /// The press's id (`a…`): once per press, the same when Slack delivers it again.
    id: String,
    channel: String,
    /// The pressed message's `ts`, and its thread's (`None` at the top level).
    message_ts: String,
    thread: Option<String>,
    user: String,
    name: String,
    action_id: String,
    /// A menu's selected options (their indexes).
    selected: Vec<usize>,
    /// The pressed message was ephemeral (a slash command's answer).
    ephemeral: bool,
    response_url: Option<String>,
}

impl Pressed {
    /// The press of `event`; `None` for what is not a press of a message's button or menu.
    fn of(event: SlackInteractionBlockActionsEvent) -> Option<Pressed> {
        let user = event.user?;
        let SlackInteractionActionContainer::Message(container) = event.container else {
            return None;
        };
        let channel = event
            .channel
            .map(|c| c.id.0)
            .or_else(|| container.channel_id.map(|c| c.0))?;
        let message_ts = container.message_ts.0;
        let thread = event
            .message
            .and_then(|m| m.origin.thread_ts)
            .map(|t| t.0)
            .filter(|t| *t != message_ts);
        let action = event.actions?.into_iter().next()?;
        let id = format!(
            "a{channel}:{message_ts}:{}:{}",
            user.id.0,
            action.action_ts.as_ref().map_or("", |t| t.0.as_str())
        );
        let selected = action
            .selected_options
            .iter()
            .flatten()
            .filter_map(|o| o.value.parse().ok())
            .collect();
        Some(Pressed {
            id,
            channel,
            message_ts,
            thread,
            name: user
                .name
                .or(user.username)
                .unwrap_or_else(|| user.id.0.clone()),
            user: user.id.0,
            action_id: action.action_id.0,
            selected,
            ephemeral: container.is_ephemeral == Some(true),
            response_url: event.response_url.map(|u| u.0.to_string()),
        })
    }
}

/// Receives what Slack delivers (one per adapter, shared by its transport's tasks).
pub(super) struct Receiver {
    pub(super) api: SlackApi,
    pub(super) config: SlackConfig,
    pub(super) orchestrator: ForAdapters,
    pub(super) intake: Arc<Intake>,
    pub(super) health: Arc<AdapterHealth>,
}

/// A DM's channel id starts with `D`.
fn is_dm(channel: &str, channel_type: Option<&str>) -> bool {
    channel_type.map_or_else(|| channel.starts_with('D'), |t| t == "im")
}

impl Receiver {
    /// An Events API event (a message in a DM or a channel the bot is in).
    pub(super) async fn event(&self, callback: SlackPushEventCallback) -> Result<(), NotKept> {
        self.health.ok();
        match callback.event {
            SlackEventCallbackBody::Message(message) => self.message(message).await,
            // a mention is also a message event in that channel; others are not Kaiwa's
            _ => Ok(()),
        }
    }

    /// Which flow a channel's messages run, if it is a help-desk or reading channel.
    fn flow_of_channel(&self, channel: &str) -> Option<&'static str> {
        let has = |ids: &[String]| ids.iter().any(|id| id == channel);
        if has(&self.config.helpdesk_channel_ids) {
            Some("helpdesk")
        } else if has(&self.config.reading_channel_ids) {
            Some("reading")
        } else {
            None
        }
    }

    fn is_admin_channel(&self, channel: &str) -> bool {
        self.config.admin_channel_id.as_deref() == Some(channel)
    }

    /// Where a message (or a press) in `channel`, in `thread` (the thread's first message;
    /// `None` at the top level, where `ts` starts one) belongs; `None`: not Kaiwa's.
    fn place_of(&self, channel: &str, dm: bool, thread: Option<&str>, ts: &str) -> Option<Place> {
        if dm {
            if !self.config.dms {
                return None;
            }
            return Some(Place {
                chat: channel.to_string(),
                thread: String::new(),
                flow: self.config.dm_flow.clone(),
                flow_arg: self.config.dm_flow_arg.clone(),
                shared: false,
            });
        }
        // a new question in a help-desk or reading channel: the conversation lives in the
        // thread under it
        let flow = self.flow_of_channel(channel)?;
        Some(Place {
            chat: channel.to_string(),
            thread: thread.unwrap_or(ts).to_string(),
            flow: Some(flow.into()),
            flow_arg: None,
            shared: true,
        })
    }

    async fn message(&self, message: SlackMessageEvent) -> Result<(), NotKept> {
        // edits, deletions, joins and bots' messages (Kaiwa's own among them) are not turns
        let plain = matches!(
            message.subtype,
            None | Some(SlackMessageEventType::ThreadBroadcast | SlackMessageEventType::FileShare)
        );
        if !plain || message.sender.bot_id.is_some() {
            return Ok(());
        }
        let (Some(user), Some(channel)) = (&message.sender.user, &message.origin.channel) else {
            return Ok(());
        };
        let (user, channel) = (user.0.clone(), channel.0.clone());
        let ts = message.origin.ts.0.clone();
        let id = format!("m{channel}:{ts}");
        if !self.intake.is_new(&id) {
            return Ok(());
        }
        let text = message
            .content
            .as_ref()
            .and_then(|c| c.text.as_deref())
            .map(crate::markup::from_slack)
            .unwrap_or_default();
        let text = text.trim();
        let thread = message.origin.thread_ts.as_ref().map(|t| t.0.clone());
        let dm = is_dm(
            &channel,
            message.origin.channel_type.as_ref().map(|t| t.0.as_str()),
        );
        let who = UserRef {
            display_name: message
                .sender
                .user_profile
                .as_ref()
                .and_then(|p| p.display_name.clone().or_else(|| p.real_name.clone()))
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| user.clone()),
            id: user.clone(),
            language: None,
        };
        if self.is_admin_channel(&channel) {
            // a person's reply in the thread of a notice: to the conversation they hold
            if let Some(thread) = thread {
                self.intake.first_sight(id);
                self.staff_reply(&channel, &thread, &ts, &who, text).await;
            }
            return Ok(());
        }
        let Some(place) = self.place_of(&channel, dm, thread.as_deref(), &ts) else {
            return Ok(());
        };
        if place.shared && !text.is_empty() {
            // an admin writing in a thread whose conversation they hold: stored, unanswered
            let written = Incoming {
                platform: Platform::Slack,
                chat: place.chat.clone(),
                thread: place.thread.clone(),
                user: who.clone(),
                message_id: ts.clone(),
                body: Body::Text {
                    text: text.to_string(),
                },
                flow: None,
                flow_arg: None,
                shared: true,
            };
            if self.orchestrator.staff_in_place(&written).await {
                self.intake.first_sight(id);
                return Ok(());
            }
        }
        if text.is_empty() {
            self.intake.first_sight(id);
            if dm {
                self.say(&place.chat, &place.thread, TEXT_ONLY).await;
            }
            return Ok(());
        }
        let incoming = Incoming {
            platform: Platform::Slack,
            chat: place.chat,
            thread: place.thread,
            user: who,
            message_id: id,
            body: Body::from_text(text),
            flow: place.flow,
            flow_arg: place.flow_arg,
            shared: place.shared,
        };
        self.keep(incoming, false).await
    }

    /// Keeps `incoming` in the inbox (committed) and hands it to the intake.
    async fn keep(&self, incoming: Incoming, only_to_them: bool) -> Result<(), NotKept> {
        self.orchestrator
            .keep(std::slice::from_ref(&incoming))
            .await?;
        if !self.intake.first_sight(incoming.message_id.clone()) {
            return Ok(());
        }
        let work = Work {
            incoming,
            only_to_them,
        };
        self.intake.hand_over(work.lane(), work).await;
        Ok(())
    }

    /// Posts `text` in a channel (or thread), for everyone there.
    async fn say(&self, channel: &str, thread: &str, text: &str) {
        let mut body = json!({"channel": channel, "text": crate::markup::slack_mrkdwn(text)});
        if !thread.is_empty() {
            body["thread_ts"] = thread.into();
        }
        if let Err(e) = self.api.call("chat.postMessage", &body).await {
            tracing::warn!(error = %e, "could not post in Slack");
        }
    }

    /// Tells `user` alone `text` in a channel.
    async fn whisper(&self, channel: &str, thread: &str, user: &str, text: &str) {
        let mut body =
            json!({"channel": channel, "user": user, "text": crate::markup::slack_mrkdwn(text)});
        if !thread.is_empty() {
            body["thread_ts"] = thread.into();
        }
        if let Err(e) = self.api.call("chat.postEphemeral", &body).await {
            tracing::warn!(error = %e, "could not answer a press");
        }
    }

    /// A message in the admin channel's thread `thread` (a notice's): a person writing to a
    /// conversation they hold, when the notice stands for one.
    async fn staff_reply(&self, channel: &str, thread: &str, ts: &str, who: &UserRef, text: &str) {
        let by = SessionKey {
            platform: Platform::Slack,
            chat: channel.to_string(),
            thread: String::new(),
            user: who.id.clone(),
        };
        let replying_to = NoticeRef {
            platform: Platform::Slack,
            chat: channel.to_string(),
            message_id: thread.to_string(),
        };
        let text = (!text.is_empty()).then_some(text);
        let said = self
            .orchestrator
            .staff_reply(&by, &who.display_name, &replying_to, ts, text)
            .await;
        if let Some(said) = said {
            self.say(channel, thread, &said).await;
        }
    }

    /// A press of a button or a menu (block actions); other interactions are not Kaiwa's.
    pub(super) async fn interaction(&self, event: SlackInteractionEvent) -> Result<(), NotKept> {
        self.health.ok();
        match event {
            SlackInteractionEvent::BlockActions(actions) => self.press(actions).await,
            _ => Ok(()),
        }
    }

    async fn press(&self, event: SlackInteractionBlockActionsEvent) -> Result<(), NotKept> {
        let Some(pressed) = Pressed::of(event) else {
            return Ok(());
        };
        // a press comes once; Slack delivers it again only if it was not acknowledged
        if !self.intake.is_new(&pressed.id) {
            return Ok(());
        }
        if pressed.action_id == STOP_ID {
            self.intake.first_sight(pressed.id.clone());
            self.stop_pressed(&pressed).await;
            return Ok(());
        }
        if let Some(action) = AdminAction::decode(&pressed.action_id) {
            self.intake.first_sight(pressed.id.clone());
            self.admin_pressed(pressed, action);
            return Ok(());
        }
        self.option_pressed(pressed).await
    }

    /// Stop under a reply being written: outside the session's queue (the turn writing the
    /// reply holds it).
    async fn stop_pressed(&self, pressed: &Pressed) {
        let streams = self.intake.turns().outbox.streams();
        if !streams.stop(&pressed.channel, &pressed.message_ts) {
            self.whisper_to(pressed, ALREADY_COMPLETE).await;
        }
    }

    /// A button under an admin notice: done after the acknowledgement (an approval may
    /// take a while); an outcome the orchestrator did not post goes in the notice's thread.
    fn admin_pressed(&self, pressed: Pressed, action: AdminAction) {
        let by = SessionKey {
            platform: Platform::Slack,
            chat: pressed.channel.clone(),
            thread: String::new(),
            user: pressed.user.clone(),
        };
        let (orchestrator, api) = (self.orchestrator.clone(), self.api.clone());
        let notice_thread = pressed.thread.unwrap_or(pressed.message_ts);
        tokio::spawn(async move {
            let outcome = orchestrator.admin_action(&by, &pressed.name, action).await;
            if !outcome.posted {
                let text = crate::markup::slack_mrkdwn(&outcome.text);
                let body = json!({"channel": by.chat, "thread_ts": notice_thread, "text": text});
                if let Err(e) = api.call("chat.postMessage", &body).await {
                    tracing::warn!(error = %e, "could not show the outcome of an admin's press");
                }
            }
        });
    }

    /// A button (or the menu) of an options request: the choice as its session's turn; a
    /// stale or foreign press gets a notice only its presser sees.
    async fn option_pressed(&self, pressed: Pressed) -> Result<(), NotKept> {
        let dm = is_dm(&pressed.channel, None);
        // an ephemeral message answered a slash command: the press is in its place
        let place = if pressed.ephemeral {
            Some(self.command_place(&pressed.channel, dm))
        } else {
            let thread = pressed.thread.as_deref();
            self.place_of(&pressed.channel, dm, thread, &pressed.message_ts)
        };
        let Some((press, place)) = Press::decode(&pressed.action_id).zip(place) else {
            self.whisper_to(&pressed, STALE_NOTICE).await;
            return Ok(());
        };
        let key = SessionKey {
            platform: Platform::Slack,
            chat: place.chat.clone(),
            thread: place.thread.clone(),
            user: pressed.user.clone(),
        };
        let request = match pending_request(&self.orchestrator, &key, press.request_id()).await {
            Ok(Some(request)) => request,
            Ok(None) => {
                self.whisper_to(&pressed, STALE_NOTICE).await;
                return Ok(());
            }
            Err(e) => return Err(NotKept(e)),
        };
        let indexes: Vec<usize> = match &press {
            Press::Pick { index, .. } => vec![*index],
            Press::Select { .. } => pressed.selected.clone(),
        };
        let Some(values) = chosen_values(&request, &indexes).filter(|v| !v.is_empty()) else {
            self.whisper_to(&pressed, STALE_NOTICE).await;
            return Ok(());
        };
        self.show_choice(&pressed, &request, &values);
        let incoming = Incoming {
            platform: Platform::Slack,
            chat: place.chat,
            thread: place.thread,
            user: UserRef {
                id: pressed.user,
                display_name: pressed.name,
                language: None,
            },
            message_id: pressed.id,
            body: Body::Choice {
                request_id: request.request_id.clone(),
                values,
            },
            flow: place.flow,
            flow_arg: place.flow_arg,
            // a press on a slash command's ephemeral answer: as private as the command
            shared: place.shared && !pressed.ephemeral,
        };
        self.keep(incoming, pressed.ephemeral && place.shared).await
    }

    /// The pressed message shows the choice, its buttons gone (after the acknowledgement);
    /// an ephemeral one changes only through the press's response URL.
    fn show_choice(&self, pressed: &Pressed, request: &OptionsRequest, values: &[String]) {
        let shown = shown_choice(request, values);
        let text =
            crate::split::truncate(&crate::markup::slack_mrkdwn(&shown), super::MESSAGE_LIMIT);
        let mut update = json!({
            "channel": pressed.channel,
            "ts": pressed.message_ts,
            "text": text,
            "blocks": blocks::options(request, Some(&shown)),
        });
        let api = self.api.clone();
        let respond = pressed.response_url.clone().filter(|_| pressed.ephemeral);
        tokio::spawn(async move {
            let shown = match respond {
                Some(url) => {
                    update["replace_original"] = true.into();
                    api.respond(&url, &update).await
                }
                None => api.call("chat.update", &update).await.map(|_| ()),
            };
            if let Err(e) = shown {
                tracing::debug!(error = %e, "could not show the choice");
            }
        });
    }

    /// Tells who pressed `pressed` alone `text`, where they pressed.
    async fn whisper_to(&self, pressed: &Pressed, text: &str) {
        let thread = pressed.thread.as_deref().unwrap_or_default();
        self.whisper(&pressed.channel, thread, &pressed.user, text)
            .await;
    }

    /// Where a slash command in `channel` (and a press of its ephemeral answer's buttons)
    /// belongs: a DM's place, or the user's place in the channel, not a thread.
    fn command_place(&self, channel: &str, dm: bool) -> Place {
        match self.place_of(channel, dm, None, "") {
            Some(place) => Place {
                thread: String::new(),
                ..place
            },
            None => Place {
                chat: channel.to_string(),
                thread: String::new(),
                flow: None,
                flow_arg: None,
                shared: !dm,
            },
        }
    }

    /// `/kaiwa …`: the personal commands (`/kaiwa mydata`), and in the admin channel the
    /// admin commands. In a channel its answers are ephemeral: Slack shows a slash command
    /// to nobody but who typed it, and so the command is answered as in a private chat.
    pub(super) async fn command(&self, command: SlackCommandEvent) -> Result<(), NotKept> {
        self.health.ok();
        let id = format!("c{}", command.trigger_id.0);
        if !self.intake.is_new(&id) {
            return Ok(());
        }
        let channel = command.channel_id.0.clone();
        let user = command.user_id.0.clone();
        let text = command
            .text
            .as_deref()
            .map(crate::markup::from_slack)
            .unwrap_or_default();
        let text = text.trim();
        let text = text.strip_prefix('/').unwrap_or(text);
        let body = if text.is_empty() {
            Body::Command {
                name: "help".into(),
                args: String::new(),
            }
        } else {
            Body::from_text(&format!("/{text}"))
        };
        let dm = is_dm(&channel, None);
        let place = self.command_place(&channel, dm);
        let incoming = Incoming {
            platform: Platform::Slack,
            chat: place.chat,
            thread: place.thread,
            user: UserRef {
                id: user.clone(),
                display_name: user,
                language: None,
            },
            message_id: id,
            body,
            flow: place.flow,
            flow_arg: place.flow_arg,
            // nobody else sees a slash command or its (ephemeral) answers: a private place,
            // where `/kaiwa mydata` and `/kaiwa forget` are answered as in a DM
            shared: false,
        };
        self.keep(incoming, place.shared).await
    }
}

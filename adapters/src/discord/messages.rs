//! Messages: a user's, to their session's lane (kept in the inbox first), and a person's
//! reply in the admin channel to a conversation they hold.

use super::gateway::Handler;
use super::places::{Place, target_of};
use super::work::Work;
use crate::interaction::TEXT_ONLY;
use crate::split::truncate;
use kaiwa_core::admin::NoticeRef;
use kaiwa_core::message::{Body, Incoming, Platform, SessionKey, UserRef};
use serenity::all::{ChannelId, CommandInteraction, CreateThread, Http, Message};
use std::sync::Arc;

/// The user as the core knows them: id, and the display name (global name, else username).
pub(super) fn user_ref(user: &serenity::all::User) -> UserRef {
    UserRef {
        id: user.id.get().to_string(),
        display_name: user
            .global_name
            .clone()
            .unwrap_or_else(|| user.name.clone()),
        // Discord tells a user's locale only with an interaction (set there)
        language: None,
    }
}

impl Handler {
    pub(super) async fn turn(&self, incoming: Incoming, reply_to: ChannelId) {
        self.queue(incoming, reply_to, None).await;
    }

    /// Keeps `incoming` in the inbox and hands it to the intake, which queues it in its
    /// session's lane (or leaves it to the instance that holds its chat).
    pub(super) async fn queue(
        &self,
        incoming: Incoming,
        reply_to: ChannelId,
        command: Option<(Box<CommandInteraction>, Arc<Http>)>,
    ) {
        self.orchestrator.accept(&incoming).await;
        let work = Work {
            incoming,
            reply_to,
            command,
        };
        self.intake.hand_over(work.lane(), work).await;
    }

    pub(super) async fn on_message(&self, msg: Message) {
        let in_guild = msg.guild_id.is_some();
        self.on_message_in(msg, in_guild).await;
    }

    /// A message, `in_guild` or in a DM. A message read over REST (catch-up) carries no
    /// `guild_id`: its caller knows where it was written.
    pub(super) async fn on_message_in(&self, msg: Message, in_guild: bool) {
        if msg.author.bot || !self.intake.first_sight(format!("m{}", msg.id)) {
            return;
        }
        self.health.ok();
        let dm = !in_guild;
        let text = msg.content.trim();
        // a new question in a help-desk or reading channel opens its own thread
        let flow = in_guild
            .then(|| self.flow_of_channel(msg.channel_id.get()))
            .flatten();
        let place = match flow {
            Some(flow) => {
                if text.is_empty() {
                    return;
                }
                // a reading thread is named after its book, a help-desk thread after the question
                let first = text.lines().next().unwrap_or(text);
                let first = first.strip_prefix("/reading start ").unwrap_or(first);
                let name = truncate(first.trim(), 90);
                let channel = msg.channel_id;
                let message = msg.id;
                let thread = self
                    .api
                    .call("startThreadFromMessage", |http| {
                        let builder = CreateThread::new(name.clone());
                        async move {
                            channel
                                .create_thread_from_message(&http, message, builder)
                                .await
                        }
                    })
                    .await;
                match thread {
                    Ok(thread) => {
                        self.parents.remember(thread.id.get(), Some(channel.get()));
                        Place {
                            chat: channel.get().to_string(),
                            thread: thread.id.get().to_string(),
                            flow: Some(flow.into()),
                            flow_arg: None,
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not open a thread; answering in the channel");
                        Place {
                            chat: channel.get().to_string(),
                            thread: String::new(),
                            flow: Some(flow.into()),
                            flow_arg: None,
                        }
                    }
                }
            }
            // the admin channel takes admin commands, and replies to the bot's notices and
            // relayed messages (a person writing to a conversation they hold)
            None if self.config.admin_channel_id == Some(msg.channel_id.get()) => {
                if !text.starts_with('/') {
                    if let Some(replied) = msg.message_reference.as_ref().and_then(|r| r.message_id)
                    {
                        self.staff_reply(&msg, replied.get(), text).await;
                    }
                    return;
                }
                Place {
                    chat: msg.channel_id.get().to_string(),
                    thread: String::new(),
                    flow: None,
                    flow_arg: None,
                }
            }
            None => match self.place_of(msg.channel_id, dm).await {
                Some(place) => place,
                None => return,
            },
        };
        let reply_to = target_of(&place);
        if !place.thread.is_empty() && !text.is_empty() {
            // an admin writing in a thread whose conversation they hold: stored, unanswered
            let written = Incoming {
                platform: Platform::Discord,
                chat: place.chat.clone(),
                thread: place.thread.clone(),
                user: user_ref(&msg.author),
                message_id: msg.id.get().to_string(),
                body: Body::Text {
                    text: text.to_string(),
                },
                flow: None,
                flow_arg: None,
                shared: true,
            };
            if self.orchestrator.staff_in_place(&written).await {
                return;
            }
        }
        if text.is_empty() {
            if dm && let Err(e) = self.api.send_text(reply_to, TEXT_ONLY, Vec::new()).await {
                tracing::warn!(error = %e, "could not answer a non-text message");
            }
            return;
        }
        let incoming = Incoming {
            platform: Platform::Discord,
            chat: place.chat,
            thread: place.thread,
            user: user_ref(&msg.author),
            message_id: format!("m{}", msg.id),
            body: Body::from_text(text),
            flow: place.flow,
            flow_arg: place.flow_arg,
            shared: !dm,
        };
        self.turn(incoming, reply_to).await;
    }

    /// A message in the admin channel replying to message `replied`: a person writing to a
    /// conversation they hold, when `replied` stands for one.
    async fn staff_reply(&self, msg: &Message, replied: u64, text: &str) {
        let channel = msg.channel_id;
        let by = SessionKey {
            platform: Platform::Discord,
            chat: channel.get().to_string(),
            thread: String::new(),
            user: msg.author.id.get().to_string(),
        };
        let replying_to = NoticeRef {
            platform: Platform::Discord,
            chat: channel.get().to_string(),
            message_id: replied.to_string(),
        };
        let name = user_ref(&msg.author).display_name;
        let text = (!text.is_empty()).then_some(text);
        let said = self
            .orchestrator
            .staff_reply(&by, &name, &replying_to, &msg.id.get().to_string(), text)
            .await;
        if let Some(said) = said
            && let Err(e) = self.api.send_text(channel, &said, Vec::new()).await
        {
            tracing::warn!(error = %e, "could not answer in the admin channel");
        }
    }
}

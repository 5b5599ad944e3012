//! From a Telegram update to work in its session's lane ([`Context::route`]), and that work
//! done ([`Context::run`]). Routing reads nothing but the pending options of a press, so
//! the listener routes a whole batch, keeps the messages in the inbox and confirms the
//! batch before any turn runs; the turns run in the lanes.

use super::Place;
use super::api::TelegramApi;
use super::keyboard::{Press, keyboard, values_of};
use super::send::TelegramOutbox;
use crate::intake::Turns;
use crate::interaction::{
    PICK_ONE, SAVE_FAILED, STALE_NOTICE, TEXT_ONLY, chosen_values, pending_request, shown_choice,
};
use crate::split::truncate;
use kaiwa_core::admin::{AdminAction, NoticeRef};
use kaiwa_core::message::{Body, Incoming, Platform, SessionKey, UserRef};
use kaiwa_core::orchestrator::{ForAdapters, OrchestratorError, Outbox, QUEUE_FULL};
use std::sync::Arc;
use teloxide::types::{
    CallbackQuery, ChatId, InlineKeyboardMarkup, Message, MessageId, Update, UpdateId, UpdateKind,
};

/// A session's lane: chat, topic (0: none), user.
pub(super) type LaneKey = (i64, i32, u64);

/// What an update asks the adapter to do.
pub(super) enum Work {
    /// A message, kept in the inbox: its turn.
    Turn { incoming: Incoming, place: Place },
    /// A choice, kept in the inbox: the press answered and its keyboard replaced with the
    /// choice, then its turn.
    Press {
        incoming: Incoming,
        place: Place,
        query: String,
        message: MessageId,
        shown: String,
    },
    /// One option of a multi-select keyboard toggled.
    Toggle {
        query: String,
        chat: ChatId,
        message: MessageId,
        markup: InlineKeyboardMarkup,
    },
    /// A press answered with a notice and nothing else (stale, nothing chosen).
    Notice { query: String, text: &'static str },
    /// Not a text message, in a private chat.
    TextOnly { place: Place },
    /// A message in the admin chat replying to one of the bot's (a person writing to a
    /// conversation they hold; `text` `None`: a photo, a sticker …).
    StaffReply {
        place: Place,
        by: SessionKey,
        name: String,
        replying_to: NoticeRef,
        text: Option<String>,
        message_id: String,
    },
    /// A button under an admin notice (approve, reject …), pressed in the admin chat.
    Admin {
        query: String,
        place: Place,
        by: SessionKey,
        name: String,
        action: AdminAction,
    },
}

impl Work {
    /// The message this work keeps in the inbox until its turn is done.
    pub(super) fn kept(&self) -> Option<&Incoming> {
        match self {
            Work::Turn { incoming, .. } | Work::Press { incoming, .. } => Some(incoming),
            _ => None,
        }
    }
}

/// An update routed to its lane.
pub(super) struct Routed {
    /// The update's key ([`update_key`]): its message id in the store.
    pub(super) id: String,
    pub(super) lane: LaneKey,
    pub(super) work: Work,
}

pub(super) struct Context {
    pub(super) api: TelegramApi,
    /// The adapter's one outbox (also the orchestrator's, for replies outside turns).
    pub(super) outbox: Arc<TelegramOutbox>,
    pub(super) orchestrator: ForAdapters,
    pub(super) config: super::TelegramConfig,
    /// The bot's username (commands addressed `@` to another bot are not ours).
    pub(super) me: String,
    /// Mounted in a host bot's dispatcher: what is not Kaiwa's (other commands, other
    /// buttons, non-text messages) is left to the host instead of answered.
    pub(super) mounted: bool,
}

/// The key a Telegram update is processed once under: its update id, which Telegram gives
/// in sequence for the whole bot (a message's own id counts per chat). Zero-padded to the
/// id's widest (`u32`), so keys sort as the ids do and each new one goes at the end of the
/// processed updates' index whichever chat it comes from.
pub(super) fn update_key(id: UpdateId) -> String {
    format!("u{:010}", id.0)
}

/// Strips `@botname` from a command addressed to this bot; `None` for a command addressed to
/// another bot (in groups every bot sees them).
pub fn command_for_me(text: &str, me: &str) -> Option<String> {
    let Some(rest) = text.strip_prefix('/') else {
        return Some(text.to_string());
    };
    let (word, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    match word.split_once('@') {
        Some((command, bot)) if bot.eq_ignore_ascii_case(me) => {
            Some(format!("/{command} {args}").trim_end().to_string())
        }
        Some(_) => None,
        None => Some(text.to_string()),
    }
}

/// The lane of a stored message (kept in the inbox by an earlier run).
pub(super) fn lane_of(incoming: &Incoming) -> Option<(LaneKey, Place)> {
    let place = Place::from_key(&incoming.key()).ok()?;
    let user = incoming.user.id.parse::<u64>().unwrap_or(0);
    Some(((place.chat.0, place.topic_number(), user), place))
}

impl Context {
    /// The flow of a place and its argument; `None`: the place is not Kaiwa's.
    fn flow_for(&self, private: bool, place: Place) -> Option<(Option<String>, Option<String>)> {
        let config = &self.config;
        if private {
            return config
                .private_chats
                .then(|| (config.private_flow.clone(), config.private_flow_arg.clone()));
        }
        let listed = |topic: Option<i32>| {
            config
                .places
                .iter()
                .find(|p| p.chat == place.chat.0 && p.topic == topic)
        };
        let topic = place.topic.map(|t| t.0.0);
        match topic.and_then(|t| listed(Some(t))).or_else(|| listed(None)) {
            Some(p) => Some((Some(p.flow.clone()), p.flow_arg.clone())),
            None => config.group_flow.clone().map(|f| (Some(f), None)),
        }
    }

    /// What `update` asks for; `None` when it asks for nothing (another bot's command, a
    /// group the bot does not serve, an update of a kind it does not read).
    pub(super) async fn route(&self, update: &Update) -> Result<Option<Routed>, OrchestratorError> {
        let id = update_key(update.id);
        match &update.kind {
            UpdateKind::Message(message) => Ok(self.route_message(id, message)),
            UpdateKind::CallbackQuery(query) => self.route_callback(id, query).await,
            _ => Ok(None),
        }
    }

    fn route_message(&self, id: String, message: &Message) -> Option<Routed> {
        let from = message.from.as_ref().filter(|u| !u.is_bot)?;
        let private = message.chat.is_private();
        let in_admin_chat = self.config.admin_chat_id == Some(message.chat.id.0);
        if in_admin_chat && !message.text().is_some_and(|t| t.starts_with('/')) {
            // the admin chat takes admin commands, and replies to the bot's notices and
            // relayed messages (a person writing to a conversation they hold)
            let replied = message
                .reply_to_message()
                .filter(|m| m.from.as_ref().is_some_and(|u| u.is_bot))?;
            let place = Place::of(message);
            let work = Work::StaffReply {
                place,
                by: SessionKey {
                    platform: Platform::Telegram,
                    chat: place.chat.0.to_string(),
                    thread: String::new(),
                    user: from.id.0.to_string(),
                },
                name: from.full_name(),
                replying_to: NoticeRef {
                    platform: Platform::Telegram,
                    chat: place.chat.0.to_string(),
                    message_id: replied.id.0.to_string(),
                },
                text: message.text().map(str::to_string),
                message_id: id.clone(),
            };
            let lane = (place.chat.0, place.topic_number(), from.id.0);
            return Some(Routed { id, lane, work });
        }
        let place = Place::of(message);
        let (flow, flow_arg) = self
            .flow_for(private, place)
            .or_else(|| in_admin_chat.then_some((None, None)))?;
        let lane = (place.chat.0, place.topic_number(), from.id.0);
        let Some(text) = message.text().or(message.caption()) else {
            // a photo or a sticker: the host's, when Kaiwa is mounted in one
            return (private && !self.mounted).then_some(Routed {
                id,
                lane,
                work: Work::TextOnly { place },
            });
        };
        let text = command_for_me(text, &self.me)?;
        let body = Body::from_text(&text);
        if self.mounted
            && let Body::Command { name, .. } = &body
            && !self.orchestrator.knows_command(name)
        {
            // the host's command
            return None;
        }
        let incoming = Incoming {
            platform: Platform::Telegram,
            chat: place.chat.0.to_string(),
            thread: place.thread_string(),
            user: UserRef {
                id: from.id.0.to_string(),
                display_name: from.full_name(),
                language: from.language_code.clone(),
            },
            message_id: id.clone(),
            body,
            flow,
            flow_arg,
            shared: !private,
        };
        Some(Routed {
            id,
            lane,
            work: Work::Turn { incoming, place },
        })
    }

    async fn route_callback(
        &self,
        id: String,
        query: &CallbackQuery,
    ) -> Result<Option<Routed>, OrchestratorError> {
        let user = query.from.id.0;
        let notice = |id: String, lane: LaneKey, query: String, text| Routed {
            id,
            lane,
            work: Work::Notice { query, text },
        };
        let data = query.data.as_deref().unwrap_or_default();
        if let Some(action) = AdminAction::decode(data)
            && let Some(message) = query.regular_message()
        {
            let place = Place::of(message);
            let by = SessionKey {
                platform: Platform::Telegram,
                chat: place.chat.0.to_string(),
                thread: String::new(),
                user: user.to_string(),
            };
            let work = Work::Admin {
                query: query.id.0.clone(),
                place,
                by,
                name: query.from.full_name(),
                action,
            };
            let lane = (place.chat.0, place.topic_number(), user);
            return Ok(Some(Routed { id, lane, work }));
        }
        if self.mounted && !Press::is_kaiwas(data) {
            // the host's own button
            return Ok(None);
        }
        let press = Press::decode(data).or_else(|| {
            // keyboards sent before the namespace, while no other handler's exist
            (!self.mounted)
                .then(|| Press::decode_legacy(data))
                .flatten()
        });
        let (Some(message), Some(press)) = (query.regular_message(), press) else {
            return Ok(Some(notice(
                id,
                (0, 0, user),
                query.id.0.clone(),
                STALE_NOTICE,
            )));
        };
        let place = Place::of(message);
        let lane = (place.chat.0, place.topic_number(), user);
        let key = SessionKey {
            platform: Platform::Telegram,
            chat: place.chat.0.to_string(),
            thread: place.thread_string(),
            user: user.to_string(),
        };
        let Some(request) = pending_request(&self.orchestrator, &key, press.request_id()).await?
        else {
            return Ok(Some(notice(id, lane, query.id.0.clone(), STALE_NOTICE)));
        };
        let values = match press {
            Press::Toggle { index, mask, .. } => {
                if index >= request.options.len() {
                    return Ok(Some(notice(id, lane, query.id.0.clone(), STALE_NOTICE)));
                }
                let work = Work::Toggle {
                    query: query.id.0.clone(),
                    chat: place.chat,
                    message: message.id,
                    markup: keyboard(&request, mask ^ (1 << index)),
                };
                return Ok(Some(Routed { id, lane, work }));
            }
            Press::Done { mask, .. } => {
                let values = values_of(&request, mask);
                if values.is_empty() {
                    return Ok(Some(notice(id, lane, query.id.0.clone(), PICK_ONE)));
                }
                values
            }
            Press::Pick { index, .. } => match chosen_values(&request, &[index]) {
                Some(values) => values,
                None => return Ok(Some(notice(id, lane, query.id.0.clone(), STALE_NOTICE))),
            },
        };
        let shown = shown_choice(&request, &values);
        let private = message.chat.is_private();
        let (flow, flow_arg) = self.flow_for(private, place).unwrap_or_default();
        let incoming = Incoming {
            platform: Platform::Telegram,
            chat: key.chat,
            thread: key.thread,
            user: UserRef {
                id: key.user,
                display_name: query.from.full_name(),
                language: query.from.language_code.clone(),
            },
            message_id: id.clone(),
            body: Body::Choice {
                request_id: request.request_id.clone(),
                values,
            },
            flow,
            flow_arg,
            shared: !private,
        };
        let work = Work::Press {
            incoming,
            place,
            query: query.id.0.clone(),
            message: message.id,
            shown,
        };
        Ok(Some(Routed { id, lane, work }))
    }

    /// Says that `work`'s message could not be stored (it was not taken in).
    pub(super) async fn save_failed(&self, work: &Work) {
        match work {
            Work::Turn { place, .. } => {
                if let Err(e) = self.api.send_text(*place, SAVE_FAILED, None).await {
                    tracing::warn!(error = %e, "could not tell the user");
                }
            }
            Work::Press { query, .. } => self.answer_quietly(query, Some(SAVE_FAILED)).await,
            _ => {}
        }
    }

    async fn turn(&self, incoming: Incoming, place: Place) {
        if let Err(error) = self
            .orchestrator
            .handle_kept(incoming, self.outbox.as_ref())
            .await
        {
            tracing::error!(%error, chat = %place.chat, "turn not stored");
            if let Err(e) = self.api.send_text(place, SAVE_FAILED, None).await {
                tracing::warn!(error = %e, "could not tell the user");
            }
        }
    }

    /// Answers a callback query (stops the button's spinner), logging a failure instead of
    /// returning it: the press itself is processed either way.
    async fn answer_quietly(&self, id: &str, notice: Option<&str>) {
        if let Err(e) = self.api.answer_callback(id, notice).await {
            tracing::warn!(error = %e, "could not answer a button press; processing it anyway");
        }
    }
}

/// Telegram's work in the shared intake: a chat's messages reach whichever instance
/// receives them (webhooks behind a load balancer), so among several instances they run
/// in the order the claims take them.
#[async_trait::async_trait]
impl Turns for Context {
    type Work = Work;
    type Lane = LaneKey;

    const PLATFORM: Platform = Platform::Telegram;
    const ONE_RECEIVER_PER_CHAT: bool = false;

    fn outbox(&self) -> &dyn Outbox {
        self.outbox.as_ref()
    }

    fn kept(&self, incoming: Incoming) -> Option<(LaneKey, Work)> {
        let (lane, place) = lane_of(&incoming)?;
        Some((lane, Work::Turn { incoming, place }))
    }

    fn entry(work: &Work) -> Option<&Incoming> {
        work.kept()
    }

    /// Does `work`, in its lane.
    async fn run(&self, work: Work) {
        match work {
            Work::Turn { incoming, place } => self.turn(incoming, place).await,
            Work::Press {
                incoming,
                place,
                query,
                message,
                shown,
            } => {
                // best-effort: a press answered too late (or a Bot API hiccup) is still a choice
                self.answer_quietly(&query, None).await;
                if let Err(e) = self.api.show_choice(place.chat, message, &shown).await {
                    tracing::warn!(error = %e, "could not disable the keyboard");
                }
                self.turn(incoming, place).await;
            }
            Work::Toggle {
                query,
                chat,
                message,
                markup,
            } => {
                if let Err(e) = self.api.update_keyboard(chat, message, &markup).await {
                    tracing::warn!(error = %e, "could not update a keyboard");
                }
                self.answer_quietly(&query, None).await;
            }
            Work::Notice { query, text } => self.answer_quietly(&query, Some(text)).await,
            Work::StaffReply {
                place,
                by,
                name,
                replying_to,
                text,
                message_id,
            } => {
                let said = self
                    .orchestrator
                    .staff_reply(&by, &name, &replying_to, &message_id, text.as_deref())
                    .await;
                if let Some(said) = said
                    && let Err(e) = self.api.send_text(place, &said, None).await
                {
                    tracing::warn!(error = %e, "could not answer in the admin chat");
                }
            }
            Work::Admin {
                query,
                place,
                by,
                name,
                action,
            } => {
                let outcome = self.orchestrator.admin_action(&by, &name, action).await;
                self.answer_quietly(&query, Some(&truncate(&outcome.text, 190)))
                    .await;
                // (a notice the orchestrator posted says it in the admin chat already)
                if !outcome.posted
                    && let Err(e) = self.api.send_text(place, &outcome.text, None).await
                {
                    tracing::warn!(error = %e, "could not answer an admin's press in the admin chat");
                }
            }
            Work::TextOnly { place } => {
                if let Err(e) = self.api.send_text(place, TEXT_ONLY, None).await {
                    tracing::warn!(error = %e, "could not answer a non-text message");
                }
            }
        }
    }

    /// `work` found its session's queue full: the first refusal of a burst is answered, the
    /// rest dropped.
    async fn refuse(&self, work: Work, tell: bool) {
        match work {
            Work::Turn { place, .. }
            | Work::TextOnly { place }
            | Work::StaffReply { place, .. } => {
                if tell && let Err(e) = self.api.send_text(place, QUEUE_FULL, None).await {
                    tracing::warn!(error = %e, "could not say the queue is full");
                }
            }
            Work::Press { query, .. }
            | Work::Toggle { query, .. }
            | Work::Notice { query, .. }
            | Work::Admin { query, .. } => {
                let text = tell.then_some(QUEUE_FULL);
                self.answer_quietly(&query, text).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_for_other_bots_are_ignored() {
        assert_eq!(command_for_me("hello", "kaiwa_bot"), Some("hello".into()));
        assert_eq!(
            command_for_me("/status@Kaiwa_Bot reading", "kaiwa_bot"),
            Some("/status reading".into())
        );
        assert_eq!(
            command_for_me("/help@kaiwa_bot", "kaiwa_bot"),
            Some("/help".into())
        );
        assert_eq!(command_for_me("/help@other_bot", "kaiwa_bot"), None);
        assert_eq!(command_for_me("/help", "kaiwa_bot"), Some("/help".into()));
    }

    #[test]
    fn update_keys_sort_as_the_update_ids_do() {
        let ids = [7, 9, 10, 99_999, 100_000, 892_252_934, u32::MAX];
        let keys: Vec<String> = ids.iter().map(|&id| update_key(UpdateId(id))).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        assert_eq!(update_key(UpdateId(u32::MAX)), "u4294967295");
    }
}

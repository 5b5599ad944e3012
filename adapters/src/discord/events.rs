//! The gateway's events: messages, component presses and slash commands turned into
//! [`Incoming`]s for the orchestrator (a press read through [`crate::interaction`]).

use super::api::DiscordApi;
use super::components::{NAMESPACE, Press, components};
use super::outbox::DiscordOutbox;
use super::outbox::channel_of;
use super::places::{self, Parents, Place, target_of};
use super::{DiscordConfig, MESSAGE_LIMIT};
use crate::interaction::{
    ALREADY_COMPLETE, SAVE_FAILED, STALE_NOTICE, TEXT_ONLY, chosen_values, pending_request,
    shown_choice,
};
use crate::lanes::Scheduler;
use crate::split::truncate;
use crate::{AdapterHealth, SeenIds};
use async_trait::async_trait;
use kaiwa_core::admin::{AdminAction, NoticeRef};
use kaiwa_core::message::{Body, Incoming, Platform, SessionKey, UserRef};
use kaiwa_core::orchestrator::{Orchestrator, QUEUE_FULL};
use serenity::all::{
    ChannelId, CommandDataOptionValue, CommandInteraction, ComponentInteraction,
    ComponentInteractionDataKind, Context, CreateInteractionResponse,
    CreateInteractionResponseMessage, CreateThread, EditInteractionResponse, EventHandler, Http,
    Interaction, Message, Ready,
};
use std::sync::Arc;

pub(super) const SEEN: usize = 4096;

pub(super) struct Handler {
    pub(super) api: DiscordApi,
    pub(super) orchestrator: Arc<Orchestrator>,
    pub(super) config: DiscordConfig,
    pub(super) health: Arc<AdapterHealth>,
    pub(super) seen: SeenIds<String>,
    /// thread id → parent channel id (looked up once per thread)
    pub(super) parents: Parents,
    /// The turns, one ordered lane per session.
    pub(super) turns: Arc<Turns>,
    /// Beside a host bot's handlers: other components and commands are left to them.
    pub(super) mounted: bool,
    /// A shard was ready already: what is done once per process (the last run's leftovers,
    /// the slash commands) is done.
    pub(super) started: std::sync::atomic::AtomicBool,
}

/// A session's lane: chat, thread, user.
pub(super) type LaneKey = (String, String, String);

/// A message kept in the inbox, waiting for its turn in its session's lane.
pub(super) struct Work {
    incoming: Incoming,
    reply_to: ChannelId,
    /// A slash command's interaction, answered once the turn is done.
    command: Option<(Box<CommandInteraction>, Arc<Http>)>,
}

/// What runs the turns: the lanes and what a turn needs.
pub(super) struct Turns {
    pub(super) api: DiscordApi,
    pub(super) outbox: DiscordOutbox,
    pub(super) orchestrator: Arc<Orchestrator>,
    pub(super) lanes: Scheduler<LaneKey, Work>,
    /// Messages queued here already (a claim lists them again until they are answered).
    pub(super) queued: SeenIds<String>,
    /// Several instances: the task claiming this instance's share of the shared inbox.
    pub(super) claims: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// How often an instance among several looks for messages of chats it holds or may take.
const CLAIM_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

impl Turns {
    /// Keeps `incoming` in the inbox and queues it in its session's lane (a worker starts
    /// for an idle session); a full queue refuses it with one notice per burst.
    pub(super) async fn queue(
        self: &Arc<Self>,
        incoming: Incoming,
        reply_to: ChannelId,
        command: Option<(Box<CommandInteraction>, Arc<Http>)>,
    ) {
        self.orchestrator.accept(&incoming).await;
        if self.orchestrator.instance().is_shared()
            && !self
                .orchestrator
                .holds_chat(Platform::Discord, &incoming.chat)
                .await
        {
            // another instance holds the chat (a turn of it may be running there): the
            // message waits in the shared inbox for that instance's claim
            tracing::debug!("a message for a chat another instance holds, left in the inbox");
            if let Some(command) = command {
                finish_command(command, &shown_command(&incoming.body)).await;
            }
            return;
        }
        self.schedule(incoming, reply_to, command);
    }

    /// Several instances: every [`CLAIM_EVERY`] the messages of the chats this instance
    /// holds or takes go to their lanes ([`Orchestrator::claim`]).
    pub(super) fn claim_loop(self: Arc<Self>) {
        let turns = Arc::downgrade(&self);
        let task = tokio::spawn(async move {
            loop {
                let Some(this) = turns.upgrade() else { return };
                for incoming in this
                    .orchestrator
                    .claim(Platform::Discord, &this.outbox)
                    .await
                {
                    match channel_of(&incoming.chat, &incoming.thread) {
                        Some(channel) => this.schedule(incoming, channel, None),
                        None => tracing::warn!("a kept Discord message names no channel"),
                    }
                }
                drop(this);
                tokio::time::sleep(CLAIM_EVERY).await;
            }
        });
        *self.claims.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    /// Queues a message already in the inbox in its session's lane.
    pub(super) fn schedule(
        self: &Arc<Self>,
        incoming: Incoming,
        reply_to: ChannelId,
        command: Option<(Box<CommandInteraction>, Arc<Http>)>,
    ) {
        if !self.queued.first_sight(incoming.message_id.clone()) {
            tracing::debug!("a message queued already");
            return;
        }
        let lane = (
            incoming.chat.clone(),
            incoming.thread.clone(),
            incoming.user.id.clone(),
        );
        let work = Work {
            incoming,
            reply_to,
            command,
        };
        let runner = self.clone();
        let run = move |work| {
            let runner = runner.clone();
            async move { runner.run(work).await }
        };
        if let Some((work, tell)) = self.lanes.schedule(lane, work, run) {
            let turns = self.clone();
            self.lanes
                .spawn(async move { turns.refuse(work, tell).await });
        }
    }

    /// Waits until no turn is queued or running (no more are claimed), then lets go of the
    /// chats this instance held.
    pub(super) async fn finish(&self) {
        let claims = self.claims.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(claims) = claims {
            claims.abort();
        }
        self.lanes.finish().await;
        if self.orchestrator.instance().is_shared() {
            self.orchestrator.let_go_chats(Platform::Discord).await;
        }
    }

    async fn run(&self, work: Work) {
        let Work {
            incoming,
            reply_to,
            command,
        } = work;
        let shown = shown_command(&incoming.body);
        if let Err(error) = self.orchestrator.handle_kept(incoming, &self.outbox).await {
            tracing::error!(%error, channel = %reply_to, "turn not stored");
            if let Err(e) = self.api.send_text(reply_to, SAVE_FAILED, Vec::new()).await {
                tracing::warn!(error = %e, "could not tell the user");
            }
        }
        if let Some(command) = command {
            finish_command(command, &shown).await;
        }
    }

    /// A message its session's full queue refused: out of the inbox, answered once per
    /// burst (a slash command always: its interaction waits for an answer).
    async fn refuse(&self, work: Work, tell: bool) {
        tracing::info!(told = tell, "session queue full: message refused");
        self.orchestrator.release(&work.incoming).await;
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
}

/// How a slash command's message shows it (`/ask how do I …`); other messages: nothing.
fn shown_command(body: &Body) -> String {
    match body {
        Body::Command { name, args } => format!("/{name} {args}"),
        _ => String::new(),
    }
}

/// A slash command's deferred answer replaced with the command as given: its turn's
/// replies are messages in the channel.
async fn finish_command(command: (Box<CommandInteraction>, Arc<Http>), shown: &str) {
    let (command, http) = command;
    let done = EditInteractionResponse::new().content(truncate(shown.trim(), 200));
    if let Err(e) = command.edit_response(&http, done).await {
        tracing::warn!(error = %e, "could not finish a slash command");
    }
}

/// The user as the core knows them: id, and the display name (global name, else username).
fn user_ref(user: &serenity::all::User) -> UserRef {
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

#[async_trait]
impl EventHandler for Handler {
    async fn ready(&self, _ctx: Context, ready: Ready) {
        self.health.ok();
        let shard = ready.shard.map(|s| (s.id.0, s.total));
        tracing::info!(bot = %ready.user.name, ?shard, "Discord connected");
        self.api.http.set_application_id(ready.application.id);
        let first = !self.started.swap(true, std::sync::atomic::Ordering::SeqCst);
        // what the last run kept and did not answer goes first in its session's lane
        // (several instances: the claims hand out what any instance left)
        if first && !self.orchestrator.instance().is_shared() {
            for incoming in self
                .orchestrator
                .left_by_last_run(Platform::Discord, &self.turns.outbox)
                .await
            {
                match channel_of(&incoming.chat, &incoming.thread) {
                    Some(channel) => self.turns.schedule(incoming, channel, None),
                    None => tracing::warn!("a kept Discord message names no channel"),
                }
            }
        }
        self.catch_up(shard).await;
        if first {
            let commands = self.orchestrator.flows().menu_commands();
            match self.api.set_commands(&commands).await {
                Ok(written) => tracing::debug!(written, "Discord slash commands registered"),
                Err(e) => {
                    tracing::warn!(error = %e, "could not register the Discord slash commands")
                }
            }
        }
    }

    async fn resume(&self, _ctx: Context, _: serenity::all::ResumedEvent) {
        self.health.ok();
        tracing::info!("Discord session resumed");
    }

    async fn message(&self, _ctx: Context, msg: Message) {
        self.on_message(msg).await;
    }

    async fn interaction_create(&self, ctx: Context, interaction: Interaction) {
        match interaction {
            Interaction::Component(component) => self.on_component(&ctx, component).await,
            Interaction::Command(command) => self.on_command(&ctx, command).await,
            _ => {}
        }
    }
}

impl Handler {
    /// The flow whose channel `channel` is, if any ([`places::flow_of_channel`]).
    pub(super) fn flow_of_channel(&self, channel: u64) -> Option<&'static str> {
        places::flow_of_channel(&self.config, channel)
    }

    /// Where a message in `channel` belongs ([`places::place_of`]).
    pub(super) async fn place_of(&self, channel: ChannelId, dm: bool) -> Option<Place> {
        places::place_of(&self.config, (&self.parents, &self.api), channel, dm).await
    }

    pub(super) async fn turn(&self, incoming: Incoming, reply_to: ChannelId) {
        self.turns.queue(incoming, reply_to, None).await;
    }

    pub(super) async fn on_message(&self, msg: Message) {
        let in_guild = msg.guild_id.is_some();
        self.on_message_in(msg, in_guild).await;
    }

    /// A message, `in_guild` or in a DM. A message read over REST (catch-up) carries no
    /// `guild_id`: its caller knows where it was written.
    pub(super) async fn on_message_in(&self, msg: Message, in_guild: bool) {
        if msg.author.bot || !self.seen.first_sight(format!("m{}", msg.id)) {
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

    /// A button under an admin notice: answered at once (deferred), done, then the outcome
    /// shown in the admin channel for every admin to see.
    async fn on_admin_action(
        &self,
        ctx: &Context,
        component: &ComponentInteraction,
        action: AdminAction,
    ) {
        let defer = CreateInteractionResponse::Defer(CreateInteractionResponseMessage::new());
        if let Err(e) = component.create_response(&ctx.http, defer).await {
            tracing::warn!(error = %e, "could not acknowledge an admin's press");
        }
        let by = SessionKey {
            platform: Platform::Discord,
            chat: component.channel_id.get().to_string(),
            thread: String::new(),
            user: component.user.id.get().to_string(),
        };
        let name = component
            .user
            .global_name
            .clone()
            .unwrap_or_else(|| component.user.name.clone());
        let outcome = self.orchestrator.admin_action(&by, &name, action).await;
        let said = if outcome.posted {
            "Done.".to_string()
        } else {
            outcome.text
        };
        let done = EditInteractionResponse::new().content(truncate(&said, MESSAGE_LIMIT));
        if let Err(e) = component.edit_response(&ctx.http, done).await {
            tracing::warn!(error = %e, "could not show the outcome of an admin's press");
        }
    }

    pub(super) async fn on_component(&self, ctx: &Context, component: ComponentInteraction) {
        if self.mounted && !component.data.custom_id.starts_with(NAMESPACE) {
            // the host's own component: neither acknowledged nor answered here
            return;
        }
        if !self.seen.first_sight(format!("i{}", component.id)) {
            return;
        }
        self.health.ok();
        if component.data.custom_id == super::stream::STOP_ID {
            // outside the session's queue: the turn writing the reply holds it
            let stopped = self
                .turns
                .outbox
                .streams()
                .stop(component.channel_id.get(), component.message.id.get());
            if !stopped {
                return self.ephemeral(ctx, &component, ALREADY_COMPLETE).await;
            }
            let acknowledge = CreateInteractionResponse::Acknowledge;
            if let Err(e) = component.create_response(&ctx.http, acknowledge).await {
                tracing::warn!(error = %e, "could not acknowledge a Stop");
            }
            return;
        }
        if let Some(action) = AdminAction::decode(&component.data.custom_id) {
            return self.on_admin_action(ctx, &component, action).await;
        }
        let press = Press::decode(&component.data.custom_id);
        let dm = component.guild_id.is_none();
        let place = self.place_of(component.channel_id, dm).await;
        let (Some(press), Some(place)) = (press, place) else {
            return self.ephemeral(ctx, &component, STALE_NOTICE).await;
        };
        let key = SessionKey {
            platform: Platform::Discord,
            chat: place.chat.clone(),
            thread: place.thread.clone(),
            user: component.user.id.get().to_string(),
        };
        let request = match pending_request(&self.orchestrator, &key, press.request_id()).await {
            Ok(Some(request)) => request,
            Ok(None) => return self.ephemeral(ctx, &component, STALE_NOTICE).await,
            Err(e) => {
                tracing::error!(error = %e, "could not load the session");
                return self.ephemeral(ctx, &component, SAVE_FAILED).await;
            }
        };
        let indexes: Vec<usize> = match (&press, &component.data.kind) {
            (Press::Pick { index, .. }, _) => vec![*index],
            (Press::Select { .. }, ComponentInteractionDataKind::StringSelect { values }) => {
                values.iter().filter_map(|v| v.parse().ok()).collect()
            }
            _ => Vec::new(),
        };
        let Some(values) = chosen_values(&request, &indexes).filter(|v| !v.is_empty()) else {
            return self.ephemeral(ctx, &component, STALE_NOTICE).await;
        };
        // acknowledge at once (well within 3 s): show the choice, disable the components
        let shown = truncate(&shown_choice(&request, &values), MESSAGE_LIMIT);
        let update = CreateInteractionResponse::UpdateMessage(
            CreateInteractionResponseMessage::new()
                .content(shown)
                .components(components(&request, true)),
        );
        if let Err(e) = component.create_response(&ctx.http, update).await {
            tracing::warn!(error = %e, "could not acknowledge a component");
        }
        let reply_to = target_of(&place);
        let incoming = Incoming {
            platform: Platform::Discord,
            chat: place.chat,
            thread: place.thread,
            user: UserRef {
                // the client's language, which Discord tells with an interaction
                language: Some(component.locale.clone()),
                ..user_ref(&component.user)
            },
            message_id: format!("i{}", component.id),
            body: Body::Choice {
                request_id: request.request_id.clone(),
                values,
            },
            flow: place.flow,
            flow_arg: place.flow_arg,
            shared: !dm,
        };
        self.turn(incoming, reply_to).await;
    }

    pub(super) async fn ephemeral(
        &self,
        ctx: &Context,
        component: &ComponentInteraction,
        text: &str,
    ) {
        let response = CreateInteractionResponse::Message(
            CreateInteractionResponseMessage::new()
                .content(text)
                .ephemeral(true),
        );
        if let Err(e) = component.create_response(&ctx.http, response).await {
            tracing::warn!(error = %e, "could not answer a component");
        }
    }

    pub(super) async fn on_command(&self, ctx: &Context, command: CommandInteraction) {
        if self.mounted && !self.orchestrator.knows_command(&command.data.name) {
            // the host's command: its own handler answers it
            return;
        }
        if !self.seen.first_sight(format!("i{}", command.id)) {
            return;
        }
        self.health.ok();
        let dm = command.guild_id.is_none();
        let args = command
            .data
            .options
            .iter()
            .find_map(|o| match &o.value {
                CommandDataOptionValue::String(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let defer = CreateInteractionResponse::Defer(CreateInteractionResponseMessage::new());
        if let Err(e) = command.create_response(&ctx.http, defer).await {
            tracing::warn!(error = %e, "could not defer a slash command");
        }
        let place = match self.place_of(command.channel_id, dm).await {
            Some(place) => place,
            // a command in a plain channel runs there, in the default flow
            None => Place {
                chat: command.channel_id.get().to_string(),
                thread: String::new(),
                flow: None,
                flow_arg: None,
            },
        };
        let reply_to = target_of(&place);
        let incoming = Incoming {
            platform: Platform::Discord,
            chat: place.chat,
            thread: place.thread,
            user: UserRef {
                language: Some(command.locale.clone()),
                ..user_ref(&command.user)
            },
            message_id: format!("i{}", command.id),
            body: Body::Command {
                name: command.data.name.clone(),
                args: args.trim().to_string(),
            },
            flow: place.flow,
            flow_arg: place.flow_arg,
            shared: !dm,
        };
        let http = ctx.http.clone();
        self.turns
            .queue(incoming, reply_to, Some((Box::new(command), http)))
            .await;
    }
}

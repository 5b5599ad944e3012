//! The Discord adapter (serenity): gateway events turned into [`Incoming`]s, replies rendered
//! as messages, buttons, select menus and embeds.
//!
//! - A new message in a help-desk channel opens a thread named after the question; the
//!   thread is the session (key: channel + thread + user) and the bot answers inside it.
//!   Reading channels open a thread per book the same way. Direct messages run the DM flow
//!   (an interview by default).
//! - Options: single choice → buttons (5 per row, 5 rows); multi-select → a select menu.
//!   Custom ids carry the request's short id and an option index ([`Press`]). Every
//!   interaction is answered at once (the message is updated to show the choice, its
//!   components disabled) and the turn runs after; a stale or foreign component gets an
//!   ephemeral notice and changes nothing.
//! - Slash commands are registered at start-up (English names, Japanese descriptions too) and
//!   deferred while the turn runs.
//! - REST calls that hit a 429 are waited out and sent again ([`DiscordApi`]); with the
//!   built-in rate limiter on (production, no `api_proxy`) serenity already does this.
//! - A message is processed once: recent ids are remembered in memory and every turn is
//!   deduplicated by the store.

use crate::split::{split_text, truncate};
use crate::{AdapterError, AdapterHealth, SeenIds};
use async_trait::async_trait;
use kaiwa_core::admin::{AdminNotice, AdminSink, DeliveryError};
use kaiwa_core::flow::CommandInfo;
use kaiwa_core::message::{
    Body, Incoming, OptionsRequest, Outgoing, Platform, SessionKey, UserRef,
};
use kaiwa_core::orchestrator::{Orchestrator, Outbox};
use serenity::all::{
    ButtonStyle, ChannelId, ChannelType, Command, CommandDataOptionValue, CommandInteraction,
    CommandOptionType, ComponentInteraction, ComponentInteractionDataKind, Context,
    CreateActionRow, CreateButton, CreateCommand, CreateCommandOption, CreateEmbed,
    CreateInteractionResponse, CreateInteractionResponseMessage, CreateMessage, CreateSelectMenu,
    CreateSelectMenuKind, CreateSelectMenuOption, CreateThread, EditInteractionResponse,
    EventHandler, GatewayIntents, Http, HttpBuilder, Interaction, Message, Ready,
};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Discord's limit on one message's content, in characters.
pub const MESSAGE_LIMIT: usize = 2000;
/// Buttons per row and rows per message.
const PER_ROW: usize = 5;
const MAX_ROWS: usize = 5;
/// Options a select menu can hold.
const MAX_SELECT: usize = 25;

/// How the adapter is set up (from `[discord]` in the configuration).
#[derive(Clone)]
pub struct DiscordConfig {
    /// The bot token (from the environment; never logged).
    pub token: String,
    /// Where audit summaries and handoffs go (as embeds).
    pub admin_channel_id: Option<u64>,
    /// Channels where a new message opens a help-desk thread.
    pub helpdesk_channel_ids: Vec<u64>,
    /// Channels where a new message opens a reading thread.
    pub reading_channel_ids: Vec<u64>,
    /// An HTTP proxy base URL for the REST API (a shared rate-limit proxy, or a test's
    /// fake). With it serenity's own rate limiter is off and 429s are waited out here.
    pub api_proxy: Option<String>,
    /// The flow direct messages run (`None`: the default flow) and its argument.
    pub dm_flow: Option<String>,
    pub dm_flow_arg: Option<String>,
}

impl std::fmt::Debug for DiscordConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordConfig")
            .field("token", &"<redacted>")
            .field("admin_channel_id", &self.admin_channel_id)
            .field("helpdesk_channel_ids", &self.helpdesk_channel_ids)
            .field("reading_channel_ids", &self.reading_channel_ids)
            .field("api_proxy", &self.api_proxy)
            .finish()
    }
}

/// What a component carries in its custom id (always far below Discord's 100 characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Press {
    /// A button of a single-choice request.
    Pick { request_id: String, index: usize },
    /// The select menu of a multi-select request (the values are option indexes).
    Select { request_id: String },
}

impl Press {
    pub fn request_id(&self) -> &str {
        match self {
            Press::Pick { request_id, .. } | Press::Select { request_id } => request_id,
        }
    }

    pub fn encode(&self) -> String {
        match self {
            Press::Pick { request_id, index } => format!("kaiwa|p|{request_id}|{index}"),
            Press::Select { request_id } => format!("kaiwa|s|{request_id}"),
        }
    }

    pub fn decode(id: &str) -> Option<Press> {
        let mut parts = id.split('|');
        if parts.next()? != "kaiwa" {
            return None;
        }
        let kind = parts.next()?;
        let request_id = parts.next()?.to_string();
        if request_id.is_empty() || request_id.len() > 24 {
            return None;
        }
        let press = match kind {
            "p" => Press::Pick {
                request_id,
                index: parts.next()?.parse().ok()?,
            },
            "s" => Press::Select { request_id },
            _ => return None,
        };
        parts.next().is_none().then_some(press)
    }
}

/// The components of an options message; `disabled` after a choice.
pub fn components(request: &OptionsRequest, disabled: bool) -> Vec<CreateActionRow> {
    if request.allow_multiple {
        let options: Vec<CreateSelectMenuOption> = request
            .options
            .iter()
            .take(MAX_SELECT)
            .enumerate()
            .map(|(i, o)| CreateSelectMenuOption::new(truncate(&o.label, 100), i.to_string()))
            .collect();
        let count = options.len().max(1) as u8;
        let menu = CreateSelectMenu::new(
            Press::Select {
                request_id: request.request_id.clone(),
            }
            .encode(),
            CreateSelectMenuKind::String { options },
        )
        .placeholder("Choose one or more / 複数選べます")
        .min_values(1)
        .max_values(count)
        .disabled(disabled);
        return vec![CreateActionRow::SelectMenu(menu)];
    }
    let buttons: Vec<CreateButton> = request
        .options
        .iter()
        .take(PER_ROW * MAX_ROWS)
        .enumerate()
        .map(|(index, o)| {
            let press = Press::Pick {
                request_id: request.request_id.clone(),
                index,
            };
            CreateButton::new(press.encode())
                .label(truncate(&o.label, 80))
                .style(ButtonStyle::Primary)
                .disabled(disabled)
        })
        .collect();
    buttons
        .chunks(PER_ROW)
        .map(|row| CreateActionRow::Buttons(row.to_vec()))
        .collect()
}

/// REST calls that wait out 429s (needed when serenity's rate limiter is off).
#[derive(Clone)]
pub struct DiscordApi {
    http: Arc<Http>,
}

const RATE_LIMIT_RETRIES: u32 = 5;

fn is_rate_limited(e: &serenity::Error) -> bool {
    matches!(e, serenity::Error::Http(serenity::all::HttpError::UnsuccessfulRequest(r)) if r.status_code.as_u16() == 429)
}

/// A REST client for `token`, through `api_proxy` when one is set.
fn build_http(token: &str, api_proxy: Option<&str>) -> Http {
    let mut builder = HttpBuilder::new(token);
    if let Some(proxy) = api_proxy {
        // serenity ignores the proxy while its rate limiter is on (serenity #1739)
        builder = builder
            .proxy(proxy.trim_end_matches('/'))
            .ratelimiter_disabled(true);
    }
    builder.build()
}

impl DiscordApi {
    pub fn new(token: &str, api_proxy: Option<&str>) -> DiscordApi {
        DiscordApi {
            http: Arc::new(build_http(token, api_proxy)),
        }
    }

    pub fn http(&self) -> &Arc<Http> {
        &self.http
    }

    async fn call<T, F, Fut>(&self, what: &'static str, f: F) -> Result<T, serenity::Error>
    where
        F: Fn(Arc<Http>) -> Fut,
        Fut: Future<Output = Result<T, serenity::Error>>,
    {
        let mut tries = 0;
        loop {
            match f(self.http.clone()).await {
                Err(e) if is_rate_limited(&e) && tries < RATE_LIMIT_RETRIES => {
                    tries += 1;
                    let wait = Duration::from_millis(500 * u64::from(tries));
                    tracing::warn!(call = what, ?wait, "Discord rate limit; waiting");
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    /// Sends `text` split to Discord's limit; `components` go on the last piece.
    pub async fn send_text(
        &self,
        channel: ChannelId,
        text: &str,
        components: Vec<CreateActionRow>,
    ) -> Result<Option<Message>, serenity::Error> {
        let pieces = split_text(text, MESSAGE_LIMIT, |_| 1);
        let last = pieces.len().saturating_sub(1);
        let mut sent = None;
        for (i, piece) in pieces.iter().enumerate() {
            let rows = if i == last {
                components.clone()
            } else {
                Vec::new()
            };
            let message = self
                .call("createMessage", |http| {
                    let builder = CreateMessage::new()
                        .content(piece.clone())
                        .components(rows.clone());
                    async move { channel.send_message(&http, builder).await }
                })
                .await?;
            sent = Some(message);
        }
        Ok(sent)
    }

    async fn typing(&self, channel: ChannelId) -> Result<(), serenity::Error> {
        self.call("triggerTyping", |http| async move {
            channel.broadcast_typing(&http).await
        })
        .await
    }

    /// Registers the slash commands (global).
    pub async fn set_commands(&self, commands: &[CommandInfo]) -> Result<(), serenity::Error> {
        let list: Vec<CreateCommand> = commands
            .iter()
            .map(|c| {
                CreateCommand::new(c.name)
                    .description(truncate(c.description_en, 100))
                    .description_localized("ja", truncate(c.description_ja, 100))
                    .add_option(
                        CreateCommandOption::new(
                            CommandOptionType::String,
                            "text",
                            "what follows the command (optional)",
                        )
                        .required(false),
                    )
            })
            .collect();
        self.call("bulkOverwriteGlobalCommands", |http| {
            let list = list.clone();
            async move { Command::set_global_commands(&http, list).await.map(|_| ()) }
        })
        .await
    }
}

fn delivery_error(e: serenity::Error) -> DeliveryError {
    if is_rate_limited(&e) {
        return DeliveryError::RateLimited {
            retry_after: Duration::from_secs(1),
        };
    }
    match e {
        serenity::Error::Http(serenity::all::HttpError::Request(e)) => {
            DeliveryError::Disconnected(e.to_string())
        }
        other => DeliveryError::Rejected(other.to_string()),
    }
}

/// Where a conversation's replies go: its thread, or its channel (`None`: not a channel id).
fn channel_of(chat: &str, thread: &str) -> Option<ChannelId> {
    let id = if thread.is_empty() { chat } else { thread };
    id.parse::<u64>()
        .ok()
        .filter(|id| *id != 0)
        .map(ChannelId::new)
}

/// Where a session's replies go.
fn target(key: &SessionKey) -> Result<ChannelId, DeliveryError> {
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
}

impl DiscordOutbox {
    pub fn new(api: DiscordApi) -> Self {
        DiscordOutbox { api }
    }
}

#[async_trait]
impl Outbox for DiscordOutbox {
    async fn deliver(&self, key: &SessionKey, items: &[Outgoing]) -> Result<(), DeliveryError> {
        let channel = target(key)?;
        for item in items {
            let sent = match item {
                Outgoing::Text { text } => self.api.send_text(channel, text, Vec::new()).await,
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
}

/// Audit summaries and handoffs as embeds in the admin channel.
pub struct DiscordAdminSink {
    api: DiscordApi,
    channel: ChannelId,
}

impl DiscordAdminSink {
    pub fn new(api: DiscordApi, admin_channel_id: u64) -> Self {
        DiscordAdminSink {
            api,
            channel: ChannelId::new(admin_channel_id.max(1)),
        }
    }
}

/// The embed of an admin notice (title, labelled fields, the body as description).
pub fn notice_embed(notice: &AdminNotice) -> CreateEmbed {
    let color = match notice.kind.as_str() {
        "handoff" => 0xE67E22,
        _ if notice
            .fields
            .iter()
            .any(|(k, v)| k == "Audit" && v != "passed") =>
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
    async fn notify(&self, notice: &AdminNotice) -> Result<(), DeliveryError> {
        let channel = self.channel;
        let embed = notice_embed(notice);
        self.api
            .call("createMessage", |http| {
                let builder = CreateMessage::new().embed(embed.clone());
                async move { channel.send_message(&http, builder).await }
            })
            .await
            .map(|_| ())
            .map_err(delivery_error)
    }
}

const STALE_NOTICE: &str = "This button is no longer active. / このボタンはもう使えません。";
const TEXT_ONLY: &str = "I can only read text messages. / テキストのメッセージだけ読めます。";
const SAVE_FAILED: &str = "Sorry, I could not save that. Please send it again. / 保存できませんでした。もう一度送ってください。";
const SEEN: usize = 4096;

/// Where a message belongs: the session's channel and thread, and the flow a new session runs.
struct Place {
    chat: String,
    thread: String,
    flow: Option<String>,
    flow_arg: Option<String>,
}

struct Handler {
    api: DiscordApi,
    outbox: DiscordOutbox,
    orchestrator: Arc<Orchestrator>,
    config: DiscordConfig,
    health: Arc<AdapterHealth>,
    seen: SeenIds<String>,
    /// thread id → parent channel id (looked up once per thread)
    parents: Mutex<HashMap<u64, Option<u64>>>,
}

impl Handler {
    fn flow_of_channel(&self, channel: u64) -> Option<&'static str> {
        if self.config.helpdesk_channel_ids.contains(&channel) {
            Some("helpdesk")
        } else if self.config.reading_channel_ids.contains(&channel) {
            Some("reading")
        } else {
            None
        }
    }

    /// The parent channel of a thread (`None` for a plain channel).
    async fn parent_of(&self, channel: ChannelId) -> Option<u64> {
        if let Some(known) = self
            .parents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&channel.get())
        {
            return *known;
        }
        let parent = match self
            .api
            .call("getChannel", |http| async move {
                channel.to_channel(&http).await
            })
            .await
        {
            Ok(serenity::all::Channel::Guild(c))
                if matches!(
                    c.kind,
                    ChannelType::PublicThread | ChannelType::PrivateThread
                ) =>
            {
                c.parent_id.map(ChannelId::get)
            }
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "could not look up a channel");
                return None;
            }
        };
        self.parents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(channel.get(), parent);
        parent
    }

    /// Where a message in `channel` belongs; `None` when the bot should stay silent.
    async fn place_of(&self, channel: ChannelId, dm: bool) -> Option<Place> {
        if dm {
            return Some(Place {
                chat: channel.get().to_string(),
                thread: String::new(),
                flow: self.config.dm_flow.clone(),
                flow_arg: self.config.dm_flow_arg.clone(),
            });
        }
        let parent = self.parent_of(channel).await?;
        let flow = self.flow_of_channel(parent)?;
        Some(Place {
            chat: parent.to_string(),
            thread: channel.get().to_string(),
            flow: Some(flow.into()),
            flow_arg: None,
        })
    }

    async fn turn(&self, incoming: Incoming, reply_to: ChannelId) {
        if let Err(error) = self
            .orchestrator
            .handle_durable(incoming, &self.outbox)
            .await
        {
            tracing::error!(%error, channel = %reply_to, "turn not stored");
            if let Err(e) = self.api.send_text(reply_to, SAVE_FAILED, Vec::new()).await {
                tracing::warn!(error = %e, "could not tell the user");
            }
        }
    }

    async fn on_message(&self, msg: Message) {
        if msg.author.bot || !self.seen.first_sight(format!("m{}", msg.id)) {
            return;
        }
        self.health.ok();
        let dm = msg.guild_id.is_none();
        let text = msg.content.trim();
        // a new question in a help-desk or reading channel opens its own thread
        let place = match msg.guild_id.and(self.flow_of_channel(msg.channel_id.get())) {
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
                        self.parents
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(thread.id.get(), Some(channel.get()));
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
            // the admin channel takes admin commands only
            None if self.config.admin_channel_id == Some(msg.channel_id.get()) => {
                if !text.starts_with('/') {
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
        };
        self.turn(incoming, reply_to).await;
    }

    async fn on_component(&self, ctx: &Context, component: ComponentInteraction) {
        if !self.seen.first_sight(format!("i{}", component.id)) {
            return;
        }
        self.health.ok();
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
        let session = match self.orchestrator.store().active_session(&key).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "could not load the session");
                return self.ephemeral(ctx, &component, SAVE_FAILED).await;
            }
        };
        let Some(request) = session
            .and_then(|s| s.pending_options)
            .filter(|r| r.request_id == press.request_id())
        else {
            tracing::info!(user = %key.user, "stale or foreign component pressed");
            return self.ephemeral(ctx, &component, STALE_NOTICE).await;
        };
        let indexes: Vec<usize> = match (&press, &component.data.kind) {
            (Press::Pick { index, .. }, _) => vec![*index],
            (Press::Select { .. }, ComponentInteractionDataKind::StringSelect { values }) => {
                values.iter().filter_map(|v| v.parse().ok()).collect()
            }
            _ => Vec::new(),
        };
        let mut values = Vec::new();
        for i in indexes {
            match request.options.get(i) {
                Some(o) if !values.contains(&o.value) => values.push(o.value.clone()),
                Some(_) => {}
                None => return self.ephemeral(ctx, &component, STALE_NOTICE).await,
            }
        }
        if values.is_empty() {
            return self.ephemeral(ctx, &component, STALE_NOTICE).await;
        }
        // acknowledge at once (well within 3 s): show the choice, disable the components
        let shown = truncate(
            &format!(
                "{}\n\n✓ {}",
                request.prompt,
                request.labels_of(&values).join(", ")
            ),
            MESSAGE_LIMIT,
        );
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
            user: user_ref(&component.user),
            message_id: format!("i{}", component.id),
            body: Body::Choice {
                request_id: request.request_id.clone(),
                values,
            },
            flow: place.flow,
            flow_arg: place.flow_arg,
        };
        self.turn(incoming, reply_to).await;
    }

    async fn ephemeral(&self, ctx: &Context, component: &ComponentInteraction, text: &str) {
        let response = CreateInteractionResponse::Message(
            CreateInteractionResponseMessage::new()
                .content(text)
                .ephemeral(true),
        );
        if let Err(e) = component.create_response(&ctx.http, response).await {
            tracing::warn!(error = %e, "could not answer a component");
        }
    }

    async fn on_command(&self, ctx: &Context, command: CommandInteraction) {
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
        let shown = format!("/{} {args}", command.data.name);
        let incoming = Incoming {
            platform: Platform::Discord,
            chat: place.chat,
            thread: place.thread,
            user: user_ref(&command.user),
            message_id: format!("i{}", command.id),
            body: Body::Command {
                name: command.data.name.clone(),
                args: args.trim().to_string(),
            },
            flow: place.flow,
            flow_arg: place.flow_arg,
        };
        self.turn(incoming, reply_to).await;
        let done = EditInteractionResponse::new().content(truncate(shown.trim(), 200));
        if let Err(e) = command.edit_response(&ctx.http, done).await {
            tracing::warn!(error = %e, "could not finish a slash command");
        }
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
    }
}

/// Where replies to a place go (places are built from channel ids the gateway sent).
fn target_of(place: &Place) -> ChannelId {
    channel_of(&place.chat, &place.thread).unwrap_or(ChannelId::new(1))
}

#[async_trait]
impl EventHandler for Handler {
    async fn ready(&self, _ctx: Context, ready: Ready) {
        self.health.ok();
        tracing::info!(bot = %ready.user.name, "Discord connected");
        self.api.http.set_application_id(ready.application.id);
        if let Err(e) = self
            .orchestrator
            .replay_inbox(Platform::Discord, &self.outbox)
            .await
        {
            tracing::warn!(error = %e, "could not handle the messages left by the last run");
        }
        let commands = self.orchestrator.flows().menu_commands();
        if let Err(e) = self.api.set_commands(&commands).await {
            tracing::warn!(error = %e, "could not register the Discord slash commands");
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

/// The running adapter: the gateway until `shutdown` resolves.
pub struct DiscordAdapter {
    api: DiscordApi,
    config: DiscordConfig,
    orchestrator: Arc<Orchestrator>,
    health: Arc<AdapterHealth>,
}

impl DiscordAdapter {
    pub fn new(api: DiscordApi, config: DiscordConfig, orchestrator: Arc<Orchestrator>) -> Self {
        DiscordAdapter {
            api,
            config,
            orchestrator,
            health: Arc::new(AdapterHealth::new("discord")),
        }
    }

    pub fn health(&self) -> Arc<AdapterHealth> {
        self.health.clone()
    }

    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), AdapterError> {
        let DiscordAdapter {
            api,
            config,
            orchestrator,
            health,
        } = self;
        let intents = GatewayIntents::GUILD_MESSAGES
            | GatewayIntents::DIRECT_MESSAGES
            | GatewayIntents::MESSAGE_CONTENT;
        let handler = Handler {
            outbox: DiscordOutbox::new(api.clone()),
            api: api.clone(),
            orchestrator,
            config: config.clone(),
            health: health.clone(),
            seen: SeenIds::new(SEEN),
            parents: Mutex::new(HashMap::new()),
        };
        // the client takes its own Http; both point at the same place with the same token
        let http = build_http(&config.token, config.api_proxy.as_deref());
        let mut client = serenity::client::ClientBuilder::new_with_http(http, intents)
            .event_handler(handler)
            .await
            .map_err(|e| AdapterError::Platform(format!("Discord client: {e}")))?;
        let shards = client.shard_manager.clone();
        let stopper = async move {
            shutdown.await;
            tracing::info!("Discord adapter stopping");
            shards.shutdown_all().await;
        };
        let run = async {
            let result = client.start().await;
            if let Err(e) = &result {
                health.failed();
                tracing::error!(error = %e, "Discord gateway stopped");
            }
            result
        };
        let (result, ()) = tokio::join!(run, stopper);
        health.set_stopped();
        result.map_err(|e| AdapterError::Platform(format!("Discord gateway: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaiwa_core::message::OptionItem;

    #[test]
    fn custom_ids_round_trip_and_stay_short() {
        for press in [
            Press::Pick {
                request_id: "0123456789ab".into(),
                index: 24,
            },
            Press::Select {
                request_id: "0123456789ab".into(),
            },
        ] {
            let id = press.encode();
            assert!(id.len() <= 100);
            assert_eq!(Press::decode(&id), Some(press));
        }
        for bad in [
            "",
            "kaiwa|x|a|1",
            "other|p|a|1",
            "kaiwa|p||1",
            "kaiwa|p|a|x",
            "kaiwa|s|a|1",
        ] {
            assert_eq!(Press::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn single_choice_is_buttons_five_per_row_and_multi_select_a_menu() {
        let options: Vec<OptionItem> = (0..7)
            .map(|i| OptionItem::new(format!("v{i}"), format!("Option {i}")))
            .collect();
        let single = OptionsRequest::new("Pick", options.clone(), false);
        let rows = serde_json::to_value(components(&single, false)).unwrap_or_default();
        assert_eq!(rows.as_array().map(Vec::len), Some(2));
        assert_eq!(rows[0]["components"].as_array().map(Vec::len), Some(5));
        let multi = OptionsRequest::new("Pick", options, true);
        let rows = serde_json::to_value(components(&multi, true)).unwrap_or_default();
        assert_eq!(rows[0]["components"][0]["type"], 3);
        assert_eq!(rows[0]["components"][0]["max_values"], 7);
        assert_eq!(rows[0]["components"][0]["disabled"], true);
    }
}

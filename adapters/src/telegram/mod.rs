//! The Telegram adapter (teloxide): long polling through teloxide's `Dispatcher`, messages and
//! inline-keyboard presses turned into [`Incoming`]s, replies rendered as HTML messages and
//! inline keyboards.
//!
//! - A private chat, a group and each forum topic (`message_thread_id`) are separate places;
//!   replies go to the topic they answer. Updates of one place run in order, places in
//!   parallel (the dispatcher's distribution key is chat + topic).
//! - Options become inline keyboards whose buttons carry the request's short id and an index
//!   ([`mod@keyboard`]); a press is answered, the message is edited to show the choice and loses
//!   its keyboard; a press on a stale or foreign keyboard gets a notice and changes nothing.
//! - Every Bot API call waits out `RetryAfter` (flood control) and retries network errors a
//!   few times ([`TelegramApi`]); a message is never dropped for a 429.
//! - An update is processed once: recent update ids are remembered in memory, and every turn
//!   is deduplicated by the store (`telegram` + chat + message id), which survives restarts.

pub mod keyboard;

use crate::interaction::{
    PICK_ONE, SAVE_FAILED, STALE_NOTICE, TEXT_ONLY, chosen_values, pending_request, shown_choice,
};
use crate::split::{MAX_PIECES, split_capped, truncate};
use crate::{AdapterError, AdapterHealth, SeenIds};
use async_trait::async_trait;
use kaiwa_core::admin::{AdminNotice, AdminSink, DeliveryError};
use kaiwa_core::flow::CommandInfo;
use kaiwa_core::message::{Body, Incoming, Outgoing, Platform, SessionKey, UserRef};
use kaiwa_core::orchestrator::{Orchestrator, Outbox};
use keyboard::{Press, keyboard, values_of};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use teloxide::dispatching::{Dispatcher, UpdateFilterExt};
use teloxide::prelude::*;
use teloxide::types::{
    BotCommand, ChatAction, InlineKeyboardMarkup, Me, MessageId, ParseMode, ThreadId, Update,
    UpdateId, UpdateKind,
};
use teloxide::update_listeners::Polling;
use teloxide::{ApiError, RequestError};

/// Telegram's limit on one message's text, in UTF-16 code units.
pub const MESSAGE_LIMIT: usize = 4096;

/// How the adapter behaves (from `[telegram]` in the configuration). The token and the API
/// URL live in the [`TelegramApi`] it is given.
#[derive(Debug, Clone)]
pub struct TelegramConfig {
    /// Where audit summaries and handoffs go.
    pub admin_chat_id: Option<i64>,
    /// The flow a private chat starts with (`None`: the default flow) and its argument.
    pub private_flow: Option<String>,
    pub private_flow_arg: Option<String>,
    /// The flow groups and forum topics run; `None`: the bot ignores groups.
    pub group_flow: Option<String>,
    /// Long-poll timeout; must stay below the HTTP client's ~17 s.
    pub poll_timeout: Duration,
}

/// A chat and, in a forum, a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub chat: ChatId,
    pub topic: Option<ThreadId>,
}

impl Place {
    fn of(message: &Message) -> Place {
        Place {
            chat: message.chat.id,
            topic: message.thread_id.filter(|_| message.is_topic_message),
        }
    }

    fn from_key(key: &SessionKey) -> Result<Place, DeliveryError> {
        let chat = key
            .chat
            .parse::<i64>()
            .map_err(|_| DeliveryError::Rejected(format!("not a Telegram chat: {}", key.chat)))?;
        let topic = match key.thread.as_str() {
            "" => None,
            t => Some(ThreadId(MessageId(t.parse::<i32>().map_err(|_| {
                DeliveryError::Rejected(format!("not a Telegram topic: {t}"))
            })?))),
        };
        Ok(Place {
            chat: ChatId(chat),
            topic,
        })
    }

    fn thread_string(&self) -> String {
        self.topic.map(|t| t.0.0.to_string()).unwrap_or_default()
    }
}

/// Bot API calls with flood-control waits and network retries.
#[derive(Clone)]
pub struct TelegramApi {
    bot: Bot,
}

/// Network failures are retried this many times (with 0.5 s, 1 s, 2 s … waits).
const NETWORK_RETRIES: u32 = 3;
/// `RetryAfter` is waited out this many times before the call gives up.
const FLOOD_RETRIES: u32 = 5;

impl TelegramApi {
    pub fn new(token: &str, api_url: Option<&str>) -> Result<TelegramApi, AdapterError> {
        let client = teloxide::net::default_reqwest_settings()
            .build()
            .map_err(|e| AdapterError::Setup(format!("HTTP client: {e}")))?;
        let mut bot = Bot::with_client(token, client);
        if let Some(url) = api_url {
            let url = reqwest::Url::parse(url)
                .map_err(|e| AdapterError::Setup(format!("telegram.api_url {url:?}: {e}")))?;
            bot = bot.set_api_url(url);
        }
        Ok(TelegramApi { bot })
    }

    pub fn bot(&self) -> &Bot {
        &self.bot
    }

    /// Runs one Bot API call, waiting out flood control and retrying network errors.
    async fn call<T, F, Fut>(&self, what: &'static str, f: F) -> Result<T, RequestError>
    where
        F: Fn(Bot) -> Fut,
        Fut: Future<Output = Result<T, RequestError>>,
    {
        let mut floods = 0;
        let mut failures = 0;
        loop {
            match f(self.bot.clone()).await {
                Err(RequestError::RetryAfter(wait)) if floods < FLOOD_RETRIES => {
                    floods += 1;
                    let wait = wait.duration().min(Duration::from_secs(120));
                    tracing::warn!(method = what, ?wait, "Telegram flood control; waiting");
                    tokio::time::sleep(wait).await;
                }
                Err(RequestError::Network(e)) if failures < NETWORK_RETRIES => {
                    let wait = Duration::from_millis(500 << failures);
                    failures += 1;
                    tracing::warn!(method = what, error = %e, ?wait, "Telegram unreachable; retrying");
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    /// Sends `text` (plain text; escaped here) split to Telegram's limit; the keyboard, if
    /// any, goes on the last piece.
    pub async fn send_text(
        &self,
        place: Place,
        text: &str,
        markup: Option<InlineKeyboardMarkup>,
    ) -> Result<(), RequestError> {
        let pieces = split_capped(text, MESSAGE_LIMIT, MAX_PIECES, html_cost);
        let last = pieces.len().saturating_sub(1);
        for (i, piece) in pieces.iter().enumerate() {
            let html = escape_html(piece);
            let markup = markup.clone().filter(|_| i == last);
            self.call("sendMessage", |bot| {
                let mut request = bot
                    .send_message(place.chat, html.clone())
                    .parse_mode(ParseMode::Html);
                if let Some(topic) = place.topic {
                    request = request.message_thread_id(topic);
                }
                if let Some(markup) = markup.clone() {
                    request = request.reply_markup(markup);
                }
                async move { request.await.map(|_| ()) }
            })
            .await?;
        }
        Ok(())
    }

    async fn typing(&self, place: Place) -> Result<(), RequestError> {
        self.call("sendChatAction", |bot| {
            let mut request = bot.send_chat_action(place.chat, ChatAction::Typing);
            if let Some(topic) = place.topic {
                request = request.message_thread_id(topic);
            }
            async move { request.await.map(|_| ()) }
        })
        .await
    }

    async fn answer_callback(&self, id: &str, notice: Option<&str>) -> Result<(), RequestError> {
        let id = teloxide::types::CallbackQueryId(id.to_string());
        self.call("answerCallbackQuery", |bot| {
            let mut request = bot.answer_callback_query(id.clone());
            if let Some(text) = notice {
                request = request.text(text).show_alert(true);
            }
            async move { request.await.map(|_| ()) }
        })
        .await
    }

    /// Replaces an options message with its prompt and the choice, removing the keyboard.
    async fn show_choice(
        &self,
        chat: ChatId,
        message: MessageId,
        text: &str,
    ) -> Result<(), RequestError> {
        let html = escape_html(&truncate(text, MESSAGE_LIMIT - 16));
        not_modified_is_ok(
            self.call("editMessageText", |bot| {
                let request = bot
                    .edit_message_text(chat, message, html.clone())
                    .parse_mode(ParseMode::Html);
                async move { request.await.map(|_| ()) }
            })
            .await,
        )
    }

    async fn update_keyboard(
        &self,
        chat: ChatId,
        message: MessageId,
        markup: InlineKeyboardMarkup,
    ) -> Result<(), RequestError> {
        not_modified_is_ok(
            self.call("editMessageReplyMarkup", |bot| {
                let request = bot
                    .edit_message_reply_markup(chat, message)
                    .reply_markup(markup.clone());
                async move { request.await.map(|_| ()) }
            })
            .await,
        )
    }

    /// Registers the command menu in English (default) and Japanese.
    pub async fn set_commands(&self, commands: &[CommandInfo]) -> Result<(), RequestError> {
        for ja in [false, true] {
            let list: Vec<BotCommand> = commands
                .iter()
                .map(|c| {
                    let d = if ja {
                        c.description_ja
                    } else {
                        c.description_en
                    };
                    BotCommand::new(c.name, d)
                })
                .collect();
            self.call("setMyCommands", |bot| {
                let mut request = bot.set_my_commands(list.clone());
                if ja {
                    request = request.language_code("ja");
                }
                async move { request.await.map(|_| ()) }
            })
            .await?;
        }
        Ok(())
    }
}

fn not_modified_is_ok(result: Result<(), RequestError>) -> Result<(), RequestError> {
    match result {
        Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
        other => other,
    }
}

fn delivery_error(e: RequestError) -> DeliveryError {
    match e {
        RequestError::RetryAfter(wait) => DeliveryError::RateLimited {
            retry_after: wait.duration(),
        },
        RequestError::Network(e) => DeliveryError::Disconnected(e.to_string()),
        other => DeliveryError::Rejected(other.to_string()),
    }
}

/// Escapes text for Telegram's HTML parse mode.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// Telegram counts the text after entity parsing, in UTF-16 units.
fn html_cost(c: char) -> usize {
    c.len_utf16()
}

/// Renders replies in a chat.
pub struct TelegramOutbox {
    api: TelegramApi,
}

impl TelegramOutbox {
    pub fn new(api: TelegramApi) -> Self {
        TelegramOutbox { api }
    }
}

#[async_trait]
impl Outbox for TelegramOutbox {
    async fn deliver(&self, key: &SessionKey, items: &[Outgoing]) -> Result<(), DeliveryError> {
        let place = Place::from_key(key)?;
        for item in items {
            let sent = match item {
                Outgoing::Text { text } => self.api.send_text(place, text, None).await,
                Outgoing::Options(request) => {
                    let markup = keyboard(request, 0);
                    self.api
                        .send_text(place, &request.prompt, Some(markup))
                        .await
                }
                Outgoing::StartThread { title } => {
                    self.api
                        .send_text(place, &format!("— {title} —"), None)
                        .await
                }
                Outgoing::Typing => self.api.typing(place).await,
            };
            sent.map_err(delivery_error)?;
        }
        Ok(())
    }
}

/// Audit summaries and handoffs in the admin chat.
pub struct TelegramAdminSink {
    api: TelegramApi,
    chat: ChatId,
}

impl TelegramAdminSink {
    pub fn new(api: TelegramApi, admin_chat_id: i64) -> Self {
        TelegramAdminSink {
            api,
            chat: ChatId(admin_chat_id),
        }
    }
}

#[async_trait]
impl AdminSink for TelegramAdminSink {
    async fn notify(&self, notice: &AdminNotice) -> Result<(), DeliveryError> {
        let place = Place {
            chat: self.chat,
            topic: None,
        };
        self.api
            .send_text(place, &notice.to_text(), None)
            .await
            .map_err(delivery_error)
    }
}

/// How many recent update ids are remembered to drop duplicates before they cost anything.
const SEEN_UPDATES: usize = 4096;

struct Context {
    api: TelegramApi,
    outbox: TelegramOutbox,
    orchestrator: Arc<Orchestrator>,
    config: TelegramConfig,
    health: Arc<AdapterHealth>,
    seen: SeenIds<u32>,
}

impl Context {
    async fn turn(&self, incoming: Incoming, place: Place) {
        if let Err(error) = self
            .orchestrator
            .handle_durable(incoming, &self.outbox)
            .await
        {
            tracing::error!(%error, chat = %place.chat, "turn not stored");
            if let Err(e) = self.api.send_text(place, SAVE_FAILED, None).await {
                tracing::warn!(error = %e, "could not tell the user");
            }
        }
    }

    fn flow_for(&self, private: bool) -> Option<(Option<String>, Option<String>)> {
        if private {
            Some((
                self.config.private_flow.clone(),
                self.config.private_flow_arg.clone(),
            ))
        } else {
            self.config.group_flow.clone().map(|f| (Some(f), None))
        }
    }
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

/// The key a Telegram update is processed once under: its update id, which Telegram gives
/// in sequence for the whole bot (a message's own id counts per chat). Zero-padded to the
/// id's widest (`u32`), so keys sort as the ids do and each new one goes at the end of the
/// processed updates' index whichever chat it comes from.
fn update_key(id: UpdateId) -> String {
    format!("u{:010}", id.0)
}

async fn on_message(
    update: Update,
    message: Message,
    me: Me,
    ctx: Arc<Context>,
) -> Result<(), AdapterError> {
    ctx.health.ok();
    if !ctx.seen.first_sight(update.id.0) {
        tracing::info!(update = update.id.0, "duplicate Telegram update ignored");
        return Ok(());
    }
    let Some(from) = message.from.as_ref().filter(|u| !u.is_bot) else {
        return Ok(());
    };
    let private = message.chat.is_private();
    let in_admin_chat = ctx.config.admin_chat_id == Some(message.chat.id.0);
    if in_admin_chat && !message.text().is_some_and(|t| t.starts_with('/')) {
        // the admin chat takes admin commands only
        return Ok(());
    }
    let Some((flow, flow_arg)) = ctx
        .flow_for(private)
        .or_else(|| in_admin_chat.then_some((None, None)))
    else {
        return Ok(());
    };
    let place = Place::of(&message);
    let Some(text) = message.text().or(message.caption()) else {
        if private && let Err(e) = ctx.api.send_text(place, TEXT_ONLY, None).await {
            tracing::warn!(error = %e, "could not answer a non-text message");
        }
        return Ok(());
    };
    let Some(text) = command_for_me(text, me.username()) else {
        return Ok(());
    };
    let incoming = Incoming {
        platform: Platform::Telegram,
        chat: place.chat.0.to_string(),
        thread: place.thread_string(),
        user: UserRef {
            id: from.id.0.to_string(),
            display_name: from.full_name(),
        },
        message_id: update_key(update.id),
        body: Body::from_text(&text),
        flow,
        flow_arg,
        shared: !private,
    };
    ctx.turn(incoming, place).await;
    Ok(())
}

async fn on_callback(
    update: Update,
    query: CallbackQuery,
    ctx: Arc<Context>,
) -> Result<(), AdapterError> {
    ctx.health.ok();
    if !ctx.seen.first_sight(update.id.0) {
        tracing::info!(update = update.id.0, "duplicate Telegram update ignored");
        return Ok(());
    }
    let stale = |ctx: Arc<Context>, id: String| async move {
        answer_quietly(&ctx, &id, Some(STALE_NOTICE)).await;
        Ok(())
    };
    let (Some(message), Some(press)) = (
        query.regular_message(),
        query.data.as_deref().and_then(Press::decode),
    ) else {
        return stale(ctx, query.id.0).await;
    };
    let place = Place::of(message);
    let key = SessionKey {
        platform: Platform::Telegram,
        chat: place.chat.0.to_string(),
        thread: place.thread_string(),
        user: query.from.id.0.to_string(),
    };
    let Some(request) = pending_request(&ctx.orchestrator, &key, press.request_id()).await? else {
        return stale(ctx, query.id.0).await;
    };
    let values = match press {
        Press::Toggle { index, mask, .. } => {
            if index >= request.options.len() {
                return stale(ctx, query.id.0).await;
            }
            let markup = keyboard(&request, mask ^ (1 << index));
            ctx.api
                .update_keyboard(place.chat, message.id, markup)
                .await?;
            answer_quietly(&ctx, &query.id.0, None).await;
            return Ok(());
        }
        Press::Done { mask, .. } => {
            let values = values_of(&request, mask);
            if values.is_empty() {
                answer_quietly(&ctx, &query.id.0, Some(PICK_ONE)).await;
                return Ok(());
            }
            values
        }
        Press::Pick { index, .. } => match chosen_values(&request, &[index]) {
            Some(values) => values,
            None => return stale(ctx, query.id.0).await,
        },
    };
    // best-effort: a press answered too late (or a Bot API hiccup) is still a choice
    answer_quietly(&ctx, &query.id.0, None).await;
    let shown = shown_choice(&request, &values);
    if let Err(e) = ctx.api.show_choice(place.chat, message.id, &shown).await {
        tracing::warn!(error = %e, "could not disable the keyboard");
    }
    let (flow, flow_arg) = ctx.flow_for(message.chat.is_private()).unwrap_or_default();
    let incoming = Incoming {
        platform: Platform::Telegram,
        chat: key.chat,
        thread: key.thread,
        user: UserRef {
            id: key.user,
            display_name: query.from.full_name(),
        },
        message_id: update_key(update.id),
        body: Body::Choice {
            request_id: request.request_id.clone(),
            values,
        },
        flow,
        flow_arg,
        shared: !message.chat.is_private(),
    };
    ctx.turn(incoming, place).await;
    Ok(())
}

/// Answers a callback query (stops the button's spinner), logging a failure instead of
/// returning it: the press itself is processed either way.
async fn answer_quietly(ctx: &Context, id: &str, notice: Option<&str>) {
    if let Err(e) = ctx.api.answer_callback(id, notice).await {
        tracing::warn!(error = %e, "could not answer a button press; processing it anyway");
    }
}

/// Updates of one chat + topic run in order; different places run in parallel.
fn place_of_update(update: &Update) -> Option<(i64, i32)> {
    let message = match &update.kind {
        UpdateKind::Message(m) => m,
        UpdateKind::CallbackQuery(q) => q.regular_message()?,
        _ => return None,
    };
    let place = Place::of(message);
    Some((place.chat.0, place.topic.map_or(0, |t| t.0.0)))
}

/// The running adapter: long polling until `shutdown` resolves, then the turns in flight
/// finish before it returns.
pub struct TelegramAdapter {
    api: TelegramApi,
    config: TelegramConfig,
    orchestrator: Arc<Orchestrator>,
    health: Arc<AdapterHealth>,
}

impl TelegramAdapter {
    pub fn new(api: TelegramApi, config: TelegramConfig, orchestrator: Arc<Orchestrator>) -> Self {
        TelegramAdapter {
            api,
            config,
            orchestrator,
            health: Arc::new(AdapterHealth::new("telegram")),
        }
    }

    /// Connected or not, for `/healthz`.
    pub fn health(&self) -> Arc<AdapterHealth> {
        self.health.clone()
    }

    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), AdapterError> {
        let TelegramAdapter {
            api,
            config,
            orchestrator,
            health,
        } = self;
        let me = api
            .call("getMe", |bot| async move { bot.get_me().await })
            .await
            .map_err(|e| AdapterError::Platform(format!("Telegram getMe failed: {e}")))?;
        tracing::info!(bot = %me.username(), "Telegram connected");
        health.ok();
        let commands = orchestrator.flows().menu_commands();
        if let Err(e) = api.set_commands(&commands).await {
            tracing::warn!(error = %e, "could not register the Telegram command menu");
        }
        let poll_timeout = config.poll_timeout;
        let replay_outbox = TelegramOutbox::new(api.clone());
        if let Err(e) = orchestrator
            .replay_inbox(Platform::Telegram, &replay_outbox)
            .await
        {
            tracing::warn!(error = %e, "could not handle the messages left by the last run");
        }
        let ctx = Arc::new(Context {
            outbox: TelegramOutbox::new(api.clone()),
            api: api.clone(),
            orchestrator,
            config,
            health: health.clone(),
            seen: SeenIds::new(SEEN_UPDATES),
        });
        let handler = dptree::entry()
            .branch(Update::filter_message().endpoint(on_message))
            .branch(Update::filter_callback_query().endpoint(on_callback));
        let mut dispatcher = Dispatcher::builder(api.bot().clone(), handler)
            .dependencies(dptree::deps![ctx, me])
            .distribution_function(place_of_update)
            .default_handler(|_| async {})
            .build();
        let listener = Polling::builder(api.bot().clone())
            .timeout(poll_timeout)
            .build();
        let token = dispatcher.shutdown_token();
        let listener_health = health.clone();
        let errors = Arc::new(ListenerErrors(listener_health));
        let stopper = async move {
            shutdown.await;
            tracing::info!("Telegram adapter stopping; finishing turns in flight");
            match token.shutdown() {
                Ok(done) => done.await,
                Err(e) => tracing::warn!(error = %e, "Telegram dispatcher was not running"),
            }
        };
        let run = dispatcher.dispatch_with_listener(listener, errors);
        tokio::join!(run, stopper);
        health.set_stopped();
        Ok(())
    }
}

/// Long-poll errors mark the adapter disconnected until polling works again.
struct ListenerErrors(Arc<AdapterHealth>);

impl teloxide::error_handlers::ErrorHandler<RequestError> for ListenerErrors {
    fn handle_error(
        self: Arc<Self>,
        error: RequestError,
    ) -> futures::future::BoxFuture<'static, ()> {
        self.0.failed();
        tracing::warn!(%error, "Telegram long polling failed; reconnecting");
        Box::pin(async {})
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

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            escape_html("a < b && c > d"),
            "a &lt; b &amp;&amp; c &gt; d"
        );
    }

    #[test]
    fn keys_map_back_to_places() {
        let key = SessionKey {
            platform: Platform::Telegram,
            chat: "-100123".into(),
            thread: "42".into(),
            user: "7".into(),
        };
        let place = Place::from_key(&key).ok();
        assert_eq!(
            place,
            Some(Place {
                chat: ChatId(-100123),
                topic: Some(ThreadId(MessageId(42)))
            })
        );
        let bad = SessionKey {
            chat: "console".into(),
            ..key
        };
        assert!(Place::from_key(&bad).is_err());
    }
}

//! [`DiscordApi`]: serenity's REST client with 429s waited out and sent again (when
//! serenity's own rate limiter is off behind `api_proxy`), and slash-command registration.

use super::MESSAGE_LIMIT;
use crate::split::{MAX_PIECES, split_capped, truncate};
use kaiwa_core::admin::DeliveryError;
use kaiwa_core::flow::CommandInfo;
use serenity::all::{
    ChannelId, Command, CommandOptionType, CreateActionRow, CreateCommand, CreateCommandOption,
    CreateMessage, ErrorResponse, Http, HttpBuilder, HttpError, Message, Nonce,
};
use std::sync::Arc;
use std::time::Duration;

/// REST calls that wait out 429s (needed when serenity's rate limiter is off).
#[derive(Clone)]
pub struct DiscordApi {
    pub(super) http: Arc<Http>,
    /// Behind `api_proxy`: messages are posted directly, to read a 429's wait.
    direct: Option<Arc<Direct>>,
}

/// Messages posted without serenity's client, behind `api_proxy` (serenity's rate limiter
/// is off there, and its errors drop a 429's `retry_after`): one sender at a time per
/// channel (a route), so a 429 is waited out by one waiter while the route's other
/// messages queue behind it instead of each retrying on its own.
struct Direct {
    client: reqwest::Client,
    base: String,
    authorization: String,
    routes: dashmap::DashMap<u64, Arc<tokio::sync::Mutex<()>>>,
}

/// Most routes remembered (one lock each); past it the map starts over.
const MAX_ROUTES: usize = 10_000;
/// The longest 429 wait honoured.
const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);

impl Direct {
    fn route(&self, channel: ChannelId) -> Arc<tokio::sync::Mutex<()>> {
        if self.routes.len() >= MAX_ROUTES {
            self.routes.clear();
        }
        self.routes.entry(channel.get()).or_default().clone()
    }

    /// Posts `message` in `channel`, waiting out 429s (their `retry_after`) with the
    /// route held.
    async fn create_message(
        &self,
        channel: ChannelId,
        message: &CreateMessage,
    ) -> Result<Message, serenity::Error> {
        let route = self.route(channel);
        let _held = route.lock().await;
        let url = format!("{}/api/v10/channels/{channel}/messages", self.base);
        let mut waits = 0;
        loop {
            let response = self
                .client
                .post(&url)
                .header(reqwest::header::AUTHORIZATION, &self.authorization)
                .json(message)
                .send()
                .await?;
            let status = response.status();
            if status.is_success() {
                let body = response.bytes().await?;
                return Ok(serde_json::from_slice(&body)?);
            }
            if status.as_u16() != 429 {
                let error = ErrorResponse::from_response(response, reqwest::Method::POST).await;
                return Err(serenity::Error::Http(HttpError::UnsuccessfulRequest(error)));
            }
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<f64>().ok())
            };
            let from_headers = header("x-ratelimit-reset-after").or_else(|| header("retry-after"));
            let seconds = match from_headers {
                Some(seconds) => seconds,
                None => {
                    let body = response.bytes().await.unwrap_or_default();
                    serde_json::from_slice::<serde_json::Value>(&body)
                        .ok()
                        .and_then(|b| b["retry_after"].as_f64())
                        .unwrap_or(1.0)
                }
            };
            if waits >= RATE_LIMIT_RETRIES {
                return Err(serenity::Error::Other("Discord kept answering 429"));
            }
            waits += 1;
            let wait = Duration::from_secs_f64(seconds.clamp(0.0, 60.0)).min(MAX_RATE_LIMIT_WAIT);
            tracing::warn!(%channel, ?wait, "Discord rate limit on this channel; waiting");
            tokio::time::sleep(wait).await;
        }
    }
}

const RATE_LIMIT_RETRIES: u32 = 5;
/// 5xx answers and failed connections are retried this many times (0.5 s … 8 s).
const FAILURE_RETRIES: u32 = 5;

pub(super) fn is_rate_limited(e: &serenity::Error) -> bool {
    matches!(e, serenity::Error::Http(serenity::all::HttpError::UnsuccessfulRequest(r)) if r.status_code.as_u16() == 429)
}

/// What a failed call means to the core: wait (a 429), Discord out of reach, or a refusal.
pub(super) fn delivery_error(e: serenity::Error) -> DeliveryError {
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

/// A failure worth another try: a 5xx, no connection, or an answer lost on the way (every
/// call made through [`DiscordApi::call`] may be repeated: a message carries a nonce
/// Discord enforces).
fn is_transient(e: &serenity::Error) -> bool {
    match e {
        serenity::Error::Http(serenity::all::HttpError::UnsuccessfulRequest(r)) => {
            r.status_code.is_server_error()
        }
        serenity::Error::Http(serenity::all::HttpError::Request(_)) => true,
        _ => false,
    }
}

/// A nonce for one message: Discord returns the message already created with it instead of
/// a second copy (`enforce_nonce`), so a create whose answer was lost can be sent again.
/// At most 25 characters.
fn message_nonce() -> Nonce {
    let id = uuid::Uuid::new_v4().as_u128();
    Nonce::String(format!("{:024x}", id >> 32))
}

/// A REST client for `token`, through `api_proxy` when one is set.
pub fn build_http(token: &str, api_proxy: Option<&str>) -> Http {
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
        let direct = api_proxy.and_then(|proxy| {
            let client = reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .timeout(Duration::from_secs(30))
                .build()
                .ok()?;
            Some(Arc::new(Direct {
                client,
                base: proxy.trim_end_matches('/').to_string(),
                authorization: format!("Bot {}", token.trim_start_matches("Bot ")),
                routes: dashmap::DashMap::new(),
            }))
        });
        DiscordApi {
            http: Arc::new(build_http(token, api_proxy)),
            direct,
        }
    }

    pub fn http(&self) -> &Arc<Http> {
        &self.http
    }

    pub(super) async fn call<T, F, Fut>(
        &self,
        what: &'static str,
        f: F,
    ) -> Result<T, serenity::Error>
    where
        F: Fn(Arc<Http>) -> Fut,
        Fut: Future<Output = Result<T, serenity::Error>>,
    {
        let mut tries = 0;
        let mut failures = 0;
        loop {
            match f(self.http.clone()).await {
                Err(e) if is_rate_limited(&e) && tries < RATE_LIMIT_RETRIES => {
                    tries += 1;
                    let wait = Duration::from_millis(500 * u64::from(tries));
                    tracing::warn!(call = what, ?wait, "Discord rate limit; waiting");
                    tokio::time::sleep(wait).await;
                }
                Err(e) if is_transient(&e) && failures < FAILURE_RETRIES => {
                    failures += 1;
                    let wait = Duration::from_millis(500 << (failures - 1));
                    tracing::warn!(call = what, error = %e, ?wait, "Discord call failed; trying again");
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
        let pieces = split_capped(text, MESSAGE_LIMIT, MAX_PIECES, |_| 1);
        let last = pieces.len().saturating_sub(1);
        let mut sent = None;
        for (i, piece) in pieces.iter().enumerate() {
            let rows = if i == last {
                components.clone()
            } else {
                Vec::new()
            };
            // one nonce for every try of this piece
            let nonce = message_nonce();
            let direct = self.direct.clone();
            let message = self
                .call("createMessage", |http| {
                    let builder = CreateMessage::new()
                        .content(piece.clone())
                        .components(rows.clone())
                        .nonce(nonce.clone())
                        .enforce_nonce(true);
                    let direct = direct.clone();
                    async move {
                        match direct {
                            Some(direct) => direct.create_message(channel, &builder).await,
                            None => channel.send_message(&http, builder).await,
                        }
                    }
                })
                .await?;
            sent = Some(message);
        }
        Ok(sent)
    }

    pub(super) async fn typing(&self, channel: ChannelId) -> Result<(), serenity::Error> {
        self.call("triggerTyping", |http| async move {
            channel.broadcast_typing(&http).await
        })
        .await
    }

    /// Registers Kaiwa's slash commands (global) one by one: each missing or changed one is
    /// created (Discord replaces a command of the same name), and nothing else is touched, so
    /// the commands a host bot registered on the same application stay. Returns how many
    /// were written.
    pub async fn set_commands(&self, commands: &[CommandInfo]) -> Result<usize, serenity::Error> {
        let existing = self
            .call("getGlobalCommands", |http| async move {
                Command::get_global_commands_with_localizations(&http).await
            })
            .await?;
        let mut written = 0;
        for c in commands {
            let description = truncate(c.description_en, 100);
            let description_ja = truncate(c.description_ja, 100);
            let current = existing.iter().any(|e| {
                e.name == c.name
                    && e.description == description
                    && e.description_localizations
                        .as_ref()
                        .and_then(|l| l.get("ja"))
                        .is_some_and(|ja| *ja == description_ja)
                    && e.options.len() == 1
            });
            if current {
                continue;
            }
            let builder = command_builder(c);
            self.call("createGlobalCommand", |http| {
                let builder = builder.clone();
                async move {
                    Command::create_global_command(&http, builder)
                        .await
                        .map(|_| ())
                }
            })
            .await?;
            written += 1;
        }
        Ok(written)
    }
}

/// A slash command as Kaiwa registers it: its English description, the Japanese one, and one
/// optional text option (what follows the command).
pub(super) fn command_builder(c: &CommandInfo) -> CreateCommand {
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
}

/// What Kaiwa's bot does in a server: read and send messages, open and write in threads,
/// read the history it catches up on, show embeds.
pub const PERMISSIONS: serenity::all::Permissions = serenity::all::Permissions::VIEW_CHANNEL
    .union(serenity::all::Permissions::SEND_MESSAGES)
    .union(serenity::all::Permissions::SEND_MESSAGES_IN_THREADS)
    .union(serenity::all::Permissions::CREATE_PUBLIC_THREADS)
    .union(serenity::all::Permissions::READ_MESSAGE_HISTORY)
    .union(serenity::all::Permissions::EMBED_LINKS);

/// The application the bot `token` belongs to, as Discord describes it.
pub async fn application(
    token: &str,
    api_proxy: Option<&str>,
) -> Result<serenity::all::CurrentApplicationInfo, crate::AdapterError> {
    build_http(token, api_proxy)
        .get_current_application_info()
        .await
        .map_err(|e| crate::AdapterError::Platform(format!("Discord refused the token: {e}")))
}

/// The OAuth2 URL that adds the bot to a server with the scopes and permissions Kaiwa uses.
pub fn invite_url(application_id: u64) -> String {
    format!(
        "https://discord.com/oauth2/authorize?client_id={application_id}&scope=bot%20applications.commands&permissions={}",
        PERMISSIONS.bits()
    )
}

//! Kaiwa as a library: [`Kaiwa`] owns the store, the models, the flows and the orchestrator,
//! built from a configuration file ([`Options`], as `kaiwa run` reads it) or in code
//! ([`Kaiwa::builder`]). Every way of running Kaiwa starts here: `kaiwa run`
//! ([`Kaiwa::run`]), `kaiwa chat` ([`Kaiwa::chat`]), and a bot a team already runs, which
//! mounts Kaiwa's Telegram handler in its teloxide dispatcher ([`Kaiwa::telegram`]) or adds
//! Kaiwa's serenity event handler beside its own ([`Kaiwa::discord`]). Slack runs as its
//! own adapter under `kaiwa run` (`[slack]`, the tokens in [`SlackTokens`]).
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use clap::Parser;
//!
//! // --config / KAIWA_CONFIG, --database-url / KAIWA_DATABASE_URL, the token variables
//! let kaiwa = kaiwa::Kaiwa::open(&kaiwa::Options::parse()).await?;
//! kaiwa.run().await?; // what `kaiwa run` does
//! # Ok(())
//! # }
//! ```
//!
//! The platform crates are re-exported ([`teloxide`], [`serenity`]) so that a host uses the
//! versions Kaiwa is built against.

pub mod app;
pub mod config;
mod error;
mod service;
mod web_console;

pub use error::{BoxError, Error};

/// The teloxide (0.17) Kaiwa is built against.
pub use kaiwa_adapters::teloxide;

/// The serenity (0.12) Kaiwa is built against.
pub use kaiwa_adapters::serenity;

pub use kaiwa_adapters::console::ConsoleOptions;
pub use kaiwa_adapters::discord::DiscordPlugin;
pub use kaiwa_adapters::telegram::{TelegramListener, TelegramPlugin};

/// The core (flows, orchestrator, store, models) and the adapters, for what the types
/// above name: a `ModelRouter` for [`KaiwaBuilder::models`], an `AdminSink`, ….
pub use {kaiwa_adapters, kaiwa_core};

use config::{Settings, optional_secret};
use kaiwa_adapters::console;
use kaiwa_adapters::discord::{DiscordAdminSink, DiscordApi, DiscordConfig, DiscordOutbox};
use kaiwa_adapters::slack::{EventsApi, SlackAdminSink, SlackApi, SlackConfig, SlackOutbox};
use kaiwa_adapters::telegram::{
    PlaceFlow, TelegramAdminSink, TelegramApi, TelegramConfig, TelegramOutbox, WebhookConfig,
};
use kaiwa_core::admin::{AdminSink, FanoutAdminSink, LogAdminSink};
use kaiwa_core::jobs::every;
use kaiwa_core::jobs::retention::delete_old_transcripts;
use kaiwa_core::jobs::weekly_review::send_due_reviews;
use kaiwa_core::llm::ModelRouter;
use kaiwa_core::message::Platform;
use kaiwa_core::orchestrator::{Orchestrator, Outbox};
use kaiwa_core::store::Store;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often the retention job runs.
const RETENTION_CHECK: Duration = Duration::from_secs(3600);

/// How often conversations held by a person are checked for an idle hold (at most).
const HANDBACK_CHECK: Duration = Duration::from_secs(30);

/// How often the weekly reviews that are due are looked for.
const REVIEW_CHECK: Duration = Duration::from_secs(60);

/// Where the configuration file is when none is named.
pub const DEFAULT_CONFIG: &str = "config/kaiwa.toml";

/// Where the configuration file is when none is named and [`DEFAULT_CONFIG`] is not there:
/// in the current folder, as `kaiwa init` writes it.
pub const INIT_CONFIG: &str = "kaiwa.toml";

/// Where Kaiwa's configuration comes from: the options `kaiwa` itself takes, for a host
/// bot's command line (flatten it into the host's `clap` parser, or parse it alone).
#[derive(Debug, Clone, Default, clap::Parser)]
pub struct Options {
    /// Configuration file (default: config/kaiwa.toml, else kaiwa.toml, if there).
    #[arg(long, global = true, env = "KAIWA_CONFIG")]
    pub config: Option<PathBuf>,
    /// Database URL (overrides the configuration).
    #[arg(long, global = true, env = "KAIWA_DATABASE_URL")]
    pub database_url: Option<String>,
}

impl Options {
    /// The configuration file these options name: the file given, else [`DEFAULT_CONFIG`]
    /// if it exists, else [`INIT_CONFIG`] if it exists, else [`DEFAULT_CONFIG`] (which is
    /// not there: the built-in defaults).
    pub fn config_path(&self) -> PathBuf {
        if let Some(path) = &self.config {
            return path.clone();
        }
        [DEFAULT_CONFIG, INIT_CONFIG]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG))
    }

    /// The settings these options name ([`Self::config_path`]; a file given must exist),
    /// else the built-in defaults; and whether the defaults were used because no file was
    /// there.
    pub fn settings(&self) -> Result<(Settings, bool), Error> {
        let (path, required) = (self.config_path(), self.config.is_some());
        let settings = Settings::load(&path, required).map_err(Error::config)?;
        // (the default file may be missing: the built-in defaults apply, but say so, since
        // a bot started from the wrong folder would otherwise run without its forms)
        let defaults = !required && !path.exists();
        if defaults {
            tracing::warn!(path = %path.display(), "no configuration file: built-in defaults");
        }
        Ok((settings, defaults))
    }

    /// The database URL: `--database-url` / `KAIWA_DATABASE_URL`, else the settings'.
    pub fn database_url(&self, settings: &Settings) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| settings.database_url.clone())
    }
}

/// Kaiwa, built and connected to its database: the one entry point of every way to run it.
pub struct Kaiwa {
    settings: Settings,
    orchestrator: Arc<Orchestrator>,
    store: Arc<dyn Store>,
    /// The help-desk's knowledge base (the console's page of it).
    kb: Arc<kaiwa_core::kb::KnowledgeBase>,
    telegram: Option<(TelegramApi, String)>,
    /// `[telegram] webhook_listen` with its secret (read when the bot is built).
    telegram_webhook: Option<WebhookConfig>,
    discord: Option<(DiscordApi, String)>,
    /// The Web API with the bot's tokens, and the Events API when `[slack] events_listen`
    /// is set (its signing secret read when the bot is built).
    slack: Option<(SlackApi, Option<EventsApi>)>,
}

/// Slack's secrets: the bot token, Socket Mode's app-level token, the Events API's signing
/// secret.
#[derive(Clone, Default)]
pub struct SlackTokens {
    pub bot: String,
    pub app: Option<String>,
    pub signing_secret: Option<String>,
}

/// Builds a [`Kaiwa`] in code: settings, and what the environment would otherwise give.
///
/// ```no_run
/// # async fn example() -> anyhow::Result<()> {
/// let settings: kaiwa::config::Settings = toml::from_str(r#"
///     database_url = "sqlite://data/kaiwa.db"
///     [telegram]
///     private_flow = "interview"
/// "#)?;
/// let kaiwa = kaiwa::Kaiwa::builder(settings)
///     .telegram_token("123:abc")
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
pub struct KaiwaBuilder {
    settings: Settings,
    database_url: Option<String>,
    telegram_token: Option<String>,
    discord_token: Option<String>,
    slack: Option<SlackTokens>,
    admin: Option<Arc<dyn AdminSink>>,
    models: Option<ModelRouter>,
    store: Option<Arc<dyn Store>>,
}

impl KaiwaBuilder {
    /// The database (default: the settings' `database_url`).
    pub fn database_url(mut self, url: impl Into<String>) -> Self {
        self.database_url = Some(url.into());
        self
    }

    /// The Telegram bot token (default: none, Telegram off).
    pub fn telegram_token(mut self, token: impl Into<String>) -> Self {
        self.telegram_token = Some(token.into());
        self
    }

    /// The Discord bot token (default: none, Discord off).
    pub fn discord_token(mut self, token: impl Into<String>) -> Self {
        self.discord_token = Some(token.into());
        self
    }

    /// Slack's tokens (default: none, Slack off).
    pub fn slack_tokens(mut self, tokens: SlackTokens) -> Self {
        self.slack = Some(tokens);
        self
    }

    /// The tokens from the variables the settings name (`[telegram] token_env`,
    /// `[discord] token_env`, `[slack] bot_token_env` …), where set.
    pub fn tokens_from_env(mut self) -> Self {
        self.telegram_token = optional_secret(&self.settings.telegram.token_env);
        self.discord_token = optional_secret(&self.settings.discord.token_env);
        let sl = &self.settings.slack;
        self.slack = optional_secret(&sl.bot_token_env).map(|bot| SlackTokens {
            bot,
            app: optional_secret(&sl.app_token_env),
            signing_secret: optional_secret(&sl.signing_secret_env),
        });
        self
    }

    /// Where audit summaries and handoffs go (default: the admin chat / channel of the
    /// configured platforms, else the log).
    pub fn admin_sink(mut self, sink: Arc<dyn AdminSink>) -> Self {
        self.admin = Some(sink);
        self
    }

    /// The models the agents use (default: from `[llm]`; none configured: every agent's
    /// rule-based floor).
    pub fn models(mut self, models: ModelRouter) -> Self {
        self.models = Some(models);
        self
    }

    /// A store opened by the caller instead of the database URL's (it is migrated by
    /// whoever opened it).
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Opens the database (migrating it), indexes the knowledge base, loads the forms and
    /// wires the orchestrator.
    pub async fn build(self) -> Result<Kaiwa, Error> {
        let settings = self.settings;
        let (tg, dc) = (&settings.telegram, &settings.discord);
        let telegram = self
            .telegram_token
            .map(|token| TelegramApi::new(&token, tg.api_url.as_deref()).map(|api| (api, token)))
            .transpose()
            .map_err(|source| Error::Platform {
                platform: "Telegram",
                source,
            })?;
        let telegram_webhook = match (&telegram, &tg.webhook_listen) {
            (Some(_), Some(listen)) => Some(webhook_config(tg, listen)?),
            _ => None,
        };
        let discord = self
            .discord_token
            .map(|token| (DiscordApi::new(&token, dc.api_proxy.as_deref()), token));
        let slack = match self.slack {
            Some(tokens) => Some(slack_of(&settings.slack, tokens)?),
            None => None,
        };
        let admin = match self.admin {
            Some(admin) => admin,
            None => {
                let mut sinks: Vec<Arc<dyn AdminSink>> = Vec::new();
                if let (Some((api, _)), Some(chat)) = (&telegram, tg.admin_chat_id) {
                    sinks.push(Arc::new(
                        TelegramAdminSink::new(api.clone(), chat).with_language(&tg.admin_language),
                    ));
                }
                if let (Some((api, _)), Some(channel)) = (&discord, dc.admin_channel_id) {
                    sinks.push(Arc::new(
                        DiscordAdminSink::new(api.clone(), channel)
                            .with_language(&dc.admin_language),
                    ));
                }
                if let (Some((api, _)), Some(channel)) = (&slack, &settings.slack.admin_channel_id)
                {
                    sinks.push(Arc::new(
                        SlackAdminSink::new(api.clone(), channel)
                            .with_language(&settings.slack.admin_language),
                    ));
                }
                match sinks.len() {
                    0 => {
                        if telegram.is_some() || discord.is_some() || slack.is_some() {
                            tracing::warn!(
                                "no admin chat or channel configured; audit summaries go to the log only"
                            );
                        }
                        Arc::new(LogAdminSink)
                    }
                    1 => sinks.remove(0),
                    _ => Arc::new(FanoutAdminSink(sinks)),
                }
            }
        };
        let database_url = self
            .database_url
            .unwrap_or_else(|| settings.database_url.clone());
        let app = app::App::build(&settings, &database_url, self.store, admin, self.models).await?;
        if let Some(place) = tg
            .places
            .iter()
            .find(|p| app.orchestrator.flows().get(&p.flow).is_none())
        {
            return Err(Error::Config(
                format!(
                    "[[telegram.places]] chat {}: no flow {:?} (flows: {})",
                    place.chat,
                    place.flow,
                    app.orchestrator.flows().ids().join(", ")
                )
                .into(),
            ));
        }
        Ok(Kaiwa {
            settings,
            orchestrator: app.orchestrator,
            store: app.store,
            kb: app.kb,
            telegram,
            telegram_webhook,
            discord,
            slack,
        })
    }
}

/// Slack's Web API and transport from `[slack]` and its secrets: Socket Mode needs the
/// app-level token, the Events API the signing secret (without it anyone could post
/// events), so a start without them is refused.
fn slack_of(
    sl: &config::SlackSettings,
    tokens: SlackTokens,
) -> Result<(SlackApi, Option<EventsApi>), Error> {
    let events = match &sl.events_listen {
        Some(listen) => {
            let Some(secret) = tokens.signing_secret.clone().filter(|s| !s.is_empty()) else {
                return Err(Error::Config(
                    format!(
                        "[slack] events_listen is set but the variable {:?} (signing_secret_env) \
                         holding the app's signing secret is not",
                        sl.signing_secret_env
                    )
                    .into(),
                ));
            };
            Some(EventsApi {
                listen: listen.clone(),
                path: sl.events_path.clone(),
                signing_secret: secret,
            })
        }
        None => {
            if tokens.app.is_none() {
                return Err(Error::Config(
                    format!(
                        "Slack's Socket Mode needs the app-level token (xapp-…) in {:?} \
                         (app_token_env), or set [slack] events_listen for the Events API",
                        sl.app_token_env
                    )
                    .into(),
                ));
            }
            None
        }
    };
    let api = SlackApi::new(&tokens.bot, tokens.app.as_deref(), sl.api_url.as_deref())
        .map_err(|e| Error::Config(e.into()))?;
    Ok((api, events))
}

/// The webhook `[telegram]` configures, its secret read from the variable it names: a
/// webhook without a secret would take updates from anyone, so the start is refused.
fn webhook_config(tg: &config::TelegramSettings, listen: &str) -> Result<WebhookConfig, Error> {
    let variable = tg.webhook_secret_env.as_deref().unwrap_or_default();
    let Some(secret) = optional_secret(variable) else {
        return Err(Error::Config(
            format!(
                "[telegram] webhook_listen is set but the variable {variable:?} \
                 (webhook_secret_env) holding the webhook's secret is not"
            )
            .into(),
        ));
    };
    if !kaiwa_adapters::telegram::valid_secret(&secret) {
        return Err(Error::Config(
            format!(
                "the webhook secret in {variable} must be 1-256 characters of A-Z, a-z, 0-9, _ and -"
            )
            .into(),
        ));
    }
    Ok(WebhookConfig {
        listen: listen.to_string(),
        path: tg.webhook_path.clone(),
        secret,
    })
}

/// The lease of the instance that runs the scheduled jobs (weekly reviews, retention).
pub const JOBS_LEASE: &str = "jobs";

impl Kaiwa {
    /// A builder from `settings` (no tokens, the settings' database).
    pub fn builder(settings: Settings) -> KaiwaBuilder {
        KaiwaBuilder {
            settings,
            database_url: None,
            telegram_token: None,
            discord_token: None,
            slack: None,
            admin: None,
            models: None,
            store: None,
        }
    }

    /// Kaiwa as `kaiwa run` opens it: the configuration `options` name, the database URL
    /// from them or the file, the bot tokens from the variables the file names.
    pub async fn open(options: &Options) -> Result<Kaiwa, Error> {
        let (settings, _) = options.settings()?;
        let database_url = options.database_url(&settings);
        Kaiwa::builder(settings)
            .database_url(database_url)
            .tokens_from_env()
            .build()
            .await
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The core: flows, sessions, the store; for a host that feeds Kaiwa by other means.
    pub fn orchestrator(&self) -> &Arc<Orchestrator> {
        &self.orchestrator
    }

    /// Runs the bot as a service (`kaiwa run`): every platform with a token, `/healthz` and
    /// `/metrics`, the scheduled jobs, until SIGTERM or Ctrl-C.
    pub async fn run(self) -> Result<(), Error> {
        self.run_until(service::shutdown_signal()).await
    }

    /// [`Kaiwa::run`] until `shutdown` resolves instead of a signal: then no new messages
    /// are taken, the turns in flight finish (within `[server] shutdown_grace_secs`) and the
    /// database is closed. An error when a platform's adapter fails.
    pub async fn run_until(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> Result<(), Error> {
        service::run(self, shutdown).await
    }

    /// The store, for reading what Kaiwa keeps (sessions, submissions, the ledger): its
    /// capabilities ([`Store`], with [`kaiwa_core::store::Reads`]), whatever the backend.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The browser console as a router, its sign-in links starting at `public_url` (what
    /// `kaiwa run` serves on `[console] listen`; a host can serve it on its own axum server,
    /// nested at the root of a host name). Serve it with
    /// `into_make_service_with_connect_info::<SocketAddr>()` to limit sign-in attempts per
    /// address.
    pub fn console(&self, public_url: &str) -> axum::Router {
        let people = self.orchestrator.for_people();
        people.serve_console_at(public_url);
        web_console::router(web_console::ConsoleState::new(
            people,
            self.store.clone(),
            self.kb.clone(),
            public_url,
            self.settings.console.session(),
        ))
    }

    /// A conversation with `options.flow` over `input` / `output` (`kaiwa chat`).
    pub async fn chat<R, W>(
        self,
        input: R,
        output: W,
        options: ConsoleOptions,
    ) -> Result<console::ConsoleExit, Error>
    where
        R: tokio::io::AsyncBufRead + Unpin + Send,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        if let Some(flow) = &options.flow
            && self.orchestrator.flows().get(flow).is_none()
        {
            return Err(Error::UnknownFlow {
                flow: flow.clone(),
                available: self.orchestrator.flows().ids().join(", "),
            });
        }
        let result = console::run(&self.orchestrator.for_adapters(), input, output, options).await;
        self.close().await;
        result.map_err(Error::Console)
    }

    /// A teloxide `Bot` for the host's dispatcher, with Kaiwa's token and `[telegram]
    /// api_url`; `None` without a Telegram token.
    pub fn telegram_bot(&self) -> Option<teloxide::Bot> {
        let (_, token) = self.telegram.as_ref()?;
        let bot = teloxide::Bot::new(token);
        match self
            .settings
            .telegram
            .api_url
            .as_deref()
            .and_then(|url| reqwest::Url::parse(url).ok())
        {
            Some(url) => Some(bot.set_api_url(url)),
            None => Some(bot),
        }
    }

    /// Kaiwa's Telegram handler for a host's dispatcher (see [`TelegramPlugin::handler`]):
    /// connects, adds Kaiwa's commands to the bot's menu and picks up what the last run
    /// left. An error without a Telegram token. Call it once (the plugin is `Clone`).
    ///
    /// ```no_run
    /// # async fn example(kaiwa: kaiwa::Kaiwa) -> anyhow::Result<()> {
    /// use kaiwa::teloxide::prelude::*;
    ///
    /// let plugin = kaiwa.telegram().await?;
    /// let bot = kaiwa.telegram_bot().expect("a token");
    /// let handler = dptree::entry()
    ///     .branch(plugin.handler())
    ///     .branch(Update::filter_message().endpoint(|bot: Bot, m: Message| async move {
    ///         bot.send_message(m.chat.id, "the host's own").await?;
    ///         Ok::<(), kaiwa::teloxide::RequestError>(())
    ///     }));
    /// Dispatcher::builder(bot, handler).build().dispatch().await;
    /// # Ok(()) }
    /// ```
    pub async fn telegram(&self) -> Result<TelegramPlugin, Error> {
        let (api, _) = self.telegram.clone().ok_or(Error::NoToken {
            platform: "Telegram",
            variable: "[telegram] token_env",
        })?;
        TelegramPlugin::start(
            api,
            self.telegram_config(),
            self.orchestrator.for_adapters(),
        )
        .await
        .map_err(|source| Error::Platform {
            platform: "Telegram",
            source,
        })
    }

    /// A serenity `Http` for the host's client, with Kaiwa's token and `[discord]
    /// api_proxy`; `None` without a Discord token.
    pub fn discord_http(&self) -> Option<serenity::all::Http> {
        let (_, token) = self.discord.as_ref()?;
        Some(kaiwa_adapters::discord::build_http(
            token,
            self.settings.discord.api_proxy.as_deref(),
        ))
    }

    /// Kaiwa's serenity event handler, to add beside the host's own (see
    /// [`DiscordPlugin`]); the host's client needs [`kaiwa_adapters::discord::INTENTS`].
    ///
    /// ```no_run
    /// # async fn example(kaiwa: kaiwa::Kaiwa) -> anyhow::Result<()> {
    /// use kaiwa::serenity::all::ClientBuilder;
    ///
    /// let plugin = kaiwa.discord()?;
    /// let http = kaiwa.discord_http().expect("a token");
    /// let mut client = ClientBuilder::new_with_http(http, kaiwa::discord_intents())
    ///     .event_handler(plugin)
    ///     .await?;
    /// client.start().await?;
    /// # Ok(()) }
    /// ```
    pub fn discord(&self) -> Result<DiscordPlugin, Error> {
        let (api, _) = self.discord.clone().ok_or(Error::NoToken {
            platform: "Discord",
            variable: "[discord] token_env",
        })?;
        Ok(DiscordPlugin::new(
            api,
            self.discord_config(),
            self.orchestrator.for_adapters(),
        ))
    }

    fn telegram_config(&self) -> TelegramConfig {
        let tg = &self.settings.telegram;
        TelegramConfig {
            admin_chat_id: tg.admin_chat_id,
            private_flow: tg.private_flow.clone(),
            private_flow_arg: tg.private_flow_arg.clone(),
            group_flow: tg.group_flow.clone(),
            places: tg
                .places
                .iter()
                .map(|p| PlaceFlow {
                    chat: p.chat,
                    topic: p.topic,
                    flow: p.flow.clone(),
                    flow_arg: p.flow_arg.clone(),
                })
                .collect(),
            private_chats: tg.private_chats,
            poll_timeout: Duration::from_secs(tg.poll_timeout_secs),
            webhook: self.telegram_webhook.clone(),
        }
    }

    fn slack_config(&self) -> SlackConfig {
        let sl = &self.settings.slack;
        SlackConfig {
            admin_channel_id: sl.admin_channel_id.clone(),
            helpdesk_channel_ids: sl.helpdesk_channel_ids.clone(),
            reading_channel_ids: sl.reading_channel_ids.clone(),
            dm_flow: Some(sl.dm_flow.clone()),
            dm_flow_arg: sl.dm_flow_arg.clone(),
            dms: sl.dms,
            events: self.slack.as_ref().and_then(|(_, events)| events.clone()),
        }
    }

    fn discord_config(&self) -> DiscordConfig {
        let dc = &self.settings.discord;
        DiscordConfig {
            token: self
                .discord
                .as_ref()
                .map(|(_, t)| t.clone())
                .unwrap_or_default(),
            admin_channel_id: dc.admin_channel_id,
            helpdesk_channel_ids: dc.helpdesk_channel_ids.clone(),
            reading_channel_ids: dc.reading_channel_ids.clone(),
            api_proxy: dc.api_proxy.clone(),
            dm_flow: Some(dc.dm_flow.clone()),
            dm_flow_arg: dc.dm_flow_arg.clone(),
            dms: dc.dms,
            // checked when the settings were loaded
            shards: dc
                .shards
                .as_deref()
                .and_then(|s| kaiwa_adapters::discord::ShardRange::parse(s).ok()),
        }
    }

    /// Starts the scheduled jobs: the weekly reviews users opted in to (checked every
    /// minute, sent through the platforms Kaiwa has tokens for) and, with `[privacy]
    /// transcript_days`, the deletion of old transcripts (hourly). They stop when
    /// `shutdown` resolves; the returned future resolves once they have.
    pub fn jobs(
        &self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut outboxes: HashMap<Platform, Arc<dyn Outbox>> = HashMap::new();
        if let Some((api, _)) = &self.telegram {
            outboxes.insert(
                Platform::Telegram,
                Arc::new(TelegramOutbox::new(api.clone())),
            );
        }
        if let Some((api, _)) = &self.discord {
            outboxes.insert(Platform::Discord, Arc::new(DiscordOutbox::new(api.clone())));
        }
        if let Some((api, _)) = &self.slack {
            outboxes.insert(Platform::Slack, Arc::new(SlackOutbox::new(api.clone())));
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        let reviews = {
            let orchestrator = self.orchestrator.clone();
            let instances = self.orchestrator.for_instances();
            every(REVIEW_CHECK, stop_rx.clone(), move || {
                let (orchestrator, outboxes) = (orchestrator.clone(), outboxes.clone());
                let instances = instances.clone();
                async move {
                    // several instances: the one holding the jobs' lease sends them
                    if !instances.hold(JOBS_LEASE).await {
                        return;
                    }
                    let outbox_for = move |p: Platform| outboxes.get(&p).cloned();
                    if let Err(e) =
                        send_due_reviews(&orchestrator, chrono::Utc::now(), outbox_for).await
                    {
                        tracing::warn!(error = %e, "weekly reviews not sent; retrying in a minute");
                    }
                }
            })
        };
        let idle = Duration::from_secs_f64(self.settings.handoff.idle_minutes * 60.0);
        let handbacks = {
            let (instances, people) = (
                self.orchestrator.for_instances(),
                self.orchestrator.for_people(),
            );
            // often enough for a short idle time, at most every few seconds
            let check = (idle / 4).clamp(Duration::from_secs(1), HANDBACK_CHECK);
            every(check, stop_rx.clone(), move || {
                let (instances, people) = (instances.clone(), people.clone());
                async move {
                    if !instances.hold(JOBS_LEASE).await {
                        return;
                    }
                    let handed = people.hand_back_idle(idle).await;
                    if handed > 0 {
                        tracing::info!(handed, "idle conversations handed back to the agent");
                    }
                }
            })
        };
        let retention = self.settings.privacy.transcript_days.map(|days| {
            let (store, instances) = (self.store.clone(), self.orchestrator.for_instances());
            every(RETENTION_CHECK, stop_rx, move || {
                let (store, instances) = (store.clone(), instances.clone());
                async move {
                    if !instances.hold(JOBS_LEASE).await {
                        return;
                    }
                    if let Err(e) =
                        delete_old_transcripts(store.as_ref(), days, chrono::Utc::now()).await
                    {
                        tracing::warn!(error = %e, "retention job failed; retrying later");
                    }
                }
            })
        });
        async move {
            shutdown.await;
            let _ = stop_tx.send(true);
            let _ = reviews.await;
            let _ = handbacks.await;
            if let Some(retention) = retention {
                let _ = retention.await;
            }
        }
    }

    /// Closes the database (what is committed stays).
    pub async fn close(&self) {
        self.orchestrator.for_instances().let_go(JOBS_LEASE).await;
        self.store.close().await;
    }
}

/// The gateway intents Kaiwa's Discord handler needs, for a host's client (add the host's
/// own with `|`).
pub fn discord_intents() -> serenity::all::GatewayIntents {
    kaiwa_adapters::discord::INTENTS
}

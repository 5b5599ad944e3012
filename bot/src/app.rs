//! The wiring behind [`crate::Kaiwa`] — store, models, flows, orchestrator — built from
//! [`Settings`], and the pieces `kaiwa check`, `kaiwa bench` and `kaiwa kb` use alone.

use crate::Error;
use crate::config::{LlmSettings, Settings, secret_from_env};
use anyhow::Context;
use kaiwa_core::admin::AdminSink;
use kaiwa_core::flow::FlowRegistry;
use kaiwa_core::flows::interview::form::{Form, load_forms as load_forms_dir};
use kaiwa_core::flows::reading::catalogue::Catalogue;
use kaiwa_core::flows::{FlowConfig, builtin};
use kaiwa_core::kb::{KnowledgeBase, Morphology, Prefixes, Semantic, japanese};
use kaiwa_core::llm::breaker::{Breaker, BreakerModel};
use kaiwa_core::llm::budget::Capped;
use kaiwa_core::llm::openai::{OpenAiClient, OpenAiConfig, OpenAiEmbeddings};
use kaiwa_core::llm::{ChatModel, ModelRouter};
use kaiwa_core::message::Platform;
use kaiwa_core::orchestrator::{AdminAccess, Orchestrator};
use kaiwa_core::search::{BooksApi, BooksProvider, Provider, WebSearch};
use kaiwa_core::store::{self, Store};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub struct App {
    pub orchestrator: Arc<Orchestrator>,
    pub store: Arc<dyn Store>,
    /// The help-desk's knowledge base (the console lists and re-indexes it).
    pub kb: Arc<KnowledgeBase>,
}

impl App {
    pub async fn build(
        settings: &Settings,
        database_url: &str,
        store: Option<Arc<dyn Store>>,
        admin: Arc<dyn AdminSink>,
        models: Option<ModelRouter>,
    ) -> Result<App, Error> {
        let store: Arc<dyn Store> = match store {
            Some(store) => store,
            None => store::connect(database_url)
                .await
                .map_err(|source| Error::Database {
                    url: redact_url(database_url),
                    source,
                })?,
        };
        let models = match models {
            Some(models) => models,
            None => build_models(settings.llm.as_ref()).map_err(Error::setup("[llm]"))?,
        };
        let web =
            build_web_search(settings, Some(store.clone())).map_err(Error::setup("[search]"))?;
        let books =
            build_books_api(settings, Some(store.clone())).map_err(Error::setup("[books_api]"))?;
        let kb = Arc::new(open_kb(settings).map_err(Error::setup("[flows] kb_dir"))?);
        let meaning = build_semantic(settings.llm.as_ref(), Some(store.clone()))
            .map_err(Error::setup("[llm] embeddings_model"))?;
        if let Some(meaning) = &meaning {
            // the passages' vectors, ready before the first question where the server is quick
            meaning.prepare_in_background(&kb);
        }
        let flows = build_flows(settings, web, books, kb.clone(), meaning)
            .map_err(Error::setup("flows"))?;
        let limits = &settings.limits;
        // PostgreSQL is how several instances share one bot (SQLite: one process)
        let shared = store.backend() == store::Backend::Postgres;
        let mut orchestrator =
            Orchestrator::new(store.clone(), flows, models, admin).with_shared_database(shared);
        if let Some(llm) = &settings.llm {
            orchestrator = orchestrator.with_turn_budget(Duration::from_secs(llm.turn_budget_secs));
        }
        let orchestrator = orchestrator
            .with_rate_limit(limits.messages_per_minute)
            .with_max_waiting(limits.max_waiting)
            .with_max_message_chars(limits.max_message_chars)
            .with_kept_submissions(settings.privacy.keep_submissions)
            .with_admin_access(admin_access(settings));
        let orchestrator = Arc::new(orchestrator);
        Ok(App {
            orchestrator,
            store,
            kb,
        })
    }
}

/// Admin user ids and admin places from `[telegram]`, `[discord]` and `[slack]`.
pub fn admin_access(settings: &Settings) -> AdminAccess {
    let mut access = AdminAccess::default();
    let (tg, dc) = (&settings.telegram, &settings.discord);
    access.admins.insert(
        Platform::Telegram,
        tg.admins.iter().map(ToString::to_string).collect(),
    );
    access.admins.insert(
        Platform::Discord,
        dc.admins.iter().map(ToString::to_string).collect(),
    );
    if let Some(chat) = tg.admin_chat_id {
        access.places.insert(Platform::Telegram, chat.to_string());
    }
    if let Some(channel) = dc.admin_channel_id {
        access.places.insert(Platform::Discord, channel.to_string());
    }
    let sl = &settings.slack;
    access.admins.insert(Platform::Slack, sl.admins.to_vec());
    if let Some(channel) = &sl.admin_channel_id {
        access.places.insert(Platform::Slack, channel.clone());
    }
    access
}

/// The forms of `[flows] forms_dir`; a missing folder means no forms.
pub fn load_forms(settings: &Settings) -> anyhow::Result<Vec<Form>> {
    let dir = Path::new(&settings.flows.forms_dir);
    if !dir.exists() {
        return Ok(Vec::new());
    }
    load_forms_dir(dir).map_err(anyhow::Error::msg)
}

/// The knowledge base of `[flows] kb_dir` (a missing folder is an empty base), Japanese
/// analysed with `[flows] ja_dictionary` where there is one.
pub fn open_kb(settings: &Settings) -> anyhow::Result<KnowledgeBase> {
    KnowledgeBase::open_with(&settings.flows.kb_dir, japanese_dictionary(settings)?).with_context(
        || {
            format!(
                "cannot index the knowledge base in {}",
                settings.flows.kb_dir
            )
        },
    )
}

/// The Japanese dictionary `[flows] ja_dictionary` names (Debian's IPADIC when unset and
/// installed), compiled once per process; `None`: character pairs only.
fn japanese_dictionary(settings: &Settings) -> anyhow::Result<Option<Arc<Morphology>>> {
    static COMPILED: std::sync::Mutex<std::collections::BTreeMap<String, Arc<Morphology>>> =
        std::sync::Mutex::new(std::collections::BTreeMap::new());
    let (dir, named) = match settings.flows.ja_dictionary.as_deref() {
        Some("") => return Ok(None),
        Some(dir) => (dir.to_string(), true),
        None if Path::new(japanese::DEBIAN_IPADIC).is_dir() => {
            (japanese::DEBIAN_IPADIC.to_string(), false)
        }
        None => {
            tracing::info!(
                "no Japanese dictionary: Japanese is searched by character pairs (install Debian's mecab-ipadic for base forms)"
            );
            return Ok(None);
        }
    };
    let mut compiled = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(morphology) = compiled.get(&dir) {
        return Ok(Some(morphology.clone()));
    }
    let started = std::time::Instant::now();
    // compiled once into the user's cache, then mapped from there (shared between processes)
    match Morphology::cached(Path::new(&dir), &crate::config::cache_dir()) {
        Ok(morphology) => {
            tracing::info!(dictionary = %dir, ms = started.elapsed().as_millis() as u64, "Japanese dictionary ready");
            let morphology = Arc::new(morphology);
            compiled.insert(dir, morphology.clone());
            Ok(Some(morphology))
        }
        Err(e) if named => Err(anyhow::anyhow!("[flows] ja_dictionary: {e}")),
        Err(e) => {
            tracing::warn!(error = %e, "the Japanese dictionary did not load: character pairs only");
            Ok(None)
        }
    }
}

/// The search by meaning `[llm] embeddings_model` configures (none without it), the
/// passages' vectors kept in `cache`.
pub fn build_semantic(
    llm: Option<&LlmSettings>,
    cache: Option<Arc<dyn Store>>,
) -> anyhow::Result<Option<Arc<Semantic>>> {
    let Some((llm, model)) = llm.and_then(|l| l.embeddings_model.as_deref().map(|m| (l, m))) else {
        return Ok(None);
    };
    let embedder = OpenAiEmbeddings::new(
        llm.embeddings_base_url.as_deref().unwrap_or(&llm.base_url),
        model,
        llm.api_key_env
            .as_deref()
            .map(secret_from_env)
            .transpose()?,
        Duration::from_secs(llm.embeddings_timeout_secs),
    )?
    .with_input_type(llm.embeddings_input_type);
    // (the store keeps the vectors)
    let cache = cache.map(|store| store as Arc<dyn kaiwa_core::store::SearchCache>);
    let prefixes = Prefixes {
        query: llm.embeddings_query_prefix.clone(),
        passage: llm.embeddings_passage_prefix.clone(),
    };
    Ok(Some(Arc::new(
        Semantic::new(Arc::new(embedder), cache)
            .with_prefixes(prefixes)
            .with_batch(llm.embeddings_batch),
    )))
}

/// The web search `[search]` configures (none without it), its answers kept a day in
/// `cache`.
pub fn build_web_search(
    settings: &Settings,
    cache: Option<Arc<dyn Store>>,
) -> anyhow::Result<Option<Arc<WebSearch>>> {
    let Some(search) = &settings.search else {
        return Ok(None);
    };
    let provider = match search.provider.as_str() {
        "brave" => Provider::Brave {
            base_url: search
                .base_url
                .clone()
                .unwrap_or_else(|| "https://api.search.brave.com".into()),
            api_key: secret_from_env(search.api_key_env.as_deref().unwrap_or_default())
                .context("[search] api_key_env")?,
        },
        _ => Provider::SearxNg {
            base_url: search.base_url.clone().unwrap_or_default(),
        },
    };
    let mut web = WebSearch::new(
        provider,
        search.max_results,
        Duration::from_secs(search.timeout_secs),
    )?;
    if let Some(store) = cache {
        // (the store is a search cache too)
        web = web.with_cache(store);
    }
    Ok(Some(Arc::new(web)))
}

/// The books API `[books_api]` configures (none without it), its answers kept a day in
/// `cache`.
pub fn build_books_api(
    settings: &Settings,
    cache: Option<Arc<dyn Store>>,
) -> anyhow::Result<Option<Arc<BooksApi>>> {
    let Some(books) = &settings.books_api else {
        return Ok(None);
    };
    let provider = match books.provider.as_str() {
        "google_books" => BooksProvider::GoogleBooks {
            base_url: books
                .base_url
                .clone()
                .unwrap_or_else(|| "https://www.googleapis.com".into()),
            api_key: secret_from_env(books.api_key_env.as_deref().unwrap_or_default())
                .context("[books_api] api_key_env")?,
        },
        _ => BooksProvider::OpenLibrary {
            base_url: books
                .base_url
                .clone()
                .unwrap_or_else(|| "https://openlibrary.org".into()),
        },
    };
    let mut api = BooksApi::new(
        provider,
        books.max_results,
        Duration::from_secs(books.timeout_secs),
    )?;
    if let Some(store) = cache {
        api = api.with_cache(store);
    }
    Ok(Some(Arc::new(api)))
}

/// The flows enabled by `settings`, with their default (`web`: the web search, `books`:
/// the books API, `kb`: the help-desk's knowledge base).
pub fn build_flows(
    settings: &Settings,
    web: Option<Arc<WebSearch>>,
    books: Option<Arc<BooksApi>>,
    kb: Arc<KnowledgeBase>,
    meaning: Option<Arc<Semantic>>,
) -> anyhow::Result<FlowRegistry> {
    let catalogue =
        Catalogue::load(Path::new(&settings.flows.books)).map_err(anyhow::Error::msg)?;
    let config = FlowConfig {
        forms: load_forms(settings)?,
        default_form: settings.flows.default_form.clone(),
        kb: Some(kb),
        meaning,
        catalogue: Some(Arc::new(catalogue)),
        web_for_helpdesk: settings.search.as_ref().is_some_and(|s| s.helpdesk),
        web,
        books_api: books,
    };
    if let Some(form) = &config.default_form
        && !config.forms.iter().any(|f| &f.id == form)
    {
        anyhow::bail!(
            "[flows] default_form {form:?} is not a form in {}",
            settings.flows.forms_dir
        );
    }
    let mut flows = FlowRegistry::new(builtin(&config)).context("no flows")?;
    if let Some(default) = &settings.flows.default {
        flows = flows.with_default(default).context("[flows] default")?;
    }
    Ok(flows)
}

/// The store `database_url` names (SQLite or PostgreSQL by its scheme), migrated.
pub async fn open_store(database_url: &str) -> anyhow::Result<Arc<dyn Store>> {
    store::connect(database_url)
        .await
        .with_context(|| format!("cannot open the database {}", redact_url(database_url)))
}

/// A URL as it may appear in messages: without a password.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***{}", &url[..scheme], &url[at..])
        }
        _ => url.to_string(),
    }
}

/// The model router from `[llm]`; none configured means every agent uses its floor.
pub fn build_models(llm: Option<&LlmSettings>) -> anyhow::Result<ModelRouter> {
    let Some(llm) = llm else {
        return Ok(ModelRouter::none());
    };
    // one circuit breaker per endpoint, shared by the agents that use it
    let breakers: std::cell::RefCell<Vec<(String, Arc<Breaker>)>> = Default::default();
    let breaker_for = |base_url: &str| {
        let mut list = breakers.borrow_mut();
        if let Some((_, b)) = list.iter().find(|(url, _)| url == base_url) {
            return b.clone();
        }
        let b = Breaker::new(
            llm.breaker_failures,
            Duration::from_secs(llm.breaker_cooldown_secs),
        );
        list.push((base_url.to_string(), b.clone()));
        b
    };
    // one bound on requests in flight per server, shared by its clients
    let slots = std::cell::RefCell::new(Vec::<(String, Arc<tokio::sync::Semaphore>)>::new());
    let slots_for = |base_url: &str| {
        let mut list = slots.borrow_mut();
        if let Some((_, s)) = list.iter().find(|(url, _)| url == base_url) {
            return s.clone();
        }
        let s = Arc::new(tokio::sync::Semaphore::new(llm.max_concurrency));
        list.push((base_url.to_string(), s.clone()));
        s
    };
    let client = |base_url: &str,
                  model: &str,
                  key_env: Option<&str>,
                  timeout: u64|
     -> anyhow::Result<Arc<dyn ChatModel>> {
        let mut config = OpenAiConfig::new(base_url, model);
        config.api_key = key_env.map(secret_from_env).transpose()?;
        config.timeout = Duration::from_secs(timeout);
        config.max_retries = llm.max_retries;
        config.supports_required_tool_choice = llm.supports_required_tool_choice;
        config.in_flight = Some(slots_for(base_url));
        config.max_in_flight = llm.max_concurrency;
        let client: Arc<dyn ChatModel> = Arc::new(OpenAiClient::new(config)?);
        Ok(Arc::new(BreakerModel::new(client, breaker_for(base_url))))
    };
    let default = client(
        &llm.base_url,
        &llm.model,
        llm.api_key_env.as_deref(),
        llm.timeout_secs,
    )
    .context("[llm]")?;
    let mut router = ModelRouter::new(Some(default));
    for (agent, o) in &llm.agents {
        let model = client(
            o.base_url.as_deref().unwrap_or(&llm.base_url),
            o.model.as_deref().unwrap_or(&llm.model),
            o.api_key_env.as_deref().or(llm.api_key_env.as_deref()),
            o.timeout_secs.unwrap_or(llm.timeout_secs),
        )
        .with_context(|| format!("[llm.agents.{agent}]"))?;
        let model: Arc<dyn ChatModel> = match o.turn_budget_secs {
            Some(secs) => Arc::new(Capped::new(model, Duration::from_secs(secs))),
            None => model,
        };
        router = router.with_agent(agent.clone(), model);
    }
    let breakers = breakers.into_inner().into_iter().map(|(_, b)| b).collect();
    Ok(router.with_breakers(breakers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("postgres://kaiwa:secret@db/kaiwa"),
            "postgres://***@db/kaiwa"
        );
        assert_eq!(
            redact_url("sqlite://data/kaiwa.db"),
            "sqlite://data/kaiwa.db"
        );
    }
}

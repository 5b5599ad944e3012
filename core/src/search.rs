//! Search beyond the library (seeds 002–004: `google_search` / `search_web`): a web search
//! provider the team configures (`[search]`: a self-hosted SearxNG's JSON API, or the
//! Brave Search API). Only the configured endpoint is ever called — never a URL a user or
//! a page supplied.
//!
//! - Every call counts against the turn's budget ([`crate::llm::budget::remaining`]) and is
//!   tried again (once) only while the budget allows; a provider that fails, answers
//!   garbage or runs out of time is an error the agents answer around ("the web search was
//!   unavailable").
//! - Answers are kept a day per query in the database ([`SearchCache`]).
//! - What comes back is untrusted text: cut to a snippet, control characters removed, only
//!   `http(s)` links kept; agents hand it to the model as quoted material and cite it by
//!   title and URL, and no code path acts on what it says.

use crate::llm::budget;
use crate::store::SearchCache;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// One web page found: its title, address and a snippet of its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebResult {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    #[error("the search provider did not answer in time")]
    Timeout,
    #[error("the search provider failed: {0}")]
    Provider(String),
    #[error("the turn's time for outside searches is spent")]
    NoTime,
}

/// Which web search the team runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provider {
    /// A SearxNG instance (`GET {base_url}/search?q=…&format=json`).
    SearxNg { base_url: String },
    /// The Brave Search API (`GET {base_url}/res/v1/web/search`, `X-Subscription-Token`).
    Brave { base_url: String, api_key: String },
}

impl Provider {
    fn name(&self) -> &'static str {
        match self {
            Provider::SearxNg { .. } => "searxng",
            Provider::Brave { .. } => "brave",
        }
    }
}

/// How long a query's answer is kept.
const CACHE_FOR: chrono::Duration = chrono::Duration::days(1);

/// Below this much of the turn's budget no outside call starts.
const LEAST_TIME: Duration = Duration::from_millis(300);

/// A snippet's most characters.
const SNIPPET: usize = 400;

/// What every outside provider is called with: a client that follows no redirect, how many
/// results, a timeout, the cache.
struct Caller {
    client: reqwest::Client,
    max_results: usize,
    timeout: Duration,
    cache: Option<Arc<dyn SearchCache>>,
}

impl Caller {
    fn new(max_results: usize, timeout: Duration) -> Result<Caller, SearchError> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| SearchError::Provider(format!("HTTP client: {e}")))?;
        Ok(Caller {
            client,
            max_results: max_results.clamp(1, 20),
            timeout,
            cache: None,
        })
    }
}

/// The configured web search.
pub struct WebSearch {
    provider: Provider,
    call: Caller,
}

impl std::fmt::Debug for WebSearch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never the API key
        f.debug_struct("WebSearch")
            .field("provider", &self.provider.name())
            .field("max_results", &self.call.max_results)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct SearxAnswer {
    results: Vec<SearxResult>,
}

#[derive(Deserialize)]
struct SearxResult {
    url: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    content: String,
}

#[derive(Deserialize)]
struct BraveAnswer {
    #[serde(default)]
    web: Option<BraveWeb>,
}

#[derive(Deserialize)]
struct BraveWeb {
    #[serde(default)]
    results: Vec<BraveResult>,
}

#[derive(Deserialize)]
struct BraveResult {
    url: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    description: String,
}

impl WebSearch {
    pub fn new(
        provider: Provider,
        max_results: usize,
        timeout: Duration,
    ) -> Result<WebSearch, SearchError> {
        Ok(WebSearch {
            provider,
            call: Caller::new(max_results, timeout)?,
        })
    }

    /// Keeps answers a day in `cache`.
    pub fn with_cache(mut self, cache: Arc<dyn SearchCache>) -> Self {
        self.call.cache = Some(cache);
        self
    }

    pub fn provider_name(&self) -> &'static str {
        self.provider.name()
    }

    /// The pages found for `query` (in `lang` where the provider can say), at most
    /// `max_results`, from the cache when asked within a day.
    pub async fn search(&self, query: &str, lang: &str) -> Result<Vec<WebResult>, SearchError> {
        let query = query.trim();
        let key = format!("{lang}:{query}");
        cached(
            self.call.cache.as_deref(),
            self.provider.name(),
            &key,
            || self.fetch(query, lang),
        )
        .await
    }

    /// One request to the provider, within the turn's budget.
    async fn fetch(&self, query: &str, lang: &str) -> Result<Vec<WebResult>, SearchError> {
        let request = match &self.provider {
            Provider::SearxNg { base_url } => self
                .call
                .client
                .get(format!("{}/search", base_url.trim_end_matches('/')))
                .query(&[("q", query), ("format", "json"), ("language", lang)]),
            Provider::Brave { base_url, api_key } => self
                .call
                .client
                .get(format!(
                    "{}/res/v1/web/search",
                    base_url.trim_end_matches('/')
                ))
                .query(&[
                    ("q", query),
                    ("count", &self.call.max_results.to_string()),
                    ("search_lang", lang),
                ])
                .header("Accept", "application/json")
                .header("X-Subscription-Token", api_key),
        };
        let body = get(request, self.call.timeout).await?;
        let found: Vec<(String, String, String)> = match &self.provider {
            Provider::SearxNg { .. } => serde_json::from_slice::<SearxAnswer>(&body)
                .map_err(unreadable)?
                .results
                .into_iter()
                .map(|r| (r.title, r.url, r.content))
                .collect(),
            Provider::Brave { .. } => serde_json::from_slice::<BraveAnswer>(&body)
                .map_err(unreadable)?
                .web
                .map(|w| w.results)
                .unwrap_or_default()
                .into_iter()
                .map(|r| (r.title, r.url, r.description))
                .collect(),
        };
        Ok(found
            .into_iter()
            .filter_map(|(title, url, snippet)| page(&title, &url, &snippet))
            .take(self.call.max_results)
            .collect())
    }
}

/// `fetch`'s answer from the cache when asked within [`CACHE_FOR`], else fetched (tried
/// once more on a failure while the turn's time allows) and kept.
async fn cached<T, F, Fut>(
    cache: Option<&dyn SearchCache>,
    provider: &str,
    key: &str,
    fetch: F,
) -> Result<Vec<T>, SearchError>
where
    T: Serialize + serde::de::DeserializeOwned,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<T>, SearchError>>,
{
    if let Some(cache) = cache {
        let since = chrono::Utc::now() - CACHE_FOR;
        match cache.cached_search(provider, key, since).await {
            Ok(Some(json)) => {
                if let Ok(results) = serde_json::from_str::<Vec<T>>(&json) {
                    return Ok(results);
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "could not read the search cache"),
        }
    }
    let mut tries = 0;
    let results = loop {
        tries += 1;
        match fetch().await {
            Ok(results) => break results,
            Err(SearchError::Timeout | SearchError::Provider(_))
                if tries < 2 && budget::remaining().is_none_or(|left| left > LEAST_TIME * 2) =>
            {
                tracing::info!(provider, "outside search failed; trying once more");
            }
            Err(e) => {
                tracing::warn!(provider, error = %e, "outside search unavailable");
                return Err(e);
            }
        }
    };
    if let Some(cache) = cache
        && let Ok(json) = serde_json::to_string(&results)
        && let Err(e) = cache.cache_search(provider, key, &json).await
    {
        tracing::warn!(error = %e, "could not keep the search results");
    }
    Ok(results)
}

/// One GET within `timeout` and the turn's budget: the body of a 2xx answer.
async fn get(request: reqwest::RequestBuilder, timeout: Duration) -> Result<Vec<u8>, SearchError> {
    let timeout = match budget::remaining() {
        Some(left) if left < LEAST_TIME => return Err(SearchError::NoTime),
        Some(left) => timeout.min(left),
        None => timeout,
    };
    let response = request.timeout(timeout).send().await.map_err(|e| {
        if e.is_timeout() {
            SearchError::Timeout
        } else {
            SearchError::Provider(e.without_url().to_string())
        }
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(SearchError::Provider(format!("HTTP {status}")));
    }
    let body = tokio::time::timeout(timeout, response.bytes())
        .await
        .map_err(|_| SearchError::Timeout)?
        .map_err(|e| SearchError::Provider(e.without_url().to_string()))?;
    Ok(body.to_vec())
}

fn unreadable(e: serde_json::Error) -> SearchError {
    SearchError::Provider(format!("unreadable answer ({:?})", e.classify()))
}

/// A book as a books API knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookInfo {
    pub title: String,
    pub author: Option<String>,
    pub year: Option<i32>,
    pub subjects: Vec<String>,
    /// The book's page at the provider.
    pub link: Option<String>,
}

impl BookInfo {
    /// One line for a model or a user: title, author, year, subjects.
    pub fn describe(&self) -> String {
        let mut out = self.title.clone();
        if let Some(author) = &self.author {
            out.push_str(&format!(" by {author}"));
        }
        if let Some(year) = self.year {
            out.push_str(&format!(" ({year})"));
        }
        if !self.subjects.is_empty() {
            out.push_str(&format!(" — {}", self.subjects.join(", ")));
        }
        out
    }
}

/// Which books API the team uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BooksProvider {
    /// Open Library's search (`GET {base_url}/search.json?q=…`), no key.
    OpenLibrary { base_url: String },
    /// Google Books (`GET {base_url}/books/v1/volumes?q=…&key=…`).
    GoogleBooks { base_url: String, api_key: String },
}

impl BooksProvider {
    fn name(&self) -> &'static str {
        match self {
            BooksProvider::OpenLibrary { .. } => "openlibrary",
            BooksProvider::GoogleBooks { .. } => "google_books",
        }
    }

    /// What to call it in a reply.
    pub fn label(&self) -> &'static str {
        match self {
            BooksProvider::OpenLibrary { .. } => "Open Library",
            BooksProvider::GoogleBooks { .. } => "Google Books",
        }
    }
}

/// The configured books API (`[books_api]`).
pub struct BooksApi {
    provider: BooksProvider,
    call: Caller,
}

impl std::fmt::Debug for BooksApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never the API key
        f.debug_struct("BooksApi")
            .field("provider", &self.provider.name())
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct OpenLibraryAnswer {
    #[serde(default)]
    docs: Vec<OpenLibraryDoc>,
}

#[derive(Deserialize)]
struct OpenLibraryDoc {
    #[serde(default)]
    key: String,
    title: String,
    #[serde(default)]
    author_name: Vec<String>,
    first_publish_year: Option<i32>,
    #[serde(default)]
    subject: Vec<String>,
}

#[derive(Deserialize)]
struct GoogleAnswer {
    #[serde(default)]
    items: Vec<GoogleItem>,
}

#[derive(Deserialize)]
struct GoogleItem {
    #[serde(rename = "volumeInfo")]
    info: GoogleVolume,
}

#[derive(Deserialize)]
struct GoogleVolume {
    title: String,
    #[serde(default)]
    authors: Vec<String>,
    #[serde(rename = "publishedDate")]
    published: Option<String>,
    #[serde(default)]
    categories: Vec<String>,
    #[serde(rename = "infoLink")]
    link: Option<String>,
}

impl BooksApi {
    pub fn new(
        provider: BooksProvider,
        max_results: usize,
        timeout: Duration,
    ) -> Result<BooksApi, SearchError> {
        Ok(BooksApi {
            provider,
            call: Caller::new(max_results, timeout)?,
        })
    }

    /// Keeps answers a day in `cache`.
    pub fn with_cache(mut self, cache: Arc<dyn SearchCache>) -> Self {
        self.call.cache = Some(cache);
        self
    }

    pub fn provider(&self) -> &BooksProvider {
        &self.provider
    }

    /// Books matching `query` (title, author or subject words).
    pub async fn search(&self, query: &str) -> Result<Vec<BookInfo>, SearchError> {
        let query = query.trim();
        cached(
            self.call.cache.as_deref(),
            self.provider.name(),
            query,
            || self.fetch(query),
        )
        .await
    }

    /// The book `title` names, if the API knows one whose title matches it.
    pub async fn find(&self, title: &str) -> Result<Option<BookInfo>, SearchError> {
        let wanted = normal(title);
        if wanted.is_empty() {
            return Ok(None);
        }
        Ok(self
            .search(title)
            .await?
            .into_iter()
            .find(|b| normal(&b.title).starts_with(&wanted)))
    }

    async fn fetch(&self, query: &str) -> Result<Vec<BookInfo>, SearchError> {
        let n = self.call.max_results.to_string();
        let link = |l: &str| page("", l, "").map(|p| p.url);
        let books: Vec<BookInfo> = match &self.provider {
            BooksProvider::OpenLibrary { base_url } => {
                let base = base_url.trim_end_matches('/');
                let request = self.call.client.get(format!("{base}/search.json")).query(&[
                    ("q", query),
                    ("limit", n.as_str()),
                    ("fields", "key,title,author_name,first_publish_year,subject"),
                ]);
                let body = get(request, self.call.timeout).await?;
                serde_json::from_slice::<OpenLibraryAnswer>(&body)
                    .map_err(unreadable)?
                    .docs
                    .into_iter()
                    .map(|d| BookInfo {
                        title: plain(&d.title, 200),
                        author: d.author_name.first().map(|a| plain(a, 100)),
                        year: d.first_publish_year,
                        subjects: d.subject.iter().take(8).map(|s| plain(s, 60)).collect(),
                        link: d
                            .key
                            .starts_with('/')
                            .then(|| format!("{base}{}", d.key))
                            .and_then(|l| link(&l)),
                    })
                    .collect()
            }
            BooksProvider::GoogleBooks { base_url, api_key } => {
                let base = base_url.trim_end_matches('/');
                let request = self
                    .call
                    .client
                    .get(format!("{base}/books/v1/volumes"))
                    .query(&[
                        ("q", query),
                        ("maxResults", n.as_str()),
                        ("key", api_key.as_str()),
                    ]);
                let body = get(request, self.call.timeout).await?;
                serde_json::from_slice::<GoogleAnswer>(&body)
                    .map_err(unreadable)?
                    .items
                    .into_iter()
                    .map(|i| BookInfo {
                        title: plain(&i.info.title, 200),
                        author: i.info.authors.first().map(|a| plain(a, 100)),
                        year: i
                            .info
                            .published
                            .as_deref()
                            .and_then(|d| d.get(..4))
                            .and_then(|y| y.parse().ok()),
                        subjects: i
                            .info
                            .categories
                            .iter()
                            .take(8)
                            .map(|s| plain(s, 60))
                            .collect(),
                        link: i.info.link.as_deref().and_then(link),
                    })
                    .collect()
            }
        };
        Ok(books
            .into_iter()
            .filter(|b| !b.title.is_empty())
            .take(self.call.max_results)
            .collect())
    }
}

/// A title compared loosely: lower case, letters and digits only.
fn normal(title: &str) -> String {
    title
        .chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// A result as agents see it: a plain-text title and snippet (markup and control
/// characters out, cut short), an `http(s)` address; `None` for any other address.
fn page(title: &str, url: &str, snippet: &str) -> Option<WebResult> {
    let url = url.trim();
    let parsed = reqwest::Url::parse(url).ok()?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return None;
    }
    let title = plain(title, 200);
    Some(WebResult {
        title: if title.is_empty() {
            url.to_string()
        } else {
            title
        },
        url: parsed.to_string(),
        snippet: plain(snippet, SNIPPET),
    })
}

/// `text` without tags and control characters, whitespace collapsed, at most `max` chars.
fn plain(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max * 4));
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            _ if in_tag => {}
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    let words: Vec<&str> = out.split_whitespace().collect();
    let joined = words.join(" ");
    match joined.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &joined[..cut]),
        None => joined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_web_addresses_are_kept_and_text_is_plain() {
        assert!(page("x", "javascript:alert(1)", "").is_none());
        assert!(page("x", "file:///etc/passwd", "").is_none());
        assert!(page("x", "not a url", "").is_none());
        let p = page(
            "<b>Kokoro</b>\u{0007} by Soseki",
            "https://example.com/kokoro",
            "A <em>novel</em>\n\n about   loneliness",
        )
        .expect("a page");
        assert_eq!(p.title, "Kokoro by Soseki");
        assert_eq!(p.snippet, "A novel about loneliness");
        assert_eq!(plain(&"あ".repeat(500), 10).chars().count(), 11);
    }
}

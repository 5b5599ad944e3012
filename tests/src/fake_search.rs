//! A fake web search on 127.0.0.1 speaking two providers' JSON: SearxNG's
//! `GET /search?q=…&format=json` (`results[].{url,title,content}`) and the Brave Search
//! API's `GET /res/v1/web/search` (`web.results[].{title,url,description}`, the key in
//! `X-Subscription-Token`, 401 without it). A test sets the pages it returns and how it
//! misbehaves (500, slow, garbage) and reads the queries it got.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

/// How the fake answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    Normal,
    /// HTTP 500 with an HTML body.
    Fails,
    /// Waits this long before answering.
    Slow(Duration),
    /// 200 with a body that is not the provider's JSON.
    Garbage,
}

/// A book the fake books APIs know.
#[derive(Debug, Clone)]
pub struct FakeBook {
    pub title: &'static str,
    pub author: &'static str,
    pub year: i32,
    pub subjects: &'static [&'static str],
}

#[derive(Default)]
struct Inner {
    pages: Vec<(String, String, String)>,
    books: Vec<FakeBook>,
    behaviour: Option<Behaviour>,
    queries: Vec<String>,
}

/// The running fake; stops when dropped.
pub struct FakeSearch {
    url: String,
    inner: Arc<Mutex<Inner>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeSearch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The Brave API key the fake accepts.
pub const BRAVE_KEY: &str = "brave-test-key";

impl FakeSearch {
    pub async fn start() -> FakeSearch {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let app = Router::new()
            .route("/search", get(searxng))
            .route("/res/v1/web/search", get(brave))
            .route("/search.json", get(open_library))
            .route("/books/v1/volumes", get(google_books))
            .with_state(inner.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeSearch { url, inner, task }
    }

    /// SearxNG's base URL, and Brave's.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pages every query finds: (title, url, text).
    pub fn set_pages(&self, pages: &[(&str, &str, &str)]) {
        self.lock().pages = pages
            .iter()
            .map(|(t, u, c)| (t.to_string(), u.to_string(), c.to_string()))
            .collect();
    }

    /// The books the books APIs know (every query finds those whose title, author or
    /// subjects share a word with it; all of them when none does).
    pub fn set_books(&self, books: &[FakeBook]) {
        self.lock().books = books.to_vec();
    }

    pub fn behave(&self, behaviour: Behaviour) {
        self.lock().behaviour = Some(behaviour);
    }

    /// The queries received, in order.
    pub fn queries(&self) -> Vec<String> {
        self.lock().queries.clone()
    }
}

/// The misbehaviour to answer with, if any (after waiting out a slow one).
async fn misbehave(inner: &Mutex<Inner>, query: &str) -> Option<Response> {
    let behaviour = {
        let mut inner = inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.queries.push(query.to_string());
        inner.behaviour.unwrap_or(Behaviour::Normal)
    };
    match behaviour {
        Behaviour::Normal => None,
        Behaviour::Fails => Some(
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                [("content-type", "text/html")],
                "<html><body>500 Internal Server Error</body></html>",
            )
                .into_response(),
        ),
        Behaviour::Slow(wait) => {
            tokio::time::sleep(wait).await;
            None
        }
        Behaviour::Garbage => Some(
            (
                [("content-type", "application/json")],
                r#"{"results": "not a list", "#,
            )
                .into_response(),
        ),
    }
}

async fn searxng(
    State(inner): State<Arc<Mutex<Inner>>>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let query = params.get("q").cloned().unwrap_or_default();
    if params.get("format").map(String::as_str) != Some("json") {
        return (StatusCode::FORBIDDEN, "format not allowed").into_response();
    }
    if let Some(response) = misbehave(&inner, &query).await {
        return response;
    }
    let pages = inner
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pages
        .clone();
    let results: Vec<Value> = pages
        .iter()
        .enumerate()
        .map(|(i, (title, url, content))| {
            json!({
                "url": url, "title": title, "content": content,
                "engine": "duckduckgo", "engines": ["duckduckgo"], "positions": [i + 1],
                "parsed_url": ["https", "example.org", "/", "", "", ""],
                "template": "default.html", "score": 1.0 / (i as f64 + 1.0),
                "category": "general"
            })
        })
        .collect();
    axum::Json(json!({
        "query": query,
        "number_of_results": results.len(),
        "results": results,
        "answers": [], "corrections": [], "infoboxes": [], "suggestions": [],
        "unresponsive_engines": []
    }))
    .into_response()
}

async fn brave(
    State(inner): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let query = params.get("q").cloned().unwrap_or_default();
    if headers
        .get("x-subscription-token")
        .and_then(|v| v.to_str().ok())
        != Some(BRAVE_KEY)
    {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({
                "type": "ErrorResponse",
                "error": {"code": "SUBSCRIPTION_TOKEN_INVALID", "detail": "The provided subscription token is invalid.", "status": 401}
            })),
        )
            .into_response();
    }
    if let Some(response) = misbehave(&inner, &query).await {
        return response;
    }
    let count = params
        .get("count")
        .and_then(|c| c.parse::<usize>().ok())
        .unwrap_or(20);
    let pages = inner
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pages
        .clone();
    let results: Vec<Value> = pages
        .iter()
        .take(count)
        .map(|(title, url, description)| {
            json!({
                "type": "search_result", "title": title, "url": url,
                "description": description, "is_source_local": false,
                "is_source_both": false, "language": "en", "family_friendly": true
            })
        })
        .collect();
    axum::Json(json!({
        "type": "search",
        "query": {"original": query, "show_strict_warning": false, "is_navigational": false},
        "mixed": {"type": "mixed", "main": []},
        "web": {"type": "search", "results": results, "family_friendly": true}
    }))
    .into_response()
}

/// The books matching `query`: those sharing a word with it, else all.
fn books_for(inner: &Mutex<Inner>, query: &str) -> Vec<FakeBook> {
    let books = inner
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .books
        .clone();
    let words: Vec<String> = query
        .to_lowercase()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let matching: Vec<FakeBook> = books
        .iter()
        .filter(|b| {
            let about = format!("{} {} {}", b.title, b.author, b.subjects.join(" ")).to_lowercase();
            words.iter().any(|w| about.contains(w.as_str()))
        })
        .cloned()
        .collect();
    if matching.is_empty() { books } else { matching }
}

/// Open Library's `GET /search.json?q=…&limit=…&fields=…`.
async fn open_library(
    State(inner): State<Arc<Mutex<Inner>>>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let query = params.get("q").cloned().unwrap_or_default();
    if let Some(response) = misbehave(&inner, &query).await {
        return response;
    }
    let limit = params
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(100);
    let books = books_for(&inner, &query);
    let docs: Vec<Value> = books
        .iter()
        .take(limit)
        .enumerate()
        .map(|(i, b)| {
            json!({
                "key": format!("/works/OL{}W", 1000 + i),
                "title": b.title,
                "author_name": [b.author],
                "first_publish_year": b.year,
                "subject": b.subjects,
            })
        })
        .collect();
    axum::Json(json!({
        "numFound": books.len(),
        "start": 0,
        "numFoundExact": true,
        "docs": docs,
        "num_found": books.len(),
        "q": query,
        "offset": null
    }))
    .into_response()
}

/// Google Books' `GET /books/v1/volumes?q=…&maxResults=…&key=…`.
async fn google_books(
    State(inner): State<Arc<Mutex<Inner>>>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let query = params.get("q").cloned().unwrap_or_default();
    if params.get("key").map(String::as_str) != Some(GOOGLE_KEY) {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.", "status": "INVALID_ARGUMENT"}})),
        )
            .into_response();
    }
    if let Some(response) = misbehave(&inner, &query).await {
        return response;
    }
    let max = params
        .get("maxResults")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(10);
    let books = books_for(&inner, &query);
    let items: Vec<Value> = books
        .iter()
        .take(max)
        .enumerate()
        .map(|(i, b)| {
            json!({
                "kind": "books#volume",
                "id": format!("vol{i}"),
                "volumeInfo": {
                    "title": b.title,
                    "authors": [b.author],
                    "publishedDate": format!("{}-01-01", b.year),
                    "categories": b.subjects,
                    "infoLink": format!("https://books.google.com/books?id=vol{i}"),
                    "language": "en"
                }
            })
        })
        .collect();
    axum::Json(json!({"kind": "books#volumes", "totalItems": books.len(), "items": items}))
        .into_response()
}

/// The Google Books API key the fake accepts.
pub const GOOGLE_KEY: &str = "google-test-key";

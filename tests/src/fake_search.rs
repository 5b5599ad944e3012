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

#[derive(Default)]
struct Inner {
    pages: Vec<(String, String, String)>,
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

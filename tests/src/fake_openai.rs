//! [`FakeOpenAi`]: a fake OpenAI-compatible server on 127.0.0.1 (port 0) that answers
//! `POST /v1/chat/completions` from a script of [`Reply`]s and records every request body.
//! When its script runs out it answers 500 with a body that says so, so a test that calls
//! the model more often than it planned fails loudly.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// One scripted HTTP reply.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with this JSON body.
    Json(Value),
    /// Any status, headers and raw body.
    Raw {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Never answers (the client must time out).
    Hang,
    /// `reply`, this much later than the server's delay.
    Later(std::time::Duration, Box<Reply>),
}

impl Reply {
    /// A completion whose message is plain text.
    pub fn text(text: &str) -> Reply {
        Reply::Json(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "fake",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
        }))
    }

    /// A completion with one tool call; `arguments` is sent as a JSON string, as OpenAI does.
    pub fn tool_call(name: &str, arguments: Value) -> Reply {
        Reply::Json(json!({
            "id": "chatcmpl-2", "object": "chat.completion", "model": "fake",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": null,
                                     "tool_calls": [{"id": "call_abc", "type": "function",
                                                     "function": {"name": name, "arguments": arguments.to_string()}}]}}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
        }))
    }

    pub fn status(status: u16, body: &str) -> Reply {
        Reply::Raw {
            status,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }

    /// 429 with a `Retry-After` header.
    pub fn rate_limited(retry_after: &str) -> Reply {
        Reply::Raw {
            status: 429,
            headers: vec![("retry-after".into(), retry_after.into())],
            body: r#"{"error":{"message":"rate limited"}}"#.into(),
        }
    }
}

/// Computes a reply from a request body (for servers that must follow a conversation).
pub type Handler = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

#[derive(Default)]
struct Shared {
    replies: VecDeque<Reply>,
    /// Answers when the script is empty.
    handler: Option<Handler>,
    requests: Vec<Value>,
    authorizations: Vec<Option<String>>,
    /// Every answer comes this late (a slow model).
    delay: Option<std::time::Duration>,
    /// Requests being answered now, and the most at once.
    in_flight: usize,
    max_in_flight: usize,
    /// Requests whose client went away before the answer (the connection dropped).
    abandoned: usize,
    /// A streamed answer sends a piece (a word) this often.
    pace: std::time::Duration,
    /// Requests with `stream: true` are refused with 400 (a server that cannot stream).
    refuse_streams: bool,
}

/// Counts a request in flight until it is answered or its client goes away.
struct InFlight {
    shared: Arc<Mutex<Shared>>,
    answered: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut s = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        s.in_flight = s.in_flight.saturating_sub(1);
        if !self.answered {
            s.abandoned += 1;
        }
    }
}

/// A running fake server; it stops when dropped.
pub struct FakeOpenAi {
    addr: std::net::SocketAddr,
    shared: Arc<Mutex<Shared>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeOpenAi {
    pub async fn start(replies: impl IntoIterator<Item = Reply>) -> std::io::Result<Self> {
        let shared = Arc::new(Mutex::new(Shared {
            replies: replies.into_iter().collect(),
            ..Default::default()
        }));
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .route(
                "/v1/models",
                axum::routing::get(|| async {
                    axum::Json(json!({"object": "list", "data": [
                        {"id": "fake-model", "object": "model", "created": 0, "owned_by": "kaiwa-tests"}
                    ]}))
                }),
            )
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeOpenAi { addr, shared, task })
    }

    /// A server that answers every request with `handler` (after any scripted replies).
    pub async fn serve(handler: Handler) -> std::io::Result<Self> {
        let server = Self::start([]).await?;
        server.lock().handler = Some(handler);
        Ok(server)
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn push(&self, reply: Reply) {
        self.lock().replies.push_back(reply);
    }

    /// Request bodies received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.lock().requests.clone()
    }

    /// `Authorization` headers received, in order.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.lock().authorizations.clone()
    }

    /// Every later answer comes `delay` late.
    pub fn set_delay(&self, delay: std::time::Duration) {
        self.lock().delay = Some(delay);
    }

    /// The most requests that were being answered at once.
    pub fn max_in_flight(&self) -> usize {
        self.lock().max_in_flight
    }

    /// Requests whose client gave up (dropped the connection) before the answer.
    pub fn abandoned(&self) -> usize {
        self.lock().abandoned
    }

    /// [`Self::abandoned`] once it reaches `n`, or after a second (a dropped connection is
    /// noticed by the server a moment after the client let go).
    pub async fn abandoned_soon(&self, n: usize) -> usize {
        for _ in 0..50 {
            if self.abandoned() >= n {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        self.abandoned()
    }

    /// A streamed answer (`stream: true`) sends one word per `pace`.
    pub fn set_stream_pace(&self, pace: std::time::Duration) {
        self.lock().pace = pace;
    }

    /// Answers 400 to requests that ask for a stream.
    pub fn refuse_streams(&self) {
        self.lock().refuse_streams = true;
    }

    pub fn remaining(&self) -> usize {
        self.lock().replies.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn completions(
    State(shared): State<Arc<Mutex<Shared>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (reply, delay, mut in_flight, pace) = {
        let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
        s.in_flight += 1;
        s.max_in_flight = s.max_in_flight.max(s.in_flight);
        let mut in_flight = InFlight {
            shared: shared.clone(),
            answered: false,
        };
        let value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
        s.authorizations.push(
            headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        );
        let reply = s
            .replies
            .pop_front()
            .or_else(|| s.handler.as_ref().map(|h| h(&value)));
        let streamed = value.get("stream") == Some(&Value::Bool(true));
        s.requests.push(value);
        if streamed && s.refuse_streams {
            // the scripted reply stays for the request made without a stream
            if let Some(reply) = reply {
                s.replies.push_front(reply);
            }
            in_flight.answered = true;
            // (the guard goes before `in_flight`, whose drop takes the lock)
            drop(s);
            return (
                StatusCode::BAD_REQUEST,
                r#"{"error":{"message":"streaming is not supported with tools"}}"#,
            )
                .into_response();
        }
        let pace = streamed.then_some(s.pace);
        (reply, s.delay, in_flight, pace)
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let mut reply = reply;
    while let Some(Reply::Later(after, later)) = reply {
        tokio::time::sleep(after).await;
        reply = Some(*later);
    }
    if let (Some(pace), Some(Reply::Json(v))) = (pace, &reply) {
        return stream(v, pace, in_flight);
    }
    if !matches!(reply, Some(Reply::Hang)) {
        in_flight.answered = true;
    }
    match reply {
        Some(Reply::Json(v)) => (StatusCode::OK, axum::Json(v)).into_response(),
        Some(Reply::Raw {
            status,
            headers,
            body,
        }) => {
            let mut response = (
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                body,
            )
                .into_response();
            for (k, v) in headers {
                if let (Ok(k), Ok(v)) = (HeaderName::try_from(k), HeaderValue::try_from(v)) {
                    response.headers_mut().insert(k, v);
                }
            }
            response
        }
        Some(Reply::Hang) => std::future::pending().await,
        Some(Reply::Later(..)) => unreachable!("a later reply is waited out above"),
        None => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "fake OpenAI server: script exhausted",
        )
            .into_response(),
    }
}

/// A completion sent as Server-Sent Events: its text a word per `pace`, its tool calls in
/// one chunk, then usage and `[DONE]`. The request counts as abandoned if the client goes
/// away before the end.
fn stream(completion: &Value, pace: std::time::Duration, in_flight: InFlight) -> Response {
    let message = &completion["choices"][0]["message"];
    let mut chunks: Vec<Value> = Vec::new();
    if let Some(text) = message["content"].as_str() {
        let mut piece = String::new();
        for c in text.chars() {
            piece.push(c);
            if c == ' ' {
                chunks.push(json!({"choices": [{"index": 0, "delta": {"content": piece}}]}));
                piece = String::new();
            }
        }
        if !piece.is_empty() {
            chunks.push(json!({"choices": [{"index": 0, "delta": {"content": piece}}]}));
        }
    }
    if let Some(calls) = message["tool_calls"].as_array() {
        let deltas: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut c = c.clone();
                c["index"] = json!(i);
                c
            })
            .collect();
        chunks.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": deltas}}]}));
    }
    chunks.push(json!({"choices": [], "usage": completion["usage"].clone()}));
    let mut lines: VecDeque<String> = chunks
        .into_iter()
        .map(|c| format!("data: {c}\n\n"))
        .collect();
    lines.push_back("data: [DONE]\n\n".to_string());
    let body = futures::stream::unfold(
        (lines, in_flight, true),
        move |(mut lines, mut in_flight, first)| async move {
            let line = lines.pop_front()?;
            if !first {
                tokio::time::sleep(pace).await;
            }
            if lines.is_empty() {
                in_flight.answered = true;
            }
            Some((
                Ok::<_, std::io::Error>(Bytes::from(line)),
                (lines, in_flight, false),
            ))
        },
    );
    let mut response = axum::body::Body::from_stream(body).into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

//! [`OpenAiClient`]: a [`ChatModel`] over any OpenAI-compatible Chat Completions server
//! (OpenAI, Ollama, vLLM, llama.cpp server, LM Studio, OpenRouter, Gemini's endpoint).
//!
//! The wire types stay in this file and are lenient: fields real servers omit default, tool
//! call arguments may arrive as a string or an object, content as a string or parts. An
//! assistant message that carries tool calls is sent with `content: ""` (llama.cpp rejects
//! null), and `tool_choice: "required"` is sent as `auto` unless enabled. Every call has a
//! timeout: the smaller of its own and what is left of the turn's budget
//! ([`super::budget`]). A call that timed out is not sent again (the server may still be
//! working on it), nor one whose connection was refused (nothing listens: the floors answer
//! at once); 429, 5xx and a connection lost mid-answer are retried with exponential backoff
//! that honours `Retry-After`, only while the budget allows. At most `in_flight` requests go to
//! the server at once; the wait for a slot counts against the budget. A call given up
//! drops its connection, so the server stops working on it. The client does not log the
//! API key and never puts it in an error.
//!
//! [`ChatModel::chat_streaming`] asks for `stream: true` and reads the Server-Sent Events
//! answer chunk by chunk, text to the turn's [`Tap`]; a Stop drops the connection. A server
//! that answers with one JSON body is read as usual, and one that refuses to stream (4xx)
//! is asked again without.

use super::stream::Tap;
use super::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, ModelError, TokenUsage, ToolCall, ToolChoice,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sse::{StreamEnd, read_stream};
use std::time::Duration;

mod embeddings;
mod sse;

pub use embeddings::OpenAiEmbeddings;

/// Settings of one OpenAI-compatible endpoint. The API key is passed in, never read here.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    /// Per attempt.
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First backoff; doubles per retry.
    pub backoff: Duration,
    /// Longest wait we accept between attempts (also caps `Retry-After`).
    pub max_backoff: Duration,
    /// Send `tool_choice: "required"` as is (some servers reject it).
    pub supports_required_tool_choice: bool,
    /// Requests in flight to this server at once (shared by the clients of one server;
    /// `None`: no bound).
    pub in_flight: Option<std::sync::Arc<tokio::sync::Semaphore>>,
    /// The bound `in_flight` was made with (`usize::MAX`: none).
    pub max_in_flight: usize,
}

impl OpenAiConfig {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Duration::from_secs(60),
            max_retries: 3,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            supports_required_tool_choice: false,
            in_flight: None,
            max_in_flight: usize::MAX,
        }
    }
}

pub struct OpenAiClient {
    http: reqwest::Client,
    config: OpenAiConfig,
    url: String,
}

impl OpenAiClient {
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| ModelError::Connect(format!("cannot build HTTP client: {e}")))?;
        let url = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
        Ok(OpenAiClient { http, config, url })
    }

    /// One request, given up after `timeout` (a timeout is never retried: see the module).
    /// With a `tap` the answer is asked for as a stream and its text goes to the tap.
    async fn attempt(
        &self,
        body: &WireRequest<'_>,
        timeout: Duration,
        by_budget: bool,
        tap: Option<&Tap>,
    ) -> Result<ChatResponse, Attempt> {
        let mut request = self.http.post(&self.url).json(body).timeout(timeout);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        let timed_out = || {
            if by_budget {
                ModelError::BudgetSpent
            } else {
                ModelError::Timeout(timeout)
            }
        };
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => return Err(Attempt::Fatal(timed_out())),
            // nothing listens there (refused, no such host): no overload to wait out, the
            // agents' floors answer at once
            Err(e) if e.is_connect() => {
                return Err(Attempt::Fatal(ModelError::Connect(without_url(&e))));
            }
            Err(e) => return Err(Attempt::Retry(ModelError::Connect(without_url(&e)), None)),
        };
        let status = response.status();
        // 429 and 503 may both say when to come back
        let server_wait = retry_after(response.headers());
        if status.as_u16() == 429 {
            return Err(Attempt::Retry(
                ModelError::RateLimited {
                    retry_after: server_wait,
                },
                server_wait,
            ));
        }
        let streamed = status.is_success()
            && response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
        if let (true, Some(tap)) = (streamed, tap) {
            return read_stream(response, tap).await.map_err(|e| match e {
                StreamEnd::TimedOut => Attempt::Fatal(timed_out()),
                StreamEnd::Lost(e) => Attempt::Retry(e, None),
                StreamEnd::Bad(e) => Attempt::Fatal(e),
            });
        }
        let text = match response.text().await {
            Ok(t) => t,
            Err(e) if e.is_timeout() => return Err(Attempt::Fatal(timed_out())),
            Err(e) => return Err(Attempt::Retry(ModelError::Connect(without_url(&e)), None)),
        };
        if status.is_server_error() {
            return Err(Attempt::Retry(
                ModelError::Http {
                    status: status.as_u16(),
                    body: truncate(&text, 500),
                },
                server_wait,
            ));
        }
        if !status.is_success() {
            return Err(Attempt::Fatal(ModelError::Http {
                status: status.as_u16(),
                body: truncate(&text, 500),
            }));
        }
        parse_response(&text).map_err(Attempt::Fatal)
    }

    /// The call with its retries (see the module); `tap`: streamed.
    async fn call(
        &self,
        request: &ChatRequest,
        tap: Option<&Tap>,
    ) -> Result<ChatResponse, ModelError> {
        let mut body = WireRequest::from_request(&self.config, request);
        if tap.is_some() {
            body.stream = true;
            body.stream_options = Some(StreamOptions {
                include_usage: true,
            });
        }
        // this call's time: its own timeout, within what is left of the turn's budget
        // (the time, and whether the budget is what limits it)
        let time_left = || match super::budget::remaining() {
            Some(left) if left.is_zero() => Err(ModelError::BudgetSpent),
            Some(left) if left < self.config.timeout => Ok((left, true)),
            _ => Ok((self.config.timeout, false)),
        };
        let mut attempt = 0u32;
        loop {
            let (timeout, by_budget) = time_left()?;
            let started = tokio::time::Instant::now();
            // a slot at the server; the wait counts against the budget
            let slot = match &self.config.in_flight {
                Some(slots) => {
                    match tokio::time::timeout(timeout, slots.clone().acquire_owned()).await {
                        Ok(Ok(slot)) => Some(slot),
                        Ok(Err(_)) => None,
                        Err(_) => return Err(ModelError::BudgetSpent),
                    }
                }
                None => None,
            };
            let timeout = timeout.saturating_sub(started.elapsed());
            if timeout.is_zero() {
                return Err(ModelError::BudgetSpent);
            }
            if let Some(tap) = tap {
                // a try again starts the text again
                tap.reset();
            }
            match self.attempt(&body, timeout, by_budget, tap).await {
                Ok(response) => return Ok(response),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(e, server_wait)) => {
                    if attempt >= self.config.max_retries {
                        return Err(e);
                    }
                    let backoff = self
                        .config
                        .backoff
                        .saturating_mul(2u32.saturating_pow(attempt))
                        .min(self.config.max_backoff);
                    let wait = server_wait.map_or(backoff, |w| w.min(self.config.max_backoff));
                    // a retry the budget cannot wait for is not made
                    if super::budget::remaining().is_some_and(|left| left <= wait) {
                        return Err(e);
                    }
                    tracing::warn!(error = %e, attempt = attempt + 1, wait_ms = wait.as_millis() as u64, "model call failed; retrying");
                    // the slot goes to another call while this one waits
                    drop(slot);
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
            }
        }
    }
}

enum Attempt {
    /// Worth another try, after the given wait if the server named one.
    Retry(ModelError, Option<Duration>),
    Fatal(ModelError),
}

#[async_trait]
impl ChatModel for OpenAiClient {
    fn name(&self) -> &str {
        &self.config.model
    }

    fn parallel_calls(&self) -> usize {
        self.config.max_in_flight
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        self.call(&request, None).await
    }

    async fn chat_streaming(
        &self,
        request: ChatRequest,
        tap: &Tap,
    ) -> Result<ChatResponse, ModelError> {
        match self.call(&request, Some(tap)).await {
            // a server that will not stream this request (some refuse tools with a stream):
            // one answer in one piece
            Err(ModelError::Http { status, .. }) if (400..500).contains(&status) => {
                tracing::debug!(
                    status,
                    "the model server refused to stream; asking again without"
                );
                tap.reset();
                self.call(&request, None).await
            }
            other => other,
        }
    }
}

/// reqwest errors print the URL; keep the message without it (a URL may carry a key).
pub(super) fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "<model endpoint>");
    }
    text
}

pub(super) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// `Retry-After` as seconds (the form model servers use); an HTTP date is also accepted.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = value.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Some(Duration::from_secs_f64(secs));
        }
        return None;
    }
    let when = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let delta = when.with_timezone(&chrono::Utc) - chrono::Utc::now();
    delta.to_std().ok().or(Some(Duration::ZERO))
}

// ---- wire types (request) ----

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

impl<'a> WireRequest<'a> {
    fn from_request(config: &'a OpenAiConfig, request: &'a ChatRequest) -> Self {
        let tool_choice = if request.tools.is_empty() {
            None
        } else {
            Some(match request.tool_choice {
                ToolChoice::Auto => "auto",
                ToolChoice::None => "none",
                ToolChoice::Required if config.supports_required_tool_choice => "required",
                ToolChoice::Required => "auto",
            })
        };
        WireRequest {
            model: &config.model,
            messages: request.messages.iter().map(WireMessage::from).collect(),
            tools: request
                .tools
                .iter()
                .map(|t| WireTool {
                    kind: "function",
                    function: WireFunction {
                        name: &t.name,
                        description: &t.description,
                        parameters: t.parameters.as_ref(),
                    },
                })
                .collect(),
            tool_choice,
            temperature: request.temperature,
            max_tokens: request.max_tokens,
            stream: false,
            stream_options: None,
        }
    }
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCallOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

impl<'a> From<&'a ChatMessage> for WireMessage<'a> {
    fn from(m: &'a ChatMessage) -> Self {
        let plain = |role, content: &'a str| WireMessage {
            role,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
        };
        match m {
            ChatMessage::System { content } => plain("system", content),
            ChatMessage::User { content } => plain("user", content),
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => WireMessage {
                role: "assistant",
                // llama.cpp's server wants "" rather than null next to tool calls
                content: content.as_deref().unwrap_or(""),
                tool_calls: tool_calls
                    .iter()
                    .map(|c| WireToolCallOut {
                        id: &c.id,
                        kind: "function",
                        function: WireFunctionCallOut {
                            name: &c.name,
                            arguments: &c.arguments,
                        },
                    })
                    .collect(),
                tool_call_id: None,
            },
            ChatMessage::Tool {
                tool_call_id,
                content,
            } => WireMessage {
                role: "tool",
                content,
                tool_calls: Vec::new(),
                tool_call_id: Some(tool_call_id),
            },
        }
    }
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
struct WireToolCallOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCallOut<'a>,
}

#[derive(Serialize)]
struct WireFunctionCallOut<'a> {
    name: &'a str,
    arguments: &'a str,
}

// ---- wire types (response), lenient ----

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    choices: Vec<WireChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    message: Option<WireAssistant>,
}

#[derive(Deserialize, Default)]
struct WireAssistant {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCallIn>>,
    /// Older servers: a single `function_call`.
    #[serde(default)]
    function_call: Option<WireFunctionIn>,
}

#[derive(Deserialize)]
struct WireToolCallIn {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunctionIn>,
}

#[derive(Deserialize)]
pub(super) struct WireFunctionIn {
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) arguments: Option<Value>,
}

#[derive(Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    pub(super) prompt_tokens: Option<u64>,
    #[serde(default)]
    pub(super) completion_tokens: Option<u64>,
}

fn content_text(content: Option<Value>) -> Option<String> {
    match content? {
        Value::String(s) => Some(s),
        Value::Array(parts) => {
            let text: String = parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("");
            Some(text)
        }
        Value::Null => None,
        other => Some(other.to_string()),
    }
    .filter(|s| !s.trim().is_empty())
}

pub(super) fn function_call(
    index: usize,
    id: Option<String>,
    f: WireFunctionIn,
) -> Result<ToolCall, ModelError> {
    let name = f
        .name
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ModelError::Malformed(format!("tool call #{index} has no function name")))?;
    let arguments = match f.arguments {
        None | Some(Value::Null) => "{}".to_string(),
        Some(Value::String(s)) if s.trim().is_empty() => "{}".to_string(),
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
    };
    Ok(ToolCall {
        id: id
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| format!("call_{index}")),
        name,
        arguments,
    })
}

/// Parses a Chat Completions body; anything that is not one is a [`ModelError::Malformed`].
pub(crate) fn parse_response(body: &str) -> Result<ChatResponse, ModelError> {
    let wire: WireResponse = serde_json::from_str(body).map_err(|e| {
        ModelError::Malformed(format!("{e} (body starts with {:?})", truncate(body, 120)))
    })?;
    if let Some(error) = wire.error {
        return Err(ModelError::Malformed(format!(
            "server reported an error: {}",
            truncate(&error.to_string(), 300)
        )));
    }
    let message = wire
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| ModelError::Malformed("response has no choices".into()))?
        .message
        .ok_or_else(|| ModelError::Malformed("first choice has no message".into()))?;
    let mut tool_calls = Vec::new();
    for (index, call) in message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        let f = call
            .function
            .ok_or_else(|| ModelError::Malformed(format!("tool call #{index} has no function")))?;
        tool_calls.push(function_call(index, call.id, f)?);
    }
    if let Some(f) = message.function_call {
        let index = tool_calls.len();
        tool_calls.push(function_call(index, None, f)?);
    }
    let usage = wire.usage.map_or(TokenUsage::default(), |u| TokenUsage {
        prompt_tokens: u.prompt_tokens.unwrap_or(0),
        completion_tokens: u.completion_tokens.unwrap_or(0),
    });
    Ok(ChatResponse {
        text: content_text(message.content),
        tool_calls,
        usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenient_parsing_accepts_object_arguments_and_missing_fields() {
        let r = parse_response(
            r#"{"choices":[{"message":{"content":null,"tool_calls":[{"function":{"name":"ask","arguments":{"question":"Hi?"}}}]}}]}"#,
        )
        .expect("parses");
        assert_eq!(r.text, None);
        assert_eq!(r.tool_calls[0].name, "ask");
        assert_eq!(r.tool_calls[0].id, "call_0");
        assert_eq!(r.tool_calls[0].arguments, r#"{"question":"Hi?"}"#);
        assert_eq!(r.usage, TokenUsage::default());
    }

    #[test]
    fn content_parts_are_joined() {
        let r = parse_response(r#"{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}],"usage":{"prompt_tokens":3}}"#)
            .expect("parses");
        assert_eq!(r.text.as_deref(), Some("ab"));
        assert_eq!(r.usage.prompt_tokens, 3);
    }

    #[test]
    fn garbage_is_malformed() {
        assert!(matches!(
            parse_response("<html>oops</html>"),
            Err(ModelError::Malformed(_))
        ));
        assert!(matches!(
            parse_response(r#"{"choices":[]}"#),
            Err(ModelError::Malformed(_))
        ));
        assert!(matches!(
            parse_response(
                r#"{"choices":[{"message":{"tool_calls":[{"function":{"arguments":"{}"}}]}}]}"#
            ),
            Err(ModelError::Malformed(_))
        ));
    }

    #[test]
    fn assistant_tool_call_messages_carry_empty_content() {
        let m = ChatMessage::Assistant {
            content: None,
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "ask".into(),
                arguments: "{}".into(),
            }],
        };
        let json = serde_json::to_value(WireMessage::from(&m)).expect("serialises");
        assert_eq!(json["content"], "");
        assert_eq!(json["tool_calls"][0]["function"]["name"], "ask");
    }

    #[test]
    fn required_tool_choice_is_downgraded_unless_supported() {
        let mut config = OpenAiConfig::new("http://x", "m");
        let request = ChatRequest {
            tools: vec![super::super::ToolSpec {
                name: "t".into(),
                description: "d".into(),
                parameters: serde_json::json!({"type":"object"}).into(),
            }],
            tool_choice: ToolChoice::Required,
            ..Default::default()
        };
        assert_eq!(
            WireRequest::from_request(&config, &request).tool_choice,
            Some("auto")
        );
        config.supports_required_tool_choice = true;
        assert_eq!(
            WireRequest::from_request(&config, &request).tool_choice,
            Some("required")
        );
    }
}

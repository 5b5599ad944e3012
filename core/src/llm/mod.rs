//! The model boundary: [`ChatModel`] takes messages and tool specs and returns text and/or
//! tool calls with token usage.
//!
//! Implementations: [`openai::OpenAiClient`] (any OpenAI-compatible Chat Completions server)
//! and [`scripted::ScriptedModel`] (a playback model for `kaiwa bench` and tests). A provider's wire types
//! stay in its own module; everything above speaks the types here. [`ModelRouter`] picks the
//! model an agent uses (per-agent overrides, or none: then agents use their rule-based floor).

pub mod breaker;
pub mod budget;
pub mod openai;
pub mod scripted;
pub mod stream;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// One message of a chat request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        content: Option<String>,
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        tool_call_id: String,
        content: String,
    },
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> Self {
        ChatMessage::System {
            content: content.into(),
        }
    }
    pub fn user(content: impl Into<String>) -> Self {
        ChatMessage::User {
            content: content.into(),
        }
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        ChatMessage::Assistant {
            content: Some(content.into()),
            tool_calls: Vec::new(),
        }
    }
}

/// A tool the model may call: name, description and JSON Schema of its arguments.
/// (The client's wire types in `openai.rs` do the serializing.)
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// Shared: the same schema goes out with every request of every turn.
    pub parameters: std::sync::Arc<serde_json::Value>,
}

/// A call the model asked for. `arguments` is the raw JSON text the model produced (it may
/// be invalid: the agent loop reports that back to the model).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl TokenUsage {
    pub fn add(&mut self, other: TokenUsage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
    }
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

/// Whether the model may, must not, or should call tools. `Required` is sent as `auto` by
/// clients whose servers reject it (llama.cpp answers 500 to `required`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolChoice {
    #[default]
    Auto,
    None,
    Required,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
}

impl ChatRequest {
    /// The text of the last user message (empty when there is none).
    pub fn last_user_text(&self) -> &str {
        self.messages
            .iter()
            .rev()
            .find_map(|m| match m {
                ChatMessage::User { content } => Some(content.as_str()),
                _ => None,
            })
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    pub text: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub usage: TokenUsage,
}

impl ChatResponse {
    /// A plain text answer (handy for scripts).
    pub fn text(text: impl Into<String>) -> Self {
        ChatResponse {
            text: Some(text.into()),
            ..Default::default()
        }
    }

    /// One tool call with JSON arguments (handy for scripts).
    pub fn tool_call(name: &str, arguments: serde_json::Value) -> Self {
        ChatResponse {
            text: None,
            tool_calls: vec![ToolCall {
                id: format!("call_{}", crate::message::new_request_id()),
                name: name.to_string(),
                arguments: arguments.to_string(),
            }],
            usage: TokenUsage::default(),
        }
    }
}

/// Why a model call failed. Callers act on the variant: retry later, fall back to rules, …
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("model call timed out after {0:?}")]
    Timeout(Duration),
    #[error("model server rate-limited the call (retry after {retry_after:?})")]
    RateLimited { retry_after: Option<Duration> },
    #[error("model server answered HTTP {status}: {body}")]
    Http { status: u16, body: String },
    #[error("could not reach the model server: {0}")]
    Connect(String),
    #[error("model server sent a response that is not a valid chat completion: {0}")]
    Malformed(String),
    #[error("scripted model: {0}")]
    Script(String),
    #[error("the model endpoint is failing; its circuit breaker is open")]
    CircuitOpen,
    #[error("the turn's time for model work is spent")]
    BudgetSpent,
    /// The caller dropped the call before its answer (the connection closed with it).
    #[error("the call was cancelled before it answered")]
    Cancelled,
}

impl ModelError {
    /// A short kind for metrics and the ledger.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelError::Timeout(_) => "timeout",
            ModelError::RateLimited { .. } => "rate_limited",
            ModelError::Http { .. } => "http",
            ModelError::Connect(_) => "connect",
            ModelError::Malformed(_) => "malformed",
            ModelError::Script(_) => "script",
            ModelError::CircuitOpen => "circuit_open",
            ModelError::BudgetSpent => "budget",
            ModelError::Cancelled => "cancelled",
        }
    }
}

/// A model that turns texts into vectors (`[llm] embeddings_model`): the knowledge base
/// ranks passages by meaning with it ([`crate::kb::Semantic`]).
#[async_trait]
pub trait Embedder: Send + Sync {
    /// The model's name (vectors of different models are never compared).
    fn model(&self) -> &str;
    /// One vector per text, in order, all of one length; `kind` says whether the texts are
    /// questions or the passages that answer them (for servers that take it as a field).
    async fn embed(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, ModelError>;
}

/// What texts given to an [`Embedder`] are: asymmetric models embed a question and a
/// passage differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedKind {
    Query,
    Passage,
}

/// A chat model. Held as `Arc<dyn ChatModel>`; wrappers (tracing, breakers) implement it too.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// The model's name as recorded in the ledger.
    fn name(&self) -> &str;
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError>;

    /// How many calls the model answers at once (a single-slot local server: 1). Work that
    /// only pays when calls run side by side (the interview's drafted next question) is
    /// not started where they would queue.
    fn parallel_calls(&self) -> usize {
        usize::MAX
    }

    /// Like [`ChatModel::chat`], and the answer's text is appended to `tap` as it arrives;
    /// a Stop on the tap ends the request and the text so far is the answer. A model or
    /// server that cannot stream answers in one piece (the default): the reply then goes
    /// out as one message.
    async fn chat_streaming(
        &self,
        request: ChatRequest,
        tap: &stream::Tap,
    ) -> Result<ChatResponse, ModelError> {
        let _ = tap;
        self.chat(request).await
    }
}

/// Which model each agent uses. Empty means "no model": agents use their rule-based floor.
#[derive(Clone, Default)]
pub struct ModelRouter {
    default: Option<Arc<dyn ChatModel>>,
    per_agent: HashMap<String, Arc<dyn ChatModel>>,
    breakers: Vec<Arc<breaker::Breaker>>,
}

impl ModelRouter {
    /// No model at all.
    pub fn none() -> Self {
        Self::default()
    }

    pub fn new(default: Option<Arc<dyn ChatModel>>) -> Self {
        ModelRouter {
            default,
            per_agent: HashMap::new(),
            breakers: Vec::new(),
        }
    }

    /// Registers the breakers of the endpoints, so the orchestrator can tell users once when
    /// one is open.
    pub fn with_breakers(mut self, breakers: Vec<Arc<breaker::Breaker>>) -> Self {
        self.breakers = breakers;
        self
    }

    /// `Some(outage)` while any endpoint's breaker is open.
    pub fn outage(&self) -> Option<u64> {
        self.breakers.iter().filter_map(|b| b.open_outage()).max()
    }

    /// Routes `agent` to `model` instead of the default.
    pub fn with_agent(mut self, agent: impl Into<String>, model: Arc<dyn ChatModel>) -> Self {
        self.per_agent.insert(agent.into(), model);
        self
    }

    /// The model for `agent`, or `None` when no model is configured.
    pub fn for_agent(&self, agent: &str) -> Option<Arc<dyn ChatModel>> {
        self.per_agent
            .get(agent)
            .cloned()
            .or_else(|| self.default.clone())
    }

    pub fn is_empty(&self) -> bool {
        self.default.is_none() && self.per_agent.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(&'static str);

    #[async_trait]
    impl ChatModel for Named {
        fn name(&self) -> &str {
            self.0
        }
        async fn chat(&self, _request: ChatRequest) -> Result<ChatResponse, ModelError> {
            Ok(ChatResponse::text(self.0))
        }
    }

    #[test]
    fn router_prefers_the_agent_override() {
        let router = ModelRouter::new(Some(Arc::new(Named("big"))))
            .with_agent("quick_check", Arc::new(Named("small")));
        assert_eq!(
            router
                .for_agent("quick_check")
                .map(|m| m.name().to_string()),
            Some("small".into())
        );
        assert_eq!(
            router.for_agent("auditor").map(|m| m.name().to_string()),
            Some("big".into())
        );
        assert!(ModelRouter::none().for_agent("auditor").is_none());
    }
}

//! The agent loop of seed 000 ("エージェントループ機構"): [`Agent::run`] calls the model, runs
//! the tool calls it asks for and feeds results (errors included) back, until a terminal tool
//! stops it ([`Control::AwaitUser`] for `ask`, [`Control::Finish`] for `result`, …).
//!
//! When the model answers without a tool call, the agent's `remaining_tasks(state)` are
//! injected as "You still need to: …" and the model is called again; with nothing remaining
//! the text is the answer. After `max_iterations` model calls the loop stops with
//! [`AgentError::MaxIterations`]. Every model call is written to the [`LlmLedger`].
//! [`subtask`] runs a child agent on a summary context instead of the whole history.
//! The loop knows no flow: prompts, tools and state come from the caller.

pub mod research;
pub mod subtask;
pub mod tool;
pub mod trace;
pub mod workflow;

pub use tool::{Control, Tool, ToolError, ToolOutput, TypedTool, typed};

use crate::llm::{
    ChatMessage, ChatModel, ChatRequest, ModelError, TokenUsage, ToolCall, ToolChoice,
};
use crate::store::LlmCallRecord;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tracing::Instrument;

/// Default cap on model calls per loop (seed 000: 10).
pub const DEFAULT_MAX_ITERATIONS: usize = 10;

type RemainingTasks<S> = Box<dyn Fn(&S) -> Vec<String> + Send + Sync>;

/// An agent: a name (for routing and the ledger), its tools, and what it still has to do.
/// The system prompt is part of the messages the caller builds from the state.
pub struct Agent<S> {
    pub name: String,
    pub tools: Vec<Arc<dyn Tool<S>>>,
    pub max_iterations: usize,
    pub tool_choice: ToolChoice,
    remaining_tasks: RemainingTasks<S>,
    /// Its text answer may be shown as it is written ([`crate::llm::stream`]).
    streams: bool,
}

/// One tool call the loop made and what came of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallResult {
    pub name: String,
    /// The arguments as the model sent them (parsed when they were JSON).
    pub arguments: serde_json::Value,
    /// Tool output, or the error text the model was given.
    pub result: Result<String, String>,
}

/// What a finished loop hands back (seed 000's `AgentLoopResult`).
#[derive(Debug)]
pub struct AgentLoopResult<S> {
    /// For the user: the `ask` message, or the model's final text.
    pub response_text: String,
    pub tool_calls: Vec<ToolCallResult>,
    /// True when the loop stopped to wait for the user.
    pub awaiting_user_response: bool,
    pub state: S,
    pub usage: TokenUsage,
    /// The whole exchange, tool messages included.
    pub messages: Vec<ChatMessage>,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("agent {agent}: model call failed: {source}")]
    Model {
        agent: String,
        #[source]
        source: ModelError,
    },
    #[error("agent {agent} did not finish within {iterations} model calls")]
    MaxIterations { agent: String, iterations: usize },
    /// The model answered without its tools twice in a row (once after a reminder): the
    /// caller answers by its floor rather than asking again.
    #[error("agent {agent}: the model answered without its tools after a reminder")]
    NoToolCall { agent: String },
}

impl<S: Send> Agent<S> {
    pub fn new(name: impl Into<String>, tools: Vec<Arc<dyn Tool<S>>>) -> Self {
        Agent {
            name: name.into(),
            tools,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            tool_choice: ToolChoice::Auto,
            remaining_tasks: Box::new(|_| Vec::new()),
            streams: false,
        }
    }

    /// Lets the agent's text answer stream to the user while it is written, when the turn
    /// has a [`crate::llm::stream::Tap`]. Only for answers that need no vetting: never an
    /// interview question.
    pub fn streaming(mut self) -> Self {
        self.streams = true;
        self
    }

    /// What the agent must still do, injected when the model answers without tools.
    pub fn with_remaining_tasks(
        mut self,
        f: impl Fn(&S) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.remaining_tasks = Box::new(f);
        self
    }

    pub fn with_max_iterations(mut self, n: usize) -> Self {
        self.max_iterations = n.max(1);
        self
    }

    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = choice;
        self
    }

    pub fn remaining_tasks(&self, state: &S) -> Vec<String> {
        (self.remaining_tasks)(state)
    }

    fn tool(&self, name: &str) -> Option<&Arc<dyn Tool<S>>> {
        self.tools.iter().find(|t| t.name() == name)
    }

    /// Runs the loop on `messages` (system prompt first) until a terminal tool, a final text
    /// with nothing remaining, or the iteration cap.
    pub async fn run(
        &self,
        model: &dyn ChatModel,
        messages: Vec<ChatMessage>,
        state: S,
        ledger: &LlmLedger,
    ) -> Result<AgentLoopResult<S>, AgentError> {
        let span = tracing::debug_span!("agent", agent = %self.name, model = %model.name());
        self.run_inner(model, messages, state, ledger)
            .instrument(span)
            .await
    }

    async fn run_inner(
        &self,
        model: &dyn ChatModel,
        mut messages: Vec<ChatMessage>,
        mut state: S,
        ledger: &LlmLedger,
    ) -> Result<AgentLoopResult<S>, AgentError> {
        let specs: Vec<_> = self.tools.iter().map(|t| t.spec()).collect();
        let mut usage = TokenUsage::default();
        let mut calls = Vec::new();
        // a text-only answer with work remaining gets one reminder, not one per iteration
        let mut reminded = false;
        let tap = self.streams.then(crate::llm::stream::current).flatten();
        for iteration in 0..self.max_iterations {
            let request = ChatRequest {
                messages: messages.clone(),
                tools: specs.clone(),
                tool_choice: if specs.is_empty() {
                    ToolChoice::Auto
                } else {
                    self.tool_choice
                },
                ..Default::default()
            };
            let pending = ledger.pending(&self.name, model.name());
            let response = match &tap {
                Some(tap) => model.chat_streaming(request, tap).await,
                None => model.chat(request).await,
            };
            pending.finish(&response);
            let response = response.map_err(|source| AgentError::Model {
                agent: self.name.clone(),
                source,
            })?;
            usage.add(response.usage);
            tracing::debug!(
                iteration,
                tools = response.tool_calls.len(),
                "model answered"
            );

            // the user stopped the answer: what was shown is the answer, work left or not
            let stopped = tap
                .as_ref()
                .filter(|tap| tap.was_stopped())
                .map(|tap| tap.text());
            if stopped.is_some() || response.tool_calls.is_empty() {
                let remaining = match &stopped {
                    Some(_) => Vec::new(),
                    None => self.remaining_tasks(&state),
                };
                let text = stopped.unwrap_or_else(|| response.text.unwrap_or_default());
                if remaining.is_empty() {
                    messages.push(ChatMessage::assistant(text.clone()));
                    return Ok(AgentLoopResult {
                        response_text: text,
                        tool_calls: calls,
                        awaiting_user_response: true,
                        state,
                        usage,
                        messages,
                    });
                }
                if reminded {
                    return Err(AgentError::NoToolCall {
                        agent: self.name.clone(),
                    });
                }
                reminded = true;
                if !text.is_empty() {
                    messages.push(ChatMessage::assistant(text));
                }
                messages.push(ChatMessage::user(format!(
                    "You still need to: {}. Use the tools to do so.",
                    remaining.join("; ")
                )));
                continue;
            }
            if let Some(tap) = &tap {
                // what was streamed led to tool calls: the answer is still to come
                tap.reset();
            }

            messages.push(ChatMessage::Assistant {
                content: response.text.clone(),
                tool_calls: response.tool_calls.clone(),
            });
            let stop = self
                .run_tools(&mut state, &response.tool_calls, &mut messages, &mut calls)
                .await;
            match stop {
                Some(Control::AwaitUser { message }) => {
                    return Ok(AgentLoopResult {
                        response_text: message,
                        tool_calls: calls,
                        awaiting_user_response: true,
                        state,
                        usage,
                        messages,
                    });
                }
                Some(Control::Finish) => {
                    return Ok(AgentLoopResult {
                        response_text: response.text.unwrap_or_default(),
                        tool_calls: calls,
                        awaiting_user_response: false,
                        state,
                        usage,
                        messages,
                    });
                }
                Some(Control::Continue) | None => {}
            }
        }
        Err(AgentError::MaxIterations {
            agent: self.name.clone(),
            iterations: self.max_iterations,
        })
    }

    /// Runs one step's tool calls in order, each result told to the model in `messages`
    /// and kept in `calls`. A call that ends the turn (or asks the user) stops the rest:
    /// they are reported as not run. Returns that call's control.
    async fn run_tools(
        &self,
        state: &mut S,
        tool_calls: &[ToolCall],
        messages: &mut Vec<ChatMessage>,
        calls: &mut Vec<ToolCallResult>,
    ) -> Option<Control> {
        let mut stop: Option<Control> = None;
        for call in tool_calls {
            let arguments = serde_json::from_str(&call.arguments)
                .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
            let result = if stop.is_some() {
                Err("not run: an earlier call in this step ended the turn".to_string())
            } else {
                let (result, control) = self.call_tool(state, call).await;
                stop = control;
                result
            };
            if let Err(e) = &result {
                tracing::debug!(tool = %call.name, error = %e, "tool call failed; reported to the model");
            }
            messages.push(ChatMessage::Tool {
                tool_call_id: call.id.clone(),
                content: match &result {
                    Ok(s) => s.clone(),
                    Err(e) => e.clone(),
                },
            });
            calls.push(ToolCallResult {
                name: call.name.clone(),
                arguments,
                result,
            });
        }
        stop
    }

    /// One tool call: its result as the model reads it (an unknown tool or bad arguments
    /// are errors the model can correct), and the control it gave unless it continues.
    async fn call_tool(
        &self,
        state: &mut S,
        call: &ToolCall,
    ) -> (Result<String, String>, Option<Control>) {
        let Some(tool) = self.tool(&call.name) else {
            let names: Vec<_> = self.tools.iter().map(|t| t.name()).collect();
            let error = format!(
                "unknown tool {:?}; the available tools are: {}",
                call.name,
                names.join(", ")
            );
            return (Err(error), None);
        };
        match tool.call(state, &call.arguments).await {
            Ok(output) => {
                let control = (output.control != Control::Continue).then_some(output.control);
                (Ok(output.content), control)
            }
            Err(e) => (Err(format!("error: {e}")), None),
        }
    }
}

impl<T: Send> Agent<Option<T>> {
    /// The usual shape of an agent with a terminal result tool: its state is `None` until
    /// the tool sets it, and until then `task` remains.
    pub fn until_set(self, task: &'static str) -> Self {
        self.with_remaining_tasks(move |s: &Option<T>| {
            if s.is_none() {
                vec![task.to_string()]
            } else {
                Vec::new()
            }
        })
    }
}

/// A model call in flight ([`LlmLedger::pending`]).
pub struct PendingCall<'a> {
    ledger: &'a LlmLedger,
    agent: &'a str,
    model: &'a str,
    started: Instant,
    done: bool,
}

impl PendingCall<'_> {
    /// The call answered (or failed): recorded with its usage or error.
    pub fn finish<T: HasUsage>(mut self, outcome: &Result<T, ModelError>) {
        self.done = true;
        self.ledger
            .record(self.agent, self.model, self.started, outcome);
    }
}

impl Drop for PendingCall<'_> {
    fn drop(&mut self) {
        if !self.done {
            let cancelled: Result<crate::llm::ChatResponse, ModelError> =
                Err(ModelError::Cancelled);
            self.ledger
                .record(self.agent, self.model, self.started, &cancelled);
        }
    }
}

/// The model calls of one turn, written to the `llm_calls` table with the turn, and what
/// its agents noted of why it answered as it did ([`trace::Note`]: the turn's trace).
#[derive(Clone, Default)]
pub struct LlmLedger {
    calls: Arc<Mutex<Vec<LlmCallRecord>>>,
    notes: Arc<Mutex<Vec<trace::Note>>>,
}

impl LlmLedger {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn record<T>(
        &self,
        agent: &str,
        model: &str,
        started: Instant,
        outcome: &Result<T, ModelError>,
    ) where
        T: HasUsage,
    {
        let (usage, error) = match outcome {
            Ok(r) => (r.usage(), None),
            Err(e) => (TokenUsage::default(), Some(e.to_string())),
        };
        let record = LlmCallRecord {
            session_id: None,
            agent: agent.to_string(),
            model: model.to_string(),
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            latency_ms: started.elapsed().as_millis() as u64,
            error,
            at: chrono::Utc::now(),
            wasted: false,
        };
        self.lock().push(record);
    }

    /// A call about to be made: recorded by [`PendingCall::finish`], or as cancelled when
    /// it is dropped before (its future dropped mid-request, the connection with it).
    pub fn pending<'a>(&'a self, agent: &'a str, model: &'a str) -> PendingCall<'a> {
        PendingCall {
            ledger: self,
            agent,
            model,
            started: Instant::now(),
            done: false,
        }
    }

    /// Every call recorded so far was wasted: its answer is not used.
    pub fn mark_wasted(&self) {
        for call in self.lock().iter_mut() {
            call.wasted = true;
        }
    }

    /// Takes the calls and notes `other` recorded into this ledger.
    pub fn absorb(&self, other: &LlmLedger) {
        let taken = other.drain();
        self.lock().extend(taken);
        let notes = other.drain_notes();
        self.notes_lock().extend(notes);
    }

    /// Notes something for the turn's trace.
    pub fn note(&self, note: trace::Note) {
        self.notes_lock().push(note);
    }

    /// Takes the notes collected so far.
    pub fn drain_notes(&self) -> Vec<trace::Note> {
        std::mem::take(&mut *self.notes_lock())
    }

    fn notes_lock(&self) -> std::sync::MutexGuard<'_, Vec<trace::Note>> {
        self.notes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the records collected so far.
    pub fn drain(&self) -> Vec<LlmCallRecord> {
        std::mem::take(&mut *self.lock())
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<LlmCallRecord>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Anything that reports token usage (model responses).
pub trait HasUsage {
    fn usage(&self) -> TokenUsage;
}

impl HasUsage for crate::llm::ChatResponse {
    fn usage(&self) -> TokenUsage {
        self.usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ChatResponse;
    use crate::llm::scripted::ScriptedModel;
    use schemars::JsonSchema;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Default, Debug)]
    struct GreeterState {
        language: Option<String>,
        country: Option<String>,
    }

    #[derive(Deserialize, JsonSchema)]
    struct SetLanguage {
        language: String,
    }

    struct SetLanguageTool;
    impl TypedTool<GreeterState> for SetLanguageTool {
        type Args = SetLanguage;
        const NAME: &'static str = "set_language";
        fn description(&self) -> String {
            "Set the user's language (ISO 639-1).".into()
        }
        async fn run(
            &self,
            state: &mut GreeterState,
            args: SetLanguage,
        ) -> Result<ToolOutput, ToolError> {
            if args.language.len() != 2 {
                return Err(ToolError::Rejected(format!(
                    "{:?} is not an ISO 639-1 code",
                    args.language
                )));
            }
            state.language = Some(args.language);
            Ok(ToolOutput::ok("language set"))
        }
    }

    #[derive(Deserialize, JsonSchema)]
    struct Ask {
        question: String,
    }

    struct AskTool;
    impl TypedTool<GreeterState> for AskTool {
        type Args = Ask;
        const NAME: &'static str = "ask";
        fn description(&self) -> String {
            "Ask the user.".into()
        }
        async fn run(&self, _state: &mut GreeterState, args: Ask) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::ask(args.question))
        }
    }

    fn greeter() -> Agent<GreeterState> {
        Agent::new("greeter", vec![typed(SetLanguageTool), typed(AskTool)]).with_remaining_tasks(
            |s: &GreeterState| {
                let mut tasks = Vec::new();
                if s.language.is_none() {
                    tasks.push("Set the user language using set_language".to_string());
                }
                if s.country.is_none() {
                    tasks.push("Ask for the user's country".to_string());
                }
                tasks
            },
        )
    }

    fn last_tool_result(messages: &[ChatMessage]) -> String {
        messages
            .iter()
            .rev()
            .find_map(|m| match m {
                ChatMessage::Tool { content, .. } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn stops_at_the_terminal_tool() {
        let model = ScriptedModel::responses([
            ChatResponse::tool_call("set_language", json!({"language": "ja"})),
            ChatResponse::tool_call("ask", json!({"question": "Where do you live?"})),
        ]);
        let ledger = LlmLedger::new();
        let result = greeter()
            .run(
                &model,
                vec![ChatMessage::system("greet")],
                GreeterState::default(),
                &ledger,
            )
            .await
            .expect("loop ends");
        assert!(result.awaiting_user_response);
        assert_eq!(result.response_text, "Where do you live?");
        assert_eq!(result.state.language.as_deref(), Some("ja"));
        assert_eq!(result.tool_calls.len(), 2);
        assert_eq!(ledger.len(), 2);
        assert_eq!(model.remaining(), 0);
    }

    #[tokio::test]
    async fn tool_errors_and_unknown_tools_are_fed_back_and_the_loop_recovers() {
        let model = ScriptedModel::responses([
            ChatResponse::tool_call("set_language", json!({"language": "japanese"})),
            ChatResponse::tool_call("set_langauge", json!({"language": "ja"})),
            ChatResponse::tool_call("set_language", json!({"lang": "ja"})),
            ChatResponse::tool_call("set_language", json!({"language": "ja"})),
            ChatResponse::tool_call("ask", json!({"question": "Country?"})),
        ]);
        let result = greeter()
            .run(
                &model,
                vec![ChatMessage::system("greet")],
                GreeterState::default(),
                &LlmLedger::new(),
            )
            .await
            .expect("recovers");
        assert_eq!(result.state.language.as_deref(), Some("ja"));
        let requests = model.requests();
        assert!(last_tool_result(&requests[1].messages).contains("not an ISO 639-1 code"));
        assert!(last_tool_result(&requests[2].messages).contains("unknown tool \"set_langauge\""));
        assert!(last_tool_result(&requests[3].messages).contains("invalid arguments"));
        assert!(result.tool_calls[0].result.is_err());
        assert!(result.tool_calls[3].result.is_ok());
    }

    #[tokio::test]
    async fn remaining_tasks_are_injected_when_the_model_answers_without_tools() {
        let model = ScriptedModel::responses([
            ChatResponse::text("Hello there!"),
            ChatResponse::tool_call("set_language", json!({"language": "en"})),
            ChatResponse::tool_call("ask", json!({"question": "Country?"})),
        ]);
        greeter()
            .run(
                &model,
                vec![ChatMessage::system("greet")],
                GreeterState::default(),
                &LlmLedger::new(),
            )
            .await
            .expect("loop ends");
        let second = &model.requests()[1];
        let injected = second.messages.last().cloned();
        assert_eq!(
            injected,
            Some(ChatMessage::user(
                "You still need to: Set the user language using set_language; Ask for the user's country. Use the tools to do so."
            ))
        );
    }

    #[tokio::test]
    async fn a_text_answer_with_nothing_remaining_ends_the_loop() {
        let model = ScriptedModel::responses([ChatResponse::text("All set.")]);
        let state = GreeterState {
            language: Some("en".into()),
            country: Some("JP".into()),
        };
        let result = greeter()
            .run(
                &model,
                vec![ChatMessage::system("greet")],
                state,
                &LlmLedger::new(),
            )
            .await
            .expect("ends");
        assert_eq!(result.response_text, "All set.");
        assert!(result.awaiting_user_response);
    }

    #[tokio::test]
    async fn a_model_that_will_not_use_its_tools_gets_one_reminder() {
        let model = ScriptedModel::repeating(|_| ChatResponse::text("I refuse to use tools."));
        let err = greeter()
            .with_max_iterations(10)
            .run(
                &model,
                vec![ChatMessage::system("greet")],
                GreeterState::default(),
                &LlmLedger::new(),
            )
            .await
            .err();
        assert!(
            matches!(err, Some(AgentError::NoToolCall { .. })),
            "{err:?}"
        );
        assert_eq!(model.requests().len(), 2, "the answer and one reminder");
    }

    #[tokio::test]
    async fn max_iterations_ends_with_the_typed_error() {
        // a model that keeps calling tools without finishing
        let model = ScriptedModel::repeating(|_| {
            ChatResponse::tool_call("set_language", json!({"language": "en"}))
        });
        let err = greeter()
            .with_max_iterations(4)
            .run(
                &model,
                vec![ChatMessage::system("greet")],
                GreeterState::default(),
                &LlmLedger::new(),
            )
            .await
            .err();
        assert!(matches!(
            err,
            Some(AgentError::MaxIterations { iterations: 4, .. })
        ));
        assert_eq!(model.requests().len(), 4);
    }

    #[tokio::test]
    async fn model_errors_are_typed_and_recorded() {
        let model = ScriptedModel::responses([]);
        let ledger = LlmLedger::new();
        let err = greeter()
            .run(
                &model,
                vec![ChatMessage::system("greet")],
                GreeterState::default(),
                &ledger,
            )
            .await
            .err();
        assert!(matches!(
            err,
            Some(AgentError::Model {
                source: ModelError::Script(_),
                ..
            })
        ));
        let records = ledger.drain();
        assert_eq!(records.len(), 1);
        assert!(
            records[0]
                .error
                .as_deref()
                .unwrap_or_default()
                .contains("script ran out")
        );
    }
}

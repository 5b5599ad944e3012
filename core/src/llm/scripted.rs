//! [`ScriptedModel`]: a [`ChatModel`] that plays back a script of responses and records every
//! request, for tests and benchmarks. When the script runs out it fails loudly with
//! [`ModelError::Script`] naming the call; it never invents an answer.

use super::{ChatModel, ChatRequest, ChatResponse, ModelError};
use async_trait::async_trait;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// One step of a script.
pub enum Step {
    Respond(ChatResponse),
    Fail(ModelError),
    /// Answer every remaining call with this function of the request (benchmarks, fuzzing).
    Repeat(Arc<dyn Fn(&ChatRequest) -> ChatResponse + Send + Sync>),
}

#[derive(Clone)]
pub struct ScriptedModel {
    name: String,
    inner: Arc<Mutex<Inner>>,
    record: bool,
}

struct Inner {
    script: VecDeque<Step>,
    requests: Vec<ChatRequest>,
}

impl ScriptedModel {
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        ScriptedModel {
            name: "scripted".into(),
            inner: Arc::new(Mutex::new(Inner {
                script: steps.into_iter().collect(),
                requests: Vec::new(),
            })),
            record: true,
        }
    }

    /// Does not keep the requests (long benchmark runs).
    pub fn unrecorded(mut self) -> Self {
        self.record = false;
        self
    }

    /// A script of plain responses.
    pub fn responses(responses: impl IntoIterator<Item = ChatResponse>) -> Self {
        Self::new(responses.into_iter().map(Step::Respond))
    }

    /// Every call answered by `f`; never runs out.
    pub fn repeating(f: impl Fn(&ChatRequest) -> ChatResponse + Send + Sync + 'static) -> Self {
        Self::new([Step::Repeat(Arc::new(f))])
    }

    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Appends steps to the script.
    pub fn push(&self, step: Step) {
        self.lock().script.push_back(step);
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.lock().requests.clone()
    }

    /// Steps not yet played.
    pub fn remaining(&self) -> usize {
        self.lock().script.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // a panic while holding this lock only happens in a failing test; keep going
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl ChatModel for ScriptedModel {
    fn name(&self) -> &str {
        &self.name
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let mut inner = self.lock();
        let call = inner.requests.len() + 1;
        let step = match inner.script.front() {
            Some(Step::Repeat(f)) => {
                let response = f(&request);
                if self.record {
                    inner.requests.push(request);
                }
                return Ok(response);
            }
            Some(_) => inner.script.pop_front(),
            None => None,
        };
        let last_user = request.last_user_text().to_string();
        inner.requests.push(request);
        match step {
            Some(Step::Respond(r)) => Ok(r),
            Some(Step::Fail(e)) => Err(e),
            Some(Step::Repeat(_)) | None => {
                let message = format!(
                    "script ran out at call {call} (model {:?}); last user message: {last_user:?}",
                    self.name
                );
                tracing::error!("{message}");
                Err(ModelError::Script(message))
            }
        }
    }
}

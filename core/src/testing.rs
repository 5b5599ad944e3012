//! Test helpers shared by the core's tests and other crates' (feature `test-utils`):
//! [`RecordingOutbox`] keeps what the orchestrator delivered.

use crate::admin::DeliveryError;
use crate::message::{OptionsRequest, Outgoing, SessionKey};
use crate::orchestrator::Outbox;
use async_trait::async_trait;
use std::sync::Mutex;

/// An [`Outbox`] that records every delivered item.
#[derive(Default)]
pub struct RecordingOutbox {
    items: Mutex<Vec<(SessionKey, Outgoing)>>,
}

impl RecordingOutbox {
    pub fn items(&self) -> Vec<(SessionKey, Outgoing)> {
        self.items.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Delivered texts and option prompts, in order (typing indicators left out).
    pub fn texts(&self) -> Vec<String> {
        self.items()
            .into_iter()
            .filter_map(|(_, o)| match o {
                Outgoing::Text { text } => Some(text),
                Outgoing::Options(req) => Some(req.prompt),
                _ => None,
            })
            .collect()
    }

    /// The latest options delivered.
    pub fn last_options(&self) -> Option<OptionsRequest> {
        self.items().into_iter().rev().find_map(|(_, o)| match o {
            Outgoing::Options(req) => Some(req),
            _ => None,
        })
    }

    pub fn clear(&self) {
        self.items.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[async_trait]
impl Outbox for RecordingOutbox {
    async fn deliver(&self, key: &SessionKey, items: &[Outgoing]) -> Result<(), DeliveryError> {
        let mut all = self.items.lock().unwrap_or_else(|p| p.into_inner());
        all.extend(items.iter().map(|o| (key.clone(), o.clone())));
        Ok(())
    }
}

/// A model that plays the interview agents (Greeter, Architect, Interviewer, QuickCheck,
/// Reviewer, Auditor) by reading which tools a request offers.
pub mod interview_agents {
    use crate::llm::scripted::ScriptedModel;
    use crate::llm::{ChatMessage, ChatRequest, ChatResponse};
    use serde_json::{Value, json};
    use std::sync::Arc;

    pub fn system_of(req: &ChatRequest) -> String {
        match req.messages.first() {
            Some(ChatMessage::System { content }) => content.clone(),
            _ => String::new(),
        }
    }

    pub fn last_user(req: &ChatRequest) -> String {
        req.last_user_text().to_string()
    }

    pub fn last_tool_result(req: &ChatRequest) -> Option<String> {
        match req.messages.last() {
            Some(ChatMessage::Tool { content, .. }) => Some(content.clone()),
            _ => None,
        }
    }

    pub fn current_field(req: &ChatRequest) -> String {
        let system = system_of(req);
        system
            .split("id=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_default()
            .to_string()
    }

    pub fn has_tool(req: &ChatRequest, name: &str) -> bool {
        req.tools.iter().any(|t| t.name == name)
    }

    pub type Rule = dyn Fn(&ChatRequest) -> Option<ChatResponse> + Send + Sync;

    /// Plays each interview agent sensibly; `special` answers first when it returns something.
    /// Used by the interview tests (to misbehave on purpose) and by `kaiwa bench`.
    pub fn fake_model(special: Arc<Rule>) -> ScriptedModel {
        ScriptedModel::repeating(move |req| {
            if let Some(r) = special(req) {
                return r;
            }
            if has_tool(req, "set_language") {
                return match last_tool_result(req) {
                    None => ChatResponse::tool_call("set_country", json!({"country": "Japan"})),
                    Some(r) if r.starts_with("country set") => {
                        ChatResponse::tool_call("set_timezone", json!({}))
                    }
                    Some(_) => ChatResponse::text("Thank you!"),
                };
            }
            if has_tool(req, "create_plan") {
                // a valid plan in a custom order: the motivation first
                let order = [
                    "motivation",
                    "full_name",
                    "email",
                    "experience_years",
                    "skills",
                    "work_style",
                    "start_date",
                    "portfolio",
                ];
                let fields: Vec<Value> = order
                    .iter()
                    .map(|id| json!({"field_id": id, "label": id, "intent": "-", "required": true}))
                    .collect();
                return ChatResponse::tool_call("create_plan", json!({ "fields": fields }));
            }
            if has_tool(req, "review") {
                let answer = last_user(req)
                    .rsplit("The applicant answered:\n")
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                return ChatResponse::tool_call(
                    "review",
                    json!({"passed": true, "field_value": answer}),
                );
            }
            if has_tool(req, "result") && system_of(req).starts_with("You are QuickCheck") {
                return ChatResponse::tool_call("result", json!({"passed": true}));
            }
            if has_tool(req, "result") {
                return ChatResponse::tool_call(
                    "result",
                    json!({"passed": true, "summary": "Strong candidate, model audit."}),
                );
            }
            if has_tool(req, "ask") {
                let field = current_field(req);
                return ChatResponse::tool_call(
                    "ask",
                    json!({"field_id": field, "question": format!("[model] Tell me about {field}?")}),
                );
            }
            ChatResponse::text("?")
        })
    }
}

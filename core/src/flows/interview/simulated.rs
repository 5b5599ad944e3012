//! A model that plays the interview's agents (Greeter, Architect, Interviewer, QuickCheck,
//! Reviewer, Auditor) sensibly, by reading which tools a request offers: `kaiwa bench`
//! drives the interview with it, and the interview's tests make it misbehave on purpose
//! through `special`.

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

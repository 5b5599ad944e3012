//! Sub-tasks (seed 000, "サブセッションのコンテキスト引き継ぎ"): a child agent (Reviewer,
//! QuickCheck, Auditor, a help-desk sub-question, …) starts on a [`SubtaskContext`] — a
//! conversation summary, the current item and the facts collected so far — rendered as one
//! message, never on the parent's full history. [`summarize`] builds the summary by rules so
//! it costs no model call and stays bounded however long the conversation grows.

use super::{Agent, AgentError, AgentLoopResult, LlmLedger};
use crate::llm::{ChatMessage, ChatModel};
use crate::store::{Role, StoredMessage};

/// What a child agent is told about the parent conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubtaskContext {
    pub conversation_summary: String,
    /// The field, sub-question, book, … the child works on.
    pub current_item: String,
    /// `(key, value)` pairs collected so far.
    pub collected_facts: Vec<(String, String)>,
}

impl SubtaskContext {
    /// The context as one user message.
    pub fn render(&self) -> String {
        let facts: usize = self
            .collected_facts
            .iter()
            .map(|(key, value)| key.len() + value.len() + 5)
            .sum();
        let mut out = String::with_capacity(
            80 + self.conversation_summary.len() + self.current_item.len() + facts,
        );
        out.push_str("## Conversation so far\n");
        if self.conversation_summary.trim().is_empty() {
            out.push_str("(nothing yet)\n");
        } else {
            out.push_str(self.conversation_summary.trim_end());
            out.push('\n');
        }
        out.push_str("\n## Current item\n");
        out.push_str(self.current_item.trim_end());
        out.push_str("\n\n## Collected facts\n");
        if self.collected_facts.is_empty() {
            out.push_str("(none)\n");
        }
        for (key, value) in &self.collected_facts {
            for piece in ["- ", key, ": ", value, "\n"] {
                out.push_str(piece);
            }
        }
        out
    }
}

/// Runs `agent` as a sub-task: `system_prompt`, then the rendered context and `instruction`.
pub async fn subtask<S: Send>(
    agent: &Agent<S>,
    model: &dyn ChatModel,
    system_prompt: &str,
    context: &SubtaskContext,
    instruction: &str,
    state: S,
    ledger: &LlmLedger,
) -> Result<AgentLoopResult<S>, AgentError> {
    let mut user = context.render();
    if !instruction.trim().is_empty() {
        user.push_str("\n## Task\n");
        user.push_str(instruction.trim());
        user.push('\n');
    }
    let messages = vec![ChatMessage::system(system_prompt), ChatMessage::user(user)];
    agent.run(model, messages, state, ledger).await
}

/// Runs a sub-task whose result tool fills its `Option` state; a failed run is logged and
/// gives `None`, so the caller falls back to its rule-based floor.
pub async fn subtask_result<T: Send>(
    agent: &Agent<Option<T>>,
    model: &dyn ChatModel,
    system_prompt: &str,
    context: &SubtaskContext,
    instruction: &str,
    ledger: &LlmLedger,
) -> Option<T> {
    match subtask(
        agent,
        model,
        system_prompt,
        context,
        instruction,
        None,
        ledger,
    )
    .await
    {
        Ok(result) => result.state,
        Err(e) => {
            tracing::warn!(agent = %agent.name, error = %e, "sub-task failed; the rule-based floor is used");
            None
        }
    }
}

/// A bounded summary of a transcript: the last `max_lines` messages, each cut to 300
/// characters, oldest first, with a count of what was left out.
pub fn summarize(history: &[StoredMessage], max_lines: usize) -> String {
    let skip = history.len().saturating_sub(max_lines);
    let shown = &history[skip..];
    // written in one pass into one string (every sub-agent of a turn asks for one)
    let mut out = String::with_capacity(
        40 + shown
            .iter()
            .map(|m| 12 + m.text.len().min(4 * 300))
            .sum::<usize>(),
    );
    if skip > 0 {
        out.push_str(&format!("({skip} earlier messages omitted)\n"));
    }
    for message in shown {
        out.push_str(match message.role {
            Role::User => "User: ",
            Role::Assistant => "Assistant: ",
            Role::System => "System: ",
        });
        // copied a line at a time, not a character at a time (300 bytes hold at most 300
        // characters: most messages need no counting)
        let text = message.text.as_str();
        let cut = if text.len() <= 300 {
            text.len()
        } else {
            text.char_indices()
                .nth(300)
                .map_or(text.len(), |(at, _)| at)
        };
        let (shown, left) = text.split_at(cut);
        for (i, line) in shown.split('\n').enumerate() {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(line);
        }
        if !left.is_empty() {
            out.push('…');
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{ToolError, ToolOutput, TypedTool, typed};
    use crate::llm::ChatResponse;
    use crate::llm::scripted::ScriptedModel;
    use schemars::JsonSchema;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    struct Review {
        passed: bool,
    }

    struct ReviewTool;
    impl TypedTool<Option<bool>> for ReviewTool {
        type Args = Review;
        const NAME: &'static str = "review";
        fn description(&self) -> String {
            "Return the review.".into()
        }
        async fn run(
            &self,
            state: &mut Option<bool>,
            args: Review,
        ) -> Result<ToolOutput, ToolError> {
            *state = Some(args.passed);
            Ok(ToolOutput::finish("recorded"))
        }
    }

    fn message(role: Role, text: &str) -> StoredMessage {
        StoredMessage {
            id: 0,
            session_id: 1,
            role,
            text: text.into(),
            at: chrono::Utc::now(),
        }
    }

    #[test]
    fn a_summary_keeps_the_last_lines_each_on_one_line_and_cut_to_300_characters() {
        let long: String = "あ".repeat(300);
        let history = vec![
            message(Role::User, "left out"),
            message(Role::Assistant, "first\nsecond"),
            message(Role::User, &long),
            message(Role::User, &format!("{long}x")),
        ];
        assert_eq!(
            summarize(&history, 3),
            format!(
                "(1 earlier messages omitted)\nAssistant: first second\nUser: {long}\nUser: {long}…\n"
            )
        );
        assert_eq!(summarize(&history[1..2], 5), "Assistant: first second\n");
        let ascii = "a".repeat(300);
        assert_eq!(
            summarize(&[message(Role::User, &format!("{ascii}b"))], 5),
            format!("User: {ascii}…\n")
        );
        assert_eq!(summarize(&[], 5), "");
    }

    #[tokio::test]
    async fn a_subtask_sees_the_summary_not_the_history() {
        let history: Vec<_> = (0..30)
            .map(|i| {
                message(
                    if i % 2 == 0 {
                        Role::Assistant
                    } else {
                        Role::User
                    },
                    &format!("line {i}"),
                )
            })
            .collect();
        let context = SubtaskContext {
            conversation_summary: summarize(&history, 4),
            current_item: "motivation: why this job".into(),
            collected_facts: vec![("years".into(), "5".into())],
        };
        let model = ScriptedModel::responses([ChatResponse::tool_call(
            "review",
            serde_json::json!({"passed": true}),
        )]);
        let agent = Agent::new("reviewer", vec![typed(ReviewTool)]);
        let result = subtask(
            &agent,
            &model,
            "You review.",
            &context,
            "Review the answer.",
            None,
            &LlmLedger::new(),
        )
        .await
        .expect("runs");
        assert_eq!(result.state, Some(true));
        assert!(!result.awaiting_user_response);
        let request = &model.requests()[0];
        assert_eq!(request.messages.len(), 2);
        let ChatMessage::User { content } = &request.messages[1] else {
            panic!("second message is the context");
        };
        assert!(content.contains("(26 earlier messages omitted)"));
        assert!(content.contains("line 29"));
        assert!(!content.contains("line 3\n"));
        assert!(content.contains("- years: 5"));
        assert!(content.contains("motivation: why this job"));
    }
}

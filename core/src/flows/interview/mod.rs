//! The interview flow (seeds 000 and 001): Greeter → Architect → Interviewer (QuickCheck
//! before every question, Reviewer after every answer) → Auditor (application variant) or a
//! confirmation step (plain variant) → a stored submission.
//!
//! [`InterviewFlow`] is the state machine; the agents live one per file and each has a
//! rule-based floor, so an interview runs to the end with no model at all. Every seed
//! invariant is enforced here or in the agent files, never left to a prompt:
//! a question is sent only from [`interviewer::draft`] (QuickCheck inside `ask`); a field
//! closes only through `InterviewFlow::review_answer` (or when its follow-ups run out);
//! `InterviewFlow::finish` always runs the Auditor for applications; a submission is
//! `submitted` only when every required field is done.

pub mod architect;
pub mod auditor;
pub mod compliance;
pub mod export;
pub mod form;
pub mod greeter_tools;
pub mod interviewer;
pub mod quick_check;
pub mod reviewer;
pub mod simulated;
pub mod state;

mod applicant_question;
mod confirmation;
mod dispatch;
mod greeting;
mod questions;
mod resume;
mod submission;
mod written;

use crate::agent::subtask::{SubtaskContext, summarize};
use crate::flow::TurnContext;
use form::Form;
use state::InterviewState;
use std::sync::Arc;

pub const ID: &str = "interview";

pub struct InterviewFlow {
    forms: Vec<Arc<Form>>,
    default_form: Option<String>,
    /// The Architect's plan per form, made once (the form does not change while the bot
    /// runs): no applicant waits for it but the first.
    plans: std::sync::Mutex<std::collections::HashMap<String, Vec<String>>>,
}

fn lang_of(st: &InterviewState) -> String {
    st.language.clone().unwrap_or_else(|| "en".into())
}

impl InterviewFlow {
    /// `forms` as loaded from `config/forms`; `default_form` is used when a start names none.
    pub fn new(forms: Vec<Form>, default_form: Option<String>) -> Self {
        InterviewFlow {
            forms: forms.into_iter().map(Arc::new).collect(),
            default_form,
            plans: std::sync::Mutex::default(),
        }
    }

    fn form(&self, id: &str) -> Option<&Arc<Form>> {
        self.forms.iter().find(|f| f.id == id)
    }

    fn context(&self, ctx: &TurnContext<'_>, st: &InterviewState, item: String) -> SubtaskContext {
        SubtaskContext {
            conversation_summary: summarize(ctx.history, 12),
            current_item: item,
            collected_facts: st.collected_facts(),
        }
    }
}

/// Whether `text` asks to apply for a job ("I want to apply", "Can I apply for the engineer
/// position?", 「応募したいです」, "interview"), for the flows that hand such a message to
/// the interview. A question about the interview ("How do I stop the interview halfway?",
/// "How long is the interview?", 「応募をキャンセルするには？」) is not one, nor is an update
/// applied or an application (software) that crashes.
pub(crate) fn wants_to_apply(text: &str) -> bool {
    let lower = text.to_lowercase();
    let words = crate::i18n::words(&lower);
    // stopping, pausing or asking about an interview's properties: a question about it
    const ABOUT_EN: [&str; 16] = [
        "stop", "end", "cancel", "quit", "pause", "withdraw", "delete", "long", "many", "what",
        "when", "where", "why", "who", "status", "result",
    ];
    const ABOUT_JA: [&str; 16] = [
        "やめ",
        "止め",
        "中断",
        "終了",
        "終わ",
        "キャンセル",
        "取り消",
        "辞退",
        "いつ",
        "何",
        "どのくらい",
        "どれくらい",
        "なぜ",
        "誰",
        "どこ",
        "結果",
    ];
    if words.iter().any(|w| ABOUT_EN.contains(w)) || ABOUT_JA.iter().any(|w| text.contains(w)) {
        return false;
    }
    if text.contains("応募") || text.contains("面接") {
        return true;
    }
    // what follows "apply" when something is applied, not applied for
    const APPLIED: [&str; 22] = [
        "the", "a", "an", "this", "that", "these", "those", "it", "them", "my", "your", "our",
        "its", "changes", "patch", "patches", "update", "updates", "filter", "filters", "settings",
        "discount",
    ];
    const JOB: [&str; 8] = [
        "job", "jobs", "position", "role", "vacancy", "opening", "career", "hiring",
    ];
    let about_a_job = words.iter().any(|w| JOB.contains(w));
    words.iter().enumerate().any(|(i, w)| {
        let next = words.get(i + 1).copied();
        match *w {
            "interview" | "interviews" => true,
            "apply" | "applying" => next.is_none_or(|n| !APPLIED.contains(&n)),
            "application" | "applications" => {
                about_a_job
                    || next == Some("for")
                    || i.checked_sub(1)
                        .and_then(|p| words.get(p))
                        .is_some_and(|p| ["submit", "start", "continue", "job"].contains(p))
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests;

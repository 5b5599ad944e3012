//! Interviewer (seed 000 / 001): drafts the question for the current field, which the
//! system injects into its prompt, and sends it with `ask`.
//!
//! The invariant "no question without a passed QuickCheck" lives in the `ask` tool itself:
//! in the application variant every draft, follow-ups included, goes through
//! [`quick_check::deterministic`] and then the model's QuickCheck; a blocked draft goes back
//! to the model with its violations, and after [`MAX_BLOCKED_DRAFTS`] the field's template
//! question is used instead. Templates (first questions and follow-ups) are built from the
//! form's own text — never from model output — and screened too.

use super::form::{Form, FormField, Variant};
use super::quick_check::{self, Violation};
use super::state::InterviewState;
use crate::agent::subtask::SubtaskContext;
use crate::agent::{Agent, LlmLedger, ToolError, ToolOutput, TypedTool, typed};
use crate::i18n::pick;
use crate::llm::{ChatMessage, ChatModel};
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;

pub const AGENT: &str = "interviewer";
/// Blocked drafts before the template question is sent (issue: 3).
pub const MAX_BLOCKED_DRAFTS: u32 = 3;

/// Why a question is being asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Purpose {
    First,
    /// After a review that did not pass: the missing fact keys and the reviewer's feedback.
    FollowUp {
        missing: Vec<String>,
        feedback: Option<String>,
    },
    /// After an answer of the wrong type: the validation message.
    Invalid {
        message: String,
    },
}

/// A question ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drafted {
    pub question: String,
    pub from_template: bool,
    pub blocked_drafts: u32,
}

struct AskWork {
    form: Arc<Form>,
    field_id: String,
    answered: Vec<String>,
    done: Vec<String>,
    qc_model: Option<Arc<dyn ChatModel>>,
    context: SubtaskContext,
    ledger: LlmLedger,
    blocked: u32,
    sent: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct Ask {
    /// The id of the field this question is about (the current field).
    field_id: String,
    /// The question for the applicant, in their language.
    question: String,
}

struct AskTool;

impl TypedTool<AskWork> for AskTool {
    type Args = Ask;
    const NAME: &'static str = "ask";
    fn description(&self) -> String {
        "Ask the applicant a question about the current field. The question is compliance-checked before it is sent.".into()
    }
    async fn run(&self, w: &mut AskWork, args: Ask) -> Result<ToolOutput, ToolError> {
        if args.question.trim().is_empty() {
            return Err(ToolError::InvalidArguments("the question is empty".into()));
        }
        let mut violations = if args.field_id != w.field_id {
            vec![Violation {
                kind: quick_check::ViolationType::NoIntentBinding,
                message: format!(
                    "the current field is {:?}, not {:?}",
                    w.field_id, args.field_id
                ),
            }]
        } else {
            Vec::new()
        };
        if w.form.variant == Variant::Application {
            violations.extend(quick_check::deterministic(
                &w.form,
                &args.field_id,
                &args.question,
                &w.answered,
                &w.done,
            ));
            if violations.is_empty()
                && let Some(model) = &w.qc_model
                && let Some(verdict) = quick_check::model_check(
                    model.as_ref(),
                    &w.form,
                    &w.context,
                    &args.question,
                    &w.ledger,
                )
                .await
                && !verdict.passed
            {
                violations.extend(verdict.violations);
            }
        }
        if violations.is_empty() {
            w.sent = Some(args.question.clone());
            return Ok(ToolOutput::ask(args.question));
        }
        w.blocked += 1;
        let listed: Vec<String> = violations
            .iter()
            .map(|v| format!("{:?}: {}", v.kind, v.message))
            .collect();
        tracing::info!(field = %w.field_id, blocked = w.blocked, "QuickCheck blocked a draft: {}", listed.join("; "));
        w.ledger.note(crate::agent::trace::Note::QuickCheckStopped {
            field: w.field_id.clone(),
            draft: args.question.clone(),
            finding: listed.join("; "),
        });
        if w.blocked >= MAX_BLOCKED_DRAFTS {
            return Ok(ToolOutput::finish(
                "QuickCheck blocked too many drafts; the template question will be used.",
            ));
        }
        Err(ToolError::Rejected(format!(
            "QuickCheck blocked this question: {}. Redraft it without these problems.",
            listed.join("; ")
        )))
    }
}

/// The question built from the form's own text.
pub fn template(field: &FormField, purpose: &Purpose, lang: &str) -> String {
    let base = field.template_question(lang);
    match purpose {
        Purpose::First => base,
        Purpose::Invalid { message } => format!("{message} {base}"),
        Purpose::FollowUp { missing, .. } => {
            let hints: Vec<String> = field
                .facts
                .iter()
                .filter(|f| missing.iter().any(|m| m == &f.key || m.contains(&f.key)))
                .map(|f| {
                    f.questioning_hints
                        .as_ref()
                        .map(|h| h.get(lang).to_string())
                        .unwrap_or_else(|| f.fact.clone())
                })
                .filter(|h| !h.trim().is_empty())
                .collect();
            let lead = pick(
                lang,
                "Thank you. Could you tell me a little more?",
                "ありがとうございます。もう少し詳しく教えていただけますか。",
            );
            if hints.is_empty() {
                lead
            } else {
                format!("{lead} {}", hints.join(" "))
            }
        }
    }
}

fn system_prompt(form: &Form, field: &FormField, purpose: &Purpose, lang: &str) -> String {
    let facts: Vec<String> = field
        .facts
        .iter()
        .map(|f| {
            format!(
                "- {}: {} (done when: {}; hints: {})",
                f.key,
                f.fact,
                f.done_criteria,
                f.questioning_hints
                    .as_ref()
                    .map(|h| h.get(lang))
                    .unwrap_or("-")
            )
        })
        .collect();
    let situation = match purpose {
        Purpose::First => "Ask the first question for this field.".to_string(),
        Purpose::FollowUp { missing, feedback } => format!(
            "The Reviewer found the answer incomplete. Missing facts: {}. Feedback: {}. Ask a natural follow-up question.",
            missing.join(", "),
            feedback.as_deref().unwrap_or("-")
        ),
        Purpose::Invalid { message } => {
            format!("The answer was not valid ({message}). Ask again kindly.")
        }
    };
    format!(
        "You are the Interviewer of the form {:?}. Speak {}; be polite and concise{}. \
         CURRENT FIELD (injected by the system): id={:?}, label={:?}, intent={:?}, type={}.\nFacts to establish:\n{}\n{}\n\
         Ask exactly one question with the `ask` tool, bound to field_id {:?}. Never ask about age, family, \
         religion, health, origin or other personal matters unrelated to the job.",
        form.id,
        if lang == "ja" { "Japanese" } else { "English" },
        form.tone
            .guidance
            .as_deref()
            .map(|g| format!(" ({g})"))
            .unwrap_or_default(),
        field.id,
        field.label.get(lang),
        field.intent.as_deref().unwrap_or("-"),
        field.field_type,
        if facts.is_empty() {
            "(none)".into()
        } else {
            facts.join("\n")
        },
        situation,
        field.id
    )
}

/// Drafts the question for `field` and makes sure it may be sent.
/// `None`: not even the template passes the checks (the caller closes the field).
#[allow(clippy::too_many_arguments)]
pub async fn draft(
    model: Option<Arc<dyn ChatModel>>,
    qc_model: Option<Arc<dyn ChatModel>>,
    form: &Arc<Form>,
    field: &FormField,
    state: &InterviewState,
    purpose: &Purpose,
    context: SubtaskContext,
    ledger: &LlmLedger,
) -> Option<Drafted> {
    let lang = state.language.as_deref().unwrap_or("en");
    let answered = state.answered_questions();
    let done = state.done_fields();
    let mut blocked = 0;
    if let Some(model) = model {
        let work = AskWork {
            form: form.clone(),
            field_id: field.id.clone(),
            answered: answered.clone(),
            done: done.clone(),
            qc_model,
            context: context.clone(),
            ledger: ledger.clone(),
            blocked: 0,
            sent: None,
        };
        let field_id = field.id.clone();
        let agent =
            Agent::new(AGENT, vec![typed(AskTool)]).with_remaining_tasks(move |w: &AskWork| {
                if w.sent.is_none() && w.blocked < MAX_BLOCKED_DRAFTS {
                    vec![format!(
                        "Ask the applicant about field {field_id} using ask"
                    )]
                } else {
                    Vec::new()
                }
            });
        let messages = vec![
            ChatMessage::system(system_prompt(form, field, purpose, lang)),
            ChatMessage::user(context.render()),
        ];
        match agent.run(model.as_ref(), messages, work, ledger).await {
            Ok(result) => {
                blocked = result.state.blocked;
                if let Some(question) = result.state.sent {
                    return Some(Drafted {
                        question,
                        from_template: false,
                        blocked_drafts: blocked,
                    });
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "the Interviewer failed; using the template question")
            }
        }
    }
    // the floor, and the fallback after blocked drafts: the form's own text
    let check = |q: &str| {
        form.variant == Variant::Plain
            || quick_check::deterministic(form, &field.id, q, &answered, &done).is_empty()
    };
    let question = [
        template(field, purpose, lang),
        field.template_question(lang),
    ]
    .into_iter()
    .find(|q| check(q))?;
    Some(Drafted {
        question,
        from_template: true,
        blocked_drafts: blocked,
    })
}

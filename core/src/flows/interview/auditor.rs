//! Auditor (seed 000, application variant): runs after the last field, always. Looks at the
//! whole question / answer log for over-collection, rudeness, consistency and prohibited
//! topics, and writes the summary the hiring team receives.
//!
//! [`deterministic`] findings (a prohibited topic in a sent question, incomplete fields,
//! more questions than the form allows) are always kept; the model's audit (tool `result`)
//! adds to them but cannot remove them. Without a model the summary is a template.

use super::form::Form;
use super::quick_check;
use super::state::{FieldStatus, InterviewState};
use crate::agent::subtask::{SubtaskContext, subtask};
use crate::agent::{Agent, LlmLedger, ToolError, ToolOutput, TypedTool, typed};
use crate::llm::ChatModel;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const AGENT: &str = "auditor";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AuditViolation {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    pub severity: Severity,
}

/// The seed's `AuditResultSchema`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AuditResult {
    pub passed: bool,
    #[serde(default)]
    pub violations: Vec<AuditViolation>,
    pub summary: String,
}

impl AuditResult {
    /// The verdict as the findings say it: `FAILED` with an error, `passed with warnings`
    /// with warnings only, `passed` with none.
    pub fn verdict(&self) -> &'static str {
        if !self.passed
            || self
                .violations
                .iter()
                .any(|v| v.severity == Severity::Error)
        {
            "FAILED"
        } else if self.violations.is_empty() {
            "passed"
        } else {
            "passed with warnings"
        }
    }
}

/// Findings the code can establish by itself.
pub fn deterministic(form: &Form, state: &InterviewState) -> Vec<AuditViolation> {
    let mut out = Vec::new();
    for asked in &state.asked {
        for v in quick_check::deterministic(form, &asked.field_id, &asked.question, &[], &[]) {
            if v.kind == quick_check::ViolationType::ProhibitedTopic {
                out.push(AuditViolation {
                    kind: "prohibited_topic".into(),
                    message: format!("question {:?}: {}", asked.question, v.message),
                    severity: Severity::Error,
                });
            }
        }
    }
    for id in &state.plan {
        let Some(field) = form.field(id) else {
            continue;
        };
        if state.field(id).status == FieldStatus::Incomplete {
            out.push(AuditViolation {
                kind: "incomplete_field".into(),
                message: format!(
                    "{} ({}) stayed incomplete after {} follow-ups",
                    field.label.get("en"),
                    id,
                    field.max_follow_ups
                ),
                severity: if field.required {
                    Severity::Error
                } else {
                    Severity::Warning
                },
            });
        }
    }
    let allowed: u32 = form.fields.iter().map(|f| 1 + f.max_follow_ups).sum();
    if state.asked.len() as u32 > allowed {
        out.push(AuditViolation {
            kind: "over_collection".into(),
            message: format!(
                "{} questions were asked; the form allows at most {allowed}",
                state.asked.len()
            ),
            severity: Severity::Warning,
        });
    }
    out
}

/// The template summary (the floor, and the facts block of every summary).
pub fn template_summary(form: &Form, state: &InterviewState) -> String {
    let mut out = format!(
        "{} — language {}, country {}, time zone {}.\n",
        form.title.get("en"),
        state.language.as_deref().unwrap_or("?"),
        state.country.as_deref().unwrap_or("?"),
        state.timezone.as_deref().unwrap_or("?")
    );
    for id in &state.plan {
        let Some(field) = form.field(id) else {
            continue;
        };
        let p = state.field(id);
        let value = match p.status {
            FieldStatus::Done => p.value.clone().unwrap_or_default(),
            FieldStatus::Incomplete => format!("(incomplete) {}", state.answers_of(id).join(" / ")),
            FieldStatus::Skipped => "(skipped)".into(),
            _ => "(not asked)".into(),
        };
        out.push_str(&format!("- {}: {}\n", field.label.get("en"), value));
    }
    out
}

struct ResultTool;

impl TypedTool<Option<AuditResult>> for ResultTool {
    type Args = AuditResult;
    const NAME: &'static str = "result";
    fn description(&self) -> String {
        "Return the final audit: passed, violations (type, message, severity error|warning) and a summary for the hiring team.".into()
    }
    async fn run(
        &self,
        state: &mut Option<AuditResult>,
        args: AuditResult,
    ) -> Result<ToolOutput, ToolError> {
        if args.summary.trim().is_empty() {
            return Err(ToolError::Rejected("the summary must not be empty".into()));
        }
        *state = Some(args);
        Ok(ToolOutput::finish("recorded"))
    }
}

/// Runs the audit: deterministic findings plus, with a model, the model's audit.
pub async fn audit(
    model: Option<&dyn ChatModel>,
    form: &Form,
    state: &InterviewState,
    ledger: &LlmLedger,
) -> AuditResult {
    let mut violations = deterministic(form, state);
    let mut summary = template_summary(form, state);
    let mut model_passed = true;
    if let Some(model) = model {
        let agent = Agent::new(AGENT, vec![typed(ResultTool)])
            .with_max_iterations(3)
            .until_set("Return the audit with the result tool");
        let context = SubtaskContext {
            conversation_summary: state.transcript(),
            current_item: format!("Final audit of the application {:?}", form.id),
            collected_facts: state.collected_facts(),
        };
        let topics: Vec<&str> = form.topics().iter().map(|t| t.label.as_str()).collect();
        let prompt = format!(
            "You are the Auditor of a job-application interview. Review the whole transcript for: \
             over-collection of information, rude expressions, consistency of the conversation, and \
             prohibited topics ({}). Then write a short summary of the applicant for the hiring team. \
             Call the `result` tool exactly once.",
            topics.join(", ")
        );
        match subtask(
            &agent,
            model,
            &prompt,
            &context,
            "Audit this interview.",
            None,
            ledger,
        )
        .await
        {
            Ok(r) => {
                if let Some(result) = r.state {
                    model_passed = result.passed;
                    violations.extend(result.violations);
                    summary = format!("{}\n\n{}", result.summary.trim(), summary);
                }
            }
            Err(e) => tracing::warn!(error = %e, "model audit failed; using the template audit"),
        }
    }
    // a verdict agrees with its findings: a model that fails the interview without saying
    // why is a finding too
    if !model_passed && !violations.iter().any(|v| v.severity == Severity::Error) {
        violations.push(AuditViolation {
            kind: "model_verdict".into(),
            message: "the model's audit did not pass this interview (see the summary)".into(),
            severity: Severity::Error,
        });
    }
    let passed = !violations.iter().any(|v| v.severity == Severity::Error);
    AuditResult {
        passed,
        violations,
        summary,
    }
}

#[cfg(test)]
mod verdict_tests {
    use super::*;

    fn finding(severity: Severity) -> AuditViolation {
        AuditViolation {
            kind: "incomplete_field".into(),
            message: "x".into(),
            severity,
        }
    }

    #[test]
    fn the_verdict_agrees_with_the_findings() {
        let clean = AuditResult {
            passed: true,
            violations: vec![],
            summary: String::new(),
        };
        assert_eq!(clean.verdict(), "passed");
        let warned = AuditResult {
            violations: vec![finding(Severity::Warning), finding(Severity::Warning)],
            ..clean.clone()
        };
        assert_eq!(warned.verdict(), "passed with warnings");
        let failed = AuditResult {
            violations: vec![finding(Severity::Warning), finding(Severity::Error)],
            ..clean.clone()
        };
        assert_eq!(failed.verdict(), "FAILED");
    }
}

//! [`InterviewState`]: everything an interview knows, stored as the session's flow state in
//! SQLite after every turn — the stage, the plan, each field's progress
//! (`pending → interviewing → reviewing → done`, or `incomplete` after the follow-ups ran
//! out), the questions asked and the answers given. A restart resumes from it.

use super::auditor::AuditResult;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Greeter: language, country, timezone.
    #[default]
    Greeting,
    /// Interviewer, field by field (the Architect ran when this stage began).
    Interviewing,
    /// Plain variant: the applicant reviews the values.
    Confirming,
    /// Plain variant: the applicant picks a field to change.
    ChoosingChange,
    Finished,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldStatus {
    #[default]
    Pending,
    Interviewing,
    Reviewing,
    Done,
    /// Follow-ups exhausted without a passed review; flagged for the Auditor.
    Incomplete,
}

impl FieldStatus {
    pub fn is_closed(self) -> bool {
        matches!(self, FieldStatus::Done | FieldStatus::Incomplete)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldProgress {
    pub status: FieldStatus,
    pub follow_ups: u32,
    pub value: Option<String>,
    /// fact key → what the applicant said
    pub facts: BTreeMap<String, String>,
    /// A value found in an answer to an earlier field, reviewed before asking.
    pub prefill: Option<String>,
    /// What the last review found missing (drives the follow-up).
    pub missing_facts: Vec<String>,
    pub feedback: Option<String>,
    /// The question the applicant is answering now.
    pub question: Option<String>,
    /// Every answer given for this field.
    pub answers: Vec<String>,
}

/// One question sent, bound to its field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asked {
    pub field_id: String,
    pub question: String,
    /// Set when the answer to it was given.
    pub answer: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InterviewState {
    pub form_id: String,
    pub stage: Stage,
    pub language: Option<String>,
    pub country: Option<String>,
    pub timezone: Option<String>,
    /// Time zones offered when the country has several.
    #[serde(default)]
    pub zone_choices: Vec<String>,
    /// Field ids in interview order (the Architect's plan).
    pub plan: Vec<String>,
    pub fields: BTreeMap<String, FieldProgress>,
    pub current: Option<String>,
    pub asked: Vec<Asked>,
    pub audit: Option<AuditResult>,
    /// Drafts QuickCheck blocked (totals, for the audit).
    #[serde(default)]
    pub blocked_drafts: u32,
}

impl InterviewState {
    pub fn field(&self, id: &str) -> FieldProgress {
        self.fields.get(id).cloned().unwrap_or_default()
    }

    pub fn field_mut(&mut self, id: &str) -> &mut FieldProgress {
        self.fields.entry(id.to_string()).or_default()
    }

    /// Fields whose answers were accepted.
    pub fn done_fields(&self) -> Vec<String> {
        self.fields
            .iter()
            .filter(|(_, p)| p.status == FieldStatus::Done)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Questions of fields already closed (asking them again is a duplicate).
    pub fn answered_questions(&self) -> Vec<String> {
        self.asked
            .iter()
            .filter(|a| self.field(&a.field_id).status.is_closed())
            .map(|a| a.question.clone())
            .collect()
    }

    /// The next field of the plan not yet closed.
    pub fn next_open_field(&self) -> Option<String> {
        self.plan
            .iter()
            .find(|id| !self.field(id).status.is_closed())
            .cloned()
    }

    /// `(key, value)` pairs collected so far, for sub-task contexts.
    pub fn collected_facts(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for id in &self.plan {
            let p = self.field(id);
            if let Some(v) = &p.value {
                out.push((id.clone(), v.clone()));
            }
            for (k, v) in &p.facts {
                out.push((format!("{id}.{k}"), v.clone()));
            }
        }
        out
    }

    /// The whole question / answer log as text (for the Auditor and summaries).
    pub fn transcript(&self) -> String {
        let mut out = String::new();
        for a in &self.asked {
            out.push_str(&format!("[{}] Q: {}\n", a.field_id, a.question));
            if let Some(answer) = &a.answer {
                out.push_str(&format!("[{}] A: {}\n", a.field_id, answer));
            }
        }
        out
    }
}

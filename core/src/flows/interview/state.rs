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

/// What is empty is left out of the stored state (a session's state is parsed and written
/// again every turn, and most fields carry no facts, prefill or feedback): a missing key
/// reads as empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldProgress {
    pub status: FieldStatus,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub follow_ups: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// fact key → what the applicant said
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub facts: BTreeMap<String, String>,
    /// A value found in an answer to an earlier field, reviewed before asking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill: Option<String>,
    /// What the last review found missing (drives the follow-up).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_facts: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// The question the applicant is answering now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// Every answer given for this field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
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
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
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
    /// A field's progress, borrowed (an untouched field's is empty).
    pub fn field(&self, id: &str) -> &FieldProgress {
        static UNTOUCHED: std::sync::LazyLock<FieldProgress> =
            std::sync::LazyLock::new(FieldProgress::default);
        self.fields.get(id).unwrap_or(&UNTOUCHED)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_parts_are_left_out_and_a_state_written_with_them_still_reads() {
        let mut state = InterviewState {
            form_id: "engineer".into(),
            plan: vec!["email".into(), "skills".into()],
            ..Default::default()
        };
        let email = state.field_mut("email");
        email.status = FieldStatus::Done;
        email.value = Some("hanako@example.com".into());
        email.answers = vec!["hanako@example.com".into()];
        state.field_mut("skills").follow_ups = 1;

        let json = serde_json::to_string(&state).expect("state to JSON");
        for empty in [
            "facts",
            "prefill",
            "missing_facts",
            "feedback",
            "zone_choices",
        ] {
            assert!(!json.contains(empty), "{empty} written in {json}");
        }
        assert!(json.contains(r#""follow_ups":1"#), "{json}");
        let back: InterviewState = serde_json::from_str(&json).expect("state from JSON");
        assert_eq!(back, state);

        // as the release before this one wrote it: every key, empty or not
        let old = r#"{"form_id":"engineer","stage":"interviewing","language":"en","country":"JP",
            "timezone":"Asia/Tokyo","zone_choices":[],"plan":["email"],"fields":{"email":{"status":"done",
            "follow_ups":0,"value":"hanako@example.com","facts":{},"prefill":null,"missing_facts":[],
            "feedback":null,"question":"Your email?","answers":["hanako@example.com"]}},"current":null,
            "asked":[],"audit":null,"blocked_drafts":0}"#;
        let old: InterviewState = serde_json::from_str(old).expect("old state");
        let email = old.field("email");
        assert_eq!(email.status, FieldStatus::Done);
        assert_eq!(email.value.as_deref(), Some("hanako@example.com"));
        assert_eq!(email.question.as_deref(), Some("Your email?"));
        assert!(email.facts.is_empty() && email.missing_facts.is_empty());
    }
}

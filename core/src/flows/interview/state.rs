//! [`InterviewState`]: everything an interview knows, stored as the session's flow state in
//! SQLite after every turn — the stage, the plan, each field's progress
//! (`pending → interviewing → reviewing → done`, or `incomplete` after the follow-ups ran
//! out), the questions asked and the answers given. A restart resumes from it.

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
    /// An optional field the applicant chose to skip ("none", 特になし, the Skip button).
    Skipped,
}

impl FieldStatus {
    pub fn is_closed(self) -> bool {
        matches!(
            self,
            FieldStatus::Done | FieldStatus::Incomplete | FieldStatus::Skipped
        )
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
    // A field's questions and answers are in `InterviewState::asked` only
    // ([`InterviewState::question_of`], [`InterviewState::answers_of`]): the state is written
    // whole every turn, and until this release each answer was kept three times in it and
    // each question twice, which pushed a finished interview's state past one page. States
    // written then still read: their `question` and `answers` keys are ignored.
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
    /// A country we did not know was asked for again (a second one is taken as typed, if
    /// it could be a place's name).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub country_asked_again: bool,
    /// The time zone was asked for in words (a country with no zone we know); what is
    /// written then is the zone, or kept as unresolved (none is assumed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub zone_asked: bool,
    /// What the applicant wrote for the country when it was not recognised at the second
    /// ask: kept as written, never taken as the country (the admins are told).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country_unresolved: Option<String>,
    /// Likewise for the time zone asked in words (empty: nothing usable was written); no
    /// zone is assumed in its place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone_unresolved: Option<String>,
    /// Field ids in interview order (the Architect's plan).
    pub plan: Vec<String>,
    pub fields: BTreeMap<String, FieldProgress>,
    pub current: Option<String>,
    pub asked: Vec<Asked>,
    // The Auditor's result goes to the submission and the admins, not into the state (states
    // written before this release carry it as `audit`, ignored now).
    /// Drafts QuickCheck blocked (totals, for the audit).
    #[serde(default)]
    pub blocked_drafts: u32,
    /// Questions the applicant asked instead of answering, passed on to the team.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applicant_questions: Vec<String>,
    /// An earlier interview of this form, ended with `/end`, offered for resuming (its
    /// session id) until the user answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_offer: Option<i64>,
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

    /// How many fields of the plan are closed (answered, skipped or given up).
    pub fn closed_count(&self) -> usize {
        self.plan
            .iter()
            .filter(|id| self.field(id).status.is_closed())
            .count()
    }

    /// The last question asked for field `id` (an answer logged with no question asked
    /// has none).
    pub fn question_of(&self, id: &str) -> Option<&str> {
        self.asked
            .iter()
            .rev()
            .find(|a| a.field_id == id && !a.question.is_empty())
            .map(|a| a.question.as_str())
    }

    /// Every answer the applicant gave for field `id`, oldest first.
    pub fn answers_of(&self, id: &str) -> Vec<&str> {
        self.asked
            .iter()
            .filter(|a| a.field_id == id)
            .filter_map(|a| a.answer.as_deref())
            .collect()
    }

    /// Records the applicant's `answer` for field `id`: the answer to its last question, or,
    /// when that one has its answer already (or none was asked), a log entry of its own.
    pub fn record_answer(&mut self, id: &str, answer: &str) {
        match self.asked.iter_mut().rev().find(|a| a.field_id == id) {
            Some(last) if last.answer.is_none() => last.answer = Some(answer.to_string()),
            last => {
                let question = last.map(|a| a.question.clone()).unwrap_or_default();
                self.asked.push(Asked {
                    field_id: id.to_string(),
                    question,
                    answer: Some(answer.to_string()),
                });
            }
        }
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
            if !a.question.is_empty() {
                out.push_str(&format!("[{}] Q: {}\n", a.field_id, a.question));
            }
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
            "asked":[{"field_id":"email","question":"Your email?","answer":"hanako@example.com"}],
            "audit":null,"blocked_drafts":0}"#;
        let old: InterviewState = serde_json::from_str(old).expect("old state");
        let email = old.field("email");
        assert_eq!(email.status, FieldStatus::Done);
        assert_eq!(email.value.as_deref(), Some("hanako@example.com"));
        assert_eq!(old.question_of("email"), Some("Your email?"));
        assert_eq!(old.answers_of("email"), ["hanako@example.com"]);
        assert!(email.facts.is_empty() && email.missing_facts.is_empty());
    }

    #[test]
    fn a_question_and_its_answers_are_stored_once_in_the_log() {
        let mut state = InterviewState {
            form_id: "engineer".into(),
            plan: vec!["skills".into()],
            ..Default::default()
        };
        state.asked.push(Asked {
            field_id: "skills".into(),
            question: "Which languages do you write?".into(),
            answer: None,
        });
        state.record_answer("skills", "Rust, mostly");
        // the same question answered again (say, a correction) is a second log entry
        state.record_answer("skills", "Rust and TypeScript");
        // an answer with no question asked for its field still reaches the log
        state.record_answer("email", "hanako@example.com");

        assert_eq!(
            state.question_of("skills"),
            Some("Which languages do you write?")
        );
        assert_eq!(
            state.answers_of("skills"),
            ["Rust, mostly", "Rust and TypeScript"]
        );
        assert_eq!(state.answers_of("email"), ["hanako@example.com"]);
        assert_eq!(state.question_of("email"), None);
        let transcript = state.transcript();
        assert_eq!(transcript.matches("Q: Which languages").count(), 2);
        assert!(!transcript.contains("[email] Q:"), "{transcript}");
        assert!(transcript.contains("[email] A: hanako@example.com"));

        let json = serde_json::to_string(&state).expect("state to JSON");
        assert_eq!(json.matches("Rust, mostly").count(), 1, "{json}");
        assert_eq!(json.matches("Which languages").count(), 2, "{json}");
        let back: InterviewState = serde_json::from_str(&json).expect("state from JSON");
        assert_eq!(back, state);
    }
}

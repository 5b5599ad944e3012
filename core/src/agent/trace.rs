//! [`Trace`]: why a turn answered as it did, noted by its agents as they work ([`Note`])
//! and kept with the turn's first bot message (its model calls are the ledger's rows of that
//! turn, [`TracedCall`] as the console shows them, not copied here): the plan, each
//! search with its passages and scores, the reflections, who wrote the answer (the model or
//! the rule-based floor, and why the floor), what it cited; for the interview, the
//! Reviewer's verdicts and the drafts QuickCheck stopped. The console shows it. Bounded
//! ([`MAX_BYTES`]): passages' texts are never kept, only where they are and how they scored.
//! Never logged.

use crate::store::LlmCallRecord;
use serde::{Deserialize, Serialize};

/// The most a trace takes in the database (JSON bytes).
pub const MAX_BYTES: usize = 8_192;

/// A passage as a search returned it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TracedPassage {
    /// `path#heading` (or a web address).
    pub citation: String,
    pub score: f32,
    /// The share of the question the passage meets, 0–1.
    pub coverage: f32,
}

impl From<&crate::kb::Passage> for TracedPassage {
    fn from(p: &crate::kb::Passage) -> Self {
        TracedPassage {
            citation: p.citation(),
            score: p.score,
            coverage: p.coverage,
        }
    }
}

/// Who wrote an answer or a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum By {
    Model,
    Floor,
}

/// One thing an agent noted during a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Note {
    /// The planner's sub-tasks; `why`: why the floor planned (one sub-task: the question).
    Plan {
        subtasks: Vec<String>,
        by: By,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
    },
    /// A search for a sub-task (`tool`: the model's tool, or `floor` for the floor's own);
    /// `by_meaning`: the knowledge base ranked by meaning beside words.
    Search {
        subtask: String,
        tool: String,
        query: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        by_meaning: bool,
        passages: Vec<TracedPassage>,
    },
    /// The reflection on a sub-task's answer.
    Reflection {
        subtask: String,
        sufficient: bool,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        advice: String,
    },
    /// Who wrote the answer, why the floor when it did, and what it cited.
    Answer {
        by: By,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
        cited: Vec<String>,
    },
    /// The Reviewer's verdict on an answer to a question of the interview: complete, or
    /// the facts still missing (what a follow-up asks for) and its advice.
    Review {
        field: String,
        by: By,
        complete: bool,
        missing: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        feedback: Option<String>,
    },
    /// A drafted question QuickCheck stopped, with its finding.
    QuickCheckStopped {
        field: String,
        draft: String,
        finding: String,
    },
}

/// A model call of the turn, as the trace shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TracedCall {
    pub agent: String,
    pub model: String,
    pub ms: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// `ok`, `timeout`, `cancelled`, `wasted` or `error`.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl From<&LlmCallRecord> for TracedCall {
    fn from(c: &LlmCallRecord) -> Self {
        let outcome = match (&c.error, c.wasted) {
            (_, true) => "wasted",
            (None, false) => "ok",
            (Some(e), false) if e.contains("timed out") || e.contains("timeout") => "timeout",
            (Some(e), false) if e.contains("cancelled") => "cancelled",
            (Some(_), false) => "error",
        };
        TracedCall {
            agent: c.agent.clone(),
            model: c.model.clone(),
            ms: c.latency_ms,
            prompt_tokens: c.prompt_tokens,
            completion_tokens: c.completion_tokens,
            outcome: outcome.to_string(),
            error: c.error.as_ref().map(|e| e.chars().take(200).collect()),
        }
    }
}

/// A turn's trace as stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    #[serde(default)]
    pub notes: Vec<Note>,
    /// Notes or passages left out to stay within [`MAX_BYTES`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shortened: bool,
}

impl Trace {
    /// The trace of a turn that noted `notes` and called a model `calls` times; `None` when
    /// there is nothing to say.
    pub fn of(notes: Vec<Note>, calls: usize) -> Option<Trace> {
        if notes.is_empty() && calls == 0 {
            return None;
        }
        Some(Trace {
            notes,
            shortened: false,
        })
    }

    /// As JSON of at most [`MAX_BYTES`]: long texts cut, then the fewest passages per
    /// search, then the last notes and calls left out (said by `shortened`).
    pub fn to_json(mut self) -> String {
        let fits = |t: &Trace| serde_json::to_string(t).unwrap_or_default();
        let mut json = fits(&self);
        if json.len() <= MAX_BYTES {
            return json;
        }
        self.shortened = true;
        let cut = |s: &mut String, n: usize| {
            if s.chars().count() > n {
                *s = s.chars().take(n).chain(['…']).collect();
            }
        };
        for note in &mut self.notes {
            match note {
                Note::Plan { subtasks, .. } => subtasks.iter_mut().for_each(|t| cut(t, 120)),
                Note::Search {
                    subtask,
                    query,
                    passages,
                    ..
                } => {
                    cut(subtask, 120);
                    cut(query, 120);
                    passages.truncate(5);
                }
                Note::Reflection {
                    subtask, advice, ..
                } => {
                    cut(subtask, 120);
                    cut(advice, 200);
                }
                Note::QuickCheckStopped { draft, finding, .. } => {
                    cut(draft, 200);
                    cut(finding, 200);
                }
                Note::Review {
                    feedback, missing, ..
                } => {
                    if let Some(f) = feedback {
                        cut(f, 200);
                    }
                    missing.iter_mut().for_each(|m| cut(m, 80));
                }
                Note::Answer { cited, .. } => cited.truncate(10),
            }
        }
        json = fits(&self);
        while json.len() > MAX_BYTES && !self.notes.is_empty() {
            self.notes.pop();
            json = fits(&self);
        }
        json
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_stays_within_its_bound_and_says_it_was_shortened() {
        let passages: Vec<TracedPassage> = (0..20)
            .map(|n| TracedPassage {
                citation: format!("en/guide-{n}.md#A heading long enough to take room {n}"),
                score: 1.0,
                coverage: 0.5,
            })
            .collect();
        let notes: Vec<Note> = (0..40)
            .map(|n| Note::Search {
                subtask: "x".repeat(500),
                tool: "search_kb".into(),
                query: format!("query {n}"),
                by_meaning: false,
                passages: passages.clone(),
            })
            .collect();
        let json = Trace::of(notes, 0).expect("a trace").to_json();
        assert!(json.len() <= MAX_BYTES, "{}", json.len());
        let back: Trace = serde_json::from_str(&json).expect("JSON");
        assert!(back.shortened);
        assert!(!back.notes.is_empty());
        assert!(Trace::of(Vec::new(), 0).is_none());
    }
}

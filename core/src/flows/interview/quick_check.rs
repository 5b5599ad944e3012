//! QuickCheck (seed 000): the compliance check every outgoing question passes before it
//! reaches the applicant, follow-ups included.
//!
//! [`deterministic`] runs first and cannot be overruled: prohibited-topic trigger words in
//! the form's languages, a question about a field already answered or a repeat of an
//! answered question, no binding to a known field, banned tone phrases. Then, when a model
//! is configured, the model's own check ([`model_check`], tool `result`). A violation from
//! either blocks the question; a model failure leaves the deterministic verdict.

pub use super::compliance::{Violation, ViolationType};
use super::form::Form;
use crate::agent::subtask::{SubtaskContext, subtask_result};
use crate::agent::{Agent, LlmLedger, ToolError, ToolOutput, TypedTool, typed};
use crate::llm::ChatModel;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const AGENT: &str = "quick_check";

/// The seed's `QuickCheckResultSchema`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QuickCheckResult {
    pub passed: bool,
    #[serde(default)]
    pub violations: Vec<Violation>,
}

/// A question's character bigrams, lowercase, letters and digits only, sorted (two
/// characters packed in one integer), for [`Bigrams::similarity`].
struct Bigrams {
    grams: Vec<u64>,
    /// The normalized question when it is shorter than a bigram ("" or one character).
    short: Option<Option<char>>,
}

impl Bigrams {
    fn of(question: &str) -> Bigrams {
        let mut grams = Vec::with_capacity(question.len());
        let mut previous: Option<char> = None;
        let mut add = |c: char| {
            if let Some(p) = previous {
                grams.push(u64::from(p) << 32 | u64::from(c));
            }
            previous = Some(c);
        };
        for c in question.chars() {
            if c.is_ascii() {
                // most questions' characters: no Unicode tables needed
                if c.is_ascii_alphanumeric() {
                    add(c.to_ascii_lowercase());
                }
            } else {
                c.to_lowercase()
                    .filter(|c| c.is_alphanumeric())
                    .for_each(&mut add);
            }
        }
        grams.sort_unstable();
        let short = grams.is_empty().then_some(previous);
        Bigrams { grams, short }
    }

    /// Character-bigram similarity (Dice), 0.0 – 1.0; works for Japanese and English
    /// alike. Both lists sorted: the bigrams in common are counted in one merge.
    fn similarity(&self, other: &Bigrams) -> f64 {
        let (a, b) = (&self.grams, &other.grams);
        if a.is_empty() || b.is_empty() {
            return if self.short == other.short { 1.0 } else { 0.0 };
        }
        let (mut i, mut j, mut common) = (0, 0, 0usize);
        while i < a.len() && j < b.len() {
            match a[i].cmp(&b[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    common += 1;
                    i += 1;
                    j += 1;
                }
            }
        }
        (2 * common) as f64 / (a.len() + b.len()) as f64
    }
}

/// Prohibited topics and tone only: for any text sent to an applicant (greetings too).
pub fn screen(form: &Form, text: &str) -> Vec<Violation> {
    form.screener().screen(form.topics(), &form.tone, text)
}

/// The rule-based layer. `answered_questions` are questions whose answers were accepted;
/// `done_fields` are fields already answered.
pub fn deterministic(
    form: &Form,
    field_id: &str,
    question: &str,
    answered_questions: &[String],
    done_fields: &[String],
) -> Vec<Violation> {
    let mut violations = Vec::new();
    if form.field(field_id).is_none() {
        violations.push(Violation {
            kind: ViolationType::NoIntentBinding,
            message: format!(
                "the question is not bound to a field of this form (got {field_id:?})"
            ),
        });
    }
    violations.extend(screen(form, question));
    if done_fields.iter().any(|f| f == field_id) {
        violations.push(Violation {
            kind: ViolationType::DuplicateQuestion,
            message: format!("field {field_id:?} is already answered"),
        });
    }
    let asked = Bigrams::of(question);
    if let Some(prev) = answered_questions
        .iter()
        .find(|q| Bigrams::of(q).similarity(&asked) >= 0.85)
    {
        violations.push(Violation {
            kind: ViolationType::DuplicateQuestion,
            message: format!("repeats a question already answered: {prev:?}"),
        });
    }
    violations
}

struct ResultTool;

impl TypedTool<Option<QuickCheckResult>> for ResultTool {
    type Args = QuickCheckResult;
    const NAME: &'static str = "result";
    fn description(&self) -> String {
        "Return the compliance check result for the drafted question.".into()
    }
    async fn run(
        &self,
        state: &mut Option<QuickCheckResult>,
        args: QuickCheckResult,
    ) -> Result<ToolOutput, ToolError> {
        if !args.passed && args.violations.is_empty() {
            return Err(ToolError::Rejected(
                "a failed check must list its violations".into(),
            ));
        }
        *state = Some(args);
        Ok(ToolOutput::finish("recorded"))
    }
}

/// QuickCheck's system prompt, built once per form.
fn prompt(form: &Form) -> &str {
    form.quick_check_prompt.0.get_or_init(|| build_prompt(form))
}

fn build_prompt(form: &Form) -> String {
    let topics: Vec<&str> = form.topics().iter().map(|t| t.label.as_str()).collect();
    format!(
        "You are QuickCheck, a compliance checker for a job-application interview. Before a question is sent \
         to the applicant, check that: it is bound to the current field and its intent; it does not touch a \
         prohibited topic ({}); it does not ask again for a fact already collected; its tone is polite and \
         respectful{}. Call the `result` tool exactly once with passed and any violations \
         (type: prohibited_topic, duplicate_question, tone_violation, no_intent_binding).",
        topics.join(", "),
        form.tone
            .guidance
            .as_deref()
            .map(|g| format!(" ({g})"))
            .unwrap_or_default()
    )
}

/// The model's check of `question`; `None` when the model failed (the deterministic verdict stands).
pub async fn model_check(
    model: &dyn ChatModel,
    form: &Form,
    context: &SubtaskContext,
    question: &str,
    ledger: &LlmLedger,
) -> Option<QuickCheckResult> {
    let agent = Agent::new(AGENT, vec![typed(ResultTool)])
        .with_max_iterations(3)
        .until_set("Return the check with the result tool");
    let instruction = format!("Check this drafted question:\n{question}");
    subtask_result(&agent, model, prompt(form), context, &instruction, ledger).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flows::interview::form::Form;

    fn form() -> Form {
        Form::parse(
            "t",
            r#"
            title = "T"
            variant = "application"
            languages = ["en", "ja"]
            [tone]
            banned_phrases = ["be quick"]
            [[fields]]
            id = "motivation"
            label = "Motivation"
            question = "Why do you want to join us?"
            "#,
        )
        .expect("form")
    }

    fn kinds(v: &[Violation]) -> Vec<ViolationType> {
        v.iter().map(|v| v.kind).collect()
    }

    #[test]
    fn prohibited_topics_are_caught_in_both_languages() {
        let f = form();
        assert_eq!(
            kinds(&deterministic(
                &f,
                "motivation",
                "Are you married?",
                &[],
                &[]
            )),
            [ViolationType::ProhibitedTopic]
        );
        assert_eq!(
            kinds(&deterministic(
                &f,
                "motivation",
                "ご結婚はされていますか？",
                &[],
                &[]
            )),
            [ViolationType::ProhibitedTopic]
        );
        assert_eq!(
            kinds(&deterministic(
                &f,
                "motivation",
                "How old are you?",
                &[],
                &[]
            )),
            [ViolationType::ProhibitedTopic]
        );
        // word starts only: "embrace" is not "race"
        assert!(
            deterministic(
                &f,
                "motivation",
                "Which values do you embrace at work?",
                &[],
                &[]
            )
            .is_empty()
        );
        assert!(
            deterministic(&f, "motivation", "Why do you want to join us?", &[], &[]).is_empty()
        );
    }

    #[test]
    fn similarity_counts_the_bigrams_in_common_with_their_repeats() {
        let sim = |a: &str, b: &str| Bigrams::of(a).similarity(&Bigrams::of(b));
        assert!((sim("abcd", "ABC-e") - 2.0 / 3.0).abs() < 1e-9);
        // "aaa" has "aa" twice, "aa" once: one in common
        assert!((sim("aaa", "aa") - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(sim("志望動機は？", "志望動機は"), 1.0);
        assert_eq!(sim("a", "A"), 1.0);
        assert_eq!(sim("a", "b"), 0.0);
        assert!(
            sim(
                "Why do you want to join us?",
                "Why do you want to leave your job?"
            ) < 0.85
        );
    }

    #[test]
    fn duplicates_bindings_and_tone() {
        let f = form();
        let answered = vec!["Why do you want to join us?".to_string()];
        assert_eq!(
            kinds(&deterministic(
                &f,
                "motivation",
                "Why do you want to join us ?",
                &answered,
                &[]
            )),
            [ViolationType::DuplicateQuestion]
        );
        assert_eq!(
            kinds(&deterministic(
                &f,
                "motivation",
                "Tell me more.",
                &[],
                &["motivation".into()]
            )),
            [ViolationType::DuplicateQuestion]
        );
        assert_eq!(
            kinds(&deterministic(
                &f,
                "salary",
                "What salary do you expect?",
                &[],
                &[]
            )),
            [ViolationType::NoIntentBinding]
        );
        assert_eq!(
            kinds(&deterministic(
                &f,
                "motivation",
                "Be quick: why us?",
                &[],
                &[]
            )),
            [ViolationType::ToneViolation]
        );
    }
}

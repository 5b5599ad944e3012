//! An applicant who asks instead of answering ("What is the salary?", 「リモートは可能ですか」).
//! The question is never kept as the answer to the field it came at. One about the
//! interview itself (how long, how many questions) is answered from the plan; any other
//! is passed on to the team at once (a notice with Take over) and kept for the submission.
//! Then the question the interview waits on is asked again, its options with it.

use super::form::{FieldType, Form, FormField};
use super::state::InterviewState;
use super::{InterviewFlow, lang_of, reviewer};
use crate::admin::{AdminActionKind, AdminNotice};
use crate::flow::{TurnContext, TurnOutput};
use crate::i18n::pick;

/// Words an English question starts with.
const EN_OPENINGS: &[&str] = &[
    "what", "what's", "whats", "how", "how's", "why", "when", "where", "who", "whom", "whose",
    "which", "is", "are", "am", "was", "were", "do", "does", "did", "can", "could", "will",
    "would", "should", "may", "might", "shall", "isn't", "aren't", "don't", "doesn't",
];
/// How a Japanese question ends (a full stop or question mark after it aside).
const JA_ENDINGS: &[&str] = &[
    "ですか",
    "ますか",
    "でしょうか",
    "ませんか",
    "のですか",
    "んですか",
    "ですかね",
];
/// Japanese question words.
const JA_ASKING: &[&str] = &[
    "何",
    "なに",
    "なん",
    "いくら",
    "いつ",
    "どこ",
    "どう",
    "なぜ",
    "どれ",
    "どの",
    "誰",
    "だれ",
    "どんな",
];

/// Whether `text`, written at `field`'s question, is a question of the applicant's rather
/// than an answer. A question ends like one (a question mark, 「ですか」) and is one
/// sentence (an answer may end with a question of its own); at a question that takes a
/// typed value (an email, a number, a choice) it is also not such a value ("5?" answers
/// "How many years?"); at a question in words it opens with a question word, or asks in
/// Japanese ("Rust?" answers "Which languages?").
pub fn is_question(field: &FormField, text: &str) -> bool {
    let text = text.trim();
    let body = text.trim_end_matches(['?', '？', '。', '.', '!', '！', ' ', '　']);
    let marked = text.ends_with(['?', '？']);
    let ja_form = JA_ENDINGS.iter().any(|e| body.ends_with(e));
    if !(marked || ja_form) || body.is_empty() {
        return false;
    }
    if body.contains(['.', '。', '!', '！', '?', '？', '\n']) {
        return false;
    }
    match field.kind() {
        FieldType::Text => {
            let first = body
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .trim_matches(|c: char| !c.is_alphanumeric() && c != '\'')
                .to_lowercase();
            ja_form
                || EN_OPENINGS.contains(&first.as_str())
                || (crate::i18n::has_japanese(body) && JA_ASKING.iter().any(|w| body.contains(w)))
        }
        _ => reviewer::validate(field, text, "en").is_err(),
    }
}

/// Whether the question is about the interview itself: how long it takes, how many
/// questions are left.
fn about_the_interview(text: &str) -> bool {
    let t = text.to_lowercase();
    [
        "how long",
        "how many questions",
        "how many more",
        "how much longer",
        "how much more",
        "何問",
        "あと何",
        "どのくらいかか",
        "どれくらいかか",
        "時間がかか",
        "あとどれ",
        "あとどのくらい",
    ]
    .iter()
    .any(|w| t.contains(w))
}

impl InterviewFlow {
    /// Answers the applicant's `question`, written at field `id`'s question, and asks
    /// that one again.
    pub(super) fn applicant_asked(
        &self,
        ctx: &TurnContext<'_>,
        form: &Form,
        st: &mut InterviewState,
        out: &mut TurnOutput,
        id: &str,
        question: &str,
    ) {
        let lang = lang_of(st);
        if about_the_interview(question) {
            out.say(self.progress(form, st));
        } else {
            st.applicant_questions.push(question.trim().to_string());
            out.say(pick(
                &lang,
                "Thank you for asking. I have passed your question on to the team, who will answer it. Meanwhile, let's go on.",
                "ご質問ありがとうございます。担当者に伝えました。担当者よりお答えします。それでは続けます。",
            ));
            let asked_at = form
                .field(id)
                .map(|f| f.label.get("en").to_string())
                .unwrap_or_else(|| id.to_string());
            out.admin.push(AdminNotice {
                kind: "question".into(),
                title: format!("Question from applicant {}", ctx.user.display_name),
                body: question.trim().to_string(),
                fields: vec![
                    ("Applicant".into(), ctx.user.display_name.clone()),
                    ("Form".into(), form.id.clone()),
                    ("Asked at".into(), asked_at),
                ],
                session_id: None,
                actions: vec![AdminActionKind::TakeOver],
            });
        }
        let Some(field) = form.field(id) else {
            return;
        };
        let again = st
            .question_of(id)
            .map(str::to_string)
            .unwrap_or_else(|| field.template_question(&lang));
        self.present_question(st, out, field, again, true);
    }
}

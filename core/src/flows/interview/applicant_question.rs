//! An applicant who asks instead of answering ("What is the salary?", 「リモートは可能ですか」).
//! The question is never kept as the answer to the field it came at. One about the
//! interview itself (how long, how many questions) is answered from the plan; any other
//! is passed on to the team at once (a notice with Take over) and kept for the submission.
//! Then the question the interview waits on is asked again, its options with it.

use super::form::{FieldType, Form, FormField};
use super::greeter_tools::Section;
use super::state::InterviewState;
use super::{InterviewFlow, greeter_tools, lang_of, reviewer};
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

/// How `text` reads as a question: its words without the closing marks, whether it is
/// one sentence that ends with a question mark, and whether it ends like a Japanese
/// question (「ですか」, with or without a mark). `None`: it does not end like a question,
/// or holds more than one sentence (an answer may end with a question of its own).
fn question_form(text: &str) -> Option<(&str, bool)> {
    let text = text.trim();
    let body = text.trim_end_matches(['?', '？', '。', '.', '!', '！', ' ', '　']);
    let marked = text.ends_with(['?', '？']);
    let ja_form = JA_ENDINGS.iter().any(|e| body.ends_with(e));
    if !(marked || ja_form)
        || body.is_empty()
        || body.contains(['.', '。', '!', '！', '?', '？', '\n'])
    {
        return None;
    }
    Some((body, ja_form))
}

/// Whether `text` is a question in words: one sentence that ends like a question and
/// opens with a question word ("Why…", "Is…"), or asks in Japanese (「ですか」, 何, いつ).
/// "Rust?" and 「日本？」 are answers said with doubt, not questions.
pub fn asks(text: &str) -> bool {
    let Some((body, ja_form)) = question_form(text) else {
        return false;
    };
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

/// Whether `text`, written at `field`'s question, is a question of the applicant's rather
/// than an answer: at a question in words, a question in words ([`asks`]); at one that
/// takes a typed value (an email, a number, a choice), anything that ends like a question
/// and is no such value ("5?" answers "How many years?"); at a choice, a question in words
/// too, even one that names an option.
pub fn is_question(field: &FormField, text: &str) -> bool {
    match field.kind() {
        FieldType::Text => asks(text),
        // "Is remote possible?" names an option but asks about it
        FieldType::Choice | FieldType::MultiChoice if asks(text) => true,
        _ => question_form(text).is_some() && reviewer::validate(field, text, "en").is_err(),
    }
}

/// Whether the applicant asks why they are asked something.
fn asks_why(text: &str) -> bool {
    let t = text.to_lowercase();
    [
        "why",
        "what for",
        "need my",
        "need to know",
        "have to",
        "must i",
        "necessary",
        "required",
        "なぜ",
        "どうして",
        "何のため",
        "なんのため",
        "理由",
        "必要",
    ]
    .iter()
    .any(|w| t.contains(w))
}

/// Whether `text` says the applicant wants to stop ("I want to stop", "quit", 「やめます」,
/// 「中止したい」): a few words, no question ("Can I stop and go on later?" is asked, and
/// answered).
pub fn wants_to_stop(text: &str) -> bool {
    let t = text
        .trim()
        .trim_end_matches(['.', '。', '!', '！'])
        .trim()
        .to_lowercase();
    if t.contains(['?', '？']) || asks(text) {
        return false;
    }
    if crate::i18n::has_japanese(&t) {
        return t.chars().count() <= 15
            && [
                "やめます",
                "やめたい",
                "止めます",
                "止めたい",
                "中止",
                "終わりにしたい",
                "終わりにします",
                "キャンセル",
                "辞退",
            ]
            .iter()
            .any(|w| t.contains(w));
    }
    matches!(
        t.as_str(),
        "stop" | "quit" | "cancel" | "exit" | "end" | "stop please" | "please stop" | "i give up"
    ) || [
        "i want to stop",
        "i'd like to stop",
        "i would like to stop",
        "i want to quit",
        "let me stop",
        "stop the interview",
        "cancel the interview",
        "cancel my application",
        "withdraw my application",
    ]
    .iter()
    .any(|w| t.starts_with(w) && t.split_whitespace().count() <= 8)
}

/// Whether the question asks about stopping ("Can I stop and go on later?",
/// 「途中でやめられますか？」).
fn about_stopping(text: &str) -> bool {
    let t = text.to_lowercase();
    [
        "stop",
        "pause",
        "later",
        "quit",
        "a break",
        "やめ",
        "中断",
        "途中で",
        "後で",
        "あとで",
    ]
    .iter()
    .any(|w| t.contains(w))
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

/// How to stop and go on later.
fn stopping_help(lang: &str) -> String {
    pick(
        lang,
        "Yes: send /end at any time. Your answers are kept, and /interview later goes on where you stopped.",
        "はい、いつでも /end で中断できます。回答は保存され、あとで /interview を送ると続きから再開できます。",
    )
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
        let field = form.field(id);
        if about_stopping(question) {
            out.say(stopping_help(&lang));
        } else if about_the_interview(question) {
            out.say(self.progress(form, st));
        } else {
            let asked_at = field.map_or(id, |f| f.label.get("en"));
            self.pass_on(ctx, form, st, out, asked_at, question);
        }
        let Some(field) = field else {
            return;
        };
        let again = st
            .question_of(id)
            .map(str::to_string)
            .unwrap_or_else(|| field.template_question(&lang));
        self.present_question(st, out, field, again, true);
    }

    /// Answers the applicant's `question`, written at the Greeter's question (their
    /// country, their time zone): why it is asked, or passed on; then asks it again.
    pub(super) fn applicant_asked_greeter(
        &self,
        ctx: &TurnContext<'_>,
        form: &Form,
        st: &mut InterviewState,
        out: &mut TurnOutput,
        question: &str,
    ) {
        let lang = lang_of(st);
        let section = greeter_tools::section(st);
        if asks_why(question) {
            out.say(match section {
                Section::Timezone => pick(
                    &lang,
                    "Your time zone lets the team propose interview times that suit you.",
                    "面接の日時をご都合に合わせてご提案するため、タイムゾーンをお伺いしています。",
                ),
                _ => pick(
                    &lang,
                    "Your country tells us your time zone, for the interview's times, and which rules apply to the application. The country is enough; no address is needed.",
                    "面接日時の調整のためのタイムゾーンと、応募に適用される規則を確認するために、お住まいの国をお伺いしています。国名だけで結構です（住所は不要です）。",
                ),
            });
        } else if about_stopping(question) {
            out.say(stopping_help(&lang));
        } else if about_the_interview(question) {
            out.say(pick(
                &lang,
                &format!(
                    "After your country, there are {} questions.",
                    form.fields.len()
                ),
                &format!(
                    "お住まいの国のあと、{} 問の質問があります。",
                    form.fields.len()
                ),
            ));
        } else {
            let asked_at = match section {
                Section::Timezone => "Time zone",
                _ => "Country",
            };
            self.pass_on(ctx, form, st, out, asked_at, question);
        }
        if section == Section::Timezone && st.zone_asked && st.zone_choices.is_empty() {
            // asked once in words: asking again must not give it up as unresolved
            out.say(super::greeter_tools::zone_question_in_words(&lang));
        } else {
            self.greeting_step(st, out);
        }
    }

    /// Passes the applicant's `question` on to the team (a notice with Take over) and
    /// keeps it for the submission; `asked_at` names the question it came at.
    fn pass_on(
        &self,
        ctx: &TurnContext<'_>,
        form: &Form,
        st: &mut InterviewState,
        out: &mut TurnOutput,
        asked_at: &str,
        question: &str,
    ) {
        let lang = lang_of(st);
        st.applicant_questions.push(question.trim().to_string());
        out.say(pick(
            &lang,
            "Thank you for asking. I have passed your question on to the team, who will answer it. Meanwhile, let's go on.",
            "ご質問ありがとうございます。担当者に伝えました。担当者よりお答えします。それでは続けます。",
        ));
        out.admin.push(AdminNotice {
            kind: "question".into(),
            title: format!("Question from applicant {}", ctx.user.display_name),
            body: question.trim().to_string(),
            fields: vec![
                ("Applicant".into(), ctx.user.display_name.clone()),
                ("Form".into(), form.id.clone()),
                ("Asked at".into(), asked_at.to_string()),
            ],
            session_id: None,
            actions: vec![AdminActionKind::TakeOver],
        });
    }
}

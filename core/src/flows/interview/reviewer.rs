//! Reviewer (seeds 000 / 001): decides whether an answer completes its field.
//!
//! Type validation runs in code first ([`validate`]: email, phone, number, date, url, choice,
//! the field's pattern) and its verdict cannot be overruled. Then, with a model, the `review`
//! tool returns `passed`, `feedback`, `missing_facts`, and (seed 001) `extracted_facts` and
//! `field_value`. The rule-based floor passes a valid answer and records it as every fact of
//! the field. [`extract_for_other_fields`] finds unambiguous values (emails, URLs, phone
//! numbers) for later fields in any answer, so nothing is asked twice.

use super::form::{ChoiceOption, FieldType, Form, FormField, LocalText};
use super::written::{number_in_words, parse_date};
use crate::agent::subtask::{SubtaskContext, subtask_result};
use crate::agent::{Agent, LlmLedger, ToolError, ToolOutput, TypedTool, typed};
use crate::i18n::pick;
use crate::llm::ChatModel;
use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;

pub const AGENT: &str = "reviewer";

/// A value the answer gave for another field (or a fact of this one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExtractedFact {
    /// The field the value belongs to.
    pub field_id: String,
    /// The fact key within that field, if it is a fact rather than the field's value.
    #[serde(default)]
    pub fact_key: Option<String>,
    pub value: String,
}

/// The seed's `ReviewResultSchema` (seed 001's extraction included).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReviewResult {
    pub passed: bool,
    #[serde(default)]
    pub feedback: Option<String>,
    /// Facts of this field the answer does not establish yet.
    #[serde(default)]
    pub missing_facts: Vec<String>,
    /// Facts for this or other fields found in the answer.
    #[serde(default)]
    pub extracted_facts: Vec<ExtractedFact>,
    /// The field's value, normalised.
    #[serde(default)]
    pub field_value: Option<String>,
}

static EMAIL: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}").ok());
static URL: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"https?://[^\s<>、。]+").ok());
static PHONE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\+?[0-9][0-9 ()\-]{6,18}[0-9]").ok());
static NUMBER: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"-?[0-9]+(?:\.[0-9]+)?").ok());

fn find(re: &LazyLock<Option<Regex>>, text: &str) -> Option<String> {
    re.as_ref()?.find(text).map(|m| m.as_str().to_string())
}

/// The value of the Skip button shown with optional questions.
pub const SKIP: &str = "__skip__";

/// Whether `answer` skips an optional question: the Skip button, or "none", "skip", "n/a",
/// 特になし, なし, ありません and the like, or a few words saying there is none ("I don't
/// have one", "No, sorry", 「持っていません」, 「まだないです」).
pub fn is_skip(answer: &str) -> bool {
    let a = answer
        .trim()
        .trim_end_matches(['.', '。', '!', '！'])
        .trim()
        .to_lowercase();
    says_none(&a)
        || matches!(
            a.as_str(),
            SKIP | "skip"
                | "none"
                | "n/a"
                | "na"
                | "nothing"
                | "no answer"
                | "pass"
                | "特になし"
                | "とくになし"
                | "特にない"
                | "特にありません"
                | "なし"
                | "ない"
                | "ありません"
                | "スキップ"
                | "パス"
        )
}

/// A short answer that says there is nothing to give (lower case, closing marks gone).
fn says_none(a: &str) -> bool {
    let words = crate::i18n::words(a);
    if crate::i18n::has_japanese(a) {
        a.chars().count() <= 12
            && [
                "ありません",
                "ないです",
                "持っていません",
                "持ってません",
                "もっていません",
                "無いです",
                "なしで",
                "まだない",
                "特にない",
            ]
            .iter()
            .any(|w| a.contains(w))
    } else {
        words.len() <= 6
            && (matches!(words.first(), Some(&("no" | "nope")))
                || [
                    "don't have",
                    "do not have",
                    "haven't got",
                    "not yet",
                    "rather not",
                    "prefer not",
                    "nothing",
                    "no preference",
                ]
                .iter()
                .any(|w| a.contains(w)))
    }
}

static DATE_EXAMPLE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\d{4}-\d{2}-\d{2}").ok());

/// The date a date field's error message shows: the one its question gives as an example
/// (so the two agree), else the first of the month after next.
pub fn date_example(field: &FormField, lang: &str) -> String {
    let from_question = field
        .question
        .as_ref()
        .map(|q| q.get(lang))
        .and_then(|q| find(&DATE_EXAMPLE, q));
    from_question.unwrap_or_else(|| {
        let today = chrono::Utc::now().date_naive();
        today
            .checked_add_months(chrono::Months::new(2))
            .and_then(|d| chrono::Datelike::with_day(&d, 1))
            .unwrap_or(today)
            .format("%Y-%m-%d")
            .to_string()
    })
}

/// Checks and normalises `answer` for `field`; the error is a message for the applicant.
pub fn validate(field: &FormField, answer: &str, lang: &str) -> Result<String, String> {
    let answer = answer.trim();
    if answer.is_empty() {
        return Err(pick(lang, "The answer is empty.", "回答が空です。"));
    }
    let value = match field.kind() {
        FieldType::Text => answer.to_string(),
        FieldType::Email => find(&EMAIL, answer).ok_or_else(|| {
            pick(
                lang,
                "That doesn't look like an email address (for example name@example.com).",
                "メールアドレスの形式ではないようです（例: name@example.com）。",
            )
        })?,
        FieldType::Url => find(&URL, answer).ok_or_else(|| {
            pick(
                lang,
                "Please give a full web address starting with https://.",
                "https:// から始まるURLを入力してください。",
            )
        })?,
        FieldType::Phone => {
            let found = find(&PHONE, answer).filter(|p| {
                let digits = p.chars().filter(char::is_ascii_digit).count();
                (7..=15).contains(&digits)
            });
            found.ok_or_else(|| {
                pick(
                    lang,
                    "That doesn't look like a phone number.",
                    "電話番号の形式ではないようです。",
                )
            })?
        }
        FieldType::Number => {
            let normalized: String = answer
                .chars()
                .map(|c| match c {
                    '０'..='９' => {
                        char::from_u32(c as u32 - '０' as u32 + '0' as u32).unwrap_or(c)
                    }
                    other => other,
                })
                .collect::<String>()
                .replace(',', "");
            find(&NUMBER, &normalized)
                .or_else(|| number_in_words(&normalized).map(|n| n.to_string()))
                .ok_or_else(|| {
                    pick(
                        lang,
                        "Please answer with a number.",
                        "数字で答えてください。",
                    )
                })?
        }
        FieldType::Date => parse_date(answer)
            .map(|d| d.format("%Y-%m-%d").to_string())
            .ok_or_else(|| {
                let example = date_example(field, lang);
                pick(
                    lang,
                    &format!("Please give a date like {example}."),
                    &format!("{example} のような形式で日付を入力してください。"),
                )
            })?,
        FieldType::Choice => option_of(field, answer).ok_or_else(|| {
            pick(lang, "Please pick one of: ", "次から選んでください: ") + &labels_of(field, lang)
        })?,
        FieldType::MultiChoice => {
            let mut values: Vec<String> = Vec::new();
            for part in answer.split([',', '、', ';', '\n']).map(str::trim) {
                if part.is_empty() {
                    continue;
                }
                let value = option_of(field, part).ok_or_else(|| {
                    pick(
                        lang,
                        "Please pick one or more of: ",
                        "次から一つ以上選んでください: ",
                    ) + &labels_of(field, lang)
                })?;
                if !values.contains(&value) {
                    values.push(value);
                }
            }
            if values.is_empty() {
                return Err(pick(
                    lang,
                    "Please pick one or more of: ",
                    "次から一つ以上選んでください: ",
                ) + &labels_of(field, lang));
            }
            values.join(", ")
        }
    };
    if let Some(pattern) = &field.pattern {
        let ok = Regex::new(pattern)
            .map(|re| re.is_match(&value))
            .unwrap_or(false);
        if !ok {
            return Err(pick(
                lang,
                "The answer is not in the expected format.",
                "回答の形式が正しくありません。",
            ));
        }
    }
    Ok(value)
}

/// The option an answer names: its number (1-based), its value or its label in either language.
fn option_of(field: &FormField, answer: &str) -> Option<String> {
    // "Remote." and "Remote?" name the option as "Remote" does
    let lower = answer
        .trim()
        .trim_end_matches(['.', '。', '!', '！', '?', '？'])
        .trim()
        .to_lowercase();
    let by_index = lower
        .parse::<usize>()
        .ok()
        .and_then(|n| field.options.get(n.checked_sub(1)?));
    by_index
        .or_else(|| {
            field.options.iter().find(|o| {
                o.value.to_lowercase() == lower
                    || ["en", "ja"]
                        .iter()
                        .any(|l| o.label.get(l).to_lowercase() == lower)
            })
        })
        .or_else(|| option_named_in(field, &lower))
        .map(|o| o.value.clone())
}

/// The one option an answer names among other words (「オンラインで」, "Remote, please",
/// 「出社を希望します」), when it names no other and says no "not" ("not remote" and
/// 「リモートではなく出社」 are asked again rather than guessed). Names of one letter are
/// not looked for inside words ("A" is in "a lot").
fn option_named_in<'f>(field: &'f FormField, lower: &str) -> Option<&'f ChoiceOption> {
    const NOT: &[&str] = &[
        "not", "no", "don't", "dont", "never", "without", "instead", "rather",
    ];
    const NOT_JA: &[&str] = &["ない", "なく", "以外", "ではな", "じゃな", "不可", "無理"];
    let words = crate::i18n::words(lower);
    if words.iter().any(|w| NOT.contains(w)) || NOT_JA.iter().any(|w| lower.contains(w)) {
        return None;
    }
    the_one_named(&field.options, lower, |o| (&o.value, &o.label))
}

/// The one of `items` that `text` names, by its id (`in_person` as "in person") or its
/// label in either language, when it names no other. Names of one letter are not looked
/// for inside words ("A" is in "a lot").
pub(super) fn the_one_named<'a, T>(
    items: impl IntoIterator<Item = &'a T>,
    text: &str,
    names_of: impl Fn(&T) -> (&str, &LocalText),
) -> Option<&'a T> {
    let mut named = items.into_iter().filter(|item| {
        let (id, label) = names_of(item);
        [
            id.replace('_', " "),
            label.get("en").to_string(),
            label.get("ja").to_string(),
        ]
        .iter()
        .filter(|n| n.trim().chars().count() >= 2)
        .any(|n| mentions_any(text, std::slice::from_ref(n)))
    });
    let first = named.next()?;
    named.next().is_none().then_some(first)
}

fn labels_of(field: &FormField, lang: &str) -> String {
    let labels: Vec<&str> = field.options.iter().map(|o| o.label.get(lang)).collect();
    labels.join(" / ")
}

/// Unambiguous values for *other* open fields found in `answer` (emails, URLs, phones).
pub fn extract_for_other_fields(
    form: &Form,
    current: &str,
    open_fields: &[String],
    answer: &str,
) -> Vec<ExtractedFact> {
    let mut out = Vec::new();
    for id in open_fields.iter().filter(|id| id.as_str() != current) {
        let Some(field) = form.field(id) else {
            continue;
        };
        let value = match field.kind() {
            FieldType::Email => find(&EMAIL, answer),
            FieldType::Url => find(&URL, answer),
            FieldType::Phone => {
                find(&PHONE, answer).filter(|p| p.chars().filter(char::is_ascii_digit).count() >= 9)
            }
            _ => None,
        };
        if let Some(value) = value {
            out.push(ExtractedFact {
                field_id: id.clone(),
                fact_key: None,
                value,
            });
        }
    }
    out
}

/// Whether `answer` mentions one of `signals` (case-insensitive; a signal of letters and
/// digits only as a whole word, so "Go" is not found in "good").
pub fn mentions_any(answer: &str, signals: &[String]) -> bool {
    let lower = answer.to_lowercase();
    // (Latin words end at kana or kanji too: 「PythonとGo」)
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '#'))
        .filter(|w| !w.is_empty())
        .collect();
    signals.iter().any(|signal| {
        let s = signal.to_lowercase();
        if s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '#')
        {
            words.contains(&s.as_str())
        } else {
            lower.contains(&s)
        }
    })
}

/// The rule-based review of a valid answer. `answers`: what the applicant said for this
/// field so far, this answer last; `follow_ups`: follow-ups already asked for it. A fact
/// with `signals` none of the answers shows is asked for once (seed 000's Reviewer); after
/// that the field closes with the answers together.
pub fn floor_review(
    field: &FormField,
    value: &str,
    answers: &[&str],
    follow_ups: u32,
) -> ReviewResult {
    let together = answers.join("\n");
    let missing: Vec<String> = field
        .facts
        .iter()
        .filter(|f| !f.signals.is_empty() && !mentions_any(&together, &f.signals))
        .map(|f| f.key.clone())
        .collect();
    if !missing.is_empty() && follow_ups == 0 && field.max_follow_ups > 0 {
        return ReviewResult {
            passed: false,
            feedback: None,
            missing_facts: missing,
            extracted_facts: Vec::new(),
            field_value: None,
        };
    }
    // a text answer completed by a follow-up is both answers
    let value = if follow_ups > 0 && answers.len() > 1 && field.kind() == FieldType::Text {
        answers.join("; ")
    } else {
        value.to_string()
    };
    ReviewResult {
        passed: true,
        feedback: None,
        missing_facts: Vec::new(),
        extracted_facts: field
            .facts
            .iter()
            .map(|f| ExtractedFact {
                field_id: field.id.clone(),
                fact_key: Some(f.key.clone()),
                value: value.clone(),
            })
            .collect(),
        field_value: Some(value),
    }
}

struct ReviewTool;

impl TypedTool<Option<ReviewResult>> for ReviewTool {
    type Args = ReviewResult;
    const NAME: &'static str = "review";
    fn description(&self) -> String {
        "Return whether the answer completes the current field: passed, feedback, missing_facts (fact keys \
         still missing), extracted_facts (values for this or other fields found in the answer) and field_value."
            .into()
    }
    async fn run(
        &self,
        state: &mut Option<ReviewResult>,
        args: ReviewResult,
    ) -> Result<ToolOutput, ToolError> {
        if args.passed
            && args
                .field_value
                .as_deref()
                .is_none_or(|v| v.trim().is_empty())
        {
            return Err(ToolError::Rejected(
                "a passed review needs the field_value".into(),
            ));
        }
        *state = Some(args);
        Ok(ToolOutput::finish("recorded"))
    }
}

/// The Reviewer's system prompt for `field`: built once per field of a form (a field from
/// elsewhere gets its own).
fn prompt<'f>(form: &'f Form, field: &FormField) -> std::borrow::Cow<'f, str> {
    if form
        .field(&field.id)
        .is_some_and(|own| std::ptr::eq(own, field))
    {
        let prompts = form.reviewer_prompts.0.get_or_init(|| {
            form.fields
                .iter()
                .map(|f| (f.id.clone(), build_prompt(form, f)))
                .collect()
        });
        if let Some(prompt) = prompts.get(&field.id) {
            return std::borrow::Cow::Borrowed(prompt);
        }
    }
    std::borrow::Cow::Owned(build_prompt(form, field))
}

fn build_prompt(form: &Form, field: &FormField) -> String {
    let facts: Vec<String> = field
        .facts
        .iter()
        .map(|f| format!("- {}: {} (done when: {})", f.key, f.fact, f.done_criteria))
        .collect();
    let others: Vec<String> = form
        .fields
        .iter()
        .filter(|f| f.id != field.id)
        .map(|f| format!("{} ({})", f.id, f.label.get("en")))
        .collect();
    format!(
        "You are the Reviewer of an interview that fills the form {:?}. Check whether the applicant's answer \
         completes the current field {:?} ({}; intent: {}). Required facts:\n{}\n\
         If a fact is missing, set passed=false and list the missing fact keys in missing_facts with short \
         feedback. Put the normalised value in field_value. If the answer also gives values for other fields \
         ({}), add them to extracted_facts with their field_id. Call the `review` tool exactly once.",
        form.id,
        field.id,
        field.label.get("en"),
        field.intent.as_deref().unwrap_or("-"),
        if facts.is_empty() {
            "(none: a clear answer suffices)".to_string()
        } else {
            facts.join("\n")
        },
        others.join(", ")
    )
}

/// The model's review; `None` when the model failed (the caller uses the floor).
pub async fn model_review(
    model: &dyn ChatModel,
    form: &Form,
    field: &FormField,
    context: &SubtaskContext,
    answer: &str,
    ledger: &LlmLedger,
) -> Option<ReviewResult> {
    let agent = Agent::new(AGENT, vec![typed(ReviewTool)])
        .with_max_iterations(3)
        .until_set("Return the review with the review tool");
    let instruction = format!("The applicant answered:\n{answer}");
    subtask_result(
        &agent,
        model,
        &prompt(form, field),
        context,
        &instruction,
        ledger,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(kind: &str) -> FormField {
        let text = format!(
            "title = \"t\"\nvariant = \"plain\"\n[[fields]]\nid = \"f\"\nlabel = \"F\"\ntype = \"{kind}\"\n\
             [[fields.options]]\nvalue = \"remote\"\nlabel = {{ en = \"Remote\", ja = \"リモート\" }}\n\
             [[fields.options]]\nvalue = \"office\"\nlabel = {{ en = \"Office\", ja = \"出社\" }}\n"
        );
        Form::parse("t", &text).expect("form").fields.remove(0)
    }

    /// A start date as applicants write it: a month's name, a month without its day, "as
    /// soon as possible", "next month" (the day they are read counts for those).
    #[test]
    fn a_date_is_read_as_applicants_write_it() {
        use chrono::{Datelike, NaiveDate};
        let date = field("date");
        let today = chrono::Utc::now().date_naive();
        let iso = |d: NaiveDate| d.format("%Y-%m-%d").to_string();
        let next_month = today
            .checked_add_months(chrono::Months::new(1))
            .and_then(|d| d.with_day(1))
            .expect("a date");
        for (said, value) in [
            ("2027-04-01", "2027-04-01".to_string()),
            ("2027/4/1", "2027-04-01".into()),
            ("2027年4月1日", "2027-04-01".into()),
            ("2027年4月", "2027-04-01".into()),
            ("April 1, 2027", "2027-04-01".into()),
            ("1st of April 2027", "2027-04-01".into()),
            ("Apr 2027", "2027-04-01".into()),
            ("I may start in June 2027", "2027-06-01".into()),
            ("As soon as possible", iso(today)),
            ("ASAP", iso(today)),
            ("immediately", iso(today)),
            ("すぐにでも", iso(today)),
            ("next month", iso(next_month)),
            ("来月から", iso(next_month)),
        ] {
            assert_eq!(
                validate(&date, said, "en").as_deref(),
                Ok(value.as_str()),
                "{said}"
            );
        }
        // a month without its year: its next 1st
        let june = validate(&date, "June 1", "en").expect("a date");
        let june = NaiveDate::parse_from_str(&june, "%Y-%m-%d").expect("iso");
        assert!(
            june >= today && june.month() == 6 && june.day() == 1,
            "{june}"
        );
        for said in ["soon", "when I can", "2027-13-40", "maybe"] {
            assert!(validate(&date, said, "en").is_err(), "{said}");
        }
    }

    /// A number written in words is the number ("five years", 「三年」, 「十五年」); words
    /// that name none are asked again.
    #[test]
    fn a_number_written_in_words_is_the_number() {
        let number = field("number");
        for (said, value) in [
            ("five", "5"),
            ("about five years", "5"),
            ("Twenty-three", "23"),
            ("twenty three", "23"),
            ("eleven", "11"),
            ("none, zero", "0"),
            ("三年", "3"),
            ("十五年です", "15"),
            ("二十年", "20"),
            ("約七年", "7"),
            ("５年", "5"),
            ("7 years", "7"),
        ] {
            assert_eq!(
                validate(&number, said, "en").as_deref(),
                Ok(value),
                "{said}"
            );
        }
        for said in ["a few", "many", "いくつか", "someone"] {
            assert!(validate(&number, said, "en").is_err(), "{said}");
        }
    }

    #[test]
    fn a_date_error_gives_the_example_its_question_gives() {
        let text = "title = \"t\"\nvariant = \"plain\"\n[[fields]]\nid = \"start\"\nlabel = \"Start\"\n\
                    type = \"date\"\nquestion = { en = \"When (for example 2027-04-01)?\", ja = \"いつ（例: 2027-04-01）\" }\n";
        let field = Form::parse("t", text).expect("form").fields.remove(0);
        for lang in ["en", "ja"] {
            let error = validate(&field, "soon", lang).expect_err("not a date");
            assert!(error.contains("2027-04-01"), "{error}");
        }
        // without an example in the question: a date ahead of today
        let plain = field_without_example();
        let error = validate(&plain, "soon", "en").expect_err("not a date");
        let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
        let example = date_example(&plain, "en");
        assert!(error.contains(&example) && example > today, "{error}");
    }

    fn field_without_example() -> FormField {
        let text = "title = \"t\"\nvariant = \"plain\"\n[[fields]]\nid = \"start\"\nlabel = \"Start\"\ntype = \"date\"\n";
        Form::parse("t", text).expect("form").fields.remove(0)
    }

    #[test]
    fn a_forms_own_field_reuses_its_prompt_and_a_stranger_gets_its_own() {
        let form = Form::parse(
            "t",
            "title = \"t\"\nvariant = \"plain\"\n[[fields]]\nid = \"f\"\nlabel = \"Email\"\n\
             type = \"email\"\n[[fields]]\nid = \"g\"\nlabel = \"Name\"\n",
        )
        .expect("form");
        let own = &form.fields[0];
        let first = prompt(&form, own);
        assert!(matches!(first, std::borrow::Cow::Borrowed(_)), "cached");
        assert!(first.contains("\"f\" (Email") && first.contains("g (Name)"));
        assert_eq!(prompt(&form, own), first);
        // a field of the same id that is not the form's own (another form's, a test's)
        let mut stranger = own.clone();
        stranger.label = field("text").label;
        let theirs = prompt(&form, &stranger);
        assert!(matches!(theirs, std::borrow::Cow::Owned(_)));
        assert!(theirs.contains("\"f\" (F;"), "{theirs}");
    }

    #[test]
    fn an_optional_question_is_skipped_in_words() {
        for (said, skip) in [
            ("none", true),
            ("I don't have one", true),
            ("No, sorry", true),
            ("Nothing in particular.", true),
            ("not yet", true),
            ("持っていません", true),
            ("まだないです", true),
            ("GitHubはありません", true),
            ("https://github.com/hanako", false),
            ("Rust and distributed systems", false),
            (
                "No-code tools and the new compiler, mostly from the talks last year",
                false,
            ),
            (
                "ありませんが、ブログならあります: https://example.com",
                false,
            ),
        ] {
            assert_eq!(is_skip(said), skip, "{said}");
        }
    }

    #[test]
    fn values_are_validated_and_normalised_by_type() {
        assert_eq!(
            validate(&field("email"), "it's aiko@example.com thanks", "en"),
            Ok("aiko@example.com".into())
        );
        assert!(validate(&field("email"), "aiko at example", "en").is_err());
        assert_eq!(
            validate(&field("date"), "2025年4月1日", "ja"),
            Ok("2025-04-01".into())
        );
        assert!(validate(&field("date"), "next spring", "en").is_err());
        assert_eq!(
            validate(&field("number"), "about ５ years", "en"),
            Ok("5".into())
        );
        assert_eq!(
            validate(&field("choice"), "リモート", "ja"),
            Ok("remote".into())
        );
        assert_eq!(validate(&field("choice"), "1", "ja"), Ok("remote".into()));
        assert!(validate(&field("choice"), "hybrid", "en").is_err());
        // an option named among other words, and only one
        for (said, value) in [
            ("リモートで", Some("remote")),
            ("出社を希望します", Some("office")),
            ("I'd prefer remote work, please", Some("remote")),
            ("Office.", Some("office")),
            ("remote or office", None),
            ("not remote", None),
            ("リモートではなく出社", None),
            ("リモート以外", None),
            ("hybrid", None),
        ] {
            assert_eq!(
                validate(&field("choice"), said, "en").ok().as_deref(),
                value,
                "{said}"
            );
        }
        assert_eq!(
            validate(&field("multi_choice"), "office, リモート, office", "en"),
            Ok("office, remote".into())
        );
        assert!(validate(&field("multi_choice"), "office, hybrid", "en").is_err());
        assert!(validate(&field("multi_choice"), " , ", "en").is_err());
        assert!(validate(&field("phone"), "12", "en").is_err());
        assert_eq!(
            validate(&field("phone"), "+81 90-1234-5678", "en"),
            Ok("+81 90-1234-5678".into())
        );
        assert!(validate(&field("url"), "my site", "en").is_err());
        assert!(validate(&field("text"), "   ", "en").is_err());
    }
}

//! Forms as files: [`Form`] is one `config/forms/<id>.toml` — variant (`application` with
//! QuickCheck and Auditor, or `plain`), title, languages, fields with their facts (seed 001's
//! `SessionForm` / `FormField` / `FactDefinition`), prohibited topics and tone rules.
//!
//! [`load_forms`] reads a folder; [`Form::validate`] is what `kaiwa check` reports (unknown
//! types, duplicate ids, a required field without a question, a template question that fails
//! the deterministic QuickCheck). The default prohibited hiring topics live here, with
//! trigger words in English and Japanese.

use super::compliance::Screener;
pub use super::compliance::{ProhibitedTopic, ToneRules, default_prohibited_topics};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// Text in several languages, or one text for all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LocalText {
    One(String),
    Many(BTreeMap<String, String>),
}

impl LocalText {
    /// The text in `lang`, else English, else any.
    pub fn get(&self, lang: &str) -> &str {
        match self {
            LocalText::One(s) => s,
            LocalText::Many(m) => m
                .get(lang)
                .or_else(|| m.get("en"))
                .or_else(|| m.values().next())
                .map(String::as_str)
                .unwrap_or_default(),
        }
    }

    /// Whether a text exists for `lang` (a single text counts for every language).
    pub fn has(&self, lang: &str) -> bool {
        match self {
            LocalText::One(s) => !s.trim().is_empty(),
            LocalText::Many(m) => m.get(lang).is_some_and(|s| !s.trim().is_empty()),
        }
    }
}

impl Default for LocalText {
    fn default() -> Self {
        LocalText::One(String::new())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// QuickCheck before every question, Auditor at the end (seed 000).
    Application,
    /// Reviewer extracts values and facts; a confirmation step at the end (seed 001).
    Plain,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    Text,
    Email,
    Phone,
    Number,
    Date,
    Url,
    Choice,
    /// Several of the options (a multi-select; stored as the values joined with ", ").
    MultiChoice,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChoiceOption {
    pub value: String,
    pub label: LocalText,
}

/// What a field must establish (seed 001's `FactDefinition`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FactDefinition {
    pub key: String,
    pub fact: String,
    pub done_criteria: String,
    #[serde(default)]
    pub questioning_hints: Option<LocalText>,
    /// Words whose presence in an answer shows the fact (case-insensitive, whole words):
    /// with them the rule-based floor, which cannot read an answer, asks one follow-up for
    /// the fact when an answer has none of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormField {
    pub id: String,
    pub label: LocalText,
    #[serde(default)]
    pub intent: Option<String>,
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub sort_order: i64,
    #[serde(rename = "type", default = "default_type")]
    pub field_type: String,
    /// The template question (also the fallback after blocked drafts).
    #[serde(default)]
    pub question: Option<LocalText>,
    /// An extra validation pattern (regular expression) for the value.
    #[serde(default)]
    pub pattern: Option<String>,
    #[serde(default)]
    pub options: Vec<ChoiceOption>,
    #[serde(default = "default_follow_ups")]
    pub max_follow_ups: u32,
    #[serde(default)]
    pub facts: Vec<FactDefinition>,
}

fn default_type() -> String {
    "text".into()
}

fn default_follow_ups() -> u32 {
    3
}

impl FormField {
    /// The field's type; unknown names are reported by [`Form::validate`] and read as text.
    pub fn kind(&self) -> FieldType {
        parse_type(&self.field_type).unwrap_or(FieldType::Text)
    }

    /// The template question in `lang`, or one made from the label.
    pub fn template_question(&self, lang: &str) -> String {
        match &self.question {
            Some(q) if q.has(lang) || matches!(q, LocalText::Many(_)) => q.get(lang).to_string(),
            Some(LocalText::One(q)) => q.clone(),
            _ => {
                let label = self.label.get(lang);
                if lang == "ja" {
                    format!("{label}を教えてください。")
                } else {
                    format!("Could you tell me your {}?", label.to_lowercase())
                }
            }
        }
    }
}

fn parse_type(name: &str) -> Option<FieldType> {
    Some(match name {
        "text" => FieldType::Text,
        "email" => FieldType::Email,
        "phone" => FieldType::Phone,
        "number" => FieldType::Number,
        "date" => FieldType::Date,
        "url" => FieldType::Url,
        "choice" => FieldType::Choice,
        "multi_choice" => FieldType::MultiChoice,
        _ => return None,
    })
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Form {
    /// Defaults to the file name.
    #[serde(default)]
    pub id: String,
    pub title: LocalText,
    pub variant: Variant,
    #[serde(default = "default_languages")]
    pub languages: Vec<String>,
    pub fields: Vec<FormField>,
    /// `None`: the default hiring list.
    #[serde(default)]
    pub prohibited_topics: Option<Vec<ProhibitedTopic>>,
    #[serde(default)]
    pub tone: ToneRules,
    /// What the applicant is told of the team's decision (`approved`, `rejected`) in each
    /// language (`[decisions.approved] en = "…"`); a decision without one tells nothing.
    #[serde(default)]
    pub decisions: BTreeMap<String, LocalText>,
    /// The topics' triggers and the banned phrases as one automaton, built on first use.
    #[serde(skip)]
    pub(crate) screener: Derived<std::sync::Arc<Screener>>,
    /// QuickCheck's system prompt, built on first use (it depends on the form alone).
    #[serde(skip)]
    pub(crate) quick_check_prompt: Derived<String>,
    /// The Reviewer's system prompt for each field, built on first use.
    #[serde(skip)]
    pub(crate) reviewer_prompts: Derived<std::collections::HashMap<String, String>>,
}

/// Something derived from a form (its [`Screener`], the
/// agents' prompts), built on first use and kept with it; it takes no part in comparing
/// forms.
#[derive(Clone)]
pub(crate) struct Derived<T>(pub(crate) std::sync::OnceLock<T>);

impl<T> Default for Derived<T> {
    fn default() -> Self {
        Derived(std::sync::OnceLock::new())
    }
}

impl<T> PartialEq for Derived<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> Eq for Derived<T> {}

impl<T> std::fmt::Debug for Derived<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Derived")
    }
}

fn default_languages() -> Vec<String> {
    vec!["en".into()]
}

impl Form {
    pub fn parse(id: &str, text: &str) -> Result<Form, String> {
        let mut form: Form = toml::from_str(text).map_err(|e| format!("form {id}: {e}"))?;
        if form.id.is_empty() {
            form.id = id.to_string();
        }
        Ok(form)
    }

    pub fn field(&self, id: &str) -> Option<&FormField> {
        self.fields.iter().find(|f| f.id == id)
    }

    /// The topics in force: the form's own, or the default hiring list (built once).
    pub fn topics(&self) -> &[ProhibitedTopic] {
        static DEFAULT: std::sync::LazyLock<Vec<ProhibitedTopic>> =
            std::sync::LazyLock::new(default_prohibited_topics);
        self.prohibited_topics.as_deref().unwrap_or(&DEFAULT)
    }

    /// The topics' triggers and the banned phrases as one automaton, built on first use.
    pub(crate) fn screener(&self) -> &Screener {
        self.screener
            .0
            .get_or_init(|| std::sync::Arc::new(Screener::new(self.topics(), &self.tone)))
    }

    /// Fields by `sort_order` (then file order).
    pub fn sorted_field_ids(&self) -> Vec<String> {
        let mut fields: Vec<(usize, &FormField)> = self.fields.iter().enumerate().collect();
        fields.sort_by_key(|(i, f)| (f.sort_order, *i));
        fields.into_iter().map(|(_, f)| f.id.clone()).collect()
    }

    /// Every problem `kaiwa check` reports for this form; empty when it is valid.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.fields.is_empty() {
            problems.push("the form has no fields".to_string());
        }
        if self.languages.is_empty() {
            problems.push("the form names no language".to_string());
        }
        for lang in &self.languages {
            if lang != "en" && lang != "ja" {
                problems.push(format!("language {lang:?} is not supported (en, ja)"));
            }
        }
        let mut seen = HashSet::new();
        for field in &self.fields {
            if !seen.insert(field.id.as_str()) {
                problems.push(format!("duplicate field id {:?}", field.id));
            }
            if field.id.trim().is_empty() {
                problems.push("a field has an empty id".into());
            }
            match parse_type(&field.field_type) {
                None => problems.push(format!(
                    "field {:?} has unknown type {:?} (text, email, phone, number, date, url, choice, multi_choice)",
                    field.id, field.field_type
                )),
                Some(FieldType::Choice | FieldType::MultiChoice) if field.options.is_empty() => {
                    problems.push(format!("choice field {:?} has no options", field.id));
                }
                Some(_) => {}
            }
            if let Some(p) = &field.pattern
                && let Err(e) = regex::Regex::new(p)
            {
                problems.push(format!("field {:?} has an invalid pattern: {e}", field.id));
            }
            let mut fact_keys = HashSet::new();
            for fact in &field.facts {
                if !fact_keys.insert(fact.key.as_str()) {
                    problems.push(format!(
                        "field {:?} has duplicate fact key {:?}",
                        field.id, fact.key
                    ));
                }
            }
            for lang in &self.languages {
                if field.required && !field.question.as_ref().is_some_and(|q| q.has(lang)) {
                    problems.push(format!(
                        "required field {:?} has no question in {lang}",
                        field.id
                    ));
                    continue;
                }
                if self.variant == Variant::Application {
                    let question = field.template_question(lang);
                    // QuickCheck's deterministic layer for a question of this form's own
                    // field with nothing answered yet: the topics and tone alone
                    let violations = self.screener().screen(self.topics(), &self.tone, &question);
                    for v in violations {
                        problems.push(format!(
                            "the {lang} question of field {:?} fails QuickCheck: {}",
                            field.id, v.message
                        ));
                    }
                }
            }
        }
        problems
    }
}

/// Reads every `*.toml` in `dir` (sorted by name); an unreadable or invalid file is an error.
pub fn load_forms(dir: &Path) -> Result<Vec<Form>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut paths: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    let mut forms = Vec::new();
    for path in paths {
        let id = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        forms.push(Form::parse(&id, &text)?);
    }
    Ok(forms)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORM: &str = r#"
        title = { en = "Test", ja = "テスト" }
        variant = "application"
        languages = ["en", "ja"]
        [[fields]]
        id = "email"
        label = { en = "Email", ja = "メール" }
        required = true
        type = "email"
        question = { en = "What is your email address?", ja = "メールアドレスを教えてください。" }
    "#;

    #[test]
    fn a_good_form_validates() {
        let form = Form::parse("t", FORM).expect("parses");
        assert_eq!(form.id, "t");
        assert!(form.validate().is_empty(), "{:?}", form.validate());
    }

    #[test]
    fn problems_are_reported() {
        let text = FORM.replace("type = \"email\"", "type = \"colour\"")
            + r#"
        [[fields]]
        id = "email"
        label = "Age"
        required = true
        question = { en = "How old are you?" }
        "#;
        let form = Form::parse("t", &text).expect("parses");
        let problems = form.validate().join("\n");
        assert!(problems.contains("unknown type \"colour\""), "{problems}");
        assert!(
            problems.contains("duplicate field id \"email\""),
            "{problems}"
        );
        assert!(problems.contains("has no question in ja"), "{problems}");
        assert!(problems.contains("fails QuickCheck"), "{problems}");
    }
}

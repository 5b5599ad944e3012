//! Compliance rules every text sent to an applicant passes: the prohibited hiring topics
//! (the default list, with trigger words in English and Japanese, or a form's own), the tone
//! rules, and the [`Screener`] that finds both in one pass. QuickCheck
//! ([`super::quick_check`]) builds on it; forms ([`super::form`]) hold the rules.

use aho_corasick::AhoCorasick;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A topic an interviewer must never ask about, with its trigger words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProhibitedTopic {
    pub id: String,
    pub label: String,
    #[serde(default)]
    pub triggers_en: Vec<String>,
    #[serde(default)]
    pub triggers_ja: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToneRules {
    /// Phrases a question must not contain (rude, pressuring, …).
    #[serde(default)]
    pub banned_phrases: Vec<String>,
    /// Guidance for the model (e.g. "polite, use です/ます").
    #[serde(default)]
    pub guidance: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ViolationType {
    ProhibitedTopic,
    DuplicateQuestion,
    ToneViolation,
    NoIntentBinding,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Violation {
    #[serde(rename = "type")]
    pub kind: ViolationType,
    pub message: String,
}

/// Phrases that are never acceptable in a question, whatever the form says.
const DEFAULT_BANNED: &[&str] = &[
    "stupid",
    "idiot",
    "hurry up",
    "shut up",
    "バカ",
    "馬鹿",
    "早くしろ",
    "さっさと",
];

/// `s` in lowercase, without a copy when it already is (trigger words usually are).
fn lowercase(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().any(char::is_uppercase) {
        std::borrow::Cow::Owned(s.to_lowercase())
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// What a pattern of the [`Screener`] stands for.
enum Trigger {
    /// A topic's trigger; `rank` orders the topic's triggers (English first, then Japanese).
    Topic {
        topic: usize,
        rank: usize,
        /// English triggers count only at a word start.
        word_start: bool,
    },
    Banned(usize),
}

/// A form's trigger words and banned phrases, lowercase, in one Aho-Corasick automaton:
/// one pass over a question instead of a substring search per word (QuickCheck runs before
/// every question).
pub struct Screener {
    automaton: Option<AhoCorasick>,
    /// What each pattern of the automaton stands for.
    triggers: Vec<Trigger>,
}

/// A topic's trigger words in rank order: English, then Japanese.
fn trigger_words(topic: &ProhibitedTopic) -> impl Iterator<Item = &String> {
    topic.triggers_en.iter().chain(&topic.triggers_ja)
}

/// The phrases no question may use: the defaults, then the form's own.
fn banned_phrases(tone: &ToneRules) -> impl Iterator<Item = &str> {
    DEFAULT_BANNED
        .iter()
        .copied()
        .chain(tone.banned_phrases.iter().map(String::as_str))
}

impl Screener {
    pub fn new(topics: &[ProhibitedTopic], tone: &ToneRules) -> Screener {
        let mut patterns = Vec::new();
        let mut triggers = Vec::new();
        for (topic, t) in topics.iter().enumerate() {
            let english = t.triggers_en.len();
            for (rank, word) in trigger_words(t).enumerate() {
                let word_start = rank < english;
                let lower = lowercase(word).into_owned();
                if !lower.is_empty() {
                    patterns.push(lower);
                    triggers.push(Trigger::Topic {
                        topic,
                        rank,
                        word_start,
                    });
                }
            }
        }
        for (i, phrase) in banned_phrases(tone).enumerate() {
            patterns.push(lowercase(phrase).into_owned());
            triggers.push(Trigger::Banned(i));
        }
        Screener {
            automaton: AhoCorasick::new(&patterns)
                .inspect_err(|e| tracing::error!(error = %e, "trigger automaton not built"))
                .ok(),
            triggers,
        }
    }

    /// Prohibited topics and tone only: for any text sent to an applicant (greetings too).
    /// `topics` and `tone` are those the screener was built from.
    pub fn screen(
        &self,
        topics: &[ProhibitedTopic],
        tone: &ToneRules,
        text: &str,
    ) -> Vec<Violation> {
        let lower = text.to_lowercase();
        // the best-ranked trigger found per topic, and the banned phrases found
        let mut topic_hits: Vec<Option<usize>> = vec![None; topics.len()];
        // an empty phrase is in every text (as `str::contains` has it)
        let mut banned_hits: Vec<bool> = banned_phrases(tone).map(str::is_empty).collect();
        if let Some(automaton) = &self.automaton {
            for m in automaton.find_overlapping_iter(lower.as_str()) {
                match self.triggers[m.pattern().as_usize()] {
                    Trigger::Topic {
                        topic,
                        rank,
                        word_start,
                    } => {
                        let at_word_start = lower[..m.start()]
                            .chars()
                            .next_back()
                            .is_none_or(|c| !c.is_alphanumeric());
                        if (!word_start || at_word_start)
                            && topic_hits[topic].is_none_or(|best| rank < best)
                        {
                            topic_hits[topic] = Some(rank);
                        }
                    }
                    Trigger::Banned(i) => banned_hits[i] = true,
                }
            }
        }
        let mut violations = Vec::new();
        for (topic, hit) in topics.iter().zip(&topic_hits) {
            if let Some(word) = hit.and_then(|rank| trigger_words(topic).nth(rank)) {
                violations.push(Violation {
                    kind: ViolationType::ProhibitedTopic,
                    message: format!("asks about a prohibited topic ({}): {word:?}", topic.label),
                });
            }
        }
        for (phrase, hit) in banned_phrases(tone).zip(banned_hits) {
            if hit {
                violations.push(Violation {
                    kind: ViolationType::ToneViolation,
                    message: format!("uses a phrase the tone rules forbid: {phrase:?}"),
                });
            }
        }
        violations
    }
}

fn topic(id: &str, label: &str, en: &[&str], ja: &[&str]) -> ProhibitedTopic {
    ProhibitedTopic {
        id: id.into(),
        label: label.into(),
        triggers_en: en.iter().map(|s| s.to_string()).collect(),
        triggers_ja: ja.iter().map(|s| s.to_string()).collect(),
    }
}

/// Topics a hiring interview must not ask about (equal-opportunity rules in Japan, the US
/// and the EU agree on these), with trigger words in English and Japanese.
pub fn default_prohibited_topics() -> Vec<ProhibitedTopic> {
    vec![
        topic(
            "age",
            "age",
            &["how old", "your age", "age?", "year of birth", "born in"],
            &["年齢", "何歳", "おいくつ", "生まれ年"],
        ),
        topic(
            "date_of_birth",
            "date of birth",
            &["date of birth", "birthday", "birth date"],
            &["生年月日", "誕生日"],
        ),
        topic(
            "marital_status",
            "marital status",
            &[
                "married", "marital", "spouse", "husband", "wife", "divorced", "single?",
            ],
            &["結婚", "既婚", "未婚", "配偶者", "離婚", "独身"],
        ),
        topic(
            "family_plans",
            "pregnancy and family plans",
            &[
                "pregnan",
                "children",
                "kids",
                "family plans",
                "maternity",
                "childcare",
            ],
            &[
                "妊娠",
                "出産",
                "子供",
                "子ども",
                "お子さん",
                "家族計画",
                "育児",
            ],
        ),
        topic(
            "religion",
            "religion",
            &["religio", "church", "mosque", "temple", "pray", "faith"],
            &["宗教", "信仰", "教会", "寺院", "宗派"],
        ),
        topic(
            "ethnicity",
            "ethnicity and race",
            &["ethnic", "race", "racial", "skin colo"],
            &["人種", "民族", "肌の色"],
        ),
        topic(
            "national_origin",
            "national origin",
            &[
                "national origin",
                "where were you born",
                "your parents from",
                "native country",
                "ancestry",
            ],
            &["出身国", "本籍", "出生地", "国籍", "ご両親の出身"],
        ),
        topic(
            "health",
            "health and disability",
            &[
                "disabilit",
                "health condition",
                "illness",
                "medical",
                "medication",
                "sick leave history",
            ],
            &["障害", "病気", "持病", "健康状態", "病歴", "通院"],
        ),
        topic(
            "sexual_orientation",
            "sexual orientation",
            &[
                "sexual orientation",
                "gay",
                "lesbian",
                "straight?",
                "boyfriend",
                "girlfriend",
                "partner's gender",
            ],
            &["性的指向", "恋人", "同性愛"],
        ),
        topic(
            "political_views",
            "political views",
            &["politic", "vote for", "party member"],
            &["政治", "支持政党", "投票"],
        ),
        topic(
            "union_membership",
            "union membership",
            &["union member", "labor union", "trade union"],
            &["労働組合", "組合員"],
        ),
    ]
}

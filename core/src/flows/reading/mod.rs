//! The reading companion (seed 004, Knowva): the `reading` flow around the Reading agent, with
//! the BookGuide for expert questions and the local [`catalogue::Catalogue`].
//!
//! A session is about one book (`/reading start <title>`); the record's status
//! (`not_started | reading | completed`) decides the conversation, and its interaction mode
//! (`freeform | guided`) decides whether options are offered. Without a model every message
//! is still logged as an insight (kind by rules, or chosen with buttons in guided mode),
//! moods are chosen with buttons and the status changes by command or by rules.
//! Beside it: [`onboarding`], [`mentor`] and [`recommendation`], each its own flow.

pub mod book_guide;
pub mod catalogue;
mod inputs;
pub mod mentor;
pub mod onboarding;
pub mod reading_agent;
pub mod recommendation;

use crate::flow::{FlowError, TurnContext, TurnOutput};
use crate::i18n::pick;
use crate::message::{OptionItem, Outgoing};
use crate::store::StateChange;
use crate::store::reading::{
    InsightKind, InteractionMode, MoodPhase, ProfileKind, ReadingChange, ReadingRecord,
    ReadingStatus,
};
use book_guide::BookGuide;
use catalogue::Catalogue;
use reading_agent::ReadingWork;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub const ID: &str = "reading";

pub struct ReadingFlow {
    catalogue: Arc<Catalogue>,
    guide: Arc<BookGuide>,
    /// The books API (`[books_api]`): a book the catalogue lacks is looked up there.
    books: Option<Arc<crate::search::BooksApi>>,
}

/// The session user's reading records, most recently updated first.
async fn records(ctx: &TurnContext<'_>) -> Result<Vec<ReadingRecord>, FlowError> {
    let key = &ctx.session.key;
    Ok(ctx.store.reading_records(key.platform, &key.user).await?)
}

/// The book the session user logged last, if any.
async fn latest_record(ctx: &TurnContext<'_>) -> Result<Option<ReadingRecord>, FlowError> {
    Ok(records(ctx).await?.into_iter().next())
}

impl ReadingFlow {
    pub fn new(catalogue: Arc<Catalogue>, guide: Arc<BookGuide>) -> Self {
        ReadingFlow {
            catalogue,
            guide,
            books: None,
        }
    }

    /// Looks up books the catalogue lacks in `api`.
    pub fn with_books(mut self, api: Arc<crate::search::BooksApi>) -> Self {
        self.books = Some(api);
        self
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Awaiting {
    Title,
    Mood { phase: MoodPhase },
    InsightKind { text: String },
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct ReadingState {
    title: Option<String>,
    status: Option<ReadingStatus>,
    mode: Option<InteractionMode>,
    awaiting: Option<Awaiting>,
    /// The greeting by the rules asked why this book: the next text is the answer.
    #[serde(default)]
    reason_asked: bool,
    /// The mood, ignored once for a note, was asked again: the next note drops it.
    #[serde(default)]
    mood_asked_again: bool,
}

fn status_name(status: ReadingStatus, lang: &str) -> String {
    match status {
        ReadingStatus::NotStarted => pick(lang, "not started", "読書前"),
        ReadingStatus::Reading => pick(lang, "reading", "読書中"),
        ReadingStatus::Completed => pick(lang, "completed", "読了"),
    }
}

fn kind_name(kind: InsightKind, lang: &str) -> String {
    match kind {
        InsightKind::Learning => pick(lang, "learning", "学び"),
        InsightKind::Impression => pick(lang, "impression", "感想"),
        InsightKind::Question => pick(lang, "question", "疑問"),
        InsightKind::Connection => pick(lang, "connection", "つながり"),
    }
}

impl ReadingFlow {
    fn change(out: &mut TurnOutput, change: ReadingChange) {
        out.change(StateChange::Reading { change });
    }

    /// The session user's record of `title`, if any.
    async fn record_of(
        ctx: &TurnContext<'_>,
        title: &str,
    ) -> Result<Option<ReadingRecord>, FlowError> {
        Ok(records(ctx).await?.into_iter().find(|r| r.title == title))
    }

    /// Opens (or reopens) the record of `title` and greets according to its status.
    async fn open(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut ReadingState,
        title: &str,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        let title = catalogue::clean_title(title.trim().trim_start_matches("start "));
        let book = self.catalogue.find(&title);
        // a book the catalogue lacks: its author (and more) from the books API
        let found = match (book, &self.books) {
            (None, Some(api)) => match api.find(&title).await {
                Ok(found) => found,
                Err(e) => {
                    tracing::info!(error = %e, "the books API could not look the book up");
                    out.say(crate::i18n::pick(
                        ctx.language(),
                        "(The books API is unavailable right now, so I keep the title as you wrote it.)",
                        "（書籍APIが現在利用できないため、書名は入力どおりに記録します。）",
                    ));
                    None
                }
            },
            _ => None,
        };
        let (title, author) = match (book, &found) {
            (Some(b), _) => (b.title.clone(), Some(b.author.clone())),
            (None, Some(info)) => (info.title.clone(), info.author.clone()),
            (None, None) => (title, None),
        };
        let existing = Self::record_of(ctx, &title).await?;
        if let (Some(info), None, Some(api)) = (&found, &existing, &self.books) {
            let lang = ctx.language().to_string();
            let label = api.provider().label();
            out.say(crate::i18n::pick(
                &lang,
                &format!("Found on {label}: «{}».", info.describe()),
                &format!("{label}で見つけました: «{}»", info.describe()),
            ));
        }
        let details = found.as_ref().and_then(|info| {
            let source = self.books.as_ref().map(|api| api.provider().label());
            serde_json::to_string(&serde_json::json!({
                "year": info.year,
                "subjects": info.subjects,
                "link": info.link,
                "source": source,
            }))
            .ok()
        });
        Self::change(
            out,
            ReadingChange::OpenRecord {
                title: title.clone(),
                author,
                details,
            },
        );
        st.status = Some(
            existing
                .as_ref()
                .map_or(ReadingStatus::NotStarted, |r| r.status),
        );
        st.mode = Some(
            existing
                .as_ref()
                .map_or(InteractionMode::Freeform, |r| r.mode),
        );
        st.title = Some(title);
        st.awaiting = None;
        self.greet(ctx, st, out).await
    }

    /// The seed's `__session_init__`: a greeting for the book and its status.
    async fn greet(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut ReadingState,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        if ctx.models.for_agent(reading_agent::AGENT).is_some() {
            return self.run_agent(ctx, st, "__session_init__", out).await;
        }
        self.greet_floor(ctx, st, out).await
    }

    /// The greeting of the rules, with what the reader said of the book before.
    async fn greet_floor(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut ReadingState,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        let earlier = match Self::record_of(ctx, st.title.as_deref().unwrap_or_default()).await? {
            Some(record) => Earlier {
                talked: !ctx.store.insights(record.id).await?.is_empty(),
                moods: ctx
                    .store
                    .moods(record.id)
                    .await?
                    .into_iter()
                    .map(|m| m.phase)
                    .collect(),
            },
            None => Earlier::default(),
        };
        self.greet_by_rules(ctx, st, &earlier, out);
        Ok(())
    }

    /// Keeps `text`, the answer to "what made you choose it?", as the reader's goal (seed
    /// 004: a profile entry).
    fn keep_reason(out: &mut TurnOutput, text: &str) {
        Self::change(
            out,
            ReadingChange::AddProfileEntry {
                kind: ProfileKind::Goal,
                text: text.to_string(),
            },
        );
    }

    /// Records the mood `value` of `phase` and says so.
    fn record_mood(out: &mut TurnOutput, title: String, phase: MoodPhase, value: &str, lang: &str) {
        let (label, score) = reading_agent::mood_options("en")
            .into_iter()
            .find(|(o, _)| o.value == value)
            .map_or((value.to_string(), 3), |(o, s)| (o.value, s));
        Self::change(
            out,
            ReadingChange::AddMood {
                title,
                phase,
                label,
                score,
            },
        );
        out.say(match phase {
            MoodPhase::Before => pick(
                lang,
                "Noted. Enjoy the book — tell me about it any time.",
                "記録しました。読書を楽しんでください。いつでも感想を聞かせてください。",
            ),
            MoodPhase::After => pick(
                lang,
                "Noted. Thank you for reading with me!",
                "記録しました。一緒に読んでくれてありがとう。",
            ),
        });
    }

    /// The greeting of the rules: by the book's status, and what the reader said of it
    /// before (`earlier`): a question answered is not asked again.
    fn greet_by_rules(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut ReadingState,
        earlier: &Earlier,
        out: &mut TurnOutput,
    ) {
        let lang = ctx.language().to_string();
        let title = self
            .catalogue
            .title_in(st.title.as_deref().unwrap_or_default(), &lang);
        let before = earlier.moods.contains(&MoodPhase::Before);
        match st.status.unwrap_or(ReadingStatus::NotStarted) {
            ReadingStatus::NotStarted if earlier.talked || before => {
                out.say(pick(
                    &lang,
                    &format!("Welcome back to «{title}»! Tell me about it any time: an impression, something you learned, a question."),
                    &format!("『{title}』の続きですね。感想、学び、疑問など、いつでも聞かせてください。"),
                ));
                if !before {
                    self.ask_mood(st, MoodPhase::Before, &lang, out);
                }
            }
            ReadingStatus::NotStarted => {
                out.say(pick(
                    &lang,
                    &format!("Let's get ready for «{title}». What made you choose it?"),
                    &format!("『{title}』を読む準備をしましょう。この本を選んだ理由は何ですか？"),
                ));
                st.reason_asked = true;
                self.ask_mood(st, MoodPhase::Before, &lang, out);
            }
            ReadingStatus::Reading => {
                out.say(pick(
                    &lang,
                    &format!("How is «{title}» going? Share an impression, something you learned, a question or a connection."),
                    &format!("『{title}』はいかがですか？感想、学び、疑問、ほかの本とのつながりなど、何でも聞かせてください。"),
                ));
            }
            ReadingStatus::Completed => {
                out.say(pick(
                    &lang,
                    &format!("You finished «{title}»! Looking back, what stays with you?"),
                    &format!(
                        "『{title}』を読み終えましたね。振り返って、心に残っていることは何ですか？"
                    ),
                ));
                if !earlier.moods.contains(&MoodPhase::After) {
                    self.ask_mood(st, MoodPhase::After, &lang, out);
                }
            }
        }
    }

    fn ask_mood(&self, st: &mut ReadingState, phase: MoodPhase, lang: &str, out: &mut TurnOutput) {
        st.awaiting = Some(Awaiting::Mood { phase });
        st.mood_asked_again = false;
        out.options(
            match phase {
                MoodPhase::Before => pick(lang, "How do you feel right now?", "今の気分は？"),
                MoodPhase::After => pick(
                    lang,
                    "How do you feel after reading?",
                    "読み終えた今の気分は？",
                ),
            },
            reading_agent::mood_options(lang)
                .into_iter()
                .map(|(o, _)| o)
                .collect(),
            false,
        );
    }

    async fn context_text(
        &self,
        ctx: &TurnContext<'_>,
        st: &ReadingState,
    ) -> Result<String, FlowError> {
        let title = st.title.clone().unwrap_or_default();
        let key = &ctx.session.key;
        let mut text = format!(
            "Book: {title}\nStatus: {}\nMode: {}\n",
            st.status.unwrap_or(ReadingStatus::NotStarted).as_str(),
            st.mode.unwrap_or(InteractionMode::Freeform).as_str()
        );
        if let Some(book) = self.catalogue.find(&title) {
            text.push_str(&format!("Catalogue: {}\n", book.describe()));
        }
        if let Some(record) = Self::record_of(ctx, &title).await? {
            for i in ctx.store.insights(record.id).await?.iter().rev().take(10) {
                text.push_str(&format!("Insight ({}): {}\n", i.kind.as_str(), i.text));
            }
        }
        for p in ctx.store.profile_entries(key.platform, &key.user).await? {
            text.push_str(&format!("Profile ({}): {}\n", p.kind.as_str(), p.text));
        }
        Ok(text)
    }

    async fn run_agent(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut ReadingState,
        text: &str,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        let Some(model) = ctx.models.for_agent(reading_agent::AGENT) else {
            return Ok(());
        };
        let lang = ctx.language().to_string();
        let mode = st.mode.unwrap_or(InteractionMode::Freeform);
        let work = ReadingWork {
            title: st.title.clone().unwrap_or_default(),
            status: st.status.unwrap_or(ReadingStatus::NotStarted),
            mode,
            context: self.context_text(ctx, st).await?,
            changes: Vec::new(),
            options: None,
            guide_answers: Vec::new(),
        };
        let tools = reading_agent::tools(mode, self.guide.clone(), ctx.models, ctx.ledger, &lang);
        match reading_agent::run(model.as_ref(), work, tools, &lang, text, ctx.ledger).await {
            Ok(result) => {
                let work = result.state;
                st.status = Some(work.status);
                for change in work.changes {
                    Self::change(out, change);
                }
                st.awaiting = None;
                match work.options {
                    // the tool is only offered in guided mode; this check keeps it so
                    Some(options) if mode == InteractionMode::Guided => {
                        out.outgoing.push(Outgoing::Options(options))
                    }
                    _ => {
                        if !result.response_text.trim().is_empty() {
                            out.say(result.response_text);
                        }
                    }
                }
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "the Reading agent failed; using rules");
                if text == "__session_init__" {
                    // the greeting a conversation without a model gets: the book, its
                    // status and, before reading, the mood options
                    self.greet_floor(ctx, st, out).await
                } else {
                    self.floor_text(ctx, st, text, out).await
                }
            }
        }
    }

    /// The rule-based handling of a message about the book.
    /// An expert question: the BookGuide's answer (cited, or "I have no source"), and the
    /// question kept as a question note.
    async fn ask_guide(
        &self,
        ctx: &TurnContext<'_>,
        st: &ReadingState,
        text: &str,
        out: &mut TurnOutput,
    ) {
        let lang = ctx.language().to_string();
        let title = st.title.clone().unwrap_or_default();
        // a book the catalogue lacks is named with the author the books API gave
        let author = match self.catalogue.find(&title) {
            Some(_) => None,
            None => Self::record_of(ctx, &title)
                .await
                .ok()
                .flatten()
                .and_then(|r| r.author),
        };
        let about = self.guide.subject(&title, author.as_deref());
        let answer = self
            .guide
            // (kept as a question note below)
            .answer(text, (Some(&about), true), ctx.models, ctx.ledger, &lang)
            .await;
        Self::change(
            out,
            ReadingChange::AddInsight {
                title,
                kind: InsightKind::Question,
                text: text.to_string(),
            },
        );
        out.say(answer.text);
    }

    /// Shows again what was pending before a question was answered in between: the mood,
    /// the kind of a note, or the options on screen.
    fn ask_again(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut ReadingState,
        lang: &str,
        out: &mut TurnOutput,
    ) {
        match st.awaiting.clone() {
            Some(Awaiting::Mood { phase }) => self.ask_mood(st, phase, lang, out),
            Some(Awaiting::InsightKind { text }) => self.ask_kind(st, &text, lang, out),
            Some(Awaiting::Title) | None => {
                if let Some(pending) = &ctx.session.pending_options {
                    out.outgoing.push(Outgoing::Options(pending.clone()));
                }
            }
        }
    }

    /// What kind of note `text` is, asked with buttons (guided mode).
    fn ask_kind(&self, st: &mut ReadingState, text: &str, lang: &str, out: &mut TurnOutput) {
        st.awaiting = Some(Awaiting::InsightKind {
            text: text.to_string(),
        });
        out.options(
            pick(
                lang,
                "What kind of note is this?",
                "これはどんなメモですか？",
            ),
            [
                InsightKind::Impression,
                InsightKind::Learning,
                InsightKind::Question,
                InsightKind::Connection,
            ]
            .iter()
            .map(|k| OptionItem::new(k.as_str(), kind_name(*k, lang)))
            .collect(),
            false,
        );
    }

    async fn floor_text(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut ReadingState,
        text: &str,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        let lang = ctx.language().to_string();
        let title = st.title.clone().unwrap_or_default();
        if let Some(status) = reading_agent::detect_status(text).filter(|s| Some(*s) != st.status) {
            return self.set_status(ctx, st, status, out).await;
        }
        if reading_agent::is_expert_question(text) {
            self.ask_guide(ctx, st, text, out).await;
            return Ok(());
        }
        if st.mode == Some(InteractionMode::Guided) {
            self.ask_kind(st, text, &lang, out);
            return Ok(());
        }
        let kind = reading_agent::floor_kind(text);
        Self::change(
            out,
            ReadingChange::AddInsight {
                title,
                kind,
                text: text.to_string(),
            },
        );
        out.say(pick(
            &lang,
            &format!(
                "Saved as {}. What else comes to mind?",
                kind_name(kind, &lang)
            ),
            &format!(
                "{}として記録しました。ほかに思ったことはありますか？",
                kind_name(kind, &lang)
            ),
        ));
        Ok(())
    }

    async fn set_status(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut ReadingState,
        status: ReadingStatus,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        let lang = ctx.language().to_string();
        let title = st.title.clone().unwrap_or_default();
        Self::change(out, ReadingChange::SetStatus { title, status });
        st.status = Some(status);
        out.say(pick(
            &lang,
            &format!("Status set to {}.", status_name(status, &lang)),
            &format!("ステータスを「{}」にしました。", status_name(status, &lang)),
        ));
        self.greet_floor(ctx, st, out).await
    }

    async fn insights_markdown(
        &self,
        ctx: &TurnContext<'_>,
        st: &ReadingState,
    ) -> Result<String, FlowError> {
        let lang = ctx.language();
        let title = st.title.clone().unwrap_or_default();
        let insights = match Self::record_of(ctx, &title).await? {
            Some(r) => ctx.store.insights(r.id).await?,
            None => Vec::new(),
        };
        // the title the member knows (こころ for a Japanese reader of Kokoro)
        let title = self.catalogue.title_in(&title, lang);
        if insights.is_empty() {
            return Ok(pick(
                lang,
                &format!("No insights for «{title}» yet."),
                &format!("『{title}』の記録はまだありません。"),
            ));
        }
        let mut md = format!("## {title}\n");
        for i in insights {
            md.push_str(&format!(
                "- **{}** {} ({})\n",
                kind_name(i.kind, lang),
                i.text,
                i.at.format("%Y-%m-%d")
            ));
        }
        Ok(md.trim_end().to_string())
    }
}

#[cfg(test)]
mod tests;

/// The mood option `text` names: its number (1-based), its value, or its label in either
/// language.
fn mood_from_text(text: &str) -> Option<String> {
    let t = text
        .trim()
        .trim_end_matches(['.', '。', '!', '！'])
        .trim()
        .to_lowercase();
    let english = reading_agent::mood_options("en");
    let japanese = reading_agent::mood_options("ja");
    if let Ok(n) = t.parse::<usize>() {
        return english.get(n.checked_sub(1)?).map(|(o, _)| o.value.clone());
    }
    english
        .iter()
        .zip(&japanese)
        .find(|((en, _), (ja, _))| t == en.value || t == en.label.to_lowercase() || t == ja.label)
        .map(|((en, _), _)| en.value.clone())
        .or_else(|| mood_in_words(&t).map(str::to_string))
}

/// A mood said in a few words ("I'm curious", "feeling a bit tired", 「わくわくしています」,
/// 「ちょっと疲れてます」): one mood named, in a short message that asks nothing and says
/// no "not". A longer message, or one about the book ("curious why K left"), is a note.
fn mood_in_words(lower: &str) -> Option<&'static str> {
    const MOODS: [(&str, &[&str], &[&str]); 5] = [
        (
            "excited",
            &["excited", "thrilled"],
            &["わくわく", "ワクワク"],
        ),
        (
            "curious",
            &["curious", "intrigued"],
            &["興味しんしん", "興味津々"],
        ),
        ("calm", &["calm", "relaxed"], &["落ち着いて", "穏やか"]),
        (
            "tired",
            &["tired", "sleepy", "exhausted"],
            &["疲れて", "疲れた", "眠い"],
        ),
        (
            "uneasy",
            &["uneasy", "anxious", "worried"],
            &["もやもや", "モヤモヤ", "不安"],
        ),
    ];
    let words = crate::i18n::words(lower);
    let japanese = crate::i18n::has_japanese(lower);
    let short = if japanese {
        lower.chars().count() <= 12
    } else {
        words.len() <= 4
    };
    const NOT: &[&str] = &[
        "not", "no", "never", "don't", "isn't", "wasn't", "aren't", "why", "what", "how", "who",
        "where", "when", "if", "about",
    ];
    let negated = words.iter().any(|w| NOT.contains(w))
        || ["ない", "ません", "なく", "？", "?"]
            .iter()
            .any(|n| lower.contains(n));
    if !short || negated {
        return None;
    }
    let mut named = MOODS
        .iter()
        .filter(|(_, en, ja)| crate::i18n::says_any(lower, &words, en, ja));
    let (value, _, _) = named.next()?;
    named.next().is_none().then_some(*value)
}

/// What a reader said of a book before this conversation: insights, and the phases
/// whose mood they gave.
#[derive(Default)]
struct Earlier {
    talked: bool,
    moods: Vec<MoodPhase>,
}

/// A number and nothing else ("2", "3."): an option number, not a note.
fn is_bare_number(text: &str) -> bool {
    let t = text.trim().trim_end_matches(['.', '。']);
    !t.is_empty()
        && t.len() <= 3
        && t.chars()
            .all(|c| c.is_ascii_digit() || ('０'..='９').contains(&c))
}

#[cfg(test)]
mod mood_tests {
    use super::mood_from_text;

    #[test]
    fn a_mood_said_in_a_few_words_is_the_mood() {
        for (said, mood) in [
            ("Curious", Some("curious")),
            ("I'm curious", Some("curious")),
            ("feeling a bit tired", Some("tired")),
            ("I am so excited!", Some("excited")),
            ("わくわくしています", Some("excited")),
            ("ちょっと疲れてます", Some("tired")),
            ("もやもやする", Some("uneasy")),
            ("not tired at all", None),
            ("疲れていない", None),
            ("curious why K left", None),
            ("calm but also tired", None),
            (
                "Sensei seems tired of life and of everyone around him",
                None,
            ),
            ("先生はとても疲れているように見える人物だと思いました", None),
        ] {
            assert_eq!(mood_from_text(said).as_deref(), mood, "{said}");
        }
    }
}

#[cfg(test)]
mod greeting_tests {
    use crate::i18n::{has_japanese, is_greeting};

    #[test]
    fn greetings_are_not_titles() {
        for g in [
            "こんにちは",
            "こんにちは。",
            "Hello!",
            "hi",
            "おはようございます！",
        ] {
            assert!(is_greeting(g), "{g}");
        }
        for title in [
            "こころ",
            "Hello World programming",
            "Kokoro",
            "ハローワーク",
        ] {
            assert!(!is_greeting(title), "{title}");
        }
        assert!(has_japanese("こんにちは") && !has_japanese("hello"));
    }
}

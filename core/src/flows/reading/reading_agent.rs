//! The Reading agent (seed 004): one agent for before / during / after reading, switched by
//! the record's status. Tools: `get_reading_context`, `save_insight`, `save_mood`,
//! `save_profile_entry`, `update_reading_status`, `present_options` — the last one is given to
//! the model only in guided mode (enforced here, not in the prompt) — and `ask_book_guide`,
//! which delegates expert questions to the BookGuide.
//!
//! Tools record [`ReadingChange`]s in [`ReadingWork`]; the flow writes them with the turn.
//! The rule-based floor ([`floor_kind`], [`detect_status`]) logs insights and status changes
//! without a model.

use super::book_guide::BookGuide;
use crate::agent::{
    Agent, AgentError, AgentLoopResult, LlmLedger, Tool, ToolError, ToolOutput, TypedTool, typed,
};
use crate::llm::{ChatMessage, ChatModel, ModelRouter};
use crate::message::{OptionItem, OptionsRequest};
use crate::store::reading::{
    InsightKind, InteractionMode, MoodPhase, ProfileKind, ReadingChange, ReadingStatus,
};
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;

pub const AGENT: &str = "reading";

/// What the Reading agent knows and changes during one turn.
pub struct ReadingWork {
    pub title: String,
    pub status: ReadingStatus,
    pub mode: InteractionMode,
    /// `get_reading_context`'s answer, prepared by the flow.
    pub context: String,
    pub changes: Vec<ReadingChange>,
    pub options: Option<OptionsRequest>,
    pub guide_answers: Vec<String>,
}

/// The insight kind by simple rules (the floor).
pub fn floor_kind(text: &str) -> InsightKind {
    let t = text.to_lowercase();
    if t.contains('?') || t.contains('？') || t.contains("なぜ") || t.contains("どうして") {
        InsightKind::Question
    } else if [
        "reminds me",
        "similar to",
        "like in",
        "connects",
        "似て",
        "思い出",
        "つなが",
    ]
    .iter()
    .any(|w| t.contains(w))
    {
        InsightKind::Connection
    } else if [
        "learned",
        "learnt",
        "i now know",
        "学ん",
        "知った",
        "わかった",
        "分かった",
    ]
    .iter()
    .any(|w| t.contains(w))
    {
        InsightKind::Learning
    } else {
        InsightKind::Impression
    }
}

/// A status change the user announces ("I finished it", "読み始めました").
pub fn detect_status(text: &str) -> Option<ReadingStatus> {
    let t = text.to_lowercase();
    if ["finished", "i'm done", "read it all", "読み終", "読了"]
        .iter()
        .any(|w| t.contains(w))
    {
        Some(ReadingStatus::Completed)
    } else if ["started reading", "began reading", "i started", "読み始め"]
        .iter()
        .any(|w| t.contains(w))
    {
        Some(ReadingStatus::Reading)
    } else {
        None
    }
}

/// Whether a message asks for expert background (concepts, history, the author's intent,
/// old language): a question about one of them — with a question mark, or in a question's
/// form without one (「明治の精神って何」, "who is K really") — or a request to explain
/// (seed 004: 「相対性理論のこの部分がよくわからない」). What a reader tells of the book ("the
/// meaning of friendship moved me", 「友情って何だろうと考えさせられた」) is not one, nor a
/// reader's own question of the story ("Why does Sensei keep his distance?"), which is kept
/// as a question note.
pub fn is_expert_question(text: &str) -> bool {
    // (a space after it: "explain" ends a word where the text ends)
    let t = format!("{} ", text.to_lowercase());
    let asks_to_explain = [
        "explain ",
        "explain?",
        "what does",
        "what is meant",
        "don't understand",
        "do not understand",
        "don't get ",
        "can't understand",
        "cannot understand",
        "わからない",
        "分からない",
        "わかりません",
        "分かりません",
        "理解できない",
        "理解できません",
        "どういう意味",
        "どういうこと",
        "説明して",
        "解説して",
    ]
    .iter()
    .any(|w| t.contains(w));
    let words: Vec<&str> = t.split(|c: char| !c.is_alphanumeric()).collect();
    let names_a_word = [
        "mean",
        "means",
        "meant",
        "meaning",
        "explain",
        "explanation",
        "background",
        "history",
        "author",
    ]
    .iter()
    .any(|w| words.contains(w));
    let names_a_topic = names_a_word
        || [
            "what is",
            "what's",
            "who is",
            "who was",
            "who wrote",
            "who are the",
            "when was",
            "when did",
            "where is the story",
            "set in",
            "published",
            "written",
            "characters",
            "plot",
            "書いた",
            "出版",
            "舞台",
            "登場人物",
            "あらすじ",
            "意味",
            "背景",
            "時代",
            "作者",
            "著者",
            "現代語",
            "って何",
            "ってなに",
            "とは何",
            "とは？",
            "誰",
        ]
        .iter()
        .any(|w| t.contains(w));
    asks_to_explain || (names_a_topic && is_asked(text))
}

/// [`is_expert_question`] put to the bot: asked (a question mark or a question's form) or
/// a request to explain — not a statement that something is beyond the reader, which in an
/// answer about themselves is a goal (「経済のことがよくわからないので学びたい」).
pub fn is_expert_question_put(text: &str) -> bool {
    let t = format!("{} ", text.to_lowercase());
    is_expert_question(text)
        && (is_asked(text)
            || ["explain ", "explain?", "説明して", "解説して"]
                .iter()
                .any(|w| t.contains(w)))
}

/// Whether `text` is put as a question: a question mark, 「教えて」, or a question's form
/// without the mark (English opening with a question word, Japanese ending with か, 何 or
/// 誰), not an exclamation.
fn is_asked(text: &str) -> bool {
    let t = text.trim().to_lowercase();
    if t.contains('?') || t.contains('？') || t.contains("教えて") {
        return true;
    }
    // an exclamation ("What a meaningful ending!") is not asked
    if t.starts_with("what a ") || t.starts_with("what an ") || t.ends_with(['!', '！']) {
        return false;
    }
    let end =
        t.trim_end_matches(|c: char| c.is_whitespace() || matches!(c, '。' | '.' | '…' | '、'));
    ["か", "何", "なに", "なん", "誰", "だれ"]
        .iter()
        .any(|e| end.ends_with(e))
        || [
            "what ", "who ", "why ", "which ", "is ", "are ", "does ", "did ", "can ", "could ",
        ]
        .iter()
        .any(|w| t.starts_with(w))
}

/// Mood options with their 1–5 scores.
pub fn mood_options(lang: &str) -> Vec<(OptionItem, u8)> {
    let items: [(&str, &str, &str, u8); 5] = [
        ("excited", "Excited", "わくわく", 5),
        ("curious", "Curious", "興味しんしん", 4),
        ("calm", "Calm", "落ち着いている", 3),
        ("tired", "Tired", "疲れている", 2),
        ("uneasy", "Uneasy", "もやもや", 1),
    ];
    items
        .iter()
        .map(|(v, en, ja, score)| (OptionItem::new(*v, crate::i18n::pick(lang, en, ja)), *score))
        .collect()
}

#[derive(Deserialize, JsonSchema)]
pub struct NoArgs {}

struct GetContext;
impl TypedTool<ReadingWork> for GetContext {
    type Args = NoArgs;
    const NAME: &'static str = "get_reading_context";
    fn description(&self) -> String {
        "The book, its reading status, the interaction mode, recent insights and the user's profile.".into()
    }
    async fn run(&self, w: &mut ReadingWork, _: NoArgs) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::ok(w.context.clone()))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct InsightArgs {
    pub kind: InsightKind,
    /// The insight in the user's words.
    pub text: String,
}
struct SaveInsight;
impl TypedTool<ReadingWork> for SaveInsight {
    type Args = InsightArgs;
    const NAME: &'static str = "save_insight";
    fn description(&self) -> String {
        "Save an insight (learning, impression, question or connection) for this book.".into()
    }
    async fn run(&self, w: &mut ReadingWork, a: InsightArgs) -> Result<ToolOutput, ToolError> {
        if a.text.trim().is_empty() {
            return Err(ToolError::InvalidArguments(
                "the insight text is empty".into(),
            ));
        }
        w.changes.push(ReadingChange::AddInsight {
            title: w.title.clone(),
            kind: a.kind,
            text: a.text,
        });
        Ok(ToolOutput::ok("saved"))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct MoodArgs {
    pub phase: MoodPhase,
    /// A word for the mood.
    pub label: String,
    /// 1 (low) to 5 (high).
    pub score: u8,
}
struct SaveMood;
impl TypedTool<ReadingWork> for SaveMood {
    type Args = MoodArgs;
    const NAME: &'static str = "save_mood";
    fn description(&self) -> String {
        "Save the user's mood before or after reading (label and score 1-5).".into()
    }
    async fn run(&self, w: &mut ReadingWork, a: MoodArgs) -> Result<ToolOutput, ToolError> {
        if !(1..=5).contains(&a.score) {
            return Err(ToolError::InvalidArguments("score must be 1 to 5".into()));
        }
        w.changes.push(ReadingChange::AddMood {
            title: w.title.clone(),
            phase: a.phase,
            label: a.label,
            score: a.score,
        });
        Ok(ToolOutput::ok("saved"))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct ProfileArgs {
    pub kind: ProfileKind,
    pub text: String,
}
/// `save_profile_entry`, shared with the Onboarding agent.
pub struct SaveProfileEntry;
impl TypedTool<ReadingWork> for SaveProfileEntry {
    type Args = ProfileArgs;
    const NAME: &'static str = "save_profile_entry";
    fn description(&self) -> String {
        "Save something about the user for their profile: a goal, an interest, a book they wish to read, or other.".into()
    }
    async fn run(&self, w: &mut ReadingWork, a: ProfileArgs) -> Result<ToolOutput, ToolError> {
        w.changes.push(ReadingChange::AddProfileEntry {
            kind: a.kind,
            text: a.text,
        });
        Ok(ToolOutput::ok("saved"))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct StatusArgs {
    pub status: ReadingStatus,
}
struct UpdateStatus;
impl TypedTool<ReadingWork> for UpdateStatus {
    type Args = StatusArgs;
    const NAME: &'static str = "update_reading_status";
    fn description(&self) -> String {
        "Change the reading status when the user says they started or finished the book.".into()
    }
    async fn run(&self, w: &mut ReadingWork, a: StatusArgs) -> Result<ToolOutput, ToolError> {
        w.status = a.status;
        w.changes.push(ReadingChange::SetStatus {
            title: w.title.clone(),
            status: a.status,
        });
        Ok(ToolOutput::ok(format!(
            "status is now {}",
            a.status.as_str()
        )))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct OptionsArgs {
    pub prompt: String,
    pub options: Vec<String>,
    #[serde(default)]
    pub allow_multiple: bool,
}
struct PresentOptions;
impl TypedTool<ReadingWork> for PresentOptions {
    type Args = OptionsArgs;
    const NAME: &'static str = "present_options";
    fn description(&self) -> String {
        "Show tap-to-answer options (the user may also type freely).".into()
    }
    async fn run(&self, w: &mut ReadingWork, a: OptionsArgs) -> Result<ToolOutput, ToolError> {
        let options: Vec<OptionItem> = a
            .options
            .iter()
            .filter(|o| !o.trim().is_empty())
            .take(10)
            .map(|o| OptionItem::new(o.clone(), o.clone()))
            .collect();
        if options.len() < 2 {
            return Err(ToolError::InvalidArguments(
                "give at least two options".into(),
            ));
        }
        w.options = Some(OptionsRequest::new(
            a.prompt.clone(),
            options,
            a.allow_multiple,
        ));
        Ok(ToolOutput::ask(a.prompt))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct GuideArgs {
    /// The expert question (concepts, background, the author's intent, old language, related works).
    pub question: String,
}
struct AskBookGuide {
    guide: Arc<BookGuide>,
    models: ModelRouter,
    ledger: LlmLedger,
    lang: String,
}
impl TypedTool<ReadingWork> for AskBookGuide {
    type Args = GuideArgs;
    const NAME: &'static str = "ask_book_guide";
    fn description(&self) -> String {
        "Delegate an expert question about the book to the BookGuide; returns its cited answer."
            .into()
    }
    async fn run(&self, w: &mut ReadingWork, a: GuideArgs) -> Result<ToolOutput, ToolError> {
        let answer = self
            .guide
            .answer(
                &a.question,
                // (the agent decides what to keep)
                (Some(&w.title), false),
                &self.models,
                &self.ledger,
                &self.lang,
            )
            .await;
        w.guide_answers.push(answer.text.clone());
        Ok(ToolOutput::ok(answer.text))
    }
}

/// The tools for this turn: `present_options` only in guided mode.
pub fn tools(
    mode: InteractionMode,
    guide: Arc<BookGuide>,
    models: &ModelRouter,
    ledger: &LlmLedger,
    lang: &str,
) -> Vec<Arc<dyn Tool<ReadingWork>>> {
    let mut tools: Vec<Arc<dyn Tool<ReadingWork>>> = vec![
        typed(GetContext),
        typed(SaveInsight),
        typed(SaveMood),
        typed(SaveProfileEntry),
        typed(UpdateStatus),
        typed(AskBookGuide {
            guide,
            models: models.clone(),
            ledger: ledger.clone(),
            lang: lang.to_string(),
        }),
    ];
    if mode == InteractionMode::Guided {
        tools.push(typed(PresentOptions));
    }
    tools
}

fn phase_prompt(status: ReadingStatus) -> &'static str {
    match status {
        ReadingStatus::NotStarted => {
            "Before reading: ask why they chose this book and how they feel now (save_mood phase before)."
        }
        ReadingStatus::Reading => {
            "During reading: draw out impressions, learnings, questions and connections; save each with save_insight."
        }
        ReadingStatus::Completed => {
            "After reading: help them look back on the whole book and ask for their mood after (save_mood phase after)."
        }
    }
}

/// Runs the Reading agent on the user's message (or `__session_init__`).
pub async fn run(
    model: &dyn ChatModel,
    work: ReadingWork,
    tools: Vec<Arc<dyn Tool<ReadingWork>>>,
    lang: &str,
    user_text: &str,
    ledger: &LlmLedger,
) -> Result<AgentLoopResult<ReadingWork>, AgentError> {
    let guided = work.mode == InteractionMode::Guided;
    let system = format!(
        "You are a warm reading companion for the book {:?} (status: {}). {} Mode: {}. Speak {}. \
         Save what the user shares with the tools, change the status when they say they started or finished, \
         delegate expert questions to ask_book_guide, then reply briefly with one question. \
         When the message is __session_init__, greet the user according to the book and its status.",
        work.title,
        work.status.as_str(),
        phase_prompt(work.status),
        if guided {
            "guided (offer choices with present_options; the user may still type)"
        } else {
            "freeform (ask open questions; do not offer choices)"
        },
        if lang == "ja" { "Japanese" } else { "English" },
    );
    let agent = Agent::new(AGENT, tools).with_max_iterations(8).streaming();
    agent
        .run(
            model,
            vec![ChatMessage::system(system), ChatMessage::user(user_text)],
            work,
            ledger,
        )
        .await
}

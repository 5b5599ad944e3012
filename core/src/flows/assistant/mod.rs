//! The `assistant` flow: a free conversation with the configured model, the smallest flow
//! that exercises the whole core (agent loop, options, language, history, floor).
//!
//! Opening greets the user and offers the language as options; what they type instead of
//! pressing one chooses too (Japanese text: Japanese). The work the other flows do goes to
//! them, with a model or without ([`crate::flow::TurnOutput::hand_off`]): "interview" /
//! 「応募」 to the interview, a book of the catalogue (or "I'm reading …") to the reading
//! companion, and a request for help the knowledge base answers well to the help-desk's
//! answer with citations — decided by the code, so no model answers them from its own
//! imagination. Other text goes to the model with the recent history and three tools
//! (`start_interview`, `start_reading`, `ask_helpdesk`) for what the words missed. Rule-based
//! floor, with no model: the assistant says in two lines what works, and takes any other
//! text as a question for the help-desk. When the model fails the user gets a clear notice.
//! `/end` ends it.

use crate::agent::{
    Agent, AgentError, AgentLoopResult, Tool, ToolError, ToolOutput, TypedTool, typed,
};
use crate::flow::{CommandInfo, Flow, FlowError, TurnContext, TurnInput, TurnOutput};
use crate::flows::reading::catalogue::Catalogue;
use crate::i18n::pick;
use crate::kb::KnowledgeBase;
use crate::llm::{ChatMessage, ChatModel, ModelError};
use crate::message::OptionItem;
use crate::store::Role;
use crate::store::StateChange;
use async_trait::async_trait;
use std::sync::Arc;

pub const ID: &str = "assistant";

/// The share of a request's words a passage of the knowledge base must meet for the
/// help-desk to take the request whatever the model (its coverage, [`crate::kb::Passage`]);
/// and at least two of them ("What's your name?" meets a passage about a model's name).
const KB_ANSWERS: f32 = 0.5;

/// What the assistant hands messages to.
#[derive(Default)]
pub struct AssistantFlow {
    /// The interview flow has forms.
    interviews: bool,
    /// The help-desk's knowledge base (the help-desk flow runs).
    kb: Option<Arc<KnowledgeBase>>,
    /// The reading companion's catalogue.
    catalogue: Option<Arc<Catalogue>>,
}

/// Where the model sent a message with its tools.
#[derive(Debug)]
enum Route {
    Interview,
    Reading(Option<String>),
    Helpdesk,
}

impl AssistantFlow {
    pub fn new(
        interviews: bool,
        kb: Option<Arc<KnowledgeBase>>,
        catalogue: Option<Arc<Catalogue>>,
    ) -> Self {
        AssistantFlow {
            interviews,
            kb,
            catalogue,
        }
    }

    /// What works without a model, in two lines.
    fn what_works(&self, lang: &str) -> String {
        let mut can_en = Vec::new();
        let mut can_ja = Vec::new();
        if self.kb.is_some() {
            can_en.push("answer questions from the team's guide (just ask)");
            can_ja.push("ガイドにもとづく質問への回答（そのまま質問してください）");
        }
        if self.interviews {
            can_en.push("run an application interview (say \"interview\")");
            can_ja.push("応募インタビュー（「応募」と送ってください）");
        }
        if self.catalogue.is_some() {
            can_en.push("keep your reading log (tell me the book you are reading)");
            can_ja.push("読書記録（読んでいる本の名前を送ってください）");
        }
        if can_en.is_empty() {
            return pick(
                lang,
                "I'm Kaiwa, running without a language model, so I can't chat freely here.\nSend /help to see what works.",
                "Kaiwa です。言語モデルなしで動いているため、ここでは自由な会話ができません。\n/help で使える機能を確認できます。",
            );
        }
        pick(
            lang,
            &format!(
                "I'm Kaiwa, running without a language model.\nI can {}.",
                can_en.join(", ")
            ),
            &format!(
                "Kaiwa です（言語モデルなしで動いています）。\n{}ができます。",
                can_ja.join("、")
            ),
        )
    }

    /// Free text with no model: to the flow that can serve it, else what works.
    fn without_model(&self, text: &str, lang: &str, out: &mut TurnOutput) {
        let t = text.trim().to_lowercase();
        let has = |words: &[&str]| words.iter().any(|w| t.contains(w));
        if crate::i18n::is_greeting(text)
            || has(&["what can you do", "help me", "何ができ", "使い方"])
        {
            out.say(self.what_works(lang));
            return;
        }
        if self.hand_off_by_words(text, lang, out) {
            return;
        }
        // "??", "…", an emoji: no question to search for (thanks go to the help-desk's)
        if !text.chars().any(char::is_alphanumeric) && !crate::i18n::is_thanks(text) {
            out.say(self.what_works(lang));
            return;
        }
        if self.kb.is_some() {
            out.hand_off("ask", text.trim());
            return;
        }
        out.say(self.what_works(lang));
    }

    /// Hands `text` to the flow its words name, model or not: an application to the
    /// interview, a book of the catalogue or "I'm reading" to the reading companion, a
    /// request for a book to the recommendations. True when it did.
    fn hand_off_by_words(&self, text: &str, lang: &str, out: &mut TurnOutput) -> bool {
        let t = text.trim().to_lowercase();
        let has = |words: &[&str]| words.iter().any(|w| t.contains(w));
        if self.interviews && crate::flows::interview::wants_to_apply(text) {
            out.hand_off("interview", "");
            return true;
        }
        if let Some(catalogue) = &self.catalogue {
            let book = catalogue.books().iter().find(|b| {
                t.contains(&b.title.to_lowercase())
                    || b.title_ja.as_deref().is_some_and(|j| text.contains(j))
            });
            if let Some(book) = book {
                out.hand_off("reading", format!("start {}", book.title_in(lang)));
                return true;
            }
            if crate::flows::reading::recommendation::asks_for_a_book(text) {
                out.hand_off("recommend", text.trim());
                return true;
            }
            if has(&[
                "i'm reading",
                "i am reading",
                "reading log",
                "reading notes",
                "about a book",
                "my impressions",
                "読んで",
                "読書",
                "本の感想",
                "感想を書",
                "感想を記録",
            ]) {
                out.hand_off("reading", "");
                return true;
            }
        }
        false
    }

    /// Whether `text` asks for help the knowledge base answers well: put as a question or
    /// a problem, and a passage meets at least [`KB_ANSWERS`] of its words, two or more.
    fn kb_answers(&self, text: &str) -> bool {
        let Some(kb) = &self.kb else {
            return false;
        };
        if !seeks_help(text) {
            return false;
        }
        // (the question's size is read only for a passage that meets enough of it)
        let answers = kb.search(text, 1).and_then(|found| match found.first() {
            Some(p) if p.coverage >= KB_ANSWERS => {
                Ok(p.coverage * kb.question_size(text)? as f32 >= 1.99)
            }
            _ => Ok(false),
        });
        match answers {
            Ok(answers) => answers,
            Err(e) => {
                tracing::warn!(error = %e, "the knowledge base could not be searched");
                false
            }
        }
    }
}

/// Whether `text` asks for something or tells of a problem: a question mark or a
/// question's opening, a request ("help", 「教えて」), or what does not work ("can't",
/// 「できない」).
fn seeks_help(text: &str) -> bool {
    let t = text.trim().to_lowercase();
    if t.contains('?') || t.contains('？') {
        return true;
    }
    let openings = [
        "how ", "what ", "where ", "when ", "why ", "which ", "who ", "can ", "could ", "is ",
        "are ", "do ", "does ", "should ", "may ",
    ];
    let words = [
        "help",
        "can't",
        "cannot",
        "won't",
        "doesn't",
        "don't know",
        "not working",
        "broken",
        "教えて",
        "できない",
        "できません",
        "ない",
        "ません",
        "困って",
        "方法",
        "には",
    ];
    openings.iter().any(|o| t.starts_with(o)) || words.iter().any(|w| t.contains(w))
}

/// Whether a model's text is a tool call it failed to make ("functions.ask_helpdesk:",
/// `<tool_call>…`, "start_reading(…)"): never shown to a user.
fn leaked_call(text: &str) -> bool {
    let t = text.trim();
    t.starts_with("functions.")
        || t.starts_with("<tool_call>")
        || ["start_interview", "start_reading", "ask_helpdesk"]
            .iter()
            .any(|name| t.starts_with(&format!("{name}:")) || t.starts_with(&format!("{name}(")))
}

/// What the model's tools decide: where the message goes.
struct Routing {
    route: Option<Route>,
    /// The user's message is a greeting: never the help-desk's.
    greeting: bool,
}

/// The arguments of a tool that takes none.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ReadingArgs {
    /// The book's title, if the user named one.
    #[serde(default)]
    title: Option<String>,
}

/// `start_interview`: the user wants to apply for a job.
struct StartInterview;

impl TypedTool<Routing> for StartInterview {
    type Args = NoArgs;
    const NAME: &'static str = "start_interview";

    fn description(&self) -> String {
        "The user wants to apply for a job or be interviewed: start the application interview."
            .into()
    }

    async fn run(&self, state: &mut Routing, _: NoArgs) -> Result<ToolOutput, ToolError> {
        state.route = Some(Route::Interview);
        Ok(ToolOutput::finish("the interview starts"))
    }
}

/// `start_reading`: the user is reading a book and wants to log it.
struct StartReading;

impl TypedTool<Routing> for StartReading {
    type Args = ReadingArgs;
    const NAME: &'static str = "start_reading";

    fn description(&self) -> String {
        "The user is reading a book or wants to talk about one: start the reading companion.".into()
    }

    async fn run(&self, state: &mut Routing, args: ReadingArgs) -> Result<ToolOutput, ToolError> {
        let title = args
            .title
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        state.route = Some(Route::Reading(title));
        Ok(ToolOutput::finish("the reading companion starts"))
    }
}

/// `ask_helpdesk`: a question about the service or the organisation.
struct AskHelpdesk;

impl TypedTool<Routing> for AskHelpdesk {
    type Args = NoArgs;
    const NAME: &'static str = "ask_helpdesk";

    fn description(&self) -> String {
        "The user asks how to do something with this service or the organisation (accounts, \
         devices, policies, how the bot works): the help-desk answers from the team's guide, \
         with citations. Never for small talk or general knowledge."
            .into()
    }

    async fn run(&self, state: &mut Routing, _: NoArgs) -> Result<ToolOutput, ToolError> {
        if state.greeting {
            return Err(ToolError::Rejected(
                "this is a greeting, not a question for the help-desk: answer it yourself".into(),
            ));
        }
        state.route = Some(Route::Helpdesk);
        Ok(ToolOutput::finish("the help-desk answers"))
    }
}

const LANGUAGE_QUESTION: &str = "Which language do you prefer? / ご希望の言語は？";

fn language_options(out: &mut TurnOutput) {
    out.options(
        LANGUAGE_QUESTION,
        vec![
            OptionItem::new("en", "English"),
            OptionItem::new("ja", "日本語"),
        ],
        false,
    );
}

impl AssistantFlow {
    async fn answer(
        &self,
        ctx: &TurnContext<'_>,
        text: &str,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        let lang = settle_language(ctx, text, out);
        let lang = lang.as_str();
        let Some(model) = ctx.models.for_agent(ID) else {
            self.without_model(text, lang, out);
            return Ok(());
        };
        // what the code knows goes where it belongs, whatever the model would say
        if self.hand_off_by_words(text, lang, out) {
            return Ok(());
        }
        if self.kb_answers(text) {
            out.hand_off("ask", text.trim());
            return Ok(());
        }
        let ran = self.ask_model(ctx, model.as_ref(), text, lang).await;
        deliver(ran, text, lang, out)
    }

    /// The tools that hand a message to the flows that run, and the system prompt's line
    /// that says when to call them.
    fn routing_tools(&self) -> (Vec<Arc<dyn Tool<Routing>>>, String) {
        let mut tools = Vec::new();
        let mut can = Vec::new();
        if self.interviews {
            tools.push(typed(StartInterview));
            can.push("start_interview when they want to apply for a job");
        }
        if self.catalogue.is_some() {
            tools.push(typed(StartReading));
            can.push("start_reading when they are reading a book");
        }
        if self.kb.is_some() {
            tools.push(typed(AskHelpdesk));
            can.push("ask_helpdesk for a question about this service or the organisation");
        }
        let line = if can.is_empty() {
            String::new()
        } else {
            format!(" Call {}; otherwise answer yourself.", can.join(", "))
        };
        (tools, line)
    }

    /// The model's turn, with the routing tools; a model that answers nothing with them,
    /// or writes a call as text, is asked again without them.
    async fn ask_model(
        &self,
        ctx: &TurnContext<'_>,
        model: &dyn ChatModel,
        text: &str,
        lang: &str,
    ) -> Result<AgentLoopResult<Routing>, AgentError> {
        let routing = || Routing {
            route: None,
            greeting: crate::i18n::is_greeting(text),
        };
        let (tools, tools_line) = self.routing_tools();
        let offered = !tools.is_empty();
        let messages = conversation(ctx, text, lang, &tools_line);
        let ran = Agent::new(ID, tools)
            .streaming()
            .run(model, messages, routing(), ctx.ledger)
            .await;
        if offered
            && let Ok(result) = &ran
            && result.state.route.is_none()
            && (result.response_text.trim().is_empty() || leaked_call(&result.response_text))
        {
            tracing::info!("the model answered nothing with its tools; asked without them");
            let messages = conversation(ctx, text, lang, "");
            return Agent::new(ID, Vec::new())
                .streaming()
                .run(model, messages, routing(), ctx.ledger)
                .await;
        }
        ran
    }
}

/// The language chosen, set and said.
fn chose_language(language: &str, out: &mut TurnOutput) {
    out.change(StateChange::SetLanguage {
        language: language.to_string(),
    });
    out.say(pick(
        language,
        "Great, let's talk in English. What's on your mind?",
        "では日本語で話しましょう。何でもどうぞ。",
    ));
}

/// The one language `text` asks for when it says only that ("Japanese", "In English,
/// please", 「日本語でお願いします」, 「えいご」): a message that says more is a message.
fn named_language(text: &str) -> Option<&'static str> {
    const NAMES: [(&str, &str); 8] = [
        ("english", "en"),
        ("eng", "en"),
        ("英語", "en"),
        ("えいご", "en"),
        ("japanese", "ja"),
        ("nihongo", "ja"),
        ("日本語", "ja"),
        ("にほんご", "ja"),
    ];
    const WORDS: [&str; 14] = [
        "in", "please", "i", "i'd", "would", "like", "prefer", "speak", "use", "let's", "talk",
        "ok", "okay", "thanks",
    ];
    const ENDINGS: [&str; 12] = [
        "で",
        "でお願いします",
        "でおねがいします",
        "でお願い",
        "がいい",
        "がいいです",
        "でいい",
        "でいいです",
        "です",
        "で話したい",
        "で話したいです",
        "お願いします",
    ];
    let t = text.trim().to_lowercase();
    let t = t.trim_end_matches(['.', '!', '。', '！', '、', ',']);
    let mut found = None;
    if crate::i18n::has_japanese(t) {
        for (name, lang) in NAMES {
            if let Some(rest) = t.strip_prefix(name) {
                let rest = rest.trim();
                if ENDINGS.contains(&rest) || rest.is_empty() {
                    found = Some(lang);
                }
            }
        }
        return found;
    }
    for word in t.split(|c: char| c.is_whitespace() || c == ',') {
        if word.is_empty() || WORDS.contains(&word) {
            continue;
        }
        let lang = NAMES.iter().find(|(name, _)| *name == word)?.1;
        if found.is_some_and(|f| f != lang) {
            return None;
        }
        found = Some(lang);
    }
    found
}

/// The conversation's language: its own, or, with the language question still open, the
/// one `text` is written in (Japanese text: Japanese), which is kept.
fn settle_language(ctx: &TurnContext<'_>, text: &str, out: &mut TurnOutput) -> String {
    if let Some(lang) = &ctx.session.language {
        return lang.clone();
    }
    let lang = if crate::i18n::has_japanese(text) {
        "ja"
    } else {
        "en"
    };
    out.change(StateChange::SetLanguage {
        language: lang.to_string(),
    });
    lang.to_string()
}

/// The system prompt (with the tools' line, or an empty one), the recent history and the
/// message.
fn conversation(
    ctx: &TurnContext<'_>,
    text: &str,
    lang: &str,
    tools_line: &str,
) -> Vec<ChatMessage> {
    let system = format!(
        "You are Kaiwa, a helpful assistant in a chat app. Be concise and friendly. \
         The user's name is {}. Answer in {}.{tools_line}",
        ctx.user.display_name,
        if lang == "ja" { "Japanese" } else { "English" }
    );
    let mut messages = vec![ChatMessage::system(system)];
    for m in ctx.history.iter().rev().take(20).rev() {
        messages.push(match m.role {
            Role::User => ChatMessage::user(m.text.clone()),
            Role::Assistant => ChatMessage::assistant(m.text.clone()),
            Role::System => ChatMessage::system(m.text.clone()),
        });
    }
    messages.push(ChatMessage::user(text));
    messages
}

/// What the model's turn comes to: a hand-off where its tools sent the message (with the
/// user's own words, not the model's rewording of them), its answer, or a notice.
fn deliver(
    ran: Result<AgentLoopResult<Routing>, AgentError>,
    text: &str,
    lang: &str,
    out: &mut TurnOutput,
) -> Result<(), FlowError> {
    match ran {
        Ok(result) => match result.state.route {
            Some(Route::Interview) => {
                out.hand_off("interview", "");
            }
            Some(Route::Reading(Some(title))) => {
                out.hand_off("reading", format!("start {title}"));
            }
            Some(Route::Reading(None)) => {
                out.hand_off("reading", "");
            }
            Some(Route::Helpdesk) => {
                out.hand_off("ask", text.trim());
            }
            None if !result.response_text.trim().is_empty() => {
                out.say(result.response_text);
            }
            None => {
                out.say(pick(
                    lang,
                    "(The model gave an empty answer. Please rephrase.)",
                    "（モデルの応答が空でした。言い換えてください。）",
                ));
            }
        },
        Err(AgentError::Model { source, .. }) => {
            tracing::warn!(error = %source, "model unavailable; using the floor");
            // a model that answers too slowly is reached all the same: said so
            let slow = matches!(source, ModelError::Timeout(_) | ModelError::BudgetSpent);
            out.say(match slow {
                true => pick(
                    lang,
                    "The language model is taking too long right now. Please try again in a moment, or ask something shorter.",
                    "現在、言語モデルの応答に時間がかかりすぎています。少し時間をおいてもう一度お試しいただくか、短く質問してください。",
                ),
                false => pick(
                    lang,
                    "I can't reach the language model right now. Please try again in a moment.",
                    "現在、言語モデルに接続できません。少し時間をおいてもう一度お試しください。",
                ),
            });
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

#[async_trait]
impl Flow for AssistantFlow {
    fn id(&self) -> &str {
        ID
    }

    fn description(&self) -> &str {
        "free conversation with the configured model"
    }

    fn start_commands(&self) -> Vec<CommandInfo> {
        vec![CommandInfo {
            name: "chat",
            description_en: "talk freely with the assistant",
            description_ja: "アシスタントと自由に話す",
        }]
    }

    fn farewell(&self, lang: &str) -> Option<String> {
        Some(pick(
            lang,
            "Goodbye! Send /start to talk again.",
            "さようなら。また話すときは /start を送ってください。",
        ))
    }

    async fn turn(&self, ctx: TurnContext<'_>, input: TurnInput) -> Result<TurnOutput, FlowError> {
        let mut out = TurnOutput::default();
        let lang = ctx.language().to_string();
        match input {
            TurnInput::Start => {
                out.say(format!(
                    "Hello {}! I'm Kaiwa. / こんにちは、Kaiwa です。",
                    ctx.user.display_name
                ));
                language_options(&mut out);
            }
            TurnInput::Resume => {
                out.say(pick(
                    &lang,
                    "Welcome back! Let's continue.",
                    "おかえりなさい。続けましょう。",
                ));
                if let Some(pending) = &ctx.session.pending_options {
                    out.outgoing
                        .push(crate::message::Outgoing::Options(pending.clone()));
                }
            }
            TurnInput::Choice { values, .. } => {
                let chosen = values.first().map(String::as_str).unwrap_or("en");
                chose_language(if chosen == "ja" { "ja" } else { "en" }, &mut out);
            }
            TurnInput::Text(text) => match named_language(&text).filter(|_| {
                ctx.session
                    .pending_options
                    .as_ref()
                    .is_some_and(|p| p.prompt == LANGUAGE_QUESTION)
            }) {
                // the language question answered in words
                Some(language) => chose_language(language, &mut out),
                None => self.answer(&ctx, &text, &mut out).await?,
            },
            TurnInput::Command { .. } => out.unknown_command = true,
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;

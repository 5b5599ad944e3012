//! The `assistant` flow: a free conversation with the configured model, the smallest flow
//! that exercises the whole core (agent loop, options, language, history, floor).
//!
//! Opening greets the user and offers the language as options; what they type instead of
//! pressing one chooses too (Japanese text: Japanese). Text goes to the model with the
//! recent history. Rule-based floor, with no model: the assistant says in two lines what
//! works and takes free text there — "interview" / 「応募」 to the interview, a book of the
//! catalogue (or "I'm reading …") to the reading companion, anything else, as a question, to
//! the help-desk's answer with citations ([`crate::flow::TurnOutput::hand_off`]). When
//! the model fails the user gets a clear notice. `/end` ends it.

use crate::agent::{Agent, AgentError};
use crate::flow::{CommandInfo, Flow, FlowError, TurnContext, TurnInput, TurnOutput};
use crate::i18n::pick;
use crate::llm::ChatMessage;
use crate::message::OptionItem;
use crate::store::Role;
use crate::store::StateChange;
use async_trait::async_trait;

pub const ID: &str = "assistant";

/// What the assistant can hand a message to when it has no model.
#[derive(Default)]
pub struct AssistantFlow {
    /// The interview flow has forms.
    interviews: bool,
    /// The help-desk flow runs (a knowledge base is configured).
    helpdesk: bool,
    /// The reading companion's catalogue.
    catalogue: Option<std::sync::Arc<crate::flows::reading::catalogue::Catalogue>>,
}

impl AssistantFlow {
    pub fn new(
        interviews: bool,
        helpdesk: bool,
        catalogue: Option<std::sync::Arc<crate::flows::reading::catalogue::Catalogue>>,
    ) -> Self {
        AssistantFlow {
            interviews,
            helpdesk,
            catalogue,
        }
    }

    /// What works without a model, in two lines.
    fn what_works(&self, lang: &str) -> String {
        let mut can_en = Vec::new();
        let mut can_ja = Vec::new();
        if self.helpdesk {
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
        if self.interviews && has(&["interview", "apply", "application", "応募", "面接"]) {
            out.hand_off("interview", "");
            return;
        }
        if let Some(catalogue) = &self.catalogue {
            let book = catalogue.books().iter().find(|b| {
                t.contains(&b.title.to_lowercase())
                    || b.title_ja.as_deref().is_some_and(|j| text.contains(j))
            });
            if let Some(book) = book {
                out.hand_off("reading", format!("start {}", book.title_in(lang)));
                return;
            }
            if has(&[
                "i'm reading",
                "i am reading",
                "reading log",
                "読んで",
                "読書",
            ]) {
                out.hand_off("reading", "");
                return;
            }
        }
        if self.helpdesk {
            out.hand_off("ask", text.trim());
            return;
        }
        out.say(self.what_works(lang));
    }
}

fn language_options(out: &mut TurnOutput) {
    out.options(
        "Which language do you prefer? / ご希望の言語は？",
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
        // the language question still open: what they wrote chooses
        let lang = match &ctx.session.language {
            Some(lang) => lang.clone(),
            None => {
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
        };
        let lang = lang.as_str();
        let Some(model) = ctx.models.for_agent(ID) else {
            self.without_model(text, lang, out);
            return Ok(());
        };
        let system = format!(
            "You are Kaiwa, a helpful assistant in a chat app. Be concise and friendly. \
             The user's name is {}. Answer in {}.",
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
        let agent: Agent<()> = Agent::new(ID, Vec::new()).streaming();
        match agent.run(model.as_ref(), messages, (), ctx.ledger).await {
            Ok(result) if !result.response_text.trim().is_empty() => {
                out.say(result.response_text);
            }
            Ok(_) => {
                out.say(pick(
                    lang,
                    "(The model gave an empty answer. Please rephrase.)",
                    "（モデルの応答が空でした。言い換えてください。）",
                ));
            }
            Err(AgentError::Model { source, .. }) => {
                tracing::warn!(error = %source, "model unavailable; using the floor");
                out.say(pick(
                    lang,
                    "I can't reach the language model right now. Please try again in a moment.",
                    "現在、言語モデルに接続できません。少し時間をおいてもう一度お試しください。",
                ));
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
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
                let language = if chosen == "ja" { "ja" } else { "en" };
                out.change(StateChange::SetLanguage {
                    language: language.to_string(),
                });
                out.say(pick(
                    language,
                    "Great, let's talk in English. What's on your mind?",
                    "では日本語で話しましょう。何でもどうぞ。",
                ));
            }
            TurnInput::Text(text) => self.answer(&ctx, &text, &mut out).await?,
            TurnInput::Command { .. } => out.unknown_command = true,
        }
        Ok(out)
    }
}

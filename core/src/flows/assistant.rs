//! The `assistant` flow: a free conversation with the configured model, the smallest flow
//! that exercises the whole core (agent loop, options, language, history, floor).
//!
//! Opening greets the user and offers the language as options; text goes to the model with
//! the recent history. Rule-based floor: with no model configured, or when the model fails,
//! the user gets a clear notice and the commands that work without one. `/end` ends it.

use crate::agent::{Agent, AgentError};
use crate::flow::{CommandInfo, Flow, FlowError, TurnContext, TurnInput, TurnOutput};
use crate::i18n::pick;
use crate::llm::ChatMessage;
use crate::message::OptionItem;
use crate::store::Role;
use crate::store::StateChange;
use async_trait::async_trait;

pub const ID: &str = "assistant";

#[derive(Default)]
pub struct AssistantFlow;

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
        let lang = ctx.language();
        let Some(model) = ctx.models.for_agent(ID) else {
            out.say(pick(
                lang,
                "I'm running without a language model, so I can't chat freely here. Send /help to see what works.",
                "言語モデルが設定されていないため、ここでは自由な会話ができません。/help で使える機能を確認できます。",
            ));
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

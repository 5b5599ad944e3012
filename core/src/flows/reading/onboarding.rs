//! Onboarding (seed 004): builds the user's first profile by conversation — goals, interests,
//! books they wish to read — with `get_current_entries` and `save_profile_entry` (the same
//! schema the Reading agent uses). Rerunnable: `/onboarding` or `/profile` shows what is
//! known and asks again. Without a model it asks the three questions in turn. An expert
//! question in between goes to the BookGuide, as from any step of the reading flow.

use super::book_guide::BookGuide;
use super::reading_agent::{self, ReadingWork, SaveProfileEntry};
use crate::agent::{Agent, ToolError, ToolOutput, TypedTool, typed};
use crate::flow::{CommandInfo, Flow, FlowError, TurnContext, TurnInput, TurnOutput};
use crate::i18n::pick;
use crate::llm::ChatMessage;
use crate::store::StateChange;
use crate::store::reading::{
    InsightKind, InteractionMode, ProfileKind, ReadingChange, ReadingStatus,
};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub const ID: &str = "onboarding";
pub const AGENT: &str = "onboarding";

const STEPS: [ProfileKind; 3] = [
    ProfileKind::Goal,
    ProfileKind::Interest,
    ProfileKind::BookWish,
];

fn question(kind: ProfileKind, lang: &str) -> String {
    match kind {
        ProfileKind::Goal => pick(
            lang,
            "What would you like reading to bring you — a goal, or who you want to become?",
            "読書を通じて達成したいことや、なりたい自分はありますか？",
        ),
        ProfileKind::Interest => pick(
            lang,
            "Which themes interest you these days?",
            "最近気になっているテーマは何ですか？",
        ),
        ProfileKind::BookWish => pick(
            lang,
            "Is there a book you've been wanting to read?",
            "読みたいと思っている本はありますか？",
        ),
        // (not a step of onboarding: /lang sets it)
        ProfileKind::Other | ProfileKind::Language => pick(
            lang,
            "Anything else I should know?",
            "ほかに知っておいてほしいことはありますか？",
        ),
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct OnboardingState {
    step: usize,
}

#[derive(Deserialize, JsonSchema)]
pub struct NoArgs {}
struct GetCurrentEntries;
impl TypedTool<ReadingWork> for GetCurrentEntries {
    type Args = NoArgs;
    const NAME: &'static str = "get_current_entries";
    fn description(&self) -> String {
        "The user's current profile entries.".into()
    }
    async fn run(&self, w: &mut ReadingWork, _: NoArgs) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::ok(w.context.clone()))
    }
}

/// The onboarding conversation; with the [`BookGuide`], an expert question asked in the
/// middle of it is answered (seed 004: from any step) and the question asked again.
#[derive(Default)]
pub struct OnboardingFlow {
    guide: Option<Arc<BookGuide>>,
}

impl OnboardingFlow {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends an expert question put in the middle of onboarding to `guide`.
    pub fn with_guide(mut self, guide: Arc<BookGuide>) -> Self {
        self.guide = Some(guide);
        self
    }

    /// `text` as an expert question: answered by the BookGuide about the book the user
    /// read last (kept as a question note on it), and the profile's question asked again.
    /// `false` when it is not one, or there is no guide.
    async fn ask_guide(
        &self,
        ctx: &TurnContext<'_>,
        st: &OnboardingState,
        text: &str,
        out: &mut TurnOutput,
    ) -> Result<bool, FlowError> {
        let Some(guide) = self
            .guide
            .as_ref()
            .filter(|_| reading_agent::is_expert_question_put(text))
        else {
            return Ok(false);
        };
        let lang = ctx.language().to_string();
        let book = super::latest_record(ctx).await?;
        let about = book
            .as_ref()
            .map(|b| guide.subject(&b.title, b.author.as_deref()));
        let answer = guide
            .answer(
                text,
                (about.as_deref(), about.is_some()),
                ctx.models,
                ctx.ledger,
                &lang,
            )
            .await;
        if let Some(book) = book {
            out.change(StateChange::Reading {
                change: ReadingChange::AddInsight {
                    title: book.title,
                    kind: InsightKind::Question,
                    text: text.to_string(),
                },
            });
        }
        out.say(answer.text);
        let kind = STEPS.get(st.step).copied().unwrap_or(ProfileKind::Other);
        out.say(question(kind, &lang));
        Ok(true)
    }
}

#[async_trait]
impl Flow for OnboardingFlow {
    fn id(&self) -> &str {
        ID
    }
    fn description(&self) -> &str {
        "builds your reading profile by conversation"
    }
    fn start_commands(&self) -> Vec<CommandInfo> {
        vec![
            CommandInfo {
                name: "onboarding",
                description_en: "tell me about your reading goals",
                description_ja: "読書の目標や興味を登録する",
            },
            CommandInfo {
                name: "profile",
                description_en: "show and update your profile",
                description_ja: "プロフィールを表示・更新する",
            },
        ]
    }

    /// The profile kept so far stays.
    fn farewell(&self, lang: &str) -> Option<String> {
        Some(pick(
            lang,
            "Stopped. What you told me so far is kept; send /profile to see it or go on.",
            "中断しました。ここまでの回答は保存しています。/profile で確認や続きができます。",
        ))
    }

    async fn turn(&self, ctx: TurnContext<'_>, input: TurnInput) -> Result<TurnOutput, FlowError> {
        let mut out = TurnOutput::default();
        let mut st: OnboardingState = ctx.state()?;
        let lang = ctx.language().to_string();
        let key = &ctx.session.key;
        let entries = ctx.store.profile_entries(key.platform, &key.user).await?;
        let known = entries
            .iter()
            .filter(|e| e.kind != ProfileKind::Language)
            .map(|e| format!("- {}: {}", e.kind.as_str(), e.text))
            .collect::<Vec<_>>()
            .join("\n");
        match input {
            TurnInput::Start | TurnInput::Resume => {
                if !known.is_empty() {
                    out.say(format!(
                        "{}\n{known}",
                        pick(&lang, "Your profile so far:", "現在のプロフィール:")
                    ));
                }
                st.step = 0;
                out.say(question(STEPS[0], &lang));
            }
            TurnInput::Text(text) => {
                if self.ask_guide(&ctx, &st, &text, &mut out).await? {
                    out.set_state(&st)?;
                    return Ok(out);
                }
                if let Some(model) = ctx.models.for_agent(AGENT) {
                    let work = ReadingWork {
                        title: String::new(),
                        status: ReadingStatus::NotStarted,
                        mode: InteractionMode::Freeform,
                        context: known.clone(),
                        changes: Vec::new(),
                        options: None,
                        guide_answers: Vec::new(),
                    };
                    let agent = Agent::new(
                        AGENT,
                        vec![typed(GetCurrentEntries), typed(SaveProfileEntry)],
                    )
                    .with_max_iterations(6)
                    .streaming();
                    let system = format!(
                        "You are onboarding a reading-club member. Save what they tell you as profile entries (goal, interest, \
                         book_wish, other) with save_profile_entry, then ask one friendly follow-up question in {}.",
                        if lang == "ja" { "Japanese" } else { "English" }
                    );
                    match agent
                        .run(
                            model.as_ref(),
                            vec![ChatMessage::system(system), ChatMessage::user(text.clone())],
                            work,
                            ctx.ledger,
                        )
                        .await
                    {
                        Ok(r) => {
                            for change in r.state.changes {
                                out.change(StateChange::Reading { change });
                            }
                            out.say(r.response_text);
                            out.set_state(&st)?;
                            return Ok(out);
                        }
                        Err(e) => tracing::warn!(error = %e, "Onboarding failed; using rules"),
                    }
                }
                let kind = STEPS.get(st.step).copied().unwrap_or(ProfileKind::Other);
                let skip = ["no", "none", "nothing", "pass", "ない", "特に", "なし"]
                    .iter()
                    .any(|w| text.trim().to_lowercase().starts_with(w));
                if !skip {
                    out.change(StateChange::Reading {
                        change: ReadingChange::AddProfileEntry { kind, text },
                    });
                }
                st.step += 1;
                match STEPS.get(st.step) {
                    Some(next) => {
                        out.say(question(*next, &lang));
                    }
                    None => {
                        out.say(pick(&lang, "Thank you! Your profile is saved. Try /recommend or /reading start TITLE.", "ありがとうございます。プロフィールを保存しました。/recommend や /reading start 書名 をどうぞ。"));
                        out.end();
                    }
                }
            }
            TurnInput::Command { .. } => out.unknown_command = true,
            TurnInput::Choice { .. } => {}
        }
        out.set_state(&st)?;
        Ok(out)
    }
}

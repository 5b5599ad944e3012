//! The reading conversation's turn (`Flow` for [`ReadingFlow`]): one method per kind of
//! input — the start, a return, what the user wrote, a press, a command.

use super::{
    Awaiting, ID, ReadingFlow, ReadingState, is_bare_number, kind_name, mood_from_text,
    reading_agent, status_name,
};
use crate::flow::{CommandInfo, Flow, FlowError, TurnContext, TurnInput, TurnOutput};
use crate::i18n::{has_japanese, is_greeting, pick};
use crate::message::OptionsRequest;
use crate::store::reading::{InsightKind, InteractionMode, ReadingChange, ReadingStatus};
use async_trait::async_trait;

/// The status `/status ARG` names: its code (`reading`) or its name in either language
/// (「読了」, "not started").
fn status_arg(args: &str) -> Option<ReadingStatus> {
    let arg = args.trim().to_lowercase();
    ReadingStatus::parse(&arg).or_else(|| {
        [
            ReadingStatus::NotStarted,
            ReadingStatus::Reading,
            ReadingStatus::Completed,
        ]
        .into_iter()
        .find(|s| ["en", "ja"].iter().any(|l| status_name(*s, l) == arg))
    })
}

/// The turn, one method per kind of input.
impl ReadingFlow {
    /// The conversation opens: the book named (`/reading start TITLE`), else the latest
    /// one logged, else the question which book.
    async fn on_start(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut ReadingState,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        let lang = ctx.language().to_string();
        match ctx
            .start_arg
            .map(|a| a.trim().trim_start_matches("start").trim())
            .filter(|a| !a.is_empty())
        {
            Some(title) => self.open(ctx, st, title, out).await?,
            None => match super::latest_record(ctx).await? {
                Some(record) => self.open(ctx, st, &record.title, out).await?,
                None => {
                    st.awaiting = Some(Awaiting::Title);
                    out.say(pick(
                        &lang,
                        "Which book are you reading? Send its title.",
                        "どの本を読みますか？書名を送ってください。",
                    ));
                }
            },
        }
        Ok(())
    }

    /// The conversation comes back (`/reading` again, or the place reopened).
    async fn on_resume(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut ReadingState,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        let lang = ctx.language().to_string();

        out.say(pick(&lang, "Welcome back!", "おかえりなさい。"));
        if st.title.is_some() {
            self.greet(ctx, st, out).await?;
        } else {
            out.say(pick(
                &lang,
                "Which book are you reading? Send its title.",
                "どの本を読みますか？書名を送ってください。",
            ));
        }
        Ok(())
    }

    /// What the user wrote: a title, a mood, a note, or a conversation with the agent.
    async fn on_text(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut ReadingState,
        out: &mut TurnOutput,
        text: String,
    ) -> Result<(), FlowError> {
        let lang = ctx.language().to_string();
        // the answer to the greeting's "what made you choose it?" (its mood still asked)
        let reason = std::mem::take(&mut st.reason_asked)
            && !reading_agent::is_expert_question(&text)
            && reading_agent::detect_status(&text).is_none()
            && ctx.models.for_agent(reading_agent::AGENT).is_none();

        if (st.title.is_none() || st.awaiting == Some(Awaiting::Title)) && is_greeting(&text) {
            // a greeting is not a book title: greet back (in the language it came
            // in) and ask for the book
            let lang = if has_japanese(&text) {
                "ja"
            } else {
                lang.as_str()
            };
            st.awaiting = Some(Awaiting::Title);
            out.say(pick(
                lang,
                "Hello! Which book are you reading? Send its title.",
                "こんにちは！どの本を読んでいますか？書名を送ってください。",
            ));
        } else if st.title.is_none() || st.awaiting == Some(Awaiting::Title) {
            self.open(ctx, st, &text, out).await?;
        } else if reading_agent::is_expert_question(&text)
            && (st.awaiting.is_some() || ctx.session.pending_options.is_some())
        {
            // seed 004: an expert question goes to the BookGuide from any step — a mood
            // asked, a status just changed, options on screen. What was asked stays asked.
            self.ask_guide(ctx, st, &text, out).await;
            self.ask_again(ctx, st, &lang, out);
        } else if crate::i18n::is_thanks(&text) || is_greeting(&text) {
            // thanks or a greeting is no note about the book: answered, and what was asked
            // stays asked
            let title = self
                .catalogue
                .title_in(st.title.as_deref().unwrap_or_default(), &lang);
            out.say(match crate::i18n::is_thanks(&text) {
                true => pick(
                    &lang,
                    &format!("You're welcome! Tell me about «{title}» any time."),
                    &format!("どういたしまして。『{title}』のことをいつでも聞かせてください。"),
                ),
                false => pick(
                    &lang,
                    &format!("Hello! How is «{title}» going?"),
                    &format!("こんにちは！『{title}』はいかがですか？"),
                ),
            });
            self.ask_again(ctx, st, &lang, out);
        } else if let Some(Awaiting::Mood { phase }) = st.awaiting {
            let title = st.title.clone().unwrap_or_default();
            match mood_from_text(&text) {
                // a mood typed (its label, or its number on a platform without the
                // console's numbered options)
                Some(value) => {
                    st.awaiting = None;
                    Self::record_mood(out, title, phase, &value, &lang);
                }
                // something else: kept as a note (the answer to the greeting's question
                // also as the reader's goal), and the mood is asked again, once: a reader
                // may ignore it (seed 004)
                None => {
                    let kind = reading_agent::floor_kind(&text);
                    if reason {
                        Self::keep_reason(out, &text);
                    }
                    Self::change(out, ReadingChange::AddInsight { title, kind, text });
                    let kind = kind_name(kind, &lang);
                    out.say(if reason {
                        pick(
                            &lang,
                            &format!("Noted as {kind}, and as your reason for reading it."),
                            &format!(
                                "{kind}として記録しました。この本を読む理由としても残しました。"
                            ),
                        )
                    } else {
                        pick(
                            &lang,
                            &format!("Noted as {kind}."),
                            &format!("{kind}として記録しました。"),
                        )
                    });
                    if st.mood_asked_again {
                        st.awaiting = None;
                        st.mood_asked_again = false;
                    } else {
                        self.ask_mood(st, phase, &lang, out);
                        st.mood_asked_again = true;
                    }
                }
            }
        } else if is_bare_number(&text) {
            // an option number, its options gone: not a note
            out.say(pick(
                &lang,
                "Those options are no longer shown. Tell me in words what you meant.",
                "その選択肢はもう表示されていません。言葉で教えてください。",
            ));
        } else {
            self.converse(ctx, st, &text, out).await?;
        }
        Ok(())
    }

    /// What the user said, nothing else pending: to the Reading agent, or by rules
    /// without a model.
    async fn converse(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut ReadingState,
        text: &str,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        if ctx.models.for_agent(reading_agent::AGENT).is_some() {
            self.run_agent(ctx, st, text, out).await
        } else {
            st.awaiting = None;
            self.floor_text(ctx, st, text, out).await
        }
    }

    /// A press on the options shown: a mood, an insight's kind, or the agent's options.
    async fn on_choice(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut ReadingState,
        out: &mut TurnOutput,
        request: OptionsRequest,
        values: Vec<String>,
    ) -> Result<(), FlowError> {
        let lang = ctx.language().to_string();

        let title = st.title.clone().unwrap_or_default();
        st.reason_asked = false;
        match st.awaiting.take() {
            Some(Awaiting::Mood { phase }) => {
                let value = values.first().cloned().unwrap_or_default();
                Self::record_mood(out, title, phase, &value, &lang);
            }
            Some(Awaiting::InsightKind { text }) => {
                let kind = values
                    .first()
                    .and_then(|v| InsightKind::parse(v))
                    .unwrap_or(InsightKind::Impression);
                Self::change(out, ReadingChange::AddInsight { title, kind, text });
                out.say(pick(
                    &lang,
                    &format!("Saved as {}.", kind_name(kind, &lang)),
                    &format!("{}として記録しました。", kind_name(kind, &lang)),
                ));
            }
            _ => {
                // options the Reading agent offered: the choices are the user's answer
                let chosen = request.labels_of(&values).join(", ");
                self.converse(ctx, st, &chosen, out).await?;
            }
        }
        Ok(())
    }

    /// `/status`, `/mode`, `/insights`.
    async fn on_command(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut ReadingState,
        out: &mut TurnOutput,
        name: &str,
        args: &str,
    ) -> Result<(), FlowError> {
        let lang = ctx.language().to_string();
        // what was asked before the command is not what the next text answers
        st.reason_asked = false;
        match name {
            "status" => match (status_arg(args), st.title.clone()) {
                (Some(status), Some(_)) => self.set_status(ctx, st, status, out).await?,
                // no status named (or none known): the book's, and how to change it
                (None, Some(title)) => {
                    let now = match st.status {
                        Some(status) => status,
                        None => Self::record_of(ctx, &title)
                            .await?
                            .map_or(ReadingStatus::NotStarted, |r| r.status),
                    };
                    let shown = self.catalogue.title_in(&title, &lang);
                    let now = status_name(now, &lang);
                    out.say(pick(
                        &lang,
                        &format!("«{shown}» is marked {now}. Change it with /status not_started, /status reading or /status completed."),
                        &format!("『{shown}』のステータスは「{now}」です。変えるには /status not_started（読書前）・reading（読書中）・completed（読了）を送ってください。"),
                    ));
                }
                (_, None) => {
                    out.say(pick(&lang, "Use /status not_started, /status reading or /status completed after /reading start TITLE.", "/reading start 書名 のあとで /status not_started・reading・completed を使ってください。"));
                }
            },
            "mode" => match InteractionMode::parse(args.trim()) {
                Some(mode) if st.title.is_some() => {
                    Self::change(
                        out,
                        ReadingChange::SetMode {
                            title: st.title.clone().unwrap_or_default(),
                            mode,
                        },
                    );
                    st.mode = Some(mode);
                    out.say(pick(
                        &lang,
                        &format!("Mode set to {}.", mode.as_str()),
                        &format!("モードを {} にしました。", mode.as_str()),
                    ));
                }
                _ => {
                    out.say(pick(&lang, "Use /mode guided or /mode freeform after /reading start TITLE.", "/reading start 書名 のあとで /mode guided または /mode freeform を使ってください。"));
                }
            },
            "insights" => {
                let md = self.insights_markdown(ctx, st).await?;
                out.say(md);
            }
            _ => out.unknown_command = true,
        }
        Ok(())
    }
}

#[async_trait]
impl Flow for ReadingFlow {
    fn id(&self) -> &str {
        ID
    }

    fn description(&self) -> &str {
        "a reading companion that logs insights and moods per book"
    }

    fn start_commands(&self) -> Vec<CommandInfo> {
        vec![CommandInfo {
            name: "reading",
            description_en: "talk about a book (/reading start TITLE)",
            description_ja: "本について話す（/reading start 書名）",
        }]
    }

    fn commands(&self) -> Vec<CommandInfo> {
        vec![
            CommandInfo {
                name: "status",
                description_en: "set the reading status: not_started, reading, completed",
                description_ja: "読書ステータスを設定: not_started, reading, completed",
            },
            CommandInfo {
                name: "mode",
                description_en: "guided (with choices) or freeform",
                description_ja: "guided（選択肢あり）または freeform",
            },
            CommandInfo {
                name: "insights",
                description_en: "this book's insights",
                description_ja: "この本の記録一覧",
            },
        ]
    }

    fn farewell(&self, lang: &str) -> Option<String> {
        Some(pick(
            lang,
            "See you next time! Send /reading to continue.",
            "また今度。/reading で続きから話せます。",
        ))
    }

    async fn turn(&self, ctx: TurnContext<'_>, input: TurnInput) -> Result<TurnOutput, FlowError> {
        let mut out = TurnOutput::default();
        let mut st: ReadingState = ctx.state()?;
        match input {
            TurnInput::Start => self.on_start(&ctx, &mut st, &mut out).await?,
            TurnInput::Resume => self.on_resume(&ctx, &mut st, &mut out).await?,
            TurnInput::Text(text) => self.on_text(&ctx, &mut st, &mut out, text).await?,
            TurnInput::Choice { request, values } => {
                self.on_choice(&ctx, &mut st, &mut out, request, values)
                    .await?
            }
            TurnInput::Command { name, args } => {
                self.on_command(&ctx, &mut st, &mut out, &name, &args)
                    .await?
            }
        }
        out.set_state(&st)?;
        Ok(out)
    }
}

//! [`Flow`] for [`InterviewFlow`]: one turn of the interview, from the input (start,
//! resume, text, a choice, a command) to the step that handles it.

use super::form::Form;
use super::greeter_tools::Section;
use super::state::{InterviewState, Stage};
use super::{ID, InterviewFlow, confirmation, greeter_tools, lang_of, resume};
use crate::flow::{CommandInfo, Flow, FlowError, TurnContext, TurnInput, TurnOutput};
use crate::i18n::pick;
use crate::store::{Reads, StateChange};
use async_trait::async_trait;
use std::sync::Arc;

#[async_trait]
impl Flow for InterviewFlow {
    fn id(&self) -> &str {
        ID
    }

    fn description(&self) -> &str {
        "applicant interview or form filling by conversation"
    }

    fn start_commands(&self) -> Vec<CommandInfo> {
        vec![CommandInfo {
            name: "interview",
            description_en: "start an application interview (/interview FORM)",
            description_ja: "応募インタビューを始める（/interview フォーム名）",
        }]
    }

    fn commands(&self) -> Vec<CommandInfo> {
        vec![CommandInfo {
            name: "status",
            description_en: "how far the interview is",
            description_ja: "インタビューの進み具合",
        }]
    }

    fn admin_commands(&self) -> &'static [&'static str] {
        &["export"]
    }

    /// `/export FORM`: the form's submissions as CSV, in the form's field order.
    async fn admin_command(
        &self,
        name: &str,
        args: &str,
        store: &dyn Reads,
    ) -> Result<String, FlowError> {
        if name != "export" {
            return Err(FlowError::Other(format!("no admin command /{name}")));
        }
        let form = args.trim();
        if form.is_empty() {
            return Ok("Usage: /export FORM_ID".into());
        }
        let records = store.submissions(Some(form)).await?;
        if records.is_empty() {
            return Ok(format!("No submissions for the form {form:?}."));
        }
        let definition = self.forms.iter().find(|f| f.id == form);
        Ok(format!(
            "{} submissions of {form}:\n{}",
            records.len(),
            super::export::csv(definition.map(|f| f.as_ref()), &records)
        ))
    }

    /// The Greeter asks for the language (and reads it from what is written there).
    fn follows_written_language(&self) -> bool {
        false
    }

    fn decision_message(
        &self,
        session: &crate::store::SessionRecord,
        decision: &str,
        lang: &str,
    ) -> Option<String> {
        let st = session.state.parse::<InterviewState>().ok()?;
        let text = self.form(&st.form_id)?.decisions.get(decision)?;
        let lang = st.language.as_deref().unwrap_or(lang);
        Some(text.get(lang).to_string()).filter(|t| !t.trim().is_empty())
    }

    fn farewell(&self, lang: &str) -> Option<String> {
        Some(pick(
            lang,
            "The interview has been stopped; your answers are kept. Send /interview to resume it or start over.",
            "インタビューを中断しました。回答は保存されています。/interview で続きから再開するか、最初からやり直せます。",
        ))
    }

    async fn turn(&self, ctx: TurnContext<'_>, input: TurnInput) -> Result<TurnOutput, FlowError> {
        let mut out = TurnOutput::default();
        let mut st: InterviewState = ctx.state()?;
        if st.form_id.is_empty() && self.open_form(&ctx, &mut st, &mut out).await? {
            return Ok(out);
        }
        // the conversation's language once the Greeter set one: /lang changes it
        if st.language.is_some()
            && let Some(lang) = &ctx.session.language
        {
            st.language = Some(lang.clone());
        }
        let Some(form) = self.form(&st.form_id).cloned() else {
            out.say(format!("The form {:?} of this interview is no longer configured. Send /interview to start again.", st.form_id));
            out.end();
            return Ok(out);
        };
        let lang = lang_of(&st);
        match input {
            TurnInput::Start => self.advance(&ctx, &form, &mut st, &mut out).await?,
            TurnInput::Resume if st.resume_offer.is_some() => {
                self.show_resume_options(&lang, &mut out)
            }
            TurnInput::Resume => self.repeat_last(
                ctx.session.pending_options.as_ref(),
                &form,
                &mut st,
                &mut out,
            ),
            TurnInput::Choice { values, .. }
                if st.resume_offer.is_some()
                    && values
                        .first()
                        .is_some_and(|v| v == resume::RESUME || v == resume::RESTART) =>
            {
                let resume = values.first().is_some_and(|v| v == resume::RESUME);
                self.answer_resume(&ctx, &form, &mut st, resume, &mut out)
                    .await?;
            }
            TurnInput::Text(text) if st.resume_offer.is_some() => {
                match resume::typed_answer(&text) {
                    Some(resume) => {
                        self.answer_resume(&ctx, &form, &mut st, resume, &mut out)
                            .await?
                    }
                    None => self.show_resume_options(&lang, &mut out),
                }
            }
            // "I want to stop" is /end in words: the answers kept, the farewell said
            TurnInput::Text(text)
                if st.stage != Stage::Finished
                    && super::applicant_question::wants_to_stop(&text) =>
            {
                if let Some(farewell) = self.farewell(&lang) {
                    out.say(farewell);
                }
                out.end();
            }
            TurnInput::Text(text) => self.on_text(&ctx, &form, &mut st, &mut out, &text).await?,
            TurnInput::Choice { values, .. } => {
                self.on_choice(&ctx, &form, &mut st, &mut out, &values)
                    .await?
            }
            TurnInput::Command { name, .. } if name == "status" => {
                self.status(&form, &st, &mut out)
            }
            TurnInput::Command { .. } => out.unknown_command = true,
        }
        out.set_state(&st)?;
        Ok(out)
    }
}

/// The turn, one method per kind of input.
impl InterviewFlow {
    /// A new interview's first turn: the form it asked for (or the default one) and the
    /// hello, or the offer to resume an earlier interview of that form. `Ok(true)`: the
    /// turn is over (no such form, or the offer is made).
    async fn open_form(
        &self,
        ctx: &TurnContext<'_>,
        st: &mut InterviewState,
        out: &mut TurnOutput,
    ) -> Result<bool, FlowError> {
        let wanted = ctx
            .start_arg
            .map(str::to_string)
            .or_else(|| self.default_form.clone())
            .or_else(|| self.forms.first().map(|f| f.id.clone()));
        match wanted.as_deref().and_then(|id| self.form(id)) {
            Some(form) => {
                st.form_id = form.id.clone();
                out.change(StateChange::SetCurrentAgent {
                    agent: greeter_tools::AGENT.into(),
                });
                let name = &ctx.user.display_name;
                let en = format!(
                    "Hello {name}! Thank you for your interest: {}.",
                    form.title.get("en")
                );
                let ja = format!(
                    "{name}さん、こんにちは。「{}」へのご関心ありがとうございます。",
                    form.title.get("ja")
                );
                // in both languages until the Greeter knows which (unless it is known)
                out.say(match ctx.session.language.as_deref() {
                    Some(lang) => pick(lang, &en, &ja),
                    None => format!("{en} / {ja}"),
                });
            }
            None => {
                let known: Vec<&str> = self.forms.iter().map(|f| f.id.as_str()).collect();
                out.say(if known.is_empty() {
                    "No interview forms are set up on this bot yet. / このボットにはまだ面接フォームが設定されていません。".to_string()
                } else {
                    format!(
                        "There is no form {:?}. Available forms: {}. Start with /interview FORM.",
                        wanted.unwrap_or_default(),
                        known.join(", ")
                    )
                });
                out.end();
                return Ok(true);
            }
        }
        if let Some(lang) = ctx.session.language.clone() {
            st.language = Some(lang);
        }
        if let Some(form) = self.form(&st.form_id).cloned()
            && let Some((old_id, old, _)) = self.resumable(ctx, &form.id).await?
        {
            // the hello goes; the offer replaces it
            out.outgoing.clear();
            self.offer_resume(&form, st, old_id, &old, out);
            out.set_state(st)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// What the applicant wrote, at each stage of the interview.
    async fn on_text(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        out: &mut TurnOutput,
        text: &str,
    ) -> Result<(), FlowError> {
        let lang = lang_of(st);
        match st.stage {
            Stage::Greeting => self.greeting_text(ctx, form, st, text, out).await?,
            Stage::Interviewing => self.answer(ctx, form, st, out, text).await?,
            Stage::Confirming => match confirmation::typed_answer(text) {
                Some(true) => self.submit(ctx, form, st, None, out),
                Some(false) => match confirmation::field_named(form, st, text) {
                    // "change my email": that one at once
                    Some(id) => self.change_field(ctx, form, st, out, &id).await?,
                    None => {
                        st.stage = Stage::ChoosingChange;
                        self.show_change_options(form, st, out);
                    }
                },
                None => self.show_confirmation(form, st, out),
            },
            Stage::ChoosingChange => match confirmation::field_named(form, st, text) {
                Some(id) => self.change_field(ctx, form, st, out, &id).await?,
                None => {
                    out.say(pick(
                        &lang,
                        "Please pick the answer to change with the buttons.",
                        "修正する項目をボタンで選んでください。",
                    ));
                    self.show_change_options(form, st, out);
                }
            },
            Stage::Finished => {}
        }
        Ok(())
    }

    /// A press on the options shown, at each stage of the interview.
    async fn on_choice(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        out: &mut TurnOutput,
        values: &[String],
    ) -> Result<(), FlowError> {
        let value = values.first().cloned().unwrap_or_default();
        match st.stage {
            Stage::Greeting => {
                match greeter_tools::section(st) {
                    Section::Language => {
                        self.set_language(st, out, if value == "ja" { "ja" } else { "en" })
                    }
                    Section::Timezone if st.zone_choices.contains(&value) => {
                        self.set_timezone(st, out, &value)
                    }
                    Section::Country => {
                        if let Some(code) = greeter_tools::resolve_country(&value) {
                            self.set_country(st, out, code)
                        }
                    }
                    _ => {}
                }
                self.advance(ctx, form, st, out).await?;
            }
            Stage::Interviewing => {
                // the reviewer maps option values back (and checks them)
                let answer = values.join(", ");
                self.answer(ctx, form, st, out, &answer).await?;
            }
            Stage::Confirming if value == "confirm" => self.submit(ctx, form, st, None, out),
            Stage::Confirming => {
                st.stage = Stage::ChoosingChange;
                self.show_change_options(form, st, out);
            }
            Stage::ChoosingChange => self.change_field(ctx, form, st, out, &value).await?,
            Stage::Finished => {}
        }
        Ok(())
    }

    /// `/status`: how many questions are answered, then the question the interview waits
    /// on again (its options with it), so the applicant need not scroll back for it.
    fn status(&self, form: &Form, st: &InterviewState, out: &mut TurnOutput) {
        out.say(self.progress(form, st));
        if st.stage == Stage::Interviewing
            && let Some(id) = st.current.as_deref()
            && let (Some(field), Some(question)) = (form.field(id), st.question_of(id))
        {
            self.present_question(st, out, field, question.to_string(), true);
        }
    }

    /// How far the interview is: questions answered of the plan's; during the greeting
    /// (no plan yet), what is being asked.
    pub(super) fn progress(&self, form: &Form, st: &InterviewState) -> String {
        let lang = lang_of(st);
        if st.stage == Stage::Greeting {
            let (en, ja) = match greeter_tools::section(st) {
                Section::Language => ("which language you prefer", "ご希望の言語"),
                Section::Country => ("which country you live in", "お住まいの国"),
                Section::Timezone | Section::Completed => {
                    ("which time zone you are in", "お住まいの地域のタイムゾーン")
                }
            };
            return pick(
                &lang,
                &format!(
                    "{}: before the questions, a few details about you. I am asking {en}.",
                    form.title.get("en")
                ),
                &format!(
                    "{}: 質問の前に、あなたについて少し伺っています。いまは{ja}をお聞きしています。",
                    form.title.get("ja")
                ),
            );
        }
        let done = st.closed_count();
        pick(
            &lang,
            &format!(
                "{}: {done} of {} questions answered.",
                form.title.get("en"),
                st.plan.len()
            ),
            &format!(
                "{}: {} 問中 {done} 問に回答済みです。",
                form.title.get("ja"),
                st.plan.len()
            ),
        )
    }
}

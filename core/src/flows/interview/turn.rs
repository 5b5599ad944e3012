//! [`Flow`] for [`InterviewFlow`]: one turn of the interview, from the input (start,
//! resume, text, a choice, a command) to the step that handles it.

use super::*;

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

    /// The Greeter asks for the language (and reads it from what is written there).
    fn follows_written_language(&self) -> bool {
        false
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
        if st.form_id.is_empty() {
            let wanted = ctx
                .start_arg
                .map(str::to_string)
                .or_else(|| self.default_form.clone())
                .or_else(|| self.forms.first().map(|f| f.id.clone()));
            match wanted.as_deref().and_then(|id| self.form(id)) {
                Some(form) => {
                    st.form_id = form.id.clone();
                    out.change(StateChange::SetCurrentAgent {
                        agent: greeter::AGENT.into(),
                    });
                    out.say(format!(
                        "Hello {}! Thank you for your interest: {}. / {}さん、こんにちは。「{}」へのご関心ありがとうございます。",
                        ctx.user.display_name,
                        form.title.get("en"),
                        ctx.user.display_name,
                        form.title.get("ja")
                    ));
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
                    return Ok(out);
                }
            }
            if let Some(lang) = ctx.session.language.clone() {
                st.language = Some(lang);
            }
            if let Some(form) = self.form(&st.form_id).cloned()
                && let Some((old_id, old, _)) = self.resumable(&ctx, &form.id).await?
            {
                // the hello goes; the offer replaces it
                out.outgoing.clear();
                self.offer_resume(&form, &mut st, old_id, &old, &mut out);
                out.set_state(&st)?;
                return Ok(out);
            }
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
            TurnInput::Text(text) => match st.stage {
                Stage::Greeting => {
                    self.greeting_text(&ctx, &form, &mut st, &text, &mut out)
                        .await?
                }
                Stage::Interviewing => self.answer(&ctx, &form, &mut st, &mut out, &text).await?,
                Stage::Confirming => {
                    let t = text.trim().to_lowercase();
                    if ["yes", "ok", "confirm", "はい", "確定"].contains(&t.as_str()) {
                        self.submit(&ctx, &form, &mut st, None, &mut out);
                    } else {
                        self.show_confirmation(&form, &st, &mut out);
                    }
                }
                Stage::ChoosingChange => {
                    out.say(pick(
                        &lang,
                        "Please pick the answer to change with the buttons.",
                        "修正する項目をボタンで選んでください。",
                    ));
                    self.show_change_options(&form, &st, &mut out);
                }
                Stage::Finished => {}
            },
            TurnInput::Choice { values, .. } => {
                let value = values.first().cloned().unwrap_or_default();
                match st.stage {
                    Stage::Greeting => {
                        match greeter::section(&st) {
                            Section::Language => self.set_language(
                                &mut st,
                                &mut out,
                                if value == "ja" { "ja" } else { "en" },
                            ),
                            Section::Timezone if st.zone_choices.contains(&value) => {
                                self.set_timezone(&mut st, &mut out, &value)
                            }
                            Section::Country => {
                                if let Some(code) = greeter::resolve_country(&value) {
                                    self.set_country(&mut st, &mut out, code)
                                }
                            }
                            _ => {}
                        }
                        self.advance(&ctx, &form, &mut st, &mut out).await?;
                    }
                    Stage::Interviewing => {
                        // the reviewer maps option values back (and checks them)
                        let answer = values.join(", ");
                        self.answer(&ctx, &form, &mut st, &mut out, &answer).await?;
                    }
                    Stage::Confirming if value == "confirm" => {
                        self.submit(&ctx, &form, &mut st, None, &mut out)
                    }
                    Stage::Confirming => {
                        st.stage = Stage::ChoosingChange;
                        self.show_change_options(&form, &st, &mut out);
                    }
                    Stage::ChoosingChange => {
                        if form.field(&value).is_some() {
                            *st.field_mut(&value) = state::FieldProgress::default();
                            st.stage = Stage::Interviewing;
                            self.advance(&ctx, &form, &mut st, &mut out).await?;
                        }
                    }
                    Stage::Finished => {}
                }
            }
            TurnInput::Command { name, .. } if name == "status" => {
                let done = st.closed_count();
                out.say(pick(
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
                ));
            }
            TurnInput::Command { .. } => out.unknown_command = true,
        }
        out.set_state(&st)?;
        Ok(out)
    }
}

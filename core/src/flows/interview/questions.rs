//! Questions and answers: choosing the next field, drafting its question through the
//! Interviewer (QuickCheck inside `ask`), and reviewing each answer (Reviewer: type, required
//! facts, follow-ups) until the field closes.

use super::*;

impl InterviewFlow {
    /// Moves the interview forward until something is asked or it finishes.
    pub(super) async fn advance(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        if st.stage == Stage::Greeting {
            if !self.greeting_step(st, out) {
                return Ok(());
            }
            st.plan = architect::plan(
                ctx.models.for_agent(architect::AGENT).as_deref(),
                form,
                ctx.ledger,
            )
            .await;
            for id in &st.plan {
                st.fields.entry(id.clone()).or_default();
            }
            st.stage = Stage::Interviewing;
            out.change(StateChange::SetCurrentAgent {
                agent: interviewer::AGENT.into(),
            });
            let lang = lang_of(st);
            out.say(pick(
                &lang,
                "Thank you! Let's begin with a few questions.",
                "ありがとうございます。それでは質問を始めます。",
            ));
        }
        if st.stage != Stage::Interviewing {
            return Ok(());
        }
        loop {
            let Some(id) = st.next_open_field() else {
                return self.finish(ctx, form, st, out).await;
            };
            let Some(field) = form.field(&id) else {
                st.field_mut(&id).status = FieldStatus::Incomplete;
                continue;
            };
            if let Some(prefill) = st.field_mut(&id).prefill.take() {
                // found in an earlier answer: reviewed like an answer, never just copied
                if self
                    .review_answer(ctx, form, st, &id, &prefill, false)
                    .await?
                {
                    continue;
                }
            }
            if self.ask(ctx, form, st, out, &id, Purpose::First).await {
                return Ok(());
            }
            tracing::warn!(field = %field.id, "no question for this field passes QuickCheck; closing it as incomplete");
            st.field_mut(&id).status = FieldStatus::Incomplete;
        }
    }

    /// Drafts, checks and sends a question. False when no question may be sent.
    pub(super) async fn ask(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        out: &mut TurnOutput,
        id: &str,
        purpose: Purpose,
    ) -> bool {
        let Some(field) = form.field(id) else {
            return false;
        };
        let context = self.context(
            ctx,
            st,
            format!(
                "{} ({}): {}",
                field.id,
                field.label.get("en"),
                field.intent.as_deref().unwrap_or("-")
            ),
        );
        let qc_model = (form.variant == Variant::Application)
            .then(|| ctx.models.for_agent(quick_check::AGENT))
            .flatten();
        let drafted = interviewer::draft(
            ctx.models.for_agent(interviewer::AGENT),
            qc_model,
            form,
            field,
            st,
            &purpose,
            context,
            ctx.ledger,
        )
        .await;
        let Some(drafted) = drafted else { return false };
        st.blocked_drafts += drafted.blocked_drafts;
        let progress = st.field_mut(id);
        progress.status = FieldStatus::Interviewing;
        st.current = Some(id.to_string());
        st.asked.push(Asked {
            field_id: id.to_string(),
            question: drafted.question.clone(),
            answer: None,
        });
        let lang = lang_of(st);
        let kind = field.kind();
        let choice = matches!(kind, form::FieldType::Choice | form::FieldType::MultiChoice);
        // an optional question can be skipped with a button (not a number's: on the
        // console a typed number picks an option)
        let skip = (!field.required && kind != form::FieldType::Number)
            .then(|| OptionItem::new(reviewer::SKIP, pick(&lang, "Skip", "スキップ")));
        if choice && purpose == Purpose::First {
            let mut options: Vec<OptionItem> = field
                .options
                .iter()
                .map(|o| OptionItem::new(o.value.clone(), o.label.get(&lang)))
                .collect();
            options.extend(skip.filter(|_| kind == form::FieldType::Choice));
            out.options(
                drafted.question,
                options,
                kind == form::FieldType::MultiChoice,
            );
        } else if let Some(skip) = skip.filter(|_| !choice) {
            out.options(drafted.question, vec![skip], false);
        } else {
            out.say(drafted.question);
        }
        true
    }

    /// Reviews an answer for field `id` and records it. True when the field is done.
    pub(super) async fn review_answer(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        id: &str,
        answer: &str,
        from_user: bool,
    ) -> Result<bool, FlowError> {
        let Some(field) = form.field(id) else {
            return Ok(false);
        };
        let lang = lang_of(st);
        st.field_mut(id).status = FieldStatus::Reviewing;
        if from_user {
            st.record_answer(id, answer);
        }
        let review = match reviewer::validate(field, answer, &lang) {
            Err(message) => reviewer::ReviewResult {
                passed: false,
                feedback: Some(message),
                ..Default::default()
            },
            Ok(value) => {
                let model_review = match ctx.models.for_agent(reviewer::AGENT) {
                    Some(model) => {
                        let context = self.context(
                            ctx,
                            st,
                            format!("{} ({})", field.id, field.label.get("en")),
                        );
                        reviewer::model_review(
                            model.as_ref(),
                            form,
                            field,
                            &context,
                            answer,
                            ctx.ledger,
                        )
                        .await
                    }
                    None => None,
                };
                let mut review = model_review.unwrap_or_else(|| {
                    // this field's answers since it was last opened
                    let mut answers: Vec<&str> = st
                        .asked
                        .iter()
                        .filter(|a| a.field_id == id)
                        .filter_map(|a| a.answer.as_deref())
                        .collect();
                    if !from_user {
                        // a value found in an answer to another field
                        answers.push(answer);
                    }
                    let from = answers
                        .len()
                        .saturating_sub(st.field(id).follow_ups as usize + 1);
                    reviewer::floor_review(field, &value, &answers[from..], st.field(id).follow_ups)
                });
                // the model may normalise a text value, never replace a typed one by an invalid one
                if review.passed {
                    let candidate = review.field_value.clone().unwrap_or_else(|| value.clone());
                    review.field_value =
                        Some(reviewer::validate(field, &candidate, &lang).unwrap_or(value.clone()));
                }
                if from_user {
                    let open: Vec<String> = st
                        .plan
                        .iter()
                        .filter(|f| !st.field(f).status.is_closed())
                        .cloned()
                        .collect();
                    review
                        .extracted_facts
                        .extend(reviewer::extract_for_other_fields(form, id, &open, answer));
                }
                review
            }
        };
        for fact in &review.extracted_facts {
            if form.field(&fact.field_id).is_none() || fact.value.trim().is_empty() {
                continue;
            }
            let target = st.field_mut(&fact.field_id);
            match &fact.fact_key {
                Some(key) => {
                    target.facts.insert(key.clone(), fact.value.clone());
                }
                None if fact.field_id != id
                    && !target.status.is_closed()
                    && target.prefill.is_none() =>
                {
                    target.prefill = Some(fact.value.clone());
                }
                None => {}
            }
        }
        let progress = st.field_mut(id);
        if review.passed {
            progress.status = FieldStatus::Done;
            progress.value = review.field_value.clone();
            progress.missing_facts.clear();
            progress.feedback = None;
            if st.current.as_deref() == Some(id) {
                st.current = None;
            }
            return Ok(true);
        }
        progress.missing_facts = review.missing_facts.clone();
        progress.feedback = review.feedback.clone();
        Ok(false)
    }

    pub(super) async fn answer(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        out: &mut TurnOutput,
        text: &str,
    ) -> Result<(), FlowError> {
        let Some(id) = st.current.clone() else {
            return self.advance(ctx, form, st, out).await;
        };
        let Some(field) = form.field(&id) else {
            return self.advance(ctx, form, st, out).await;
        };
        if !field.required && reviewer::is_skip(text) {
            // an optional question skipped: closed without a value, never asked again
            st.record_answer(&id, text);
            st.field_mut(&id).status = FieldStatus::Skipped;
            st.current = None;
            return self.advance(ctx, form, st, out).await;
        }
        if self.review_answer(ctx, form, st, &id, text, true).await? {
            return self.advance(ctx, form, st, out).await;
        }
        let lang = lang_of(st);
        let progress = st.field_mut(&id);
        progress.follow_ups += 1;
        if progress.follow_ups > field.max_follow_ups {
            progress.status = FieldStatus::Incomplete;
            st.current = None;
            out.say(pick(
                &lang,
                "Thank you, let's move on.",
                "ありがとうございます。次に進みます。",
            ));
            return self.advance(ctx, form, st, out).await;
        }
        let purpose = match reviewer::validate(field, text, &lang) {
            Err(message) => Purpose::Invalid { message },
            Ok(_) => Purpose::FollowUp {
                missing: progress.missing_facts.clone(),
                feedback: progress.feedback.clone(),
            },
        };
        if !self.ask(ctx, form, st, out, &id, purpose).await {
            st.field_mut(&id).status = FieldStatus::Incomplete;
            st.current = None;
            return self.advance(ctx, form, st, out).await;
        }
        Ok(())
    }

    /// Repeats what the applicant was asked last (after a restart or a `/start` in a console).
    /// "Welcome back" and the question the interview is waiting on (`pending`: the options
    /// it showed).
    pub(super) fn repeat_last(
        &self,
        pending: Option<&crate::message::OptionsRequest>,
        form: &Form,
        st: &mut InterviewState,
        out: &mut TurnOutput,
    ) {
        let lang = lang_of(st);
        out.say(pick(
            &lang,
            "Welcome back! Let's continue where we stopped.",
            "おかえりなさい。前回の続きから再開します。",
        ));
        if let Some(options) = pending {
            out.outgoing.push(Outgoing::Options(options.clone()));
            return;
        }
        match st.stage {
            Stage::Greeting => {
                self.greeting_step(st, out);
            }
            Stage::Interviewing => {
                if let Some(q) = st
                    .current
                    .as_ref()
                    .and_then(|id| st.question_of(id))
                    .map(str::to_string)
                {
                    out.say(q);
                }
            }
            Stage::Confirming | Stage::ChoosingChange => self.show_confirmation(form, st, out),
            Stage::Finished => {}
        }
    }
}

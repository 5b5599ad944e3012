//! Questions and answers: choosing the next field, drafting its question through the
//! Interviewer (QuickCheck inside `ask`), and reviewing each answer (Reviewer: type, required
//! facts, follow-ups) until the field closes.

use super::form::{self, Form, Variant};
use super::interviewer::{Drafted, Purpose};
use super::state::{Asked, FieldStatus, InterviewState, Stage};
use super::{
    InterviewFlow, applicant_question, architect, interviewer, lang_of, quick_check, reviewer,
};
use crate::flow::{FlowError, TurnContext, TurnOutput};
use crate::i18n::pick;
use crate::message::{OptionItem, Outgoing};
use crate::store::StateChange;
use std::sync::Arc;

/// A question drafted and passed by QuickCheck before its turn came (speculation).
pub(super) struct Prepared {
    field_id: String,
    drafted: Drafted,
}

impl InterviewFlow {
    /// Moves the interview forward until something is asked or it finishes.
    pub(super) async fn advance(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        self.advance_with(ctx, form, st, out, None).await
    }

    /// [`Self::advance`], with the next question already drafted and passed (`prepared`):
    /// it is sent if its field is the one to ask.
    async fn advance_with(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        out: &mut TurnOutput,
        mut prepared: Option<Prepared>,
    ) -> Result<(), FlowError> {
        if st.stage == Stage::Greeting {
            if !self.greeting_step(st, out) {
                return Ok(());
            }
            st.plan = self.plan(ctx, form).await;
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
            if let Some(ready) = prepared.take().filter(|p| p.field_id == id) {
                self.send_question(form, st, out, &id, &Purpose::First, ready.drafted);
                return Ok(());
            }
            if self.ask(ctx, form, st, out, &id, Purpose::First).await {
                return Ok(());
            }
            tracing::warn!(field = %field.id, "no question for this field passes QuickCheck; closing it as incomplete");
            st.field_mut(&id).status = FieldStatus::Incomplete;
        }
    }

    /// The order of the form's fields: the Architect's plan, made once per form and kept;
    /// without a model, the form's own order.
    async fn plan(&self, ctx: &TurnContext<'_>, form: &Arc<Form>) -> Vec<String> {
        let Some(model) = ctx.models.for_agent(architect::AGENT) else {
            return form.sorted_field_ids();
        };
        let cached = self
            .plans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&form.id)
            .cloned();
        if let Some(plan) = cached {
            return plan;
        }
        let plan = architect::plan(Some(model.as_ref()), form, ctx.ledger).await;
        self.plans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(form.id.clone(), plan.clone());
        plan
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
        match self
            .draft_question(ctx, form, st, id, &purpose, ctx.ledger)
            .await
        {
            Some(drafted) => {
                self.send_question(form, st, out, id, &purpose, drafted);
                true
            }
            None => false,
        }
    }

    /// The question for field `id` as `st` stands, drafted by the Interviewer and passed by
    /// QuickCheck (its deterministic layer first), or the form's template; `None` when no
    /// question may be sent. Its model calls go to `ledger`.
    pub(super) async fn draft_question(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &InterviewState,
        id: &str,
        purpose: &Purpose,
        ledger: &crate::agent::LlmLedger,
    ) -> Option<Drafted> {
        let field = form.field(id)?;
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
        interviewer::draft(
            ctx.models.for_agent(interviewer::AGENT),
            qc_model,
            form,
            field,
            st,
            purpose,
            context,
            ledger,
        )
        .await
    }

    /// Sends a question that passed QuickCheck: the field is being asked, with its
    /// options (or a Skip button for an optional one).
    fn send_question(
        &self,
        form: &Form,
        st: &mut InterviewState,
        out: &mut TurnOutput,
        id: &str,
        purpose: &Purpose,
        drafted: Drafted,
    ) {
        let Some(field) = form.field(id) else {
            return;
        };
        st.blocked_drafts += drafted.blocked_drafts;
        let progress = st.field_mut(id);
        progress.status = FieldStatus::Interviewing;
        st.current = Some(id.to_string());
        st.asked.push(Asked {
            field_id: id.to_string(),
            question: drafted.question.clone(),
            answer: None,
        });
        self.present_question(st, out, field, drafted.question, *purpose == Purpose::First);
    }

    /// Shows `question` about `field`: with the field's options when `with_options` (a
    /// first question, or one asked again), else with a Skip button for an optional one.
    pub(super) fn present_question(
        &self,
        st: &InterviewState,
        out: &mut TurnOutput,
        field: &form::FormField,
        question: String,
        with_options: bool,
    ) {
        let lang = lang_of(st);
        let kind = field.kind();
        let choice = matches!(kind, form::FieldType::Choice | form::FieldType::MultiChoice);
        // an optional question can be skipped with a button (not a number's: on the
        // console a typed number picks an option)
        let skip = (!field.required && kind != form::FieldType::Number)
            .then(|| OptionItem::new(reviewer::SKIP, pick(&lang, "Skip", "スキップ")));
        if choice && with_options {
            let mut options: Vec<OptionItem> = field
                .options
                .iter()
                .map(|o| OptionItem::new(o.value.clone(), o.label.get(&lang)))
                .collect();
            options.extend(skip.filter(|_| kind == form::FieldType::Choice));
            out.options(question, options, kind == form::FieldType::MultiChoice);
        } else if let Some(skip) = skip.filter(|_| !choice) {
            out.options(question, vec![skip], false);
        } else {
            out.say(question);
        }
    }

    /// The field asked after `id` if this answer closes it, and the state it would be
    /// asked in: what the next question can be drafted from while the Reviewer reads the
    /// answer. `None` when there is nothing to gain (no Interviewer model, no field left,
    /// or the next one holds a value to review first).
    fn next_if_closed(
        &self,
        ctx: &TurnContext<'_>,
        st: &InterviewState,
        id: &str,
        answer: &str,
    ) -> Option<(String, InterviewState)> {
        // side by side only where the server takes both calls at once: on a single-slot
        // server the draft would only queue before (or behind) the review
        let interviewer = ctx.models.for_agent(interviewer::AGENT)?;
        if interviewer.parallel_calls() < 2 {
            return None;
        }
        let mut closed = st.clone();
        closed.record_answer(id, answer);
        closed.field_mut(id).status = FieldStatus::Done;
        closed.current = None;
        let next = closed.next_open_field()?;
        if closed.field(&next).prefill.is_some() {
            return None;
        }
        Some((next, closed))
    }

    /// Reviews the answer to field `id` while the next field's question is drafted beside
    /// it (speculation). Returns whether the field closed, and the next question when the
    /// review passed and nothing it found changes what comes next. A draft that is not
    /// used is dropped at once (its request cancelled on the server) and its calls are
    /// recorded as wasted.
    async fn review_beside_next(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        id: &str,
        text: &str,
    ) -> Result<(bool, Option<Prepared>), FlowError> {
        let Some((next, closed)) = self.next_if_closed(ctx, st, id, text) else {
            let passed = self.review_answer(ctx, form, st, id, text, true).await?;
            return Ok((passed, None));
        };
        let spent = crate::agent::LlmLedger::new();
        // boxed, so that dropping it drops the calls in flight (and records them)
        let mut draft =
            Box::pin(self.draft_question(ctx, form, &closed, &next, &Purpose::First, &spent));
        let (passed, mut drafted) = {
            let review = self.review_answer(ctx, form, st, id, text, true);
            tokio::pin!(review);
            let mut drafted = None;
            let passed = loop {
                tokio::select! {
                    passed = &mut review => break passed,
                    question = &mut draft, if drafted.is_none() => drafted = Some(question),
                }
            };
            (passed, drafted)
        };
        let passed = match passed {
            Ok(passed) => passed,
            Err(e) => {
                spent.mark_wasted();
                ctx.ledger.absorb(&spent);
                return Err(e);
            }
        };
        let usable = passed
            && st.next_open_field().as_deref() == Some(next.as_str())
            && st.field(&next).prefill.is_none();
        if !usable {
            // a follow-up (or another field) comes next: the draft is dropped, and with it
            // a request still in flight
            drop(draft);
            spent.mark_wasted();
            ctx.ledger.absorb(&spent);
            return Ok((passed, None));
        }
        let question = match drafted.take() {
            Some(question) => question,
            None => draft.await,
        };
        ctx.ledger.absorb(&spent);
        Ok((
            passed,
            question.map(|drafted| Prepared {
                field_id: next.clone(),
                drafted,
            }),
        ))
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
        let mut reviewed_by = crate::agent::trace::By::Floor;
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
                if model_review.is_some() {
                    reviewed_by = crate::agent::trace::By::Model;
                }
                let mut review = model_review
                    .unwrap_or_else(|| floor_review_of(st, field, &value, answer, from_user));
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
        ctx.ledger.note(crate::agent::trace::Note::Review {
            field: id.to_string(),
            by: reviewed_by,
            complete: review.passed,
            missing: review.missing_facts.clone(),
            feedback: review.feedback.clone(),
        });
        keep_extracted_facts(form, st, id, &review.extracted_facts);
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
        if applicant_question::is_question(field, text) {
            self.applicant_asked(ctx, form, st, out, &id, text);
            return Ok(());
        }
        let (closed, prepared) = self.review_beside_next(ctx, form, st, &id, text).await?;
        if closed {
            return self.advance_with(ctx, form, st, out, prepared).await;
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

/// The rule-based review of `value` for `field`, over the field's answers since it was
/// last opened (and `answer`, when it was found in an answer to another field).
fn floor_review_of(
    st: &InterviewState,
    field: &form::FormField,
    value: &str,
    answer: &str,
    from_user: bool,
) -> reviewer::ReviewResult {
    let id = field.id.as_str();
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
    reviewer::floor_review(field, value, &answers[from..], st.field(id).follow_ups)
}

/// Facts a review found for the form's fields: a fact of a field kept under its key, a
/// value for another open field kept as that field's prefill (the answer to `id` itself is
/// the review's own value).
fn keep_extracted_facts(
    form: &Form,
    st: &mut InterviewState,
    id: &str,
    facts: &[reviewer::ExtractedFact],
) {
    for fact in facts {
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
}

//! The interview flow (seeds 000 and 001): Greeter → Architect → Interviewer (QuickCheck
//! before every question, Reviewer after every answer) → Auditor (application variant) or a
//! confirmation step (plain variant) → a stored submission.
//!
//! [`InterviewFlow`] is the state machine; the agents live one per file and each has a
//! rule-based floor, so an interview runs to the end with no model at all. Every seed
//! invariant is enforced here or in the agent files, never left to a prompt:
//! a question is sent only from [`interviewer::draft`] (QuickCheck inside `ask`); a field
//! closes only through `InterviewFlow::review_answer` (or when its follow-ups run out);
//! `InterviewFlow::finish` always runs the Auditor for applications; a submission is
//! `submitted` only when every required field is done.

pub mod architect;
pub mod auditor;
pub mod compliance;
pub mod form;
pub mod greeter;
pub mod interviewer;
pub mod quick_check;
pub mod reviewer;
pub mod state;

use crate::admin::AdminNotice;
use crate::agent::subtask::{SubtaskContext, summarize};
use crate::flow::{CommandInfo, Flow, FlowError, TurnContext, TurnInput, TurnOutput};
use crate::i18n::pick;
use crate::message::{OptionItem, Outgoing};
use crate::store::StateChange;
use crate::store::{Submission, SubmissionStatus};
use async_trait::async_trait;
use auditor::AuditResult;
use form::{Form, Variant};
use greeter::Section;
use interviewer::Purpose;
use serde_json::{Map, Value, json};
use state::{Asked, FieldStatus, InterviewState, Stage};
use std::sync::Arc;

pub const ID: &str = "interview";

pub struct InterviewFlow {
    forms: Vec<Arc<Form>>,
    default_form: Option<String>,
}

fn lang_of(st: &InterviewState) -> String {
    st.language.clone().unwrap_or_else(|| "en".into())
}

impl InterviewFlow {
    /// `forms` as loaded from `config/forms`; `default_form` is used when a start names none.
    pub fn new(forms: Vec<Form>, default_form: Option<String>) -> Self {
        InterviewFlow {
            forms: forms.into_iter().map(Arc::new).collect(),
            default_form,
        }
    }

    fn form(&self, id: &str) -> Option<&Arc<Form>> {
        self.forms.iter().find(|f| f.id == id)
    }

    fn context(&self, ctx: &TurnContext<'_>, st: &InterviewState, item: String) -> SubtaskContext {
        SubtaskContext {
            conversation_summary: summarize(ctx.history, 12),
            current_item: item,
            collected_facts: st.collected_facts(),
        }
    }

    // ---- Greeter ----

    fn greeting_step(&self, form: &Form, st: &mut InterviewState, out: &mut TurnOutput) -> bool {
        let lang = lang_of(st);
        match greeter::section(st) {
            Section::Language => {
                out.options(
                    "Which language would you like to use? / ご希望の言語を選んでください。",
                    vec![
                        OptionItem::new("en", "English"),
                        OptionItem::new("ja", "日本語"),
                    ],
                    false,
                );
                false
            }
            Section::Country => {
                out.say(pick(
                    &lang,
                    "Which country do you live in?",
                    "お住まいの国を教えてください。",
                ));
                false
            }
            Section::Timezone => {
                let zones = greeter::zones_of(st.country.as_deref().unwrap_or_default());
                if zones.len() > 1 {
                    st.zone_choices = zones.iter().map(|z| z.to_string()).collect();
                    out.options(
                        pick(
                            &lang,
                            "Which time zone are you in?",
                            "どのタイムゾーンにお住まいですか？",
                        ),
                        zones
                            .iter()
                            .map(|z| OptionItem::new(*z, z.replace('_', " ")))
                            .collect(),
                        false,
                    );
                    false
                } else {
                    let zone = zones.first().copied().unwrap_or(greeter::FALLBACK_TIMEZONE);
                    self.set_timezone(st, out, zone);
                    let _ = form;
                    true
                }
            }
            Section::Completed => true,
        }
    }

    fn set_language(&self, st: &mut InterviewState, out: &mut TurnOutput, lang: &str) {
        st.language = Some(lang.to_string());
        out.change(StateChange::SetLanguage {
            language: lang.to_string(),
        });
    }

    fn set_country(&self, st: &mut InterviewState, out: &mut TurnOutput, country: &str) {
        st.country = Some(country.to_string());
        out.change(StateChange::SetCountry {
            country: country.to_string(),
        });
    }

    fn set_timezone(&self, st: &mut InterviewState, out: &mut TurnOutput, zone: &str) {
        st.timezone = Some(zone.to_string());
        st.zone_choices.clear();
        out.change(StateChange::SetTimezone {
            timezone: zone.to_string(),
        });
    }

    /// Applies what the Greeter agent set, emitting the seed's state changes.
    fn apply_greeter(
        &self,
        st: &mut InterviewState,
        out: &mut TurnOutput,
        updated: &InterviewState,
    ) {
        if updated.language != st.language
            && let Some(l) = &updated.language
        {
            self.set_language(st, out, l);
        }
        if updated.country != st.country
            && let Some(c) = &updated.country
        {
            self.set_country(st, out, c);
        }
        if updated.timezone != st.timezone
            && let Some(z) = &updated.timezone
        {
            self.set_timezone(st, out, z);
        }
    }

    async fn greeting_text(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        text: &str,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        let section = greeter::section(st);
        if section == Section::Language {
            if let Some(lang) = greeter::detect_language(text) {
                self.set_language(st, out, lang);
            }
        } else if let Some(model) = ctx.models.for_agent(greeter::AGENT) {
            match greeter::run_model(
                model.as_ref(),
                st.clone(),
                form.title.get(&lang_of(st)),
                text,
                ctx.ledger,
            )
            .await
            {
                Ok(result) => {
                    self.apply_greeter(st, out, &result.state.state);
                    if let Some(question) = result
                        .state
                        .asked
                        .filter(|_| greeter::section(st) != Section::Completed)
                        && quick_check::screen(form, &question).is_empty()
                    {
                        out.say(question);
                        return Ok(());
                    }
                }
                Err(e) => tracing::warn!(error = %e, "the Greeter failed; using rules"),
            }
            if greeter::section(st) == section {
                self.greeting_floor(st, out, section, text);
            }
        } else {
            self.greeting_floor(st, out, section, text);
        }
        self.advance(ctx, form, st, out).await
    }

    fn greeting_floor(
        &self,
        st: &mut InterviewState,
        out: &mut TurnOutput,
        section: Section,
        text: &str,
    ) {
        match section {
            Section::Country => {
                let code = greeter::resolve_country(text)
                    .map(str::to_string)
                    .unwrap_or_else(|| text.trim().to_string());
                self.set_country(st, out, &code);
            }
            Section::Timezone => {
                let wanted = text.trim().to_lowercase().replace(' ', "_");
                let found = st
                    .zone_choices
                    .iter()
                    .find(|z| {
                        z.to_lowercase() == wanted
                            || z.to_lowercase().ends_with(&format!("/{wanted}"))
                    })
                    .cloned()
                    .or_else(|| {
                        greeter::is_valid_zone(text.trim()).then(|| text.trim().to_string())
                    });
                if let Some(zone) = found {
                    self.set_timezone(st, out, &zone);
                }
            }
            Section::Language | Section::Completed => {}
        }
    }

    // ---- Interviewer ----

    /// Moves the interview forward until something is asked or it finishes.
    async fn advance(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        if st.stage == Stage::Greeting {
            if !self.greeting_step(form, st, out) {
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
    async fn ask(
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
        if choice && purpose == Purpose::First {
            out.options(
                drafted.question,
                field
                    .options
                    .iter()
                    .map(|o| OptionItem::new(o.value.clone(), o.label.get(&lang)))
                    .collect(),
                kind == form::FieldType::MultiChoice,
            );
        } else {
            out.say(drafted.question);
        }
        true
    }

    /// Reviews an answer for field `id` and records it. True when the field is done.
    async fn review_answer(
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
                let mut review =
                    model_review.unwrap_or_else(|| reviewer::floor_review(field, &value));
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

    async fn answer(
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

    // ---- the end ----

    async fn finish(
        &self,
        ctx: &TurnContext<'_>,
        form: &Arc<Form>,
        st: &mut InterviewState,
        out: &mut TurnOutput,
    ) -> Result<(), FlowError> {
        st.current = None;
        match form.variant {
            Variant::Application => {
                out.change(StateChange::SetCurrentAgent {
                    agent: auditor::AGENT.into(),
                });
                let audit = auditor::audit(
                    ctx.models.for_agent(auditor::AGENT).as_deref(),
                    form,
                    st,
                    ctx.ledger,
                )
                .await;
                self.submit(ctx, form, st, Some(audit), out);
                Ok(())
            }
            Variant::Plain => {
                st.stage = Stage::Confirming;
                self.show_confirmation(form, st, out);
                Ok(())
            }
        }
    }

    fn show_confirmation(&self, form: &Form, st: &InterviewState, out: &mut TurnOutput) {
        let lang = lang_of(st);
        let mut text = pick(&lang, "Here is what I have:\n", "ご回答内容の確認です:\n");
        for id in &st.plan {
            if let Some(field) = form.field(id) {
                let value = match &st.field(id).value {
                    // a choice shows its label, not its stored value
                    Some(v) => field
                        .options
                        .iter()
                        .find(|o| o.value == *v)
                        .map_or(v.clone(), |o| o.label.get(&lang).to_string()),
                    None => pick(&lang, "(not answered)", "（未回答）"),
                };
                text.push_str(&format!("- {}: {}\n", field.label.get(&lang), value));
            }
        }
        out.say(text.trim_end());
        out.options(
            pick(
                &lang,
                "Is everything correct?",
                "この内容でよろしいですか？",
            ),
            vec![
                OptionItem::new("confirm", pick(&lang, "Confirm and submit", "確定して送信")),
                OptionItem::new("change", pick(&lang, "Change an answer", "回答を修正する")),
            ],
            false,
        );
    }

    /// Stores the submission; `submitted` only when every required field is done.
    fn submit(
        &self,
        ctx: &TurnContext<'_>,
        form: &Form,
        st: &mut InterviewState,
        audit: Option<AuditResult>,
        out: &mut TurnOutput,
    ) {
        let lang = lang_of(st);
        let missing: Vec<String> = form
            .fields
            .iter()
            .filter(|f| f.required && st.field(&f.id).status != FieldStatus::Done)
            .map(|f| f.id.clone())
            .collect();
        let status = if missing.is_empty() {
            SubmissionStatus::Submitted
        } else {
            SubmissionStatus::Incomplete
        };
        let mut values = Map::new();
        let mut facts = Map::new();
        let mut incomplete = Vec::new();
        for id in &st.plan {
            let p = st.field(id);
            if let Some(v) = &p.value {
                values.insert(id.clone(), Value::String(v.clone()));
            }
            if !p.facts.is_empty() {
                facts.insert(id.clone(), json!(p.facts));
            }
            if p.status == FieldStatus::Incomplete {
                incomplete.push(id.clone());
            }
        }
        let submission = Submission {
            applicant: ctx.user.display_name.clone(),
            form_id: form.id.clone(),
            variant: match form.variant {
                Variant::Application => "application".into(),
                Variant::Plain => "plain".into(),
            },
            status,
            language: st.language.clone(),
            country: st.country.clone(),
            timezone: st.timezone.clone(),
            values: Value::Object(values),
            facts: Value::Object(facts),
            flags: json!({
                "incomplete_fields": incomplete,
                "missing_required": missing,
                "blocked_drafts": st.blocked_drafts,
            }),
            audit: audit.as_ref().and_then(|a| serde_json::to_value(a).ok()),
        };
        out.change(StateChange::SaveSubmission { submission });
        if form.variant == Variant::Application {
            let audit = audit.unwrap_or_default();
            let violations: Vec<String> = audit
                .violations
                .iter()
                .map(|v| format!("[{:?}] {}: {}", v.severity, v.kind, v.message))
                .collect();
            out.admin.push(AdminNotice {
                kind: "audit".into(),
                title: format!("Application finished: {}", form.title.get("en")),
                body: audit.summary.clone(),
                fields: vec![
                    ("Applicant".into(), ctx.user.display_name.clone()),
                    ("Form".into(), form.id.clone()),
                    (
                        "Audit".into(),
                        if audit.passed {
                            "passed".into()
                        } else {
                            "FAILED".into()
                        },
                    ),
                    ("Status".into(), status.as_str().into()),
                    (
                        "Violations".into(),
                        if violations.is_empty() {
                            "none".into()
                        } else {
                            violations.join("\n")
                        },
                    ),
                ],
                session_id: None,
            });
        }
        out.say(match status {
            SubmissionStatus::Submitted => pick(
                &lang,
                "Thank you! Your answers have been submitted. We will be in touch.",
                "ありがとうございました。回答を送信しました。追ってご連絡いたします。",
            ),
            SubmissionStatus::Incomplete => pick(
                &lang,
                "Thank you. Some required information is still missing, so your answers were saved but not submitted. Our team will contact you.",
                "ありがとうございました。必須項目の一部が未回答のため、回答は保存しましたが送信は完了していません。担当者よりご連絡いたします。",
            ),
        });
        st.stage = Stage::Finished;
        out.end();
    }

    /// Repeats what the applicant was asked last (after a restart or a `/start` in a console).
    fn repeat_last(
        &self,
        ctx: &TurnContext<'_>,
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
        if let Some(options) = &ctx.session.pending_options {
            out.outgoing.push(Outgoing::Options(options.clone()));
            return;
        }
        match st.stage {
            Stage::Greeting => {
                self.greeting_step(form, st, out);
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

    fn farewell(&self, lang: &str) -> Option<String> {
        Some(pick(
            lang,
            "The interview has been stopped. Send /interview to start again.",
            "インタビューを中止しました。/interview で再開できます。",
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
        }
        let Some(form) = self.form(&st.form_id).cloned() else {
            out.say(format!("The form {:?} of this interview is no longer configured. Send /interview to start again.", st.form_id));
            out.end();
            return Ok(out);
        };
        let lang = lang_of(&st);
        match input {
            TurnInput::Start => self.advance(&ctx, &form, &mut st, &mut out).await?,
            TurnInput::Resume => self.repeat_last(&ctx, &form, &mut st, &mut out),
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
                let done = st
                    .plan
                    .iter()
                    .filter(|id| st.field(id).status.is_closed())
                    .count();
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

impl InterviewFlow {
    fn show_change_options(&self, form: &Form, st: &InterviewState, out: &mut TurnOutput) {
        let lang = lang_of(st);
        out.options(
            pick(
                &lang,
                "Which answer would you like to change?",
                "どの回答を修正しますか？",
            ),
            st.plan
                .iter()
                .filter_map(|id| form.field(id))
                .map(|f| OptionItem::new(f.id.clone(), f.label.get(&lang)))
                .collect(),
            false,
        );
    }
}

#[cfg(test)]
mod tests;

//! The submission: the answers, facts, flags and audit written as one `SaveSubmission`,
//! `submitted` only when every required field is done, and the admins told.

use super::auditor::AuditResult;
use super::form::{Form, Variant};
use super::state::{FieldStatus, InterviewState, Stage};
use super::{InterviewFlow, lang_of};
use crate::admin::{AdminActionKind, AdminNotice};
use crate::flow::{TurnContext, TurnOutput};
use crate::i18n::pick;
use crate::store::{StateChange, Submission, SubmissionStatus};
use serde_json::{Map, Value, json};

impl InterviewFlow {
    /// Stores the submission; `submitted` only when every required field is done.
    pub(super) fn submit(
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
                "applicant_questions": st.applicant_questions,
                "unresolved": unresolved(st),
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
            let mut fields = vec![
                ("Applicant".into(), ctx.user.display_name.clone()),
                ("Form".into(), form.id.clone()),
                ("Audit".into(), audit.verdict().into()),
                ("Status".into(), status.as_str().into()),
                (
                    "Violations".into(),
                    if violations.is_empty() {
                        "none".into()
                    } else {
                        violations.join("\n")
                    },
                ),
            ];
            if let Some(said) = unresolved_said(st) {
                fields.push(("Not recognised".into(), said));
            }
            if !st.applicant_questions.is_empty() {
                fields.push((
                    "Applicant's questions".into(),
                    st.applicant_questions.join("\n"),
                ));
            }
            out.admin.push(AdminNotice {
                kind: "audit".into(),
                title: format!("Application finished: {}", form.title.get("en")),
                body: audit.summary.clone(),
                fields,
                session_id: None,
                actions: if status == SubmissionStatus::Submitted {
                    vec![
                        AdminActionKind::Approve,
                        AdminActionKind::Reject,
                        AdminActionKind::TakeOver,
                    ]
                } else {
                    vec![AdminActionKind::TakeOver]
                },
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
}

/// What the applicant wrote that the greeting did not recognise (country, time zone), as
/// written; `null` when everything was recognised.
fn unresolved(st: &InterviewState) -> Value {
    if st.country_unresolved.is_none() && st.timezone_unresolved.is_none() {
        return Value::Null;
    }
    json!({
        "country": st.country_unresolved,
        "timezone": st.timezone_unresolved,
    })
}

/// [`unresolved`] for the admins' notice: what was written, and that no zone was assumed.
fn unresolved_said(st: &InterviewState) -> Option<String> {
    let mut said = Vec::new();
    if let Some(country) = &st.country_unresolved {
        said.push(format!(
            "country as written: «{country}» (not a country we know)"
        ));
    }
    match st.timezone_unresolved.as_deref() {
        Some("") => said.push("time zone: not given (none assumed)".into()),
        Some(zone) => said.push(format!("time zone as written: «{zone}» (none assumed)")),
        None => {}
    }
    (!said.is_empty()).then(|| said.join("\n"))
}

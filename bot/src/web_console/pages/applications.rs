//! The applications: the list, one application, a decision.

use super::{PAGE, failed, not_found, page, t, transcript, when};
use crate::web_console::{ConsoleState, after_action};
use axum::extract::{Form, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use kaiwa_core::admin::{AdminAction, AdminActionKind};
use kaiwa_core::agent::trace::{By, Note, Trace};
use kaiwa_core::flows::interview::auditor::AuditResult;
use kaiwa_core::store::SubmissionRecord;
use maud::{Markup, html};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize, Default)]
pub(in crate::web_console) struct ListQuery {
    form: Option<String>,
    status: Option<String>,
    decision: Option<String>,
    verdict: Option<String>,
    q: Option<String>,
    sort: Option<String>,
    page: Option<usize>,
}

fn audit_of(s: &SubmissionRecord) -> Option<AuditResult> {
    s.submission
        .audit
        .as_ref()
        .and_then(|a| serde_json::from_value(a.clone()).ok())
}

fn verdict_of(s: &SubmissionRecord) -> &'static str {
    audit_of(s).map_or("-", |a| a.verdict())
}

/// The audit's findings, counted (none: empty).
fn findings_of(s: &SubmissionRecord) -> String {
    match audit_of(s).map_or(0, |a| a.violations.len()) {
        0 => String::new(),
        1 => " (1 finding)".into(),
        n => format!(" ({n} findings)"),
    }
}

fn decision_of(s: &SubmissionRecord) -> &str {
    s.decision
        .as_ref()
        .map_or("undecided", |d| d.decision.as_str())
}

/// A filter's value, if one is chosen.
fn wanted(v: &Option<String>) -> Option<&str> {
    v.as_deref().filter(|v| !v.is_empty())
}

/// `?…` of a list with `changes` applied (empty values left out).
fn query_with(q: &ListQuery, changes: &[(&str, &str)]) -> String {
    let mut pairs: BTreeMap<&str, String> = BTreeMap::new();
    for (k, v) in [
        ("form", &q.form),
        ("status", &q.status),
        ("decision", &q.decision),
        ("verdict", &q.verdict),
        ("q", &q.q),
        ("sort", &q.sort),
    ] {
        if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
            pairs.insert(k, v.clone());
        }
    }
    for (k, v) in changes {
        pairs.insert(k, v.to_string());
    }
    let encoded = serde_urlencoded::to_string(&pairs).unwrap_or_default();
    format!("?{encoded}")
}

/// The applications `query` asks for, in its order.
fn chosen<'a>(all: &'a [SubmissionRecord], query: &ListQuery) -> Vec<&'a SubmissionRecord> {
    let needle = wanted(&query.q).map(str::to_lowercase);
    let mut rows: Vec<&SubmissionRecord> = all
        .iter()
        .filter(|s| wanted(&query.form).is_none_or(|f| s.submission.form_id == f))
        .filter(|s| wanted(&query.status).is_none_or(|v| s.submission.status.as_str() == v))
        .filter(|s| wanted(&query.decision).is_none_or(|v| decision_of(s) == v))
        .filter(|s| {
            wanted(&query.verdict).is_none_or(|v| match v {
                "failed" => verdict_of(s) == "FAILED",
                "warnings" => verdict_of(s) == "passed with warnings",
                "passed" => verdict_of(s) == "passed",
                _ => true,
            })
        })
        .filter(|s| {
            needle.as_deref().is_none_or(|n| {
                s.submission.applicant.to_lowercase().contains(n) || s.user_id.contains(n)
            })
        })
        .collect();
    match query.sort.as_deref() {
        Some("oldest") => rows.sort_by_key(|s| (s.created_at, s.id)),
        Some("name") => rows.sort_by_key(|s| s.submission.applicant.to_lowercase()),
        Some("verdict") => rows.sort_by_key(|s| (verdict_of(s), std::cmp::Reverse(s.id))),
        Some("decision") => {
            rows.sort_by_key(|s| (decision_of(s).to_string(), std::cmp::Reverse(s.id)))
        }
        _ => rows.sort_by_key(|s| std::cmp::Reverse((s.created_at, s.id))),
    }
    rows
}

/// A `<select>` of `options` (value, label) with `current` chosen.
fn select(name: &'static str, current: &Option<String>, options: Vec<(String, String)>) -> Markup {
    html! {
        label {
            select name=(name) {
                @for (value, label) in options {
                    @if current.as_deref() == Some(value.as_str()) {
                        option value=(value) selected { (label) }
                    } @else {
                        option value=(value) { (label) }
                    }
                }
            }
        }
    }
}

/// The applications list's filters, as `query` has them.
fn filters(lang: &str, query: &ListQuery, forms: &std::collections::BTreeSet<String>) -> Markup {
    let option = |value: &str, en: &'static str, ja: &'static str| {
        (value.to_string(), t(lang, en, ja).to_string())
    };
    let any = option("", "all", "すべて");
    let mut form_options = vec![option("", "every form", "すべてのフォーム")];
    form_options.extend(forms.iter().map(|f| (f.clone(), f.clone())));
    html! {
        form.filters method="get" action="/applications" {
            (select("form", &query.form, form_options))
            (select("status", &query.status, vec![any.clone(),
                option("submitted", "submitted", "提出済み"),
                option("incomplete", "incomplete", "未完了")]))
            (select("verdict", &query.verdict, vec![any.clone(),
                option("passed", "audit passed", "監査合格"),
                option("warnings", "passed with warnings", "警告あり"),
                option("failed", "audit failed", "監査不合格")]))
            (select("decision", &query.decision, vec![any,
                option("undecided", "undecided", "未決定"),
                option("approved", "approved", "承認"),
                option("rejected", "rejected", "不採用")]))
            (select("sort", &query.sort, vec![
                option("newest", "newest first", "新しい順"),
                option("oldest", "oldest first", "古い順"),
                option("name", "by name", "名前順"),
                option("verdict", "by verdict", "監査結果順"),
                option("decision", "by decision", "決定順")]))
            input type="search" name="q" value=(query.q.clone().unwrap_or_default()) placeholder=(t(lang, "name or user id", "名前またはユーザーID"));
            button type="submit" { (t(lang, "Filter", "絞り込み")) }
        }
    }
}

pub(in crate::web_console) async fn applications(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> Response {
    let signed = signed!(state, headers);
    let lang = signed.lang;
    let all = match state.store.submissions(None).await {
        Ok(all) => all,
        Err(e) => return failed(lang, e),
    };
    let forms = all.iter().map(|s| s.submission.form_id.clone()).collect();
    let rows = chosen(&all, &query);
    let total = rows.len();
    let pages = total.div_ceil(PAGE).max(1);
    let at = query.page.unwrap_or(1).clamp(1, pages);
    let shown = rows.iter().skip((at - 1) * PAGE).take(PAGE);
    let body = html! {
        (filters(lang, &query, &forms))
        p.count { (total) " " (t(lang, "applications", "件の応募")) }
        table #applications {
            thead { tr {
                th { "#" } th { (t(lang, "Applicant", "応募者")) } th { (t(lang, "Form", "フォーム")) }
                th { (t(lang, "Status", "状態")) } th { (t(lang, "Audit", "監査")) }
                th { (t(lang, "Decision", "決定")) } th { (t(lang, "Received", "受付日時")) }
            } }
            tbody {
                @for s in shown {
                    tr {
                        td { (s.id) }
                        td { a href={ "/applications/" (s.id) } { (s.submission.applicant) } }
                        td { (s.submission.form_id) }
                        td { (s.submission.status.as_str()) }
                        td { (verdict_of(s)) (findings_of(s)) }
                        td.decision { (decision_of(s)) }
                        td { (when(s.created_at)) }
                    }
                }
            }
        }
        @if pages > 1 {
            nav.pages {
                @if at > 1 { a href=(format!("/applications{}", query_with(&query, &[("page", &(at - 1).to_string())]))) { "←" } }
                " " (at) " / " (pages) " "
                @if at < pages { a href=(format!("/applications{}", query_with(&query, &[("page", &(at + 1).to_string())]))) { "→" } }
            }
        }
    };
    page(
        &signed,
        "/applications",
        t(lang, "Applications", "応募"),
        body,
    )
}

/// A JSON value as text (strings without quotes).
fn plain(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

pub(in crate::web_console) async fn application(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Path(id): Path<i64>,
) -> Response {
    let signed = signed!(state, headers);
    let lang = signed.lang;
    let s = match state.store.submission_by_id(id).await {
        Ok(Some(s)) => s,
        Ok(None) => return not_found(headers).await,
        Err(e) => return failed(lang, e),
    };
    let (messages, traced) = match s.session_id {
        Some(session) => match tokio::try_join!(
            state.store.recent_messages(session, 1_000),
            state.store.traced_messages(session)
        ) {
            Ok(m) => m,
            Err(e) => return failed(lang, e),
        },
        None => (Vec::new(), Vec::new()),
    };
    let why = match s.session_id {
        Some(session) => match follow_ups_and_stops(&state, session, &traced).await {
            Ok(why) => why,
            Err(e) => return failed(lang, e),
        },
        None => BTreeMap::new(),
    };
    let audit = audit_of(&s);
    let sub = &s.submission;
    let empty = serde_json::Map::new();
    let values = sub.values.as_object().unwrap_or(&empty);
    let facts = sub.facts.as_object().unwrap_or(&empty);
    let body = html! {
        dl.facts {
            dt { (t(lang, "Applicant", "応募者")) } dd #applicant { (sub.applicant) }
            dt { (t(lang, "Form", "フォーム")) } dd { (sub.form_id) " (" (sub.variant) ")" }
            dt { (t(lang, "Status", "状態")) } dd { (sub.status.as_str()) }
            dt { (t(lang, "User", "ユーザー")) } dd { (s.platform) ":" (s.user_id) }
            dt { (t(lang, "Language / country / time zone", "言語 / 国 / タイムゾーン")) }
            dd { (sub.language.as_deref().unwrap_or("-")) " / " (sub.country.as_deref().unwrap_or("-")) " / " (sub.timezone.as_deref().unwrap_or("-")) }
            dt { (t(lang, "Received", "受付日時")) } dd { (when(s.created_at)) }
            @if let Some(session) = s.session_id {
                dt { (t(lang, "Session", "セッション")) } dd { a href={ "/sessions/" (session) } { "#" (session) } }
            }
        }
        section #decision {
            h2 { (t(lang, "Decision", "決定")) }
            @match &s.decision {
                Some(d) => p.decided { (d.decision) " · " (d.decided_by) " · " (when(d.decided_at)) },
                None => {
                    p { (t(lang, "Not decided yet.", "まだ決定していません。")) }
                    @if s.session_id.is_some() {
                        form.inline method="post" action={ "/applications/" (s.id) "/decide" } {
                            input type="hidden" name="csrf" value=(signed.csrf);
                            input type="hidden" name="decision" value="approve";
                            button #approve type="submit" { (t(lang, "Approve", "承認")) }
                        }
                        form.inline method="post" action={ "/applications/" (s.id) "/decide" } {
                            input type="hidden" name="csrf" value=(signed.csrf);
                            input type="hidden" name="decision" value="reject";
                            button #reject type="submit" { (t(lang, "Reject", "不採用")) }
                        }
                    }
                },
            }
        }
        section {
            h2 { (t(lang, "Answers", "回答")) }
            table.answers {
                tbody {
                    @for (field, value) in values {
                        tr {
                            th { (field) }
                            td {
                                (plain(value))
                                @if let Some(f) = facts.get(field).and_then(|f| f.as_object()).filter(|f| !f.is_empty()) {
                                    ul.factlist {
                                        @for (k, v) in f { li { (k) ": " (plain(v)) } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if !sub.flags.is_null() && sub.flags.as_object().is_none_or(|f| !f.is_empty()) {
                p.hint { (t(lang, "Flags: ", "フラグ: ")) (sub.flags.to_string()) }
            }
        }
        section #audit {
            h2 { (t(lang, "Audit", "監査")) }
            @match &audit {
                Some(a) => {
                    p { strong { (a.verdict()) } }
                    p { (a.summary) }
                    @if !a.violations.is_empty() {
                        ul { @for v in &a.violations {
                            li { (format!("{:?}", v.severity).to_lowercase()) " · " (v.kind) ": " (v.message) }
                        } }
                    }
                },
                None => p.hint { (t(lang, "No audit.", "監査はありません。")) },
            }
        }
        (why_section(lang, s.session_id, &why))
        section {
            h2 { (t(lang, "Transcript", "会話記録")) }
            (transcript(lang, &messages, &traced))
        }
    };
    page(
        &signed,
        "/applications",
        &format!("#{} {}", s.id, sub.applicant),
        body,
    )
}

#[derive(Deserialize)]
pub(in crate::web_console) struct DecideForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    decision: String,
}

pub(in crate::web_console) async fn decide(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Path(id): Path<i64>,
    Form(form): Form<DecideForm>,
) -> Response {
    let signed = signed!(state, headers);
    checked!(signed, form.csrf);
    let kind = match form.decision.as_str() {
        "approve" => AdminActionKind::Approve,
        "reject" => AdminActionKind::Reject,
        _ => {
            return after_action(
                &format!("/applications/{id}"),
                t(
                    signed.lang,
                    "Choose approve or reject.",
                    "承認か不採用を選んでください。",
                ),
            );
        }
    };
    let session_id = match state.store.submission_by_id(id).await {
        Ok(found) => found.and_then(|s| s.session_id),
        Err(e) => return failed(signed.lang, e),
    };
    let Some(session_id) = session_id else {
        return not_found(headers).await;
    };
    let outcome = state
        .people
        .console_action(&signed.admin, AdminAction { kind, session_id })
        .await;
    after_action(&format!("/applications/{id}"), &outcome.text)
}

/// The notes of a session's traces that say why a follow-up was asked (the Reviewer found
/// the answer incomplete) or what QuickCheck stopped, per question, each with the message
/// whose trace holds it.
async fn follow_ups_and_stops(
    state: &ConsoleState,
    session: i64,
    traced: &[i64],
) -> Result<BTreeMap<String, Vec<(i64, Note)>>, kaiwa_core::store::StoreError> {
    let mut why: BTreeMap<String, Vec<(i64, Note)>> = BTreeMap::new();
    for &message in traced {
        let trace = state
            .store
            .message_trace(session, message)
            .await?
            .and_then(|json| serde_json::from_str::<Trace>(&json).ok());
        for note in trace.map(|t| t.notes).unwrap_or_default() {
            match &note {
                Note::Review {
                    field,
                    complete: false,
                    ..
                }
                | Note::QuickCheckStopped { field, .. } => {
                    why.entry(field.clone()).or_default().push((message, note));
                }
                _ => {}
            }
        }
    }
    Ok(why)
}

/// "Follow-ups and stopped questions": [`follow_ups_and_stops`] by question, each linking
/// to its trace in session `session` (while the conversation is kept).
fn why_section(
    lang: &str,
    session: Option<i64>,
    why: &BTreeMap<String, Vec<(i64, Note)>>,
) -> Markup {
    html! {
        section #why {
            h2 { (t(lang, "Follow-ups and stopped questions", "追加の質問と止められた質問")) }
            @if why.is_empty() {
                p.hint { (t(lang, "No follow-up was asked and QuickCheck stopped no question.", "追加の質問はなく、QuickCheck が止めた質問もありません。")) }
            }
            @for (field, notes) in why {
                article.field-why id={ "why-" (field) } {
                    h3 { code { (field) } }
                    ul { @for (message, note) in notes {
                        li {
                            @match note {
                                Note::Review { missing, feedback, by: who, .. } => {
                                    (t(lang, "Follow-up: ", "追加の質問: "))
                                    @if missing.is_empty() { (t(lang, "the answer was not complete", "回答が不十分")) }
                                    @else { (t(lang, "missing ", "不足: ")) (missing.join(", ")) }
                                    @if let Some(f) = feedback { " — " (f) }
                                    span.hint { " (" (match who { By::Model => t(lang, "the model's review", "モデルの確認"), By::Floor => t(lang, "the rule-based review", "ルールによる確認") }) ")" }
                                },
                                Note::QuickCheckStopped { draft, finding, .. } => {
                                    (t(lang, "QuickCheck stopped ", "QuickCheck が止めた質問: ")) q { (draft) } " — " (finding)
                                },
                                _ => {},
                            }
                            @if let Some(session) = session {
                                " " a.why href={ "/sessions/" (session) "/trace/" (message) } { (t(lang, "trace", "記録")) }
                            }
                        }
                    } }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use kaiwa_core::store::{Decision, Submission, SubmissionStatus};

    fn application(id: i64, name: &str, decided: Option<&str>) -> SubmissionRecord {
        SubmissionRecord {
            id,
            session_id: Some(id),
            platform: "telegram".into(),
            user_id: id.to_string(),
            created_at: DateTime::<Utc>::from_timestamp(1_800_000_000 + id, 0).unwrap_or_default(),
            submission: Submission {
                applicant: name.into(),
                form_id: "engineer".into(),
                variant: "application".into(),
                status: SubmissionStatus::Submitted,
                language: None,
                country: None,
                timezone: None,
                values: serde_json::json!({}),
                facts: serde_json::json!({}),
                flags: serde_json::json!({}),
                audit: None,
            },
            decision: decided.map(|d| Decision {
                decision: d.into(),
                decided_by: "telegram:9 (Ann)".into(),
                decided_at: Utc::now(),
            }),
        }
    }

    #[test]
    fn applications_are_filtered_sorted_and_paged_by_the_query() {
        let all = vec![
            application(1, "Chie", None),
            application(2, "aki", Some("approved")),
            application(3, "Bo", None),
        ];
        let ids = |q: &ListQuery| chosen(&all, q).iter().map(|s| s.id).collect::<Vec<_>>();
        assert_eq!(ids(&ListQuery::default()), [3, 2, 1], "newest first");
        let by_name = ListQuery {
            sort: Some("name".into()),
            ..Default::default()
        };
        assert_eq!(ids(&by_name), [2, 3, 1], "by name, any case");
        let undecided = ListQuery {
            decision: Some("undecided".into()),
            ..Default::default()
        };
        assert_eq!(ids(&undecided), [3, 1]);
        let found = ListQuery {
            q: Some("CHI".into()),
            ..Default::default()
        };
        assert_eq!(ids(&found), [1]);
        let next = query_with(&undecided, &[("page", "2")]);
        assert_eq!(next, "?decision=undecided&page=2");
    }
}

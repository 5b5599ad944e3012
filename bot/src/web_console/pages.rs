//! The console's pages and actions. Every page is for a signed-in admin
//! ([`super::signed_in`]); every action is a form with the session's CSRF token and runs
//! the same code as the admin chat (`Orchestrator::console_action`, `console_reply`).
//! Everything users wrote goes through `maud`'s escaping.

use super::{ConsoleState, CsrfForm, SignedIn, after_action, csrf_ok, flash_shown, signed_in};
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use kaiwa_core::admin::{AdminAction, AdminActionKind};
use kaiwa_core::flows::interview::auditor::AuditResult;
use kaiwa_core::store::console::{TicketRecord, new_token};
use kaiwa_core::store::reading::ReadingStatus;
use kaiwa_core::store::{Hold, SessionRecord, StoredMessage, SubmissionRecord};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Rows per page of a list.
const PAGE: usize = 50;

/// `en` or `ja` of a label.
fn t(lang: &str, en: &'static str, ja: &'static str) -> &'static str {
    if lang == "ja" { ja } else { en }
}

fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// The page around `body`: the navigation, the language switch, sign-out, the message of
/// the last action.
fn layout(signed: Option<&SignedIn>, lang: &str, path: &str, title: &str, body: Markup) -> Markup {
    let nav = [
        ("/applications", t(lang, "Applications", "応募")),
        ("/helpdesk", t(lang, "Help-desk", "ヘルプデスク")),
        (
            "/helpdesk/gaps",
            t(lang, "Knowledge gaps", "ナレッジの不足"),
        ),
        ("/reading", t(lang, "Reading club", "読書会")),
        ("/sessions", t(lang, "Sessions", "セッション")),
        ("/kb", t(lang, "Knowledge base", "ナレッジベース")),
    ];
    html! {
        (DOCTYPE)
        html lang=(lang) {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Kaiwa" }
                link rel="stylesheet" href="/static/console.css";
            }
            body {
                header {
                    a.brand href="/" { "Kaiwa" }
                    @if signed.is_some() {
                        nav {
                            @for (href, label) in nav {
                                @if path == href {
                                    a.current href=(href) { (label) }
                                } @else {
                                    a href=(href) { (label) }
                                }
                            }
                        }
                    }
                    div.side {
                        a href={ "/lang/en?back=" (path) } lang="en" { "English" }
                        " · "
                        a href={ "/lang/ja?back=" (path) } lang="ja" { "日本語" }
                        @if let Some(signed) = signed {
                            span.who { (signed.admin.name) " (" (signed.admin.platform) ")" }
                            form.inline method="post" action="/logout" {
                                input type="hidden" name="csrf" value=(signed.csrf);
                                button type="submit" { (t(lang, "Sign out", "サインアウト")) }
                            }
                        }
                    }
                }
                main {
                    @if let Some(flash) = signed.and_then(|s| s.flash.as_deref()) {
                        p.flash role="status" { (flash) }
                    }
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// A signed-in page (the one-time message cleared once shown).
fn page(signed: &SignedIn, path: &str, title: &str, body: Markup) -> Response {
    let response = layout(Some(signed), signed.lang, path, title, body).into_response();
    if signed.flash.is_some() {
        flash_shown(response)
    } else {
        response
    }
}

/// A page for someone not signed in, with `status`.
fn public(status: StatusCode, lang: &str, title: &str, body: Markup) -> Response {
    (status, layout(None, lang, "/", title, body)).into_response()
}

pub(super) fn sign_in_needed(lang: &str, why: Option<String>) -> Response {
    public(
        StatusCode::UNAUTHORIZED,
        lang,
        t(lang, "Sign in", "サインイン"),
        html! {
            @if let Some(why) = why { p.flash { (why) } }
            p { (t(lang,
                "Send /console in the admin chat (Telegram) or admin channel (Discord): the bot gives you a sign-in link that works once, for 10 minutes.",
                "管理チャット（Telegram）または管理チャンネル（Discord）で /console を送ってください。10分間・1回のみ有効なサインインリンクが届きます。")) }
        },
    )
}

pub(super) fn refused(status: StatusCode, lang: &str, message: String) -> Response {
    public(
        status,
        lang,
        t(lang, "Not signed in", "サインインできません"),
        html! { p.error { (message) } },
    )
}

pub(super) fn unavailable(lang: &str) -> Response {
    public(
        StatusCode::SERVICE_UNAVAILABLE,
        lang,
        t(lang, "Try again", "もう一度お試しください"),
        html! { p.error { (t(lang, "The database did not answer. Please try again in a moment.", "データベースが応答しませんでした。少し待ってからもう一度お試しください。")) } },
    )
}

/// A form without the session's CSRF token (or with another): nothing is done.
pub(super) fn forged(lang: &str) -> Response {
    tracing::warn!("console: a form without a valid CSRF token refused");
    public(
        StatusCode::FORBIDDEN,
        lang,
        t(lang, "Refused", "拒否されました"),
        html! { p.error { (t(lang,
        "This form was refused: it did not carry this session's security token. Reload the page and try again.",
        "このフォームはセッションのセキュリティトークンがないため拒否されました。ページを再読み込みしてもう一度お試しください。")) } },
    )
}

pub(super) async fn not_found(headers: HeaderMap) -> Response {
    let lang = super::language(&headers);
    public(
        StatusCode::NOT_FOUND,
        lang,
        t(lang, "Not found", "見つかりません"),
        html! { p { a href="/" { (t(lang, "Back to the console", "コンソールへ戻る")) } } },
    )
}

pub(super) fn login_button(lang: &str, token: &str) -> Response {
    public(
        StatusCode::OK,
        lang,
        t(
            lang,
            "Sign in to the Kaiwa console",
            "Kaiwa コンソールにサインイン",
        ),
        html! {
            form method="post" action="/login" {
                input type="hidden" name="token" value=(token);
                button #sign-in type="submit" { (t(lang, "Sign in", "サインイン")) }
            }
            p.hint { (t(lang, "The link works once: pressing the button uses it.", "リンクは1回のみ有効です（ボタンを押すと使用されます）。")) }
        },
    )
}

/// Takes the signed-in admin or returns the page saying why not.
macro_rules! signed {
    ($state:expr, $headers:expr) => {
        match signed_in(&$state, &$headers).await {
            Ok(signed) => signed,
            Err(page) => return page,
        }
    };
}

/// Checks the form's CSRF token or returns the refusal.
macro_rules! checked {
    ($signed:expr, $csrf:expr) => {
        if !csrf_ok(&$signed, &$csrf) {
            return forged($signed.lang);
        }
    };
}

/// The database failed: logged, and a page that says to try again.
fn failed(lang: &str, e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "console: the database failed");
    unavailable(lang)
}

pub(super) async fn home(State(state): State<ConsoleState>, headers: HeaderMap) -> Response {
    let _signed = signed!(state, headers);
    Redirect::to("/applications").into_response()
}

// ---------------------------------------------------------------- applications

#[derive(Deserialize, Default)]
pub(super) struct ListQuery {
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

pub(super) async fn applications(
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

/// A transcript, oldest first.
fn transcript(lang: &str, messages: &[StoredMessage]) -> Markup {
    html! {
        @if messages.is_empty() {
            p.hint { (t(lang, "No messages.", "メッセージはありません。")) }
        }
        ol.transcript {
            @for m in messages {
                li class=(m.role.as_str()) {
                    span.meta { (m.role.as_str()) " · " (when(m.at)) }
                    div.text { (m.text) }
                }
            }
        }
    }
}

/// A JSON value as text (strings without quotes).
fn plain(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

pub(super) async fn application(
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
    let messages = match s.session_id {
        Some(session) => match state.store.recent_messages(session, 1_000).await {
            Ok(m) => m,
            Err(e) => return failed(lang, e),
        },
        None => Vec::new(),
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
        section {
            h2 { (t(lang, "Transcript", "会話記録")) }
            (transcript(lang, &messages))
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
pub(super) struct DecideForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    decision: String,
}

pub(super) async fn decide(
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
        .orchestrator
        .console_action(&signed.admin, AdminAction { kind, session_id })
        .await;
    after_action(&format!("/applications/{id}"), &outcome.text)
}

// ---------------------------------------------------------------- help-desk

/// The actions on a conversation: take over, or reply and hand back while held.
fn conversation_actions(
    signed: &SignedIn,
    session_id: i64,
    held: Option<&Hold>,
    back: &str,
) -> Markup {
    let lang = signed.lang;
    html! {
        @match held {
            Some(hold) => {
                p.held { (t(lang, "Held by ", "対応中: ")) (hold.held_by) " · " (when(hold.taken_at)) }
                form.reply method="post" action={ "/sessions/" (session_id) "/reply" } {
                    input type="hidden" name="csrf" value=(signed.csrf);
                    input type="hidden" name="nonce" value=(new_token());
                    input type="hidden" name="back" value=(back);
                    textarea name="text" rows="2" required placeholder=(t(lang, "Your reply to the user", "ユーザーへの返信")) {}
                    button.reply type="submit" { (t(lang, "Send", "送信")) }
                }
                form.inline method="post" action={ "/sessions/" (session_id) "/handback" } {
                    input type="hidden" name="csrf" value=(signed.csrf);
                    input type="hidden" name="back" value=(back);
                    button.handback type="submit" { (t(lang, "Hand back", "エージェントに戻す")) }
                }
            },
            None => {
                form.inline method="post" action={ "/sessions/" (session_id) "/takeover" } {
                    input type="hidden" name="csrf" value=(signed.csrf);
                    input type="hidden" name="back" value=(back);
                    button.takeover type="submit" { (t(lang, "Take over", "引き継ぐ")) }
                }
            },
        }
    }
}

pub(super) async fn helpdesk(State(state): State<ConsoleState>, headers: HeaderMap) -> Response {
    let signed = signed!(state, headers);
    let lang = signed.lang;
    let (holds, tickets) =
        match tokio::try_join!(state.store.holds(), state.store.all_tickets(1_000)) {
            Ok(both) => both,
            Err(e) => return failed(lang, e),
        };
    let held: BTreeMap<i64, &Hold> = holds.iter().map(|h| (h.session_id, h)).collect();
    // a request for a person, newest per conversation, not held yet
    let mut seen = std::collections::HashSet::new();
    let asked: Vec<&TicketRecord> = tickets
        .iter()
        .filter(|r| r.ticket.feedback.as_deref() == Some("human") && r.handled_at.is_none())
        .filter(|r| !held.contains_key(&r.session_id) && seen.insert(r.session_id))
        .collect();
    let mut recent = BTreeMap::new();
    for hold in &holds {
        match state.store.recent_messages(hold.session_id, 6).await {
            Ok(m) => {
                recent.insert(hold.session_id, m);
            }
            Err(e) => return failed(lang, e),
        }
    }
    let body = html! {
        section #held {
            h2 { (t(lang, "Conversations people hold", "担当者が対応中の会話")) " (" (holds.len()) ")" }
            @if holds.is_empty() { p.hint { (t(lang, "None.", "ありません。")) } }
            @for hold in &holds {
                article.conversation id={ "session-" (hold.session_id) } {
                    h3 { a href={ "/sessions/" (hold.session_id) } { "#" (hold.session_id) } " · " (hold.key.platform) ":" (hold.key.user) }
                    (transcript(lang, recent.get(&hold.session_id).map_or(&[][..], Vec::as_slice)))
                    (conversation_actions(&signed, hold.session_id, Some(hold), "/helpdesk"))
                }
            }
        }
        section #handoffs {
            h2 { (t(lang, "Asked for a person", "担当者を希望")) " (" (asked.len()) ")" }
            @if asked.is_empty() { p.hint { (t(lang, "None.", "ありません。")) } }
            @for r in &asked {
                article.conversation id={ "session-" (r.session_id) } {
                    h3 { a href={ "/sessions/" (r.session_id) } { "#" (r.session_id) } " · " (r.user_name) " · " (when(r.created_at)) }
                    p.question { (r.ticket.question) }
                    details { summary { (t(lang, "Bot's answer", "ボットの回答")) } p { (r.ticket.answer) } }
                    (conversation_actions(&signed, r.session_id, None, "/helpdesk"))
                }
            }
        }
    };
    page(
        &signed,
        "/helpdesk",
        t(lang, "Help-desk", "ヘルプデスク"),
        body,
    )
}

/// Why a ticket shows the knowledge base a gap.
fn gap_reason(
    lang: &str,
    ticket: &kaiwa_core::store::Ticket,
    coverage: Option<f32>,
) -> Option<&'static str> {
    match ticket.feedback.as_deref() {
        Some("not_solved") => return Some(t(lang, "not solved", "未解決")),
        Some("human") => return Some(t(lang, "asked for a person", "担当者を希望")),
        _ => {}
    }
    if ticket.sources.is_empty() {
        return Some(t(lang, "unanswered", "回答なし"));
    }
    if coverage.is_none_or(|c| c < WEAK) {
        return Some(t(lang, "weakly matched", "一致が弱い"));
    }
    None
}

/// A best passage covering less of the question than this is a weak match.
const WEAK: f32 = 0.5;

pub(super) async fn gaps(State(state): State<ConsoleState>, headers: HeaderMap) -> Response {
    let signed = signed!(state, headers);
    let lang = signed.lang;
    let tickets = match state.store.all_tickets(1_000).await {
        Ok(t) => t,
        Err(e) => return failed(lang, e),
    };
    // the passage closest to each question, as the knowledge base stands now
    let kb = state.kb.clone();
    let questions: Vec<String> = tickets.iter().map(|r| r.ticket.question.clone()).collect();
    let closest = tokio::task::spawn_blocking(move || {
        questions
            .iter()
            .map(|q| kb.search(q, 1).ok().and_then(|mut p| p.drain(..).next()))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    struct Gap<'a> {
        record: &'a TicketRecord,
        reason: &'static str,
    }
    let mut groups: BTreeMap<String, Vec<Gap>> = BTreeMap::new();
    for (i, record) in tickets.iter().enumerate() {
        let best = closest.get(i).cloned().flatten();
        if let Some(reason) = gap_reason(lang, &record.ticket, best.as_ref().map(|p| p.coverage)) {
            let document = best.map_or_else(String::new, |p| p.path);
            groups
                .entry(document)
                .or_default()
                .push(Gap { record, reason });
        }
    }
    let mut groups: Vec<(String, Vec<Gap>)> = groups.into_iter().collect();
    groups.sort_by_key(|(_, gaps)| std::cmp::Reverse(gaps.len()));
    let body = html! {
        p.hint { (t(lang,
            "Questions answered \"not solved\", handed to a person, unanswered or weakly matched, grouped by the document they came closest to: the pages to write or improve.",
            "「未解決」・担当者へ引き継ぎ・回答なし・一致が弱かった質問を、最も近い文書ごとにまとめています。書き足すべきページの候補です。")) }
        @if groups.is_empty() { p { (t(lang, "No gaps found.", "不足は見つかりませんでした。")) } }
        @for (document, gaps) in &groups {
            @let first = gaps.iter().map(|g| g.record.created_at).min();
            @let last = gaps.iter().map(|g| g.record.created_at).max();
            section.gap {
                h2 {
                    @if document.is_empty() { (t(lang, "Nothing close in the knowledge base", "近い文書なし")) } @else { code { (document) } }
                    " · " span.count { (gaps.len()) } " " (t(lang, "questions", "件"))
                }
                @if let (Some(first), Some(last)) = (first, last) {
                    p.hint { (when(first)) " – " (when(last)) }
                }
                table { tbody {
                    @for g in gaps.iter().take(20) {
                        tr {
                            td.question { (g.record.ticket.question) }
                            td { (g.reason) }
                            td { (when(g.record.created_at)) }
                            td { a href={ "/sessions/" (g.record.session_id) } { "#" (g.record.session_id) } }
                        }
                    }
                } }
            }
        }
    };
    page(
        &signed,
        "/helpdesk/gaps",
        t(lang, "Knowledge gaps", "ナレッジの不足"),
        body,
    )
}

#[derive(Deserialize)]
pub(super) struct ActionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    back: String,
    #[serde(default)]
    nonce: String,
    #[serde(default)]
    text: String,
}

/// Where to go after an action: the form's page if it is one of ours.
fn back_to(form: &ActionForm, session_id: i64) -> String {
    if form.back.starts_with('/') && !form.back.starts_with("//") && !form.back.contains('\\') {
        form.back.clone()
    } else {
        format!("/sessions/{session_id}")
    }
}

async fn hold_action(
    state: ConsoleState,
    headers: HeaderMap,
    id: i64,
    form: ActionForm,
    kind: AdminActionKind,
) -> Response {
    let signed = signed!(state, headers);
    checked!(signed, form.csrf);
    let outcome = state
        .orchestrator
        .console_action(
            &signed.admin,
            AdminAction {
                kind,
                session_id: id,
            },
        )
        .await;
    after_action(&back_to(&form, id), &outcome.text)
}

pub(super) async fn take_over(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Path(id): Path<i64>,
    Form(form): Form<ActionForm>,
) -> Response {
    hold_action(state, headers, id, form, AdminActionKind::TakeOver).await
}

pub(super) async fn hand_back(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Path(id): Path<i64>,
    Form(form): Form<ActionForm>,
) -> Response {
    hold_action(state, headers, id, form, AdminActionKind::HandBack).await
}

pub(super) async fn reply(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Path(id): Path<i64>,
    Form(form): Form<ActionForm>,
) -> Response {
    let signed = signed!(state, headers);
    checked!(signed, form.csrf);
    let nonce = if form.nonce.is_empty() || form.nonce.len() > 128 {
        new_token()
    } else {
        form.nonce.clone()
    };
    let said = state
        .orchestrator
        .console_reply(&signed.admin, id, &nonce, &form.text)
        .await;
    let message = said.unwrap_or_else(|| {
        t(signed.lang, "Sent to the user.", "ユーザーに送信しました。").to_string()
    });
    after_action(&back_to(&form, id), &message)
}

// ---------------------------------------------------------------- reading club

#[derive(Deserialize, Default)]
pub(super) struct BookQuery {
    book: Option<String>,
}

pub(super) async fn reading(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Query(query): Query<BookQuery>,
) -> Response {
    let signed = signed!(state, headers);
    let lang = signed.lang;
    let records = match state.store.all_reading_records(5_000).await {
        Ok(r) => r,
        Err(e) => return failed(lang, e),
    };
    struct Member {
        name: String,
        books: usize,
        reading: Vec<String>,
        last: DateTime<Utc>,
    }
    let mut members: BTreeMap<(String, String), Member> = BTreeMap::new();
    struct Book {
        title: String,
        author: Option<String>,
        readers: usize,
        finished: usize,
    }
    let mut books: BTreeMap<String, Book> = BTreeMap::new();
    for r in &records {
        let m = members
            .entry((r.platform.clone(), r.user_id.clone()))
            .or_insert_with(|| Member {
                name: r.user_name.clone(),
                books: 0,
                reading: Vec::new(),
                last: r.updated_at,
            });
        m.books += 1;
        m.last = m.last.max(r.updated_at);
        if r.record.status == ReadingStatus::Reading {
            m.reading.push(r.record.title.clone());
        }
        let b = books
            .entry(r.record.title.to_lowercase())
            .or_insert_with(|| Book {
                title: r.record.title.clone(),
                author: r.record.author.clone(),
                readers: 0,
                finished: 0,
            });
        b.readers += 1;
        if r.record.status == ReadingStatus::Completed {
            b.finished += 1;
        }
    }
    let chosen = query
        .book
        .as_deref()
        .map(str::to_lowercase)
        .filter(|b| !b.is_empty());
    let mut insights = Vec::new();
    if let Some(book) = &chosen {
        for r in records
            .iter()
            .filter(|r| r.record.title.to_lowercase() == *book)
        {
            match state.store.insights(r.record.id).await {
                Ok(list) => insights.extend(list.into_iter().map(|i| (r.user_name.clone(), i))),
                Err(e) => return failed(lang, e),
            }
        }
        insights.sort_by_key(|(_, i)| i.at);
    }
    let mut by_readers: Vec<&Book> = books.values().collect();
    by_readers.sort_by_key(|b| std::cmp::Reverse(b.readers));
    let body = html! {
        @if let Some(book) = &chosen {
            section #insights {
                h2 { (t(lang, "Insights on ", "インサイト: ")) (books.get(book).map_or(book.as_str(), |b| b.title.as_str())) }
                @if insights.is_empty() { p.hint { (t(lang, "No insights yet.", "まだインサイトはありません。")) } }
                ul { @for (who, i) in &insights {
                    li { span.meta { (who) " · " (i.kind.as_str()) " · " (when(i.at)) } div.text { (i.text) } }
                } }
            }
        }
        section #members {
            h2 { (t(lang, "Members", "メンバー")) " (" (members.len()) ")" }
            table { thead { tr { th { (t(lang, "Member", "メンバー")) } th { (t(lang, "Books", "冊数")) } th { (t(lang, "Reading now", "読書中")) } th { (t(lang, "Last active", "最終更新")) } } }
                tbody { @for ((platform, user), m) in &members {
                    tr {
                        td { a href={ "/sessions?user=" (user) } { (m.name) } " " span.meta { (platform) } }
                        td { (m.books) }
                        td { (m.reading.join(", ")) }
                        td { (when(m.last)) }
                    }
                } } }
        }
        section #books {
            h2 { (t(lang, "Books", "本")) " (" (books.len()) ")" }
            table { thead { tr { th { (t(lang, "Title", "タイトル")) } th { (t(lang, "Author", "著者")) } th { (t(lang, "Readers", "読者")) } th { (t(lang, "Finished", "読了")) } } }
                tbody { @for b in &by_readers {
                    tr {
                        td { a href=(format!("/reading?{}", serde_urlencoded::to_string([("book", b.title.as_str())]).unwrap_or_default())) { (b.title) } }
                        td { (b.author.as_deref().unwrap_or("-")) }
                        td { (b.readers) }
                        td { (b.finished) }
                    }
                } } }
        }
    };
    page(&signed, "/reading", t(lang, "Reading club", "読書会"), body)
}

// ---------------------------------------------------------------- sessions

#[derive(Deserialize, Default)]
pub(super) struct UserQuery {
    user: Option<String>,
}

pub(super) async fn sessions(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Query(query): Query<UserQuery>,
) -> Response {
    let signed = signed!(state, headers);
    let lang = signed.lang;
    let user = query.user.clone().unwrap_or_default();
    let found = match state.store.find_sessions(user.trim(), 200).await {
        Ok(f) => f,
        Err(e) => return failed(lang, e),
    };
    let body = html! {
        form.filters method="get" action="/sessions" {
            input type="search" name="user" value=(user) placeholder=(t(lang, "user id or name", "ユーザーIDまたは名前"));
            button type="submit" { (t(lang, "Find", "検索")) }
        }
        table #sessions {
            thead { tr { th { "#" } th { (t(lang, "Flow", "フロー")) } th { (t(lang, "User", "ユーザー")) } th { (t(lang, "Status", "状態")) } th { (t(lang, "Updated", "更新")) } } }
            tbody { @for s in &found {
                tr {
                    td { a href={ "/sessions/" (s.id) } { "#" (s.id) } }
                    td { (s.flow) }
                    td { (s.key.platform) ":" (s.key.user) }
                    td { (s.status.as_str()) }
                    td { (when(s.updated_at)) }
                }
            } }
        }
    };
    page(
        &signed,
        "/sessions",
        t(lang, "Sessions", "セッション"),
        body,
    )
}

pub(super) async fn session(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Path(id): Path<i64>,
) -> Response {
    let signed = signed!(state, headers);
    let lang = signed.lang;
    let found: Option<SessionRecord> = match state.store.session(id).await {
        Ok(s) => s,
        Err(e) => return failed(lang, e),
    };
    let Some(s) = found else {
        return not_found(headers).await;
    };
    let (messages, tickets, holds) = match tokio::try_join!(
        state.store.recent_messages(id, 1_000),
        state.store.tickets(id),
        state.store.holds()
    ) {
        Ok(all) => all,
        Err(e) => return failed(lang, e),
    };
    let hold = holds.iter().find(|h| h.session_id == id);
    let path = format!("/sessions/{id}");
    let body = html! {
        dl.facts {
            dt { (t(lang, "Flow", "フロー")) } dd { (s.flow) }
            dt { (t(lang, "User", "ユーザー")) } dd { (s.key.platform) ":" (s.key.user) }
            dt { (t(lang, "Place", "場所")) } dd { (s.key.chat) @if !s.key.thread.is_empty() { " / " (s.key.thread) } }
            dt { (t(lang, "Status", "状態")) } dd { (s.status.as_str()) }
            dt { (t(lang, "Language", "言語")) } dd { (s.language.as_deref().unwrap_or("-")) }
            dt { (t(lang, "Started / updated", "開始 / 更新")) } dd { (when(s.created_at)) " / " (when(s.updated_at)) }
        }
        (conversation_actions(&signed, id, hold, &path))
        @if !tickets.is_empty() {
            section {
                h2 { (t(lang, "Questions", "質問")) }
                ol { @for tk in &tickets {
                    li { strong { (tk.question) } " · " (tk.feedback.as_deref().unwrap_or("-"))
                        @if !tk.sources.is_empty() { " · " code { (tk.sources.join(", ")) } } }
                } }
            }
        }
        section {
            h2 { (t(lang, "Transcript", "会話記録")) }
            (transcript(lang, &messages))
        }
    };
    page(
        &signed,
        "/sessions",
        &format!("{} #{id}", t(lang, "Session", "セッション")),
        body,
    )
}

// ---------------------------------------------------------------- knowledge base

pub(super) async fn knowledge_base(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
) -> Response {
    let signed = signed!(state, headers);
    let lang = signed.lang;
    let (built, documents) = state.kb.documents();
    let body = html! {
        p { (t(lang, "Indexed at ", "インデックス作成: ")) (when(built)) " · " (documents.len()) " " (t(lang, "files", "ファイル")) " · " (documents.iter().map(|d| d.passages).sum::<usize>()) " " (t(lang, "passages", "パッセージ")) }
        form.inline method="post" action="/kb/reindex" {
            input type="hidden" name="csrf" value=(signed.csrf);
            button #reindex type="submit" { (t(lang, "Re-index now", "今すぐ再インデックス")) }
        }
        table #documents {
            thead { tr { th { (t(lang, "File", "ファイル")) } th { (t(lang, "Passages", "パッセージ")) } th { (t(lang, "Size", "サイズ")) } th { (t(lang, "Modified", "更新日時")) } } }
            tbody { @for d in &documents {
                tr { td { code { (d.path) } } td { (d.passages) } td { (d.bytes) " B" } td { (d.modified.map(when).unwrap_or_default()) } }
            } }
        }
    };
    page(
        &signed,
        "/kb",
        t(lang, "Knowledge base", "ナレッジベース"),
        body,
    )
}

pub(super) async fn reindex(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    let signed = signed!(state, headers);
    checked!(signed, form.csrf);
    let kb = state.kb.clone();
    let done = tokio::task::spawn_blocking(move || kb.reindex().map(|()| kb.stats())).await;
    let message = match done {
        Ok(Ok((files, passages))) => {
            tracing::info!(files, passages, user = %signed.admin.user_id, "console: knowledge base re-indexed");
            format!(
                "{} {files} / {passages}",
                t(
                    signed.lang,
                    "Re-indexed: files / passages",
                    "再インデックスしました: ファイル / パッセージ"
                )
            )
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "console: re-indexing failed");
            format!(
                "{} {e}",
                t(
                    signed.lang,
                    "Re-indexing failed:",
                    "再インデックスに失敗しました:"
                )
            )
        }
        Err(e) => {
            tracing::error!(error = %e, "console: re-indexing crashed");
            t(
                signed.lang,
                "Re-indexing failed.",
                "再インデックスに失敗しました。",
            )
            .to_string()
        }
    };
    after_action("/kb", &message)
}

#[cfg(test)]
mod tests {
    use super::*;
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

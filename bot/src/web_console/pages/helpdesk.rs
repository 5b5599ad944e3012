//! The help-desk: conversations held and asked for, the knowledge base's gaps, and the
//! actions on a conversation (take over, reply, hand back).

use super::{conversation_actions, failed, page, t, transcript, when};
use crate::web_console::{ConsoleState, after_action};
use axum::extract::{Form, Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use kaiwa_core::admin::{AdminAction, AdminActionKind};
use kaiwa_core::store::Hold;
use kaiwa_core::store::console::{TicketRecord, new_token};
use maud::html;
use serde::Deserialize;
use std::collections::BTreeMap;

pub(in crate::web_console) async fn helpdesk(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
) -> Response {
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
                    (transcript(lang, recent.get(&hold.session_id).map_or(&[][..], Vec::as_slice), &[]))
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

pub(in crate::web_console) async fn gaps(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
) -> Response {
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
    // each gap shown links to the trace of the turn that answered it
    let mut traces: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for (_, gaps) in &groups {
        for g in gaps.iter().take(20) {
            let (session, at) = (g.record.session_id, g.record.created_at);
            match state.store.traced_message_at(session, at).await {
                Ok(Some(message)) => {
                    traces.insert((session, at.timestamp_millis()), message);
                }
                Ok(None) => {}
                Err(e) => return failed(lang, e),
            }
        }
    }
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
                            td {
                                a href={ "/sessions/" (g.record.session_id) } { "#" (g.record.session_id) }
                                @if let Some(message) = traces.get(&(g.record.session_id, g.record.created_at.timestamp_millis())) {
                                    " · " a.why href={ "/sessions/" (g.record.session_id) "/trace/" (message) } { (t(lang, "why this answer", "回答の理由")) }
                                }
                            }
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
pub(in crate::web_console) struct ActionForm {
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
        .people
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

pub(in crate::web_console) async fn take_over(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Path(id): Path<i64>,
    Form(form): Form<ActionForm>,
) -> Response {
    hold_action(state, headers, id, form, AdminActionKind::TakeOver).await
}

pub(in crate::web_console) async fn hand_back(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Path(id): Path<i64>,
    Form(form): Form<ActionForm>,
) -> Response {
    hold_action(state, headers, id, form, AdminActionKind::HandBack).await
}

pub(in crate::web_console) async fn reply(
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
        .people
        .console_reply(&signed.admin, id, &nonce, &form.text)
        .await;
    let message = said.unwrap_or_else(|| {
        t(signed.lang, "Sent to the user.", "ユーザーに送信しました。").to_string()
    });
    after_action(&back_to(&form, id), &message)
}

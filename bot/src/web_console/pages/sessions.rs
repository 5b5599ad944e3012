//! Sessions: found by user, one with its transcript.

use super::{conversation_actions, failed, not_found, page, t, transcript, when};
use crate::web_console::ConsoleState;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use kaiwa_core::store::SessionRecord;
use maud::html;
use serde::Deserialize;

#[derive(Deserialize, Default)]
pub(in crate::web_console) struct UserQuery {
    user: Option<String>,
}

pub(in crate::web_console) async fn sessions(
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

pub(in crate::web_console) async fn session(
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

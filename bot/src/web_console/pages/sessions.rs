//! Sessions: found by user, one with its transcript, and each turn's trace (why the bot
//! answered or asked as it did).

use super::{conversation_actions, failed, not_found, page, t, transcript, when};
use crate::web_console::ConsoleState;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use kaiwa_core::agent::trace::{By, Note, Trace, TracedCall};
use kaiwa_core::store::SessionRecord;
use maud::{Markup, html};
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
    let (messages, tickets, holds, traced) = match tokio::try_join!(
        state.store.recent_messages(id, 1_000),
        state.store.tickets(id),
        state.store.holds(),
        state.store.traced_messages(id)
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
            (transcript(lang, &messages, &traced))
        }
    };
    page(
        &signed,
        "/sessions",
        &format!("{} #{id}", t(lang, "Session", "セッション")),
        body,
    )
}

/// One turn's trace: why the bot answered (or asked) as it did.
pub(in crate::web_console) async fn trace(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Path((id, message)): Path<(i64, i64)>,
) -> Response {
    let signed = signed!(state, headers);
    let lang = signed.lang;
    let stored = match state.store.message_trace(id, message).await {
        Ok(Some(json)) => json,
        Ok(None) => return not_found(headers).await,
        Err(e) => return failed(lang, e),
    };
    let calls: Vec<TracedCall> = match state.store.turn_calls(id, message).await {
        Ok(calls) => calls.iter().map(TracedCall::from).collect(),
        Err(e) => return failed(lang, e),
    };
    let body = html! {
        p { a href={ "/sessions/" (id) } { (t(lang, "← The conversation", "← 会話へ")) } }
        @match serde_json::from_str::<Trace>(&stored) {
            Ok(trace) => (trace_view(lang, &trace, &calls)),
            Err(_) => p.hint { (t(lang, "This trace cannot be read.", "この記録は読めません。")) },
        }
    };
    page(
        &signed,
        "/sessions",
        &format!(
            "{} #{id} · {}",
            t(lang, "Session", "セッション"),
            t(lang, "Why this answer", "この回答の理由")
        ),
        body,
    )
}

/// `model` or `rule-based floor`, in the console's language.
fn by(lang: &str, by: By) -> &'static str {
    match by {
        By::Model => t(lang, "the model", "モデル"),
        By::Floor => t(lang, "the rule-based floor", "ルールによる応答"),
    }
}

/// A trace's notes in order, then the turn's model calls.
pub(super) fn trace_view(lang: &str, trace: &Trace, calls: &[TracedCall]) -> Markup {
    html! {
        @if trace.shortened {
            p.hint { (t(lang, "Shortened to stay within its size.", "容量のため一部を省略しています。")) }
        }
        ol.trace {
            @for note in &trace.notes {
                @match note {
                    Note::Plan { subtasks, by: who, why } => li.plan {
                        strong { (t(lang, "Plan", "計画")) } " · " (by(lang, *who))
                        @if let Some(why) = why { " (" (why) ")" }
                        ol { @for task in subtasks { li { (task) } } }
                    },
                    Note::Search { subtask, tool, query, by_meaning, passages } => li.search {
                        strong { (t(lang, "Search", "検索")) } " · " code { (tool) } " · " q { (query) }
                        " · " @if *by_meaning { (t(lang, "by words and meaning", "語と意味で")) } @else { (t(lang, "by words", "語で")) }
                        @if subtask != query { span.hint { " — " (t(lang, "for ", "サブタスク: ")) (subtask) } }
                        @if passages.is_empty() {
                            p.hint { (t(lang, "Nothing found.", "見つかりませんでした。")) }
                        } @else {
                            table.passages {
                                thead { tr {
                                    th { (t(lang, "Passage", "箇所")) }
                                    th { (t(lang, "Score", "スコア")) }
                                    th { (t(lang, "Covers", "一致")) }
                                } }
                                tbody { @for p in passages { tr {
                                    td { code { (p.citation) } }
                                    td { (format!("{:.2}", p.score)) }
                                    td { ((p.coverage * 100.0).round() as u32) " %" }
                                } } }
                            }
                        }
                    },
                    Note::Reflection { subtask, sufficient, advice } => li.reflection {
                        strong { (t(lang, "Reflection", "振り返り")) } " · " (subtask) " · "
                        @if *sufficient { (t(lang, "sufficient", "十分")) } @else { (t(lang, "not sufficient", "不十分")) }
                        @if !advice.is_empty() { p { (advice) } }
                    },
                    Note::Answer { by: who, why, cited } => li.answer {
                        strong { (t(lang, "Answered by ", "回答: ")) (by(lang, *who)) }
                        @if let Some(why) = why { " — " (t(lang, "because: ", "理由: ")) (why) }
                        @if !cited.is_empty() {
                            p { (t(lang, "Cited: ", "引用: ")) @for (n, c) in cited.iter().enumerate() {
                                @if n > 0 { ", " } code { (c) }
                            } }
                        }
                    },
                    Note::Review { field, by: who, complete, missing, feedback } => li.review {
                        strong { (t(lang, "Review of ", "回答の確認: ")) code { (field) } } " · " (by(lang, *who)) " · "
                        @if *complete { (t(lang, "complete", "完了")) } @else {
                            (t(lang, "a follow-up is needed", "追加の質問が必要"))
                        }
                        @if !missing.is_empty() { p { (t(lang, "Missing: ", "不足: ")) (missing.join(", ")) } }
                        @if let Some(f) = feedback { p.hint { (f) } }
                    },
                    Note::QuickCheckStopped { field, draft, finding } => li.quickcheck {
                        strong { (t(lang, "QuickCheck stopped a draft for ", "QuickCheck が止めた質問案: ")) code { (field) } }
                        p { q { (draft) } }
                        p { (t(lang, "Finding: ", "指摘: ")) (finding) }
                    },
                }
            }
        }
        section.calls {
            h2 { (t(lang, "Model calls", "モデル呼び出し")) " (" (calls.len()) ")" }
            @if calls.is_empty() {
                p.hint { (t(lang, "None: no model answered in this turn.", "なし: このターンではモデルを呼び出していません。")) }
            } @else {
                table { thead { tr {
                    th { (t(lang, "Agent", "エージェント")) } th { (t(lang, "Model", "モデル")) }
                    th { "ms" } th { (t(lang, "Tokens in / out", "トークン 入力 / 出力")) } th { (t(lang, "Outcome", "結果")) }
                } }
                tbody { @for c in calls { tr class=(c.outcome) {
                    td { (c.agent) } td { (c.model) } td { (c.ms) }
                    td { (c.prompt_tokens) " / " (c.completion_tokens) }
                    td { (c.outcome) @if let Some(e) = &c.error { span.hint { " — " (e) } } }
                } } } }
            }
        }
    }
}

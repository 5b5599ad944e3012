//! The knowledge base: its files, and the re-index button.

use super::{page, t, when};
use crate::web_console::{ConsoleState, CsrfForm, after_action};
use axum::extract::{Form, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;

pub(in crate::web_console) async fn knowledge_base(
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

pub(in crate::web_console) async fn reindex(
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

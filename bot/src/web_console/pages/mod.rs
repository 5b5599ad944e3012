//! The console's pages and actions. Every page is for a signed-in admin
//! ([`super::signed_in`]); every action is a form with the session's CSRF token and runs
//! the same code as the admin chat (`ForPeople::console_action`, `console_reply`).
//! Everything users wrote goes through `maud`'s escaping. This module has what every page
//! shares (the layout, the refusals, a transcript, a conversation's actions); each area
//! of the console is a module of its own.

use super::{ConsoleState, SignedIn, flash_shown};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use kaiwa_core::store::console::new_token;
use kaiwa_core::store::{Hold, StoredMessage};
use maud::{DOCTYPE, Markup, html};

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
        match crate::web_console::signed_in(&$state, &$headers).await {
            Ok(signed) => signed,
            Err(page) => return page,
        }
    };
}

/// Checks the form's CSRF token or returns the refusal.
macro_rules! checked {
    ($signed:expr, $csrf:expr) => {
        if !crate::web_console::csrf_ok(&$signed, &$csrf) {
            return crate::web_console::pages::forged($signed.lang);
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

/// A transcript, oldest first.
/// A transcript; a bot message whose turn kept a trace (`traced`: their ids) links to it.
fn transcript(lang: &str, messages: &[StoredMessage], traced: &[i64]) -> Markup {
    html! {
        @if messages.is_empty() {
            p.hint { (t(lang, "No messages.", "メッセージはありません。")) }
        }
        ol.transcript {
            @for m in messages {
                li class=(m.role.as_str()) {
                    span.meta {
                        (m.role.as_str()) " · " (when(m.at))
                        @if traced.contains(&m.id) {
                            " · " a.why href={ "/sessions/" (m.session_id) "/trace/" (m.id) } { (t(lang, "Why this answer?", "この回答の理由")) }
                        }
                    }
                    div.text { (m.text) }
                }
            }
        }
    }
}

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

mod applications;
mod helpdesk;
mod knowledge_base;
mod reading;
mod sessions;

pub(super) use applications::{application, applications, decide};
pub(super) use helpdesk::{gaps, hand_back, helpdesk, reply, take_over};
pub(super) use knowledge_base::{knowledge_base, reindex};
pub(super) use reading::reading;
pub(super) use sessions::{session, sessions, trace};

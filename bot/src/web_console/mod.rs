//! The team's console in the browser (`[console] listen`): server-rendered pages, no
//! JavaScript, every action a plain form.
//!
//! Sign-in has no passwords: an admin sends `/console` in the admin chat and opens the
//! one-time link the bot gives them (ten minutes, once; see
//! `kaiwa_core::orchestrator::CONSOLE_LINK_VALID`). Opening it shows a button; pressing it
//! (a POST, so that a link preview fetching the page uses nothing) sets a session cookie
//! (HttpOnly, SameSite=Strict, Secure behind `https://`) for `[console] session_hours`.
//! Only hashes of the link's and the cookie's tokens are stored, in the database: any
//! instance serves any signed-in browser. Every request checks that the admin is still
//! one of the configured admins and that the admin list is the one the session was opened
//! under; every form carries the session's CSRF token. Sign-in attempts are limited per
//! address. Nothing users wrote reaches the log; the pages escape it (`maud`).
//!
//! `pages/` has the pages and the actions, an area a module; this module the server, the sign-in and the
//! checks every request passes.

mod pages;

use axum::Router;
use axum::extract::{ConnectInfo, Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use chrono::Utc;
use dashmap::DashMap;
use kaiwa_core::kb::KnowledgeBase;
use kaiwa_core::orchestrator::ForPeople;
use kaiwa_core::store::Store;
use kaiwa_core::store::console::{ConsoleAdmin, ConsoleSession, new_token, token_hash};
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The session cookie's name.
const COOKIE: &str = "kaiwa_console";
/// The language switch's cookie.
const LANG_COOKIE: &str = "kaiwa_lang";
/// A message shown once on the next page (an action's outcome).
const FLASH_COOKIE: &str = "kaiwa_flash";
/// Sign-in attempts an address may make in [`ATTEMPT_WINDOW`].
const ATTEMPTS: usize = 10;
const ATTEMPT_WINDOW: Duration = Duration::from_secs(60);

/// What every handler reads.
#[derive(Clone)]
pub(crate) struct ConsoleState {
    /// What the people in the loop may do (the console is theirs).
    pub(crate) people: ForPeople,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) kb: Arc<KnowledgeBase>,
    /// The cookie is `Secure` (the console is reached over `https://`).
    secure: bool,
    session: Duration,
    attempts: Arc<DashMap<IpAddr, Vec<Instant>>>,
}

impl ConsoleState {
    pub(crate) fn new(
        people: ForPeople,
        store: Arc<dyn Store>,
        kb: Arc<KnowledgeBase>,
        public_url: &str,
        session: Duration,
    ) -> Self {
        ConsoleState {
            people,
            store,
            kb,
            secure: public_url.starts_with("https://"),
            session,
            attempts: Arc::new(DashMap::new()),
        }
    }

    /// Whether `ip` may try to sign in now (counts the try).
    fn may_try(&self, ip: IpAddr) -> bool {
        let now = Instant::now();
        if self.attempts.len() > 10_000 {
            // many addresses: forget those with no recent attempt
            self.attempts.retain(|_, tries| {
                tries
                    .iter()
                    .any(|t| now.duration_since(*t) < ATTEMPT_WINDOW)
            });
        }
        let mut tries = self.attempts.entry(ip).or_default();
        tries.retain(|t| now.duration_since(*t) < ATTEMPT_WINDOW);
        if tries.len() >= ATTEMPTS {
            return false;
        }
        tries.push(now);
        true
    }
}

/// The console's routes (a server passing `ConnectInfo<SocketAddr>` limits sign-in
/// attempts per address).
pub(crate) fn router(state: ConsoleState) -> Router {
    Router::new()
        .route("/", get(pages::home))
        .route("/login/{token}", get(login_page))
        .route("/login", post(login))
        .route("/logout", post(logout))
        .route("/lang/{code}", get(switch_language))
        .route("/static/console.css", get(stylesheet))
        .route("/applications", get(pages::applications))
        .route("/applications/{id}", get(pages::application))
        .route("/applications/{id}/decide", post(pages::decide))
        .route("/helpdesk", get(pages::helpdesk))
        .route("/helpdesk/gaps", get(pages::gaps))
        .route("/reading", get(pages::reading))
        .route("/sessions", get(pages::sessions))
        .route("/sessions/{id}", get(pages::session))
        .route("/sessions/{id}/trace/{message}", get(pages::trace))
        .route("/sessions/{id}/takeover", post(pages::take_over))
        .route("/sessions/{id}/handback", post(pages::hand_back))
        .route("/sessions/{id}/reply", post(pages::reply))
        .route("/kb", get(pages::knowledge_base))
        .route("/kb/reindex", post(pages::reindex))
        .fallback(pages::not_found)
        .layer(axum::middleware::map_response(secure_headers))
        .with_state(state)
}

/// Serves the console's `router` on `listener` until `stop`.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(stop)
    .await
}

/// Headers on every answer: nothing but our own stylesheet runs or loads, no framing, no
/// referrer (a link's token never leaves in one), nothing cached.
async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

async fn stylesheet() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("console.css"),
    )
}

/// A cookie of the request.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The page's language: the switch's cookie, else the browser's first choice of `en`/`ja`.
pub(crate) fn language(headers: &HeaderMap) -> &'static str {
    match cookie(headers, LANG_COOKIE) {
        Some("ja") => return "ja",
        Some("en") => return "en",
        _ => {}
    }
    let accepted = headers
        .get(header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    for tag in accepted.split(',') {
        let tag = tag
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if tag.starts_with("ja") {
            return "ja";
        }
        if tag.starts_with("en") {
            return "en";
        }
    }
    "en"
}

/// Someone signed in, as a request shows them.
pub(crate) struct SignedIn {
    pub(crate) admin: ConsoleAdmin,
    pub(crate) csrf: String,
    pub(crate) lang: &'static str,
    /// The one-time message of the previous action, if any.
    pub(crate) flash: Option<String>,
}

/// The signed-in admin of the request, or the page that says why not (the sign-in page;
/// a session of someone no longer an admin, or opened under another admin list, is ended).
pub(crate) async fn signed_in(
    state: &ConsoleState,
    headers: &HeaderMap,
) -> Result<SignedIn, Response> {
    let lang = language(headers);
    let Some(token) = cookie(headers, COOKIE).filter(|t| !t.is_empty()) else {
        return Err(pages::sign_in_needed(lang, None));
    };
    let hash = token_hash(token);
    let now = Utc::now();
    let session = match state.store.console_session(&hash, now).await {
        Ok(Some(session)) => session,
        Ok(None) => return Err(pages::sign_in_needed(lang, None)),
        Err(e) => {
            tracing::error!(error = %e, "console: the session could not be read");
            return Err(pages::unavailable(lang));
        }
    };
    if !state.people.is_console_admin(&session.admin)
        || session.admins != state.people.admins_fingerprint()
    {
        tracing::info!(user = %session.admin.user_id, "console session ended: the admin list changed");
        if let Err(e) = state.store.console_session_end(&hash, now).await {
            tracing::warn!(error = %e, "console: a session could not be ended");
        }
        let why = kaiwa_core::i18n::pick(
            lang,
            "Your session ended: the admin list changed.",
            "管理者の一覧が変わったため、セッションは終了しました。",
        );
        return Err(pages::sign_in_needed(lang, Some(why)));
    }
    let flash = cookie(headers, FLASH_COOKIE).and_then(unhex);
    Ok(SignedIn {
        admin: session.admin,
        csrf: session.csrf,
        lang,
        flash,
    })
}

/// A form's CSRF token against the session's, in constant time.
pub(crate) fn csrf_ok(signed: &SignedIn, sent: &str) -> bool {
    use subtle::ConstantTimeEq;
    !sent.is_empty() && bool::from(sent.as_bytes().ct_eq(signed.csrf.as_bytes()))
}

/// `text` as a cookie value (hex: no character a cookie refuses).
fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<String> {
    if text.is_empty() || !text.len().is_multiple_of(2) || text.len() > 4_000 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// A redirect to `to` (after an action) with `message` shown once there.
pub(crate) fn after_action(to: &str, message: &str) -> Response {
    let mut response = Redirect::to(to).into_response();
    if let Ok(value) = HeaderValue::from_str(&format!(
        "{FLASH_COOKIE}={}; Path=/; Max-Age=60; HttpOnly; SameSite=Strict",
        hex(message)
    )) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

/// Clears the one-time message once a page has shown it.
pub(crate) fn flash_shown(mut response: Response) -> Response {
    response.headers_mut().append(
        header::SET_COOKIE,
        HeaderValue::from_static("kaiwa_flash=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"),
    );
    response
}

/// `/login/{token}`: a button that signs in (the link is used by the press, not by opening
/// it: a chat app's link preview uses nothing).
async fn login_page(headers: HeaderMap, Path(token): Path<String>) -> Response {
    pages::login_button(language(&headers), &token)
}

#[derive(Deserialize)]
struct LoginForm {
    #[serde(default)]
    token: String,
}

/// The sign-in button's POST: the link's token is used (once); the browser gets its session.
async fn login(
    State(state): State<ConsoleState>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let lang = language(&headers);
    // the peer's address where the server knows it (a host's server may not: then one
    // limit for everyone)
    let ip = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
    if !state.may_try(ip) {
        tracing::warn!(address = %ip, "console sign-in refused: too many attempts");
        return pages::refused(
            StatusCode::TOO_MANY_REQUESTS,
            lang,
            kaiwa_core::i18n::pick(
                lang,
                "Too many sign-in attempts from your address. Wait a minute and try again.",
                "サインインの試行が多すぎます。1分ほど待ってからもう一度お試しください。",
            ),
        );
    }
    let now = Utc::now();
    let token = form.token.trim();
    let taken = if token.is_empty() || token.len() > 128 {
        Ok(None)
    } else {
        state.store.console_link_take(&token_hash(token), now).await
    };
    let admin = match taken {
        Ok(Some(admin)) => admin,
        Ok(None) => {
            tracing::info!(address = %ip, "console sign-in refused: link unknown, used or expired");
            return pages::refused(
                StatusCode::FORBIDDEN,
                lang,
                kaiwa_core::i18n::pick(
                    lang,
                    "This sign-in link does not work: it was used already or has expired (links work once, for 10 minutes). Send /console in the admin chat for a new one.",
                    "このサインインリンクは使えません（使用済みか期限切れです。リンクは10分間・1回のみ有効）。管理チャットで /console を送って新しいリンクを受け取ってください。",
                ),
            );
        }
        Err(e) => {
            tracing::error!(error = %e, "console: a sign-in link could not be read");
            return pages::unavailable(lang);
        }
    };
    if !state.people.is_console_admin(&admin) {
        tracing::warn!(user = %admin.user_id, "console sign-in refused: not an admin");
        return pages::refused(
            StatusCode::FORBIDDEN,
            lang,
            kaiwa_core::i18n::pick(
                lang,
                "Not allowed: only the configured admins can use the console.",
                "コンソールは設定された管理者のみ利用できます。",
            ),
        );
    }
    let cookie_token = new_token();
    let session = ConsoleSession {
        admin: admin.clone(),
        csrf: new_token(),
        admins: state.people.admins_fingerprint(),
        expires_at: now + chrono::Duration::from_std(state.session).unwrap_or_default(),
    };
    if let Err(e) = state
        .store
        .console_session_put(&token_hash(&cookie_token), &session)
        .await
    {
        tracing::error!(error = %e, "console: a session could not be stored");
        return pages::unavailable(lang);
    }
    tracing::info!(user = %admin.user_id, platform = %admin.platform, "console: signed in");
    let secure = if state.secure { "; Secure" } else { "" };
    let mut response = Redirect::to("/applications").into_response();
    if let Ok(value) = HeaderValue::from_str(&format!(
        "{COOKIE}={cookie_token}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
        state.session.as_secs()
    )) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

#[derive(Deserialize)]
pub(crate) struct CsrfForm {
    #[serde(default)]
    pub(crate) csrf: String,
}

/// Sign-out: the session is ended in the database and the cookie cleared.
async fn logout(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    let signed = match signed_in(&state, &headers).await {
        Ok(signed) => signed,
        Err(page) => return page,
    };
    if !csrf_ok(&signed, &form.csrf) {
        return pages::forged(signed.lang);
    }
    if let Some(token) = cookie(&headers, COOKIE)
        && let Err(e) = state
            .store
            .console_session_end(&token_hash(token), Utc::now())
            .await
    {
        tracing::error!(error = %e, "console: a session could not be ended");
        return pages::unavailable(signed.lang);
    }
    tracing::info!(user = %signed.admin.user_id, "console: signed out");
    let mut response = Redirect::to("/").into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        HeaderValue::from_static("kaiwa_console=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"),
    );
    response
}

#[derive(Deserialize)]
struct Back {
    back: Option<String>,
}

/// Whether `back` is a path of this site and nothing a browser could read as another one:
/// printable ASCII only (browsers drop tabs and newlines from a URL, and a control character
/// cannot be a header), one leading slash and no backslash (browsers read `\` as `/`), also
/// once percent-decoded (so `/%2F/host` is refused too).
fn is_console_path(back: &str) -> bool {
    fn plain(path: &str) -> bool {
        path.starts_with('/')
            && !path.starts_with("//")
            && path.bytes().all(|b| b.is_ascii_graphic() && b != b'\\')
    }
    let decoded = percent_decoded(back);
    plain(back) && decoded.as_deref().is_some_and(plain)
}

/// `text` with its `%XX` escapes decoded, repeatedly until none is left (`%252F` is `/` to
/// a server that decodes twice); `None` when an escape is not two hex digits or the bytes are
/// not UTF-8.
fn percent_decoded(text: &str) -> Option<String> {
    let mut text = text.to_string();
    for _ in 0..4 {
        if !text.contains('%') {
            return Some(text);
        }
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        text = String::from_utf8(out).ok()?;
    }
    None
}

/// The language switch: a cookie, then back to the page (only a path of this site).
async fn switch_language(Path(code): Path<String>, Query(back): Query<Back>) -> Response {
    let code = if code == "ja" { "ja" } else { "en" };
    let back = back
        .back
        .filter(|b| is_console_path(b))
        .unwrap_or_else(|| "/".into());
    let mut response = Redirect::to(&back).into_response();
    if let Ok(value) = HeaderValue::from_str(&format!(
        "{LANG_COOKIE}={code}; Path=/; Max-Age=31536000; SameSite=Strict"
    )) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_language_follows_the_switch_then_the_browser() {
        let mut headers = HeaderMap::new();
        assert_eq!(language(&headers), "en");
        headers.insert(
            header::ACCEPT_LANGUAGE,
            HeaderValue::from_static("ja-JP,ja;q=0.9,en;q=0.8"),
        );
        assert_eq!(language(&headers), "ja");
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; kaiwa_lang=en"),
        );
        assert_eq!(language(&headers), "en");
    }

    #[test]
    fn a_flash_message_survives_its_cookie_and_garbage_is_ignored() {
        let text = "Approved: 承認 <b>";
        assert_eq!(unhex(&hex(text)).as_deref(), Some(text));
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }
}

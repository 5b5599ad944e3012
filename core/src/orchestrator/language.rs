//! Which language a conversation speaks: decided once, on the first message that says it,
//! and kept until `/lang` changes it.

use super::Orchestrator;
use crate::i18n::written_language;
use crate::message::{Body, Incoming};
use crate::store::SessionRecord;

/// A message another conversation handed over ([`crate::flow::TurnOutput::hand_off`]):
/// that conversation's language, and what the user wrote (stored as written, not as the
/// command it stood for).
pub(super) struct Handed {
    pub(super) language: Option<String>,
    pub(super) said: String,
}

/// What is known of a conversation's language before its turn settles it
/// ([`Orchestrator::settle_language`]).
pub(super) struct LanguageHints {
    /// Handed on by the conversation the message came from, or named by the message that
    /// replaces the session (`/lang`, a start command in another language).
    pub(super) handed: Option<String>,
    /// The user's chosen language as the turn's load read it for a conversation that
    /// starts (`Some(None)`: none chosen); `None` when it was not read.
    pub(super) chosen: Option<Option<String>>,
}

/// The language the user's own words in `body` are written in. A command's words and its
/// arguments in Latin letters (`/reading start Kokoro`) say nothing about the user's
/// language; Japanese in its arguments does.
fn language_of_words(body: &Body) -> Option<&'static str> {
    match body {
        Body::Text { text } => written_language(text),
        Body::Command { args, .. } => written_language(args).filter(|l| *l == "ja"),
        Body::Choice { .. } | Body::Open => None,
    }
}

/// The language a conversation that a command replaces hands on to the one it starts
/// (as a hand-off does), unless the command's own words say another.
pub(super) fn replaced_language(
    active: Option<&SessionRecord>,
    incoming: &Incoming,
) -> Option<String> {
    active
        .and_then(|s| s.language.clone())
        .filter(|_| matches!(incoming.body, Body::Command { .. }))
        .filter(|_| language_of_words(&incoming.body).is_none())
}

/// The language of the app the user runs, as the platform reports it (Telegram's
/// `language_code`, Discord's locale), when it is one Kaiwa speaks.
fn app_language(incoming: &Incoming) -> Option<&'static str> {
    let code = incoming.user.language.as_deref()?;
    match code.split(['-', '_']).next() {
        Some("ja") => Some("ja"),
        Some("en") => Some("en"),
        _ => None,
    }
}

impl Orchestrator {
    /// The language of a notice before a turn (an oversized message, a user over the rate
    /// limit: no session is loaded for them): the active conversation's, else the one
    /// chosen with /lang, else Japanese the user writes, else the app's; `None` when
    /// nothing says (the notice then speaks both).
    pub(super) async fn notice_language(&self, incoming: &Incoming) -> Option<String> {
        let key = incoming.key();
        if let Ok(Some(session)) = self.store.active_session(&key).await
            && session.language.is_some()
        {
            return session.language;
        }
        if let Some(chosen) = self.profile_language(&key).await {
            return Some(chosen);
        }
        language_of_words(&incoming.body)
            .filter(|l| *l == "ja")
            .or(app_language(incoming))
            .map(str::to_string)
    }
}

/// The language of a reply outside a flow's turn (`/help`, an unknown command, a stale
/// button): the conversation's; without one, the one chosen with /lang (`chosen`), else
/// Japanese the user writes, else the app's, else English.
pub(super) fn reply_language<'a>(
    active: Option<&'a SessionRecord>,
    chosen: Option<&'a str>,
    incoming: &Incoming,
) -> &'a str {
    if let Some(lang) = active.and_then(|s| s.language.as_deref()) {
        return lang;
    }
    chosen
        .or(language_of_words(&incoming.body).filter(|l| *l == "ja"))
        .or(app_language(incoming))
        .unwrap_or("en")
}

impl Orchestrator {
    /// Gives `session` a language if it has none yet. A conversation takes, in this order:
    /// the one it was handed with; Japanese the user writes (kana or kanji say it plainly);
    /// the one chosen with /lang (the profile); English the user writes (a few plain
    /// words); the app's language the platform reports; the user's last conversation's.
    /// A flow that does not follow the written language (the interview's Greeter asks
    /// instead of guessing) takes only the first and the profile.
    ///
    /// Returns the language detected from this message, which the turn stores with its
    /// changes (`None` when it was set from what is already stored, or not at all).
    pub(super) async fn settle_language(
        &self,
        session: &mut SessionRecord,
        follows_written: bool,
        incoming: &Incoming,
        hints: LanguageHints,
    ) -> Option<String> {
        let LanguageHints { handed, chosen } = hints;
        if session.language.is_some() {
            return None;
        }
        let new = session.is_new();
        let written = language_of_words(&incoming.body).filter(|_| follows_written);
        let app = app_language(incoming).filter(|_| follows_written);
        let mut detected: Option<String> = None;
        if let Some(handed) = handed.filter(|_| new) {
            session.language = Some(handed);
        } else if written == Some("ja") {
            detected = Some("ja".into());
        } else if let Some(chosen) = match (new, chosen) {
            // read with the turn's load, or now
            (true, Some(loaded)) => loaded,
            (true, None) => self.profile_language(&session.key).await,
            (false, _) => None,
        } {
            session.language = Some(chosen);
        } else if let Some(found) = written.or(app) {
            detected = Some(found.into());
        } else if new && follows_written {
            // nothing to go by: the user's last language
            let key = &session.key;
            match self.store.last_language(key.platform, &key.user).await {
                Ok(last) => detected = last,
                Err(e) => tracing::warn!(error = %e, "could not read the user's last language"),
            }
        }
        if detected.is_some() {
            session.language = detected.clone();
        }
        detected
    }
}

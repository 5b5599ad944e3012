//! What the orchestrator itself says to users: refusals (rate limit, full queue, oversized
//! message), stale buttons, apologies, unknown commands and the model-outage notice, in the
//! session's language.

use super::Orchestrator;
use crate::flow::FlowError;
use crate::message::SessionKey;
use crate::store::SessionRecord;

/// A user over the rate limit (in the user's language when known, else both).
pub(super) const RATE_LIMITED: &str = "You are sending messages faster than I can take them. Please wait a moment, then send that again. / メッセージが速すぎます。少し待ってからもう一度送ってください。";

/// A session whose queue of waiting messages is full.
pub const QUEUE_FULL: &str = "I am still working on your earlier messages. Please wait for my answer, then send that again. / 前のメッセージを処理中です。返事を待ってからもう一度送ってください。";

/// A bilingual notice ("English / 日本語") in one language when `lang` is known.
pub(super) fn in_language(notice: &str, lang: Option<&str>) -> String {
    match (notice.split_once(" / "), lang) {
        (Some((en, ja)), Some(lang)) => crate::i18n::pick(lang, en, ja),
        _ => notice.to_string(),
    }
}

/// A message over the length limit (refused before anything is stored).
pub(super) fn too_long(length: usize, max: usize) -> String {
    format!(
        "Your message is too long ({length} characters; the limit is {max}). Please shorten it or send it in parts. / メッセージが長すぎます（{length} 文字、上限 {max} 文字）。短くするか分けて送ってください。"
    )
}

pub(super) const STALE_EN: &str =
    "Those buttons are no longer active. Please answer the latest message.";

pub(super) fn pick(session: &SessionRecord, en: &str, ja: &str) -> String {
    crate::i18n::pick(session.language.as_deref().unwrap_or("en"), en, ja)
}

pub(super) fn apology(session: &SessionRecord, error: &FlowError) -> String {
    let _ = error; // the details are in the log, never in the chat
    pick(
        session,
        "Sorry, something went wrong on my side. Your message is saved; please send it again or try /start.",
        "申し訳ありません、こちらで問題が発生しました。メッセージは保存されています。もう一度送るか /start をお試しください。",
    )
}

/// The reply to a command no flow knows, in `lang`.
pub(super) fn unknown_command(name: &str, lang: &str) -> String {
    crate::i18n::pick(
        lang,
        &format!("Unknown command /{name}. Send /help to see what I can do."),
        &format!("/{name} というコマンドはありません。/help で一覧を表示します。"),
    )
}

impl Orchestrator {
    /// What `/name` unknown here is told: a command another flow answers in its own
    /// conversation (/insights outside a reading one) says which one; any other is unknown.
    pub(super) fn unknown_command_text(&self, name: &str, lang: &str) -> String {
        let starts: Vec<String> = self
            .flows
            .iter()
            .filter(|f| f.commands().iter().any(|c| c.name == name))
            .filter_map(|f| f.start_commands().first().map(|c| format!("/{}", c.name)))
            .collect();
        if starts.is_empty() {
            return unknown_command(name, lang);
        }
        crate::i18n::pick(
            lang,
            &format!(
                "/{name} works inside a conversation started with {}: send that first.",
                starts.join(" or ")
            ),
            &format!(
                "/{name} は {} で始めた会話の中で使えます。先にそちらを送ってください。",
                starts.join(" または ")
            ),
        )
    }

    /// True the first time `key` hears of `outage` (later outages are told again).
    pub(super) fn first_to_hear_of(&self, outage: u64, key: &SessionKey) -> bool {
        let mut told = self.told.lock().unwrap_or_else(|p| p.into_inner());
        if told.0 != outage {
            *told = (outage, std::collections::HashSet::new());
        }
        told.1.insert(key.clone())
    }
}

//! Platform-free message contracts: [`Incoming`] from an adapter, [`Outgoing`] back to it,
//! and the [`SessionKey`] that names where a conversation lives.
//!
//! Adapters (Telegram, Discord, console) translate their own events into these types; nothing
//! here knows a platform library. Options are identified by a short `request_id` that the
//! orchestrator stores with the session, so a press on a stale keyboard can be recognised.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a message came from. Stored as its lowercase name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Telegram,
    Discord,
    Slack,
    Console,
}

impl Platform {
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Telegram => "telegram",
            Platform::Discord => "discord",
            Platform::Slack => "slack",
            Platform::Console => "console",
        }
    }

    pub fn parse(s: &str) -> Option<Platform> {
        match s {
            "telegram" => Some(Platform::Telegram),
            "discord" => Some(Platform::Discord),
            "slack" => Some(Platform::Slack),
            "console" => Some(Platform::Console),
            _ => None,
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One conversation's place: platform + chat + thread (empty when none) + user.
/// One session runs one flow; a key has at most one active session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionKey {
    pub platform: Platform,
    pub chat: String,
    /// Forum topic, Discord thread, …; empty when the chat has none.
    pub thread: String,
    pub user: String,
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.platform, self.chat)?;
        if !self.thread.is_empty() {
            write!(f, "/{}", self.thread)?;
        }
        write!(f, "#{}", self.user)
    }
}

/// The user behind an incoming message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRef {
    /// Platform user id (stable).
    pub id: String,
    /// Name to address the user by; may change between messages.
    pub display_name: String,
    /// The language the user's app is set to, when the platform says (Telegram's
    /// `language_code`, e.g. `ja` or `en-US`): a hint weaker than what they write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
}

/// What the user sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Body {
    Text {
        text: String,
    },
    /// A press on options we sent: the request they belonged to and the chosen values.
    Choice {
        request_id: String,
        values: Vec<String>,
    },
    /// `/name args`, name without the slash, lowercase.
    Command {
        name: String,
        args: String,
    },
    /// The user opened a conversation (a console started, a thread created): resume the
    /// active session of this key, or start `Incoming::flow` (or the default flow).
    Open,
}

impl Body {
    /// Parses a typed line: `/cmd args` becomes a command (a `@botname` suffix is dropped),
    /// anything else text.
    pub fn from_text(line: &str) -> Body {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix('/') {
            let mut parts = rest.splitn(2, char::is_whitespace);
            let head = parts.next().unwrap_or_default();
            let name = head.split('@').next().unwrap_or_default().to_lowercase();
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                let args = parts.next().unwrap_or_default().trim().to_string();
                return Body::Command { name, args };
            }
        }
        Body::Text {
            text: line.to_string(),
        }
    }

    /// A short human-readable form, as stored in the transcript.
    pub fn transcript_text(&self) -> String {
        match self {
            Body::Text { text } => text.clone(),
            Body::Choice { values, .. } => values.join(", "),
            Body::Command { name, args } if args.is_empty() => format!("/{name}"),
            Body::Command { name, args } => format!("/{name} {args}"),
            Body::Open => String::new(),
        }
    }
}

/// A platform event translated for the core.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incoming {
    pub platform: Platform,
    pub chat: String,
    /// Empty when the chat has no threads.
    pub thread: String,
    pub user: UserRef,
    /// The platform's id of this update; the orchestrator processes each id once per chat.
    pub message_id: String,
    pub body: Body,
    /// The flow a new session here should run (the adapter's configuration for this place);
    /// `None` uses the orchestrator's default.
    pub flow: Option<String>,
    /// An argument for that flow when a session starts here (e.g. the form id).
    pub flow_arg: Option<String>,
    /// Others than the user see this place (a group, a forum topic, a server's channel or
    /// thread): nothing personal is shown here (`/mydata`, `/forget`).
    #[serde(default)]
    pub shared: bool,
}

impl Incoming {
    pub fn key(&self) -> SessionKey {
        SessionKey {
            platform: self.platform,
            chat: self.chat.clone(),
            thread: self.thread.clone(),
            user: self.user.id.clone(),
        }
    }
}

/// One option of an [`Outgoing::Options`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OptionItem {
    /// Returned in [`Body::Choice::values`].
    pub value: String,
    /// Shown to the user.
    pub label: String,
}

impl OptionItem {
    pub fn new(value: impl Into<String>, label: impl Into<String>) -> OptionItem {
        OptionItem {
            value: value.into(),
            label: label.into(),
        }
    }
}

/// Tap-to-answer options; adapters render buttons, a select menu or a numbered list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OptionsRequest {
    pub request_id: String,
    pub prompt: String,
    pub options: Vec<OptionItem>,
    pub allow_multiple: bool,
}

impl OptionsRequest {
    /// A request with a fresh id.
    pub fn new(prompt: impl Into<String>, options: Vec<OptionItem>, allow_multiple: bool) -> Self {
        OptionsRequest {
            request_id: new_request_id(),
            prompt: prompt.into(),
            options,
            allow_multiple,
        }
    }

    /// The labels of the chosen values, for the transcript; unknown values are kept as is.
    pub fn labels_of(&self, values: &[String]) -> Vec<String> {
        values
            .iter()
            .map(|v| {
                self.options
                    .iter()
                    .find(|o| &o.value == v)
                    .map(|o| o.label.clone())
                    .unwrap_or_else(|| v.clone())
            })
            .collect()
    }
}

/// A short id (12 hex chars) that fits Telegram's 64-byte callback data with room to spare:
/// distinct from every other this process makes, and (from a random start) from a previous
/// run's, so a button left from before a restart is stale, not mistaken for a new one.
///
/// A counter through a permutation of 48-bit numbers rather than a random id each time:
/// each random id asked the kernel (`getrandom`, a system call, ~2 a turn).
pub fn new_request_id() -> String {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    const MASK: u64 = (1 << 48) - 1;
    static KEY: OnceLock<(u64, u64)> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let (start, key) = *KEY.get_or_init(|| {
        let random = uuid::Uuid::new_v4().as_u128();
        (random as u64, (random >> 64) as u64)
    });
    // each step is one-to-one on 48 bits (odd multipliers, xor, xor-shifts), so distinct
    // counts give distinct ids
    let mut x = NEXT.fetch_add(1, Ordering::Relaxed).wrapping_add(start) & MASK;
    x = x.wrapping_mul(0x9E37_79B9_7F4B) & MASK;
    x ^= key & MASK;
    x ^= x >> 24;
    x = x.wrapping_mul(0xBF58_476D_1CE5) & MASK;
    x ^= x >> 21;
    format!("{x:012x}")
}

/// What the core asks an adapter to show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Outgoing {
    Text {
        text: String,
    },
    Options(OptionsRequest),
    /// Open a thread (Discord) or topic for this conversation.
    StartThread {
        title: String,
    },
    /// Show "typing…" while work goes on.
    Typing,
}

impl Outgoing {
    pub fn text(text: impl Into<String>) -> Outgoing {
        Outgoing::Text { text: text.into() }
    }

    /// The text stored in the transcript for this outgoing item, if any.
    pub fn transcript_text(&self) -> Option<String> {
        match self {
            Outgoing::Text { text } => Some(text.clone()),
            Outgoing::Options(req) => {
                let labels: Vec<&str> = req.options.iter().map(|o| o.label.as_str()).collect();
                Some(format!("{} [{}]", req.prompt, labels.join(" | ")))
            }
            Outgoing::StartThread { .. } | Outgoing::Typing => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_parsed_and_text_is_kept() {
        assert_eq!(
            Body::from_text("/Start@KaiwaBot now"),
            Body::Command {
                name: "start".into(),
                args: "now".into()
            }
        );
        assert_eq!(
            Body::from_text("/ not a command"),
            Body::Text {
                text: "/ not a command".into()
            }
        );
        assert_eq!(
            Body::from_text("hello"),
            Body::Text {
                text: "hello".into()
            }
        );
    }

    #[test]
    fn request_ids_are_short_and_distinct() {
        let ids: std::collections::HashSet<String> =
            (0..100_000).map(|_| new_request_id()).collect();
        assert_eq!(ids.len(), 100_000);
        assert!(
            ids.iter()
                .all(|id| id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        );
        // not a visible count: neighbours differ in many places
        let a = new_request_id();
        let b = new_request_id();
        let same = a.bytes().zip(b.bytes()).filter(|(x, y)| x == y).count();
        assert!(same < 8, "{a} {b}");
    }
}

//! Admin notifications: audit summaries, help-desk handoffs, … An [`AdminSink`] receives
//! them after the turn that produced them is committed; adapters implement it for the admin
//! chat (Telegram), the admin channel (Discord) or stderr (console).

pub use crate::store::NoticeRef;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One notification for the admins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminNotice {
    /// `audit`, `handoff`, … (adapters may style by kind)
    pub kind: String,
    pub title: String,
    pub body: String,
    /// Labelled facts (applicant, form, result, …), rendered as embed fields or lines.
    pub fields: Vec<(String, String)>,
    pub session_id: Option<i64>,
    /// Buttons for the admins under the notice, each acting on [`Self::session_id`].
    #[serde(default)]
    pub actions: Vec<AdminActionKind>,
}

/// What an admin can do from a notice's button.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdminActionKind {
    /// Approve the application of the session.
    Approve,
    /// Reject it.
    Reject,
    /// Take the conversation over: the agent stays silent, messages are relayed.
    TakeOver,
    /// Give the conversation back to the agent.
    HandBack,
}

impl AdminActionKind {
    const ALL: [AdminActionKind; 4] = [
        AdminActionKind::Approve,
        AdminActionKind::Reject,
        AdminActionKind::TakeOver,
        AdminActionKind::HandBack,
    ];

    fn code(self) -> &'static str {
        match self {
            AdminActionKind::Approve => "ok",
            AdminActionKind::Reject => "no",
            AdminActionKind::TakeOver => "take",
            AdminActionKind::HandBack => "back",
        }
    }

    /// The button's label in `lang` (the admins' language).
    pub fn label(self, lang: &str) -> &'static str {
        let ja = lang == "ja";
        match self {
            AdminActionKind::Approve if ja => "承認",
            AdminActionKind::Approve => "Approve",
            AdminActionKind::Reject if ja => "不採用",
            AdminActionKind::Reject => "Reject",
            AdminActionKind::TakeOver if ja => "対応を引き継ぐ",
            AdminActionKind::TakeOver => "Take over",
            AdminActionKind::HandBack if ja => "エージェントに戻す",
            AdminActionKind::HandBack => "Hand back",
        }
    }
}

/// An admin's button press: what, on which session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminAction {
    pub kind: AdminActionKind,
    pub session_id: i64,
}

/// The prefix of an admin button's data (Telegram callback data, Discord custom id).
pub const ADMIN_ACTION_PREFIX: &str = "kaiwa|a|";

impl AdminAction {
    /// `kaiwa|a|CODE|SESSION`: short enough for Telegram's 64 bytes.
    pub fn encode(&self) -> String {
        format!(
            "{ADMIN_ACTION_PREFIX}{}|{}",
            self.kind.code(),
            self.session_id
        )
    }

    pub fn decode(data: &str) -> Option<AdminAction> {
        let rest = data.strip_prefix(ADMIN_ACTION_PREFIX)?;
        let (code, session) = rest.split_once('|')?;
        let kind = AdminActionKind::ALL
            .into_iter()
            .find(|k| k.code() == code)?;
        let session_id = session.parse().ok().filter(|id: &i64| *id > 0)?;
        Some(AdminAction { kind, session_id })
    }
}

impl AdminNotice {
    /// The notice's buttons with their data, labelled in `lang`.
    pub fn buttons(&self, lang: &str) -> Vec<(&'static str, String)> {
        let Some(session_id) = self.session_id else {
            return Vec::new();
        };
        self.actions
            .iter()
            .map(|&kind| (kind.label(lang), AdminAction { kind, session_id }.encode()))
            .collect()
    }
}

impl AdminNotice {
    /// The notice as plain text.
    pub fn to_text(&self) -> String {
        let mut out = format!("[{}] {}\n", self.kind, self.title);
        for (label, value) in &self.fields {
            out.push_str(&format!("{label}: {value}\n"));
        }
        if !self.body.is_empty() {
            out.push_str(&self.body);
            out.push('\n');
        }
        out
    }
}

/// Why a platform did not take a message.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeliveryError {
    #[error("platform rate limit; retry after {retry_after:?}")]
    RateLimited { retry_after: Duration },
    #[error("platform unreachable: {0}")]
    Disconnected(String),
    #[error("platform refused the message: {0}")]
    Rejected(String),
}

/// Where admin notices go. A sink implements [`Self::notify`] (it cannot say where a notice
/// landed) or [`Self::post`] (a chat place, where a person may reply to it), or both.
#[async_trait]
pub trait AdminSink: Send + Sync {
    /// Sends `notice`, not as a reply to anything.
    async fn notify(&self, notice: &AdminNotice) -> Result<(), DeliveryError> {
        self.post(notice, &[]).await.map(|_| ())
    }

    /// Sends `notice`, as a reply to the message of `replying_to` in the sink's own place
    /// where there is one, and says where it landed: a person's reply to it then reaches
    /// the notice's session. A sink that cannot say sends it as [`Self::notify`] does.
    async fn post(
        &self,
        notice: &AdminNotice,
        replying_to: &[NoticeRef],
    ) -> Result<Vec<NoticeRef>, DeliveryError> {
        let _ = replying_to;
        self.notify(notice).await.map(|()| Vec::new())
    }
}

/// Writes that a notice came to the log (the default when no admin place is configured):
/// its kind and session only, never its text (a title or summary carries what users said;
/// `/transcript ID` shows it to an admin).
pub struct LogAdminSink;

#[async_trait]
impl AdminSink for LogAdminSink {
    async fn notify(&self, notice: &AdminNotice) -> Result<(), DeliveryError> {
        tracing::info!(kind = %notice.kind, session = ?notice.session_id, "admin notice (no admin place configured)");
        Ok(())
    }
}

/// Sends every notice to several sinks (the admin chat on Telegram and the admin channel on
/// Discord); it counts as delivered when one of them took it.
pub struct FanoutAdminSink(pub Vec<std::sync::Arc<dyn AdminSink>>);

#[async_trait]
impl AdminSink for FanoutAdminSink {
    async fn post(
        &self,
        notice: &AdminNotice,
        replying_to: &[NoticeRef],
    ) -> Result<Vec<NoticeRef>, DeliveryError> {
        let mut last = None;
        let mut landed = Vec::new();
        let mut delivered = false;
        for sink in &self.0 {
            match sink.post(notice, replying_to).await {
                Ok(refs) => {
                    delivered = true;
                    landed.extend(refs);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "an admin sink did not take the notice");
                    last = Some(e);
                }
            }
        }
        match (delivered, last) {
            (false, Some(e)) => Err(e),
            _ => Ok(landed),
        }
    }

    async fn notify(&self, notice: &AdminNotice) -> Result<(), DeliveryError> {
        let mut last = None;
        let mut delivered = false;
        for sink in &self.0 {
            match sink.notify(notice).await {
                Ok(()) => delivered = true,
                Err(e) => {
                    tracing::warn!(error = %e, "an admin sink did not take the notice");
                    last = Some(e);
                }
            }
        }
        match (delivered, last) {
            (false, Some(e)) => Err(e),
            _ => Ok(()),
        }
    }
}

/// Keeps notices in memory (tests).
#[cfg(any(test, feature = "test-utils"))]
#[derive(Default)]
pub struct CollectingAdminSink {
    notices: std::sync::Mutex<Vec<AdminNotice>>,
}

#[cfg(any(test, feature = "test-utils"))]
impl CollectingAdminSink {
    pub fn notices(&self) -> Vec<AdminNotice> {
        self.notices
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(any(test, feature = "test-utils"))]
#[async_trait]
impl AdminSink for CollectingAdminSink {
    async fn notify(&self, notice: &AdminNotice) -> Result<(), DeliveryError> {
        self.notices
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(notice.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_round_trip_and_refuse_what_is_not_theirs() {
        for kind in AdminActionKind::ALL {
            let action = AdminAction {
                kind,
                session_id: 4_000_000_123,
            };
            let data = action.encode();
            assert!(data.len() <= 64, "{data}");
            assert_eq!(AdminAction::decode(&data), Some(action));
        }
        for bad in [
            "",
            "kaiwa|a|",
            "kaiwa|a|ok|",
            "kaiwa|a|ok|x",
            "kaiwa|a|ok|-3",
            "kaiwa|a|maybe|3",
            "kaiwa|p|ok|3",
        ] {
            assert_eq!(AdminAction::decode(bad), None, "{bad}");
        }
    }
}

//! Admin notifications: audit summaries, help-desk handoffs, … An [`AdminSink`] receives
//! them after the turn that produced them is committed; adapters implement it for the admin
//! chat (Telegram), the admin channel (Discord) or stderr (console).

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

#[async_trait]
pub trait AdminSink: Send + Sync {
    async fn notify(&self, notice: &AdminNotice) -> Result<(), DeliveryError>;
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

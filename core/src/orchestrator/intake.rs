//! The durable intake, as adapters use it: a message is kept in the store's inbox before it
//! is confirmed to its platform, handled in its session's turn, then cleared; what a crash
//! left in the inbox is handed back at the next start. Adapters reach the store only
//! through these (and [`Orchestrator::pending_options`]): they never read it themselves.

use super::delivery::Resend;
use super::{Orchestrator, OrchestratorError, Outbox, TurnReport};
use crate::message::{Incoming, Platform, SessionKey};

/// A place with a conversation in progress, for an adapter catching up on what it missed.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivePlace {
    pub key: SessionKey,
    /// The conversation's last turn.
    pub last_turn: chrono::DateTime<chrono::Utc>,
}

impl Orchestrator {
    /// Keeps `messages` in the inbox and returns once they are committed: only then may an
    /// adapter confirm them to the platform. An error means none may be confirmed (keeping
    /// them again is harmless).
    pub(crate) async fn keep(&self, messages: &[Incoming]) -> Result<(), OrchestratorError> {
        Ok(self.store.inbox_keep(messages).await?)
    }

    /// Keeps `incoming` in the inbox without waiting for the commit (it commits with or
    /// before its turn): for a platform that has no confirmation to withhold.
    pub(crate) async fn accept(&self, incoming: &Incoming) {
        if let Err(e) = self.store.inbox_put(incoming).await {
            tracing::warn!(error = %e, "could not keep the message in the inbox");
        }
    }

    /// A kept message that gets no turn (its session's queue was full): out of the inbox.
    pub(crate) async fn release(&self, incoming: &Incoming) {
        if let Err(e) = self
            .store
            .inbox_done(incoming.platform, &incoming.chat, &incoming.message_id)
            .await
        {
            tracing::warn!(error = %e, "could not clear a refused message");
        }
    }

    /// At start: sends the replies of `platform` the last run committed but did not deliver,
    /// then returns the messages it kept and did not answer, oldest first, for the adapter
    /// to queue in their sessions' lanes (and handle with [`Self::handle_kept`]).
    pub(crate) async fn left_by_last_run(
        &self,
        platform: Platform,
        outbox: &dyn Outbox,
    ) -> Vec<Incoming> {
        // replies first, once per session: the messages' own replies come after them
        if let Err(e) = self.resend_unreached(platform, outbox).await {
            tracing::warn!(error = %e, "could not send the replies the last run left");
        }
        match self.store.inbox_pending(platform).await {
            Ok(pending) => {
                if !pending.is_empty() {
                    tracing::info!(
                        messages = pending.len(),
                        "handling messages left unfinished by the last run"
                    );
                }
                pending
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not read the inbox");
                Vec::new()
            }
        }
    }

    /// The places of `platform` with a conversation in progress whose last turn is at most
    /// `window` old, most recent first, at most `limit`.
    pub(crate) async fn active_places(
        &self,
        platform: Platform,
        window: std::time::Duration,
        limit: usize,
    ) -> Result<Vec<ActivePlace>, OrchestratorError> {
        let since = chrono::Duration::from_std(window)
            .ok()
            .and_then(|window| chrono::Utc::now().checked_sub_signed(window))
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
        // the list is of every platform: read enough for this one's share
        let sessions = self.store.active_sessions(limit.saturating_mul(4)).await?;
        Ok(sessions
            .into_iter()
            .filter(|s| s.key.platform == platform && s.updated_at >= since)
            .take(limit)
            .map(|s| ActivePlace {
                key: s.key,
                last_turn: s.updated_at,
            })
            .collect())
    }

    /// [`Self::handle`] for platform adapters: the message is kept in the store's inbox until
    /// its turn is done, so a crash mid-turn does not lose it ([`Self::replay_inbox`] at the
    /// next start handles it; the store's deduplication keeps a turn from running twice).
    pub async fn handle_durable(
        &self,
        incoming: Incoming,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        if let Err(e) = self.store.inbox_put(&incoming).await {
            tracing::warn!(error = %e, "could not keep the message in the inbox");
        }
        self.handle_kept(incoming, outbox).await
    }

    /// [`Self::handle`] for a message the adapter already kept in the inbox (and confirmed
    /// to its platform): its entry is cleared once the turn is done.
    pub(crate) async fn handle_kept(
        &self,
        incoming: Incoming,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        let (platform, chat, id) = (
            incoming.platform,
            incoming.chat.clone(),
            incoming.message_id.clone(),
        );
        let report = self.handle(incoming, outbox).await?;
        if let Err(e) = self.store.inbox_done(platform, &chat, &id).await {
            tracing::warn!(error = %e, "could not clear the inbox");
        }
        Ok(report)
    }

    /// Sends, once per session, the replies of `platform` the last run committed but did not
    /// deliver (it stopped in between). Called at start, before any message is handled.
    pub async fn resend_unreached(
        &self,
        platform: crate::message::Platform,
        outbox: &dyn Outbox,
    ) -> Result<usize, OrchestratorError> {
        // looked up by the replies, not by the messages left: a message whose turn committed
        // may have left no entry (see `Store::inbox_put`)
        let unreached = self.store.unreached_sessions(platform).await?;
        if !unreached.is_empty() {
            tracing::info!(
                sessions = unreached.len(),
                "sending replies the last run did not deliver"
            );
        }
        let n = unreached.len();
        for session in unreached {
            self.send_undelivered(&session.key, &session, &[], Resend::AfterRestart, outbox)
                .await;
        }
        Ok(n)
    }

    /// Handles the messages of `platform` left in the inbox by a crash. Returns how many.
    pub async fn replay_inbox(
        &self,
        platform: crate::message::Platform,
        outbox: &dyn Outbox,
    ) -> Result<usize, OrchestratorError> {
        let pending = self.store.inbox_pending(platform).await?;
        let n = pending.len();
        if n > 0 {
            tracing::info!(
                messages = n,
                "handling messages left unfinished by the last run"
            );
        }
        // replies the last run committed but did not deliver (it stopped in between), once
        // per session and before any of these messages is handled (whose own replies are
        // marked delivered only with the writer's next batch)
        self.resend_unreached(platform, outbox).await?;
        for incoming in pending {
            let (chat, id) = (incoming.chat.clone(), incoming.message_id.clone());
            self.handle(incoming, outbox).await?;
            self.store.inbox_done(platform, &chat, &id).await?;
        }
        Ok(n)
    }
}

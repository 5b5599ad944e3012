//! Slack's work in the shared intake ([`crate::intake`]): a message kept in the inbox, its
//! turn in its session's lane, and how a refused one is answered.

use super::outbox::{OnlyToThem, SlackOutbox};
use crate::intake::Turns;
use crate::interaction::SAVE_FAILED;
use async_trait::async_trait;
use kaiwa_core::message::{Incoming, Outgoing, Platform, SessionKey};
use kaiwa_core::orchestrator::{ForAdapters, Outbox, QUEUE_FULL};
use std::sync::Arc;

/// The shared intake over Slack's turns.
pub(super) type Intake = crate::intake::Intake<SlackTurns>;

/// A message kept in the inbox, waiting for its turn in its session's lane.
pub(super) struct Work {
    pub(super) incoming: Incoming,
    /// A slash command in a channel: its answers are ephemeral (only its user sees them).
    pub(super) only_to_them: bool,
}

impl Work {
    /// Its session's lane: the session's key.
    pub(super) fn lane(&self) -> SessionKey {
        self.incoming.key()
    }
}

/// What a Slack turn needs: the adapter's one outbox and the orchestrator.
pub(super) struct SlackTurns {
    /// Also the orchestrator's, for replies outside turns.
    pub(super) outbox: Arc<SlackOutbox>,
    pub(super) orchestrator: ForAdapters,
}

impl SlackTurns {
    /// Tells `incoming`'s user `text` where they wrote (only to them after a slash command).
    async fn tell(&self, incoming: &Incoming, only_to_them: bool, text: &str) {
        let key = incoming.key();
        let items = [Outgoing::text(text)];
        let told = if only_to_them {
            OnlyToThem(&self.outbox).deliver(&key, &items).await
        } else {
            self.outbox.deliver(&key, &items).await
        };
        if let Err(e) = told {
            tracing::warn!(error = %e, "could not tell the user");
        }
    }
}

/// Slack's work in the shared intake: Socket Mode spreads events over an app's
/// connections and the Events API over whatever load balancer is in front, so among
/// several instances every message comes through the claims of the instance holding its
/// chat.
#[async_trait]
impl Turns for SlackTurns {
    type Work = Work;
    type Lane = SessionKey;

    const PLATFORM: Platform = Platform::Slack;
    const ONE_RECEIVER_PER_CHAT: bool = false;

    fn outbox(&self) -> &dyn Outbox {
        self.outbox.as_ref()
    }

    fn kept(&self, incoming: Incoming) -> Option<(SessionKey, Work)> {
        if incoming.chat.is_empty() {
            return None;
        }
        let work = Work {
            incoming,
            only_to_them: false,
        };
        Some((work.lane(), work))
    }

    fn entry(work: &Work) -> Option<&Incoming> {
        Some(&work.incoming)
    }

    async fn run(&self, work: Work) {
        let Work {
            incoming,
            only_to_them,
        } = work;
        let kept = incoming.clone();
        let ran = if only_to_them {
            let outbox = OnlyToThem(&self.outbox);
            self.orchestrator.handle_kept(incoming, &outbox).await
        } else {
            self.orchestrator
                .handle_kept(incoming, self.outbox.as_ref())
                .await
        };
        if let Err(error) = ran {
            tracing::error!(%error, channel = %kept.chat, "turn not stored");
            self.tell(&kept, only_to_them, SAVE_FAILED).await;
        }
    }

    /// Answered once per burst (a slash command always: its user waits for an answer).
    async fn refuse(&self, work: Work, tell: bool) {
        if tell || work.only_to_them {
            self.tell(&work.incoming, work.only_to_them, QUEUE_FULL)
                .await;
        }
    }
}

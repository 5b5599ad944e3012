//! After the flow: the turn written in one store transaction, then its replies delivered
//! through the adapter's [`Outbox`] and its notices to the [`AdminSink`]. Replies the
//! platform did not take are kept and sent first next time (`unreached`).

use super::notices::pick;
use super::{Orchestrator, Outbox};
use super::{OrchestratorError, TurnReport};
use crate::admin::DeliveryError;
use crate::agent::LlmLedger;
use crate::flow::TurnOutput;
use crate::message::{Incoming, Outgoing, SessionKey};
use crate::metrics::kind;
use crate::store::{
    CommittedTurn, ProcessedUpdate, SessionRecord, SessionStatus, StateChange, StoreError,
    TurnCommit,
};
use std::time::Duration;

/// Why replies are sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resend {
    /// The platform refused them in this process.
    Failed,
    /// The last run stopped before recording them as taken: they may have arrived.
    AfterRestart,
}

/// A turn whose flow has run, ready to be committed.
pub(super) struct FinishedTurn {
    pub(super) session: SessionRecord,
    pub(super) finish_session: Option<i64>,
    pub(super) output: TurnOutput,
    pub(super) ledger: LlmLedger,
    /// Replace the session's pending options with this turn's (false for replies that only
    /// inform, such as a stale-button notice).
    pub(super) replace_pending: bool,
    /// What the user wrote, when the message was handled as a command it stood for (a
    /// handoff): stored instead of the command.
    pub(super) said: Option<String>,
}

pub(super) fn processed(incoming: &Incoming) -> Option<ProcessedUpdate> {
    (!incoming.message_id.is_empty()).then(|| ProcessedUpdate {
        platform: incoming.platform,
        chat: incoming.chat.clone(),
        message_id: incoming.message_id.clone(),
    })
}

impl Orchestrator {
    pub(super) async fn commit_and_deliver(
        &self,
        incoming: &Incoming,
        turn: FinishedTurn,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        let FinishedTurn {
            session,
            finish_session,
            output,
            ledger,
            replace_pending,
            said,
        } = turn;
        let key = session.key.clone();
        let mut changes = Vec::with_capacity(output.changes.len() + output.outgoing.len() + 2);
        let said = said.unwrap_or_else(|| incoming.body.transcript_text());
        if !said.is_empty() {
            changes.push(StateChange::AddUserMessage { text: said });
        }
        changes.extend(output.changes);
        // why it answered so: on the turn's first bot message
        let llm_calls = ledger.drain();
        let mut trace = crate::agent::trace::Trace::of(ledger.drain_notes(), llm_calls.len())
            .map(crate::agent::trace::Trace::to_json);
        for item in &output.outgoing {
            if let Some(text) = item.transcript_text() {
                changes.push(StateChange::AddAssistantMessage {
                    text,
                    trace: trace.take(),
                });
            }
        }
        let pending = output.outgoing.iter().rev().find_map(|o| match o {
            Outgoing::Options(req) => Some(req.clone()),
            _ => None,
        });
        if replace_pending && pending != session.pending_options {
            changes.push(StateChange::SetPendingOptions { options: pending });
        }
        let flow = session.flow.clone();
        self.metrics.model_calls(&llm_calls);
        let commit = TurnCommit {
            session,
            user: incoming.user.clone(),
            finish_session,
            processed: processed(incoming),
            changes,
            llm_calls,
        };
        let committed = match self.commit_with_retry(commit).await {
            Ok(c) => c,
            // a turn that lost to a newer one of the same message (an instance paused past
            // its lease while another took the chat over and answered it): the answer stands,
            // and this instance, whose view was stale, says nothing more
            Err(StoreError::Conflict { .. }) if self.answered_elsewhere(incoming).await => {
                tracing::info!(
                    chat = %incoming.chat,
                    "this turn's message was answered by another instance meanwhile; dropped"
                );
                return Ok(TurnReport {
                    session_id: 0,
                    outgoing: Vec::new(),
                    finished: false,
                    duplicate: true,
                });
            }
            Err(StoreError::Duplicate { .. }) => {
                return Ok(TurnReport {
                    session_id: 0,
                    outgoing: Vec::new(),
                    finished: false,
                    duplicate: true,
                });
            }
            Err(e) => return Err(e.into()),
        };
        self.metrics.turn(&flow);
        self.deliver(&key, &output.outgoing, &committed, outbox)
            .await;
        for notice in &output.admin {
            let mut notice = notice.clone();
            notice.session_id = notice.session_id.or(Some(committed.session.id));
            self.post_notice(&notice, &[]).await;
        }
        Ok(TurnReport {
            session_id: committed.session.id,
            outgoing: output.outgoing,
            finished: committed.session.status == SessionStatus::Finished,
            duplicate: false,
        })
    }

    /// Whether `incoming` was committed by another turn (another instance's) since this
    /// one loaded its session.
    async fn answered_elsewhere(&self, incoming: &Incoming) -> bool {
        !incoming.message_id.is_empty()
            && self
                .store
                .is_processed(incoming.platform, &incoming.chat, &incoming.message_id)
                .await
                .unwrap_or(false)
    }

    /// SQLite busy / locked is retried a few times with a short, growing wait.
    pub(super) async fn commit_with_retry(
        &self,
        commit: TurnCommit,
    ) -> Result<CommittedTurn, StoreError> {
        let mut wait = Duration::from_millis(20);
        for _ in 0..5 {
            match self.store.commit_turn(commit.clone()).await {
                Err(e) if e.is_busy() => {
                    tracing::warn!(error = %e, "database busy; retrying the turn's commit");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                other => return other,
            }
        }
        self.store.commit_turn(commit).await
    }

    pub(super) async fn deliver(
        &self,
        key: &SessionKey,
        outgoing: &[Outgoing],
        committed: &CommittedTurn,
        outbox: &dyn Outbox,
    ) {
        if outgoing.is_empty() {
            return;
        }
        if self.is_unreached(committed.session.id) {
            self.send_unreached(
                key,
                &committed.session,
                &committed.assistant_message_ids,
                outbox,
            )
            .await;
        }
        // one item at a time, each marked delivered once the platform took it: a crash
        // mid-reply repeats at most the item in flight, not the ones that arrived
        let ids = &committed.assistant_message_ids;
        let stored = outgoing
            .iter()
            .filter(|o| o.transcript_text().is_some())
            .count();
        // the items' messages are the turn's last (a flow's own messages come first)
        let (own, items) = ids.split_at(ids.len().saturating_sub(stored));
        let mut item_ids = items.iter();
        let session = committed.session.id;
        for (i, item) in outgoing.iter().enumerate() {
            let id = item.transcript_text().and(item_ids.next());
            let sent = match id {
                Some(id) => outbox.deliver_reply(key, item, *id).await,
                None => outbox.deliver(key, std::slice::from_ref(item)).await,
            };
            match (sent, id) {
                (Ok(()), Some(id)) => {
                    self.delivered(Ok(()), session, std::slice::from_ref(id))
                        .await;
                }
                (Ok(()), None) => {}
                // a lost typing indicator harms nobody
                (Err(_), _) if matches!(item, Outgoing::Typing) => {}
                (Err(e), _) => {
                    self.delivered(Err(e), session, &[]).await;
                    tracing::info!(
                        left = outgoing.len() - i,
                        "reply cut short; the rest goes with the next delivery"
                    );
                    return;
                }
            }
        }
        if !own.is_empty() {
            self.delivered(Ok(()), session, own).await;
        }
    }

    /// After a delivery of the session's messages `ids`: marks them delivered, or counts
    /// the failure and remembers the session (they stay undelivered in the store, and go
    /// with its next reply). True when they were delivered.
    pub(super) async fn delivered(
        &self,
        sent: Result<(), DeliveryError>,
        session_id: i64,
        ids: &[i64],
    ) -> bool {
        match sent {
            Ok(()) => {
                if let Err(e) = self.store.mark_delivered(ids).await {
                    tracing::warn!(error = %e, "could not mark messages delivered");
                }
                true
            }
            Err(e) => {
                self.metrics.error(kind::DELIVERY);
                remember_unreached(&mut self.unreached_set(), session_id);
                tracing::warn!(error = %e, "reply not delivered; kept as undelivered");
                false
            }
        }
    }

    pub(super) fn unreached_set(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashSet<i64>> {
        self.unreached.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn is_unreached(&self, session_id: i64) -> bool {
        self.unreached_set().contains(&session_id)
    }

    /// Sends the session's committed replies not yet delivered (but those of `current`, the
    /// turn being delivered), under a line saying they are late, and marks them delivered.
    /// A failure keeps them for the next try.
    pub(super) async fn send_unreached(
        &self,
        key: &SessionKey,
        session: &SessionRecord,
        current: &[i64],
        outbox: &dyn Outbox,
    ) {
        self.send_undelivered(key, session, current, Resend::Failed, outbox)
            .await;
    }

    /// [`Self::send_unreached`], saying why they come again.
    pub(super) async fn send_undelivered(
        &self,
        key: &SessionKey,
        session: &SessionRecord,
        current: &[i64],
        why: Resend,
        outbox: &dyn Outbox,
    ) {
        let earlier: Vec<crate::store::StoredMessage> =
            match self.store.undelivered(session.id).await {
                Ok(messages) => messages
                    .into_iter()
                    .filter(|m| !current.contains(&m.id))
                    .collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "could not load the replies not delivered");
                    return;
                }
            };
        // what the place shows already (a platform that can tell) is not sent again
        let ids: Vec<i64> = earlier.iter().map(|m| m.id).collect();
        let earlier = match outbox.already_shown(key, &ids).await {
            Some(shown) if shown.len() == earlier.len() => {
                let (there, missing): (Vec<_>, Vec<_>) = earlier
                    .into_iter()
                    .zip(shown)
                    .partition(|(_, shown)| *shown);
                let there: Vec<i64> = there.iter().map(|(m, _)| m.id).collect();
                if !there.is_empty() {
                    tracing::info!(replies = there.len(), "replies found delivered already");
                    self.delivered(Ok(()), session.id, &there).await;
                }
                missing.into_iter().map(|(m, _)| m).collect()
            }
            _ => earlier,
        };
        if earlier.is_empty() {
            self.unreached_set().remove(&session.id);
            return;
        }
        let note = match why {
            Resend::Failed => pick(
                session,
                "(Earlier replies that did not reach you:)",
                "（お届けできなかった前回の返信です）",
            ),
            Resend::AfterRestart => pick(
                session,
                "(I restarted; in case these did not reach you:)",
                "（再起動しました。届いていない可能性のある返信です）",
            ),
        };
        let noted = outbox.deliver(key, &[Outgoing::text(note)]).await;
        if !self.delivered(noted, session.id, &[]).await {
            return;
        }
        // each marked delivered once the platform took it
        for message in &earlier {
            let item = Outgoing::text(message.text.clone());
            let sent = outbox.deliver_reply(key, &item, message.id).await;
            if !self.delivered(sent, session.id, &[message.id]).await {
                return;
            }
        }
        self.unreached_set().remove(&session.id);
        tracing::info!(replies = earlier.len(), "replies not delivered before sent");
    }

    /// A reply that changes nothing but the transcript (help, stale buttons, apologies).
    pub(super) async fn reply_only(
        &self,
        incoming: &Incoming,
        session: Option<SessionRecord>,
        text: String,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        let outgoing = vec![Outgoing::text(text)];
        match session {
            Some(session) => {
                let output = TurnOutput {
                    outgoing,
                    ..Default::default()
                };
                // the pending options stay as they are: only a flow's turn replaces them
                let turn = FinishedTurn {
                    session,
                    finish_session: None,
                    output,
                    ledger: LlmLedger::new(),
                    replace_pending: false,
                    said: None,
                };
                self.commit_and_deliver(incoming, turn, outbox).await
            }
            None => {
                if let Err(e) = outbox.deliver(&incoming.key(), &outgoing).await {
                    tracing::warn!(error = %e, "reply not delivered");
                }
                Ok(TurnReport {
                    session_id: 0,
                    outgoing,
                    finished: false,
                    duplicate: false,
                })
            }
        }
    }
}

/// Most sessions remembered as unreached in memory; one more forgets another (its replies
/// stay undelivered in the store: the next start sends them, see
/// [`Orchestrator::resend_unreached`]).
pub(super) const MAX_UNREACHED: usize = 10_000;

pub(super) fn remember_unreached(set: &mut std::collections::HashSet<i64>, session_id: i64) {
    if set.len() >= MAX_UNREACHED
        && !set.contains(&session_id)
        && let Some(&any) = set.iter().next()
    {
        set.remove(&any);
    }
    set.insert(session_id);
}

#[cfg(test)]
mod bounded_tests {
    use super::*;

    #[test]
    fn the_unreached_sessions_remembered_are_bounded() {
        let mut set = std::collections::HashSet::new();
        for id in 0..(MAX_UNREACHED as i64 + 500) {
            remember_unreached(&mut set, id);
        }
        assert_eq!(set.len(), MAX_UNREACHED);
        assert!(
            set.contains(&(MAX_UNREACHED as i64 + 499)),
            "the newest is kept"
        );
    }
}

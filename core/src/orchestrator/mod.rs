//! The [`Orchestrator`]: takes one [`Incoming`] at a time per session and turns it into a
//! committed turn and delivered replies.
//!
//! For each message: take the session's lock (turns of one session never interleave, other
//! sessions run in parallel), skip an update already processed, load the session, let the
//! flow run, write the turn (messages, state changes, processed mark, model ledger) in one
//! store transaction, then deliver through the adapter's [`Outbox`] and notify the
//! [`AdminSink`]. Generic commands (`/start`, `/help`, `/end`, a flow's start command) and
//! stale button presses are handled here, so every flow behaves the same. A failing flow is
//! answered with an apology and leaves the session as it was.

use crate::admin::{AdminSink, DeliveryError};
use crate::agent::LlmLedger;
use crate::flow::{FlowError, FlowRegistry, TurnContext, TurnInput, TurnOutput};
use crate::llm::ModelRouter;
use crate::llm::stream::Tap;
use crate::message::{Body, Incoming, OptionItem, OptionsRequest, Outgoing, SessionKey};
use crate::metrics::{Metrics, kind};
use crate::store::StateChange;
use crate::store::{
    CommittedTurn, ProcessedUpdate, SessionRecord, SessionStatus, Store, StoreError, TurnCommit,
    TurnLoad,
};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::Instrument;

mod admission;
mod commands;
mod delivery;
mod notices;
mod routing;
mod working;

pub use commands::admin::{ADMIN_COMMANDS, AdminAccess};
pub use notices::QUEUE_FULL;
pub use working::Streamer;

use admission::*;
use delivery::*;
use notices::*;
use routing::*;

/// How many recent messages a flow sees: the most any flow reads (the assistant's context
/// is the last 20; the interview's summary for its sub-agents the last 12). Each turn copies
/// them, so more than the flows read is paid for by every turn.
pub const HISTORY_LIMIT: usize = 20;

/// Where replies go: implemented by each adapter for its platform.
#[async_trait]
pub trait Outbox: Send + Sync {
    async fn deliver(&self, key: &SessionKey, items: &[Outgoing]) -> Result<(), DeliveryError>;

    /// Delivers `items` to the key's user in their private chat with the bot (a DM): a
    /// reply with personal data asked for in a shared place. `Ok(false)` when it cannot
    /// (the user never opened a private chat, or the platform has none).
    async fn deliver_privately(
        &self,
        key: &SessionKey,
        items: &[Outgoing],
    ) -> Result<bool, DeliveryError> {
        let _ = (key, items);
        Ok(false)
    }

    /// A live view of the reply being written for `key`, where the platform and the place
    /// can show one (a Telegram draft or edited message, a Discord edited message, the
    /// console); `None` elsewhere. `tap` is the reply's: a Stop the user gives goes to it.
    /// The turn's reply itself still goes through [`Outbox::deliver`], which replaces what
    /// was shown.
    fn streamer(&self, key: &SessionKey, tap: &Arc<Tap>) -> Option<Box<dyn Streamer>> {
        let _ = (key, tap);
        None
    }
}

/// The language `text` is plainly written in: Japanese with any kana or kanji, English
/// with two or more words of Latin letters and none; `None` for a name, a number, a word.
fn written_language(text: &str) -> Option<&'static str> {
    if crate::i18n::has_japanese(text) {
        return Some("ja");
    }
    let words = text
        .split_whitespace()
        .filter(|w| w.chars().filter(char::is_ascii_alphabetic).count() >= 2)
        .count();
    (words >= 2).then_some("en")
}

/// A message another conversation handed over ([`crate::flow::TurnOutput::hand_off`]):
/// that conversation's language, and what the user wrote (stored as written, not as the
/// command it stood for).
struct Handed {
    language: Option<String>,
    said: String,
}

/// What happened to one incoming message.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnReport {
    /// The session the turn ran in (0 when nothing was written).
    pub session_id: i64,
    pub outgoing: Vec<Outgoing>,
    /// The place's conversation is over (the flow ended it or `/end`). Not when a session
    /// that ended on its first turn left the one it was to replace going on.
    pub finished: bool,
    /// The update had been processed before; nothing was done.
    pub duplicate: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum OrchestratorError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub struct Orchestrator {
    store: Arc<dyn Store>,
    flows: FlowRegistry,
    models: ModelRouter,
    admin: Arc<dyn AdminSink>,
    locks: SessionLocks,
    max_message_chars: usize,
    metrics: Arc<Metrics>,
    rate: RateLimiter,
    max_waiting: usize,
    keep_submissions: bool,
    access: AdminAccess,
    /// Time for a turn's model work (`None`: each call's own timeout only).
    turn_budget: Option<Duration>,
    /// Places told of the current model outage.
    told: Mutex<(u64, std::collections::HashSet<SessionKey>)>,
    /// Sessions with a reply the platform did not take (in this process): the session's next
    /// delivery sends it first, and so does the same message coming again.
    unreached: Mutex<std::collections::HashSet<i64>>,
}

/// Messages a user may send in a minute before "slow down" (per place).
pub const DEFAULT_RATE_PER_MINUTE: usize = 30;
/// Messages that may wait behind a session's running turn.
pub const DEFAULT_MAX_WAITING: usize = 8;

/// Messages longer than this are refused (issue: 4,000 characters).
pub const DEFAULT_MAX_MESSAGE_CHARS: usize = 4_000;

impl Orchestrator {
    pub fn new(
        store: Arc<dyn Store>,
        flows: FlowRegistry,
        models: ModelRouter,
        admin: Arc<dyn AdminSink>,
    ) -> Self {
        Orchestrator {
            store,
            flows,
            models,
            admin,
            locks: SessionLocks::default(),
            max_message_chars: DEFAULT_MAX_MESSAGE_CHARS,
            metrics: Arc::new(Metrics::default()),
            rate: RateLimiter {
                per_minute: DEFAULT_RATE_PER_MINUTE,
                ..RateLimiter::default()
            },
            max_waiting: DEFAULT_MAX_WAITING,
            keep_submissions: false,
            access: AdminAccess::default(),
            turn_budget: None,
            told: Mutex::new((0, std::collections::HashSet::new())),
            unreached: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// Longer messages get a clear reply and are not stored at all.
    pub fn with_max_message_chars(mut self, max: usize) -> Self {
        self.max_message_chars = max.max(1);
        self
    }

    /// At most `per_minute` messages per user and place in any minute (0: unlimited).
    pub fn with_rate_limit(mut self, per_minute: usize) -> Self {
        self.rate.per_minute = per_minute;
        self
    }

    /// At most `max_waiting` messages wait behind a session's running turn; more are refused.
    pub fn with_max_waiting(mut self, max_waiting: usize) -> Self {
        self.max_waiting = max_waiting;
        self
    }

    /// A turn's model work ends within `budget`: calls get what is left, then fail at once
    /// and agents answer by their floors ([`crate::llm::budget`]).
    pub fn with_turn_budget(mut self, budget: Duration) -> Self {
        self.turn_budget = Some(budget);
        self
    }

    /// `/forget` keeps interview submissions (for the hiring team) and says so.
    pub fn with_kept_submissions(mut self, keep: bool) -> Self {
        self.keep_submissions = keep;
        self
    }

    /// Who may use the admin commands, and where.
    pub fn with_admin_access(mut self, access: AdminAccess) -> Self {
        self.access = access;
        self
    }

    /// Turns, errors, model calls, queue: what `/metrics` serves.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn flows(&self) -> &FlowRegistry {
        &self.flows
    }

    /// Whether `/name` is one of Kaiwa's commands: a generic one, a flow's start or
    /// in-session command, a flow's id, `/cancel`, or an admin command. A bot that mounts
    /// Kaiwa beside its own handlers leaves every other command to them.
    pub fn knows_command(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        name == "cancel"
            || ADMIN_COMMANDS.contains(&name.as_str())
            || self.flows.by_start_command(&name).is_some()
            || self.flows.menu_commands().iter().any(|c| c.name == name)
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
    pub async fn handle_kept(
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

    /// How many messages may wait behind a session's running turn (adapters that queue
    /// per session bound their queues the same).
    pub fn max_waiting(&self) -> usize {
        self.max_waiting
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

    /// Handles one message: one turn, committed, then delivered through `outbox`.
    pub async fn handle(
        &self,
        incoming: Incoming,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        let key = incoming.key();
        let span = tracing::info_span!("turn", session = %key, message_id = %incoming.message_id);
        async {
            let admit = match incoming.body {
                Body::Open => Admit::Yes,
                _ => self.rate.allow(&key),
            };
            if let Admit::Refused { tell } = admit {
                tracing::info!(told = tell, "rate limit: message refused");
                self.metrics.error(kind::RATE_LIMITED);
                return self.refuse(&incoming, tell, RATE_LIMITED, outbox).await;
            }
            let waiting = self.metrics.queued();
            let _lease = match self.locks.acquire(&key, self.max_waiting).await {
                Ok(lease) => lease,
                Err(Full { tell }) => {
                    drop(waiting);
                    tracing::info!(told = tell, "session queue full: message refused");
                    self.metrics.error(kind::QUEUE_FULL);
                    return self.refuse(&incoming, tell, QUEUE_FULL, outbox).await;
                }
            };
            drop(waiting);
            let result = self.handle_locked(incoming, key, outbox, None).await;
            if result.is_err() {
                self.metrics.error(kind::STORE);
            }
            result
        }
        .instrument(span)
        .await
    }

    /// A message refused before its turn: answered with `notice` when `tell` (the first of
    /// a burst), else dropped without a word.
    async fn refuse(
        &self,
        incoming: &Incoming,
        tell: bool,
        notice: &str,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        if tell {
            // in the user's language when it is known (the conversation's, else the one
            // chosen with /lang); both otherwise
            let key = incoming.key();
            let lang = match self.store.active_session(&key).await {
                Ok(Some(session)) if session.language.is_some() => session.language,
                _ => self.profile_language(&key).await,
            };
            let text = notices::in_language(notice, lang.as_deref());
            return self.reply_only(incoming, None, text, outbox).await;
        }
        Ok(TurnReport {
            session_id: 0,
            outgoing: Vec::new(),
            finished: false,
            duplicate: false,
        })
    }

    /// One message, the session's lock held. `handed`: the message was handed over by
    /// another conversation (see [`Handed`]).
    async fn handle_locked(
        &self,
        incoming: Incoming,
        key: SessionKey,
        outbox: &dyn Outbox,
        handed: Option<Handed>,
    ) -> Result<TurnReport, OrchestratorError> {
        let (language, said) = match handed {
            Some(Handed { language, said }) => (language, Some(said)),
            None => (None, None),
        };
        // a command's arguments are stored and read like any text: the same limit
        let length = match &incoming.body {
            Body::Text { text } => text.chars().count(),
            Body::Command { .. } => incoming.body.transcript_text().chars().count(),
            Body::Choice { .. } | Body::Open => 0,
        };
        if length > self.max_message_chars {
            tracing::info!(length, "oversized message refused");
            self.metrics.error(kind::OVERSIZED);
            let text = too_long(length, self.max_message_chars);
            return self.reply_only(&incoming, None, text, outbox).await;
        }
        if let Body::Command { name, args } = &incoming.body
            && ADMIN_COMMANDS.contains(&name.as_str())
        {
            let text = self.admin_command(&key, name, args).await?;
            return self.reply_only(&incoming, None, text, outbox).await;
        }
        let TurnLoad {
            duplicate,
            session: active,
            history,
        } = self
            .store
            .load_for_turn(&key, &incoming.message_id, HISTORY_LIMIT)
            .await?;
        let history_of = active.as_ref().map(|s| s.id);
        if duplicate {
            tracing::info!("duplicate update ignored");
            // the platform sends it again: perhaps because our reply did not reach it
            if let Some(session) = &active
                && self.is_unreached(session.id)
            {
                self.send_unreached(&key, session, &[], outbox).await;
            }
            return Ok(TurnReport {
                session_id: 0,
                outgoing: Vec::new(),
                finished: false,
                duplicate: true,
            });
        }
        if let Some(report) = self.privacy(&incoming, &key, &active, outbox).await? {
            return Ok(report);
        }
        if let Some(report) = self
            .language_command(&incoming, &key, &active, outbox)
            .await?
        {
            return Ok(report);
        }
        let plan = self.plan(&incoming, active)?;
        let (session, finish_session, input) = match plan {
            Plan::Reply { session, text } => {
                return self.reply_only(&incoming, session, text, outbox).await;
            }
            Plan::Turn {
                session,
                finish_session,
                input,
            } => (session, finish_session, input),
        };
        let start_arg = match (&incoming.body, session.is_new()) {
            (_, false) => None,
            (Body::Command { args, .. }, true) if !args.is_empty() => Some(args.as_str()),
            (_, true) => incoming.flow_arg.as_deref(),
        };
        let mut session = session;
        let Some(flow) = self.flows.get(&session.flow).cloned() else {
            let text = format!(
                "This conversation uses the flow {:?}, which is not enabled here.",
                session.flow
            );
            return self.reply_only(&incoming, None, text, outbox).await;
        };
        // A conversation with no language yet takes, in this order: the one it was handed
        // with; Japanese the user writes (kana or kanji say it plainly); the one chosen
        // with /lang (the profile); English the user writes (a few plain words); the app's
        // language the platform reports (Telegram's language_code, Discord's locale); the
        // user's last conversation's. The interview's Greeter asks instead of guessing: it
        // takes only the first and the profile. A conversation keeps its language until
        // /lang changes it.
        let mut detected: Option<String> = None;
        if session.language.is_none() {
            let follows = flow.follows_written_language();
            let written = match &incoming.body {
                Body::Text { text } => Some(text.as_str()),
                Body::Command { args, .. } => Some(args.as_str()),
                _ => None,
            }
            .and_then(written_language)
            .filter(|_| follows);
            let app = incoming
                .user
                .language
                .as_deref()
                .and_then(|code| match code.split(['-', '_']).next() {
                    Some("ja") => Some("ja"),
                    Some("en") => Some("en"),
                    _ => None,
                })
                .filter(|_| follows);
            let new = session.is_new();
            if let Some(handed) = language.filter(|_| new) {
                session.language = Some(handed);
            } else if written == Some("ja") {
                detected = Some("ja".into());
            } else if let Some(chosen) = match new {
                true => self.profile_language(&key).await,
                false => None,
            } {
                session.language = Some(chosen);
            } else if let Some(found) = written.or(app) {
                detected = Some(found.into());
            } else if new && follows {
                // nothing to go by: the user's last language
                match self.store.last_language(key.platform, &key.user).await {
                    Ok(last) => detected = last,
                    Err(e) => tracing::warn!(error = %e, "could not read the user's last language"),
                }
            }
            if detected.is_some() {
                session.language = detected.clone();
            }
        }
        let history = if history_of == Some(session.id) && !session.is_new() {
            history
        } else {
            Vec::new()
        };
        if !self.models.is_empty() {
            // best effort: a lost typing indicator harms nobody
            let _ = outbox.deliver(&key, &[Outgoing::Typing]).await;
        }
        let ledger = LlmLedger::new();
        let ctx = TurnContext {
            session: &session,
            user: &incoming.user,
            history: &history,
            models: &self.models,
            ledger: &ledger,
            store: self.store.as_ref(),
            start_arg,
        };
        let is_command = matches!(input, TurnInput::Command { .. });
        let work = async {
            match input {
                TurnInput::Command { name, .. } if name == "end" => flow.end(ctx).await,
                input => flow.turn(ctx, input).await,
            }
        };
        let (result, streaming) = self.working(&key, outbox, work).await;
        let mut output = match result {
            Ok(output) => output,
            Err(error) => {
                streaming.finish().await;
                tracing::error!(%error, flow = %session.flow, "turn failed");
                self.metrics.error(kind::FLOW);
                let calls = ledger.drain();
                self.metrics.model_calls(&calls);
                if let Err(e) = self.store.record_llm_calls(&calls).await {
                    tracing::warn!(error = %e, "could not record the failed turn's model calls");
                }
                let text = apology(&session, &error);
                let session = (!session.is_new()).then_some(session);
                return self.reply_only(&incoming, session, text, outbox).await;
            }
        };
        if let Some(language) = detected
            && !output
                .changes
                .iter()
                .any(|c| matches!(c, StateChange::SetLanguage { .. }))
        {
            output
                .changes
                .insert(0, StateChange::SetLanguage { language });
        }
        if streaming.stopped {
            // stored and shown as stopped: the answer is what was written until then
            tracing::info!("the user stopped the reply");
            if let Some(Outgoing::Text { text }) = output
                .outgoing
                .iter_mut()
                .find(|o| matches!(o, Outgoing::Text { .. }))
            {
                text.push_str(&pick(&session, " … (stopped)", " …（停止しました）"));
            }
        }
        if let Some(handoff) = output.handoff.take()
            && !matches!(incoming.body, Body::Command { .. })
        {
            // the message stands for a command of another flow: handled as that command
            tracing::info!(command = %handoff.command, "message handed to another flow");
            streaming.finish().await;
            let language = output
                .changes
                .iter()
                .rev()
                .find_map(|c| match c {
                    StateChange::SetLanguage { language } => Some(language.clone()),
                    _ => None,
                })
                .or(session.language.clone());
            let said = incoming.body.transcript_text();
            let incoming = Incoming {
                body: Body::Command {
                    name: handoff.command,
                    args: handoff.args,
                },
                ..incoming
            };
            let handed = Handed { language, said };
            return Box::pin(self.handle_locked(incoming, key, outbox, Some(handed))).await;
        }
        if is_command && output.unknown_command {
            output
                .outgoing
                .push(Outgoing::text(unknown_command(&session, &incoming.body)));
        }
        if let Some(outage) = self.models.outage()
            && self.first_to_hear_of(outage, &key)
        {
            // once per outage and place: the answers are simpler for a while
            let notice = pick(
                &session,
                "(The language model is not answering right now, so my replies are simpler for a while.)",
                "（現在、言語モデルが応答しないため、しばらく簡易的な応答になります。）",
            );
            let at = output
                .outgoing
                .iter()
                .position(|o| matches!(o, Outgoing::Options(_)))
                .unwrap_or(output.outgoing.len());
            output.outgoing.insert(at, Outgoing::text(notice));
        }
        // a command whose flow ends its new session on the first turn — it would not start
        // (an unknown form) or it answered once (`/recommend`) — leaves the session it was
        // to replace as it was: a typo in `/interview FORM` must not end an interview half
        // done. (Opening a place for another flow, `kaiwa chat recommend`, still replaces.)
        let kept = finish_session.is_some()
            && session.is_new()
            && matches!(incoming.body, Body::Command { .. })
            && output
                .changes
                .iter()
                .any(|c| matches!(c, StateChange::EndSession));
        let turn = FinishedTurn {
            session,
            finish_session: finish_session.filter(|_| !kept),
            output,
            ledger,
            replace_pending: true,
            said,
        };
        let report = self.commit_and_deliver(&incoming, turn, outbox).await;
        streaming.finish().await;
        let mut report = report?;
        if kept {
            // the session it was to replace goes on
            report.finished = false;
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests;

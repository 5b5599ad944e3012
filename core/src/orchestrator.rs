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
use crate::message::{Body, Incoming, OptionItem, OptionsRequest, Outgoing, SessionKey};
use crate::metrics::{Metrics, kind};
use crate::state::StateChange;
use crate::store::{
    CommittedTurn, ProcessedUpdate, SessionRecord, SessionStatus, Store, StoreError, TurnCommit,
    TurnLoad,
};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::Instrument;

/// How many recent messages a flow sees: the most any flow reads (the assistant's context
/// is the last 20; the interview's summary for its sub-agents the last 12). Each turn copies
/// them, so more than the flows read is paid for by every turn.
pub const HISTORY_LIMIT: usize = 20;

/// Where replies go: implemented by each adapter for its platform.
#[async_trait]
pub trait Outbox: Send + Sync {
    async fn deliver(&self, key: &SessionKey, items: &[Outgoing]) -> Result<(), DeliveryError>;
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
    /// Places told of the current model outage.
    told: Mutex<(u64, std::collections::HashSet<SessionKey>)>,
    /// Sessions with a reply the platform did not take (in this process): the session's next
    /// delivery sends it first, and so does the same message coming again.
    unreached: Mutex<std::collections::HashSet<i64>>,
}

/// Who may use the admin commands (`/sessions`, `/transcript ID`, `/export FORM`), and where:
/// only listed users, and only in their platform's admin chat or channel.
#[derive(Debug, Clone, Default)]
pub struct AdminAccess {
    /// Admin user ids per platform.
    pub admins: HashMap<crate::message::Platform, Vec<String>>,
    /// The admin chat (Telegram) or channel (Discord) per platform.
    pub places: HashMap<crate::message::Platform, String>,
}

impl AdminAccess {
    pub fn allows(&self, key: &SessionKey) -> bool {
        let admin = self
            .admins
            .get(&key.platform)
            .is_some_and(|ids| ids.iter().any(|id| id == &key.user));
        let place = self
            .places
            .get(&key.platform)
            .is_some_and(|chat| chat == &key.chat);
        admin && place
    }
}

/// The admin commands.
pub const ADMIN_COMMANDS: [&str; 3] = ["sessions", "transcript", "export"];

/// At most `per_minute` messages per user and place in any 60 seconds (0: no limit).
#[derive(Default)]
struct RateLimiter {
    per_minute: usize,
    recent: Mutex<HashMap<SessionKey, std::collections::VecDeque<std::time::Instant>>>,
}

impl RateLimiter {
    fn allow(&self, key: &SessionKey) -> bool {
        if self.per_minute == 0 {
            return true;
        }
        let now = std::time::Instant::now();
        let window = Duration::from_secs(60);
        let mut map = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 10_000 {
            map.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < window)
            });
        }
        let times = map.entry(key.clone()).or_default();
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= window)
        {
            times.pop_front();
        }
        if times.len() >= self.per_minute {
            return false;
        }
        times.push_back(now);
        true
    }
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

    /// [`Self::handle`] for platform adapters: the message is kept in the store's inbox until
    /// its turn is done, so a crash mid-turn does not lose it ([`Self::replay_inbox`] at the
    /// next start handles it; the store's deduplication keeps a turn from running twice).
    pub async fn handle_durable(
        &self,
        incoming: Incoming,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        let (platform, chat, id) = (
            incoming.platform,
            incoming.chat.clone(),
            incoming.message_id.clone(),
        );
        if let Err(e) = self.store.inbox_put(&incoming).await {
            tracing::warn!(error = %e, "could not keep the message in the inbox");
        }
        let result = self.handle(incoming, outbox).await;
        if result.is_ok()
            && let Err(e) = self.store.inbox_done(platform, &chat, &id).await
        {
            tracing::warn!(error = %e, "could not clear the inbox");
        }
        result
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
        // marked delivered only with the writer's next batch). Looked up by the replies, not
        // by the messages left: a message whose turn committed may have left no entry
        // (see `Store::inbox_put`).
        let unreached = self.store.unreached_sessions(platform).await?;
        if !unreached.is_empty() {
            tracing::info!(
                sessions = unreached.len(),
                "sending replies the last run did not deliver"
            );
        }
        for session in unreached {
            self.send_unreached(&session.key, &session, &[], outbox)
                .await;
        }
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
            if !matches!(incoming.body, Body::Open) && !self.rate.allow(&key) {
                tracing::info!("rate limit: message refused");
                self.metrics.error(kind::RATE_LIMITED);
                let text = "You are sending messages faster than I can take them. Please wait a moment, then send that again. / メッセージが速すぎます。少し待ってからもう一度送ってください。";
                return self.reply_only(&incoming, None, text.into(), outbox).await;
            }
            let waiting = self.metrics.queued();
            let Some(_lease) = self.locks.acquire(&key, self.max_waiting).await else {
                drop(waiting);
                tracing::info!("session queue full: message refused");
                self.metrics.error(kind::QUEUE_FULL);
                let text = "I am still working on your earlier messages. Please wait for my answer, then send that again. / 前のメッセージを処理中です。返事を待ってからもう一度送ってください。";
                return self.reply_only(&incoming, None, text.into(), outbox).await;
            };
            drop(waiting);
            let result = self.handle_locked(incoming, key, outbox).await;
            if result.is_err() {
                self.metrics.error(kind::STORE);
            }
            result
        }
        .instrument(span)
        .await
    }

    async fn handle_locked(
        &self,
        incoming: Incoming,
        key: SessionKey,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        if let Body::Text { text } = &incoming.body {
            let length = text.chars().count();
            if length > self.max_message_chars {
                tracing::info!(length, "oversized message refused");
                self.metrics.error(kind::OVERSIZED);
                let text = format!(
                    "Your message is too long ({length} characters; the limit is {}). Please shorten it or send it in parts. / メッセージが長すぎます（{length} 文字、上限 {} 文字）。短くするか分けて送ってください。",
                    self.max_message_chars, self.max_message_chars
                );
                return self.reply_only(&incoming, None, text, outbox).await;
            }
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
        let Some(flow) = self.flows.get(&session.flow).cloned() else {
            let text = format!(
                "This conversation uses the flow {:?}, which is not enabled here.",
                session.flow
            );
            return self.reply_only(&incoming, None, text, outbox).await;
        };

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
        let result = flow.turn(ctx, input).await;
        let mut output = match result {
            Ok(output) => output,
            Err(error) => {
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
        };
        let mut report = self.commit_and_deliver(&incoming, turn, outbox).await?;
        if kept {
            // the session it was to replace goes on
            report.finished = false;
        }
        Ok(report)
    }

    /// True the first time `key` hears of `outage` (later outages are told again).
    fn first_to_hear_of(&self, outage: u64, key: &SessionKey) -> bool {
        let mut told = self.told.lock().unwrap_or_else(|p| p.into_inner());
        if told.0 != outage {
            *told = (outage, std::collections::HashSet::new());
        }
        told.1.insert(key.clone())
    }

    /// `/sessions`, `/transcript ID`, `/export FORM` for admins in the admin place; everyone
    /// else is refused and the attempt is logged. Nothing of it is stored in a transcript.
    async fn admin_command(
        &self,
        key: &SessionKey,
        name: &str,
        args: &str,
    ) -> Result<String, OrchestratorError> {
        if !self.access.allows(key) {
            tracing::warn!(user = %key.user, chat = %key.chat, command = name, "admin command refused");
            return Ok("This command is not allowed here. / ここでは使えないコマンドです。".into());
        }
        tracing::info!(user = %key.user, command = name, "admin command");
        Ok(match name {
            "sessions" => {
                let sessions = self.store.active_sessions(50).await?;
                if sessions.is_empty() {
                    "No conversations in progress.".into()
                } else {
                    let mut out = format!("{} conversations in progress:\n", sessions.len());
                    for s in sessions {
                        out.push_str(&format!(
                            "#{} {} {} user {} (updated {})\n",
                            s.id,
                            s.flow,
                            s.key.platform,
                            s.key.user,
                            s.updated_at.format("%Y-%m-%d %H:%M UTC")
                        ));
                    }
                    out
                }
            }
            "transcript" => {
                let Ok(id) = args.trim().trim_start_matches('#').parse::<i64>() else {
                    return Ok("Usage: /transcript SESSION_ID (see /sessions)".into());
                };
                match self.store.session(id).await? {
                    None => format!("There is no session #{id}."),
                    Some(session) => {
                        let messages = self.store.recent_messages(id, 200).await?;
                        let mut out = format!(
                            "Session #{id} ({}, {} user {}):\n",
                            session.flow, session.key.platform, session.key.user
                        );
                        for m in messages {
                            out.push_str(&format!("[{}] {}\n", m.role.as_str(), m.text));
                        }
                        out
                    }
                }
            }
            _ => {
                let form = args.trim();
                if form.is_empty() {
                    return Ok("Usage: /export FORM_ID".into());
                }
                let records = self.store.submissions(Some(form)).await?;
                if records.is_empty() {
                    format!("No submissions for the form {form:?}.")
                } else {
                    format!(
                        "{} submissions of {form}:\n{}",
                        records.len(),
                        crate::export::csv(None, &records)
                    )
                }
            }
        })
    }

    /// `/mydata`, `/forget` and its confirmation: the same in every flow, never seen by one.
    /// `None` for every other message (the common case costs a match, no clone).
    async fn privacy(
        &self,
        incoming: &Incoming,
        key: &SessionKey,
        active: &Option<SessionRecord>,
        outbox: &dyn Outbox,
    ) -> Result<Option<TurnReport>, OrchestratorError> {
        let lang = active
            .as_ref()
            .and_then(|s| s.language.as_deref())
            .unwrap_or("en");
        let say = |en: &str, ja: &str| crate::i18n::pick(lang, en, ja);
        match &incoming.body {
            Body::Command { name, .. } if name == "mydata" => {
                let data = self.store.user_data(key.platform, &key.user).await?;
                let json = serde_json::to_string_pretty(&data).unwrap_or_default();
                let text = format!(
                    "{}\n{json}",
                    say(
                        "Everything I have stored about you (JSON):",
                        "保存しているあなたのデータ（JSON）:"
                    )
                );
                // not stored again: the reply is the data itself
                Ok(Some(self.reply_only(incoming, None, text, outbox).await?))
            }
            Body::Command { name, .. } if name == "forget" => {
                let mut request = OptionsRequest::new(
                    say(
                        "Delete everything I have stored about you (conversations, answers, reading notes, profile)? This cannot be undone.",
                        "保存しているあなたのデータ（会話、回答、読書メモ、プロフィール）をすべて削除しますか？元に戻せません。",
                    ),
                    vec![
                        OptionItem::new(FORGET_YES, say("Delete everything", "すべて削除する")),
                        OptionItem::new(FORGET_NO, say("Cancel", "やめる")),
                    ],
                    false,
                );
                request.request_id = format!("{FORGET_PREFIX}{}", request.request_id);
                let session = active.clone().unwrap_or_else(|| {
                    let flow = incoming
                        .flow
                        .as_deref()
                        .filter(|f| self.flows.get(f).is_some())
                        .unwrap_or(self.flows.default_flow());
                    SessionRecord::draft(key.clone(), flow)
                });
                let turn = FinishedTurn {
                    session,
                    finish_session: None,
                    output: TurnOutput {
                        outgoing: vec![Outgoing::Options(request)],
                        ..Default::default()
                    },
                    ledger: LlmLedger::new(),
                    replace_pending: true,
                };
                Ok(Some(self.commit_and_deliver(incoming, turn, outbox).await?))
            }
            Body::Choice { request_id, values }
                if request_id.starts_with(FORGET_PREFIX)
                    && active
                        .as_ref()
                        .and_then(|s| s.pending_options.as_ref())
                        .is_some_and(|p| &p.request_id == request_id) =>
            {
                if values.iter().any(|v| v == FORGET_YES) {
                    let rows = self
                        .store
                        .forget_user(key.platform, &key.user, self.keep_submissions)
                        .await?;
                    tracing::info!(rows, "a user's data was deleted at their request");
                    let mut text = say(
                        "Done: everything I had stored about you is deleted.",
                        "保存していたあなたのデータをすべて削除しました。",
                    );
                    if self.keep_submissions {
                        text.push(' ');
                        text.push_str(&say(
                            "Applications you submitted are kept for the hiring team, as this service's policy says; ask them to delete those.",
                            "送信済みの応募内容は、このサービスの方針により採用担当のために保管されます。削除は採用担当に依頼してください。",
                        ));
                    }
                    return Ok(Some(self.reply_only(incoming, None, text, outbox).await?));
                }
                let Some(session) = active.clone() else {
                    return Ok(None);
                };
                let mut output = TurnOutput::default();
                output.say(say("Nothing was deleted.", "何も削除していません。"));
                // a session opened only for the question ends with it
                if session.state.is_empty() {
                    output.end();
                }
                let turn = FinishedTurn {
                    session,
                    finish_session: None,
                    output,
                    ledger: LlmLedger::new(),
                    replace_pending: true,
                };
                Ok(Some(self.commit_and_deliver(incoming, turn, outbox).await?))
            }
            _ => Ok(None),
        }
    }

    /// Decides what an incoming message means for the session of its place.
    fn plan(
        &self,
        incoming: &Incoming,
        active: Option<SessionRecord>,
    ) -> Result<Plan, OrchestratorError> {
        let key = incoming.key();
        let fresh = |flow: &str, active: &Option<SessionRecord>| {
            let finish = active.as_ref().map(|s| s.id);
            (SessionRecord::draft(key.clone(), flow), finish)
        };
        let requested = incoming
            .flow
            .as_deref()
            .filter(|f| self.flows.get(f).is_some())
            .unwrap_or(self.flows.default_flow())
            .to_string();
        Ok(match &incoming.body {
            Body::Open => match active {
                // opening a place for another flow (`kaiwa chat mentor` after `chat reading`)
                // finishes the old session and starts the requested one
                Some(session)
                    if incoming
                        .flow
                        .as_deref()
                        .is_some_and(|f| f == requested && f != session.flow) =>
                {
                    let (session, finish_session) = fresh(&requested, &Some(session));
                    Plan::Turn {
                        session,
                        finish_session,
                        input: TurnInput::Start,
                    }
                }
                Some(session) => Plan::Turn {
                    session,
                    finish_session: None,
                    input: TurnInput::Resume,
                },
                None => Plan::Turn {
                    session: SessionRecord::draft(key, &requested),
                    finish_session: None,
                    input: TurnInput::Start,
                },
            },
            Body::Command { name, args } => match name.as_str() {
                "start" => {
                    let flow = active
                        .as_ref()
                        .map_or(requested.clone(), |s| s.flow.clone());
                    let (session, finish_session) = fresh(&flow, &active);
                    Plan::Turn {
                        session,
                        finish_session,
                        input: TurnInput::Start,
                    }
                }
                "help" => Plan::Reply {
                    text: self.help_text(active.as_ref()),
                    session: active,
                },
                "end" | "cancel" => match active {
                    Some(session) => Plan::Turn {
                        session,
                        finish_session: None,
                        input: TurnInput::Command {
                            name: "end".into(),
                            args: args.clone(),
                        },
                    },
                    None => Plan::Reply {
                        session: None,
                        text: "There is no conversation in progress. Send /start to begin one."
                            .into(),
                    },
                },
                other => match (self.flows.by_start_command(other), active) {
                    (Some(flow), active) => {
                        let (session, finish_session) = fresh(flow.id(), &active);
                        Plan::Turn {
                            session,
                            finish_session,
                            input: TurnInput::Start,
                        }
                    }
                    (None, Some(session)) => Plan::Turn {
                        session,
                        finish_session: None,
                        input: TurnInput::Command {
                            name: other.to_string(),
                            args: args.clone(),
                        },
                    },
                    (None, None) => Plan::Reply {
                        session: None,
                        text: format!("Unknown command /{other}. Send /help to see what I can do."),
                    },
                },
            },
            Body::Text { text } => Plan::Turn {
                session: active.unwrap_or_else(|| SessionRecord::draft(key, &requested)),
                finish_session: None,
                input: TurnInput::Text(text.clone()),
            },
            Body::Choice { request_id, values } => {
                let pending = active
                    .as_ref()
                    .and_then(|s| s.pending_options.clone())
                    .filter(|p| &p.request_id == request_id);
                match (active, pending) {
                    (Some(session), Some(request)) => {
                        let known: Vec<String> = values
                            .iter()
                            .filter(|v| request.options.iter().any(|o| &o.value == *v))
                            .cloned()
                            .collect();
                        if known.is_empty() || known.len() != values.len() || (!request.allow_multiple && known.len() > 1) {
                            Plan::Reply {
                                text: pick(&session, "That choice is not one of the options. Please pick again.", "その選択肢はありません。もう一度お選びください。"),
                                session: Some(session),
                            }
                        } else {
                            Plan::Turn {
                                session,
                                finish_session: None,
                                input: TurnInput::Choice { request, values: known },
                            }
                        }
                    }
                    (session, _) => Plan::Reply {
                        text: session.as_ref().map_or_else(
                            || STALE_EN.to_string(),
                            |s| pick(s, STALE_EN, "このボタンはもう使えません。最新のメッセージに答えてください。"),
                        ),
                        session,
                    },
                }
            }
        })
    }

    fn help_text(&self, active: Option<&SessionRecord>) -> String {
        let ja = active.and_then(|s| s.language.as_deref()) == Some("ja");
        let mut out = String::from(if ja {
            "使えるコマンド:\n"
        } else {
            "Commands:\n"
        });
        for c in crate::flow::GENERIC_COMMANDS {
            let description = if ja {
                c.description_ja
            } else {
                c.description_en
            };
            out.push_str(&format!("/{} — {description}\n", c.name));
        }
        for flow in self.flows.iter() {
            for c in flow.start_commands() {
                out.push_str(&format!(
                    "/{} — {}\n",
                    c.name,
                    if ja {
                        c.description_ja
                    } else {
                        c.description_en
                    }
                ));
            }
        }
        if let Some(flow) = active.and_then(|s| self.flows.get(&s.flow)) {
            for c in flow.commands() {
                out.push_str(&format!(
                    "/{} — {}\n",
                    c.name,
                    if ja {
                        c.description_ja
                    } else {
                        c.description_en
                    }
                ));
            }
        }
        out.trim_end().to_string()
    }

    async fn commit_and_deliver(
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
        } = turn;
        let key = session.key.clone();
        let mut changes = Vec::with_capacity(output.changes.len() + output.outgoing.len() + 2);
        let said = incoming.body.transcript_text();
        if !said.is_empty() {
            changes.push(StateChange::AddUserMessage { text: said });
        }
        changes.extend(output.changes);
        for item in &output.outgoing {
            if let Some(text) = item.transcript_text() {
                changes.push(StateChange::AddAssistantMessage { text });
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
        let llm_calls = ledger.drain();
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
            if let Err(e) = self.admin.notify(&notice).await {
                tracing::warn!(error = %e, kind = %notice.kind, "admin notice not delivered");
            }
        }
        Ok(TurnReport {
            session_id: committed.session.id,
            outgoing: output.outgoing,
            finished: committed.session.status == SessionStatus::Finished,
            duplicate: false,
        })
    }

    /// SQLite busy / locked is retried a few times with a short, growing wait.
    async fn commit_with_retry(&self, commit: TurnCommit) -> Result<CommittedTurn, StoreError> {
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

    async fn deliver(
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
        let sent = outbox.deliver(key, outgoing).await;
        self.delivered(sent, committed.session.id, &committed.assistant_message_ids)
            .await;
    }

    /// After a delivery of the session's messages `ids`: marks them delivered, or counts
    /// the failure and remembers the session (they stay undelivered in the store, and go
    /// with its next reply). True when they were delivered.
    async fn delivered(
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
                self.unreached_set().insert(session_id);
                tracing::warn!(error = %e, "reply not delivered; kept as undelivered");
                false
            }
        }
    }

    fn unreached_set(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<i64>> {
        self.unreached.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_unreached(&self, session_id: i64) -> bool {
        self.unreached_set().contains(&session_id)
    }

    /// Sends the session's committed replies not yet delivered (but those of `current`, the
    /// turn being delivered), under a line saying they are late, and marks them delivered.
    /// A failure keeps them for the next try.
    async fn send_unreached(
        &self,
        key: &SessionKey,
        session: &SessionRecord,
        current: &[i64],
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
        if earlier.is_empty() {
            self.unreached_set().remove(&session.id);
            return;
        }
        let mut items = vec![Outgoing::text(pick(
            session,
            "(Earlier replies that did not reach you:)",
            "（お届けできなかった前回の返信です）",
        ))];
        items.extend(earlier.iter().map(|m| Outgoing::text(m.text.clone())));
        let ids: Vec<i64> = earlier.iter().map(|m| m.id).collect();
        let sent = outbox.deliver(key, &items).await;
        if self.delivered(sent, session.id, &ids).await {
            self.unreached_set().remove(&session.id);
            tracing::info!(replies = ids.len(), "replies not delivered before sent");
        }
    }

    /// A reply that changes nothing but the transcript (help, stale buttons, apologies).
    async fn reply_only(
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

const STALE_EN: &str = "Those buttons are no longer active. Please answer the latest message.";

/// A turn whose flow has run, ready to be committed.
struct FinishedTurn {
    session: SessionRecord,
    finish_session: Option<i64>,
    output: TurnOutput,
    ledger: LlmLedger,
    /// Replace the session's pending options with this turn's (false for replies that only
    /// inform, such as a stale-button notice).
    replace_pending: bool,
}

const FORGET_PREFIX: &str = "fg";
const FORGET_YES: &str = "forget:yes";
const FORGET_NO: &str = "forget:no";

enum Plan {
    /// Run the flow.
    Turn {
        session: SessionRecord,
        finish_session: Option<i64>,
        input: TurnInput,
    },
    /// Answer without running a flow.
    Reply {
        session: Option<SessionRecord>,
        text: String,
    },
}

fn processed(incoming: &Incoming) -> Option<ProcessedUpdate> {
    (!incoming.message_id.is_empty()).then(|| ProcessedUpdate {
        platform: incoming.platform,
        chat: incoming.chat.clone(),
        message_id: incoming.message_id.clone(),
    })
}

fn pick(session: &SessionRecord, en: &str, ja: &str) -> String {
    crate::i18n::pick(session.language.as_deref().unwrap_or("en"), en, ja)
}

fn apology(session: &SessionRecord, error: &FlowError) -> String {
    let _ = error; // the details are in the log, never in the chat
    pick(
        session,
        "Sorry, something went wrong on my side. Your message is saved; please send it again or try /start.",
        "申し訳ありません、こちらで問題が発生しました。メッセージは保存されています。もう一度送るか /start をお試しください。",
    )
}

fn unknown_command(session: &SessionRecord, body: &Body) -> String {
    let name = match body {
        Body::Command { name, .. } => name.as_str(),
        _ => "",
    };
    if session.language.as_deref() == Some("ja") {
        format!("/{name} というコマンドはありません。/help で一覧を表示します。")
    } else {
        format!("Unknown command /{name}. Send /help to see what I can do.")
    }
}

/// One async mutex per active session key; entries are dropped when no turn holds or awaits them.
#[derive(Default)]
struct SessionLocks {
    map: Mutex<HashMap<SessionKey, Arc<Slot>>>,
}

#[derive(Default)]
struct Slot {
    lock: Arc<tokio::sync::Mutex<()>>,
    /// Messages of this session in the orchestrator: the one running and those waiting.
    queued: std::sync::atomic::AtomicUsize,
}

struct Lease<'a> {
    locks: &'a SessionLocks,
    key: SessionKey,
    slot: Arc<Slot>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl SessionLocks {
    /// Waits for the session's turn; `None` (at once) when `max_waiting` messages already
    /// wait behind the running one.
    async fn acquire(&self, key: &SessionKey, max_waiting: usize) -> Option<Lease<'_>> {
        use std::sync::atomic::Ordering;
        let slot = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            map.entry(key.clone()).or_default().clone()
        };
        let mut lease = Lease {
            locks: self,
            key: key.clone(),
            slot,
            guard: None,
        };
        let before = lease.slot.queued.fetch_add(1, Ordering::SeqCst);
        if before > max_waiting {
            return None;
        }
        lease.guard = Some(lease.slot.lock.clone().lock_owned().await);
        Some(lease)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        self.slot
            .queued
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.guard = None;
        let mut map = self.locks.map.lock().unwrap_or_else(|p| p.into_inner());
        // ours and the map's: nobody else waits for this session
        if Arc::strong_count(&self.slot) <= 2 {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests;

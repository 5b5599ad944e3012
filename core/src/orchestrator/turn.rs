//! One message, its session's lock held: the steps of a turn in the order they decide.
//!
//! 1. [`Orchestrator::answer_before_loading`] — an oversized message or an admin command is
//!    answered before the session is read.
//! 2. `load_for_turn` — the session, its history, and whether the update was processed.
//! 3. [`Orchestrator::answer_personal_command`] — `/mydata`, `/forget`, `/lang`; then, at a
//!    place a person holds, the message is stored and relayed to them (`people.rs`).
//! 4. [`Orchestrator::plan`] (`routing.rs`) — a turn of a flow, or a reply without one.
//! 5. [`Orchestrator::settle_language`] (`language.rs`) — the conversation's language.
//! 6. [`Orchestrator::run_flow`] — the flow's turn within the budget (`working.rs`).
//! 7. A hand-off to another flow runs as that flow's command, in the same lock: the loop of
//!    [`Orchestrator::handle_locked`] takes the next [`Step`].
//! 8. [`Orchestrator::annotate`] — what the orchestrator adds to the flow's output.
//! 9. [`Orchestrator::commit_and_deliver`] (`delivery.rs`) — written, then delivered.

use super::delivery::FinishedTurn;
use super::language::{Handed, LanguageHints};
use super::notices::{apology, in_language, pick, too_long};
use super::routing::Plan;
use super::working::Streaming;
use super::{HISTORY_LIMIT, Orchestrator, OrchestratorError, Outbox, TurnReport};
use crate::agent::LlmLedger;
use crate::flow::{Flow, TurnContext, TurnInput, TurnOutput};
use crate::message::{Body, Incoming, Outgoing, SessionKey};
use crate::metrics::kind;
use crate::store::{SessionRecord, StateChange, StoredMessage, TurnLoad};
use std::sync::Arc;

/// A flow's turn that ran: its output (or its error), the reply's live view to finish, and
/// the model calls it made.
struct Ran {
    result: Result<TurnOutput, crate::flow::FlowError>,
    streaming: Streaming,
    ledger: LlmLedger,
}

/// What one pass of [`Orchestrator::handle_locked`] came to.
enum Step {
    /// The message is answered.
    Done(TurnReport),
    /// The flow handed the message to another flow: it runs again as that flow's command,
    /// with what the conversation it came from hands on.
    HandedOn {
        incoming: Box<Incoming>,
        handed: Handed,
    },
}

/// What a conversation that starts needs, read with the turn's load when none was active.
struct Starting {
    chosen_language: Option<String>,
    ended_before: bool,
}

/// What a turn starts from once its session is loaded and nothing answered the message
/// before its flow.
struct Loaded {
    /// The session of the place, if one is active.
    active: Option<SessionRecord>,
    history: Vec<StoredMessage>,
    /// A conversation that starts here: what it needs.
    starting: Option<Starting>,
    /// The language of a reply outside a flow's turn.
    lang: String,
}

/// The session a flow's turn runs in, and for one that starts, whether the user ended the
/// one before it.
struct RunIn<'a> {
    session: &'a SessionRecord,
    ended_before: Option<bool>,
}

impl Orchestrator {
    /// One message, the session's lock held. `handed`: the message was handed over by
    /// another conversation (see [`Handed`]); a hand-off the turn makes runs in the same
    /// lock, as the next pass.
    pub(super) async fn handle_locked(
        &self,
        mut incoming: Incoming,
        key: SessionKey,
        outbox: &dyn Outbox,
        mut handed: Option<Handed>,
    ) -> Result<TurnReport, OrchestratorError> {
        loop {
            match self.handle_once(incoming, &key, outbox, handed).await? {
                Step::Done(report) => return Ok(report),
                Step::HandedOn {
                    incoming: command,
                    handed: by,
                } => {
                    incoming = *command;
                    handed = Some(by);
                }
            }
        }
    }

    /// One pass of [`Self::handle_locked`]: the turn's steps in order (see the module).
    async fn handle_once(
        &self,
        incoming: Incoming,
        key: &SessionKey,
        outbox: &dyn Outbox,
        handed: Option<Handed>,
    ) -> Result<Step, OrchestratorError> {
        let (handed_language, said) = handed.map_or((None, None), |h| (h.language, Some(h.said)));
        let Loaded {
            active,
            history,
            starting,
            lang,
        } = match self.load_or_answer(&incoming, key, outbox).await? {
            Ok(loaded) => loaded,
            Err(report) => return Ok(Step::Done(report)),
        };
        let history_of = active.as_ref().map(|s| s.id);
        let replaced_language = super::language::replaced_language(active.as_ref(), &incoming);
        let (mut session, finish_session, input) = match self.plan(&incoming, active, &lang)? {
            Plan::Reply { session, text } => {
                return self
                    .reply_only(&incoming, session, text, outbox)
                    .await
                    .map(Step::Done);
            }
            Plan::Turn {
                session,
                finish_session,
                input,
            } => (session, finish_session, input),
        };
        let Some(flow) = self.flows.get(&session.flow).cloned() else {
            let text = flow_not_enabled(&session);
            return self
                .reply_only(&incoming, None, text, outbox)
                .await
                .map(Step::Done);
        };
        let detected = self
            .settle_language(
                &mut session,
                flow.follows_written_language(),
                &incoming,
                LanguageHints {
                    handed: handed_language.or(replaced_language),
                    chosen: starting.as_ref().map(|s| s.chosen_language.clone()),
                },
            )
            .await;
        let ended_before = starting
            .map(|s| s.ended_before)
            .filter(|_| session.is_new());
        // the history belongs to the session that runs, not to one it replaces
        let history = match history_of == Some(session.id) && !session.is_new() {
            true => history,
            false => Vec::new(),
        };
        let is_command = matches!(input, TurnInput::Command { .. });
        let said = said.or_else(|| pressed_labels(&incoming.body, &input));
        let Ran {
            result,
            streaming,
            ledger,
        } = self
            .run_flow(
                &flow,
                RunIn {
                    session: &session,
                    ended_before,
                },
                &incoming,
                &history,
                input,
                outbox,
            )
            .await;
        let mut output = match result {
            Ok(output) => output,
            Err(error) => {
                streaming.finish().await;
                return self
                    .apologise(&incoming, session, &error, ledger, outbox)
                    .await
                    .map(Step::Done);
            }
        };
        if let Some(language) = detected {
            keep_detected_language(&mut output, language);
        }
        if let Some(handoff) = output.handoff.take()
            && !matches!(incoming.body, Body::Command { .. })
        {
            streaming.finish().await;
            let handed = handed_on(&incoming, said, &output, &session);
            tracing::info!(command = %handoff.command, "message handed to another flow");
            let body = Body::Command {
                name: handoff.command,
                args: handoff.args,
            };
            return Ok(Step::HandedOn {
                incoming: Box::new(Incoming { body, ..incoming }),
                handed,
            });
        }
        self.annotate(&mut output, &session, &incoming, is_command, &streaming);
        let turn = FinishedTurn {
            session,
            finish_session,
            output,
            ledger,
            replace_pending: true,
            said,
        };
        self.deliver_ran(&incoming, turn, streaming, outbox)
            .await
            .map(Step::Done)
    }

    /// Steps 1 to 3 and a held place: the message answered before any flow runs (oversized,
    /// an admin command, a duplicate, a personal command, or relayed to the person who holds
    /// the place), else what the flow's turn starts from.
    async fn load_or_answer(
        &self,
        incoming: &Incoming,
        key: &SessionKey,
        outbox: &dyn Outbox,
    ) -> Result<Result<Loaded, TurnReport>, OrchestratorError> {
        if let Some(text) = self.answer_before_loading(incoming, key, outbox).await? {
            return self.reply_only(incoming, None, text, outbox).await.map(Err);
        }
        let TurnLoad {
            duplicate,
            session: active,
            history,
            chosen_language,
            ended_before,
        } = self
            .store
            .load_for_turn(key, &incoming.message_id, HISTORY_LIMIT)
            .await?;
        if duplicate {
            return Ok(Err(self.skip_duplicate(key, active.as_ref(), outbox).await));
        }
        // the language of a reply outside a flow's turn
        let lang =
            super::language::reply_language(active.as_ref(), chosen_language.as_deref(), incoming)
                .to_string();
        if let Some(report) = self
            .answer_personal_command(incoming, key, &active, &lang, outbox)
            .await?
        {
            return Ok(Err(report));
        }
        let starting = active.is_none().then_some(Starting {
            chosen_language,
            ended_before,
        });
        if let Some(hold) = self.hold_at(key).await {
            // a person holds the conversation: the agent stays silent
            return self
                .relay_to_staff(incoming, active, hold, outbox)
                .await
                .map(Err);
        }
        Ok(Ok(Loaded {
            active,
            history,
            starting,
            lang,
        }))
    }

    /// A flow's `turn` committed and delivered, then its stream closed. Where the command
    /// that started it leaves the session it was to replace going on
    /// ([`keeps_replaced_session`]), that session is not finished.
    async fn deliver_ran(
        &self,
        incoming: &Incoming,
        mut turn: FinishedTurn,
        streaming: Streaming,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        let kept =
            keeps_replaced_session(turn.finish_session, &turn.session, incoming, &turn.output);
        if kept {
            turn.finish_session = None;
        }
        let report = self.commit_and_deliver(incoming, turn, outbox).await;
        streaming.finish().await;
        let mut report = report?;
        if kept {
            // the session it was to replace goes on
            report.finished = false;
        }
        Ok(report)
    }

    /// The answer to a message no session needs to be read for: one over the length limit
    /// (refused, nothing stored) or an admin command.
    async fn answer_before_loading(
        &self,
        incoming: &Incoming,
        key: &SessionKey,
        outbox: &dyn Outbox,
    ) -> Result<Option<String>, OrchestratorError> {
        // a command's arguments are stored and read like any text: the same limit
        let length = match &incoming.body {
            Body::Text { text } => text.chars().count(),
            Body::Command { .. } => incoming.body.transcript_text().chars().count(),
            Body::Choice { .. } | Body::Open => 0,
        };
        if length > self.max_message_chars {
            tracing::info!(length, "oversized message refused");
            self.metrics.error(kind::OVERSIZED);
            let notice = too_long(length, self.max_message_chars);
            let lang = self.notice_language(incoming).await;
            return Ok(Some(in_language(&notice, lang.as_deref())));
        }
        if let Body::Command { name, args } = &incoming.body
            && self.is_admin_command(name)
        {
            if name == "console" && self.access.allows(key) {
                let said = self
                    .console_link(key, &incoming.user.display_name, outbox)
                    .await?;
                return Ok(Some(said));
            }
            return Ok(Some(self.admin_command(key, name, args).await?));
        }
        Ok(None)
    }

    /// An update processed before: nothing runs. The platform sending it again may mean
    /// our reply did not reach it, so a reply it did not take goes out now.
    async fn skip_duplicate(
        &self,
        key: &SessionKey,
        active: Option<&SessionRecord>,
        outbox: &dyn Outbox,
    ) -> TurnReport {
        tracing::info!("duplicate update ignored");
        if let Some(session) = active
            && self.is_unreached(session.id)
        {
            self.send_unreached(key, session, &[], outbox).await;
        }
        TurnReport {
            session_id: 0,
            outgoing: Vec::new(),
            finished: false,
            duplicate: true,
        }
    }

    /// `/mydata`, `/forget` and `/lang`: answered by the orchestrator for every flow, in
    /// `lang` ([`super::language::reply_language`]).
    async fn answer_personal_command(
        &self,
        incoming: &Incoming,
        key: &SessionKey,
        active: &Option<SessionRecord>,
        lang: &str,
        outbox: &dyn Outbox,
    ) -> Result<Option<TurnReport>, OrchestratorError> {
        if let Some(report) = self.privacy(incoming, key, active, lang, outbox).await? {
            return Ok(Some(report));
        }
        self.language_command(incoming, key, active, lang, outbox)
            .await
    }

    /// Runs the flow's turn (or its end, for `/end`) with a sign of life for the user.
    async fn run_flow(
        &self,
        flow: &Arc<dyn Flow>,
        run_in: RunIn<'_>,
        incoming: &Incoming,
        history: &[StoredMessage],
        input: TurnInput,
        outbox: &dyn Outbox,
    ) -> Ran {
        let RunIn {
            session,
            ended_before,
        } = run_in;
        let key = &session.key;
        // a start command's argument (`/interview engineer`), else the place's flow argument
        let start_arg = match (&incoming.body, session.is_new()) {
            (_, false) => None,
            (Body::Command { args, .. }, true) if !args.is_empty() => Some(args.as_str()),
            (_, true) => incoming.flow_arg.as_deref(),
        };
        if !self.models.is_empty() {
            // best effort: a lost typing indicator harms nobody
            let _ = outbox.deliver(key, &[Outgoing::Typing]).await;
        }
        let ledger = LlmLedger::new();
        let ctx = TurnContext {
            session,
            user: &incoming.user,
            history,
            models: &self.models,
            ledger: &ledger,
            store: self.store.as_ref(),
            start_arg,
            ended_before,
        };
        let work = async {
            match input {
                TurnInput::Command { name, .. } if name == "end" => flow.end(ctx).await,
                input => flow.turn(ctx, input).await,
            }
        };
        let (result, streaming) = self.working(key, outbox, work).await;
        Ran {
            result,
            streaming,
            ledger,
        }
    }

    /// A flow that failed: its model calls are recorded, the user gets an apology, and the
    /// session stays as it was.
    async fn apologise(
        &self,
        incoming: &Incoming,
        session: SessionRecord,
        error: &crate::flow::FlowError,
        ledger: LlmLedger,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        tracing::error!(%error, flow = %session.flow, "turn failed");
        self.metrics.error(kind::FLOW);
        let calls = ledger.drain();
        self.metrics.model_calls(&calls);
        if let Err(e) = self.store.record_llm_calls(&calls).await {
            tracing::warn!(error = %e, "could not record the failed turn's model calls");
        }
        let text = apology(&session, error);
        let session = (!session.is_new()).then_some(session);
        self.reply_only(incoming, session, text, outbox).await
    }

    /// What the orchestrator adds to a flow's replies: the mark of a reply the user
    /// stopped, the answer to an unknown command, and the notice of a model outage (once
    /// per outage and place).
    fn annotate(
        &self,
        output: &mut TurnOutput,
        session: &SessionRecord,
        incoming: &Incoming,
        is_command: bool,
        streaming: &Streaming,
    ) {
        if streaming.stopped {
            // stored and shown as stopped: the answer is what was written until then
            tracing::info!("the user stopped the reply");
            if let Some(Outgoing::Text { text }) = output
                .outgoing
                .iter_mut()
                .find(|o| matches!(o, Outgoing::Text { .. }))
            {
                text.push_str(&pick(session, " … (stopped)", " …（停止しました）"));
            }
        }
        if is_command
            && output.unknown_command
            && let Body::Command { name, .. } = &incoming.body
        {
            let lang = session.language.as_deref().unwrap_or("en");
            output
                .outgoing
                .push(Outgoing::text(self.unknown_command_text(name, lang)));
        }
        if let Some(outage) = self.models.outage()
            && self.first_to_hear_of(outage, &session.key)
        {
            let notice = pick(
                session,
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
    }
}

/// The language detected from the user's message is stored with the turn, unless the flow
/// set one itself.
fn keep_detected_language(output: &mut TurnOutput, language: String) {
    let set = output
        .changes
        .iter()
        .any(|c| matches!(c, StateChange::SetLanguage { .. }));
    if !set {
        output
            .changes
            .insert(0, StateChange::SetLanguage { language });
    }
}

/// What a press is kept as in the conversation: the labels the user saw, not the values
/// behind them (`None` for any other message).
fn pressed_labels(body: &Body, input: &TurnInput) -> Option<String> {
    match (body, input) {
        (Body::Choice { .. }, TurnInput::Choice { request, values }) => {
            Some(request.labels_of(values).join(", "))
        }
        _ => None,
    }
}

/// A session of a flow this bot no longer runs.
fn flow_not_enabled(session: &SessionRecord) -> String {
    format!(
        "This conversation uses the flow {:?}, which is not enabled here.",
        session.flow
    )
}

/// What a message handed to another flow takes with it: what the user wrote (`said`, as
/// stored, else the message's text) and the language of the conversation it starts — the
/// one the message is written in (「本の感想を書きたい」 in a conversation that chose
/// English), else the one it came from.
fn handed_on(
    incoming: &Incoming,
    said: Option<String>,
    output: &TurnOutput,
    session: &SessionRecord,
) -> Handed {
    let said = said.unwrap_or_else(|| incoming.body.transcript_text());
    let written = matches!(incoming.body, Body::Text { .. })
        .then(|| crate::i18n::written_language(&said))
        .flatten();
    Handed {
        language: written
            .map(str::to_string)
            .or_else(|| language_after(output, session)),
        said,
    }
}

/// The language a conversation has after `output`: the one the turn set, else its own.
fn language_after(output: &TurnOutput, session: &SessionRecord) -> Option<String> {
    output
        .changes
        .iter()
        .rev()
        .find_map(|c| match c {
            StateChange::SetLanguage { language } => Some(language.clone()),
            _ => None,
        })
        .or(session.language.clone())
}

/// Whether the session a command was to replace goes on: the command's flow ended its new
/// session on the first turn — it would not start (an unknown form) or it answered once
/// (`/recommend`). A typo in `/interview FORM` must not end an interview half done.
/// (Opening a place for another flow, `kaiwa chat recommend`, still replaces.)
fn keeps_replaced_session(
    finish_session: Option<i64>,
    session: &SessionRecord,
    incoming: &Incoming,
    output: &TurnOutput,
) -> bool {
    finish_session.is_some()
        && session.is_new()
        && matches!(incoming.body, Body::Command { .. })
        && output
            .changes
            .iter()
            .any(|c| matches!(c, StateChange::EndSession))
}

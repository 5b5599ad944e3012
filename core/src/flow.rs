//! The [`Flow`] trait the orchestrator drives, what a turn receives ([`TurnInput`],
//! [`TurnContext`]) and returns ([`TurnOutput`]), and the [`FlowRegistry`].
//!
//! A flow is a state machine with agents inside (interview, help-desk, reading, …). It gets
//! the session as loaded, a bounded slice of its history and the model router; it returns
//! outgoing messages, state changes and admin notices as data. It never writes to the store
//! or talks to a platform itself: the orchestrator commits its output, then delivers it.

use crate::admin::AdminNotice;
use crate::agent::{AgentError, LlmLedger};
use crate::llm::ModelRouter;
use crate::message::{OptionItem, OptionsRequest, Outgoing, UserRef};
use crate::store::StateChange;
use crate::store::{Reads, SessionRecord, StoreError, StoredMessage};
use async_trait::async_trait;
use std::sync::Arc;

/// What the user did, as the flow sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnInput {
    /// A new session was opened without a message (a start command, a console opening).
    Start,
    /// The user came back to an active session (a console reopened).
    Resume,
    Text(String),
    /// A press on the session's pending options; `values` are known values of `request`.
    Choice {
        request: OptionsRequest,
        values: Vec<String>,
    },
    /// A command the orchestrator does not handle itself.
    Command {
        name: String,
        args: String,
    },
}

/// What a flow may read during a turn.
pub struct TurnContext<'a> {
    pub session: &'a SessionRecord,
    pub user: &'a UserRef,
    /// The most recent messages, oldest first, not including this turn's.
    pub history: &'a [StoredMessage],
    pub models: &'a ModelRouter,
    /// Every model call of the turn goes here (written with the turn).
    pub ledger: &'a LlmLedger,
    /// Read access to stored data (the session's own user's; writes go through changes).
    pub store: &'a dyn Reads,
    /// For a new session: the argument it was started with (`/interview engineer`,
    /// `kaiwa chat interview --form engineer`).
    pub start_arg: Option<&'a str>,
    /// For a new session, when known: whether a conversation of the user's in this place
    /// ended before (`Some(false)`: there is none to resume, no need to look).
    pub ended_before: Option<bool>,
}

impl TurnContext<'_> {
    /// The session's language, English when unset.
    pub fn language(&self) -> &str {
        self.session.language.as_deref().unwrap_or("en")
    }

    /// The flow state, or its default when the session is new or the state is empty.
    pub fn state<T: serde::de::DeserializeOwned + Default>(&self) -> Result<T, FlowError> {
        if self.session.state.is_empty() {
            return Ok(T::default());
        }
        self.session.state.parse().map_err(|e| {
            FlowError::State(format!(
                "session {} state does not parse: {e}",
                self.session.id
            ))
        })
    }
}

/// A turn's result, as data.
#[derive(Debug, Default)]
pub struct TurnOutput {
    pub outgoing: Vec<Outgoing>,
    pub changes: Vec<StateChange>,
    pub admin: Vec<AdminNotice>,
    /// The flow did not recognise the command it was given.
    pub unknown_command: bool,
    /// The message is better served by another flow: the orchestrator handles it as this
    /// command instead (the turn's other output is dropped). Honoured for a message that is
    /// not itself a command, so a handoff never loops.
    pub handoff: Option<Handoff>,
}

/// A command the user's message stands for (see [`TurnOutput::handoff`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    pub command: String,
    pub args: String,
}

impl TurnOutput {
    pub fn say(&mut self, text: impl Into<String>) -> &mut Self {
        self.outgoing.push(Outgoing::text(text));
        self
    }

    pub fn options(
        &mut self,
        prompt: impl Into<String>,
        options: Vec<OptionItem>,
        allow_multiple: bool,
    ) -> &mut Self {
        self.outgoing.push(Outgoing::Options(OptionsRequest::new(
            prompt,
            options,
            allow_multiple,
        )));
        self
    }

    pub fn change(&mut self, change: StateChange) -> &mut Self {
        self.changes.push(change);
        self
    }

    /// Replaces the flow state with `state`.
    pub fn set_state<T: serde::Serialize>(&mut self, state: &T) -> Result<&mut Self, FlowError> {
        let value =
            crate::store::FlowState::of(state).map_err(|e| FlowError::State(e.to_string()))?;
        self.changes
            .push(StateChange::SetFlowState { state: value });
        Ok(self)
    }

    /// Hands the message to the flow started by `/command args`.
    pub fn hand_off(&mut self, command: &str, args: impl Into<String>) -> &mut Self {
        self.handoff = Some(Handoff {
            command: command.to_string(),
            args: args.into(),
        });
        self
    }

    pub fn end(&mut self) -> &mut Self {
        self.changes.push(StateChange::EndSession);
        self
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("flow state error: {0}")]
    State(String),
    #[error("{0}")]
    Other(String),
}

/// A command for `/help` and the platforms' command menus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandInfo {
    pub name: &'static str,
    pub description_en: &'static str,
    pub description_ja: &'static str,
}

/// The commands every flow answers (handled by the orchestrator).
pub const GENERIC_COMMANDS: [CommandInfo; 6] = [
    CommandInfo {
        name: "start",
        description_en: "start the conversation over",
        description_ja: "会話を最初から始める",
    },
    CommandInfo {
        name: "help",
        description_en: "show this list",
        description_ja: "この一覧を表示",
    },
    CommandInfo {
        name: "end",
        description_en: "end the current conversation",
        description_ja: "現在の会話を終える",
    },
    CommandInfo {
        name: "mydata",
        description_en: "everything stored about you, as JSON",
        description_ja: "保存されているあなたのデータ（JSON）",
    },
    CommandInfo {
        name: "forget",
        description_en: "delete everything stored about you",
        description_ja: "あなたのデータをすべて削除する",
    },
    CommandInfo {
        name: "lang",
        description_en: "reply in English or Japanese (/lang en, /lang ja)",
        description_ja: "返信の言語を変える（/lang ja、/lang en）",
    },
];

#[async_trait]
pub trait Flow: Send + Sync {
    /// Stable id stored with the session (`interview`, `helpdesk`, …).
    fn id(&self) -> &str;
    fn description(&self) -> &str;
    /// Commands that start this flow in a fresh session (e.g. `/interview`).
    fn start_commands(&self) -> Vec<CommandInfo> {
        Vec::new()
    }
    /// Commands the flow answers inside its session.
    fn commands(&self) -> Vec<CommandInfo> {
        Vec::new()
    }
    /// Whether a conversation with no language yet speaks Japanese when the user writes
    /// Japanese (the orchestrator sets it before the turn). A flow that asks for the
    /// language itself (the interview's Greeter) says no.
    fn follows_written_language(&self) -> bool {
        true
    }
    async fn turn(&self, ctx: TurnContext<'_>, input: TurnInput) -> Result<TurnOutput, FlowError>;
    /// `/end` (or `/cancel`) in the flow's session, handled by the orchestrator for every
    /// flow: the session ends with the flow's [`Flow::farewell`]. A flow overrides this only
    /// to keep or write something as it ends.
    async fn end(&self, ctx: TurnContext<'_>) -> Result<TurnOutput, FlowError> {
        let mut out = TurnOutput::default();
        if let Some(text) = self.farewell(ctx.language()) {
            out.say(text);
        }
        out.end();
        Ok(out)
    }
    /// Admin commands this flow answers (the interview's `/export`). The orchestrator
    /// answers them only for the configured admins in their admin place, before any
    /// session is read, and never stores them in a transcript.
    fn admin_commands(&self) -> &'static [&'static str] {
        &[]
    }
    /// Answers one of [`Flow::admin_commands`], reading only.
    async fn admin_command(
        &self,
        name: &str,
        args: &str,
        store: &dyn Reads,
    ) -> Result<String, FlowError> {
        let _ = (args, store);
        Err(FlowError::Other(format!("no admin command /{name}")))
    }
    /// What the user of `session` is told of the team's `decision` on their submission
    /// (`approved`, `rejected`), in `lang`; `None`: nothing is configured to say.
    fn decision_message(
        &self,
        session: &crate::store::SessionRecord,
        decision: &str,
        lang: &str,
    ) -> Option<String> {
        let _ = (session, decision, lang);
        None
    }
    /// What `/end` says in `lang`; `None` ends the session without a word.
    fn farewell(&self, lang: &str) -> Option<String> {
        Some(crate::i18n::pick(
            lang,
            "Ended. Send /start to begin again.",
            "終了しました。/start でまた始められます。",
        ))
    }
}

/// The flows a bot runs and the one a new session gets by default.
#[derive(Clone)]
pub struct FlowRegistry {
    flows: Vec<Arc<dyn Flow>>,
    default: String,
}

impl FlowRegistry {
    /// `flows` must not be empty; the first is the default until [`Self::with_default`].
    pub fn new(flows: Vec<Arc<dyn Flow>>) -> Result<Self, FlowError> {
        let default = flows
            .first()
            .map(|f| f.id().to_string())
            .ok_or_else(|| FlowError::Other("no flow is enabled".into()))?;
        Ok(FlowRegistry { flows, default })
    }

    pub fn with_default(mut self, id: &str) -> Result<Self, FlowError> {
        if self.get(id).is_none() {
            return Err(FlowError::Other(format!(
                "unknown flow {id:?}; known: {}",
                self.ids().join(", ")
            )));
        }
        self.default = id.to_string();
        Ok(self)
    }

    pub fn get(&self, id: &str) -> Option<&Arc<dyn Flow>> {
        self.flows.iter().find(|f| f.id() == id)
    }

    pub fn default_flow(&self) -> &str {
        &self.default
    }

    pub fn ids(&self) -> Vec<&str> {
        self.flows.iter().map(|f| f.id()).collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Flow>> {
        self.flows.iter()
    }

    /// Every command a user can send, for the platforms' command menus: the generic ones, each
    /// flow's start commands, then the in-session commands (each name once, first wins).
    pub fn menu_commands(&self) -> Vec<CommandInfo> {
        let mut out: Vec<CommandInfo> = GENERIC_COMMANDS.to_vec();
        let starts = self.flows.iter().flat_map(|f| f.start_commands());
        let inside = self.flows.iter().flat_map(|f| f.commands());
        for command in starts.chain(inside) {
            if !out.iter().any(|c| c.name == command.name) {
                out.push(command);
            }
        }
        out
    }

    /// The flow a start command opens.
    /// The flow that answers the admin command `/name`, if one does.
    pub fn by_admin_command(&self, name: &str) -> Option<&Arc<dyn Flow>> {
        self.flows
            .iter()
            .find(|f| f.admin_commands().contains(&name))
    }

    pub fn by_start_command(&self, name: &str) -> Option<&Arc<dyn Flow>> {
        self.flows
            .iter()
            .find(|f| f.id() == name || f.start_commands().iter().any(|c| c.name == name))
    }
}

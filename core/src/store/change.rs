//! [`StateChange`]: what a turn changes, as data (seed 000's `StateChange[]`).
//!
//! Flows and agents return changes; the orchestrator adds the turn's messages and hands the
//! list to the store, which writes all of it in one transaction before anything is
//! delivered. Session-level changes are applied to a [`SessionRecord`] by
//! [`SessionRecord::apply`], so every store implementation applies them the same way.

use super::reading::ReadingChange;
use super::{FlowState, SessionRecord, SessionStatus, Submission, Ticket};
use crate::message::OptionsRequest;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StateChange {
    SetLanguage {
        language: String,
    },
    SetCountry {
        country: String,
    },
    SetTimezone {
        timezone: String,
    },
    SetCurrentAgent {
        agent: String,
    },
    AddUserMessage {
        text: String,
    },
    AddAssistantMessage {
        text: String,
        /// Why the turn answered as it did (its trace, JSON), on the turn's first bot
        /// message; kept and deleted with the transcript.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<String>,
    },
    /// Replaces the flow's own state (JSON owned by the flow).
    SetFlowState {
        state: FlowState,
    },
    /// The options the user may answer now; `None` clears them (a later press is stale).
    SetPendingOptions {
        options: Option<OptionsRequest>,
    },
    /// The flow is over; the next message starts a new session.
    EndSession,
    /// A finished form (interview flows).
    SaveSubmission {
        submission: Submission,
    },
    /// A reading-companion change for the session's user.
    Reading {
        change: ReadingChange,
    },
    /// A help-desk question and its answer.
    SaveTicket {
        ticket: Ticket,
    },
    /// The user's verdict on a ticket's answer: `solved`, `not_solved` or `human`.
    SetTicketFeedback {
        ticket_no: i64,
        feedback: String,
    },
}

impl SessionRecord {
    /// Applies a session-level change; message changes leave the record as it is.
    pub fn apply(&mut self, change: &StateChange) {
        match change {
            StateChange::SetLanguage { language } => self.language = Some(language.clone()),
            StateChange::SetCountry { country } => self.country = Some(country.clone()),
            StateChange::SetTimezone { timezone } => self.timezone = Some(timezone.clone()),
            StateChange::SetCurrentAgent { agent } => self.current_agent = Some(agent.clone()),
            StateChange::SetFlowState { state } => self.state = state.clone(),
            StateChange::SetPendingOptions { options } => self.pending_options = options.clone(),
            StateChange::EndSession => self.status = SessionStatus::Finished,
            StateChange::AddUserMessage { .. }
            | StateChange::AddAssistantMessage { .. }
            | StateChange::SaveSubmission { .. }
            | StateChange::SaveTicket { .. }
            | StateChange::Reading { .. }
            | StateChange::SetTicketFeedback { .. } => {}
        }
    }
}

//! People in the loop: what the team does from the admin chat with the buttons under a
//! notice ([`AdminAction`]). Only the configured admins, in their admin place, may act;
//! anyone else is told so and the attempt is logged. A decision on an application is
//! stored with the submission (the first stands: a later press reports it) and the
//! applicant is told the form's message for it, in their language, through the adapter
//! of their platform.

use super::{Orchestrator, OrchestratorError, Outbox};
use crate::admin::{AdminAction, AdminActionKind};
use crate::message::{Outgoing, Platform, SessionKey};
use std::sync::Arc;

/// What a press of someone who is not an admin here gets.
pub const NOT_ALLOWED: &str =
    "Not allowed: only the configured admins can do this here. / この操作は管理者のみ行えます。";

impl Orchestrator {
    /// How to reach users of `platform` outside their turns (an adapter registers its own
    /// as it starts).
    pub fn register_outbox(&self, platform: Platform, outbox: Arc<dyn Outbox>) {
        self.outboxes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(platform, outbox);
    }

    fn outbox_for(&self, platform: Platform) -> Option<Arc<dyn Outbox>> {
        self.outboxes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&platform)
            .cloned()
    }

    /// An admin's press of a notice's button: `by` is the admin place and the presser,
    /// `name` how the presser is called. Returns what to show in the admin place.
    pub async fn admin_action(&self, by: &SessionKey, name: &str, action: AdminAction) -> String {
        if !self.access.allows(by) {
            tracing::warn!(user = %by.user, chat = %by.chat, ?action, "admin action refused: not an admin here");
            return NOT_ALLOWED.into();
        }
        tracing::info!(user = %by.user, ?action, "admin action");
        let done = match action.kind {
            AdminActionKind::Approve => self.decide(by, name, action.session_id, "approved").await,
            AdminActionKind::Reject => self.decide(by, name, action.session_id, "rejected").await,
        };
        done.unwrap_or_else(|error| {
            tracing::error!(%error, ?action, "admin action failed");
            "That did not work (the database did not answer); please try again.".into()
        })
    }

    /// Records `decision` on the application of `session_id` unless one stands, and tells
    /// the applicant the form's message for it.
    async fn decide(
        &self,
        by: &SessionKey,
        name: &str,
        session_id: i64,
        decision: &str,
    ) -> Result<String, OrchestratorError> {
        let who = format!("{}:{} ({name})", by.platform, by.user);
        let Some(decided) = self.store.decide(session_id, decision, &who).await? else {
            return Ok(format!(
                "Session #{session_id} has no application to decide on."
            ));
        };
        let stood = &decided.decision;
        let when = stood.decided_at.format("%Y-%m-%d %H:%M UTC");
        if !decided.first {
            return Ok(format!(
                "Already decided: {} by {} at {when} (session #{session_id}).",
                stood.decision, stood.decided_by
            ));
        }
        let head = format!(
            "{} by {who} at {when} (session #{session_id}).",
            capitalised(decision)
        );
        let Some(session) = self.store.session(session_id).await? else {
            return Ok(format!(
                "{head} The applicant's conversation is gone (/forget): nothing was sent."
            ));
        };
        let lang = session.language.clone().unwrap_or_else(|| "en".into());
        let message = self
            .flows
            .get(&session.flow)
            .and_then(|flow| flow.decision_message(&session, decision, &lang));
        let Some(text) = message else {
            return Ok(format!(
                "{head} The form has no message for \"{decision}\", so nothing was sent to the applicant."
            ));
        };
        let Some(outbox) = self.outbox_for(session.key.platform) else {
            return Ok(format!(
                "{head} The applicant's platform ({}) is not connected here: nothing was sent.",
                session.key.platform
            ));
        };
        Ok(
            match outbox.deliver(&session.key, &[Outgoing::text(text)]).await {
                Ok(()) => format!("{head} The applicant was told."),
                Err(e) => {
                    tracing::warn!(error = %e, session = session_id, "the decision did not reach the applicant");
                    format!("{head} The message did not reach the applicant: {e}")
                }
            },
        )
    }
}

fn capitalised(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

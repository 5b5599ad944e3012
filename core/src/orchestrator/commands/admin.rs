//! The admin commands (`/sessions`, `/transcript ID`, `/export FORM`): only for listed
//! users, only in their platform's admin chat or channel ([`AdminAccess`]). Nothing of them
//! is stored in a transcript.

use crate::message::SessionKey;
use crate::orchestrator::Orchestrator;
use crate::orchestrator::OrchestratorError;
use std::collections::HashMap;

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

/// The admin commands the orchestrator answers itself; flows add theirs
/// ([`crate::flow::Flow::admin_commands`]: the interview's `/export`).
pub const ADMIN_COMMANDS: [&str; 5] = ["sessions", "transcript", "takeover", "handback", "console"];

impl Orchestrator {
    /// Whether `/name` is an admin command: the orchestrator's own or a flow's.
    pub(in crate::orchestrator) fn is_admin_command(&self, name: &str) -> bool {
        ADMIN_COMMANDS.contains(&name) || self.flows.by_admin_command(name).is_some()
    }

    /// `/sessions`, `/transcript ID`, `/export FORM` for admins in the admin place; everyone
    /// else is refused and the attempt is logged. Nothing of it is stored in a transcript.
    pub(in crate::orchestrator) async fn admin_command(
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
                        if session.flow == "interview" {
                            let submissions = self.store.submissions(None).await?;
                            for s in submissions.iter().filter(|s| s.session_id == Some(id)) {
                                out.push_str(&match &s.decision {
                                    Some(d) => format!(
                                        "[decision] {} by {} at {}\n",
                                        d.decision,
                                        d.decided_by,
                                        d.decided_at.format("%Y-%m-%d %H:%M UTC")
                                    ),
                                    None => "[decision] none yet\n".into(),
                                });
                            }
                        }
                        out
                    }
                }
            }
            "takeover" | "handback" => {
                let Ok(session_id) = args.trim().trim_start_matches('#').parse::<i64>() else {
                    return Ok(format!("Usage: /{name} SESSION_ID (see /sessions)"));
                };
                let kind = if name == "takeover" {
                    crate::admin::AdminActionKind::TakeOver
                } else {
                    crate::admin::AdminActionKind::HandBack
                };
                let action = crate::admin::AdminAction { kind, session_id };
                let outcome = self.admin_action(key, &key.user, action).await;
                if outcome.posted {
                    "Done.".into()
                } else {
                    outcome.text
                }
            }
            _ => match self.flows.by_admin_command(name) {
                Some(flow) => match flow.admin_command(name, args, self.store.as_ref()).await {
                    Ok(text) => text,
                    Err(crate::flow::FlowError::Store(e)) => return Err(e.into()),
                    Err(e) => {
                        tracing::warn!(error = %e, command = name, "admin command failed");
                        "That command failed; the details are in the log.".into()
                    }
                },
                None => format!("Unknown admin command /{name}."),
            },
        })
    }
}

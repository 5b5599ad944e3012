//! `/lang en|ja`: the language of every reply, in every flow. It is confirmed in the new
//! language, set on the conversation and stored in the user's profile, where each new
//! conversation takes it from ([`Orchestrator::profile_language`]).

use crate::agent::LlmLedger;
use crate::flow::TurnOutput;
use crate::message::{Body, Incoming, SessionKey};
use crate::orchestrator::delivery::FinishedTurn;
use crate::orchestrator::{Orchestrator, Outbox};
use crate::orchestrator::{OrchestratorError, TurnReport};
use crate::store::reading::{ProfileKind, ReadingChange};
use crate::store::{SessionRecord, StateChange};

/// The language a `/lang` argument names.
fn language_of(arg: &str) -> Option<&'static str> {
    match arg.trim().to_lowercase().as_str() {
        "en" | "english" | "英語" => Some("en"),
        "ja" | "jp" | "japanese" | "日本語" | "にほんご" => Some("ja"),
        _ => None,
    }
}

impl Orchestrator {
    /// `/lang`, before any flow runs; `None` for every other message. `current`: the
    /// language its usage is told in.
    pub(in crate::orchestrator) async fn language_command(
        &self,
        incoming: &Incoming,
        key: &SessionKey,
        active: &Option<SessionRecord>,
        current: &str,
        outbox: &dyn Outbox,
    ) -> Result<Option<TurnReport>, OrchestratorError> {
        let Body::Command { name, args } = &incoming.body else {
            return Ok(None);
        };
        if name != "lang" {
            return Ok(None);
        }
        let Some(lang) = language_of(args) else {
            let text = crate::i18n::pick(
                current,
                "Send /lang en for English or /lang ja for Japanese.",
                "日本語は /lang ja、英語は /lang en と送ってください。",
            );
            return Ok(Some(self.reply_only(incoming, None, text, outbox).await?));
        };
        let confirmation = crate::i18n::pick(
            lang,
            "OK — I will reply in English from now on.",
            "わかりました。これからは日本語でお返事します。",
        );
        // no conversation yet: one that ends at once carries the profile entry
        let (session, ends) = match active.clone() {
            Some(session) => (session, false),
            None => {
                let flow = incoming
                    .flow
                    .as_deref()
                    .filter(|f| self.flows.get(f).is_some())
                    .unwrap_or(self.flows.default_flow());
                (SessionRecord::draft(key.clone(), flow), true)
            }
        };
        let mut output = TurnOutput::default();
        output.say(confirmation);
        output.change(StateChange::SetLanguage {
            language: lang.to_string(),
        });
        output.change(StateChange::Reading {
            change: ReadingChange::AddProfileEntry {
                kind: ProfileKind::Language,
                text: lang.to_string(),
            },
        });
        if ends {
            output.change(StateChange::EndSession);
        }
        let turn = FinishedTurn {
            session,
            finish_session: None,
            output,
            ledger: LlmLedger::new(),
            replace_pending: false,
            said: None,
        };
        Ok(Some(self.commit_and_deliver(incoming, turn, outbox).await?))
    }

    /// The language the user chose with `/lang`, from their profile (the latest).
    pub(in crate::orchestrator) async fn profile_language(
        &self,
        key: &SessionKey,
    ) -> Option<String> {
        match self.store.profile_entries(key.platform, &key.user).await {
            Ok(entries) => entries
                .into_iter()
                .filter(|e| e.kind == ProfileKind::Language)
                .max_by_key(|e| e.at)
                .map(|e| e.text),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the profile's language");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages_are_read_in_either_language() {
        assert_eq!(language_of("ja"), Some("ja"));
        assert_eq!(language_of(" 日本語 "), Some("ja"));
        assert_eq!(language_of("English"), Some("en"));
        assert_eq!(language_of("fr"), None);
        assert_eq!(language_of(""), None);
    }
}

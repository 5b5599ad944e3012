//! `/mydata` (everything stored about the user, as JSON) and `/forget` (deleted after a
//! confirmation button), handled before any flow runs.

use crate::agent::LlmLedger;
use crate::flow::TurnOutput;
use crate::message::{Body, Incoming, OptionItem, OptionsRequest, Outgoing, SessionKey};
use crate::orchestrator::delivery::FinishedTurn;
use crate::orchestrator::{Orchestrator, Outbox};
use crate::orchestrator::{OrchestratorError, TurnReport};
use crate::store::SessionRecord;

const FORGET_PREFIX: &str = "fg";

const FORGET_YES: &str = "forget:yes";

const FORGET_NO: &str = "forget:no";

/// The answer `body` gives to `/forget`'s question when it is pending in `active`: a
/// press of its buttons, or their label or a yes or no typed instead. `Some(true)`:
/// delete everything.
fn forget_answer(active: &Option<SessionRecord>, body: &Body) -> Option<bool> {
    let pending = active
        .as_ref()
        .and_then(|s| s.pending_options.as_ref())
        .filter(|p| p.request_id.starts_with(FORGET_PREFIX))?;
    match body {
        Body::Choice { request_id, values } if *request_id == pending.request_id => {
            Some(values.iter().any(|v| v == FORGET_YES))
        }
        Body::Text { text } => {
            let (_, value) = crate::orchestrator::routing::typed_option(active.as_ref(), text)?;
            Some(value == FORGET_YES)
        }
        _ => None,
    }
}

impl Orchestrator {
    /// `/mydata`'s answer: everything stored about the key's user, as JSON.
    async fn my_data(&self, key: &SessionKey, lang: &str) -> Result<String, OrchestratorError> {
        let data = self.store.user_data(key.platform, &key.user).await?;
        let json = serde_json::to_string_pretty(&data).unwrap_or_default();
        Ok(format!(
            "{}\n{json}",
            crate::i18n::pick(
                lang,
                "Everything I have stored about you (JSON):",
                "保存しているあなたのデータ（JSON）:"
            )
        ))
    }

    /// `/mydata`, `/forget` and its confirmation: the same in every flow, never seen by one.
    /// `None` for every other message (the common case costs a match, no clone).
    /// `lang`: the language of the replies.
    pub(in crate::orchestrator) async fn privacy(
        &self,
        incoming: &Incoming,
        key: &SessionKey,
        active: &Option<SessionRecord>,
        lang: &str,
        outbox: &dyn Outbox,
    ) -> Result<Option<TurnReport>, OrchestratorError> {
        if incoming.shared
            && let Body::Command { name, .. } = &incoming.body
            && (name == "mydata" || name == "forget")
        {
            let report = self.privately(incoming, key, name, lang, outbox).await?;
            return Ok(Some(report));
        }
        let report = match (&incoming.body, forget_answer(active, &incoming.body)) {
            (Body::Command { name, .. }, _) if name == "mydata" => {
                let text = self.my_data(key, lang).await?;
                // not stored again: the reply is the data itself
                self.reply_only(incoming, None, text, outbox).await?
            }
            (Body::Command { name, .. }, _) if name == "forget" => {
                self.ask_to_forget(incoming, key, active, lang, outbox)
                    .await?
            }
            (_, Some(yes)) => {
                match self
                    .answer_forget(incoming, key, active, yes, lang, outbox)
                    .await?
                {
                    Some(report) => report,
                    None => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(report))
    }

    /// `/mydata` or `/forget` in a shared place: others read it, so nothing personal is
    /// shown there, not even the question. The data goes to the user's private chat if the
    /// bot can reach them there; otherwise they are asked to send it there.
    async fn privately(
        &self,
        incoming: &Incoming,
        key: &SessionKey,
        name: &str,
        lang: &str,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        let say = |en: &str, ja: &str| crate::i18n::pick(lang, en, ja);
        // others read this place: nothing personal here, not even the question. The
        // data goes to the user's private chat if the bot can reach them there.
        if name == "mydata" {
            let data = self.my_data(key, lang).await?;
            match outbox.deliver_privately(key, &[Outgoing::text(data)]).await {
                Ok(true) => {
                    tracing::info!("data sent to a private chat; the shared place told so");
                    let text = say(
                        "I have sent what I store about you to our private chat.",
                        "保存しているあなたのデータを個別チャットに送りました。",
                    );
                    return self.reply_only(incoming, None, text, outbox).await;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "could not reach the user privately"),
            }
        }
        tracing::info!(command = %name, "privacy command refused in a shared place");
        let text = say(
            &format!(
                "For your privacy I only answer /{name} in a private chat with me. Please send it there."
            ),
            &format!(
                "プライバシー保護のため、/{name} は私との個別チャットでのみ受け付けます。そちらで送ってください。"
            ),
        );
        self.reply_only(incoming, None, text, outbox).await
    }

    /// `/forget`: the question, with buttons to confirm or cancel.
    async fn ask_to_forget(
        &self,
        incoming: &Incoming,
        key: &SessionKey,
        active: &Option<SessionRecord>,
        lang: &str,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        let say = |en: &str, ja: &str| crate::i18n::pick(lang, en, ja);
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
            said: None,
        };
        self.commit_and_deliver(incoming, turn, outbox).await
    }

    /// The answer to `/forget`'s question: everything deleted (`yes`), or nothing.
    async fn answer_forget(
        &self,
        incoming: &Incoming,
        key: &SessionKey,
        active: &Option<SessionRecord>,
        yes: bool,
        lang: &str,
        outbox: &dyn Outbox,
    ) -> Result<Option<TurnReport>, OrchestratorError> {
        let say = |en: &str, ja: &str| crate::i18n::pick(lang, en, ja);
        if yes {
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
            said: None,
        };
        Ok(Some(self.commit_and_deliver(incoming, turn, outbox).await?))
    }
}

//! People in the loop: what the team does from the admin chat with the buttons under a
//! notice ([`AdminAction`]). Only the configured admins, in their admin place, may act;
//! anyone else is told so and the attempt is logged. A decision on an application is
//! stored with the submission (the first stands: a later press reports it) and the
//! applicant is told the form's message for it, in their language, through the adapter
//! of their platform.
//!
//! A conversation taken over ("Take over", `/takeover SESSION`) is held by that person
//! (stored: a restart keeps it) until handed back ("Hand back", `/handback SESSION`, or
//! `[handoff] idle_minutes` without a message of theirs). Meanwhile the agent does not
//! answer at the user's place: the user's messages are stored and relayed to the admin
//! place (as replies under the notice where the platform has replies), and a person's
//! reply there to a notice or a relayed message reaches the user, stored in the same
//! transcript. The user is told once when a person joins and when the agent is back.

use super::delivery::FinishedTurn;
use super::{Orchestrator, OrchestratorError, Outbox, TurnReport};
use crate::admin::{AdminAction, AdminActionKind, AdminNotice, NoticeRef};
use crate::agent::LlmLedger;
use crate::flow::TurnOutput;
use crate::i18n::pick;
use crate::message::{Body, Incoming, Outgoing, Platform, SessionKey, UserRef};
use crate::store::{Hold, SessionRecord};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an instance trusts its copy of the holds (another instance's takeover shows
/// within this).
const HOLDS_FRESH: Duration = Duration::from_secs(1);

/// The holds as last read, and when; whether a turn is reading them again now.
#[derive(Default)]
pub(super) struct HoldCache {
    read: std::sync::Mutex<Option<(Instant, HashMap<SessionKey, Hold>)>>,
    refreshing: std::sync::atomic::AtomicBool,
}

/// Clears [`HoldCache::refreshing`] when the read ends, however it ends (a turn cut by its
/// budget included).
struct Refreshing<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for Refreshing<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// What an admin's press or command did: `text` to show; `posted`: the admin place has it
/// already (a notice was posted), so the adapter only acknowledges with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminOutcome {
    pub text: String,
    pub posted: bool,
}

impl From<String> for AdminOutcome {
    fn from(text: String) -> Self {
        AdminOutcome {
            text,
            posted: false,
        }
    }
}

/// What a press of someone who is not an admin here gets.
pub const NOT_ALLOWED: &str =
    "Not allowed: only the configured admins can do this here. / この操作は管理者のみ行えます。";

impl Orchestrator {
    /// How to reach users of `platform` outside their turns (an adapter registers its own
    /// as it starts).
    pub(crate) fn register_outbox(&self, platform: Platform, outbox: Arc<dyn Outbox>) {
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

    /// An admin's press of a notice's button (or `/takeover`, `/handback`): `by` is the
    /// admin place and the presser, `name` how the presser is called.
    pub(crate) async fn admin_action(
        &self,
        by: &SessionKey,
        name: &str,
        action: AdminAction,
    ) -> AdminOutcome {
        if !self.access.allows(by) {
            tracing::warn!(user = %by.user, chat = %by.chat, ?action, "admin action refused: not an admin here");
            return String::from(NOT_ALLOWED).into();
        }
        tracing::info!(user = %by.user, ?action, "admin action");
        let who = format!("{}:{} ({name})", by.platform, by.user);
        self.act(&who, action).await
    }

    /// What an admin's action does, once allowed: `who` is `platform:id (name)`. The admin
    /// chat's buttons and commands and the browser console come here alike.
    pub(super) async fn act(&self, who: &str, action: AdminAction) -> AdminOutcome {
        let session = action.session_id;
        let done = match action.kind {
            AdminActionKind::Approve => self.decide(who, session, "approved").await.map(Into::into),
            AdminActionKind::Reject => self.decide(who, session, "rejected").await.map(Into::into),
            AdminActionKind::TakeOver => self.take_over(who, session).await,
            AdminActionKind::HandBack => self.give_back(session, &format!("by {who}")).await,
        };
        done.unwrap_or_else(|error| {
            tracing::error!(%error, ?action, "admin action failed");
            String::from("That did not work (the database did not answer); please try again.")
                .into()
        })
    }

    /// Posts `notice` to the admin places (as a reply to `replying_to` where it can) and
    /// links where it landed to its session, so that a reply to it reaches the session.
    pub(super) async fn post_notice(&self, notice: &AdminNotice, replying_to: &[NoticeRef]) {
        match self.admin.post(notice, replying_to).await {
            Ok(landed) => {
                if let Some(session) = notice.session_id {
                    for at in landed {
                        if let Err(e) = self.store.link_notice(&at, session).await {
                            tracing::warn!(error = %e, "could not link a notice to its session");
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, kind = %notice.kind, "admin notice not delivered"),
        }
    }

    /// [`Self::post_notice`] as a reply under the latest notice of its conversation, so that
    /// what is said about one conversation stays together in the admin place.
    async fn post_under_conversation(&self, notice: &AdminNotice) {
        let replying_to = match notice.session_id {
            Some(session) => self.store.notices_of(session).await.unwrap_or_default(),
            None => Vec::new(),
        };
        self.post_notice(notice, &replying_to).await;
    }

    /// The hold on `key`'s place, if a person holds it (as read within [`HOLDS_FRESH`]).
    pub(super) async fn hold_at(&self, key: &SessionKey) -> Option<Hold> {
        let (last, fresh) = {
            let read = self.holds.read.lock().unwrap_or_else(|p| p.into_inner());
            match read.as_ref() {
                Some((at, holds)) => (Some(holds.get(key).cloned()), at.elapsed() < HOLDS_FRESH),
                None => (None, false),
            }
        };
        if let Some(hold) = last.clone().filter(|_| fresh) {
            return hold;
        }
        // one turn reads them again; the others meanwhile go by the last read (a second
        // old at most) instead of all asking the database at once
        let refreshing = &self.holds.refreshing;
        if let Some(hold) = last
            && refreshing.swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return hold;
        }
        let _reading = Refreshing(refreshing);
        match self.read_holds().await {
            Ok(holds) => holds.get(key).cloned(),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the holds; using the last read");
                let read = self.holds.read.lock().unwrap_or_else(|p| p.into_inner());
                read.as_ref().and_then(|(_, h)| h.get(key).cloned())
            }
        }
    }

    /// The holds as the store has them now, kept as this instance's copy.
    async fn read_holds(&self) -> Result<HashMap<SessionKey, Hold>, crate::store::StoreError> {
        let holds: HashMap<SessionKey, Hold> = self
            .store
            .holds()
            .await?
            .into_iter()
            .map(|h| (h.key.clone(), h))
            .collect();
        *self.holds.read.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), holds.clone()));
        Ok(holds)
    }

    /// The holds are read again at the next look (this instance changed them).
    fn holds_changed(&self) {
        *self.holds.read.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The session's user told `en` / `ja` (their conversation's language) by the adapter
    /// of their platform.
    async fn tell_user(&self, key: &SessionKey, lang: Option<&str>, en: &str, ja: &str) {
        let Some(outbox) = self.outbox_for(key.platform) else {
            tracing::warn!(platform = %key.platform, "no adapter to tell the user");
            return;
        };
        let text = pick(lang.unwrap_or("en"), en, ja);
        if let Err(e) = outbox.deliver(key, &[Outgoing::text(text)]).await {
            tracing::warn!(error = %e, "could not tell the user");
        }
    }

    /// `who` takes session `session_id` over.
    async fn take_over(
        &self,
        who: &str,
        session_id: i64,
    ) -> Result<AdminOutcome, OrchestratorError> {
        let Some(session) = self.store.session(session_id).await? else {
            return Ok(
                format!("There is no session #{session_id} (it may have been forgotten).").into(),
            );
        };
        let (hold, took) = self.store.take_over(session_id, &session.key, who).await?;
        self.holds_changed();
        if !took {
            let at = hold.taken_at.format("%Y-%m-%d %H:%M UTC");
            return Ok(if hold.session_id == session_id {
                format!(
                    "Already taken over by {} at {at} (session #{session_id}).",
                    hold.held_by
                )
            } else {
                format!(
                    "{} already holds this user's conversation (session #{}, since {at}).",
                    hold.held_by, hold.session_id
                )
            }
            .into());
        }
        tracing::info!(session = session_id, "a person took the conversation over");
        self.tell_user(
            &session.key,
            session.language.as_deref(),
            "A person from the team has joined this conversation and will answer you here.",
            "担当者が会話に参加しました。こちらで担当者がお答えします。",
        )
        .await;
        let text = format!(
            "{who} took over session #{session_id} ({} user {}). The assistant is silent there; \
             reply to this message or to a relayed one to write to the user, and hand back when done.",
            session.key.platform, session.key.user
        );
        let notice = AdminNotice {
            kind: "takeover".into(),
            title: format!("Session #{session_id} taken over"),
            body: text.clone(),
            fields: Vec::new(),
            session_id: Some(session_id),
            actions: vec![AdminActionKind::HandBack],
        };
        self.post_under_conversation(&notice).await;
        Ok(AdminOutcome { text, posted: true })
    }

    /// Gives session `session_id` back to the agent (`how`: by whom, or idle).
    async fn give_back(
        &self,
        session_id: i64,
        how: &str,
    ) -> Result<AdminOutcome, OrchestratorError> {
        let Some(hold) = self.store.hand_back(session_id).await? else {
            return Ok(format!(
                "Session #{session_id} is not held by anyone: the assistant answers there."
            )
            .into());
        };
        self.holds_changed();
        tracing::info!(session = session_id, "the conversation was handed back");
        let language = self
            .store
            .active_session(&hold.key)
            .await
            .ok()
            .flatten()
            .and_then(|s| s.language);
        self.tell_user(
            &hold.key,
            language.as_deref(),
            "The person from the team has left this conversation; the assistant is back to help you.",
            "担当者が会話から退出しました。引き続きアシスタントがお手伝いします。",
        )
        .await;
        let text = format!("Session #{session_id} handed back to the assistant ({how}).");
        let notice = AdminNotice {
            kind: "handback".into(),
            title: format!("Session #{session_id} handed back"),
            body: text.clone(),
            fields: Vec::new(),
            session_id: Some(session_id),
            actions: Vec::new(),
        };
        self.post_under_conversation(&notice).await;
        Ok(AdminOutcome { text, posted: true })
    }

    /// Hands back every conversation whose person has written nothing for `idle`;
    /// returns how many (the scheduled job's work).
    pub(crate) async fn hand_back_idle(&self, idle: Duration) -> usize {
        let holds = match self.store.holds().await {
            Ok(holds) => holds,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the holds");
                return 0;
            }
        };
        let limit = chrono::Duration::from_std(idle).unwrap_or(chrono::Duration::MAX);
        let now = chrono::Utc::now();
        let mut handed = 0;
        for hold in holds.into_iter().filter(|h| now - h.last_at >= limit) {
            let minutes = idle.as_secs_f64() / 60.0;
            let how = format!("no message from {} for {minutes:.0} min", hold.held_by);
            match self.give_back(hold.session_id, &how).await {
                Ok(_) => handed += 1,
                Err(e) => tracing::warn!(error = %e, "could not hand back an idle conversation"),
            }
        }
        handed
    }

    /// A user's message at a place a person holds: stored in the conversation (the agent
    /// does not run) and relayed to the admin places under the conversation's notices.
    pub(super) async fn relay_to_staff(
        &self,
        incoming: &Incoming,
        active: Option<SessionRecord>,
        hold: Hold,
        outbox: &dyn Outbox,
    ) -> Result<TurnReport, OrchestratorError> {
        let key = incoming.key();
        let session = active.unwrap_or_else(|| {
            let flow = incoming
                .flow
                .clone()
                .unwrap_or_else(|| self.flows.default_flow().to_string());
            SessionRecord::draft(key, &flow)
        });
        let turn = FinishedTurn {
            session,
            finish_session: None,
            output: TurnOutput::default(),
            ledger: LlmLedger::new(),
            replace_pending: false,
            said: None,
        };
        let report = self.commit_and_deliver(incoming, turn, outbox).await?;
        if report.duplicate {
            return Ok(report);
        }
        tracing::info!(
            session = hold.session_id,
            "a message relayed to the person holding the conversation"
        );
        let notice = AdminNotice {
            kind: "relay".into(),
            title: format!(
                "{} (session #{}, held by {})",
                incoming.user.display_name, hold.session_id, hold.held_by
            ),
            body: incoming.body.transcript_text(),
            fields: Vec::new(),
            session_id: Some(hold.session_id),
            actions: vec![AdminActionKind::HandBack],
        };
        self.post_under_conversation(&notice).await;
        Ok(report)
    }

    /// A person's message in an admin place replying to `replying_to` (a notice or a relayed
    /// message): when it stands for a conversation they hold, it reaches its user and is
    /// stored there. Returns what to tell the admin place (`None`: nothing; the reply was
    /// not about a conversation, or it went through).
    pub(crate) async fn staff_reply(
        &self,
        by: &SessionKey,
        name: &str,
        replying_to: &NoticeRef,
        message_id: &str,
        text: Option<&str>,
    ) -> Option<String> {
        let session_id = match self.store.notice_session(replying_to).await {
            Ok(Some(session)) => session,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(error = %e, "could not read a notice");
                return Some("Not sent: the database did not answer; please try again.".into());
            }
        };
        if !self.access.allows(by) {
            tracing::warn!(user = %by.user, "a reply to a relayed message by someone who is not an admin");
            return Some(NOT_ALLOWED.into());
        }
        let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) else {
            return Some("Only text reaches the user: please write it as a message. / テキストのみ送信できます。".into());
        };
        self.reply_in_held(by, name, session_id, message_id, text)
            .await
    }

    /// A person's `text` (`by` wrote it, as message `message_id` there) to the user of the
    /// held `session_id`, stored in its transcript; `None` once it went through, otherwise
    /// what to tell the person. The admin chat's replies and the console's come here alike.
    pub(super) async fn reply_in_held(
        &self,
        by: &SessionKey,
        name: &str,
        session_id: i64,
        message_id: &str,
        text: &str,
    ) -> Option<String> {
        let holds = self.read_holds().await.unwrap_or_default();
        let Some(hold) = holds.into_values().find(|h| h.session_id == session_id) else {
            return Some(format!(
                "This conversation is closed (session #{session_id} was handed back or forgotten); your message reached nobody."
            ));
        };
        let Some(outbox) = self.outbox_for(hold.key.platform) else {
            return Some(format!(
                "Not sent: {} is not connected here.",
                hold.key.platform
            ));
        };
        let incoming = Incoming {
            platform: by.platform,
            chat: by.chat.clone(),
            thread: String::new(),
            user: UserRef {
                id: hold.key.user.clone(),
                display_name: hold.key.user.clone(),
                language: None,
            },
            message_id: message_id.to_string(),
            body: Body::Text {
                text: text.to_string(),
            },
            flow: None,
            flow_arg: None,
            shared: true,
        };
        match self
            .staff_turn(&hold, &incoming, &format!("{name}: {text}"), &*outbox)
            .await
        {
            Ok(()) => {
                if let Err(e) = self.store.touch_hold(session_id).await {
                    tracing::warn!(error = %e, "could not note the person's message");
                }
                None
            }
            Err(e) => {
                tracing::error!(error = %e, "a person's reply was not stored");
                Some("Not sent: the database did not answer; please try again.".into())
            }
        }
    }

    /// A message an admin wrote at a user's place itself (a Discord help-desk thread) that
    /// a person holds: stored in the conversation there, not answered (the user reads it
    /// where it was written). `false`: not an admin, or nobody holds a conversation there
    /// (the message goes its usual way).
    pub(crate) async fn staff_in_place(&self, incoming: &Incoming) -> bool {
        let is_admin = self
            .access
            .admins
            .get(&incoming.platform)
            .is_some_and(|ids| ids.contains(&incoming.user.id));
        let Body::Text { text } = &incoming.body else {
            return false;
        };
        if !is_admin {
            return false;
        }
        let holds = self.read_holds().await.unwrap_or_default();
        let Some(hold) = holds.into_values().find(|h| {
            h.key.platform == incoming.platform
                && h.key.chat == incoming.chat
                && h.key.thread == incoming.thread
                && h.key.user != incoming.user.id
        }) else {
            return false;
        };
        let said = format!("{}: {text}", incoming.user.display_name);
        let mut stored = incoming.clone();
        stored.user = UserRef {
            id: hold.key.user.clone(),
            display_name: hold.key.user.clone(),
            language: None,
        };
        match self.staff_turn(&hold, &stored, &said, &Unheard).await {
            Ok(()) => {
                if let Err(e) = self.store.touch_hold(hold.session_id).await {
                    tracing::warn!(error = %e, "could not note the person's message");
                }
            }
            Err(e) => tracing::error!(error = %e, "a person's message in the place was not stored"),
        }
        true
    }

    /// `said` (a person's message) stored in the conversation at the hold's place and
    /// delivered to its user, in the place's turn order.
    async fn staff_turn(
        &self,
        hold: &Hold,
        incoming: &Incoming,
        said: &str,
        outbox: &dyn Outbox,
    ) -> Result<(), OrchestratorError> {
        let key = hold.key.clone();
        // in the place's turn order (no bound: a person's message is never refused)
        let _lease = self.locks.acquire(&key, usize::MAX).await.ok();
        let load = self
            .store
            .load_for_turn(&key, &incoming.message_id, 0)
            .await?;
        let session = match load.session {
            Some(session) => session,
            None => match self.store.session(hold.session_id).await? {
                Some(held) => SessionRecord::draft(key, &held.flow),
                None => SessionRecord::draft(key, self.flows.default_flow()),
            },
        };
        let mut output = TurnOutput::default();
        output.say(said);
        let turn = FinishedTurn {
            session,
            finish_session: None,
            output,
            ledger: LlmLedger::new(),
            replace_pending: false,
            said: Some(String::new()),
        };
        self.commit_and_deliver(incoming, turn, outbox).await?;
        Ok(())
    }

    /// Records `decision` on the application of `session_id` unless one stands, and tells
    /// the applicant the form's message for it.
    async fn decide(
        &self,
        who: &str,
        session_id: i64,
        decision: &str,
    ) -> Result<String, OrchestratorError> {
        let Some(decided) = self.store.decide(session_id, decision, who).await? else {
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

/// Delivers nothing: what a person wrote at the user's place is there already.
struct Unheard;

#[async_trait::async_trait]
impl Outbox for Unheard {
    async fn deliver(
        &self,
        _key: &SessionKey,
        _items: &[Outgoing],
    ) -> Result<(), crate::admin::DeliveryError> {
        Ok(())
    }
}

//! The browser console's side of the orchestrator: `/console` in the admin place gives an
//! admin a one-time sign-in link (privately where the bot can reach them, in the admin
//! place otherwise), and the console's actions — a decision, a takeover, a reply, a hand
//! back — run the same code as the admin chat's buttons ([`people`](super::people)), for
//! the configured admins only.

use super::people::{AdminOutcome, NOT_ALLOWED};
use super::{Orchestrator, OrchestratorError, Outbox};
use crate::admin::AdminAction;
use crate::message::{Outgoing, SessionKey};
use crate::store::console::{ConsoleAdmin, new_token, token_hash};
use std::time::Duration;

/// How long a sign-in link works (issue: 10 minutes), once.
pub const CONSOLE_LINK_VALID: Duration = Duration::from_secs(600);

impl Orchestrator {
    /// The console is served at `public_url` (its links start there): `/console` answers
    /// (until then it says the console is off). Set once the console's address is known.
    pub(crate) fn serve_console_at(&self, public_url: &str) {
        *self.console_url.write().unwrap_or_else(|p| p.into_inner()) =
            Some(public_url.trim_end_matches('/').to_string());
    }

    /// Whether `admin` is one of the configured admins of their platform now.
    pub(crate) fn is_console_admin(&self, admin: &ConsoleAdmin) -> bool {
        self.access
            .admins
            .get(&admin.platform)
            .is_some_and(|ids| ids.contains(&admin.user_id))
    }

    /// The admin list as a fingerprint: a console session opened under another list is over.
    pub(crate) fn admins_fingerprint(&self) -> String {
        let mut all: Vec<String> = self
            .access
            .admins
            .iter()
            .flat_map(|(platform, ids)| ids.iter().map(move |id| format!("{platform}:{id}")))
            .collect();
        all.sort();
        token_hash(&all.join("\n"))
    }

    /// `/console` from an admin in the admin place (checked before): a link that signs them
    /// in, valid [`CONSOLE_LINK_VALID`], once. Sent privately where the platform can reach
    /// them; otherwise the returned text (said in the admin place) carries it. The link is
    /// never logged.
    pub(super) async fn console_link(
        &self,
        key: &SessionKey,
        name: &str,
        outbox: &dyn Outbox,
    ) -> Result<String, OrchestratorError> {
        let url = self
            .console_url
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(url) = url else {
            return Ok("The console is off: set [console] listen (and public_url) in kaiwa.toml. / コンソールは無効です（kaiwa.toml の [console] listen を設定してください）。".into());
        };
        let token = new_token();
        let admin = ConsoleAdmin {
            platform: key.platform,
            user_id: key.user.clone(),
            name: name.to_string(),
        };
        let expires =
            chrono::Utc::now() + chrono::Duration::from_std(CONSOLE_LINK_VALID).unwrap_or_default();
        self.store
            .console_link_put(&token_hash(&token), &admin, expires)
            .await?;
        let link = format!(
            "Your sign-in link to the Kaiwa console (works once, for 10 minutes; do not share it):\n{url}/login/{token}\n\nコンソールへのサインインリンクです（10分間・1回のみ有効。共有しないでください）。"
        );
        match outbox
            .deliver_privately(key, &[Outgoing::text(link.clone())])
            .await
        {
            Ok(true) => {
                tracing::info!(user = %key.user, "console link sent privately");
                Ok("I have sent you a sign-in link in our private chat. / 個別チャットにサインインリンクを送りました。".into())
            }
            Ok(false) => {
                tracing::info!(user = %key.user, "console link given in the admin place");
                Ok(link)
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not reach the admin privately; the link goes to the admin place");
                Ok(link)
            }
        }
    }

    /// A console admin's action on a conversation (approve, reject, take over, hand back):
    /// the same as the admin chat's button.
    pub(crate) async fn console_action(
        &self,
        admin: &ConsoleAdmin,
        action: AdminAction,
    ) -> AdminOutcome {
        if !self.is_console_admin(admin) {
            tracing::warn!(user = %admin.user_id, ?action, "console action refused: not an admin");
            return String::from(NOT_ALLOWED).into();
        }
        tracing::info!(user = %admin.user_id, ?action, "console action");
        let who = format!("{}:{} ({})", admin.platform, admin.user_id, admin.name);
        self.act(&who, action).await
    }

    /// A console admin's reply to the user of the held `session_id` (`nonce`: the form's
    /// own id, so a form sent twice is one message). `None` once it went through, otherwise
    /// what to tell the admin.
    pub(crate) async fn console_reply(
        &self,
        admin: &ConsoleAdmin,
        session_id: i64,
        nonce: &str,
        text: &str,
    ) -> Option<String> {
        if !self.is_console_admin(admin) {
            tracing::warn!(user = %admin.user_id, "console reply refused: not an admin");
            return Some(NOT_ALLOWED.into());
        }
        let text = text.trim();
        if text.is_empty() {
            return Some("Write something to send. / 送る内容を入力してください。".into());
        }
        if text.chars().count() > self.max_message_chars {
            return Some(format!(
                "Too long: at most {} characters. / 長すぎます（最大 {} 文字）。",
                self.max_message_chars, self.max_message_chars
            ));
        }
        let by = SessionKey {
            platform: admin.platform,
            chat: "console".into(),
            thread: String::new(),
            user: admin.user_id.clone(),
        };
        self.reply_in_held(
            &by,
            &admin.name,
            session_id,
            &format!("console:{nonce}"),
            text,
        )
        .await
    }
}

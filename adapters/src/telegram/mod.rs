//! The Telegram adapter: long polling of our own (`polling.rs`) or a host bot's dispatcher
//! ([`TelegramPlugin`]), messages and inline-keyboard presses turned into
//! [`Incoming`](kaiwa_core::message::Incoming)s (`updates.rs`), replies rendered as HTML
//! messages and inline keyboards (`send.rs`), over raw Bot API requests with teloxide's
//! types ([`TelegramApi`]).
//!
//! - Mounted in a host's dispatcher, Kaiwa takes only its own: its places, its commands
//!   there, its buttons (callback data in [`keyboard::NAMESPACE`]); the rest falls through
//!   to the host's branches, and its command menu is added to the host's.
//! - Nothing confirmed is lost: a `getUpdates` batch is confirmed to Telegram (by the next
//!   poll's offset) only once its messages are committed to the store's inbox; a crash
//!   after that leaves them in the inbox, and the next start answers them. On SIGTERM
//!   polling stops first; what is confirmed and not answered within the grace period is
//!   answered after the restart.
//! - No chat blocks another: each session (chat, topic, user) has its own lane in the
//!   shared intake ([`crate::intake`]), run in order; a session flooding, or waiting out a
//!   429, delays nobody else. At most
//!   `[limits] max_waiting` messages wait per session; more are refused with one notice
//!   per burst.
//! - A private chat, a group and each forum topic (`message_thread_id`) are separate places;
//!   replies go to the topic they answer.
//! - Options become inline keyboards whose buttons carry the request's short id and an index
//!   ([`mod@keyboard`]); a press is answered (best effort), the message is edited to show the
//!   choice and loses its keyboard; a press on a stale or foreign keyboard gets a notice.
//! - Replies that need no vetting stream while the model writes them (`drafts.rs`): a
//!   private chat sees the native draft grow (with a Stop button; the
//!   `stopped_message_generation` update ends the model's request), a group or topic one
//!   message edited about once a second; the final reply replaces either.
//! - An update is processed once: recent update ids are remembered in memory (a repeated one
//!   is dropped before anything is written), and every turn is deduplicated by the store
//!   (`telegram` + chat + update id), which survives restarts.

mod api;
mod drafts;
pub mod keyboard;
mod plugin;
mod polling;
mod send;
mod updates;
mod webhook;

pub use api::{CallError, TelegramApi};
pub use plugin::{TelegramListener, TelegramPlugin};
pub use send::{TelegramAdminSink, TelegramOutbox, escape_html};
pub use updates::command_for_me;
pub use webhook::{
    MAX_BODY, SECRET_HEADER, WebhookConfig, delete_webhook, set_webhook, valid_secret, webhook_info,
};

use crate::{AdapterError, AdapterHealth};
use kaiwa_core::admin::DeliveryError;
use kaiwa_core::message::{Platform, SessionKey};
use kaiwa_core::orchestrator::{ForAdapters, RENEW_EVERY};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use teloxide::types::{ChatId, Message, MessageId, ThreadId, Update};
use updates::{Context, Routed};

/// How the adapter behaves (from `[telegram]` in the configuration). The token and the API
/// URL live in the [`TelegramApi`] it is given.
#[derive(Debug, Clone)]
pub struct TelegramConfig {
    /// Where audit summaries and handoffs go.
    pub admin_chat_id: Option<i64>,
    /// The flow a private chat starts with (`None`: the default flow) and its argument.
    pub private_flow: Option<String>,
    pub private_flow_arg: Option<String>,
    /// The flow groups and forum topics run; `None`: the bot ignores groups but for
    /// [`Self::places`].
    pub group_flow: Option<String>,
    /// Groups and forum topics with a flow of their own: a topic listed wins over its
    /// group listed, both over `group_flow`.
    pub places: Vec<PlaceFlow>,
    /// Private chats are Kaiwa's (`false`: left to a host bot, or ignored).
    pub private_chats: bool,
    /// Long-poll timeout.
    pub poll_timeout: Duration,
    /// Receive updates as a webhook instead of long polling.
    pub webhook: Option<WebhookConfig>,
}

/// A group or one of its forum topics, and the flow it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaceFlow {
    pub chat: i64,
    /// A forum topic; `None`: the whole group.
    pub topic: Option<i32>,
    pub flow: String,
    pub flow_arg: Option<String>,
}

/// Telegram's limit on one message's text, in UTF-16 code units.
pub const MESSAGE_LIMIT: usize = 4096;

/// A chat and, in a forum, a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub chat: ChatId,
    pub topic: Option<ThreadId>,
}

impl Place {
    /// The draft id of the place's "Thinking…" placeholder: non-zero, the same for every
    /// renewal (renewals of one draft are animated, not stacked).
    fn draft_id(self) -> i64 {
        (self.chat.0.unsigned_abs() % 2_000_000_000) as i64 + 1
    }

    fn of(message: &Message) -> Place {
        Place {
            chat: message.chat.id,
            topic: message.thread_id.filter(|_| message.is_topic_message),
        }
    }

    fn from_key(key: &SessionKey) -> Result<Place, DeliveryError> {
        let chat = key
            .chat
            .parse::<i64>()
            .map_err(|_| DeliveryError::Rejected(format!("not a Telegram chat: {}", key.chat)))?;
        let topic = match key.thread.as_str() {
            "" => None,
            t => Some(ThreadId(MessageId(t.parse::<i32>().map_err(|_| {
                DeliveryError::Rejected(format!("not a Telegram topic: {t}"))
            })?))),
        };
        Ok(Place {
            chat: ChatId(chat),
            topic,
        })
    }

    fn thread_string(&self) -> String {
        self.topic.map(|t| t.0.0.to_string()).unwrap_or_default()
    }

    fn topic_number(&self) -> i32 {
        self.topic.map_or(0, |t| t.0.0)
    }
}

/// The lease of the one instance that long-polls Telegram (several instances).
pub const POLLER_LEASE: &str = "telegram:poller";

/// The longest wait between polls while Telegram fails: polling resumes within this (plus
/// a poll) of the API answering again.
const MAX_POLL_BACKOFF: Duration = Duration::from_secs(2);

/// While polling keeps failing, the failure is logged at most this often.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// The running adapter: long polling until `shutdown` resolves, then the turns in flight
/// finish before it returns.
pub struct TelegramAdapter {
    api: TelegramApi,
    config: TelegramConfig,
    orchestrator: ForAdapters,
    health: Arc<AdapterHealth>,
}

/// The shared intake ([`crate::intake`]) over Telegram's work ([`Context`]): what both ways
/// of receiving updates (Kaiwa's own long polling or webhook, a host's dispatcher) hand
/// their kept updates to.
type Intake = crate::intake::Intake<Context>;

/// Connects (`getMe`), registers the command menu and the adapter's one outbox, and begins
/// the intake: what the last run left undelivered is sent and what it left unanswered
/// queued (one instance alone), or the claims start (several).
async fn start(
    api: TelegramApi,
    config: TelegramConfig,
    orchestrator: ForAdapters,
    mounted: bool,
) -> Result<Arc<Intake>, AdapterError> {
    let me = api
        .get_me()
        .await
        .map_err(|e| AdapterError::Platform(format!("Telegram getMe failed: {e}")))?;
    tracing::info!(bot = %me.username(), mounted, "Telegram connected");
    let commands = orchestrator.flows().menu_commands();
    if let Err(e) = api.set_commands(&commands, mounted).await {
        tracing::warn!(error = %e, "could not register the Telegram command menu");
    }
    let outbox = Arc::new(TelegramOutbox::new(api.clone()));
    // a host's dispatcher drops the stop updates: no Stop button unless Kaiwa polls
    // ([`TelegramPlugin::listener`])
    outbox.set_stoppable(!mounted);
    // decisions and a person's replies reach users outside their turns through it too
    orchestrator.register_outbox(Platform::Telegram, outbox.clone());
    let ctx = Arc::new(Context {
        outbox,
        api,
        orchestrator: orchestrator.clone(),
        config,
        me: me.username().to_string(),
        mounted,
    });
    let intake = Intake::new(ctx, orchestrator);
    intake.begin().await;
    Ok(intake)
}

/// A Stop of a streamed reply goes to that reply at once: the turn writing it holds the
/// session's lane.
fn stop(intake: &Intake, chat: i64, draft: i64) {
    if !intake.turns().outbox.streams().stop(chat, draft) {
        tracing::debug!("a Stop for a reply no longer being written");
    }
}

/// A batch's work, kept in the inbox, to the intake (a duplicate of an update taken
/// already is dropped).
async fn hand_over(intake: &Intake, routed: Vec<Routed>) {
    for Routed { id, lane, work } in routed {
        if intake.first_sight(id) {
            intake.hand_over(lane, work).await;
        } else {
            tracing::debug!("duplicate Telegram update ignored");
        }
    }
}

impl TelegramAdapter {
    pub fn new(api: TelegramApi, config: TelegramConfig, orchestrator: ForAdapters) -> Self {
        TelegramAdapter {
            api,
            config,
            orchestrator,
            health: Arc::new(AdapterHealth::new("telegram")),
        }
    }

    /// Connected or not, for `/healthz`.
    pub fn health(&self) -> Arc<AdapterHealth> {
        self.health.clone()
    }

    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), AdapterError> {
        let TelegramAdapter {
            api,
            config,
            orchestrator,
            health,
        } = self;
        let webhook = config.webhook.clone();
        let intake = start(api, config, orchestrator, false).await?;
        health.ok();
        match webhook {
            Some(webhook) => {
                health.set_role("poller", false);
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let served = webhook::serve(intake.clone(), &webhook, health.clone(), async {
                    let _ = stopped.await;
                });
                tokio::pin!(served);
                tokio::pin!(shutdown);
                let result = tokio::select! {
                    result = &mut served => result,
                    () = &mut shutdown => {
                        let _ = stop.send(());
                        served.await
                    }
                };
                if let Err(e) = result {
                    intake.finish().await;
                    health.set_stopped();
                    return Err(e);
                }
            }
            None => long_poll(&intake, &health, shutdown, None).await,
        }
        tracing::info!("Telegram adapter stopping; finishing turns in flight");
        intake.finish().await;
        health.set_stopped();
        Ok(())
    }
}

/// Whether this instance long-polls: always when alone; among several instances (one
/// database), while it holds [`POLLER_LEASE`] (each poll ends another's with 409), the
/// others standing by to take over once the lease expires.
struct Poller<'a> {
    orchestrator: &'a ForAdapters,
    health: &'a AdapterHealth,
    shared: bool,
    polling: bool,
}

impl<'a> Poller<'a> {
    fn new(orchestrator: &'a ForAdapters, health: &'a AdapterHealth) -> Self {
        let shared = orchestrator.instance().is_shared();
        health.set_role("poller", !shared);
        Poller {
            orchestrator,
            health,
            shared,
            polling: !shared,
        }
    }

    /// Among several instances polls are short enough to renew the lease in time.
    fn poll_timeout(&self, configured: Duration) -> Duration {
        if self.shared {
            configured.min(RENEW_EVERY)
        } else {
            configured
        }
    }

    /// Takes or renews the lease before a poll: `Some(fresh)` to poll (`fresh`: this
    /// instance has just become the poller), `None` to stand by.
    async fn may_poll(&mut self) -> Option<bool> {
        if !self.shared {
            return Some(false);
        }
        let holds = self.orchestrator.hold(POLLER_LEASE).await;
        let changed = holds != self.polling;
        if changed {
            tracing::info!(
                polling = holds,
                "Telegram poller lease {}",
                if holds { "taken" } else { "lost" }
            );
            self.polling = holds;
            self.health.set_role("poller", holds);
        }
        holds.then_some(changed)
    }

    /// Polling stopped: another instance may poll at once.
    async fn stop(&self) {
        if self.shared && self.polling {
            self.orchestrator.let_go(POLLER_LEASE).await;
        }
    }
}

/// Long polling until `shutdown` resolves: a batch's stops go straight to their replies,
/// Kaiwa's updates are kept in the inbox and queued in their lanes, the others go to
/// `host` (a host bot's dispatcher; without one they are not Kaiwa's business), and only
/// then is the batch confirmed (by the next poll's offset; the last one on the way out).
async fn long_poll(
    intake: &Intake,
    health: &AdapterHealth,
    shutdown: impl Future<Output = ()> + Send,
    host: Option<tokio::sync::mpsc::Sender<Update>>,
) {
    let ctx = intake.turns().clone();
    let api = &ctx.api;
    let poll_timeout = ctx.config.poll_timeout;
    tokio::pin!(shutdown);
    let mut offset: Option<i64> = None;
    let mut failures: u32 = 0;
    let mut last_logged: Option<Instant> = None;
    let mut poller = Poller::new(&ctx.orchestrator, health);
    let poll_timeout = poller.poll_timeout(poll_timeout);
    loop {
        match poller.may_poll().await {
            // a new poller starts from what Telegram has not had confirmed
            Some(true) => offset = None,
            Some(false) => {}
            None => tokio::select! {
                biased;
                () = &mut shutdown => break,
                () = tokio::time::sleep(RENEW_EVERY) => continue,
            },
        }
        let polled = tokio::select! {
            biased;
            () = &mut shutdown => break,
            polled = polling::poll(api, offset, poll_timeout) => polled,
        };
        let batch = match polled {
            Ok(batch) => batch,
            Err(error) => {
                health.failed();
                failures += 1;
                if last_logged.is_none_or(|t| t.elapsed() >= FAILURE_LOG_EVERY) {
                    tracing::warn!(%error, failures, "Telegram long polling failed; retrying");
                    last_logged = Some(Instant::now());
                }
                let wait = match error {
                    api::CallError::RetryAfter(wait) => wait,
                    _ => api::backoff(failures).min(MAX_POLL_BACKOFF),
                };
                tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(wait) => continue,
                }
            }
        };
        health.ok();
        for &(chat, draft) in &batch.stops {
            stop(intake, chat, draft);
        }
        if failures > 0 {
            tracing::info!(failures, "Telegram long polling works again");
            failures = 0;
            last_logged = None;
        }
        match keep(intake, batch.updates).await {
            Ok((routed, others)) => {
                if let Some(host) = &host {
                    for update in others {
                        if host.send(update).await.is_err() {
                            // the host's dispatcher is gone: so is its listener
                            tracing::info!("the host's dispatcher stopped listening");
                            return;
                        }
                    }
                }
                // confirmed by the next poll: everything in it is in the inbox (or the
                // host's hands) now
                offset = batch.next_offset.or(offset);
                hand_over(intake, routed).await;
            }
            Err(error) => {
                // not confirmed: the same batch comes again
                tracing::error!(%error, "received messages could not be stored; polling them again");
                tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(MAX_POLL_BACKOFF) => {}
                }
            }
        }
    }
    poller.stop().await;
    if let Some(offset) = offset {
        // confirm the last batch now rather than have it sent again at the next start
        let confirm = polling::confirm(api, offset);
        if tokio::time::timeout(Duration::from_secs(3), confirm)
            .await
            .is_err()
        {
            tracing::debug!("the last batch stays unconfirmed; the store deduplicates it");
        }
    }
}

/// Routes a batch and keeps Kaiwa's messages in the inbox, committed: only then may the
/// batch be confirmed to Telegram. An update taken already (Telegram delivers again what
/// it had no confirmation of) is dropped first, before anything is written. Returns
/// Kaiwa's work and the updates that are not Kaiwa's.
async fn keep(
    intake: &Intake,
    updates: Vec<Update>,
) -> Result<(Vec<Routed>, Vec<Update>), AdapterError> {
    let ctx = intake.turns();
    let mut routed = Vec::with_capacity(updates.len());
    let mut rest = Vec::new();
    for update in updates {
        if !intake.is_new(&updates::update_key(update.id)) {
            tracing::debug!("duplicate Telegram update ignored");
            continue;
        }
        match ctx.route(&update).await? {
            Some(r) => routed.push(r),
            None => rest.push(update),
        }
    }
    let kept: Vec<_> = routed
        .iter()
        .filter_map(|r| r.work.kept())
        .cloned()
        .collect();
    if !kept.is_empty() {
        ctx.orchestrator.keep(&kept).await?;
    }
    Ok((routed, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_back_to_places() {
        let key = SessionKey {
            platform: Platform::Telegram,
            chat: "-100123".into(),
            thread: "42".into(),
            user: "7".into(),
        };
        let place = Place::from_key(&key).ok();
        assert_eq!(
            place,
            Some(Place {
                chat: ChatId(-100123),
                topic: Some(ThreadId(MessageId(42)))
            })
        );
        let bad = SessionKey {
            chat: "console".into(),
            ..key
        };
        assert!(Place::from_key(&bad).is_err());
    }
}

//! The Slack adapter: Socket Mode (default: a WebSocket Slack opens to the app, no public
//! URL) or the Events API (signed HTTP requests, for several instances behind a load
//! balancer), both through the shared intake ([`crate::intake`]), lanes, outbox and
//! durable inbox the other adapters use.
//!
//! - Direct messages run the DM flow (an interview by default). A message in a help-desk
//!   or reading channel starts a conversation in the thread under it (`thread_ts`): the
//!   thread is the session (key: channel + thread + user).
//! - Options: a single choice → buttons (25 per block), several → a multi-select menu;
//!   action ids carry the request's short id and an option index
//!   ([`crate::interaction::Press`]). A press shows the choice in place of the buttons; a
//!   stale or foreign one gets an ephemeral notice and changes nothing.
//! - `/kaiwa …` is the slash command for the personal commands (`/kaiwa mydata`) and, in
//!   the admin channel, the admin commands; in a channel its answers are ephemeral.
//! - The admin channel gets audit summaries and handoffs with their buttons (Approve,
//!   Reject, Take over, Hand back); a session's notices share a thread, and a person's
//!   reply in that thread goes to the conversation they hold.
//! - Web API calls that hit a 429 wait out `Retry-After` for that channel only
//!   ([`SlackApi`]); replies stream as an edited message with a Stop button within the
//!   workspace's budget of edits; long answers are split at [`MESSAGE_LIMIT`].
//! - Where things are: `socket.rs`, `events_api.rs` (the two transports), `receive.rs`
//!   (what either delivers, as turns), `work.rs` (Slack's work in the intake),
//!   `outbox.rs`, `blocks.rs` (Block Kit), `api.rs` (the Web API).

use crate::{AdapterError, AdapterHealth};
use kaiwa_core::message::Platform;
use kaiwa_core::orchestrator::ForAdapters;
use std::future::Future;
use std::sync::Arc;

mod api;
mod blocks;
mod events_api;
mod outbox;
mod receive;
mod socket;
mod work;

pub use api::{SLACK_API, SlackApi, SlackError};
pub use blocks::STOP_ID;
pub use outbox::{SlackAdminSink, SlackOutbox};
use receive::Receiver;
use work::{Intake, SlackTurns};

/// The longest message Kaiwa posts (Slack shows up to 4,000 characters of a message's text
/// before it truncates): longer answers are split.
pub const MESSAGE_LIMIT: usize = 3900;

/// The Events API's transport: where to listen, and the signing secret.
#[derive(Clone)]
pub struct EventsApi {
    pub listen: String,
    pub path: String,
    /// From the environment; never logged.
    pub signing_secret: String,
}

/// How the adapter is set up (from `[slack]` in the configuration).
#[derive(Clone)]
pub struct SlackConfig {
    /// Where audit summaries and handoffs go.
    pub admin_channel_id: Option<String>,
    /// Channels where a new message starts a help-desk thread.
    pub helpdesk_channel_ids: Vec<String>,
    /// Channels where a new message starts a reading thread.
    pub reading_channel_ids: Vec<String>,
    /// The flow direct messages run (`None`: the default flow) and its argument.
    pub dm_flow: Option<String>,
    pub dm_flow_arg: Option<String>,
    /// Direct messages are Kaiwa's.
    pub dms: bool,
    /// The Events API instead of Socket Mode.
    pub events: Option<EventsApi>,
}

impl std::fmt::Debug for SlackConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackConfig")
            .field("admin_channel_id", &self.admin_channel_id)
            .field("helpdesk_channel_ids", &self.helpdesk_channel_ids)
            .field("reading_channel_ids", &self.reading_channel_ids)
            .field("events", &self.events.as_ref().map(|e| &e.listen))
            .finish()
    }
}

/// The running adapter: Socket Mode or the Events API until `shutdown` resolves.
pub struct SlackAdapter {
    api: SlackApi,
    config: SlackConfig,
    orchestrator: ForAdapters,
    health: Arc<AdapterHealth>,
}

impl SlackAdapter {
    pub fn new(api: SlackApi, config: SlackConfig, orchestrator: ForAdapters) -> Self {
        SlackAdapter {
            api,
            config,
            orchestrator,
            health: Arc::new(AdapterHealth::new("slack")),
        }
    }

    pub fn health(&self) -> Arc<AdapterHealth> {
        self.health.clone()
    }

    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), AdapterError> {
        let SlackAdapter {
            api,
            config,
            orchestrator,
            health,
        } = self;
        let outbox = Arc::new(SlackOutbox::new(api.clone()));
        // decisions and a person's replies reach users outside their turns through it too
        orchestrator.register_outbox(Platform::Slack, outbox.clone());
        let turns = SlackTurns {
            outbox,
            orchestrator: orchestrator.clone(),
        };
        let intake: Arc<Intake> = Intake::new(Arc::new(turns), orchestrator.clone());
        intake.begin().await;
        let events = config.events.clone();
        let receiver = Arc::new(Receiver {
            api,
            config,
            orchestrator,
            intake: intake.clone(),
            health: health.clone(),
        });
        let result = match &events {
            Some(events) => {
                events_api::serve(
                    receiver,
                    (&events.listen, &events.path),
                    &events.signing_secret,
                    shutdown,
                )
                .await
            }
            None => socket::run(receiver, shutdown).await,
        };
        tracing::info!("Slack adapter stopping");
        // the turns queued finish (the binary's grace period bounds this)
        intake.finish().await;
        health.set_stopped();
        result
    }
}

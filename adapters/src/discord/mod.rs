//! The Discord adapter (serenity): gateway events turned into [`Incoming`](kaiwa_core::message::Incoming)s, replies rendered
//! as messages, buttons, select menus and embeds.
//!
//! - A new message in a help-desk channel opens a thread named after the question; the
//!   thread is the session (key: channel + thread + user) and the bot answers inside it.
//!   Reading channels open a thread per book the same way. Direct messages run the DM flow
//!   (an interview by default).
//! - Options: single choice → buttons (5 per row, 5 rows); multi-select → a select menu.
//!   Custom ids carry the request's short id and an option index ([`Press`]). Every
//!   interaction is answered at once (the message is updated to show the choice, its
//!   components disabled) and the turn runs after; a stale or foreign component gets an
//!   ephemeral notice and changes nothing.
//! - Slash commands are registered at start-up one by one (English names, Japanese
//!   descriptions too; a command already current is left alone, and nothing else of the
//!   application's is touched) and deferred while the turn runs.
//! - Beside a host bot's event handlers ([`DiscordPlugin`]) it handles only its channels,
//!   DMs, components ([`NAMESPACE`]) and commands; the host's are left to the host.
//! - REST calls that hit a 429 are waited out and sent again ([`DiscordApi`]); with the
//!   built-in rate limiter on (production, no `api_proxy`) serenity already does this.
//! - Replies that need no vetting stream while the model writes them (`edits.rs`): one
//!   message with a Stop button, edited about once a second; the final reply is edited in.
//! - A message is processed once: recent ids are remembered in memory (the shared intake,
//!   [`crate::intake`]) and every turn is deduplicated by the store.
//! - Where things are: `gateway.rs` (the handler: the gateway's lifecycle, each event to
//!   its kind), `messages.rs`, `interactions.rs`, `work.rs` (Discord's work in the intake).

use crate::{AdapterError, AdapterHealth};
use kaiwa_core::orchestrator::ForAdapters;
use serenity::all::GatewayIntents;
use std::future::Future;
use std::sync::Arc;

mod api;
mod catch_up;
mod components;
mod edits;
mod gateway;
mod interactions;
mod messages;
mod outbox;
mod places;
mod plugin;
mod shards;
mod work;

use crate::discord::places::Parents;
pub use crate::interaction::{NAMESPACE, Press};
pub use api::{DiscordApi, PERMISSIONS, application, build_http, invite_url};
pub use components::components;
pub use edits::STOP_ID;
use gateway::Handler;
pub use outbox::{DiscordAdminSink, DiscordOutbox, notice_embed};
pub use plugin::DiscordPlugin;
pub use shards::{ShardRange, shard_of};
use work::{DiscordTurns, Intake};

/// Discord's limit on one message's content, in characters.
pub const MESSAGE_LIMIT: usize = 2000;

/// How the adapter is set up (from `[discord]` in the configuration).
#[derive(Clone)]
pub struct DiscordConfig {
    /// The bot token (from the environment; never logged).
    pub token: String,
    /// Where audit summaries and handoffs go (as embeds).
    pub admin_channel_id: Option<u64>,
    /// Channels where a new message opens a help-desk thread.
    pub helpdesk_channel_ids: Vec<u64>,
    /// Channels where a new message opens a reading thread.
    pub reading_channel_ids: Vec<u64>,
    /// An HTTP proxy base URL for the REST API (a shared rate-limit proxy, or a test's
    /// fake). With it serenity's own rate limiter is off and 429s are waited out here.
    pub api_proxy: Option<String>,
    /// The flow direct messages run (`None`: the default flow) and its argument.
    pub dm_flow: Option<String>,
    pub dm_flow_arg: Option<String>,
    /// Direct messages are Kaiwa's (`false`: left to a host bot, or ignored).
    pub dms: bool,
    /// The gateway shards this instance runs; `None`: all of the count Discord recommends.
    pub shards: Option<ShardRange>,
}

impl std::fmt::Debug for DiscordConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordConfig")
            .field("token", &"<redacted>")
            .field("admin_channel_id", &self.admin_channel_id)
            .field("helpdesk_channel_ids", &self.helpdesk_channel_ids)
            .field("reading_channel_ids", &self.reading_channel_ids)
            .field("api_proxy", &self.api_proxy)
            .field("shards", &self.shards)
            .finish()
    }
}

/// The running adapter: the gateway until `shutdown` resolves.
pub struct DiscordAdapter {
    api: DiscordApi,
    config: DiscordConfig,
    orchestrator: ForAdapters,
    health: Arc<AdapterHealth>,
}

impl DiscordAdapter {
    pub fn new(api: DiscordApi, config: DiscordConfig, orchestrator: ForAdapters) -> Self {
        DiscordAdapter {
            api,
            config,
            orchestrator,
            health: Arc::new(AdapterHealth::new("discord")),
        }
    }

    pub fn health(&self) -> Arc<AdapterHealth> {
        self.health.clone()
    }

    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), AdapterError> {
        let DiscordAdapter {
            api,
            config,
            orchestrator,
            health,
        } = self;
        let handler = Arc::new(Handler::new(
            api,
            config.clone(),
            orchestrator,
            health,
            false,
        ));
        let intake = handler.intake.clone();
        let health = handler.health.clone();
        let orchestrator = handler.orchestrator.clone();
        let shared = orchestrator.instance().is_shared();
        // the client takes its own Http; both point at the same place with the same token
        let http = build_http(&config.token, config.api_proxy.as_deref());
        let range = match config.shards {
            Some(range) => range,
            None => {
                let gateway = http.get_bot_gateway().await.map_err(|e| {
                    AdapterError::Platform(format!("Discord: the recommended shard count: {e}"))
                })?;
                ShardRange::all(gateway.shards)
            }
        };
        health.set_info("shards", range.to_string());
        tokio::pin!(shutdown);
        if shared {
            // another instance may run these shards: stand by until it stops
            let mut told = false;
            while !shards::take(&orchestrator, range).await {
                if !told {
                    tracing::info!(shards = %range, "another instance runs these Discord shards; standing by");
                    told = true;
                }
                health.set_role("gateway", false);
                health.ok();
                tokio::select! {
                    biased;
                    () = &mut shutdown => {
                        health.set_stopped();
                        return Ok(());
                    }
                    () = tokio::time::sleep(kaiwa_core::orchestrator::RENEW_EVERY) => {}
                }
            }
            tracing::info!(shards = %range, "running the Discord shards");
            intake.start_claims();
        }
        health.set_role("gateway", true);
        let mut client = serenity::client::ClientBuilder::new_with_http(http, INTENTS)
            .event_handler_arc(handler)
            .await
            .map_err(|e| AdapterError::Platform(format!("Discord client: {e}")))?;
        let manager = client.shard_manager.clone();
        let lost = async {
            if shared {
                shards::keep(&orchestrator, range).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let stopper = async move {
            let lost = tokio::select! {
                () = &mut shutdown => false,
                () = lost => true,
            };
            tracing::info!("Discord adapter stopping");
            manager.shutdown_all().await;
            lost
        };
        let run = async {
            // serenity's range is inclusive of its end
            let result = client
                .start_shard_range(range.first..range.last, range.total)
                .await;
            if let Err(e) = &result {
                health.failed();
                tracing::error!("{}", gateway_error(e));
            }
            result
        };
        tokio::pin!(run);
        tokio::pin!(stopper);
        // a gateway that fails (a refused intent or token) ends the adapter at once
        let (result, lost) = tokio::select! {
            result = &mut run => (result, false),
            lost = &mut stopper => (run.await, lost),
        };
        // the turns queued finish (the binary's grace period bounds this)
        intake.finish().await;
        if shared {
            shards::let_go(&orchestrator, range).await;
        }
        health.set_role("gateway", false);
        health.set_stopped();
        if lost {
            return Err(AdapterError::Platform(format!(
                "Discord: lost the lease of shards {range} to another instance"
            )));
        }
        result.map_err(|e| AdapterError::Platform(gateway_error(&e)))
    }
}

/// What a gateway failure means for the operator: the fix for the two every new bot meets.
fn gateway_error(e: &serenity::Error) -> String {
    use serenity::all::GatewayError;
    match e {
        serenity::Error::Gateway(GatewayError::DisallowedGatewayIntents) => {
            "Discord refused the Message Content intent (gateway close 4014): turn it on in the \
             Developer Portal (your application → Bot → Privileged Gateway Intents → Message \
             Content Intent), then start Kaiwa again"
                .into()
        }
        serenity::Error::Gateway(GatewayError::InvalidAuthentication) => {
            "Discord refused the bot token (gateway close 4004): check the token in the variable \
             [discord] token_env names"
                .into()
        }
        e => format!("Discord gateway stopped: {e}"),
    }
}

/// The gateway intents Kaiwa needs: guild and direct messages with their content. A host
/// bot's client asks for these (and its own).
pub const INTENTS: GatewayIntents = GatewayIntents::GUILD_MESSAGES
    .union(GatewayIntents::DIRECT_MESSAGES)
    .union(GatewayIntents::MESSAGE_CONTENT);

impl Handler {
    fn new(
        api: DiscordApi,
        config: DiscordConfig,
        orchestrator: ForAdapters,
        health: Arc<AdapterHealth>,
        mounted: bool,
    ) -> Handler {
        let outbox = Arc::new(DiscordOutbox::new(api.clone()));
        // decisions and a person's replies reach users outside their turns through it too
        orchestrator.register_outbox(kaiwa_core::message::Platform::Discord, outbox.clone());
        let turns = DiscordTurns {
            api: api.clone(),
            outbox,
            orchestrator: orchestrator.clone(),
        };
        let intake = Intake::new(Arc::new(turns), orchestrator.clone());
        Handler {
            api,
            orchestrator,
            config,
            health,
            parents: Parents::default(),
            intake,
            mounted,
            started: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaiwa_core::message::{OptionItem, OptionsRequest};

    #[test]
    fn custom_ids_round_trip_and_stay_short() {
        for press in [
            Press::Pick {
                request_id: "0123456789ab".into(),
                index: 24,
            },
            Press::Select {
                request_id: "0123456789ab".into(),
            },
        ] {
            let id = press.encode();
            assert!(id.len() <= 100);
            assert_eq!(Press::decode(&id), Some(press));
        }
        for bad in [
            "",
            "kaiwa|x|a|1",
            "other|p|a|1",
            "kaiwa|p||1",
            "kaiwa|p|a|x",
            "kaiwa|s|a|1",
        ] {
            assert_eq!(Press::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn single_choice_is_buttons_five_per_row_and_multi_select_a_menu() {
        let options: Vec<OptionItem> = (0..7)
            .map(|i| OptionItem::new(format!("v{i}"), format!("Option {i}")))
            .collect();
        let single = OptionsRequest::new("Pick", options.clone(), false);
        let rows = serde_json::to_value(components(&single, false)).unwrap_or_default();
        assert_eq!(rows.as_array().map(Vec::len), Some(2));
        assert_eq!(rows[0]["components"].as_array().map(Vec::len), Some(5));
        let multi = OptionsRequest::new("Pick", options, true);
        let rows = serde_json::to_value(components(&multi, true)).unwrap_or_default();
        assert_eq!(rows[0]["components"][0]["type"], 3);
        assert_eq!(rows[0]["components"][0]["max_values"], 7);
        assert_eq!(rows[0]["components"][0]["disabled"], true);
    }
}

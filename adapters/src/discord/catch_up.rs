//! Messages sent while the bot was away: the gateway does not deliver them later. At start
//! and after a gateway session that could not be resumed, every place with an open session
//! active in the last day has its latest messages fetched, and those newer than the
//! session's last turn go through the usual path in order (the store's deduplication drops
//! any already handled). With several shards each catches up its own places.

use super::gateway::Handler;
use super::outbox::channel_of;
use super::shards::shard_of;
use kaiwa_core::message::Platform;
use serenity::all::GetMessages;
use serenity::all::{Channel, ChannelId, Message};
use std::collections::HashMap;
use std::time::Duration;

/// Places looked at, most recently active first.
const PLACES: usize = 200;
/// Messages fetched per place (one REST call).
const PER_PLACE: u8 = 50;
/// Sessions idle for longer are not caught up.
const WINDOW_SECS: u64 = 24 * 3600;
/// Messages this much older than a session's last turn are looked at too (a message that
/// arrived while its turn was committing); handled ones are dropped as duplicates.
const MARGIN_SECS: i64 = 60;

impl Handler {
    /// Whether a session's place is in a server: a thread (DMs have none), or one of the
    /// channels the configuration names; else a DM.
    fn in_guild(&self, chat: &str, thread: &str) -> bool {
        let configured = chat.parse::<u64>().is_ok_and(|id| {
            self.flow_of_channel(id).is_some() || self.config.admin_channel_id == Some(id)
        });
        !thread.is_empty() || configured
    }

    /// Catches up the places of `shard` (its number and the shard count; `None` or one
    /// shard: every place): a guild's channels on its guild's shard, DMs on shard 0.
    /// The shard `channel`'s events come on: its guild's (looked up), 0 for a DM; `None`
    /// when the channel cannot be looked up.
    async fn shard_of_channel(
        &self,
        channel: ChannelId,
        in_guild: bool,
        total: u32,
    ) -> Option<u32> {
        if !in_guild {
            return Some(0);
        }
        let found = self
            .api
            .call("getChannel", |http| async move {
                channel.to_channel(&http).await
            })
            .await;
        match found {
            Ok(Channel::Guild(channel)) => Some(shard_of(Some(channel.guild_id.get()), total)),
            Ok(_) => Some(0),
            Err(e) => {
                tracing::warn!(error = %e, %channel, "could not look up a channel's server");
                None
            }
        }
    }

    pub(super) async fn catch_up(&self, shard: Option<(u32, u32)>) {
        let window = Duration::from_secs(WINDOW_SECS);
        let places = match self
            .orchestrator
            .active_places(Platform::Discord, window, PLACES * 4)
            .await
        {
            Ok(places) => places,
            Err(e) => {
                tracing::warn!(error = %e, "could not list the sessions to catch up");
                return;
            }
        };
        // channel → the earliest last turn of its sessions (a thread may hold several
        // users), and whether it is a server's (a message read over REST does not say)
        let mut since: HashMap<ChannelId, (i64, bool)> = HashMap::new();
        for place in &places {
            let Some(channel) = channel_of(&place.key.chat, &place.key.thread) else {
                continue;
            };
            if since.len() >= PLACES && !since.contains_key(&channel) {
                continue;
            }
            let in_guild = self.in_guild(&place.key.chat, &place.key.thread);
            let updated = place.last_turn.timestamp();
            let entry = since.entry(channel).or_insert((updated, in_guild));
            entry.0 = entry.0.min(updated);
        }
        let mut handled = 0;
        for (channel, (last_turn, in_guild)) in since {
            if let Some((shard, total)) = shard.filter(|(_, total)| *total > 1)
                && self.shard_of_channel(channel, in_guild, total).await != Some(shard)
            {
                continue;
            }
            let fetched = self
                .api
                .call("getMessages", |http| async move {
                    channel
                        .messages(&http, GetMessages::new().limit(PER_PLACE))
                        .await
                })
                .await;
            let mut missed: Vec<Message> = match fetched {
                Ok(messages) => messages
                    .into_iter()
                    .filter(|m| {
                        !m.author.bot && m.timestamp.unix_timestamp() >= last_turn - MARGIN_SECS
                    })
                    .collect(),
                Err(e) => {
                    tracing::warn!(error = %e, %channel, "could not fetch the messages missed");
                    continue;
                }
            };
            missed.sort_by_key(|m| m.id);
            for message in missed {
                handled += 1;
                self.on_message_in(message, in_guild).await;
            }
        }
        if handled > 0 {
            tracing::info!(
                messages = handled,
                "looked at the messages sent while the bot was away"
            );
        }
    }
}

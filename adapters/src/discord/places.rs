//! Which place a channel is: a help-desk or reading channel (a new message opens a thread
//! that is its own session), a thread of one, or a DM; the parents of threads are cached.

use super::DiscordConfig;
use super::api::DiscordApi;
use super::outbox::channel_of;
use dashmap::DashMap;
use serenity::all::{ChannelId, ChannelType};

/// Where a message belongs: the session's channel and thread, and the flow a new session runs.
pub(super) struct Place {
    pub(super) chat: String,
    pub(super) thread: String,
    pub(super) flow: Option<String>,
    pub(super) flow_arg: Option<String>,
}

/// Most channels whose parent the adapter keeps in memory.
const MAX_KNOWN_PARENTS: usize = 10_000;

/// Channel id → its parent channel (`None`: not a thread), looked up once per channel. It
/// starts over past [`MAX_KNOWN_PARENTS`]: a miss costs one REST call, and a bot in many
/// threads never grows it without bound.
#[derive(Default)]
pub(super) struct Parents(DashMap<u64, Option<u64>>);

impl Parents {
    pub(super) fn get(&self, channel: u64) -> Option<Option<u64>> {
        self.0.get(&channel).map(|known| *known)
    }

    pub(super) fn remember(&self, channel: u64, parent: Option<u64>) {
        if self.0.len() >= MAX_KNOWN_PARENTS {
            self.0.clear();
        }
        self.0.insert(channel, parent);
    }
}

/// Where replies to a place go (places are built from channel ids the gateway sent).
pub(super) fn target_of(place: &Place) -> ChannelId {
    channel_of(&place.chat, &place.thread).unwrap_or(ChannelId::new(1))
}

/// The flow whose channel `channel` is (help-desk or reading), if any.
pub(super) fn flow_of_channel(config: &DiscordConfig, channel: u64) -> Option<&'static str> {
    if config.helpdesk_channel_ids.contains(&channel) {
        Some("helpdesk")
    } else if config.reading_channel_ids.contains(&channel) {
        Some("reading")
    } else {
        None
    }
}

impl Parents {
    /// The parent channel of a thread (`None` for a plain channel), asked of Discord once.
    pub(super) async fn parent_of(&self, api: &DiscordApi, channel: ChannelId) -> Option<u64> {
        if let Some(known) = self.get(channel.get()) {
            return known;
        }
        let parent = match api
            .call("getChannel", |http| async move {
                channel.to_channel(&http).await
            })
            .await
        {
            Ok(serenity::all::Channel::Guild(c))
                if matches!(
                    c.kind,
                    ChannelType::PublicThread | ChannelType::PrivateThread
                ) =>
            {
                c.parent_id.map(ChannelId::get)
            }
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "could not look up a channel");
                return None;
            }
        };
        self.remember(channel.get(), parent);
        parent
    }
}

/// Where a message in `channel` belongs; `None` when the bot should stay silent.
pub(super) async fn place_of(
    config: &DiscordConfig,
    (parents, api): (&Parents, &DiscordApi),
    channel: ChannelId,
    dm: bool,
) -> Option<Place> {
    if dm {
        if !config.dms {
            return None;
        }
        return Some(Place {
            chat: channel.get().to_string(),
            thread: String::new(),
            flow: config.dm_flow.clone(),
            flow_arg: config.dm_flow_arg.clone(),
        });
    }
    let parent = parents.parent_of(api, channel).await?;
    let flow = flow_of_channel(config, parent)?;
    Some(Place {
        chat: parent.to_string(),
        thread: channel.get().to_string(),
        flow: Some(flow.into()),
        flow_arg: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_cache_stays_bounded_and_keeps_the_latest() {
        let parents = Parents::default();
        for channel in 0..(MAX_KNOWN_PARENTS as u64 + 5) {
            parents.remember(channel, Some(channel + 1));
        }
        assert!(parents.0.len() <= MAX_KNOWN_PARENTS);
        let last = MAX_KNOWN_PARENTS as u64 + 4;
        assert_eq!(parents.get(last), Some(Some(last + 1)));
        assert_eq!(parents.get(u64::MAX), None);
    }
}

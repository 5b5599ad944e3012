//! Which place a channel is: a help-desk or reading channel (a new message opens a thread
//! that is its own session), a thread of one, or a DM; the parents of threads are cached.

use super::*;

/// Where a message belongs: the session's channel and thread, and the flow a new session runs.
pub(super) struct Place {
    pub(super) chat: String,
    pub(super) thread: String,
    pub(super) flow: Option<String>,
    pub(super) flow_arg: Option<String>,
}

/// Most channels whose parent the adapter keeps in memory.
const MAX_KNOWN_PARENTS: usize = 10_000;

/// Where replies to a place go (places are built from channel ids the gateway sent).
pub(super) fn target_of(place: &Place) -> ChannelId {
    channel_of(&place.chat, &place.thread).unwrap_or(ChannelId::new(1))
}

impl Handler {
    pub(super) fn flow_of_channel(&self, channel: u64) -> Option<&'static str> {
        if self.config.helpdesk_channel_ids.contains(&channel) {
            Some("helpdesk")
        } else if self.config.reading_channel_ids.contains(&channel) {
            Some("reading")
        } else {
            None
        }
    }

    /// The parent channel of a thread (`None` for a plain channel).
    pub(super) async fn parent_of(&self, channel: ChannelId) -> Option<u64> {
        if let Some(known) = self.parents.get(&channel.get()) {
            return *known;
        }
        let parent = match self
            .api
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
        self.remember_parent(channel.get(), parent);
        parent
    }

    /// Caches a channel's parent; the cache starts over past [`MAX_KNOWN_PARENTS`] (a miss
    /// costs one REST call, so a bot in many threads never grows it without bound).
    pub(super) fn remember_parent(&self, channel: u64, parent: Option<u64>) {
        if self.parents.len() >= MAX_KNOWN_PARENTS {
            self.parents.clear();
        }
        self.parents.insert(channel, parent);
    }

    /// Where a message in `channel` belongs; `None` when the bot should stay silent.
    pub(super) async fn place_of(&self, channel: ChannelId, dm: bool) -> Option<Place> {
        if dm {
            return Some(Place {
                chat: channel.get().to_string(),
                thread: String::new(),
                flow: self.config.dm_flow.clone(),
                flow_arg: self.config.dm_flow_arg.clone(),
            });
        }
        let parent = self.parent_of(channel).await?;
        let flow = self.flow_of_channel(parent)?;
        Some(Place {
            chat: parent.to_string(),
            thread: channel.get().to_string(),
            flow: Some(flow.into()),
            flow_arg: None,
        })
    }
}

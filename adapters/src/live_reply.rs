//! What an adapter remembers of the replies it is streaming ([`Streams`]): the message that
//! shows a reply while it is written (the final reply replaces it), and where a user's Stop
//! goes. Shared by an adapter's outbox, its streamers and its listener (a Stop arrives as
//! an update or an interaction, outside the session's queue, which the running turn holds).

use kaiwa_core::llm::stream::Tap;
use kaiwa_core::message::SessionKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// The least time between two changes of one message a reply is streamed into (Discord
/// allows 5 edits per 5 s per channel; Telegram about one a second per chat), the final
/// reply's edit included.
pub const EDIT_EVERY: Duration = Duration::from_secs(1);

/// The message showing a reply so far, and when it last changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub message: String,
    pub changed: Instant,
}

impl Shown {
    /// Waits until the message may change again ([`EDIT_EVERY`] after its last change).
    pub async fn wait_to_edit(&self) {
        tokio::time::sleep_until(self.changed + EDIT_EVERY).await;
    }
}

/// Replies being streamed.
#[derive(Default)]
pub struct Streams {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// (place, stream id) → the reply's tap: a Telegram (chat, draft id), a Discord
    /// (channel, message id).
    stops: HashMap<(String, String), Weak<Tap>>,
    /// The message showing a session's reply so far, which its final text replaces.
    shown: HashMap<SessionKey, Shown>,
    /// Per place, when streamed replies last changed a message there (posts and edits),
    /// newest last: a platform's budget per place counts them.
    changes: HashMap<String, std::collections::VecDeque<Instant>>,
}

/// How many changes of streamed messages a place takes in a window, and the window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub changes: usize,
    pub per: Duration,
}

impl Streams {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // nothing here is left half-changed by a panic
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A Stop for (`place`, `id`) stops `tap` from now on.
    pub fn watch_stop(&self, place: impl ToString, id: impl ToString, tap: &Arc<Tap>) {
        self.lock()
            .stops
            .insert((place.to_string(), id.to_string()), Arc::downgrade(tap));
    }

    pub fn forget_stop(&self, place: impl ToString, id: impl ToString) {
        self.lock()
            .stops
            .remove(&(place.to_string(), id.to_string()));
    }

    /// A user's Stop: `true` when it stopped a reply being written.
    pub fn stop(&self, place: impl ToString, id: impl ToString) -> bool {
        let tap = self
            .lock()
            .stops
            .get(&(place.to_string(), id.to_string()))
            .and_then(Weak::upgrade);
        match tap {
            Some(tap) => {
                tap.stop();
                true
            }
            None => false,
        }
    }

    /// `message` shows `key`'s reply so far (it was just posted).
    pub fn set_shown(&self, key: &SessionKey, message: impl ToString) {
        let shown = Shown {
            message: message.to_string(),
            changed: Instant::now(),
        };
        self.lock().shown.insert(key.clone(), shown);
    }

    /// The message showing `key`'s reply was just edited.
    pub fn edited(&self, key: &SessionKey) {
        if let Some(shown) = self.lock().shown.get_mut(key) {
            shown.changed = Instant::now();
        }
    }

    /// A streamed reply changed a message in `place` (a post or an edit).
    pub fn count_change(&self, place: impl ToString, budget: Budget) {
        let now = Instant::now();
        let mut inner = self.lock();
        let changes = inner.changes.entry(place.to_string()).or_default();
        changes.push_back(now);
        while changes.len() > budget.changes {
            changes.pop_front();
        }
        // places quiet for a window are forgotten
        inner.changes.retain(|_, c| {
            c.back()
                .is_some_and(|t| now.duration_since(*t) < budget.per)
        });
    }

    /// Whether `place` has no streamed change left in its budget now.
    pub fn spent(&self, place: impl ToString, budget: Budget) -> bool {
        let now = Instant::now();
        self.lock()
            .changes
            .get(&place.to_string())
            .is_some_and(|c| {
                c.len() >= budget.changes
                    && c.front()
                        .is_some_and(|t| now.duration_since(*t) < budget.per)
            })
    }

    /// How long a streamed reply in `place` waits before its next change: at least
    /// `least`, and longer once `budget` is spent (until the oldest change in the window
    /// leaves it).
    pub fn pace(&self, place: impl ToString, least: Duration, budget: Budget) -> Duration {
        let inner = self.lock();
        let Some(changes) = inner.changes.get(&place.to_string()) else {
            return least;
        };
        if changes.len() < budget.changes {
            return least;
        }
        let free_at = changes
            .front()
            .map_or_else(Instant::now, |t| *t + budget.per);
        free_at.saturating_duration_since(Instant::now()).max(least)
    }

    /// The message showing `key`'s reply so far, forgotten: the caller replaces or
    /// removes it.
    pub fn take_shown(&self, key: &SessionKey) -> Option<Shown> {
        self.lock().shown.remove(key)
    }
}

/// Whether `text` holds a sentence (a group sees the first message once there is one,
/// not a word or two).
pub fn has_sentence(text: &str) -> bool {
    text.trim_end()
        .char_indices()
        .any(|(_, c)| matches!(c, '.' | '!' | '?' | '。' | '！' | '？' | '\n'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_reach_their_reply_and_shown_messages_are_taken_once() {
        let streams = Streams::default();
        let tap = Tap::new();
        streams.watch_stop(42, 7, &tap);
        assert!(!streams.stop(42, 8));
        assert!(streams.stop(42, 7));
        assert!(tap.was_stopped());
        streams.forget_stop(42, 7);
        assert!(!streams.stop(42, 7));

        let key = SessionKey {
            platform: kaiwa_core::message::Platform::Telegram,
            chat: "1".into(),
            thread: String::new(),
            user: "1".into(),
        };
        streams.set_shown(&key, 99);
        assert_eq!(
            streams.take_shown(&key).map(|s| s.message).as_deref(),
            Some("99")
        );
        assert_eq!(streams.take_shown(&key), None);
        assert!(has_sentence("One. Two"));
        assert!(has_sentence("読みました。"));
        assert!(!has_sentence("Half a"));
    }

    #[test]
    fn a_place_s_budget_of_streamed_changes_is_kept() {
        let streams = Streams::default();
        let budget = Budget {
            changes: 3,
            per: Duration::from_secs(60),
        };
        let least = Duration::from_secs(1);
        assert_eq!(streams.pace(-100, least, budget), least);
        for _ in 0..2 {
            streams.count_change(-100, budget);
        }
        assert!(!streams.spent(-100, budget));
        assert_eq!(streams.pace(-100, least, budget), least);
        streams.count_change(-100, budget);
        assert!(streams.spent(-100, budget), "three changes in the minute");
        assert!(
            streams.pace(-100, least, budget) > Duration::from_secs(55),
            "the next waits for the first to leave the window"
        );
        assert!(!streams.spent(-200, budget), "another group has its own");
    }
}

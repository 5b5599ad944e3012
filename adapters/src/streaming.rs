//! What an adapter remembers of the replies it is streaming ([`Streams`]): the message that
//! shows a reply while it is written (the final reply replaces it), and where a user's Stop
//! goes. Shared by an adapter's outbox, its streamers and its listener (a Stop arrives as
//! an update or an interaction, outside the session's queue, which the running turn holds).

use kaiwa_core::llm::stream::Tap;
use kaiwa_core::message::SessionKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

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
    shown: HashMap<SessionKey, String>,
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

    /// `message` shows `key`'s reply so far.
    pub fn set_shown(&self, key: &SessionKey, message: impl ToString) {
        self.lock().shown.insert(key.clone(), message.to_string());
    }

    /// The message showing `key`'s reply so far, forgotten: the caller replaces or
    /// removes it.
    pub fn take_shown(&self, key: &SessionKey) -> Option<String> {
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
        assert_eq!(streams.take_shown(&key).as_deref(), Some("99"));
        assert_eq!(streams.take_shown(&key), None);
        assert!(has_sentence("One. Two"));
        assert!(has_sentence("読みました。"));
        assert!(!has_sentence("Half a"));
    }
}

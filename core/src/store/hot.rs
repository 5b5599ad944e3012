//! The hot-session cache of [`super::sqlite::SqliteStore`]: active sessions and their newest
//! messages as the writer last committed them, so that most turns read nothing from the
//! database ([`super::Store::load_for_turn`] without a round trip to a reader connection,
//! the largest part of a turn's CPU otherwise).
//!
//! The database stays the truth, and the cache only answers what it knows exactly:
//! - **Dedupe.** A turn may skip the database only for an update known *not* processed. A
//!   bloom filter holds every update id processed — those committed before the store opened
//!   (read once, in the background, at open) and each one the writer commits since — and a
//!   bloom filter never says "absent" for something it holds. Until the read at open is done,
//!   or when the filter says "maybe", the turn reads the database as before.
//! - **Session and history.** An entry is filled from a database read or by the writer when
//!   a session starts; each commit moves it on only from the version it holds (anything else
//!   drops it), a finished session drops it, and deletions outside turns (`/forget`,
//!   retention) drop what they touch and keep reads that started before them from filling.
//!   A commit's optimistic version check stays: a stale entry could only make a turn fail
//!   with a conflict, never write over a newer state.
//!
//! On SQLite the store is the database's only writer of sessions and processed updates (one
//! bot process per database). On PostgreSQL ([`HotSessions::fenced`]) other instances write
//! the same rows, and the cache answers only while this instance may hold the chat:
//! - an entry is answered for [`HotSessions::fenced`]'s `ttl` (a chat lease's life) after the
//!   commit or read that last confirmed it, then read again; an instance paused past that
//!   (its lease taken by another) never answers from what it had;
//! - the session's `version`, checked by every commit, is the fence: a turn started from a
//!   stale entry fails with a conflict instead of writing over a newer turn, and the entry
//!   goes;
//! - the filter holds only what this instance processed ("complete" from the start): an
//!   update another instance processed is found by the commit's `processed_updates` key,
//!   which refuses the turn as a duplicate before anything is delivered.

use super::{ProcessedUpdate, SessionRecord, SessionStatus, StoredMessage, TurnLoad};
use crate::message::{Platform, SessionKey};
use growable_bloom_filter::GrowableBloom;
use hashlink::LruCache;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Sessions kept; past this the least recently used goes (twice the 1,000 concurrent sessions
/// of the bench's target; each holds its state and [`HOT_HISTORY`] messages).
pub(crate) const HOT_SESSIONS: usize = 2_048;

/// Newest messages kept per session: at least the history a turn asks for (the
/// orchestrator's 20), or every such turn would read the database.
pub(crate) const HOT_HISTORY: usize = 24;

/// The chance that the filter sends a turn of a new update to the database anyway.
const FALSE_POSITIVES: f64 = 0.01;

pub(crate) struct HotSessions {
    inner: Mutex<Inner>,
    /// How long an entry answers after it was last confirmed (`None`: until it goes).
    ttl: Option<Duration>,
}

impl Default for HotSessions {
    fn default() -> Self {
        HotSessions {
            inner: Mutex::new(Inner {
                sessions: LruCache::new(HOT_SESSIONS),
                processed: GrowableBloom::new(FALSE_POSITIVES, 100_000),
                complete: false,
                epoch: 0,
            }),
            ttl: None,
        }
    }
}

impl HotSessions {
    /// The cache of one instance among several on a shared database (see the module's
    /// notes): entries answer for `ttl` after they were last confirmed, and the filter
    /// needs no reading at open.
    pub(crate) fn fenced(ttl: Duration) -> HotSessions {
        let hot = HotSessions {
            ttl: Some(ttl),
            ..HotSessions::default()
        };
        hot.mark_complete();
        hot
    }
}

struct Inner {
    sessions: LruCache<SessionKey, Hot>,
    /// Every processed update id the store knows of.
    processed: GrowableBloom,
    /// The processed updates committed before the store opened are all in `processed`.
    complete: bool,
    /// Bumped by every deletion outside a turn: a read that started before one fills nothing.
    epoch: u64,
}

struct Hot {
    session: SessionRecord,
    /// The newest messages, oldest first.
    history: VecDeque<StoredMessage>,
    /// `history` is every message of the session.
    whole: bool,
    /// When a commit or a read last confirmed the entry.
    confirmed: Instant,
}

/// What the writer did with one turn, for [`HotSessions::apply`].
pub(crate) enum HotChange {
    Committed(Box<HotTurn>),
    /// Refused, rolled back, or not known exactly: the key's entry goes (the database
    /// decides next time), and its update id counts as maybe processed (a "maybe" only
    /// costs a read, a wrong "no" would run a turn twice).
    Dropped {
        key: SessionKey,
        processed: Option<ProcessedUpdate>,
    },
}

impl HotChange {
    /// The same turn, its transaction rolled back after all.
    pub(crate) fn into_dropped(self) -> HotChange {
        match self {
            HotChange::Committed(turn) => HotChange::Dropped {
                key: turn.session.key,
                processed: turn.processed,
            },
            dropped => dropped,
        }
    }
}

/// What one committed turn changed.
pub(crate) struct HotTurn {
    /// The version the turn started from (0 for a new session).
    pub loaded_version: i64,
    /// The session as the commit left it.
    pub session: SessionRecord,
    pub processed: Option<ProcessedUpdate>,
    /// The messages the commit wrote, in order.
    pub messages: Vec<StoredMessage>,
}

/// How an update id goes into the filter (the same tuple everywhere).
fn update_id<'a>(
    platform: &'a str,
    chat: &'a str,
    message_id: &'a str,
) -> (&'a str, &'a str, &'a str) {
    (platform, chat, message_id)
}

impl HotSessions {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // nothing here panics midway through a change; a poisoned lock still holds whole data
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A turn's read, if the cache knows all of it: `message_id` not processed, the key's
    /// active session and at least `history` of its newest messages (or all it has).
    pub(crate) fn load(
        &self,
        key: &SessionKey,
        message_id: &str,
        history: usize,
    ) -> Option<TurnLoad> {
        let mut inner = self.lock();
        if !inner.complete
            || (!message_id.is_empty()
                && inner.processed.contains(update_id(
                    key.platform.as_str(),
                    &key.chat,
                    message_id,
                )))
        {
            return None;
        }
        let hot = inner.sessions.get(key)?;
        if self.ttl.is_some_and(|ttl| hot.confirmed.elapsed() >= ttl) {
            inner.sessions.remove(key);
            return None;
        }
        let hot = inner.sessions.get(key)?;
        if hot.history.len() < history && !hot.whole {
            return None;
        }
        let skip = hot.history.len().saturating_sub(history);
        Some(TurnLoad {
            duplicate: false,
            session: Some(hot.session.clone()),
            history: hot.history.iter().skip(skip).cloned().collect(),
            ..TurnLoad::default()
        })
    }

    /// The deletion count, taken before a database read that may [`Self::fill`] the cache.
    pub(crate) fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Keeps what a database read found (`history`: its newest messages, oldest first;
    /// `whole` when that is all of them), unless a deletion came since `epoch` or the entry
    /// is there already (the writer's is as new or newer).
    pub(crate) fn fill(
        &self,
        epoch: u64,
        session: &SessionRecord,
        history: &[StoredMessage],
        whole: bool,
    ) {
        let mut inner = self.lock();
        if inner.epoch != epoch
            || session.status != SessionStatus::Active
            || inner.sessions.contains_key(&session.key)
        {
            return;
        }
        let hot = Hot::new(session.clone(), history.iter().cloned().collect(), whole);
        inner.sessions.insert(session.key.clone(), hot);
    }

    /// Applies what a batch did, in commit order (after its transaction ended).
    pub(crate) fn apply(&self, changes: Vec<HotChange>) {
        let mut inner = self.lock();
        for change in changes {
            let (processed, turn) = match change {
                HotChange::Committed(mut turn) => (turn.processed.take(), Some(*turn)),
                HotChange::Dropped { key, processed } => {
                    inner.sessions.remove(&key);
                    (processed, None)
                }
            };
            if let Some(p) = &processed {
                inner
                    .processed
                    .insert(update_id(p.platform.as_str(), &p.chat, &p.message_id));
            }
            let Some(turn) = turn else { continue };
            let key = turn.session.key.clone();
            if turn.session.status != SessionStatus::Active {
                inner.sessions.remove(&key);
            } else if turn.loaded_version == 0 {
                // a new session (a flow switch's finished one is replaced with it)
                inner
                    .sessions
                    .insert(key, Hot::new(turn.session, turn.messages.into(), true));
            } else {
                match inner.sessions.get_mut(&key) {
                    Some(hot)
                        if hot.session.id == turn.session.id
                            && hot.session.version == turn.loaded_version =>
                    {
                        hot.session = turn.session;
                        hot.history.extend(turn.messages);
                        hot.confirmed = Instant::now();
                        hot.trim();
                    }
                    Some(_) => {
                        inner.sessions.remove(&key);
                    }
                    None => {}
                }
            }
        }
    }

    /// Before and after deleting a user's data: drops their entries, and reads in flight
    /// fill nothing.
    pub(crate) fn forget_user(&self, platform: Platform, user: &str) {
        let mut inner = self.lock();
        inner.epoch += 1;
        let theirs: Vec<SessionKey> = inner
            .sessions
            .iter()
            .filter(|(key, _)| key.platform == platform && key.user == user)
            .map(|(key, _)| key.clone())
            .collect();
        for key in theirs {
            inner.sessions.remove(&key);
        }
    }

    /// Before and after deleting messages of many sessions (retention): drops every entry.
    pub(crate) fn clear(&self) {
        let mut inner = self.lock();
        inner.epoch += 1;
        inner.sessions.clear();
    }

    /// Update ids read from the database at open.
    pub(crate) fn add_processed<'a>(
        &self,
        ids: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) {
        let mut inner = self.lock();
        for (platform, chat, message_id) in ids {
            inner
                .processed
                .insert(update_id(platform, chat, message_id));
        }
    }

    /// Every update processed before the store opened is in the filter: from now on it
    /// answers "not processed" for the others.
    pub(crate) fn mark_complete(&self) {
        self.lock().complete = true;
    }

    /// Sessions held (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().sessions.len()
    }
}

impl Hot {
    /// An entry of `history` (`whole`: every message of the session), trimmed.
    fn new(session: SessionRecord, history: VecDeque<StoredMessage>, whole: bool) -> Hot {
        let mut hot = Hot {
            session,
            history,
            whole,
            confirmed: Instant::now(),
        };
        hot.trim();
        hot
    }

    /// Keeps the newest [`HOT_HISTORY`] messages.
    fn trim(&mut self) {
        while self.history.len() > HOT_HISTORY {
            self.history.pop_front();
            self.whole = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Role;
    use chrono::Utc;

    fn session(version: i64) -> SessionRecord {
        let key = SessionKey {
            platform: Platform::Telegram,
            chat: "c".into(),
            thread: String::new(),
            user: "u".into(),
        };
        let mut session = SessionRecord::draft(key, "interview");
        session.id = 7;
        session.version = version;
        session
    }

    fn message(id: i64) -> StoredMessage {
        StoredMessage {
            id,
            session_id: 7,
            role: Role::User,
            text: format!("message {id}"),
            at: Utc::now(),
        }
    }

    fn turn(loaded_version: i64, ids: std::ops::Range<i64>) -> HotChange {
        HotChange::Committed(Box::new(HotTurn {
            loaded_version,
            session: session(loaded_version + 1),
            processed: Some(ProcessedUpdate {
                platform: Platform::Telegram,
                chat: "c".into(),
                message_id: format!("update {loaded_version}"),
            }),
            messages: ids.map(message).collect(),
        }))
    }

    fn ready() -> HotSessions {
        let hot = HotSessions::default();
        hot.mark_complete();
        hot
    }

    #[test]
    fn an_entry_keeps_only_the_newest_messages() {
        let hot = ready();
        hot.fill(hot.epoch(), &session(1), &[message(1), message(2)], true);
        for v in 1..40 {
            hot.apply(vec![turn(v, v * 2 + 1..v * 2 + 3)]);
        }
        let held = hot
            .lock()
            .sessions
            .peek(&session(1).key)
            .map(|h| h.history.len());
        assert_eq!(held, Some(HOT_HISTORY));
        let load = hot.load(&session(1).key, "new", 20).expect("cached");
        assert_eq!(load.session.map(|s| s.version), Some(40));
        let ids: Vec<i64> = load.history.iter().map(|m| m.id).collect();
        assert_eq!(ids, (61..=80).collect::<Vec<_>>());
        // older than it keeps: not answered
        assert!(hot.load(&session(1).key, "new", HOT_HISTORY + 1).is_none());
        // an update it committed: not answered either (the database says "duplicate")
        assert!(hot.load(&session(1).key, "update 3", 20).is_none());
    }

    #[test]
    fn a_read_that_began_before_a_deletion_fills_nothing() {
        let hot = ready();
        let epoch = hot.epoch();
        hot.forget_user(Platform::Telegram, "u");
        hot.fill(epoch, &session(1), &[message(1)], true);
        assert!(hot.load(&session(1).key, "m", 20).is_none());
        hot.fill(hot.epoch(), &session(1), &[message(1)], true);
        assert!(hot.load(&session(1).key, "m", 20).is_some());
    }

    #[test]
    fn a_commit_from_another_version_drops_the_entry() {
        let hot = ready();
        hot.fill(hot.epoch(), &session(3), &[message(1)], true);
        hot.apply(vec![turn(2, 2..3)]);
        assert!(hot.load(&session(1).key, "m", 20).is_none());
        assert_eq!(hot.len(), 0);
    }

    #[test]
    fn a_dropped_turn_leaves_its_update_to_the_database() {
        let hot = ready();
        hot.fill(hot.epoch(), &session(1), &[message(1)], true);
        hot.apply(vec![HotChange::Dropped {
            key: session(1).key,
            processed: Some(ProcessedUpdate {
                platform: Platform::Telegram,
                chat: "c".into(),
                message_id: "x".into(),
            }),
        }]);
        assert_eq!(hot.len(), 0);
        hot.fill(hot.epoch(), &session(1), &[message(1)], true);
        assert!(
            hot.load(&session(1).key, "x", 20).is_none(),
            "maybe processed"
        );
        assert!(hot.load(&session(1).key, "y", 20).is_some());
    }

    #[test]
    fn nothing_is_answered_before_the_processed_updates_are_read() {
        let hot = HotSessions::default();
        hot.fill(hot.epoch(), &session(1), &[message(1)], true);
        assert!(hot.load(&session(1).key, "m", 20).is_none());
        hot.mark_complete();
        assert!(hot.load(&session(1).key, "m", 20).is_some());
    }

    #[test]
    fn a_fenced_entry_answers_only_while_its_lease_would_last() {
        let hot = HotSessions::fenced(Duration::from_millis(50));
        // nothing read at open: the filter is complete for this instance at once
        hot.fill(hot.epoch(), &session(1), &[message(1)], true);
        assert!(hot.load(&session(1).key, "new", 20).is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert!(
            hot.load(&session(1).key, "new", 20).is_none(),
            "an entry older than a lease is read again"
        );
        // a commit confirms it again
        hot.apply(vec![turn(0, 2..3)]);
        assert!(hot.load(&session(1).key, "newer", 20).is_some());
    }
}

//! The reads and deletions around turns that both backends run alike, written once over the
//! dialect layer ([`crate::store::db`]) and called from each backend's
//! [`crate::store::Store`] and [`crate::store::Inbox`] (whose write paths differ: SQLite's
//! writer thread, PostgreSQL's group commit, each beside its cache).

use crate::message::{Incoming, Platform};
use crate::store::db::{Db, query};
use crate::store::rows::{corrupt, message_from_row, ms, session_columns_of, session_from_row};
use crate::store::{SessionRecord, StoreError, StoredMessage};
use chrono::{DateTime, Utc};

/// Whether update `message_id` of `chat` was processed.
pub(crate) async fn is_processed(
    db: &Db,
    platform: Platform,
    chat: &str,
    message_id: &str,
) -> Result<bool, StoreError> {
    let row = query(
        "SELECT 1 FROM processed_updates WHERE platform = $1 AND chat = $2 AND message_id = $3",
    )
    .bind(platform.as_str())
    .bind(chat)
    .bind(message_id)
    .fetch_optional(db.read())
    .await
    .map_err(StoreError::db("checking processed updates"))?;
    Ok(row.is_some())
}

/// A session's assistant messages committed and not delivered, oldest first.
pub(crate) async fn undelivered(
    db: &Db,
    session_id: i64,
) -> Result<Vec<StoredMessage>, StoreError> {
    let sql = format!(
        "SELECT id, session_id, role, text, created_ms FROM messages WHERE session_id = $1 AND {} ORDER BY id",
        db.not_delivered("")
    );
    let rows = query(sql)
        .bind(session_id)
        .fetch_all(db.read())
        .await
        .map_err(StoreError::db("loading undelivered messages"))?;
    rows.iter().map(message_from_row).collect()
}

/// The sessions of `platform` with a reply not delivered, oldest reply first (through the
/// partial index of undelivered messages: a few at most).
pub(crate) async fn unreached_sessions(
    db: &Db,
    platform: Platform,
) -> Result<Vec<SessionRecord>, StoreError> {
    let sql = format!(
        "SELECT {} FROM sessions s JOIN \
         (SELECT session_id, min(id) AS first FROM messages WHERE {} GROUP BY session_id) AS u \
         ON s.id = u.session_id WHERE s.platform = $1 ORDER BY u.first",
        session_columns_of("s"),
        db.not_delivered("")
    );
    let rows = query(sql)
        .bind(platform.as_str())
        .fetch_all(db.read())
        .await
        .map_err(StoreError::db("listing sessions with undelivered replies"))?;
    rows.iter().map(session_from_row).collect()
}

/// Deletes the messages of sessions last active before `before`; the messages deleted.
pub(crate) async fn delete_transcripts_before(
    db: &Db,
    before: DateTime<Utc>,
) -> Result<u64, StoreError> {
    query(
        "DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE updated_ms < $1)",
    )
    .bind(ms(before))
    .execute(db.write())
    .await
    .map_err(StoreError::db("deleting old transcripts"))
}

/// Messages of `platform` kept and not finished, in the order they were kept.
pub(crate) async fn inbox_pending(
    db: &Db,
    platform: Platform,
) -> Result<Vec<Incoming>, StoreError> {
    let sql = format!(
        "SELECT incoming FROM inbox WHERE platform = $1 ORDER BY created_ms, {}",
        db.inbox_order()
    );
    let rows = query(sql)
        .bind(platform.as_str())
        .fetch_all(db.read())
        .await
        .map_err(StoreError::db("reading the inbox"))?;
    rows.iter()
        .map(|r| {
            let json: String = r.at(0).map_err(StoreError::db("reading the inbox"))?;
            serde_json::from_str(&json).map_err(|e| corrupt("inbox entry", e))
        })
        .collect()
}

/// How many sessions the database holds, active or finished.
pub(crate) async fn session_count(db: &Db) -> Result<i64, StoreError> {
    query("SELECT COUNT(*) FROM sessions")
        .fetch_one(db.read())
        .await
        .and_then(|r| r.at(0))
        .map_err(StoreError::db("counting sessions"))
}

/// What a turn needs first, in one round trip and one row: whether `message_id` was
/// processed in the key's chat, the key's active session and its newest `history` messages
/// (as one JSON array, so that the session's columns are not repeated per message), or
/// without one the user's chosen language and whether one ended in this place. Each
/// backend answers from its cache first.
pub(crate) async fn load_for_turn(
    db: &Db,
    key: &crate::message::SessionKey,
    message_id: &str,
    history: usize,
) -> Result<crate::store::TurnLoad, StoreError> {
    let messages = db.json_array_of(&format!(
        "{}(m.id, m.role, m.text, m.created_ms)",
        db.json_array()
    ));
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM processed_updates WHERE platform = $1 AND chat = $2 AND message_id = $3) AS dup, \
         {}, CASE WHEN s.id IS NULL THEN NULL ELSE CAST((SELECT {messages} \
         FROM (SELECT id, role, text, created_ms FROM messages WHERE session_id = s.id ORDER BY id DESC LIMIT $6) m) AS TEXT) END AS history, \
         CASE WHEN s.id IS NULL THEN (SELECT text FROM profile_entries WHERE platform = $1 AND user_id = $5 \
         AND kind = 'language' ORDER BY created_ms DESC, id DESC LIMIT 1) END AS chosen_language, \
         CASE WHEN s.id IS NULL THEN EXISTS (SELECT 1 FROM sessions f WHERE f.platform = $1 AND f.user_id = $5 \
         AND f.chat = $2 AND f.thread = $4 AND f.status = 'finished') ELSE (1 = 0) END AS ended_before \
         FROM (SELECT 1) AS one LEFT JOIN sessions s ON s.platform = $1 AND s.chat = $2 AND s.thread = $4 \
         AND s.user_id = $5 AND s.status = 'active'",
        session_columns_of("s")
    );
    let row = query(sql)
        .bind(key.platform.as_str())
        .bind(&key.chat)
        .bind(message_id)
        .bind(&key.thread)
        .bind(&key.user)
        .bind(i64::try_from(history).unwrap_or(i64::MAX))
        .fetch_one(db.read())
        .await
        .map_err(StoreError::db("loading the session"))?;
    crate::store::rows::turn_load_from_row(&row, message_id)
}

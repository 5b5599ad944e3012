//! What the browser console keeps and reads ([`Console`]): sign-in links and browser
//! sessions (only hashes of their tokens), and the team's overviews across users (every
//! help-desk ticket, sessions found by user, every reading record): the trait, its rows and
//! statements. Both backends run them through the queries written once in
//! `store/queries/console.rs`.

use super::reading::ReadingRecord;
use super::rows::{Columns, corrupt, from_ms, reading_record_from_row, ticket_from_row};
use super::{SessionRecord, StoreError, SubmissionRecord, Ticket};
use crate::message::Platform;
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// A new secret token: 244 random bits (two v4 UUIDs) as 64 hex digits.
pub fn new_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// What is stored of a token: its SHA-256, hex.
pub fn token_hash(token: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Someone from the team as the console knows them: an admin of a platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleAdmin {
    pub platform: Platform,
    pub user_id: String,
    pub name: String,
}

/// A browser signed in: whose, the CSRF token its forms carry, the admin list it was
/// opened under (a fingerprint), and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSession {
    pub admin: ConsoleAdmin,
    pub csrf: String,
    pub admins: String,
    pub expires_at: DateTime<Utc>,
}

/// A help-desk ticket with its session and user (the console's overview).
#[derive(Debug, Clone, PartialEq)]
pub struct TicketRecord {
    pub session_id: i64,
    pub platform: String,
    pub user_id: String,
    pub user_name: String,
    pub created_at: DateTime<Utc>,
    /// When someone took the conversation over after the user asked for a person.
    pub handled_at: Option<DateTime<Utc>>,
    pub ticket: Ticket,
}

/// A reading record with its reader (the console's reading club).
#[derive(Debug, Clone, PartialEq)]
pub struct ReaderRecord {
    pub platform: String,
    pub user_id: String,
    pub user_name: String,
    pub updated_at: DateTime<Utc>,
    pub record: ReadingRecord,
}

/// The console's sign-in and its overviews across users.
#[async_trait]
pub trait Console: Send + Sync {
    /// Keeps a sign-in link (the hash of its token) for `admin` until `expires_at`.
    async fn console_link_put(
        &self,
        token_hash: &str,
        admin: &ConsoleAdmin,
        expires_at: DateTime<Utc>,
    ) -> Result<(), StoreError>;
    /// Uses the link: its admin if it is unused and unexpired (then never again), `None`
    /// otherwise.
    async fn console_link_take(
        &self,
        token_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<ConsoleAdmin>, StoreError>;
    /// Keeps a signed-in browser's session (the hash of its cookie).
    async fn console_session_put(
        &self,
        token_hash: &str,
        session: &ConsoleSession,
    ) -> Result<(), StoreError>;
    /// The session of a cookie, if unexpired at `now`.
    async fn console_session(
        &self,
        token_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<ConsoleSession>, StoreError>;
    /// Ends a session (sign-out, a changed admin list); also drops expired links and
    /// sessions.
    async fn console_session_end(
        &self,
        token_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError>;
    /// The latest `limit` help-desk tickets, newest first.
    async fn all_tickets(&self, limit: i64) -> Result<Vec<TicketRecord>, StoreError>;
    /// Sessions whose user id is `user` or whose user's name contains it (any case), most
    /// recent first; every session when `user` is empty.
    async fn find_sessions(&self, user: &str, limit: i64)
    -> Result<Vec<SessionRecord>, StoreError>;
    /// The latest `limit` reading records of everyone, most recently updated first.
    async fn all_reading_records(&self, limit: i64) -> Result<Vec<ReaderRecord>, StoreError>;
    /// One stored submission by its id.
    async fn submission_by_id(&self, id: i64) -> Result<Option<SubmissionRecord>, StoreError>;
    /// The ids of session `session_id`'s bot messages that carry a turn's trace.
    async fn traced_messages(&self, session_id: i64) -> Result<Vec<i64>, StoreError>;
    /// The bot message of session `session_id` whose turn, committed at `at`, kept a trace
    /// (a ticket's answer, say: written in the same commit).
    async fn traced_message_at(
        &self,
        session_id: i64,
        at: DateTime<Utc>,
    ) -> Result<Option<i64>, StoreError>;
    /// The model calls of the turn that wrote message `message_id` of session `session_id`:
    /// the ledger's rows of that session since the turn before it was committed.
    async fn turn_calls(
        &self,
        session_id: i64,
        message_id: i64,
    ) -> Result<Vec<crate::store::LlmCallRecord>, StoreError>;
    /// The trace (JSON) kept with message `message_id` of session `session_id`.
    async fn message_trace(
        &self,
        session_id: i64,
        message_id: i64,
    ) -> Result<Option<String>, StoreError>;
}

pub(crate) const LINK_PUT: &str = "INSERT INTO console_links (token_hash, platform, user_id, name, expires_ms) VALUES ($1, $2, $3, $4, $5)";
pub(crate) const LINK_TAKE: &str = "UPDATE console_links SET used_ms = $2 \
     WHERE token_hash = $1 AND used_ms IS NULL AND expires_ms > $2 \
     RETURNING platform, user_id, name";
pub(crate) const SESSION_PUT: &str = "INSERT INTO console_sessions (token_hash, platform, user_id, name, csrf, admins, expires_ms) \
     VALUES ($1, $2, $3, $4, $5, $6, $7)";
pub(crate) const SESSION_GET: &str = "SELECT platform, user_id, name, csrf, admins, expires_ms FROM console_sessions \
     WHERE token_hash = $1 AND expires_ms > $2";
pub(crate) const SESSION_END: &str = "DELETE FROM console_sessions WHERE token_hash = $1";
pub(crate) const SESSIONS_EXPIRED: &str = "DELETE FROM console_sessions WHERE expires_ms <= $1";
/// Used links stay a day (a second use says "used"), then go.
pub(crate) const LINKS_EXPIRED: &str = "DELETE FROM console_links WHERE expires_ms <= $1";
pub(crate) const ALL_TICKETS: &str = "SELECT t.*, s.platform AS platform, s.user_id AS user_id, \
       COALESCE(u.display_name, s.user_id) AS user_name \
     FROM helpdesk_tickets t JOIN sessions s ON s.id = t.session_id \
     LEFT JOIN users u ON u.platform = s.platform AND u.user_id = s.user_id \
     ORDER BY t.created_ms DESC, t.id DESC LIMIT $1";
/// A conversation taken over: its requests for a person are handled (`$1` session, `$2`
/// now).
pub(crate) const TICKETS_HANDLED: &str = "UPDATE helpdesk_tickets SET handled_ms = $2 \
     WHERE session_id = $1 AND feedback = 'human' AND handled_ms IS NULL";
pub(crate) const SUBMISSION_BY_ID: &str = "SELECT * FROM submissions WHERE id = $1";
pub(crate) const ALL_READING: &str = "SELECT r.id, r.title, r.author, r.details, r.status, r.interaction_mode, r.started_ms, \
       r.finished_ms, r.updated_ms, r.platform, r.user_id, COALESCE(u.display_name, r.user_id) AS user_name \
     FROM reading_records r LEFT JOIN users u ON u.platform = r.platform AND u.user_id = r.user_id \
     ORDER BY r.updated_ms DESC, r.id DESC LIMIT $1";

/// [`Console::find_sessions`]'s statement over `columns` (the sessions' columns as `s.`).
pub(crate) fn find_sessions_sql(columns: &str) -> String {
    format!(
        "SELECT {columns} FROM sessions s \
         LEFT JOIN users u ON u.platform = s.platform AND u.user_id = s.user_id \
         WHERE $1 = '' OR s.user_id = $1 OR LOWER(COALESCE(u.display_name, '')) LIKE $2 ESCAPE '\\' \
         ORDER BY s.updated_ms DESC, s.id DESC LIMIT $3"
    )
}

/// `user` as a `LIKE` pattern for a name containing it (its `%` and `_` taken literally).
pub(crate) fn name_pattern(user: &str) -> String {
    let mut escaped = String::new();
    for c in user.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    format!("%{escaped}%")
}

pub(crate) fn admin_from_row(row: &impl Columns) -> Result<ConsoleAdmin, StoreError> {
    let get = |e: sqlx::Error| corrupt("console admin", e);
    let platform = row.text("platform").map_err(get)?;
    Ok(ConsoleAdmin {
        platform: Platform::parse(&platform).ok_or_else(|| corrupt("platform", &platform))?,
        user_id: row.text("user_id").map_err(get)?,
        name: row.text("name").map_err(get)?,
    })
}

pub(crate) fn console_session_from_row(row: &impl Columns) -> Result<ConsoleSession, StoreError> {
    let get = |e: sqlx::Error| corrupt("console session", e);
    Ok(ConsoleSession {
        admin: admin_from_row(row)?,
        csrf: row.text("csrf").map_err(get)?,
        admins: row.text("admins").map_err(get)?,
        expires_at: from_ms(row.int("expires_ms").map_err(get)?),
    })
}

pub(crate) fn ticket_record_from_row(row: &impl Columns) -> Result<TicketRecord, StoreError> {
    let get = |e: sqlx::Error| corrupt("ticket row", e);
    Ok(TicketRecord {
        session_id: row.int("session_id").map_err(get)?,
        platform: row.text("platform").map_err(get)?,
        user_id: row.text("user_id").map_err(get)?,
        user_name: row.text("user_name").map_err(get)?,
        created_at: from_ms(row.int("created_ms").map_err(get)?),
        handled_at: row.maybe_int("handled_ms").map_err(get)?.map(from_ms),
        ticket: ticket_from_row(row)?,
    })
}

pub(crate) fn reader_record_from_row(row: &impl Columns) -> Result<ReaderRecord, StoreError> {
    let get = |e: sqlx::Error| corrupt("reading record", e);
    Ok(ReaderRecord {
        platform: row.text("platform").map_err(get)?,
        user_id: row.text("user_id").map_err(get)?,
        user_name: row.text("user_name").map_err(get)?,
        updated_at: from_ms(row.int("updated_ms").map_err(get)?),
        record: reading_record_from_row(row)?,
    })
}

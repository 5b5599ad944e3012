//! Persistence: the [`Store`] trait and its rows, and [`connect`], which picks the backend
//! by the database URL's scheme. [`sqlite::SqliteStore`] (the default: one process, one
//! file; WAL, migrations from `migrations/sqlite/`) and [`postgres::PgStore`] (several
//! instances on one database; migrations from `migrations/postgres/`) implement it on sqlx,
//! each its own way; nothing above the trait knows which one it has.
//!
//! A turn is written by [`Store::commit_turn`] in one transaction: the processed platform
//! update, the user, the session row (optimistic `version` check), the turn's
//! [`StateChange`]s and messages, and the model calls of the turn. The store knows no
//! platform library; what it keeps in memory is a bounded cache of active sessions as last
//! committed (`hot`), never ahead of the database.

mod change;
pub mod console;
#[cfg(test)]
mod contract;
pub mod copy;
pub(crate) mod db;
mod hot;
pub mod postgres;
mod queries;
pub mod reading;
pub(crate) mod rows;
pub mod sqlite;
mod writes;

use crate::message::{Incoming, OptionsRequest, Platform, SessionKey, UserRef};
use async_trait::async_trait;
pub use change::StateChange;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Which store a database URL selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The backend of `url` by its scheme (`sqlite:`, `postgres://`, `postgresql://`); any
    /// other is refused (a URL taken for a file name would make a stray SQLite file).
    pub fn of(url: &str) -> Result<Backend, StoreError> {
        let lower = url.trim_start().to_ascii_lowercase();
        if lower.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else {
            // (only the scheme: the rest may hold a password)
            let scheme = url.split_once(':').map_or("", |(scheme, _)| scheme);
            Err(StoreError::UnknownScheme(format!("{scheme}:…")))
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// Opens (and migrates) the store `url` names: SQLite for `sqlite:…`, PostgreSQL for
/// `postgres://…` or `postgresql://…`.
pub async fn connect(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match Backend::of(url)? {
        Backend::Sqlite => Arc::new(sqlite::SqliteStore::connect(url).await?),
        Backend::Postgres => Arc::new(postgres::PgStore::connect(url).await?),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    Active,
    Finished,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Active => "active",
            SessionStatus::Finished => "finished",
        }
    }
}

/// A session row. `id == 0` marks a session not yet written (created by its first commit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub id: i64,
    pub key: SessionKey,
    pub flow: String,
    pub current_agent: Option<String>,
    pub language: Option<String>,
    pub country: Option<String>,
    pub timezone: Option<String>,
    /// The flow's own state.
    pub state: FlowState,
    pub pending_options: Option<OptionsRequest>,
    pub status: SessionStatus,
    /// Bumped by every committed turn.
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl SessionRecord {
    /// A session that exists only in memory until its first turn commits.
    pub fn draft(key: SessionKey, flow: &str) -> Self {
        let now = Utc::now();
        SessionRecord {
            id: 0,
            key,
            flow: flow.to_string(),
            current_agent: None,
            language: None,
            country: None,
            timezone: None,
            state: FlowState::default(),
            pending_options: None,
            status: SessionStatus::Active,
            version: 0,
            created_at: now,
            updated_at: now,
        }
    }

    pub fn is_new(&self) -> bool {
        self.id == 0
    }
}

/// A flow's own state as JSON text. A flow reads it straight into its own type
/// ([`FlowState::parse`]) and writes it straight from it ([`FlowState::of`]); the store
/// keeps the text as it is. No `serde_json::Value` tree is built, cloned and dropped on the
/// way through a turn (that churn was a third of a turn's CPU time). The text is shared:
/// a turn's session is copied several times on its way (the hot cache, the commit, the
/// written row), and each copy of a few KB of state was an allocation and a copy (profiled
/// under load: 5 % of all CPU time went to copying and dropping session records).
#[derive(Debug, Clone)]
pub struct FlowState(Arc<serde_json::value::RawValue>);

impl FlowState {
    /// The state of `value`.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(FlowState::shared)
    }

    /// Stored JSON text, checked to be JSON.
    pub fn from_json(text: String) -> Result<Self, serde_json::Error> {
        serde_json::value::RawValue::from_string(text).map(FlowState::shared)
    }

    fn shared(raw: Box<serde_json::value::RawValue>) -> Self {
        FlowState(Arc::from(raw))
    }

    /// The state as the flow's type.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    pub fn as_json(&self) -> &str {
        self.0.get()
    }

    /// Nothing stored yet (`{}` or `null`).
    pub fn is_empty(&self) -> bool {
        let text = self.0.get().trim();
        // a state worth the name is longer than `{ }`; no need to look at all of it
        text.len() <= 8 && {
            let text: String = text.split_whitespace().collect();
            text == "{}" || text == "null"
        }
    }
}

impl Default for FlowState {
    fn default() -> Self {
        FlowState::from_json("{}".into()).unwrap_or_else(|_| unreachable!("{{}} is JSON"))
    }
}

impl Serialize for FlowState {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for FlowState {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<serde_json::value::RawValue>::deserialize(deserializer).map(FlowState::shared)
    }
}

impl PartialEq for FlowState {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    System,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
        }
    }
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            "system" => Some(Role::System),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredMessage {
    pub id: i64,
    pub session_id: i64,
    pub role: Role,
    pub text: String,
    pub at: DateTime<Utc>,
}

/// Model usage of one agent in one flow, summed over the `llm_calls` ledger (`kaiwa stats`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmUsage {
    pub flow: String,
    pub agent: String,
    pub calls: u64,
    pub errors: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub avg_latency_ms: f64,
    pub max_latency_ms: u64,
    /// Calls whose answer was not used (speculative drafts dropped).
    #[serde(default)]
    pub wasted: u64,
}

/// One row of the `llm_calls` ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmCallRecord {
    /// Filled in by the commit when the call belongs to a turn.
    pub session_id: Option<i64>,
    pub agent: String,
    pub model: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub latency_ms: u64,
    pub error: Option<String>,
    pub at: DateTime<Utc>,
    /// Its answer was not used (a speculative draft dropped, cancelled or finished).
    #[serde(default)]
    pub wasted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SubmissionStatus {
    /// Every required field is done.
    Submitted,
    /// A required field is missing: kept for the team, never final.
    Incomplete,
}

impl SubmissionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SubmissionStatus::Submitted => "submitted",
            SubmissionStatus::Incomplete => "incomplete",
        }
    }
}

/// A finished form as a flow hands it over (the session and user come from the turn).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Submission {
    pub applicant: String,
    pub form_id: String,
    pub variant: String,
    pub status: SubmissionStatus,
    pub language: Option<String>,
    pub country: Option<String>,
    pub timezone: Option<String>,
    /// field id → value
    pub values: serde_json::Value,
    /// field id → fact key → value
    pub facts: serde_json::Value,
    /// incomplete fields, blocked drafts, …
    pub flags: serde_json::Value,
    pub audit: Option<serde_json::Value>,
}

/// A stored submission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmissionRecord {
    pub id: i64,
    pub session_id: Option<i64>,
    pub platform: String,
    pub user_id: String,
    pub created_at: DateTime<Utc>,
    #[serde(flatten)]
    pub submission: Submission,
    /// The team's decision, once made (`None`: undecided).
    #[serde(default)]
    pub decision: Option<Decision>,
}

/// The team's decision on an application: the first one stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// `approved` or `rejected`.
    pub decision: String,
    /// Who decided: `platform:user id (name)`.
    pub decided_by: String,
    pub decided_at: DateTime<Utc>,
}

/// A decision as [`Staff::decide`] found it: the one that stands, and whether this call
/// made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub decision: Decision,
    pub first: bool,
}

/// A help-desk question answered in a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ticket {
    /// 1, 2, … within the session.
    pub ticket_no: i64,
    pub question: String,
    pub plan: Vec<String>,
    /// sub-task → its answer, tries and completion
    pub sub_answers: serde_json::Value,
    pub answer: String,
    /// `path#heading` of every passage cited, in citation order.
    pub sources: Vec<String>,
    pub feedback: Option<String>,
}

/// What [`Store::load_for_turn`] found.
#[derive(Debug, Clone, Default)]
pub struct TurnLoad {
    /// The update was processed already.
    pub duplicate: bool,
    /// The place's active session.
    pub session: Option<SessionRecord>,
    /// The active session's last messages, oldest first.
    pub history: Vec<StoredMessage>,
    /// Without an active session (read in the same round trip, for the conversation that
    /// starts): the language the user chose with `/lang` (their profile's latest)...
    pub chosen_language: Option<String>,
    /// ... and whether a conversation of theirs in this place ended before (only then
    /// is there one to resume).
    pub ended_before: bool,
}

/// A platform update marked as processed by the commit that handles it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessedUpdate {
    pub platform: Platform,
    pub chat: String,
    pub message_id: String,
}

/// Everything one turn writes.
#[derive(Debug, Clone)]
pub struct TurnCommit {
    /// The session as loaded at the start of the turn (a draft for a new one).
    pub session: SessionRecord,
    pub user: UserRef,
    /// Another active session of the same key to finish first (a flow switch).
    pub finish_session: Option<i64>,
    pub processed: Option<ProcessedUpdate>,
    /// Applied in order.
    pub changes: Vec<StateChange>,
    pub llm_calls: Vec<LlmCallRecord>,
}

/// What a commit wrote.
#[derive(Debug, Clone)]
pub struct CommittedTurn {
    /// The session after the turn.
    pub session: SessionRecord,
    /// Ids of the assistant messages written, in order (to mark them delivered).
    pub assistant_message_ids: Vec<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error while {context}: {source}")]
    Database {
        context: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error("could not apply migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The database was migrated by a newer Kaiwa: nothing is applied or changed.
    #[error(
        "this database was upgraded by a newer Kaiwa (its migration {0} is unknown to this binary): run that version or a newer one, or restore a backup made before the upgrade; nothing was changed"
    )]
    NewerDatabase(i64),
    #[error("session {session_id} changed while this turn ran")]
    Conflict { session_id: i64 },
    #[error("platform update {message_id} in {chat} was already processed")]
    Duplicate { chat: String, message_id: String },
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error(
        "unknown database URL {0:?}: use sqlite://path/to/kaiwa.db (the default) or postgres://user@host/database"
    )]
    UnknownScheme(String),
    #[error(
        "another `kaiwa run` uses the SQLite database {0}: one process per SQLite file; several instances need PostgreSQL (docs/instances.md)"
    )]
    InUse(String),
    /// The transaction that carried this turn (with others) failed.
    #[error("database error while committing: {message}")]
    Batch { message: String, busy: bool },
}

impl StoreError {
    pub(crate) fn db(context: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
        move |source| StoreError::Database { context, source }
    }

    /// SQLite busy / locked, a PostgreSQL serialization failure or deadlock: worth a
    /// bounded retry.
    pub fn is_busy(&self) -> bool {
        match self {
            StoreError::Batch { busy, .. } => *busy,
            StoreError::Database {
                source: sqlx::Error::Database(e),
                ..
            } => {
                let code = e.code();
                matches!(
                    code.as_deref(),
                    Some("5")
                        | Some("6")
                        | Some("517")
                        | Some("262")
                        | Some("40001")
                        | Some("40P01")
                )
            }
            _ => false,
        }
    }
}

/// What a flow, a command or an operator reads: the read-only view of the store. Flows get
/// only this ([`crate::flow::TurnContext::store`]); writes go through what a turn returns.
#[async_trait]
pub trait Reads: Send + Sync {
    /// The active session of a place, if any.
    async fn active_session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError>;
    async fn session(&self, id: i64) -> Result<Option<SessionRecord>, StoreError>;
    /// The place's most recent finished session of `flow` (e.g. an interview ended with
    /// `/end`, which a new one may resume).
    async fn last_finished_session(
        &self,
        key: &SessionKey,
        flow: &str,
    ) -> Result<Option<SessionRecord>, StoreError>;
    /// The language of the user's most recent conversation that has one (any place, any
    /// flow): a new conversation starts in it.
    async fn last_language(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<Option<String>, StoreError>;
    /// The most recently active sessions in progress (the admins' `/sessions`).
    async fn active_sessions(&self, limit: usize) -> Result<Vec<SessionRecord>, StoreError>;
    /// Sessions in progress (`/metrics`; also the database check of `/healthz`).
    async fn count_active_sessions(&self) -> Result<i64, StoreError>;
    /// The last `limit` messages of a session, oldest first.
    async fn recent_messages(
        &self,
        session_id: i64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError>;
    /// The ledger, optionally for one session, oldest first.
    async fn llm_calls(&self, session_id: Option<i64>) -> Result<Vec<LlmCallRecord>, StoreError>;
    /// The ledger summed per flow and agent (calls without a session count as flow `-`).
    async fn llm_usage(&self) -> Result<Vec<LlmUsage>, StoreError>;
    /// Stored submissions, oldest first, optionally of one form.
    async fn submissions(&self, form_id: Option<&str>)
    -> Result<Vec<SubmissionRecord>, StoreError>;
    /// The user's reading records, most recently updated first.
    async fn reading_records(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<Vec<reading::ReadingRecord>, StoreError>;
    /// A record's insights, oldest first.
    async fn insights(&self, record_id: i64) -> Result<Vec<reading::Insight>, StoreError>;
    /// A record's moods, oldest first.
    async fn moods(&self, record_id: i64) -> Result<Vec<reading::Mood>, StoreError>;
    /// The user's profile entries, oldest first.
    async fn profile_entries(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<Vec<reading::ProfileEntry>, StoreError>;
    /// The help-desk tickets of a session, in order.
    async fn tickets(&self, session_id: i64) -> Result<Vec<Ticket>, StoreError>;
    /// Everyone who opted in to the weekly review.
    async fn weekly_reviews(&self) -> Result<Vec<reading::WeeklyReviewSubscription>, StoreError>;
    /// Everything stored about one user, as JSON (`/mydata`).
    async fn user_data(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<serde_json::Value, StoreError>;
}

/// Received messages kept until their turn is done: the platform adapters put them, the
/// orchestrator clears them.
#[async_trait]
pub trait Inbox: Send + Sync {
    /// Keeps a received message until [`Inbox::inbox_done`] (survives a crash mid-turn). It
    /// may return before the entry is committed: writes commit in the order they are asked
    /// for, so it commits with or before the turn that follows it (a crash before that loses
    /// the message as one before the call would). An entry that would commit with its turn
    /// is not written at all: the turn's dedupe row says it is done, and its replies, should
    /// the bot stop before they are delivered, are found by [`Store::unreached_sessions`].
    async fn inbox_put(&self, incoming: &Incoming) -> Result<(), StoreError>;
    /// Clears a handled message. It may return before the clear is committed (it rides with
    /// the next write; [`Store::close`] writes what is queued): a clear lost in a crash only
    /// means the message is handled again at the next start (a turn it committed is found
    /// done by deduplication).
    async fn inbox_done(
        &self,
        platform: Platform,
        chat: &str,
        message_id: &str,
    ) -> Result<(), StoreError>;
    /// Keeps `incoming` and returns once the entries are committed (durable): an adapter
    /// confirms a platform's delivery only after this. An error when a write in between
    /// failed (perhaps another's): the caller keeps them again (a put is idempotent).
    async fn inbox_keep(&self, incoming: &[Incoming]) -> Result<(), StoreError>;
    /// Messages of `platform` received but not finished, oldest first.
    async fn inbox_pending(&self, platform: Platform) -> Result<Vec<Incoming>, StoreError>;
}

/// How long a chat's lease lasts without renewal: the instance that holds a chat answers its
/// session from its cache no longer than this after it last confirmed it (on PostgreSQL,
/// where other instances write the same rows).
pub const CHAT_LEASE_TTL: std::time::Duration = std::time::Duration::from_secs(6);

/// A lease as stored: who holds `name`, until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub name: String,
    pub holder: String,
    pub expires_at: DateTime<Utc>,
}

/// Work only one instance may do at a time (the Telegram poller, the scheduled jobs, a
/// chat's turns), held for a while and renewed by its holder; another instance takes it
/// once it has expired (its holder died). Times are the database's clock as each instance
/// reads its own: instances need clocks within a second or two of each other.
#[async_trait]
pub trait Leases: Send + Sync {
    /// Takes `name` for `holder` until `ttl` from now if it is free, expired or already
    /// `holder`'s (a renewal). Returns whether `holder` holds it now.
    async fn lease(
        &self,
        name: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<bool, StoreError>;
    /// Lets go of `name` if `holder` holds it.
    async fn release(&self, name: &str, holder: &str) -> Result<(), StoreError>;
    /// The leases whose name starts with `prefix`, expired ones too.
    async fn leases(&self, prefix: &str) -> Result<Vec<Lease>, StoreError>;
}

/// A conversation a person from the team holds (taken over from the admin chat).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub session_id: i64,
    /// The user's place.
    pub key: SessionKey,
    /// Who holds it: `platform:user id (name)`.
    pub held_by: String,
    pub taken_at: DateTime<Utc>,
    /// The person's last message (or the takeover).
    pub last_at: DateTime<Utc>,
}

/// A message in an admin place (a notice, a relayed message) that stands for a session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NoticeRef {
    pub platform: Platform,
    pub chat: String,
    pub message_id: String,
}

/// What the team does from the admin chat: decisions on applications, conversations taken
/// over.
#[async_trait]
pub trait Staff: Send + Sync {
    /// `session` (at `key`) held by `by` unless someone holds the place already; returns the
    /// hold that stands and whether this call took it.
    async fn take_over(
        &self,
        session_id: i64,
        key: &SessionKey,
        by: &str,
    ) -> Result<(Hold, bool), StoreError>;
    /// Ends the hold on `session_id`; returns it (`None`: none was there).
    async fn hand_back(&self, session_id: i64) -> Result<Option<Hold>, StoreError>;
    /// Every hold (a handful: the instances cache them).
    async fn holds(&self) -> Result<Vec<Hold>, StoreError>;
    /// The person holding `session_id` wrote now.
    async fn touch_hold(&self, session_id: i64) -> Result<(), StoreError>;
    /// `message` in an admin place stands for `session_id`.
    async fn link_notice(&self, message: &NoticeRef, session_id: i64) -> Result<(), StoreError>;
    /// The session a message in an admin place stands for.
    async fn notice_session(&self, message: &NoticeRef) -> Result<Option<i64>, StoreError>;
    /// The latest message standing for `session_id` in each admin place.
    async fn notices_of(&self, session_id: i64) -> Result<Vec<NoticeRef>, StoreError>;
    /// Records `decision` by `by` on the submission of session `session_id` unless one is
    /// recorded already; returns the decision that stands (`None`: the session has no
    /// submission).
    async fn decide(
        &self,
        session_id: i64,
        decision: &str,
        by: &str,
    ) -> Result<Option<Decided>, StoreError>;
}

/// Answers of outside searches kept for a while (a day): per provider and query, as JSON;
/// and the embeddings of knowledge-base passages, per model and text.
#[async_trait]
pub trait SearchCache: Send + Sync {
    /// The results stored for `query` at `provider` since `since`.
    async fn cached_search(
        &self,
        provider: &str,
        query: &str,
        since: DateTime<Utc>,
    ) -> Result<Option<String>, StoreError>;
    /// Keeps `results` for `query` at `provider` (replacing older ones).
    async fn cache_search(
        &self,
        provider: &str,
        query: &str,
        results: &str,
    ) -> Result<(), StoreError>;
    /// The passage vectors kept for embeddings `model`: `(text hash, little-endian f32s)`.
    async fn passage_vectors(&self, model: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError>;
    /// Keeps `vectors` of `model` by text hash (a hash kept already stays as it is).
    async fn keep_passage_vectors(
        &self,
        model: &str,
        vectors: &[(String, Vec<u8>)],
    ) -> Result<(), StoreError>;
}

/// The whole store, held as `Arc<dyn Store>` by the orchestrator (the one writer of turns)
/// and the binary: the turn path, delivery marks, privacy deletes and the ledger, on top of
/// [`Reads`] and [`Inbox`].
#[async_trait]
pub trait Store: Reads + Inbox + Leases + Staff + SearchCache + console::Console {
    /// Which database this is.
    fn backend(&self) -> Backend;
    async fn is_processed(
        &self,
        platform: Platform,
        chat: &str,
        message_id: &str,
    ) -> Result<bool, StoreError>;
    /// What a turn needs first: whether `message_id` was processed in the key's chat, the
    /// key's active session and its last `history` messages, or without one what a new
    /// conversation needs ([`TurnLoad::chosen_language`], [`TurnLoad::ended_before`]).
    /// Implementations answer it in one round trip.
    async fn load_for_turn(
        &self,
        key: &SessionKey,
        message_id: &str,
        history: usize,
    ) -> Result<TurnLoad, StoreError>;
    /// Writes one turn atomically. Fails with [`StoreError::Duplicate`] when the update was
    /// processed already and [`StoreError::Conflict`] when the session moved on meanwhile.
    async fn commit_turn(&self, commit: TurnCommit) -> Result<CommittedTurn, StoreError>;
    /// Marks assistant messages as delivered to the platform. SQLite may return before the
    /// mark is durable (it rides with the next batch of turns: after a crash the same
    /// process resends at most what was in flight); PostgreSQL returns once it is committed
    /// (with other writes of its batch), because another instance taking the chat over
    /// resends every reply not marked.
    async fn mark_delivered(&self, message_ids: &[i64]) -> Result<(), StoreError>;
    /// Assistant messages committed but not yet delivered (after a crash), oldest first.
    async fn undelivered(&self, session_id: i64) -> Result<Vec<StoredMessage>, StoreError>;
    /// The sessions of `platform` with a committed reply not yet delivered (a stop came
    /// between its commit and its delivery, or the delivery failed), oldest reply first.
    async fn unreached_sessions(
        &self,
        platform: crate::message::Platform,
    ) -> Result<Vec<SessionRecord>, StoreError>;
    /// Model calls made outside a committed turn (a failed turn's calls).
    async fn record_llm_calls(&self, calls: &[LlmCallRecord]) -> Result<(), StoreError>;
    /// Deletes everything stored about one user (sessions, messages, tickets, reading data,
    /// profile, reviews, and submissions unless `keep_submissions`). Returns the rows deleted.
    async fn forget_user(
        &self,
        platform: Platform,
        user: &str,
        keep_submissions: bool,
    ) -> Result<u64, StoreError>;
    /// Deletes the messages of sessions last active before `before` (retention).
    /// Returns the messages deleted.
    async fn delete_transcripts_before(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;
    /// Claims the database for this `kaiwa run` (not for a one-off command such as
    /// `kaiwa db copy`). SQLite: for this process alone (one `kaiwa run` per file, its
    /// group commit and cache are the only writers); fails with [`StoreError::InUse`] when
    /// another process holds it. PostgreSQL: a place among the instances on the database,
    /// by which they count each other (`postgres/share.rs`); given up at close, or expired
    /// with an instance killed.
    async fn claim_for_run(&self) -> Result<(), StoreError>;
    /// Whether a write can be committed now (a read-only file or a full disk fails it):
    /// what `/healthz` asks. Leaves nothing behind.
    async fn check_writable(&self) -> Result<(), StoreError>;
    /// Closes connections (a clean shutdown checkpoints the WAL).
    async fn close(&self);
}

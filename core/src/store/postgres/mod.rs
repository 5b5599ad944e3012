//! [`PgStore`]: the store on PostgreSQL through sqlx, for a team that runs several
//! instances on the database it already keeps. Selected by a `postgres://` (or
//! `postgresql://`) database URL; the schema comes from `migrations/postgres/`, applied by
//! [`PgStore::connect`] under sqlx's advisory lock, so that instances started together
//! migrate once.
//!
//! Unlike [`super::sqlite::SqliteStore`] it keeps nothing in memory: another instance
//! writes the same rows, so every read asks the database, and every turn is one
//! transaction of its own (`turn::commit`). The optimistic session `version` and the
//! `processed_updates` key are what keep two instances from both committing a turn.
//!
//! Where things are: `rows` (decoders), `reads` ([`super::Reads`]), `turn` (the commit and the
//! reading rows), this file ([`Store`], [`Inbox`], connecting).

mod reads;
mod staff;
mod turn;

use super::{
    CommittedTurn, Inbox, LlmCallRecord, SessionRecord, Store, StoreError, StoredMessage,
    TurnCommit, TurnLoad,
};
use crate::message::{Incoming, Platform, SessionKey};
use crate::store::rows::{
    corrupt, message_from_row, ms, session_columns_of, session_from_row, turn_load_from_row,
};
use crate::store::writes::{
    LEASE_LIST, LEASE_RELEASE, LEASE_TAKE, forget_statements, lease_times, leases_of,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

/// The store on one PostgreSQL database: a connection pool.
pub struct PgStore {
    pool: PgPool,
}

/// Most connections one instance opens (PostgreSQL's default limit is 100 for all of them).
const MAX_CONNECTIONS: u32 = 16;

impl PgStore {
    /// Connects to `url` (`postgres://user:password@host:port/database`) and applies the
    /// migrations not yet applied.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(StoreError::db("reading the database URL"))?
            .application_name("kaiwa");
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
            .map_err(StoreError::db("connecting to PostgreSQL"))?;
        MIGRATOR.run(&pool).await?;
        Ok(PgStore { pool })
    }

    /// The pool, for other stores of the same database (coordination, flows' own tables).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// How many sessions the database holds, active or finished.
    pub async fn session_count(&self) -> Result<i64, StoreError> {
        sqlx::query_scalar("SELECT COUNT(*) FROM sessions")
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db("counting sessions"))
    }
}

/// The PostgreSQL schema, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> super::Backend {
        super::Backend::Postgres
    }

    async fn is_processed(
        &self,
        platform: Platform,
        chat: &str,
        message_id: &str,
    ) -> Result<bool, StoreError> {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM processed_updates WHERE platform = $1 AND chat = $2 AND message_id = $3)",
        )
        .bind(platform.as_str())
        .bind(chat)
        .bind(message_id)
        .fetch_one(&self.pool)
        .await
        .map_err(StoreError::db("checking processed updates"))
    }

    async fn load_for_turn(
        &self,
        key: &SessionKey,
        message_id: &str,
        history: usize,
    ) -> Result<TurnLoad, StoreError> {
        // one round trip: the dedupe check, the active session and its recent messages (as
        // one JSON array, so that the session's columns are not repeated per message), or
        // without one the user's chosen language and whether one ended here
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT EXISTS (SELECT 1 FROM processed_updates WHERE platform = $1 AND chat = $2 AND message_id = $3) AS dup, \
                 {}, (SELECT json_agg(json_build_array(m.id, m.role, m.text, m.created_ms))::text \
                 FROM (SELECT id, role, text, created_ms FROM messages WHERE session_id = s.id ORDER BY id DESC LIMIT $6) m) AS history, \
                 CASE WHEN s.id IS NULL THEN (SELECT text FROM profile_entries WHERE platform = $1 AND user_id = $5 \
                 AND kind = 'language' ORDER BY created_ms DESC, id DESC LIMIT 1) END AS chosen_language, \
                 CASE WHEN s.id IS NULL THEN EXISTS (SELECT 1 FROM sessions f WHERE f.platform = $1 AND f.user_id = $5 \
                 AND f.chat = $2 AND f.thread = $4 AND f.status = 'finished') ELSE false END AS ended_before \
                 FROM (SELECT 1) AS one LEFT JOIN sessions s ON s.platform = $1 AND s.chat = $2 AND s.thread = $4 \
                 AND s.user_id = $5 AND s.status = 'active'",
                session_columns_of("s")
            )
        });
        let row = sqlx::query(SQL.as_str())
            .bind(key.platform.as_str())
            .bind(&key.chat)
            .bind(message_id)
            .bind(&key.thread)
            .bind(&key.user)
            .bind(i64::try_from(history).unwrap_or(i64::MAX))
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db("loading the session"))?;
        turn_load_from_row(&row, message_id)
    }

    async fn commit_turn(&self, commit: TurnCommit) -> Result<CommittedTurn, StoreError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("starting a turn"))?;
        // an error drops (rolls back) the transaction
        let committed = turn::commit(&mut tx, &commit).await?;
        tx.commit().await.map_err(|e| {
            // the one-active-session index checked at commit: another instance's turn won
            if turn::unique_violation(&e, None) {
                StoreError::Conflict {
                    session_id: commit.session.id,
                }
            } else {
                StoreError::Database {
                    context: "committing the turn",
                    source: e,
                }
            }
        })?;
        Ok(committed)
    }

    async fn mark_delivered(&self, message_ids: &[i64]) -> Result<(), StoreError> {
        if message_ids.is_empty() {
            return Ok(());
        }
        sqlx::query("UPDATE messages SET delivered = TRUE WHERE id = ANY($1)")
            .bind(message_ids)
            .execute(&self.pool)
            .await
            .map_err(StoreError::db("marking messages delivered"))?;
        Ok(())
    }

    async fn undelivered(&self, session_id: i64) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, session_id, role, text, created_ms FROM messages WHERE session_id = $1 AND NOT delivered ORDER BY id",
        )
        .bind(session_id)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("loading undelivered messages"))?;
        rows.iter().map(message_from_row).collect()
    }

    async fn unreached_sessions(
        &self,
        platform: Platform,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT {} FROM sessions s JOIN \
                 (SELECT session_id, min(id) AS first FROM messages WHERE NOT delivered GROUP BY session_id) AS u \
                 ON s.id = u.session_id WHERE s.platform = $1 ORDER BY u.first",
                session_columns_of("s")
            )
        });
        let rows = sqlx::query(SQL.as_str())
            .bind(platform.as_str())
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("listing sessions with undelivered replies"))?;
        rows.iter().map(session_from_row).collect()
    }

    async fn record_llm_calls(&self, calls: &[LlmCallRecord]) -> Result<(), StoreError> {
        if calls.is_empty() {
            return Ok(());
        }
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("starting a ledger write"))?;
        let calls: Vec<_> = calls.iter().collect();
        turn::insert_llm_calls(&mut tx, &calls, None).await?;
        tx.commit()
            .await
            .map_err(StoreError::db("committing the ledger"))
    }

    async fn forget_user(
        &self,
        platform: Platform,
        user: &str,
        keep_submissions: bool,
    ) -> Result<u64, StoreError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("starting to forget a user"))?;
        let mut deleted = 0;
        for sql in forget_statements(keep_submissions) {
            deleted += sqlx::query(sql)
                .bind(platform.as_str())
                .bind(user)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db("forgetting a user"))?
                .rows_affected();
        }
        tx.commit()
            .await
            .map_err(StoreError::db("forgetting a user"))?;
        Ok(deleted)
    }

    async fn delete_transcripts_before(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE updated_ms < $1)",
        )
        .bind(ms(before))
        .execute(&self.pool)
        .await
        .map_err(StoreError::db("deleting old transcripts"))?;
        Ok(done.rows_affected())
    }

    async fn claim_sole_use(&self) -> Result<(), StoreError> {
        // several instances share a PostgreSQL database: leases divide the work
        Ok(())
    }

    async fn check_writable(&self) -> Result<(), StoreError> {
        // a row in and out in one committed transaction (a read-only standby or a full
        // disk fails it)
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("starting a write check"))?;
        sqlx::query(
            "INSERT INTO inbox (platform, chat, message_id, incoming, created_ms) VALUES ('health', '', '', '{}', 0) \
             ON CONFLICT DO NOTHING",
        )
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("writing a check row"))?;
        sqlx::query("DELETE FROM inbox WHERE platform = 'health'")
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db("removing the check row"))?;
        tx.commit()
            .await
            .map_err(StoreError::db("committing a write check"))
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}

#[async_trait]
impl Inbox for PgStore {
    async fn inbox_put(&self, incoming: &Incoming) -> Result<(), StoreError> {
        self.inbox_keep(std::slice::from_ref(incoming)).await
    }

    async fn inbox_done(
        &self,
        platform: Platform,
        chat: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM inbox WHERE platform = $1 AND chat = $2 AND message_id = $3")
            .bind(platform.as_str())
            .bind(chat)
            .bind(message_id)
            .execute(&self.pool)
            .await
            .map_err(StoreError::db("clearing a handled message"))?;
        Ok(())
    }

    async fn inbox_keep(&self, incoming: &[Incoming]) -> Result<(), StoreError> {
        if incoming.is_empty() {
            return Ok(());
        }
        let now = ms(Utc::now());
        let mut platforms = Vec::with_capacity(incoming.len());
        let mut chats = Vec::with_capacity(incoming.len());
        let mut ids = Vec::with_capacity(incoming.len());
        let mut bodies = Vec::with_capacity(incoming.len());
        for message in incoming {
            platforms.push(message.platform.as_str());
            chats.push(message.chat.as_str());
            ids.push(message.message_id.as_str());
            bodies.push(serde_json::to_string(message).map_err(|e| corrupt("inbox entry", e))?);
        }
        // one statement, in the order given (the identity column numbers them so)
        sqlx::query(
            "INSERT INTO inbox (platform, chat, message_id, incoming, created_ms) \
             SELECT p, c, m, i, $5 FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[]) WITH ORDINALITY AS t(p, c, m, i, n) \
             ORDER BY n ON CONFLICT DO NOTHING",
        )
        .bind(&platforms)
        .bind(&chats)
        .bind(&ids)
        .bind(&bodies)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(StoreError::db("keeping received messages"))?;
        Ok(())
    }

    async fn inbox_pending(&self, platform: Platform) -> Result<Vec<Incoming>, StoreError> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT incoming FROM inbox WHERE platform = $1 ORDER BY created_ms, seq",
        )
        .bind(platform.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("reading the inbox"))?;
        rows.into_iter()
            .map(|(json,)| serde_json::from_str(&json).map_err(|e| corrupt("inbox entry", e)))
            .collect()
    }
}

#[async_trait]
impl super::Leases for PgStore {
    async fn lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool, StoreError> {
        let (now, until) = lease_times(ttl);
        let held: Option<String> = sqlx::query_scalar(LEASE_TAKE)
            .bind(name)
            .bind(holder)
            .bind(until)
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db("taking a lease"))?;
        Ok(held.is_some())
    }

    async fn release(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        sqlx::query(LEASE_RELEASE)
            .bind(name)
            .bind(holder)
            .execute(&self.pool)
            .await
            .map_err(StoreError::db("releasing a lease"))?;
        Ok(())
    }

    async fn leases(&self, prefix: &str) -> Result<Vec<super::Lease>, StoreError> {
        let rows = sqlx::query_as(LEASE_LIST)
            .bind(prefix)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("reading leases"))?;
        Ok(leases_of(rows))
    }
}

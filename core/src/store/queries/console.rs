//! [`Console`], written once for both backends over the dialect layer
//! ([`crate::store::db`]): the browser console's sign-in links and sessions, and its
//! overviews across users.

use crate::store::console::{
    ALL_READING, ALL_TICKETS, Console, ConsoleAdmin, ConsoleSession, LINK_PUT, LINK_TAKE,
    LINKS_EXPIRED, ReaderRecord, SESSION_END, SESSION_GET, SESSION_PUT, SESSIONS_EXPIRED,
    SUBMISSION_BY_ID, TicketRecord, admin_from_row, console_session_from_row, find_sessions_sql,
    name_pattern, reader_record_from_row, ticket_record_from_row,
};
use crate::store::db::{OnDb, query};
use crate::store::rows::{self, Columns};
use crate::store::{SessionRecord, StoreError, SubmissionRecord};

#[async_trait::async_trait]
impl<S: OnDb> Console for S {
    async fn console_link_put(
        &self,
        token_hash: &str,
        admin: &ConsoleAdmin,
        expires_at: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        query(LINK_PUT)
            .bind(token_hash)
            .bind(admin.platform.as_str())
            .bind(&admin.user_id)
            .bind(&admin.name)
            .bind(expires_at.timestamp_millis())
            .execute(self.db().write())
            .await
            .map_err(StoreError::db("keeping a console link"))?;
        Ok(())
    }

    async fn console_link_take(
        &self,
        token_hash: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<ConsoleAdmin>, StoreError> {
        let row = query(LINK_TAKE)
            .bind(token_hash)
            .bind(now.timestamp_millis())
            .fetch_optional(self.db().write())
            .await
            .map_err(StoreError::db("using a console link"))?;
        row.as_ref().map(admin_from_row).transpose()
    }

    async fn console_session_put(
        &self,
        token_hash: &str,
        session: &ConsoleSession,
    ) -> Result<(), StoreError> {
        query(SESSION_PUT)
            .bind(token_hash)
            .bind(session.admin.platform.as_str())
            .bind(&session.admin.user_id)
            .bind(&session.admin.name)
            .bind(&session.csrf)
            .bind(&session.admins)
            .bind(session.expires_at.timestamp_millis())
            .execute(self.db().write())
            .await
            .map_err(StoreError::db("keeping a console session"))?;
        Ok(())
    }

    async fn console_session(
        &self,
        token_hash: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<ConsoleSession>, StoreError> {
        let row = query(SESSION_GET)
            .bind(token_hash)
            .bind(now.timestamp_millis())
            .fetch_optional(self.db().read())
            .await
            .map_err(StoreError::db("reading a console session"))?;
        row.as_ref().map(console_session_from_row).transpose()
    }

    async fn console_session_end(
        &self,
        token_hash: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        query(SESSION_END)
            .bind(token_hash)
            .execute(self.db().write())
            .await
            .map_err(StoreError::db("ending a console session"))?;
        let now_ms = now.timestamp_millis();
        query(SESSIONS_EXPIRED)
            .bind(now_ms)
            .execute(self.db().write())
            .await
            .map_err(StoreError::db("dropping console sessions"))?;
        query(LINKS_EXPIRED)
            .bind(now_ms - 24 * 3_600_000)
            .execute(self.db().write())
            .await
            .map_err(StoreError::db("dropping console links"))?;
        Ok(())
    }

    async fn all_tickets(&self, limit: i64) -> Result<Vec<TicketRecord>, StoreError> {
        let rows = query(ALL_TICKETS)
            .bind(limit)
            .fetch_all(self.db().read())
            .await
            .map_err(StoreError::db("reading every ticket"))?;
        rows.iter().map(ticket_record_from_row).collect()
    }

    async fn find_sessions(
        &self,
        user: &str,
        limit: i64,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        let columns = rows::session_columns_of("s");
        let rows = query(find_sessions_sql(&columns))
            .bind(user.trim())
            .bind(name_pattern(user.trim()))
            .bind(limit)
            .fetch_all(self.db().read())
            .await
            .map_err(StoreError::db("finding sessions"))?;
        rows.iter().map(rows::session_from_row).collect()
    }

    async fn all_reading_records(&self, limit: i64) -> Result<Vec<ReaderRecord>, StoreError> {
        let rows = query(ALL_READING)
            .bind(limit)
            .fetch_all(self.db().read())
            .await
            .map_err(StoreError::db("reading every reading record"))?;
        rows.iter().map(reader_record_from_row).collect()
    }

    async fn submission_by_id(&self, id: i64) -> Result<Option<SubmissionRecord>, StoreError> {
        let row = query(SUBMISSION_BY_ID)
            .bind(id)
            .fetch_optional(self.db().read())
            .await
            .map_err(StoreError::db("reading a submission"))?;
        row.as_ref().map(rows::submission_from_row).transpose()
    }

    async fn traced_messages(&self, session_id: i64) -> Result<Vec<i64>, StoreError> {
        let rows = query(
            "SELECT id FROM messages WHERE session_id = $1 AND trace IS NOT NULL ORDER BY id",
        )
        .bind(session_id)
        .fetch_all(self.db().read())
        .await
        .map_err(StoreError::db("reading which messages have a trace"))?;
        rows.iter()
            .map(|r| r.int("id").map_err(StoreError::db("a traced message")))
            .collect()
    }

    async fn traced_message_at(
        &self,
        session_id: i64,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<i64>, StoreError> {
        let row = query(
            "SELECT id FROM messages WHERE session_id = $1 AND created_ms = $2 \
             AND trace IS NOT NULL ORDER BY id LIMIT 1",
        )
        .bind(session_id)
        .bind(at.timestamp_millis())
        .fetch_optional(self.db().read())
        .await
        .map_err(StoreError::db("finding a turn's trace"))?;
        row.map(|r| r.int("id").map_err(StoreError::db("a traced message")))
            .transpose()
    }

    async fn turn_calls(
        &self,
        session_id: i64,
        message_id: i64,
    ) -> Result<Vec<crate::store::LlmCallRecord>, StoreError> {
        // the turn's calls came after the turn before it committed, and before its own
        // commit (its messages' time)
        let rows = query(
            "SELECT c.session_id, c.agent, c.model, c.prompt_tokens, c.completion_tokens, \
             c.latency_ms, c.error, c.created_ms, c.wasted FROM llm_calls c, messages m \
             WHERE m.id = $2 AND m.session_id = $1 AND c.session_id = $1 \
             AND c.created_ms <= m.created_ms \
             AND c.created_ms > COALESCE((SELECT MAX(p.created_ms) FROM messages p \
                 WHERE p.session_id = $1 AND p.created_ms < m.created_ms), 0) \
             ORDER BY c.id",
        )
        .bind(session_id)
        .bind(message_id)
        .fetch_all(self.db().read())
        .await
        .map_err(StoreError::db("reading a turn's model calls"))?;
        rows.iter().map(rows::llm_call_from_row).collect()
    }

    async fn message_trace(
        &self,
        session_id: i64,
        message_id: i64,
    ) -> Result<Option<String>, StoreError> {
        let row = query("SELECT trace FROM messages WHERE session_id = $1 AND id = $2")
            .bind(session_id)
            .bind(message_id)
            .fetch_optional(self.db().read())
            .await
            .map_err(StoreError::db("reading a trace"))?;
        Ok(match row {
            Some(row) => row.maybe_text("trace").map_err(StoreError::db("a trace"))?,
            None => None,
        })
    }
}

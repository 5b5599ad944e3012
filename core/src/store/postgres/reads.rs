//! [`Reads`] on [`PgStore`]: every read, on the pool. The turn's own first read is
//! [`crate::store::Store::load_for_turn`] in `mod.rs`.

use super::PgStore;
use crate::message::{Platform, SessionKey};
use crate::store::reading::{Insight, Mood, ProfileEntry, ReadingRecord, WeeklyReviewSubscription};
use crate::store::rows::{
    SESSION_COLUMNS, insight_from_row, llm_call_from_row, message_from_row, mood_from_row,
    profile_entry_from_row, reading_record_from_row, session_from_row, submission_from_row,
    ticket_from_row, weekly_review_from_row,
};
use crate::store::{
    LlmCallRecord, Reads, SessionRecord, StoreError, StoredMessage, SubmissionRecord, Ticket,
};
use async_trait::async_trait;
use std::sync::LazyLock;

#[async_trait]
impl Reads for PgStore {
    async fn active_session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        static SQL_ROW: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT {SESSION_COLUMNS} FROM sessions \
             WHERE platform = $1 AND chat = $2 AND thread = $3 AND user_id = $4 AND status = 'active'"
            )
        });
        let row = sqlx::query(SQL_ROW.as_str())
            .bind(key.platform.as_str())
            .bind(&key.chat)
            .bind(&key.thread)
            .bind(&key.user)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db("loading the active session"))?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn session(&self, id: i64) -> Result<Option<SessionRecord>, StoreError> {
        static SQL_ROW: LazyLock<String> =
            LazyLock::new(|| format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"));
        let row = sqlx::query(SQL_ROW.as_str())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db("loading a session"))?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn last_finished_session(
        &self,
        key: &SessionKey,
        flow: &str,
    ) -> Result<Option<SessionRecord>, StoreError> {
        static SQL_ROW: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT {SESSION_COLUMNS} FROM sessions \
                 WHERE platform = $1 AND user_id = $2 AND chat = $3 AND thread = $4 AND flow = $5 \
                   AND status = 'finished' \
                 ORDER BY updated_ms DESC, id DESC LIMIT 1"
            )
        });
        let row = sqlx::query(SQL_ROW.as_str())
            .bind(key.platform.as_str())
            .bind(&key.user)
            .bind(&key.chat)
            .bind(&key.thread)
            .bind(flow)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db("loading the last finished session"))?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn last_language(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<Option<String>, StoreError> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT language FROM sessions WHERE platform = $1 AND user_id = $2 \
             AND language IS NOT NULL ORDER BY updated_ms DESC LIMIT 1",
        )
        .bind(platform.as_str())
        .bind(user)
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::db("loading the user's last language"))?;
        Ok(row.map(|(language,)| language))
    }

    async fn active_sessions(&self, limit: usize) -> Result<Vec<SessionRecord>, StoreError> {
        static SQL_ROWS: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE status = 'active' ORDER BY updated_ms DESC LIMIT $1"
            )
        });
        let rows = sqlx::query(SQL_ROWS.as_str())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("listing sessions"))?;
        rows.iter().map(session_from_row).collect()
    }

    async fn count_active_sessions(&self) -> Result<i64, StoreError> {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM sessions WHERE status = 'active'")
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db("counting active sessions"))?;
        Ok(n)
    }

    async fn recent_messages(
        &self,
        session_id: i64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, session_id, role, text, created_ms FROM \
             (SELECT * FROM messages WHERE session_id = $1 ORDER BY id DESC LIMIT $2) AS m ORDER BY id",
        )
        .bind(session_id)
        .bind(limit.min(i64::MAX as usize) as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("loading messages"))?;
        rows.iter().map(message_from_row).collect()
    }

    async fn llm_calls(&self, session_id: Option<i64>) -> Result<Vec<LlmCallRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT session_id, agent, model, prompt_tokens, completion_tokens, latency_ms, error, created_ms, wasted \
             FROM llm_calls WHERE ($1::BIGINT IS NULL OR session_id = $1) ORDER BY id",
        )
        .bind(session_id)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("reading the model ledger"))?;
        rows.iter().map(llm_call_from_row).collect()
    }

    async fn llm_usage(&self) -> Result<Vec<crate::store::LlmUsage>, StoreError> {
        let rows: Vec<(String, String, i64, i64, i64, i64, f64, i64, i64)> = sqlx::query_as(
            "SELECT COALESCE(s.flow, '-'), c.agent, COUNT(*), COUNT(c.error), \
             COALESCE(SUM(c.prompt_tokens), 0)::BIGINT, COALESCE(SUM(c.completion_tokens), 0)::BIGINT, \
             COALESCE(AVG(c.latency_ms), 0)::FLOAT8, COALESCE(MAX(c.latency_ms), 0)::BIGINT, \
             COUNT(*) FILTER (WHERE c.wasted) \
             FROM llm_calls c LEFT JOIN sessions s ON s.id = c.session_id \
             GROUP BY 1, 2 ORDER BY 1, 2",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("summing the model ledger"))?;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(rows
            .into_iter()
            .map(
                |(flow, agent, calls, errors, p, c, avg, max, wasted)| crate::store::LlmUsage {
                    flow,
                    agent,
                    calls: n(calls),
                    errors: n(errors),
                    prompt_tokens: n(p),
                    completion_tokens: n(c),
                    avg_latency_ms: avg,
                    max_latency_ms: n(max),
                    wasted: n(wasted),
                },
            )
            .collect())
    }

    async fn submissions(
        &self,
        form_id: Option<&str>,
    ) -> Result<Vec<SubmissionRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM submissions WHERE ($1::TEXT IS NULL OR form_id = $1) ORDER BY id",
        )
        .bind(form_id)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("reading submissions"))?;
        rows.iter().map(submission_from_row).collect()
    }

    async fn reading_records(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<Vec<ReadingRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, title, author, details, status, interaction_mode, started_ms, finished_ms FROM reading_records \
             WHERE platform = $1 AND user_id = $2 ORDER BY updated_ms DESC, id DESC",
        )
        .bind(platform.as_str())
        .bind(user)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("reading records"))?;
        rows.iter().map(reading_record_from_row).collect()
    }

    async fn insights(&self, record_id: i64) -> Result<Vec<Insight>, StoreError> {
        let rows = sqlx::query(
            "SELECT kind, text, created_ms FROM insights WHERE record_id = $1 ORDER BY id",
        )
        .bind(record_id)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("reading insights"))?;
        rows.iter().map(insight_from_row).collect()
    }

    async fn moods(&self, record_id: i64) -> Result<Vec<Mood>, StoreError> {
        let rows = sqlx::query(
            "SELECT phase, label, score, created_ms FROM moods WHERE record_id = $1 ORDER BY id",
        )
        .bind(record_id)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("reading moods"))?;
        rows.iter().map(mood_from_row).collect()
    }

    async fn profile_entries(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<Vec<ProfileEntry>, StoreError> {
        let rows = sqlx::query("SELECT kind, text, created_ms FROM profile_entries WHERE platform = $1 AND user_id = $2 ORDER BY id")
            .bind(platform.as_str())
            .bind(user)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("reading the profile"))?;
        rows.iter().map(profile_entry_from_row).collect()
    }

    async fn tickets(&self, session_id: i64) -> Result<Vec<Ticket>, StoreError> {
        let rows =
            sqlx::query("SELECT * FROM helpdesk_tickets WHERE session_id = $1 ORDER BY ticket_no")
                .bind(session_id)
                .fetch_all(&self.pool)
                .await
                .map_err(StoreError::db("reading tickets"))?;
        rows.iter().map(ticket_from_row).collect()
    }

    async fn weekly_reviews(&self) -> Result<Vec<WeeklyReviewSubscription>, StoreError> {
        let rows = sqlx::query(
            "SELECT platform, user_id, chat, thread, timezone, created_ms FROM weekly_reviews ORDER BY platform, user_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("reading the weekly review list"))?;
        rows.iter().map(weekly_review_from_row).collect()
    }

    async fn user_data(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<serde_json::Value, StoreError> {
        use serde_json::{Value, json};
        let p = platform.as_str();
        // each query returns JSON rows built by PostgreSQL itself
        let rows = |sql: &'static str| {
            let pool = self.pool.clone();
            let user = user.to_string();
            async move {
                let rows: Vec<(Value,)> = sqlx::query_as(sql)
                    .bind(p)
                    .bind(&user)
                    .fetch_all(&pool)
                    .await
                    .map_err(StoreError::db("reading a user's data"))?;
                Ok::<Vec<Value>, StoreError>(rows.into_iter().map(|(value,)| value).collect())
            }
        };
        Ok(json!({
            "platform": p,
            "user": user,
            "profile": rows("SELECT json_build_object('display_name', display_name, 'first_seen_ms', first_seen_ms, 'last_seen_ms', last_seen_ms) FROM users WHERE platform = $1 AND user_id = $2").await?,
            "sessions": rows("SELECT json_build_object('id', s.id, 'flow', s.flow, 'status', s.status, 'chat', s.chat, 'thread', s.thread, 'language', s.language, 'country', s.country, 'timezone', s.timezone, 'created_ms', s.created_ms, 'messages', (SELECT COALESCE(json_agg(json_build_object('role', m.role, 'text', m.text, 'created_ms', m.created_ms)), '[]'::json) FROM (SELECT * FROM messages m WHERE m.session_id = s.id ORDER BY m.id) m)) FROM sessions s WHERE s.platform = $1 AND s.user_id = $2 ORDER BY s.id").await?,
            "submissions": rows("SELECT json_build_object('id', id, 'form', form_id, 'status', status, 'values', field_values::json, 'created_ms', created_ms, 'decision', decision, 'decided_ms', decided_ms) FROM submissions WHERE platform = $1 AND user_id = $2 ORDER BY id").await?,
            "help_desk_tickets": rows("SELECT json_build_object('question', t.question, 'answer', t.answer, 'feedback', t.feedback, 'created_ms', t.created_ms) FROM helpdesk_tickets t JOIN sessions s ON s.id = t.session_id WHERE s.platform = $1 AND s.user_id = $2 ORDER BY t.id").await?,
            "reading": rows("SELECT json_build_object('title', r.title, 'author', r.author, 'details', r.details::json, 'status', r.status, 'mode', r.interaction_mode, 'insights', (SELECT COALESCE(json_agg(json_build_object('kind', i.kind, 'text', i.text, 'created_ms', i.created_ms)), '[]'::json) FROM insights i WHERE i.record_id = r.id), 'moods', (SELECT COALESCE(json_agg(json_build_object('phase', m.phase, 'label', m.label, 'score', m.score)), '[]'::json) FROM moods m WHERE m.record_id = r.id)) FROM reading_records r WHERE r.platform = $1 AND r.user_id = $2 ORDER BY r.id").await?,
            "profile_entries": rows("SELECT json_build_object('kind', kind, 'text', text, 'created_ms', created_ms) FROM profile_entries WHERE platform = $1 AND user_id = $2 ORDER BY id").await?,
            "mentor_feedback": rows("SELECT json_build_object('type', feedback_type, 'content', content, 'created_ms', created_ms) FROM mentor_feedback WHERE platform = $1 AND user_id = $2 ORDER BY id").await?,
            "recommendations": rows("SELECT json_build_object('title', title, 'reason', reason, 'created_ms', created_ms) FROM recommendations WHERE platform = $1 AND user_id = $2 ORDER BY id").await?,
            "weekly_review": rows("SELECT json_build_object('chat', chat, 'thread', thread, 'timezone', timezone) FROM weekly_reviews WHERE platform = $1 AND user_id = $2").await?,
        }))
    }
}

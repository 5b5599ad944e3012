//! [`Reads`], written once for both backends over the dialect layer ([`crate::store::db`]):
//! every read on the reader pool (SQLite's WAL: never blocked by the writer). The turn's own
//! first read is [`crate::store::Store::load_for_turn`] in each backend, which also answers
//! from its hot-session cache.

use crate::message::{Platform, SessionKey};
use crate::store::db::{OnDb, failed, query};
use crate::store::reading::{Insight, Mood, ProfileEntry, ReadingRecord, WeeklyReviewSubscription};
use crate::store::rows::{
    SESSION_COLUMNS, corrupt, insight_from_row, llm_call_from_row, message_from_row, mood_from_row,
    profile_entry_from_row, reading_record_from_row, session_from_row, submission_from_row,
    ticket_from_row, weekly_review_from_row,
};
use crate::store::{
    LlmCallRecord, LlmUsage, Reads, SessionRecord, StoreError, StoredMessage, SubmissionRecord,
    Ticket,
};
use async_trait::async_trait;
use std::sync::LazyLock;

/// A limit as bound to a statement.
fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait]
impl<S: OnDb> Reads for S {
    async fn active_session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT {SESSION_COLUMNS} FROM sessions \
                 WHERE platform = $1 AND chat = $2 AND thread = $3 AND user_id = $4 AND status = 'active'"
            )
        });
        let row = query(SQL.as_str())
            .bind(key.platform.as_str())
            .bind(&key.chat)
            .bind(&key.thread)
            .bind(&key.user)
            .fetch_optional(self.db().read())
            .await
            .map_err(failed("loading the active session"))?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn session(&self, id: i64) -> Result<Option<SessionRecord>, StoreError> {
        static SQL: LazyLock<String> =
            LazyLock::new(|| format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"));
        let row = query(SQL.as_str())
            .bind(id)
            .fetch_optional(self.db().read())
            .await
            .map_err(failed("loading a session"))?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn last_finished_session(
        &self,
        key: &SessionKey,
        flow: &str,
    ) -> Result<Option<SessionRecord>, StoreError> {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT {SESSION_COLUMNS} FROM sessions \
                 WHERE platform = $1 AND user_id = $2 AND chat = $3 AND thread = $4 AND flow = $5 \
                   AND status = 'finished' \
                 ORDER BY updated_ms DESC, id DESC LIMIT 1"
            )
        });
        let row = query(SQL.as_str())
            .bind(key.platform.as_str())
            .bind(&key.user)
            .bind(&key.chat)
            .bind(&key.thread)
            .bind(flow)
            .fetch_optional(self.db().read())
            .await
            .map_err(failed("loading the last finished session"))?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn last_language(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<Option<String>, StoreError> {
        let row = query(
            "SELECT language FROM sessions WHERE platform = $1 AND user_id = $2 \
             AND language IS NOT NULL ORDER BY updated_ms DESC LIMIT 1",
        )
        .bind(platform.as_str())
        .bind(user)
        .fetch_optional(self.db().read())
        .await
        .map_err(failed("loading the user's last language"))?;
        row.map(|r| r.at(0))
            .transpose()
            .map_err(failed("loading the user's last language"))
    }

    async fn active_sessions(&self, n: usize) -> Result<Vec<SessionRecord>, StoreError> {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE status = 'active' ORDER BY updated_ms DESC LIMIT $1"
            )
        });
        let rows = query(SQL.as_str())
            .bind(limit(n))
            .fetch_all(self.db().read())
            .await
            .map_err(failed("listing sessions"))?;
        rows.iter().map(session_from_row).collect()
    }

    async fn count_active_sessions(&self) -> Result<i64, StoreError> {
        query("SELECT COUNT(*) FROM sessions WHERE status = 'active'")
            .fetch_one(self.db().read())
            .await
            .and_then(|r| r.at(0))
            .map_err(failed("counting active sessions"))
    }

    async fn recent_messages(
        &self,
        session_id: i64,
        n: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = query(
            "SELECT id, session_id, role, text, created_ms FROM \
             (SELECT * FROM messages WHERE session_id = $1 ORDER BY id DESC LIMIT $2) AS m ORDER BY id",
        )
        .bind(session_id)
        .bind(limit(n))
        .fetch_all(self.db().read())
        .await
        .map_err(failed("loading messages"))?;
        rows.iter().map(message_from_row).collect()
    }

    async fn llm_calls(&self, session_id: Option<i64>) -> Result<Vec<LlmCallRecord>, StoreError> {
        let rows = query(
            "SELECT session_id, agent, model, prompt_tokens, completion_tokens, latency_ms, error, created_ms, wasted \
             FROM llm_calls WHERE (CAST($1 AS BIGINT) IS NULL OR session_id = $1) ORDER BY id",
        )
        .bind(session_id)
        .fetch_all(self.db().read())
        .await
        .map_err(failed("reading the model ledger"))?;
        rows.iter().map(llm_call_from_row).collect()
    }

    async fn llm_usage(&self) -> Result<Vec<LlmUsage>, StoreError> {
        let rows = query(
            "SELECT COALESCE(s.flow, '-'), c.agent, COUNT(*), COUNT(c.error), \
             CAST(COALESCE(SUM(c.prompt_tokens), 0) AS BIGINT), CAST(COALESCE(SUM(c.completion_tokens), 0) AS BIGINT), \
             CAST(COALESCE(AVG(c.latency_ms), 0) AS DOUBLE PRECISION), CAST(COALESCE(MAX(c.latency_ms), 0) AS BIGINT), \
             COUNT(*) FILTER (WHERE c.wasted) \
             FROM llm_calls c LEFT JOIN sessions s ON s.id = c.session_id \
             GROUP BY 1, 2 ORDER BY 1, 2",
        )
        .fetch_all(self.db().read())
        .await
        .map_err(failed("summing the model ledger"))?;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        rows.iter()
            .map(|r| {
                Ok(LlmUsage {
                    flow: r.at(0)?,
                    agent: r.at(1)?,
                    calls: n(r.at(2)?),
                    errors: n(r.at(3)?),
                    prompt_tokens: n(r.at(4)?),
                    completion_tokens: n(r.at(5)?),
                    avg_latency_ms: r.at(6)?,
                    max_latency_ms: n(r.at(7)?),
                    wasted: n(r.at(8)?),
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(failed("summing the model ledger"))
    }

    async fn submissions(
        &self,
        form_id: Option<&str>,
    ) -> Result<Vec<SubmissionRecord>, StoreError> {
        let rows = query(
            "SELECT * FROM submissions WHERE (CAST($1 AS TEXT) IS NULL OR form_id = $1) ORDER BY id",
        )
        .bind(form_id)
        .fetch_all(self.db().read())
        .await
        .map_err(failed("reading submissions"))?;
        rows.iter().map(submission_from_row).collect()
    }

    async fn reading_records(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<Vec<ReadingRecord>, StoreError> {
        let rows = query(
            "SELECT id, title, author, details, status, interaction_mode, started_ms, finished_ms FROM reading_records \
             WHERE platform = $1 AND user_id = $2 ORDER BY updated_ms DESC, id DESC",
        )
        .bind(platform.as_str())
        .bind(user)
        .fetch_all(self.db().read())
        .await
        .map_err(failed("reading records"))?;
        rows.iter().map(reading_record_from_row).collect()
    }

    async fn insights(&self, record_id: i64) -> Result<Vec<Insight>, StoreError> {
        let rows =
            query("SELECT kind, text, created_ms FROM insights WHERE record_id = $1 ORDER BY id")
                .bind(record_id)
                .fetch_all(self.db().read())
                .await
                .map_err(failed("reading insights"))?;
        rows.iter().map(insight_from_row).collect()
    }

    async fn moods(&self, record_id: i64) -> Result<Vec<Mood>, StoreError> {
        let rows = query(
            "SELECT phase, label, score, created_ms FROM moods WHERE record_id = $1 ORDER BY id",
        )
        .bind(record_id)
        .fetch_all(self.db().read())
        .await
        .map_err(failed("reading moods"))?;
        rows.iter().map(mood_from_row).collect()
    }

    async fn profile_entries(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<Vec<ProfileEntry>, StoreError> {
        let rows = query(
            "SELECT kind, text, created_ms FROM profile_entries WHERE platform = $1 AND user_id = $2 ORDER BY id",
        )
        .bind(platform.as_str())
        .bind(user)
        .fetch_all(self.db().read())
        .await
        .map_err(failed("reading the profile"))?;
        rows.iter().map(profile_entry_from_row).collect()
    }

    async fn tickets(&self, session_id: i64) -> Result<Vec<Ticket>, StoreError> {
        let rows = query("SELECT * FROM helpdesk_tickets WHERE session_id = $1 ORDER BY ticket_no")
            .bind(session_id)
            .fetch_all(self.db().read())
            .await
            .map_err(failed("reading tickets"))?;
        rows.iter().map(ticket_from_row).collect()
    }

    async fn weekly_reviews(&self) -> Result<Vec<WeeklyReviewSubscription>, StoreError> {
        let rows = query(
            "SELECT platform, user_id, chat, thread, timezone, created_ms FROM weekly_reviews ORDER BY platform, user_id",
        )
        .fetch_all(self.db().read())
        .await
        .map_err(failed("reading the weekly review list"))?;
        rows.iter().map(weekly_review_from_row).collect()
    }

    async fn user_data(
        &self,
        platform: Platform,
        user: &str,
    ) -> Result<serde_json::Value, StoreError> {
        use serde_json::{Value, json};
        let db = self.db();
        let p = platform.as_str();
        let (obj, arr, js) = (
            db.json_object(),
            |e: &str| db.json_array_of(e),
            |c: &str| db.json_of(c),
        );
        // each query returns rows of JSON built by the database itself, as text
        let rows = |select: String, from: String| async move {
            let rows = query(format!("SELECT CAST({select} AS TEXT) {from}"))
                .bind(p)
                .bind(user)
                .fetch_all(db.read())
                .await
                .map_err(failed("reading a user's data"))?;
            rows.iter()
                .map(|r| {
                    let text: String = r.at(0).map_err(failed("reading a user's data"))?;
                    serde_json::from_str::<Value>(&text).map_err(|e| corrupt("user data", e))
                })
                .collect::<Result<Vec<Value>, StoreError>>()
        };
        let messages = arr(&format!(
            "{obj}('role', m.role, 'text', m.text, 'created_ms', m.created_ms)"
        ));
        let insights = arr(&format!(
            "{obj}('kind', i.kind, 'text', i.text, 'created_ms', i.created_ms)"
        ));
        let moods = arr(&format!(
            "{obj}('phase', m.phase, 'label', m.label, 'score', m.score)"
        ));
        Ok(json!({
            "platform": p,
            "user": user,
            "profile": rows(
                format!("{obj}('display_name', display_name, 'first_seen_ms', first_seen_ms, 'last_seen_ms', last_seen_ms)"),
                "FROM users WHERE platform = $1 AND user_id = $2".into(),
            ).await?,
            "sessions": rows(
                format!("{obj}('id', s.id, 'flow', s.flow, 'status', s.status, 'chat', s.chat, 'thread', s.thread, \
                 'language', s.language, 'country', s.country, 'timezone', s.timezone, 'created_ms', s.created_ms, \
                 'messages', (SELECT {messages} FROM (SELECT * FROM messages m WHERE m.session_id = s.id ORDER BY m.id) m))"),
                "FROM sessions s WHERE s.platform = $1 AND s.user_id = $2 ORDER BY s.id".into(),
            ).await?,
            "submissions": rows(
                format!("{obj}('id', id, 'form', form_id, 'status', status, 'values', {}, 'created_ms', created_ms, \
                 'decision', decision, 'decided_ms', decided_ms)", js("field_values")),
                "FROM submissions WHERE platform = $1 AND user_id = $2 ORDER BY id".into(),
            ).await?,
            "help_desk_tickets": rows(
                format!("{obj}('question', t.question, 'answer', t.answer, 'feedback', t.feedback, 'created_ms', t.created_ms)"),
                "FROM helpdesk_tickets t JOIN sessions s ON s.id = t.session_id WHERE s.platform = $1 AND s.user_id = $2 ORDER BY t.id".into(),
            ).await?,
            "reading": rows(
                format!("{obj}('title', r.title, 'author', r.author, 'details', {}, 'status', r.status, \
                 'mode', r.interaction_mode, 'insights', (SELECT {insights} FROM insights i WHERE i.record_id = r.id), \
                 'moods', (SELECT {moods} FROM moods m WHERE m.record_id = r.id))", js("r.details")),
                "FROM reading_records r WHERE r.platform = $1 AND r.user_id = $2 ORDER BY r.id".into(),
            ).await?,
            "profile_entries": rows(
                format!("{obj}('kind', kind, 'text', text, 'created_ms', created_ms)"),
                "FROM profile_entries WHERE platform = $1 AND user_id = $2 ORDER BY id".into(),
            ).await?,
            "mentor_feedback": rows(
                format!("{obj}('type', feedback_type, 'content', content, 'created_ms', created_ms)"),
                "FROM mentor_feedback WHERE platform = $1 AND user_id = $2 ORDER BY id".into(),
            ).await?,
            "recommendations": rows(
                format!("{obj}('title', title, 'reason', reason, 'created_ms', created_ms)"),
                "FROM recommendations WHERE platform = $1 AND user_id = $2 ORDER BY id".into(),
            ).await?,
            "weekly_review": rows(
                format!("{obj}('chat', chat, 'thread', thread, 'timezone', timezone)"),
                "FROM weekly_reviews WHERE platform = $1 AND user_id = $2".into(),
            ).await?,
        }))
    }
}

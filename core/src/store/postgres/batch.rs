//! The ordinary turns of a writer's batch ([`super::writer`]) in one multi-row statement
//! per table: their users and new sessions, the session updates (each checked against the
//! version its turn loaded), processed updates, messages and model calls. A conflict or a
//! duplicate among them makes [`fast_turns`] answer `None`: the writer rolls the batch back
//! to its savepoint and writes the same turns one by one ([`super::turn::commit`]), which
//! says which turn was refused.

use super::turn::clean;
use crate::store::rows::{applied, from_ms, ms, pending_json};
use crate::store::{
    CommittedTurn, ProcessedUpdate, Role, SessionRecord, StateChange, StoreError, StoredMessage,
    TurnCommit,
};
use chrono::Utc;
use sqlx::PgConnection;
use std::collections::HashSet;

/// Ids for `sessions` new sessions and `messages` messages, from their tables' identity
/// sequences, ascending (ids a rolled-back batch drew are skipped, as sequences do).
async fn draw_ids(
    tx: &mut PgConnection,
    sessions: usize,
    messages: usize,
) -> Result<(Vec<i64>, Vec<i64>), StoreError> {
    let rows: Vec<(bool, i64)> = sqlx::query_as(
        "SELECT true, nextval(pg_get_serial_sequence('sessions', 'id')) FROM generate_series(1, $1) \
         UNION ALL SELECT false, nextval(pg_get_serial_sequence('messages', 'id')) FROM generate_series(1, $2)",
    )
    .bind(i64::try_from(sessions).unwrap_or(i64::MAX))
    .bind(i64::try_from(messages).unwrap_or(i64::MAX))
    .fetch_all(&mut *tx)
    .await
    .map_err(StoreError::db("drawing ids"))?;
    let (mut session_ids, mut message_ids): (Vec<_>, Vec<_>) = (Vec::new(), Vec::new());
    for (is_session, id) in rows {
        if is_session {
            session_ids.push(id);
        } else {
            message_ids.push(id);
        }
    }
    session_ids.sort_unstable();
    message_ids.sort_unstable();
    if session_ids.len() != sessions || message_ids.len() != messages {
        return Err(StoreError::Corrupt("the database drew too few ids".into()));
    }
    Ok((session_ids, message_ids))
}

/// The ordinary turns `commits` in one statement per table. `None`: one of them was
/// refused (a conflict or a duplicate); the caller rolls back and writes them one by one,
/// which says which.
pub(super) async fn fast_turns(
    tx: &mut PgConnection,
    commits: &[&TurnCommit],
) -> Result<Option<Vec<(CommittedTurn, Vec<StoredMessage>)>>, StoreError> {
    let now_ms = ms(Utc::now());
    let now = from_ms(now_ms);
    let mut sessions: Vec<SessionRecord> = commits.iter().map(|c| applied(c)).collect();
    let new = sessions.iter().filter(|s| s.is_new()).count();
    let texts = |c: &&TurnCommit| {
        c.changes
            .iter()
            .filter(|ch| {
                matches!(
                    ch,
                    StateChange::AddUserMessage { .. } | StateChange::AddAssistantMessage { .. }
                )
            })
            .count()
    };
    let message_count: usize = commits.iter().map(texts).sum();
    let (session_ids, message_ids) = draw_ids(tx, new, message_count).await?;
    let mut session_ids = session_ids.into_iter();
    for session in sessions.iter_mut().filter(|s| s.is_new()) {
        session.id = session_ids
            .next()
            .ok_or_else(|| StoreError::Corrupt("too few session ids".into()))?;
    }
    if new > 0 && !insert_sessions(tx, commits, &sessions, now_ms).await? {
        return Ok(None);
    }
    if !update_sessions(tx, commits, &sessions, now_ms).await? {
        return Ok(None);
    }
    if !mark_processed(tx, commits, &sessions, now_ms).await? {
        return Ok(None);
    }
    let messages = insert_messages(tx, commits, &sessions, message_ids, now_ms).await?;
    insert_calls(tx, commits, &sessions).await?;
    let mut written = Vec::with_capacity(commits.len());
    for ((commit, mut session), messages) in commits.iter().zip(sessions).zip(messages) {
        if commit.session.is_new() {
            session.version = 1;
            session.created_at = now;
        } else {
            session.version = commit.session.version + 1;
        }
        session.updated_at = now;
        let assistant_message_ids = messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .map(|m| m.id)
            .collect();
        written.push((
            CommittedTurn {
                session,
                assistant_message_ids,
            },
            messages,
        ));
    }
    Ok(Some(written))
}

/// The users and rows of the new sessions among `sessions`; false when one could not be
/// created (another session is active in its place).
async fn insert_sessions(
    tx: &mut PgConnection,
    commits: &[&TurnCommit],
    sessions: &[SessionRecord],
    now_ms: i64,
) -> Result<bool, StoreError> {
    // users once each (an upsert may not touch a row twice), in one order for every
    // writer (two writers with users in common wait for each other, never deadlock)
    let mut seen = HashSet::new();
    let (mut platforms, mut ids, mut names) = (Vec::new(), Vec::new(), Vec::new());
    for (commit, session) in commits.iter().zip(sessions) {
        if commit.session.is_new() && seen.insert((session.key.platform, commit.user.id.as_str())) {
            platforms.push(session.key.platform.as_str());
            ids.push(clean(&commit.user.id).into_owned());
            names.push(clean(&commit.user.display_name).into_owned());
        }
    }
    sqlx::query(
        "INSERT INTO users (platform, user_id, display_name, first_seen_ms, last_seen_ms) \
         SELECT p, u, n, $4, $4 FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[]) AS t(p, u, n) ORDER BY p, u \
         ON CONFLICT (platform, user_id) DO UPDATE SET display_name = excluded.display_name, last_seen_ms = excluded.last_seen_ms",
    )
    .bind(&platforms)
    .bind(&ids)
    .bind(&names)
    .bind(now_ms)
    .execute(&mut *tx)
    .await
    .map_err(StoreError::db("saving the users"))?;
    let mut rows = SessionColumns::default();
    let mut platforms = Vec::new();
    let (mut chats, mut threads, mut users, mut flows) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (commit, session) in commits.iter().zip(sessions) {
        if !commit.session.is_new() {
            continue;
        }
        rows.push(session)?;
        platforms.push(session.key.platform.as_str());
        chats.push(clean(&session.key.chat).into_owned());
        threads.push(clean(&session.key.thread).into_owned());
        users.push(clean(&session.key.user).into_owned());
        flows.push(session.flow.as_str());
    }
    let created = sqlx::query(
        "INSERT INTO sessions (id, platform, chat, thread, user_id, flow, current_agent, language, country, timezone, \
         state, pending_options, status, version, created_ms, updated_ms) \
         SELECT i, p, c, th, u, f, a, l, co, tz, st, po, s, 1, $14, $14 FROM UNNEST($1::BIGINT[], $2::TEXT[], $3::TEXT[], \
         $4::TEXT[], $5::TEXT[], $6::TEXT[], $7::TEXT[], $8::TEXT[], $9::TEXT[], $10::TEXT[], $11::TEXT[], $12::TEXT[], \
         $13::TEXT[]) AS t(i, p, c, th, u, f, a, l, co, tz, st, po, s) ON CONFLICT DO NOTHING",
    )
    .bind(&rows.ids)
    .bind(&platforms)
    .bind(&chats)
    .bind(&threads)
    .bind(&users)
    .bind(&flows)
    .bind(&rows.agents)
    .bind(&rows.languages)
    .bind(&rows.countries)
    .bind(&rows.timezones)
    .bind(&rows.states)
    .bind(&rows.pending)
    .bind(&rows.statuses)
    .bind(now_ms)
    .execute(&mut *tx)
    .await
    .map_err(StoreError::db("creating the sessions"))?;
    Ok(created.rows_affected() == rows.ids.len() as u64)
}

/// The columns a turn changes in a session row, one array per column.
#[derive(Default)]
struct SessionColumns {
    ids: Vec<i64>,
    agents: Vec<Option<String>>,
    languages: Vec<Option<String>>,
    countries: Vec<Option<String>>,
    timezones: Vec<Option<String>>,
    states: Vec<String>,
    pending: Vec<Option<String>>,
    statuses: Vec<&'static str>,
}

impl SessionColumns {
    fn push(&mut self, session: &SessionRecord) -> Result<(), StoreError> {
        let text = |t: &Option<String>| t.as_deref().map(|t| clean(t).into_owned());
        self.ids.push(session.id);
        self.agents.push(text(&session.current_agent));
        self.languages.push(text(&session.language));
        self.countries.push(text(&session.country));
        self.timezones.push(text(&session.timezone));
        self.states
            .push(clean(session.state.as_json()).into_owned());
        self.pending
            .push(pending_json(session)?.map(|p| clean(&p).into_owned()));
        self.statuses.push(session.status.as_str());
        Ok(())
    }
}

/// The existing sessions among `sessions` as their turns leave them, each only from the
/// version its turn loaded; false when one had moved on (another instance's turn).
async fn update_sessions(
    tx: &mut PgConnection,
    commits: &[&TurnCommit],
    sessions: &[SessionRecord],
    now_ms: i64,
) -> Result<bool, StoreError> {
    let mut rows = SessionColumns::default();
    let mut versions = Vec::new();
    for (commit, session) in commits.iter().zip(sessions) {
        if !commit.session.is_new() {
            rows.push(session)?;
            versions.push(commit.session.version);
        }
    }
    if rows.ids.is_empty() {
        return Ok(true);
    }
    let updated = sqlx::query(
        "UPDATE sessions AS s SET current_agent = t.a, language = t.l, country = t.co, timezone = t.tz, state = t.st, \
         pending_options = t.po, status = t.s, version = s.version + 1, updated_ms = $10 \
         FROM UNNEST($1::BIGINT[], $2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[], $7::TEXT[], $8::TEXT[], \
         $9::TEXT[]) AS t(i, v, a, l, co, tz, st, po, s) WHERE s.id = t.i AND s.version = t.v",
    )
    .bind(&rows.ids)
    .bind(&versions)
    .bind(&rows.agents)
    .bind(&rows.languages)
    .bind(&rows.countries)
    .bind(&rows.timezones)
    .bind(&rows.states)
    .bind(&rows.pending)
    .bind(&rows.statuses)
    .bind(now_ms)
    .execute(&mut *tx)
    .await
    .map_err(StoreError::db("updating the sessions"))?;
    Ok(updated.rows_affected() == rows.ids.len() as u64)
}

/// The turns' platform updates marked processed; false when one was already.
async fn mark_processed(
    tx: &mut PgConnection,
    commits: &[&TurnCommit],
    sessions: &[SessionRecord],
    now_ms: i64,
) -> Result<bool, StoreError> {
    let (mut platforms, mut chats, mut ids, mut session_ids) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (commit, session) in commits.iter().zip(sessions) {
        if let Some(ProcessedUpdate {
            platform,
            chat,
            message_id,
        }) = &commit.processed
        {
            platforms.push(platform.as_str());
            chats.push(clean(chat).into_owned());
            ids.push(clean(message_id).into_owned());
            session_ids.push(session.id);
        }
    }
    if platforms.is_empty() {
        return Ok(true);
    }
    let marked = sqlx::query(
        "INSERT INTO processed_updates (platform, chat, message_id, session_id, created_ms) \
         SELECT p, c, m, s, $5 FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[]) AS t(p, c, m, s) \
         ON CONFLICT DO NOTHING",
    )
    .bind(&platforms)
    .bind(&chats)
    .bind(&ids)
    .bind(&session_ids)
    .bind(now_ms)
    .execute(&mut *tx)
    .await
    .map_err(StoreError::db("marking the updates processed"))?;
    Ok(marked.rows_affected() == platforms.len() as u64)
}

/// Every turn's transcript messages, with the ids drawn for them in order; returns each
/// turn's messages as written.
async fn insert_messages(
    tx: &mut PgConnection,
    commits: &[&TurnCommit],
    sessions: &[SessionRecord],
    ids: Vec<i64>,
    now_ms: i64,
) -> Result<Vec<Vec<StoredMessage>>, StoreError> {
    let at = from_ms(now_ms);
    let mut ids = ids.into_iter();
    let mut written = Vec::with_capacity(commits.len());
    let (mut all_ids, mut session_ids, mut roles, mut texts, mut delivered) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut traces: Vec<Option<&str>> = Vec::new();
    for (commit, session) in commits.iter().zip(sessions) {
        let mut messages = Vec::new();
        for change in &commit.changes {
            let (role, text, trace) = match change {
                StateChange::AddUserMessage { text } => (Role::User, text, None),
                StateChange::AddAssistantMessage { text, trace } => {
                    (Role::Assistant, text, trace.as_deref())
                }
                _ => continue,
            };
            let id = ids
                .next()
                .ok_or_else(|| StoreError::Corrupt("too few message ids".into()))?;
            let text = clean(text).into_owned();
            all_ids.push(id);
            session_ids.push(session.id);
            roles.push(role.as_str());
            delivered.push(role != Role::Assistant);
            traces.push(trace);
            texts.push(text.clone());
            messages.push(StoredMessage {
                id,
                session_id: session.id,
                role,
                text,
                at,
            });
        }
        written.push(messages);
    }
    if !all_ids.is_empty() {
        sqlx::query(
            "INSERT INTO messages (id, session_id, role, text, delivered, trace, created_ms) \
             SELECT i, s, r, t, d, w, $7 FROM UNNEST($1::BIGINT[], $2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::BOOL[], $6::TEXT[]) \
             AS u(i, s, r, t, d, w)",
        )
        .bind(&all_ids)
        .bind(&session_ids)
        .bind(&roles)
        .bind(&texts)
        .bind(&delivered)
        .bind(&traces)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("saving the messages"))?;
    }
    Ok(written)
}

/// Every turn's model calls, in one statement.
async fn insert_calls(
    tx: &mut PgConnection,
    commits: &[&TurnCommit],
    sessions: &[SessionRecord],
) -> Result<(), StoreError> {
    let mut c = CallColumns::default();
    for (commit, session) in commits.iter().zip(sessions) {
        for call in &commit.llm_calls {
            c.push(call, Some(session.id));
        }
    }
    c.insert(tx).await
}

/// Model calls, one array per column.
#[derive(Default)]
pub(super) struct CallColumns {
    sessions: Vec<Option<i64>>,
    agents: Vec<String>,
    models: Vec<String>,
    prompt: Vec<i64>,
    completion: Vec<i64>,
    latency: Vec<i64>,
    errors: Vec<Option<String>>,
    at: Vec<i64>,
    wasted: Vec<bool>,
}

impl CallColumns {
    /// `call`, of its own session or else `session_id`.
    pub(super) fn push(&mut self, call: &crate::store::LlmCallRecord, session_id: Option<i64>) {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.sessions.push(call.session_id.or(session_id));
        self.agents.push(clean(&call.agent).into_owned());
        self.models.push(clean(&call.model).into_owned());
        self.prompt.push(n(call.prompt_tokens));
        self.completion.push(n(call.completion_tokens));
        self.latency.push(n(call.latency_ms));
        self.errors
            .push(call.error.as_deref().map(|e| clean(e).into_owned()));
        self.at.push(ms(call.at));
        self.wasted.push(call.wasted);
    }

    pub(super) async fn insert(&self, tx: &mut PgConnection) -> Result<(), StoreError> {
        if self.agents.is_empty() {
            return Ok(());
        }
        sqlx::query(
            "INSERT INTO llm_calls (session_id, agent, model, prompt_tokens, completion_tokens, latency_ms, error, created_ms, wasted) \
             SELECT * FROM UNNEST($1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::BIGINT[], $6::BIGINT[], $7::TEXT[], \
             $8::BIGINT[], $9::BOOL[])",
        )
        .bind(&self.sessions)
        .bind(&self.agents)
        .bind(&self.models)
        .bind(&self.prompt)
        .bind(&self.completion)
        .bind(&self.latency)
        .bind(&self.errors)
        .bind(&self.at)
        .bind(&self.wasted)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("recording model calls"))?;
        Ok(())
    }
}

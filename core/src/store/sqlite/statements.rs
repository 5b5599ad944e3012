//! The statements both write paths send: each builds one statement for any number of rows,
//! reading them from one JSON argument with `json_each`, so that its text never changes and
//! SQLite prepares it once. Used by [`super::batch`] (all of a batch in one query) and
//! [`super::turn_by_turn`] (one turn at a time).

use super::Sql;
use super::rows::Prepared;
use crate::message::{SessionKey, UserRef};
use crate::store::rows::{corrupt, ms};
use crate::store::{
    LlmCallRecord, ProcessedUpdate, Role, SessionRecord, StateChange, StoreError, Submission,
    TurnCommit,
};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use std::collections::HashMap;

/// A model call's row: its session (the turn's, where the call names none) and the call.
pub(super) type CallRow<'a> = (Option<i64>, &'a LlmCallRecord);

pub(super) fn push_llm_calls(sql: &mut Sql, calls: &[CallRow<'_>]) -> Result<(), StoreError> {
    let rows: Vec<_> = calls
        .iter()
        .map(|(session_id, call)| {
            (
                call.session_id.or(*session_id),
                call.agent.as_str(),
                call.model.as_str(),
                call.prompt_tokens,
                call.completion_tokens,
                call.latency_ms,
                call.error.as_deref(),
                ms(call.at),
                i64::from(call.wasted),
            )
        })
        .collect();
    sql.push(
        "INSERT INTO llm_calls (session_id, agent, model, prompt_tokens, completion_tokens, latency_ms, error, created_ms, wasted) \
         SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6, value->>7, value->>8 FROM ",
    );
    push_rows(sql, &rows)
}

/// A submission's row: its session, the session's place, the submission.
pub(super) type SubmissionRow<'a> = (i64, &'a SessionKey, &'a Submission);

/// The submissions among `changes` (a turn's, of the session `session_id` at `key`).
pub(super) fn submission_rows<'a>(
    session_id: i64,
    key: &'a SessionKey,
    changes: &'a [StateChange],
    rows: &mut Vec<SubmissionRow<'a>>,
) {
    rows.extend(changes.iter().filter_map(|change| match change {
        StateChange::SaveSubmission { submission } => Some((session_id, key, submission)),
        _ => None,
    }));
}

pub(super) fn push_submissions(
    sql: &mut Sql,
    rows: &[SubmissionRow<'_>],
    now_ms: i64,
) -> Result<(), StoreError> {
    let json =
        |v: &serde_json::Value| serde_json::to_string(v).map_err(|e| corrupt("submission", e));
    let mut written = Vec::with_capacity(rows.len());
    for (session_id, key, s) in rows {
        written.push((
            *session_id,
            key.platform.as_str(),
            key.user.as_str(),
            s.applicant.as_str(),
            s.form_id.as_str(),
            s.variant.as_str(),
            s.status.as_str(),
            s.language.as_deref(),
            s.country.as_deref(),
            s.timezone.as_deref(),
            json(&s.values)?,
            json(&s.facts)?,
            json(&s.flags)?,
            s.audit.as_ref().map(json).transpose()?,
        ));
    }
    sql.push(
        "INSERT INTO submissions (session_id, platform, user_id, applicant, form_id, variant, status, language, \
         country, timezone, field_values, facts, flags, audit, created_ms) \
         SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6, value->>7, \
         value->>8, value->>9, value->>10, value->>11, value->>12, value->>13, ",
    );
    sql.push_bind(now_ms).push(" FROM ");
    push_rows(sql, &written)
}

/// The rows of `sessions`: those whose status changes, and the others. (SQLite rewrites
/// every index of a column in the SET list, changed or not: a session whose status stays
/// leaves `sessions_one_active`, a page per turn, alone.)
#[allow(clippy::type_complexity)]
pub(super) fn session_rows(
    sessions: Vec<SessionUpdate<'_>>,
) -> (Vec<SessionUpdate<'_>>, Vec<SessionUpdate<'_>>) {
    sessions.into_iter().partition(|u| u.status_changed)
}

/// `rows` updated, their status too if `status` ([`session_rows`]).
pub(super) fn push_session_updates(
    sql: &mut Sql,
    rows: &[SessionUpdate<'_>],
    status: bool,
    now_ms: i64,
) -> Result<(), StoreError> {
    let mut states = Texts::default();
    let rows: Vec<_> = rows
        .iter()
        .map(|u| {
            let s = &u.after.session;
            (
                s.id,
                s.version,
                s.current_agent.as_deref(),
                s.language.as_deref(),
                s.country.as_deref(),
                s.timezone.as_deref(),
                states.add(s.state.as_json()),
                u.after.pending.as_deref(),
                s.status.as_str(),
            )
        })
        .collect();
    sql.push(
        "UPDATE sessions SET current_agent = v.value->>2, language = v.value->>3, country = v.value->>4, \
         timezone = v.value->>5, state = ",
    );
    states.push_text(sql, "v.value->6");
    sql.push(", pending_options = v.value->>7, ");
    if status {
        sql.push("status = v.value->>8, ");
    }
    sql.push("version = version + 1, updated_ms = ");
    sql.push_bind(now_ms).push(" FROM ");
    push_rows(sql, &rows)?;
    sql.push(" AS v WHERE sessions.id = v.value->>0 AND sessions.version = v.value->>1");
    Ok(())
}

/// Long texts of a statement's rows (sessions' states, a few KB each) bound as one BLOB,
/// each row carrying where its text lies in it, `[start, length]` ([`Texts::add`]): in the
/// rows' JSON ([`push_rows`]) each would be escaped on the way in and parsed back by
/// SQLite (profiled under load: 4 % of all CPU for the states), while a slice of a BLOB is
/// a copy.
#[derive(Default)]
pub(super) struct Texts(Vec<u8>);

impl Texts {
    /// `text` appended; returns where a row finds it (SQLite's `substr` counts from 1).
    pub(super) fn add(&mut self, text: &str) -> [usize; 2] {
        let start = self.0.len() + 1;
        self.0.extend_from_slice(text.as_bytes());
        [start, text.len()]
    }

    /// The text whose place is `place` (a JSON array `[start, length]` of the row,
    /// [`Texts::add`]), the BLOB bound here. (Every text came from a `&str` whole: the bytes
    /// are UTF-8, which `CAST` reads them as.)
    pub(super) fn push_text(&mut self, sql: &mut Sql, place: &str) {
        sql.push("CAST(substr(")
            .push_bind(std::mem::take(&mut self.0))
            .push(format!(", {place}->>0, {place}->>1) AS TEXT)"));
    }
}

/// A session row to update: as the turn leaves it (with the version it loaded; its pending
/// options as written, [`Prepared`]), and whether the turn changed its status.
pub(super) struct SessionUpdate<'a> {
    pub(super) after: &'a Prepared,
    pub(super) status_changed: bool,
}

impl<'a> SessionUpdate<'a> {
    pub(super) fn of(commit: &TurnCommit, after: &'a Prepared) -> Self {
        SessionUpdate {
            after,
            status_changed: commit.session.status != after.session.status,
        }
    }
}

/// Sessions a flow switch leaves behind, finished.
pub(super) fn push_finished(sql: &mut Sql, ids: &[i64], now_ms: i64) -> Result<(), StoreError> {
    sql.push("UPDATE sessions SET status = 'finished', version = version + 1, updated_ms = ");
    sql.push_bind(now_ms)
        .push(" WHERE id IN (SELECT value FROM ");
    push_each(sql, ids)?;
    sql.push(")");
    Ok(())
}

/// The users of new sessions (sessions reference them), their names as they are now.
pub(super) fn push_users(
    sql: &mut Sql,
    users: &[(&SessionKey, &UserRef)],
    now_ms: i64,
) -> Result<(), StoreError> {
    let rows: Vec<_> = users
        .iter()
        .map(|(key, user)| {
            (
                key.platform.as_str(),
                user.id.as_str(),
                user.display_name.as_str(),
            )
        })
        .collect();
    sql.push(
        "INSERT INTO users (platform, user_id, display_name, first_seen_ms, last_seen_ms) \
         SELECT value->>0, value->>1, value->>2, ",
    );
    sql.push_bind(now_ms)
        .push(", ")
        .push_bind(now_ms)
        .push(" FROM ");
    push_rows(sql, &rows)?;
    // (`WHERE true`: an upsert's SELECT needs a WHERE clause to be read as one)
    sql.push(
        " WHERE true ON CONFLICT (platform, user_id) DO UPDATE SET display_name = excluded.display_name, \
         last_seen_ms = excluded.last_seen_ms",
    );
    Ok(())
}

/// New sessions at version 1, their pending options as [`Prepared`] wrote them;
/// a session without an id yet (0) gets SQLite's.
pub(super) fn push_new_sessions(
    sql: &mut Sql,
    sessions: &[(&SessionRecord, &Prepared)],
    now_ms: i64,
) -> Result<(), StoreError> {
    let mut states = Texts::default();
    let rows: Vec<_> = sessions
        .iter()
        .map(|(s, after)| {
            let key = &s.key;
            (
                (!s.is_new()).then_some(s.id),
                key.platform.as_str(),
                key.chat.as_str(),
                key.thread.as_str(),
                key.user.as_str(),
                s.flow.as_str(),
                s.current_agent.as_deref(),
                s.language.as_deref(),
                s.country.as_deref(),
                s.timezone.as_deref(),
                states.add(s.state.as_json()),
                after.pending.as_deref(),
                s.status.as_str(),
            )
        })
        .collect();
    sql.push(
        "INSERT INTO sessions (id, platform, chat, thread, user_id, flow, current_agent, language, country, \
         timezone, state, pending_options, status, version, created_ms, updated_ms) \
         SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6, value->>7, \
         value->>8, value->>9, ",
    );
    states.push_text(sql, "value->10");
    sql.push(", value->>11, value->>12, 1, ");
    sql.push_bind(now_ms)
        .push(", ")
        .push_bind(now_ms)
        .push(" FROM ");
    push_rows(sql, &rows)
}

/// `updates` marked processed; one processed already is left as it is when `skip_known`,
/// else it fails the statement (its primary key).
pub(super) fn push_processed(
    sql: &mut Sql,
    updates: &[(&ProcessedUpdate, i64)],
    skip_known: bool,
    now_ms: i64,
) -> Result<(), StoreError> {
    let rows: Vec<_> = updates
        .iter()
        .map(|(p, session_id)| {
            (
                p.platform.as_str(),
                p.chat.as_str(),
                p.message_id.as_str(),
                *session_id,
            )
        })
        .collect();
    sql.push(
        "INSERT INTO processed_updates (platform, chat, message_id, session_id, created_ms) \
         SELECT value->>0, value->>1, value->>2, value->>3, ",
    );
    sql.push_bind(now_ms).push(" FROM ");
    push_rows(sql, &rows)?;
    if skip_known {
        sql.push(" WHERE true ON CONFLICT DO NOTHING");
    }
    Ok(())
}

/// A transcript message's row: session, role, text, trace.
pub(super) type MessageRow<'a> = (i64, Role, &'a str, Option<&'a str>);

/// The transcript messages among the changes of each session's turn.
pub(super) fn message_rows<'a>(
    turns: impl Iterator<Item = (i64, &'a [StateChange])>,
) -> Vec<MessageRow<'a>> {
    turns
        .flat_map(|(session_id, changes)| {
            changes.iter().filter_map(move |change| match change {
                StateChange::AddUserMessage { text } => {
                    Some((session_id, Role::User, text.as_str(), None))
                }
                StateChange::AddAssistantMessage { text, trace } => {
                    Some((session_id, Role::Assistant, text.as_str(), trace.as_deref()))
                }
                _ => None,
            })
        })
        .collect()
}

/// `messages` written, numbered from `first` (the fast path's ids, [`NextIds`]); with
/// none, SQLite numbers them and the statement returns each one's id and session.
pub(super) fn push_messages(
    sql: &mut Sql,
    messages: &[MessageRow<'_>],
    first: Option<i64>,
    now_ms: i64,
) -> Result<(), StoreError> {
    let rows: Vec<_> = messages
        .iter()
        .zip(0..)
        .map(|((session_id, role, text, trace), i)| {
            (
                *session_id,
                role.as_str(),
                *text,
                *role != Role::Assistant,
                first.map(|first| first + i),
                *trace,
            )
        })
        .collect();
    sql.push(
        "INSERT INTO messages (session_id, role, text, delivered, id, trace, created_ms) \
         SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, ",
    );
    sql.push_bind(now_ms).push(" FROM ");
    push_rows(sql, &rows)?;
    if first.is_none() {
        sql.push(" RETURNING id, session_id");
    }
    Ok(())
}

/// The ids [`push_messages`] returned, per session, in order.
pub(super) fn messages_written(rows: &[SqliteRow]) -> Result<HashMap<i64, Vec<i64>>, StoreError> {
    let mut written: HashMap<i64, Vec<i64>> = HashMap::new();
    for row in rows {
        let get = |e: sqlx::Error| corrupt("message row", e);
        written
            .entry(row.try_get("session_id").map_err(get)?)
            .or_default()
            .push(row.try_get("id").map_err(get)?);
    }
    // RETURNING order is unspecified; ids grow with insertion order
    for ids in written.values_mut() {
        ids.sort_unstable();
    }
    Ok(written)
}

/// `rows` as one JSON array bound as one argument (each row an array of its values, which
/// the statement reads as `value->>0`, `value->>1`, …) instead of one argument per value,
/// so that a statement's text — and the statement SQLite prepares for it once per
/// connection — is the same for any number of rows.
///
/// `json_each` gives each row back as JSON text, and every `value->>n` would parse that
/// text again (profiled under load: 6 % of all CPU time, for sessions' thirteen columns).
/// Each row is turned into SQLite's binary JSON once instead, in a subquery that SQLite
/// runs beside the statement rather than folding it into each column (an `OFFSET` keeps
/// it from doing that), and `->>` reads the binary form in place.
pub(super) fn push_rows<T: serde::Serialize>(sql: &mut Sql, rows: &[T]) -> Result<(), StoreError> {
    sql.push("(SELECT jsonb(value) AS value FROM ");
    push_each(sql, rows)?;
    sql.push(" LIMIT -1 OFFSET 0)");
    Ok(())
}

/// `json_each(?)` of `items` as one JSON array: each item a row of the one column `value`
/// (as is for ids; [`push_rows`] for rows of several values).
pub(super) fn push_each<T: serde::Serialize>(sql: &mut Sql, items: &[T]) -> Result<(), StoreError> {
    let json = serde_json::to_string(items).map_err(|e| corrupt("rows to write", e))?;
    sql.push("json_each(").push_bind(json).push(")");
    Ok(())
}

//! The turn-by-turn write path: one turn's rows inside the batch's transaction, in a
//! savepoint the writer ([`super::writer`]) rolls back if the turn is refused (duplicate,
//! conflict, failed statement). Also the writes of reading data and tickets, which the
//! fast path ([`super::batch`]) makes the same way after its query.

use super::Sql;
use super::rows::Prepared;
use super::statements::{
    CallRow, SessionUpdate, message_rows, messages_written, push_finished, push_llm_calls,
    push_messages, push_new_sessions, push_processed, push_session_updates, push_submissions,
    push_users, session_rows, submission_rows,
};
use crate::store::hot::{HotChange, HotTurn};
use crate::store::rows::from_ms;
use crate::store::writes::{Arg, extra_statements, sqlite_sql};
use crate::store::{
    CommittedTurn, ProcessedUpdate, Role, SessionRecord, StateChange, StoreError, StoredMessage,
    TurnCommit,
};
use std::collections::HashMap;

/// Model calls (of one turn or of a batch), in one statement.
pub(super) async fn insert_llm_calls(
    conn: &mut sqlx::SqliteConnection,
    calls: &[CallRow<'_>],
) -> Result<(), StoreError> {
    execute_rows(conn, calls, "recording model calls", |sql, rows| {
        push_llm_calls(sql, rows)
    })
    .await?;
    Ok(())
}

/// The unique index of active sessions refused a row (SQLITE_CONSTRAINT_UNIQUE on
/// `sessions`).
fn is_place_taken(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            db.code().as_deref() == Some("2067") && db.message().contains("sessions.platform")
        }
        _ => false,
    }
}

/// Sessions that go on, updated in one statement (two if some change status), each only if
/// its stored version is still the one the turn loaded. `sessions` carry the turn's changes and the
/// loaded version. Returns how many rows were updated (fewer: a session moved on).
pub(super) async fn update_sessions(
    tx: &mut sqlx::SqliteConnection,
    sessions: Vec<SessionUpdate<'_>>,
    now_ms: i64,
) -> Result<u64, StoreError> {
    let (moved, staying) = session_rows(sessions);
    let mut updated = 0;
    for (rows, status) in [(&moved, true), (&staying, false)] {
        updated += execute_rows(tx, rows, "updating the sessions", |sql, rows| {
            push_session_updates(sql, rows, status, now_ms)
        })
        .await?;
    }
    Ok(updated)
}

/// A turn's session row (and the user's, for a new session; the previous session finished
/// first on a flow switch). Fails with [`StoreError::Conflict`] when the session moved on.
/// Returns the session as the turn leaves it.
pub(super) async fn write_session(
    tx: &mut sqlx::SqliteConnection,
    commit: &TurnCommit,
    after: &Prepared,
    now_ms: i64,
) -> Result<SessionRecord, StoreError> {
    if let Some(previous) = commit.finish_session {
        let mut finish = Sql::new("");
        push_finished(&mut finish, &[previous], now_ms)?;
        finish
            .build()
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db("finishing the previous session"))?;
    }

    let mut session = after.session.clone();
    if session.is_new() {
        let users = [(&session.key, &commit.user)];
        let mut user = Sql::new("");
        push_users(&mut user, &users, now_ms)?;
        user.build()
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db("saving the user"))?;
        let rows = [(&session, after)];
        let mut insert = Sql::new("");
        push_new_sessions(&mut insert, &rows, now_ms)?;
        insert.push(" RETURNING id");
        let id: i64 = insert
            .build_query_scalar()
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| {
                // another process (an instance on the same file) started a session in the
                // same place meanwhile: the one-active-session index refuses this one
                if is_place_taken(&e) {
                    StoreError::Conflict { session_id: 0 }
                } else {
                    StoreError::Database {
                        context: "creating the session",
                        source: e,
                    }
                }
            })?;
        session.id = id;
        session.version = 1;
        session.created_at = from_ms(now_ms);
    } else {
        if update_sessions(tx, vec![SessionUpdate::of(commit, after)], now_ms).await? == 0 {
            return Err(StoreError::Conflict {
                session_id: session.id,
            });
        }
        session.version += 1;
    }
    session.updated_at = from_ms(now_ms);
    Ok(session)
}

/// A turn's other rows: reading data, tickets and feedback ([`extra_statements`]; its
/// submissions go with the messages: [`push_submissions`]).
pub(super) async fn write_extras(
    tx: &mut sqlx::SqliteConnection,
    session: &SessionRecord,
    changes: &[StateChange],
    now_ms: i64,
) -> Result<(), StoreError> {
    for statement in extra_statements(session, changes, now_ms)? {
        let sql = sqlite_sql(statement.sql);
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for arg in &statement.args {
            query = match arg {
                Arg::Text(text) => query.bind(*text),
                Arg::MaybeText(text) => query.bind(*text),
                Arg::Owned(text) => query.bind(text.as_str()),
                Arg::Int(n) => query.bind(*n),
            };
        }
        let done = query
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db("saving a turn's reading data or ticket"))?;
        statement.check(done.rows_affected())?;
    }
    Ok(())
}

/// The statement `statement` builds for `rows` (none for no rows), run on `conn`. Returns
/// how many rows it changed.
pub(super) async fn execute_rows<'r, T>(
    conn: &mut sqlx::SqliteConnection,
    rows: &'r [T],
    context: &'static str,
    statement: impl Fn(&mut Sql, &'r [T]) -> Result<(), StoreError>,
) -> Result<u64, StoreError> {
    if rows.is_empty() {
        return Ok(0);
    }
    let mut sql = Sql::new("");
    statement(&mut sql, rows)?;
    Ok(sql
        .build()
        .execute(&mut *conn)
        .await
        .map_err(StoreError::db(context))?
        .rows_affected())
}

/// The turns' platform updates marked processed. Returns how many were new (the others
/// were processed already).
pub(super) async fn mark_processed(
    tx: &mut sqlx::SqliteConnection,
    updates: &[(&ProcessedUpdate, i64)],
    now_ms: i64,
) -> Result<u64, StoreError> {
    execute_rows(tx, updates, "marking the update processed", |sql, rows| {
        push_processed(sql, rows, true, now_ms)
    })
    .await
}

/// The turns' transcript messages. Returns the ids of the messages written, per session,
/// in order.
pub(super) async fn insert_messages(
    tx: &mut sqlx::SqliteConnection,
    turns: &[(i64, &[StateChange])],
    now_ms: i64,
) -> Result<HashMap<i64, Vec<i64>>, StoreError> {
    let messages = message_rows(turns.iter().copied());
    if messages.is_empty() {
        return Ok(HashMap::new());
    }
    let mut insert = Sql::new("");
    push_messages(&mut insert, &messages, None, now_ms)?;
    let rows = insert
        .build()
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db("saving the messages"))?;
    messages_written(&rows)
}

/// A committed turn's answer and what it changed for the hot-session cache. `ids`: the ids
/// of the turn's messages ([`insert_messages`]), in the order of its changes.
pub(super) fn turn_written(
    commit: &TurnCommit,
    session: SessionRecord,
    ids: Vec<i64>,
    now_ms: i64,
) -> (CommittedTurn, HotChange) {
    let said = message_rows(std::iter::once((session.id, commit.changes.as_slice())));
    let whole = said.len() == ids.len();
    let messages: Vec<StoredMessage> = said
        .into_iter()
        .zip(ids)
        .map(|((session_id, role, text, _), id)| StoredMessage {
            id,
            session_id,
            role,
            text: text.to_string(),
            at: from_ms(now_ms),
        })
        .collect();
    let assistant_message_ids = messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.id)
        .collect();
    // (one id per message, or the cache cannot tell what the turn wrote)
    let change = if whole {
        HotChange::Committed(Box::new(HotTurn {
            loaded_version: commit.session.version,
            session: session.clone(),
            processed: commit.processed.clone(),
            messages,
        }))
    } else {
        HotChange::Dropped {
            key: session.key.clone(),
            processed: commit.processed.clone(),
        }
    };
    (
        CommittedTurn {
            session,
            assistant_message_ids,
        },
        change,
    )
}

/// One turn's writes, inside the batch's transaction (the caller wraps it in a savepoint,
/// so a refused turn leaves nothing behind).
pub(super) async fn write_turn(
    tx: &mut sqlx::SqliteConnection,
    commit: TurnCommit,
    after: &Prepared,
    now_ms: i64,
) -> Result<(CommittedTurn, HotChange), StoreError> {
    let session = write_session(tx, &commit, after, now_ms).await?;
    if let Some(p) = &commit.processed
        && mark_processed(tx, &[(p, session.id)], now_ms).await? == 0
    {
        return Err(StoreError::Duplicate {
            chat: p.chat.clone(),
            message_id: p.message_id.clone(),
        });
    }
    let mut ids = insert_messages(tx, &[(session.id, &commit.changes)], now_ms).await?;
    write_extras(tx, &session, &commit.changes, now_ms).await?;
    let mut submissions = Vec::new();
    submission_rows(session.id, &session.key, &commit.changes, &mut submissions);
    execute_rows(tx, &submissions, "saving the submission", |sql, rows| {
        push_submissions(sql, rows, now_ms)
    })
    .await?;
    let calls: Vec<_> = commit
        .llm_calls
        .iter()
        .map(|c| (Some(session.id), c))
        .collect();
    insert_llm_calls(tx, &calls).await?;
    let ids = ids.remove(&session.id).unwrap_or_default();
    Ok(turn_written(&commit, session, ids, now_ms))
}

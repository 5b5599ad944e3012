//! One turn written in one transaction ([`commit`]): the session row (its version checked),
//! the processed update, messages, submissions, reading data, tickets and the turn's model
//! calls. A second instance committing a turn of the same session at the same time loses
//! the version check (or the one-active-session index) and gets [`StoreError::Conflict`];
//! the same update committed twice loses on `processed_updates` and gets
//! [`StoreError::Duplicate`].

use crate::store::rows::{applied, corrupt, from_ms, ms, pending_json};
use crate::store::writes::{Arg, extra_statements};
use crate::store::{
    CommittedTurn, ProcessedUpdate, Role, SessionRecord, StateChange, StoreError, StoredMessage,
    Submission, TurnCommit,
};
use chrono::Utc;
use sqlx::PgConnection;

/// `text` as PostgreSQL can hold it: a `text` value cannot contain NUL, which a chat
/// message (or a model's answer) may; it becomes U+FFFD and the rest is kept.
pub(super) fn clean(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// A unique index refused the row (23505), naming `index` when given.
pub(super) fn unique_violation(e: &sqlx::Error, index: Option<&str>) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            db.code().as_deref() == Some("23505")
                && index.is_none_or(|name| db.constraint() == Some(name))
        }
        _ => false,
    }
}

/// Writes `commit` on `tx` (a transaction the caller commits); returns what it wrote and
/// the transcript messages, in order (for the hot-session cache).
pub(super) async fn commit(
    tx: &mut PgConnection,
    commit: &TurnCommit,
) -> Result<(CommittedTurn, Vec<StoredMessage>), StoreError> {
    let now_ms = ms(Utc::now());
    let session = write_session(tx, commit, now_ms).await?;
    if let Some(update) = &commit.processed {
        mark_processed(tx, update, session.id, now_ms).await?;
    }
    let messages = insert_messages(tx, session.id, &commit.changes, now_ms).await?;
    write_extras(tx, &session, &commit.changes, now_ms).await?;
    let mut calls = super::batch::CallColumns::default();
    for call in &commit.llm_calls {
        calls.push(call, Some(session.id));
    }
    calls.insert(tx).await?;
    let assistant_message_ids = messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.id)
        .collect();
    Ok((
        CommittedTurn {
            session,
            assistant_message_ids,
        },
        messages,
    ))
}

/// The session row as the turn leaves it (the user's and a new session's, or the update
/// of one whose version is still the one the turn loaded), the previous session finished
/// first on a flow switch. Fails with [`StoreError::Conflict`] when another turn (another
/// instance's) got there first.
async fn write_session(
    tx: &mut PgConnection,
    commit: &TurnCommit,
    now_ms: i64,
) -> Result<SessionRecord, StoreError> {
    let mut session = applied(commit);
    let pending = pending_json(&session)?;
    if let Some(previous) = commit.finish_session {
        sqlx::query(
            "UPDATE sessions SET status = 'finished', version = version + 1, updated_ms = $1 WHERE id = $2",
        )
        .bind(now_ms)
        .bind(previous)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("finishing the previous session"))?;
    }
    if session.is_new() {
        sqlx::query(
            "INSERT INTO users (platform, user_id, display_name, first_seen_ms, last_seen_ms) VALUES ($1, $2, $3, $4, $4) \
             ON CONFLICT (platform, user_id) DO UPDATE SET display_name = excluded.display_name, last_seen_ms = excluded.last_seen_ms",
        )
        .bind(session.key.platform.as_str())
        .bind(&commit.user.id)
        .bind(clean(&commit.user.display_name))
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("saving the user"))?;
        let key = &session.key;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO sessions (platform, chat, thread, user_id, flow, current_agent, language, country, timezone, \
             state, pending_options, status, version, created_ms, updated_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 1, $13, $13) RETURNING id",
        )
        .bind(key.platform.as_str())
        .bind(&key.chat)
        .bind(&key.thread)
        .bind(&key.user)
        .bind(&session.flow)
        .bind(&session.current_agent)
        .bind(&session.language)
        .bind(&session.country)
        .bind(&session.timezone)
        .bind(session.state.as_json())
        .bind(&pending)
        .bind(session.status.as_str())
        .bind(now_ms)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| {
            // another instance started a session in the same place meanwhile
            if unique_violation(&e, Some("sessions_one_active")) {
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
        let updated = sqlx::query(
            "UPDATE sessions SET current_agent = $1, language = $2, country = $3, timezone = $4, state = $5, \
             pending_options = $6, status = $7, version = version + 1, updated_ms = $8 WHERE id = $9 AND version = $10",
        )
        .bind(&session.current_agent)
        .bind(&session.language)
        .bind(&session.country)
        .bind(&session.timezone)
        .bind(session.state.as_json())
        .bind(&pending)
        .bind(session.status.as_str())
        .bind(now_ms)
        .bind(session.id)
        .bind(commit.session.version)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("updating the session"))?;
        if updated.rows_affected() == 0 {
            return Err(StoreError::Conflict {
                session_id: session.id,
            });
        }
        session.version += 1;
    }
    session.updated_at = from_ms(now_ms);
    Ok(session)
}

/// The turn's platform update marked processed; [`StoreError::Duplicate`] when it was
/// (by another instance too: the insert waits for the other transaction, then does
/// nothing).
async fn mark_processed(
    tx: &mut PgConnection,
    update: &ProcessedUpdate,
    session_id: i64,
    now_ms: i64,
) -> Result<(), StoreError> {
    let new = sqlx::query(
        "INSERT INTO processed_updates (platform, chat, message_id, session_id, created_ms) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
    )
    .bind(update.platform.as_str())
    .bind(&update.chat)
    .bind(&update.message_id)
    .bind(session_id)
    .bind(now_ms)
    .execute(&mut *tx)
    .await
    .map_err(StoreError::db("marking the update processed"))?;
    if new.rows_affected() == 0 {
        return Err(StoreError::Duplicate {
            chat: update.chat.clone(),
            message_id: update.message_id.clone(),
        });
    }
    Ok(())
}

/// The turn's transcript messages, in order; returns them as written.
async fn insert_messages(
    tx: &mut PgConnection,
    session_id: i64,
    changes: &[StateChange],
    now_ms: i64,
) -> Result<Vec<StoredMessage>, StoreError> {
    let mut written = Vec::new();
    for change in changes {
        let (role, text, trace) = match change {
            StateChange::AddUserMessage { text } => (Role::User, text, None),
            StateChange::AddAssistantMessage { text, trace } => {
                (Role::Assistant, text, trace.as_deref())
            }
            _ => continue,
        };
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO messages (session_id, role, text, delivered, trace, created_ms) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .bind(session_id)
        .bind(role.as_str())
        .bind(clean(text))
        .bind(role != Role::Assistant)
        .bind(trace.map(clean))
        .bind(now_ms)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db("saving the messages"))?;
        written.push(StoredMessage {
            id,
            session_id,
            role,
            text: clean(text).into_owned(),
            at: from_ms(now_ms),
        });
    }
    Ok(written)
}

/// A finished form, under the session's place.
async fn insert_submission(
    tx: &mut PgConnection,
    session: &SessionRecord,
    s: &Submission,
    now_ms: i64,
) -> Result<(), StoreError> {
    let json =
        |v: &serde_json::Value| serde_json::to_string(v).map_err(|e| corrupt("submission", e));
    sqlx::query(
        "INSERT INTO submissions (session_id, platform, user_id, applicant, form_id, variant, status, language, \
         country, timezone, field_values, facts, flags, audit, created_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
    )
    .bind(session.id)
    .bind(session.key.platform.as_str())
    .bind(&session.key.user)
    .bind(clean(&s.applicant))
    .bind(&s.form_id)
    .bind(&s.variant)
    .bind(s.status.as_str())
    .bind(&s.language)
    .bind(&s.country)
    .bind(&s.timezone)
    .bind(json(&s.values)?)
    .bind(json(&s.facts)?)
    .bind(json(&s.flags)?)
    .bind(s.audit.as_ref().map(json).transpose()?)
    .bind(now_ms)
    .execute(&mut *tx)
    .await
    .map_err(StoreError::db("saving the submission"))?;
    Ok(())
}

/// A turn's other rows: its submissions, then reading data, tickets and feedback
/// ([`extra_statements`]).
async fn write_extras(
    tx: &mut PgConnection,
    session: &SessionRecord,
    changes: &[StateChange],
    now_ms: i64,
) -> Result<(), StoreError> {
    for change in changes {
        if let StateChange::SaveSubmission { submission } = change {
            insert_submission(tx, session, submission, now_ms).await?;
        }
    }
    for statement in extra_statements(session, changes, now_ms)? {
        let mut query = sqlx::query(statement.sql);
        for arg in &statement.args {
            query = match arg {
                Arg::Text(text) => query.bind(clean(text)),
                Arg::MaybeText(text) => query.bind(text.map(clean)),
                Arg::Owned(text) => query.bind(clean(text)),
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

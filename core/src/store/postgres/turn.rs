//! One turn written in one transaction ([`commit`]): the session row (its version checked),
//! the processed update, messages, submissions, reading data, tickets and the turn's model
//! calls. A second instance committing a turn of the same session at the same time loses
//! the version check (or the one-active-session index) and gets [`StoreError::Conflict`];
//! the same update committed twice loses on `processed_updates` and gets
//! [`StoreError::Duplicate`].

use crate::message::SessionKey;
use crate::store::reading::ReadingChange;
use crate::store::rows::{corrupt, from_ms, ms};
use crate::store::{
    CommittedTurn, LlmCallRecord, Role, SessionRecord, StateChange, StoreError, TurnCommit,
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
fn unique_violation(e: &sqlx::Error, index: Option<&str>) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            db.code().as_deref() == Some("23505")
                && index.is_none_or(|name| db.constraint() == Some(name))
        }
        _ => false,
    }
}

/// Writes `commit` on `tx` (a transaction the caller commits).
pub(super) async fn commit(
    tx: &mut PgConnection,
    commit: &TurnCommit,
) -> Result<CommittedTurn, StoreError> {
    let now_ms = ms(Utc::now());
    let mut session = commit.session.clone();
    for change in &commit.changes {
        session.apply(change);
    }
    let pending = session
        .pending_options
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| corrupt("pending options", e))?;
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

    if let Some(p) = &commit.processed {
        // (waits for another transaction inserting the same key, then does nothing)
        let new = sqlx::query(
            "INSERT INTO processed_updates (platform, chat, message_id, session_id, created_ms) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(p.platform.as_str())
        .bind(&p.chat)
        .bind(&p.message_id)
        .bind(session.id)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("marking the update processed"))?;
        if new.rows_affected() == 0 {
            return Err(StoreError::Duplicate {
                chat: p.chat.clone(),
                message_id: p.message_id.clone(),
            });
        }
    }

    let mut assistant_message_ids = Vec::new();
    for change in &commit.changes {
        let (role, text) = match change {
            StateChange::AddUserMessage { text } => (Role::User, text),
            StateChange::AddAssistantMessage { text } => (Role::Assistant, text),
            _ => continue,
        };
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO messages (session_id, role, text, delivered, created_ms) VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(session.id)
        .bind(role.as_str())
        .bind(clean(text))
        .bind(role != Role::Assistant)
        .bind(now_ms)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db("saving the messages"))?;
        if role == Role::Assistant {
            assistant_message_ids.push(id);
        }
    }
    write_extras(tx, &session, &commit.changes, now_ms).await?;
    let calls: Vec<_> = commit.llm_calls.iter().collect();
    insert_llm_calls(tx, &calls, Some(session.id)).await?;
    Ok(CommittedTurn {
        session,
        assistant_message_ids,
    })
}

/// Model calls, each of its own session or else `session_id`.
pub(super) async fn insert_llm_calls(
    tx: &mut PgConnection,
    calls: &[&LlmCallRecord],
    session_id: Option<i64>,
) -> Result<(), StoreError> {
    for call in calls {
        sqlx::query(
            "INSERT INTO llm_calls (session_id, agent, model, prompt_tokens, completion_tokens, latency_ms, error, created_ms, wasted) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(call.session_id.or(session_id))
        .bind(&call.agent)
        .bind(&call.model)
        .bind(i64::try_from(call.prompt_tokens).unwrap_or(i64::MAX))
        .bind(i64::try_from(call.completion_tokens).unwrap_or(i64::MAX))
        .bind(i64::try_from(call.latency_ms).unwrap_or(i64::MAX))
        .bind(&call.error)
        .bind(ms(call.at))
        .bind(call.wasted)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("recording model calls"))?;
    }
    Ok(())
}

/// A turn's other rows: submissions, reading data, tickets and feedback.
async fn write_extras(
    tx: &mut PgConnection,
    session: &SessionRecord,
    changes: &[StateChange],
    now_ms: i64,
) -> Result<(), StoreError> {
    let key = &session.key;
    let json = |what: &'static str, v: &serde_json::Value| {
        serde_json::to_string(v).map_err(|e| corrupt(what, e))
    };
    for change in changes {
        match change {
            StateChange::Reading { change } => {
                apply_reading(tx, key, change, now_ms).await?;
            }
            StateChange::SaveSubmission { submission: s } => {
                sqlx::query(
                    "INSERT INTO submissions (session_id, platform, user_id, applicant, form_id, variant, status, language, \
                     country, timezone, field_values, facts, flags, audit, created_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
                )
                .bind(session.id)
                .bind(key.platform.as_str())
                .bind(&key.user)
                .bind(clean(&s.applicant))
                .bind(&s.form_id)
                .bind(&s.variant)
                .bind(s.status.as_str())
                .bind(&s.language)
                .bind(&s.country)
                .bind(&s.timezone)
                .bind(json("submission", &s.values)?)
                .bind(json("submission", &s.facts)?)
                .bind(json("submission", &s.flags)?)
                .bind(s.audit.as_ref().map(|a| json("submission", a)).transpose()?)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db("saving the submission"))?;
            }
            StateChange::SaveTicket { ticket } => {
                sqlx::query(
                    "INSERT INTO helpdesk_tickets (session_id, ticket_no, question, plan, sub_answers, answer, sources, \
                     feedback, created_ms, updated_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)",
                )
                .bind(session.id)
                .bind(ticket.ticket_no)
                .bind(clean(&ticket.question))
                .bind(json("ticket", &serde_json::json!(ticket.plan))?)
                .bind(json("ticket", &ticket.sub_answers)?)
                .bind(clean(&ticket.answer))
                .bind(json("ticket", &serde_json::json!(ticket.sources))?)
                .bind(&ticket.feedback)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db("saving the ticket"))?;
            }
            StateChange::SetTicketFeedback {
                ticket_no,
                feedback,
            } => {
                sqlx::query("UPDATE helpdesk_tickets SET feedback = $1, updated_ms = $2 WHERE session_id = $3 AND ticket_no = $4")
                    .bind(feedback)
                    .bind(now_ms)
                    .bind(session.id)
                    .bind(ticket_no)
                    .execute(&mut *tx)
                    .await
                    .map_err(StoreError::db("saving the feedback"))?;
            }
            _ => {}
        }
    }
    Ok(())
}

async fn record_id(
    conn: &mut sqlx::PgConnection,
    key: &SessionKey,
    title: &str,
) -> Result<i64, StoreError> {
    sqlx::query_scalar(
        "SELECT id FROM reading_records WHERE platform = $1 AND user_id = $2 AND title = $3",
    )
    .bind(key.platform.as_str())
    .bind(&key.user)
    .bind(clean(title))
    .fetch_optional(&mut *conn)
    .await
    .map_err(StoreError::db("finding the reading record"))?
    .ok_or_else(|| StoreError::Corrupt(format!("no reading record {title:?} for this user")))
}

/// A reading change written: to the book's record (status, mode, insights, moods) or to
/// the user's own rows (profile, mentor feedback, weekly reviews, recommendations).
async fn apply_reading(
    conn: &mut sqlx::PgConnection,
    key: &SessionKey,
    change: &ReadingChange,
    now_ms: i64,
) -> Result<(), StoreError> {
    match change {
        ReadingChange::OpenRecord { .. }
        | ReadingChange::SetStatus { .. }
        | ReadingChange::SetMode { .. }
        | ReadingChange::AddInsight { .. }
        | ReadingChange::AddMood { .. } => apply_to_record(conn, key, change, now_ms).await,
        ReadingChange::AddProfileEntry { .. }
        | ReadingChange::AddMentorFeedback { .. }
        | ReadingChange::SetWeeklyReview { .. }
        | ReadingChange::AddRecommendation { .. } => apply_to_user(conn, key, change, now_ms).await,
    }
}

/// A change of the book's reading record: opened, its status or mode, an insight, a mood.
async fn apply_to_record(
    conn: &mut sqlx::PgConnection,
    key: &SessionKey,
    change: &ReadingChange,
    now_ms: i64,
) -> Result<(), StoreError> {
    let (platform, user) = (key.platform.as_str(), key.user.as_str());
    let result = match change {
        ReadingChange::OpenRecord { title, author } => {
            sqlx::query(
                "INSERT INTO reading_records (platform, user_id, title, author, created_ms, updated_ms) VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (platform, user_id, title) DO UPDATE SET updated_ms = excluded.updated_ms, \
                 author = COALESCE(reading_records.author, excluded.author)",
            )
            .bind(platform)
            .bind(user)
            .bind(clean(title))
            .bind(author.as_deref().map(clean))
            .bind(now_ms)
            .bind(now_ms)
            .execute(&mut *conn)
            .await
        }
        ReadingChange::SetStatus { title, status } => {
            sqlx::query(
                "UPDATE reading_records SET status = $1, updated_ms = $2, \
                 started_ms = CASE WHEN $1 != 'not_started' THEN COALESCE(started_ms, $2) ELSE started_ms END, \
                 finished_ms = CASE WHEN $1 = 'completed' THEN $2 ELSE NULL END \
                 WHERE platform = $3 AND user_id = $4 AND title = $5",
            )
            .bind(status.as_str())
            .bind(now_ms)
            .bind(platform)
            .bind(user)
            .bind(clean(title))
            .execute(&mut *conn)
            .await
        }
        ReadingChange::SetMode { title, mode } => {
            sqlx::query("UPDATE reading_records SET interaction_mode = $1, updated_ms = $2 WHERE platform = $3 AND user_id = $4 AND title = $5")
                .bind(mode.as_str())
                .bind(now_ms)
                .bind(platform)
                .bind(user)
                .bind(clean(title))
                .execute(&mut *conn)
                .await
        }
        ReadingChange::AddInsight { title, kind, text } => {
            let id = record_id(conn, key, title).await?;
            sqlx::query("INSERT INTO insights (record_id, kind, text, created_ms) VALUES ($1, $2, $3, $4)")
                .bind(id)
                .bind(kind.as_str())
                .bind(clean(text))
                .bind(now_ms)
                .execute(&mut *conn)
                .await
        }
        ReadingChange::AddMood { title, phase, label, score } => {
            let id = record_id(conn, key, title).await?;
            sqlx::query("INSERT INTO moods (record_id, phase, label, score, created_ms) VALUES ($1, $2, $3, $4, $5)")
                .bind(id)
                .bind(phase.as_str())
                .bind(clean(label))
                .bind(i64::from((*score).clamp(1, 5)))
                .bind(now_ms)
                .execute(&mut *conn)
                .await
        }
        ReadingChange::AddProfileEntry { .. }
        | ReadingChange::AddMentorFeedback { .. }
        | ReadingChange::SetWeeklyReview { .. }
        | ReadingChange::AddRecommendation { .. } => return Ok(()),
    };
    result.map_err(StoreError::db("saving reading data"))?;
    Ok(())
}

/// A change of the user's own rows: a profile entry, mentor feedback, the weekly review
/// subscription, a recommendation.
async fn apply_to_user(
    conn: &mut sqlx::PgConnection,
    key: &SessionKey,
    change: &ReadingChange,
    now_ms: i64,
) -> Result<(), StoreError> {
    let (platform, user) = (key.platform.as_str(), key.user.as_str());
    let result = match change {
        ReadingChange::AddProfileEntry { kind, text } => {
            sqlx::query("INSERT INTO profile_entries (platform, user_id, kind, text, created_ms) VALUES ($1, $2, $3, $4, $5)")
                .bind(platform)
                .bind(user)
                .bind(kind.as_str())
                .bind(clean(text))
                .bind(now_ms)
                .execute(&mut *conn)
                .await
        }
        ReadingChange::AddMentorFeedback { feedback_type, content } => {
            sqlx::query("INSERT INTO mentor_feedback (platform, user_id, feedback_type, content, created_ms) VALUES ($1, $2, $3, $4, $5)")
                .bind(platform)
                .bind(user)
                .bind(feedback_type.as_str())
                .bind(clean(content))
                .bind(now_ms)
                .execute(&mut *conn)
                .await
        }
        ReadingChange::SetWeeklyReview {
            enabled: false, ..
        } => {
            sqlx::query("DELETE FROM weekly_reviews WHERE platform = $1 AND user_id = $2")
                .bind(platform)
                .bind(user)
                .execute(&mut *conn)
                .await
        }
        ReadingChange::SetWeeklyReview {
            enabled: true,
            timezone,
        } => {
            sqlx::query(
                "INSERT INTO weekly_reviews (platform, user_id, chat, thread, timezone, created_ms) VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (platform, user_id) DO UPDATE SET chat = excluded.chat, thread = excluded.thread, \
                 timezone = excluded.timezone",
            )
            .bind(platform)
            .bind(user)
            .bind(&key.chat)
            .bind(&key.thread)
            .bind(timezone)
            .bind(now_ms)
            .execute(&mut *conn)
            .await
        }
        ReadingChange::AddRecommendation { title, reason } => {
            sqlx::query("INSERT INTO recommendations (platform, user_id, title, reason, created_ms) VALUES ($1, $2, $3, $4, $5)")
                .bind(platform)
                .bind(user)
                .bind(clean(title))
                .bind(clean(reason))
                .bind(now_ms)
                .execute(&mut *conn)
                .await
        }
        ReadingChange::OpenRecord { .. }
        | ReadingChange::SetStatus { .. }
        | ReadingChange::SetMode { .. }
        | ReadingChange::AddInsight { .. }
        | ReadingChange::AddMood { .. } => return Ok(()),
    };
    result.map_err(StoreError::db("saving reading data"))?;
    Ok(())
}

//! Rows as they come back from SQLite and the session as a turn leaves it: decoders
//! (`*_from_row`), time and error helpers, and [`Prepared`], worked out on the turn's own
//! task before it reaches the writer. Used by the reads, both write paths and the tests.

use crate::message::{Platform, SessionKey};
use crate::store::{
    FlowState, Role, SessionRecord, SessionStatus, StoreError, StoredMessage, Submission,
    SubmissionRecord, SubmissionStatus, TurnCommit,
};
use chrono::TimeZone;
use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

pub(super) const SESSION_COLUMNS: &str = "id, platform, chat, thread, user_id, flow, current_agent, language, country, \
     timezone, state, pending_options, status, version, created_ms, updated_ms";

pub(super) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(super) fn from_ms(v: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(v).single().unwrap_or_default()
}

pub(super) fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

pub(super) fn session_from_row(row: &SqliteRow) -> Result<SessionRecord, StoreError> {
    let get = |e: sqlx::Error| corrupt("session row", e);
    let platform: String = row.try_get("platform").map_err(get)?;
    let state: String = row.try_get("state").map_err(get)?;
    let pending: Option<String> = row.try_get("pending_options").map_err(get)?;
    let status: String = row.try_get("status").map_err(get)?;
    Ok(SessionRecord {
        id: row.try_get("id").map_err(get)?,
        key: SessionKey {
            platform: Platform::parse(&platform)
                .ok_or_else(|| corrupt("session platform", &platform))?,
            chat: row.try_get("chat").map_err(get)?,
            thread: row.try_get("thread").map_err(get)?,
            user: row.try_get("user_id").map_err(get)?,
        },
        flow: row.try_get("flow").map_err(get)?,
        current_agent: row.try_get("current_agent").map_err(get)?,
        language: row.try_get("language").map_err(get)?,
        country: row.try_get("country").map_err(get)?,
        timezone: row.try_get("timezone").map_err(get)?,
        state: FlowState::from_json(state).map_err(|e| corrupt("session state", e))?,
        pending_options: match pending {
            Some(p) => Some(serde_json::from_str(&p).map_err(|e| corrupt("pending options", e))?),
            None => None,
        },
        status: if status == "finished" {
            SessionStatus::Finished
        } else {
            SessionStatus::Active
        },
        version: row.try_get("version").map_err(get)?,
        created_at: from_ms(row.try_get("created_ms").map_err(get)?),
        updated_at: from_ms(row.try_get("updated_ms").map_err(get)?),
    })
}

pub(super) fn message_from_row(row: &SqliteRow) -> Result<StoredMessage, StoreError> {
    let get = |e: sqlx::Error| corrupt("message row", e);
    let role: String = row.try_get("role").map_err(get)?;
    Ok(StoredMessage {
        id: row.try_get("id").map_err(get)?,
        session_id: row.try_get("session_id").map_err(get)?,
        role: Role::parse(&role).ok_or_else(|| corrupt("message role", &role))?,
        text: row.try_get("text").map_err(get)?,
        at: from_ms(row.try_get("created_ms").map_err(get)?),
    })
}

pub(super) fn submission_from_row(row: &SqliteRow) -> Result<SubmissionRecord, StoreError> {
    let get = |e: sqlx::Error| corrupt("submission row", e);
    let json = |col: &str| -> Result<serde_json::Value, StoreError> {
        let text: String = row.try_get(col).map_err(get)?;
        serde_json::from_str(&text).map_err(|e| corrupt("submission JSON", e))
    };
    let audit: Option<String> = row.try_get("audit").map_err(get)?;
    let status: String = row.try_get("status").map_err(get)?;
    Ok(SubmissionRecord {
        id: row.try_get("id").map_err(get)?,
        session_id: row.try_get("session_id").map_err(get)?,
        platform: row.try_get("platform").map_err(get)?,
        user_id: row.try_get("user_id").map_err(get)?,
        created_at: from_ms(row.try_get("created_ms").map_err(get)?),
        submission: Submission {
            applicant: row.try_get("applicant").map_err(get)?,
            form_id: row.try_get("form_id").map_err(get)?,
            variant: row.try_get("variant").map_err(get)?,
            status: if status == "submitted" {
                SubmissionStatus::Submitted
            } else {
                SubmissionStatus::Incomplete
            },
            language: row.try_get("language").map_err(get)?,
            country: row.try_get("country").map_err(get)?,
            timezone: row.try_get("timezone").map_err(get)?,
            values: json("field_values")?,
            facts: json("facts")?,
            flags: json("flags")?,
            audit: audit
                .map(|a| serde_json::from_str(&a).map_err(|e| corrupt("submission audit", e)))
                .transpose()?,
        },
    })
}

pub(super) fn pending_json(session: &SessionRecord) -> Result<Option<String>, StoreError> {
    session
        .pending_options
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| corrupt("pending options", e))
}

/// What a turn's rows need of its session, worked out by the turn's own task
/// ([`Store::commit_turn`], in parallel with the other turns) rather than on the writer's
/// thread, which every turn waits for: the session as the turn leaves it and its pending
/// options as JSON.
pub(super) struct Prepared {
    pub(super) session: SessionRecord,
    pub(super) pending: Option<String>,
}

impl Prepared {
    pub(super) fn of(commit: &TurnCommit) -> Result<Self, StoreError> {
        let session = applied(commit);
        let pending = pending_json(&session)?;
        Ok(Prepared { session, pending })
    }
}

/// The session as the turn leaves it (the commit's changes applied; not yet written).
pub(super) fn applied(commit: &TurnCommit) -> SessionRecord {
    let mut session = commit.session.clone();
    for change in &commit.changes {
        session.apply(change);
    }
    session
}

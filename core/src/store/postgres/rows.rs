//! Rows as they come back from PostgreSQL: the decoders (`*_from_row`) the reads and the
//! commit share. Times are Unix milliseconds, as on SQLite.

use crate::message::{Platform, SessionKey};
use crate::store::{
    FlowState, Role, SessionRecord, SessionStatus, StoreError, StoredMessage, Submission,
    SubmissionRecord, SubmissionStatus,
};
use chrono::TimeZone;
use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::postgres::PgRow;

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

/// The session columns prefixed with `alias.` (for a join).
pub(super) fn session_columns_of(alias: &str) -> String {
    SESSION_COLUMNS
        .split(", ")
        .map(|c| format!("{alias}.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn session_from_row(row: &PgRow) -> Result<SessionRecord, StoreError> {
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

pub(super) fn message_from_row(row: &PgRow) -> Result<StoredMessage, StoreError> {
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

pub(super) fn submission_from_row(row: &PgRow) -> Result<SubmissionRecord, StoreError> {
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

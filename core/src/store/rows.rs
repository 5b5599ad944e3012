//! Rows as both backends give them back: the decoders (`*_from_row`) of every stored type,
//! over [`Columns`] (a row of SQLite or of PostgreSQL: the two schemas name and type their
//! columns alike), and the helpers both use (times as Unix milliseconds, the session's
//! columns, [`TurnLoad`] from the one-row load of a turn).

use super::reading::{
    Insight, InsightKind, InteractionMode, Mood, MoodPhase, ProfileEntry, ProfileKind,
    ReadingRecord, ReadingStatus, WeeklyReviewSubscription,
};
use super::{
    FlowState, LlmCallRecord, Role, SessionRecord, SessionStatus, StoreError, StoredMessage,
    Submission, SubmissionRecord, SubmissionStatus, Ticket, TurnCommit, TurnLoad,
};
use crate::message::{Platform, SessionKey};
use chrono::TimeZone;
use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;

/// The columns of `sessions` that [`session_from_row`] reads.
pub(crate) const SESSION_COLUMNS: &str = "id, platform, chat, thread, user_id, flow, current_agent, language, country, \
     timezone, state, pending_options, status, version, created_ms, updated_ms";

/// [`SESSION_COLUMNS`], each prefixed with `alias.` (for a join).
pub(crate) fn session_columns_of(alias: &str) -> String {
    SESSION_COLUMNS
        .split(", ")
        .map(|c| format!("{alias}.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(crate) fn from_ms(v: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(v).single().unwrap_or_default()
}

pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

/// A row of either backend, read by column name.
pub(crate) trait Columns {
    fn text(&self, column: &str) -> Result<String, sqlx::Error>;
    fn maybe_text(&self, column: &str) -> Result<Option<String>, sqlx::Error>;
    fn int(&self, column: &str) -> Result<i64, sqlx::Error>;
    fn maybe_int(&self, column: &str) -> Result<Option<i64>, sqlx::Error>;
    /// A boolean (PostgreSQL's `BOOLEAN`, SQLite's 0 / 1).
    fn flag(&self, column: &str) -> Result<bool, sqlx::Error>;
}

macro_rules! columns_of {
    ($row:ty) => {
        impl Columns for $row {
            fn text(&self, column: &str) -> Result<String, sqlx::Error> {
                sqlx::Row::try_get(self, column)
            }
            fn maybe_text(&self, column: &str) -> Result<Option<String>, sqlx::Error> {
                sqlx::Row::try_get(self, column)
            }
            fn int(&self, column: &str) -> Result<i64, sqlx::Error> {
                sqlx::Row::try_get(self, column)
            }
            fn maybe_int(&self, column: &str) -> Result<Option<i64>, sqlx::Error> {
                sqlx::Row::try_get(self, column)
            }
            fn flag(&self, column: &str) -> Result<bool, sqlx::Error> {
                sqlx::Row::try_get(self, column)
            }
        }
    };
}

columns_of!(SqliteRow);
columns_of!(PgRow);

/// A count or a length stored as a signed integer.
fn count(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

pub(crate) fn session_from_row(row: &impl Columns) -> Result<SessionRecord, StoreError> {
    let get = |e: sqlx::Error| corrupt("session row", e);
    let platform = row.text("platform").map_err(get)?;
    let pending = row.maybe_text("pending_options").map_err(get)?;
    Ok(SessionRecord {
        id: row.int("id").map_err(get)?,
        key: SessionKey {
            platform: Platform::parse(&platform)
                .ok_or_else(|| corrupt("session platform", &platform))?,
            chat: row.text("chat").map_err(get)?,
            thread: row.text("thread").map_err(get)?,
            user: row.text("user_id").map_err(get)?,
        },
        flow: row.text("flow").map_err(get)?,
        current_agent: row.maybe_text("current_agent").map_err(get)?,
        language: row.maybe_text("language").map_err(get)?,
        country: row.maybe_text("country").map_err(get)?,
        timezone: row.maybe_text("timezone").map_err(get)?,
        state: FlowState::from_json(row.text("state").map_err(get)?)
            .map_err(|e| corrupt("session state", e))?,
        pending_options: match pending {
            Some(p) => Some(serde_json::from_str(&p).map_err(|e| corrupt("pending options", e))?),
            None => None,
        },
        status: if row.text("status").map_err(get)? == "finished" {
            SessionStatus::Finished
        } else {
            SessionStatus::Active
        },
        version: row.int("version").map_err(get)?,
        created_at: from_ms(row.int("created_ms").map_err(get)?),
        updated_at: from_ms(row.int("updated_ms").map_err(get)?),
    })
}

pub(crate) fn message_from_row(row: &impl Columns) -> Result<StoredMessage, StoreError> {
    let get = |e: sqlx::Error| corrupt("message row", e);
    let role = row.text("role").map_err(get)?;
    Ok(StoredMessage {
        id: row.int("id").map_err(get)?,
        session_id: row.int("session_id").map_err(get)?,
        role: Role::parse(&role).ok_or_else(|| corrupt("message role", &role))?,
        text: row.text("text").map_err(get)?,
        at: from_ms(row.int("created_ms").map_err(get)?),
    })
}

/// What a turn's one-row load found: the dedupe flag (`dup`), the active session's columns
/// (`id` NULL for none) and its last messages as one JSON array of `[id, role, text,
/// created_ms]` (`history`).
pub(crate) fn turn_load_from_row(
    row: &impl Columns,
    message_id: &str,
) -> Result<TurnLoad, StoreError> {
    let duplicate =
        row.flag("dup").map_err(|e| corrupt("dedupe flag", e))? && !message_id.is_empty();
    if row
        .maybe_int("id")
        .map_err(|e| corrupt("session row", e))?
        .is_none()
    {
        return Ok(TurnLoad {
            duplicate,
            chosen_language: row
                .maybe_text("chosen_language")
                .map_err(|e| corrupt("profile language", e))?,
            ended_before: row
                .flag("ended_before")
                .map_err(|e| corrupt("ended sessions", e))?,
            ..Default::default()
        });
    }
    let session = session_from_row(row)?;
    let json = row
        .maybe_text("history")
        .map_err(|e| corrupt("message history", e))?;
    let rows: Vec<(i64, String, String, i64)> = match json {
        Some(json) => serde_json::from_str(&json).map_err(|e| corrupt("message history", e))?,
        None => Vec::new(),
    };
    let mut history = rows
        .into_iter()
        .map(|(id, role, text, at)| {
            Ok(StoredMessage {
                id,
                session_id: session.id,
                role: Role::parse(&role).ok_or_else(|| corrupt("message role", &role))?,
                text,
                at: from_ms(at),
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    history.sort_unstable_by_key(|m| m.id);
    Ok(TurnLoad {
        duplicate,
        session: Some(session),
        history,
        ..TurnLoad::default()
    })
}

pub(crate) fn submission_from_row(row: &impl Columns) -> Result<SubmissionRecord, StoreError> {
    let get = |e: sqlx::Error| corrupt("submission row", e);
    let json = |col: &str| -> Result<serde_json::Value, StoreError> {
        let text = row.text(col).map_err(get)?;
        serde_json::from_str(&text).map_err(|e| corrupt("submission JSON", e))
    };
    let audit = row.maybe_text("audit").map_err(get)?;
    let decision = decision_from_row(row)?;
    Ok(SubmissionRecord {
        decision,
        id: row.int("id").map_err(get)?,
        session_id: row.maybe_int("session_id").map_err(get)?,
        platform: row.text("platform").map_err(get)?,
        user_id: row.text("user_id").map_err(get)?,
        created_at: from_ms(row.int("created_ms").map_err(get)?),
        submission: Submission {
            applicant: row.text("applicant").map_err(get)?,
            form_id: row.text("form_id").map_err(get)?,
            variant: row.text("variant").map_err(get)?,
            status: if row.text("status").map_err(get)? == "submitted" {
                SubmissionStatus::Submitted
            } else {
                SubmissionStatus::Incomplete
            },
            language: row.maybe_text("language").map_err(get)?,
            country: row.maybe_text("country").map_err(get)?,
            timezone: row.maybe_text("timezone").map_err(get)?,
            values: json("field_values")?,
            facts: json("facts")?,
            flags: json("flags")?,
            audit: audit
                .map(|a| serde_json::from_str(&a).map_err(|e| corrupt("submission audit", e)))
                .transpose()?,
        },
    })
}

/// The decision columns of a submission row (`decision`, `decided_by`, `decided_ms`).
pub(crate) fn decision_from_row(row: &impl Columns) -> Result<Option<super::Decision>, StoreError> {
    let get = |e: sqlx::Error| corrupt("decision", e);
    let Some(decision) = row.maybe_text("decision").map_err(get)? else {
        return Ok(None);
    };
    Ok(Some(super::Decision {
        decision,
        decided_by: row
            .maybe_text("decided_by")
            .map_err(get)?
            .unwrap_or_default(),
        decided_at: from_ms(
            row.maybe_int("decided_ms")
                .map_err(get)?
                .unwrap_or_default(),
        ),
    }))
}

pub(crate) fn llm_call_from_row(row: &impl Columns) -> Result<LlmCallRecord, StoreError> {
    let get = |e: sqlx::Error| corrupt("ledger row", e);
    Ok(LlmCallRecord {
        session_id: row.maybe_int("session_id").map_err(get)?,
        agent: row.text("agent").map_err(get)?,
        model: row.text("model").map_err(get)?,
        prompt_tokens: count(row.int("prompt_tokens").map_err(get)?),
        completion_tokens: count(row.int("completion_tokens").map_err(get)?),
        latency_ms: count(row.int("latency_ms").map_err(get)?),
        error: row.maybe_text("error").map_err(get)?,
        at: from_ms(row.int("created_ms").map_err(get)?),
        wasted: row.flag("wasted").map_err(get)?,
    })
}

pub(crate) fn reading_record_from_row(row: &impl Columns) -> Result<ReadingRecord, StoreError> {
    let get = |e: sqlx::Error| corrupt("reading record", e);
    let status = row.text("status").map_err(get)?;
    let mode = row.text("interaction_mode").map_err(get)?;
    Ok(ReadingRecord {
        id: row.int("id").map_err(get)?,
        title: row.text("title").map_err(get)?,
        author: row.maybe_text("author").map_err(get)?,
        // (written by the store from a books API's answer; unreadable is none)
        details: row
            .maybe_text("details")
            .map_err(get)?
            .and_then(|d| serde_json::from_str(&d).ok()),
        status: ReadingStatus::parse(&status).ok_or_else(|| corrupt("reading status", &status))?,
        mode: InteractionMode::parse(&mode).ok_or_else(|| corrupt("interaction mode", &mode))?,
        started_at: row.maybe_int("started_ms").map_err(get)?.map(from_ms),
        finished_at: row.maybe_int("finished_ms").map_err(get)?.map(from_ms),
    })
}

pub(crate) fn insight_from_row(row: &impl Columns) -> Result<Insight, StoreError> {
    let get = |e: sqlx::Error| corrupt("insight", e);
    let kind = row.text("kind").map_err(get)?;
    Ok(Insight {
        kind: InsightKind::parse(&kind).ok_or_else(|| corrupt("insight kind", &kind))?,
        text: row.text("text").map_err(get)?,
        at: from_ms(row.int("created_ms").map_err(get)?),
    })
}

pub(crate) fn mood_from_row(row: &impl Columns) -> Result<Mood, StoreError> {
    let get = |e: sqlx::Error| corrupt("mood", e);
    let phase = row.text("phase").map_err(get)?;
    Ok(Mood {
        phase: MoodPhase::parse(&phase).ok_or_else(|| corrupt("mood phase", &phase))?,
        label: row.text("label").map_err(get)?,
        score: row.int("score").map_err(get)?.clamp(1, 5) as u8,
        at: from_ms(row.int("created_ms").map_err(get)?),
    })
}

pub(crate) fn profile_entry_from_row(row: &impl Columns) -> Result<ProfileEntry, StoreError> {
    let get = |e: sqlx::Error| corrupt("profile entry", e);
    let kind = row.text("kind").map_err(get)?;
    Ok(ProfileEntry {
        kind: ProfileKind::parse(&kind).ok_or_else(|| corrupt("profile kind", &kind))?,
        text: row.text("text").map_err(get)?,
        at: from_ms(row.int("created_ms").map_err(get)?),
    })
}

pub(crate) fn ticket_from_row(row: &impl Columns) -> Result<Ticket, StoreError> {
    let get = |e: sqlx::Error| corrupt("ticket row", e);
    let json = |col: &str| -> Result<serde_json::Value, StoreError> {
        let text = row.text(col).map_err(get)?;
        serde_json::from_str(&text).map_err(|e| corrupt("ticket JSON", e))
    };
    Ok(Ticket {
        ticket_no: row.int("ticket_no").map_err(get)?,
        question: row.text("question").map_err(get)?,
        plan: serde_json::from_value(json("plan")?).map_err(|e| corrupt("ticket plan", e))?,
        sub_answers: json("sub_answers")?,
        answer: row.text("answer").map_err(get)?,
        sources: serde_json::from_value(json("sources")?)
            .map_err(|e| corrupt("ticket sources", e))?,
        feedback: row.maybe_text("feedback").map_err(get)?,
    })
}

pub(crate) fn weekly_review_from_row(
    row: &impl Columns,
) -> Result<WeeklyReviewSubscription, StoreError> {
    let get = |e: sqlx::Error| corrupt("weekly review", e);
    let platform = row.text("platform").map_err(get)?;
    Ok(WeeklyReviewSubscription {
        key: SessionKey {
            platform: Platform::parse(&platform).ok_or_else(|| corrupt("platform", &platform))?,
            chat: row.text("chat").map_err(get)?,
            thread: row.text("thread").map_err(get)?,
            user: row.text("user_id").map_err(get)?,
        },
        timezone: row.text("timezone").map_err(get)?,
        since: from_ms(row.int("created_ms").map_err(get)?),
    })
}

pub(crate) fn pending_json(session: &SessionRecord) -> Result<Option<String>, StoreError> {
    session
        .pending_options
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| corrupt("pending options", e))
}

/// The session as the turn leaves it (the commit's changes applied; not yet written).
pub(crate) fn applied(commit: &TurnCommit) -> SessionRecord {
    let mut session = commit.session.clone();
    for change in &commit.changes {
        session.apply(change);
    }
    session
}

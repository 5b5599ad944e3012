//! Writes both backends make with the same statements: a turn's reading data, tickets and
//! feedback ([`extra_statements`]) and what `/forget` deletes ([`forget_statements`]). They are written
//! with PostgreSQL's numbered placeholders (`$1`), which SQLite takes as `?1`
//! ([`sqlite_sql`]); each backend binds the [`Arg`]s and runs them its own way.

use super::reading::ReadingChange;
use super::{SessionRecord, StateChange, StoreError};
use crate::message::SessionKey;
use crate::store::rows::corrupt;

/// A value bound to a statement.
pub(crate) enum Arg<'a> {
    Text(&'a str),
    MaybeText(Option<&'a str>),
    Owned(String),
    Int(i64),
}

/// One statement and its arguments, in placeholder order.
pub(crate) struct Statement<'a> {
    pub(crate) sql: &'static str,
    pub(crate) args: Vec<Arg<'a>>,
    /// The reading record (its title) the statement writes under: when it changes no row,
    /// the record does not exist and the turn fails.
    pub(crate) needs_record: Option<&'a str>,
}

impl Statement<'_> {
    /// What the statement changed is what it must: a row under a record it needs.
    pub(crate) fn check(&self, rows_affected: u64) -> Result<(), StoreError> {
        match self.needs_record {
            Some(title) if rows_affected == 0 => Err(StoreError::Corrupt(format!(
                "no reading record {title:?} for this user"
            ))),
            _ => Ok(()),
        }
    }
}

/// `sql` (PostgreSQL's `$1` placeholders) as SQLite numbers them (`?1`).
pub(crate) fn sqlite_sql(sql: &str) -> String {
    sql.replace('$', "?")
}

/// What `/forget` deletes for one user (`$1` platform, `$2` user id), children first; the
/// users row cascades to what is left. Submissions are kept unless `keep_submissions` is
/// false ([`forget_statements`]). The model calls and processed updates stay, no longer
/// pointing at the user's sessions (on PostgreSQL no foreign key does it for them).
const FORGET: [&str; 12] = [
    "DELETE FROM holds WHERE platform = $1 AND user_id = $2",
    "UPDATE llm_calls SET session_id = NULL WHERE session_id IN (SELECT id FROM sessions WHERE platform = $1 AND user_id = $2)",
    "UPDATE processed_updates SET session_id = NULL WHERE session_id IN (SELECT id FROM sessions WHERE platform = $1 AND user_id = $2)",
    "DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE platform = $1 AND user_id = $2)",
    "DELETE FROM helpdesk_tickets WHERE session_id IN (SELECT id FROM sessions WHERE platform = $1 AND user_id = $2)",
    "DELETE FROM insights WHERE record_id IN (SELECT id FROM reading_records WHERE platform = $1 AND user_id = $2)",
    "DELETE FROM moods WHERE record_id IN (SELECT id FROM reading_records WHERE platform = $1 AND user_id = $2)",
    "DELETE FROM reading_records WHERE platform = $1 AND user_id = $2",
    "DELETE FROM profile_entries WHERE platform = $1 AND user_id = $2",
    "DELETE FROM mentor_feedback WHERE platform = $1 AND user_id = $2",
    "DELETE FROM recommendations WHERE platform = $1 AND user_id = $2",
    "DELETE FROM weekly_reviews WHERE platform = $1 AND user_id = $2",
];

/// [`FORGET`], then the submissions (unless kept), the sessions and the user, in order.
pub(crate) fn forget_statements(keep_submissions: bool) -> Vec<&'static str> {
    let mut statements = FORGET.to_vec();
    if !keep_submissions {
        statements.push("DELETE FROM submissions WHERE platform = $1 AND user_id = $2");
    }
    statements.push("DELETE FROM sessions WHERE platform = $1 AND user_id = $2");
    statements.push("DELETE FROM users WHERE platform = $1 AND user_id = $2");
    statements
}

/// A turn's rows beside its session and messages: reading data, tickets and feedback, in
/// the order of its changes (submissions are written by each backend with the messages).
pub(crate) fn extra_statements<'a>(
    session: &'a SessionRecord,
    changes: &'a [StateChange],
    now_ms: i64,
) -> Result<Vec<Statement<'a>>, StoreError> {
    let json = |v: &serde_json::Value| serde_json::to_string(v).map_err(|e| corrupt("ticket", e));
    let mut statements = Vec::new();
    for change in changes {
        statements.push(match change {
            StateChange::Reading { change } => reading_statement(&session.key, change, now_ms),
            StateChange::SaveTicket { ticket } => Statement {
                sql: "INSERT INTO helpdesk_tickets (session_id, ticket_no, question, plan, sub_answers, answer, sources, \
                      feedback, created_ms, updated_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)",
                args: vec![
                    Arg::Int(session.id),
                    Arg::Int(ticket.ticket_no),
                    Arg::Text(&ticket.question),
                    Arg::Owned(json(&serde_json::json!(ticket.plan))?),
                    Arg::Owned(json(&ticket.sub_answers)?),
                    Arg::Text(&ticket.answer),
                    Arg::Owned(json(&serde_json::json!(ticket.sources))?),
                    Arg::MaybeText(ticket.feedback.as_deref()),
                    Arg::Int(now_ms),
                ],
                needs_record: None,
            },
            StateChange::SetTicketFeedback {
                ticket_no,
                feedback,
            } => Statement {
                sql: "UPDATE helpdesk_tickets SET feedback = $1, updated_ms = $2 WHERE session_id = $3 AND ticket_no = $4",
                args: vec![
                    Arg::Text(feedback),
                    Arg::Int(now_ms),
                    Arg::Int(session.id),
                    Arg::Int(*ticket_no),
                ],
                needs_record: None,
            },
            _ => continue,
        });
    }
    Ok(statements)
}

/// A row of the session's user (`$1` platform, `$2` user id) with two texts (`$3`, `$4`)
/// and the time (`$5`).
fn user_row<'a>(
    sql: &'static str,
    key: &'a SessionKey,
    first: &'a str,
    second: &'a str,
    now_ms: i64,
) -> Statement<'a> {
    Statement {
        sql,
        args: vec![
            Arg::Text(key.platform.as_str()),
            Arg::Text(&key.user),
            Arg::Text(first),
            Arg::Text(second),
            Arg::Int(now_ms),
        ],
        needs_record: None,
    }
}

/// An update of the user's record of `title`: `$1` the value, `$2` the time, `$3` platform,
/// `$4` user id, `$5` title.
fn record_update<'a>(
    sql: &'static str,
    key: &'a SessionKey,
    value: &'a str,
    title: &'a str,
    now_ms: i64,
) -> Statement<'a> {
    Statement {
        sql,
        args: vec![
            Arg::Text(value),
            Arg::Int(now_ms),
            Arg::Text(key.platform.as_str()),
            Arg::Text(&key.user),
            Arg::Text(title),
        ],
        needs_record: None,
    }
}

/// The user's weekly review: on (here, in `timezone`) or off.
fn weekly_review<'a>(
    key: &'a SessionKey,
    enabled: bool,
    timezone: &'a str,
    now_ms: i64,
) -> Statement<'a> {
    let (platform, user) = (Arg::Text(key.platform.as_str()), Arg::Text(&key.user));
    let (sql, args) = if enabled {
        (
            "INSERT INTO weekly_reviews (platform, user_id, chat, thread, timezone, created_ms) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (platform, user_id) DO UPDATE SET chat = excluded.chat, thread = excluded.thread, \
             timezone = excluded.timezone",
            vec![
                platform,
                user,
                Arg::Text(&key.chat),
                Arg::Text(&key.thread),
                Arg::Text(timezone),
                Arg::Int(now_ms),
            ],
        )
    } else {
        (
            "DELETE FROM weekly_reviews WHERE platform = $1 AND user_id = $2",
            vec![platform, user],
        )
    };
    Statement {
        sql,
        args,
        needs_record: None,
    }
}

/// A reading change for the session's own user: the book's record (opened, status, mode,
/// an insight, a mood) or the user's rows (profile, mentor feedback, the weekly review,
/// a recommendation).
fn reading_statement<'a>(
    key: &'a SessionKey,
    change: &'a ReadingChange,
    now_ms: i64,
) -> Statement<'a> {
    let (platform, user) = (Arg::Text(key.platform.as_str()), Arg::Text(&key.user));
    let plain = |sql, args| Statement {
        sql,
        args,
        needs_record: None,
    };
    match change {
        ReadingChange::OpenRecord {
            title,
            author,
            details,
        } => plain(
            "INSERT INTO reading_records (platform, user_id, title, author, details, created_ms, updated_ms) VALUES ($1, $2, $3, $4, $6, $5, $5) \
             ON CONFLICT (platform, user_id, title) DO UPDATE SET updated_ms = excluded.updated_ms, \
             author = COALESCE(reading_records.author, excluded.author), \
             details = COALESCE(reading_records.details, excluded.details)",
            vec![
                platform,
                user,
                Arg::Text(title),
                Arg::MaybeText(author.as_deref()),
                Arg::Int(now_ms),
                Arg::MaybeText(details.as_deref()),
            ],
        ),
        ReadingChange::SetStatus { title, status } => record_update(
            "UPDATE reading_records SET status = $1, updated_ms = $2, \
             started_ms = CASE WHEN $1 != 'not_started' THEN COALESCE(started_ms, $2) ELSE started_ms END, \
             finished_ms = CASE WHEN $1 = 'completed' THEN $2 ELSE NULL END \
             WHERE platform = $3 AND user_id = $4 AND title = $5",
            key,
            status.as_str(),
            title,
            now_ms,
        ),
        ReadingChange::SetMode { title, mode } => record_update(
            "UPDATE reading_records SET interaction_mode = $1, updated_ms = $2 WHERE platform = $3 AND user_id = $4 AND title = $5",
            key,
            mode.as_str(),
            title,
            now_ms,
        ),
        ReadingChange::AddInsight { title, kind, text } => Statement {
            sql: "INSERT INTO insights (record_id, kind, text, created_ms) \
                  SELECT id, $4, $5, $6 FROM reading_records WHERE platform = $1 AND user_id = $2 AND title = $3",
            args: vec![
                platform,
                user,
                Arg::Text(title),
                Arg::Text(kind.as_str()),
                Arg::Text(text),
                Arg::Int(now_ms),
            ],
            needs_record: Some(title),
        },
        ReadingChange::AddMood {
            title,
            phase,
            label,
            score,
        } => Statement {
            sql: "INSERT INTO moods (record_id, phase, label, score, created_ms) \
                  SELECT id, $4, $5, $6, $7 FROM reading_records WHERE platform = $1 AND user_id = $2 AND title = $3",
            args: vec![
                platform,
                user,
                Arg::Text(title),
                Arg::Text(phase.as_str()),
                Arg::Text(label),
                Arg::Int(i64::from((*score).clamp(1, 5))),
                Arg::Int(now_ms),
            ],
            needs_record: Some(title),
        },
        ReadingChange::AddProfileEntry { kind, text } => user_row(
            "INSERT INTO profile_entries (platform, user_id, kind, text, created_ms) VALUES ($1, $2, $3, $4, $5)",
            key,
            kind.as_str(),
            text,
            now_ms,
        ),
        ReadingChange::AddMentorFeedback {
            feedback_type,
            content,
        } => user_row(
            "INSERT INTO mentor_feedback (platform, user_id, feedback_type, content, created_ms) VALUES ($1, $2, $3, $4, $5)",
            key,
            feedback_type.as_str(),
            content,
            now_ms,
        ),
        ReadingChange::SetWeeklyReview { enabled, timezone } => {
            weekly_review(key, *enabled, timezone, now_ms)
        }
        ReadingChange::AddRecommendation { title, reason } => user_row(
            "INSERT INTO recommendations (platform, user_id, title, reason, created_ms) VALUES ($1, $2, $3, $4, $5)",
            key,
            title,
            reason,
            now_ms,
        ),
    }
}

/// Takes a lease (`$1` name, `$2` holder, `$3` until, `$4` now) if it is free, expired or
/// the holder's own; returns a row only when the holder holds it now.
pub(crate) const LEASE_TAKE: &str = "INSERT INTO leases (name, holder, expires_ms) VALUES ($1, $2, $3) \
     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_ms = excluded.expires_ms \
     WHERE leases.holder = excluded.holder OR leases.expires_ms < $4 RETURNING holder";

/// Lets go of a lease (`$1` name) if `$2` holds it.
pub(crate) const LEASE_RELEASE: &str = "DELETE FROM leases WHERE name = $1 AND holder = $2";

/// The leases whose name starts with `$1`.
pub(crate) const LEASE_LIST: &str = "SELECT name, holder, expires_ms FROM leases \
     WHERE substr(name, 1, length($1)) = $1 ORDER BY name";

/// Now and the end of a lease of `ttl` from now, in milliseconds.
pub(crate) fn lease_times(ttl: std::time::Duration) -> (i64, i64) {
    let now = crate::store::rows::ms(chrono::Utc::now());
    (
        now,
        now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)),
    )
}

/// [`LEASE_LIST`]'s rows as leases.
pub(crate) fn leases_of(rows: Vec<(String, String, i64)>) -> Vec<super::Lease> {
    rows.into_iter()
        .map(|(name, holder, expires)| super::Lease {
            name,
            holder,
            expires_at: crate::store::rows::from_ms(expires),
        })
        .collect()
}

/// A decision on the submission of a session (`$1` decision, `$2` by, `$3` when in ms,
/// `$4` session), unless one was made: the first stands.
pub(crate) const DECIDE: &str = "UPDATE submissions SET decision = $1, decided_by = $2, decided_ms = $3 \
     WHERE session_id = $4 AND decision IS NULL";

/// The decision columns of a session's (latest) submission (`$1` session).
pub(crate) const DECISION_OF: &str = "SELECT decision, decided_by, decided_ms FROM submissions \
     WHERE session_id = $1 ORDER BY id DESC LIMIT 1";

/// A hold on a place unless one stands (`$1` session, `$2`-`$5` platform, chat, thread,
/// user, `$6` by, `$7` now in ms).
pub(crate) const HOLD_TAKE: &str = "INSERT INTO holds (session_id, platform, chat, thread, user_id, held_by, taken_ms, last_ms) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT DO NOTHING";

/// The hold on a place (`$1`-`$4` platform, chat, thread, user).
pub(crate) const HOLD_AT: &str = "SELECT session_id, platform, chat, thread, user_id, held_by, taken_ms, last_ms \
     FROM holds WHERE platform = $1 AND chat = $2 AND thread = $3 AND user_id = $4";

/// Every hold.
pub(crate) const HOLDS: &str =
    "SELECT session_id, platform, chat, thread, user_id, held_by, taken_ms, last_ms FROM holds";

/// The hold on a session (`$1`), before it is deleted.
pub(crate) const HOLD_OF: &str = "SELECT session_id, platform, chat, thread, user_id, held_by, taken_ms, last_ms \
     FROM holds WHERE session_id = $1";

pub(crate) const HOLD_END: &str = "DELETE FROM holds WHERE session_id = $1";

pub(crate) const HOLD_TOUCH: &str = "UPDATE holds SET last_ms = $2 WHERE session_id = $1";

/// `$1`-`$3` platform, chat, message id, `$4` session, `$5` now in ms.
pub(crate) const NOTICE_LINK: &str = "INSERT INTO relays (platform, chat, message_id, session_id, created_ms) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING";

pub(crate) const NOTICE_SESSION: &str =
    "SELECT session_id FROM relays WHERE platform = $1 AND chat = $2 AND message_id = $3";

/// The messages standing for a session (`$1`), newest first.
pub(crate) const NOTICES_OF: &str = "SELECT platform, chat, message_id FROM relays WHERE session_id = $1 \
     ORDER BY created_ms DESC, message_id DESC LIMIT 20";

/// The newest message per admin place among `rows` (platform, chat, message id; newest
/// first).
pub(crate) fn latest_notices(rows: Vec<(String, String, String)>) -> Vec<super::NoticeRef> {
    let mut out: Vec<super::NoticeRef> = Vec::new();
    for (platform, chat, message_id) in rows {
        let Some(platform) = crate::message::Platform::parse(&platform) else {
            continue;
        };
        if !out.iter().any(|n| n.platform == platform && n.chat == chat) {
            out.push(super::NoticeRef {
                platform,
                chat,
                message_id,
            });
        }
    }
    out
}

/// A hold from [`HOLD_AT`]'s columns.
pub(crate) fn hold_from_row(
    row: &impl crate::store::rows::Columns,
) -> Result<super::Hold, StoreError> {
    let get = |e: sqlx::Error| corrupt("hold", e);
    let platform = row.text("platform").map_err(get)?;
    Ok(super::Hold {
        session_id: row.int("session_id").map_err(get)?,
        key: SessionKey {
            platform: crate::message::Platform::parse(&platform)
                .ok_or_else(|| StoreError::Corrupt(format!("hold of platform {platform:?}")))?,
            chat: row.text("chat").map_err(get)?,
            thread: row.text("thread").map_err(get)?,
            user: row.text("user_id").map_err(get)?,
        },
        held_by: row.text("held_by").map_err(get)?,
        taken_at: crate::store::rows::from_ms(row.int("taken_ms").map_err(get)?),
        last_at: crate::store::rows::from_ms(row.int("last_ms").map_err(get)?),
    })
}

/// Cached results of a query (`$1` provider, `$2` query) fetched since `$3` (ms).
pub(crate) const CACHED_SEARCH: &str =
    "SELECT results FROM search_cache WHERE provider = $1 AND query = $2 AND fetched_ms >= $3";

/// Keeps results (`$1` provider, `$2` query, `$3` JSON, `$4` now in ms).
pub(crate) const CACHE_SEARCH: &str = "INSERT INTO search_cache (provider, query, results, fetched_ms) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (provider, query) DO UPDATE SET results = excluded.results, fetched_ms = excluded.fetched_ms";

/// The vectors of a model (`$1`).
pub(crate) const PASSAGE_VECTORS: &str =
    "SELECT text_hash, vector FROM passage_vectors WHERE model = $1";

/// Keeps a vector (`$1` model, `$2` text hash, `$3` bytes, `$4` now in ms); another
/// instance may have kept it first.
pub(crate) const KEEP_PASSAGE_VECTOR: &str = "INSERT INTO passage_vectors (model, text_hash, vector, created_ms) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (model, text_hash) DO NOTHING";

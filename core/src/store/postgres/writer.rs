//! Group commit on PostgreSQL: each writer task (up to three per instance, a chat's jobs
//! always to the same one, so they commit in the order asked) drains its queue of turns,
//! inbox entries, inbox clears and delivery marks into one transaction, so that turns
//! finishing at the same time share one commit (one WAL flush) instead of waiting for one
//! each.
//!
//! In the transaction, in the order they were asked for:
//! 1. the inbox entries (one `INSERT … SELECT … FROM UNNEST`); an entry whose turn is in the
//!    same batch is not written (the turn's processed update says it is done);
//! 2. the ordinary turns, all at once ([`fast_turns`]): one multi-row statement each for
//!    their users, new sessions, session updates (each checked against the version its turn
//!    loaded), processed updates, messages and model calls, inside a savepoint. When
//!    anything is out of the ordinary (a conflict, a duplicate, a failed statement) the
//!    savepoint is rolled back and the same turns are written one by one;
//! 3. the other turns (a flow switch, a submission, reading data, tickets), each in a
//!    savepoint of its own ([`super::turn::commit`]): a refused turn is rolled back alone
//!    and answered with its error;
//! 4. the inbox clears and the delivery marks, one statement each.
//!
//! A turn is answered only after the commit that holds it: the durability promise is the
//! same as one transaction per turn (a reply is sent only after its turn is committed).

use super::turn::{self, clean, unique_violation};
use crate::message::{Incoming, Platform};
use crate::store::hot::{HotChange, HotSessions, HotTurn};
use crate::store::rows::{applied, corrupt, from_ms, ms, pending_json};
use crate::store::{
    CommittedTurn, ProcessedUpdate, Role, SessionRecord, StateChange, StoreError, StoredMessage,
    TurnCommit,
};
use chrono::Utc;
use sqlx::{PgConnection, PgPool};
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{mpsc, oneshot};

/// Most jobs one transaction carries.
pub(super) const MAX_BATCH: usize = 512;

/// Work for the writer; a turn is answered once its transaction committed.
pub(super) enum Job {
    Turn {
        commit: Box<TurnCommit>,
        reply: Reply,
    },
    /// Received messages kept until their turns are done; `durable`: answered once
    /// committed ([`crate::store::Inbox::inbox_keep`]), else not answered
    /// ([`crate::store::Inbox::inbox_put`]).
    Keep {
        entries: Vec<Incoming>,
        durable: Option<oneshot::Sender<Result<(), StoreError>>>,
    },
    /// Not answered: see [`crate::store::Inbox::inbox_done`].
    Done {
        platform: Platform,
        chat: String,
        message_id: String,
    },
    /// Answered once committed: another instance that takes the chat over resends what is
    /// not marked, so a mark lost with this instance would repeat a reply that arrived.
    Delivered {
        ids: Vec<i64>,
        done: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Answered once everything queued before it is written.
    Flush(oneshot::Sender<()>),
}

pub(super) fn writer_gone() -> StoreError {
    StoreError::Batch {
        message: "the database writer has stopped".into(),
        busy: false,
    }
}

/// The writer task: every job waiting when it is free goes into one transaction.
pub(super) async fn group_commit(
    pool: PgPool,
    mut jobs: mpsc::Receiver<Job>,
    hot: Arc<HotSessions>,
    failures: Arc<AtomicU64>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while jobs.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let work = Work::of(batch.drain(..));
        let turns = work.turns.len();
        let span = tracing::debug_span!("group_commit", turns, keeps = work.keeps.len());
        let _enter = span.enter();
        work.write(&pool, &hot, &failures).await;
    }
}

/// Where a turn's outcome goes.
type Reply = oneshot::Sender<Result<CommittedTurn, StoreError>>;

/// One batch, sorted by kind (each kind keeps the order it was asked in).
#[derive(Default)]
struct Work {
    turns: Vec<(Box<TurnCommit>, Reply)>,
    keeps: Vec<Incoming>,
    /// Keeps and delivery marks answered once committed.
    durable: Vec<oneshot::Sender<Result<(), StoreError>>>,
    done: Vec<(Platform, String, String)>,
    delivered: Vec<i64>,
    flushes: Vec<oneshot::Sender<()>>,
}

impl Work {
    fn of(jobs: impl Iterator<Item = Job>) -> Work {
        let mut work = Work::default();
        for job in jobs {
            match job {
                Job::Turn { commit, reply } => work.turns.push((commit, reply)),
                Job::Keep { entries, durable } => {
                    work.keeps.extend(entries);
                    work.durable.extend(durable);
                }
                Job::Done {
                    platform,
                    chat,
                    message_id,
                } => work.done.push((platform, chat, message_id)),
                Job::Delivered { ids, done } => {
                    work.delivered.extend(ids);
                    work.durable.push(done);
                }
                Job::Flush(reply) => work.flushes.push(reply),
            }
        }
        work
    }

    /// Writes the batch and answers its jobs.
    async fn write(self, pool: &PgPool, hot: &HotSessions, failures: &AtomicU64) {
        let commits: Vec<&TurnCommit> = self.turns.iter().map(|(c, _)| c.as_ref()).collect();
        match write_batch(pool, &commits, &self).await {
            Ok(outcomes) => {
                let mut changes = Vec::with_capacity(outcomes.len());
                let mut answers = Vec::with_capacity(outcomes.len());
                for ((commit, reply), outcome) in self.turns.into_iter().zip(outcomes) {
                    let answer = match outcome {
                        Ok((committed, messages)) => {
                            changes.push(HotChange::Committed(Box::new(HotTurn {
                                loaded_version: commit.session.version,
                                session: committed.session.clone(),
                                processed: commit.processed.clone(),
                                messages,
                            })));
                            Ok(committed)
                        }
                        Err(e) => {
                            // a conflict means the entry (if any) is stale: it goes
                            changes.push(HotChange::Dropped {
                                key: commit.session.key.clone(),
                                processed: commit.processed.clone(),
                            });
                            Err(e)
                        }
                    };
                    answers.push((reply, answer));
                }
                // the cache moves on before anyone is told: a turn answered reads what it wrote
                hot.apply(changes);
                for (reply, answer) in answers {
                    let _ = reply.send(answer);
                }
                for reply in self.durable {
                    let _ = reply.send(Ok(()));
                }
            }
            Err(e) => {
                failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, turns = self.turns.len(), "a batch of writes failed");
                let busy = e.is_busy() || matches!(e, StoreError::Database { .. });
                let message = e.to_string();
                let changes = self
                    .turns
                    .iter()
                    .map(|(commit, _)| HotChange::Dropped {
                        key: commit.session.key.clone(),
                        processed: commit.processed.clone(),
                    })
                    .collect();
                hot.apply(changes);
                for (commit, reply) in self.turns {
                    let error = match &e {
                        StoreError::Conflict { .. } => StoreError::Conflict {
                            session_id: commit.session.id,
                        },
                        _ => StoreError::Batch {
                            message: message.clone(),
                            busy,
                        },
                    };
                    let _ = reply.send(Err(error));
                }
                for reply in self.durable {
                    let _ = reply.send(Err(StoreError::Batch {
                        message: message.clone(),
                        busy,
                    }));
                }
            }
        }
        for reply in self.flushes {
            let _ = reply.send(());
        }
    }
}

type Outcome = Result<(CommittedTurn, Vec<StoredMessage>), StoreError>;

/// The batch in one transaction; each turn's outcome in order. An error: nothing was
/// committed.
async fn write_batch(
    pool: &PgPool,
    commits: &[&TurnCommit],
    work: &Work,
) -> Result<Vec<Outcome>, StoreError> {
    if commits.is_empty()
        && work.keeps.is_empty()
        && work.done.is_empty()
        && work.delivered.is_empty()
    {
        return Ok(Vec::new());
    }
    if commits.is_empty() && work.keeps.is_empty() {
        // only clears and delivery marks (the common batch between turns): one statement,
        // its own transaction, one round trip
        clear_and_mark(pool, &work.done, &work.delivered).await?;
        return Ok(Vec::new());
    }
    let mut tx = pool
        .begin()
        .await
        .map_err(StoreError::db("starting a batch of writes"))?;
    keep_entries(&mut tx, &work.keeps, commits).await?;
    let outcomes = write_turns(&mut tx, commits).await?;
    clear_entries(&mut tx, &work.done).await?;
    mark_delivered(&mut tx, &work.delivered).await?;
    tx.commit().await.map_err(|e| {
        if unique_violation(&e, None) {
            // the one-active-session index: another instance's turn won
            StoreError::Conflict { session_id: 0 }
        } else {
            StoreError::Database {
                context: "committing a batch of writes",
                source: e,
            }
        }
    })?;
    Ok(outcomes)
}

/// Runs `sql` (a savepoint's statement) on `tx`.
async fn savepoint(tx: &mut PgConnection, sql: &'static str) -> Result<(), StoreError> {
    sqlx::query(sql)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("managing a savepoint"))?;
    Ok(())
}

/// The turns: the ordinary ones at once, then (or, when that fails, all of them) one by one.
async fn write_turns(
    tx: &mut PgConnection,
    commits: &[&TurnCommit],
) -> Result<Vec<Outcome>, StoreError> {
    let mut outcomes: Vec<Option<Outcome>> = commits.iter().map(|_| None).collect();
    let (ordinary, mut others): (Vec<usize>, Vec<usize>) =
        (0..commits.len()).partition(|&i| is_ordinary(commits[i]));
    let mut ordinary = ordinary;
    // two turns of one session in one batch (not sent by one instance, which runs a
    // session's turns one at a time): the second must see the first, so one by one
    let mut sessions = HashSet::new();
    if !ordinary
        .iter()
        .all(|&i| commits[i].session.is_new() || sessions.insert(commits[i].session.id))
    {
        others.append(&mut ordinary);
    }
    if !ordinary.is_empty() {
        savepoint(tx, "SAVEPOINT batch").await?;
        let batch: Vec<&TurnCommit> = ordinary.iter().map(|&i| commits[i]).collect();
        match fast_turns(tx, &batch).await {
            Ok(Some(written)) => {
                savepoint(tx, "RELEASE SAVEPOINT batch").await?;
                for (i, outcome) in ordinary.iter().zip(written) {
                    outcomes[*i] = Some(Ok(outcome));
                }
            }
            Ok(None) => {
                savepoint(tx, "ROLLBACK TO SAVEPOINT batch").await?;
                others.append(&mut ordinary);
            }
            Err(e) => {
                tracing::debug!(error = %e, "the batch's turns are written one by one");
                savepoint(tx, "ROLLBACK TO SAVEPOINT batch").await?;
                others.append(&mut ordinary);
            }
        }
    }
    others.sort_unstable();
    for i in others {
        savepoint(tx, "SAVEPOINT turn").await?;
        match turn::commit(tx, commits[i]).await {
            Ok(written) => {
                savepoint(tx, "RELEASE SAVEPOINT turn").await?;
                outcomes[i] = Some(Ok(written));
            }
            Err(e) => {
                savepoint(tx, "ROLLBACK TO SAVEPOINT turn").await?;
                outcomes[i] = Some(Err(e));
            }
        }
    }
    Ok(outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Err(StoreError::Corrupt("a turn was not written".into()))))
        .collect())
}

/// A turn whose rows are a session, messages, a processed update and model calls only.
fn is_ordinary(commit: &TurnCommit) -> bool {
    commit.finish_session.is_none()
        && commit.changes.iter().all(|c| {
            !matches!(
                c,
                StateChange::SaveSubmission { .. }
                    | StateChange::Reading { .. }
                    | StateChange::SaveTicket { .. }
                    | StateChange::SetTicketFeedback { .. }
            )
        })
}

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
async fn fast_turns(
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
    for (commit, session) in commits.iter().zip(sessions) {
        let mut messages = Vec::new();
        for change in &commit.changes {
            let (role, text) = match change {
                StateChange::AddUserMessage { text } => (Role::User, text),
                StateChange::AddAssistantMessage { text } => (Role::Assistant, text),
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
            "INSERT INTO messages (id, session_id, role, text, delivered, created_ms) \
             SELECT i, s, r, t, d, $6 FROM UNNEST($1::BIGINT[], $2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::BOOL[]) \
             AS u(i, s, r, t, d)",
        )
        .bind(&all_ids)
        .bind(&session_ids)
        .bind(&roles)
        .bind(&texts)
        .bind(&delivered)
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

/// Inbox entries, in the order given, except those whose turn is in `commits` (its
/// processed update says it is done; writing it would only leave it to be cleared).
async fn keep_entries(
    tx: &mut PgConnection,
    entries: &[Incoming],
    commits: &[&TurnCommit],
) -> Result<(), StoreError> {
    if entries.is_empty() {
        return Ok(());
    }
    let done: HashSet<(Platform, &str, &str)> = commits
        .iter()
        .filter_map(|c| c.processed.as_ref())
        .map(|p| (p.platform, p.chat.as_str(), p.message_id.as_str()))
        .collect();
    let now = ms(Utc::now());
    let (mut platforms, mut chats, mut ids, mut bodies) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for message in entries {
        if done.contains(&(
            message.platform,
            message.chat.as_str(),
            message.message_id.as_str(),
        )) {
            continue;
        }
        platforms.push(message.platform.as_str());
        chats.push(clean(&message.chat).into_owned());
        ids.push(clean(&message.message_id).into_owned());
        let body = serde_json::to_string(message).map_err(|e| corrupt("inbox entry", e))?;
        bodies.push(clean(&body).into_owned());
    }
    if platforms.is_empty() {
        return Ok(());
    }
    // one statement, in the order given (the identity column numbers them so)
    sqlx::query(
        "INSERT INTO inbox (platform, chat, message_id, incoming, created_ms) \
         SELECT p, c, m, i, $5 FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[]) WITH ORDINALITY AS t(p, c, m, i, n) \
         ORDER BY n ON CONFLICT DO NOTHING",
    )
    .bind(&platforms)
    .bind(&chats)
    .bind(&ids)
    .bind(&bodies)
    .bind(now)
    .execute(&mut *tx)
    .await
    .map_err(StoreError::db("keeping received messages"))?;
    Ok(())
}

/// Handled messages cleared from the inbox.
async fn clear_entries(
    tx: &mut PgConnection,
    done: &[(Platform, String, String)],
) -> Result<(), StoreError> {
    if done.is_empty() {
        return Ok(());
    }
    let platforms: Vec<&str> = done.iter().map(|(p, _, _)| p.as_str()).collect();
    let chats: Vec<String> = done.iter().map(|(_, c, _)| clean(c).into_owned()).collect();
    let ids: Vec<String> = done.iter().map(|(_, _, m)| clean(m).into_owned()).collect();
    sqlx::query(
        "DELETE FROM inbox AS i USING UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[]) AS t(p, c, m) \
         WHERE i.platform = t.p AND i.chat = t.c AND i.message_id = t.m",
    )
    .bind(&platforms)
    .bind(&chats)
    .bind(&ids)
    .execute(&mut *tx)
    .await
    .map_err(StoreError::db("clearing handled messages"))?;
    Ok(())
}

/// Handled messages cleared and assistant messages marked delivered, in one statement
/// (autocommitted).
async fn clear_and_mark(
    pool: &PgPool,
    done: &[(Platform, String, String)],
    delivered: &[i64],
) -> Result<(), StoreError> {
    let platforms: Vec<&str> = done.iter().map(|(p, _, _)| p.as_str()).collect();
    let chats: Vec<String> = done.iter().map(|(_, c, _)| clean(c).into_owned()).collect();
    let ids: Vec<String> = done.iter().map(|(_, _, m)| clean(m).into_owned()).collect();
    sqlx::query(
        "WITH cleared AS (DELETE FROM inbox AS i USING UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[]) AS t(p, c, m) \
         WHERE i.platform = t.p AND i.chat = t.c AND i.message_id = t.m) \
         UPDATE messages SET delivered = TRUE WHERE id = ANY($4)",
    )
    .bind(&platforms)
    .bind(&chats)
    .bind(&ids)
    .bind(delivered)
    .execute(pool)
    .await
    .map_err(StoreError::db("clearing handled messages and marking replies delivered"))?;
    Ok(())
}

/// Assistant messages marked delivered.
async fn mark_delivered(tx: &mut PgConnection, ids: &[i64]) -> Result<(), StoreError> {
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query("UPDATE messages SET delivered = TRUE WHERE id = ANY($1)")
        .bind(ids)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("marking messages delivered"))?;
    Ok(())
}

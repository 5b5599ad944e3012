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

use super::batch::fast_turns;
use super::turn::{self, clean, unique_violation};
use crate::message::{Incoming, Platform};
use crate::store::hot::{HotChange, HotSessions, HotTurn};
use crate::store::rows::{corrupt, ms};
use crate::store::{CommittedTurn, StateChange, StoreError, StoredMessage, TurnCommit};
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

/// Handled messages as arrays of their keys: platforms, chats, message ids.
fn clear_keys(done: &[(Platform, String, String)]) -> (Vec<&str>, Vec<String>, Vec<String>) {
    (
        done.iter().map(|(p, _, _)| p.as_str()).collect(),
        done.iter().map(|(_, c, _)| clean(c).into_owned()).collect(),
        done.iter().map(|(_, _, m)| clean(m).into_owned()).collect(),
    )
}

/// Deletes the inbox rows of the handled messages `$1`, `$2`, `$3` ([`clear_keys`]).
const CLEAR: &str = "DELETE FROM inbox AS i USING UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[]) AS t(p, c, m) \
     WHERE i.platform = t.p AND i.chat = t.c AND i.message_id = t.m";

/// Handled messages cleared from the inbox.
async fn clear_entries(
    tx: &mut PgConnection,
    done: &[(Platform, String, String)],
) -> Result<(), StoreError> {
    if done.is_empty() {
        return Ok(());
    }
    let (platforms, chats, ids) = clear_keys(done);
    sqlx::query(CLEAR)
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
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("WITH cleared AS ({CLEAR}) UPDATE messages SET delivered = TRUE WHERE id = ANY($4)")
    });
    let (platforms, chats, ids) = clear_keys(done);
    sqlx::query(SQL.as_str())
        .bind(&platforms)
        .bind(&chats)
        .bind(&ids)
        .bind(delivered)
        .execute(pool)
        .await
        .map_err(StoreError::db(
            "clearing handled messages and marking replies delivered",
        ))?;
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

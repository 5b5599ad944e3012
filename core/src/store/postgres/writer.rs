//! Group commit on PostgreSQL: each writer task (up to two per instance, one in use while
//! other instances share the database: [`super::share`]; a chat's jobs always to the same
//! one, so they commit in the order asked) drains its queue of turns,
//! inbox entries, inbox clears and delivery marks into one transaction, so that turns
//! finishing at the same time share one commit (one WAL flush) instead of waiting for one
//! each.
//!
//! A batch is one statement when it can be ([`super::batch`]): its inbox entries (not those
//! whose turn is in the same batch or that it clears), its ordinary turns (a session, its
//! messages, a processed update and model calls; at most one turn per session) with each
//! session update checked against the version its turn loaded, and its inbox clears and
//! delivery marks: one round trip, one WAL flush. The turns out of the ordinary (a flow
//! switch, a submission, reading data, tickets) follow in one transaction, each in a
//! savepoint of its own ([`super::single_turn::commit`]: a refused turn is rolled back
//! alone and answered with its error), and the clears and marks then go with them (a
//! message leaves the inbox only with or after its turn). A statement one of whose turns is refused writes
//! nothing, and the whole batch goes one by one in that transaction instead.
//!
//! A turn is answered only after the commit that holds it: the durability promise is the
//! same as one transaction per turn (a reply is sent only after its turn is committed).

use super::batch::{AtOnce, at_once, within};
use super::single_turn::{self, unique_violation};
use crate::message::{Incoming, Platform};
use crate::store::hot::{HotChange, HotSessions, HotTurn};
use crate::store::{CommittedTurn, StateChange, StoreError, StoredMessage, TurnCommit};
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
pub(super) struct Work {
    turns: Vec<(Box<TurnCommit>, Reply)>,
    keeps: Vec<Incoming>,
    /// Keeps and delivery marks answered once committed.
    durable: Vec<oneshot::Sender<Result<(), StoreError>>>,
    done: Vec<(Platform, String, String)>,
    delivered: Vec<i64>,
    flushes: Vec<oneshot::Sender<()>>,
}

impl Work {
    pub(super) fn of(jobs: impl Iterator<Item = Job>) -> Work {
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
    pub(super) async fn write(self, pool: &PgPool, hot: &HotSessions, failures: &AtomicU64) {
        let commits: Vec<&TurnCommit> = self.turns.iter().map(|(c, _)| c.as_ref()).collect();
        let (outcomes, durable) = write_batch(pool, &commits, &self).await;
        let refused = |e: &StoreError| {
            matches!(
                e,
                StoreError::Conflict { .. } | StoreError::Duplicate { .. }
            )
        };
        if outcomes.iter().any(|o| matches!(o, Err(e) if !refused(e))) || durable.is_err() {
            failures.fetch_add(1, Ordering::Relaxed);
        }
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
            let _ = reply.send(durable.as_ref().map(|_| ()).map_err(copy_error));
        }
        for reply in self.flushes {
            let _ = reply.send(());
        }
    }
}

type Outcome = Result<(CommittedTurn, Vec<StoredMessage>), StoreError>;

/// `e` once more, for another job of the same batch.
fn copy_error(e: &StoreError) -> StoreError {
    match e {
        StoreError::Conflict { session_id } => StoreError::Conflict {
            session_id: *session_id,
        },
        StoreError::Duplicate { chat, message_id } => StoreError::Duplicate {
            chat: chat.clone(),
            message_id: message_id.clone(),
        },
        _ => StoreError::Batch {
            message: e.to_string(),
            busy: e.is_busy() || matches!(e, StoreError::Database { .. }),
        },
    }
}

/// The batch: every turn's outcome in order, and whether the keeps, clears and delivery
/// marks were committed.
///
/// The ordinary turns (at most one per session), the keeps, and the clears and marks when
/// nothing else follows, in one statement ([`at_once`]); the turns out of the ordinary after
/// it, one by one in a transaction that also takes the clears and marks (a message is
/// cleared from the inbox only with or after its turn). A refused statement wrote nothing:
/// all of it goes one by one.
async fn write_batch(
    pool: &PgPool,
    commits: &[&TurnCommit],
    work: &Work,
) -> (Vec<Outcome>, Result<(), StoreError>) {
    let mut outcomes: Vec<Option<Outcome>> = commits.iter().map(|_| None).collect();
    let mut sessions = HashSet::new();
    let (ordinary, others): (Vec<usize>, Vec<usize>) = (0..commits.len()).partition(|&i| {
        // two turns of one session in one batch (not sent by one instance, which runs a
        // session's turns one at a time): the second must see the first, so one by one
        is_ordinary(commits[i])
            && (commits[i].session.is_new() || sessions.insert(commits[i].session.id))
    });
    let keeps = unfinished(&work.keeps, commits, &work.done);
    let mut first = AtOnce::default();
    first.keep(keeps.iter().copied());
    first.turns(ordinary.iter().map(|&i| commits[i]));
    if others.is_empty() {
        first.clear_and_mark(&work.done, &work.delivered);
    }
    let marks = !work.done.is_empty() || !work.delivered.is_empty();
    let mut rest = Rest {
        clear_and_mark: marks && !others.is_empty(),
        turns: others,
        keeps: Vec::new(),
    };
    let mut durable = Ok(());
    if !first.is_empty() {
        match at_once(pool, &first).await {
            Ok(Some(written)) => {
                for (&i, outcome) in ordinary.iter().zip(written) {
                    outcomes[i] = Some(Ok(outcome));
                }
            }
            refused => {
                if let Err(e) = refused {
                    tracing::debug!(error = %e, "the batch is written one by one");
                }
                rest = Rest {
                    turns: (0..commits.len()).collect(),
                    keeps,
                    clear_and_mark: marks,
                };
            }
        }
    }
    if !rest.turns.is_empty() || !rest.keeps.is_empty() || rest.clear_and_mark {
        match one_by_one(pool, commits, &rest, work).await {
            Ok(written) => {
                for (i, outcome) in written {
                    outcomes[i] = Some(outcome);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, turns = rest.turns.len(), "a batch of writes failed");
                for &i in &rest.turns {
                    outcomes[i] = Some(Err(match &e {
                        StoreError::Conflict { .. } => StoreError::Conflict {
                            session_id: commits[i].session.id,
                        },
                        e => copy_error(e),
                    }));
                }
                if !rest.keeps.is_empty() || rest.clear_and_mark {
                    durable = Err(e);
                }
            }
        }
    }
    let outcomes = outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Err(StoreError::Corrupt("a turn was not written".into()))))
        .collect();
    (outcomes, durable)
}

/// What a batch writes in a transaction after (or instead of) its one statement.
struct Rest<'a> {
    /// Indices of the turns, in the batch's order.
    turns: Vec<usize>,
    keeps: Vec<&'a Incoming>,
    /// The batch's clears and delivery marks are written here.
    clear_and_mark: bool,
}

/// The inbox entries worth writing: not those whose turn is in `commits` (its processed
/// update says it is done) or that are cleared in the same batch.
fn unfinished<'a>(
    entries: &'a [Incoming],
    commits: &[&TurnCommit],
    done: &[(Platform, String, String)],
) -> Vec<&'a Incoming> {
    let mut finished: HashSet<(Platform, &str, &str)> = commits
        .iter()
        .filter_map(|c| c.processed.as_ref())
        .map(|p| (p.platform, p.chat.as_str(), p.message_id.as_str()))
        .collect();
    finished.extend(done.iter().map(|(p, c, m)| (*p, c.as_str(), m.as_str())));
    entries
        .iter()
        .filter(|m| !finished.contains(&(m.platform, m.chat.as_str(), m.message_id.as_str())))
        .collect()
}

/// `rest` in one transaction: its keeps, its turns one by one (each in a savepoint: a
/// refused turn is rolled back alone and answered with its error), then the clears and
/// marks. An error: nothing of it was committed.
async fn one_by_one(
    pool: &PgPool,
    commits: &[&TurnCommit],
    rest: &Rest<'_>,
    work: &Work,
) -> Result<Vec<(usize, Outcome)>, StoreError> {
    let mut tx = pool
        .begin()
        .await
        .map_err(StoreError::db("starting a batch of writes"))?;
    if !rest.keeps.is_empty() {
        let mut keeps = AtOnce::default();
        keeps.keep(rest.keeps.iter().copied());
        within(&mut tx, &keeps).await?;
    }
    let mut outcomes = Vec::with_capacity(rest.turns.len());
    for &i in &rest.turns {
        savepoint(&mut tx, "SAVEPOINT turn").await?;
        match single_turn::commit(&mut tx, commits[i]).await {
            Ok(written) => {
                savepoint(&mut tx, "RELEASE SAVEPOINT turn").await?;
                outcomes.push((i, Ok(written)));
            }
            Err(e) => {
                savepoint(&mut tx, "ROLLBACK TO SAVEPOINT turn").await?;
                outcomes.push((i, Err(e)));
            }
        }
    }
    if rest.clear_and_mark {
        let mut marks = AtOnce::default();
        marks.clear_and_mark(&work.done, &work.delivered);
        within(&mut tx, &marks).await?;
    }
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

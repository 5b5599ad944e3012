//! The fast write path: a whole batch of turns in one round trip to the connection's thread
//! (`BEGIN`, every statement and `COMMIT` as one query). New sessions and messages are
//! numbered here so that no row comes back. Anything out of the ordinary answers `None`
//! and the writer redoes the batch turn by turn ([`super::turn_by_turn`]).

use super::inbox::{inbox_rows, push_delivered, push_inbox_done, push_inbox_put};
use super::rows::Prepared;
use super::statements::{
    CallRow, MessageRow, SessionUpdate, message_rows, push_finished, push_llm_calls, push_messages,
    push_new_sessions, push_processed, push_session_updates, push_submissions, push_users,
    session_rows, submission_rows,
};
use super::turn_by_turn::{turn_written, write_extras};
use super::{Job, Sql};
use crate::store::hot::HotChange;
use crate::store::rows::{corrupt, from_ms, ms};
use crate::store::{
    CommittedTurn, ProcessedUpdate, SessionRecord, StateChange, StoreError, TurnCommit,
};
use chrono::Utc;
use sqlx::SqlitePool;
use std::collections::HashMap;

/// The fast path of a batch, in one round trip to the connection's worker thread: `BEGIN`,
/// every row of the batch and `COMMIT` as one query ([`Trip`]): each trip wakes that
/// thread and then this one, which costs most when the turns keep every core busy
/// (`docs/performance.md`, "Round trips"). New sessions and messages
/// are numbered here, from `next_ids`, so that their rows go in the same query and no row
/// comes back (each returned row is one more hand-over between the threads); a turn's
/// reading data or ticket takes trips of its own ([`write_extras`]), and the `COMMIT` one
/// more. Anything out of the ordinary — a conflict, a duplicate, a failed statement, two
/// turns of one session — answers `None`, the transaction rolled back, and the batch is
/// redone turn by turn in savepoints.
pub(super) async fn fast_batch(
    writer: &SqlitePool,
    batch: &[Job],
    next_ids: &mut Option<NextIds>,
) -> Option<Vec<(CommittedTurn, HotChange)>> {
    let mut conn = writer.acquire().await.ok()?;
    let first = match *next_ids {
        Some(ids) => ids,
        None => {
            let (session, message) = sqlx::query_as(
                "SELECT (SELECT coalesce(max(id), 0) + 1 FROM sessions), \
                 (SELECT coalesce(max(id), 0) + 1 FROM messages)",
            )
            .fetch_one(&mut *conn)
            .await
            .ok()?;
            NextIds { session, message }
        }
    };
    let (done, next) = match fast_writes(&mut conn, batch, first).await {
        Ok(Some(written)) => written,
        outcome => {
            if let Err(e) = &outcome {
                tracing::debug!(error = %e, "batch redone turn by turn");
            }
            rollback(&mut conn).await;
            return None;
        }
    };
    *next_ids = Some(next);
    Some(done)
}

/// The ids the fast path gives the next session and message it creates ([`fast_batch`]).
#[derive(Clone, Copy)]
pub(super) struct NextIds {
    pub(super) session: i64,
    pub(super) message: i64,
}

/// A change [`write_extras`] writes (on the fast path, after the batch's [`Trip`]).
pub(super) fn is_extra(change: &StateChange) -> bool {
    matches!(
        change,
        StateChange::Reading { .. }
            | StateChange::SaveTicket { .. }
            | StateChange::SetTicketFeedback { .. }
    )
}

/// Ends the transaction a fast batch began, unless its failure ended it already.
pub(super) async fn rollback(conn: &mut sqlx::SqliteConnection) {
    if let Err(e) = sqlx::query("ROLLBACK").execute(&mut *conn).await {
        tracing::trace!(error = %e, "nothing to roll back");
    }
}

/// The fast path's writes, from `BEGIN` on ([`fast_batch`]); new sessions and messages
/// numbered from `first`. Returns the turns written and the next free ids.
#[allow(clippy::type_complexity)]
pub(super) async fn fast_writes(
    conn: &mut sqlx::SqliteConnection,
    batch: &[Job],
    first: NextIds,
) -> Result<Option<(Vec<(CommittedTurn, HotChange)>, NextIds)>, StoreError> {
    let now_ms = ms(Utc::now());
    let (commits, afters): (Vec<&TurnCommit>, Vec<&Prepared>) = batch
        .iter()
        .filter_map(|job| match job {
            Job::Turn { commit, after, .. } => Some((commit.as_ref(), after.as_ref())),
            Job::InboxPut { .. }
            | Job::InboxDone { .. }
            | Job::Delivered { .. }
            | Job::Flush(_) => None,
        })
        .unzip();
    let mut next = first;
    let Some(mut sessions) = number_sessions(&afters, &mut next) else {
        // two turns of one session: the second must see the first's version
        return Ok(None);
    };

    // every row of the batch, before the query borrows them
    let finished: Vec<i64> = commits.iter().filter_map(|c| c.finish_session).collect();
    let mut users = Vec::new();
    let mut created = Vec::new();
    let mut going_on = Vec::new();
    for ((commit, after), session) in commits.iter().zip(&afters).zip(&sessions) {
        if commit.session.is_new() {
            users.push((&session.key, &commit.user));
            created.push((session, *after));
        } else {
            going_on.push(SessionUpdate::of(commit, after));
        }
    }
    let (moved, staying) = session_rows(going_on);
    let processed: Vec<(&ProcessedUpdate, i64)> = commits
        .iter()
        .zip(&sessions)
        .filter_map(|(c, s)| c.processed.as_ref().map(|p| (p, s.id)))
        .collect();
    let messages = message_rows(
        commits
            .iter()
            .zip(&sessions)
            .map(|(c, s)| (s.id, c.changes.as_slice())),
    );
    let calls: Vec<CallRow> = commits
        .iter()
        .zip(&sessions)
        .flat_map(|(c, s)| c.llm_calls.iter().map(move |call| (Some(s.id), call)))
        .collect();
    let mut submissions = Vec::new();
    for (commit, session) in commits.iter().zip(&sessions) {
        submission_rows(session.id, &session.key, &commit.changes, &mut submissions);
    }
    let delivered: Vec<i64> = batch
        .iter()
        .flat_map(|job| match job {
            Job::Delivered { ids, .. } => ids.as_slice(),
            Job::Turn { .. } | Job::InboxPut { .. } | Job::InboxDone { .. } | Job::Flush(_) => &[],
        })
        .copied()
        .collect();
    let (put, done) = inbox_rows(batch, &commits);

    let mut trip = Trip::new("BEGIN IMMEDIATE");
    trip.add(Part::Any, &finished, |sql, ids| {
        push_finished(sql, ids, now_ms)
    })?;
    trip.add(Part::Any, &users, |sql, users| {
        push_users(sql, users, now_ms)
    })?;
    trip.add(Part::Any, &created, |sql, created| {
        push_new_sessions(sql, created, now_ms)
    })?;
    // each row: else a session moved on meanwhile (the turn by turn path names it)
    for (rows, status) in [(&moved, true), (&staying, false)] {
        trip.add(Part::EveryRow, rows, |sql, rows| {
            push_session_updates(sql, rows, status, now_ms)
        })?;
    }
    // an update processed already fails the query (its primary key: no check needed)
    trip.add(Part::Any, &processed, |sql, rows| {
        push_processed(sql, rows, false, now_ms)
    })?;
    trip.add(Part::Any, &messages, |sql, rows| {
        push_messages(sql, rows, Some(next.message), now_ms)
    })?;
    trip.add(Part::Any, &calls, push_llm_calls)?;
    trip.add(Part::Any, &submissions, |sql, rows| {
        push_submissions(sql, rows, now_ms)
    })?;
    trip.add(Part::Any, &delivered, push_delivered)?;
    trip.add(Part::Any, &put, push_inbox_put)?;
    trip.add(Part::Any, &done, push_inbox_done)?;
    // reading data and tickets take trips of their own, before the COMMIT
    let extras = commits.iter().any(|c| c.changes.iter().any(is_extra));
    if !extras {
        trip.finish("COMMIT");
    }
    trip.run(conn).await?;
    if extras {
        for (commit, session) in commits.iter().zip(&sessions) {
            write_extras(conn, session, &commit.changes, now_ms).await?;
        }
        sqlx::query("COMMIT")
            .execute(&mut *conn)
            .await
            .map_err(StoreError::db("committing a batch of turns"))?;
    }
    // committed: nothing below can fail
    let done = committed(&commits, sessions.drain(..), &messages, &mut next, now_ms);
    Ok(Some((done, next)))
}

/// The batch's sessions as they will be written, new ones numbered from `next`; `None`
/// when two turns of the batch are of one session.
fn number_sessions(afters: &[&Prepared], next: &mut NextIds) -> Option<Vec<SessionRecord>> {
    let sessions: Vec<SessionRecord> = afters
        .iter()
        .map(|after| {
            let mut session = after.session.clone();
            if session.is_new() {
                session.id = next.session;
                next.session += 1;
            }
            session
        })
        .collect();
    let seen: std::collections::HashSet<i64> = sessions.iter().map(|s| s.id).collect();
    (seen.len() == sessions.len()).then_some(sessions)
}

/// The turns of a committed batch as the store reports them: the ids its messages got
/// (numbered from `next`, which moves past them) and each session's new version.
fn committed(
    commits: &[&TurnCommit],
    sessions: impl Iterator<Item = SessionRecord>,
    messages: &[MessageRow<'_>],
    next: &mut NextIds,
    now_ms: i64,
) -> Vec<(CommittedTurn, HotChange)> {
    let mut ids: HashMap<i64, Vec<i64>> = HashMap::new();
    for ((session_id, _, _, _), id) in messages.iter().zip(next.message..) {
        ids.entry(*session_id).or_default().push(id);
    }
    next.message += messages.len() as i64;
    commits
        .iter()
        .zip(sessions)
        .map(|(commit, mut session)| {
            if session.version == 0 {
                session.created_at = from_ms(now_ms);
            }
            session.version += 1;
            session.updated_at = from_ms(now_ms);
            let written = ids.remove(&session.id).unwrap_or_default();
            turn_written(commit, session, written, now_ms)
        })
        .collect()
}

/// Statements run as one query ([`fast_batch`]): `BEGIN IMMEDIATE`, the batch's writes, each
/// followed by a check where it must change one row per row it carries, and `COMMIT` when
/// nothing else is to be written. A check that fails ends the query with an error before
/// the `COMMIT` ([`BATCH_CHECKS`]), so a batch that commits in its trip is one round trip
/// to the connection's thread.
///
/// sqlx's SQLite connection runs every statement of a query, binding the arguments in
/// order across them, and its `Executor::fetch_many` reports each statement's result.
/// (`Query::fetch_many`, the same through a query, is deprecated since sqlx 0.8, and sqlx
/// may restrict queries to one statement one day: launchbadge/sqlx#3108; `raw_sql` takes
/// no arguments.) This is the one place that relies on it — the version is pinned by
/// `Cargo.lock`, and the store's tests and `kaiwa bench` run it with every batch — since
/// each statement on its own would cost a trip.
pub(super) struct Trip {
    pub(super) sql: Sql,
    /// statements in the query
    pub(super) statements: usize,
}

/// What a statement of a [`Trip`] must do.
#[derive(Clone, Copy)]
pub(super) enum Part {
    /// change one row for each of its rows
    EveryRow,
    Any,
}

/// Made on the writer's connection when it opens: a row inserted into `batch_refused` fails
/// its statement (and so ends a [`Trip`], its `COMMIT` not run). A trip's check inserts one
/// when the statement before it changed other than its number of rows: a session moved on
/// meanwhile.
pub(super) const BATCH_CHECKS: &str = "CREATE TEMP TABLE IF NOT EXISTS batch_refused (changes INTEGER); \
    CREATE TEMP TRIGGER IF NOT EXISTS batch_refused_raises BEFORE INSERT ON batch_refused \
    BEGIN SELECT RAISE(ABORT, 'a statement of the batch did not change one row per row'); END";

impl Trip {
    pub(super) fn new(first: &'static str) -> Self {
        Trip {
            sql: Sql::new(first),
            statements: 1,
        }
    }

    /// Appends the statement `statement` builds for `rows` (none for no rows), as
    /// [`execute_rows`] runs one, and for [`Part::EveryRow`] its check.
    pub(super) fn add<T>(
        &mut self,
        part: Part,
        rows: &[T],
        statement: impl FnOnce(&mut Sql, &[T]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        self.sql.push("; ");
        statement(&mut self.sql, rows)?;
        self.statements += 1;
        if let Part::EveryRow = part {
            let n = i64::try_from(rows.len()).map_err(|e| corrupt("a batch's rows", e))?;
            self.sql
                .push("; INSERT INTO temp.batch_refused SELECT changes() WHERE changes() <> ")
                .push_bind(n);
            self.statements += 1;
        }
        Ok(())
    }

    /// Appends a last statement (`COMMIT`).
    pub(super) fn finish(&mut self, last: &'static str) {
        self.sql.push("; ").push(last);
        self.statements += 1;
    }

    /// Runs the statements (prepared once per set of statements a batch needs: each one's
    /// text is the same for any number of rows, [`push_rows`]); they return no rows (each
    /// would be one more hand-over from the connection's thread). A failed statement or
    /// check ends the query with its error (the statements before it stay done: the caller
    /// rolls back).
    pub(super) async fn run(self, conn: &mut sqlx::SqliteConnection) -> Result<(), StoreError> {
        use futures::TryStreamExt;
        let Trip {
            mut sql,
            statements,
        } = self;
        // the connection's own `Executor::fetch_many`, which reports each statement
        let results: Vec<_> = sqlx::Executor::fetch_many(&mut *conn, sql.build())
            .try_collect()
            .await
            .map_err(StoreError::db("writing a batch of turns"))?;
        let done = results.iter().filter(|r| r.is_left()).count();
        if done != statements {
            return Err(corrupt(
                "a batch's statements",
                format!("{done} results for {statements} statements"),
            ));
        }
        Ok(())
    }
}

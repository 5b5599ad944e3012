//! A writer's batch in one statement ([`at_once`]): the inbox entries, the ordinary turns
//! (their users and new sessions, the session updates — each checked against the version
//! its turn loaded —, processed updates, messages and model calls), the inbox clears and
//! the delivery marks, as data-modifying `WITH` clauses over `UNNEST`ed arrays, autocommitted.
//! One round trip and one WAL flush for the whole batch.
//!
//! A statement is atomic: when any of its turns is refused (a session another instance
//! moved on, an update already processed, a second active session for a key), the
//! statement's last clause raises (`kaiwa_batch_refused()`, a migration's function) and
//! nothing of it is written; the writer then writes the same turns one by one in a
//! transaction ([`super::single_turn::commit`]), which says which turn was refused.
//!
//! Ids: new sessions and messages draw theirs from their tables' identity sequences inside
//! the statement, ranked ascending, so that a turn's messages are numbered in their order.
//! Each sequence is looked up once per statement (a subquery), not for every row drawn.

use super::single_turn::clean;
use crate::message::{Incoming, Platform};
use crate::store::rows::{applied, corrupt, from_ms, ms, pending_json};
use crate::store::{
    CommittedTurn, ProcessedUpdate, Role, SessionRecord, StateChange, StoreError, StoredMessage,
    TurnCommit,
};
use chrono::Utc;
use sqlx::{PgConnection, PgExecutor, PgPool, Row};
use std::collections::HashSet;

/// What a turn wrote: its outcome and the transcript messages, in order (for the cache).
pub(super) type Written = (CommittedTurn, Vec<StoredMessage>);

/// The SQLSTATE `kaiwa_batch_refused()` raises.
const REFUSED: &str = "KWB01";

/// The statement; its parameters are [`AtOnce::run`]'s binds, in order.
pub(super) const AT_ONCE: &str = "\
WITH sync AS (SELECT set_config('synchronous_commit', COALESCE($1, current_setting('synchronous_commit')), true) AS s),
kept AS (
  INSERT INTO inbox (platform, chat, message_id, incoming, created_ms)
  SELECT p, c, m, i, $2 FROM UNNEST($3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[]) WITH ORDINALITY AS t(p, c, m, i, n)
  ORDER BY n ON CONFLICT DO NOTHING),
seen AS (
  INSERT INTO users (platform, user_id, display_name, first_seen_ms, last_seen_ms)
  SELECT p, u, d, $2, $2 FROM UNNEST($7::TEXT[], $8::TEXT[], $9::TEXT[]) AS t(p, u, d) ORDER BY p, u
  ON CONFLICT (platform, user_id) DO UPDATE SET display_name = excluded.display_name, last_seen_ms = excluded.last_seen_ms),
new_ids AS MATERIALIZED (
  SELECT row_number() OVER (ORDER BY id) AS n, id
  FROM (SELECT nextval((SELECT pg_get_serial_sequence('sessions', 'id'))::regclass) AS id
        FROM generate_series(1, (SELECT count(*) FROM UNNEST($10::BIGINT[]) AS r WHERE r < 0))) AS drawn),
turns AS MATERIALIZED (
  SELECT t.*, COALESCE(new_ids.id, t.r) AS sid
  FROM UNNEST($10::BIGINT[], $11::BIGINT[], $12::TEXT[], $13::TEXT[], $14::TEXT[], $15::TEXT[], $16::TEXT[],
              $17::TEXT[], $18::TEXT[], $19::TEXT[], $20::TEXT[], $21::TEXT[], $22::TEXT[], $23::TEXT[])
       WITH ORDINALITY AS t(r, v, p, c, th, u, f, a, l, co, tz, st, po, s, n)
  LEFT JOIN new_ids ON new_ids.n = -t.r),
created AS (
  INSERT INTO sessions (id, platform, chat, thread, user_id, flow, current_agent, language, country, timezone,
                        state, pending_options, status, version, created_ms, updated_ms)
  SELECT sid, p, c, th, u, f, a, l, co, tz, st, po, s, 1, $2, $2 FROM turns WHERE r < 0
  ON CONFLICT DO NOTHING RETURNING 1),
updated AS (
  UPDATE sessions AS s SET current_agent = t.a, language = t.l, country = t.co, timezone = t.tz, state = t.st,
    pending_options = t.po, status = t.s, version = s.version + 1, updated_ms = $2
  FROM turns AS t WHERE t.r > 0 AND s.id = t.r AND s.version = t.v RETURNING 1),
marked AS (
  INSERT INTO processed_updates (platform, chat, message_id, session_id, created_ms)
  SELECT q.p, q.c, q.m, turns.sid, $2
  FROM UNNEST($24::TEXT[], $25::TEXT[], $26::TEXT[], $27::BIGINT[]) AS q(p, c, m, k) JOIN turns ON turns.n = q.k
  ON CONFLICT DO NOTHING RETURNING 1),
message_ids AS MATERIALIZED (
  SELECT row_number() OVER (ORDER BY id) AS n, id
  FROM (SELECT nextval((SELECT pg_get_serial_sequence('messages', 'id'))::regclass) AS id
        FROM generate_series(1, cardinality($28::BIGINT[]))) AS drawn),
said AS (
  INSERT INTO messages (id, session_id, role, text, delivered, trace, created_ms)
  SELECT message_ids.id, turns.sid, m.r, m.t, m.d, m.w, $2
  FROM UNNEST($28::BIGINT[], $29::TEXT[], $30::TEXT[], $31::BOOL[], $32::TEXT[]) WITH ORDINALITY AS m(k, r, t, d, w, n)
  JOIN message_ids ON message_ids.n = m.n JOIN turns ON turns.n = m.k),
called AS (
  INSERT INTO llm_calls (session_id, agent, model, prompt_tokens, completion_tokens, latency_ms, error, created_ms, wasted)
  SELECT COALESCE(x.own, turns.sid), x.a, x.m, x.pt, x.ct, x.ms, x.e, x.at, x.w
  FROM UNNEST($33::BIGINT[], $34::BIGINT[], $35::TEXT[], $36::TEXT[], $37::BIGINT[], $38::BIGINT[], $39::BIGINT[],
              $40::TEXT[], $41::BIGINT[], $42::BOOL[]) AS x(k, own, a, m, pt, ct, ms, e, at, w)
  JOIN turns ON turns.n = x.k),
cleared AS (
  DELETE FROM inbox AS i USING UNNEST($43::TEXT[], $44::TEXT[], $45::TEXT[]) AS t(p, c, m)
  WHERE i.platform = t.p AND i.chat = t.c AND i.message_id = t.m),
delivered AS (UPDATE messages SET delivered = TRUE WHERE id = ANY($46::BIGINT[]))
SELECT CASE WHEN (SELECT count(*) FROM created) + (SELECT count(*) FROM updated) = cardinality($10::BIGINT[])
             AND (SELECT count(*) FROM marked) = cardinality($24::TEXT[])
            THEN COALESCE((SELECT array_agg(id ORDER BY n) FROM new_ids), '{}')
            ELSE kaiwa_batch_refused() END AS sessions,
       COALESCE((SELECT array_agg(id ORDER BY n) FROM message_ids), '{}') AS messages,
       (SELECT s FROM sync) AS sync";

/// [`clear_and_mark`]'s statement.
pub(super) const CLEAR_AND_MARK: &str = "\
WITH sync AS (SELECT set_config('synchronous_commit', COALESCE($1, current_setting('synchronous_commit')), true) AS s),
cleared AS (DELETE FROM inbox AS i USING UNNEST($2::TEXT[], $3::TEXT[], $4::TEXT[]) AS t(p, c, m)
  WHERE i.platform = t.p AND i.chat = t.c AND i.message_id = t.m),
marked AS (UPDATE messages SET delivered = TRUE WHERE id = ANY($5::BIGINT[]))
SELECT s FROM sync";

/// A batch for [`at_once`]: what it writes, one array per column.
#[derive(Default)]
pub(super) struct AtOnce<'a> {
    turns: Vec<&'a TurnCommit>,
    /// Each turn's session as it leaves it.
    sessions: Vec<SessionRecord>,
    keeps: Vec<&'a Incoming>,
    done: Vec<&'a (Platform, String, String)>,
    delivered: Vec<i64>,
}

impl<'a> AtOnce<'a> {
    /// Inbox entries to write (in order).
    pub(super) fn keep(&mut self, entries: impl IntoIterator<Item = &'a Incoming>) {
        self.keeps.extend(entries);
    }

    /// Ordinary turns (see `writer::is_ordinary`), at most one per existing session.
    pub(super) fn turns(&mut self, turns: impl IntoIterator<Item = &'a TurnCommit>) {
        for turn in turns {
            self.sessions.push(applied(turn));
            self.turns.push(turn);
        }
    }

    /// Inbox clears and delivery marks.
    pub(super) fn clear_and_mark(
        &mut self,
        done: impl IntoIterator<Item = &'a (Platform, String, String)>,
        delivered: &[i64],
    ) {
        self.done.extend(done);
        self.delivered.extend_from_slice(delivered);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.turns.is_empty()
            && self.keeps.is_empty()
            && self.done.is_empty()
            && self.delivered.is_empty()
    }
}

/// Writes `batch` in one autocommitted statement; each turn's outcome in order. `Ok(None)`:
/// a turn was refused and nothing was written.
pub(super) async fn at_once(
    pool: &PgPool,
    batch: &AtOnce<'_>,
) -> Result<Option<Vec<Written>>, StoreError> {
    // a batch of clears and marks alone does not wait for the disk: a mark lost with the
    // server (not with an instance: the commit is visible to every instance at once) only
    // sends a reply again
    let sync = (batch.turns.is_empty() && batch.keeps.is_empty()).then_some("off");
    run(pool, batch, sync).await
}

/// Writes `batch` (keeps, clears and marks: no turns) in the transaction `tx`.
pub(super) async fn within(tx: &mut PgConnection, batch: &AtOnce<'_>) -> Result<(), StoreError> {
    match run(&mut *tx, batch, None).await? {
        Some(_) => Ok(()),
        None => Err(StoreError::Corrupt(
            "a batch without turns was refused".into(),
        )),
    }
}

/// The statement on `db`; `sync`: the transaction's `synchronous_commit`, if not the
/// server's.
async fn run<'e>(
    db: impl PgExecutor<'e>,
    batch: &AtOnce<'_>,
    sync: Option<&str>,
) -> Result<Option<Vec<Written>>, StoreError> {
    if batch.turns.is_empty() && batch.keeps.is_empty() {
        clear_and_mark(db, batch, sync).await?;
        return Ok(Some(Vec::new()));
    }
    let now_ms = ms(Utc::now());
    let keeps = KeepColumns::of(&batch.keeps)?;
    let users = UserColumns::of(&batch.turns, &batch.sessions);
    let mut turns = TurnColumns::default();
    let mut new = 0;
    for (turn, session) in batch.turns.iter().zip(&batch.sessions) {
        let reference = if turn.session.is_new() {
            new += 1;
            -new
        } else {
            turn.session.id
        };
        turns.push(reference, turn.session.version, session)?;
    }
    let processed = ProcessedColumns::of(&batch.turns);
    let messages = MessageColumns::of(&batch.turns);
    let mut calls = CallColumns::default();
    for (k, turn) in (1_i64..).zip(&batch.turns) {
        for call in &turn.llm_calls {
            calls.push(call, None);
            calls.turns.push(k);
        }
    }
    let (clear_platforms, clear_chats, clear_ids) = clear_keys(batch.done.iter().copied());
    let row = sqlx::query(AT_ONCE)
        .bind(sync)
        .bind(now_ms)
        .bind(&keeps.platforms)
        .bind(&keeps.chats)
        .bind(&keeps.ids)
        .bind(&keeps.bodies)
        .bind(&users.platforms)
        .bind(&users.ids)
        .bind(&users.names)
        .bind(&turns.references)
        .bind(&turns.versions)
        .bind(&turns.platforms)
        .bind(&turns.chats)
        .bind(&turns.threads)
        .bind(&turns.users)
        .bind(&turns.flows)
        .bind(&turns.agents)
        .bind(&turns.languages)
        .bind(&turns.countries)
        .bind(&turns.timezones)
        .bind(&turns.states)
        .bind(&turns.pending)
        .bind(&turns.statuses)
        .bind(&processed.platforms)
        .bind(&processed.chats)
        .bind(&processed.ids)
        .bind(&processed.turns)
        .bind(&messages.turns)
        .bind(&messages.roles)
        .bind(&messages.texts)
        .bind(&messages.delivered)
        .bind(&messages.traces)
        .bind(&calls.turns)
        .bind(&calls.sessions)
        .bind(&calls.agents)
        .bind(&calls.models)
        .bind(&calls.prompt)
        .bind(&calls.completion)
        .bind(&calls.latency)
        .bind(&calls.errors)
        .bind(&calls.at)
        .bind(&calls.wasted)
        .bind(&clear_platforms)
        .bind(&clear_chats)
        .bind(&clear_ids)
        .bind(&batch.delivered)
        .fetch_one(db)
        .await;
    let row = match row {
        Ok(row) => row,
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(REFUSED) => return Ok(None),
        Err(e) => {
            return Err(StoreError::Database {
                context: "writing a batch",
                source: e,
            });
        }
    };
    let get = |e| corrupt("a batch's ids", e);
    let session_ids: Vec<i64> = row.try_get("sessions").map_err(get)?;
    let message_ids: Vec<i64> = row.try_get("messages").map_err(get)?;
    if session_ids.len() != usize::try_from(new).unwrap_or(usize::MAX)
        || message_ids.len() != messages.texts.len()
    {
        return Err(StoreError::Corrupt("the database drew too few ids".into()));
    }
    Ok(Some(written(batch, now_ms, session_ids, message_ids)))
}

/// The batch's inbox clears and delivery marks alone: the short statement.
async fn clear_and_mark<'e>(
    db: impl PgExecutor<'e>,
    batch: &AtOnce<'_>,
    sync: Option<&str>,
) -> Result<(), StoreError> {
    let (platforms, chats, ids) = clear_keys(batch.done.iter().copied());
    sqlx::query(CLEAR_AND_MARK)
        .bind(sync)
        .bind(&platforms)
        .bind(&chats)
        .bind(&ids)
        .bind(&batch.delivered)
        .execute(db)
        .await
        .map_err(StoreError::db(
            "clearing handled messages and marking replies delivered",
        ))?;
    Ok(())
}

/// Each turn's outcome, given the ids the statement drew (ascending, in the turns' order).
fn written(
    batch: &AtOnce<'_>,
    now_ms: i64,
    session_ids: Vec<i64>,
    message_ids: Vec<i64>,
) -> Vec<Written> {
    let at = from_ms(now_ms);
    let mut session_ids = session_ids.into_iter();
    let mut message_ids = message_ids.into_iter();
    let mut written = Vec::with_capacity(batch.turns.len());
    for (turn, session) in batch.turns.iter().zip(&batch.sessions) {
        let mut session = session.clone();
        if turn.session.is_new() {
            session.id = session_ids.next().unwrap_or_default();
            session.version = 1;
            session.created_at = at;
        } else {
            session.version = turn.session.version + 1;
        }
        session.updated_at = at;
        let mut messages = Vec::new();
        for (role, text, _) in transcript(turn) {
            messages.push(StoredMessage {
                id: message_ids.next().unwrap_or_default(),
                session_id: session.id,
                role,
                text: clean(text).into_owned(),
                at,
            });
        }
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
    written
}

/// A turn's transcript messages: role, text and trace, in order.
fn transcript(turn: &TurnCommit) -> impl Iterator<Item = (Role, &str, Option<&str>)> {
    turn.changes.iter().filter_map(|change| match change {
        StateChange::AddUserMessage { text } => Some((Role::User, text.as_str(), None)),
        StateChange::AddAssistantMessage { text, trace } => {
            Some((Role::Assistant, text.as_str(), trace.as_deref()))
        }
        _ => None,
    })
}

/// Inbox entries, one array per column.
#[derive(Default)]
struct KeepColumns {
    platforms: Vec<&'static str>,
    chats: Vec<String>,
    ids: Vec<String>,
    bodies: Vec<String>,
}

impl KeepColumns {
    fn of(entries: &[&Incoming]) -> Result<KeepColumns, StoreError> {
        let mut c = KeepColumns::default();
        for message in entries {
            c.platforms.push(message.platform.as_str());
            c.chats.push(clean(&message.chat).into_owned());
            c.ids.push(clean(&message.message_id).into_owned());
            let body = serde_json::to_string(message).map_err(|e| corrupt("inbox entry", e))?;
            c.bodies.push(clean(&body).into_owned());
        }
        Ok(c)
    }
}

/// The users of the new sessions, once each (an upsert may not touch a row twice); the
/// statement takes them in one order for every writer, so that two writers with users in
/// common wait for each other, never deadlock.
#[derive(Default)]
struct UserColumns {
    platforms: Vec<&'static str>,
    ids: Vec<String>,
    names: Vec<String>,
}

impl UserColumns {
    fn of(turns: &[&TurnCommit], sessions: &[SessionRecord]) -> UserColumns {
        let mut c = UserColumns::default();
        let mut seen = HashSet::new();
        for (turn, session) in turns.iter().zip(sessions) {
            if turn.session.is_new() && seen.insert((session.key.platform, turn.user.id.as_str())) {
                c.platforms.push(session.key.platform.as_str());
                c.ids.push(clean(&turn.user.id).into_owned());
                c.names.push(clean(&turn.user.display_name).into_owned());
            }
        }
        c
    }
}

/// Each turn's session row as the turn leaves it, with the reference the statement knows
/// it by: its id, or `-k` for the batch's k-th new session.
#[derive(Default)]
struct TurnColumns {
    references: Vec<i64>,
    /// The version the turn loaded (checked by the update).
    versions: Vec<i64>,
    platforms: Vec<&'static str>,
    chats: Vec<String>,
    threads: Vec<String>,
    users: Vec<String>,
    flows: Vec<String>,
    agents: Vec<Option<String>>,
    languages: Vec<Option<String>>,
    countries: Vec<Option<String>>,
    timezones: Vec<Option<String>>,
    states: Vec<String>,
    pending: Vec<Option<String>>,
    statuses: Vec<&'static str>,
}

impl TurnColumns {
    fn push(
        &mut self,
        reference: i64,
        version: i64,
        session: &SessionRecord,
    ) -> Result<(), StoreError> {
        let text = |t: &Option<String>| t.as_deref().map(|t| clean(t).into_owned());
        self.references.push(reference);
        self.versions.push(version);
        self.platforms.push(session.key.platform.as_str());
        self.chats.push(clean(&session.key.chat).into_owned());
        self.threads.push(clean(&session.key.thread).into_owned());
        self.users.push(clean(&session.key.user).into_owned());
        self.flows.push(session.flow.as_str().to_owned());
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

/// The turns' platform updates, each with its turn's number in the batch (from 1).
#[derive(Default)]
struct ProcessedColumns {
    platforms: Vec<&'static str>,
    chats: Vec<String>,
    ids: Vec<String>,
    turns: Vec<i64>,
}

impl ProcessedColumns {
    fn of(turns: &[&TurnCommit]) -> ProcessedColumns {
        let mut c = ProcessedColumns::default();
        for (k, turn) in (1_i64..).zip(turns) {
            if let Some(ProcessedUpdate {
                platform,
                chat,
                message_id,
            }) = &turn.processed
            {
                c.platforms.push(platform.as_str());
                c.chats.push(clean(chat).into_owned());
                c.ids.push(clean(message_id).into_owned());
                c.turns.push(k);
            }
        }
        c
    }
}

/// The turns' transcript messages in order, each with its turn's number (from 1).
#[derive(Default)]
struct MessageColumns<'a> {
    turns: Vec<i64>,
    roles: Vec<&'static str>,
    texts: Vec<String>,
    delivered: Vec<bool>,
    traces: Vec<Option<&'a str>>,
}

impl<'a> MessageColumns<'a> {
    fn of(turns: &[&'a TurnCommit]) -> MessageColumns<'a> {
        let mut c = MessageColumns::default();
        for (k, turn) in (1_i64..).zip(turns) {
            for (role, text, trace) in transcript(turn) {
                c.turns.push(k);
                c.roles.push(role.as_str());
                c.texts.push(clean(text).into_owned());
                // a reply is delivered once its platform took it
                c.delivered.push(role != Role::Assistant);
                c.traces.push(trace);
            }
        }
        c
    }
}

/// Handled messages as arrays of their keys: platforms, chats, message ids.
fn clear_keys<'a>(
    done: impl Iterator<Item = &'a (Platform, String, String)>,
) -> (Vec<&'static str>, Vec<String>, Vec<String>) {
    let (mut platforms, mut chats, mut ids) = (Vec::new(), Vec::new(), Vec::new());
    for (platform, chat, id) in done {
        platforms.push(platform.as_str());
        chats.push(clean(chat).into_owned());
        ids.push(clean(id).into_owned());
    }
    (platforms, chats, ids)
}

/// Model calls, one array per column.
#[derive(Default)]
pub(super) struct CallColumns {
    /// In a batch: each call's turn number (from 1).
    turns: Vec<i64>,
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

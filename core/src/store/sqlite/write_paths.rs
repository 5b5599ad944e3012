//! The store's two write paths write the same rows. The writer tries the fast path
//! ([`super::batch`]) for every batch and falls back to the turn-by-turn path
//! ([`super::turn_by_turn`]) when the batch holds anything out of the ordinary; these tests run the
//! same random batches through each path alone, on two databases, and compare every table
//! (all columns but the write times) and every turn's answer.

use super::*;
use crate::message::UserRef;
use crate::message::{OptionItem, OptionsRequest};
use crate::store::reading::ReadingChange;
use crate::store::reading::{InsightKind, MoodPhase};
use crate::store::sqlite::writer::{WritePath, run_batch};
use crate::store::{
    FlowState, ProcessedUpdate, SessionStatus, StateChange, Submission, SubmissionStatus, Ticket,
};
use proptest::prelude::*;
use std::collections::HashMap;

/// One change of a generated turn.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    User(String),
    Assistant(String),
    Language(String),
    State(u8),
    Options(Option<String>),
    End,
    Submit(String),
    Insight(String),
    Mood(u8),
    Ticket(String),
}

/// One generated turn: the place it happens in (sessions are per place), whether it
/// repeats the update of the turn before it in the place (a duplicate), and its changes.
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    pub(crate) place: usize,
    pub(crate) repeat: bool,
    pub(crate) changes: Vec<Change>,
}

fn text() -> impl Strategy<Value = String> {
    let chars = vec!['a', 'Z', ' ', '\n', '"', '\\', 'é', '日', '本', '🙂', '\''];
    prop::collection::vec(prop::sample::select(chars), 0..6).prop_map(String::from_iter)
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        4 => text().prop_map(Change::User),
        4 => text().prop_map(Change::Assistant),
        1 => prop::sample::select(vec!["en", "ja"]).prop_map(|l| Change::Language(l.into())),
        1 => any::<u8>().prop_map(Change::State),
        1 => prop::option::of(text()).prop_map(Change::Options),
        1 => Just(Change::End),
        1 => text().prop_map(Change::Submit),
        1 => text().prop_map(Change::Insight),
        1 => (0u8..=4).prop_map(Change::Mood),
        1 => text().prop_map(Change::Ticket),
    ]
}

pub(crate) fn turn() -> impl Strategy<Value = Turn> {
    (
        0usize..4,
        prop::bool::weighted(0.1),
        prop::collection::vec(change(), 0..5),
    )
        .prop_map(|(place, repeat, changes)| Turn {
            place,
            repeat,
            changes,
        })
}

pub(crate) fn state_change(change: &Change, ticket_no: i64) -> StateChange {
    match change.clone() {
        Change::User(text) => StateChange::AddUserMessage { text },
        Change::Assistant(text) => StateChange::AddAssistantMessage { text, trace: None },
        Change::Language(language) => StateChange::SetLanguage { language },
        Change::State(n) => StateChange::SetFlowState {
            state: FlowState::of(&serde_json::json!({ "step": n })).expect("a state"),
        },
        Change::Options(prompt) => StateChange::SetPendingOptions {
            options: prompt.map(|p| {
                let mut request = OptionsRequest::new(p, vec![OptionItem::new("y", "Yes")], false);
                // ids are random: the same on both sides
                request.request_id = "r".into();
                request
            }),
        },
        Change::End => StateChange::EndSession,
        Change::Submit(applicant) => StateChange::SaveSubmission {
            submission: Submission {
                applicant,
                form_id: "engineer".into(),
                variant: "default".into(),
                status: SubmissionStatus::Submitted,
                language: None,
                country: None,
                timezone: None,
                values: serde_json::json!({}),
                facts: serde_json::json!({}),
                flags: serde_json::json!([]),
                audit: None,
            },
        },
        Change::Insight(text) => StateChange::Reading {
            change: ReadingChange::AddInsight {
                title: "Book".into(),
                kind: InsightKind::Learning,
                text,
            },
        },
        Change::Mood(score) => StateChange::Reading {
            change: ReadingChange::AddMood {
                title: "Book".into(),
                phase: MoodPhase::After,
                label: "calm".into(),
                score,
            },
        },
        Change::Ticket(question) => StateChange::SaveTicket {
            ticket: Ticket {
                ticket_no,
                question,
                plan: vec!["look it up".into()],
                sub_answers: serde_json::json!({}),
                answer: "answer".into(),
                sources: Vec::new(),
                feedback: None,
            },
        },
    }
}

/// Generated turns as commits, in order: each place's session as last committed (a new
/// one once it ended), each turn's update (a repeat reuses the place's last one), its
/// changes and one model call. Shared with the backends' contract test.
#[derive(Default)]
pub(crate) struct Script {
    sessions: HashMap<usize, SessionRecord>,
    updates: HashMap<usize, usize>,
    counter: usize,
}

impl Script {
    /// The commit of `turn`.
    pub(crate) fn next(&mut self, turn: &Turn) -> TurnCommit {
        let key = SessionKey {
            platform: Platform::Console,
            chat: format!("c{}", turn.place),
            thread: String::new(),
            user: format!("u{}", turn.place),
        };
        let session = self
            .sessions
            .get(&turn.place)
            .filter(|s| s.status == SessionStatus::Active)
            .cloned()
            .unwrap_or_else(|| SessionRecord::draft(key.clone(), "assistant"));
        self.counter += 1;
        let counter = self.counter;
        let update = match self.updates.get(&turn.place) {
            Some(last) if turn.repeat => *last,
            _ => counter,
        };
        self.updates.insert(turn.place, update);
        TurnCommit {
            session,
            user: UserRef {
                id: key.user.clone(),
                display_name: format!("User {}", turn.place),
                language: None,
            },
            finish_session: None,
            processed: Some(ProcessedUpdate {
                platform: Platform::Console,
                chat: key.chat.clone(),
                message_id: format!("m{update}"),
            }),
            changes: turn
                .changes
                .iter()
                .enumerate()
                .map(|(i, c)| state_change(c, counter as i64 * 10 + i as i64))
                .collect(),
            llm_calls: vec![LlmCallRecord {
                session_id: None,
                agent: "assistant".into(),
                model: "m".into(),
                prompt_tokens: 3,
                completion_tokens: 2,
                latency_ms: 1,
                error: None,
                at: Utc::now(),
                wasted: counter % 2 == 1,
            }],
        }
    }

    /// The session `place`'s last turn committed.
    pub(crate) fn committed(&mut self, place: usize, session: SessionRecord) {
        self.sessions.insert(place, session);
    }
}

/// Every table's rows, sorted, each as a JSON array of its columns less the times
/// (each path stamps its own `now`).
async fn tables(pool: &SqlitePool) -> Vec<(String, Vec<String>)> {
    let names: Vec<(String,)> = sqlx::query_as(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         AND name NOT LIKE '_sqlx%' ORDER BY name",
    )
    .fetch_all(pool)
    .await
    .expect("lists the tables");
    let mut out = Vec::new();
    for (name,) in names {
        let columns: Vec<(String,)> =
            sqlx::query_as("SELECT name FROM pragma_table_info(?) ORDER BY cid")
                .bind(&name)
                .fetch_all(pool)
                .await
                .expect("lists the columns");
        let kept: Vec<String> = columns
            .into_iter()
            .map(|(c,)| c)
            .filter(|c| !c.ends_with("_ms") && !c.ends_with("_at"))
            .map(|c| format!("\"{c}\""))
            .collect();
        let sql = format!(
            "SELECT json_array({}) AS r FROM \"{name}\" ORDER BY r",
            kept.join(", ")
        );
        let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(pool)
            .await
            .expect("reads the table");
        out.push((name, rows.into_iter().map(|(r,)| r).collect()));
    }
    out
}

/// What a turn's answer says, without times.
fn answer(result: &Result<CommittedTurn, StoreError>) -> String {
    match result {
        Ok(turn) => format!(
            "ok session {} v{} {:?} messages {:?}",
            turn.session.id, turn.session.version, turn.session.status, turn.assistant_message_ids
        ),
        Err(StoreError::Duplicate { message_id, .. }) => format!("duplicate {message_id}"),
        Err(StoreError::Conflict { session_id }) => format!("conflict {session_id}"),
        Err(e) => format!("error {e}"),
    }
}

/// Runs `rounds` (each one batch) through `path` on a new database; returns the turns'
/// answers and the tables.
async fn run(rounds: &[Vec<Turn>], path: WritePath) -> (Vec<String>, Vec<(String, Vec<String>)>) {
    let store = SqliteStore::connect("sqlite::memory:")
        .await
        .expect("opens");
    let mut script = Script::default();
    let mut next_ids = None;
    let mut answers = Vec::new();
    for round in rounds {
        let mut batch = Vec::new();
        let mut receivers = Vec::new();
        for turn in round {
            let commit = script.next(turn);
            let after = Prepared::of(&commit).expect("prepares");
            let (reply, answered) = oneshot::channel();
            batch.push(Job::Turn {
                commit: Box::new(commit),
                after: Box::new(after),
                reply,
            });
            receivers.push((turn.place, answered));
        }
        let mut outcomes = Vec::new();
        let mut changes = Vec::new();
        let committed = run_batch(
            &store.writer,
            &mut batch,
            &mut outcomes,
            &mut changes,
            &mut next_ids,
            path,
        )
        .await;
        answers.push(format!("batch {:?}", committed.as_ref().map(|_| ())));
        for (result, reply) in outcomes {
            let _ = reply.send(result);
        }
        for (place, answered) in receivers {
            let result = answered.await.expect("every turn is answered");
            answers.push(answer(&result));
            if let Ok(turn) = result {
                script.committed(place, turn.session);
            }
        }
    }
    let rows = tables(&store.writer).await;
    store.close().await;
    (answers, rows)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn both_write_paths_write_the_same_rows(
        rounds in prop::collection::vec(prop::collection::vec(turn(), 1..6), 1..5)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let (fast, fast_rows) = runtime.block_on(run(&rounds, WritePath::Fast));
        let (slow, slow_rows) = runtime.block_on(run(&rounds, WritePath::TurnByTurn));
        prop_assert_eq!(fast, slow);
        prop_assert_eq!(fast_rows, slow_rows);
    }
}

//! The store's contract: every test here runs, unchanged, on SQLite and on PostgreSQL (a
//! temporary server the tests start, [`crate::testing::postgres`]), through
//! [`super::connect`] and the [`Store`] trait alone. What only one backend has (SQLite's
//! group commit, WAL and hot-session cache) is tested beside its code.

mod console;
mod instances;
mod migrations;
mod privacy;
mod reading;
mod same_turns;
mod staff;

use console::{
    a_console_link_works_once_and_a_session_until_it_ends,
    the_console_finds_sessions_tickets_and_readers_across_users,
};
use privacy::{forgetting_a_user_deletes_only_theirs, old_transcripts_are_deleted};
use reading::reading_data_is_stored_per_user;
use staff::{
    a_place_is_held_by_one_person_until_handed_back,
    passage_vectors_are_kept_per_model_and_read_by_another_instance,
    the_first_decision_stands_and_goes_with_the_submission,
};

use migrations::a_database_from_a_newer_kaiwa_is_refused_unchanged;

use instances::{
    a_lease_is_held_by_one_instance_until_it_expires,
    a_stale_instance_cannot_write_over_a_newer_turn,
    the_same_update_at_two_instances_is_processed_once,
    two_instances_never_both_commit_a_turn_of_one_session,
};

use super::{
    CommittedTurn, FlowState, LlmCallRecord, ProcessedUpdate, SessionRecord, SessionStatus,
    StateChange, Store, StoreError, Submission, SubmissionStatus, Ticket, TurnCommit, connect,
};
use crate::message::{Body, Incoming, Platform, SessionKey, UserRef};
use chrono::Utc;
use std::sync::Arc;

/// A new, empty database of one backend.
pub(crate) struct Db {
    pub(crate) url: String,
    _dir: Option<tempfile::TempDir>,
}

impl Db {
    pub(crate) fn sqlite() -> Db {
        let dir = tempfile::tempdir().expect("tempdir");
        Db {
            url: format!("sqlite://{}/nested/kaiwa.db", dir.path().display()),
            _dir: Some(dir),
        }
    }

    pub(crate) async fn postgres() -> Db {
        Db {
            url: crate::testing::postgres::database_url().await,
            _dir: None,
        }
    }

    /// A store on it (another one each call: a second instance, or the same after a restart).
    pub(crate) async fn open(&self) -> Arc<dyn Store> {
        connect(&self.url).await.expect("opens")
    }
}

/// Each test once per backend: `sqlite::name` and `postgres::name`.
macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Db::sqlite()).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Db::postgres().await).await
                }
            )*
        }
    };
}

contract!(
    a_session_survives_closing_and_reopening,
    duplicates_and_stale_versions_are_refused_without_writing,
    sessions_with_replies_not_delivered_are_found_until_marked,
    a_write_check_leaves_nothing_behind,
    kept_messages_are_seen_by_another_instance_in_order,
    every_kind_of_row_is_written,
    ending_a_session_frees_the_place,
    wasted_calls_are_kept_and_counted_per_agent,
    reading_data_is_stored_per_user,
    texts_of_every_kind_come_back_whole,
    forgetting_a_user_deletes_only_theirs,
    old_transcripts_are_deleted,
    two_instances_never_both_commit_a_turn_of_one_session,
    the_same_update_at_two_instances_is_processed_once,
    a_stale_instance_cannot_write_over_a_newer_turn,
    a_lease_is_held_by_one_instance_until_it_expires,
    the_first_decision_stands_and_goes_with_the_submission,
    a_place_is_held_by_one_person_until_handed_back,
    a_console_link_works_once_and_a_session_until_it_ends,
    the_console_finds_sessions_tickets_and_readers_across_users,
    passage_vectors_are_kept_per_model_and_read_by_another_instance,
    a_database_from_a_newer_kaiwa_is_refused_unchanged,
);

pub(crate) fn place(chat: &str) -> SessionKey {
    SessionKey {
        platform: Platform::Console,
        chat: chat.into(),
        thread: String::new(),
        user: "u1".into(),
    }
}

pub(crate) fn user(id: &str) -> UserRef {
    UserRef {
        id: id.into(),
        display_name: format!("User {id}"),
        language: None,
    }
}

pub(crate) fn call(agent: &str, wasted: bool) -> LlmCallRecord {
    LlmCallRecord {
        session_id: None,
        agent: agent.into(),
        model: "m".into(),
        prompt_tokens: 10,
        completion_tokens: 5,
        latency_ms: 7,
        error: None,
        at: Utc::now(),
        wasted,
    }
}

/// A turn of `session` for update `id` in the session's own chat.
pub(crate) fn commit(session: SessionRecord, id: &str, changes: Vec<StateChange>) -> TurnCommit {
    TurnCommit {
        user: user(&session.key.user),
        finish_session: None,
        processed: Some(ProcessedUpdate {
            platform: session.key.platform,
            chat: session.key.chat.clone(),
            message_id: id.into(),
        }),
        changes,
        llm_calls: vec![call("greeter", false)],
        session,
    }
}

pub(crate) fn said(user: &str, assistant: &str) -> Vec<StateChange> {
    vec![
        StateChange::AddUserMessage { text: user.into() },
        StateChange::AddAssistantMessage {
            text: assistant.into(),
            trace: None,
        },
    ]
}

pub(crate) async fn first_turn(store: &dyn Store, chat: &str) -> CommittedTurn {
    store
        .commit_turn(commit(
            SessionRecord::draft(place(chat), "assistant"),
            &format!("{chat}-1"),
            said("hi", "hello"),
        ))
        .await
        .expect("commits")
}

pub(crate) fn incoming(id: &str) -> Incoming {
    Incoming {
        platform: Platform::Console,
        chat: "c1".into(),
        thread: String::new(),
        user: user("u1"),
        message_id: id.into(),
        body: Body::Text {
            text: format!("text of {id}"),
        },
        flow: None,
        flow_arg: None,
        shared: false,
    }
}

pub(crate) async fn texts(store: &dyn Store, session: i64) -> Vec<String> {
    store
        .recent_messages(session, 50)
        .await
        .expect("messages")
        .into_iter()
        .map(|m| m.text)
        .collect()
}

async fn a_session_survives_closing_and_reopening(db: Db) {
    let store = db.open().await;
    let first = store
        .commit_turn(commit(
            SessionRecord::draft(place("c1"), "assistant"),
            "m1",
            vec![
                StateChange::AddUserMessage {
                    text: "hello".into(),
                },
                StateChange::SetLanguage {
                    language: "ja".into(),
                },
                StateChange::SetFlowState {
                    state: FlowState::of(&serde_json::json!({"step": 2})).expect("state"),
                },
                StateChange::AddAssistantMessage {
                    text: "こんにちは".into(),
                    trace: None,
                },
            ],
        ))
        .await
        .expect("commits");
    assert_eq!(first.assistant_message_ids.len(), 1);
    let id = first.session.id;
    store.close().await;
    drop(store);

    let store = db.open().await;
    let session = store
        .active_session(&place("c1"))
        .await
        .expect("loads")
        .expect("exists");
    assert_eq!(session.id, id);
    assert_eq!(session.language.as_deref(), Some("ja"));
    assert_eq!(
        session.state.parse::<serde_json::Value>().expect("state"),
        serde_json::json!({"step": 2})
    );
    assert_eq!(session.version, 1);
    assert_eq!(texts(&*store, id).await, ["hello", "こんにちは"]);
    assert!(
        store
            .is_processed(Platform::Console, "c1", "m1")
            .await
            .expect("checks")
    );
    let load = store
        .load_for_turn(&place("c1"), "m1", 10)
        .await
        .expect("loads");
    assert!(load.duplicate);
    assert_eq!(load.session.as_ref().map(|s| s.id), Some(id));
    assert_eq!(load.history.len(), 2);
    let ledger = store.llm_calls(Some(id)).await.expect("ledger");
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].prompt_tokens, 10);
    assert_eq!(
        store
            .last_language(Platform::Console, "u1")
            .await
            .expect("reads"),
        Some("ja".into())
    );

    assert_eq!(store.undelivered(id).await.expect("undelivered").len(), 1);
    store
        .mark_delivered(&first.assistant_message_ids)
        .await
        .expect("marks");
    store.close().await;
    drop(store);
    let store = db.open().await;
    assert!(store.undelivered(id).await.expect("undelivered").is_empty());
    store.close().await;
}

async fn duplicates_and_stale_versions_are_refused_without_writing(db: Db) {
    let store = db.open().await;
    let first = first_turn(&*store, "c1").await;
    let again = store
        .commit_turn(commit(first.session.clone(), "c1-1", said("x", "y")))
        .await;
    assert!(
        matches!(again, Err(StoreError::Duplicate { .. })),
        "{again:?}"
    );
    store
        .commit_turn(commit(first.session.clone(), "m2", vec![]))
        .await
        .expect("second turn");
    let stale = store
        .commit_turn(commit(first.session.clone(), "m3", said("y", "z")))
        .await;
    assert!(
        matches!(stale, Err(StoreError::Conflict { .. })),
        "{stale:?}"
    );
    assert!(
        !store
            .is_processed(Platform::Console, "c1", "m3")
            .await
            .expect("checks")
    );
    assert_eq!(texts(&*store, first.session.id).await, ["hi", "hello"]);
    store.close().await;
}

async fn sessions_with_replies_not_delivered_are_found_until_marked(db: Db) {
    let store = db.open().await;
    let mut turns = Vec::new();
    for chat in ["a", "b", "c"] {
        turns.push(first_turn(&*store, chat).await);
    }
    store
        .mark_delivered(&turns[1].assistant_message_ids)
        .await
        .expect("marks");
    store.close().await;
    let store = db.open().await;
    let unreached = store
        .unreached_sessions(Platform::Console)
        .await
        .expect("lists");
    let ids: Vec<i64> = unreached.iter().map(|s| s.id).collect();
    assert_eq!(ids, [turns[0].session.id, turns[2].session.id]);
    assert!(
        store
            .unreached_sessions(Platform::Telegram)
            .await
            .expect("lists")
            .is_empty()
    );
    for turn in [&turns[0], &turns[2]] {
        store
            .mark_delivered(&turn.assistant_message_ids)
            .await
            .expect("marks");
    }
    store.close().await;
    let store = db.open().await;
    assert!(
        store
            .unreached_sessions(Platform::Console)
            .await
            .expect("lists")
            .is_empty()
    );
    store.close().await;
}

async fn a_write_check_leaves_nothing_behind(db: Db) {
    let store = db.open().await;
    store.check_writable().await.expect("writable");
    store.check_writable().await.expect("again");
    for platform in [
        Platform::Console,
        Platform::Telegram,
        Platform::Discord,
        Platform::Slack,
    ] {
        assert!(
            store
                .inbox_pending(platform)
                .await
                .expect("inbox")
                .is_empty()
        );
    }
    store.close().await;
}

async fn kept_messages_are_seen_by_another_instance_in_order(db: Db) {
    let store = db.open().await;
    let other = db.open().await;
    store
        .inbox_keep(&[incoming("m3"), incoming("m1"), incoming("m2")])
        .await
        .expect("committed");
    // a repeated delivery is kept once
    store.inbox_keep(&[incoming("m1")]).await.expect("again");
    store.inbox_keep(&[]).await.expect("nothing to keep");
    let ids = |pending: Vec<Incoming>| {
        pending
            .into_iter()
            .map(|m| m.message_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(other.inbox_pending(Platform::Console).await.expect("inbox")),
        ["m3", "m1", "m2"]
    );
    other
        .inbox_done(Platform::Console, "c1", "m1")
        .await
        .expect("done");
    // (a clear may ride with the next write: closing writes what is queued)
    other.close().await;
    store.close().await;
    let store = db.open().await;
    let pending = store.inbox_pending(Platform::Console).await.expect("inbox");
    assert_eq!(pending[0], incoming("m3"), "kept whole");
    assert_eq!(ids(pending), ["m3", "m2"]);
    assert!(
        store
            .inbox_pending(Platform::Telegram)
            .await
            .expect("inbox")
            .is_empty()
    );
    store.close().await;
}

pub(crate) fn submission() -> Submission {
    Submission {
        applicant: "山田 \"Yama\" 花子".into(),
        form_id: "engineer".into(),
        variant: "default".into(),
        status: SubmissionStatus::Submitted,
        language: Some("ja".into()),
        country: Some("JP".into()),
        timezone: None,
        values: serde_json::json!({ "full_name": "山田 花子", "years": 3 }),
        facts: serde_json::json!({ "skills": { "rust": true } }),
        flags: serde_json::json!([]),
        audit: Some(serde_json::json!({ "passed": true, "summary": "ok\nfine" })),
    }
}

async fn every_kind_of_row_is_written(db: Db) {
    let store = db.open().await;
    let going = first_turn(&*store, "a").await;
    let switched = first_turn(&*store, "b").await;
    let mut ending = said("my answers", "thank you");
    ending.push(StateChange::SaveSubmission {
        submission: submission(),
    });
    ending.push(StateChange::SaveTicket {
        ticket: Ticket {
            ticket_no: 1,
            question: "How do I reset?".into(),
            plan: vec!["find the page".into()],
            sub_answers: serde_json::json!({"find the page": "reset.md"}),
            answer: "Press reset.".into(),
            sources: vec!["reset.md#Reset".into()],
            feedback: None,
        },
    });
    ending.push(StateChange::SetTicketFeedback {
        ticket_no: 1,
        feedback: "solved".into(),
    });
    ending.push(StateChange::EndSession);
    let ended = store
        .commit_turn(commit(
            SessionRecord::draft(place("c"), "interview"),
            "c1",
            ending,
        ))
        .await
        .expect("commits");
    let mut switch = commit(
        SessionRecord::draft(place("b"), "interview"),
        "b2",
        said("/interview", "welcome"),
    );
    switch.finish_session = Some(switched.session.id);
    let new = store.commit_turn(switch).await.expect("commits");
    let went_on = store
        .commit_turn(commit(going.session.clone(), "a2", said("more", "sure")))
        .await
        .expect("commits");

    assert_eq!(ended.session.status, SessionStatus::Finished);
    let stored = store
        .session(ended.session.id)
        .await
        .expect("reads")
        .expect("kept");
    assert_eq!(stored.status, SessionStatus::Finished);
    assert_eq!(stored.version, ended.session.version);
    let saved = store.submissions(None).await.expect("reads");
    assert_eq!(saved.len(), 1);
    assert_eq!(saved[0].session_id, Some(ended.session.id));
    assert_eq!(saved[0].submission, submission());
    assert_eq!(
        store
            .submissions(Some("engineer"))
            .await
            .expect("reads")
            .len(),
        1
    );
    assert!(
        store
            .submissions(Some("other"))
            .await
            .expect("reads")
            .is_empty()
    );
    let tickets = store.tickets(ended.session.id).await.expect("reads");
    assert_eq!(tickets.len(), 1);
    assert_eq!(tickets[0].feedback.as_deref(), Some("solved"));
    assert_eq!(tickets[0].sources, ["reset.md#Reset"]);
    let old = store
        .session(switched.session.id)
        .await
        .expect("reads")
        .expect("kept");
    assert_eq!(old.status, SessionStatus::Finished);
    assert_eq!(
        store
            .active_session(&place("b"))
            .await
            .expect("reads")
            .map(|s| s.id),
        Some(new.session.id)
    );
    assert_eq!(went_on.session.version, 2);
    assert_eq!(
        texts(&*store, went_on.session.id).await,
        ["hi", "hello", "more", "sure"]
    );
    let finished = store
        .last_finished_session(&place("c"), "interview")
        .await
        .expect("reads");
    assert_eq!(finished.map(|s| s.id), Some(ended.session.id));
    assert_eq!(store.count_active_sessions().await.expect("counts"), 2);
    assert_eq!(store.active_sessions(10).await.expect("lists").len(), 2);
    assert_eq!(store.llm_calls(None).await.expect("ledger").len(), 5);
    store.close().await;
}

async fn ending_a_session_frees_the_place(db: Db) {
    let store = db.open().await;
    // a place never used: nothing chosen, nothing ended
    let fresh = store
        .load_for_turn(&place("c1"), "m0", 10)
        .await
        .expect("loads");
    assert_eq!((fresh.chosen_language, fresh.ended_before), (None, false));
    let first = first_turn(&*store, "c1").await;
    let language = |lang: &str| StateChange::Reading {
        change: crate::store::reading::ReadingChange::AddProfileEntry {
            kind: crate::store::reading::ProfileKind::Language,
            text: lang.into(),
        },
    };
    let ended = store
        .commit_turn(commit(
            first.session.clone(),
            "m2",
            vec![language("en"), language("ja"), StateChange::EndSession],
        ))
        .await
        .expect("commits");
    // what a new conversation needs comes with the load: the latest /lang, and that one
    // ended here (not in another place)
    let next_load = store
        .load_for_turn(&place("c1"), "m3", 10)
        .await
        .expect("loads");
    assert!(next_load.session.is_none());
    assert_eq!(next_load.chosen_language.as_deref(), Some("ja"));
    assert!(next_load.ended_before);
    let elsewhere = store
        .load_for_turn(&place("c9"), "m3", 10)
        .await
        .expect("loads");
    assert_eq!(
        elsewhere.chosen_language.as_deref(),
        Some("ja"),
        "the user's choice"
    );
    assert!(!elsewhere.ended_before, "nothing ended in that place");
    assert_eq!(ended.session.status, SessionStatus::Finished);
    assert!(
        store
            .active_session(&place("c1"))
            .await
            .expect("loads")
            .is_none()
    );
    let next = store
        .commit_turn(commit(
            SessionRecord::draft(place("c1"), "assistant"),
            "m3",
            vec![],
        ))
        .await
        .expect("a new session");
    assert_ne!(next.session.id, first.session.id);
    let active = store
        .load_for_turn(&place("c1"), "m4", 10)
        .await
        .expect("loads");
    assert_eq!(
        (active.chosen_language, active.ended_before),
        (None, false),
        "read only without an active session"
    );
    assert_eq!(
        store
            .active_session(&place("c1"))
            .await
            .expect("loads")
            .map(|s| s.id),
        Some(next.session.id)
    );
    store.close().await;
}

async fn wasted_calls_are_kept_and_counted_per_agent(db: Db) {
    let store = db.open().await;
    let mut cancelled = call("quick_check", true);
    cancelled.error = Some("the call was cancelled before it answered".into());
    store
        .record_llm_calls(&[
            call("interviewer", false),
            call("interviewer", true),
            cancelled,
            call("reviewer", false),
        ])
        .await
        .expect("recorded");
    let ledger = store.llm_calls(None).await.expect("ledger");
    assert_eq!(
        ledger.iter().map(|c| c.wasted).collect::<Vec<_>>(),
        [false, true, true, false]
    );
    let usage = store.llm_usage().await.expect("usage");
    let of = |agent: &str| {
        usage.iter().find(|u| u.agent == agent).map(|u| {
            (
                u.flow.as_str(),
                u.calls,
                u.wasted,
                u.errors,
                u.prompt_tokens,
            )
        })
    };
    assert_eq!(of("interviewer"), Some(("-", 2, 1, 0, 20)));
    assert_eq!(of("quick_check"), Some(("-", 1, 1, 1, 10)));
    assert_eq!(of("reviewer"), Some(("-", 1, 0, 0, 10)));
    store.close().await;
}

async fn texts_of_every_kind_come_back_whole(db: Db) {
    let store = db.open().await;
    let tricky = "quote \" backslash \\ escaped \\u0000 literal, tab\t, line\n, 絵文字 😀, 'single' and $1 ?";
    let first = store
        .commit_turn(commit(
            SessionRecord::draft(place("c1"), "assistant"),
            "m0",
            said(tricky, "ok"),
        ))
        .await
        .expect("commits");
    let fresh = db.open().await;
    let load = fresh
        .load_for_turn(&place("c1"), "m1", 20)
        .await
        .expect("loads");
    assert_eq!(load.history[0].text, tricky);
    // a NUL (which PostgreSQL's text cannot hold) does not fail the turn, and the rest of
    // the text is kept
    let nul = store
        .commit_turn(commit(
            first.session.clone(),
            "m1",
            said("before \0 after", "ok"),
        ))
        .await
        .expect("a NUL does not fail the turn");
    let back = texts(&*fresh, nul.session.id).await;
    assert!(
        back[2].starts_with("before ") && back[2].ends_with(" after"),
        "{back:?}"
    );
    fresh.close().await;
    store.close().await;
}

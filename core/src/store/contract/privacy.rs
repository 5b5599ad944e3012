//! The contract for privacy: `/forget` deletes one user's data and nothing else's, and
//! retention deletes old transcripts.

use super::{Db, commit, first_turn, place, said, submission, texts};
use crate::message::{Platform, SessionKey};
use crate::store::{SessionRecord, StateChange};
use chrono::Utc;

pub(super) async fn forgetting_a_user_deletes_only_theirs(db: Db) {
    let store = db.open().await;
    let trace = r#"{"notes":[],"calls":[]}"#;
    let mut theirs = vec![
        StateChange::AddUserMessage {
            text: "my answers".into(),
        },
        StateChange::AddAssistantMessage {
            text: "thanks".into(),
            trace: Some(trace.into()),
        },
    ];
    theirs.push(StateChange::SaveSubmission {
        submission: submission(),
    });
    let theirs = store
        .commit_turn(commit(
            SessionRecord::draft(place("a"), "interview"),
            "a1",
            theirs,
        ))
        .await
        .expect("commits");
    // the turn's trace is kept on its bot message
    let traced = store
        .traced_messages(theirs.session.id)
        .await
        .expect("reads");
    assert_eq!(traced, theirs.assistant_message_ids);
    assert_eq!(
        store
            .message_trace(theirs.session.id, traced[0])
            .await
            .expect("reads")
            .as_deref(),
        Some(trace)
    );
    // and the turn's model calls are the ledger's rows of that turn
    let calls = store
        .turn_calls(theirs.session.id, traced[0])
        .await
        .expect("reads");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].agent, "greeter");
    let other_key = SessionKey {
        user: "u2".into(),
        ..place("a")
    };
    let other = store
        .commit_turn(commit(
            SessionRecord::draft(other_key.clone(), "assistant"),
            "a2",
            said("mine", "ok"),
        ))
        .await
        .expect("commits");
    let data = store
        .user_data(Platform::Console, "u1")
        .await
        .expect("data");
    assert_eq!(data["sessions"].as_array().map(Vec::len), Some(1));
    assert_eq!(data["sessions"][0]["messages"][0]["text"], "my answers");
    assert_eq!(data["submissions"].as_array().map(Vec::len), Some(1));
    assert!(!data.to_string().contains("mine"), "only their own data");

    let deleted = store
        .forget_user(Platform::Console, "u1", true)
        .await
        .expect("forgets");
    assert!(deleted >= 4, "{deleted}");
    assert!(
        store
            .active_session(&place("a"))
            .await
            .expect("reads")
            .is_none()
    );
    assert_eq!(
        store.submissions(None).await.expect("reads").len(),
        1,
        "kept for the team"
    );
    let data = store
        .user_data(Platform::Console, "u1")
        .await
        .expect("data");
    assert_eq!(data["sessions"].as_array().map(Vec::len), Some(0));
    // the ledger keeps its model calls, no longer pointing at the session
    let ledger = store.llm_calls(None).await.expect("ledger");
    assert!(
        ledger
            .iter()
            .any(|c| c.agent == "greeter" && c.session_id.is_none()),
        "{ledger:?}"
    );
    assert!(
        store
            .llm_calls(Some(theirs.session.id))
            .await
            .expect("ledger")
            .is_empty()
    );
    // and goes with it
    assert!(
        store
            .traced_messages(theirs.session.id)
            .await
            .expect("reads")
            .is_empty()
    );
    store
        .forget_user(Platform::Console, "u1", false)
        .await
        .expect("forgets");
    assert!(store.submissions(None).await.expect("reads").is_empty());
    // the other user is untouched
    assert_eq!(texts(&*store, other.session.id).await, ["mine", "ok"]);
    store.close().await;
}

pub(super) async fn old_transcripts_are_deleted(db: Db) {
    let store = db.open().await;
    let turn = first_turn(&*store, "c1").await;
    let kept = store
        .delete_transcripts_before(Utc::now() - chrono::Duration::days(1))
        .await
        .expect("deletes");
    assert_eq!(kept, 0);
    let deleted = store
        .delete_transcripts_before(Utc::now() + chrono::Duration::seconds(5))
        .await
        .expect("deletes");
    assert_eq!(deleted, 2);
    assert!(texts(&*store, turn.session.id).await.is_empty());
    assert!(
        store
            .active_session(&place("c1"))
            .await
            .expect("reads")
            .is_some()
    );
    store.close().await;
}

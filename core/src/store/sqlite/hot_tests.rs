//! The hot-session cache seen through the store: what a turn reads is what the database holds.

use super::tests::{commit, first_turn, key, said};
use super::*;
use crate::store::hot::{HOT_HISTORY, HOT_SESSIONS};
use crate::store::{FlowState, StateChange};

impl SqliteStore {
    /// Waits until the processed updates of the database are read into the cache.
    async fn scanned(&self) {
        let scan = self.scan.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(scan) = scan {
            scan.await.expect("the scan ends");
        }
    }
}

/// Runs `turns` turns on the session of `key()` the way the orchestrator does: read,
/// then commit from what was read.
async fn converse(store: &SqliteStore, first: usize, turns: usize) {
    for n in first..first + turns {
        let id = format!("m{n}");
        let load = store.load_for_turn(&key(), &id, 20).await.expect("loads");
        assert!(!load.duplicate, "{id} is new");
        let session = load.session.expect("an active session");
        let mut changes = said(&format!("answer {n}"), &format!("question {n}"));
        changes.push(StateChange::SetFlowState {
            state: FlowState::of(&serde_json::json!({ "step": n })).expect("state"),
        });
        store
            .commit_turn(commit(session, &id, changes))
            .await
            .expect("commits");
    }
}

async fn on_file() -> (tempfile::TempDir, String, SqliteStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/kaiwa.db", dir.path().display());
    let store = SqliteStore::connect(&url).await.expect("opens");
    store.scanned().await;
    (dir, url, store)
}

#[tokio::test]
async fn texts_of_every_kind_are_stored_whole() {
    let (_dir, url, store) = on_file().await;
    let tricky =
        "quote \" backslash \\ escaped \\u0000 literal, tab\t, line\n, 絵文字 😀, nul \0 and after";
    store
        .commit_turn(commit(
            SessionRecord::draft(key(), "assistant"),
            "m0",
            said(tricky, "ok"),
        ))
        .await
        .expect("commits");
    let fresh = SqliteStore::connect(&url).await.expect("opens again");
    let stored = fresh.load_for_turn(&key(), "m1", 20).await.expect("loads");
    let cached = store.load_for_turn(&key(), "m1", 20).await.expect("loads");
    // (the rows go to SQLite as JSON: every escape comes back as it was, a NUL too)
    assert_eq!(stored.history[0].text, tricky);
    assert_eq!(cached.history[0].text, tricky);
    fresh.close().await;
    store.close().await;
}

#[tokio::test]
async fn a_turn_reads_from_the_cache_exactly_what_the_database_holds() {
    let (_dir, url, store) = on_file().await;
    store
        .commit_turn(commit(
            SessionRecord::draft(key(), "assistant"),
            "m0",
            said("hello", "こんにちは"),
        ))
        .await
        .expect("commits");
    converse(&store, 1, 30).await;
    let cached = store.load_for_turn(&key(), "m99", 20).await.expect("loads");
    assert_eq!(cached.history.len(), 20);
    assert_eq!(store.hot.len(), 1);

    // a second store on the same file has nothing cached: it reads the database
    let fresh = SqliteStore::connect(&url).await.expect("opens again");
    let stored = fresh.load_for_turn(&key(), "m99", 20).await.expect("loads");
    assert_eq!(cached.session, stored.session);
    assert_eq!(cached.history, stored.history);
    assert_eq!(
        cached.session.as_ref().map(|s| s.version),
        Some(31),
        "one version per turn"
    );
    // more than the cache keeps: the database answers
    let all = store
        .load_for_turn(&key(), "m99", 100)
        .await
        .expect("loads");
    assert_eq!(all.history.len(), 62);
    assert_eq!(all.history[42..], stored.history[..]);
    const { assert!(HOT_HISTORY < 62) };
    fresh.close().await;

    // and it did not read it: a change behind the store's back is not seen (one bot
    // process per database)
    sqlx::query("UPDATE sessions SET language = 'xx'")
        .execute(&store.writer)
        .await
        .expect("updates");
    let again = store.load_for_turn(&key(), "m99", 20).await.expect("loads");
    assert_eq!(again.session, cached.session);
    store.close().await;
}

#[tokio::test]
async fn an_update_processed_before_a_restart_is_still_a_duplicate() {
    let (_dir, url, store) = on_file().await;
    first_turn(&store).await;
    converse(&store, 2, 3).await;
    store.close().await;
    drop(store);

    let store = SqliteStore::connect(&url).await.expect("reopens");
    store.scanned().await;
    let load = store.load_for_turn(&key(), "m9", 20).await.expect("loads");
    assert!(!load.duplicate);
    assert_eq!(store.hot.len(), 1, "the read filled the cache");
    for id in ["m1", "m2", "m4"] {
        let load = store.load_for_turn(&key(), id, 20).await.expect("loads");
        assert!(load.duplicate, "{id} was processed before the restart");
    }
    // and one processed since, by this store
    converse(&store, 5, 1).await;
    let load = store.load_for_turn(&key(), "m5", 20).await.expect("loads");
    assert!(load.duplicate);
    store.close().await;
}

#[tokio::test]
async fn forgetting_a_user_or_old_transcripts_drops_what_was_cached() {
    let (_dir, _url, store) = on_file().await;
    first_turn(&store).await;
    converse(&store, 2, 2).await;
    let load = store.load_for_turn(&key(), "m9", 20).await.expect("loads");
    assert_eq!(load.history.len(), 4);

    let deleted = store
        .delete_transcripts_before(Utc::now() + chrono::Duration::days(1))
        .await
        .expect("deletes");
    assert_eq!(deleted, 4);
    let load = store.load_for_turn(&key(), "m9", 20).await.expect("loads");
    assert!(load.session.is_some());
    assert!(load.history.is_empty(), "the transcript is gone");

    converse(&store, 4, 1).await;
    store
        .forget_user(Platform::Console, "u1", false)
        .await
        .expect("forgets");
    let load = store.load_for_turn(&key(), "m9", 20).await.expect("loads");
    assert!(load.session.is_none(), "the session is gone");
    assert!(load.history.is_empty());
    store.close().await;
}

#[tokio::test]
async fn a_session_changed_behind_the_cache_costs_one_conflict() {
    let (_dir, _url, store) = on_file().await;
    first_turn(&store).await;
    converse(&store, 2, 1).await;
    sqlx::query("UPDATE sessions SET version = version + 1, language = 'de'")
        .execute(&store.writer)
        .await
        .expect("updates");
    let stale = store.load_for_turn(&key(), "m3", 20).await.expect("loads");
    let session = stale.session.expect("cached");
    assert_eq!(session.language, None);
    let refused = store
        .commit_turn(commit(session, "m3", said("a", "b")))
        .await;
    assert!(matches!(refused, Err(StoreError::Conflict { .. })));
    // the next read asks the database, and the turn goes through
    let load = store.load_for_turn(&key(), "m3", 20).await.expect("loads");
    let session = load.session.expect("active");
    assert_eq!(session.language.as_deref(), Some("de"));
    store
        .commit_turn(commit(session, "m3", said("a", "b")))
        .await
        .expect("commits");
    store.close().await;
}

#[tokio::test]
async fn the_cache_keeps_at_most_its_number_of_sessions() {
    let store = SqliteStore::connect("sqlite::memory:")
        .await
        .expect("opens");
    store.scanned().await;
    let key_of = |n: usize| SessionKey {
        user: format!("u{n}"),
        ..key()
    };
    let turns = (0..HOT_SESSIONS + 8).map(|n| {
        let mut turn = commit(
            SessionRecord::draft(key_of(n), "assistant"),
            &format!("m{n}"),
            said("hi", "hello"),
        );
        turn.user.id = format!("u{n}");
        store.commit_turn(turn)
    });
    for turn in futures::future::join_all(turns).await {
        turn.expect("commits");
    }
    assert_eq!(store.hot.len(), HOT_SESSIONS);
    // what the cache let go is read from the database
    for n in [0, HOT_SESSIONS + 7] {
        let load = store
            .load_for_turn(&key_of(n), "next", 20)
            .await
            .expect("loads");
        assert_eq!(load.session.map(|s| s.key), Some(key_of(n)));
        assert_eq!(load.history.len(), 2);
    }
    store.close().await;
}

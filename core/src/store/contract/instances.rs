//! The contract where instances meet on one database: two stores committing turns of
//! one session, the same update at both, and leases.

use super::{Db, commit, first_turn, place, said, texts};
use crate::store::{SessionRecord, StoreError};
use chrono::Utc;

pub(super) async fn two_instances_never_both_commit_a_turn_of_one_session(db: Db) {
    let (one, two) = (db.open().await, db.open().await);
    let first = first_turn(&*one, "c1").await;
    for round in 0..10 {
        let session = one
            .active_session(&place("c1"))
            .await
            .expect("loads")
            .expect("active");
        let a = commit(session.clone(), &format!("a{round}"), said("a", "from one"));
        let b = commit(session, &format!("b{round}"), said("b", "from two"));
        let (a, b) = tokio::join!(one.commit_turn(a), two.commit_turn(b));
        let won = [&a, &b].iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "round {round}: {a:?} / {b:?}");
        for lost in [a, b].into_iter().filter_map(Result::err) {
            assert!(matches!(lost, StoreError::Conflict { .. }), "{lost}");
        }
    }
    let session = two
        .session(first.session.id)
        .await
        .expect("reads")
        .expect("kept");
    assert_eq!(session.version, 11);
    assert_eq!(texts(&*two, first.session.id).await.len(), 22);
    one.close().await;
    two.close().await;
}

pub(super) async fn the_same_update_at_two_instances_is_processed_once(db: Db) {
    let (one, two) = (db.open().await, db.open().await);
    for round in 0..10 {
        let chat = format!("c{round}");
        let a = commit(
            SessionRecord::draft(place(&chat), "assistant"),
            "same",
            said("q", "one"),
        );
        let b = commit(
            SessionRecord::draft(place(&chat), "assistant"),
            "same",
            said("q", "two"),
        );
        let (a, b) = tokio::join!(one.commit_turn(a), two.commit_turn(b));
        assert_eq!(
            [&a, &b].iter().filter(|r| r.is_ok()).count(),
            1,
            "round {round}: {a:?} / {b:?}"
        );
        for lost in [a, b].into_iter().filter_map(Result::err) {
            assert!(
                matches!(
                    lost,
                    StoreError::Conflict { .. } | StoreError::Duplicate { .. }
                ),
                "{lost}"
            );
        }
        let active = one
            .active_session(&place(&chat))
            .await
            .expect("reads")
            .expect("one session");
        assert_eq!(texts(&*one, active.id).await.len(), 2);
    }
    one.close().await;
    two.close().await;
}

pub(super) async fn a_lease_is_held_by_one_instance_until_it_expires(db: Db) {
    use std::time::Duration;
    let (one, two) = (db.open().await, db.open().await);
    let long = Duration::from_secs(60);
    // taken at once by both: exactly one holds it
    let (a, b) = tokio::join!(
        one.lease("telegram:poller", "one", long),
        two.lease("telegram:poller", "two", long)
    );
    let (a, b) = (a.expect("leases"), b.expect("leases"));
    assert!(a ^ b, "one holder: {a} {b}");
    let (holder, other, other_store) = if a {
        ("one", "two", &two)
    } else {
        ("two", "one", &one)
    };
    let holder_store = if a { &one } else { &two };
    assert!(
        holder_store
            .lease("telegram:poller", holder, long)
            .await
            .expect("renews")
    );
    assert!(
        !other_store
            .lease("telegram:poller", other, long)
            .await
            .expect("refused")
    );
    let listed = other_store.leases("telegram:").await.expect("lists");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].holder, holder);
    assert!(listed[0].expires_at > Utc::now());
    assert!(other_store.leases("chat:").await.expect("lists").is_empty());
    // released: the other takes it
    other_store
        .release("telegram:poller", other)
        .await
        .expect("not its own: nothing");
    assert!(
        !other_store
            .lease("telegram:poller", other, long)
            .await
            .expect("still held")
    );
    holder_store
        .release("telegram:poller", holder)
        .await
        .expect("releases");
    assert!(
        other_store
            .lease("telegram:poller", other, long)
            .await
            .expect("free now")
    );
    // expired: anyone takes it
    assert!(
        holder_store
            .lease("jobs", holder, Duration::from_millis(1))
            .await
            .expect("takes")
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        other_store
            .lease("jobs", other, long)
            .await
            .expect("expired: taken")
    );
    assert!(
        !holder_store
            .lease("jobs", holder, long)
            .await
            .expect("lost")
    );
    one.close().await;
    two.close().await;
}

/// An instance whose view of a session is stale (it was paused while another took the chat
/// over) cannot write over the newer turn: the version its turn started from is checked by
/// the write, which fails, and what it had cached goes, so its next read is the newer turn.
pub(super) async fn a_stale_instance_cannot_write_over_a_newer_turn(db: Db) {
    let (one, two) = (db.open().await, db.open().await);
    let first = first_turn(&*one, "c1").await;
    // the first instance reads the session (and keeps it, where its backend caches)
    let stale = one
        .load_for_turn(&place("c1"), "m2", 20)
        .await
        .expect("loads")
        .session
        .expect("active");
    assert_eq!(stale.version, 1);
    // the second takes the chat over and commits a turn
    let newer = two
        .load_for_turn(&place("c1"), "m2", 20)
        .await
        .expect("loads")
        .session
        .expect("active");
    two.commit_turn(commit(newer, "m2", said("from two", "answered by two")))
        .await
        .expect("the holder commits");
    // the first comes back: what it reads now may still be what it had
    let again = one
        .load_for_turn(&place("c1"), "m3", 20)
        .await
        .expect("loads")
        .session
        .expect("active");
    let refused = one
        .commit_turn(commit(again, "m3", said("from one", "answered by one")))
        .await
        .expect_err("a stale turn is refused");
    assert!(matches!(refused, StoreError::Conflict { .. }), "{refused}");
    // the same update the holder processed is refused as a duplicate, whatever it had
    let duplicate = one
        .commit_turn(commit(stale, "m2", said("from two", "again")))
        .await
        .expect_err("a stale duplicate is refused");
    assert!(
        matches!(
            duplicate,
            StoreError::Conflict { .. } | StoreError::Duplicate { .. }
        ),
        "{duplicate}"
    );
    let stored = texts(&*two, first.session.id).await;
    assert_eq!(stored, ["hi", "hello", "from two", "answered by two"]);
    // the refused turn dropped what the first had: it reads the newer turn and goes on
    let fresh = one
        .load_for_turn(&place("c1"), "m3", 20)
        .await
        .expect("loads");
    let session = fresh.session.expect("active");
    assert_eq!(session.version, 2);
    assert_eq!(fresh.history.len(), 4);
    one.commit_turn(commit(session, "m3", said("from one", "answered by one")))
        .await
        .expect("commits from the newer turn");
    assert_eq!(texts(&*two, first.session.id).await.len(), 6);
    one.close().await;
    two.close().await;
}

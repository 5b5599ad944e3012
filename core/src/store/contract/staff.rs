//! The contract of what the team does from the admin chat: decisions on applications,
//! conversations held by a person and the notices that stand for them.

use super::{Db, StateChange, commit, first_turn, place, said, submission};
use crate::message::Platform;
use crate::store::SessionRecord;

pub(super) async fn the_first_decision_stands_and_goes_with_the_submission(db: Db) {
    let store = db.open().await;
    let mut ending = said("my answers", "thanks");
    ending.push(StateChange::SaveSubmission {
        submission: submission(),
    });
    let done = store
        .commit_turn(commit(
            SessionRecord::draft(place("d"), "interview"),
            "d1",
            ending,
        ))
        .await
        .expect("commits");
    let session = done.session.id;
    assert_eq!(
        store
            .decide(session + 1000, "approved", "x")
            .await
            .expect("decides"),
        None,
        "no submission, no decision"
    );
    let first = store
        .decide(session, "approved", "telegram:9 (Ann)")
        .await
        .expect("decides")
        .expect("a submission");
    assert!(first.first);
    assert_eq!(first.decision.decision, "approved");
    // a second instance's later press finds the first decision
    let other = db.open().await;
    let second = other
        .decide(session, "rejected", "telegram:10 (Bob)")
        .await
        .expect("decides")
        .expect("a submission");
    assert!(!second.first);
    assert_eq!(second.decision, first.decision);
    let stored = store.submissions(None).await.expect("reads");
    assert_eq!(stored[0].decision.as_ref(), Some(&first.decision));
    let data = store
        .user_data(Platform::Console, "u1")
        .await
        .expect("data");
    assert_eq!(data["submissions"][0]["decision"], "approved");
    // /forget keeping submissions keeps the decision with them
    store
        .forget_user(Platform::Console, "u1", true)
        .await
        .expect("forgets");
    let kept = store.submissions(None).await.expect("reads");
    assert_eq!(kept[0].decision.as_ref(), Some(&first.decision));
    store
        .forget_user(Platform::Console, "u1", false)
        .await
        .expect("forgets");
    assert!(store.submissions(None).await.expect("reads").is_empty());
    other.close().await;
    store.close().await;
}

pub(super) async fn a_place_is_held_by_one_person_until_handed_back(db: Db) {
    use crate::store::NoticeRef;
    let store = db.open().await;
    let done = first_turn(&*store, "h").await;
    let session = done.session.id;
    let key = place("h");
    let (hold, took) = store
        .take_over(session, &key, "telegram:9 (Ann)")
        .await
        .expect("takes");
    assert!(took);
    assert_eq!(hold.key, key);
    // another instance, another person: the first hold stands
    let other = db.open().await;
    let (stands, took) = other
        .take_over(session, &key, "telegram:10 (Bob)")
        .await
        .expect("takes");
    assert!(!took);
    assert_eq!(stands.held_by, "telegram:9 (Ann)");
    assert_eq!(
        other.holds().await.expect("reads"),
        std::slice::from_ref(&hold)
    );
    store.touch_hold(session).await.expect("touches");
    let notice = |chat: &str, id: &str| NoticeRef {
        platform: Platform::Telegram,
        chat: chat.into(),
        message_id: id.into(),
    };
    store
        .link_notice(&notice("-100", "5"), session)
        .await
        .expect("links");
    store
        .link_notice(&notice("-100", "7"), session)
        .await
        .expect("links");
    store
        .link_notice(&notice("-100", "7"), session)
        .await
        .expect("twice is once");
    assert_eq!(
        other
            .notice_session(&notice("-100", "5"))
            .await
            .expect("reads"),
        Some(session)
    );
    assert_eq!(
        other
            .notice_session(&notice("-100", "6"))
            .await
            .expect("reads"),
        None
    );
    let latest = other.notices_of(session).await.expect("reads");
    assert_eq!(latest.len(), 1, "{latest:?}");
    let ended = other.hand_back(session).await.expect("hands back");
    assert_eq!(ended.map(|h| h.session_id), Some(session));
    assert_eq!(store.hand_back(session).await.expect("hands back"), None);
    assert!(store.holds().await.expect("reads").is_empty());
    // /forget ends the user's holds; the notice links (ids only) stay
    store
        .take_over(session, &key, "telegram:9 (Ann)")
        .await
        .expect("takes");
    store
        .forget_user(Platform::Console, "u1", false)
        .await
        .expect("forgets");
    assert!(store.holds().await.expect("reads").is_empty());
    assert_eq!(
        store
            .notice_session(&notice("-100", "5"))
            .await
            .expect("reads"),
        Some(session)
    );
    other.close().await;
    store.close().await;
}

/// Passage vectors are kept per model and text hash, as bytes; a hash kept already stays
/// as first kept (two instances embedding the same passage agree), and another instance
/// reads them.
pub(super) async fn passage_vectors_are_kept_per_model_and_read_by_another_instance(db: Db) {
    let store = db.open().await;
    assert!(store.passage_vectors("m").await.expect("reads").is_empty());
    let first = vec![
        ("h1".to_string(), vec![0u8, 0, 128, 63]),
        ("h2".to_string(), vec![0u8, 0, 0, 64, 0, 0, 64, 64]),
    ];
    store
        .keep_passage_vectors("m", &first)
        .await
        .expect("keeps");
    store
        .keep_passage_vectors("m", &[("h1".to_string(), vec![9u8, 9, 9, 9])])
        .await
        .expect("keeping again is no error");
    store
        .keep_passage_vectors("other", &[("h1".to_string(), vec![1u8, 2, 3, 4])])
        .await
        .expect("keeps another model's");
    let other_instance = db.open().await;
    let mut kept = other_instance.passage_vectors("m").await.expect("reads");
    kept.sort();
    assert_eq!(kept, first);
    assert_eq!(
        other_instance
            .passage_vectors("other")
            .await
            .expect("reads"),
        vec![("h1".to_string(), vec![1u8, 2, 3, 4])]
    );
    store.close().await;
    other_instance.close().await;
}

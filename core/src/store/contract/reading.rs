//! The contract for reading data: records, moods, insights, profile entries and weekly
//! reviews, each user's own.

use super::{Db, user};
use crate::message::{Platform, SessionKey};
use crate::store::reading::{InsightKind, MoodPhase, ProfileKind, ReadingChange, ReadingStatus};
use crate::store::{SessionRecord, StateChange, Store, TurnCommit};

async fn reading_turn(store: &dyn Store, user_id: &str, changes: Vec<ReadingChange>) {
    let key = SessionKey {
        platform: Platform::Telegram,
        chat: format!("chat-{user_id}"),
        thread: String::new(),
        user: user_id.into(),
    };
    let session = store
        .active_session(&key)
        .await
        .expect("loads")
        .unwrap_or_else(|| SessionRecord::draft(key, "reading"));
    store
        .commit_turn(TurnCommit {
            session,
            user: user(user_id),
            finish_session: None,
            processed: None,
            changes: changes
                .into_iter()
                .map(|change| StateChange::Reading { change })
                .collect(),
            llm_calls: vec![],
        })
        .await
        .expect("commit");
}

pub(super) async fn reading_data_is_stored_per_user(db: Db) {
    let store = db.open().await;
    let title = "Kokoro".to_string();
    reading_turn(
        &*store,
        "aiko",
        vec![
            ReadingChange::OpenRecord {
                title: title.clone(),
                author: Some("Natsume Soseki".into()),
                details: None,
            },
            ReadingChange::SetStatus {
                title: title.clone(),
                status: ReadingStatus::Completed,
            },
            ReadingChange::AddMood {
                title: title.clone(),
                phase: MoodPhase::Before,
                label: "curious".into(),
                score: 9,
            },
            ReadingChange::AddInsight {
                title: title.clone(),
                kind: InsightKind::Learning,
                text: "先生の孤独".into(),
            },
            ReadingChange::AddProfileEntry {
                kind: ProfileKind::Goal,
                text: "read more".into(),
            },
            ReadingChange::SetWeeklyReview {
                enabled: true,
                timezone: "Asia/Tokyo".into(),
            },
        ],
    )
    .await;
    reading_turn(
        &*store,
        "ben",
        vec![ReadingChange::OpenRecord {
            title: title.clone(),
            author: None,
            details: None,
        }],
    )
    .await;
    let aiko = store
        .reading_records(Platform::Telegram, "aiko")
        .await
        .expect("records");
    assert_eq!(aiko.len(), 1);
    assert_eq!(aiko[0].status, ReadingStatus::Completed);
    assert_eq!(aiko[0].author.as_deref(), Some("Natsume Soseki"));
    assert!(aiko[0].started_at.is_some() && aiko[0].finished_at.is_some());
    let moods = store.moods(aiko[0].id).await.expect("moods");
    assert_eq!(moods.len(), 1);
    assert_eq!(moods[0].score, 5, "a score is kept within 1..=5");
    let insights = store.insights(aiko[0].id).await.expect("insights");
    assert_eq!(insights[0].text, "先生の孤独");
    assert_eq!(
        store
            .profile_entries(Platform::Telegram, "aiko")
            .await
            .expect("profile")
            .len(),
        1
    );
    let reviews = store.weekly_reviews().await.expect("reviews");
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0].timezone, "Asia/Tokyo");
    let ben = store
        .reading_records(Platform::Telegram, "ben")
        .await
        .expect("records");
    assert_eq!(ben.len(), 1);
    assert_eq!(ben[0].status, ReadingStatus::NotStarted);
    assert!(
        store
            .insights(ben[0].id)
            .await
            .expect("insights")
            .is_empty()
    );
    // opting out removes the subscription
    reading_turn(
        &*store,
        "aiko",
        vec![ReadingChange::SetWeeklyReview {
            enabled: false,
            timezone: "Asia/Tokyo".into(),
        }],
    )
    .await;
    assert!(store.weekly_reviews().await.expect("reviews").is_empty());
    store.close().await;
}

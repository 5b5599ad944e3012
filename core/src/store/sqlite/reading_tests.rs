use super::*;
use crate::message::UserRef;
use crate::store::reading::*;
use crate::store::{Reads, StateChange};

fn key(user: &str) -> SessionKey {
    SessionKey {
        platform: Platform::Telegram,
        chat: format!("chat-{user}"),
        thread: String::new(),
        user: user.into(),
    }
}

async fn turn(store: &SqliteStore, user: &str, changes: Vec<ReadingChange>) {
    let session = store
        .active_session(&key(user))
        .await
        .expect("loads")
        .unwrap_or_else(|| SessionRecord::draft(key(user), "reading"));
    store
        .commit_turn(TurnCommit {
            session,
            user: UserRef {
                id: user.into(),
                display_name: user.into(),
                language: None,
            },
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

#[tokio::test]
async fn reading_data_is_stored_per_user() {
    let store = SqliteStore::connect("sqlite::memory:")
        .await
        .expect("store");
    let title = "Kokoro".to_string();
    turn(
        &store,
        "aiko",
        vec![
            ReadingChange::OpenRecord {
                title: title.clone(),
                author: Some("Natsume Soseki".into()),
            },
            ReadingChange::AddMood {
                title: title.clone(),
                phase: MoodPhase::Before,
                label: "curious".into(),
                score: 4,
            },
            ReadingChange::SetStatus {
                title: title.clone(),
                status: ReadingStatus::Reading,
            },
            ReadingChange::AddInsight {
                title: title.clone(),
                kind: InsightKind::Question,
                text: "Who is K?".into(),
            },
            ReadingChange::SetMode {
                title: title.clone(),
                mode: InteractionMode::Guided,
            },
            ReadingChange::AddProfileEntry {
                kind: ProfileKind::Goal,
                text: "read more classics".into(),
            },
        ],
    )
    .await;
    turn(
        &store,
        "ken",
        vec![ReadingChange::OpenRecord {
            title: title.clone(),
            author: None,
        }],
    )
    .await;

    let records = store
        .reading_records(Platform::Telegram, "aiko")
        .await
        .expect("records");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].status, ReadingStatus::Reading);
    assert_eq!(records[0].mode, InteractionMode::Guided);
    assert!(records[0].started_at.is_some() && records[0].finished_at.is_none());
    let insights = store.insights(records[0].id).await.expect("insights");
    assert_eq!(insights[0].text, "Who is K?");
    assert_eq!(store.moods(records[0].id).await.expect("moods")[0].score, 4);
    assert_eq!(
        store
            .profile_entries(Platform::Telegram, "aiko")
            .await
            .expect("profile")
            .len(),
        1
    );
    // ken has his own record of the same book and sees nothing of aiko's
    let kens = store
        .reading_records(Platform::Telegram, "ken")
        .await
        .expect("records");
    assert_eq!(kens.len(), 1);
    assert_ne!(kens[0].id, records[0].id);
    assert!(
        store
            .insights(kens[0].id)
            .await
            .expect("insights")
            .is_empty()
    );
    assert!(
        store
            .profile_entries(Platform::Telegram, "ken")
            .await
            .expect("profile")
            .is_empty()
    );
}

//! `[privacy] transcript_days`: the messages of sessions idle for longer than that are
//! deleted; `kaiwa run` calls [`delete_old_transcripts`] every hour.

use crate::store::{Store, StoreError};
use chrono::{DateTime, Duration, Utc};

/// Deletes the transcripts of sessions last active more than `days` before `now`. Returns
/// the messages deleted.
pub async fn delete_old_transcripts(
    store: &dyn Store,
    days: u32,
    now: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let deleted = store
        .delete_transcripts_before(now - Duration::days(days.into()))
        .await?;
    if deleted > 0 {
        tracing::info!(messages = deleted, days, "old transcripts deleted");
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteStore;
    use crate::store::sqlite::tests::{commit, key};
    use crate::store::{Reads, SessionRecord};

    #[tokio::test]
    async fn only_transcripts_idle_past_the_limit_are_deleted() {
        let store = SqliteStore::connect("sqlite::memory:")
            .await
            .expect("opens");
        let turn = store
            .commit_turn(commit(
                SessionRecord::draft(key(), "assistant"),
                "m1",
                vec![
                    crate::store::StateChange::AddUserMessage { text: "hi".into() },
                    crate::store::StateChange::AddAssistantMessage {
                        text: "hello".into(),
                        trace: None,
                    },
                ],
            ))
            .await
            .expect("commits");
        let now = Utc::now();
        assert_eq!(
            delete_old_transcripts(&store, 30, now).await.expect("runs"),
            0,
            "a session active today keeps its transcript"
        );
        let later = now + Duration::days(31);
        assert_eq!(
            delete_old_transcripts(&store, 30, later)
                .await
                .expect("runs"),
            2
        );
        let left = store
            .recent_messages(turn.session.id, 10)
            .await
            .expect("reads");
        assert!(left.is_empty());
        store.close().await;
    }
}

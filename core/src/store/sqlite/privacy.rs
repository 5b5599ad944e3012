//! What `/forget` deletes, in one transaction on the writer connection; called by
//! [`Store::forget_user`].

use super::SqliteStore;
use crate::message::Platform;
use crate::store::StoreError;

impl SqliteStore {
    /// [`Store::forget_user`]'s deletions, in one transaction.
    pub(super) async fn forget_user_rows(
        &self,
        platform: Platform,
        user: &str,
        keep_submissions: bool,
    ) -> Result<u64, StoreError> {
        let mut tx = self
            .writer
            .begin()
            .await
            .map_err(StoreError::db("starting to forget a user"))?;
        let p = platform.as_str();
        let mut deleted = 0;
        // children first, counted; the users row cascades to sessions, messages and tickets
        let mut statements = vec![
            "DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE platform = ?1 AND user_id = ?2)",
            "DELETE FROM helpdesk_tickets WHERE session_id IN (SELECT id FROM sessions WHERE platform = ?1 AND user_id = ?2)",
            "DELETE FROM insights WHERE record_id IN (SELECT id FROM reading_records WHERE platform = ?1 AND user_id = ?2)",
            "DELETE FROM moods WHERE record_id IN (SELECT id FROM reading_records WHERE platform = ?1 AND user_id = ?2)",
            "DELETE FROM reading_records WHERE platform = ?1 AND user_id = ?2",
            "DELETE FROM profile_entries WHERE platform = ?1 AND user_id = ?2",
            "DELETE FROM mentor_feedback WHERE platform = ?1 AND user_id = ?2",
            "DELETE FROM recommendations WHERE platform = ?1 AND user_id = ?2",
            "DELETE FROM weekly_reviews WHERE platform = ?1 AND user_id = ?2",
        ];
        if !keep_submissions {
            statements.push("DELETE FROM submissions WHERE platform = ?1 AND user_id = ?2");
        }
        statements.push("DELETE FROM sessions WHERE platform = ?1 AND user_id = ?2");
        statements.push("DELETE FROM users WHERE platform = ?1 AND user_id = ?2");
        for sql in statements {
            let done = sqlx::query(sql)
                .bind(p)
                .bind(user)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db("forgetting a user"))?;
            deleted += done.rows_affected();
        }
        tx.commit()
            .await
            .map_err(StoreError::db("forgetting a user"))?;
        Ok(deleted)
    }
}

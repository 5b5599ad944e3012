//! What `/forget` deletes, in one transaction on the writer connection; called by
//! [`Store::forget_user`].

use super::SqliteStore;
use crate::message::Platform;
use crate::store::StoreError;
use crate::store::writes::{forget_statements, sqlite_sql};

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
        for sql in forget_statements(keep_submissions) {
            let done = sqlx::query(sqlx::AssertSqlSafe(sqlite_sql(sql)))
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

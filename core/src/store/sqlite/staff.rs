//! [`Staff`] on SQLite: decisions on applications, through the writer pool.

use super::SqliteStore;
use crate::store::rows::{decision_from_row, ms};
use crate::store::writes::{DECIDE, DECISION_OF, sqlite_sql};
use crate::store::{Decided, Staff, StoreError};
use async_trait::async_trait;
use sqlx::AssertSqlSafe;

#[async_trait]
impl Staff for SqliteStore {
    async fn decide(
        &self,
        session_id: i64,
        decision: &str,
        by: &str,
    ) -> Result<Option<Decided>, StoreError> {
        let made = sqlx::query(AssertSqlSafe(sqlite_sql(DECIDE)))
            .bind(decision)
            .bind(by)
            .bind(ms(chrono::Utc::now()))
            .bind(session_id)
            .execute(&self.writer)
            .await
            .map_err(StoreError::db("recording a decision"))?
            .rows_affected()
            > 0;
        let row = sqlx::query(AssertSqlSafe(sqlite_sql(DECISION_OF)))
            .bind(session_id)
            .fetch_optional(&self.writer)
            .await
            .map_err(StoreError::db("reading a decision"))?;
        let Some(row) = row else { return Ok(None) };
        Ok(decision_from_row(&row)?.map(|decision| Decided {
            decision,
            first: made,
        }))
    }
}

//! [`Staff`] on PostgreSQL: decisions on applications.

use super::PgStore;
use crate::store::rows::{decision_from_row, ms};
use crate::store::writes::{DECIDE, DECISION_OF};
use crate::store::{Decided, Staff, StoreError};
use async_trait::async_trait;

#[async_trait]
impl Staff for PgStore {
    async fn decide(
        &self,
        session_id: i64,
        decision: &str,
        by: &str,
    ) -> Result<Option<Decided>, StoreError> {
        let made = sqlx::query(DECIDE)
            .bind(decision)
            .bind(by)
            .bind(ms(chrono::Utc::now()))
            .bind(session_id)
            .execute(&self.pool)
            .await
            .map_err(StoreError::db("recording a decision"))?
            .rows_affected()
            > 0;
        let row = sqlx::query(DECISION_OF)
            .bind(session_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db("reading a decision"))?;
        let Some(row) = row else { return Ok(None) };
        Ok(decision_from_row(&row)?.map(|decision| Decided {
            decision,
            first: made,
        }))
    }
}

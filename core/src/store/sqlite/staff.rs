//! [`Staff`] on SQLite: decisions on applications, through the writer pool.

use super::SqliteStore;
use crate::message::SessionKey;
use crate::store::console::TICKETS_HANDLED;
use crate::store::rows::{decision_from_row, ms};
use crate::store::writes::{DECIDE, DECISION_OF, sqlite_sql};
use crate::store::writes::{
    HOLD_AT, HOLD_END, HOLD_OF, HOLD_TAKE, HOLD_TOUCH, HOLDS, NOTICE_LINK, NOTICE_SESSION,
    NOTICES_OF, hold_from_row, latest_notices,
};
use crate::store::{Decided, Staff, StoreError};
use crate::store::{Hold, NoticeRef};
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

    async fn take_over(
        &self,
        session_id: i64,
        key: &SessionKey,
        by: &str,
    ) -> Result<(Hold, bool), StoreError> {
        let took = sqlx::query(AssertSqlSafe(sqlite_sql(HOLD_TAKE)))
            .bind(session_id)
            .bind(key.platform.as_str())
            .bind(&key.chat)
            .bind(&key.thread)
            .bind(&key.user)
            .bind(by)
            .bind(ms(chrono::Utc::now()))
            .execute(&self.writer)
            .await
            .map_err(StoreError::db("taking over a conversation"))?
            .rows_affected()
            > 0;
        if took {
            sqlx::query(AssertSqlSafe(sqlite_sql(TICKETS_HANDLED)))
                .bind(session_id)
                .bind(ms(chrono::Utc::now()))
                .execute(&self.writer)
                .await
                .map_err(StoreError::db("marking requests for a person handled"))?;
        }
        let row = sqlx::query(AssertSqlSafe(sqlite_sql(HOLD_AT)))
            .bind(key.platform.as_str())
            .bind(&key.chat)
            .bind(&key.thread)
            .bind(&key.user)
            .fetch_optional(&self.writer)
            .await
            .map_err(StoreError::db("reading a hold"))?
            .ok_or_else(|| StoreError::Corrupt("a hold vanished as it was taken".into()))?;
        Ok((hold_from_row(&row)?, took))
    }

    async fn hand_back(&self, session_id: i64) -> Result<Option<Hold>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(sqlite_sql(HOLD_OF)))
            .bind(session_id)
            .fetch_optional(&self.writer)
            .await
            .map_err(StoreError::db("reading a hold"))?;
        let ended = sqlx::query(AssertSqlSafe(sqlite_sql(HOLD_END)))
            .bind(session_id)
            .execute(&self.writer)
            .await
            .map_err(StoreError::db("handing back a conversation"))?
            .rows_affected()
            > 0;
        match row {
            Some(row) if ended => Ok(Some(hold_from_row(&row)?)),
            _ => Ok(None),
        }
    }

    async fn holds(&self) -> Result<Vec<Hold>, StoreError> {
        let rows = sqlx::query(AssertSqlSafe(sqlite_sql(HOLDS)))
            .fetch_all(&self.writer)
            .await
            .map_err(StoreError::db("reading holds"))?;
        rows.iter().map(hold_from_row).collect()
    }

    async fn touch_hold(&self, session_id: i64) -> Result<(), StoreError> {
        sqlx::query(AssertSqlSafe(sqlite_sql(HOLD_TOUCH)))
            .bind(session_id)
            .bind(ms(chrono::Utc::now()))
            .execute(&self.writer)
            .await
            .map_err(StoreError::db("noting a person's message"))?;
        Ok(())
    }

    async fn link_notice(&self, message: &NoticeRef, session_id: i64) -> Result<(), StoreError> {
        sqlx::query(AssertSqlSafe(sqlite_sql(NOTICE_LINK)))
            .bind(message.platform.as_str())
            .bind(&message.chat)
            .bind(&message.message_id)
            .bind(session_id)
            .bind(ms(chrono::Utc::now()))
            .execute(&self.writer)
            .await
            .map_err(StoreError::db("linking a notice"))?;
        Ok(())
    }

    async fn notice_session(&self, message: &NoticeRef) -> Result<Option<i64>, StoreError> {
        sqlx::query_scalar(AssertSqlSafe(sqlite_sql(NOTICE_SESSION)))
            .bind(message.platform.as_str())
            .bind(&message.chat)
            .bind(&message.message_id)
            .fetch_optional(&self.writer)
            .await
            .map_err(StoreError::db("reading a notice"))
    }

    async fn notices_of(&self, session_id: i64) -> Result<Vec<NoticeRef>, StoreError> {
        let rows: Vec<(String, String, String)> =
            sqlx::query_as(AssertSqlSafe(sqlite_sql(NOTICES_OF)))
                .bind(session_id)
                .fetch_all(&self.writer)
                .await
                .map_err(StoreError::db("reading notices"))?;
        Ok(latest_notices(rows))
    }
}

crate::store::writes::search_cache_impl!(SqliteStore, writer, writer, sqlite_sql);

crate::store::console::console_impl!(SqliteStore, pool, writer, sqlite_sql);

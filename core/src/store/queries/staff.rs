//! [`Staff`], written once for both backends over the dialect layer
//! ([`crate::store::db`]): decisions on applications, conversations held by a person, and
//! the admin places' messages that stand for sessions. Read where they are written (SQLite:
//! the writer connection), so that a hold taken is seen at once.

use crate::store::db::{OnDb, query};
use crate::store::rows;
use crate::store::{Decided, Hold, NoticeRef, Staff, StoreError, console, writes};

#[async_trait::async_trait]
impl<S: OnDb> Staff for S {
    async fn decide(
        &self,
        session_id: i64,
        decision: &str,
        by: &str,
    ) -> Result<Option<Decided>, StoreError> {
        let made = query(writes::DECIDE)
            .bind(decision)
            .bind(by)
            .bind(rows::ms(chrono::Utc::now()))
            .bind(session_id)
            .execute(self.db().write())
            .await
            .map_err(StoreError::db("recording a decision"))?
            > 0;
        let row = query(writes::DECISION_OF)
            .bind(session_id)
            .fetch_optional(self.db().write())
            .await
            .map_err(StoreError::db("reading a decision"))?;
        let Some(row) = row else { return Ok(None) };
        Ok(rows::decision_from_row(&row)?.map(|decision| Decided {
            decision,
            first: made,
        }))
    }

    async fn take_over(
        &self,
        session_id: i64,
        key: &crate::message::SessionKey,
        by: &str,
    ) -> Result<(Hold, bool), StoreError> {
        let took = query(writes::HOLD_TAKE)
            .bind(session_id)
            .bind(key.platform.as_str())
            .bind(&key.chat)
            .bind(&key.thread)
            .bind(&key.user)
            .bind(by)
            .bind(rows::ms(chrono::Utc::now()))
            .execute(self.db().write())
            .await
            .map_err(StoreError::db("taking over a conversation"))?
            > 0;
        if took {
            query(console::TICKETS_HANDLED)
                .bind(session_id)
                .bind(rows::ms(chrono::Utc::now()))
                .execute(self.db().write())
                .await
                .map_err(StoreError::db("marking requests for a person handled"))?;
        }
        let row = query(writes::HOLD_AT)
            .bind(key.platform.as_str())
            .bind(&key.chat)
            .bind(&key.thread)
            .bind(&key.user)
            .fetch_optional(self.db().write())
            .await
            .map_err(StoreError::db("reading a hold"))?
            .ok_or_else(|| StoreError::Corrupt("a hold vanished as it was taken".into()))?;
        Ok((writes::hold_from_row(&row)?, took))
    }

    async fn hand_back(&self, session_id: i64) -> Result<Option<Hold>, StoreError> {
        let row = query(writes::HOLD_OF)
            .bind(session_id)
            .fetch_optional(self.db().write())
            .await
            .map_err(StoreError::db("reading a hold"))?;
        let ended = query(writes::HOLD_END)
            .bind(session_id)
            .execute(self.db().write())
            .await
            .map_err(StoreError::db("handing back a conversation"))?
            > 0;
        match row {
            Some(row) if ended => Ok(Some(writes::hold_from_row(&row)?)),
            _ => Ok(None),
        }
    }

    async fn holds(&self) -> Result<Vec<Hold>, StoreError> {
        let rows = query(writes::HOLDS)
            .fetch_all(self.db().write())
            .await
            .map_err(StoreError::db("reading holds"))?;
        rows.iter().map(writes::hold_from_row).collect()
    }

    async fn touch_hold(&self, session_id: i64) -> Result<(), StoreError> {
        query(writes::HOLD_TOUCH)
            .bind(session_id)
            .bind(rows::ms(chrono::Utc::now()))
            .execute(self.db().write())
            .await
            .map_err(StoreError::db("noting a person's message"))?;
        Ok(())
    }

    async fn link_notice(&self, message: &NoticeRef, session_id: i64) -> Result<(), StoreError> {
        query(writes::NOTICE_LINK)
            .bind(message.platform.as_str())
            .bind(&message.chat)
            .bind(&message.message_id)
            .bind(session_id)
            .bind(rows::ms(chrono::Utc::now()))
            .execute(self.db().write())
            .await
            .map_err(StoreError::db("linking a notice"))?;
        Ok(())
    }

    async fn notice_session(&self, message: &NoticeRef) -> Result<Option<i64>, StoreError> {
        query(writes::NOTICE_SESSION)
            .bind(message.platform.as_str())
            .bind(&message.chat)
            .bind(&message.message_id)
            .fetch_optional(self.db().write())
            .await
            .and_then(|row| row.map(|r| r.at(0)).transpose())
            .map_err(StoreError::db("reading a notice"))
    }

    async fn notices_of(&self, session_id: i64) -> Result<Vec<NoticeRef>, StoreError> {
        let rows = query(writes::NOTICES_OF)
            .bind(session_id)
            .fetch_all(self.db().write())
            .await
            .and_then(|rows| {
                rows.iter()
                    .map(|r| Ok((r.at(0)?, r.at(1)?, r.at(2)?)))
                    .collect::<Result<Vec<(String, String, String)>, sqlx::Error>>()
            })
            .map_err(StoreError::db("reading notices"))?;
        Ok(writes::latest_notices(rows))
    }
}

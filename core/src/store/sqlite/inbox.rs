//! The inbox: received messages kept until their turn is done (a crash mid-turn loses
//! nothing), written with the writer's batches, and [`Inbox`] on [`SqliteStore`].

use super::statements::{push_each, push_rows};
use super::turn_by_turn::execute_rows;
use super::{Job, Sql, SqliteStore, writer_gone};
use crate::message::{Incoming, Platform};
use crate::store::rows::{corrupt, ms};
use crate::store::{Inbox, StoreError, TurnCommit};
use async_trait::async_trait;
use chrono::Utc;
use std::sync::atomic::Ordering;
use tokio::sync::oneshot;

/// A row of the inbox: the message as JSON under its platform key.
pub(super) struct InboxEntry {
    pub(super) platform: Platform,
    pub(super) chat: String,
    pub(super) message_id: String,
    pub(super) incoming: String,
    pub(super) created_ms: i64,
}

/// An inbox entry's key: platform, chat, message id.
pub(super) type InboxKey<'a> = (&'a str, &'a str, &'a str);

/// The inbox entries `batch` keeps and those it clears, on the turn by turn path (the fast
/// one writes the same [`inbox_rows`] in its query).
pub(super) async fn write_inbox(
    tx: &mut sqlx::SqliteConnection,
    batch: &[Job],
    committing: &[&TurnCommit],
) -> Result<(), StoreError> {
    let (put, done) = inbox_rows(batch, committing);
    execute_rows(tx, &put, "keeping a received message", |sql, rows| {
        push_inbox_put(sql, rows)
    })
    .await?;
    execute_rows(tx, &done, "clearing a handled message", |sql, rows| {
        push_inbox_done(sql, rows)
    })
    .await?;
    Ok(())
}

/// The inbox entries `batch` keeps and those it clears. A message whose turn is among
/// `committing` (the turns this same transaction commits) gets no entry: its dedupe row
/// marks it done, so a fast turn costs no inbox page.
#[allow(clippy::type_complexity)]
pub(super) fn inbox_rows<'a>(
    batch: &'a [Job],
    committing: &[&'a TurnCommit],
) -> (Vec<&'a InboxEntry>, Vec<InboxKey<'a>>) {
    let turned: std::collections::HashSet<InboxKey<'_>> = committing
        .iter()
        .filter_map(|c| c.processed.as_ref())
        .map(|p| (p.platform.as_str(), p.chat.as_str(), p.message_id.as_str()))
        .collect();
    let mut put = Vec::new();
    let mut done = Vec::new();
    for job in batch {
        match job {
            Job::InboxPut { entry } => {
                let key = (
                    entry.platform.as_str(),
                    entry.chat.as_str(),
                    entry.message_id.as_str(),
                );
                if !turned.contains(&key) {
                    put.push(entry);
                }
            }
            Job::InboxDone {
                platform,
                chat,
                message_id,
            } => done.push((platform.as_str(), chat.as_str(), message_id.as_str())),
            Job::Turn { .. } | Job::Delivered { .. } | Job::Flush(_) => {}
        }
    }
    (put, done)
}

pub(super) fn push_inbox_put(sql: &mut Sql, entries: &[&InboxEntry]) -> Result<(), StoreError> {
    let rows: Vec<_> = entries
        .iter()
        .map(|e| {
            (
                e.platform.as_str(),
                e.chat.as_str(),
                e.message_id.as_str(),
                e.incoming.as_str(),
                e.created_ms,
            )
        })
        .collect();
    sql.push(
        "INSERT INTO inbox (platform, chat, message_id, incoming, created_ms) \
         SELECT value->>0, value->>1, value->>2, value->>3, value->>4 FROM ",
    );
    push_rows(sql, &rows)?;
    sql.push(" WHERE true ON CONFLICT DO NOTHING");
    Ok(())
}

pub(super) fn push_inbox_done(sql: &mut Sql, keys: &[InboxKey<'_>]) -> Result<(), StoreError> {
    sql.push(
        "DELETE FROM inbox WHERE (platform, chat, message_id) IN \
         (SELECT value->>0, value->>1, value->>2 FROM ",
    );
    push_rows(sql, keys)?;
    sql.push(")");
    Ok(())
}

pub(super) async fn mark_delivered_in(
    tx: &mut sqlx::SqliteConnection,
    delivered: &[i64],
) -> Result<(), StoreError> {
    execute_rows(tx, delivered, "marking messages delivered", |sql, rows| {
        push_delivered(sql, rows)
    })
    .await?;
    Ok(())
}

pub(super) fn push_delivered(sql: &mut Sql, ids: &[i64]) -> Result<(), StoreError> {
    sql.push("UPDATE messages SET delivered = 1 WHERE id IN (SELECT value FROM ");
    push_each(sql, ids)?;
    sql.push(")");
    Ok(())
}

#[async_trait]
impl Inbox for SqliteStore {
    async fn inbox_put(&self, incoming: &Incoming) -> Result<(), StoreError> {
        // rides with the next batch of turns (an autocommit of its own per message halved
        // the turns a second the writer served)
        let entry = InboxEntry {
            platform: incoming.platform,
            chat: incoming.chat.clone(),
            message_id: incoming.message_id.clone(),
            incoming: serde_json::to_string(incoming).map_err(|e| corrupt("inbox entry", e))?,
            created_ms: ms(Utc::now()),
        };
        self.submit(Job::InboxPut { entry }).await
    }

    async fn inbox_done(
        &self,
        platform: Platform,
        chat: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        // rides with the next batch, unanswered (see [`Job::InboxDone`])
        self.submit(Job::InboxDone {
            platform,
            chat: chat.to_owned(),
            message_id: message_id.to_owned(),
        })
        .await
    }

    async fn inbox_keep(&self, incoming: &[Incoming]) -> Result<(), StoreError> {
        // any batch failing from here to the flush's answer may have carried these entries
        let failures = self.write_failures.load(Ordering::SeqCst);
        for message in incoming {
            self.inbox_put(message).await?;
        }
        let (reply, done) = oneshot::channel();
        self.submit(Job::Flush(reply)).await?;
        done.await.map_err(|_| writer_gone())?;
        if self.write_failures.load(Ordering::SeqCst) != failures {
            return Err(StoreError::Batch {
                message: "received messages could not be committed".into(),
                busy: false,
            });
        }
        Ok(())
    }

    async fn inbox_pending(&self, platform: Platform) -> Result<Vec<Incoming>, StoreError> {
        crate::store::queries::turns::inbox_pending(&self.db, platform).await
    }
}

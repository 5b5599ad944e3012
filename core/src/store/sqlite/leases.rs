//! [`Leases`] on [`SqliteStore`]: on the writer connection, each a statement of its own.
//! One process owns a SQLite database (`kaiwa run` holds the `instance` lease); the others
//! are there for a second process that would start on the same file.

use super::SqliteStore;
use crate::store::rows::{from_ms, ms};
use crate::store::{Lease, Leases, StoreError};
use async_trait::async_trait;
use chrono::Utc;
use std::time::Duration;

#[async_trait]
impl Leases for SqliteStore {
    async fn lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool, StoreError> {
        let now = ms(Utc::now());
        let until = now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let held: Option<String> = sqlx::query_scalar(
            "INSERT INTO leases (name, holder, expires_ms) VALUES (?1, ?2, ?3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_ms = excluded.expires_ms \
             WHERE leases.holder = excluded.holder OR leases.expires_ms < ?4 RETURNING holder",
        )
        .bind(name)
        .bind(holder)
        .bind(until)
        .bind(now)
        .fetch_optional(&self.writer)
        .await
        .map_err(StoreError::db("taking a lease"))?;
        Ok(held.is_some())
    }

    async fn release(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM leases WHERE name = ? AND holder = ?")
            .bind(name)
            .bind(holder)
            .execute(&self.writer)
            .await
            .map_err(StoreError::db("releasing a lease"))?;
        Ok(())
    }

    async fn leases(&self, prefix: &str) -> Result<Vec<Lease>, StoreError> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT name, holder, expires_ms FROM leases WHERE substr(name, 1, length(?1)) = ?1 ORDER BY name",
        )
        .bind(prefix)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("reading leases"))?;
        Ok(rows
            .into_iter()
            .map(|(name, holder, expires)| Lease {
                name,
                holder,
                expires_at: from_ms(expires),
            })
            .collect())
    }
}

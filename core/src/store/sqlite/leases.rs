//! [`Leases`] on [`SqliteStore`]: the statements PostgreSQL runs too
//! ([`crate::store::writes`]), on the writer connection. One process owns a SQLite
//! database (`kaiwa run` claims it: [`crate::store::Store::claim_sole_use`]); its leases have no rival.

use super::SqliteStore;
use crate::store::writes::{
    LEASE_LIST, LEASE_RELEASE, LEASE_TAKE, lease_times, leases_of, sqlite_sql,
};
use crate::store::{Lease, Leases, StoreError};
use async_trait::async_trait;
use sqlx::AssertSqlSafe;
use std::time::Duration;

#[async_trait]
impl Leases for SqliteStore {
    async fn lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool, StoreError> {
        let (now, until) = lease_times(ttl);
        let held: Option<String> = sqlx::query_scalar(AssertSqlSafe(sqlite_sql(LEASE_TAKE)))
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
        sqlx::query(AssertSqlSafe(sqlite_sql(LEASE_RELEASE)))
            .bind(name)
            .bind(holder)
            .execute(&self.writer)
            .await
            .map_err(StoreError::db("releasing a lease"))?;
        Ok(())
    }

    async fn leases(&self, prefix: &str) -> Result<Vec<Lease>, StoreError> {
        let rows = sqlx::query_as(AssertSqlSafe(sqlite_sql(LEASE_LIST)))
            .bind(prefix)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("reading leases"))?;
        Ok(leases_of(rows))
    }
}

//! [`Leases`], written once for both backends over the dialect layer
//! ([`crate::store::db`]): taken and renewed where the backend says ([`OnDb::leasing`]: on
//! PostgreSQL a connection that does not wait for the disk), listed on a reader. On SQLite one
//! process owns the database (`kaiwa run` claims it: [`crate::store::Store::claim_for_run`]),
//! so its leases have no rival; on PostgreSQL they divide the work among instances.

use crate::store::db::{OnDb, query};
use crate::store::writes::{LEASE_LIST, LEASE_RELEASE, LEASE_TAKE, lease_times, leases_of};
use crate::store::{Lease, Leases, StoreError};
use async_trait::async_trait;
use std::time::Duration;

#[async_trait]
impl<S: OnDb> Leases for S {
    async fn lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool, StoreError> {
        let (now, until) = lease_times(ttl);
        let held = query(LEASE_TAKE)
            .bind(name)
            .bind(holder)
            .bind(until)
            .bind(now)
            .fetch_optional(self.leasing())
            .await
            .map_err(StoreError::db("taking a lease"))?;
        Ok(held.is_some())
    }

    async fn release(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        query(LEASE_RELEASE)
            .bind(name)
            .bind(holder)
            .execute(self.leasing())
            .await
            .map_err(StoreError::db("releasing a lease"))?;
        Ok(())
    }

    async fn leases(&self, prefix: &str) -> Result<Vec<Lease>, StoreError> {
        let rows = query(LEASE_LIST)
            .bind(prefix)
            .fetch_all(self.db().read())
            .await
            .and_then(|rows| {
                rows.iter()
                    .map(|r| Ok((r.at(0)?, r.at(1)?, r.at(2)?)))
                    .collect::<Result<Vec<(String, String, i64)>, sqlx::Error>>()
            })
            .map_err(StoreError::db("reading leases"))?;
        Ok(leases_of(rows))
    }
}

//! [`SearchCache`], written once for both backends over the dialect layer
//! ([`crate::store::db`]): outside searches' answers and knowledge-base passages' vectors.

use crate::store::db::{self, OnDb};
use crate::store::{SearchCache, StoreError, writes};

#[async_trait::async_trait]
impl<S: OnDb> SearchCache for S {
    async fn cached_search(
        &self,
        provider: &str,
        query: &str,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<String>, StoreError> {
        db::query(writes::CACHED_SEARCH)
            .bind(provider)
            .bind(query)
            .bind(since.timestamp_millis())
            .fetch_optional(self.db().write())
            .await
            .and_then(|row| row.map(|r| r.at(0)).transpose())
            .map_err(StoreError::db("reading the search cache"))
    }

    async fn cache_search(
        &self,
        provider: &str,
        query: &str,
        results: &str,
    ) -> Result<(), StoreError> {
        db::query(writes::CACHE_SEARCH)
            .bind(provider)
            .bind(query)
            .bind(results)
            .bind(chrono::Utc::now().timestamp_millis())
            .execute(self.db().write())
            .await
            .map_err(StoreError::db("keeping search results"))?;
        Ok(())
    }

    async fn passage_vectors(&self, model: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        db::query(writes::PASSAGE_VECTORS)
            .bind(model)
            .fetch_all(self.db().write())
            .await
            .and_then(|rows| rows.iter().map(|r| Ok((r.at(0)?, r.at(1)?))).collect())
            .map_err(StoreError::db("reading passage vectors"))
    }

    async fn keep_passage_vectors(
        &self,
        model: &str,
        vectors: &[(String, Vec<u8>)],
    ) -> Result<(), StoreError> {
        let now = chrono::Utc::now().timestamp_millis();
        let statements = vectors
            .iter()
            .map(|(hash, vector)| {
                db::query(writes::KEEP_PASSAGE_VECTOR)
                    .bind(model)
                    .bind(hash)
                    .bind(vector)
                    .bind(now)
            })
            .collect();
        self.db()
            .transaction(statements)
            .await
            .map_err(StoreError::db("keeping passage vectors"))?;
        Ok(())
    }
}

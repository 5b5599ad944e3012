//! The contract around migrations: a database a newer Kaiwa migrated is refused.

use super::{Db, first_turn};
use crate::store::{Backend, StoreError, connect};

/// A database a newer Kaiwa migrated is refused with a clear error, and left as it is.
pub(super) async fn a_database_from_a_newer_kaiwa_is_refused_unchanged(db: Db) {
    let store = db.open().await;
    first_turn(&*store, "c1").await;
    store.close().await;
    drop(store);
    let newer = 99_991_231_000_001_i64;
    match Backend::of(&db.url).expect("a URL") {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&db.url).await.expect("file");
            sqlx::query(
                "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
                 VALUES (?1, 'from the future', 1, x'00', 0)",
            )
            .bind(newer)
            .execute(&pool)
            .await
            .expect("marked");
            pool.close().await;
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await.expect("database");
            sqlx::query(
                "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
                 VALUES ($1, 'from the future', true, '\\x00', 0)",
            )
            .bind(newer)
            .execute(&pool)
            .await
            .expect("marked");
            pool.close().await;
        }
    }
    let refused = connect(&db.url).await.err().expect("refused");
    assert!(
        matches!(refused, StoreError::NewerDatabase(v) if v == newer),
        "{refused}"
    );
    assert!(refused.to_string().contains("newer Kaiwa"), "{refused}");
}

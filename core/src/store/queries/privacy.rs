//! What `/forget` deletes ([`forget_user_rows`]), written once for both backends: the
//! statements of [`crate::store::writes::forget_statements`] in one transaction on the
//! writer. Each backend's [`crate::store::Store::forget_user`] keeps its cache around it.

use crate::message::Platform;
use crate::store::StoreError;
use crate::store::db::{Db, query};
use crate::store::writes::forget_statements;

/// Deletes everything stored about one user in one transaction; the rows deleted.
pub(crate) async fn forget_user_rows(
    db: &Db,
    platform: Platform,
    user: &str,
    keep_submissions: bool,
) -> Result<u64, StoreError> {
    let sqls = forget_statements(keep_submissions);
    let statements = sqls
        .iter()
        .map(|sql| query(*sql).bind(platform.as_str()).bind(user))
        .collect();
    let affected = db
        .transaction(statements)
        .await
        .map_err(StoreError::db("forgetting a user"))?;
    // the rows deleted, not those only unlinked from the user's sessions
    Ok(sqls
        .iter()
        .zip(affected)
        .filter(|(sql, _)| sql.starts_with("DELETE"))
        .map(|(_, rows)| rows)
        .sum())
}

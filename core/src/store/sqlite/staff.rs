//! [`Staff`](crate::store::Staff), the search cache and the console's rows on SQLite:
//! the statements both backends share (`store/writes.rs`, `store/console.rs`), through the
//! writer pool where a read must see the last write.

use super::SqliteStore;
use crate::store::writes::sqlite_sql;

crate::store::writes::staff_impl!(SqliteStore, writer, sqlite_sql);

crate::store::writes::search_cache_impl!(SqliteStore, writer, writer, sqlite_sql);

crate::store::console::console_impl!(SqliteStore, pool, writer, sqlite_sql);

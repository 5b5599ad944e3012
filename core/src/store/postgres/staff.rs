//! [`Staff`](crate::store::Staff), the search cache and the console's rows on
//! PostgreSQL: the statements both backends share (`store/writes.rs`, `store/console.rs`).

use super::PgStore;
use crate::store::console::as_written;

crate::store::writes::staff_impl!(PgStore, pool, as_written);

crate::store::writes::search_cache_impl!(PgStore, pool, pool, as_written);

crate::store::console::console_impl!(PgStore, pool, pool, as_written);

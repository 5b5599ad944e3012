//! The queries both backends run, each written once over the dialect layer
//! ([`super::db`]), as the traits of any store that says where its database is
//! ([`super::db::OnDb`]): [`super::Reads`] (`reads.rs`), [`super::Leases`] (`leases.rs`),
//! [`super::Staff`] (`staff.rs`), [`super::SearchCache`] (`search_cache.rs`) and
//! [`super::console::Console`] (`console.rs`); `/forget`'s deletions (`privacy.rs`); and the reads and deletions around turns each
//! backend's `Store` calls beside its own write path (`turns.rs`). The statements they share with a backend's own
//! code (a turn's reading rows and tickets, `/forget`) are in [`super::writes`].

mod console;
mod leases;
pub(crate) mod privacy;
mod reads;
mod search_cache;
mod staff;
pub(crate) mod turns;

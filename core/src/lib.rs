//! Kaiwa's core: everything except the platforms.
//!
//! - [`message`]: the contracts with adapters — [`message::Incoming`], [`message::Outgoing`],
//!   [`message::SessionKey`].
//! - [`orchestrator`]: one turn per message, per-session locks, dedupe, one transaction per
//!   turn, then delivery through an adapter's [`orchestrator::Outbox`].
//! - [`flow`]: the [`flow::Flow`] trait; [`flows`] holds the flows themselves.
//! - [`agent`]: the agent loop, tools with typed arguments, sub-tasks.
//! - [`llm`]: the [`llm::ChatModel`] boundary and its OpenAI-compatible client.
//! - [`store`]: the [`store::Store`] traits, the queries both backends share written once
//!   over a small dialect layer, and the two backends: SQLite (the default) and PostgreSQL
//!   (several instances); [`store::StateChange`] is what a turn writes.
//! - [`admin`]: notifications for the admins.
//!
//! Nothing here imports a platform library; configuration and the environment are read only
//! by the binary and passed in.

pub mod admin;
pub mod agent;
pub mod flow;
pub mod flows;
pub mod i18n;
pub mod jobs;
pub mod kb;
pub mod llm;
pub mod message;
pub mod metrics;
pub mod orchestrator;
pub mod search;
pub mod store;
#[cfg(any(test, feature = "test-utils"))]
pub mod testing;

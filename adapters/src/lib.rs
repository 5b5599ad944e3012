//! Kaiwa's platform adapters. Each translates its platform's events into
//! [`kaiwa_core::message::Incoming`], hands them to the
//! [`kaiwa_core::orchestrator::Orchestrator`], and renders the
//! [`kaiwa_core::message::Outgoing`] it gets back through an
//! [`kaiwa_core::orchestrator::Outbox`].
//!
//! - [`console`]: stdin / stdout, options as numbered lists (used by `kaiwa chat`).
//!
//! Adapters hold no conversation state of their own beyond what rendering needs; sessions
//! live in the store.

pub mod console;

/// Why an adapter stopped.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    #[error("terminal I/O failed: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Orchestrator(#[from] kaiwa_core::orchestrator::OrchestratorError),
}

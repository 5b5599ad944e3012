//! The flows Kaiwa runs, one folder (or file) per seed family. [`builtin`] lists those that
//! are ready; the binary enables them per configuration.

pub mod assistant;

use crate::flow::Flow;
use std::sync::Arc;

/// Every built-in flow, the default first.
pub fn builtin() -> Vec<Arc<dyn Flow>> {
    vec![Arc::new(assistant::AssistantFlow)]
}

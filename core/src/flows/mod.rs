//! The flows Kaiwa runs, one folder (or file) per seed family. [`builtin`] lists those that
//! are ready; the binary enables them per configuration.

pub mod assistant;
pub mod interview;

use crate::flow::Flow;
use interview::form::Form;
use std::sync::Arc;

/// What the built-in flows are configured with (loaded by the binary).
#[derive(Debug, Clone, Default)]
pub struct FlowConfig {
    pub forms: Vec<Form>,
    pub default_form: Option<String>,
}

/// Every built-in flow, the default first.
pub fn builtin(config: &FlowConfig) -> Vec<Arc<dyn Flow>> {
    vec![
        Arc::new(assistant::AssistantFlow),
        Arc::new(interview::InterviewFlow::new(
            config.forms.clone(),
            config.default_form.clone(),
        )),
    ]
}

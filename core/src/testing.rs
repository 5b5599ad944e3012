//! Test helpers shared by the core's tests and other crates' (feature `test-utils`):
//! [`RecordingOutbox`] keeps what the orchestrator delivered.

use crate::admin::DeliveryError;
use crate::message::{OptionsRequest, Outgoing, SessionKey};
use crate::orchestrator::Outbox;
use async_trait::async_trait;
use std::sync::Mutex;

/// An [`Outbox`] that records every delivered item.
#[derive(Default)]
pub struct RecordingOutbox {
    items: Mutex<Vec<(SessionKey, Outgoing)>>,
}

impl RecordingOutbox {
    pub fn items(&self) -> Vec<(SessionKey, Outgoing)> {
        self.items.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Delivered texts and option prompts, in order (typing indicators left out).
    pub fn texts(&self) -> Vec<String> {
        self.items()
            .into_iter()
            .filter_map(|(_, o)| match o {
                Outgoing::Text { text } => Some(text),
                Outgoing::Options(req) => Some(req.prompt),
                _ => None,
            })
            .collect()
    }

    /// The latest options delivered.
    pub fn last_options(&self) -> Option<OptionsRequest> {
        self.items().into_iter().rev().find_map(|(_, o)| match o {
            Outgoing::Options(req) => Some(req),
            _ => None,
        })
    }

    pub fn clear(&self) {
        self.items.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[async_trait]
impl Outbox for RecordingOutbox {
    async fn deliver(&self, key: &SessionKey, items: &[Outgoing]) -> Result<(), DeliveryError> {
        let mut all = self.items.lock().unwrap_or_else(|p| p.into_inner());
        all.extend(items.iter().map(|o| (key.clone(), o.clone())));
        Ok(())
    }
}

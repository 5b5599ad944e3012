//! Test helpers shared by the core's tests and other crates' (feature `test-utils`):
//! [`RecordingOutbox`] keeps what the orchestrator delivered, and [`FlowHarness`] plays one
//! user talking to a set of flows through the real orchestrator and a real SQLite store —
//! the harness every flow's tests use.

pub mod postgres;

use crate::admin::{CollectingAdminSink, DeliveryError};
use crate::flow::{Flow, FlowRegistry};
use crate::llm::ModelRouter;
use crate::message::{Body, Incoming, OptionsRequest, Outgoing, Platform, SessionKey, UserRef};
use crate::orchestrator::{Orchestrator, Outbox};
use crate::store::sqlite::SqliteStore;
use crate::store::{Reads, SessionRecord};
use async_trait::async_trait;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

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

/// Where a [`FlowHarness`]'s user talks, and which flow (and argument) their messages ask
/// for.
#[derive(Debug, Clone)]
pub struct Place {
    pub platform: Platform,
    pub chat: String,
    pub thread: String,
    pub user: UserRef,
    pub flow: Option<String>,
    pub flow_arg: Option<String>,
}

impl Place {
    /// A console chat `c` with user `applicant`, asking for `flow`.
    pub fn console(flow: &str) -> Place {
        Place {
            platform: Platform::Console,
            chat: "c".into(),
            thread: String::new(),
            user: UserRef {
                id: "applicant".into(),
                display_name: "Hanako".into(),
                language: None,
            },
            flow: Some(flow.into()),
            flow_arg: None,
        }
    }

    pub fn key(&self) -> SessionKey {
        SessionKey {
            platform: self.platform,
            chat: self.chat.clone(),
            thread: self.thread.clone(),
            user: self.user.id.clone(),
        }
    }
}

/// One user talking to `flows` through the real [`Orchestrator`] on a real
/// [`SqliteStore`]: each call sends one message (numbered `m0`, `m1`, …) and returns what
/// was delivered for it.
pub struct FlowHarness {
    pub orchestrator: Arc<Orchestrator>,
    pub store: Arc<SqliteStore>,
    pub outbox: RecordingOutbox,
    pub admin: Arc<CollectingAdminSink>,
    pub place: Place,
    sent: AtomicUsize,
}

impl FlowHarness {
    /// A bot running `flows` (the first is the default) on the database at `url`.
    pub async fn new(
        url: &str,
        flows: Vec<Arc<dyn Flow>>,
        models: ModelRouter,
        place: Place,
    ) -> FlowHarness {
        let store = Arc::new(SqliteStore::connect(url).await.expect("store"));
        let admin = Arc::new(CollectingAdminSink::default());
        let flows = FlowRegistry::new(flows).expect("flows");
        FlowHarness {
            orchestrator: Arc::new(Orchestrator::new(
                store.clone(),
                flows,
                models,
                admin.clone(),
            )),
            store,
            outbox: RecordingOutbox::default(),
            admin,
            place,
            sent: AtomicUsize::new(0),
        }
    }

    /// Numbers the next message `m{n}` (a harness on a database another one used must not
    /// send that one's ids again: they would be duplicates).
    pub fn number_from(&self, n: usize) {
        self.sent.store(n, Ordering::SeqCst);
    }

    /// Sends `body` and returns the texts and option prompts delivered for it.
    pub async fn send(&self, body: Body) -> Vec<String> {
        self.outbox.clear();
        let n = self.sent.fetch_add(1, Ordering::SeqCst);
        let incoming = Incoming {
            platform: self.place.platform,
            chat: self.place.chat.clone(),
            thread: self.place.thread.clone(),
            user: self.place.user.clone(),
            message_id: format!("m{n}"),
            body,
            flow: self.place.flow.clone(),
            flow_arg: self.place.flow_arg.clone(),
            shared: false,
        };
        self.orchestrator
            .handle(incoming, &self.outbox)
            .await
            .expect("turn");
        self.outbox.texts()
    }

    /// Opens the conversation (as `kaiwa chat` does).
    pub async fn open(&self) -> Vec<String> {
        self.send(Body::Open).await
    }

    /// Sends a line as the user types it (a leading `/` makes it a command).
    pub async fn say(&self, text: &str) -> Vec<String> {
        self.send(Body::from_text(text)).await
    }

    /// Presses `values` of the options last delivered.
    pub async fn choose(&self, values: &[&str]) -> Vec<String> {
        let request = self.outbox.last_options().expect("options shown");
        self.send(Body::Choice {
            request_id: request.request_id,
            values: values.iter().map(|v| v.to_string()).collect(),
        })
        .await
    }

    /// The user's active session here, if any.
    pub async fn active(&self) -> Option<SessionRecord> {
        self.store
            .active_session(&self.place.key())
            .await
            .expect("loads")
    }
}

/// A model that plays the interview agents (see [`crate::flows::interview::simulated`]).
pub use crate::flows::interview::simulated as interview_agents;

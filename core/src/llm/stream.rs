//! Streaming a reply while the model writes it.
//!
//! The orchestrator opens a [`Tap`] for a turn when the platform can show a reply as it
//! grows (a Telegram draft or edited message, a Discord edited message, the console) and
//! runs the turn [`within`] it. An agent that opted in ([`crate::agent::Agent::streaming`]:
//! the help-desk's and BookGuide's final answer, the assistant, the reading companion)
//! asks its model with [`super::ChatModel::chat_streaming`], which appends the text to the
//! tap as it arrives; the orchestrator shows the tap's text at the platform's pace and the
//! turn's reply, vetted and formatted, replaces it at the end. Interview agents never opt
//! in: a question reaches the applicant only after QuickCheck passed it.
//!
//! A user's Stop ([`Tap::stop`]) ends the model request (its connection is dropped) and
//! the text so far becomes the answer; [`Tap::was_stopped`] tells the turn.
//!
//! Like the budget, the tap is a task-local: it follows the turn's future only.

use std::future::Future;
use std::sync::Arc;
use tokio::sync::watch;

/// The text of one reply as it is written, and the user's Stop.
#[derive(Debug)]
pub struct Tap {
    text: watch::Sender<String>,
    stop: watch::Sender<bool>,
}

impl Default for Tap {
    fn default() -> Self {
        Tap {
            text: watch::Sender::new(String::new()),
            stop: watch::Sender::new(false),
        }
    }
}

impl Tap {
    pub fn new() -> Arc<Tap> {
        Arc::new(Tap::default())
    }

    /// Appends a piece of the answer.
    pub fn push(&self, delta: &str) {
        if delta.is_empty() {
            return;
        }
        self.text.send_modify(|text| text.push_str(delta));
    }

    /// Forgets what was written: the model's answer turned out not to be the reply (it
    /// called a tool), or the request is made again.
    pub fn reset(&self) {
        self.text.send_if_modified(|text| {
            let changed = !text.is_empty();
            text.clear();
            changed
        });
    }

    /// The text so far.
    pub fn text(&self) -> String {
        self.text.borrow().clone()
    }

    /// Watches the text (each change marks the receiver; intermediate ones coalesce).
    pub fn watch(&self) -> watch::Receiver<String> {
        self.text.subscribe()
    }

    /// The user asked to stop the answer.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    pub fn was_stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Resolves once the user asked to stop.
    pub async fn stopped(&self) {
        let mut stop = self.stop.subscribe();
        // the sender lives as long as `self`: `wait_for` cannot fail while we are borrowed
        let _ = stop.wait_for(|stopped| *stopped).await;
    }
}

tokio::task_local! {
    static TAP: Arc<Tap>;
}

/// Runs `work` with `tap` receiving what opted-in agents write.
pub async fn within<F: Future>(tap: Arc<Tap>, work: F) -> F::Output {
    TAP.scope(tap, work).await
}

/// The current turn's tap, if its reply may be streamed.
pub fn current() -> Option<Arc<Tap>> {
    TAP.try_with(Arc::clone).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn text_grows_resets_and_stop_is_seen() {
        assert!(current().is_none());
        let tap = Tap::new();
        let mut seen = tap.watch();
        within(tap.clone(), async {
            let tap = current().expect("inside");
            tap.push("Hello");
            tap.push(", world");
        })
        .await;
        assert!(seen.has_changed().expect("open"));
        assert_eq!(*seen.borrow_and_update(), "Hello, world");
        tap.reset();
        assert_eq!(tap.text(), "");
        assert!(!tap.was_stopped());
        let waiting = {
            let tap = tap.clone();
            tokio::spawn(async move { tap.stopped().await })
        };
        tap.stop();
        waiting.await.expect("resolves");
        assert!(tap.was_stopped());
    }
}

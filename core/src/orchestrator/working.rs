//! A turn at work: the flow's turn run within the turn budget, with a sign of life for the
//! user while it runs — the platform's typing indicator, renewed before it fades, or the
//! reply itself as the model writes it ([`Streamer`], where the outbox can show one).

use super::{Orchestrator, Outbox};
use crate::admin::DeliveryError;
use crate::llm::stream::Tap;
use crate::message::{Outgoing, SessionKey};
use async_trait::async_trait;
use std::time::Duration;

/// Shows one reply while it is written (see [`Outbox::streamer`]).
#[async_trait]
pub trait Streamer: Send {
    /// The least time between two [`Streamer::show`]s.
    fn interval(&self) -> Duration;

    /// Shows the reply so far; `Ok(true)` once something is on the user's screen (a
    /// streamer may wait for a whole sentence). A platform's rate limit comes back as
    /// [`DeliveryError::RateLimited`]: the texts until then are skipped, not queued. Any
    /// other error ends the streaming of this reply (it is delivered whole at the end).
    async fn show(&mut self, text: &str) -> Result<bool, DeliveryError>;

    /// The turn's reply was delivered (or could not be): forget the reply, and remove what
    /// was shown if the reply did not replace it.
    async fn finish(self: Box<Self>);
}

/// What `working` leaves behind: the streamer to finish once the reply is delivered.
pub(super) struct Streaming {
    streamer: Option<Box<dyn Streamer>>,
    pub(super) stopped: bool,
}

impl Streaming {
    pub(super) async fn finish(self) {
        if let Some(streamer) = self.streamer {
            streamer.finish().await;
        }
    }
}

/// Shows the tap's text at the streamer's pace until `done` (the turn's work is over). A
/// request to the platform in flight then is finished, not cut: cut, a message could be
/// posted that the adapter never learns of, and the reply would go out beside it.
async fn pump(
    streamer: &mut dyn Streamer,
    tap: &Tap,
    shown: &std::sync::atomic::AtomicBool,
    mut done: tokio::sync::watch::Receiver<bool>,
) {
    let mut text = tap.watch();
    let mut broken = false;
    loop {
        tokio::select! {
            _ = done.wait_for(|d| *d) => return,
            changed = text.changed(), if !broken => {
                if changed.is_err() {
                    broken = true;
                    continue;
                }
            }
        }
        let now = text.borrow_and_update().clone();
        if now.trim().is_empty() {
            continue;
        }
        let pause = match streamer.show(&now).await {
            Ok(visible) => {
                if visible {
                    shown.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                streamer.interval()
            }
            // the texts written meanwhile are skipped; the last one is shown after
            Err(DeliveryError::RateLimited { retry_after }) => retry_after.max(streamer.interval()),
            Err(e) => {
                tracing::info!(error = %e, "streaming this reply stopped; it is sent whole");
                broken = true;
                Duration::ZERO
            }
        };
        tokio::select! {
            _ = done.wait_for(|d| *d) => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// The longest a finished turn waits for a streamed update in flight.
const FINISH_SHOWING: Duration = Duration::from_secs(5);

impl Orchestrator {
    /// Runs a flow's turn within the turn budget, showing a sign of life while it works:
    /// the platform's typing indicator again before the last one fades (Telegram shows it
    /// for 5 s, Discord for 10 s), and — where the outbox can show one — the reply as it
    /// is written, instead of typing once text is shown.
    pub(super) async fn working<F: std::future::Future>(
        &self,
        key: &SessionKey,
        outbox: &dyn Outbox,
        work: F,
    ) -> (F::Output, Streaming) {
        let tap = Tap::new();
        let mut streamer = if self.models.is_empty() {
            None
        } else {
            outbox.streamer(key, &tap)
        };
        let streams = streamer.is_some();
        let budgeted = async {
            let work = async {
                match self.turn_budget {
                    Some(budget) => crate::llm::budget::within(budget, work).await,
                    None => work.await,
                }
            };
            if streams {
                crate::llm::stream::within(tap.clone(), work).await
            } else {
                work.await
            }
        };
        let every = match key.platform {
            _ if self.models.is_empty() => None,
            crate::message::Platform::Telegram => Some(Duration::from_secs(4)),
            crate::message::Platform::Discord => Some(Duration::from_secs(8)),
            // Slack's "is thinking…" lasts until a reply or two minutes
            crate::message::Platform::Slack => Some(Duration::from_secs(30)),
            _ => None,
        };
        let shown = std::sync::atomic::AtomicBool::new(false);
        // only a turn that streams has a pump to stop
        let (done, finished) = match streams {
            true => {
                let (done, finished) = tokio::sync::watch::channel(false);
                (Some(done), Some(finished))
            }
            false => (None, None),
        };
        let output = {
            let pump = async {
                if let (Some(streamer), Some(finished)) = (streamer.as_deref_mut(), finished) {
                    pump(streamer, &tap, &shown, finished).await;
                }
            };
            tokio::pin!(budgeted, pump);
            let mut tick = every
                .map(|every| tokio::time::interval_at(tokio::time::Instant::now() + every, every));
            let output = loop {
                tokio::select! {
                    output = &mut budgeted => break output,
                    () = &mut pump, if streams => {}
                    _ = async {
                        match tick.as_mut() {
                            Some(tick) => tick.tick().await,
                            None => std::future::pending().await,
                        }
                    } => {
                        // once text is shown it is the sign of life (a Telegram draft would
                        // even be blanked by the "Thinking…" placeholder)
                        if !shown.load(std::sync::atomic::Ordering::Relaxed) {
                            // best effort, like the first
                            let _ = outbox.deliver(key, &[Outgoing::Typing]).await;
                        }
                    }
                }
            };
            // an update of the streamed message in flight is finished before the reply
            // replaces it
            if let Some(done) = &done {
                let _ = done.send(true);
            }
            if streams
                && tokio::time::timeout(FINISH_SHOWING, &mut pump)
                    .await
                    .is_err()
            {
                tracing::info!("a streamed update did not finish; the reply goes anyway");
            }
            output
        };
        let stopped = tap.was_stopped();
        (output, Streaming { streamer, stopped })
    }
}

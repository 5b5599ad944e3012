//! Work the bot does by itself, on a clock rather than on a message: the weekly reviews
//! users opted in to ([`weekly_review`]) and the deletion of old transcripts
//! ([`retention`]). `kaiwa run` starts each with [`every`]; the jobs themselves are plain
//! functions that the tests call with a chosen `now`.

pub mod retention;
pub mod weekly_review;

use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;

/// Runs `job` now and then every `period` until `stop` changes (shutdown).
pub fn every<F, Fut>(
    period: Duration,
    mut stop: watch::Receiver<bool>,
    mut job: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tokio::select! {
                _ = tick.tick() => job().await,
                _ = stop.changed() => break,
            }
        }
    })
}

//! Kaiwa inside a host bot's teloxide dispatcher: [`TelegramPlugin`] (its dptree branch,
//! or Kaiwa's own polling as the dispatcher's listener, [`TelegramListener`]).

use super::{
    AdapterHealth, Intake, TelegramApi, TelegramConfig, hand_over, long_poll, polling, stop,
};
use crate::AdapterError;
use kaiwa_core::orchestrator::ForAdapters;
use std::sync::Arc;
use teloxide::types::{Update, UpdateKind};

/// Kaiwa mounted in a host bot's teloxide [`Dispatcher`](teloxide::dispatching::Dispatcher):
/// the host's dispatcher gets its updates from its own polling or webhook, or from Kaiwa's
/// polling ([`TelegramPlugin::listener`]); Kaiwa takes what is its own
/// ([`TelegramPlugin::handler`], [`TelegramPlugin::take`]) and leaves the rest to the host's
/// branches:
///
/// - messages in the places its configuration gives it (private chats unless
///   `private_chats` is off; the groups and forum topics of `places`; other groups when
///   `group_flow` is set; the admin chat), except commands that are not Kaiwa's, and except
///   messages without text;
/// - presses of its own buttons (callback data in [`super::keyboard::NAMESPACE`]);
/// - the `stopped_message_generation` updates of its streamed replies, which only
///   [`TelegramPlugin::listener`] delivers (without it drafts carry no Stop button).
///
/// What it takes is in the store's inbox before the handler returns, and its turn runs in
/// the session's lane afterwards: a slow model never holds up the host's dispatcher.
#[derive(Clone)]
pub struct TelegramPlugin {
    intake: Arc<Intake>,
    health: Arc<AdapterHealth>,
}

impl TelegramPlugin {
    /// Connects and gets ready: the bot's name (`getMe`), Kaiwa's commands added to the
    /// bot's menu (the host's stay), then what the last run left (replies not delivered,
    /// messages not answered).
    pub async fn start(
        api: TelegramApi,
        config: TelegramConfig,
        orchestrator: ForAdapters,
    ) -> Result<TelegramPlugin, AdapterError> {
        let health = Arc::new(AdapterHealth::new("telegram"));
        let intake = super::start(api, config, orchestrator, true).await?;
        health.ok();
        Ok(TelegramPlugin { intake, health })
    }

    /// Takes `update` when it is Kaiwa's (kept in the inbox, its turn queued) and says so;
    /// `false`: the update is the host's, untouched. A message that could not be stored is
    /// taken and answered with a notice (nothing is lost silently).
    pub async fn take(&self, update: &Update) -> bool {
        if let UpdateKind::Error(value) = &update.kind {
            return match polling::stop_of(value) {
                Some((chat, draft)) => {
                    stop(&self.intake, chat, draft);
                    true
                }
                None => false,
            };
        }
        if !self.intake.is_new(&super::updates::update_key(update.id)) {
            tracing::debug!("duplicate Telegram update ignored");
            return true;
        }
        let ctx = self.intake.turns();
        let routed = match ctx.route(update).await {
            Ok(Some(routed)) => routed,
            Ok(None) => return false,
            Err(error) => {
                tracing::error!(%error, "a Telegram update could not be read from the store");
                return false;
            }
        };
        if let Some(incoming) = routed.work.kept()
            && let Err(error) = ctx.orchestrator.keep(std::slice::from_ref(incoming)).await
        {
            tracing::error!(%error, "a received message could not be stored");
            ctx.save_failed(&routed.work).await;
            return true;
        }
        hand_over(&self.intake, vec![routed]).await;
        true
    }

    /// The handler a host mounts in its dispatcher, before its own branches:
    ///
    /// ```no_run
    /// # async fn host(kaiwa: kaiwa_adapters::telegram::TelegramPlugin, bot: teloxide::Bot) {
    /// use teloxide::prelude::*;
    ///
    /// let handler = dptree::entry()
    ///     .branch(kaiwa.handler())
    ///     .branch(Update::filter_message().endpoint(|bot: Bot, m: Message| async move {
    ///         bot.send_message(m.chat.id, "the host's answer").await?;
    ///         Ok::<(), teloxide::RequestError>(())
    ///     }));
    /// Dispatcher::builder(bot, handler).build().dispatch().await;
    /// # }
    /// ```
    pub fn handler<E>(&self) -> teloxide::dispatching::UpdateHandler<E>
    where
        E: Send + Sync + 'static,
    {
        let plugin = self.clone();
        teloxide::dptree::filter_async(move |update: Update| {
            let plugin = plugin.clone();
            async move { plugin.take(&update).await }
        })
        .endpoint(|| async { Ok(()) })
    }

    /// Kaiwa's own long polling as the host dispatcher's update listener, for
    /// `Dispatcher::dispatch_with_listener`. Kaiwa's updates are kept in its inbox *before*
    /// the batch is confirmed to Telegram (nothing is lost in a crash) and never reach the
    /// dispatcher; every other update is handed to the dispatcher, then confirmed. The
    /// stops of streamed replies (`stopped_message_generation`, which teloxide's
    /// dispatcher drops as an update it cannot read) reach Kaiwa, so drafts in private
    /// chats carry a Stop button again. The listener ends when the dispatcher stops it.
    /// Take one: a second would poll the same bot twice (Telegram refuses that with 409).
    ///
    /// ```no_run
    /// # async fn host(kaiwa: kaiwa_adapters::telegram::TelegramPlugin, bot: teloxide::Bot) {
    /// use teloxide::error_handlers::LoggingErrorHandler;
    /// use teloxide::prelude::*;
    ///
    /// let handler = dptree::entry()
    ///     .branch(kaiwa.handler())
    ///     .branch(Update::filter_message().endpoint(|bot: Bot, m: Message| async move {
    ///         bot.send_message(m.chat.id, "the host's answer").await?;
    ///         Ok::<(), teloxide::RequestError>(())
    ///     }));
    /// Dispatcher::builder(bot, handler)
    ///     .build()
    ///     .dispatch_with_listener(kaiwa.listener(), LoggingErrorHandler::new())
    ///     .await;
    /// # }
    /// ```
    pub fn listener(&self) -> TelegramListener {
        self.intake.turns().outbox.set_stoppable(true);
        let (tx, rx) = tokio::sync::mpsc::channel(HOST_QUEUE);
        let (token, flag) = teloxide::stop::mk_stop_token();
        let (intake, health) = (self.intake.clone(), self.health.clone());
        tokio::spawn(async move {
            long_poll(&intake, &health, flag, Some(tx)).await;
            tracing::info!("Telegram listener stopped");
        });
        TelegramListener { updates: rx, token }
    }

    /// Connected (it started), for a host's health check.
    pub fn health(&self) -> Arc<AdapterHealth> {
        self.health.clone()
    }

    /// Waits for Kaiwa's queued and running turns (a host calls it when it stops).
    pub async fn finish(&self) {
        self.intake.finish().await;
        self.health.set_stopped();
    }
}

/// Updates for a host's dispatcher that may wait to be taken (polling waits beyond).
const HOST_QUEUE: usize = 256;

/// [`TelegramPlugin::listener`]: the updates that are not Kaiwa's, from Kaiwa's polling.
pub struct TelegramListener {
    updates: tokio::sync::mpsc::Receiver<Update>,
    token: teloxide::stop::StopToken,
}

impl teloxide::update_listeners::UpdateListener for TelegramListener {
    type Err = std::convert::Infallible;

    fn stop_token(&mut self) -> teloxide::stop::StopToken {
        self.token.clone()
    }
}

impl<'a> teloxide::update_listeners::AsUpdateStream<'a> for TelegramListener {
    type StreamErr = std::convert::Infallible;
    type Stream = futures::stream::BoxStream<'a, Result<Update, std::convert::Infallible>>;

    fn as_stream(&'a mut self) -> Self::Stream {
        Box::pin(futures::stream::poll_fn(move |cx| {
            self.updates.poll_recv(cx).map(|update| update.map(Ok))
        }))
    }
}

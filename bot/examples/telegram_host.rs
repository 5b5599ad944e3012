//! A Telegram bot of its own with Kaiwa mounted in its dispatcher. The host answers `/ping`
//! in any chat with "pong" and an "again" button, and the button with "pong" again; Kaiwa
//! takes the conversations its configuration gives it (by default the interview in
//! private chats) and its own commands and buttons. Neither sees the other's updates.
//!
//! Configured as `kaiwa run` is: `--config` / `KAIWA_CONFIG`, `--database-url` /
//! `KAIWA_DATABASE_URL`, the token in the variable `[telegram] token_env` names
//! (default `TELEGRAM_BOT_TOKEN`), `[telegram] api_url`:
//!
//! ```text
//! TELEGRAM_BOT_TOKEN=123:abc cargo run -p kaiwa --example telegram_host
//! ```

use anyhow::Context as _;
use kaiwa::teloxide::prelude::*;
use kaiwa::teloxide::types::{InlineKeyboardButton, InlineKeyboardMarkup};
use kaiwa::{Kaiwa, Options};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt::init(); // RUST_LOG=info shows Kaiwa's log
    let kaiwa = Kaiwa::open(&<Options as clap::Parser>::parse()).await?;
    host(kaiwa).await
}

/// The host bot: Kaiwa's branch first, then the host's own. Kaiwa polls for both (its
/// updates stored before they are confirmed, its Stop button working); without the
/// listener, `.dispatch()` polls and the branch takes Kaiwa's updates.
pub async fn host(kaiwa: Kaiwa) -> anyhow::Result<()> {
    let bot = kaiwa
        .telegram_bot()
        .context("no Telegram token: set the variable [telegram] token_env names")?;
    let plugin = kaiwa.telegram().await?;
    let handler = dptree::entry()
        .branch(plugin.handler())
        .branch(Update::filter_message().filter(is_ping).endpoint(ping))
        .branch(
            Update::filter_callback_query()
                .filter(is_again)
                .endpoint(again),
        );
    tokio::spawn(kaiwa.jobs(std::future::pending())); // weekly reviews, retention
    let listener = plugin.listener();
    let errors = LoggingErrorHandler::new();
    Dispatcher::builder(bot, handler)
        .build()
        .dispatch_with_listener(listener, errors)
        .await;
    plugin.finish().await;
    kaiwa.close().await;
    Ok(())
}

fn is_ping(message: Message) -> bool {
    let command = message.text().and_then(|t| t.split_whitespace().next());
    command.is_some_and(|c| c == "/ping" || c.starts_with("/ping@"))
}

fn is_again(query: CallbackQuery) -> bool {
    query.data.as_deref() == Some("again")
}

async fn ping(bot: Bot, message: Message) -> ResponseResult<()> {
    pong(&bot, message.chat.id).await
}

async fn again(bot: Bot, query: CallbackQuery) -> ResponseResult<()> {
    bot.answer_callback_query(query.id.clone()).await?;
    match query.regular_message() {
        Some(message) => pong(&bot, message.chat.id).await,
        None => Ok(()),
    }
}

async fn pong(bot: &Bot, chat: ChatId) -> ResponseResult<()> {
    let button = InlineKeyboardButton::callback("again", "again");
    bot.send_message(chat, "pong")
        .reply_markup(InlineKeyboardMarkup::new([[button]]))
        .await?;
    Ok(())
}

//! A Discord bot of its own with Kaiwa's event handler beside the host's. The host
//! registers a global slash command `ping` and answers it, and a message "!ping" in any
//! channel Kaiwa does not own, with "pong"; Kaiwa takes its help-desk and reading channels,
//! direct messages, its own components and its own slash commands (registered one by one:
//! the host's `ping` stays).
//!
//! Configured as `kaiwa run` is: `--config` / `KAIWA_CONFIG`, `--database-url` /
//! `KAIWA_DATABASE_URL`, the token in the variable `[discord] token_env` names
//! (default `DISCORD_BOT_TOKEN`), `[discord] api_proxy`:
//!
//! ```text
//! DISCORD_BOT_TOKEN=… cargo run -p kaiwa --example discord_host
//! ```

use anyhow::Context as _;
use kaiwa::serenity::all::{
    ClientBuilder, Command, Context, CreateCommand, CreateInteractionResponse,
    CreateInteractionResponseMessage, EventHandler, Interaction, Message, Ready,
};
use kaiwa::serenity::async_trait;
use kaiwa::{DiscordPlugin, Kaiwa, Options};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt::init(); // RUST_LOG=info shows Kaiwa's log
    let kaiwa = Kaiwa::open(&<Options as clap::Parser>::parse()).await?;
    host(kaiwa).await
}

/// The host bot: its own handler and Kaiwa's, on one client.
pub async fn host(kaiwa: Kaiwa) -> anyhow::Result<()> {
    let plugin = kaiwa.discord()?;
    let http = kaiwa
        .discord_http()
        .context("no Discord token: set the variable [discord] token_env names")?;
    let mut client = ClientBuilder::new_with_http(http, kaiwa::discord_intents())
        .event_handler(Host(plugin.clone()))
        .event_handler(plugin)
        .await?;
    tokio::spawn(kaiwa.jobs(std::future::pending())); // weekly reviews, retention
    client.start().await?;
    kaiwa.close().await;
    Ok(())
}

struct Host(DiscordPlugin);

#[async_trait]
impl EventHandler for Host {
    async fn ready(&self, ctx: Context, _: Ready) {
        let ping = CreateCommand::new("ping").description("Is the bot there?");
        if let Err(e) = Command::create_global_command(&ctx.http, ping).await {
            eprintln!("could not register /ping: {e}");
        }
    }

    async fn message(&self, ctx: Context, msg: Message) {
        let dm = msg.guild_id.is_none();
        if msg.content.trim() == "!ping"
            && !self.0.owns(msg.channel_id, dm).await
            && let Err(e) = msg.channel_id.say(&ctx.http, "pong").await
        {
            eprintln!("could not answer !ping: {e}");
        }
    }

    async fn interaction_create(&self, ctx: Context, interaction: Interaction) {
        if let Interaction::Command(command) = interaction
            && command.data.name == "ping"
        {
            let pong = CreateInteractionResponseMessage::new().content("pong");
            let answer = CreateInteractionResponse::Message(pong);
            if let Err(e) = command.create_response(&ctx.http, answer).await {
                eprintln!("could not answer /ping: {e}");
            }
        }
    }
}

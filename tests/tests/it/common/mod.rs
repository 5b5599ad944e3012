//! Starting Kaiwa as every deployment does, through [`kaiwa::Kaiwa`]: a configuration file
//! ([`kaiwa_tests::write_config`]) with the section of the platform under test.

use kaiwa::{Kaiwa, KaiwaBuilder};
use kaiwa_core::llm::ModelRouter;
use std::path::Path;

/// Kaiwa from a configuration file written in `dir` with `sections` (its `[telegram]` or
/// `[discord]`, …), on the database `database_url`, with the tokens given and `models` in
/// place of `[llm]`'s clients (`[llm]`, when there, still sets the turn budget).
pub async fn kaiwa(
    dir: &Path,
    sections: &str,
    database_url: &str,
    tokens: (Option<&str>, Option<&str>),
    models: ModelRouter,
) -> Kaiwa {
    let mut builder = configured(dir, sections, database_url, models);
    if let Some(token) = tokens.0 {
        builder = builder.telegram_token(token);
    }
    if let Some(token) = tokens.1 {
        builder = builder.discord_token(token);
    }
    builder.build().await.expect("kaiwa")
}

/// Kaiwa with `[slack]` in `sections` and the fake Slack's tokens ([`kaiwa::SlackTokens`]).
pub async fn kaiwa_on_slack(
    dir: &Path,
    sections: &str,
    database_url: &str,
    tokens: kaiwa::SlackTokens,
    models: ModelRouter,
) -> Kaiwa {
    configured(dir, sections, database_url, models)
        .slack_tokens(tokens)
        .build()
        .await
        .expect("kaiwa")
}

/// The builder of Kaiwa from a configuration file written in `dir` with `sections`, on
/// `database_url`, with `models`; no platform's tokens yet.
fn configured(dir: &Path, sections: &str, database_url: &str, models: ModelRouter) -> KaiwaBuilder {
    let path = kaiwa_tests::write_config(dir, sections);
    let options = kaiwa::Options {
        config: Some(path),
        database_url: Some(database_url.to_string()),
    };
    let (settings, _) = options.settings().expect("settings");
    Kaiwa::builder(settings)
        .database_url(database_url)
        .models(models)
}

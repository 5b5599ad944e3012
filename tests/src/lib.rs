//! Test support for Kaiwa's whole-bot tests: fake servers on 127.0.0.1 that a test starts
//! itself, and helpers to drive the real binary.
//!
//! - [`fake_openai::FakeOpenAi`]: an OpenAI-compatible Chat Completions server playing a
//!   script of HTTP replies and recording the requests.
//!
//! Nothing here reaches the internet; fakes speak the real wire protocol so the real clients
//! (reqwest, teloxide, serenity) are what is tested.

pub mod fake_discord;
pub mod fake_openai;
pub mod fake_telegram;

/// A plain form with one multi-select field, for the adapters' multi-select tests.
pub const SURVEY_FORM: &str = r#"
title = "Stack survey"
variant = "plain"
languages = ["en"]

[[fields]]
id = "languages"
label = "Languages you use"
intent = "Plan the workshops"
required = true
type = "multi_choice"
question = "Which languages do you use?"

[[fields.options]]
value = "rust"
label = "Rust"

[[fields.options]]
value = "go"
label = "Go"

[[fields.options]]
value = "python"
label = "Python"
"#;

/// The texts after the first `before`, once `texts` has stopped growing for a quarter second
/// (a bot's reply can be several messages).
pub async fn once_quiet(texts: impl Fn() -> Vec<String>, before: usize) -> Vec<String> {
    let mut seen = texts().len();
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        let now = texts().len();
        if now == seen {
            break;
        }
        seen = now;
    }
    texts()
        .get(before..)
        .map(<[String]>::to_vec)
        .unwrap_or_default()
}

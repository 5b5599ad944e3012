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

//! Whole-bot tests against the fake platform, model, embeddings and search servers of
//! `kaiwa_tests`, one test program (one link, one binary on disk instead of one per file).

mod chaos;
mod common;
mod console;
mod discord;
mod embeddings;
mod layout;
mod model_client;
mod search;
mod slack;
mod telegram;

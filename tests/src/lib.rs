//! Test support for Kaiwa's whole-bot tests: fake servers on 127.0.0.1 that a test starts
//! itself, and helpers to drive the real binary.
//!
//! - [`fake_openai::FakeOpenAi`]: an OpenAI-compatible Chat Completions server playing a
//!   script of HTTP replies and recording the requests.
//! - [`fake_embeddings::FakeEmbeddings`]: an OpenAI-compatible `/v1/embeddings` whose
//!   vectors know the concepts a test names.
//! - [`fake_slack::FakeSlack`]: Slack's Web API, a Socket Mode WebSocket, signed Events
//!   API deliveries.
//!
//! Nothing here reaches the internet; fakes speak the real wire protocol so the real clients
//! (reqwest, teloxide, serenity) are what is tested.

pub mod fake_discord;
pub mod fake_embeddings;
pub mod fake_openai;
pub mod fake_search;
pub mod fake_slack;
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

/// Writes a Kaiwa configuration file in `dir` and returns its path: the forms of these
/// tests (the repository's engineer form and [`SURVEY_FORM`], in `dir/forms`), this
/// repository's knowledge base and books, `/healthz` on a free port, then `sections`
/// (`[telegram]`, `[discord]`, `[llm]`, …).
pub fn write_config(dir: &std::path::Path, sections: &str) -> std::path::PathBuf {
    let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let forms = dir.join("forms");
    std::fs::create_dir_all(&forms).expect("forms folder");
    let engineer = std::fs::read_to_string(format!("{repo}/config/forms/engineer.toml"))
        .expect("the engineer form");
    std::fs::write(forms.join("engineer.toml"), engineer).expect("engineer form");
    std::fs::write(forms.join("survey.toml"), SURVEY_FORM).expect("survey form");
    let config = format!(
        "[flows]\nforms_dir = {forms:?}\ndefault_form = \"engineer\"\n\
         kb_dir = \"{repo}/config/kb\"\nbooks = \"{repo}/config/books.toml\"\n\n\
         [server]\nlisten = \"127.0.0.1:0\"\n\n{sections}"
    );
    let path = dir.join("kaiwa.toml");
    std::fs::write(&path, config).expect("config written");
    path
}

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

/// The texts of the active session of `key` (user and bot, oldest first, the last 100);
/// panics when there is none.
pub async fn session_texts(
    store: &dyn kaiwa_core::store::Reads,
    key: &kaiwa_core::message::SessionKey,
) -> Vec<String> {
    let session = store
        .active_session(key)
        .await
        .expect("the store answers")
        .expect("an active session");
    store
        .recent_messages(session.id, 100)
        .await
        .expect("messages")
        .into_iter()
        .map(|m| m.text)
        .collect()
}

/// A 200 whose body breaks off after the status line: the call was carried out and its
/// answer lost on the way (the fakes' "answer lost" failure).
pub fn answer_lost() -> axum::response::Response {
    use axum::response::IntoResponse;
    let broken = futures::stream::once(async {
        Err::<axum::body::Bytes, _>(std::io::Error::other("connection lost"))
    });
    axum::response::Response::builder()
        .status(axum::http::StatusCode::OK)
        .header("content-type", "application/json")
        .body(axum::body::Body::from_stream(broken))
        .unwrap_or_else(|_| axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

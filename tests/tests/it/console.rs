//! The console adapter on a terminal (`live`): a spinner while the bot works, a reply
//! printed as the model writes it and not printed again at the end. (Through a pipe neither
//! happens: `bot/tests/it/chat_pipe.rs`.)

use async_trait::async_trait;
use kaiwa_adapters::console::{self, ConsoleOptions};
use kaiwa_core::flows::assistant::AssistantFlow;
use kaiwa_core::llm::stream::Tap;
use kaiwa_core::llm::{ChatModel, ChatRequest, ChatResponse, ModelError, ModelRouter};
use kaiwa_core::testing::{FlowHarness, Place};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// Thinks for a while, then writes its answer a word at a time.
struct SlowWriter;

const ANSWER: &str = "Tea is best brewed for three minutes.";

#[async_trait]
impl ChatModel for SlowWriter {
    fn name(&self) -> &str {
        "slow-writer"
    }

    async fn chat(&self, _request: ChatRequest) -> Result<ChatResponse, ModelError> {
        tokio::time::sleep(Duration::from_millis(800)).await;
        Ok(ChatResponse::text(ANSWER))
    }

    async fn chat_streaming(
        &self,
        _request: ChatRequest,
        tap: &Tap,
    ) -> Result<ChatResponse, ModelError> {
        tokio::time::sleep(Duration::from_millis(800)).await;
        for word in ANSWER.split_inclusive(' ') {
            tap.push(word);
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        Ok(ChatResponse::text(ANSWER))
    }
}

async fn conversation(live: bool) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("kaiwa.db").display());
    let models = ModelRouter::new(Some(Arc::new(SlowWriter)));
    let harness = FlowHarness::new(
        &url,
        vec![Arc::new(AssistantFlow::default())],
        models,
        Place::console("assistant"),
    )
    .await;
    let (output, mut screen) = tokio::io::duplex(1 << 16);
    let options = ConsoleOptions {
        user: "tester".into(),
        flow: Some("assistant".into()),
        flow_arg: None,
        live,
    };
    let input: &[u8] = b"1\nHow long should tea brew?\n";
    console::run(&harness.orchestrator.for_adapters(), input, output, options)
        .await
        .expect("the conversation runs");
    let mut printed = String::new();
    screen
        .read_to_string(&mut printed)
        .await
        .expect("the output");
    printed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_sees_a_spinner_then_the_reply_as_it_is_written_once() {
    let printed = conversation(true).await;
    assert_eq!(
        printed.matches(ANSWER).count(),
        1,
        "printed once: {printed:?}"
    );
    let before = &printed[..printed.find("Tea is").expect("the answer")];
    assert!(
        before.contains("\r| ") || before.contains("\r/ "),
        "a spinner while the model thinks: {printed:?}"
    );
    assert!(
        before.ends_with("\r    \r"),
        "the spinner wiped first: {printed:?}"
    );
    // through a pipe: the conversation and nothing else
    let piped = conversation(false).await;
    assert!(!piped.contains('\r'), "{piped:?}");
    assert_eq!(piped.matches(ANSWER).count(), 1, "{piped:?}");
}

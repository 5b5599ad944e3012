//! The real OpenAI-compatible client against a fake server on 127.0.0.1: tool calls, retries
//! on 429 (honouring Retry-After) and 5xx, malformed bodies and a server that never answers.

use kaiwa_core::agent::tool::parse_arguments;
use kaiwa_core::llm::budget;
use kaiwa_core::llm::openai::{OpenAiClient, OpenAiConfig};
use kaiwa_core::llm::stream::Tap;
use kaiwa_core::llm::{ChatMessage, ChatModel, ChatRequest, ModelError, ToolCall, ToolSpec};
use kaiwa_tests::fake_openai::{FakeOpenAi, Reply};
use serde::Deserialize;
use serde_json::json;
use std::time::{Duration, Instant};

fn client(server: &FakeOpenAi, timeout: Duration, retries: u32) -> OpenAiClient {
    let mut config = OpenAiConfig::new(server.base_url(), "fake-model");
    config.api_key = Some("sk-test-secret".into());
    config.timeout = timeout;
    config.max_retries = retries;
    config.backoff = Duration::from_millis(5);
    OpenAiClient::new(config).expect("client")
}

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![
            ChatMessage::system("You are a greeter."),
            ChatMessage::user("Hi"),
            ChatMessage::Assistant {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "c0".into(),
                    name: "set_language".into(),
                    arguments: r#"{"language":"en"}"#.into(),
                }],
            },
            ChatMessage::Tool {
                tool_call_id: "c0".into(),
                content: "language set".into(),
            },
        ],
        tools: vec![ToolSpec {
            name: "ask".into(),
            description: "Ask the user".into(),
            parameters: json!({"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}).into(),
        }],
        ..Default::default()
    }
}

#[derive(Deserialize, schemars::JsonSchema, PartialEq, Debug)]
struct Ask {
    question: String,
}

#[tokio::test]
async fn tool_calls_are_parsed_into_typed_arguments() {
    let server = FakeOpenAi::start([Reply::tool_call(
        "ask",
        json!({"question": "Where do you live?"}),
    )])
    .await
    .expect("server");
    let response = client(&server, Duration::from_secs(5), 0)
        .chat(request())
        .await
        .expect("answer");
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].name, "ask");
    assert_eq!(response.tool_calls[0].id, "call_abc");
    let args: Ask = parse_arguments(&response.tool_calls[0].arguments).expect("typed");
    assert_eq!(
        args,
        Ask {
            question: "Where do you live?".into()
        }
    );
    assert_eq!(response.usage.prompt_tokens, 20);
    assert_eq!(response.usage.completion_tokens, 7);

    let sent = &server.requests()[0];
    assert_eq!(sent["model"], "fake-model");
    assert_eq!(sent["tools"][0]["type"], "function");
    assert_eq!(sent["tools"][0]["function"]["name"], "ask");
    assert_eq!(sent["tool_choice"], "auto");
    assert_eq!(
        sent["messages"][2]["content"], "",
        "tool-call messages carry empty content"
    );
    assert_eq!(
        sent["messages"][2]["tool_calls"][0]["function"]["arguments"],
        r#"{"language":"en"}"#
    );
    assert_eq!(sent["messages"][3]["role"], "tool");
    assert_eq!(sent["messages"][3]["tool_call_id"], "c0");
    assert_eq!(
        server.authorizations()[0].as_deref(),
        Some("Bearer sk-test-secret")
    );
}

#[tokio::test]
async fn rate_limit_is_waited_out_as_the_server_asks() {
    let server = FakeOpenAi::start([Reply::rate_limited("1"), Reply::text("hello")])
        .await
        .expect("server");
    let started = Instant::now();
    let response = client(&server, Duration::from_secs(5), 3)
        .chat(request())
        .await
        .expect("answer");
    assert_eq!(response.text.as_deref(), Some("hello"));
    assert_eq!(server.requests().len(), 2);
    // our own backoff is 5 ms: only the Retry-After header explains a wait of a second
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "waited {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn server_errors_are_retried_then_succeed() {
    let server = FakeOpenAi::start([
        Reply::status(500, "oops"),
        Reply::status(503, "busy"),
        Reply::text("fine"),
    ])
    .await
    .expect("server");
    let response = client(&server, Duration::from_secs(5), 3)
        .chat(request())
        .await
        .expect("answer");
    assert_eq!(response.text.as_deref(), Some("fine"));
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn retries_stop_at_the_limit_with_the_last_error() {
    let server = FakeOpenAi::start([
        Reply::status(500, "a"),
        Reply::status(500, "b"),
        Reply::status(500, "c"),
    ])
    .await
    .expect("server");
    let err = client(&server, Duration::from_secs(5), 1)
        .chat(request())
        .await
        .err();
    assert!(
        matches!(err, Some(ModelError::Http { status: 500, ref body }) if body == "b"),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let server = FakeOpenAi::start([Reply::status(400, "bad request"), Reply::text("never")])
        .await
        .expect("server");
    let err = client(&server, Duration::from_secs(5), 3)
        .chat(request())
        .await
        .err();
    assert!(
        matches!(err, Some(ModelError::Http { status: 400, .. })),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_garbage_body_is_a_clear_error() {
    let server = FakeOpenAi::start([Reply::status(200, "<html>this is not json</html>")])
        .await
        .expect("server");
    let err = client(&server, Duration::from_secs(5), 3)
        .chat(request())
        .await
        .err();
    let Some(ModelError::Malformed(detail)) = err else {
        panic!("expected a malformed-response error, got {err:?}");
    };
    assert!(detail.contains("this is not json"), "{detail}");
    assert_eq!(
        server.requests().len(),
        1,
        "a malformed answer is not retried"
    );
}

#[tokio::test]
async fn a_hung_server_times_out() {
    let server = FakeOpenAi::start([Reply::Hang]).await.expect("server");
    let err = client(&server, Duration::from_millis(300), 0)
        .chat(request())
        .await
        .err();
    assert!(matches!(err, Some(ModelError::Timeout(_))), "{err:?}");
}

#[tokio::test]
async fn a_timed_out_call_is_not_sent_again() {
    let server = FakeOpenAi::start([Reply::Hang, Reply::text("late")])
        .await
        .expect("server");
    let err = client(&server, Duration::from_millis(300), 3)
        .chat(request())
        .await
        .err();
    assert!(matches!(err, Some(ModelError::Timeout(_))), "{err:?}");
    assert_eq!(
        server.requests().len(),
        1,
        "the server may still be working on it"
    );
}

#[tokio::test]
async fn the_turn_budget_bounds_a_call_and_drops_its_connection() {
    let server = FakeOpenAi::start([Reply::Hang]).await.expect("server");
    let model = client(&server, Duration::from_secs(60), 3);
    let started = Instant::now();
    let err = budget::within(Duration::from_millis(400), model.chat(request()))
        .await
        .err();
    let took = started.elapsed();
    assert!(matches!(err, Some(ModelError::BudgetSpent)), "{err:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // the request was abandoned, not left running on the server
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.abandoned(), 1);
    // once the budget is spent, calls fail at once without a request
    let again = budget::within(Duration::ZERO, model.chat(request())).await;
    assert!(matches!(again, Err(ModelError::BudgetSpent)), "{again:?}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_slot_means_one_request_in_flight_and_the_wait_counts() {
    let server = FakeOpenAi::start((0..4).map(|_| Reply::text("ok")))
        .await
        .expect("server");
    server.set_delay(Duration::from_millis(300));
    let mut config = OpenAiConfig::new(server.base_url(), "fake-model");
    config.in_flight = Some(std::sync::Arc::new(tokio::sync::Semaphore::new(1)));
    let model = std::sync::Arc::new(OpenAiClient::new(config).expect("client"));
    // three users at once, each with a 2 s budget: all answered, one at a time
    let calls = (0..3).map(|_| {
        let model = model.clone();
        tokio::spawn(
            async move { budget::within(Duration::from_secs(2), model.chat(request())).await },
        )
    });
    for call in futures::future::join_all(calls).await {
        assert!(call.expect("no panic").is_ok());
    }
    assert_eq!(server.max_in_flight(), 1);
    // a budget shorter than the queue: the wait for the slot ends the call
    let slow = {
        let model = model.clone();
        tokio::spawn(async move { model.chat(request()).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let waited = budget::within(Duration::from_millis(100), model.chat(request())).await;
    assert!(matches!(waited, Err(ModelError::BudgetSpent)), "{waited:?}");
    assert!(slow.await.expect("no panic").is_ok());
    assert_eq!(server.max_in_flight(), 1);
}

#[tokio::test]
async fn errors_never_carry_the_api_key() {
    let server = FakeOpenAi::start([Reply::status(401, "invalid key")])
        .await
        .expect("server");
    let err = client(&server, Duration::from_secs(5), 0)
        .chat(request())
        .await
        .err();
    let text = format!(
        "{err:?} {}",
        err.as_ref().map(ToString::to_string).unwrap_or_default()
    );
    assert!(!text.contains("sk-test-secret"));
}

#[tokio::test]
async fn a_503_with_retry_after_is_waited_out_too() {
    let busy = Reply::Raw {
        status: 503,
        headers: vec![("retry-after".into(), "1".into())],
        body: "overloaded".into(),
    };
    let server = FakeOpenAi::start([busy, Reply::text("back")])
        .await
        .expect("server");
    let started = Instant::now();
    let response = client(&server, Duration::from_secs(5), 2)
        .chat(request())
        .await
        .expect("answer");
    assert_eq!(response.text.as_deref(), Some("back"));
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "waited {:?}",
        started.elapsed()
    );
}

const STORY: &str = "One two three four five six seven eight nine ten eleven twelve.";

fn plain_request() -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::user("Tell me a story")],
        ..Default::default()
    }
}

#[tokio::test]
async fn a_streamed_answer_grows_in_the_tap_and_equals_the_whole_one() {
    let server = FakeOpenAi::start([Reply::text(STORY), Reply::text(STORY)])
        .await
        .expect("server");
    server.set_stream_pace(Duration::from_millis(20));
    let model = client(&server, Duration::from_secs(5), 0);
    let whole = model.chat(plain_request()).await.expect("whole");
    let tap = Tap::new();
    let mut seen = tap.watch();
    let lengths = tokio::spawn(async move {
        let mut lengths = Vec::new();
        while seen.changed().await.is_ok() {
            lengths.push(seen.borrow_and_update().len());
        }
        lengths
    });
    let streamed = model
        .chat_streaming(plain_request(), &tap)
        .await
        .expect("streamed");
    assert_eq!(streamed.text, whole.text, "the same answer either way");
    assert_eq!(tap.text(), STORY);
    assert_eq!(
        streamed.usage.completion_tokens, 3,
        "usage from the last chunk"
    );
    drop(tap);
    let lengths = lengths.await.expect("watcher");
    assert!(
        lengths.len() >= 3,
        "the text grew piece by piece: {lengths:?}"
    );
    assert!(lengths.windows(2).all(|w| w[0] <= w[1]), "{lengths:?}");
    let requests = server.requests();
    assert_eq!(requests[1]["stream"], true);
    assert!(requests[0].get("stream").is_none());
}

#[tokio::test]
async fn a_stop_ends_the_request_and_keeps_the_text_so_far() {
    let server = FakeOpenAi::start([Reply::text(STORY)])
        .await
        .expect("server");
    server.set_stream_pace(Duration::from_millis(100));
    let model = client(&server, Duration::from_secs(5), 0);
    let tap = Tap::new();
    let stopper = {
        let tap = tap.clone();
        tokio::spawn(async move {
            let mut seen = tap.watch();
            let _ = seen.wait_for(|t| t.split_whitespace().count() >= 3).await;
            tap.stop();
        })
    };
    let started = Instant::now();
    let answer = model
        .chat_streaming(plain_request(), &tap)
        .await
        .expect("the text so far");
    stopper.await.expect("stopper");
    let text = answer.text.unwrap_or_default();
    assert!(text.starts_with("One two three"), "{text}");
    assert!(text.len() < STORY.len(), "stopped early: {text}");
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    // the server sees the connection go
    for _ in 0..50 {
        if server.abandoned() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        server.abandoned(),
        1,
        "the request was cancelled on the server"
    );
}

#[tokio::test]
async fn a_server_that_will_not_stream_is_asked_again_without() {
    let server = FakeOpenAi::start([Reply::text(STORY)])
        .await
        .expect("server");
    server.refuse_streams();
    let model = client(&server, Duration::from_secs(5), 0);
    let tap = Tap::new();
    let answer = model
        .chat_streaming(plain_request(), &tap)
        .await
        .expect("one answer");
    assert_eq!(answer.text.as_deref(), Some(STORY));
    assert_eq!(
        tap.text(),
        "",
        "nothing streamed: the reply goes as one message"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["stream"], true);
    assert!(requests[1].get("stream").is_none());
}

#[tokio::test]
async fn an_agent_cap_ends_its_call_before_the_turn_budget() {
    let server = FakeOpenAi::start([Reply::Hang]).await.expect("server");
    let model: std::sync::Arc<dyn ChatModel> =
        std::sync::Arc::new(client(&server, Duration::from_secs(60), 3));
    let capped = budget::Capped::new(model, Duration::from_millis(300));
    let started = Instant::now();
    let err = budget::within(Duration::from_secs(20), capped.chat(request()))
        .await
        .err();
    assert!(matches!(err, Some(ModelError::BudgetSpent)), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.requests().len(), 1, "not sent again");
}

//! Fifty interviews at once against a model server on 127.0.0.1 that fails 30 % of the calls
//! (HTTP 500, a hang past the client's timeout, malformed JSON, an unknown tool, invalid
//! arguments) and otherwise plays the interview agents: every interview still completes,
//! through the real HTTP client, orchestrator, flows and SQLite store.

mod common;

use kaiwa_core::llm::openai::{OpenAiClient, OpenAiConfig};
use kaiwa_core::llm::{ChatMessage, ChatModel, ChatRequest, ModelRouter, ToolCall, ToolSpec};
use kaiwa_core::message::{Body, Incoming, Platform, UserRef};
use kaiwa_core::store::SubmissionStatus;
use kaiwa_core::testing::RecordingOutbox;
use kaiwa_core::testing::interview_agents::fake_model;
use kaiwa_tests::fake_openai::{FakeOpenAi, Reply};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The wire request as the agents' fake model sees it.
fn request_of(body: &Value) -> ChatRequest {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let messages = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| match m["role"].as_str() {
            Some("system") => ChatMessage::system(text(&m["content"])),
            Some("user") => ChatMessage::user(text(&m["content"])),
            Some("tool") => ChatMessage::Tool {
                tool_call_id: text(&m["tool_call_id"]),
                content: text(&m["content"]),
            },
            _ => ChatMessage::Assistant {
                content: m["content"].as_str().map(str::to_string),
                tool_calls: m["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| ToolCall {
                        id: text(&c["id"]),
                        name: text(&c["function"]["name"]),
                        arguments: text(&c["function"]["arguments"]),
                    })
                    .collect(),
            },
        })
        .collect();
    let tools = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| ToolSpec {
            name: text(&t["function"]["name"]),
            description: text(&t["function"]["description"]),
            parameters: t["function"]["parameters"].clone().into(),
        })
        .collect();
    ChatRequest {
        messages,
        tools,
        ..ChatRequest::default()
    }
}

/// Answers whatever the interview asks, the way an applicant would.
fn applicant_answer(question: &str) -> &'static str {
    let q = question.to_lowercase();
    let table = [
        ("country", "Japan"),
        ("email", "hanako@example.com"),
        ("name", "Hanako Yamada"),
        ("years", "7"),
        ("experience", "7"),
        ("skill", "Rust, Go"),
        ("motivation", "I love building developer tools"),
        ("why", "I love building developer tools"),
        ("start", "2026-04-01"),
        ("date", "2026-04-01"),
        ("portfolio", "https://github.com/hanako"),
        ("url", "https://github.com/hanako"),
    ];
    table
        .iter()
        .find(|(k, _)| q.contains(k))
        .map_or("Rust, Go", |(_, a)| a)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_interviews_complete_against_a_model_server_failing_thirty_percent_of_calls() {
    let agents = Arc::new(fake_model(Arc::new(|_| None)).unrecorded());
    let calls = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(AtomicUsize::new(0));
    let (c, f, model) = (calls.clone(), failures.clone(), agents.clone());
    let server = FakeOpenAi::serve(Arc::new(move |body: &Value| {
        let n = c.fetch_add(1, Ordering::SeqCst);
        let request = request_of(body);
        if n % 10 < 3 {
            let k = f.fetch_add(1, Ordering::SeqCst);
            return match k % 5 {
                0 => Reply::status(500, r#"{"error":{"message":"internal"}}"#),
                1 => Reply::Hang,
                2 => Reply::Raw {
                    status: 200,
                    headers: vec![("content-type".into(), "application/json".into())],
                    body: "{\"choices\": [ not json".into(),
                },
                3 => Reply::tool_call("launch_rockets", json!({"count": 3})),
                _ => match request.tools.first() {
                    Some(tool) => Reply::tool_call(&tool.name, json!({"unexpected": [1, 2]})),
                    None => Reply::text(""),
                },
            };
        }
        let response = futures::executor::block_on(model.chat(request));
        match response {
            Ok(r) => match r.tool_calls.first() {
                Some(call) => Reply::tool_call(
                    &call.name,
                    serde_json::from_str(&call.arguments).unwrap_or(Value::Null),
                ),
                None => Reply::text(r.text.as_deref().unwrap_or_default()),
            },
            Err(e) => Reply::status(500, &e.to_string()),
        }
    }))
    .await
    .expect("model server");

    let mut config = OpenAiConfig::new(server.base_url(), "chaos");
    config.timeout = Duration::from_millis(400);
    config.max_retries = 0;
    let client: Arc<dyn ChatModel> = Arc::new(OpenAiClient::new(config).expect("client"));
    let dir = tempfile::tempdir().expect("tempdir");
    let db = format!("sqlite://{}", dir.path().join("kaiwa.db").display());
    // as `kaiwa run` builds it; fifty applicants type faster than the per-user rate limit
    let kaiwa = common::kaiwa(
        dir.path(),
        "[limits]\nmessages_per_minute = 0\n",
        &db,
        (None, None),
        ModelRouter::new(Some(client)),
    )
    .await;
    let store = kaiwa.store().clone();
    let orchestrator = kaiwa.orchestrator().clone();

    let mut interviews = Vec::new();
    for user in 0..50 {
        let orchestrator = orchestrator.clone();
        interviews.push(tokio::spawn(async move {
            let outbox = RecordingOutbox::default();
            let mut n = 0;
            let mut send = |body: Body| {
                n += 1;
                Incoming {
                    platform: Platform::Telegram,
                    chat: format!("c{user}"),
                    thread: String::new(),
                    user: UserRef {
                        id: format!("u{user}"),
                        display_name: format!("Applicant {user}"),
                        language: None,
                    },
                    message_id: format!("m{n}"),
                    body,
                    flow: Some("interview".into()),
                    flow_arg: Some("engineer".into()),
                    shared: false,
                }
            };
            let mut body = Body::Open;
            for _ in 0..80 {
                outbox.clear();
                orchestrator
                    .handle(send(body), &outbox)
                    .await
                    .map_err(|e| format!("user {user}: {e}"))?;
                let texts = outbox.texts();
                if texts.iter().any(|t| t.contains("submitted")) {
                    return Ok(user);
                }
                let last = texts.last().cloned().unwrap_or_default();
                body = match outbox.last_options() {
                    Some(options) if last == options.prompt => {
                        let value = ["en", "remote", "confirm"]
                            .iter()
                            .find(|v| options.options.iter().any(|o| o.value == **v))
                            .map(|v| v.to_string())
                            .or_else(|| options.options.first().map(|o| o.value.clone()))
                            .unwrap_or_default();
                        Body::Choice {
                            request_id: options.request_id,
                            values: vec![value],
                        }
                    }
                    _ => Body::Text {
                        text: applicant_answer(&last).into(),
                    },
                };
            }
            Err(format!("user {user} did not finish"))
        }));
    }
    let mut finished = 0;
    for interview in interviews {
        match interview.await {
            Ok(Ok(_)) => finished += 1,
            Ok(Err(e)) => panic!("{e}"),
            Err(e) => panic!("an interview panicked: {e}"),
        }
    }
    assert_eq!(finished, 50);
    let subs = store.submissions(Some("engineer")).await.expect("subs");
    assert_eq!(subs.len(), 50);
    assert!(
        subs.iter()
            .all(|s| s.submission.status == SubmissionStatus::Submitted)
    );
    let total = calls.load(Ordering::SeqCst);
    let failed = failures.load(Ordering::SeqCst);
    assert!(total >= 500, "{total} calls");
    assert!(
        failed * 10 >= total * 3 - 10,
        "{failed} of {total} calls failed"
    );
    let ledger = store.llm_calls(None).await.expect("ledger");
    assert!(
        ledger.iter().filter(|c| c.error.is_some()).count() >= failed / 2,
        "failed calls are in the ledger"
    );
}

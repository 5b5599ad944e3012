//! Fifty interviews at once against a model server on 127.0.0.1 that fails 30 % of the calls
//! (HTTP 500, a hang past the client's timeout, malformed JSON, an unknown tool, invalid
//! arguments) and otherwise plays the interview agents: every interview still completes,
//! through the real HTTP client, orchestrator, flows and SQLite store.

use crate::common;

use kaiwa_core::llm::openai::{OpenAiClient, OpenAiConfig};
use kaiwa_core::llm::scripted::ScriptedModel;
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

/// Kaiwa as `kaiwa run` builds it, on a new database, its model at the server `config`
/// names, with `sections` of configuration.
async fn bot_on(config: OpenAiConfig, sections: &str) -> (kaiwa::Kaiwa, tempfile::TempDir) {
    let client: Arc<dyn ChatModel> = Arc::new(OpenAiClient::new(config).expect("client"));
    let dir = tempfile::tempdir().expect("tempdir");
    let db = format!("sqlite://{}", dir.path().join("kaiwa.db").display());
    let kaiwa = common::kaiwa(
        dir.path(),
        sections,
        &db,
        (None, None),
        ModelRouter::new(Some(client)),
    )
    .await;
    (kaiwa, dir)
}

/// What the agents' fake model answers to `request`, as the server's wire reply.
fn played(model: &ScriptedModel, request: ChatRequest) -> Reply {
    match futures::executor::block_on(model.chat(request)) {
        Ok(r) => match r.tool_calls.first() {
            Some(call) => Reply::tool_call(
                &call.name,
                serde_json::from_str(&call.arguments).unwrap_or(Value::Null),
            ),
            None => Reply::text(r.text.as_deref().unwrap_or_default()),
        },
        Err(e) => Reply::status(500, &e.to_string()),
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

/// What an applicant sends next: a press on the options last shown (English, remote,
/// confirm where offered), else a typed answer to the last question.
fn applicant_reply(outbox: &RecordingOutbox) -> Body {
    let last = outbox.texts().last().cloned().unwrap_or_default();
    match outbox.last_options() {
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
    }
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
        played(&model, request)
    }))
    .await
    .expect("model server");

    let mut config = OpenAiConfig::new(server.base_url(), "chaos");
    config.timeout = Duration::from_millis(400);
    config.max_retries = 0;
    // fifty applicants type faster than the per-user rate limit
    let (kaiwa, _dir) = bot_on(config, "[limits]\nmessages_per_minute = 0\n").await;
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
                body = applicant_reply(&outbox);
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

/// The agents' fake model behind a server on 127.0.0.1 that answers every call after
/// `delay`, and counts the calls.
async fn slow_agents(delay: Duration) -> (FakeOpenAi, Arc<AtomicUsize>) {
    slow_agents_with(delay, Arc::new(|_| None), |_| None).await
}

/// [`slow_agents`], `special` answering first where it has an answer, and a request
/// `later` names answered that much later than the others.
async fn slow_agents_with(
    delay: Duration,
    special: Arc<kaiwa_core::testing::interview_agents::Rule>,
    later: impl Fn(&ChatRequest) -> Option<Duration> + Send + Sync + 'static,
) -> (FakeOpenAi, Arc<AtomicUsize>) {
    let agents = Arc::new(fake_model(special).unrecorded());
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let server = FakeOpenAi::serve(Arc::new(move |body: &Value| {
        counted.fetch_add(1, Ordering::SeqCst);
        let request = request_of(body);
        match later(&request) {
            Some(after) => Reply::Later(after, Box::new(played(&agents, request))),
            None => played(&agents, request),
        }
    }))
    .await
    .expect("model server");
    server.set_delay(delay);
    (server, calls)
}

/// One interview through the orchestrator against `server`, answering as an applicant
/// would; returns how long each answer to an interview question took, the store, and
/// the texts each answer got.
async fn timed_interview(
    server: &FakeOpenAi,
) -> (
    Vec<(Duration, Vec<String>)>,
    Arc<dyn kaiwa_core::store::Store>,
    tempfile::TempDir,
) {
    let mut config = OpenAiConfig::new(server.base_url(), "slow");
    config.timeout = Duration::from_secs(15);
    let (kaiwa, dir) = bot_on(config, "").await;
    let store = kaiwa.store().clone();
    let orchestrator = kaiwa.orchestrator().clone();
    let outbox = RecordingOutbox::default();
    let mut n = 0;
    let mut body = Body::Open;
    let mut waits = Vec::new();
    for _ in 0..30 {
        n += 1;
        let asked = outbox.texts().last().cloned().unwrap_or_default();
        outbox.clear();
        let typed = matches!(body, Body::Text { .. });
        let started = std::time::Instant::now();
        let incoming = Incoming {
            platform: Platform::Telegram,
            chat: "c1".into(),
            thread: String::new(),
            user: UserRef {
                id: "u1".into(),
                display_name: "Hanako".into(),
                language: None,
            },
            message_id: format!("m{n}"),
            body,
            flow: Some("interview".into()),
            flow_arg: Some("engineer".into()),
            shared: false,
        };
        orchestrator.handle(incoming, &outbox).await.expect("turn");
        let texts = outbox.texts();
        // an answer to an interview question (not the greeting's country or zone)
        if typed && !asked.contains("country") && !asked.contains("time zone") {
            waits.push((started.elapsed(), texts.clone()));
        }
        if texts.iter().any(|t| t.contains("submitted")) {
            break;
        }
        body = applicant_reply(&outbox);
    }
    let subs = store.submissions(Some("engineer")).await.expect("subs");
    assert_eq!(subs.len(), 1, "the interview completed");
    assert_eq!(subs[0].submission.status, SubmissionStatus::Submitted);
    (waits, store, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applicant_waits_for_two_model_calls_per_answer() {
    // every call takes 2.0 s, as an ordinary hosted model with tools does: an answer that
    // is enough is reviewed while the next question is drafted and vetted, so the
    // applicant waits for about two calls, not three or six
    let call = Duration::from_secs(2);
    let (server, calls) = slow_agents(call).await;
    let (waits, store, _dir) = timed_interview(&server).await;
    let mut times: Vec<Duration> = waits.iter().map(|(t, _)| *t).collect();
    times.sort();
    assert!(times.len() >= 5, "answers timed: {times:?}");
    let p50 = times[times.len() / 2];
    assert!(
        p50 <= Duration::from_millis(4_500),
        "p50 {p50:?} (each call {call:?}): {times:?}"
    );
    let ledger = store.llm_calls(None).await.expect("ledger");
    assert_eq!(
        ledger.iter().filter(|c| c.wasted).count(),
        0,
        "every answer was enough: every draft was used"
    );
    eprintln!(
        "answers: p50 {p50:?}, max {:?}; {} model calls",
        times.last().copied().unwrap_or_default(),
        calls.load(Ordering::SeqCst)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_drops_the_drafted_question_and_counts_it_wasted() {
    // the Reviewer finds the first answer to the motivation incomplete: the question
    // drafted meanwhile for the next field is dropped (its request cancelled on the
    // server, its calls recorded as wasted) and a follow-up about the same field is
    // drafted and vetted instead: about three calls on that path
    let call = Duration::from_secs(2);
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let special: Arc<kaiwa_core::testing::interview_agents::Rule> = Arc::new(move |req| {
        // the first answer reviewed is the motivation's (the Architect's plan puts it first)
        let reviewing = req.tools.iter().any(|t| t.name == "review");
        (reviewing && first.swap(false, Ordering::SeqCst)).then(|| {
            kaiwa_core::llm::ChatResponse::tool_call(
                "review",
                json!({"passed": false, "missing_facts": ["why_us"], "feedback": "Why this team?"}),
            )
        })
    });
    // that review takes half a second longer than the draft's first call, so the draft's
    // QuickCheck call is on the server when the review ends
    let slower = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let later = move |req: &ChatRequest| {
        let reviewing = req.tools.iter().any(|t| t.name == "review");
        (reviewing && slower.swap(false, Ordering::SeqCst)).then_some(Duration::from_millis(500))
    };
    let (server, _calls) = slow_agents_with(call, special, later).await;
    let (waits, store, _dir) = timed_interview(&server).await;
    let (follow_up, texts) = waits
        .iter()
        .find(|(_, texts)| {
            texts
                .last()
                .is_some_and(|t| t.contains("Tell me about motivation"))
        })
        .expect("a follow-up about the motivation");
    // three calls (the review half a second longer): not four
    assert!(
        *follow_up <= Duration::from_millis(7_500),
        "about three calls: {follow_up:?} {texts:?}"
    );
    let ledger = store.llm_calls(None).await.expect("ledger");
    let wasted: Vec<_> = ledger.iter().filter(|c| c.wasted).collect();
    assert!(
        !wasted.is_empty(),
        "the dropped draft is counted: {ledger:#?}"
    );
    assert!(
        wasted
            .iter()
            .all(|c| c.agent == "interviewer" || c.agent == "quick_check"),
        "{wasted:#?}"
    );
    assert!(
        server.abandoned_soon(1).await >= 1,
        "the request in flight was cancelled on the server"
    );
}

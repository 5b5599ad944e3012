//! Benchmarks of the hot paths (`cargo bench -p kaiwa-core --features test-utils`): one turn
//! end to end, the store's turn transaction, the agent loop with an instant model,
//! QuickCheck's deterministic layer and a knowledge-base search.

use criterion::{Criterion, criterion_group, criterion_main};
use kaiwa_core::admin::LogAdminSink;
use kaiwa_core::agent::{Agent, LlmLedger, ToolError, ToolOutput, TypedTool, typed};
use kaiwa_core::flow::FlowRegistry;
use kaiwa_core::flows::interview::form::Form;
use kaiwa_core::flows::interview::quick_check;
use kaiwa_core::kb::KnowledgeBase;
use kaiwa_core::llm::scripted::ScriptedModel;
use kaiwa_core::llm::{ChatMessage, ChatResponse, ModelRouter};
use kaiwa_core::message::{Body, Incoming, Platform, SessionKey, UserRef};
use kaiwa_core::orchestrator::Orchestrator;
use kaiwa_core::store::StateChange;
use kaiwa_core::store::sqlite::SqliteStore;
use kaiwa_core::store::{FlowState, ProcessedUpdate, SessionRecord, Store, TurnCommit};
use kaiwa_core::testing::RecordingOutbox;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("no runtime: {e}"),
    }
}

fn turn(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/bench.db", dir.path().display());
    let store = Arc::new(rt.block_on(SqliteStore::connect(&url)).expect("store"));
    let model = ScriptedModel::repeating(|_| ChatResponse::text("ok")).unrecorded();
    let flows = FlowRegistry::new(kaiwa_core::flows::builtin(&Default::default())).expect("flows");
    let orchestrator = Orchestrator::new(
        store,
        flows,
        ModelRouter::new(Some(Arc::new(model))),
        Arc::new(LogAdminSink),
    )
    // one user typing thousands of messages a second: without this the limiter would
    // answer from the 31st on and the benchmark would time the refusal
    .with_rate_limit(0);
    let outbox = RecordingOutbox::default();
    let n = AtomicU64::new(0);
    c.bench_function("turn_end_to_end", |b| {
        b.iter(|| {
            let i = n.fetch_add(1, Ordering::Relaxed);
            let incoming = Incoming {
                platform: Platform::Console,
                chat: "c".into(),
                thread: String::new(),
                user: UserRef {
                    id: "u".into(),
                    display_name: "U".into(),
                    language: None,
                },
                message_id: i.to_string(),
                body: Body::Text {
                    text: "hello".into(),
                },
                flow: Some("assistant".into()),
                flow_arg: None,
                shared: false,
            };
            outbox.clear();
            black_box(
                rt.block_on(orchestrator.handle(incoming, &outbox))
                    .expect("turn"),
            );
        })
    });
}

fn store_commit(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/bench.db", dir.path().display());
    let store = rt.block_on(SqliteStore::connect(&url)).expect("store");
    let key = SessionKey {
        platform: Platform::Console,
        chat: "c".into(),
        thread: String::new(),
        user: "u".into(),
    };
    let user = UserRef {
        id: "u".into(),
        display_name: "U".into(),
        language: None,
    };
    let mut session = rt
        .block_on(store.commit_turn(TurnCommit {
            session: SessionRecord::draft(key, "assistant"),
            user: user.clone(),
            finish_session: None,
            processed: None,
            changes: vec![],
            llm_calls: vec![],
        }))
        .expect("first")
        .session;
    let mut n = 0u64;
    c.bench_function("store_turn_transaction", |b| {
        b.iter(|| {
            n += 1;
            let committed = rt
                .block_on(store.commit_turn(TurnCommit {
                    session: session.clone(),
                    user: user.clone(),
                    finish_session: None,
                    processed: Some(ProcessedUpdate {
                        platform: Platform::Console,
                        chat: "c".into(),
                        message_id: n.to_string(),
                    }),
                    changes: vec![
                        StateChange::AddUserMessage {
                            text: "a question".into(),
                        },
                        StateChange::SetFlowState {
                            state: FlowState::of(&serde_json::json!({"n": n})).expect("state"),
                        },
                        StateChange::AddAssistantMessage {
                            text: "an answer".into(),
                            trace: None,
                        },
                    ],
                    llm_calls: vec![],
                }))
                .expect("commit");
            session = committed.session;
        })
    });
}

struct Ask;
impl TypedTool<()> for Ask {
    type Args = serde_json::Value;
    const NAME: &'static str = "ask";
    fn description(&self) -> String {
        "ask".into()
    }
    async fn run(&self, _: &mut (), _: serde_json::Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::ask("question?"))
    }
}

fn agent_loop(c: &mut Criterion) {
    let rt = runtime();
    let model = ScriptedModel::repeating(|_| ChatResponse::tool_call("ask", serde_json::json!({})))
        .unrecorded();
    let agent = Agent::new("bench", vec![typed(Ask)]);
    c.bench_function("agent_loop_instant_model", |b| {
        b.iter(|| {
            let ledger = LlmLedger::new();
            black_box(
                rt.block_on(agent.run(
                    &model,
                    vec![ChatMessage::system("s"), ChatMessage::user("u")],
                    (),
                    &ledger,
                ))
                .expect("loop"),
            );
        })
    });
}

fn quick_check_rules(c: &mut Criterion) {
    let form =
        Form::parse("engineer", include_str!("../../config/forms/engineer.toml")).expect("form");
    let answered = vec![
        "May I have your full name, please?".to_string(),
        "Which email address should we use to contact you?".to_string(),
    ];
    let done = vec!["full_name".to_string(), "email".to_string()];
    c.bench_function("quick_check_deterministic", |b| {
        b.iter(|| {
            black_box(quick_check::deterministic(
                &form,
                "motivation",
                "What draws you to this position, and what would you like to build here?",
                &answered,
                &done,
            ))
        })
    });
}

fn kb_search(c: &mut Criterion) {
    let kb = KnowledgeBase::open(concat!(env!("CARGO_MANIFEST_DIR"), "/../config/kb")).expect("kb");
    c.bench_function("kb_search_en", |b| {
        b.iter(|| {
            black_box(
                kb.search("How do I change an answer in a sign-up form?", 3)
                    .expect("search"),
            )
        })
    });
    c.bench_function("kb_search_ja", |b| {
        b.iter(|| black_box(kb.search("パスワードを忘れました", 3).expect("search")))
    });
}

/// Ranking by words and meaning against words alone, on the evaluation help-desk (the
/// question's vector is given: what the embeddings server takes is not ours to measure).
fn kb_search_by_meaning(c: &mut Criterion) {
    let kb = KnowledgeBase::open(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/helpdesk-eval"
    ))
    .expect("kb");
    let (built_at, passages) = kb.passages_to_embed();
    let similarity: Vec<f32> = (0..passages.len())
        .map(|n| ((n * 7919) % 100) as f32 / 100.0)
        .collect();
    let question = "I have a fever and can't come in today";
    c.bench_function("kb_search_words_eval", |b| {
        b.iter(|| black_box(kb.search(question, 3).expect("search")))
    });
    c.bench_function("kb_search_meaning_eval", |b| {
        b.iter(|| {
            black_box(
                kb.search_by_meaning(question, 3, built_at, &similarity, 0.9)
                    .expect("search"),
            )
        })
    });
}

criterion_group!(
    benches,
    turn,
    store_commit,
    agent_loop,
    quick_check_rules,
    kb_search,
    kb_search_by_meaning
);
criterion_main!(benches);

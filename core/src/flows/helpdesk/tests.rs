//! Help-desk tests through the orchestrator: concurrency of sub-tasks, the 3-try limit,
//! advice flowing into the next try, citations, the floor in English and Japanese, feedback
//! and handoff.

use super::*;
use crate::llm::{ChatMessage, ChatModel, ChatRequest, ChatResponse, ModelError, ModelRouter};
use crate::message::{Body, Platform, UserRef};
use crate::store::Reads;
use crate::testing::{FlowHarness, Place};
use serde_json::json;
use std::sync::Mutex;
use std::time::Duration;

fn sample_kb() -> Arc<KnowledgeBase> {
    Arc::new(
        KnowledgeBase::open(concat!(env!("CARGO_MANIFEST_DIR"), "/../config/kb"))
            .expect("sample kb"),
    )
}

const TASKS: [&str; 3] = [
    "How do I change an answer?",
    "How do I export submissions?",
    "How do I stop a conversation?",
];

/// Plays the help-desk agents; the first tool selection of every sub-task waits at a barrier
/// that only opens when all three sub-tasks are selecting tools at the same time.
struct DeskModel {
    barrier: tokio::sync::Barrier,
    sufficient: bool,
    requests: Mutex<Vec<ChatRequest>>,
}

fn schema_text(req: &ChatRequest) -> String {
    req.tools.iter().map(|t| t.parameters.to_string()).collect()
}

fn user_text(req: &ChatRequest) -> String {
    req.messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::User { content } => Some(content.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn subtask_of(req: &ChatRequest) -> String {
    user_text(req)
        .lines()
        .find_map(|l| l.strip_prefix("Sub-task: ").map(str::to_string))
        .unwrap_or_default()
}

#[async_trait]
impl ChatModel for DeskModel {
    fn name(&self) -> &str {
        "desk-fake"
    }

    async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(req.clone());
        let schema = schema_text(&req);
        if schema.contains("subtasks") {
            return Ok(ChatResponse::tool_call(
                "respond",
                json!({ "subtasks": TASKS }),
            ));
        }
        if schema.contains("is_sufficient") {
            return Ok(ChatResponse::tool_call(
                "respond",
                json!({"is_sufficient": self.sufficient, "feedback": "Name the exact button.", "additional_queries": ["button name"]}),
            ));
        }
        if req.tools.iter().any(|t| t.name == "search_kb") {
            let task = subtask_of(&req);
            let searched = req
                .messages
                .iter()
                .any(|m| matches!(m, ChatMessage::Tool { .. }));
            if !searched {
                if !user_text(&req).contains("Advice for this attempt") {
                    self.barrier.wait().await;
                }
                return Ok(ChatResponse::tool_call(
                    "search_kb",
                    json!({"query": task, "k": 1}),
                ));
            }
            return Ok(ChatResponse::text(format!("Answer to {task}")));
        }
        Ok(ChatResponse::text(
            "Combined answer [1] [2] [3], and a bogus [9].",
        ))
    }
}

/// The help-desk's user (a Discord thread) in the shared [`FlowHarness`].
struct Harness(FlowHarness);

impl std::ops::Deref for Harness {
    type Target = FlowHarness;
    fn deref(&self) -> &FlowHarness {
        &self.0
    }
}

impl Harness {
    async fn new(models: ModelRouter, kb: Arc<KnowledgeBase>) -> Harness {
        let place = Place {
            platform: Platform::Discord,
            chat: "support".into(),
            thread: "t1".into(),
            user: UserRef {
                id: "u1".into(),
                display_name: "Ken".into(),
                language: None,
            },
            flow: Some(ID.into()),
            flow_arg: None,
        };
        let flow: Arc<dyn crate::flow::Flow> = Arc::new(HelpdeskFlow::new(kb));
        Harness(FlowHarness::new("sqlite::memory:", vec![flow], models, place).await)
    }

    async fn ask(&self, text: &str) -> Vec<String> {
        self.send(Body::Text { text: text.into() }).await
    }

    async fn session_id(&self) -> i64 {
        self.active().await.expect("active").id
    }

    /// The tickets of the conversation.
    async fn tickets(&self) -> Vec<crate::store::Ticket> {
        self.store
            .tickets(self.session_id().await)
            .await
            .expect("tickets")
    }
}

/// What a search of each of [`TASKS`] finds first in the sample knowledge base.
fn first_passages_of_tasks() -> Vec<String> {
    let kb = sample_kb();
    TASKS
        .iter()
        .map(|t| kb.search(t, 1).expect("search")[0].citation())
        .collect()
}

fn router(model: Arc<DeskModel>) -> ModelRouter {
    ModelRouter::new(Some(model))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sub_tasks_run_at_once_and_the_answer_cites_what_they_used() {
    let model = Arc::new(DeskModel {
        barrier: tokio::sync::Barrier::new(3),
        sufficient: true,
        requests: Mutex::new(Vec::new()),
    });
    let h = Harness::new(router(model.clone()), sample_kb()).await;
    let reply = tokio::time::timeout(
        Duration::from_secs(30),
        h.ask("Three questions about Kaiwa"),
    )
    .await
    .expect("the three sub-tasks met at the barrier: they ran concurrently");
    let answer = &reply[0];
    assert!(
        answer.starts_with("Combined answer [1] [2] [3], and a bogus ."),
        "an unknown citation is removed: {answer}"
    );
    let tickets = h.tickets().await;
    assert_eq!(tickets.len(), 1);
    assert_eq!(tickets[0].plan, TASKS);
    // the sources are exactly the passages the searches returned, in order
    let searched = first_passages_of_tasks();
    assert_eq!(tickets[0].sources, searched);
    for (i, source) in searched.iter().enumerate() {
        assert!(
            answer.contains(&format!("[{}] {source}", i + 1)),
            "{answer}"
        );
    }
    assert_eq!(last_options_prompt(&h), "Did this answer your question?");
    // the answer keeps its trace: the plan, each search with its passages, the
    // reflections, who answered and what it cited, the model calls
    let session = h.session_id().await;
    let traced = crate::store::console::Console::traced_messages(h.store.as_ref(), session)
        .await
        .expect("traced");
    assert_eq!(traced.len(), 1, "the answer's turn has one trace");
    let json = crate::store::console::Console::message_trace(h.store.as_ref(), session, traced[0])
        .await
        .expect("read")
        .expect("a trace");
    let trace: crate::agent::trace::Trace = serde_json::from_str(&json).expect("JSON");
    use crate::agent::trace::{By, Note};
    assert!(
        matches!(&trace.notes[0], Note::Plan { subtasks, by: By::Model, .. } if subtasks == &TASKS)
    );
    let searched_in_trace: Vec<String> = trace
        .notes
        .iter()
        .filter_map(|n| match n {
            Note::Search { tool, passages, .. } if tool == "search_kb" => {
                passages.first().map(|p| p.citation.clone())
            }
            _ => None,
        })
        .collect();
    for source in &searched {
        assert!(searched_in_trace.contains(source), "{trace:?}");
    }
    assert_eq!(
        trace
            .notes
            .iter()
            .filter(|n| matches!(
                n,
                Note::Reflection {
                    sufficient: true,
                    ..
                }
            ))
            .count(),
        3
    );
    assert!(
        trace
            .notes
            .iter()
            .any(|n| matches!(n, Note::Answer { by: By::Model, cited, .. } if cited == &searched)),
        "{trace:?}"
    );
    // the turn's model calls, from the ledger: the plan, 3 × (search, answer), 3
    // reflections, the answer
    let calls = crate::store::console::Console::turn_calls(h.store.as_ref(), session, traced[0])
        .await
        .expect("calls");
    assert!(calls.len() >= 8, "{calls:?}");
    assert!(calls.iter().all(|c| c.error.is_none()), "{calls:?}");
    assert!(json.len() <= crate::agent::trace::MAX_BYTES);
}

/// The last trace kept in the harness's conversation.
async fn last_trace(h: &Harness) -> crate::agent::trace::Trace {
    use crate::store::console::Console;
    let session = h.session_id().await;
    let traced = h.store.traced_messages(session).await.expect("traced");
    let last = *traced.last().expect("a traced message");
    let json = h
        .store
        .message_trace(session, last)
        .await
        .expect("read")
        .expect("a trace");
    serde_json::from_str(&json).expect("JSON")
}

/// Who answered, in the last trace, and why the floor did.
async fn last_answer(h: &Harness) -> (crate::agent::trace::By, Option<String>) {
    last_trace(h)
        .await
        .notes
        .into_iter()
        .find_map(|n| match n {
            crate::agent::trace::Note::Answer { by, why, .. } => Some((by, why)),
            _ => None,
        })
        .expect("an answer noted")
}

fn last_options_prompt(h: &Harness) -> String {
    h.outbox
        .last_options()
        .map(|o| o.prompt)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insufficient_answer_is_retried_with_advice_at_most_three_times() {
    let model = Arc::new(DeskModel {
        barrier: tokio::sync::Barrier::new(3),
        sufficient: false,
        requests: Mutex::new(Vec::new()),
    });
    let h = Harness::new(router(model.clone()), sample_kb()).await;
    tokio::time::timeout(
        Duration::from_secs(30),
        h.ask("Three questions about Kaiwa"),
    )
    .await
    .expect("answered");
    let requests = model
        .requests
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let first_steps: Vec<&ChatRequest> = requests
        .iter()
        .filter(|r| r.tools.iter().any(|t| t.name == "search_kb") && r.messages.len() == 2)
        .collect();
    assert_eq!(first_steps.len(), 9, "3 sub-tasks × 3 tries");
    let retries: Vec<&&ChatRequest> = first_steps
        .iter()
        .filter(|r| user_text(r).contains("Advice for this attempt: Name the exact button."))
        .collect();
    assert_eq!(retries.len(), 6, "every retry carries the advice");
    for r in &retries {
        assert!(
            user_text(r).contains("A previous attempt answered:\nAnswer to"),
            "and the last answer"
        );
        assert!(user_text(r).contains("Queries worth trying: button name"));
        assert!(
            !r.messages
                .iter()
                .any(|m| matches!(m, ChatMessage::Tool { .. })),
            "tool messages are dropped on a retry"
        );
    }
    let tickets = h.tickets().await;
    let subs = tickets[0]
        .sub_answers
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(subs.len(), 3);
    assert!(
        subs.iter()
            .all(|s| s["tries"] == 3 && s["completed"] == false)
    );
}

#[tokio::test]
async fn without_a_model_the_floor_answers_from_the_knowledge_base_in_both_languages() {
    let h = Harness::new(ModelRouter::none(), sample_kb()).await;
    let en = h.ask("How do I change an answer in a sign-up form?").await;
    // a strong match is the answer, not hedged
    assert!(en[0].starts_with("**Changing an answer**\n"), "{en:?}");
    assert!(!en[0].contains("found"), "{en:?}");
    assert!(en[0].contains("Sources:\n[1] en/user-guide.md#Changing an answer"));
    // the trace says the floor answered, and why
    let (by, why) = last_answer(&h).await;
    assert_eq!(by, crate::agent::trace::By::Floor);
    assert_eq!(why.as_deref(), Some("no model"));
    let ja = h.ask("パスワードを忘れました").await;
    assert!(ja[0].starts_with("**パスワードの再設定**\n"), "{ja:?}");
    assert!(ja[0].contains("出典:\n[1] ja/user-guide.md#パスワードの再設定"));
    assert_eq!(last_options_prompt(&h), "この回答で解決しましたか？");
    let tickets = h.tickets().await;
    assert_eq!(
        tickets.len(),
        2,
        "a follow-up question continues the same session"
    );
}

#[tokio::test]
async fn a_model_that_never_uses_its_tools_costs_few_calls_and_the_floor_answers() {
    let model = Arc::new(crate::llm::scripted::ScriptedModel::repeating(|_| {
        ChatResponse::text("Sure, happy to help!")
    }));
    let h = Harness::new(ModelRouter::new(Some(model.clone())), sample_kb()).await;
    let answer = h.ask("How do I change an answer in a sign-up form?").await;
    assert!(answer[0].contains("Changing an answer"), "{answer:?}");
    let calls = model.requests().len();
    // each step's agent asks once and reminds once, then the step falls to its floor (it
    // was 11 calls when every step used up its own retries)
    assert!(calls <= 7, "{calls} model calls");
}

#[tokio::test]
async fn nothing_found_says_so_and_offers_a_human() {
    let h = Harness::new(ModelRouter::none(), sample_kb()).await;
    let reply = h.ask("zyxwv quantum flux capacitor").await;
    assert!(
        reply[0].contains("I found nothing in the knowledge base"),
        "{reply:?}"
    );
    assert_eq!(h.outbox.last_options().map(|o| o.options.len()), Some(1));
}

#[tokio::test]
async fn feedback_is_stored_and_a_handoff_reaches_the_admins() {
    let h = Harness::new(ModelRouter::none(), sample_kb()).await;
    h.ask("How do I export submissions?").await;
    let solved = h.choose(&["solved"]).await;
    assert!(solved[0].starts_with("Glad it helped"));
    h.ask("How do I stop a conversation?").await;
    h.choose(&["not_solved"]).await;
    let handed = h.choose(&["human"]).await;
    assert!(handed[0].contains("passed your question to the team"));
    let tickets = h.tickets().await;
    assert_eq!(tickets[0].feedback.as_deref(), Some("solved"));
    assert_eq!(tickets[1].feedback.as_deref(), Some("human"));
    let notices = h.admin.notices();
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].kind, "handoff");
    assert!(notices[0].body.contains("How do I stop a conversation?"));
    assert!(
        notices[0].body.contains("Stopping a conversation"),
        "the bot's answer goes along"
    );
    assert!(
        notices[0]
            .fields
            .iter()
            .any(|(k, v)| k == "Link" && v.contains("discord:support/t1"))
    );
}

/// What a user adds after "Not solved" goes to the team with the question it is about and
/// the answer that did not solve it, in the ticket and in the handoff.
#[tokio::test]
async fn details_after_not_solved_reach_the_team_with_their_question() {
    let h = Harness::new(ModelRouter::none(), sample_kb()).await;
    h.ask("How do I export submissions?").await;
    h.choose(&["not_solved"]).await;
    h.ask("it still fails with an error").await;
    h.choose(&["human"]).await;
    let notices = h.admin.notices();
    assert_eq!(notices.len(), 1);
    let body = &notices[0].body;
    for said in [
        "How do I export submissions?",
        "it still fails with an error",
        "kaiwa export",
    ] {
        assert!(body.contains(said), "{said} missing: {body}");
    }
    let tickets = h.tickets().await;
    let last = tickets.last().expect("a ticket");
    assert!(
        last.question.contains("How do I export submissions?")
            && last.question.contains("it still fails with an error"),
        "{last:?}"
    );
}

#[tokio::test]
async fn the_floor_tells_an_answer_from_the_closest_match_and_from_nothing() {
    let h = Harness::new(ModelRouter::none(), sample_kb()).await;
    // nothing about bicycles: said so, no unrelated passages
    let park = h.ask("Where can I park my bicycle?").await;
    assert!(park[0].contains("I found nothing"), "{park:?}");
    assert!(!park[0].contains("Sources"), "{park:?}");
    // a question the guide only half answers: the closest match, said to be so
    let half = h
        .ask("How do I change my email address in the Telegram app?")
        .await;
    assert!(half[0].starts_with("I found no exact answer"), "{half:?}");
    assert!(
        half[0].contains("pass your question to a person"),
        "{half:?}"
    );
    assert!(
        h.outbox
            .last_options()
            .is_some_and(|o| o.options.iter().any(|o| o.value == "human")),
        "a way to a person"
    );
}

#[tokio::test]
async fn a_follow_up_is_answered_in_the_context_of_the_question_before() {
    let h = Harness::new(ModelRouter::none(), sample_kb()).await;
    h.ask("How do I stop a conversation?").await;
    let more = h.ask("and in Telegram?").await;
    assert!(
        more[0].contains("[1] en/user-guide.md#Stopping a conversation"),
        "{more:?}"
    );
    let h = Harness::new(ModelRouter::none(), sample_kb()).await;
    h.ask("会話を終えるには？").await;
    let more = h.ask("それは Telegram でも同じですか？").await;
    assert!(
        more[0].contains("ja/user-guide.md#会話を終える"),
        "{more:?}"
    );
}

/// Three sub-tasks find three passages; the final answer uses one: only that one is listed
/// (as [1]) and kept with the ticket.
#[tokio::test]
async fn only_the_passages_the_answer_cites_are_its_sources() {
    let model = Arc::new(crate::llm::scripted::ScriptedModel::repeating(|req| {
        let schema = schema_text(req);
        if schema.contains("subtasks") {
            return ChatResponse::tool_call("respond", json!({ "subtasks": TASKS }));
        }
        if schema.contains("is_sufficient") {
            return ChatResponse::tool_call(
                "respond",
                json!({"is_sufficient": true, "feedback": "", "additional_queries": []}),
            );
        }
        if req.tools.iter().any(|t| t.name == "search_kb") {
            let task = subtask_of(req);
            if !req
                .messages
                .iter()
                .any(|m| matches!(m, ChatMessage::Tool { .. }))
            {
                return ChatResponse::tool_call("search_kb", json!({"query": task, "k": 1}));
            }
            return ChatResponse::text(format!("Answer to {task}"));
        }
        ChatResponse::text("Exporting is what you need [2].")
    }));
    let h = Harness::new(ModelRouter::new(Some(model)), sample_kb()).await;
    let reply = h.ask("Three questions about Kaiwa").await;
    let searched = first_passages_of_tasks();
    let answer = &reply[0];
    assert!(
        answer.starts_with("Exporting is what you need [1]."),
        "{answer}"
    );
    assert!(answer.contains(&format!("[1] {}", searched[1])), "{answer}");
    assert!(
        !answer.contains(&searched[0]) && !answer.contains(&searched[2]),
        "passages the answer does not use are not its sources: {answer}"
    );
    let tickets = h.tickets().await;
    assert_eq!(tickets[0].sources, [searched[1].clone()]);
}

/// A model that fails every call: the floor answers a follow-up as it does without a model.
#[tokio::test]
async fn a_follow_up_keeps_its_context_when_the_model_fails() {
    let failing = || {
        let model: Arc<dyn crate::llm::ChatModel> =
            Arc::new(crate::llm::scripted::ScriptedModel::new([]));
        ModelRouter::new(Some(model))
    };
    for (question, follow_up, cited) in [
        (
            "How do I stop a conversation?",
            "and in Telegram?",
            "[1] en/user-guide.md#Stopping a conversation",
        ),
        (
            "会話を終えるには？",
            "それは Telegram でも同じですか？",
            "ja/user-guide.md#会話を終える",
        ),
    ] {
        let h = Harness::new(failing(), sample_kb()).await;
        h.ask(question).await;
        let more = h.ask(follow_up).await;
        assert!(more[0].contains(cited), "{more:?}");
    }
}

#[test]
fn the_help_desk_searches_the_web_only_when_told_to() {
    let kb = sample_kb();
    let tools = |flow: &HelpdeskFlow| -> Vec<String> {
        flow.library
            .tools
            .iter()
            .map(|t| t.name().to_string())
            .collect()
    };
    let alone = HelpdeskFlow::new(kb.clone());
    assert!(!tools(&alone).contains(&"web_search".to_string()));
    let web = crate::search::WebSearch::new(
        crate::search::Provider::SearxNg {
            base_url: "http://127.0.0.1:9".into(),
        },
        5,
        std::time::Duration::from_secs(1),
    )
    .expect("a client");
    let with_web = HelpdeskFlow::new(kb).with_web(Arc::new(web));
    assert!(tools(&with_web).contains(&"web_search".to_string()));
}

/// A small model's final answer of citations alone ("A: [1]\n[2]") gives way to the
/// passages themselves: the user reads what the guide says, with its sources.
#[tokio::test]
async fn an_answer_of_citations_alone_gives_way_to_the_passages() {
    let model = Arc::new(crate::llm::scripted::ScriptedModel::repeating(|req| {
        let schema = schema_text(req);
        if schema.contains("subtasks") {
            return ChatResponse::tool_call(
                "respond",
                json!({"subtasks": ["stop a conversation"]}),
            );
        }
        if schema.contains("is_sufficient") {
            return ChatResponse::tool_call(
                "respond",
                json!({"is_sufficient": true, "feedback": "", "additional_queries": []}),
            );
        }
        if req.tools.iter().any(|t| t.name == "search_kb") {
            let searched = req
                .messages
                .iter()
                .any(|m| matches!(m, ChatMessage::Tool { .. }));
            return if searched {
                ChatResponse::text("See [1].")
            } else {
                ChatResponse::tool_call("search_kb", json!({"query": "stop a conversation"}))
            };
        }
        ChatResponse::text("A: [1]\n[2]")
    }));
    let h = Harness::new(ModelRouter::new(Some(model)), sample_kb()).await;
    let answer = h.ask("How do I stop a conversation?").await;
    assert!(answer[0].contains("/end"), "{answer:?}");
    assert!(!answer[0].starts_with("A: [1]"), "{answer:?}");
    assert!(
        answer[0].contains("user-guide.md#Stopping a conversation"),
        "{answer:?}"
    );
    let (by, why) = last_answer(&h).await;
    assert_eq!(by, crate::agent::trace::By::Floor);
    assert_eq!(
        why.as_deref(),
        Some("the model's answer said nothing beyond its citations")
    );
}

/// "thanks!" after an answer rates it solved and is no new question; a greeting is greeted,
/// not searched ("I found nothing in the knowledge base about this"); thanks with a
/// question is a question.
#[tokio::test]
async fn thanks_rate_the_answer_and_a_greeting_is_no_question() {
    let h = Harness::new(ModelRouter::none(), sample_kb()).await;
    h.ask("How do I stop a conversation?").await;
    let thanks = h.ask("thanks!").await;
    assert_eq!(thanks, ["Glad it helped! Ask me anything else here."]);
    let again = h.ask("Thank you").await;
    assert_eq!(again, ["You're welcome! Ask me anything else here."]);
    let hello = h.ask("hello").await;
    assert!(
        hello[0].starts_with("Hello! What can I help you with?"),
        "{hello:?}"
    );
    let tickets = h.tickets().await;
    assert_eq!(tickets.len(), 1, "no ticket for thanks or a greeting");
    assert_eq!(tickets[0].feedback.as_deref(), Some("solved"));
    // thanks that take the answer back are no rating
    for not_thanks in [
        "Thanks, but it still doesn't work",
        "ありがとう、でもまだできません",
    ] {
        assert!(!crate::i18n::is_thanks(not_thanks), "{not_thanks}");
    }
    let asked = h.ask("Thanks, but how do I export submissions?").await;
    assert!(asked[0].contains("Exporting"), "{asked:?}");
    // handed over as /ask: the same
    let handed = h
        .send(Body::Command {
            name: "ask".into(),
            args: "thanks".into(),
        })
        .await;
    assert_eq!(handed, ["You're welcome! Ask me anything else here."]);
    // in Japanese
    h.ask("会話を途中でやめるには？").await;
    let arigato = h.ask("ありがとうございます！").await;
    assert_eq!(
        arigato,
        ["お役に立ててよかったです。ほかにも質問があればどうぞ。"]
    );
}

/// Each question is answered in the language it is written in, whatever the conversation
/// speaks: an English question in a Japanese conversation gets English words around its
/// English passage, and its rating is thanked in English. A word alone (a product's name)
/// says nothing, so the conversation's language stays.
#[tokio::test]
async fn a_question_is_answered_in_the_language_it_is_written_in() {
    let h = Harness::new(ModelRouter::none(), sample_kb()).await;
    h.ask("パスワードを忘れました").await;
    assert_eq!(last_options_prompt(&h), "この回答で解決しましたか？");
    let en = h.ask("How do I change an answer in a sign-up form?").await;
    assert!(en[0].contains("Sources:\n[1] en/user-guide.md"), "{en:?}");
    assert_eq!(last_options_prompt(&h), "Did this answer your question?");
    let thanks = h.ask("Thanks, that worked").await;
    assert!(thanks[0].starts_with("Glad it helped"), "{thanks:?}");
    let word = h.ask("zyxwv").await;
    assert!(word[0].contains("見つかりません"), "{word:?}");
    assert_eq!(
        h.outbox.last_options().map(|o| o
            .options
            .iter()
            .map(|i| i.label.clone())
            .collect::<Vec<_>>()),
        Some(vec!["担当者と話す".to_string()])
    );
}

/// After "a person will get back to you here", what the user wrote next ("hello? anyone?",
/// a detail for the team) got "I found nothing in the knowledge base" and the human button
/// again. While the team has the request, a message the knowledge base does not answer is
/// added to it (a notice to the team) and the user told so; a question it answers is
/// still answered.
#[tokio::test]
async fn after_a_handoff_what_the_user_adds_reaches_the_team() {
    let h = Harness::new(ModelRouter::none(), sample_kb()).await;
    h.ask("How do I stop a conversation?").await;
    h.choose(&["human"]).await;
    assert_eq!(h.admin.notices().len(), 1);
    for added in ["hello? anyone?", "My account name is zyxwv42"] {
        let reply = h.ask(added).await;
        assert!(
            reply[0].contains("added this to your request"),
            "{added}: {reply:?}"
        );
        assert!(
            h.outbox.last_options().is_none(),
            "{added}: no button again"
        );
        let notice = h.admin.notices().last().cloned().expect("a notice");
        assert_eq!(notice.kind, "handoff");
        assert!(notice.body.contains(added), "{}", notice.body);
        assert_eq!(
            notice.actions,
            vec![crate::admin::AdminActionKind::TakeOver]
        );
    }
    assert_eq!(h.admin.notices().len(), 3);
    let answered = h.ask("How do I change an answer in a sign-up form?").await;
    assert!(answered[0].contains("Changing an answer"), "{answered:?}");
    assert_eq!(h.admin.notices().len(), 3);
    let reply = h.ask("ありがとう").await;
    assert!(!reply[0].contains("added"), "{reply:?}");
}

/// 「解決しました」 and 「いいえ、まだです」 typed at "Did this answer your question?" were
/// searched as new questions ("I found nothing"); only the buttons' exact labels counted.
/// A short typed answer rates the answer; after "Not solved" what follows is the detail
/// asked for, not another rating; "yes" to "Would you like to ask a person?" asks one.
#[tokio::test]
async fn a_rating_typed_in_words_is_the_rating() {
    for (question, said, feedback) in [
        ("How do I stop a conversation?", "It worked", "solved"),
        ("会話を途中でやめるには？", "解決しました", "solved"),
        (
            "How do I stop a conversation?",
            "No, it still doesn't work",
            "not_solved",
        ),
        ("会話を途中でやめるには？", "いいえ、まだです", "not_solved"),
        ("会話を途中でやめるには？", "ダメでした", "not_solved"),
        (
            "How do I stop a conversation?",
            "Can I talk to a person?",
            "human",
        ),
    ] {
        let h = Harness::new(ModelRouter::none(), sample_kb()).await;
        h.ask(question).await;
        let reply = h.ask(said).await;
        let tickets = h.tickets().await;
        assert_eq!(tickets.len(), 1, "{said}: {reply:?}");
        assert_eq!(tickets[0].feedback.as_deref(), Some(feedback), "{said}");
        if feedback == "not_solved" {
            // the detail that follows is the detail, however it is put
            h.ask("まだエラーが出ます").await;
            let tickets = h.tickets().await;
            assert_eq!(tickets.len(), 2, "{said}");
            assert!(tickets[1].question.contains("(not solved)"), "{said}");
        }
    }
    // a new question that says "no" is a question
    let h = Harness::new(ModelRouter::none(), sample_kb()).await;
    h.ask("How do I stop a conversation?").await;
    h.ask("Is there no way to export submissions?").await;
    assert_eq!(h.tickets().await.len(), 2);
    // "Would you like to ask a person?" after nothing was found
    for yes in ["yes", "はい、お願いします"] {
        let h = Harness::new(ModelRouter::none(), sample_kb()).await;
        h.ask("zyxwv quantum flux capacitor").await;
        let reply = h.ask(yes).await;
        assert_eq!(h.admin.notices().len(), 1, "{yes}: {reply:?}");
        assert_eq!(h.tickets().await.len(), 1, "{yes}");
    }
}

/// "??" and an emoji were searched in the knowledge base ("I found nothing…" and a ticket);
/// 👍 after an answer is thanks, so the answer is rated solved.
#[tokio::test]
async fn signs_without_words_are_no_question_and_a_thumbs_up_thanks() {
    let h = Harness::new(ModelRouter::none(), sample_kb()).await;
    for sign in ["??", "…", "🤔"] {
        let reply = h.ask(sign).await;
        assert!(
            reply[0].starts_with("What can I help you with?"),
            "{sign}: {reply:?}"
        );
    }
    assert!(h.tickets().await.is_empty());
    h.ask("How do I stop a conversation?").await;
    let thanked = h.ask("👍").await;
    assert!(thanked[0].starts_with("Glad it helped"), "{thanked:?}");
    assert_eq!(h.tickets().await[0].feedback.as_deref(), Some("solved"));
}

/// "Can I talk to a human?" as a first message got the guide's "Starting a conversation".
/// Asked for a person, the help-desk asks what it is about and passes that to the team.
#[tokio::test]
async fn asked_for_a_person_the_help_desk_passes_the_request_on() {
    for (ask, about) in [
        ("Can I talk to a human?", "My contract renewal is wrong"),
        ("担当者と話したいです", "契約更新の内容が間違っています"),
    ] {
        let h = Harness::new(ModelRouter::none(), sample_kb()).await;
        let reply = h.ask(ask).await;
        assert!(
            reply[0].contains("pass it to the team") || reply[0].contains("担当者に伝え"),
            "{ask}: {reply:?}"
        );
        assert!(h.tickets().await.is_empty(), "{ask}: no search");
        let passed = h.ask(about).await;
        assert!(
            passed[0].contains("added this to your request")
                || passed[0].contains("ご依頼に追記しました"),
            "{ask}: {passed:?}"
        );
        let notice = h.admin.notices().last().cloned().expect("a notice");
        assert!(notice.body.contains(about), "{}", notice.body);
    }
    // a question about the staff of a form is a question
    assert!(!super::wants_a_person(
        "How do I add a staff member to a form?"
    ));
}

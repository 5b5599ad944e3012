//! The assistant with a model still hands work to the flows that do it: by the code for
//! what its words say, by the model's tools for the rest; small talk stays with the model.

use crate::flows::interview::form::Form;
use crate::flows::reading::catalogue::Catalogue;
use crate::flows::{FlowConfig, builtin};
use crate::kb::KnowledgeBase;
use crate::llm::scripted::ScriptedModel;
use crate::llm::{ChatRequest, ChatResponse, ModelRouter};
use crate::testing::{FlowHarness, Place};
use std::sync::Arc;

/// The assistant's own calls: the last user message of each.
fn asked(model: &ScriptedModel) -> Vec<String> {
    model
        .requests()
        .iter()
        .map(|r| r.last_user_text().to_string())
        .collect()
}

/// A bot with every flow, the assistant's model answering `reply` (the other agents have
/// none: they run by their floors).
async fn bot(
    reply: impl Fn(&ChatRequest) -> ChatResponse + Send + Sync + 'static,
) -> (FlowHarness, ScriptedModel) {
    bot_with(ScriptedModel::repeating(reply)).await
}

/// A bot with every flow, `model` the assistant's, its language chosen.
async fn bot_with(model: ScriptedModel) -> (FlowHarness, ScriptedModel) {
    let (harness, model) = opened(model).await;
    harness.choose(&["en"]).await;
    (harness, model)
}

/// A bot with every flow, `model` the assistant's, its language question asked.
async fn opened(model: ScriptedModel) -> (FlowHarness, ScriptedModel) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../config");
    let config = FlowConfig {
        forms: vec![
            Form::parse(
                "engineer",
                include_str!("../../../../config/forms/engineer.toml"),
            )
            .expect("form"),
        ],
        kb: Some(Arc::new(
            KnowledgeBase::open(format!("{root}/kb")).expect("kb"),
        )),
        catalogue: Some(Arc::new(
            Catalogue::parse(include_str!("../../../../config/books.toml")).expect("books"),
        )),
        ..Default::default()
    };
    let models = ModelRouter::new(None).with_agent(super::ID, Arc::new(model.clone()));
    let harness = FlowHarness::new(
        "sqlite::memory:",
        builtin(&config),
        models,
        Place::console(super::ID),
    )
    .await;
    harness.open().await;
    (harness, model)
}

/// What the user says, the flow that takes it, and whether the replies show it did.
type Case = (&'static str, &'static str, fn(&str) -> bool);

async fn flow_now(h: &FlowHarness) -> String {
    h.active().await.map(|s| s.flow).unwrap_or_default()
}

#[tokio::test]
async fn what_the_words_say_goes_to_its_flow_without_the_model() {
    let cases: [Case; 10] = [
        ("I want to apply for the engineer job", "interview", |t| {
            t.contains("Which country do you live in?")
        }),
        ("I'm reading Kokoro", "reading", |t| t.contains("Kokoro")),
        // a wish to talk about a book not named: the companion asks which
        ("本の感想を書きたい", "reading", |t| {
            t.contains("本")
        }),
        ("I want to write my impressions of a book", "reading", |t| {
            t.contains("book")
        }),
        // recommendations answer once: the assistant's conversation goes on
        ("Can you recommend a good book?", super::ID, |t| {
            t.starts_with("Books for you:")
        }),
        // a wish for a book, or for the books there are (the help-desk found nothing)
        ("I want to read a book", super::ID, |t| {
            t.starts_with("Books for you:")
        }),
        ("What books do you have?", super::ID, |t| {
            t.starts_with("Books for you:")
        }),
        ("どんな本がありますか？", super::ID, |t| {
            t.contains("あなたへのおすすめ")
        }),
        // a request the knowledge base answers: cited, not imagined
        ("How do I stop a conversation halfway?", "helpdesk", |t| {
            t.contains("/end") && t.contains("user-guide.md")
        }),
        ("会話を途中でやめるには？", "helpdesk", |t| {
            t.contains("/end") && t.contains("user-guide.md")
        }),
    ];
    for (said, flow, shows) in cases {
        let (h, model) = bot(|_| ChatResponse::text("MODEL CHATTER")).await;
        let replies = h.say(said).await.join("\n");
        assert!(shows(&replies), "{said}: {replies}");
        assert!(!replies.contains("MODEL CHATTER"), "{said}: {replies}");
        assert_eq!(flow_now(&h).await, flow, "{said}");
        assert!(asked(&model).is_empty(), "{said}: the model was asked");
    }
}

/// The language question answered by typing a language, not pressing it: the language
/// is set and said, nothing is searched, no model is asked.
#[tokio::test]
async fn the_language_is_chosen_by_typing_it() {
    let cases = [
        ("English", "let's talk in English"),
        ("english", "let's talk in English"),
        ("日本語", "では日本語で話しましょう"),
        ("Japanese", "では日本語で話しましょう"),
        ("英語", "let's talk in English"),
        ("にほんご", "では日本語で話しましょう"),
        ("日本語でお願いします", "では日本語で話しましょう"),
        ("In English, please.", "let's talk in English"),
    ];
    for (said, answer) in cases {
        let (h, model) = opened(ScriptedModel::repeating(|_| {
            ChatResponse::text("MODEL CHATTER")
        }))
        .await;
        let replies = h.say(said).await.join("\n");
        assert!(replies.contains(answer), "{said}: {replies}");
        assert_eq!(flow_now(&h).await, super::ID, "{said}");
        assert!(asked(&model).is_empty(), "{said}: the model was asked");
        let lang = if answer.contains("English") {
            "en"
        } else {
            "ja"
        };
        let session = h.active().await.expect("a session");
        assert_eq!(session.language.as_deref(), Some(lang), "{said}");
    }
    // a message that only mentions a language is a message
    let (h, _) = opened(ScriptedModel::repeating(|_| ChatResponse::text("Sure."))).await;
    let replies = h
        .say("Can you translate this into English?")
        .await
        .join("\n");
    assert!(replies.contains("Sure."), "{replies}");
}

/// Applying goes to the interview from the help-desk as from the assistant; an update
/// "applied" or an "application" that crashes is a question, never an application.
#[tokio::test]
async fn an_application_goes_to_the_interview_from_the_help_desk_too() {
    let cases = [
        ("I want to apply", true),
        ("Can I apply for the engineer position?", true),
        ("応募したいです", true),
        ("How do I apply the update?", false),
        ("The application crashes when I upload a file", false),
        ("How do I stop the interview halfway?", false),
        ("How long is the interview?", false),
        ("応募を途中でやめるには？", false),
    ];
    for (said, applies) in cases {
        let (h, _) = bot(|_| ChatResponse::text("MODEL CHATTER")).await;
        h.say("How do I stop a conversation halfway?").await;
        assert_eq!(flow_now(&h).await, "helpdesk");
        let replies = h.say(said).await.join("\n");
        let now = flow_now(&h).await;
        assert_eq!(now == "interview", applies, "{said}: {now}: {replies}");
        // the assistant itself reads the words the same way
        let (h, _) = bot(|_| ChatResponse::text("MODEL CHATTER")).await;
        let replies = h.say(said).await.join("\n");
        let now = flow_now(&h).await;
        assert_eq!(now == "interview", applies, "{said}: {now}: {replies}");
    }
}

/// A flow started by its command goes on in the language of the conversation it
/// replaces: the interview does not ask for it again; Japanese in the command's words
/// still says Japanese.
#[tokio::test]
async fn a_flow_started_by_command_keeps_the_conversations_language() {
    use crate::message::Body;
    let command = |name: &str, args: &str| Body::Command {
        name: name.into(),
        args: args.into(),
    };
    let (h, _) = opened(ScriptedModel::repeating(|_| ChatResponse::text("…"))).await;
    h.choose(&["ja"]).await;
    let replies = h.send(command("interview", "")).await.join("\n");
    assert!(
        replies.contains("お住まいの国を教えてください"),
        "{replies}"
    );
    assert!(!replies.contains("Which language"), "{replies}");
    let (h, _) = opened(ScriptedModel::repeating(|_| ChatResponse::text("…"))).await;
    h.choose(&["en"]).await;
    let replies = h.send(command("reading", "start Kokoro")).await.join("\n");
    assert!(replies.contains("«Kokoro»"), "{replies}");
    let replies = h.send(command("reading", "start こころ")).await.join("\n");
    assert!(replies.contains("『こころ』"), "{replies}");
}

/// Recommendations answer once: what the user says next goes where its words say, not
/// to the same list again.
#[tokio::test]
async fn after_recommendations_the_next_message_is_routed_again() {
    for (lang, ask, then, shows) in [
        (
            "en",
            "Can you recommend a good book?",
            "I'm reading Kokoro",
            "«Kokoro»",
        ),
        (
            "ja",
            "おすすめの本を教えて",
            "吾輩は猫であるを読んでいます",
            "『吾輩は猫である』",
        ),
    ] {
        let (h, _) = opened(ScriptedModel::repeating(|_| {
            ChatResponse::text("MODEL CHATTER")
        }))
        .await;
        h.choose(&[lang]).await;
        let listed = h.say(ask).await.join("\n");
        assert!(
            listed.contains("Books for you") || listed.contains("あなたへのおすすめ"),
            "{listed}"
        );
        let replies = h.say(then).await.join("\n");
        assert!(replies.contains(shows), "{then}: {replies}");
        assert!(
            !replies.contains("Books for you") && !replies.contains("あなたへのおすすめ"),
            "{then}: {replies}"
        );
        assert_eq!(flow_now(&h).await, "reading", "{then}");
    }
}

/// A command of another conversation (/insights, /mode outside a reading one) says
/// where it works instead of "unknown command".
#[tokio::test]
async fn a_command_of_another_conversation_says_where_it_works() {
    use crate::message::Body;
    for (lang, says) in [
        ("en", "works inside a conversation started with "),
        ("ja", "で始めた会話の中で使えます"),
    ] {
        let (h, _) = opened(ScriptedModel::repeating(|_| ChatResponse::text("…"))).await;
        h.choose(&[lang]).await;
        for name in ["insights", "mode", "status"] {
            let replies = h
                .send(Body::Command {
                    name: name.into(),
                    args: String::new(),
                })
                .await
                .join("\n");
            assert!(
                replies.contains(says) && replies.contains("/reading"),
                "/{name}: {replies}"
            );
            // the interview's /status too
            assert_eq!(
                replies.contains("/interview"),
                name == "status",
                "{replies}"
            );
        }
        // a command no flow knows is still unknown
        let replies = h
            .send(Body::Command {
                name: "frobnicate".into(),
                args: String::new(),
            })
            .await
            .join("\n");
        assert!(
            replies.contains("Unknown command") || replies.contains("コマンドはありません"),
            "{replies}"
        );
    }
}

/// A model too slow for the turn is said to be slow; one that cannot be reached, to be
/// out of reach.
#[tokio::test]
async fn a_slow_model_is_not_called_unreachable() {
    use crate::llm::ModelError;
    use crate::llm::scripted::Step;
    // the model's failure, and what the reply says
    type Failure = (fn() -> ModelError, &'static str);
    let cases: [Failure; 3] = [
        (|| ModelError::BudgetSpent, "taking too long"),
        (
            || ModelError::Timeout(std::time::Duration::from_secs(60)),
            "taking too long",
        ),
        (|| ModelError::Connect("refused".into()), "can't reach"),
    ];
    for (error, said) in cases {
        let (h, _) = bot_with(ScriptedModel::new([Step::Fail(error())])).await;
        let replies = h.say("Tell me a joke").await.join("\n");
        assert!(replies.contains(said), "{replies}");
    }
}

#[tokio::test]
async fn small_talk_stays_with_the_model_and_its_tools_route_the_rest() {
    // small talk, and a question with one word of the guide in it ("name")
    for said in ["Tell me a joke", "What's your name?"] {
        let (h, model) = bot(|_| ChatResponse::text("I'm Kaiwa.")).await;
        let replies = h.say(said).await.join("\n");
        assert!(replies.contains("I'm Kaiwa."), "{said}: {replies}");
        assert_eq!(flow_now(&h).await, super::ID, "{said}");
        assert_eq!(asked(&model), [said]);
        let tools: Vec<String> = model.requests()[0]
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect();
        assert_eq!(tools, ["start_interview", "start_reading", "ask_helpdesk"]);
    }
    // a model that answers nothing when offered tools is asked again without them
    let (h, model) = bot(|r| match r.tools.is_empty() {
        true => ChatResponse::text("Hi there!"),
        false => ChatResponse::text(""),
    })
    .await;
    let replies = h.say("Hello!").await.join("\n");
    assert!(replies.contains("Hi there!"), "{replies}");
    assert_eq!(model.requests().len(), 2);
    // and one that writes its call as text (llama.cpp's function-calling format)
    let (h, model) = bot(|r| match r.tools.is_empty() {
        true => ChatResponse::text("Paris."),
        false => ChatResponse::text("functions.ask_helpdesk:"),
    })
    .await;
    let replies = h.say("What is the capital of France?").await.join("\n");
    assert!(
        replies.contains("Paris.") && !replies.contains("functions."),
        "{replies}"
    );
    assert_eq!(model.requests().len(), 2);
    // what the words missed, the model's tools send on
    let tool = |name: &'static str, args: serde_json::Value| {
        move |r: &ChatRequest| {
            if r.messages
                .iter()
                .any(|m| matches!(m, crate::llm::ChatMessage::Tool { .. }))
            {
                ChatResponse::text("(after the tool)")
            } else {
                ChatResponse::tool_call(name, args.clone())
            }
        }
    };
    let (h, _) = bot(tool("start_interview", serde_json::json!({}))).await;
    let replies = h.say("I'd like to work for you").await.join("\n");
    assert!(
        replies.contains("Which country do you live in?"),
        "{replies}"
    );
    assert_eq!(flow_now(&h).await, "interview");
    let (h, _) = bot(tool(
        "start_reading",
        serde_json::json!({"title": "Kokoro"}),
    ))
    .await;
    let replies = h.say("Natsume's novel about a teacher").await.join("\n");
    assert!(replies.contains("Kokoro"), "{replies}");
    assert_eq!(flow_now(&h).await, "reading");
    let (h, _) = bot(tool("ask_helpdesk", serde_json::json!({}))).await;
    let replies = h.say("Stopping a conversation halfway").await.join("\n");
    assert!(replies.contains("user-guide.md"), "{replies}");
    assert_eq!(flow_now(&h).await, "helpdesk");
    // a greeting is never the help-desk's, whatever the model calls
    let (h, model) = bot(tool("ask_helpdesk", serde_json::json!({}))).await;
    let replies = h.say("Hello!").await.join("\n");
    assert!(replies.contains("(after the tool)"), "{replies}");
    assert_eq!(flow_now(&h).await, super::ID);
    assert_eq!(
        model.requests().len(),
        2,
        "the refusal went back to the model"
    );
}

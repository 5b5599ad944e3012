//! The interview's side of the traces, from the outside: an applicant on the fake Telegram
//! with a scripted model whose Interviewer first drafts a question QuickCheck must stop and
//! whose Reviewer finds one answer vague; the application's page in the console (headless
//! Chromium) shows, for that question, why the follow-up was asked and what QuickCheck
//! stopped.

use crate::console::{TOKEN, page_with, run_with_model, signed_in_browser};
use kaiwa_tests::fake_openai::{FakeOpenAi, Reply};
use kaiwa_tests::fake_telegram::{Chat, FakeTelegram};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The field a request of the Interviewer or the Reviewer is about (`id="…"` in its
/// system prompt).
fn field_of(req: &serde_json::Value) -> String {
    req["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .split("id=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
        .to_string()
}

/// The Interviewer drafts a question about marital status first (QuickCheck's rules stop
/// it), then one naming the field; the Reviewer passes every answer but "vague"; every
/// other agent's call fails (they answer by their floors).
fn interview_model(req: &serde_json::Value) -> Reply {
    let tools = req["tools"].to_string();
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    let field = field_of(req);
    if tools.contains("\"ask\"") && !tools.contains("set_language") {
        let question = if messages.iter().any(|m| m["role"] == "tool") {
            format!("[model] Tell me about {field}?")
        } else {
            "Before that: are you married?".to_string()
        };
        return Reply::tool_call(
            "ask",
            serde_json::json!({"field_id": field, "question": question}),
        );
    }
    if tools.contains("\"review\"") {
        let said = messages
            .iter()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_str())
            .collect::<Vec<_>>()
            .join("\n");
        return if said.contains("vague") {
            Reply::tool_call(
                "review",
                serde_json::json!({"passed": false, "missing_facts": ["reason"], "feedback": "too vague"}),
            )
        } else {
            Reply::tool_call("review", serde_json::json!({"passed": true}))
        };
    }
    Reply::status(500, r#"{"error":{"message":"not scripted"}}"#)
}

/// What the applicant answers to a question about `field`.
fn answer_for(field: &str) -> &'static str {
    match field {
        "full_name" => "Hanako Yamada",
        "email" => "hanako@example.com",
        "experience_years" => "5",
        "skills" => "Rust and PostgreSQL",
        "motivation" => "I want to build developer tools",
        "work_style" => "Remote",
        "start_date" => "2026-04-01",
        "portfolio" => "https://github.com/hanako",
        _ => "yes",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_application_page_shows_why_a_follow_up_was_asked_and_what_quick_check_stopped() {
    let model = FakeOpenAi::serve(Arc::new(interview_model))
        .await
        .expect("the model");
    let telegram = FakeTelegram::start(TOKEN).await;
    let dir = tempfile::tempdir().expect("tempdir");
    // the agents whose calls fail must not open the breaker for the scripted ones
    let (mut bot, base) =
        run_with_model(dir.path(), &telegram, &model, "breaker_failures = 100000\n").await;

    const APPLICANT: i64 = 777;
    let chat = Chat::private(APPLICANT);
    telegram.send_text(chat, APPLICANT, "/start");
    telegram.wait_texts(chat, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // the Greeter's floor: the language, then the country
    let keyboard = telegram.last_keyboard(chat).expect("the languages");
    let message = keyboard.message_id.unwrap_or_default();
    let english = telegram.button_on(chat, message, "English");
    let before = telegram.texts_in(chat).len();
    telegram.press(chat, APPLICANT, message, &english);
    telegram.wait_texts(chat, before + 1).await;
    let mut vague_said = false;
    let mut said = telegram.texts_in(chat).len();
    telegram.send_text(chat, APPLICANT, "Japan");
    let started = Instant::now();
    loop {
        telegram.wait_texts(chat, said + 1).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let texts = telegram.texts_in(chat);
        let last = texts.last().cloned().unwrap_or_default();
        assert!(
            !texts.iter().any(|t| t.contains("married")),
            "QuickCheck let a prohibited question through: {texts:#?}"
        );
        if last.contains("submitted") || texts.iter().any(|t| t.contains("submitted")) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the interview did not end: {texts:#?}"
        );
        said = texts.len();
        let field = last
            .split("[model] Tell me about ")
            .nth(1)
            .and_then(|rest| rest.split('?').next())
            .unwrap_or_default()
            .to_string();
        let answer = if field == "motivation" && !vague_said {
            vague_said = true;
            "vague"
        } else if field.is_empty() {
            // a confirmation or a choice the floor asks: accept it
            "yes"
        } else {
            answer_for(&field)
        };
        telegram.send_text(chat, APPLICANT, answer);
    }
    assert!(vague_said, "the motivation was asked");

    let browser = signed_in_browser(&telegram).await;
    let client = &browser.client;
    client
        .goto(&format!("{base}/applications"))
        .await
        .expect("the applications");
    page_with(client, "audit").await;
    let rows = client
        .find_all(fantoccini::Locator::Css("td a[href^='/applications/']"))
        .await
        .expect("the rows");
    assert_eq!(
        rows.len(),
        1,
        "one application: {}",
        page_with(client, "audit").await
    );
    rows[0].click().await.expect("open it");
    let page = page_with(client, "Follow-ups and stopped questions").await;
    let why = client
        .find(fantoccini::Locator::Css("#why-motivation"))
        .await
        .unwrap_or_else(|e| panic!("no follow-up shown for the motivation: {e}\n{page}"))
        .text()
        .await
        .expect("text");
    assert!(why.contains("Follow-up: missing reason"), "{why}");
    assert!(why.contains("too vague"), "{why}");
    assert!(why.contains("QuickCheck stopped"), "{why}");
    assert!(why.contains("are you married?"), "{why}");
    assert!(why.contains("marital status"), "the finding: {why}");
    let _ = bot.start_kill();
    let _ = bot.wait().await;
}

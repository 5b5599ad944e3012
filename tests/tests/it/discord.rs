//! The Discord adapter end to end: the real serenity client (gateway and REST) against the
//! fake Discord on 127.0.0.1, with the real orchestrator, flows and SQLite store, started as
//! `kaiwa run` starts them (`kaiwa::Kaiwa`).

use crate::common;

use kaiwa_core::llm::ModelRouter;
use kaiwa_core::llm::openai::{OpenAiClient, OpenAiConfig};
use kaiwa_core::message::Platform;
use kaiwa_core::store::Store;
use kaiwa_tests::fake_discord::{FakeDiscord, GUILD, MessageFailure, dm_channel_of};
use kaiwa_tests::fake_openai::{FakeOpenAi, Reply};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const TOKEN: &str = "discord-secret-token";
const ADMIN: u64 = 900;
const ADMIN_USER: u64 = 77;
const HELPDESK: u64 = 10;
const DM: u64 = 20;
const READING: u64 = 30;

struct Bot {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    store: Arc<dyn Store>,
    orchestrator: Arc<kaiwa_core::orchestrator::Orchestrator>,
    _dir: tempfile::TempDir,
}

impl Bot {
    async fn stop(self) {
        self.stop_keeping_the_database().await;
    }

    /// Stops the bot; its database stays for the next start.
    async fn stop_keeping_the_database(mut self) -> tempfile::TempDir {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(20), &mut self.task).await;
        self.store.close().await;
        self._dir
    }
}

async fn start(fake: &FakeDiscord, form: &str, models: ModelRouter) -> Bot {
    let dir = tempfile::tempdir().expect("tempdir");
    start_on(fake, form, models, dir).await
}

/// Starts the bot on the database in `dir`.
async fn start_on(
    fake: &FakeDiscord,
    form: &str,
    models: ModelRouter,
    dir: tempfile::TempDir,
) -> Bot {
    let db = format!("sqlite://{}", dir.path().join("kaiwa.db").display());
    let sections = format!(
        "[discord]\napi_proxy = \"{}\"\nadmin_channel_id = {ADMIN}\nadmins = [{ADMIN_USER}]\n\
         helpdesk_channel_ids = [{HELPDESK}]\nreading_channel_ids = [{READING}]\n\
         dm_flow = \"interview\"\ndm_flow_arg = \"{form}\"\n",
        fake.api_proxy()
    );
    let config = dir.path().join("config");
    let kaiwa = common::kaiwa(&config, &sections, &db, (None, Some(TOKEN)), models).await;
    let store = kaiwa.store().clone();
    let orchestrator = kaiwa.orchestrator().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let stopped = async {
            let _ = stopped.await;
        };
        if let Err(e) = kaiwa.run_until(stopped).await {
            eprintln!("Kaiwa stopped: {e}");
        }
    });
    fake.wait_ready().await;
    Bot {
        stop: Some(stop),
        task,
        store,
        orchestrator,
        _dir: dir,
    }
}

/// New texts in `channel` after `before`, once the bot has gone quiet.
async fn replies(fake: &FakeDiscord, channel: u64, before: usize) -> Vec<String> {
    fake.wait_texts(channel, before + 1).await;
    kaiwa_tests::once_quiet(|| fake.texts_in(channel), before).await
}

async fn say(fake: &FakeDiscord, channel: u64, user: u64, text: &str) -> Vec<String> {
    let before = fake.texts_in(channel).len();
    let guild = (channel != DM).then_some(GUILD);
    fake.user_message(channel, guild, user, text);
    replies(fake, channel, before).await
}

/// A new question in a help-desk or reading `channel`: the thread it opened.
async fn open_thread(fake: &FakeDiscord, channel: u64, user: u64, text: &str) -> u64 {
    fake.user_message(channel, Some(GUILD), user, text);
    fake.wait_for("a thread", Duration::from_secs(20), |f| {
        !f.threads().is_empty()
    })
    .await;
    fake.threads()[0].0
}

/// The latest message with components in `channel`: (message id, components).
fn last_components(fake: &FakeDiscord, channel: u64) -> (u64, Value) {
    fake.messages_in(channel)
        .into_iter()
        .rev()
        .find(|m| m["components"].as_array().is_some_and(|c| !c.is_empty()))
        .map(|m| {
            (
                m["_fake_id"].as_u64().unwrap_or_default(),
                m["components"].clone(),
            )
        })
        .expect("a message with components")
}

fn button(fake: &FakeDiscord, channel: u64, label: &str) -> (u64, String) {
    let (message, rows) = last_components(fake, channel);
    let id = rows
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|row| row["components"].as_array().cloned().unwrap_or_default())
        .find(|b| b["label"].as_str().is_some_and(|l| l.contains(label)))
        .and_then(|b| b["custom_id"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no button {label:?} in {rows}"));
    (message, id)
}

async fn tap(fake: &FakeDiscord, channel: u64, user: u64, label: &str) -> Vec<String> {
    let (message, id) = button(fake, channel, label);
    let before = fake.texts_in(channel).len();
    let guild = (channel != DM).then_some(GUILD);
    fake.press(channel, guild, user, message, &id);
    replies(fake, channel, before).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_help_desk_question_opens_a_thread_answered_with_citations_and_a_handoff_reaches_the_admins()
 {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    // registered one by one (nothing else of the application's is overwritten)
    let created: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/commands"))
        .collect();
    assert!(
        !fake
            .requests()
            .iter()
            .any(|r| r.method == "PUT" && r.path.ends_with("/commands")),
        "no bulk overwrite"
    );
    let names = fake.command_names();
    for expected in ["start", "help", "interview", "ask"] {
        assert!(names.iter().any(|n| n == expected), "{names:?}");
    }
    assert_eq!(created.len(), names.len());
    assert!(
        created[0].body["description_localizations"]["ja"].is_string(),
        "{}",
        created[0].body
    );

    fake.user_message(HELPDESK, Some(GUILD), 41, "How do I stop a conversation?");
    fake.wait_for("a thread", Duration::from_secs(20), |f| {
        !f.threads().is_empty()
    })
    .await;
    let (thread, parent, name) = fake.threads()[0].clone();
    assert_eq!(parent, HELPDESK);
    assert_eq!(name, "How do I stop a conversation?");
    let answer = replies(&fake, thread, 0).await;
    assert!(
        answer[0].contains("Sources:\n[1] en/user-guide.md#Stopping a conversation"),
        "{answer:?}"
    );
    assert!(
        fake.texts_in(HELPDESK).is_empty(),
        "nothing in the channel itself"
    );
    let (_, rows) = last_components(&fake, thread);
    assert_eq!(rows[0]["components"][0]["type"], 2, "feedback buttons");

    // a follow-up inside the thread continues the session there
    let more = say(&fake, thread, 41, "How do I export submissions?").await;
    assert!(more[0].contains("Exporting submissions"), "{more:?}");
    assert_eq!(fake.threads().len(), 1, "no second thread");

    tap(&fake, thread, 41, "No").await;
    tap(&fake, thread, 41, "human").await;
    fake.wait_for("the handoff embed", Duration::from_secs(20), |f| {
        !f.messages_in(ADMIN).is_empty()
    })
    .await;
    let embed = &fake.messages_in(ADMIN)[0]["embeds"][0];
    assert!(
        embed["title"]
            .as_str()
            .is_some_and(|t| t.contains("handoff")),
        "{embed}"
    );
    assert!(
        embed["description"]
            .as_str()
            .is_some_and(|d| d.contains("How do I export submissions?")),
        "{embed}"
    );
    // every component press was acknowledged by updating its message, components disabled
    let updates: Vec<_> = fake.callbacks().into_iter().filter(|c| c.1 == 7).collect();
    assert_eq!(updates.len(), 2);
    assert_eq!(
        updates[0].2["components"][0]["components"][0]["disabled"],
        true
    );
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_dm_interview_runs_through_buttons_and_text_with_the_audit_embed_for_the_admins() {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    say(&fake, DM, 51, "/start").await;
    tap(&fake, DM, 51, "English").await;
    say(&fake, DM, 51, "Japan").await;
    say(
        &fake,
        DM,
        51,
        "Hanako Yamada, you can reach me at hanako@example.com",
    )
    .await;
    say(&fake, DM, 51, "5").await;
    say(&fake, DM, 51, "Rust").await;
    say(&fake, DM, 51, "I want to build developer tools").await;
    tap(&fake, DM, 51, "Remote").await;
    say(&fake, DM, 51, "2026-04-01").await;
    let end = say(&fake, DM, 51, "https://github.com/hanako").await;
    assert!(end.iter().any(|t| t.contains("submitted")), "{end:?}");
    fake.wait_for("the audit embed", Duration::from_secs(20), |f| {
        !f.messages_in(ADMIN).is_empty()
    })
    .await;
    let embed = &fake.messages_in(ADMIN)[0]["embeds"][0];
    assert!(
        embed["title"]
            .as_str()
            .is_some_and(|t| t.contains("[audit]")),
        "{embed}"
    );
    let fields = embed["fields"].as_array().cloned().unwrap_or_default();
    assert!(
        fields
            .iter()
            .any(|f| f["name"] == "Audit" && f["value"] == "passed"),
        "{embed}"
    );
    let subs = bot.store.submissions(Some("engineer")).await.expect("subs");
    assert_eq!(subs[0].submission.values["work_style"], "remote");

    // the team rejects the application with the embed's button
    let posted = &fake.messages_in(ADMIN)[0];
    let notice = posted["_fake_id"].as_u64().expect("the embed's id");
    let buttons = posted["components"][0]["components"].clone();
    let reject = buttons
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["label"] == "Reject")
        .and_then(|b| b["custom_id"].as_str())
        .expect("a Reject button")
        .to_string();
    let outcomes = |f: &FakeDiscord| -> Vec<String> {
        f.requests()
            .into_iter()
            .filter(|r| r.method == "PATCH" && r.path.ends_with("/messages/@original"))
            .filter_map(|r| r.body["content"].as_str().map(str::to_string))
            .collect()
    };
    fake.press(ADMIN, Some(GUILD), 12_345, notice, &reject);
    fake.wait_for("a refusal", Duration::from_secs(20), |f| {
        outcomes(f).iter().any(|t| t.contains("Not allowed"))
    })
    .await;
    let applicant = fake.texts_in(DM).len();
    fake.press(ADMIN, Some(GUILD), ADMIN_USER, notice, &reject);
    fake.wait_for("the decision", Duration::from_secs(20), |f| {
        outcomes(f)
            .iter()
            .any(|t| t.contains("Rejected by discord:"))
    })
    .await;
    let told = fake.wait_texts(DM, applicant + 1).await;
    assert!(
        told.last()
            .is_some_and(|t| t.contains("will not move forward")),
        "{told:?}"
    );
    let subs = bot.store.submissions(Some("engineer")).await.expect("subs");
    assert_eq!(
        subs[0].decision.as_ref().map(|d| d.decision.as_str()),
        Some("rejected")
    );
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_select_menu_round_trip() {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "survey", ModelRouter::none()).await;
    say(&fake, DM, 61, "/start").await;
    tap(&fake, DM, 61, "English").await;
    say(&fake, DM, 61, "Japan").await;
    let (message, rows) = last_components(&fake, DM);
    let menu = &rows[0]["components"][0];
    assert_eq!(menu["type"], 3, "a select menu: {rows}");
    assert_eq!(menu["max_values"], 3);
    let custom_id = menu["custom_id"].as_str().unwrap_or_default().to_string();
    let before = fake.texts_in(DM).len();
    fake.select(DM, None, 61, message, &custom_id, &["0", "2"]);
    let confirm = replies(&fake, DM, before).await;
    assert!(
        confirm.iter().any(|t| t.contains("rust, python")),
        "{confirm:?}"
    );
    let update = fake
        .callbacks()
        .into_iter()
        .rfind(|c| c.1 == 7)
        .expect("updated");
    assert!(
        update.2["content"]
            .as_str()
            .is_some_and(|c| c.ends_with("✓ Rust, Python")),
        "{:?}",
        update.2
    );
    tap(&fake, DM, 61, "Confirm").await;
    let subs = bot.store.submissions(Some("survey")).await.expect("subs");
    assert_eq!(subs[0].submission.values["languages"], "rust, python");
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_component_gets_an_ephemeral_notice_and_changes_nothing() {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    say(&fake, DM, 71, "/start").await;
    let (old_message, english) = button(&fake, DM, "English");
    tap(&fake, DM, 71, "English").await;
    let sent = fake.texts_in(DM).len();
    fake.press(DM, None, 71, old_message, &english);
    fake.press(DM, None, 71, old_message, "someone|else");
    fake.wait_for("two ephemeral notices", Duration::from_secs(20), |f| {
        f.callbacks()
            .iter()
            .filter(|c| c.1 == 4 && c.2["flags"] == 64)
            .count()
            == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.texts_in(DM).len(), sent, "nothing else was sent");
    let next = say(&fake, DM, 71, "Japan").await;
    assert!(next.last().is_some_and(|t| t.contains("name")), "{next:?}");
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_message_create_is_processed_once() {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    say(&fake, DM, 81, "/start").await;
    tap(&fake, DM, 81, "English").await;
    let before = fake.texts_in(DM).len();
    let id = fake.user_message(DM, None, 81, "Japan");
    replies(&fake, DM, before).await;
    let after = fake.texts_in(DM).len();
    fake.repeat_message(DM, None, 81, id, "Japan");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(fake.texts_in(DM).len(), after);
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_gateway_connection_is_resumed_and_the_next_message_is_not_lost() {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    say(&fake, DM, 91, "/start").await;
    fake.drop_connection();
    // sent while the bot is reconnecting: held by the fake until it resumes
    let before = fake.texts_in(DM).len();
    fake.user_message(DM, None, 91, "2");
    let reply = replies(&fake, DM, before).await;
    assert!(
        reply.last().is_some_and(|t| t.contains("お住まいの国")),
        "answered in Japanese: {reply:?}"
    );
    assert!(fake.resumes() + fake.identifies() >= 2, "reconnected");
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_message_is_sent_after_waiting() {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    fake.rate_limit_next_message(DM);
    let replies = say(&fake, DM, 95, "/start").await;
    assert!(!replies.is_empty());
    let mut unique = replies.clone();
    unique.dedup();
    assert_eq!(unique, replies, "nothing sent twice");
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.body.get("_rate_limited").is_some()),
        "the 429 happened"
    );
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_meeting_a_500_or_a_lost_answer_arrives_once() {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    // the first reply meets a 500, the next one is created and its answer lost: both are
    // tried again, the second with the same nonce, which Discord enforces
    fake.fail_next_message(DM, MessageFailure::ServerError);
    fake.fail_next_message(DM, MessageFailure::AnswerLost);
    let replies = say(&fake, DM, 96, "/start").await;
    assert!(!replies.is_empty());
    let posts = fake.messages_in(DM);
    let mut texts: Vec<&str> = posts
        .iter()
        .map(|b| b["content"].as_str().unwrap_or_default())
        .collect();
    let all = texts.len();
    texts.dedup();
    assert_eq!(texts.len(), all, "nothing sent twice: {texts:#?}");
    assert!(
        posts
            .iter()
            .all(|b| b["enforce_nonce"] == true
                && b["nonce"].as_str().is_some_and(|n| n.len() <= 25)),
        "{posts:#?}"
    );
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_while_the_bot_was_down_is_answered_when_it_starts() {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    say(&fake, DM, 97, "/start").await;
    tap(&fake, DM, 97, "English").await;
    let dir = bot.stop_keeping_the_database().await;
    let created = |f: &FakeDiscord, method: &str| {
        f.requests()
            .iter()
            .filter(|r| r.method == method && r.path.ends_with("/commands"))
            .count()
    };
    let registered = created(&fake, "POST");
    // the applicant answers while the bot is down: the gateway will never deliver it
    let before = fake.texts_in(DM).len();
    fake.missed_message(DM, None, 97, "Japan");
    let bot = start_on(&fake, "engineer", ModelRouter::none(), dir).await;
    let answer = replies(&fake, DM, before).await;
    assert!(!answer.is_empty(), "answered after the start");
    // the commands are looked at again and, unchanged, not written again
    fake.wait_for("the commands read again", Duration::from_secs(20), |f| {
        created(f, "GET") >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        created(&fake, "POST"),
        registered,
        "no command written again"
    );
    let key = kaiwa_core::message::SessionKey {
        platform: Platform::Discord,
        chat: DM.to_string(),
        thread: String::new(),
        user: "97".into(),
    };
    let said = kaiwa_tests::session_texts(bot.store.as_ref(), &key).await;
    assert_eq!(
        said.iter().filter(|t| *t == "Japan").count(),
        1,
        "{said:#?}"
    );
    // a second start finds nothing new to answer
    let dir = bot.stop_keeping_the_database().await;
    let before = fake.texts_in(DM).len();
    let bot = start_on(&fake, "engineer", ModelRouter::none(), dir).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(fake.texts_in(DM).len(), before, "nothing answered twice");
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mydata_in_a_thread_goes_to_a_dm_and_shows_nothing_there() {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    let thread = open_thread(&fake, HELPDESK, 43, "How do I export submissions?").await;
    replies(&fake, thread, 0).await;
    let reply = say(&fake, thread, 43, "/mydata").await.join("\n");
    assert!(reply.contains("private chat"), "{reply}");
    assert!(!reply.contains("export submissions"), "{reply}");
    let dm = fake.wait_texts(dm_channel_of(43), 1).await.join("\n");
    assert!(dm.contains("export submissions"), "{dm}");
    // DMs closed to the bot: the thread is told to ask privately, and sees nothing
    fake.close_dms(43);
    let reply = say(&fake, thread, 43, "/mydata").await.join("\n");
    assert!(reply.contains("Please send it there"), "{reply}");
    assert!(!reply.contains("export submissions"), "{reply}");
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_in_429_waits_its_retry_after_and_delays_nobody_else() {
    const OTHER_DM: u64 = 21;
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    // another user's DM (the `say` helper treats channels other than DM as a server's)
    let in_other_dm = |text: &'static str| {
        let fake = &fake;
        async move {
            let before = fake.texts_in(OTHER_DM).len();
            fake.user_message(OTHER_DM, None, 99, text);
            replies(fake, OTHER_DM, before).await
        }
    };
    say(&fake, DM, 98, "/start").await;
    in_other_dm("/start").await;
    // the first channel floods while Discord answers its posts 429 (retry_after 0.8 s;
    // a post before that gets another 429)
    for _ in 0..3 {
        fake.fail_next_message(DM, MessageFailure::RateLimitedFor(800));
    }
    let before = fake.texts_in(DM).len();
    for i in 0..12 {
        fake.user_message(DM, None, 98, &format!("flood {i}"));
    }
    fake.wait_for("a 429", Duration::from_secs(10), |f| {
        f.requests()
            .iter()
            .any(|r| r.body.get("_rate_limited").is_some())
    })
    .await;
    let asked = std::time::Instant::now();
    let other = in_other_dm("/help").await;
    assert!(!other.is_empty());
    let waited = asked.elapsed();
    let flood = replies(&fake, DM, before).await;
    assert!(!flood.is_empty());
    // every post after a 429 waited its retry_after; the 429s were only the three queued
    let posts: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == format!("/channels/{DM}/messages"))
        .collect();
    let limited = posts
        .iter()
        .filter(|r| r.body.get("_rate_limited").is_some())
        .count();
    assert_eq!(
        limited, 3,
        "one waiter per route, no post before the wait is over"
    );
    for pair in posts.windows(2) {
        if pair[0].body.get("_rate_limited").is_some() {
            let gap = pair[1].at.duration_since(pair[0].at);
            assert!(gap >= Duration::from_millis(790), "retried after {gap:?}");
        }
    }
    // one notice for the flood at most (12 messages, 8 may wait)
    let notices = fake
        .texts_in(DM)
        .iter()
        .filter(|t| t.contains("still working on your earlier messages"))
        .count();
    assert!(notices <= 1, "{notices} notices");
    eprintln!("the other user's reply came after {waited:?}");
    assert!(
        waited < Duration::from_secs(2),
        "the other user waited {waited:?}"
    );
    bot.stop().await;
}

/// `paragraphs` paragraphs of ~470 characters each, joined by blank lines.
fn long_story(paragraphs: usize) -> String {
    let paragraph = |i: usize| format!("Paragraph {i}: {}", "dolor sit amet ".repeat(30));
    let long: Vec<String> = (0..paragraphs).map(paragraph).collect();
    long.join("\n\n")
}

/// A bot whose model answers `reply` to a chat in the DM; returns what the DM received.
async fn model_reply_in_dm(reply: &str) -> (Vec<String>, FakeDiscord, Bot) {
    let model = FakeOpenAi::start([Reply::text(reply)])
        .await
        .expect("model");
    let client = OpenAiClient::new(OpenAiConfig::new(model.base_url(), "fake")).expect("client");
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::new(Some(Arc::new(client)))).await;
    say(&fake, DM, 99, "/chat").await;
    let pieces = say(&fake, DM, 99, "tell me a long story").await;
    (pieces, fake, bot)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_thousand_character_reply_is_split_on_paragraphs() {
    let long = long_story(11);
    assert!(long.chars().count() > 5_000);
    let (pieces, fake, bot) = model_reply_in_dm(&long).await;
    assert_eq!(
        pieces.len(),
        3,
        "{:?}",
        pieces.iter().map(|p| p.chars().count()).collect::<Vec<_>>()
    );
    for piece in &pieces {
        assert!(piece.chars().count() <= 2000);
        assert!(
            piece.starts_with("Paragraph "),
            "cut on a paragraph: {piece:.30}"
        );
    }
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(words(&pieces.join("\n\n")), words(&long));
    assert!(
        fake.requests().iter().any(|r| r.path.ends_with("/typing")),
        "typing while the model works"
    );
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thirteen_thousand_character_reply_is_three_messages_cut_with_a_mark() {
    let long = long_story(28);
    assert!(long.chars().count() > 12_800);
    let (pieces, _fake, bot) = model_reply_in_dm(&long).await;
    assert_eq!(
        pieces.len(),
        3,
        "not 7 messages: {:?}",
        pieces
            .iter()
            .map(|p| (p.chars().count(), p.chars().take(20).collect::<String>()))
            .collect::<Vec<_>>()
    );
    assert!(pieces.iter().all(|p| p.chars().count() <= 2000));
    assert!(
        pieces[2].ends_with(kaiwa_adapters::split::CUT_MARK),
        "{:.80}",
        pieces[2]
    );
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slash_command_is_deferred_then_answered_in_the_channel() {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    let id = fake.slash(DM, None, 97, "interview", "engineer");
    let greeting = replies(&fake, DM, 0).await;
    assert!(
        greeting.iter().any(|t| t.contains("Which language")),
        "{greeting:?}"
    );
    fake.wait_for(
        "the deferred response is finished",
        Duration::from_secs(20),
        |f| {
            f.requests()
                .iter()
                .any(|r| r.method == "PATCH" && r.path.ends_with("/messages/@original"))
        },
    )
    .await;
    let deferred = fake.callbacks();
    assert_eq!(deferred.len(), 1);
    assert_eq!(
        (deferred[0].0, deferred[0].1),
        (id, 5),
        "acknowledged with a deferral"
    );
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_book_in_a_reading_channel_gets_its_own_thread() {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    fake.user_message(READING, Some(GUILD), 33, "/reading start Kokoro");
    fake.wait_for("a thread", Duration::from_secs(20), |f| {
        !f.threads().is_empty()
    })
    .await;
    let (thread, parent, name) = fake.threads()[0].clone();
    assert_eq!((parent, name.as_str()), (READING, "Kokoro"));
    let greeting = replies(&fake, thread, 0).await;
    assert!(greeting[0].contains("«Kokoro»"), "{greeting:?}");
    let records = bot
        .store
        .reading_records(Platform::Discord, "33")
        .await
        .expect("records");
    assert_eq!(records.len(), 1);
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_commands_work_only_for_admins_in_the_admin_channel() {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    say(&fake, DM, 76, "/start").await;
    let refused = say(&fake, ADMIN, 78, "/sessions").await;
    assert!(refused[0].contains("not allowed"), "{refused:?}");
    let elsewhere = say(&fake, DM, ADMIN_USER, "/sessions").await;
    assert!(elsewhere[0].contains("not allowed"), "{elsewhere:?}");
    let listed = say(&fake, ADMIN, ADMIN_USER, "/sessions").await;
    assert!(
        listed[0].contains("interview discord user 76"),
        "{listed:?}"
    );
    // plain talk in the admin channel starts nothing
    fake.user_message(ADMIN, Some(GUILD), ADMIN_USER, "hello team");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fake.texts_in(ADMIN).len(), 2);
    // the console's sign-in link: refused to others, said to be off until it is served,
    // then sent to the admin's DM (the channel only hears that it was)
    let refused = say(&fake, ADMIN, 78, "/console").await;
    assert!(refused[0].contains("not allowed"), "{refused:?}");
    let off = say(&fake, ADMIN, ADMIN_USER, "/console").await;
    assert!(off[0].contains("console is off"), "{off:?}");
    bot.orchestrator
        .for_people()
        .serve_console_at("https://console.example.com/");
    let dm = kaiwa_tests::fake_discord::dm_channel_of(ADMIN_USER);
    let told = say(&fake, ADMIN, ADMIN_USER, "/console").await;
    assert!(told[0].contains("private chat"), "{told:?}");
    assert!(!told[0].contains("/login/"), "{told:?}");
    let link = fake.wait_texts(dm, 1).await;
    assert!(
        link[0].contains("https://console.example.com/login/"),
        "{link:?}"
    );
    // an admin who closed their DMs gets the link in the admin channel
    fake.close_dms(ADMIN_USER);
    let here = say(&fake, ADMIN, ADMIN_USER, "/console").await;
    assert!(
        here[0].contains("https://console.example.com/login/"),
        "{here:?}"
    );
    bot.stop().await;
}

/// The message in `channel` that carries the Stop button (being streamed), if any.
fn streaming_message(fake: &FakeDiscord, channel: u64) -> Option<u64> {
    fake.messages_in(channel)
        .into_iter()
        .find(|m| {
            m["components"]
                .to_string()
                .contains(kaiwa_adapters::discord::STOP_ID)
        })
        .and_then(|m| m["_fake_id"].as_u64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_help_desk_answer_streams_with_a_stop_button_that_ends_the_request() {
    let answer = "To stop a conversation, send /end. What you said is kept. \
         Start again whenever you like. See the guide [1].";
    let long = "Exports come as CSV. Each row is one submission and each column one field, \
         with dates in ISO form, and the file can be opened in any spreadsheet program you like.";
    let model = FakeOpenAi::start([Reply::text(answer), Reply::text(long)])
        .await
        .expect("model");
    model.set_stream_pace(Duration::from_millis(150));
    let client: Arc<dyn kaiwa_core::llm::ChatModel> =
        Arc::new(OpenAiClient::new(OpenAiConfig::new(model.base_url(), "fake")).expect("client"));
    let fake = FakeDiscord::start().await;
    let bot = start(
        &fake,
        "engineer",
        ModelRouter::none().with_agent("helpdesk_answer", client),
    )
    .await;
    let thread = open_thread(&fake, HELPDESK, 45, "How do I stop a conversation?").await;
    fake.wait_for("the streamed answer", Duration::from_secs(20), |f| {
        streaming_message(f, thread).is_some()
    })
    .await;
    let streamed = streaming_message(&fake, thread).expect("streamed");
    let texts = replies(&fake, thread, 0).await;
    let first = fake
        .messages_in(thread)
        .into_iter()
        .find(|m| m["_fake_id"].as_u64() == Some(streamed))
        .expect("the streamed message");
    assert!(first["_edits"].as_u64().unwrap_or(0) >= 2, "{first}");
    assert_eq!(
        first["components"],
        serde_json::json!([]),
        "Stop removed: {first}"
    );
    assert!(
        texts[0].starts_with("To stop a conversation") && texts[0].contains("Sources:"),
        "the final answer replaced the stream: {texts:?}"
    );
    let edits: Vec<std::time::Instant> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with(&format!("/messages/{streamed}")))
        .map(|r| r.at)
        .collect();
    for pair in edits.windows(2).take(edits.len().saturating_sub(2)) {
        assert!(pair[1].duration_since(pair[0]) >= Duration::from_millis(900));
    }

    // a follow-up, stopped while it is written
    let before = fake.messages_in(thread).len();
    fake.user_message(thread, Some(GUILD), 45, "How do I export submissions?");
    fake.wait_for("the second streamed answer", Duration::from_secs(20), |f| {
        streaming_message(f, thread).is_some_and(|id| id != streamed)
    })
    .await;
    let second = streaming_message(&fake, thread).expect("streamed");
    let press = fake.press(
        thread,
        Some(GUILD),
        45,
        second,
        kaiwa_adapters::discord::STOP_ID,
    );
    fake.wait_for("the Stop acknowledged", Duration::from_secs(10), |f| {
        f.callbacks()
            .iter()
            .any(|(id, kind, _)| *id == press && *kind == 6)
    })
    .await;
    let texts = replies(&fake, thread, before).await;
    assert!(texts[0].starts_with("Exports come as CSV."), "{texts:?}");
    assert!(texts[0].contains("(stopped)"), "{texts:?}");
    assert!(
        !texts[0].contains("spreadsheet"),
        "the rest was not written: {texts:?}"
    );
    assert_eq!(
        model.abandoned_soon(1).await,
        1,
        "the model request was cancelled"
    );
    // a Stop on a finished answer: a notice, nothing else
    let late = fake.press(
        thread,
        Some(GUILD),
        45,
        second,
        kaiwa_adapters::discord::STOP_ID,
    );
    fake.wait_for("the late Stop answered", Duration::from_secs(10), |f| {
        f.callbacks()
            .iter()
            .any(|(id, kind, _)| *id == late && *kind == 4)
    })
    .await;
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_japanese_client_is_answered_in_japanese_from_its_first_interaction() {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    fake.set_locale("ja");
    fake.slash(DM, None, 98, "review", "");
    let texts = replies(&fake, DM, 0).await;
    assert!(
        texts
            .iter()
            .any(|t| t.contains("今週") || t.contains("読書メンター")),
        "the client's language: {texts:?}"
    );
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_streamed_answer_is_cut_like_any_reply_and_edited_a_second_apart() {
    // a 12,000-character answer written at once while Discord is slow to answer a post:
    // the streamed message is the first of at most three, the last ends with the cut mark,
    // no message is left with a Stop button, and every edit of the streamed message (the
    // final one too) comes at least a second after the one before
    let paragraph = "Exports come as CSV files with one row per submission and one column \
         per field, dates in ISO form. "
        .repeat(6);
    let long: String = (0..20)
        .map(|i| format!("Part {i}. {paragraph}"))
        .collect::<Vec<_>>()
        .join("\n\n")
        + " See the guide [1].";
    assert!(long.chars().count() > 12_000);
    let model = FakeOpenAi::start([Reply::text(&long)])
        .await
        .expect("model");
    model.set_stream_pace(Duration::ZERO);
    let client: Arc<dyn kaiwa_core::llm::ChatModel> =
        Arc::new(OpenAiClient::new(OpenAiConfig::new(model.base_url(), "fake")).expect("client"));
    let fake = FakeDiscord::start().await;
    let bot = start(
        &fake,
        "engineer",
        ModelRouter::none().with_agent("helpdesk_answer", client),
    )
    .await;
    fake.slow_posts(Duration::from_millis(3_000));
    let thread = open_thread(&fake, HELPDESK, 46, "How do I export submissions?").await;
    fake.wait_for("the answer, whole", Duration::from_secs(30), |f| {
        f.texts_in(thread).iter().any(|t| t.contains("(cut:"))
    })
    .await;
    let texts = kaiwa_tests::once_quiet(|| fake.texts_in(thread), 1).await;
    let answer: Vec<&String> = texts.iter().filter(|t| t.contains("Part ")).collect();
    assert!(
        answer.len() <= 3,
        "at most three messages: {} ({} characters)",
        answer.len(),
        answer.iter().map(|t| t.chars().count()).sum::<usize>()
    );
    assert!(
        answer.last().is_some_and(|t| t.contains("(cut:")),
        "the last one says the rest was cut"
    );
    assert!(
        streaming_message(&fake, thread).is_none(),
        "no message is left with a Stop button"
    );
    let streamed = fake
        .messages_in(thread)
        .into_iter()
        .find(|m| {
            m["content"]
                .as_str()
                .is_some_and(|t| t.starts_with("Part 0."))
        })
        .and_then(|m| m["_fake_id"].as_u64())
        .expect("the streamed message");
    let changes: Vec<std::time::Instant> = fake
        .requests()
        .into_iter()
        .filter(|r| {
            (r.method == "PATCH" && r.path.ends_with(&format!("/messages/{streamed}")))
                || (r.method == "POST"
                    && r.path.ends_with(&format!("/channels/{thread}/messages"))
                    && r.body["content"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("Part 0.")))
        })
        .map(|r| r.at)
        .collect();
    assert!(changes.len() >= 2, "posted, then edited: {changes:?}");
    for pair in changes.windows(2) {
        assert!(
            pair[1].duration_since(pair[0]) >= Duration::from_millis(950),
            "edits a second apart: {:?}",
            pair[1].duration_since(pair[0])
        );
    }
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_help_desk_thread_answers_only_what_it_missed() {
    // two questions answered in a help-desk thread, the bot down, a third written
    // meanwhile: at the start only the third is answered, in the thread's help-desk
    // session (a message read over REST carries no guild id: it is not a DM)
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    let thread = open_thread(&fake, HELPDESK, 47, "How do I export submissions?").await;
    replies(&fake, thread, 0).await;
    say(&fake, thread, 47, "How do I stop a conversation?").await;
    let dir = bot.stop_keeping_the_database().await;
    let before = fake.texts_in(thread).len();
    fake.missed_message(thread, Some(GUILD), 47, "Where is the guide for forms?");
    let bot = start_on(&fake, "engineer", ModelRouter::none(), dir).await;
    let answer = replies(&fake, thread, before).await;
    assert!(!answer.is_empty(), "the missed question is answered");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let key = kaiwa_core::message::SessionKey {
        platform: Platform::Discord,
        chat: HELPDESK.to_string(),
        thread: thread.to_string(),
        user: "47".into(),
    };
    let said = kaiwa_tests::session_texts(bot.store.as_ref(), &key).await;
    for question in [
        "How do I stop a conversation?",
        "Where is the guide for forms?",
    ] {
        assert_eq!(
            said.iter().filter(|t| *t == question).count(),
            1,
            "{question}: {said:#?}"
        );
    }
    let as_dm = kaiwa_core::message::SessionKey {
        chat: thread.to_string(),
        thread: String::new(),
        ..key
    };
    assert!(
        bot.store
            .active_session(&as_dm)
            .await
            .expect("store")
            .is_none(),
        "nothing in the thread was taken for a DM"
    );
    bot.stop().await;
}

/// The admin channel's embeds whose title holds `marker`: (message id, embed).
fn admin_embeds(fake: &FakeDiscord, marker: &str) -> Vec<(u64, Value)> {
    fake.messages_in(ADMIN)
        .into_iter()
        .filter(|m| {
            m["embeds"][0]["title"]
                .as_str()
                .is_some_and(|t| t.contains(marker))
        })
        .map(|m| (m["_fake_id"].as_u64().unwrap_or_default(), m))
        .collect()
}

fn button_of(message: &Value, label: &str) -> String {
    message["components"][0]["components"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["label"] == label)
        .and_then(|b| b["custom_id"].as_str())
        .unwrap_or_else(|| panic!("no {label:?} on {message}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_takes_over_a_help_desk_thread_and_answers_from_the_admin_channel() {
    let fake = FakeDiscord::start().await;
    let bot = start(&fake, "engineer", ModelRouter::none()).await;
    let thread = open_thread(&fake, HELPDESK, 41, "How do I stop a conversation?").await;
    replies(&fake, thread, 0).await;
    tap(&fake, thread, 41, "No").await;
    tap(&fake, thread, 41, "human").await;
    fake.wait_for("the handoff embed", Duration::from_secs(20), |f| {
        !admin_embeds(f, "[handoff]").is_empty()
    })
    .await;
    let (notice, embed) = admin_embeds(&fake, "[handoff]").remove(0);
    let take = button_of(&embed, "Take over");
    let before = fake.texts_in(thread).len();
    fake.press(ADMIN, Some(GUILD), ADMIN_USER, notice, &take);
    let joined = fake.wait_texts(thread, before + 1).await;
    assert!(
        joined
            .last()
            .is_some_and(|t| t.contains("A person from the team has joined")),
        "{joined:?}"
    );

    // the user writes: relayed to the admin channel, under the notice; the agent is silent
    let quiet = fake.texts_in(thread).len();
    fake.user_message(thread, Some(GUILD), 41, "Is anyone there?");
    fake.wait_for("the relay", Duration::from_secs(20), |f| {
        !admin_embeds(f, "[relay]").is_empty()
    })
    .await;
    let (relay, relayed) = admin_embeds(&fake, "[relay]").remove(0);
    assert!(
        relayed.to_string().contains("Is anyone there?"),
        "{relayed}"
    );
    assert!(
        relayed["message_reference"]["message_id"].is_string(),
        "{relayed}"
    );
    // the admin answers from the admin channel…
    fake.reply_message(ADMIN, Some(GUILD), ADMIN_USER, "Yes, I am here.", relay);
    let got = fake.wait_texts(thread, quiet + 1).await;
    assert!(
        got.last().is_some_and(|t| t.ends_with("Yes, I am here.")),
        "{got:?}"
    );
    // …or in the thread itself, where Kaiwa stays silent
    fake.user_message(
        thread,
        Some(GUILD),
        ADMIN_USER,
        "Let me check that for you.",
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        fake.texts_in(thread).len(),
        quiet + 1,
        "Kaiwa is silent in the thread"
    );
    // a reply by someone who is not an admin reaches nobody
    fake.reply_message(ADMIN, Some(GUILD), 12_345, "not an admin", relay);
    fake.wait_for("a refusal", Duration::from_secs(20), |f| {
        f.texts_in(ADMIN).iter().any(|t| t.contains("Not allowed"))
    })
    .await;
    assert!(
        !fake
            .texts_in(thread)
            .iter()
            .any(|t| t.contains("not an admin"))
    );

    // handed back: the agent answers again
    let back = button_of(&relayed, "Hand back");
    let before = fake.texts_in(thread).len();
    fake.press(ADMIN, Some(GUILD), ADMIN_USER, relay, &back);
    let told = fake.wait_texts(thread, before + 1).await;
    assert!(
        told.last()
            .is_some_and(|t| t.contains("the assistant is back")),
        "{told:?}"
    );
    let answer = say(&fake, thread, 41, "How do I export submissions?").await;
    assert!(answer[0].contains("Exporting submissions"), "{answer:?}");
    let key = kaiwa_core::message::SessionKey {
        platform: Platform::Discord,
        chat: HELPDESK.to_string(),
        thread: thread.to_string(),
        user: "41".into(),
    };
    let session = bot
        .store
        .active_session(&key)
        .await
        .expect("loads")
        .expect("a session");
    let said: Vec<String> = bot
        .store
        .recent_messages(session.id, 100)
        .await
        .expect("messages")
        .into_iter()
        .map(|m| m.text)
        .collect();
    for text in [
        "Is anyone there?",
        "Yes, I am here.",
        "Let me check that for you.",
    ] {
        assert!(
            said.iter().any(|t| t.contains(text)),
            "{text:?} in {said:?}"
        );
    }
    bot.stop().await;
}

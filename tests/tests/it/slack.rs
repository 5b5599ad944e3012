//! The Slack adapter end to end: Socket Mode and the Events API against the fake Slack on
//! 127.0.0.1 (its Web API, its WebSocket, signed deliveries), with the real orchestrator,
//! flows and SQLite store, started as `kaiwa run` starts them (`kaiwa::Kaiwa`).

use crate::common;

use kaiwa_core::llm::ModelRouter;
use kaiwa_core::llm::openai::{OpenAiClient, OpenAiConfig};
use kaiwa_core::message::{Platform, SessionKey};
use kaiwa_core::store::Store;
use kaiwa_tests::fake_openai::{FakeOpenAi, Reply};
use kaiwa_tests::fake_slack::{self, APP_TOKEN, BOT_TOKEN, FakeSlack, SIGNING_SECRET};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const ADMIN: &str = "CADMIN";
const ADMIN_USER: &str = "UADMIN";
const HELPDESK: &str = "CHELP";
const READING: &str = "CREAD";
const DM: &str = "D100";
const OTHER_DM: &str = "D200";

struct Bot {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

impl Bot {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(20), &mut self.task).await;
        self.store.close().await;
    }
}

/// The `[slack]` section; `events`: the Events API on that address instead of Socket Mode.
fn section(fake: &FakeSlack, form: &str, events: Option<&str>) -> String {
    let mut section = format!(
        "[slack]\napi_url = \"{}\"\nadmin_channel_id = \"{ADMIN}\"\nadmins = [\"{ADMIN_USER}\"]\n\
         helpdesk_channel_ids = [\"{HELPDESK}\"]\nreading_channel_ids = [\"{READING}\"]\n\
         dm_flow = \"interview\"\ndm_flow_arg = \"{form}\"\n",
        fake.api_url()
    );
    if let Some(listen) = events {
        section.push_str(&format!("events_listen = \"{listen}\"\n"));
    }
    section
}

async fn start(fake: &FakeSlack, form: &str, events: Option<&str>) -> Bot {
    start_with(fake, form, events, ModelRouter::none()).await
}

async fn start_with(
    fake: &FakeSlack,
    form: &str,
    events: Option<&str>,
    models: ModelRouter,
) -> Bot {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = format!("sqlite://{}", dir.path().join("kaiwa.db").display());
    let config = dir.path().join("config");
    let tokens = kaiwa::SlackTokens {
        bot: BOT_TOKEN.into(),
        app: Some(APP_TOKEN.into()),
        signing_secret: Some(SIGNING_SECRET.into()),
    };
    let kaiwa =
        common::kaiwa_on_slack(&config, &section(fake, form, events), &db, tokens, models).await;
    let store = kaiwa.store().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let stopped = async {
            let _ = stopped.await;
        };
        if let Err(e) = kaiwa.run_until(stopped).await {
            eprintln!("Kaiwa stopped: {e}");
        }
    });
    if events.is_none() {
        fake.wait_connected().await;
    }
    Bot {
        stop: Some(stop),
        task,
        store,
        _dir: dir,
    }
}

/// New texts in a thread (`""`: the top level) of `channel` after `before`, once the bot
/// has gone quiet.
async fn replies(fake: &FakeSlack, channel: &str, thread: &str, before: usize) -> Vec<String> {
    fake.wait_for(
        &format!("a reply in {channel}/{thread}"),
        Duration::from_secs(30),
        |f| f.thread(channel, thread).len() > before && !f.streaming_in(channel),
    )
    .await;
    kaiwa_tests::once_quiet(|| fake.thread_texts(channel, thread), before).await
}

/// A user's message in a DM (or a thread), and the replies to it.
async fn say(fake: &FakeSlack, channel: &str, user: &str, text: &str) -> Vec<String> {
    let before = fake.thread(channel, "").len();
    fake.message(channel, user, text, None);
    replies(fake, channel, "", before).await
}

async fn say_in_thread(
    fake: &FakeSlack,
    channel: &str,
    thread: &str,
    user: &str,
    text: &str,
) -> Vec<String> {
    let before = fake.thread(channel, thread).len();
    fake.message(channel, user, text, Some(thread));
    replies(fake, channel, thread, before).await
}

/// Presses the button labelled `label` on the bot's latest message with buttons in
/// `channel` (`thread`: where the replies come).
async fn tap(
    fake: &FakeSlack,
    channel: &str,
    thread: &str,
    user: &str,
    label: &str,
) -> Vec<String> {
    let (message, action) = fake.button(channel, label);
    let before = fake.thread(channel, thread).len();
    fake.press(channel, user, &message, &action);
    replies(fake, channel, thread, before).await
}

/// The admin channel's notices whose text holds `kind` (`[audit]`, `[handoff]`, …).
fn notices(fake: &FakeSlack, kind: &str) -> Vec<Value> {
    fake.messages_in(ADMIN)
        .into_iter()
        .filter(|m| m["text"].as_str().is_some_and(|t| t.contains(kind)))
        .collect()
}

/// The action id of the button labelled `label` in a posted message.
fn action_of(message: &Value, label: &str) -> String {
    fake_slack::button_action(message, label)
        .unwrap_or_else(|| panic!("no button {label:?} in {message}"))
}

fn ts_of(message: &Value) -> String {
    message["ts"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dm_interview_runs_to_its_audit_summary_and_the_team_approves_it() {
    let fake = FakeSlack::start().await;
    let bot = start(&fake, "engineer", None).await;
    let first = say(&fake, DM, "U51", "hello").await;
    assert!(
        first
            .iter()
            .any(|t| t.to_lowercase().contains("language") || t.contains("言語")),
        "{first:?}"
    );
    tap(&fake, DM, "", "U51", "English").await;
    say(&fake, DM, "U51", "Japan").await;
    say(
        &fake,
        DM,
        "U51",
        "Hanako Yamada, you can reach me at hanako@example.com",
    )
    .await;
    say(&fake, DM, "U51", "5").await;
    say(&fake, DM, "U51", "Rust").await;
    say(&fake, DM, "U51", "I want to build developer tools").await;
    tap(&fake, DM, "", "U51", "Remote").await;
    say(&fake, DM, "U51", "2026-04-01").await;
    let end = say(&fake, DM, "U51", "https://github.com/hanako").await;
    assert!(end.iter().any(|t| t.contains("submitted")), "{end:?}");
    // a pressed question shows the choice, its buttons gone
    let shown = fake
        .messages_in(DM)
        .into_iter()
        .find(|m| m["text"].as_str().is_some_and(|t| t.contains("✓ Remote")))
        .expect("the answered question");
    assert!(
        !shown["blocks"].to_string().contains("\"actions\""),
        "{shown}"
    );

    fake.wait_for("the audit summary", Duration::from_secs(20), |f| {
        !notices(f, "[audit]").is_empty()
    })
    .await;
    let notice = notices(&fake, "[audit]").remove(0);
    assert!(notice["blocks"].to_string().contains("passed"), "{notice}");
    let subs = bot.store.submissions(Some("engineer")).await.expect("subs");
    assert_eq!(subs[0].submission.values["work_style"], "remote");

    // someone not on the admin list cannot decide; an admin approves
    let approve = action_of(&notice, "Approve");
    fake.press(ADMIN, "UNOBODY", &ts_of(&notice), &approve);
    fake.wait_for("a refusal", Duration::from_secs(20), |f| {
        f.thread_texts(ADMIN, &ts_of(&notice))
            .iter()
            .any(|t| t.contains("Not allowed"))
    })
    .await;
    let applicant = fake.thread(DM, "").len();
    fake.press(ADMIN, ADMIN_USER, &ts_of(&notice), &approve);
    let told = replies(&fake, DM, "", applicant).await;
    assert!(!told.is_empty(), "the applicant hears of the decision");
    let subs = bot.store.submissions(Some("engineer")).await.expect("subs");
    assert_eq!(
        subs[0].decision.as_ref().map(|d| d.decision.as_str()),
        Some("approved")
    );
    // every envelope was acknowledged
    assert_eq!(fake.unacked(), 0);
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_help_desk_thread_is_answered_with_citations_taken_over_and_handed_back() {
    let fake = FakeSlack::start().await;
    let bot = start(&fake, "engineer", None).await;
    let question = fake.message(HELPDESK, "U41", "How do I stop a conversation?", None);
    let answer = replies(&fake, HELPDESK, &question, 0).await;
    assert!(
        answer[0].contains("Sources:\n[1] en/user-guide.md#Stopping a conversation"),
        "{answer:?}"
    );
    assert!(
        fake.thread(HELPDESK, "").is_empty(),
        "the answer lives in the thread, not the channel"
    );
    let more = say_in_thread(
        &fake,
        HELPDESK,
        &question,
        "U41",
        "How do I export submissions?",
    )
    .await;
    assert!(more[0].contains("Exporting submissions"), "{more:?}");

    tap(&fake, HELPDESK, &question, "U41", "No").await;
    tap(&fake, HELPDESK, &question, "U41", "human").await;
    fake.wait_for("the handoff notice", Duration::from_secs(20), |f| {
        !notices(f, "[handoff]").is_empty()
    })
    .await;
    let handoff = notices(&fake, "[handoff]").remove(0);
    let before = fake.thread(HELPDESK, &question).len();
    fake.press(
        ADMIN,
        ADMIN_USER,
        &ts_of(&handoff),
        &action_of(&handoff, "Take over"),
    );
    let joined = replies(&fake, HELPDESK, &question, before).await;
    assert!(
        joined
            .iter()
            .any(|t| t.contains("A person from the team has joined")),
        "{joined:?}"
    );

    // the user writes: relayed to the admin channel, in the notice's thread; the agent is
    // silent
    let quiet = fake.thread(HELPDESK, &question).len();
    fake.message(HELPDESK, "U41", "Is anyone there?", Some(&question));
    fake.wait_for("the relay", Duration::from_secs(20), |f| {
        !notices(f, "[relay]").is_empty()
    })
    .await;
    let relay = notices(&fake, "[relay]").remove(0);
    assert!(relay.to_string().contains("Is anyone there?"), "{relay}");
    let notice_thread = ts_of(&handoff);
    assert_eq!(
        relay["thread_ts"],
        notice_thread.as_str(),
        "in the notice's thread"
    );
    // the admin answers in that thread…
    fake.message(ADMIN, ADMIN_USER, "Yes, I am here.", Some(&notice_thread));
    let got = replies(&fake, HELPDESK, &question, quiet).await;
    assert!(
        got.last().is_some_and(|t| t.ends_with("Yes, I am here.")),
        "{got:?}"
    );
    // …or in the user's thread, where Kaiwa stays silent
    fake.message(
        HELPDESK,
        ADMIN_USER,
        "Let me check that for you.",
        Some(&question),
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        fake.thread(HELPDESK, &question).len(),
        quiet + 1,
        "Kaiwa is silent"
    );
    // someone who is not an admin reaches nobody
    fake.message(ADMIN, "UNOBODY", "not an admin", Some(&notice_thread));
    fake.wait_for("a refusal", Duration::from_secs(20), |f| {
        f.thread_texts(ADMIN, &notice_thread)
            .iter()
            .any(|t| t.contains("Not allowed"))
    })
    .await;

    // handed back: the agent answers again
    let before = fake.thread(HELPDESK, &question).len();
    fake.press(
        ADMIN,
        ADMIN_USER,
        &ts_of(&relay),
        &action_of(&relay, "Hand back"),
    );
    let told = replies(&fake, HELPDESK, &question, before).await;
    assert!(
        told.iter().any(|t| t.contains("the assistant is back")),
        "{told:?}"
    );
    let answer = say_in_thread(
        &fake,
        HELPDESK,
        &question,
        "U41",
        "How do I export submissions?",
    )
    .await;
    assert!(answer[0].contains("Exporting submissions"), "{answer:?}");
    let key = SessionKey {
        platform: Platform::Slack,
        chat: HELPDESK.into(),
        thread: question.clone(),
        user: "U41".into(),
    };
    let said = kaiwa_tests::session_texts(bot.store.as_ref(), &key).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mydata_in_a_channel_is_ephemeral_and_shows_nothing_there() {
    let fake = FakeSlack::start().await;
    let bot = start(&fake, "engineer", None).await;
    let question = fake.message(HELPDESK, "U43", "How do I export submissions?", None);
    replies(&fake, HELPDESK, &question, 0).await;
    let posted = fake.messages_in(HELPDESK).len();
    fake.slash(HELPDESK, "U43", "mydata");
    fake.wait_for("an ephemeral answer", Duration::from_secs(20), |f| {
        f.ephemerals_for("U43").iter().any(|m| {
            m["text"]
                .as_str()
                .is_some_and(|t| t.contains("export submissions"))
        })
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        fake.messages_in(HELPDESK).len(),
        posted,
        "nothing posted for the channel to see"
    );
    assert!(fake.ephemerals_for("U41").is_empty(), "nobody else sees it");
    let answered = fake.ephemerals_for("U43");
    assert!(
        !answered
            .iter()
            .any(|m| m["text"].to_string().contains("only answer")),
        "answered as in a private chat: {answered:?}"
    );
    // `/kaiwa forget` in the channel: its confirmation and its outcome only to its user
    fake.slash(HELPDESK, "U43", "forget");
    fake.wait_for("the confirmation", Duration::from_secs(20), |f| {
        f.ephemerals_for("U43")
            .iter()
            .any(|m| m["blocks"].to_string().contains("Delete everything"))
    })
    .await;
    let (confirm, delete) = fake.ephemeral_button("U43", "Delete everything");
    let before = fake.ephemerals_for("U43").len();
    fake.press(HELPDESK, "U43", &confirm, &delete);
    fake.wait_for("the outcome", Duration::from_secs(20), |f| {
        f.ephemerals_for("U43").len() > before
    })
    .await;
    let pressed = fake
        .ephemerals_for("U43")
        .into_iter()
        .find(|m| m["ts"] == confirm.as_str())
        .expect("the confirmation");
    assert!(
        !pressed["blocks"].to_string().contains("\"actions\""),
        "its buttons gone: {pressed}"
    );
    let key = SessionKey {
        platform: Platform::Slack,
        chat: HELPDESK.into(),
        thread: question.clone(),
        user: "U43".into(),
    };
    assert!(
        bot.store
            .active_session(&key)
            .await
            .expect("loads")
            .is_none(),
        "forgotten"
    );
    assert_eq!(fake.messages_in(HELPDESK).len(), posted);
    // an unknown subcommand says so, to its user only
    let before = fake.ephemerals_for("U43").len();
    fake.slash(HELPDESK, "U43", "frobnicate");
    fake.wait_for(
        "an answer to an unknown command",
        Duration::from_secs(20),
        |f| f.ephemerals_for("U43").len() > before,
    )
    .await;
    assert_eq!(fake.messages_in(HELPDESK).len(), posted);
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_button_gets_an_ephemeral_notice_and_changes_nothing() {
    let fake = FakeSlack::start().await;
    let bot = start(&fake, "engineer", None).await;
    say(&fake, DM, "U71", "hello").await;
    let (old, english) = fake.button(DM, "English");
    tap(&fake, DM, "", "U71", "English").await;
    let sent = fake.messages_in(DM).len();
    fake.press(DM, "U71", &old, &english);
    fake.press(DM, "U71", &old, "someone|else");
    fake.wait_for("two ephemeral notices", Duration::from_secs(20), |f| {
        f.ephemerals_for("U71").len() == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.messages_in(DM).len(), sent, "nothing else was sent");
    let next = say(&fake, DM, "U71", "Japan").await;
    assert!(next.last().is_some_and(|t| t.contains("name")), "{next:?}");
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_in_429_waits_its_retry_after_and_delays_nobody_else() {
    let fake = FakeSlack::start().await;
    let bot = start(&fake, "engineer", None).await;
    say(&fake, DM, "U98", "hello").await;
    say(&fake, OTHER_DM, "U99", "hello").await;
    // Slack answers the first DM's next two posts 429, Retry-After 1 s
    fake.rate_limit(DM, 2, 1);
    let before = fake.thread(DM, "").len();
    fake.message(DM, "U98", "2", None);
    fake.wait_for("a 429", Duration::from_secs(10), |f| {
        // a post that made no message: answered 429
        let posts = f
            .calls_of("chat.postMessage")
            .iter()
            .filter(|c| c.body["channel"] == DM)
            .count();
        posts > f.messages_in(DM).len()
    })
    .await;
    let asked = std::time::Instant::now();
    let other = say(&fake, OTHER_DM, "U99", "2").await;
    let waited = asked.elapsed();
    assert!(!other.is_empty());
    let limited = replies(&fake, DM, "", before).await;
    assert!(
        !limited.is_empty(),
        "the limited channel's reply came after its wait"
    );
    let posts: Vec<_> = fake
        .calls_of("chat.postMessage")
        .into_iter()
        .filter(|c| c.body["channel"] == DM)
        .collect();
    // the limited posts and their retries: each retry a second after the 429 before it
    let tail = &posts[posts.len() - 3..];
    for pair in tail.windows(2) {
        let gap = pair[1].at.duration_since(pair[0].at);
        assert!(gap >= Duration::from_millis(990), "retried after {gap:?}");
    }
    eprintln!("the other channel's reply came after {waited:?}");
    assert!(
        waited < Duration::from_millis(1500),
        "the other channel waited {waited:?}"
    );
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_dropped_mid_burst_loses_nothing_and_answers_nothing_twice() {
    let fake = FakeSlack::start().await;
    let bot = start(&fake, "engineer", None).await;
    let users: Vec<(String, String)> = (0..8)
        .map(|u| (format!("D3{u:02}"), format!("U3{u:02}")))
        .collect();
    for (channel, user) in &users {
        fake.message(channel, user, "hello", None);
    }
    // mid-burst: the socket dies, then Slack asks for a new connection on the next one
    fake.drop_socket();
    for (channel, user) in &users {
        fake.message(channel, user, "2", None);
    }
    fake.wait_for("a new connection", Duration::from_secs(30), |f| {
        f.connections() >= 2
    })
    .await;
    fake.ask_to_reconnect();
    fake.wait_for(
        "every envelope acknowledged",
        Duration::from_secs(30),
        |f| f.unacked() == 0,
    )
    .await;
    for (channel, _) in &users {
        fake.wait_for("two replies", Duration::from_secs(30), |f| {
            f.thread(channel, "").len() >= 2
        })
        .await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    for (channel, user) in &users {
        let key = SessionKey {
            platform: Platform::Slack,
            chat: channel.clone(),
            thread: String::new(),
            user: user.clone(),
        };
        let said = kaiwa_tests::session_texts(bot.store.as_ref(), &key).await;
        for text in ["hello", "2"] {
            assert_eq!(
                said.iter().filter(|t| *t == text).count(),
                1,
                "{text:?} once in {channel}: {said:?}"
            );
        }
        // the greeting, then the question in Japanese: each once
        let texts = fake.thread_texts(channel, "");
        let mut unique = texts.clone();
        unique.dedup();
        assert_eq!(
            unique.len(),
            texts.len(),
            "nothing answered twice: {texts:?}"
        );
    }
    assert!(
        fake.connections() >= 3,
        "connected again after the disconnect"
    );
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_api_takes_signed_events_once_and_refuses_forged_ones() {
    let fake = FakeSlack::start().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let listen = format!("127.0.0.1:{port}");
    let bot = start(&fake, "engineer", Some(&listen)).await;
    let url = format!("http://{listen}/slack/events");
    // the URL's verification when it is set in Slack's settings
    let challenge = r#"{"token":"t","challenge":"c-123","type":"url_verification"}"#;
    let mut status = 0;
    for _ in 0..100 {
        status = fake_slack::deliver(
            &url,
            SIGNING_SECRET,
            fake_slack::now(),
            challenge,
            false,
            None,
        )
        .await;
        if status != 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200);
    // Slack checking the slash command URL's certificate
    let ssl_check = "ssl_check=1&token=verification-token";
    assert_eq!(
        fake_slack::deliver(
            &url,
            SIGNING_SECRET,
            fake_slack::now(),
            ssl_check,
            true,
            None
        )
        .await,
        200
    );

    let (_, event) = fake.message_event(DM, "U61", "hello", None);
    let body = event.to_string();
    // forged: a wrong secret, a body changed after signing, a replay from ten minutes ago
    let forged = [
        fake_slack::deliver(
            &url,
            "not-the-secret",
            fake_slack::now(),
            &body,
            false,
            None,
        )
        .await,
        {
            let ts = fake_slack::now().to_string();
            reqwest::Client::new()
                .post(&url)
                .header("x-slack-request-timestamp", &ts)
                .header(
                    "x-slack-signature",
                    fake_slack::sign(SIGNING_SECRET, &ts, &body),
                )
                .header("content-type", "application/json")
                .body(body.replace("hello", "hacked"))
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        },
        fake_slack::deliver(
            &url,
            SIGNING_SECRET,
            fake_slack::now() - 600,
            &body,
            false,
            None,
        )
        .await,
        reqwest::Client::new()
            .post(&url)
            .body(body.clone())
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0),
    ];
    assert_eq!(forged, [401, 401, 401, 401]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        fake.messages_in(DM).is_empty(),
        "a forged event changed nothing"
    );

    // the real one, then Slack's retry of it: one turn
    let first =
        fake_slack::deliver(&url, SIGNING_SECRET, fake_slack::now(), &body, false, None).await;
    assert_eq!(first, 200);
    let retry = fake_slack::deliver(
        &url,
        SIGNING_SECRET,
        fake_slack::now(),
        &body,
        false,
        Some(1),
    )
    .await;
    assert_eq!(retry, 200);
    let greeting = replies(&fake, DM, "", 0).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        fake.thread(DM, "").len(),
        greeting.len(),
        "the retry is not a second turn"
    );

    // a press and a slash command come form-encoded
    let (ts, action) = fake.button(DM, "English");
    let press = fake.block_actions(DM, "U61", &ts, &action, None);
    let form = serde_urlencoded::to_string([("payload", press.to_string())]).expect("form");
    let before = fake.thread(DM, "").len();
    assert_eq!(
        fake_slack::deliver(&url, SIGNING_SECRET, fake_slack::now(), &form, true, None).await,
        200
    );
    let asked = replies(&fake, DM, "", before).await;
    assert!(asked.iter().any(|t| t.contains("country")), "{asked:?}");
    let fields = fake.slash_fields(HELPDESK, "U61", "mydata");
    let fields: Vec<(String, String)> = fields
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    let form = serde_urlencoded::to_string(fields).expect("form");
    assert_eq!(
        fake_slack::deliver(&url, SIGNING_SECRET, fake_slack::now(), &form, true, None).await,
        200
    );
    fake.wait_for("an ephemeral answer", Duration::from_secs(20), |f| {
        !f.ephemerals_for("U61").is_empty()
    })
    .await;
    bot.stop().await;
}

/// The help-desk's answering agent on a fake model server answering `replies` in turn.
async fn answering_model(replies: Vec<Reply>, pace: Duration) -> (FakeOpenAi, ModelRouter) {
    let model = FakeOpenAi::start(replies).await.expect("model");
    model.set_stream_pace(pace);
    let client: Arc<dyn kaiwa_core::llm::ChatModel> =
        Arc::new(OpenAiClient::new(OpenAiConfig::new(model.base_url(), "fake")).expect("client"));
    (
        model,
        ModelRouter::none().with_agent("helpdesk_answer", client),
    )
}

/// The `ts` of the message in `channel` being streamed (it carries the Stop button).
fn streaming_message(fake: &FakeSlack, channel: &str) -> Option<String> {
    fake.messages_in(channel)
        .into_iter()
        .find(|m| {
            m["blocks"]
                .to_string()
                .contains(kaiwa_adapters::slack::STOP_ID)
        })
        .map(|m| ts_of(&m))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_help_desk_answer_streams_with_a_stop_button_that_ends_the_request() {
    let answer = "To stop a conversation, send /end. What you said is kept. \
         Start again whenever you like. See the guide [1].";
    let long = "Exports come as CSV. Each row is one submission and each column one field, \
         with dates in ISO form, and the file can be opened in any spreadsheet program you like.";
    let (model, models) = answering_model(
        vec![Reply::text(answer), Reply::text(long)],
        Duration::from_millis(150),
    )
    .await;
    let fake = FakeSlack::start().await;
    let bot = start_with(&fake, "engineer", None, models).await;
    let question = fake.message(HELPDESK, "U45", "How do I stop a conversation?", None);
    fake.wait_for("the streamed answer", Duration::from_secs(20), |f| {
        streaming_message(f, HELPDESK).is_some()
    })
    .await;
    let streamed = streaming_message(&fake, HELPDESK).expect("streamed");
    let texts = replies(&fake, HELPDESK, &question, 0).await;
    assert!(
        texts[0].starts_with("To stop a conversation") && texts[0].contains("Sources:"),
        "the final answer replaced the stream: {texts:?}"
    );
    let edits: Vec<std::time::Instant> = fake
        .calls_of("chat.update")
        .into_iter()
        .filter(|c| c.body["ts"] == streamed.as_str())
        .map(|c| c.at)
        .collect();
    assert!(edits.len() >= 2, "edited while written: {edits:?}");
    for pair in edits.windows(2) {
        assert!(
            pair[1].duration_since(pair[0]) >= Duration::from_millis(900),
            "edits a second apart"
        );
    }

    // a follow-up, stopped while it is written
    let before = fake.thread(HELPDESK, &question).len();
    fake.message(
        HELPDESK,
        "U45",
        "How do I export submissions?",
        Some(&question),
    );
    fake.wait_for("the second streamed answer", Duration::from_secs(20), |f| {
        streaming_message(f, HELPDESK).is_some_and(|ts| ts != streamed)
    })
    .await;
    let second = streaming_message(&fake, HELPDESK).expect("streamed");
    // pressed once the message is on the screen (its first edit came: the bot knows it)
    fake.wait_for("an edit of it", Duration::from_secs(20), |f| {
        f.calls_of("chat.update")
            .iter()
            .any(|c| c.body["ts"] == second.as_str())
    })
    .await;
    fake.press(HELPDESK, "U45", &second, kaiwa_adapters::slack::STOP_ID);
    let texts = replies(&fake, HELPDESK, &question, before).await;
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
    // a Stop on a finished answer: a notice to who pressed it, nothing else
    fake.press(HELPDESK, "U45", &second, kaiwa_adapters::slack::STOP_ID);
    fake.wait_for("the late Stop answered", Duration::from_secs(10), |f| {
        !f.ephemerals_for("U45").is_empty()
    })
    .await;
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_is_split_at_slacks_limit_and_cut_past_three_messages() {
    let paragraph = "Exports come as CSV files with one row per submission and one column \
         per field, dates in ISO form. "
        .repeat(6);
    let long: String = (0..20)
        .map(|i| format!("Part {i}. {paragraph}"))
        .collect::<Vec<_>>()
        .join("\n\n")
        + " See the guide [1].";
    assert!(long.chars().count() > 12_000);
    let (_model, models) = answering_model(vec![Reply::text(&long)], Duration::ZERO).await;
    let fake = FakeSlack::start().await;
    let bot = start_with(&fake, "engineer", None, models).await;
    let question = fake.message(HELPDESK, "U46", "How do I export submissions?", None);
    fake.wait_for("the answer, whole", Duration::from_secs(30), |f| {
        f.thread_texts(HELPDESK, &question)
            .iter()
            .any(|t| t.contains("(cut:"))
    })
    .await;
    let texts = kaiwa_tests::once_quiet(|| fake.thread_texts(HELPDESK, &question), 0).await;
    let answer: Vec<&String> = texts.iter().filter(|t| t.contains("Part ")).collect();
    assert_eq!(answer.len(), 3, "three messages: {answer:?}");
    for piece in &answer {
        assert!(piece.chars().count() <= kaiwa_adapters::slack::MESSAGE_LIMIT);
    }
    assert!(
        answer[2].contains("(cut:"),
        "the last one says the rest was cut"
    );
    assert!(
        streaming_message(&fake, HELPDESK).is_none(),
        "no Stop button is left"
    );
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reading_channel_message_starts_its_thread_and_admin_commands_are_the_admins() {
    let fake = FakeSlack::start().await;
    let bot = start(&fake, "engineer", None).await;
    let book = fake.message(READING, "U47", "/reading start Kokoro", None);
    let answer = replies(&fake, READING, &book, 0).await;
    assert!(!answer.is_empty());
    assert!(
        fake.thread(READING, "").is_empty(),
        "answered in its thread"
    );
    let key = SessionKey {
        platform: Platform::Slack,
        chat: READING.into(),
        thread: book.clone(),
        user: "U47".into(),
    };
    let session = bot
        .store
        .active_session(&key)
        .await
        .expect("loads")
        .expect("a session");
    assert_eq!(session.flow, "reading");

    // `/kaiwa sessions` in the admin channel: refused to someone not on the list
    fake.slash(ADMIN, "UNOBODY", "sessions");
    fake.wait_for("a refusal", Duration::from_secs(20), |f| {
        f.ephemerals_for("UNOBODY").iter().any(|m| {
            m["text"]
                .as_str()
                .is_some_and(|t| t.contains("not allowed"))
        })
    })
    .await;
    fake.slash(ADMIN, ADMIN_USER, "sessions");
    fake.wait_for("the admin's answer", Duration::from_secs(20), |f| {
        !f.ephemerals_for(ADMIN_USER).is_empty()
    })
    .await;
    let listed = fake.ephemerals_for(ADMIN_USER)[0]["text"].to_string();
    assert!(listed.contains("reading slack user U47"), "{listed}");
    assert!(
        fake.messages_in(ADMIN).is_empty(),
        "nothing for the channel to see"
    );
    // a file without text in a DM: told, nothing stored
    fake.message(DM, "U47", "", None);
    let told = fake.wait_messages(DM, 1).await;
    assert!(told[0].contains("text messages"), "{told:?}");
    bot.stop().await;
}

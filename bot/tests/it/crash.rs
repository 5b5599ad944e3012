//! `kaiwa run` under the faults of a real deployment, against the fake Bot API on 127.0.0.1:
//! killed with SIGKILL in the middle of a burst, and stopped with SIGTERM while turns are
//! still running past the grace period. After the restart on the same database every
//! message Telegram was told we have is answered once; a chat sees again at most the reply
//! that was being sent when the process died (Telegram has no idempotent send: see the
//! docs/guarantees.md).

use crate::common;

use kaiwa_tests::fake_openai::{FakeOpenAi, Reply};
use kaiwa_tests::fake_telegram::{Chat, FakeTelegram};
use std::time::Duration;

const TOKEN: &str = "777001:CRASH-secret-token";
const LATE: &str = "(I restarted; in case these did not reach you:)";

fn config(telegram_url: &str, grace_secs: u64, llm: Option<&str>) -> String {
    let head = common::head(grace_secs);
    let mut config = format!(
        r#"
{head}
[telegram]
token_env = "KAIWA_TEST_TELEGRAM_TOKEN"
api_url = "{telegram_url}"
private_flow = "assistant"
poll_timeout_secs = 1
"#
    );
    if let Some(url) = llm {
        config.push_str(&format!(
            "\n[llm]\nbase_url = \"{url}\"\nmodel = \"m\"\ntimeout_secs = 60\nmax_retries = 0\nmax_concurrency = 16\n"
        ));
    }
    config
}

fn spawn_run(dir: &std::path::Path) -> tokio::process::Child {
    common::spawn_run(dir, TOKEN).0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_killed_with_sigkill_loses_nothing_after_the_restart() {
    const USERS: i64 = 50;
    const EACH: usize = 4;
    let telegram = FakeTelegram::start(TOKEN).await;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("kaiwa.toml"),
        config(telegram.url(), 10, None),
    )
    .expect("config");
    let mut first = spawn_run(dir.path());

    // how many replies four messages get from a bot that is not killed
    let control = Chat::private(1);
    for i in 0..EACH {
        telegram.send_text(control, 1, &format!("control {i}"));
    }
    telegram.wait_texts(control, 1).await;
    let expected = common::settle(
        || telegram.texts_in(control).len(),
        Duration::from_secs(1),
        Duration::from_secs(20),
    )
    .await;

    // the most replies one message gets
    let per_turn = expected.div_ceil(EACH);
    let chats: Vec<Chat> = (0..USERS).map(|u| Chat::private(100 + u)).collect();
    for i in 0..EACH {
        for (u, chat) in chats.iter().enumerate() {
            telegram.send_text(*chat, 100 + u as i64, &format!("user {u} message {i}"));
        }
    }
    let burst_sends = || {
        chats
            .iter()
            .map(|c| telegram.texts_in(*c).len())
            .sum::<usize>()
    };
    telegram
        .wait_for("~50 replies", Duration::from_secs(30), |_| {
            burst_sends() >= 50
        })
        .await;
    first.start_kill().expect("SIGKILL");
    let _ = first.wait().await;
    let at_kill = burst_sends();

    let mut second = spawn_run(dir.path());
    common::settle(burst_sends, Duration::from_secs(3), Duration::from_secs(60)).await;
    let _ = second.start_kill();
    let _ = second.wait().await;

    let stored =
        common::stored_user_messages(&format!("sqlite://{}/kaiwa.db", dir.path().display())).await;
    let mut lost = 0;
    let mut repeated = 0;
    let mut late_notes = 0;
    for (u, chat) in chats.iter().enumerate() {
        let said = stored
            .get(&chat.id.to_string())
            .cloned()
            .unwrap_or_default();
        for i in 0..EACH {
            let text = format!("user {u} message {i}");
            match said.iter().filter(|s| **s == text).count() {
                0 => lost += 1,
                1 => {}
                n => panic!("{text:?} stored {n} times"),
            }
        }
        let texts = telegram.texts_in(*chat);
        late_notes += texts.iter().filter(|t| *t == LATE).count();
        let replies = texts.iter().filter(|t| *t != LATE).count();
        // at most the turn in flight at the kill comes again (all of its replies: a
        // help-desk answer and its rating question)
        assert!(
            replies <= expected + per_turn,
            "chat {u} got {replies} replies of {expected}: {texts:#?}"
        );
        repeated += replies.saturating_sub(expected);
        assert!(
            replies >= expected,
            "chat {u} got {replies} replies of {expected}: {texts:#?}"
        );
    }
    eprintln!(
        "SIGKILL after {at_kill} replies: {lost} of {} messages lost, {repeated} replies \
         repeated ({late_notes} late notes)",
        USERS as usize * EACH
    );
    assert_eq!(lost, 0, "every message confirmed to Telegram is answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_cut_by_the_grace_period_are_answered_after_the_restart() {
    const USERS: i64 = 10;
    let telegram = FakeTelegram::start(TOKEN).await;
    // every model call of the first run hangs: its turns outlive the grace period
    let model = FakeOpenAi::start((0..USERS).map(|_| Reply::Hang))
        .await
        .expect("model");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("kaiwa.toml"),
        config(telegram.url(), 1, Some(&model.base_url())),
    )
    .expect("config");
    let mut first = spawn_run(dir.path());
    let chats: Vec<Chat> = (0..USERS).map(|u| Chat::private(300 + u)).collect();
    for (u, chat) in chats.iter().enumerate() {
        telegram.send_text(*chat, 300 + u as i64, "/start");
    }
    for chat in &chats {
        telegram.wait_texts(*chat, 1).await;
    }
    common::settle(
        || telegram.calls_of("sendmessage").len(),
        Duration::from_millis(500),
        Duration::from_secs(10),
    )
    .await;
    let greeted: Vec<usize> = chats.iter().map(|c| telegram.texts_in(*c).len()).collect();
    for (u, chat) in chats.iter().enumerate() {
        telegram.send_text(*chat, 300 + u as i64, &format!("question {u}"));
    }
    tokio::time::timeout(Duration::from_secs(20), async {
        while model.requests().len() < USERS as usize {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("every turn reached the model");
    let pid = first.id().expect("pid");
    let terminated = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(terminated.success());
    let status = tokio::time::timeout(Duration::from_secs(15), first.wait())
        .await
        .expect("stops after the grace period")
        .expect("exit status");
    eprintln!("first run stopped: {status}");

    for _ in 0..USERS {
        model.push(Reply::text("Here is my answer."));
    }
    let mut second = spawn_run(dir.path());
    for (chat, greeted) in chats.iter().zip(&greeted) {
        telegram.wait_texts(*chat, greeted + 1).await;
    }
    common::settle(
        || telegram.calls_of("sendmessage").len(),
        Duration::from_secs(2),
        Duration::from_secs(20),
    )
    .await;
    let _ = second.start_kill();
    let _ = second.wait().await;
    let mut lost = 0;
    for (chat, greeted) in chats.iter().zip(&greeted) {
        let texts = telegram.texts_in(*chat);
        let answers = texts[*greeted..]
            .iter()
            .filter(|t| *t == "Here is my answer.")
            .count();
        if answers == 0 {
            lost += 1;
        }
        assert!(answers <= 1, "answered twice: {texts:#?}");
    }
    eprintln!("SIGTERM past the grace period: {lost} of {USERS} messages lost");
    assert_eq!(lost, 0);
}

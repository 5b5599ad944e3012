//! Two `kaiwa run` instances on one PostgreSQL database (a temporary server the test
//! starts) and the fake Bot API: one long-polls, both answer; one killed with SIGKILL in
//! the middle of a burst leaves its chats and the poller to the other. Every message is
//! stored once and in order, and a chat sees again at most the reply in flight at the
//! kill. SQLite: a second `kaiwa run` on the same file is refused.

mod common;

use kaiwa_tests::fake_telegram::{Chat, FakeTelegram};
use std::time::{Duration, Instant};

const TOKEN: &str = "777002:TWO-secret-token";

fn config(telegram_url: &str) -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../config");
    format!(
        r#"
[flows]
forms_dir = "{dir}/forms"
kb_dir = "{dir}/kb"
books = "{dir}/books.toml"
default_form = "engineer"

[server]
listen = "127.0.0.1:0"
shutdown_grace_secs = 5

[telegram]
token_env = "KAIWA_TEST_TELEGRAM_TOKEN"
api_url = "{telegram_url}"
private_flow = "assistant"
poll_timeout_secs = 1
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_answer_a_burst_once_and_in_order_when_one_is_killed() {
    const USERS: i64 = 50;
    const EACH: usize = 4;
    let telegram = FakeTelegram::start(TOKEN).await;
    let url = kaiwa_core::testing::postgres::database_url().await;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("kaiwa.toml"), config(telegram.url())).expect("config");
    let (mut one, log_one, _) = common::spawn_run_on(&url, dir.path(), TOKEN, None, "info");
    let (mut two, log_two, _) = common::spawn_run_on(&url, dir.path(), TOKEN, None, "info");

    // how many replies four messages get
    let control = Chat::private(1);
    for i in 0..EACH {
        telegram.send_text(control, 1, &format!("control {i}"));
    }
    telegram.wait_texts(control, 1).await;
    let expected = common::settle(
        || telegram.texts_in(control).len(),
        Duration::from_secs(1),
        Duration::from_secs(30),
    )
    .await;
    let per_turn = expected.div_ceil(EACH);
    let polling = |log: &std::sync::Mutex<String>| {
        let log = log.lock().unwrap_or_else(|p| p.into_inner());
        log.matches("Telegram poller lease taken").count()
            > log.matches("Telegram poller lease lost").count()
    };
    assert!(
        polling(&log_one) ^ polling(&log_two),
        "exactly one instance polls"
    );

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
        .wait_for("~50 replies", Duration::from_secs(60), |_| {
            burst_sends() >= 50
        })
        .await;
    // the poller dies: the other must take over polling and the dead one's chats
    let (victim, survivor) = if polling(&log_one) {
        (&mut one, &mut two)
    } else {
        (&mut two, &mut one)
    };
    // both instances took chats of the burst
    for log in [&log_one, &log_two] {
        let log = log.lock().unwrap_or_else(|p| p.into_inner());
        assert!(log.contains("took chats from the shared inbox"), "{log}");
    }
    victim.start_kill().expect("SIGKILL");
    let _ = victim.wait().await;
    let killed = Instant::now();
    let at_kill = burst_sends();

    // a message sent after the kill reaches the survivor through its own polling
    let late = Chat::private(999);
    telegram.send_text(late, 999, "after the kill");
    telegram
        .wait_for("the survivor polls", Duration::from_secs(30), |_| {
            !telegram.texts_in(late).is_empty()
        })
        .await;
    let poller_back = killed.elapsed();
    let complete = || {
        chats
            .iter()
            .all(|c| telegram.texts_in(*c).len() >= expected)
    };
    telegram
        .wait_for("every chat answered", Duration::from_secs(90), |_| {
            complete()
        })
        .await;
    let all_answered = killed.elapsed();
    common::settle(burst_sends, Duration::from_secs(2), Duration::from_secs(30)).await;
    let _ = survivor.start_kill();
    let _ = survivor.wait().await;

    let stored = common::stored_user_messages(&url).await;
    let (mut lost, mut repeated, mut out_of_order) = (0, 0, 0);
    for (u, chat) in chats.iter().enumerate() {
        let said = stored
            .get(&chat.id.to_string())
            .cloned()
            .unwrap_or_default();
        let wanted: Vec<String> = (0..EACH).map(|i| format!("user {u} message {i}")).collect();
        for text in &wanted {
            match said.iter().filter(|s| *s == text).count() {
                0 => lost += 1,
                1 => {}
                n => panic!("{text:?} stored {n} times"),
            }
        }
        if said != wanted {
            out_of_order += 1;
        }
        let replies = telegram
            .texts_in(*chat)
            .iter()
            .filter(|t| !t.starts_with("(I restarted"))
            .count();
        assert!(
            replies >= expected && replies <= expected + per_turn,
            "chat {u} got {replies} replies of {expected}: {:#?}",
            telegram.texts_in(*chat)
        );
        repeated += replies - expected;
    }
    eprintln!(
        "two instances, the poller SIGKILLed after {at_kill} replies: {lost} of {} messages \
         lost, {repeated} replies repeated, {out_of_order} chats out of order; polling again \
         after {:.1} s, every chat answered {:.1} s after the kill",
        USERS as usize * EACH,
        poller_back.as_secs_f64(),
        all_answered.as_secs_f64()
    );
    assert_eq!(lost, 0, "every message confirmed to Telegram is answered");
    assert_eq!(out_of_order, 0, "each chat's messages in order");
    assert!(poller_back < Duration::from_secs(15), "{poller_back:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_on_one_sqlite_file_is_refused_with_a_pointer_to_postgres() {
    let telegram = FakeTelegram::start(TOKEN).await;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("kaiwa.toml"), config(telegram.url())).expect("config");
    let (mut first, first_log) = common::spawn_run(dir.path(), TOKEN);
    let started = Instant::now();
    while !first_log
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains("health and metrics at")
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the first instance starts"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (mut second, second_log, reader) = common::spawn_run_with(dir.path(), TOKEN, None, "info");
    let status = tokio::time::timeout(Duration::from_secs(30), second.wait())
        .await
        .expect("the second exits")
        .expect("status");
    let _ = reader.await;
    assert!(!status.success());
    let log = second_log.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(log.contains("PostgreSQL"), "{log}");
    // the first goes on
    telegram.send_text(Chat::private(5), 5, "still there?");
    telegram.wait_texts(Chat::private(5), 1).await;
    let _ = first.start_kill();
    let _ = first.wait().await;
}

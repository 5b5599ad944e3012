//! `kaiwa run` on Slack's Socket Mode under the faults of a real deployment: killed with
//! SIGKILL in the middle of a burst, then started again on the same database. Slack
//! delivers again what was not acknowledged; what was acknowledged had been kept. After the
//! restart every message is stored once and answered once: a reply posted before the kill
//! and not yet recorded as delivered is found in the conversation by its label (Slack has
//! no idempotent post) and not posted again.

use crate::common;

use kaiwa_tests::fake_slack::{APP_TOKEN, BOT_TOKEN, FakeSlack};
use std::process::Stdio;
use std::time::Duration;

const LATE: &str = "(I restarted; in case these did not reach you:)";

fn config(slack: &FakeSlack) -> String {
    let head = common::head(10);
    format!(
        r#"
{head}
[slack]
bot_token_env = "KAIWA_TEST_SLACK_BOT"
app_token_env = "KAIWA_TEST_SLACK_APP"
api_url = "{}"
dm_flow = "assistant"
"#,
        slack.api_url()
    )
}

fn spawn(dir: &std::path::Path) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kaiwa"))
        .arg("run")
        .env("KAIWA_CONFIG", dir.join("kaiwa.toml"))
        .env(
            "KAIWA_DATABASE_URL",
            format!("sqlite://{}/kaiwa.db", dir.display()),
        )
        .env("KAIWA_TEST_SLACK_BOT", BOT_TOKEN)
        .env("KAIWA_TEST_SLACK_APP", APP_TOKEN)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("kaiwa starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_burst_killed_with_sigkill_loses_nothing_after_the_restart() {
    const USERS: usize = 30;
    const EACH: usize = 4;
    let slack = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("kaiwa.toml"), config(&slack)).expect("config");
    let mut first = spawn(dir.path());
    slack.wait_connected().await;

    // how many replies four messages get from a bot that is not killed
    for i in 0..EACH {
        slack.message("D0CONTROL", "UCONTROL", &format!("control {i}"), None);
    }
    slack
        .wait_for("the control's replies", Duration::from_secs(30), |f| {
            !f.messages_in("D0CONTROL").is_empty()
        })
        .await;
    let expected = common::settle(
        || slack.messages_in("D0CONTROL").len(),
        Duration::from_secs(1),
        Duration::from_secs(20),
    )
    .await;

    let chats: Vec<(String, String)> = (0..USERS)
        .map(|u| (format!("D4{u:02}"), format!("U4{u:02}")))
        .collect();
    for i in 0..EACH {
        for (u, (channel, user)) in chats.iter().enumerate() {
            slack.message(channel, user, &format!("user {u} message {i}"), None);
        }
    }
    let replies = || {
        chats
            .iter()
            .map(|(c, _)| slack.messages_in(c).len())
            .sum::<usize>()
    };
    slack
        .wait_for("~30 replies", Duration::from_secs(30), |_| replies() >= 30)
        .await;
    first.start_kill().expect("SIGKILL");
    let _ = first.wait().await;
    let at_kill = replies();
    let unacked_at_kill = slack.unacked();

    let mut second = spawn(dir.path());
    slack
        .wait_for(
            "every envelope acknowledged",
            Duration::from_secs(60),
            |f| f.unacked() == 0,
        )
        .await;
    common::settle(replies, Duration::from_secs(3), Duration::from_secs(60)).await;
    let _ = second.start_kill();
    let _ = second.wait().await;

    let stored =
        common::stored_user_messages(&format!("sqlite://{}/kaiwa.db", dir.path().display())).await;
    let mut lost = 0;
    let mut answered_twice = 0;
    for (u, (channel, _)) in chats.iter().enumerate() {
        let said = stored.get(channel).cloned().unwrap_or_default();
        for i in 0..EACH {
            let text = format!("user {u} message {i}");
            match said.iter().filter(|s| **s == text).count() {
                0 => lost += 1,
                1 => {}
                n => panic!("{text:?} stored {n} times"),
            }
        }
        // the replies the place shows, but the note over replies sent after the restart
        let got = slack
            .texts_in(channel)
            .iter()
            .filter(|t| *t != LATE)
            .count();
        assert!(got >= expected, "chat {u} got {got} replies of {expected}");
        if got > expected {
            answered_twice += 1;
            eprintln!("chat {u}: {:#?}", slack.texts_in(channel));
        }
    }
    eprintln!(
        "killed after {at_kill} replies with {unacked_at_kill} envelopes unacknowledged; \
         lost {lost}, chats with a reply sent again: {answered_twice} of {USERS}"
    );
    assert_eq!(lost, 0);
    // a reply posted before the kill is labelled (its metadata) and found in the
    // conversation's history: it is not posted again
    assert_eq!(answered_twice, 0);
}

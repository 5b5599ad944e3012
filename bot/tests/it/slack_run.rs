//! `kaiwa run` on Slack as a deployment runs it. Socket Mode under a fault: killed with
//! SIGKILL in the middle of a burst, then started again on the same database. Slack
//! delivers again what was not acknowledged; what was acknowledged had been kept. After the
//! restart every message is stored once and answered once: a reply posted before the kill
//! and not yet recorded as delivered is found in the conversation by its label (Slack has
//! no idempotent post) and not posted again. The Events API on two instances sharing one
//! PostgreSQL database behind a load balancer: every message once and in order.

use crate::common;

use kaiwa_tests::fake_slack::{APP_TOKEN, BOT_TOKEN, FakeSlack};
use std::sync::{Arc, Mutex};
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

/// `kaiwa run` on `url` with `dir`'s configuration and Slack's secrets in `env` (no
/// Telegram token: the variable `common` sets is not the one the configuration names).
fn spawn_on(
    url: &str,
    dir: &std::path::Path,
    env: &[(&str, &str)],
) -> (tokio::process::Child, Arc<Mutex<String>>) {
    let (child, log, _) = common::spawn_run_env(url, dir, "unused", None, "info", env);
    (child, log)
}

/// Socket Mode with the fake's tokens on `dir`'s SQLite database.
fn spawn(dir: &std::path::Path) -> tokio::process::Child {
    let url = format!("sqlite://{}/kaiwa.db", dir.display());
    let env = [
        ("KAIWA_TEST_SLACK_BOT", BOT_TOKEN),
        ("KAIWA_TEST_SLACK_APP", APP_TOKEN),
    ];
    spawn_on(&url, dir, &env).0
}

/// How many replies the messages sent to `channel` get, once the bot has gone quiet.
async fn settled_replies(slack: &FakeSlack, channel: &str) -> usize {
    slack
        .wait_for("the control's replies", Duration::from_secs(30), |f| {
            !f.messages_in(channel).is_empty()
        })
        .await;
    common::settle(
        || slack.messages_in(channel).len(),
        Duration::from_secs(1),
        Duration::from_secs(30),
    )
    .await
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
    let expected = settled_replies(&slack, "D0CONTROL").await;

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

/// Two `kaiwa run` on one PostgreSQL database behind a "load balancer" that alternates
/// Slack's Events API deliveries between them: each message is stored once and in order
/// and answered once, whichever instance received it; forged deliveries reach neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_take_events_api_deliveries_once_and_in_order() {
    use kaiwa_tests::fake_slack::{self, SIGNING_SECRET};
    const USERS: usize = 12;
    const EACH: usize = 3;
    let slack = FakeSlack::start().await;
    let url = kaiwa_core::testing::postgres::database_url().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = format!(
        "{}events_listen = \"127.0.0.1:0\"\nsigning_secret_env = \"KAIWA_TEST_SLACK_SECRET\"\n",
        config(&slack)
    );
    std::fs::write(dir.path().join("kaiwa.toml"), settings).expect("config");
    let env = [
        ("KAIWA_TEST_SLACK_BOT", BOT_TOKEN),
        ("KAIWA_TEST_SLACK_SECRET", SIGNING_SECRET),
    ];
    let (mut one, log_one) = spawn_on(&url, dir.path(), &env);
    let (mut two, log_two) = spawn_on(&url, dir.path(), &env);
    let mut hooks = Vec::new();
    for log in [&log_one, &log_two] {
        hooks.push(format!(
            "http://{}",
            common::logged_after(log, "Slack Events API at http://").await
        ));
    }
    let deliver = |to: usize, body: String| {
        let hook = hooks[to % 2].clone();
        async move {
            fake_slack::deliver(&hook, SIGNING_SECRET, fake_slack::now(), &body, false, None).await
        }
    };

    // how many replies a chat's messages get
    for i in 0..EACH {
        let (_, event) =
            slack.message_event("D0CONTROL", "UCONTROL", &format!("control {i}"), None);
        assert_eq!(deliver(i, event.to_string()).await, 200);
    }
    let expected = settled_replies(&slack, "D0CONTROL").await;

    let chats: Vec<(String, String)> = (0..USERS)
        .map(|u| (format!("D5{u:02}"), format!("U5{u:02}")))
        .collect();
    let mut sent = 0;
    for i in 0..EACH {
        for (u, (channel, user)) in chats.iter().enumerate() {
            let (_, event) =
                slack.message_event(channel, user, &format!("user {u} message {i}"), None);
            assert_eq!(deliver(sent, event.to_string()).await, 200);
            sent += 1;
        }
    }
    // a forged delivery to each instance: refused, nothing stored
    for hook in &hooks {
        let (_, event) = slack.message_event("D0FORGED", "UFORGED", "forged", None);
        let forged = fake_slack::deliver(
            hook,
            "not-the-secret",
            fake_slack::now(),
            &event.to_string(),
            false,
            None,
        )
        .await;
        assert_eq!(forged, 401);
    }
    slack
        .wait_for("every chat answered", Duration::from_secs(90), |f| {
            chats
                .iter()
                .all(|(c, _)| f.messages_in(c).len() >= expected)
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = one.start_kill();
    let _ = two.start_kill();
    let _ = one.wait().await;
    let _ = two.wait().await;

    let stored = common::stored_user_messages(&url).await;
    for (u, (channel, _)) in chats.iter().enumerate() {
        let said = stored.get(channel).cloned().unwrap_or_default();
        let wanted: Vec<String> = (0..EACH).map(|i| format!("user {u} message {i}")).collect();
        assert_eq!(said, wanted, "chat {u}: once and in order");
        assert_eq!(
            slack.messages_in(channel).len(),
            expected,
            "chat {u} answered once"
        );
    }
    assert!(!stored.contains_key("D0FORGED"));
    assert!(slack.messages_in("D0FORGED").is_empty());
    let received = |log: &std::sync::Mutex<String>| {
        log.lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains("refused")
    };
    assert!(
        received(&log_one) && received(&log_two),
        "both were sent a forgery"
    );
}

/// What an operator gets wrong at the start, each said with the variable to fix: Socket
/// Mode without its app-level token, a token Slack refuses, the Events API without its
/// signing secret (anyone could post events). No secret reaches the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_start_without_its_secrets_is_refused_with_the_variable_to_set() {
    let slack = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |settings: String, app: Option<&'static str>| {
        std::fs::write(dir.path().join("kaiwa.toml"), settings).expect("config");
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kaiwa"));
        command
            .arg("run")
            .env("KAIWA_CONFIG", dir.path().join("kaiwa.toml"))
            .env(
                "KAIWA_DATABASE_URL",
                format!("sqlite://{}/kaiwa.db", dir.path().display()),
            )
            .env("KAIWA_TEST_SLACK_BOT", BOT_TOKEN)
            .env_remove("KAIWA_TEST_SLACK_SECRET")
            .env("RUST_LOG", "info")
            .kill_on_drop(true);
        match app {
            Some(app) => command.env("KAIWA_TEST_SLACK_APP", app),
            None => command.env_remove("KAIWA_TEST_SLACK_APP"),
        };
        async move {
            let output = tokio::time::timeout(Duration::from_secs(30), command.output())
                .await
                .expect("it stops on its own")
                .expect("runs");
            (
                output.status.success(),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ),
            )
        }
    };
    let (ok, said) = run(config(&slack), None).await;
    assert!(!ok);
    assert!(said.contains("KAIWA_TEST_SLACK_APP"), "{said}");
    let (ok, said) = run(config(&slack), Some("xapp-revoked")).await;
    assert!(!ok);
    assert!(
        said.contains("invalid_auth") && said.contains("[slack] app_token_env"),
        "{said}"
    );
    assert!(
        !said.contains("xapp-revoked") && !said.contains(BOT_TOKEN),
        "{said}"
    );
    let events = format!(
        "{}events_listen = \"127.0.0.1:0\"\nsigning_secret_env = \"KAIWA_TEST_SLACK_SECRET\"\n",
        config(&slack)
    );
    let (ok, said) = run(events, None).await;
    assert!(!ok);
    assert!(said.contains("KAIWA_TEST_SLACK_SECRET"), "{said}");
}

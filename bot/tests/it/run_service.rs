//! `kaiwa run` as a process: refuses to idle without a platform token, serves Telegram and
//! Discord (the fakes on 127.0.0.1), `/healthz` and `/metrics`, and stops cleanly on SIGTERM.

use crate::common;

use kaiwa_tests::fake_discord::FakeDiscord;
use kaiwa_tests::fake_telegram::{Chat, FakeTelegram};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TOKEN: &str = "777000:RUN-secret-token";
const DISCORD_TOKEN: &str = "discord-RUN-secret";

fn config_dir() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../config").to_string()
}

fn config(telegram_url: &str, discord_proxy: &str) -> String {
    let head = common::head(10);
    format!(
        r#"
{head}
[telegram]
token_env = "KAIWA_TEST_TELEGRAM_TOKEN"
api_url = "{telegram_url}"
admin_chat_id = -100777
private_flow = "interview"
private_flow_arg = "engineer"
poll_timeout_secs = 1

[discord]
token_env = "KAIWA_TEST_DISCORD_TOKEN"
api_proxy = "{discord_proxy}"
admin_channel_id = 900
dm_flow_arg = "engineer"
"#
    )
}

#[tokio::test]
async fn without_a_platform_token_it_names_the_variable_and_exits_non_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kaiwa.toml");
    std::fs::write(&path, config("http://127.0.0.1:9", "http://127.0.0.1:9")).expect("config");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_kaiwa"))
        .arg("run")
        .env("KAIWA_CONFIG", &path)
        .env(
            "KAIWA_DATABASE_URL",
            format!("sqlite://{}/kaiwa.db", dir.path().display()),
        )
        .env_remove("KAIWA_TEST_TELEGRAM_TOKEN")
        .env_remove("KAIWA_TEST_DISCORD_TOKEN")
        .output()
        .await
        .expect("runs");
    assert_ne!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("KAIWA_TEST_TELEGRAM_TOKEN"), "{stderr}");
    assert!(stderr.contains("KAIWA_TEST_DISCORD_TOKEN"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_serves_telegram_and_discord_health_and_metrics_and_stops_on_sigterm() {
    let fake = FakeTelegram::start(TOKEN).await;
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kaiwa.toml");
    std::fs::write(&path, config(fake.url(), discord.api_proxy())).expect("config");
    // the log is collected; the health address is in it
    let (mut child, log, reader) =
        common::spawn_run_with(dir.path(), TOKEN, Some(DISCORD_TOKEN), "debug");
    let address = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let text = log.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(rest) = text.split("health and metrics at http://").nth(1) {
                return rest.split('/').next().unwrap_or_default().to_string();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the server starts");

    let chat = Chat::private(31);
    fake.send_text(chat, 31, "/start");
    fake.wait_texts(chat, 1).await;
    discord.wait_ready().await;
    discord.user_message(20, None, 32, "/start");
    discord.wait_texts(20, 1).await;
    let http = reqwest::Client::new();
    // the adapter is connected once it has polled
    let health = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let response = http
                .get(format!("http://{address}/healthz"))
                .send()
                .await
                .expect("healthz answers");
            if response.status() == 200 {
                return response.json::<serde_json::Value>().await.expect("json");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("healthy");
    assert_eq!(health["database"], "ok");
    assert_eq!(health["adapters"]["telegram"], true);
    assert_eq!(health["adapters"]["discord"], true);

    let metrics = http
        .get(format!("http://{address}/metrics"))
        .send()
        .await
        .expect("metrics answer")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("kaiwa_turns_total{flow=\"interview\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("kaiwa_active_sessions 2"), "{metrics}");
    assert!(metrics.contains("kaiwa_queued_messages 0"), "{metrics}");

    let pid = child.id().expect("pid");
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("stops within the grace period")
        .expect("exit status");
    let _ = reader.await;
    let log = log.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(status.success(), "{log}");
    assert!(log.contains("finishing the turns in flight"), "{log}");
    assert!(log.contains("stopped"), "{log}");
    // even at debug level the token never reaches the log
    assert!(
        !log.contains("RUN-secret-token"),
        "the token leaked:\n{log}"
    );
}

/// Starts `kaiwa run` on `dir`'s config and database; its log is collected.
fn spawn_run(dir: &std::path::Path) -> (tokio::process::Child, Arc<Mutex<String>>) {
    common::spawn_run(dir, TOKEN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_mid_turn_handles_the_message_after_restart_without_repeating_anything() {
    use kaiwa_tests::fake_openai::{FakeOpenAi, Reply};
    let telegram = FakeTelegram::start(TOKEN).await;
    // the first model call never answers: the process is killed while waiting for it
    let model = FakeOpenAi::start([Reply::Hang]).await.expect("model");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = format!(
        "{}\n[llm]\nbase_url = \"{}\"\nmodel = \"m\"\ntimeout_secs = 60\nmax_retries = 0\n",
        config(telegram.url(), "http://127.0.0.1:9").replace(
            "private_flow = \"interview\"\nprivate_flow_arg = \"engineer\"",
            "private_flow = \"assistant\""
        ),
        model.base_url()
    );
    std::fs::write(dir.path().join("kaiwa.toml"), config).expect("config");
    let chat = Chat::private(41);

    let (mut first, _log) = spawn_run(dir.path());
    telegram.send_text(chat, 41, "/start");
    let greeting = telegram.wait_texts(chat, 2).await;
    telegram.send_text(chat, 41, "hello there");
    tokio::time::timeout(Duration::from_secs(20), async {
        while model.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the turn reached the model");
    // let the dispatcher poll again: Telegram now considers the update delivered
    let polls = telegram.polls();
    tokio::time::timeout(Duration::from_secs(20), async {
        while telegram.polls() < polls + 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("polled again");
    first.start_kill().expect("SIGKILL");
    let _ = first.wait().await;

    model.push(Reply::text("Hi! Nice to meet you."));
    let (mut second, log) = spawn_run(dir.path());
    let texts = telegram.wait_texts(chat, greeting.len() + 1).await;
    assert_eq!(
        texts.last().map(String::as_str),
        Some("Hi! Nice to meet you.")
    );
    // nothing sent twice, nothing lost
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let texts = telegram.texts_in(chat);
    assert_eq!(texts.len(), greeting.len() + 1, "{texts:#?}");
    assert_eq!(
        model.requests().len(),
        2,
        "the interrupted turn ran once more, not twice"
    );
    let last_request = model.requests()[1].to_string();
    assert!(last_request.contains("hello there"), "{last_request}");
    let _ = second.start_kill();
    let _ = second.wait().await;
    let log = log.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(
        log.contains("handling messages left unfinished by the last run"),
        "{log}"
    );
}

/// A webhook delivery the database cannot take (a write lock held elsewhere longer than the
/// store waits) is answered 5xx, so Telegram delivers it again; once the database takes
/// writes the next delivery is kept and answered, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_delivery_that_cannot_be_stored_is_refused_with_5xx_and_delivered_again() {
    use sqlx::Connection;
    const SECRET: &str = "a-webhook-secret";
    let telegram = FakeTelegram::start(TOKEN).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config_dir = config_dir();
    let settings = format!(
        r#"
[flows]
forms_dir = "{config_dir}/forms"
kb_dir = "{config_dir}/kb"
books = "{config_dir}/books.toml"

[server]
listen = "127.0.0.1:0"

[telegram]
token_env = "KAIWA_TEST_TELEGRAM_TOKEN"
api_url = "{}"
private_flow = "assistant"
webhook_listen = "127.0.0.1:0"
webhook_path = "/hook/tg"
webhook_secret_env = "KAIWA_TEST_WEBHOOK_SECRET"
"#,
        telegram.url()
    );
    std::fs::write(dir.path().join("kaiwa.toml"), settings).expect("config");
    let db = format!("sqlite://{}/kaiwa.db", dir.path().display());
    let (mut child, log, _) = common::spawn_run_env(
        &db,
        dir.path(),
        TOKEN,
        None,
        "info",
        &[("KAIWA_TEST_WEBHOOK_SECRET", SECRET)],
    );
    let hook = format!(
        "http://{}",
        common::logged_after(&log, "Telegram webhook at http://").await
    );
    assert!(hook.ends_with("/hook/tg"), "{hook}");
    telegram.set_webhook(&hook, SECRET);
    let chat = Chat::private(31);
    telegram.send_text(chat, 31, "first");
    let first = telegram.wait_texts(chat, 1).await.len();
    let first = common::settle(
        || telegram.texts_in(chat).len(),
        Duration::from_secs(1),
        Duration::from_secs(20),
    )
    .await
    .max(first);
    // long polling is not used while a webhook is set
    assert_eq!(telegram.polls(), 0, "a webhook instance never polls");

    // the database is locked for longer than the store waits
    let mut lock = sqlx::SqliteConnection::connect(&db)
        .await
        .expect("a connection");
    sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut lock)
        .await
        .expect("locked");
    let update = telegram.send_text(chat, 31, "second");
    let started = std::time::Instant::now();
    while !telegram
        .deliveries()
        .iter()
        .any(|(id, _, status)| *id == update && *status >= 500)
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no refused delivery: {:?}\n{}",
            telegram.deliveries(),
            log.lock().unwrap_or_else(|p| p.into_inner())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sqlx::query("ROLLBACK")
        .execute(&mut lock)
        .await
        .expect("unlocked");
    drop(lock);
    telegram
        .wait_for(
            "delivered again and answered",
            Duration::from_secs(30),
            |_| telegram.texts_in(chat).len() > first,
        )
        .await;
    common::settle(
        || telegram.texts_in(chat).len(),
        Duration::from_secs(1),
        Duration::from_secs(20),
    )
    .await;
    let _ = child.start_kill();
    let _ = child.wait().await;
    let stored = common::stored_user_messages(&db).await;
    assert_eq!(
        stored.get("31").cloned().unwrap_or_default(),
        ["first", "second"],
        "the refused delivery is kept once, when delivered again"
    );
    let log = log.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(log.contains("Telegram will retry"), "{log}");
    assert!(!log.contains("second"), "no user text in the log");
}

/// A conversation a person took over stays theirs across a SIGKILL of `kaiwa run`: after
/// the restart the user's message is relayed, not answered, and the person's reply arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_over_conversation_stays_held_across_a_kill_and_restart() {
    const ADMIN: i64 = -100777;
    let telegram = FakeTelegram::start(TOKEN).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(telegram.url(), "http://127.0.0.1:9").replace(
        "poll_timeout_secs = 1",
        "poll_timeout_secs = 1\nadmins = [9]\ngroup_flow = \"helpdesk\"",
    );
    std::fs::write(dir.path().join("kaiwa.toml"), config).expect("config");
    let user = Chat::topic(-100_800, 3);
    let admin = Chat::private(ADMIN);
    let (mut first, _log) = spawn_run(dir.path());
    telegram.send_text(user, 55, "How do I export submissions?");
    telegram.wait_texts(user, 2).await;
    let keyboard = telegram.last_keyboard(user).expect("feedback buttons");
    let human = telegram.button_on(user, keyboard.message_id.unwrap_or_default(), "human");
    telegram.press(user, 55, keyboard.message_id.unwrap_or_default(), &human);
    telegram
        .wait_for("the handoff notice", Duration::from_secs(30), |_| {
            telegram
                .texts_in(admin)
                .iter()
                .any(|t| t.contains("[handoff]"))
        })
        .await;
    let notice = telegram.last_keyboard(admin).expect("the notice's buttons");
    let take = telegram.button_on(admin, notice.message_id.unwrap_or_default(), "Take over");
    let before = telegram.texts_in(user).len();
    telegram.press(admin, 9, notice.message_id.unwrap_or_default(), &take);
    telegram.wait_texts(user, before + 1).await;
    // the takeover is done once the admin chat has its notice
    telegram
        .wait_for("the takeover notice", Duration::from_secs(30), |_| {
            telegram
                .texts_in(admin)
                .iter()
                .any(|t| t.contains("[takeover]"))
        })
        .await;

    first.start_kill().expect("SIGKILL");
    let _ = first.wait().await;
    let (mut second, _log) = spawn_run(dir.path());
    let quiet = telegram.texts_in(user).len();
    let relayed = telegram.texts_in(admin).len();
    telegram.send_text(user, 55, "hello after the restart");
    telegram.wait_texts(admin, relayed + 1).await;
    let relay = telegram
        .calls_of("sendMessage")
        .into_iter()
        .rfind(|c| c.chat_id() == Some(ADMIN) && c.text().contains("hello after the restart"))
        .and_then(|c| c.message_id)
        .expect("relayed to the admin chat");
    assert_eq!(
        telegram.texts_in(user).len(),
        quiet,
        "the agent stays silent"
    );
    telegram.reply_text(admin, 9, "Hi, this is Ann from the team.", relay);
    let got = telegram.wait_texts(user, quiet + 1).await;
    assert!(
        got.last()
            .is_some_and(|t| t.ends_with("Hi, this is Ann from the team.")),
        "{got:?}"
    );
    let _ = second.start_kill();
    let _ = second.wait().await;
}

/// A Discord application without the Message Content intent (the gateway closes with 4014):
/// said at once with the fix, Discord reported down on `/healthz` while Telegram goes on;
/// alone, `kaiwa run` exits non-zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_discord_intent_is_said_at_once_and_leaves_the_other_platform_running() {
    let telegram = FakeTelegram::start(TOKEN).await;
    let discord = FakeDiscord::start().await;
    discord.close_on_identify(4014);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("kaiwa.toml"),
        config(telegram.url(), discord.api_proxy()),
    )
    .expect("config");
    let (mut child, log, _) =
        common::spawn_run_with(dir.path(), TOKEN, Some(DISCORD_TOKEN), "info");
    let health = format!(
        "http://{}",
        common::logged_after(&log, "health and metrics at http://").await
    );
    common::logged_after(&log, "Message Content Intent").await;
    let body = reqwest::get(&health).await.expect("healthz");
    assert_eq!(body.status().as_u16(), 503);
    let body = body.text().await.expect("a body");
    assert!(body.contains("\"discord\":false"), "{body}");
    // Telegram goes on
    let chat = Chat::private(44);
    telegram.send_text(chat, 44, "/start");
    telegram.wait_texts(chat, 1).await;
    assert!(child.try_wait().expect("status").is_none(), "still running");
    let _ = child.start_kill();
    let _ = child.wait().await;

    // Discord alone: nothing left to run, so it stops with the fix
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_kaiwa"))
            .arg("run")
            .env("KAIWA_CONFIG", dir.path().join("kaiwa.toml"))
            .env(
                "KAIWA_DATABASE_URL",
                format!("sqlite://{}/alone.db", dir.path().display()),
            )
            .env("KAIWA_TEST_DISCORD_TOKEN", DISCORD_TOKEN)
            .env_remove("KAIWA_TEST_TELEGRAM_TOKEN")
            .output(),
    )
    .await
    .expect("kaiwa run ends")
    .expect("runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("Message Content Intent"), "{stderr}");
}

#[tokio::test]
async fn discord_invite_url_names_the_application_scopes_and_permissions() {
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("kaiwa.toml"),
        config("http://127.0.0.1:9", discord.api_proxy()),
    )
    .expect("config");
    let run = |token: Option<&str>| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kaiwa"));
        command
            .args(["discord", "invite-url"])
            .env("KAIWA_CONFIG", dir.path().join("kaiwa.toml"))
            .env_remove("KAIWA_TEST_DISCORD_TOKEN");
        if let Some(token) = token {
            command.env("KAIWA_TEST_DISCORD_TOKEN", token);
        }
        command.output()
    };
    let output = run(Some(DISCORD_TOKEN)).await.expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let url = String::from_utf8_lossy(&output.stdout);
    assert!(
        url.starts_with(&format!(
            "https://discord.com/oauth2/authorize?client_id={}&scope=bot%20applications.commands&permissions=",
            kaiwa_tests::fake_discord::APP_ID
        )),
        "{url}"
    );
    // view, send, threads, history, embeds: nothing more
    let permissions: u64 = url
        .trim()
        .rsplit('=')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a number");
    assert_eq!(
        permissions,
        (1 << 10) | (1 << 11) | (1 << 38) | (1 << 35) | (1 << 16) | (1 << 14)
    );
    let output = run(None).await.expect("runs");
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("KAIWA_TEST_DISCORD_TOKEN"),
        "names the variable"
    );
}

/// `kaiwa check --online` against the fakes: everything fine, then a wrong token, an admin
/// chat the bot is not in, the intent off and a model server that is down, each reported
/// with its fix, the secrets never printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_online_reports_each_service_with_its_fix() {
    let telegram = FakeTelegram::start(TOKEN).await;
    let discord = FakeDiscord::start().await;
    let model =
        kaiwa_tests::fake_openai::FakeOpenAi::start([kaiwa_tests::fake_openai::Reply::text("ok")])
            .await
            .expect("model");
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |llm: &str| {
        std::fs::write(
            dir.path().join("kaiwa.toml"),
            format!(
                "{}\n[llm]\nbase_url = \"{llm}\"\nmodel = \"fake-model\"\ntimeout_secs = 3\n",
                config(telegram.url(), discord.api_proxy())
            ),
        )
        .expect("config");
    };
    let check = |telegram_token: &'static str| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_kaiwa"))
            .args(["check", "--online"])
            .env("KAIWA_CONFIG", dir.path().join("kaiwa.toml"))
            .env(
                "KAIWA_DATABASE_URL",
                format!("sqlite://{}/kaiwa.db", dir.path().display()),
            )
            .env("KAIWA_TEST_TELEGRAM_TOKEN", telegram_token)
            .env("KAIWA_TEST_DISCORD_TOKEN", DISCORD_TOKEN)
            .output()
    };
    write(&model.base_url());
    let fine = check(TOKEN).await.expect("runs");
    let out = String::from_utf8_lossy(&fine.stdout).to_string();
    assert!(
        fine.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&fine.stderr)
    );
    for expected in [
        "online database: ok",
        "online telegram: ok, the token is @kaiwa_test_bot's",
        "online telegram admin chat: ok",
        "online discord: ok",
        "online discord intent: ok",
        "online model: ok",
    ] {
        assert!(out.contains(expected), "{expected:?} in {out}");
    }

    // now everything a new operator gets wrong
    telegram.leave_chat(-100777);
    discord.close_on_identify(4014);
    write("http://127.0.0.1:9/v1");
    let bad = check(TOKEN).await.expect("runs");
    let out = String::from_utf8_lossy(&bad.stdout).to_string();
    assert!(!bad.status.success(), "{out}");
    assert!(
        out.contains(
            "online telegram admin chat: FAILED, the bot cannot see the admin chat -100777"
        ),
        "{out}"
    );
    assert!(out.contains("add the bot to it"), "{out}");
    assert!(
        out.contains("online discord intent: FAILED, the Message Content intent is off"),
        "{out}"
    );
    assert!(
        out.contains(
            "online model: FAILED, the model server at http://127.0.0.1:9/v1 does not answer"
        ),
        "{out}"
    );
    let wrong = check("123:wrong-token").await.expect("runs");
    let out = String::from_utf8_lossy(&wrong.stdout).to_string();
    assert!(!wrong.status.success());
    assert!(
        out.contains(
            "online telegram: FAILED, Telegram refused the token in KAIWA_TEST_TELEGRAM_TOKEN"
        ),
        "{out}"
    );
    let everything = format!("{out}{}", String::from_utf8_lossy(&wrong.stderr));
    for secret in ["wrong-token", TOKEN, DISCORD_TOKEN] {
        assert!(
            !everything.contains(secret),
            "{secret} printed: {everything}"
        );
    }
}

/// `kaiwa check --online` for Slack against the fake: the token, its scopes, Socket Mode
/// and the admin channel fine; then each with what a new operator gets wrong, and its fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_online_reports_slack_with_its_fixes() {
    use kaiwa_tests::fake_slack::{APP_TOKEN, BOT_TOKEN, FakeSlack};
    let slack = FakeSlack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("kaiwa.toml"),
        format!(
            "{}\n[slack]\nbot_token_env = \"KAIWA_TEST_SLACK_BOT\"\n\
             app_token_env = \"KAIWA_TEST_SLACK_APP\"\napi_url = \"{}\"\n\
             admin_channel_id = \"CADMIN\"\n",
            common::head(1),
            slack.api_url()
        ),
    )
    .expect("config");
    let check = |bot: &'static str, app: Option<&'static str>| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kaiwa"));
        command
            .args(["check", "--online"])
            .env("KAIWA_CONFIG", dir.path().join("kaiwa.toml"))
            .env(
                "KAIWA_DATABASE_URL",
                format!("sqlite://{}/kaiwa.db", dir.path().display()),
            )
            .env("KAIWA_TEST_SLACK_BOT", bot);
        match app {
            Some(app) => command.env("KAIWA_TEST_SLACK_APP", app),
            None => command.env_remove("KAIWA_TEST_SLACK_APP"),
        };
        command.output()
    };
    let fine = check(BOT_TOKEN, Some(APP_TOKEN)).await.expect("runs");
    let out = String::from_utf8_lossy(&fine.stdout).to_string();
    assert!(fine.status.success(), "{out}");
    for expected in [
        "online slack: ok, the token is kaiwa's in Fake team",
        "online slack scopes: ok",
        "online slack socket: ok",
        "online slack admin channel: ok, the bot is in CADMIN",
    ] {
        assert!(out.contains(expected), "{expected:?} in {out}");
    }

    slack.leave("CADMIN");
    slack.grant_only("chat:write,commands");
    let bad = check(BOT_TOKEN, None).await.expect("runs");
    let out = String::from_utf8_lossy(&bad.stdout).to_string();
    assert!(!bad.status.success(), "{out}");
    for expected in [
        "online slack scopes: FAILED, missing im:history, channels:history, groups:history",
        "online slack socket: FAILED, set KAIWA_TEST_SLACK_APP",
        "online slack admin channel: FAILED, the bot is not in CADMIN: type /invite",
    ] {
        assert!(out.contains(expected), "{expected:?} in {out}");
    }
    let wrong = check("xoxb-wrong", Some("xapp-wrong")).await.expect("runs");
    let out = String::from_utf8_lossy(&wrong.stdout).to_string();
    assert!(
        out.contains(
            "online slack: FAILED, Slack auth.test: invalid_auth: copy the Bot User OAuth Token"
        ),
        "{out}"
    );
    let everything = format!("{out}{}", String::from_utf8_lossy(&wrong.stderr));
    for secret in ["xoxb-wrong", "xapp-wrong", BOT_TOKEN, APP_TOKEN] {
        assert!(
            !everything.contains(secret),
            "{secret} printed: {everything}"
        );
    }
}

/// The first hour, as the README tells it: `kaiwa init`, the Telegram keys added,
/// `kaiwa check --online` against the fakes, then `kaiwa run` on the written configuration
/// answers a message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_then_check_online_then_run_answers_on_telegram() {
    let telegram = FakeTelegram::start(TOKEN).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("bot");
    let kaiwa = |args: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kaiwa"));
        command
            .args(args)
            .current_dir(dir.path())
            .env_remove("KAIWA_DATABASE_URL")
            .env("KAIWA_TEST_TELEGRAM_TOKEN", TOKEN)
            .env_remove("KAIWA_TEST_DISCORD_TOKEN");
        command
    };
    let init = kaiwa(&["init", "bot"]).output().await.expect("runs");
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let config = target.join("kaiwa.toml");
    let mut text = std::fs::read_to_string(&config).expect("written");
    text.push_str(&format!(
        "\n[server]\nlisten = \"127.0.0.1:0\"\n\n[telegram]\ntoken_env = \"KAIWA_TEST_TELEGRAM_TOKEN\"\napi_url = \"{}\"\nadmin_chat_id = -100777\nadmins = [9]\nprivate_flow = \"assistant\"\npoll_timeout_secs = 1\n",
        telegram.url()
    ));
    std::fs::write(&config, text).expect("edited");
    let config = config.display().to_string();
    let check = kaiwa(&["--config", &config, "check", "--online"])
        .output()
        .await
        .expect("runs");
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(out.contains("online telegram: ok"), "{out}");
    let mut run = kaiwa(&["--config", &config, "run"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("kaiwa run starts");
    let chat = Chat::private(71);
    telegram.send_text(chat, 71, "How do I stop a conversation?");
    let answer = telegram.wait_texts(chat, 1).await;
    assert!(answer.join("\n").contains("/end"), "{answer:?}");
    assert!(target.join("data").join("kaiwa.db").exists());
    let _ = run.start_kill();
    let _ = run.wait().await;
}

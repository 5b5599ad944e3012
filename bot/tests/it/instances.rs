//! Two `kaiwa run` instances on one PostgreSQL database (a temporary server the test
//! starts) and the fake Bot API: one long-polls, both answer; one killed with SIGKILL in
//! the middle of a burst leaves its chats and the poller to the other. Every message is
//! stored once and in order, and a chat sees again at most the reply in flight at the
//! kill. SQLite: a second `kaiwa run` on the same file is refused.

use crate::common;

use kaiwa_tests::fake_telegram::{Chat, FakeTelegram};
use std::time::{Duration, Instant};

const TOKEN: &str = "777002:TWO-secret-token";

fn config(telegram_url: &str) -> String {
    let head = common::head(5);
    format!(
        r#"
{head}
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
    // each took its place on the database and, among the other, writes through one writer
    let log_has = |log: &std::sync::Mutex<String>, from: usize, text: &str| {
        let log = log.lock().unwrap_or_else(|p| p.into_inner());
        log.get(from..).is_some_and(|l| l.contains(text))
    };
    for log in [&log_one, &log_two] {
        assert!(log_has(
            log,
            0,
            "running among the instances on the database"
        ));
    }
    telegram
        .wait_for("both count two instances", Duration::from_secs(10), |_| {
            log_has(&log_one, 0, "writers=1") && log_has(&log_two, 0, "writers=1")
        })
        .await;

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
    let survivor_log = if polling(&log_one) {
        &log_two
    } else {
        &log_one
    };
    let survivor_logged = survivor_log.lock().unwrap_or_else(|p| p.into_inner()).len();
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
    // once the killed one's place expired, the survivor is alone again: both its writers
    telegram
        .wait_for(
            "the survivor counts itself alone",
            Duration::from_secs(30),
            |_| log_has(survivor_log, survivor_logged, "writers=2"),
        )
        .await;
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

const SECRET: &str = "webhook-SECRET_42";

/// `kaiwa` with `args` on `dir`'s configuration, the bot token and `env`; its exit status
/// and what it printed (stdout, stderr).
async fn kaiwa(
    dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::ExitStatus, String, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_kaiwa"))
        .args(args)
        .env("KAIWA_CONFIG", dir.join("kaiwa.toml"))
        .env(
            "KAIWA_DATABASE_URL",
            format!("sqlite://{}/cli.db", dir.display()),
        )
        .env("KAIWA_TEST_TELEGRAM_TOKEN", TOKEN)
        .envs(env.iter().copied())
        .output()
        .await
        .expect("kaiwa runs");
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// An update as Telegram would post it, for deliveries the test makes itself.
fn forged_update(id: i64, chat: i64, text: &str) -> String {
    serde_json::json!({
        "update_id": id,
        "message": {
            "message_id": id, "date": 1,
            "chat": {"id": chat, "type": "private", "first_name": "Mallory"},
            "from": {"id": chat, "is_bot": false, "first_name": "Mallory"},
            "text": text,
        }
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_take_webhook_deliveries_once_and_refuse_forged_ones() {
    const USERS: i64 = 20;
    const EACH: usize = 3;
    let telegram = FakeTelegram::start(TOKEN).await;
    let url = kaiwa_core::testing::postgres::database_url().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = format!(
        "{}webhook_listen = \"127.0.0.1:0\"\nwebhook_secret_env = \"KAIWA_TEST_WEBHOOK_SECRET\"\nwebhook_url = \"https://bot.example.com/telegram\"\n",
        config(telegram.url())
    );
    std::fs::write(dir.path().join("kaiwa.toml"), settings).expect("config");
    let secret = [("KAIWA_TEST_WEBHOOK_SECRET", SECRET)];

    // without its secret a webhook instance does not start
    let (status, _, stderr) = kaiwa(dir.path(), &["run"], &[]).await;
    assert!(!status.success());
    assert!(stderr.contains("KAIWA_TEST_WEBHOOK_SECRET"), "{stderr}");

    // registered out of band, with the updates Kaiwa handles
    let (status, stdout, stderr) = kaiwa(dir.path(), &["webhook", "set"], &secret).await;
    assert!(status.success(), "{stdout}{stderr}");
    let webhook = telegram.webhook().expect("a webhook is set");
    assert_eq!(webhook.url, "https://bot.example.com/telegram");
    assert_eq!(webhook.secret.as_deref(), Some(SECRET));
    let allowed = webhook.allowed_updates.to_string();
    assert!(
        allowed.contains("message") && allowed.contains("callback_query"),
        "{allowed}"
    );
    let (status, stdout, _) = kaiwa(dir.path(), &["webhook", "info"], &[]).await;
    assert!(status.success());
    assert!(
        stdout.contains("https://bot.example.com/telegram"),
        "{stdout}"
    );

    let (mut one, log_one, _) =
        common::spawn_run_env(&url, dir.path(), TOKEN, None, "info", &secret);
    let (mut two, log_two, _) =
        common::spawn_run_env(&url, dir.path(), TOKEN, None, "info", &secret);
    let mut hooks = Vec::new();
    let mut health = Vec::new();
    for log in [&log_one, &log_two] {
        hooks.push(format!(
            "http://{}",
            common::logged_after(log, "Telegram webhook at http://").await
        ));
        health.push(format!(
            "http://{}",
            common::logged_after(log, "health and metrics at http://").await
        ));
    }
    // the team's load balancer: deliveries alternate between the instances
    telegram.deliver_to(hooks.clone());
    for address in &health {
        let (status, stdout, _) = kaiwa(dir.path(), &["health", "--url", address], &[]).await;
        assert!(status.success(), "{address}: {stdout}");
        assert!(stdout.contains("\"telegram_webhook\":true"), "{stdout}");
        // the instance's base address, as container checks are written: /healthz added
        let base = address.trim_end_matches("/healthz");
        let (status, stdout, _) = kaiwa(dir.path(), &["health", "--url", base], &[]).await;
        assert!(status.success(), "{base}: {stdout}");
        assert!(stdout.contains("\"telegram_webhook\":true"), "{stdout}");
    }

    // how many replies a chat's messages get
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

    let chats: Vec<Chat> = (0..USERS).map(|u| Chat::private(100 + u)).collect();
    let mut first_update = None;
    for i in 0..EACH {
        for (u, chat) in chats.iter().enumerate() {
            let id = telegram.send_text(*chat, 100 + u as i64, &format!("user {u} message {i}"));
            first_update.get_or_insert(id);
        }
    }
    let replies = || {
        chats
            .iter()
            .map(|c| telegram.texts_in(*c).len())
            .sum::<usize>()
    };
    telegram
        .wait_for("every chat answered", Duration::from_secs(90), |_| {
            chats
                .iter()
                .all(|c| telegram.texts_in(*c).len() >= expected)
        })
        .await;
    let delivered_to = |hook: &str| {
        telegram
            .deliveries()
            .iter()
            .filter(|(_, target, status)| target == hook && *status == 200)
            .count()
    };
    assert!(
        hooks.iter().all(|h| delivered_to(h) > 0),
        "both instances receive"
    );

    // forged deliveries: a wrong secret, none at all
    let client = reqwest::Client::new();
    let mut refused = 0;
    for (i, header) in [
        Some("wrong-secret"),
        None,
        Some(""),
        Some("webhook-SECRET_4"),
    ]
    .iter()
    .enumerate()
    {
        for hook in &hooks {
            let body = forged_update(900_000 + i as i64, 666, &format!("forged {i}"));
            let mut request = client.post(hook).header("content-type", "application/json");
            if let Some(header) = header {
                request = request.header("X-Telegram-Bot-Api-Secret-Token", *header);
            }
            let status = request.body(body).send().await.expect("posted").status();
            assert_eq!(status.as_u16(), 401);
            refused += 1;
        }
    }
    // bodies that are not updates
    let post = |hook: &str, body: Vec<u8>| {
        client
            .post(hook)
            .header("X-Telegram-Bot-Api-Secret-Token", SECRET)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let hook = &hooks[0];
    let status = |r: reqwest::Result<reqwest::Response>| r.expect("posted").status().as_u16();
    assert_eq!(status(post(hook, b"{not json".to_vec()).await), 400);
    assert_eq!(status(post(hook, b"{\"ok\":true}".to_vec()).await), 400);
    assert_eq!(status(post(hook, vec![b' '; 2 << 20]).await), 413);

    // duplicates: each update posted again to both instances, then Telegram delivering
    // everything again (a lost confirmation)
    let first_update = first_update.expect("updates sent");
    for id in first_update..first_update + 10 {
        let body = telegram.update_json(id).expect("an update");
        for hook in &hooks {
            assert_eq!(status(post(hook, body.clone().into_bytes()).await), 200);
        }
    }
    telegram.redeliver(first_update);
    let before = telegram.deliveries().len();
    telegram
        .wait_for(
            "everything delivered again",
            Duration::from_secs(60),
            |_| telegram.deliveries().len() >= before + USERS as usize * EACH,
        )
        .await;
    common::settle(replies, Duration::from_secs(2), Duration::from_secs(30)).await;

    // an instance dies: deliveries go on to the other
    one.start_kill().expect("SIGKILL");
    let _ = one.wait().await;
    let (status_dead, _, _) = kaiwa(dir.path(), &["health", "--url", &health[0]], &[]).await;
    assert!(!status_dead.success(), "a dead instance is unhealthy");
    let late = Chat::private(999);
    telegram.send_text(late, 999, "after the kill");
    telegram.wait_texts(late, 1).await;
    let _ = two.start_kill();
    let _ = two.wait().await;

    let stored = common::stored_user_messages(&url).await;
    let mut processed_twice = 0;
    for (u, chat) in chats.iter().enumerate() {
        let said = stored
            .get(&chat.id.to_string())
            .cloned()
            .unwrap_or_default();
        let wanted: Vec<String> = (0..EACH).map(|i| format!("user {u} message {i}")).collect();
        assert_eq!(said, wanted, "chat {u}: each message once, in order");
        processed_twice += telegram.texts_in(*chat).len().saturating_sub(expected);
    }
    assert!(!stored.contains_key("666"), "nothing forged is stored");
    assert!(telegram.texts_in(Chat::private(666)).is_empty());
    let (status, _, _) = kaiwa(dir.path(), &["webhook", "delete"], &[]).await;
    assert!(status.success());
    assert!(telegram.webhook().is_none());
    eprintln!(
        "webhook, two instances: {refused} forged deliveries refused (401), {} deliveries \
         of {} updates, {processed_twice} duplicates processed twice",
        telegram.deliveries().len(),
        USERS as usize * EACH
    );
    assert_eq!(processed_twice, 0, "a repeated delivery is processed once");
}

const DISCORD_TOKEN: &str = "discord-SHARDS-secret";

/// A Discord-only configuration running `shards`, on the fake at `proxy`.
fn discord_config(proxy: &str, shards: &str) -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../config");
    format!(
        r#"
[flows]
forms_dir = "{dir}/forms"
kb_dir = "{dir}/kb"
books = "{dir}/books.toml"

[server]
listen = "127.0.0.1:0"
shutdown_grace_secs = 5

[discord]
token_env = "KAIWA_TEST_DISCORD_TOKEN"
api_proxy = "{proxy}"
helpdesk_channel_ids = [10, 20]
dm_flow = "assistant"
shards = "{shards}"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_shards_split_across_instances_and_a_standby_takes_over_a_dead_ones() {
    use kaiwa_tests::fake_discord::{FakeDiscord, dm_channel_of};
    // guild A's events come on shard 0 of 2, guild B's on shard 1, DMs on shard 0
    const GUILD_A: u64 = kaiwa_tests::fake_discord::GUILD;
    const GUILD_B: u64 = (1 << 22) | 77;
    let discord = FakeDiscord::start().await;
    let url = kaiwa_core::testing::postgres::database_url().await;
    let mut dirs = Vec::new();
    for shards in ["0/2", "1/2", "0/2"] {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("kaiwa.toml"),
            discord_config(discord.api_proxy(), shards),
        )
        .expect("config");
        dirs.push(dir);
    }
    let spawn = |dir: &tempfile::TempDir| {
        common::spawn_run_on(&url, dir.path(), TOKEN, Some(DISCORD_TOKEN), "info")
    };
    let (mut zero, _log_zero, _) = spawn(&dirs[0]);
    let (mut one, _log_one, _) = spawn(&dirs[1]);
    discord
        .wait_for("both shards connected", Duration::from_secs(60), |d| {
            d.connected_shards() == [0, 1]
        })
        .await;
    // a third instance for shard 0 stands by: shard 0 is never run twice
    let (mut standby, log_standby, _) = spawn(&dirs[2]);
    common::logged_after(&log_standby, "standing by").await;
    let health = format!(
        "http://{}",
        common::logged_after(&log_standby, "health and metrics at http://").await
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut identified = discord.identified();
    identified.sort_unstable();
    assert_eq!(identified, [(0, 2), (1, 2)], "one identify per shard");

    // each guild's question is answered by the instance running its shard
    discord.user_message(10, Some(GUILD_A), 501, "How do I stop a conversation?");
    discord.user_message(20, Some(GUILD_B), 502, "How do I delete my data?");
    let dm = dm_channel_of(503);
    discord.user_message(dm, None, 503, "hello there");
    let answered_in = |parent: u64| {
        discord
            .threads()
            .iter()
            .filter(|(_, p, _)| *p == parent)
            .any(|(thread, _, _)| !discord.texts_in(*thread).is_empty())
    };
    discord
        .wait_for(
            "both guilds and the DM answered",
            Duration::from_secs(60),
            |d| answered_in(10) && answered_in(20) && !d.texts_in(dm).is_empty(),
        )
        .await;

    // the instance of shard 0 dies: the standby takes the shard over
    zero.start_kill().expect("SIGKILL");
    let _ = zero.wait().await;
    let killed = Instant::now();
    let before = discord.texts_in(dm).len();
    discord.user_message(dm, None, 503, "still there?");
    discord
        .wait_for("shard 0 again", Duration::from_secs(60), |d| {
            d.identified().iter().filter(|s| **s == (0, 2)).count() == 2
                && d.texts_in(dm).len() > before
        })
        .await;
    let taken_over = killed.elapsed();
    let body = reqwest::get(&health)
        .await
        .expect("healthz")
        .text()
        .await
        .expect("a body");
    assert!(body.contains("\"discord_shards\":\"0/2\""), "{body}");
    assert!(body.contains("\"discord_gateway\":true"), "{body}");
    assert_eq!(
        discord
            .identified()
            .iter()
            .filter(|s| **s == (1, 2))
            .count(),
        1,
        "shard 1 ran on one instance throughout"
    );
    eprintln!(
        "discord shards: shard 0 taken over by the standby and the DM answered {:.1} s after the kill",
        taken_over.as_secs_f64()
    );
    assert!(taken_over < Duration::from_secs(20), "{taken_over:?}");
    for child in [&mut one, &mut standby] {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

/// Once the replies in `chat` stop coming.
async fn settled(telegram: &FakeTelegram, chat: Chat) -> usize {
    common::settle(
        || telegram.texts_in(chat).len(),
        Duration::from_secs(1),
        Duration::from_secs(30),
    )
    .await
}

/// The lease holder's process id (`host-pid-random`).
fn holder_pid(holder: &str) -> Option<u32> {
    holder.rsplit('-').nth(1)?.parse().ok()
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal} {pid}");
}

/// An instance paused (SIGSTOP) in the middle of a turn, past its chat's lease: the other
/// instance takes the chat over and answers the message and the next one; resumed, the
/// paused instance finishes its turn from what it had read, and its commit is refused (the
/// session moved on): nothing it wrote lands over the newer turns, and it tells the user
/// nothing (the message was answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_paused_past_its_lease_does_not_write_over_the_newer_turn() {
    use kaiwa_tests::fake_openai::{FakeOpenAi, Reply};
    let telegram = FakeTelegram::start(TOKEN).await;
    let model = FakeOpenAi::serve(std::sync::Arc::new(|_| {
        Reply::text("Green tea is steamed; black tea is oxidised.")
    }))
    .await
    .expect("model");
    let url = kaiwa_core::testing::postgres::database_url().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = format!(
        "{}\n[llm]\nbase_url = \"{}\"\nmodel = \"fake-model\"\ntimeout_secs = 60\n",
        config(telegram.url()),
        model.base_url()
    );
    std::fs::write(dir.path().join("kaiwa.toml"), settings).expect("config");
    let (mut one, log_one, _) = common::spawn_run_on(&url, dir.path(), TOKEN, None, "info");
    let (mut two, log_two, _) = common::spawn_run_on(&url, dir.path(), TOKEN, None, "info");
    let pids = [one.id().expect("a pid"), two.id().expect("a pid")];

    let chat = Chat::private(4242);
    telegram.send_text(chat, 4242, "hello");
    telegram.wait_texts(chat, 1).await;
    settled(&telegram, chat).await;

    // the next answer is slow: the holder is paused while the model writes it
    model.set_delay(Duration::from_secs(4));
    let asked = model.requests().len();
    let before = telegram.texts_in(chat).len();
    telegram.send_text(
        chat,
        4242,
        "What is the difference between green and black tea?",
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while model.requests().len() == asked {
        assert!(Instant::now() < deadline, "the turn calls the model");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let store = kaiwa_core::store::connect(&url).await.expect("store");
    let leases = store.leases("chat:telegram:").await.expect("leases");
    let holder = leases
        .iter()
        .find(|l| l.name == format!("chat:telegram:{}", chat.id))
        .and_then(|l| holder_pid(&l.holder))
        .expect("the chat's holder");
    assert!(pids.contains(&holder), "{holder} is one of {pids:?}");
    signal(holder, "-STOP");
    let paused = Instant::now();

    // the other instance takes the chat over once the lease expires, and answers
    telegram
        .wait_for(
            "the other instance answers",
            Duration::from_secs(60),
            |_| telegram.texts_in(chat).len() > before,
        )
        .await;
    settled(&telegram, chat).await;
    telegram.send_text(chat, 4242, "And oolong?");
    let answered = telegram.texts_in(chat).len();
    telegram
        .wait_for(
            "the next message is answered",
            Duration::from_secs(60),
            |_| telegram.texts_in(chat).len() > answered,
        )
        .await;
    settled(&telegram, chat).await;
    let taken_over = paused.elapsed();
    let replies = telegram.texts_in(chat);

    // resumed: its turn (the model's answer waits for it) goes on from a stale session
    signal(holder, "-CONT");
    let stale_log = if holder == pids[0] {
        &log_one
    } else {
        &log_two
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stale_log
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains("answered by another instance meanwhile")
    {
        assert!(
            Instant::now() < deadline,
            "the resumed instance's commit is refused: {}",
            stale_log.lock().unwrap_or_else(|p| p.into_inner())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        telegram.texts_in(chat),
        replies,
        "the paused instance says nothing more"
    );
    let stored = common::stored_user_messages(&url).await;
    assert_eq!(
        stored
            .get(&chat.id.to_string())
            .cloned()
            .unwrap_or_default(),
        [
            "hello",
            "What is the difference between green and black tea?",
            "And oolong?"
        ],
        "each message stored once, in order: the stale turn wrote nothing"
    );
    let session = store
        .active_sessions(10)
        .await
        .expect("sessions")
        .into_iter()
        .find(|s| s.key.chat == chat.id.to_string())
        .expect("the chat's session");
    let transcript = store
        .recent_messages(session.id, 100)
        .await
        .expect("messages");
    let answers = transcript
        .iter()
        .filter(|m| m.role == kaiwa_core::store::Role::Assistant)
        .count();
    assert!(
        answers <= replies.len(),
        "no answer stored that was not sent: {transcript:#?}"
    );
    eprintln!(
        "paused instance: the chat taken over and two messages answered {:.1} s after SIGSTOP",
        taken_over.as_secs_f64()
    );
    for child in [&mut one, &mut two] {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    store.close().await;
}

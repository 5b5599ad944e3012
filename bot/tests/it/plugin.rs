//! Kaiwa mounted in a host bot: the `telegram_host` and `discord_host` examples, run as they
//! are against the fake Telegram and Discord servers. The host's command and button are
//! answered by the host only, Kaiwa's conversations by Kaiwa only, nothing twice; the
//! host's command menu and slash command survive Kaiwa's start.

#[allow(dead_code)]
#[path = "../../examples/telegram_host.rs"]
mod telegram_host;

#[allow(dead_code)]
#[path = "../../examples/discord_host.rs"]
mod discord_host;

use kaiwa::teloxide::prelude::*;
use kaiwa::{Kaiwa, Options};
use kaiwa_core::llm::openai::{OpenAiClient, OpenAiConfig};
use kaiwa_core::llm::{ChatModel, ModelRouter};
use kaiwa_tests::fake_discord::{FakeDiscord, GUILD};
use kaiwa_tests::fake_openai::{FakeOpenAi, Reply};
use kaiwa_tests::fake_telegram::{Chat, FakeTelegram};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const TOKEN: &str = "4242:plugin-test";
const HELPDESK: u64 = 8_100;
const PLAIN: u64 = 8_200;

/// Kaiwa's configuration as a host reads it: a file (`--config`, written by
/// [`kaiwa_tests::write_config`]) and a database URL (`--database-url`).
fn configured(dir: &Path, sections: &str) -> Options {
    Options {
        config: Some(kaiwa_tests::write_config(dir, sections)),
        database_url: Some(format!("sqlite://{}/kaiwa.db", dir.display())),
    }
}

async fn open(options: &Options, telegram: Option<&str>, discord: Option<&str>) -> Kaiwa {
    open_with(options, telegram, discord, ModelRouter::none()).await
}

async fn open_with(
    options: &Options,
    telegram: Option<&str>,
    discord: Option<&str>,
    models: ModelRouter,
) -> Kaiwa {
    let (settings, _) = options.settings().expect("settings");
    let mut builder = Kaiwa::builder(settings)
        .database_url(options.database_url.clone().unwrap_or_default())
        .models(models);
    if let Some(token) = telegram {
        builder = builder.telegram_token(token);
    }
    if let Some(token) = discord {
        builder = builder.discord_token(token);
    }
    builder.build().await.expect("kaiwa")
}

/// Stops the host when the test ends, passing or not.
struct Running(tokio::task::JoinHandle<anyhow::Result<()>>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The new texts in `chat` once they stop coming.
async fn settled(fake: &FakeTelegram, chat: Chat, before: usize) -> Vec<String> {
    fake.wait_texts(chat, before + 1).await;
    kaiwa_tests::once_quiet(|| fake.texts_in(chat), before).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_telegram_host_and_kaiwa_each_answer_only_their_own_updates() {
    let fake = FakeTelegram::start(TOKEN).await;
    // the host's own menu, from its earlier start
    fake.set_menu(&[("ping", "is the bot there?")]);
    let dir = tempfile::tempdir().expect("tempdir");
    let options = configured(
        dir.path(),
        &format!(
            "[telegram]\napi_url = \"{}\"\nprivate_flow = \"interview\"\n\
             private_flow_arg = \"engineer\"\n",
            fake.url()
        ),
    );
    let kaiwa = open(&options, Some(TOKEN), None).await;
    let _host = Running(tokio::spawn(telegram_host::host(kaiwa)));
    // the default menu first, then the Japanese one
    fake.wait_for("Kaiwa's menus", Duration::from_secs(20), |_| {
        fake.menu("ja").contains(&"help".to_string())
    })
    .await;
    assert!(
        fake.menu("").contains(&"ping".to_string()),
        "{:?}",
        fake.menu("")
    );
    assert!(
        fake.menu("ja").contains(&"ping".to_string()),
        "{:?}",
        fake.menu("ja")
    );
    assert!(fake.menu("ja").contains(&"interview".to_string()));

    let chat = Chat::private(77);
    // the host's command: "pong" with its button, and nothing from Kaiwa
    fake.send_text(chat, 77, "/ping");
    let answered = settled(&fake, chat, 0).await;
    assert_eq!(answered, ["pong"]);
    let keyboard = fake.last_keyboard(chat).expect("the host's button");
    let (label, data) = keyboard.buttons()[0].clone();
    assert_eq!((label.as_str(), data.as_str()), ("again", "again"));

    // the host's button: answered once, by the host (no "no longer active" from Kaiwa)
    fake.press(chat, 77, keyboard.message_id.expect("message id"), "again");
    let again = settled(&fake, chat, 1).await;
    assert_eq!(again, ["pong"]);
    let presses = fake.calls_of("answerCallbackQuery");
    assert_eq!(presses.len(), 1, "{presses:?}");
    assert!(presses[0].params.get("text").is_none(), "{presses:?}");

    // Kaiwa's conversation: the interview, and the host stays out of it
    fake.send_text(chat, 77, "hello");
    let greeted = settled(&fake, chat, 2).await;
    assert!(
        !greeted.is_empty() && !greeted.iter().any(|t| t == "pong"),
        "{greeted:?}"
    );
    let (_, english) = fake
        .last_keyboard(chat)
        .expect("Kaiwa's language buttons")
        .buttons()
        .into_iter()
        .find(|(label, _)| label.contains("English"))
        .expect("an English button");
    assert!(english.starts_with("kaiwa|"), "{english}");
    let kaiwa_keyboard = fake.last_keyboard(chat).and_then(|c| c.message_id);
    let before = fake.texts_in(chat).len();
    fake.press(chat, 77, kaiwa_keyboard.expect("message id"), &english);
    let asked = settled(&fake, chat, before).await;
    assert!(asked.iter().any(|t| t.contains("country")), "{asked:?}");
    assert_eq!(fake.calls_of("answerCallbackQuery").len(), 2);

    // Kaiwa's own command; a command neither knows is left unanswered by Kaiwa
    let before = fake.texts_in(chat).len();
    fake.send_text(chat, 77, "/help");
    let help = settled(&fake, chat, before).await;
    assert_eq!(help.len(), 1, "{help:?}");
    assert!(help[0].contains("/end"), "{help:?}");
    fake.send_text(chat, 77, "/frobnicate");
    fake.send_text(chat, 77, "/ping");
    let last = settled(&fake, chat, before + 1).await;
    assert_eq!(
        last,
        ["pong"],
        "the unknown command is nobody's: only the ping is answered"
    );
    let pongs = fake.texts_in(chat).iter().filter(|t| *t == "pong").count();
    assert_eq!(pongs, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_discord_host_and_kaiwa_each_answer_only_their_own_events() {
    let fake = FakeDiscord::start().await;
    // the host's slash command, registered by an earlier start
    fake.register_command("ping", "Is the bot there?");
    let dir = tempfile::tempdir().expect("tempdir");
    let options = configured(
        dir.path(),
        &format!(
            "[discord]\napi_proxy = \"{}\"\nhelpdesk_channel_ids = [{HELPDESK}]\n",
            fake.api_proxy()
        ),
    );
    let kaiwa = open(&options, None, Some("discord-plugin-token")).await;
    // what a host that overwrites its commands in bulk would put in its list
    let listed = serde_json::to_value(kaiwa.discord().expect("plugin").commands())
        .expect("commands as JSON");
    let _host = Running(tokio::spawn(discord_host::host(kaiwa)));
    fake.wait_ready().await;
    let mut kaiwas: Vec<String> = fake
        .command_names()
        .into_iter()
        .filter(|n| n != "ping")
        .collect();
    let mut offered: Vec<String> = listed
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect();
    kaiwas.sort();
    offered.sort();
    assert_eq!(
        offered, kaiwas,
        "the commands a host can register are the ones Kaiwa does"
    );
    fake.wait_for(
        "the host's ping registered again",
        Duration::from_secs(20),
        |f| {
            f.requests()
                .iter()
                .any(|r| r.method == "POST" && r.body["name"] == "ping")
        },
    )
    .await;
    let names = fake.command_names();
    assert!(names.iter().any(|n| n == "ping"), "{names:?}");
    assert!(names.iter().any(|n| n == "help"), "{names:?}");
    assert!(
        !fake.requests().iter().any(|r| r.method == "PUT"),
        "no bulk overwrite of the application's commands"
    );

    // the host's text command in a channel that is not Kaiwa's
    fake.user_message(PLAIN, Some(GUILD), 41, "!ping");
    assert_eq!(fake.wait_texts(PLAIN, 1).await, ["pong"]);

    // the host's slash command: answered by the host, not deferred by Kaiwa
    let ping = fake.slash(PLAIN, Some(GUILD), 41, "ping", "");
    fake.wait_for("the host's /ping", Duration::from_secs(20), |f| {
        f.callbacks().iter().any(|(id, _, _)| *id == ping)
    })
    .await;
    // a host's component: Kaiwa leaves it alone ("no longer active" would be its answer)
    let foreign = fake.press(PLAIN, Some(GUILD), 41, 1, "host|vote");

    // Kaiwa's help-desk channel is Kaiwa's, "!ping" too: a thread with Kaiwa's answer, and
    // no "pong" from the host
    fake.user_message(HELPDESK, Some(GUILD), 42, "!ping");
    fake.wait_for("a thread", Duration::from_secs(20), |f| {
        !f.threads().is_empty()
    })
    .await;
    let (thread, parent, _) = fake.threads()[0].clone();
    assert_eq!(parent, HELPDESK);
    let answer = fake.wait_texts(thread, 1).await;
    assert!(answer[0] != "pong", "{answer:?}");

    // Kaiwa's slash command in its thread: deferred and answered by Kaiwa alone
    let help = fake.slash(thread, Some(GUILD), 42, "help", "");
    fake.wait_for("Kaiwa's /help", Duration::from_secs(20), |f| {
        f.texts_in(thread).len() >= 2
    })
    .await;
    kaiwa_tests::once_quiet(|| fake.texts_in(thread), 2).await;

    let callbacks = fake.callbacks();
    let of = |id: u64| -> Vec<u64> {
        callbacks
            .iter()
            .filter(|(i, _, _)| *i == id)
            .map(|(_, kind, _)| *kind)
            .collect()
    };
    assert_eq!(of(ping), [4], "the host's reply only: {callbacks:?}");
    assert_eq!(of(help), [5], "Kaiwa's deferral only: {callbacks:?}");
    assert!(of(foreign).is_empty(), "{callbacks:?}");
    assert_eq!(
        fake.texts_in(PLAIN),
        ["pong"],
        "nothing else in the host's channel"
    );
    assert!(
        fake.texts_in(HELPDESK).is_empty(),
        "nothing in Kaiwa's channel itself"
    );
    assert!(
        !fake.texts_in(thread).iter().any(|t| t == "pong"),
        "{:?}",
        fake.texts_in(thread)
    );
}

/// A model server that streams `replies` for the assistant, a word every 200 ms.
async fn streaming_assistant(replies: &[&str]) -> (FakeOpenAi, ModelRouter) {
    let model = FakeOpenAi::start(replies.iter().map(|r| Reply::text(r)))
        .await
        .expect("model");
    model.set_stream_pace(Duration::from_millis(200));
    let client: Arc<dyn ChatModel> =
        Arc::new(OpenAiClient::new(OpenAiConfig::new(model.base_url(), "fake")).expect("client"));
    (model, ModelRouter::none().with_agent("assistant", client))
}

fn telegram_section(fake: &FakeTelegram) -> String {
    format!(
        "[telegram]\napi_url = \"{}\"\nprivate_flow = \"interview\"\n\
         private_flow_arg = \"engineer\"\n",
        fake.url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_reaches_kaiwa_through_its_listener_and_the_host_goes_on() {
    let fake = FakeTelegram::start(TOKEN).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = configured(dir.path(), &telegram_section(&fake));
    let story = "Once upon a time there was a bot that told very long stories to everyone \
                 who asked, and it went on and on about rivers, mountains, trains and tea.";
    let (model, models) = streaming_assistant(&[story]).await;
    let kaiwa = open_with(&options, Some(TOKEN), None, models).await;
    let _host = Running(tokio::spawn(telegram_host::host(kaiwa)));
    let chat = Chat::private(91);
    fake.send_text(chat, 91, "/chat");
    let before = settled(&fake, chat, 0).await.len();
    fake.send_text(chat, 91, "tell me a story");
    let drafts = fake.wait_draft(4).await;
    assert!(
        drafts
            .iter()
            .all(|d| d.params["can_stop"] == true || d.params["text"] == ""),
        "{drafts:?}"
    );
    let draft = drafts[0].params["draft_id"].as_i64().expect("draft id");
    // the stop update comes through Kaiwa's polling, not the host's dispatcher
    fake.stop_generation(chat, draft);
    let reply = settled(&fake, chat, before).await;
    assert_eq!(reply.len(), 1, "{reply:?}");
    assert!(
        reply[0].contains("(stopped)") && !reply[0].contains("tea"),
        "{reply:?}"
    );
    assert_eq!(
        model.abandoned_soon(1).await,
        1,
        "the model request was cancelled"
    );
    // and the host's own command still reaches the host
    let before = fake.texts_in(chat).len();
    fake.send_text(chat, 91, "/ping");
    assert_eq!(settled(&fake, chat, before).await, ["pong"]);
}

/// A host that keeps teloxide's own polling and mounts only Kaiwa's branch.
async fn polling_host(kaiwa: Kaiwa) -> anyhow::Result<()> {
    let bot = kaiwa.telegram_bot().expect("a token");
    let plugin = kaiwa.telegram().await?;
    let ping = |bot: Bot, m: Message| async move {
        bot.send_message(m.chat.id, "pong").await?;
        Ok::<(), kaiwa::teloxide::RequestError>(())
    };
    let handler = dptree::entry().branch(plugin.handler()).branch(
        Update::filter_message()
            .filter(|m: Message| m.text() == Some("/ping"))
            .endpoint(ping),
    );
    Dispatcher::builder(bot, handler).build().dispatch().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_its_own_polling_gets_its_updates_and_kaiwa_its_own_without_a_dead_stop() {
    let fake = FakeTelegram::start(TOKEN).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = configured(dir.path(), &telegram_section(&fake));
    let story = "A long story about tea and trains, told slowly and one word at a time, \
                 so that writing it takes the model a few seconds.";
    let (_model, models) = streaming_assistant(&[story]).await;
    let kaiwa = open_with(&options, Some(TOKEN), None, models).await;
    let _host = Running(tokio::spawn(polling_host(kaiwa)));
    let chat = Chat::private(92);
    fake.send_text(chat, 92, "/ping");
    assert_eq!(settled(&fake, chat, 0).await, ["pong"]);
    fake.send_text(chat, 92, "/chat");
    let opened = settled(&fake, chat, 1).await;
    assert!(
        !opened.iter().any(|t| t == "pong" || t.contains("Unknown")),
        "{opened:?}"
    );
    let before = fake.texts_in(chat).len();
    fake.send_text(chat, 92, "tell me a story");
    // while Kaiwa's model writes, the host answers in the same chat at once
    fake.wait_for(
        "the story's first words",
        Duration::from_secs(10),
        |calls| {
            calls
                .iter()
                .any(|c| c.method == "sendmessagedraft" && c.text().starts_with("A long"))
        },
    )
    .await;
    fake.send_text(chat, 92, "/ping");
    fake.wait_for("the host's pong", Duration::from_secs(10), |calls| {
        calls
            .iter()
            .filter(|c| c.method == "sendmessage" && c.text() == "pong")
            .count()
            == 2
    })
    .await;
    assert!(
        !fake.texts_in(chat).iter().any(|t| t.starts_with("A long")),
        "the host did not wait for Kaiwa's turn: {:?}",
        fake.texts_in(chat)
    );
    let told = settled(&fake, chat, before + 1).await;
    assert_eq!(told, [story]);
    // the host's dispatcher would drop a stop update: no Stop button is offered
    let drafts = fake.calls_of("sendMessageDraft");
    assert!(!drafts.is_empty());
    assert!(
        drafts.iter().all(|d| d.params["can_stop"] != true),
        "{drafts:?}"
    );
    let before = fake.texts_in(chat).len();
    fake.send_text(chat, 92, "/frobnicate");
    fake.send_text(chat, 92, "/ping");
    assert_eq!(settled(&fake, chat, before).await, ["pong"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kaiwa_takes_only_the_forum_topic_configured_for_it() {
    let fake = FakeTelegram::start(TOKEN).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = configured(
        dir.path(),
        &format!(
            "[telegram]\napi_url = \"{}\"\nprivate_chats = false\n\n\
             [[telegram.places]]\nchat = -100500\ntopic = 7\nflow = \"helpdesk\"\n",
            fake.url()
        ),
    );
    let kaiwa = open(&options, Some(TOKEN), None).await;
    let _host = Running(tokio::spawn(telegram_host::host(kaiwa)));
    let (kaiwas, other_topic) = (Chat::topic(-100500, 7), Chat::topic(-100500, 8));
    let group = Chat {
        id: -100500,
        topic: None,
    };
    let private = Chat::private(93);

    // the topic configured for the help-desk is Kaiwa's
    fake.send_text(kaiwas, 93, "How do I stop a conversation?");
    let answer = settled(&fake, kaiwas, 0).await;
    assert!(answer[0].contains("/end"), "{answer:?}");
    // another topic of the same group, and private chats, are not: the host's ping works
    // there and nothing else is answered
    fake.send_text(other_topic, 93, "How do I stop a conversation?");
    fake.send_text(private, 93, "hello");
    fake.send_text(private, 93, "/help");
    fake.send_text(other_topic, 93, "/ping");
    fake.send_text(private, 93, "/ping");
    let pongs = |f: &FakeTelegram| {
        f.calls_of("sendMessage")
            .iter()
            .filter(|c| c.text() == "pong")
            .count()
    };
    fake.wait_for("both pongs", Duration::from_secs(20), |_| pongs(&fake) == 2)
        .await;
    kaiwa_tests::once_quiet(
        || {
            fake.calls_of("sendMessage")
                .iter()
                .map(|c| c.text().to_string())
                .collect()
        },
        0,
    )
    .await;
    assert!(
        fake.texts_in(other_topic).is_empty(),
        "{:?}",
        fake.texts_in(other_topic)
    );
    assert_eq!(fake.texts_in(private), ["pong"]);
    assert_eq!(fake.texts_in(group), ["pong"]);
    assert_eq!(
        fake.texts_in(kaiwas).len(),
        answer.len(),
        "nothing more in Kaiwa's topic"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_direct_messages_left_to_the_host_kaiwa_stays_out_of_them() {
    let fake = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = configured(
        dir.path(),
        &format!(
            "[discord]\napi_proxy = \"{}\"\nhelpdesk_channel_ids = [{HELPDESK}]\ndms = false\n",
            fake.api_proxy()
        ),
    );
    let kaiwa = open(&options, None, Some("discord-plugin-token")).await;
    let _host = Running(tokio::spawn(discord_host::host(kaiwa)));
    fake.wait_ready().await;
    let dm = kaiwa_tests::fake_discord::dm_channel_of(44);
    fake.user_message(dm, None, 44, "hello");
    fake.user_message(dm, None, 44, "!ping");
    assert_eq!(fake.wait_texts(dm, 1).await, ["pong"]);
    kaiwa_tests::once_quiet(|| fake.texts_in(dm), 0).await;
    assert_eq!(fake.texts_in(dm), ["pong"], "nothing from Kaiwa in the DM");
}

#[tokio::test]
async fn a_place_naming_a_flow_that_does_not_exist_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = configured(
        dir.path(),
        "[[telegram.places]]\nchat = -100500\nflow = \"helpdesks\"\n",
    );
    let (settings, _) = options.settings().expect("settings");
    let built = Kaiwa::builder(settings)
        .database_url(options.database_url.clone().unwrap_or_default())
        .build()
        .await;
    let error = format!("{:#}", built.err().expect("refused"));
    assert!(
        error.contains("chat -100500")
            && error.contains("\"helpdesks\"")
            && error.contains("(flows: "),
        "{error}"
    );
}

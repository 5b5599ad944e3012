//! `kaiwa db copy` and `kaiwa db backup` as a team uses them: conversations of the three
//! flows on SQLite, copied to PostgreSQL (a temporary server), where `kaiwa run` goes on
//! with each as if nothing had moved; and the bad input around them (an unknown scheme, a
//! source that is not there, a target with data, a copy killed midway, a backup into a
//! folder that does not exist).

use crate::common;

use kaiwa_core::message::Platform;
use kaiwa_tests::fake_telegram::{Chat, FakeTelegram};
use std::path::Path;
use std::time::Duration;

const TOKEN: &str = "777003:COPY-secret-token";
const ADMIN: i64 = -100777;

fn config(telegram_url: &str) -> String {
    let head = common::head(5);
    format!(
        r#"
{head}
[telegram]
token_env = "KAIWA_TEST_TELEGRAM_TOKEN"
api_url = "{telegram_url}"
admin_chat_id = {ADMIN}
admins = [9]
private_flow = "interview"
private_flow_arg = "engineer"
group_flow = "helpdesk"
poll_timeout_secs = 1
"#
    )
}

/// `kaiwa ARGS` in `dir` (its `kaiwa.toml`) on the database `url`, `stdin` piped in.
async fn kaiwa(dir: &Path, url: &str, args: &[&str], stdin: &str) -> common::Ran {
    common::kaiwa_in(dir, &dir.join("kaiwa.toml"), url, args, stdin).await
}

/// `kaiwa ARGS` fails, saying `says` on stderr.
async fn refused(dir: &Path, url: &str, args: &[&str], says: &str) {
    let run = kaiwa(dir, url, args, "").await;
    assert_ne!(run.code, Some(0), "{args:?}: {}", run.stdout);
    assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
}

fn run_on(
    url: &str,
    dir: &Path,
) -> (
    tokio::process::Child,
    std::sync::Arc<std::sync::Mutex<String>>,
) {
    let (child, log, _) = common::spawn_run_on(url, dir, TOKEN, None, "info");
    (child, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_of_the_three_flows_go_on_after_a_copy_to_postgres() {
    let telegram = FakeTelegram::start(TOKEN).await;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("kaiwa.toml"), config(telegram.url())).expect("config");
    let sqlite = format!("sqlite://{}/kaiwa.db", dir.path().display());

    // on SQLite: an interview half answered, a help-desk conversation a person took over
    let (mut bot, _log) = run_on(&sqlite, dir.path());
    let applicant = Chat::private(501);
    // each step once its question is there (a reply may come in several messages)
    let says = |chat: Chat, words: &'static str| {
        let telegram = &telegram;
        async move {
            telegram
                .wait_for(words, Duration::from_secs(30), |_| {
                    telegram
                        .texts_in(chat)
                        .iter()
                        .any(|t| t.to_lowercase().contains(words))
                })
                .await
        }
    };
    telegram.send_text(applicant, 501, "hello");
    says(applicant, "language").await;
    telegram.send_text(applicant, 501, "English");
    says(applicant, "country").await;
    telegram.send_text(applicant, 501, "Japan");
    says(applicant, "name").await;
    let user = Chat::topic(-100_800, 3);
    let admin = Chat::private(ADMIN);
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
    telegram.press(admin, 9, notice.message_id.unwrap_or_default(), &take);
    telegram
        .wait_for("the takeover notice", Duration::from_secs(30), |_| {
            telegram
                .texts_in(admin)
                .iter()
                .any(|t| t.contains("[takeover]"))
        })
        .await;
    let _ = bot.start_kill();
    let _ = bot.wait().await;
    // and a reader's book, in the terminal
    let reading = kaiwa(
        dir.path(),
        &sqlite,
        &["chat", "reading", "--user", "mika"],
        "Kokoro\n",
    )
    .await;
    assert_eq!(reading.code, Some(0), "{}", reading.stderr);
    let before = kaiwa_core::store::connect(&sqlite).await.expect("sqlite");
    let records = before
        .reading_records(Platform::Console, "mika")
        .await
        .expect("records");
    assert_eq!(records.len(), 1, "{}", reading.stdout);
    let holds = before.holds().await.expect("holds");
    assert_eq!(holds.len(), 1);
    before.close().await;

    // copied to PostgreSQL
    let postgres = kaiwa_core::testing::postgres::database_url().await;
    let copy = kaiwa(
        dir.path(),
        &sqlite,
        &["db", "copy", "--from", &sqlite, "--to", &postgres],
        "",
    )
    .await;
    assert_eq!(copy.code, Some(0), "{}{}", copy.stdout, copy.stderr);
    assert!(copy.stderr.contains("sessions: "), "{}", copy.stderr);
    assert!(
        copy.stdout.contains("counted on both sides"),
        "{}",
        copy.stdout
    );
    assert!(
        !copy.stderr.contains("kaiwa@"),
        "no credentials: {}",
        copy.stderr
    );

    // on PostgreSQL every conversation goes on where it stopped
    let after = kaiwa_core::store::connect(&postgres)
        .await
        .expect("postgres");
    let held = after.holds().await.expect("holds");
    assert_eq!(
        held, holds,
        "the person still holds the help-desk conversation"
    );
    assert_eq!(
        after
            .reading_records(Platform::Console, "mika")
            .await
            .expect("records"),
        records
    );
    after.close().await;
    let (mut bot, _log) = run_on(&postgres, dir.path());
    let asked = telegram.texts_in(applicant).len();
    telegram.send_text(applicant, 501, "Aiko Sato");
    says(applicant, "email").await;
    let replies = telegram.texts_in(applicant);
    assert!(
        replies[asked..]
            .iter()
            .all(|t| !t.contains("Which language")),
        "the next question, not the first: {replies:?}"
    );
    // the held conversation is relayed to the team, not answered by the agent
    let quiet = telegram.texts_in(user).len();
    let relayed = telegram.texts_in(admin).len();
    telegram.send_text(user, 55, "hello after the move");
    telegram.wait_texts(admin, relayed + 1).await;
    assert!(
        telegram
            .texts_in(admin)
            .iter()
            .any(|t| t.contains("hello after the move")),
        "relayed to the admins"
    );
    assert_eq!(
        telegram.texts_in(user).len(),
        quiet,
        "the agent stays silent"
    );
    let _ = bot.start_kill();
    let _ = bot.wait().await;
    // the reader's book is there for the next message
    let reading = kaiwa(
        dir.path(),
        &postgres,
        &["chat", "reading", "--user", "mika"],
        "/status\n",
    )
    .await;
    assert_eq!(reading.code, Some(0), "{}", reading.stderr);
    assert!(reading.stdout.contains("Kokoro"), "{}", reading.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_copies_and_backups_are_refused_clearly_and_a_killed_copy_is_finished_by_the_next() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("kaiwa.toml"), config("http://127.0.0.1:9")).expect("config");
    let sqlite = format!("sqlite://{}/kaiwa.db", dir.path().display());
    // a database with something in it: a bench's finished interviews
    let bench = kaiwa(
        dir.path(),
        &sqlite,
        &[
            "bench",
            "--sessions",
            "600",
            "--turns",
            "11",
            "--database",
            &sqlite,
        ],
        "",
    )
    .await;
    assert_eq!(bench.code, Some(0), "{}", bench.stderr);
    let postgres = kaiwa_core::testing::postgres::database_url().await;

    // an unknown scheme, a source that is not there: said, nothing made
    refused(
        dir.path(),
        &sqlite,
        &["db", "copy", "--from", &sqlite, "--to", "mysql://x/y"],
        "unknown database URL",
    )
    .await;
    let missing = format!("sqlite://{}/nope.db", dir.path().display());
    refused(
        dir.path(),
        &sqlite,
        &["db", "copy", "--from", &missing, "--to", &postgres],
        "no SQLite database at",
    )
    .await;
    assert!(!dir.path().join("nope.db").exists(), "no empty file made");

    // a copy killed midway: kaiwa run refuses the half-written target, the copy run again
    // starts over and finishes
    let mut copying = tokio::process::Command::new(env!("CARGO_BIN_EXE_kaiwa"))
        .args(["db", "copy", "--from", &sqlite, "--to", &postgres])
        .env("KAIWA_CONFIG", dir.path().join("kaiwa.toml"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("copy starts");
    // killed once the first table is in
    {
        use tokio::io::AsyncBufReadExt;
        let stderr = copying.stderr.take().expect("stderr");
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("users:") {
                break;
            }
        }
    }
    copying.start_kill().expect("SIGKILL");
    let _ = copying.wait().await;
    let (mut bot, log) = run_on(&postgres, dir.path());
    let status = tokio::time::timeout(Duration::from_secs(30), bot.wait())
        .await
        .expect("kaiwa run stops")
        .expect("status");
    assert!(!status.success());
    let said = log.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(said.contains("did not finish"), "{said}");
    let again = kaiwa(
        dir.path(),
        &sqlite,
        &["db", "copy", "--from", &sqlite, "--to", &postgres],
        "",
    )
    .await;
    assert_eq!(again.code, Some(0), "{}{}", again.stdout, again.stderr);
    assert!(
        again.stderr.contains("did not finish: emptying"),
        "{}",
        again.stderr
    );

    // a target that holds data is refused, and nothing is written
    refused(
        dir.path(),
        &sqlite,
        &["db", "copy", "--from", &sqlite, "--to", &postgres],
        "already holds data",
    )
    .await;

    // backups: a folder that does not exist, a file that does, then one that works and
    // restores by a copy
    let nowhere = dir.path().join("no-such-folder/backup.db");
    refused(
        dir.path(),
        &sqlite,
        &["db", "backup", &nowhere.display().to_string()],
        "does not exist",
    )
    .await;
    let backup = dir.path().join("backup.db");
    let made = kaiwa(
        dir.path(),
        &sqlite,
        &["db", "backup", &backup.display().to_string()],
        "",
    )
    .await;
    assert_eq!(made.code, Some(0), "{}", made.stderr);
    assert!(made.stdout.contains("backed up"), "{}", made.stdout);
    refused(
        dir.path(),
        &sqlite,
        &["db", "backup", &backup.display().to_string()],
        "exists already",
    )
    .await;
    let pg_backup = kaiwa(dir.path(), &postgres, &["db", "backup", "x.dump"], "").await;
    assert_ne!(pg_backup.code, Some(0));
    assert!(
        pg_backup.stderr.contains("pg_dump --format=custom"),
        "{}",
        pg_backup.stderr
    );
    let restored = format!("sqlite://{}/restored.db", dir.path().display());
    let restore = kaiwa(
        dir.path(),
        &sqlite,
        &[
            "db",
            "copy",
            "--from",
            &format!("sqlite://{}", backup.display()),
            "--to",
            &restored,
        ],
        "",
    )
    .await;
    assert_eq!(restore.code, Some(0), "{}", restore.stderr);
    let (a, b) = (
        kaiwa_core::store::connect(&sqlite).await.expect("live"),
        kaiwa_core::store::connect(&restored)
            .await
            .expect("restored"),
    );
    assert_eq!(
        a.submissions(None).await.expect("read"),
        b.submissions(None).await.expect("read"),
        "the backup holds every application"
    );
    a.close().await;
    b.close().await;
}

/// A target the copy may not write (a PostgreSQL role without rights on the schema): said,
/// with the database named, and the source is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_without_permissions_is_refused_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("kaiwa.toml"), config("http://127.0.0.1:9")).expect("config");
    let sqlite = format!("sqlite://{}/kaiwa.db", dir.path().display());
    let reading = kaiwa(
        dir.path(),
        &sqlite,
        &["chat", "reading", "--user", "mika"],
        "Kokoro\n",
    )
    .await;
    assert_eq!(reading.code, Some(0), "{}", reading.stderr);
    let postgres = kaiwa_core::testing::postgres::database_url().await;
    // a role that may connect but not create anything (PostgreSQL 15: no CREATE on public)
    let role = format!("visitor_{}", std::process::id());
    let admin = sqlx::PgPool::connect(&postgres).await.expect("server");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN CREATE ROLE {role} LOGIN; END IF; END $$; \
         REVOKE CREATE ON SCHEMA public FROM PUBLIC"
    )))
    .execute(&admin)
    .await
    .expect("a role without rights");
    admin.close().await;
    let target = postgres.replacen("postgres://kaiwa@", &format!("postgres://{role}@"), 1);
    refused(
        dir.path(),
        &sqlite,
        &["db", "copy", "--from", &sqlite, "--to", &target],
        "permission denied",
    )
    .await;
    // the message names the database it could not write (without credentials)
    refused(
        dir.path(),
        &sqlite,
        &["db", "copy", "--from", &sqlite, "--to", &target],
        "kaiwa db copy into postgres://***@",
    )
    .await;
    // the source is as it was
    let store = kaiwa_core::store::connect(&sqlite).await.expect("source");
    assert_eq!(
        store
            .reading_records(kaiwa_core::message::Platform::Console, "mika")
            .await
            .expect("records")
            .len(),
        1
    );
    store.close().await;
}

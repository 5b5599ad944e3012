//! Upgrades with conversations in flight: a database written by the previous release's
//! binary (`bot/tests/fixtures/upgrade/`: an interview half answered, a help-desk
//! conversation a person holds, a reading record, an inbox row not handled) is migrated by
//! this release's `kaiwa migrate`, on SQLite and on PostgreSQL, and every conversation goes on.

use crate::common;
use kaiwa_core::message::Platform;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/upgrade/526baff")
        .join(name)
}

fn config(dir: &Path) -> PathBuf {
    let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/../config");
    let path = dir.join("kaiwa.toml");
    std::fs::write(
        &path,
        format!(
            "[flows]\nforms_dir = \"{repo}/forms\"\nkb_dir = \"{repo}/kb\"\nbooks = \"{repo}/books.toml\"\ndefault_form = \"engineer\"\n"
        ),
    )
    .expect("config");
    path
}

/// `kaiwa ARGS` on `url`, `stdin` piped in; (exit code, stdout, stderr).
async fn kaiwa(dir: &Path, url: &str, args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
    let ran = common::kaiwa_in(dir, &config(dir), url, args, stdin).await;
    (ran.code, ran.stdout, ran.stderr)
}

/// Migrates the fixture at `url` and goes on with each of its conversations.
async fn upgrade_goes_on(dir: &Path, url: &str) {
    let (code, stdout, stderr) = kaiwa(dir, url, &["migrate"], "").await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let store = kaiwa_core::store::connect(url).await.expect("opens");
    let holds = store.holds().await.expect("holds");
    assert_eq!(holds.len(), 1, "the held conversation");
    assert_eq!(holds[0].key.user, "ren");
    let records = store
        .reading_records(Platform::Console, "mika")
        .await
        .expect("records");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].title, "Kokoro");
    let kept = store
        .inbox_pending(Platform::Telegram)
        .await
        .expect("inbox");
    assert_eq!(kept.len(), 1, "the message kept and not handled");
    assert_eq!(kept[0].message_id, "9001");
    store.close().await;
    // the interview asks its next question, not its first
    let (code, stdout, stderr) = kaiwa(
        dir,
        url,
        &["chat", "interview", "--form", "engineer", "--user", "aiko"],
        "Aiko Sato\n",
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.to_lowercase().contains("email"), "{stdout}");
    assert!(!stdout.contains("Which language"), "{stdout}");
}

#[tokio::test]
async fn a_sqlite_database_of_the_last_release_is_upgraded_with_its_conversations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("kaiwa.db");
    std::fs::copy(fixture("sqlite.db"), &file).expect("fixture copied");
    upgrade_goes_on(dir.path(), &format!("sqlite://{}", file.display())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_of_the_last_release_is_upgraded_with_its_conversations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = kaiwa_core::testing::postgres::database_url().await;
    let dump = std::fs::read_to_string(fixture("postgres.sql")).expect("fixture");
    let pool = sqlx::PgPool::connect(&url).await.expect("database");
    sqlx::raw_sql(sqlx::AssertSqlSafe(dump))
        .execute(&pool)
        .await
        .expect("the dump loads");
    pool.close().await;
    upgrade_goes_on(dir.path(), &url).await;
}

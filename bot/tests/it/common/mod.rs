//! What the binary's tests share: `kaiwa run` as a child process.

use kaiwa_core::store::Role;
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The start of a test's `kaiwa.toml`: the shipped forms, knowledge base and books
/// (`default_form = "engineer"`), and `/healthz` on any free port with `grace_secs` to
/// finish turns at shutdown.
#[allow(dead_code)]
pub fn head(grace_secs: u64) -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../config");
    format!(
        r#"[flows]
forms_dir = "{dir}/forms"
kb_dir = "{dir}/kb"
books = "{dir}/books.toml"
default_form = "engineer"

[server]
listen = "127.0.0.1:0"
shutdown_grace_secs = {grace_secs}
"#
    )
}

/// Starts `kaiwa run` on `dir`'s `kaiwa.toml` and `kaiwa.db`, with `telegram_token` in
/// `KAIWA_TEST_TELEGRAM_TOKEN` and no Discord token; its log (info) is collected.
pub fn spawn_run(
    dir: &std::path::Path,
    telegram_token: &str,
) -> (tokio::process::Child, Arc<Mutex<String>>) {
    let (child, log, _reader) = spawn_run_with(dir, telegram_token, None, "info");
    (child, log)
}

/// [`spawn_run`] with a Discord token too (`None`: none) and a log level; also returns the
/// task collecting the log, which ends once the process's stderr closes.
pub fn spawn_run_with(
    dir: &std::path::Path,
    telegram_token: &str,
    discord_token: Option<&str>,
    log_level: &str,
) -> (
    tokio::process::Child,
    Arc<Mutex<String>>,
    tokio::task::JoinHandle<()>,
) {
    let url = format!("sqlite://{}/kaiwa.db", dir.display());
    spawn_run_on(&url, dir, telegram_token, discord_token, log_level)
}

/// [`spawn_run_with`] on the database `url` (another instance on the same one, say).
#[allow(dead_code)]
pub fn spawn_run_on(
    url: &str,
    dir: &std::path::Path,
    telegram_token: &str,
    discord_token: Option<&str>,
    log_level: &str,
) -> (
    tokio::process::Child,
    Arc<Mutex<String>>,
    tokio::task::JoinHandle<()>,
) {
    spawn_run_env(url, dir, telegram_token, discord_token, log_level, &[])
}

/// [`spawn_run_on`] with more environment variables (a webhook's secret, say).
#[allow(dead_code)]
pub fn spawn_run_env(
    url: &str,
    dir: &std::path::Path,
    telegram_token: &str,
    discord_token: Option<&str>,
    log_level: &str,
    env: &[(&str, &str)],
) -> (
    tokio::process::Child,
    Arc<Mutex<String>>,
    tokio::task::JoinHandle<()>,
) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kaiwa"));
    command.envs(env.iter().copied());
    command
        .arg("run")
        .env("KAIWA_CONFIG", dir.join("kaiwa.toml"))
        .env("KAIWA_DATABASE_URL", url)
        .env("KAIWA_TEST_TELEGRAM_TOKEN", telegram_token)
        .env("RUST_LOG", log_level)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    match discord_token {
        Some(token) => command.env("KAIWA_TEST_DISCORD_TOKEN", token),
        None => command.env_remove("KAIWA_TEST_DISCORD_TOKEN"),
    };
    let mut child = command.spawn().expect("kaiwa starts");
    let log = Arc::new(Mutex::new(String::new()));
    let stderr = child.stderr.take();
    let collected = log.clone();
    let reader = tokio::spawn(async move {
        let Some(stderr) = stderr else { return };
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut log = collected.lock().unwrap_or_else(|p| p.into_inner());
            log.push_str(&line);
            log.push('\n');
        }
    });
    (child, log, reader)
}

/// Waits until `count` stops changing for `quiet` (or `limit` passes); returns it.
#[allow(dead_code)]
pub async fn settle(count: impl Fn() -> usize, quiet: Duration, limit: Duration) -> usize {
    let deadline = Instant::now() + limit;
    let mut last = count();
    let mut since = Instant::now();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = count();
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            break;
        }
    }
    last
}

/// The user messages stored per chat, in the order they were stored.
#[allow(dead_code)]
pub async fn stored_user_messages(url: &str) -> HashMap<String, Vec<String>> {
    let store = kaiwa_core::store::connect(url).await.expect("store");
    let mut by_chat: HashMap<String, Vec<String>> = HashMap::new();
    for session in store.active_sessions(10_000).await.expect("sessions") {
        let said = store
            .recent_messages(session.id, 1_000)
            .await
            .expect("messages");
        by_chat.entry(session.key.chat.clone()).or_default().extend(
            said.into_iter()
                .filter(|m| m.role == Role::User)
                .map(|m| m.text),
        );
    }
    store.close().await;
    by_chat
}

/// Waits (up to 30 s) for the log to hold `marker` and returns the word after it: an
/// address a child logged (`"health and metrics at http://"` gives `ADDR/healthz`).
#[allow(dead_code)]
pub async fn logged_after(log: &Mutex<String>, marker: &str) -> String {
    let started = Instant::now();
    loop {
        {
            let log = log.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(rest) = log.split(marker).nth(1) {
                return rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{marker:?} not logged: {log}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What a finished `kaiwa` command said.
#[allow(dead_code)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// `kaiwa ARGS` with the configuration `config` on the database `url`, `stdin` piped in
/// (a `kaiwa chat`'s log goes to `dir`).
#[allow(dead_code)]
pub async fn kaiwa_in(
    dir: &std::path::Path,
    config: &std::path::Path,
    url: &str,
    args: &[&str],
    stdin: &str,
) -> Ran {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kaiwa"))
        .args(args)
        .env("KAIWA_CONFIG", config)
        .env("KAIWA_DATABASE_URL", url)
        .env("KAIWA_CHAT_LOG", dir.join("chat.log"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kaiwa starts");
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.as_bytes()).await.expect("stdin");
    }
    let output = child.wait_with_output().await.expect("kaiwa ends");
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

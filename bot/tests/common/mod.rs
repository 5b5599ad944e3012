//! What the binary's tests share: `kaiwa run` as a child process.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Starts `kaiwa run` on `dir`'s `kaiwa.toml` and `kaiwa.db`, with `telegram_token` in
/// `KAIWA_TEST_TELEGRAM_TOKEN` and no Discord token; its log (info) is collected.
pub fn spawn_run(
    dir: &std::path::Path,
    telegram_token: &str,
) -> (tokio::process::Child, Arc<Mutex<String>>) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kaiwa"))
        .arg("run")
        .env("KAIWA_CONFIG", dir.join("kaiwa.toml"))
        .env(
            "KAIWA_DATABASE_URL",
            format!("sqlite://{}/kaiwa.db", dir.display()),
        )
        .env("KAIWA_TEST_TELEGRAM_TOKEN", telegram_token)
        .env_remove("KAIWA_TEST_DISCORD_TOKEN")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kaiwa starts");
    let log = Arc::new(Mutex::new(String::new()));
    if let Some(stderr) = child.stderr.take() {
        let collected = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut log = collected.lock().unwrap_or_else(|p| p.into_inner());
                log.push_str(&line);
                log.push('\n');
            }
        });
    }
    (child, log)
}

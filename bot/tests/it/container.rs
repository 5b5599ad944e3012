//! Kaiwa's image (`Containerfile`) built and run with podman against the fake Telegram on
//! the host's network: a non-root process, a health check that passes and then fails on a
//! database that cannot be written, an answered message, SIGTERM within the grace period
//! with nothing lost, the SQLite database kept in its volume across a removed container,
//! and a second container on the same volume refused.
//!
//! Needs root, podman, runc and debootstrap (the base image is made from Debian's packages
//! by `scripts/debian-base`) and a minute or more, so it is ignored by `cargo test`;
//! `.ci/run` runs it with `cargo test -p kaiwa --test it container -- --ignored`.

use kaiwa_tests::fake_telegram::{Chat, FakeTelegram};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const TOKEN: &str = "777000:CONTAINER-secret-token";
const IMAGE: &str = "localhost/kaiwa:container-test";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_path_buf()
}

/// `podman ARGS`: its exit code and what it printed (stdout, then stderr).
async fn podman(args: &[&str]) -> (Option<i32>, String) {
    let output = tokio::process::Command::new("podman")
        .args(args)
        .current_dir(repo())
        .output()
        .await
        .expect("podman runs");
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.code(), text)
}

/// `podman ARGS`, which must succeed; what it printed on stdout, trimmed.
async fn podman_ok(args: &[&str]) -> String {
    let output = tokio::process::Command::new("podman")
        .args(args)
        .current_dir(repo())
        .output()
        .await
        .expect("podman runs");
    assert!(
        output.status.success(),
        "podman {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// What this sandbox needs of `podman run` (not the files users get): runc, and limits
/// below the machine's.
const SANDBOX: [&str; 6] = [
    "--runtime",
    "runc",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
];

/// `podman run` of the image as the container `name` on the host's network (`-d`:
/// `detached`), the volume `volume` at `/data` and the test's configuration in `config_dir`:
/// its exit code and what it printed.
async fn run(name: &str, detached: bool, volume: &str, config_dir: &Path) -> (Option<i32>, String) {
    let data = format!("{volume}:/data");
    let config_mount = format!("{}:/etc/kaiwa-test:ro", config_dir.display());
    let token = format!("KAIWA_TEST_TELEGRAM_TOKEN={TOKEN}");
    let mut args = vec!["run", if detached { "-d" } else { "--rm" }];
    args.extend(["--name", name, "--network", "host"]);
    args.extend(SANDBOX);
    args.extend([
        "-v",
        &data,
        "-v",
        &config_mount,
        "-e",
        "KAIWA_CONFIG=/etc/kaiwa-test/kaiwa.toml",
        "-e",
        &token,
        IMAGE,
    ]);
    podman(&args).await
}

/// Starts the container `name` ([`run`], detached).
async fn start(name: &str, volume: &str, config_dir: &Path) {
    let (code, out) = run(name, true, volume, config_dir).await;
    assert_eq!(code, Some(0), "podman run {name}: {out}");
}

/// Runs `podman healthcheck run` until it passes (or `limit` passes): how long it took.
async fn healthy_within(name: &str, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let (code, out) = podman(&["healthcheck", "run", name]).await;
        if code == Some(0) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{name} not healthy after {limit:?}: {out}\n{}",
            podman(&["logs", name]).await.1
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The container's log.
async fn logs(name: &str) -> String {
    podman(&["logs", name]).await.1
}

/// A free port on 127.0.0.1 for the health server inside the container (the host's
/// network: `kaiwa health` reads the address from the configuration).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A folder with the test's `kaiwa.toml`: the image's forms, knowledge base and books, the
/// fake Telegram at `telegram_url`, the health server on a free port.
fn config(telegram_url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    std::fs::write(
        dir.path().join("kaiwa.toml"),
        format!(
            r#"[flows]
forms_dir = "/etc/kaiwa/forms"
kb_dir = "/etc/kaiwa/kb"
books = "/etc/kaiwa/books.toml"
default_form = "engineer"

[server]
listen = "127.0.0.1:{port}"
shutdown_grace_secs = 10

[telegram]
token_env = "KAIWA_TEST_TELEGRAM_TOKEN"
api_url = "{telegram_url}"
admin_chat_id = -100777
private_flow = "interview"
private_flow_arg = "engineer"
poll_timeout_secs = 1
"#
        ),
    )
    .expect("config written");
    // read by the container's user
    let _ = std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    );
    dir
}

/// Removes the test's containers and volume, also when an assertion failed.
struct Cleanup {
    containers: Vec<String>,
    volumes: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for name in &self.containers {
            let _ = std::process::Command::new("podman")
                .args(["rm", "-f", "-t", "0", name])
                .output();
        }
        for volume in &self.volumes {
            let _ = std::process::Command::new("podman")
                .args(["volume", "rm", "-f", volume])
                .output();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, podman and debootstrap, and minutes: .ci/run runs it"]
async fn the_image_runs_kaiwa_as_a_user_keeps_its_data_and_stops_on_sigterm() {
    let base = tokio::process::Command::new(repo().join("scripts/debian-base"))
        .status()
        .await
        .expect("scripts/debian-base runs");
    assert!(base.success(), "the Debian base image");
    // the binary `cargo test` built: the image's steps as in the README, the binary aside
    let binary = Path::new(env!("CARGO_BIN_EXE_kaiwa"))
        .strip_prefix(repo())
        .expect("the binary is in the repository's target folder")
        .display()
        .to_string();
    let built = Instant::now();
    podman_ok(&[
        "build",
        "--runtime",
        "runc",
        "--pull=never",
        "--network",
        "host",
        "--format",
        "docker",
        "--build-arg",
        &format!("KAIWA_BIN={binary}"),
        "-t",
        IMAGE,
        ".",
    ])
    .await;
    eprintln!("image built in {:?}", built.elapsed());
    let size = podman_ok(&["image", "inspect", IMAGE, "--format", "{{.Size}}"]).await;
    eprintln!("image size: {size} bytes");

    let telegram = FakeTelegram::start(TOKEN).await;
    let config_dir = config(telegram.url());
    let suffix = std::process::id();
    let (first, second, third) = (
        format!("kaiwa-it-first-{suffix}"),
        format!("kaiwa-it-second-{suffix}"),
        format!("kaiwa-it-third-{suffix}"),
    );
    let volume = format!("kaiwa-it-data-{suffix}");
    let _cleanup = Cleanup {
        containers: vec![first.clone(), second.clone(), third.clone()],
        volumes: vec![volume.clone()],
    };
    podman_ok(&["volume", "create", &volume]).await;

    // started, healthy, and not root
    let started = Instant::now();
    start(&first, &volume, config_dir.path()).await;
    let healthy = healthy_within(&first, Duration::from_secs(60)).await;
    eprintln!(
        "from podman run to a healthy check: {:?}",
        started.elapsed()
    );
    assert!(healthy < Duration::from_secs(60));
    let pid = podman_ok(&["inspect", &first, "--format", "{{.State.Pid}}"]).await;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .expect("a uid");
    assert_ne!(uid, "0", "kaiwa runs as a user, not root");
    assert!(status.starts_with("Name:\tkaiwa"), "{status}");
    assert_eq!(
        podman_ok(&["exec", &first, "cat", "/proc/1/comm"]).await,
        "kaiwa",
        "kaiwa is PID 1: it receives the stop signal"
    );

    // a message is answered
    let chat = Chat::private(51);
    telegram.send_text(chat, 51, "/start");
    let greeting = telegram.wait_texts(chat, 1).await;
    telegram.send_text(chat, 51, "English");
    let asked = telegram.wait_texts(chat, greeting.len() + 1).await;

    // SIGTERM with an answer on its way: the answer is sent once, before or after
    telegram.send_text(chat, 51, "Japan");
    let stopping = Instant::now();
    podman_ok(&["stop", "-t", "30", &first]).await;
    let stopped_in = stopping.elapsed();
    eprintln!("stopped in {stopped_in:?}");
    assert!(
        stopped_in < Duration::from_secs(15),
        "within the grace period (10 s), not killed at 30 s"
    );
    let exit = podman_ok(&["inspect", &first, "--format", "{{.State.ExitCode}}"]).await;
    let log = logs(&first).await;
    assert_eq!(exit, "0", "a clean exit: {log}");
    assert!(log.contains("stopped"), "{log}");
    assert!(
        !log.contains("CONTAINER-secret-token"),
        "the token leaked: {log}"
    );
    podman_ok(&["rm", &first]).await;

    // a new container on the same volume goes on with the conversation
    start(&second, &volume, config_dir.path()).await;
    healthy_within(&second, Duration::from_secs(60)).await;
    let texts = telegram.wait_texts(chat, asked.len() + 1).await;
    telegram.send_text(chat, 51, "/status");
    let after_status = telegram.wait_texts(chat, texts.len() + 1).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let all = telegram.texts_in(chat);
    assert_eq!(
        all.len(),
        after_status.len(),
        "nothing sent twice: {all:#?}"
    );
    assert_eq!(
        all.iter().filter(|t| **t == greeting[0]).count(),
        1,
        "not started again: {all:#?}"
    );
    let answer_to_japan = &all[asked.len()];
    assert_ne!(answer_to_japan, &asked[asked.len() - 1], "{all:#?}");

    // a second container on the same SQLite file is refused
    let (code, out) = tokio::time::timeout(
        Duration::from_secs(60),
        run(&third, false, &volume, config_dir.path()),
    )
    .await
    .expect("the second container ends");
    assert_ne!(code, Some(0), "{out}");
    assert!(
        out.contains("another `kaiwa run` uses the SQLite database"),
        "{out}"
    );

    // a database that cannot be written fails the health check: its files made immutable
    // in the volume (writes through open files fail too, as on a read-only disk)
    let mountpoint =
        podman_ok(&["volume", "inspect", &volume, "--format", "{{.Mountpoint}}"]).await;
    let files: Vec<String> = ["kaiwa.db", "kaiwa.db-wal"]
        .iter()
        .map(|f| format!("{mountpoint}/{f}"))
        .collect();
    let chattr = |flag: &'static str| {
        let files = files.clone();
        async move {
            let status = tokio::process::Command::new("chattr")
                .arg(flag)
                .args(&files)
                .status()
                .await
                .expect("chattr runs");
            assert!(status.success(), "chattr {flag} {files:?}");
        }
    };
    chattr("+i").await;
    let (code, out) = podman(&["healthcheck", "run", &second]).await;
    chattr("-i").await;
    assert_ne!(code, Some(0), "an unwritable database is unhealthy: {out}");
    healthy_within(&second, Duration::from_secs(30)).await;
    podman_ok(&["stop", "-t", "30", &second]).await;
}

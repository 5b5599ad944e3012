//! A temporary PostgreSQL server for tests: `initdb` in a temporary folder, `postgres` on a
//! free port of 127.0.0.1, one per test process ([`cluster`]), and a new database per test
//! ([`database_url`]). PostgreSQL refuses to run as root, and CI runs as root: there the
//! server runs as `nobody` (through `setpriv`). It stops, and its folder goes, when the test
//! process ends, however it ends: a shell beside it waits for the end of its standard
//! input, which the test process holds open.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A running server.
pub struct Cluster {
    port: u16,
    /// The shell that stops the server when its input closes (held, never waited for).
    _guard: Mutex<Child>,
}

impl Cluster {
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of `database` on this server.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://kaiwa@127.0.0.1:{}/{database}", self.port)
    }
}

/// The folder with `initdb` and `postgres`: `KAIWA_PG_BIN`, else the newest Debian
/// `/usr/lib/postgresql/*/bin`, else `PATH`.
fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("KAIWA_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn program(dir: &Option<PathBuf>, name: &str) -> PathBuf {
    match dir {
        Some(dir) => dir.join(name),
        None => PathBuf::from(name),
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `command` as it must run: as `nobody` when this process is root.
fn unprivileged(root: bool, program: &Path) -> Command {
    if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

fn start() -> Cluster {
    let bin = bin_dir();
    let root = is_root();
    let dir = tempfile::Builder::new()
        .prefix("kaiwa-pg-")
        .tempdir()
        .expect("a temporary folder")
        .keep();
    let data = dir.join("data");
    std::fs::create_dir(&data).expect("the data folder");
    if root {
        let owned = Command::new("chown")
            .args(["-R", "nobody:nogroup"])
            .arg(&dir)
            .status()
            .expect("chown");
        assert!(owned.success(), "cannot give {} to nobody", dir.display());
    }
    let initdb = unprivileged(root, &program(&bin, "initdb"))
        .args(["-D"])
        .arg(&data)
        .args([
            "-U",
            "kaiwa",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        ])
        .stdout(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run initdb ({e}): the PostgreSQL tests need the Debian package \
                 `postgresql` (apt-get install postgresql) or KAIWA_PG_BIN"
            )
        });
    assert!(
        initdb.status.success(),
        "initdb failed: {}",
        String::from_utf8_lossy(&initdb.stderr)
    );
    let port = free_port();
    let postgres = unprivileged(root, &program(&bin, "postgres"));
    let mut line = format!("{:?}", postgres.get_program());
    for arg in postgres.get_args() {
        line.push(' ');
        line.push_str(&shell_quote(&arg.to_string_lossy()));
    }
    let server = format!(
        "{line} -D {data} -p {port} -k {dir} -c listen_addresses=127.0.0.1 -c fsync=off \
         -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 \
         -c log_min_messages=fatal > {dir}/log 2>&1 & pg=$!; \
         cat > /dev/null; kill -INT $pg; wait $pg; rm -rf {dir}",
        data = shell_quote(&data.to_string_lossy()),
        dir = shell_quote(&dir.to_string_lossy()),
    );
    let guard = Command::new("sh")
        .args(["-c", &server])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sh");
    let cluster = Cluster {
        port,
        _guard: Mutex::new(guard),
    };
    // ready when it answers on its port
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "PostgreSQL did not start: {}",
            std::fs::read_to_string(dir.join("log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    cluster
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// This process's server, started on first use.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(start)
}

/// A new, empty database on this process's server; its URL.
pub async fn database_url() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let cluster = cluster();
    let name = format!(
        "kaiwa_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    // the server accepts TCP a moment before it accepts logins
    let started = Instant::now();
    let mut admin = loop {
        match <sqlx::PgConnection as sqlx::Connection>::connect(&cluster.url("postgres")).await {
            Ok(conn) => break conn,
            Err(e) if started.elapsed() < Duration::from_secs(30) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("cannot connect to the test PostgreSQL: {e}"),
        }
    };
    // (a name made here of digits and underscores)
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .expect("a test database");
    let _ = sqlx::Connection::close(admin).await;
    cluster.url(&name)
}

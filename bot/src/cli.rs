//! The command line: `kaiwa run|chat|migrate|stats|check|bench|kb|export`, and the log each
//! command writes.

use clap::{Parser, Subcommand};
use kaiwa::Options;
use std::path::PathBuf;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "kaiwa",
    version,
    about = "Kaiwa: LLM agents where people already chat"
)]
pub struct Cli {
    #[command(flatten)]
    pub options: Options,
    /// More detail in the log (debug level); `kaiwa chat` also says where its log file is.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the bot: every adapter whose token is set, plus /healthz and /metrics.
    Run,
    /// Talk to a flow in the terminal, through the same core and database as the bot. Its
    /// log goes to a file, never into the conversation: `--log-file`, by default
    /// `kaiwa-chat.log` beside the SQLite database (`data/` for another database; the
    /// system's temporary directory if that cannot be written).
    Chat {
        /// Where the log goes (default: beside the database).
        #[arg(long, env = "KAIWA_CHAT_LOG")]
        log_file: Option<PathBuf>,
        /// The flow to talk to (e.g. assistant).
        flow: String,
        /// The form to use (interview flows).
        #[arg(long)]
        form: Option<String>,
        /// Your user name in this conversation.
        #[arg(long, default_value = "guest")]
        user: String,
    },
    /// Write a commented configuration, an example form, knowledge base and book catalogue
    /// into DIR (default: the current folder) to start from; nothing is overwritten.
    Init {
        /// The folder to write into (created if missing).
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Create or upgrade the database schema.
    Migrate,
    /// Model calls, tokens and latency per flow and agent, from the llm_calls ledger.
    Stats {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Validate the configuration and the forms; `--online` also calls what it names (the
    /// platforms' tokens, the admin chat, the Discord intent, the model server, the
    /// database) and says how to fix what fails.
    Check {
        #[arg(long)]
        online: bool,
    },
    /// Load-test the bot: simulated users through the real orchestrator, flows and store.
    Bench {
        /// interview or assistant
        #[arg(long, default_value = "interview")]
        flow: String,
        /// The form the interview uses.
        #[arg(long, default_value = "engineer")]
        form: String,
        #[arg(long, default_value_t = 100)]
        sessions: usize,
        /// Turns per simulated user.
        #[arg(long, default_value_t = 11)]
        turns: usize,
        /// Users active at once (default: all).
        #[arg(long)]
        concurrency: Option<usize>,
        /// Simulated model latency per call.
        #[arg(long, default_value_t = 0)]
        model_latency_ms: u64,
        /// Offered load in turns per second across all users (open loop: each user sends on
        /// a schedule, and a turn's time counts from its scheduled send). Default: every
        /// user sends the next message as soon as the last reply came (closed loop).
        #[arg(long)]
        rate: Option<f64>,
        /// Database URL (default: a temporary file). A PostgreSQL one is measured beside a
        /// temporary SQLite file, with the same load, in the same run.
        #[arg(long)]
        database: Option<String>,
        /// Instances on the one PostgreSQL database, each with its own connections,
        /// leases and users, as several `kaiwa run` would be.
        #[arg(long, default_value_t = 1)]
        instances: usize,
        /// With `--instances N`: rounds of one instance and N instances, each on a database
        /// of its own created beside `--database`, their order alternating (a shared
        /// machine's speed drifts: the pairs are compared, not two runs minutes apart; an
        /// even number of rounds puts each first as often).
        #[arg(long, default_value_t = 4)]
        rounds: usize,
    },
    /// Copy, back up and restore the database.
    Db {
        #[command(subcommand)]
        command: DbCommand,
    },
    /// Knowledge-base maintenance.
    Kb {
        #[command(subcommand)]
        command: KbCommand,
    },
    /// Register the Telegram webhook (`[telegram] webhook_url`, the secret of
    /// `webhook_secret_env`), remove it, or show what Telegram has; out of band, so that a
    /// rolling restart never unhooks the bot.
    Webhook {
        #[command(subcommand)]
        command: WebhookCommand,
    },
    /// Discord set-up helpers.
    Discord {
        #[command(subcommand)]
        command: DiscordCommand,
    },
    /// Exit 0 when the running bot's /healthz answers 200, 1 otherwise (a container's
    /// health check).
    Health {
        /// The health URL, or the instance's base address (`/healthz` is added to a URL
        /// without a path); default: http://[server] listen/healthz.
        #[arg(long)]
        url: Option<String>,
    },
    /// Write the stored submissions of a form as CSV or JSON.
    Export {
        /// The form id.
        #[arg(long)]
        form: String,
        #[arg(long, value_enum, default_value_t = ExportFormat::Csv)]
        format: ExportFormat,
        /// Output file (default: stdout).
        #[arg(long)]
        output: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub enum DbCommand {
    /// Copy everything Kaiwa stores from one database to another, either way between SQLite
    /// and PostgreSQL (the target migrated first, and empty). The source is read in one
    /// consistent snapshot, so the bot may keep running on it. Restores a backup too:
    /// `--from sqlite://backup.db`.
    Copy {
        /// The database to copy (sqlite://path or postgres://…).
        #[arg(long)]
        from: String,
        /// The database to copy into: new or empty.
        #[arg(long)]
        to: String,
    },
    /// A consistent copy of the configured database while the bot runs (SQLite: a new file
    /// at PATH; PostgreSQL: says which pg_dump command to run).
    Backup {
        /// The backup file to write (its folder must exist; an existing file is kept).
        path: std::path::PathBuf,
    },
}

#[derive(Subcommand)]
pub enum KbCommand {
    /// Index the knowledge base and report what it holds.
    Index,
    /// Search the knowledge base (to check what the help-desk will find).
    Search {
        query: String,
        #[arg(long, default_value_t = 3)]
        k: usize,
    },
    /// How the knowledge base answers a question without a model: the ranking with each
    /// passage's word and meaning scores and coverage, the floor's cut, and the passage it
    /// answers from (to fix a page).
    Explain {
        question: String,
        /// Passages shown.
        #[arg(long, default_value_t = 10)]
        k: usize,
    },
}

#[derive(Subcommand)]
pub enum DiscordCommand {
    /// Print the link that adds the bot to a server with exactly the scopes (bot,
    /// applications.commands) and permissions Kaiwa uses.
    InviteUrl,
}

#[derive(Subcommand)]
pub enum WebhookCommand {
    /// Have Telegram deliver updates to `[telegram] webhook_url`.
    Set,
    /// Remove the webhook (the bot goes back to long polling at its next start).
    Delete,
    /// What Telegram has: the URL, pending updates, the last delivery error.
    Info,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ExportFormat {
    Csv,
    Json,
}

/// Whether to colour what goes to a stream: a terminal, and `NO_COLOR` not set.
fn colour(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// `kaiwa-chat.log` in the folder of the SQLite database `url` names; `data/` otherwise.
fn chat_log_beside(url: &str) -> PathBuf {
    let file = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .map(|rest| rest.split('?').next().unwrap_or(rest))
        .filter(|path| !path.is_empty() && !path.starts_with(":memory:"));
    match file.and_then(|f| std::path::Path::new(f).parent()) {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join("kaiwa-chat.log"),
        Some(_) => PathBuf::from("kaiwa-chat.log"),
        None => PathBuf::from("data/kaiwa-chat.log"),
    }
}

/// Opens the chat's log file (its directory made if need be), else one in the temporary
/// directory; returns it and where it is.
fn open_chat_log(wanted: &std::path::Path) -> Option<(std::fs::File, PathBuf)> {
    let open = |path: &std::path::Path| {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).ok()?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()
    };
    let fallback = std::env::temp_dir().join("kaiwa-chat.log");
    open(wanted)
        .map(|f| (f, wanted.to_path_buf()))
        .or_else(|| open(&fallback).map(|f| (f, fallback)))
}

/// A service logs what it does to stderr; the terminal commands stay quiet unless asked;
/// `kaiwa chat` writes its log to a file, never into the conversation.
pub fn init_logging(cli: &Cli) {
    use std::io::IsTerminal;
    let default_filter = match (&cli.command, cli.verbose) {
        (_, true) => "debug",
        (Command::Run | Command::Chat { .. }, false) => "info",
        (_, false) => "warn",
    };
    let mut filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    // serenity warns with a whole gateway event it could not read (users' messages in it):
    // kept out of the log unless asked for by name
    if !std::env::var("RUST_LOG").is_ok_and(|v| v.contains("serenity"))
        && let Ok(quiet) = "serenity::gateway::ws=error".parse()
    {
        filter = filter.add_directive(quiet);
    }
    // a copy reads whole tables: sqlx's slow-statement warnings would only be noise there
    if matches!(cli.command, Command::Db { .. })
        && let Ok(quiet) = "sqlx::query=error".parse()
    {
        filter = filter.add_directive(quiet);
    }
    if let Command::Chat { log_file, .. } = &cli.command {
        let log_file = log_file.clone().unwrap_or_else(|| {
            // beside the database the conversation is kept in, not wherever it was started
            let url = cli
                .options
                .settings()
                .map(|(settings, _)| cli.options.database_url(&settings))
                .unwrap_or_default();
            chat_log_beside(&url)
        });
        let log_file = &log_file;
        match open_chat_log(log_file) {
            Some((file, path)) => {
                if cli.verbose {
                    eprintln!("(log: {})", path.display());
                }
                tracing_subscriber::fmt()
                    .with_env_filter(filter)
                    .with_ansi(false)
                    .with_writer(std::sync::Mutex::new(file))
                    .init();
            }
            // nowhere to write it: no log rather than one in the conversation
            None => {
                if cli.verbose {
                    eprintln!("(no log: {} cannot be written)", log_file.display());
                }
            }
        }
        return;
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour(std::io::stderr().is_terminal()))
        .with_writer(std::io::stderr)
        .init();
}

#[cfg(test)]
mod tests {
    use super::chat_log_beside;
    use std::path::PathBuf;

    #[test]
    fn the_chat_log_goes_beside_the_database() {
        assert_eq!(
            chat_log_beside("sqlite:///srv/kaiwa/kaiwa.db?mode=rwc"),
            PathBuf::from("/srv/kaiwa/kaiwa-chat.log")
        );
        assert_eq!(
            chat_log_beside("sqlite://data/kaiwa.db"),
            PathBuf::from("data/kaiwa-chat.log")
        );
        assert_eq!(
            chat_log_beside("sqlite:kaiwa.db"),
            PathBuf::from("kaiwa-chat.log")
        );
        assert_eq!(
            chat_log_beside("postgres://u:p@db/kaiwa"),
            PathBuf::from("data/kaiwa-chat.log")
        );
    }
}

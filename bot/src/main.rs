//! `kaiwa`, the binary: parses the command line, opens [`kaiwa::Kaiwa`] (or the piece a
//! command needs) and runs the chosen command. Everything else lives in the libraries.

mod bench;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use kaiwa::{Kaiwa, Options, app};
use kaiwa_adapters::console::{ConsoleOptions, StderrAdminSink};
use kaiwa_core::store::{Reads, Store};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "kaiwa",
    version,
    about = "Kaiwa: LLM agents where people already chat"
)]
struct Cli {
    #[command(flatten)]
    options: Options,
    /// More detail in the log (debug level); `kaiwa chat` also says where its log file is.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the bot: every adapter whose token is set, plus /healthz and /metrics.
    Run,
    /// Talk to a flow in the terminal, through the same core and database as the bot. Its
    /// log goes to a file, never into the conversation: `--log-file`, by default
    /// `data/kaiwa-chat.log` (the system's temporary directory if that cannot be written).
    Chat {
        /// Where the log goes.
        #[arg(long, env = "KAIWA_CHAT_LOG", default_value = "data/kaiwa-chat.log")]
        log_file: PathBuf,
        /// The flow to talk to (e.g. assistant).
        flow: String,
        /// The form to use (interview flows).
        #[arg(long)]
        form: Option<String>,
        /// Your user name in this conversation.
        #[arg(long, default_value = "guest")]
        user: String,
    },
    /// Create or upgrade the database schema.
    Migrate,
    /// Model calls, tokens and latency per flow and agent, from the llm_calls ledger.
    Stats {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Validate the configuration and the forms.
    Check,
    /// Load-test the bot: simulated users through the real orchestrator, flows and SQLite.
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
        /// Database URL (default: a temporary file).
        #[arg(long)]
        database: Option<String>,
    },
    /// Knowledge-base maintenance.
    Kb {
        #[command(subcommand)]
        command: KbCommand,
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
enum KbCommand {
    /// Index the knowledge base and report what it holds.
    Index,
    /// Search the knowledge base (to check what the help-desk will find).
    Search {
        query: String,
        #[arg(long, default_value_t = 3)]
        k: usize,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ExportFormat {
    Csv,
    Json,
}

/// jemalloc where it builds (not on MSVC): see the dependency's note in Cargo.toml.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Whether to colour what goes to a stream: a terminal, and `NO_COLOR` not set.
fn colour(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
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
fn init_logging(cli: &Cli) {
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
    if let Command::Chat { log_file, .. } = &cli.command {
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

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli);
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let (settings, defaults) = cli.options.settings()?;
    let path = cli
        .options
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(kaiwa::DEFAULT_CONFIG));
    let database_url = cli.options.database_url(&settings);
    match cli.command {
        Command::Run => {
            let kaiwa = Kaiwa::builder(settings)
                .database_url(database_url)
                .tokens_from_env()
                .build()
                .await?;
            kaiwa.run().await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Chat {
            flow, form, user, ..
        } => {
            let kaiwa = Kaiwa::builder(settings)
                .database_url(database_url)
                .admin_sink(Arc::new(StderrAdminSink))
                .build()
                .await?;
            let options = ConsoleOptions {
                user,
                flow: Some(flow),
                flow_arg: form,
                live: std::io::IsTerminal::is_terminal(&std::io::stdout()),
            };
            let stdin = tokio::io::BufReader::new(tokio::io::stdin());
            kaiwa.chat(stdin, tokio::io::stdout(), options).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { json } => {
            let store = app::open_store(&database_url).await?;
            let usage = store.llm_usage().await?;
            store.close().await;
            if json {
                println!("{}", serde_json::to_string_pretty(&usage)?);
            } else if usage.is_empty() {
                println!("no model calls recorded yet");
            } else {
                println!(
                    "{:<12} {:<16} {:>7} {:>7} {:>12} {:>12} {:>10} {:>10}",
                    "flow",
                    "agent",
                    "calls",
                    "errors",
                    "prompt_tok",
                    "compl_tok",
                    "avg_ms",
                    "max_ms"
                );
                for u in &usage {
                    println!(
                        "{:<12} {:<16} {:>7} {:>7} {:>12} {:>12} {:>10.0} {:>10}",
                        u.flow,
                        u.agent,
                        u.calls,
                        u.errors,
                        u.prompt_tokens,
                        u.completion_tokens,
                        u.avg_latency_ms,
                        u.max_latency_ms
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Migrate => {
            let store = app::open_store(&database_url).await?;
            store.close().await;
            println!("database is up to date: {}", app::redact_url(&database_url));
            Ok(ExitCode::SUCCESS)
        }
        Command::Check => {
            if defaults {
                println!(
                    "configuration: none at {} (built-in defaults; run kaiwa where config/ is, or pass --config)",
                    path.display()
                );
            } else {
                println!("configuration: ok ({})", path.display());
            }
            app::build_models(settings.llm.as_ref()).context("model configuration")?;
            match &settings.llm {
                Some(llm) => println!(
                    "model: {} at {} ({} agent overrides)",
                    llm.model,
                    llm.base_url,
                    llm.agents.len()
                ),
                None => println!("model: none configured; agents use their rule-based floor"),
            }
            let flows = app::build_flows(&settings)?;
            println!(
                "flows: {} (default {})",
                flows.ids().join(", "),
                flows.default_flow()
            );
            let (files, passages) = app::open_kb(&settings)?.stats();
            println!(
                "knowledge base: {files} files, {passages} passages ({})",
                settings.flows.kb_dir
            );
            let forms = app::load_forms(&settings)?;
            let mut failed = false;
            for form in &forms {
                let problems = form.validate();
                if problems.is_empty() {
                    println!(
                        "form {}: ok ({} fields, {:?})",
                        form.id,
                        form.fields.len(),
                        form.variant
                    );
                } else {
                    failed = true;
                    for p in problems {
                        println!("form {}: error: {p}", form.id);
                    }
                }
            }
            if forms.is_empty() {
                println!("forms: none in {}", settings.flows.forms_dir);
            }
            // what the configuration names must be there
            let mut missing = Vec::new();
            for (what, path) in [
                ("[flows] forms_dir", &settings.flows.forms_dir),
                ("[flows] kb_dir", &settings.flows.kb_dir),
                ("[flows] books", &settings.flows.books),
            ] {
                if !std::path::Path::new(path).exists() {
                    println!("{what}: {path} does not exist");
                    missing.push(what);
                }
            }
            if failed {
                bail!("some forms are invalid");
            }
            if !missing.is_empty() {
                bail!(
                    "the configuration names what is not there: {}",
                    missing.join(", ")
                );
            }
            if forms.is_empty() {
                bail!("no interview forms in {}", settings.flows.forms_dir);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench {
            flow,
            form,
            sessions,
            turns,
            concurrency,
            model_latency_ms,
            rate,
            database,
        } => {
            // an interview without its form answers every turn "unknown form" and calls no
            // model: a report of that would measure nothing the bot does
            if flow == "interview" && !app::load_forms(&settings)?.iter().any(|f| f.id == form) {
                bail!(
                    "the form {form:?} is not in {} (run kaiwa bench where config/ is, or set \
                     [flows] forms_dir, or name a form with --form)",
                    settings.flows.forms_dir
                );
            }
            let options = bench::BenchOptions {
                flow,
                form,
                sessions,
                turns,
                concurrency: concurrency.unwrap_or(sessions),
                model_latency: std::time::Duration::from_millis(model_latency_ms),
                rate,
                database,
            };
            let report = bench::run(options, settings).await?;
            println!("{report}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Kb { command } => {
            let kb = app::open_kb(&settings)?;
            match command {
                KbCommand::Index => {
                    let (files, passages) = kb.stats();
                    println!(
                        "knowledge base {}: {files} files, {passages} passages indexed",
                        settings.flows.kb_dir
                    );
                }
                KbCommand::Search { query, k } => {
                    for (i, p) in kb
                        .search(&query, k)
                        .context("search failed")?
                        .iter()
                        .enumerate()
                    {
                        println!("[{}] {} (score {:.2})", i + 1, p.citation(), p.score);
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Export {
            form,
            format,
            output,
        } => {
            let store = app::open_store(&database_url).await?;
            let records = store
                .submissions(Some(&form))
                .await
                .context("reading submissions")?;
            store.close().await;
            let forms = app::load_forms(&settings)?;
            let definition = forms.iter().find(|f| f.id == form);
            if records.is_empty() {
                // a mistyped form id would otherwise write an empty file and succeed
                if definition.is_none() {
                    let known: Vec<&str> = forms.iter().map(|f| f.id.as_str()).collect();
                    bail!(
                        "no form {form:?}: it is not in {} and nothing was submitted for it (forms: {})",
                        settings.flows.forms_dir,
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    );
                }
                eprintln!("no submissions for the form {form:?} yet");
            }
            let text = match format {
                ExportFormat::Json => {
                    serde_json::to_string_pretty(&records).context("encoding JSON")? + "\n"
                }
                ExportFormat::Csv => kaiwa_core::export::csv(definition, &records),
            };
            match output {
                Some(path) => std::fs::write(&path, text)
                    .with_context(|| format!("cannot write {}", path.display()))?,
                None => print!("{text}"),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

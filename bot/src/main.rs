//! `kaiwa`, the binary: parses the command line, opens [`kaiwa::Kaiwa`] (or the piece a
//! command needs) and runs the chosen command. Everything else lives in the libraries.

mod bench;
mod cli;
mod commands;

use clap::Parser;
use cli::{Cli, Command};
use kaiwa::Kaiwa;
use kaiwa_adapters::console::{ConsoleOptions, StderrAdminSink};
use std::process::ExitCode;
use std::sync::Arc;

/// jemalloc where it builds (not on MSVC): see the dependency's note in Cargo.toml.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::init_logging(&cli);
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the command `cli` names, with the configuration and database it names.
async fn run(cli: Cli) -> anyhow::Result<()> {
    // `init` writes a configuration: it reads none (nor warns that none is there)
    if let Command::Init { dir } = &cli.command {
        return commands::init(dir);
    }
    let (settings, defaults) = cli.options.settings()?;
    let database_url = cli.options.database_url(&settings);
    match cli.command {
        Command::Run => {
            let kaiwa = Kaiwa::builder(settings)
                .database_url(database_url)
                .tokens_from_env()
                .build()
                .await?;
            kaiwa.run().await?;
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
        }
        Command::Stats { json } => commands::stats(&database_url, json).await?,
        Command::Migrate => commands::migrate(&database_url).await?,
        // (written above, before any configuration is read)
        Command::Init { .. } => {}
        Command::Check { online } => {
            let path = cli.options.config_path();
            let offline = commands::check(&settings, &path, defaults).await;
            // online, every line is said even when the files had a problem
            let online = match online {
                true => commands::check_online(&settings, &database_url).await,
                false => Ok(()),
            };
            offline?;
            online?;
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
            instances,
            rounds,
        } => {
            let options = bench::BenchOptions {
                flow,
                form,
                sessions,
                turns,
                concurrency: concurrency.unwrap_or(sessions),
                model_latency: std::time::Duration::from_millis(model_latency_ms),
                rate,
                // the global `--database-url` / KAIWA_DATABASE_URL names it too (the bench
                // refuses a database that holds sessions)
                database: database.or_else(|| cli.options.database_url.clone()),
                instances,
                rounds,
            };
            commands::bench(options, settings).await?;
        }
        Command::Db { command } => commands::db(&database_url, command).await?,
        Command::Kb { command } => commands::kb(&settings, &database_url, command).await?,
        Command::Webhook { command } => commands::webhook(&settings, command).await?,
        Command::Discord { command } => commands::discord(&settings, command).await?,
        Command::Health { url } => {
            let url = url
                .map(|u| commands::health_url(&u))
                .unwrap_or_else(|| format!("http://{}/healthz", settings.server.listen));
            if !commands::health(&url).await {
                return Err(anyhow::anyhow!("unhealthy"));
            }
        }
        Command::Export {
            form,
            format,
            output,
        } => commands::export(&settings, &database_url, form, format, output).await?,
    }
    Ok(())
}

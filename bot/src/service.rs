//! `kaiwa run` ([`crate::Kaiwa::run`], [`crate::Kaiwa::run_until`]): the bot as a service.
//! Starts every adapter whose token is set (Telegram, Discord), serves `/healthz` and
//! `/metrics`, and on SIGTERM / Ctrl-C (or when the given future resolves) stops taking
//! messages, lets the turns in flight finish (bounded by `[server] shutdown_grace_secs`) and
//! closes the database.

use crate::{Error, Kaiwa};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use kaiwa_adapters::AdapterHealth;
use kaiwa_adapters::discord::DiscordAdapter;
use kaiwa_adapters::slack::SlackAdapter;
use kaiwa_adapters::telegram::TelegramAdapter;
use kaiwa_core::orchestrator::Orchestrator;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

#[derive(Clone)]
struct ServerState {
    orchestrator: Arc<Orchestrator>,
    adapters: Vec<Arc<AdapterHealth>>,
}

/// What `/healthz` reports: 200 when the database takes a write and every adapter is
/// connected; 503 otherwise.
async fn healthz(State(state): State<ServerState>) -> impl IntoResponse {
    let store = state.orchestrator.store();
    // answering reads is not enough: a read-only file or a full disk loses every turn
    let database = match store.count_active_sessions().await {
        Ok(_) => store.check_writable().await,
        Err(e) => Err(e),
    };
    if let Err(e) = &database {
        tracing::warn!(error = %e, "health check: the database cannot be written");
    }
    let database_ok = database.is_ok();
    let adapters: serde_json::Map<String, serde_json::Value> = state
        .adapters
        .iter()
        .map(|a| (a.name().to_string(), a.is_connected().into()))
        .collect();
    let ok = database_ok && state.adapters.iter().all(|a| a.is_connected());
    // what this instance does among several
    let mut roles = serde_json::Map::new();
    for adapter in &state.adapters {
        for (role, active) in adapter.roles() {
            roles.insert(format!("{}_{role}", adapter.name()), active.into());
        }
        for (key, value) in adapter.info() {
            roles.insert(format!("{}_{key}", adapter.name()), value.into());
        }
    }
    let jobs = store
        .leases(crate::JOBS_LEASE)
        .await
        .ok()
        .and_then(|leases| leases.into_iter().find(|l| l.name == crate::JOBS_LEASE))
        .is_some_and(|l| {
            l.holder == state.orchestrator.instance().id() && l.expires_at > chrono::Utc::now()
        });
    roles.insert("job_runner".into(), jobs.into());
    let body = serde_json::json!({
        "status": if ok { "ok" } else { "degraded" },
        "database": if database_ok { "ok" } else { "not writable" },
        "backend": store.backend().as_str(),
        "instance": state.orchestrator.instance().id(),
        "roles": roles,
        "adapters": adapters,
    });
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body))
}

async fn metrics(State(state): State<ServerState>) -> impl IntoResponse {
    let metrics = state.orchestrator.metrics();
    match state.orchestrator.store().count_active_sessions().await {
        Ok(n) => metrics.set_active_sessions(n),
        Err(e) => tracing::warn!(error = %e, "could not count active sessions"),
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.render(),
    )
}

/// Resolves on SIGTERM or Ctrl-C.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}

/// Resolves once `rx` says stop.
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// The running adapters: each says its name and how it ended.
type Adapters = JoinSet<(&'static str, Result<(), kaiwa_adapters::AdapterError>)>;

/// The adapters of the platforms with a token, each running until `stop` says so, and
/// their health for `/healthz`.
fn start_adapters(
    kaiwa: &Kaiwa,
    stop: &watch::Receiver<bool>,
) -> (Adapters, Vec<Arc<kaiwa_adapters::AdapterHealth>>) {
    let orchestrator = &kaiwa.orchestrator;
    let mut adapters = JoinSet::new();
    let mut health = Vec::new();
    if let Some((api, _)) = kaiwa.telegram.clone() {
        let telegram =
            TelegramAdapter::new(api, kaiwa.telegram_config(), orchestrator.for_adapters());
        health.push(telegram.health());
        let rx = stop.clone();
        adapters.spawn(async move { ("telegram", telegram.run(stopped(rx)).await) });
    }
    if let Some((api, _)) = kaiwa.discord.clone() {
        let discord = DiscordAdapter::new(api, kaiwa.discord_config(), orchestrator.for_adapters());
        health.push(discord.health());
        let rx = stop.clone();
        adapters.spawn(async move { ("discord", discord.run(stopped(rx)).await) });
    }
    if let Some((api, _)) = kaiwa.slack.clone() {
        let slack = SlackAdapter::new(api, kaiwa.slack_config(), orchestrator.for_adapters());
        health.push(slack.health());
        let rx = stop.clone();
        adapters.spawn(async move { ("slack", slack.run(stopped(rx)).await) });
    }
    (adapters, health)
}

pub(crate) async fn run(
    kaiwa: Kaiwa,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), Error> {
    let settings = &kaiwa.settings;
    let (tg, dc) = (&settings.telegram, &settings.discord);
    if kaiwa.telegram.is_none() && kaiwa.discord.is_none() && kaiwa.slack.is_none() {
        return Err(Error::NoPlatform {
            telegram: tg.token_env.clone(),
            discord: dc.token_env.clone(),
            slack: settings.slack.bot_token_env.clone(),
        });
    }
    let orchestrator = kaiwa.orchestrator.clone();
    // a database a `kaiwa db copy` is still writing (or left half-written) is not run on
    if kaiwa_core::store::copy::unfinished_copy(kaiwa.store.as_ref())
        .await
        .unwrap_or(false)
    {
        return Err(Error::UnfinishedCopy {
            url: crate::app::redact_url(&kaiwa.settings.database_url),
        });
    }
    kaiwa
        .store
        .claim_for_run()
        .await
        .map_err(|source| Error::Database {
            url: crate::app::redact_url(&kaiwa.settings.database_url),
            source,
        })?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let (mut adapters, health) = start_adapters(&kaiwa, &stop_rx);
    let jobs = kaiwa.jobs(stopped(stop_rx.clone()));

    let server = serve_health(
        settings,
        orchestrator.clone(),
        health,
        stopped(stop_rx.clone()),
    )
    .await?;
    let console = serve_console(&kaiwa, stopped(stop_rx.clone())).await?;

    // an adapter that fails leaves the others running (`/healthz` says 503 meanwhile); the
    // bot stops, with an error, once none is left
    let mut failure = None;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => {
                tracing::info!("shutting down: no new messages; finishing the turns in flight");
                break;
            }
            Some(done) = adapters.join_next() => {
                let message = match done {
                    Ok((name, Ok(()))) => format!("the {name} adapter stopped"),
                    Ok((name, Err(e))) => format!("the {name} adapter failed: {e}"),
                    Err(e) => format!("an adapter crashed: {e}"),
                };
                if adapters.is_empty() {
                    tracing::error!("{message}; no platform is left: shutting down");
                    failure = Some(message);
                    break;
                }
                tracing::error!("{message}; the other platforms go on");
            }
        }
    }
    let _ = stop_tx.send(true);
    let grace = Duration::from_secs(settings.server.shutdown_grace_secs);
    let drained = tokio::time::timeout(grace, async {
        while let Some(done) = adapters.join_next().await {
            if let Ok((name, Err(e))) = done {
                tracing::warn!(adapter = name, error = %e, "adapter stopped with an error");
            }
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            ?grace,
            "turns still running after the grace period; stopping anyway"
        );
        adapters.abort_all();
    }
    let _ = server.await;
    if let Some(console) = console
        && let Ok(Err(e)) = console.await
    {
        tracing::warn!(error = %e, "the console stopped with an error");
    }
    jobs.await;
    kaiwa.close().await;
    tracing::info!("stopped");
    match failure {
        Some(message) => Err(Error::Stopped(message)),
        None => Ok(()),
    }
}

/// A listener on `listen` and the address it took (port 0: a free one).
async fn bind(listen: &str) -> Result<(tokio::net::TcpListener, std::net::SocketAddr), Error> {
    let listening = |source| Error::Listen {
        address: listen.to_string(),
        source,
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(listening)?;
    let address = listener.local_addr().map_err(listening)?;
    Ok((listener, address))
}

/// `/healthz` and `/metrics` on `[server] listen` until `stop`.
async fn serve_health(
    settings: &crate::config::Settings,
    orchestrator: Arc<Orchestrator>,
    adapters: Vec<Arc<AdapterHealth>>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<std::io::Result<()>>, Error> {
    let (listener, address) = bind(&settings.server.listen).await?;
    tracing::info!(%address, "health and metrics at http://{address}/healthz and /metrics");
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(ServerState {
            orchestrator,
            adapters,
        });
    Ok(tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(stop)
            .await
    }))
}

/// The browser console on `[console] listen`, if set, until `stop`.
async fn serve_console(
    kaiwa: &Kaiwa,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Option<tokio::task::JoinHandle<std::io::Result<()>>>, Error> {
    let Some(listen) = &kaiwa.settings.console.listen else {
        return Ok(None);
    };
    let (listener, address) = bind(listen).await?;
    let public_url = kaiwa.settings.console.public_url(address);
    tracing::info!(%address, %public_url, "console at http://{address}/ (admins: send /console in the admin chat)");
    let router = kaiwa.console(&public_url);
    Ok(Some(tokio::spawn(crate::web_console::serve(
        listener, router, stop,
    ))))
}

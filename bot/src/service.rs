//! `kaiwa run`: the bot as a service. Starts every adapter whose token is set (Telegram,
//! Discord), serves
//! `/healthz` and `/metrics`, and on SIGTERM / Ctrl-C stops taking messages, lets the turns in
//! flight finish (bounded by `[server] shutdown_grace_secs`) and closes the database.

use crate::app::App;
use crate::config::{Settings, optional_secret};
use anyhow::{Context, bail};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use kaiwa_adapters::AdapterHealth;
use kaiwa_adapters::discord::{
    DiscordAdapter, DiscordAdminSink, DiscordApi, DiscordConfig, DiscordOutbox,
};
use kaiwa_adapters::telegram::{
    TelegramAdapter, TelegramAdminSink, TelegramApi, TelegramConfig, TelegramOutbox,
};
use kaiwa_core::admin::{AdminSink, FanoutAdminSink, LogAdminSink};
use kaiwa_core::jobs::every;
use kaiwa_core::jobs::retention::delete_old_transcripts;
use kaiwa_core::jobs::weekly_review::send_due_reviews;
use kaiwa_core::message::Platform;
use kaiwa_core::orchestrator::{Orchestrator, Outbox};
use kaiwa_core::store::Store;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How often the retention job runs.
const RETENTION_CHECK: Duration = Duration::from_secs(3600);

/// How often `kaiwa run` looks for weekly reviews that are due.
const REVIEW_CHECK: Duration = Duration::from_secs(60);

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
    let body = serde_json::json!({
        "status": if ok { "ok" } else { "degraded" },
        "database": if database_ok { "ok" } else { "not writable" },
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
async fn shutdown_signal() {
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

pub async fn run(settings: &Settings, database_url: &str) -> anyhow::Result<()> {
    let (tg, dc) = (&settings.telegram, &settings.discord);
    let telegram_token = optional_secret(&tg.token_env);
    let discord_token = optional_secret(&dc.token_env);
    if telegram_token.is_none() && discord_token.is_none() {
        bail!(
            "no chat platform is configured: set {} (a Telegram bot token) or {} (a Discord bot \
             token) to run the bot; `kaiwa chat <flow>` talks to the flows in this terminal instead",
            tg.token_env,
            dc.token_env
        );
    }
    let telegram_api = telegram_token
        .as_deref()
        .map(|token| TelegramApi::new(token, tg.api_url.as_deref()))
        .transpose()
        .context("[telegram]")?;
    let discord_api = discord_token
        .as_deref()
        .map(|token| DiscordApi::new(token, dc.api_proxy.as_deref()));
    let mut sinks: Vec<Arc<dyn AdminSink>> = Vec::new();
    if let (Some(api), Some(chat)) = (&telegram_api, tg.admin_chat_id) {
        sinks.push(Arc::new(TelegramAdminSink::new(api.clone(), chat)));
    }
    if let (Some(api), Some(channel)) = (&discord_api, dc.admin_channel_id) {
        sinks.push(Arc::new(DiscordAdminSink::new(api.clone(), channel)));
    }
    let admin: Arc<dyn AdminSink> = match sinks.len() {
        0 => {
            tracing::warn!(
                "no admin chat or channel configured; audit summaries go to the log only"
            );
            Arc::new(LogAdminSink)
        }
        1 => sinks.remove(0),
        _ => Arc::new(FanoutAdminSink(sinks)),
    };
    let app = App::build(settings, database_url, admin).await?;
    let orchestrator = app.orchestrator.clone();

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let mut adapters = JoinSet::new();
    let mut health = Vec::new();
    let mut outboxes: HashMap<Platform, Arc<dyn Outbox>> = HashMap::new();
    if let Some(api) = telegram_api {
        outboxes.insert(
            Platform::Telegram,
            Arc::new(TelegramOutbox::new(api.clone())),
        );
        let telegram = TelegramAdapter::new(
            api,
            TelegramConfig {
                admin_chat_id: tg.admin_chat_id,
                private_flow: tg.private_flow.clone(),
                private_flow_arg: tg.private_flow_arg.clone(),
                group_flow: tg.group_flow.clone(),
                poll_timeout: Duration::from_secs(tg.poll_timeout_secs),
            },
            orchestrator.clone(),
        );
        health.push(telegram.health());
        let rx = stop_rx.clone();
        adapters.spawn(async move { ("telegram", telegram.run(stopped(rx)).await) });
    }
    if let (Some(api), Some(token)) = (discord_api, discord_token) {
        outboxes.insert(Platform::Discord, Arc::new(DiscordOutbox::new(api.clone())));
        let discord = DiscordAdapter::new(
            api,
            DiscordConfig {
                token,
                admin_channel_id: dc.admin_channel_id,
                helpdesk_channel_ids: dc.helpdesk_channel_ids.clone(),
                reading_channel_ids: dc.reading_channel_ids.clone(),
                api_proxy: dc.api_proxy.clone(),
                dm_flow: Some(dc.dm_flow.clone()),
                dm_flow_arg: dc.dm_flow_arg.clone(),
            },
            orchestrator.clone(),
        );
        health.push(discord.health());
        let rx = stop_rx.clone();
        adapters.spawn(async move { ("discord", discord.run(stopped(rx)).await) });
    }

    // the weekly reviews users opted in to, checked every minute
    let reviews = {
        let orchestrator = orchestrator.clone();
        every(REVIEW_CHECK, stop_rx.clone(), move || {
            let (orchestrator, outboxes) = (orchestrator.clone(), outboxes.clone());
            async move {
                let outbox_for = move |p: Platform| outboxes.get(&p).cloned();
                if let Err(e) =
                    send_due_reviews(&orchestrator, chrono::Utc::now(), outbox_for).await
                {
                    tracing::warn!(error = %e, "weekly reviews not sent; retrying in a minute");
                }
            }
        })
    };

    // retention: transcripts of sessions idle for longer than the configured days
    let retention = settings.privacy.transcript_days.map(|days| {
        let store = orchestrator.store().clone();
        every(RETENTION_CHECK, stop_rx.clone(), move || {
            let store = store.clone();
            async move {
                if let Err(e) =
                    delete_old_transcripts(store.as_ref(), days, chrono::Utc::now()).await
                {
                    tracing::warn!(error = %e, "retention job failed; retrying later");
                }
            }
        })
    });

    let listener = tokio::net::TcpListener::bind(&settings.server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.server.listen))?;
    let address = listener.local_addr()?;
    tracing::info!(%address, "health and metrics at http://{address}/healthz and /metrics");
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(ServerState {
            orchestrator: orchestrator.clone(),
            adapters: health,
        });
    let server_stop = stopped(stop_rx.clone());
    let server = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(server_stop)
            .await
    });

    let mut failure = None;
    tokio::select! {
        () = shutdown_signal() => {
            tracing::info!("shutting down: no new messages; finishing the turns in flight");
        }
        Some(done) = adapters.join_next() => {
            let message = match done {
                Ok((name, Ok(()))) => format!("the {name} adapter stopped"),
                Ok((name, Err(e))) => format!("the {name} adapter failed: {e}"),
                Err(e) => format!("an adapter crashed: {e}"),
            };
            tracing::error!("{message}; shutting down");
            failure = Some(message);
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
    let _ = reviews.await;
    if let Some(retention) = retention {
        let _ = retention.await;
    }
    app.store.close().await;
    tracing::info!("stopped");
    match failure {
        Some(message) => bail!(message),
        None => Ok(()),
    }
}

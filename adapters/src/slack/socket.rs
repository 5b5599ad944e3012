//! Socket Mode: a WebSocket Slack opens to the app (no public URL needed). Each envelope
//! (an event, an interaction, a slash command) is kept before it is acknowledged; one not
//! acknowledged is delivered again, on this connection or the next. Slack's `disconnect`
//! (a refresh every few hours, or a server going away), a closed or silent socket: the
//! adapter asks for a new URL and connects again, without losing what was not
//! acknowledged.

use super::api::SlackError;
use super::receive::{NotKept, Receiver};
use crate::AdapterError;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use slack_morphism::events::{SlackCommandEvent, SlackInteractionEvent, SlackPushEventCallback};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

/// A socket that says nothing for this long, not even a pong to our pings, is dead.
const SILENT: Duration = Duration::from_secs(60);
/// How often Kaiwa pings Slack's end of the socket.
const PING_EVERY: Duration = Duration::from_secs(20);
/// The longest wait between two tries to connect.
const MOST_BACKOFF: Duration = Duration::from_secs(30);

/// Why a connection ended.
enum Ended {
    /// Stop: the adapter is shutting down.
    Shutdown,
    /// Connect again (Slack said `disconnect`, the socket closed or went silent).
    Reconnect,
}

/// Runs Socket Mode until `shutdown`; an error when Slack refuses the app token.
pub(super) async fn run(
    receiver: Arc<Receiver>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), AdapterError> {
    tokio::pin!(shutdown);
    let mut failures: u32 = 0;
    loop {
        let url = tokio::select! {
            biased;
            () = &mut shutdown => return Ok(()),
            url = receiver.api.open_socket() => url,
        };
        let url = match url {
            Ok(url) => url,
            Err(e @ SlackError::Api { .. }) if refused_token(&e) => {
                receiver.health.failed();
                return Err(AdapterError::Platform(format!(
                    "{e}: set the app-level token (xapp-…, scope connections:write) in the \
                     variable [slack] app_token_env names, and turn Socket Mode on in the \
                     app's settings"
                )));
            }
            Err(e) => {
                receiver.health.failed();
                failures += 1;
                tracing::warn!(error = %e, "Slack Socket Mode: no URL; trying again");
                if wait_or_stop(backoff(failures), &mut shutdown).await {
                    return Ok(());
                }
                continue;
            }
        };
        let socket = tokio::select! {
            biased;
            () = &mut shutdown => return Ok(()),
            socket = tokio_tungstenite::connect_async(url.as_str()) => socket,
        };
        let socket = match socket {
            Ok((socket, _)) => socket,
            Err(e) => {
                receiver.health.failed();
                failures += 1;
                tracing::warn!(error = %e, "Slack Socket Mode: could not connect; trying again");
                if wait_or_stop(backoff(failures), &mut shutdown).await {
                    return Ok(());
                }
                continue;
            }
        };
        tracing::info!("Slack Socket Mode connected");
        match connection(&receiver, socket, &mut shutdown).await {
            Ended::Shutdown => return Ok(()),
            Ended::Reconnect => {
                failures = 0;
                tracing::info!("Slack Socket Mode: connecting again");
            }
        }
    }
}

/// Whether Slack refused the token itself (connecting again would not help).
fn refused_token(e: &SlackError) -> bool {
    matches!(
        e.reason(),
        Some(
            "invalid_auth"
                | "not_authed"
                | "not_allowed_token_type"
                | "account_inactive"
                | "token_revoked"
                | "no app-level token (xapp-…) is set"
        )
    )
}

fn backoff(failures: u32) -> Duration {
    (Duration::from_millis(500) * 2u32.saturating_pow(failures.min(6))).min(MOST_BACKOFF)
}

/// Waits `wait`; `true` when `shutdown` came first.
async fn wait_or_stop(wait: Duration, shutdown: &mut (impl Future<Output = ()> + Unpin)) -> bool {
    tokio::select! {
        biased;
        () = shutdown => true,
        () = tokio::time::sleep(wait) => false,
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// One connection: envelopes kept and acknowledged in the order they came.
async fn connection(
    receiver: &Receiver,
    mut socket: Socket,
    shutdown: &mut (impl Future<Output = ()> + Unpin),
) -> Ended {
    // our pings make a live socket answer (a pong) however quiet Slack is
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut heard = tokio::time::Instant::now();
    loop {
        let frame = tokio::select! {
            biased;
            () = &mut *shutdown => {
                let _ = socket.close(None).await;
                return Ended::Shutdown;
            }
            _ = ping.tick() => {
                if heard.elapsed() > SILENT {
                    tracing::warn!("Slack Socket Mode: the socket went silent");
                    return Ended::Reconnect;
                }
                if socket.send(Message::Ping(Vec::new())).await.is_err() {
                    return Ended::Reconnect;
                }
                continue;
            }
            frame = socket.next() => frame,
        };
        heard = tokio::time::Instant::now();
        let text = match frame {
            None | Some(Err(_)) | Some(Ok(Message::Close(_))) => {
                return Ended::Reconnect;
            }
            Some(Ok(Message::Text(text))) => text,
            // pings are answered by tungstenite as the socket is read
            Some(Ok(_)) => continue,
        };
        let Ok(frame) = serde_json::from_str::<Value>(&text) else {
            tracing::warn!("Slack Socket Mode: a frame that is not JSON");
            continue;
        };
        match frame.get("type").and_then(Value::as_str) {
            Some("hello") => receiver.health.ok(),
            Some("disconnect") => {
                let reason = frame.get("reason").and_then(Value::as_str).unwrap_or("");
                tracing::info!(reason, "Slack asked for a new connection");
                let _ = socket.close(None).await;
                return Ended::Reconnect;
            }
            Some(kind) => {
                let Some(envelope) = frame.get("envelope_id").and_then(Value::as_str) else {
                    continue;
                };
                match envelope_of(receiver, kind, frame.get("payload").cloned()).await {
                    Ok(()) => {
                        let ack = json!({"envelope_id": envelope}).to_string();
                        if socket.send(Message::Text(ack)).await.is_err() {
                            // not acknowledged: Slack delivers it again
                            return Ended::Reconnect;
                        }
                    }
                    Err(e) => {
                        // not acknowledged: Slack delivers it again
                        receiver.health.failed();
                        tracing::error!(error = %e, "a Slack envelope not kept");
                    }
                }
            }
            None => {}
        }
    }
}

/// An envelope's payload, by its type; one that does not parse is acknowledged (Slack
/// would deliver the same again) and logged.
async fn envelope_of(
    receiver: &Receiver,
    kind: &str,
    payload: Option<Value>,
) -> Result<(), NotKept> {
    let payload = payload.unwrap_or(Value::Null);
    match kind {
        "events_api" => match serde_json::from_value::<SlackPushEventCallback>(payload) {
            Ok(callback) => receiver.event(callback).await,
            Err(e) => unreadable(kind, &e),
        },
        "interactive" => match serde_json::from_value::<SlackInteractionEvent>(payload) {
            Ok(interaction) => receiver.interaction(interaction).await,
            Err(e) => unreadable(kind, &e),
        },
        "slash_commands" => match serde_json::from_value::<SlackCommandEvent>(payload) {
            Ok(command) => receiver.command(command).await,
            Err(e) => unreadable(kind, &e),
        },
        _ => Ok(()),
    }
}

fn unreadable(kind: &str, e: &serde_json::Error) -> Result<(), NotKept> {
    tracing::warn!(kind, error = %e, "a Slack envelope Kaiwa cannot read; acknowledged");
    Ok(())
}

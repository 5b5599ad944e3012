//! The Events API: Slack posts events, interactions and slash commands to one URL of ours
//! (`[slack] events_listen` + `events_path`), which suits several instances behind a load
//! balancer. Every request's signature (HMAC-SHA256 of the timestamp and the body with the
//! signing secret, compared in constant time) is checked, and a timestamp more than five
//! minutes away is refused: a forged or replayed request is a 401 and changes nothing. An
//! event is kept, committed, before the 200; one that cannot be is a 503, and Slack
//! delivers it again (`X-Slack-Retry-Num`), which the store then takes once.

use super::receive::{NotKept, Receiver};
use crate::AdapterError;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::Value;
use slack_morphism::SlackSigningSecret;
use slack_morphism::events::{SlackCommandEvent, SlackInteractionEvent, SlackPushEvent};
use slack_morphism::signature_verifier::SlackEventSignatureVerifier;
use std::future::Future;
use std::sync::Arc;

/// The largest request taken (Slack's events are far smaller).
const MAX_BODY: usize = 1 << 20;

struct Events {
    receiver: Arc<Receiver>,
    verifier: SlackEventSignatureVerifier,
}

/// Serves the Events API on `listen` at `path` until `shutdown`; an error when it cannot
/// listen.
pub(super) async fn serve(
    receiver: Arc<Receiver>,
    (listen, path): (&str, &str),
    signing_secret: &str,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AdapterError> {
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        AdapterError::Setup(format!(
            "cannot listen for Slack's Events API on {listen}: {e}"
        ))
    })?;
    let address = listener
        .local_addr()
        .map_err(|e| AdapterError::Setup(format!("the Events API listener: {e}")))?;
    tracing::info!(%address, path, "Slack Events API at http://{address}{path}");
    let health = receiver.health.clone();
    health.set_role("events", true);
    health.ok();
    let events = Arc::new(Events {
        receiver,
        verifier: SlackEventSignatureVerifier::new(&SlackSigningSecret(signing_secret.to_string())),
    });
    let router = Router::new()
        .route(path, post(deliver))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(events);
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| AdapterError::Platform(format!("the Slack Events API server failed: {e}")))?;
    health.set_role("events", false);
    Ok(())
}

/// One request from Slack (or from someone pretending to be).
async fn deliver(State(events): State<Arc<Events>>, headers: HeaderMap, body: Bytes) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let signature = header(SlackEventSignatureVerifier::SLACK_SIGNED_HASH_HEADER);
    let timestamp = header(SlackEventSignatureVerifier::SLACK_SIGNED_TIMESTAMP);
    let Ok(text) = std::str::from_utf8(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    if let Err(e) = events.verifier.verify(signature, text, timestamp) {
        tracing::warn!(error = %e, "a Slack request refused: its signature or timestamp is wrong");
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let retry = header("x-slack-retry-num");
    if !retry.is_empty() {
        tracing::info!(retry, "Slack delivered an event again");
    }
    let form =
        header(header::CONTENT_TYPE.as_str()).starts_with("application/x-www-form-urlencoded");
    let kept = if form {
        form_request(&events.receiver, text).await
    } else {
        json_request(&events.receiver, text).await
    };
    match kept {
        Ok(Answer::Empty) => StatusCode::OK.into_response(),
        Ok(Answer::Challenge(challenge)) => (StatusCode::OK, challenge).into_response(),
        Err(Refused::Unreadable) => StatusCode::BAD_REQUEST.into_response(),
        Err(Refused::NotKept(e)) => {
            tracing::error!(error = %e, "a Slack event not kept; Slack will deliver it again");
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
    }
}

enum Answer {
    Empty,
    /// The URL's verification when it is set in the app's settings.
    Challenge(String),
}

enum Refused {
    Unreadable,
    NotKept(NotKept),
}

impl From<NotKept> for Refused {
    fn from(e: NotKept) -> Refused {
        Refused::NotKept(e)
    }
}

/// An event (`event_callback`) or the URL's verification.
async fn json_request(receiver: &Receiver, text: &str) -> Result<Answer, Refused> {
    let event: SlackPushEvent = match serde_json::from_str(text) {
        Ok(event) => event,
        Err(e) => {
            // a type Kaiwa does not read: taken, so that Slack does not send it again
            tracing::debug!(error = %e, "a Slack event Kaiwa does not read");
            return match serde_json::from_str::<Value>(text) {
                Ok(_) => Ok(Answer::Empty),
                Err(_) => Err(Refused::Unreadable),
            };
        }
    };
    match event {
        SlackPushEvent::UrlVerification(verify) => Ok(Answer::Challenge(verify.challenge)),
        SlackPushEvent::EventCallback(callback) => {
            receiver.event(callback).await?;
            Ok(Answer::Empty)
        }
        SlackPushEvent::AppRateLimited(limited) => {
            tracing::warn!(minute = ?limited.minute_rate_limited, "Slack held back events: the app was over its rate limit");
            Ok(Answer::Empty)
        }
    }
}

/// An interaction (`payload=` JSON) or a slash command (its fields), form-encoded.
async fn form_request(receiver: &Receiver, text: &str) -> Result<Answer, Refused> {
    let fields: Vec<(String, String)> =
        serde_urlencoded::from_str(text).map_err(|_| Refused::Unreadable)?;
    // Slack checking the certificate of a slash command's URL
    if fields.iter().any(|(k, _)| k == "ssl_check") {
        return Ok(Answer::Empty);
    }
    if let Some((_, payload)) = fields.iter().find(|(k, _)| k == "payload") {
        let interaction: SlackInteractionEvent = match serde_json::from_str(payload) {
            Ok(interaction) => interaction,
            Err(e) => {
                tracing::debug!(error = %e, "a Slack interaction Kaiwa does not read");
                return Ok(Answer::Empty);
            }
        };
        receiver.interaction(interaction).await?;
        return Ok(Answer::Empty);
    }
    let command: SlackCommandEvent =
        serde_urlencoded::from_str(text).map_err(|_| Refused::Unreadable)?;
    receiver.command(command).await?;
    Ok(Answer::Empty)
}

//! Updates received as a webhook (`[telegram] webhook_listen`) instead of long polling:
//! every instance may receive, behind the team's load balancer.
//!
//! - A delivery must carry the secret in `X-Telegram-Bot-Api-Secret-Token`, compared in
//!   constant time; without it (or wrong) the answer is 401 and nothing is stored.
//! - An update is committed to the inbox before the answer is 200; a commit that fails is
//!   answered 503, so Telegram delivers it again.
//! - A repeated delivery of an update (a lost 200, a retry at another instance) is processed
//!   once: the inbox keeps an update once, the store deduplicates turns by update id.
//! - A body over [`MAX_BODY`] gets 413, one that is not an update 400; the log line names the
//!   error's kind and place, never the text.
//! - Telegram's other API calls (`setWebhook` …) are `kaiwa webhook`'s, out of band, so an
//!   instance stopping never unhooks the bot.

use super::api::{CallError, TelegramApi};
use super::{Intake, hand_over, keep, polling, stop};
use crate::{AdapterError, AdapterHealth};
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::value::RawValue;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// The header Telegram sends the secret in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// The largest body taken: an update is a few kilobytes (a long message with entities, a
/// reply quoting another); a megabyte is not an update.
pub const MAX_BODY: usize = 1 << 20;

/// How long a delivery waits for the database before it is refused (Telegram delivers it
/// again; if the write lands after all, the repeat is processed once).
const STORE_WAIT: Duration = Duration::from_secs(8);

/// Where and how updates are received as a webhook.
#[derive(Clone)]
pub struct WebhookConfig {
    /// The address to listen on (`ADDR:PORT`).
    pub listen: String,
    /// The path deliveries are posted to (`/telegram`).
    pub path: String,
    /// The secret Telegram sends with each delivery (`setWebhook`'s `secret_token`).
    pub secret: String,
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("listen", &self.listen)
            .field("path", &self.path)
            .field("secret", &"***")
            .finish()
    }
}

/// Whether `secret` is one Telegram accepts as `secret_token`: 1–256 characters of
/// `A-Z`, `a-z`, `0-9`, `_` and `-`.
pub fn valid_secret(secret: &str) -> bool {
    (1..=256).contains(&secret.len())
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `setWebhook`: Telegram delivers to `url` with `secret`, the updates Kaiwa handles.
/// Pending updates are kept (whatever polling left is delivered to the webhook).
pub async fn set_webhook(api: &TelegramApi, url: &str, secret: &str) -> Result<(), CallError> {
    let params = serde_json::json!({
        "url": url,
        "secret_token": secret,
        "allowed_updates": polling::ALLOWED_UPDATES,
        "drop_pending_updates": false,
    });
    let _: serde::de::IgnoredAny = api.request("setWebhook", &params, None).await?;
    Ok(())
}

/// `deleteWebhook`: back to long polling; pending updates are kept.
pub async fn delete_webhook(api: &TelegramApi) -> Result<(), CallError> {
    let params = serde_json::json!({"drop_pending_updates": false});
    let _: serde::de::IgnoredAny = api.request("deleteWebhook", &params, None).await?;
    Ok(())
}

/// `getWebhookInfo` as Telegram answers it (URL, pending updates, last error, allowed
/// updates).
pub async fn webhook_info(api: &TelegramApi) -> Result<serde_json::Value, CallError> {
    api.request("getWebhookInfo", &serde_json::json!({}), None)
        .await
}

struct Receiver {
    intake: Arc<Intake>,
    secret: String,
    health: Arc<AdapterHealth>,
}

/// Serves the webhook until `shutdown` resolves; an error when it cannot listen.
pub(super) async fn serve(
    intake: Arc<Intake>,
    config: &WebhookConfig,
    health: Arc<AdapterHealth>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AdapterError> {
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|e| {
            AdapterError::Setup(format!(
                "cannot listen for the Telegram webhook on {}: {e}",
                config.listen
            ))
        })?;
    let address = listener
        .local_addr()
        .map_err(|e| AdapterError::Setup(format!("the webhook listener: {e}")))?;
    tracing::info!(%address, path = %config.path, "Telegram webhook at http://{address}{}", config.path);
    health.set_role("webhook", true);
    let receiver = Arc::new(Receiver {
        intake,
        secret: config.secret.clone(),
        health: health.clone(),
    });
    let router = Router::new()
        .route(&config.path, post(receive))
        // bounded by `read_body`, which reads an oversized body to its end before the 413
        .layer(DefaultBodyLimit::disable())
        .with_state(receiver);
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| AdapterError::Platform(format!("the Telegram webhook server failed: {e}")))?;
    health.set_role("webhook", false);
    Ok(())
}

/// The most of an oversized body read (and dropped) before it is refused: a client still
/// sending when the connection closes sees a broken connection instead of the 413.
const DRAINED: usize = 16 << 20;

/// The body, at most [`MAX_BODY`] kept: a larger one is read to its end (up to
/// [`DRAINED`]) and refused with 413; a body that breaks off with 400.
async fn read_body(body: Body) -> Result<Vec<u8>, StatusCode> {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    let mut kept = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| StatusCode::BAD_REQUEST)?;
        seen = seen.saturating_add(chunk.len());
        if seen > DRAINED {
            return Err(StatusCode::PAYLOAD_TOO_LARGE);
        }
        if seen <= MAX_BODY {
            kept.extend_from_slice(&chunk);
        }
    }
    if seen > MAX_BODY {
        return Err(StatusCode::PAYLOAD_TOO_LARGE);
    }
    Ok(kept)
}

/// Whether `headers` carry `secret`, compared in constant time.
fn authorised(headers: &HeaderMap, secret: &str) -> bool {
    use subtle::ConstantTimeEq;
    headers
        .get(SECRET_HEADER)
        .is_some_and(|given| bool::from(given.as_bytes().ct_eq(secret.as_bytes())))
}

/// One delivery: checked, kept in the inbox, handed to its lane; 200 only once kept.
async fn receive(
    State(receiver): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: Body,
) -> StatusCode {
    if !authorised(&headers, &receiver.secret) {
        tracing::warn!(
            secret = if headers.contains_key(SECRET_HEADER) {
                "wrong"
            } else {
                "missing"
            },
            "a webhook delivery without the secret refused"
        );
        return StatusCode::UNAUTHORIZED;
    }
    let body = match read_body(body).await {
        Ok(body) => body,
        Err(status) => {
            tracing::warn!(%status, "a webhook delivery that could not be read refused");
            return status;
        }
    };
    let raw = match serde_json::from_slice::<Box<RawValue>>(&body) {
        Ok(raw) => raw,
        Err(e) => {
            tracing::warn!(
                error = ?e.classify(),
                column = e.column(),
                bytes = body.len(),
                "a webhook delivery that is not JSON refused"
            );
            return StatusCode::BAD_REQUEST;
        }
    };
    let batch = polling::read_batch(std::slice::from_ref(&raw));
    if batch.next_offset.is_none() {
        tracing::warn!(
            bytes = body.len(),
            "a webhook delivery that is not an update refused"
        );
        return StatusCode::BAD_REQUEST;
    }
    receiver.health.ok();
    let intake = &receiver.intake;
    for &(chat, draft) in &batch.stops {
        stop(intake, chat, draft);
    }
    match tokio::time::timeout(STORE_WAIT, keep(intake, batch.updates)).await {
        // what is not Kaiwa's has no host to go to here
        Ok(Ok((routed, _others))) => {
            hand_over(intake, routed).await;
            StatusCode::OK
        }
        Ok(Err(error)) => {
            tracing::error!(%error, "a webhook delivery could not be stored; Telegram will retry");
            StatusCode::SERVICE_UNAVAILABLE
        }
        Err(_) => {
            tracing::error!(
                wait = ?STORE_WAIT,
                "a webhook delivery was not stored in time; Telegram will retry"
            );
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_those_telegram_takes() {
        assert!(valid_secret("abc_DEF-123"));
        assert!(!valid_secret(""));
        assert!(!valid_secret("with space"));
        assert!(!valid_secret("ünïcode"));
        assert!(!valid_secret(&"a".repeat(257)));
    }

    #[test]
    fn only_the_exact_secret_is_authorised() {
        let mut headers = HeaderMap::new();
        assert!(!authorised(&headers, "s3cret"));
        headers.insert(SECRET_HEADER, "s3cre".parse().expect("header"));
        assert!(!authorised(&headers, "s3cret"));
        headers.insert(SECRET_HEADER, "s3cret!".parse().expect("header"));
        assert!(!authorised(&headers, "s3cret"));
        headers.insert(SECRET_HEADER, "s3cret".parse().expect("header"));
        assert!(authorised(&headers, "s3cret"));
    }

    #[test]
    fn the_secret_never_shows_in_debug() {
        let config = WebhookConfig {
            listen: "127.0.0.1:0".into(),
            path: "/telegram".into(),
            secret: "very-secret".into(),
        };
        assert!(!format!("{config:?}").contains("very-secret"));
    }
}

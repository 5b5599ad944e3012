//! [`TelegramApi`]: Bot API calls as JSON requests on teloxide's HTTP client settings, with
//! teloxide's types for what goes over the wire. Sent by hand rather than through
//! teloxide's requests because the fault handling needs what those hide: the HTTP status
//! (teloxide sleeps 10 s on any 5xx, then reports it as an API error), whether a failed
//! call reached Telegram at all, and one update of a `getUpdates` batch at a time.
//!
//! What is retried ([`TelegramApi::call`]): a 429 after its `retry_after`; a 5xx or a
//! connection that could not be made with a growing wait (0.5 s, 1 s … 5 tries within
//! ~16 s). A call whose answer was lost (a timeout after the request went out) is retried
//! only when a second copy does no harm ([`Repeat::Safe`]); a message sent is not sent
//! again blindly (see the README: at most once on an unknown outcome).

use kaiwa_core::admin::DeliveryError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Why a Bot API call failed; the token never appears in it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("Telegram flood control: retry after {0:?}")]
    RetryAfter(Duration),
    #[error("Telegram server error {status}: {description}")]
    Server { status: u16, description: String },
    #[error("Telegram unreachable: {0}")]
    Refused(String),
    #[error("no answer from Telegram (the call may have been carried out): {0}")]
    Unknown(String),
    #[error("Telegram refused the call ({status}): {description}")]
    Api { status: u16, description: String },
}

impl CallError {
    /// An edit that changed nothing (the message already says that).
    pub fn is_not_modified(&self) -> bool {
        matches!(self, CallError::Api { description, .. } if description.contains("message is not modified"))
    }
}

/// What a failed call means to the core: wait (flood control), Telegram out of reach, or
/// a refusal.
pub(super) fn delivery_error(e: CallError) -> DeliveryError {
    match e {
        CallError::RetryAfter(wait) => DeliveryError::RateLimited { retry_after: wait },
        CallError::Refused(e) | CallError::Unknown(e) => DeliveryError::Disconnected(e),
        other => DeliveryError::Rejected(other.to_string()),
    }
}

/// Whether a call may be made again when its outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// Twice is the same as once (an edit, a callback answer, a typing indicator).
    Safe,
    /// A second copy would be seen (a message sent).
    Once,
}

/// Failures (5xx, no connection) are retried this many times.
const RETRIES: u32 = 5;
/// `RetryAfter` is waited out this many times before the call gives up.
const FLOOD_RETRIES: u32 = 5;
/// The longest flood-control wait taken.
const MAX_FLOOD_WAIT: Duration = Duration::from_secs(120);

/// The Bot API's answer: `{"ok":true,"result":…}` or an error with its code.
#[derive(Deserialize)]
struct Envelope<T> {
    ok: bool,
    result: Option<T>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Parameters>,
}

#[derive(Deserialize)]
struct Parameters {
    retry_after: Option<u64>,
}

/// A Bot API client: the token and the API's base URL.
#[derive(Clone)]
pub struct TelegramApi {
    client: reqwest::Client,
    base: reqwest::Url,
    token: String,
    /// The Bot API server refused `sendMessageDraft` (older than 9.5, or self-hosted).
    no_drafts: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for TelegramApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never the token
        f.debug_struct("TelegramApi")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

impl TelegramApi {
    pub fn new(token: &str, api_url: Option<&str>) -> Result<TelegramApi, crate::AdapterError> {
        let client = teloxide::net::default_reqwest_settings()
            .build()
            .map_err(|e| crate::AdapterError::Setup(format!("HTTP client: {e}")))?;
        let url = api_url.unwrap_or("https://api.telegram.org");
        let base = reqwest::Url::parse(url)
            .map_err(|e| crate::AdapterError::Setup(format!("telegram.api_url {url:?}: {e}")))?;
        if base.cannot_be_a_base() {
            return Err(crate::AdapterError::Setup(format!(
                "telegram.api_url {url:?} is not a base URL"
            )));
        }
        Ok(TelegramApi {
            client,
            base,
            token: token.to_string(),
            no_drafts: Default::default(),
        })
    }

    pub(super) fn drafts_unsupported(&self) -> bool {
        self.no_drafts.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn no_drafts(&self) {
        tracing::info!("the Bot API server has no message drafts; showing typing instead");
        self.no_drafts
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn url(&self, method: &str) -> reqwest::Url {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty();
            segments.push(&format!("bot{}", self.token));
            segments.push(method);
        }
        url
    }

    /// One request, no retry. `timeout`: instead of the client's 17 s (a long poll's).
    pub(super) async fn request<T: DeserializeOwned>(
        &self,
        method: &str,
        params: &impl Serialize,
        timeout: Option<Duration>,
    ) -> Result<T, CallError> {
        let mut request = self.client.post(self.url(method)).json(params);
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        let response = request.send().await.map_err(send_error)?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| CallError::Unknown(e.without_url().to_string()))?;
        answer(status.as_u16(), &body)
    }

    /// A call with the retries of the module's documentation.
    pub(super) async fn call<T: DeserializeOwned>(
        &self,
        method: &'static str,
        params: &impl Serialize,
        repeat: Repeat,
    ) -> Result<T, CallError> {
        let mut floods = 0;
        let mut failures = 0;
        loop {
            let error = match self.request(method, params, None).await {
                Ok(result) => return Ok(result),
                Err(e) => e,
            };
            let wait = match &error {
                CallError::RetryAfter(wait) if floods < FLOOD_RETRIES => {
                    floods += 1;
                    (*wait).min(MAX_FLOOD_WAIT)
                }
                CallError::Server { .. } | CallError::Refused(_) if failures < RETRIES => {
                    failures += 1;
                    backoff(failures)
                }
                CallError::Unknown(_) if repeat == Repeat::Safe && failures < RETRIES => {
                    failures += 1;
                    backoff(failures)
                }
                _ => return Err(error),
            };
            tracing::warn!(method, %error, ?wait, "Telegram call failed; trying again");
            tokio::time::sleep(wait).await;
        }
    }
}

/// The wait before the `n`th retry (1-based): 0.5 s, 1 s, 2 s, 4 s, 8 s.
pub(super) fn backoff(n: u32) -> Duration {
    Duration::from_millis(500 << n.saturating_sub(1).min(4))
}

fn send_error(e: reqwest::Error) -> CallError {
    let e = e.without_url();
    if e.is_connect() {
        CallError::Refused(e.to_string())
    } else {
        // a timeout or a connection lost after the request went out
        CallError::Unknown(e.to_string())
    }
}

/// Reads an answer. A body that is not the Bot API's JSON says nothing of its content in
/// the error (it may hold users' messages).
fn answer<T: DeserializeOwned>(status: u16, body: &[u8]) -> Result<T, CallError> {
    let envelope = match serde_json::from_slice::<Envelope<T>>(body) {
        Ok(envelope) => envelope,
        Err(e) => {
            let description = format!(
                "unreadable answer ({:?} error at column {})",
                e.classify(),
                e.column()
            );
            return Err(match status {
                500.. => CallError::Server {
                    status,
                    description,
                },
                200..300 => CallError::Unknown(description),
                _ => CallError::Api {
                    status,
                    description,
                },
            });
        }
    };
    if envelope.ok
        && let Some(result) = envelope.result
    {
        return Ok(result);
    }
    let description = envelope.description.unwrap_or_default();
    if let Some(secs) = envelope.parameters.and_then(|p| p.retry_after) {
        return Err(CallError::RetryAfter(Duration::from_secs(secs)));
    }
    Err(match status {
        429 => CallError::RetryAfter(Duration::from_secs(1)),
        500.. => CallError::Server {
            status,
            description,
        },
        _ => CallError::Api {
            status,
            description,
        },
    })
}

impl TelegramApi {
    /// For `kaiwa check --online`: whether the bot (`bot_id`) sees `chat` and may write
    /// there; `Err` says what to fix.
    pub async fn admin_chat_rights(&self, chat: i64, bot_id: u64) -> Result<String, String> {
        let params = serde_json::json!({"chat_id": chat});
        let found: Result<serde_json::Value, CallError> =
            self.request("getChat", &params, None).await;
        let found = found.map_err(|e| {
            format!("the bot cannot see the admin chat {chat} ({e}): add the bot to it, or fix [telegram] admin_chat_id")
        })?;
        let title = found["title"].as_str().unwrap_or("the chat").to_string();
        let params = serde_json::json!({"chat_id": chat, "user_id": bot_id});
        let member: Result<serde_json::Value, CallError> =
            self.request("getChatMember", &params, None).await;
        let member = member.map_err(|e| format!("cannot read the bot's rights in {title}: {e}"))?;
        match member["status"].as_str().unwrap_or_default() {
            "creator" | "administrator" | "member" => Ok(format!(
                "{title} ({chat}): the bot is {}",
                member["status"].as_str().unwrap_or_default()
            )),
            "restricted" if member["can_send_messages"] == false => Err(format!(
                "the bot may not write in {title}: allow it to send messages there"
            )),
            "restricted" => Ok(format!("{title} ({chat}): the bot may write")),
            other => Err(format!(
                "the bot is not a member of {title} ({other}): add it to the admin chat"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_by_status_and_body() {
        let ok: Result<bool, _> = answer(200, br#"{"ok":true,"result":true}"#);
        assert!(matches!(ok, Ok(true)));
        let flood: Result<bool, _> = answer(
            429,
            br#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 7","parameters":{"retry_after":7}}"#,
        );
        assert!(matches!(flood, Err(CallError::RetryAfter(d)) if d == Duration::from_secs(7)));
        let server: Result<bool, _> = answer(502, b"<html>Bad Gateway</html>");
        assert!(matches!(server, Err(CallError::Server { status: 502, .. })));
        let bad: Result<bool, _> = answer(
            400,
            br#"{"ok":false,"error_code":400,"description":"Bad Request: message is not modified"}"#,
        );
        assert!(bad.is_err_and(|e| e.is_not_modified()));
        // garbage with a 200: the call may have been carried out; nothing of it is quoted
        let garbage: Result<bool, _> = answer(200, b"{\"ok\":true,\"result\":\"secret text\"");
        match garbage {
            Err(CallError::Unknown(d)) => assert!(!d.contains("secret"), "{d}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_token_is_in_the_url_only() {
        let api = TelegramApi::new("123:SECRET", Some("http://127.0.0.1:9/")).expect("api");
        assert_eq!(
            api.url("getMe").as_str(),
            "http://127.0.0.1:9/bot123:SECRET/getMe"
        );
        assert!(!format!("{api:?}").contains("SECRET"));
    }

    #[test]
    fn retries_wait_longer_each_time_within_a_minute() {
        let waits: Vec<Duration> = (1..=RETRIES).map(backoff).collect();
        assert!(waits.windows(2).all(|w| w[0] < w[1]), "{waits:?}");
        assert!(waits.iter().sum::<Duration>() < Duration::from_secs(60));
    }
}

//! Slack's Web API over the reqwest client the other adapters use: JSON posts with the bot
//! token, `ok: false` turned into an error with Slack's reason, and Slack's rate limits
//! honoured per channel — a 429's `Retry-After` holds back the calls to that channel only,
//! then the call is made again; calls to other channels go on meanwhile.

use kaiwa_core::admin::DeliveryError;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Slack's Web API.
pub const SLACK_API: &str = "https://slack.com/api/";

/// The most a call waits out a rate limit before it gives up (the turn's reply is then
/// sent again later, as for any platform that is down).
const MOST_WAIT: Duration = Duration::from_secs(60);
/// Tries of one call: rate limits and server errors are tried again.
const TRIES: u32 = 5;
/// Each call's own limit.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a Web API call failed.
#[derive(Debug, thiserror::Error)]
pub enum SlackError {
    /// Slack answered `ok: false` (`channel_not_found`, `invalid_auth`, …).
    #[error("Slack {method}: {error}")]
    Api { method: String, error: String },
    #[error("Slack {method}: rate limited, retry after {retry_after:?}")]
    RateLimited {
        method: String,
        retry_after: Duration,
    },
    #[error("Slack {method}: HTTP {status}")]
    Status { method: String, status: u16 },
    #[error("Slack {method}: {source}")]
    Transport {
        method: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("Slack {method}: an answer that is not Slack's JSON")]
    Garbage { method: String },
}

impl SlackError {
    /// Slack's reason for an `ok: false` (`None` for other failures).
    pub fn reason(&self) -> Option<&str> {
        match self {
            SlackError::Api { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl From<SlackError> for DeliveryError {
    fn from(e: SlackError) -> DeliveryError {
        match e {
            SlackError::RateLimited { retry_after, .. } => {
                DeliveryError::RateLimited { retry_after }
            }
            SlackError::Api { .. } => DeliveryError::Rejected(e.to_string()),
            _ => DeliveryError::Disconnected(e.to_string()),
        }
    }
}

/// A Web API client (cheap to clone).
#[derive(Clone)]
pub struct SlackApi {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    /// Ends with `/`: a method's URL is this and its name.
    base: reqwest::Url,
    bot_token: String,
    /// Socket Mode's app-level token (`xapp-…`), where Kaiwa uses Socket Mode.
    app_token: Option<String>,
    /// Channel → until when Slack asked us to wait (`""`: calls that name no channel).
    blocked: Mutex<HashMap<String, Instant>>,
}

impl std::fmt::Debug for SlackApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackApi")
            .field("base", &self.inner.base.as_str())
            .field("tokens", &"<redacted>")
            .finish()
    }
}

impl SlackApi {
    /// A client of `api_url` (default [`SLACK_API`]); `app_token` for Socket Mode.
    pub fn new(
        bot_token: &str,
        app_token: Option<&str>,
        api_url: Option<&str>,
    ) -> Result<SlackApi, String> {
        let mut base = api_url.unwrap_or(SLACK_API).to_string();
        if !base.ends_with('/') {
            base.push('/');
        }
        let base =
            reqwest::Url::parse(&base).map_err(|e| format!("[slack] api_url {base:?}: {e}"))?;
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|e| format!("an HTTP client for Slack: {e}"))?;
        Ok(SlackApi {
            inner: Arc::new(Inner {
                http,
                base,
                bot_token: bot_token.to_string(),
                app_token: app_token.map(str::to_string),
                blocked: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// `method` with `body` as JSON and the bot token; the answer's JSON when `ok`.
    pub async fn call(&self, method: &str, body: &Value) -> Result<Value, SlackError> {
        self.send(
            method,
            channel_of(body),
            &self.inner.bot_token,
            Payload::Json(body),
            TRIES,
        )
        .await
        .map(|(answer, _)| answer)
    }

    /// [`SlackApi::call`] tried once: a rate limit comes back at once (a streamed edit is
    /// skipped, not queued).
    pub async fn call_once(&self, method: &str, body: &Value) -> Result<Value, SlackError> {
        self.send(
            method,
            channel_of(body),
            &self.inner.bot_token,
            Payload::Json(body),
            1,
        )
        .await
        .map(|(answer, _)| answer)
    }

    /// `method` with `form` (the read methods take no JSON) and the bot token, with the
    /// answer's headers.
    pub async fn call_form(
        &self,
        method: &str,
        form: &[(&str, &str)],
    ) -> Result<(Value, reqwest::header::HeaderMap), SlackError> {
        let channel = form
            .iter()
            .find(|(k, _)| *k == "channel")
            .map_or("", |(_, v)| *v);
        self.send(
            method,
            channel,
            &self.inner.bot_token,
            Payload::Form(form),
            TRIES,
        )
        .await
    }

    /// Posts `body` to an interaction's `response_url` (no token: the URL is the
    /// credential), e.g. to replace an ephemeral message.
    pub async fn respond(&self, url: &str, body: &Value) -> Result<(), SlackError> {
        let method = "response_url";
        let response = self
            .inner
            .http
            .post(url)
            .json(body)
            .send()
            .await
            .map_err(|source| SlackError::Transport {
                method: method.into(),
                source,
            })?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(SlackError::Status {
                method: method.into(),
                status: response.status().as_u16(),
            })
        }
    }

    /// Socket Mode: a new WebSocket URL from `apps.connections.open` (the app token).
    pub async fn open_socket(&self) -> Result<String, SlackError> {
        let method = "apps.connections.open";
        let Some(token) = self.inner.app_token.as_deref() else {
            return Err(SlackError::Api {
                method: method.into(),
                error: "no app-level token (xapp-…) is set".into(),
            });
        };
        let (answer, _) = self
            .send(method, "", token, Payload::Form(&[]), TRIES)
            .await?;
        answer
            .get("url")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or(SlackError::Garbage {
                method: method.into(),
            })
    }

    /// Waits until calls to `channel` may go (a 429 there asked for a pause).
    async fn wait_for(&self, channel: &str) {
        let until = {
            let blocked = self.inner.blocked.lock().unwrap_or_else(|p| p.into_inner());
            blocked.get(channel).copied()
        };
        if let Some(until) = until {
            tokio::time::sleep_until(until).await;
        }
    }

    fn block(&self, channel: &str, wait: Duration) {
        let mut blocked = self.inner.blocked.lock().unwrap_or_else(|p| p.into_inner());
        let until = Instant::now() + wait;
        let entry = blocked.entry(channel.to_string()).or_insert(until);
        if *entry < until {
            *entry = until;
        }
        // forget the pauses that are over
        let now = Instant::now();
        blocked.retain(|_, until| *until > now);
    }

    async fn send(
        &self,
        method: &str,
        channel: &str,
        token: &str,
        payload: Payload<'_>,
        most_tries: u32,
    ) -> Result<(Value, reqwest::header::HeaderMap), SlackError> {
        let url = self
            .inner
            .base
            .join(method)
            .map_err(|_| SlackError::Garbage {
                method: method.into(),
            })?;
        let mut tries = 0;
        loop {
            tries += 1;
            self.wait_for(channel).await;
            let request = self.inner.http.post(url.clone()).bearer_auth(token);
            let request = match payload {
                Payload::Json(body) => request.json(body),
                Payload::Form(form) => request.form(form),
            };
            let response = match request.send().await {
                Ok(response) => response,
                Err(source)
                    if tries < most_tries && (source.is_connect() || source.is_timeout()) =>
                {
                    tracing::debug!(method, error = %source, "Slack unreachable; trying again");
                    tokio::time::sleep(backoff(tries)).await;
                    continue;
                }
                Err(source) => {
                    return Err(SlackError::Transport {
                        method: method.into(),
                        source,
                    });
                }
            };
            let status = response.status();
            if status.as_u16() == 429 {
                let retry_after = retry_after(response.headers());
                // calls to this channel wait it out, whoever makes them
                self.block(channel, retry_after);
                if tries < most_tries && retry_after <= MOST_WAIT {
                    tracing::info!(method, channel, ?retry_after, "Slack rate limit; waiting");
                    continue;
                }
                return Err(SlackError::RateLimited {
                    method: method.into(),
                    retry_after,
                });
            }
            if status.is_server_error() && tries < most_tries {
                tokio::time::sleep(backoff(tries)).await;
                continue;
            }
            if !status.is_success() {
                return Err(SlackError::Status {
                    method: method.into(),
                    status: status.as_u16(),
                });
            }
            let headers = response.headers().clone();
            let answer: Value = match response.json().await {
                Ok(answer) => answer,
                Err(_) => {
                    return Err(SlackError::Garbage {
                        method: method.into(),
                    });
                }
            };
            if answer.get("ok").and_then(Value::as_bool) == Some(true) {
                return Ok((answer, headers));
            }
            let error = answer
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("not ok")
                .to_string();
            if error == "ratelimited" && tries < most_tries {
                self.block(channel, Duration::from_secs(1));
                continue;
            }
            return Err(SlackError::Api {
                method: method.into(),
                error,
            });
        }
    }
}

#[derive(Clone, Copy)]
enum Payload<'a> {
    Json(&'a Value),
    Form(&'a [(&'a str, &'a str)]),
}

/// The channel a call is about (its rate limit is that channel's).
fn channel_of(body: &Value) -> &str {
    body.get("channel")
        .or_else(|| body.get("channel_id"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// A 429's `Retry-After` (seconds; 1 s when it has none).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Duration {
    headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(Duration::from_secs(1), |s| {
            Duration::from_secs_f64(s.min(3600.0))
        })
}

fn backoff(tries: u32) -> Duration {
    Duration::from_millis(250 * 2u64.pow(tries.min(5)))
}

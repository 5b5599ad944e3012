//! A fake Slack on 127.0.0.1 for the adapter's whole-bot tests: the Web API under `/api/`
//! (what `[slack] api_url` points at), a Socket Mode WebSocket (the URL
//! `apps.connections.open` hands out) and signed Events API deliveries to the bot.
//!
//! The socket says `hello`, sends every envelope a test injects and keeps it until the bot
//! acknowledges it; a connection that ends (dropped by the test, or by a killed bot) leaves
//! the unacknowledged envelopes to the next connection, as Slack redelivers them. The Web
//! API records every call, posts messages (each with its `ts`), ephemeral messages, edits
//! and deletions, and can answer 429 with `Retry-After` to the posts in one channel.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::Message as WsMessage;

pub const BOT_TOKEN: &str = "xoxb-fake-bot-token";
pub const APP_TOKEN: &str = "xapp-fake-app-token";
pub const SIGNING_SECRET: &str = "fake-signing-secret";
pub const BOT_USER: &str = "UBOT";
pub const TEAM: &str = "T0001";
pub const APP_ID: &str = "A0001";

/// One recorded Web API call.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub body: Value,
    pub at: Instant,
}

#[derive(Default)]
struct Inner {
    calls: Vec<Call>,
    /// Messages posted (by the bot), oldest first; edits change them in place.
    messages: Vec<Value>,
    ephemerals: Vec<Value>,
    /// Channel → 429s still to answer to its posts, and their `Retry-After` in seconds.
    limited: HashMap<String, (usize, u64)>,
    /// Envelopes not acknowledged yet, in the order they were injected.
    unacked: VecDeque<(String, Value)>,
    acks: Vec<String>,
    /// Times an envelope was sent (redeliveries included).
    sent: HashMap<String, usize>,
    connections: usize,
    hellos: usize,
    /// Channels the bot is not a member of.
    outside: std::collections::HashSet<String>,
    /// The bot token's scopes, when a test narrowed them.
    scopes: Option<String>,
}

struct Shared {
    inner: Mutex<Inner>,
    next: AtomicU64,
    /// The live socket's sender (a new connection replaces it).
    socket: Mutex<Option<mpsc::UnboundedSender<Control>>>,
    changed: Notify,
    address: std::net::SocketAddr,
    /// Where the Socket Mode WebSocket listens.
    socket_address: std::net::SocketAddr,
}

enum Control {
    Send(String),
    Drop,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn next_ts(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("1700000000.{n:06}")
    }
}

/// The fake; dropping it stops nothing (the test's runtime ends it).
#[derive(Clone)]
pub struct FakeSlack {
    shared: Arc<Shared>,
}

impl FakeSlack {
    pub async fn start() -> FakeSlack {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let sockets = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let socket_address = sockets.local_addr().expect("address");
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            next: AtomicU64::new(100),
            socket: Mutex::new(None),
            changed: Notify::new(),
            address,
            socket_address,
        });
        let app = Router::new()
            .route("/api/{method}", any(web_api))
            .with_state(shared.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let for_sockets = shared.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = sockets.accept().await {
                let shared = for_sockets.clone();
                tokio::spawn(async move {
                    if let Ok(ws) = tokio_tungstenite::accept_async(stream).await {
                        serve_socket(shared, ws).await;
                    }
                });
            }
        });
        FakeSlack { shared }
    }

    /// `[slack] api_url`.
    pub fn api_url(&self) -> String {
        format!("http://{}/api/", self.shared.address)
    }

    // ---- what the bot did ----

    pub fn calls(&self) -> Vec<Call> {
        self.shared.lock().calls.clone()
    }

    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }

    /// The bot's messages in `channel` (any thread), oldest first.
    pub fn messages_in(&self, channel: &str) -> Vec<Value> {
        self.shared
            .lock()
            .messages
            .iter()
            .filter(|m| m["channel"] == channel && m.get("_deleted").is_none())
            .cloned()
            .collect()
    }

    /// The bot's messages in a thread (`""`: the channel's top level).
    pub fn thread(&self, channel: &str, thread: &str) -> Vec<Value> {
        self.messages_in(channel)
            .into_iter()
            .filter(|m| m["thread_ts"].as_str().unwrap_or("") == thread)
            .collect()
    }

    pub fn texts_in(&self, channel: &str) -> Vec<String> {
        texts(&self.messages_in(channel))
    }

    pub fn thread_texts(&self, channel: &str, thread: &str) -> Vec<String> {
        texts(&self.thread(channel, thread))
    }

    /// Ephemeral messages to `user`, oldest first.
    pub fn ephemerals_for(&self, user: &str) -> Vec<Value> {
        self.shared
            .lock()
            .ephemerals
            .iter()
            .filter(|m| m["user"] == user)
            .cloned()
            .collect()
    }

    /// A message is being streamed in `channel`: it carries the Stop button.
    pub fn streaming_in(&self, channel: &str) -> bool {
        self.messages_in(channel)
            .iter()
            .any(|m| m["blocks"].to_string().contains("kaiwa|stop"))
    }

    /// Envelopes acknowledged, and how many times each envelope was sent.
    pub fn acks(&self) -> Vec<String> {
        self.shared.lock().acks.clone()
    }

    pub fn unacked(&self) -> usize {
        self.shared.lock().unacked.len()
    }

    pub fn times_sent(&self, envelope: &str) -> usize {
        self.shared.lock().sent.get(envelope).copied().unwrap_or(0)
    }

    pub fn connections(&self) -> usize {
        self.shared.lock().connections
    }

    // ---- how the fake misbehaves ----

    /// The next `count` posts to `channel` are answered 429 with `Retry-After: secs`.
    pub fn rate_limit(&self, channel: &str, count: usize, secs: u64) {
        self.shared
            .lock()
            .limited
            .insert(channel.to_string(), (count, secs));
    }

    /// The bot is not in `channel` (`conversations.info` says so).
    pub fn leave(&self, channel: &str) {
        self.shared.lock().outside.insert(channel.to_string());
    }

    /// The bot token has only these scopes (comma-separated, as Slack lists them).
    pub fn grant_only(&self, scopes: &str) {
        self.shared.lock().scopes = Some(scopes.to_string());
    }

    /// Closes the socket without a word (a network failure).
    pub fn drop_socket(&self) {
        let socket = self
            .shared
            .socket
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(socket) = socket {
            let _ = socket.send(Control::Drop);
        }
    }

    /// Slack's `disconnect`: the app is to connect again.
    pub fn ask_to_reconnect(&self) {
        let frame = json!({"type": "disconnect", "reason": "refresh_requested",
            "debug_info": {"host": "fake"}});
        self.send_frame(frame.to_string());
    }

    fn send_frame(&self, frame: String) {
        let socket = self.shared.socket.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(socket) = socket.as_ref() {
            let _ = socket.send(Control::Send(frame));
        }
    }

    // ---- what users do, over Socket Mode ----

    /// Queues an envelope of `kind` with `payload` and sends it on the live socket; returns
    /// its id.
    pub fn envelope(&self, kind: &str, payload: Value) -> String {
        let id = format!("env-{}", self.shared.next.fetch_add(1, Ordering::Relaxed));
        let frame = json!({
            "type": kind,
            "envelope_id": id,
            "payload": payload,
            "accepts_response_payload": kind != "events_api",
            "retry_attempt": 0,
            "retry_reason": "",
        });
        self.shared
            .lock()
            .unacked
            .push_back((id.clone(), frame.clone()));
        *self.shared.lock().sent.entry(id.clone()).or_default() += 1;
        self.send_frame(frame.to_string());
        id
    }

    /// A user's message in `channel` (in `thread`, a thread's first `ts`); returns its `ts`.
    pub fn message(&self, channel: &str, user: &str, text: &str, thread: Option<&str>) -> String {
        let (ts, payload) = self.message_event(channel, user, text, thread);
        self.envelope("events_api", payload);
        ts
    }

    /// A message event (the Events API's body, Socket Mode's payload) and its `ts`.
    pub fn message_event(
        &self,
        channel: &str,
        user: &str,
        text: &str,
        thread: Option<&str>,
    ) -> (String, Value) {
        let ts = self.shared.next_ts();
        let mut event = json!({
            "type": "message",
            "channel": channel,
            "channel_type": if channel.starts_with('D') { "im" } else { "channel" },
            "user": user,
            "text": text,
            "ts": ts,
            "client_msg_id": format!("cm-{ts}"),
        });
        if let Some(thread) = thread {
            event["thread_ts"] = thread.into();
        }
        let payload = json!({
            "token": "verification-token",
            "team_id": TEAM,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": format!("Ev{}", ts.replace('.', "")),
            "event_time": 1_700_000_000,
        });
        (ts, payload)
    }

    /// A press of the button `action_id` on the bot's message `message_ts` in `channel`.
    pub fn press(&self, channel: &str, user: &str, message_ts: &str, action_id: &str) -> String {
        let payload = self.block_actions(channel, user, message_ts, action_id, None);
        self.envelope("interactive", payload)
    }

    /// The block actions payload of a press (`selected`: a multi-select's option values).
    pub fn block_actions(
        &self,
        channel: &str,
        user: &str,
        message_ts: &str,
        action_id: &str,
        selected: Option<&[&str]>,
    ) -> Value {
        let thread = self
            .shared
            .lock()
            .messages
            .iter()
            .find(|m| m["ts"] == message_ts)
            .and_then(|m| m["thread_ts"].as_str().map(str::to_string));
        let ephemeral = self
            .shared
            .lock()
            .ephemerals
            .iter()
            .any(|m| m["ts"] == message_ts);
        let mut message =
            json!({"type": "message", "ts": message_ts, "text": "", "user": BOT_USER});
        if let Some(thread) = thread {
            message["thread_ts"] = thread.into();
        }
        let mut action = json!({
            "type": if selected.is_some() { "multi_static_select" } else { "button" },
            "action_id": action_id,
            "block_id": "b1",
            "action_ts": self.shared.next_ts(),
        });
        if let Some(selected) = selected {
            action["selected_options"] = selected
                .iter()
                .map(|v| json!({"text": {"type": "plain_text", "text": v}, "value": v}))
                .collect::<Vec<_>>()
                .into();
        }
        json!({
            "type": "block_actions",
            "team": {"id": TEAM, "domain": "fake"},
            "user": {"id": user, "username": user, "name": user, "team_id": TEAM},
            "api_app_id": APP_ID,
            "token": "verification-token",
            "container": {"type": "message", "message_ts": message_ts, "channel_id": channel, "is_ephemeral": ephemeral},
            "trigger_id": format!("tr-{}", self.shared.next.fetch_add(1, Ordering::Relaxed)),
            "channel": {"id": channel, "name": "c"},
            "message": message,
            "response_url": format!("http://{}/api/response.{message_ts}", self.shared.address),
            "actions": [action],
        })
    }

    /// `/kaiwa text` typed by `user` in `channel`.
    pub fn slash(&self, channel: &str, user: &str, text: &str) -> String {
        let payload = self.slash_fields(channel, user, text);
        self.envelope("slash_commands", payload)
    }

    /// A slash command's fields.
    pub fn slash_fields(&self, channel: &str, user: &str, text: &str) -> Value {
        json!({
            "token": "verification-token",
            "team_id": TEAM,
            "team_domain": "fake",
            "channel_id": channel,
            "channel_name": "c",
            "user_id": user,
            "user_name": user,
            "command": "/kaiwa",
            "text": text,
            "api_app_id": APP_ID,
            "response_url": format!("http://{}/api/response", self.shared.address),
            "trigger_id": format!("tr-{}", self.shared.next.fetch_add(1, Ordering::Relaxed)),
        })
    }

    /// The latest message of the bot in `channel` with buttons: its `ts` and the action id
    /// of the button labelled `label`.
    pub fn button(&self, channel: &str, label: &str) -> (String, String) {
        button_in(&self.messages_in(channel), label).unwrap_or_else(|| {
            panic!(
                "no button {label:?} in {channel}: {:#?}",
                self.messages_in(channel)
            )
        })
    }

    /// The latest ephemeral message to `user` with buttons: its `ts` and the action id of
    /// the button labelled `label`.
    pub fn ephemeral_button(&self, user: &str, label: &str) -> (String, String) {
        button_in(&self.ephemerals_for(user), label).unwrap_or_else(|| {
            panic!(
                "no button {label:?} for {user}: {:#?}",
                self.ephemerals_for(user)
            )
        })
    }

    // ---- waiting ----

    pub async fn wait_for(&self, what: &str, timeout: Duration, done: impl Fn(&FakeSlack) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if done(self) {
                return;
            }
            if Instant::now() > deadline {
                let log: Vec<String> = self
                    .calls()
                    .iter()
                    .map(|c| format!("{} {}", c.method, c.body))
                    .collect();
                panic!("timed out waiting for {what}; calls:\n{}", log.join("\n"));
            }
            let changed = self.shared.changed.notified();
            let _ = tokio::time::timeout(Duration::from_millis(100), changed).await;
        }
    }

    /// Waits for the bot's socket (its `hello` sent).
    pub async fn wait_connected(&self) {
        self.wait_for("a Socket Mode connection", Duration::from_secs(30), |f| {
            f.shared.lock().hellos >= 1 && f.shared.socket.lock().is_ok_and(|s| s.is_some())
        })
        .await;
    }

    /// Waits for at least `n` of the bot's messages in `channel`, none of them streaming.
    pub async fn wait_messages(&self, channel: &str, n: usize) -> Vec<String> {
        self.wait_for(
            &format!("{n} messages in {channel}"),
            Duration::from_secs(30),
            |f| f.messages_in(channel).len() >= n && !f.streaming_in(channel),
        )
        .await;
        self.texts_in(channel)
    }
}

/// The latest of `messages` with a button labelled `label`: its `ts` and the button's
/// action id.
fn button_in(messages: &[Value], label: &str) -> Option<(String, String)> {
    messages.iter().rev().find_map(|m| {
        let action = button_action(m, label)?;
        Some((m["ts"].as_str()?.to_string(), action))
    })
}

/// The action id of the button labelled `label` in a posted `message`, if it has one.
pub fn button_action(message: &Value, label: &str) -> Option<String> {
    message["blocks"]
        .as_array()?
        .iter()
        .filter(|b| b["type"] == "actions")
        .flat_map(|b| b["elements"].as_array().cloned().unwrap_or_default())
        .find(|e| {
            e["text"]["text"]
                .as_str()
                .is_some_and(|t| t.contains(label))
        })
        .and_then(|e| e["action_id"].as_str().map(str::to_string))
}

fn texts(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Signs an Events API request as Slack does: `v0=` HMAC-SHA256 of `v0:{timestamp}:{body}`.
pub fn sign(secret: &str, timestamp: &str, body: &str) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("a key");
    mac.update(format!("v0:{timestamp}:{body}").as_bytes());
    let bytes = mac.finalize().into_bytes();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("v0={hex}")
}

/// Posts `body` to the bot's Events API at `url` as Slack would (`form`: form-encoded),
/// signed with `secret` at `timestamp` (seconds since the epoch); `retry`: the
/// `X-Slack-Retry-Num`. Returns the status.
pub async fn deliver(
    url: &str,
    secret: &str,
    timestamp: i64,
    body: &str,
    form: bool,
    retry: Option<u32>,
) -> u16 {
    let ts = timestamp.to_string();
    let mut request = reqwest::Client::new()
        .post(url)
        .header("x-slack-request-timestamp", &ts)
        .header("x-slack-signature", sign(secret, &ts, body))
        .header(
            "content-type",
            if form {
                "application/x-www-form-urlencoded"
            } else {
                "application/json"
            },
        )
        .body(body.to_string());
    if let Some(retry) = retry {
        request = request
            .header("x-slack-retry-num", retry.to_string())
            .header("x-slack-retry-reason", "http_timeout");
    }
    match request.send().await {
        Ok(response) => response.status().as_u16(),
        Err(_) => 0,
    }
}

/// Now, in seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

async fn web_api(
    State(shared): State<Arc<Shared>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let form = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/x-www-form-urlencoded"));
    let body: Value = if form {
        let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(&body).unwrap_or_default();
        Value::Object(
            fields
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect(),
        )
    } else {
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    };
    let answer = answer(&shared, &method, &auth, &body);
    shared.changed.notify_waiters();
    answer
}

fn answer(shared: &Shared, method: &str, auth: &str, body: &Value) -> Response {
    let ok = |extra: Value| {
        let mut answer = json!({"ok": true});
        if let (Some(answer), Some(extra)) = (answer.as_object_mut(), extra.as_object()) {
            answer.extend(extra.clone());
        }
        axum::Json(answer).into_response()
    };
    let refuse = |error: &str| axum::Json(json!({"ok": false, "error": error})).into_response();
    let token = auth.strip_prefix("Bearer ").unwrap_or_default();
    let mut inner = shared.lock();
    inner.calls.push(Call {
        method: method.to_string(),
        body: body.clone(),
        at: Instant::now(),
    });
    if method == "apps.connections.open" {
        if token != APP_TOKEN {
            return refuse("invalid_auth");
        }
        return ok(json!({"url": format!("ws://{}/link", shared.socket_address)}));
    }
    // a press's response URL (no token: the URL is the credential) replacing an
    // ephemeral message
    if let Some(ts) = method.strip_prefix("response.") {
        let Some(message) = inner.ephemerals.iter_mut().find(|m| m["ts"] == ts) else {
            return refuse("expired_url");
        };
        if body["replace_original"] == true {
            message["text"] = body["text"].clone();
            message["blocks"] = body["blocks"].clone();
        }
        return ok(json!({}));
    }
    if token != BOT_TOKEN {
        return refuse("invalid_auth");
    }
    let channel = body["channel"].as_str().unwrap_or_default().to_string();
    match method {
        "auth.test" => {
            let mut response = ok(
                json!({"url": "https://fake.slack.com/", "team": "Fake team",
                "user": "kaiwa", "team_id": TEAM, "user_id": BOT_USER}),
            );
            let scopes = inner.scopes.clone().unwrap_or_else(|| {
                "chat:write,im:history,channels:history,groups:history,commands".into()
            });
            if let Ok(scopes) = scopes.parse() {
                response.headers_mut().insert("x-oauth-scopes", scopes);
            }
            response
        }
        "chat.postMessage" | "chat.postEphemeral" => {
            if let Some((left, secs)) = inner.limited.get_mut(&channel)
                && *left > 0
            {
                *left -= 1;
                let secs = *secs;
                return Response::builder()
                    .status(StatusCode::TOO_MANY_REQUESTS)
                    .header("retry-after", secs.to_string())
                    .body(axum::body::Body::from("rate limited"))
                    .unwrap_or_else(|_| StatusCode::TOO_MANY_REQUESTS.into_response());
            }
            if channel.is_empty() || body["text"].as_str().is_none() && body["blocks"].is_null() {
                return refuse("no_text");
            }
            let ts = shared.next_ts();
            let mut message = body.clone();
            message["ts"] = ts.clone().into();
            message["_at"] = json!(inner.calls.len());
            if method == "chat.postEphemeral" {
                inner.ephemerals.push(message);
                return ok(json!({"message_ts": ts}));
            }
            inner.messages.push(message);
            ok(json!({"ts": ts, "channel": channel}))
        }
        "chat.update" => {
            let ts = body["ts"].as_str().unwrap_or_default();
            let Some(message) = inner
                .messages
                .iter_mut()
                .find(|m| m["ts"] == ts && m["channel"] == channel.as_str())
            else {
                return refuse("message_not_found");
            };
            message["text"] = body["text"].clone();
            message["blocks"] = body["blocks"].clone();
            ok(json!({"ts": ts, "channel": channel}))
        }
        "chat.delete" => {
            let ts = body["ts"].as_str().unwrap_or_default();
            let Some(message) = inner.messages.iter_mut().find(|m| m["ts"] == ts) else {
                return refuse("message_not_found");
            };
            message["_deleted"] = true.into();
            ok(json!({}))
        }
        "conversations.info" => {
            let member = !inner.outside.contains(&channel);
            ok(json!({"channel": {"id": channel, "is_member": member}}))
        }
        // the bot's messages as Slack lists them: the channel's newest first, a thread's
        // oldest first (metadata only when asked for)
        "conversations.history" | "conversations.replies" => {
            let thread = body["ts"].as_str().unwrap_or_default();
            let with_metadata = body["include_all_metadata"] == "true";
            let mut listed: Vec<Value> = inner
                .messages
                .iter()
                .filter(|m| m["channel"] == channel.as_str() && m.get("_deleted").is_none())
                .filter(|m| {
                    let in_thread = m["thread_ts"].as_str().unwrap_or_default();
                    if method == "conversations.history" {
                        in_thread.is_empty()
                    } else {
                        in_thread == thread
                    }
                })
                .map(|m| {
                    let mut listed = json!({"type": "message", "bot_id": "B0001", "user": BOT_USER,
                        "ts": m["ts"], "text": m["text"]});
                    if with_metadata && !m["metadata"].is_null() {
                        listed["metadata"] = m["metadata"].clone();
                    }
                    listed
                })
                .collect();
            if method == "conversations.history" {
                listed.reverse();
            }
            ok(json!({"messages": listed, "has_more": false}))
        }
        _ => ok(json!({})),
    }
}

async fn serve_socket(
    shared: Arc<Shared>,
    mut ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    {
        // the new connection replaces the old one, which ends
        let mut socket = shared.socket.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = socket.replace(tx.clone()) {
            let _ = old.send(Control::Drop);
        }
    }
    let hello = json!({"type": "hello", "num_connections": 1,
        "connection_info": {"app_id": APP_ID}, "debug_info": {"host": "fake"}});
    if ws.send(WsMessage::Text(hello.to_string())).await.is_err() {
        return;
    }
    // what the last connection left unacknowledged comes again
    let pending: Vec<(String, Value)> = {
        let mut inner = shared.lock();
        inner.connections += 1;
        inner.hellos += 1;
        let pending: Vec<(String, Value)> = inner.unacked.iter().cloned().collect();
        for (id, _) in &pending {
            *inner.sent.entry(id.clone()).or_default() += 1;
        }
        pending
    };
    shared.changed.notify_waiters();
    for (_, frame) in pending {
        let mut frame = frame;
        frame["retry_attempt"] = 1.into();
        frame["retry_reason"] = "timeout".into();
        if ws.send(WsMessage::Text(frame.to_string())).await.is_err() {
            return;
        }
    }
    loop {
        tokio::select! {
            control = rx.recv() => match control {
                Some(Control::Send(frame)) => {
                    if ws.send(WsMessage::Text(frame)).await.is_err() {
                        break;
                    }
                }
                Some(Control::Drop) | None => break,
            },
            incoming = ws.next() => match incoming {
                Some(Ok(WsMessage::Text(text))) => {
                    let Ok(ack) = serde_json::from_str::<Value>(&text) else { continue };
                    if let Some(id) = ack["envelope_id"].as_str() {
                        let mut inner = shared.lock();
                        inner.acks.push(id.to_string());
                        inner.unacked.retain(|(e, _)| e != id);
                    }
                    shared.changed.notify_waiters();
                }
                Some(Ok(_)) => {}
                _ => break,
            },
        }
    }
    let mut socket = shared.socket.lock().unwrap_or_else(|p| p.into_inner());
    if socket.as_ref().is_some_and(|s| s.same_channel(&tx)) {
        *socket = None;
    }
}

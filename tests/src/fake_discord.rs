//! A fake Discord on 127.0.0.1 for the adapter's end-to-end tests: the REST API under
//! `/api/v10` (what serenity sends through its `proxy` setting) and a gateway WebSocket.
//!
//! The gateway says Hello, reads Identify (answering READY; its shard is remembered, and
//! each event goes to the connection of its guild's shard, DMs to shard 0) or Resume
//! (answering RESUMED),
//! acknowledges heartbeats, and dispatches the events a test injects (MESSAGE_CREATE,
//! INTERACTION_CREATE); it can drop the connection to test resuming. The REST side records
//! every request, creates messages and threads, answers channel look-ups, interaction
//! callbacks and command registration, and can answer a 429 instead of the next message.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Json, routing::any};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as WsMessage;

pub const BOT_ID: u64 = 5_000;
pub const APP_ID: u64 = 5_001;
pub const GUILD: u64 = 7_000;

/// One recorded REST request.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path below `/api/v10`, e.g. `/channels/10/messages`.
    pub path: String,
    pub body: Value,
    /// When it came.
    pub at: std::time::Instant,
}

enum Command {
    Dispatch(&'static str, Value),
    Drop,
}

/// How a message post fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageFailure {
    /// 429 with `retry_after` 0.3 s.
    RateLimited,
    /// 429 with this `retry_after` in milliseconds; posts to the channel before it has
    /// passed get a 429 too, as Discord answers them.
    RateLimitedFor(u64),
    /// HTTP 500.
    ServerError,
    /// The message is created, and the answer breaks off after the status line.
    AnswerLost,
}

#[derive(Default)]
struct Inner {
    requests: Vec<Request>,
    next_id: u64,
    /// thread id → parent channel id
    threads: HashMap<u64, u64>,
    /// failures of the next POSTs to a path
    rate_limited: HashMap<String, VecDeque<MessageFailure>>,
    /// paths answered 429 until then
    blocked: HashMap<String, Instant>,
    /// users whose DMs are closed to the bot
    closed_dms: std::collections::HashSet<u64>,
    /// users' messages per channel, oldest first (what `GET …/messages` lists)
    history: HashMap<u64, Vec<Value>>,
    /// (channel path, nonce) → the message created with it (`enforce_nonce`)
    nonces: HashMap<(String, String), Value>,
    /// events injected while no connection of their shard was ready
    pending: Vec<(&'static str, Value)>,
    /// the application's global commands, as registered
    commands: Vec<Value>,
    /// how long a created message's answer takes (the message exists at once)
    post_delay: Option<Duration>,
    seq: u64,
}

struct Shared {
    inner: Mutex<Inner>,
    /// Ready connections by shard: the shard count they identified with, and their sender.
    connections: Mutex<HashMap<u32, (u32, mpsc::UnboundedSender<Command>)>>,
    /// Every Identify's shard and shard count, in order.
    identified: Mutex<Vec<(u32, u32)>>,
    identifies: AtomicUsize,
    resumes: AtomicUsize,
    gateway_url: Mutex<String>,
    /// The client language interactions carry (default `en-US`).
    locale: Mutex<Option<String>>,
    /// Identify is answered by closing with this code (4014: disallowed intents).
    close_on_identify: Mutex<Option<u16>>,
}

impl Inner {
    /// The recorded post that created message `message` in `channel` (edits and deletes
    /// are applied to it).
    fn posted_message(&mut self, channel: u64, message: u64) -> Option<&mut Request> {
        let posted = format!("/channels/{channel}/messages");
        self.requests.iter_mut().find(|r| {
            r.method == "POST" && r.path == posted && r.body["_fake_id"] == json!(message)
        })
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn next_id(&self) -> u64 {
        let mut inner = self.lock();
        inner.next_id += 1;
        inner.next_id
    }
}

pub struct FakeDiscord {
    rest: String,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeDiscord {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Now, as Discord writes a timestamp.
fn timestamp() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6f+00:00")
        .to_string()
}

pub fn user_json(id: u64, bot: bool) -> Value {
    json!({
        "id": id.to_string(), "username": format!("user{id}"), "discriminator": "0",
        "global_name": if bot { Value::Null } else { json!(format!("User {id}")) },
        "avatar": null, "bot": bot
    })
}

fn member_json(user: u64) -> Value {
    json!({
        "user": user_json(user, false), "roles": [], "joined_at": timestamp(),
        "deaf": false, "mute": false, "flags": 0
    })
}

fn message_json(id: u64, channel: u64, guild: Option<u64>, author: Value, content: &str) -> Value {
    let mut message = json!({
        "id": id.to_string(), "channel_id": channel.to_string(), "author": author,
        "content": content, "timestamp": timestamp(), "edited_timestamp": null, "tts": false,
        "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
        "embeds": [], "pinned": false, "type": 0, "components": []
    });
    if let Some(guild) = guild {
        message["guild_id"] = json!(guild.to_string());
    }
    message
}

/// Discord's 429 for a route, with its `retry_after`.
fn rate_limited(retry_after: Duration) -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        Json(json!({"message": "You are being rate limited.", "retry_after": retry_after.as_secs_f64(), "global": false})),
    )
        .into_response()
}

/// A registered command as Discord lists it.
fn command_json(id: u64, body: &Value) -> Value {
    json!({
        "id": id.to_string(), "type": 1, "application_id": APP_ID.to_string(),
        "name": body["name"], "description": body["description"],
        "description_localizations": body.get("description_localizations").cloned().unwrap_or(Value::Null),
        "options": body.get("options").cloned().unwrap_or(json!([])),
        "default_member_permissions": null, "version": id.to_string()
    })
}

/// The DM channel the fake opens for `user`.
pub fn dm_channel_of(user: u64) -> u64 {
    700_000 + user
}

fn channel_json(id: u64, parent: Option<u64>, name: &str) -> Value {
    let mut channel = json!({
        "id": id.to_string(), "type": if parent.is_some() { 11 } else { 0 },
        "guild_id": GUILD.to_string(), "name": name, "position": 0,
        "permission_overwrites": [], "nsfw": false, "flags": 0
    });
    if let Some(parent) = parent {
        channel["parent_id"] = json!(parent.to_string());
        channel["thread_metadata"] = json!({
            "archived": false, "auto_archive_duration": 1440,
            "archive_timestamp": timestamp(), "locked": false
        });
    }
    channel
}

impl FakeDiscord {
    pub async fn start() -> FakeDiscord {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                next_id: 100_000,
                ..Inner::default()
            }),
            connections: Mutex::new(HashMap::new()),
            identified: Mutex::new(Vec::new()),
            identifies: AtomicUsize::new(0),
            resumes: AtomicUsize::new(0),
            gateway_url: Mutex::new(String::new()),
            locale: Mutex::new(None),
            close_on_identify: Mutex::new(None),
        });
        let gateway = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let gateway_url = format!("ws://{}", gateway.local_addr().expect("addr"));
        *shared.gateway_url.lock().unwrap_or_else(|p| p.into_inner()) = gateway_url;
        let gw_shared = shared.clone();
        let gateway_task = tokio::spawn(async move {
            while let Ok((stream, _)) = gateway.accept().await {
                let shared = gw_shared.clone();
                tokio::spawn(async move {
                    if let Ok(ws) = tokio_tungstenite::accept_async(stream).await {
                        serve_gateway(ws, shared).await;
                    }
                });
            }
        });
        let app = Router::new()
            .route("/api/v10/{*path}", any(rest))
            .with_state(shared.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let rest_url = format!("http://{}", listener.local_addr().expect("addr"));
        let rest_task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeDiscord {
            rest: rest_url,
            shared,
            tasks: vec![gateway_task, rest_task],
        }
    }

    /// The base URL for `[discord] api_proxy`.
    pub fn api_proxy(&self) -> &str {
        &self.rest
    }

    /// Identify is answered by closing the connection with `code`, as Discord does for an
    /// application without a privileged intent it asks for (4014) or a bad token (4004).
    pub fn close_on_identify(&self, code: u16) {
        *self
            .shared
            .close_on_identify
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(code);
    }

    /// How many times the bot identified / resumed.
    pub fn identifies(&self) -> usize {
        self.shared.identifies.load(Ordering::SeqCst)
    }

    pub fn resumes(&self) -> usize {
        self.shared.resumes.load(Ordering::SeqCst)
    }

    fn dispatch(&self, event: &'static str, data: Value) {
        let sent = {
            let connections = self
                .shared
                .connections
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let total = connections.values().map(|(t, _)| *t).next().unwrap_or(1);
            connections
                .get(&shard_of(&data, total))
                .map(|(_, tx)| tx.send(Command::Dispatch(event, data.clone())).is_ok())
                .unwrap_or(false)
        };
        if !sent {
            self.shared.lock().pending.push((event, data));
        }
    }

    /// The shards identified so far (shard, count), in order: a shard identified again
    /// after a restart or a takeover appears again.
    pub fn identified(&self) -> Vec<(u32, u32)> {
        self.shared
            .identified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The shards connected now.
    pub fn connected_shards(&self) -> Vec<u32> {
        let mut shards: Vec<u32> = self
            .shared
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, (_, tx))| !tx.is_closed())
            .map(|(shard, _)| *shard)
            .collect();
        shards.sort_unstable();
        shards
    }

    /// A user posts `text` in `channel` (`guild` None: a DM). Returns the message id.
    pub fn user_message(&self, channel: u64, guild: Option<u64>, user: u64, text: &str) -> u64 {
        let id = self.shared.next_id();
        let message = message_json(id, channel, guild, user_json(user, false), text);
        self.remember(channel, &message);
        self.dispatch("MESSAGE_CREATE", message);
        id
    }

    /// A user posts `text` in `channel` as a reply to message `reply_to`.
    pub fn reply_message(
        &self,
        channel: u64,
        guild: Option<u64>,
        user: u64,
        text: &str,
        reply_to: u64,
    ) -> u64 {
        let id = self.shared.next_id();
        let mut message = message_json(id, channel, guild, user_json(user, false), text);
        message["message_reference"] = json!({
            "message_id": reply_to.to_string(),
            "channel_id": channel.to_string(),
        });
        if let Some(guild) = guild {
            message["message_reference"]["guild_id"] = json!(guild.to_string());
        }
        message["type"] = json!(19);
        self.remember(channel, &message);
        self.dispatch("MESSAGE_CREATE", message);
        id
    }

    fn remember(&self, channel: u64, message: &Value) {
        self.shared
            .lock()
            .history
            .entry(channel)
            .or_default()
            .push(message.clone());
    }

    /// `user` does not take DMs from the bot (Discord answers 403, code 50007).
    pub fn close_dms(&self, user: u64) {
        self.shared.lock().closed_dms.insert(user);
    }

    /// A user writes while the bot is away: the message is in the channel's history, and
    /// the gateway never delivers it.
    pub fn missed_message(&self, channel: u64, guild: Option<u64>, user: u64, text: &str) -> u64 {
        let id = self.shared.next_id();
        let message = message_json(id, channel, guild, user_json(user, false), text);
        self.remember(channel, &message);
        id
    }

    /// Delivers a message event again (a duplicate MESSAGE_CREATE).
    pub fn repeat_message(&self, channel: u64, guild: Option<u64>, user: u64, id: u64, text: &str) {
        let message = message_json(id, channel, guild, user_json(user, false), text);
        self.dispatch("MESSAGE_CREATE", message);
    }

    fn interaction(
        &self,
        kind: u8,
        channel: u64,
        guild: Option<u64>,
        user: u64,
        data: Value,
        message: Option<u64>,
    ) -> u64 {
        let id = self.shared.next_id();
        let locale = self
            .shared
            .locale
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| "en-US".into());
        let mut interaction = json!({
            "id": id.to_string(), "application_id": APP_ID.to_string(), "type": kind,
            "data": data, "channel_id": channel.to_string(), "token": format!("itoken{id}"),
            "version": 1, "locale": locale, "entitlements": [],
            "attachment_size_limit": 8_388_608, "app_permissions": "0"
        });
        match guild {
            Some(g) => {
                interaction["guild_id"] = json!(g.to_string());
                interaction["member"] = member_json(user);
            }
            None => interaction["user"] = user_json(user, false),
        }
        if let Some(message) = message {
            interaction["message"] =
                message_json(message, channel, guild, user_json(BOT_ID, true), "options");
        }
        self.dispatch("INTERACTION_CREATE", interaction);
        id
    }

    /// Later interactions come from a client set to `locale` (e.g. `ja`).
    pub fn set_locale(&self, locale: &str) {
        *self.shared.locale.lock().unwrap_or_else(|p| p.into_inner()) = Some(locale.into());
    }

    /// A user presses the button `custom_id` under the bot's message `message`.
    pub fn press(
        &self,
        channel: u64,
        guild: Option<u64>,
        user: u64,
        message: u64,
        custom_id: &str,
    ) -> u64 {
        let data = json!({"custom_id": custom_id, "component_type": 2});
        self.interaction(3, channel, guild, user, data, Some(message))
    }

    /// A user picks `values` in the select menu `custom_id`.
    pub fn select(
        &self,
        channel: u64,
        guild: Option<u64>,
        user: u64,
        message: u64,
        custom_id: &str,
        values: &[&str],
    ) -> u64 {
        let data = json!({"custom_id": custom_id, "component_type": 3, "values": values});
        self.interaction(3, channel, guild, user, data, Some(message))
    }

    /// A user runs the slash command `/name text`.
    pub fn slash(
        &self,
        channel: u64,
        guild: Option<u64>,
        user: u64,
        name: &str,
        text: &str,
    ) -> u64 {
        let mut data = json!({"id": "1", "name": name, "type": 1});
        if !text.is_empty() {
            data["options"] = json!([{"name": "text", "type": 3, "value": text}]);
        }
        self.interaction(2, channel, guild, user, data, None)
    }

    /// Closes the gateway connection (the bot must resume or reconnect).
    pub fn drop_connection(&self) {
        let connections = std::mem::take(
            &mut *self
                .shared
                .connections
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for (_, tx) in connections.into_values() {
            let _ = tx.send(Command::Drop);
        }
    }

    /// The next message posted to `channel` gets a 429.
    /// Every message posted from now on exists at once, but its answer takes `delay`.
    pub fn slow_posts(&self, delay: Duration) {
        self.shared.lock().post_delay = Some(delay);
    }

    pub fn rate_limit_next_message(&self, channel: u64) {
        self.fail_next_message(channel, MessageFailure::RateLimited);
    }

    /// The next message posted to `channel` meets `failure`.
    pub fn fail_next_message(&self, channel: u64, failure: MessageFailure) {
        self.shared
            .lock()
            .rate_limited
            .entry(format!("/channels/{channel}/messages"))
            .or_default()
            .push_back(failure);
    }

    pub fn requests(&self) -> Vec<Request> {
        self.shared.lock().requests.clone()
    }

    /// The bodies the bot posted as messages to `channel`, in order (429s and 5xx excluded),
    /// as they are now: edits applied (`_edits` counts them), deleted ones marked `_deleted`.
    pub fn messages_in(&self, channel: u64) -> Vec<Value> {
        let path = format!("/channels/{channel}/messages");
        self.requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path == path)
            .filter(|r| {
                r.body.get("_server_error").is_none() && r.body.get("_rate_limited").is_none()
            })
            .map(|r| r.body)
            .collect()
    }

    /// The message texts in `channel` as they are now (deleted ones left out).
    pub fn texts_in(&self, channel: u64) -> Vec<String> {
        self.messages_in(channel)
            .iter()
            .filter(|b| b.get("_deleted").is_none())
            .map(|b| b["content"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Threads the bot opened: (thread id, parent, name).
    pub fn threads(&self) -> Vec<(u64, u64, String)> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/threads"))
            .filter_map(|r| {
                let parent = r.path.split('/').nth(2)?.parse().ok()?;
                let id = r.body["_fake_id"].as_u64()?;
                Some((id, parent, r.body["name"].as_str()?.to_string()))
            })
            .collect()
    }

    /// Interaction callbacks: (interaction id, response type, data).
    pub fn callbacks(&self) -> Vec<(u64, u64, Value)> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.starts_with("/interactions/") && r.path.ends_with("/callback"))
            .filter_map(|r| {
                let id = r.path.split('/').nth(2)?.parse().ok()?;
                Some((id, r.body["type"].as_u64()?, r.body["data"].clone()))
            })
            .collect()
    }

    /// Waits until `done` holds (panics after `timeout` with what was recorded).
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&FakeDiscord) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            if done(self) {
                return;
            }
            if Instant::now() > deadline {
                let log: Vec<String> = self
                    .requests()
                    .iter()
                    .map(|r| format!("{} {} {}", r.method, r.path, r.body))
                    .collect();
                panic!(
                    "timed out waiting for {what}; requests:\n{}",
                    log.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until `channel` holds at least `n` bot messages; returns their texts.
    /// Waits until the bot has posted `n` messages to `channel` and none is still being
    /// streamed (carries the Stop button); returns the texts.
    pub async fn wait_texts(&self, channel: u64, n: usize) -> Vec<String> {
        self.wait_for(
            &format!("{n} messages in {channel}"),
            Duration::from_secs(20),
            |f| f.messages_in(channel).len() >= n && !f.streaming_in(channel),
        )
        .await;
        self.texts_in(channel)
    }

    /// A message in `channel` is being streamed: it carries the Stop button.
    pub fn streaming_in(&self, channel: u64) -> bool {
        self.messages_in(channel).iter().any(|m| {
            m.get("_deleted").is_none() && m["components"].to_string().contains("kaiwa|stop")
        })
    }

    /// A global command the application already has (a host bot registered it earlier).
    pub fn register_command(&self, name: &str, description: &str) {
        let command = command_json(
            self.shared.next_id(),
            &json!({"name": name, "description": description}),
        );
        self.shared.lock().commands.push(command);
    }

    /// The names of the application's global commands, as registered now.
    pub fn command_names(&self) -> Vec<String> {
        self.shared
            .lock()
            .commands
            .iter()
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect()
    }

    /// Waits for the first Identify and Kaiwa's command registration: its `/help` is there
    /// and no command has been written for a moment (they are registered one by one).
    pub async fn wait_ready(&self) {
        self.wait_for(
            "READY and the slash commands",
            Duration::from_secs(30),
            |f| f.identifies() >= 1 && f.command_names().iter().any(|n| n == "help"),
        )
        .await;
        let written = |f: &FakeDiscord| {
            f.requests()
                .iter()
                .filter(|r| r.method == "POST" && r.path.ends_with("/commands"))
                .count()
        };
        let mut seen = written(self);
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = written(self);
            if now == seen {
                return;
            }
            seen = now;
        }
    }
}

/// The shard an event goes to: its guild's (`(guild_id >> 22) % shards`, as Discord
/// shards), shard 0 for a DM.
fn shard_of(data: &Value, total: u32) -> u32 {
    let guild = data["guild_id"]
        .as_str()
        .and_then(|g| g.parse::<u64>().ok())
        .or_else(|| data["guild_id"].as_u64());
    guild.map_or(0, |g| ((g >> 22) % u64::from(total.max(1))) as u32)
}

async fn serve_gateway(
    ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    shared: Arc<Shared>,
) {
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Command>();
    let hello = json!({"op": 10, "d": {"heartbeat_interval": 41_250}});
    if sink.send(WsMessage::Text(hello.to_string())).await.is_err() {
        return;
    }
    // the shard this connection identified as, and the shard count
    let mut shard = (0u32, 1u32);
    let frame = |shared: &Shared, t: &str, d: Value| {
        let mut inner = shared.lock();
        inner.seq += 1;
        json!({"op": 0, "t": t, "s": inner.seq, "d": d}).to_string()
    };
    loop {
        tokio::select! {
            incoming = stream.next() => {
                let Some(Ok(message)) = incoming else { break };
                let WsMessage::Text(text) = message else {
                    if matches!(message, WsMessage::Close(_)) { break }
                    continue;
                };
                let Ok(payload) = serde_json::from_str::<Value>(&text) else { continue };
                match payload["op"].as_u64() {
                    Some(1) => {
                        let _ = sink.send(WsMessage::Text(json!({"op": 11}).to_string())).await;
                    }
                    Some(2) | Some(6) => {
                        let resumed = payload["op"] == 6;
                        let reply = if resumed {
                            shared.resumes.fetch_add(1, Ordering::SeqCst);
                            frame(&shared, "RESUMED", json!({}))
                        } else {
                            shared.identifies.fetch_add(1, Ordering::SeqCst);
                            let refuse = *shared.close_on_identify.lock().unwrap_or_else(|p| p.into_inner());
                            if let Some(code) = refuse {
                                use tokio_tungstenite::tungstenite::protocol::CloseFrame;
                                let frame = CloseFrame {
                                    code: code.into(),
                                    reason: "Disallowed intent(s).".into(),
                                };
                                let _ = sink.send(WsMessage::Close(Some(frame))).await;
                                break;
                            }
                            let number = |i: usize, default: u32| {
                                payload["d"]["shard"][i].as_u64().map_or(default, |n| n as u32)
                            };
                            shard = (number(0, 0), number(1, 1));
                            shared.identified.lock().unwrap_or_else(|p| p.into_inner()).push(shard);
                            let url = shared.gateway_url.lock().unwrap_or_else(|p| p.into_inner()).clone();
                            frame(&shared, "READY", json!({
                                "v": 10, "user": user_json(BOT_ID, true), "guilds": [],
                                "session_id": "fake-session", "resume_gateway_url": url,
                                "application": {"id": APP_ID.to_string(), "flags": 0}
                            }))
                        };
                        if sink.send(WsMessage::Text(reply)).await.is_err() { break }
                        shared.connections.lock().unwrap_or_else(|p| p.into_inner()).insert(shard.0, (shard.1, tx.clone()));
                        let pending = std::mem::take(&mut shared.lock().pending);
                        let (mine, others): (Vec<_>, Vec<_>) =
                            pending.into_iter().partition(|(_, d)| shard_of(d, shard.1) == shard.0);
                        shared.lock().pending.extend(others);
                        for (t, d) in mine {
                            let _ = tx.send(Command::Dispatch(t, d));
                        }
                    }
                    _ => {}
                }
            }
            command = rx.recv() => {
                match command {
                    Some(Command::Dispatch(t, d)) => {
                        if sink.send(WsMessage::Text(frame(&shared, t, d.clone()))).await.is_err() {
                            shared.lock().pending.push((t, d));
                            break;
                        }
                    }
                    Some(Command::Drop) | None => break,
                }
            }
        }
    }
    // gone: its shard's events wait for the next connection of that shard
    {
        let mut connections = shared.connections.lock().unwrap_or_else(|p| p.into_inner());
        if connections
            .get(&shard.0)
            .is_some_and(|(_, t)| t.same_channel(&tx))
        {
            connections.remove(&shard.0);
        }
    }
    rx.close();
    while let Ok(command) = rx.try_recv() {
        if let Command::Dispatch(t, d) = command {
            shared.lock().pending.push((t, d));
        }
    }
}

async fn rest(
    State(shared): State<Arc<Shared>>,
    method: Method,
    Path(path): Path<String>,
    uri: Uri,
    body: axum::body::Bytes,
) -> Response {
    let path = format!("/{path}");
    let mut body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let method = method.as_str().to_string();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let id = |i: usize| {
        parts
            .get(i)
            .and_then(|p| p.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let record = |shared: &Shared, body: Value| {
        shared.lock().requests.push(Request {
            method: method.clone(),
            path: path.clone(),
            body,
            at: std::time::Instant::now(),
        });
    };
    let response = match (method.as_str(), parts.as_slice()) {
        ("GET", ["gateway"]) | ("GET", ["gateway", "bot"]) => {
            let url = shared
                .gateway_url
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            json!({"url": url, "shards": 1, "session_start_limit": {"total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": 1}})
        }
        ("GET", ["users", "@me"]) => user_json(BOT_ID, true),
        ("GET", ["oauth2", "applications", "@me"]) => {
            // GATEWAY_MESSAGE_CONTENT (1 << 18) unless the test turned the intent off
            let intent_off = shared
                .close_on_identify
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some_and(|code| code == 4014);
            let flags = if intent_off { 0 } else { 1 << 18 };
            json!({
                "id": APP_ID.to_string(), "name": "Kaiwa", "icon": null,
                "description": "", "rpc_origins": [], "bot_public": true,
                "bot_require_code_grant": false, "owner": user_json(9, false),
                "verify_key": "0f0f", "team": null, "flags": flags
            })
        }
        ("POST", ["users", "@me", "channels"]) => {
            let user = body["recipient_id"]
                .as_str()
                .and_then(|u| u.parse::<u64>().ok())
                .or_else(|| body["recipient_id"].as_u64())
                .unwrap_or(0);
            record(&shared, body);
            if shared.lock().closed_dms.contains(&user) {
                return (
                    StatusCode::FORBIDDEN,
                    Json(json!({"message": "Cannot send messages to this user", "code": 50007})),
                )
                    .into_response();
            }
            json!({"id": dm_channel_of(user).to_string(), "type": 1, "last_message_id": null,
                   "recipients": [user_json(user, false)]})
        }
        ("GET", ["channels", _, "messages"]) => {
            record(&shared, Value::Null);
            let limit = uri
                .query()
                .unwrap_or_default()
                .split('&')
                .find_map(|kv| kv.strip_prefix("limit="))
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(50);
            let history = shared
                .lock()
                .history
                .get(&id(1))
                .cloned()
                .unwrap_or_default();
            // newest first, as Discord lists them; a message read over REST has no
            // `guild_id` (only the gateway's events carry it)
            Value::Array(
                history
                    .into_iter()
                    .rev()
                    .take(limit)
                    .map(|mut m| {
                        if let Some(m) = m.as_object_mut() {
                            m.remove("guild_id");
                        }
                        m
                    })
                    .collect(),
            )
        }
        ("GET", ["channels", _]) => {
            let channel = id(1);
            let parent = shared.lock().threads.get(&channel).copied();
            channel_json(channel, parent, "channel")
        }
        ("POST", ["channels", _, "messages"]) => {
            let failure = shared
                .lock()
                .rate_limited
                .get_mut(&path)
                .and_then(VecDeque::pop_front);
            let left = shared
                .lock()
                .blocked
                .get(&path)
                .and_then(|until| until.checked_duration_since(Instant::now()));
            if let Some(left) = left {
                // too early: another 429, with what is left of the wait
                record(&shared, json!({"_rate_limited": true}));
                return rate_limited(left);
            }
            match failure {
                Some(MessageFailure::RateLimited) | Some(MessageFailure::RateLimitedFor(_)) => {
                    let ms = match failure {
                        Some(MessageFailure::RateLimitedFor(ms)) => ms,
                        _ => 300,
                    };
                    if ms > 0 {
                        shared
                            .lock()
                            .blocked
                            .insert(path.clone(), Instant::now() + Duration::from_millis(ms));
                    }
                    record(&shared, json!({"_rate_limited": true}));
                    return rate_limited(Duration::from_millis(ms));
                }
                Some(MessageFailure::ServerError) => {
                    record(&shared, json!({"_server_error": true}));
                    return (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        Json(json!({"message": "500: Internal Server Error", "code": 0})),
                    )
                        .into_response();
                }
                Some(MessageFailure::AnswerLost) | None => {}
            }
            // a nonce seen before in this channel, enforced: the message it created
            let nonce = body["nonce"].as_str().map(str::to_string);
            if body["enforce_nonce"] == json!(true)
                && let Some(nonce) = &nonce
                && let Some(existing) = shared.lock().nonces.get(&(path.clone(), nonce.clone()))
            {
                return Json(existing.clone()).into_response();
            }
            let message_id = shared.next_id();
            let content = body["content"].as_str().unwrap_or_default().to_string();
            body["_fake_id"] = json!(message_id);
            record(&shared, body);
            let message = message_json(
                message_id,
                id(1),
                Some(GUILD),
                user_json(BOT_ID, true),
                &content,
            );
            if let Some(nonce) = nonce {
                shared
                    .lock()
                    .nonces
                    .insert((path.clone(), nonce), message.clone());
            }
            if failure == Some(MessageFailure::AnswerLost) {
                return crate::answer_lost();
            }
            message
        }
        ("PATCH", ["channels", _, "messages", _]) => {
            let message = id(3);
            let content = body["content"].as_str().map(str::to_string);
            let body_components = body.get("components").cloned();
            record(&shared, body);
            let mut inner = shared.lock();
            let Some(original) = inner.posted_message(id(1), message) else {
                drop(inner);
                return (
                    StatusCode::NOT_FOUND,
                    Json(json!({"message": "Unknown Message", "code": 10008})),
                )
                    .into_response();
            };
            if let Some(components) = body_components {
                original.body["components"] = components;
            }
            if let Some(content) = &content {
                original.body["content"] = json!(content);
                original.body["_edits"] = json!(original.body["_edits"].as_u64().unwrap_or(0) + 1);
            }
            let content = original.body["content"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            drop(inner);
            message_json(
                message,
                id(1),
                Some(GUILD),
                user_json(BOT_ID, true),
                &content,
            )
        }
        ("DELETE", ["channels", _, "messages", _]) => {
            let message = id(3);
            record(&shared, body);
            if let Some(original) = shared.lock().posted_message(id(1), message) {
                original.body["_deleted"] = json!(true);
            }
            return StatusCode::NO_CONTENT.into_response();
        }
        ("POST", ["channels", _, "messages", _, "threads"]) => {
            let thread = shared.next_id();
            shared.lock().threads.insert(thread, id(1));
            let name = body["name"].as_str().unwrap_or_default().to_string();
            body["_fake_id"] = json!(thread);
            record(&shared, body);
            channel_json(thread, Some(id(1)), &name)
        }
        ("POST", ["channels", _, "typing"]) => {
            record(&shared, body);
            return StatusCode::NO_CONTENT.into_response();
        }
        ("GET", ["applications", _, "commands"]) => {
            record(&shared, Value::Null);
            Value::Array(shared.lock().commands.clone())
        }
        ("POST", ["applications", _, "commands"]) => {
            record(&shared, body.clone());
            let command = command_json(shared.next_id(), &body);
            let mut inner = shared.lock();
            inner.commands.retain(|c| c["name"] != command["name"]);
            inner.commands.push(command.clone());
            command
        }
        ("PUT", ["applications", _, "commands"]) => {
            record(&shared, body.clone());
            let list: Vec<Value> = body
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|c| command_json(shared.next_id(), c))
                .collect();
            shared.lock().commands = list.clone();
            Value::Array(list)
        }
        ("POST", ["interactions", _, _, "callback"]) => {
            record(&shared, body);
            return StatusCode::NO_CONTENT.into_response();
        }
        ("PATCH", ["webhooks", _, _, "messages", "@original"]) => {
            let content = body["content"].as_str().unwrap_or_default().to_string();
            record(&shared, body);
            message_json(
                shared.next_id(),
                1,
                Some(GUILD),
                user_json(BOT_ID, true),
                &content,
            )
        }
        _ => {
            record(&shared, body);
            return (
                StatusCode::NOT_FOUND,
                Json(json!({"message": "Unknown route", "code": 0})),
            )
                .into_response();
        }
    };
    let delay = shared.lock().post_delay;
    if let ("POST", ["channels", _, "messages"], Some(delay)) =
        (method.as_str(), parts.as_slice(), delay)
    {
        // the message is there; its answer is slow to come back
        tokio::time::sleep(delay).await;
    }
    Json(response).into_response()
}

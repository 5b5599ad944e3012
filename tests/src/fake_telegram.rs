//! A fake Telegram Bot API server on 127.0.0.1 for the adapter's end-to-end tests.
//!
//! It answers `POST /bot{token}/{method}` like the real API (`{"ok":true,"result":…}`;
//! method names matched case-insensitively): `getMe`, `getWebhookInfo`, `deleteWebhook`,
//! long-poll `getUpdates` with offsets (answering within two seconds, well before the
//! HTTP client gives up), and records `sendMessage`, `editMessageText`,
//! `editMessageReplyMarkup`, `answerCallbackQuery`, `sendChatAction`, `setMyCommands` and
//! `createForumTopic`; `setWebhook` switches it to posting updates to the webhook (or to
//! the test's targets in turn, a load balancer) with the secret header, again until
//! answered 2xx, and `getUpdates` to 409 meanwhile. A test feeds updates (a user's message, a button press, the same
//! update twice, raw JSON a `Value` cannot hold), queues failures (a 429 with `retry_after`,
//! a 500, a 502, an answer lost after the call was carried out; for every chat or one),
//! takes its port down and back up (an outage), and asserts on what the bot sent.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// The bot's own id and username.
pub const BOT_ID: i64 = 4242;
pub const BOT_USERNAME: &str = "kaiwa_test_bot";

/// One recorded Bot API call.
#[derive(Debug, Clone)]
pub struct Call {
    /// Lower-case method name (`sendmessage`).
    pub method: String,
    pub params: Value,
    /// The message id the fake gave a sent message, if any.
    pub message_id: Option<i64>,
    /// When it came.
    pub at: Instant,
}

impl Call {
    pub fn chat_id(&self) -> Option<i64> {
        self.params.get("chat_id").and_then(Value::as_i64)
    }

    pub fn thread_id(&self) -> Option<i64> {
        self.params.get("message_thread_id").and_then(Value::as_i64)
    }

    pub fn text(&self) -> &str {
        self.params
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The callback data of every button in the call's inline keyboard, row by row.
    pub fn buttons(&self) -> Vec<(String, String)> {
        self.params
            .pointer("/reply_markup/inline_keyboard")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_array)
            .flatten()
            .map(|b| {
                (
                    b["text"].as_str().unwrap_or_default().to_string(),
                    b["callback_data"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }
}

/// A chat a test user talks in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chat {
    pub id: i64,
    /// A forum topic of a supergroup.
    pub topic: Option<i64>,
}

impl Chat {
    pub fn private(user: i64) -> Chat {
        Chat {
            id: user,
            topic: None,
        }
    }

    pub fn topic(group: i64, topic: i64) -> Chat {
        Chat {
            id: group,
            topic: Some(topic),
        }
    }

    fn json(&self) -> Value {
        if self.id > 0 {
            json!({"id": self.id, "type": "private", "first_name": "Tester"})
        } else {
            json!({"id": self.id, "type": "supergroup", "title": "Kaiwa help", "is_forum": true})
        }
    }
}

/// A failure the fake returns instead of the next call of a method.
#[derive(Debug, Clone, Copy)]
pub enum Failure {
    /// HTTP 429 with `parameters.retry_after`.
    RetryAfter(u32),
    /// HTTP 500.
    ServerError,
    /// HTTP 400 with this description (e.g. a callback query answered too late).
    BadRequest(&'static str),
    /// HTTP 502 with an HTML body (a proxy in front of the API).
    BadGateway,
    /// The call is carried out (a message is sent) but its answer is lost: the connection
    /// breaks after the status line.
    AnswerLost,
}

#[derive(Default)]
struct Inner {
    /// Updates as the JSON text Telegram sends (which may hold what `Value` cannot).
    updates: Vec<(i64, String)>,
    /// Updates below this id were confirmed by an offset and are not sent again…
    confirmed: i64,
    /// …unless a test asks for them again from this id.
    replay_from: Option<i64>,
    next_update: i64,
    next_message: i64,
    calls: Vec<Call>,
    failures: HashMap<String, VecDeque<Failure>>,
    /// Failures of a method for one chat only.
    chat_failures: HashMap<(String, i64), VecDeque<Failure>>,
    /// Messages the bot sent, as Telegram stores them (for callback queries).
    bot_messages: HashMap<(i64, i64), Value>,
    get_updates_calls: usize,
    /// The bot's command menus by language code ("" for the default).
    menus: HashMap<String, Value>,
    /// `setWebhook`'s URL, secret and allowed updates; while set, `getUpdates` answers 409
    /// and updates are posted to the webhook instead.
    webhook: Option<Webhook>,
    /// Where deliveries go instead of the webhook's URL, in turn (a load balancer).
    webhook_targets: Vec<String>,
    /// The next update id to deliver to the webhook.
    webhook_next: i64,
    /// Every delivery attempt: update id, target, HTTP status (0: no answer).
    deliveries: Vec<(i64, String, u16)>,
    /// Chats the bot is not in (`getChat` answers "chat not found").
    strangers: std::collections::HashSet<i64>,
    /// Users' first names other than `User{id}` ([`FakeTelegram::name_user`]).
    names: HashMap<i64, String>,
}

/// A webhook as `setWebhook` registered it.
#[derive(Debug, Clone)]
pub struct Webhook {
    pub url: String,
    pub secret: Option<String>,
    pub allowed_updates: Value,
}

struct Shared {
    token: String,
    inner: Mutex<Inner>,
    changed: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running fake; stops when dropped.
pub struct FakeTelegram {
    url: String,
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    server: Mutex<tokio::task::JoinHandle<()>>,
    deliverer: tokio::task::JoinHandle<()>,
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        self.server
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .abort();
        self.deliverer.abort();
    }
}

/// While a webhook is set, posts each update in order (Telegram's secret header with it)
/// to the webhook's URL or the next of the test's targets, until one answers 2xx; a failed
/// delivery is tried again 100 ms later at the next target.
async fn deliver(shared: Arc<Shared>) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("an HTTP client");
    let mut turn = 0usize;
    loop {
        let changed = shared.changed.notified();
        let next = {
            let mut inner = shared.lock();
            match inner.webhook.clone() {
                None => None,
                Some(webhook) => {
                    if let Some(from) = inner.replay_from.take() {
                        inner.webhook_next = from;
                    }
                    let from = inner.webhook_next.max(1);
                    let update = inner.updates.iter().find(|(id, _)| *id >= from).cloned();
                    let target = match inner.webhook_targets.len() {
                        0 => webhook.url.clone(),
                        n => inner.webhook_targets[turn % n].clone(),
                    };
                    update.map(|u| (u, target, webhook.secret))
                }
            }
        };
        let Some(((id, body), target, secret)) = next else {
            let _ = tokio::time::timeout(Duration::from_millis(200), changed).await;
            continue;
        };
        let mut request = client
            .post(&target)
            .header("content-type", "application/json")
            .body(body);
        if let Some(secret) = secret {
            request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
        }
        let status = match request.send().await {
            Ok(response) => response.status().as_u16(),
            Err(_) => 0,
        };
        turn += 1;
        let delivered = (200..300).contains(&status);
        {
            let mut inner = shared.lock();
            inner.deliveries.push((id, target, status));
            if delivered && inner.webhook_next <= id {
                inner.webhook_next = id + 1;
            }
        }
        if !delivered {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn serve(listener: TcpListener, shared: Arc<Shared>) -> tokio::task::JoinHandle<()> {
    let app = Router::new()
        .route("/{bot}/{method}", post(handle))
        .with_state(shared);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs() as i64)
}

fn ok(result: Value) -> Response {
    Json(json!({"ok": true, "result": result})).into_response()
}

use axum::Json;

impl FakeTelegram {
    /// Starts the fake for bot `token` on 127.0.0.1 with an OS-chosen port.
    pub async fn start(token: &str) -> FakeTelegram {
        let shared = Arc::new(Shared {
            token: token.to_string(),
            inner: Mutex::new(Inner {
                next_update: 1,
                next_message: 10_000,
                ..Inner::default()
            }),
            changed: Notify::new(),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = Mutex::new(serve(listener, shared.clone()));
        let deliverer = tokio::spawn(deliver(shared.clone()));
        FakeTelegram {
            url: format!("http://{addr}"),
            addr,
            shared,
            server,
            deliverer,
        }
    }

    /// The bot is not in `chat`: `getChat` answers 400 "chat not found" there.
    pub fn leave_chat(&self, chat: i64) {
        self.shared.lock().strangers.insert(chat);
    }

    /// The webhook `setWebhook` registered, if any.
    pub fn webhook(&self) -> Option<Webhook> {
        self.shared.lock().webhook.clone()
    }

    /// As if `setWebhook` had been called with `url` and `secret`.
    pub fn set_webhook(&self, url: &str, secret: &str) {
        self.shared.lock().webhook = Some(Webhook {
            url: url.to_string(),
            secret: Some(secret.to_string()),
            allowed_updates: json!(["message", "callback_query"]),
        });
        self.shared.changed.notify_waiters();
    }

    /// Deliveries go to these URLs in turn instead of the webhook's URL (the team's load
    /// balancer in front of several instances).
    pub fn deliver_to(&self, targets: Vec<String>) {
        self.shared.lock().webhook_targets = targets;
        self.shared.changed.notify_waiters();
    }

    /// Every webhook delivery attempt so far: update id, target, HTTP status (0: none).
    pub fn deliveries(&self) -> Vec<(i64, String, u16)> {
        self.shared.lock().deliveries.clone()
    }

    /// The JSON text of update `id`, as it is delivered.
    pub fn update_json(&self, id: i64) -> Option<String> {
        let inner = self.shared.lock();
        inner
            .updates
            .iter()
            .find(|(u, _)| *u == id)
            .map(|(_, body)| body.clone())
    }

    /// The API goes down: the port refuses connections (open ones are cut) until
    /// [`Self::restore`].
    pub fn outage(&self) {
        self.server
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .abort();
    }

    /// The API answers again, on the same port.
    pub async fn restore(&self) {
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                // the aborted server may hold the port for a moment
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        *self.server.lock().unwrap_or_else(|p| p.into_inner()) =
            serve(listener, self.shared.clone());
    }

    /// The base URL to give the bot as its API URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn push(&self, build: impl FnOnce(i64, &mut Inner) -> Value) -> i64 {
        let id = {
            let mut inner = self.shared.lock();
            let id = inner.next_update;
            inner.next_update += 1;
            let update = build(id, &mut inner);
            inner.updates.push((id, update.to_string()));
            id
        };
        self.shared.changed.notify_waiters();
        id
    }

    /// The user `id` is called `name` (their first name) from now on.
    pub fn name_user(&self, id: i64, name: &str) {
        self.shared.lock().names.insert(id, name.to_string());
    }

    /// A user writes `text` in `chat`; returns the update id.
    pub fn send_text(&self, chat: Chat, user: i64, text: &str) -> i64 {
        self.push(|id, inner| {
            inner.next_message += 1;
            let mut message = json!({
                "message_id": inner.next_message,
                "date": now(),
                "chat": chat.json(),
                "from": user_json(&inner.names, user),
                "text": text,
            });
            if let Some(topic) = chat.topic {
                message["message_thread_id"] = json!(topic);
                message["is_topic_message"] = json!(true);
            }
            json!({"update_id": id, "message": message})
        })
    }

    /// A user writes `text` in `chat` as a reply to message `reply_to` (one of the bot's,
    /// as Telegram quotes it); returns the update id.
    pub fn reply_text(&self, chat: Chat, user: i64, text: &str, reply_to: i64) -> i64 {
        self.push(|id, inner| {
            inner.next_message += 1;
            let replied = inner
                .bot_messages
                .get(&(chat.id, reply_to))
                .cloned()
                .unwrap_or_else(
                    || json!({"message_id": reply_to, "date": now(), "chat": chat.json()}),
                );
            let message = json!({
                "message_id": inner.next_message,
                "date": now(),
                "chat": chat.json(),
                "from": user_json(&inner.names, user),
                "text": text,
                "reply_to_message": replied,
            });
            json!({"update_id": id, "message": message})
        })
    }

    /// A user sends a sticker in `chat` as a reply to message `reply_to`.
    pub fn reply_sticker(&self, chat: Chat, user: i64, reply_to: i64) -> i64 {
        self.push(|id, inner| {
            inner.next_message += 1;
            let replied = inner
                .bot_messages
                .get(&(chat.id, reply_to))
                .cloned()
                .unwrap_or_else(
                    || json!({"message_id": reply_to, "date": now(), "chat": chat.json()}),
                );
            let message = json!({
                "message_id": inner.next_message,
                "date": now(),
                "chat": chat.json(),
                "from": user_json(&inner.names, user),
                "sticker": {"file_id": "s1", "file_unique_id": "u1", "type": "regular",
                            "width": 512, "height": 512, "is_animated": false, "is_video": false},
                "reply_to_message": replied,
            });
            json!({"update_id": id, "message": message})
        })
    }

    /// A user presses Stop under the streamed draft `draft_id` in `chat` (Bot API 10.3's
    /// `stopped_message_generation` update).
    pub fn stop_generation(&self, chat: Chat, draft_id: i64) -> i64 {
        self.push(|id, _| {
            let mut stopped = json!({"chat": chat.json(), "draft_id": draft_id});
            if let Some(topic) = chat.topic {
                stopped["message_thread_id"] = json!(topic);
            }
            json!({"update_id": id, "stopped_message_generation": stopped})
        })
    }

    /// A user presses the button with `data` under the bot's message `message_id`.
    pub fn press(&self, chat: Chat, user: i64, message_id: i64, data: &str) -> i64 {
        self.push(|id, inner| {
            let message = inner
                .bot_messages
                .get(&(chat.id, message_id))
                .cloned()
                .unwrap_or_else(
                    || json!({"message_id": message_id, "date": now(), "chat": chat.json()}),
                );
            json!({
                "update_id": id,
                "callback_query": {
                    "id": format!("cq{id}"),
                    "from": user_json(&inner.names, user),
                    "chat_instance": "ci",
                    "data": data,
                    "message": message,
                }
            })
        })
    }

    /// A user writes in `chat` a message whose JSON text is `text_json` as sent (e.g. a lone
    /// surrogate escape `"cut \\ud83d"`, which a `Value` cannot hold); returns the update id.
    pub fn send_raw_text(&self, chat: Chat, user: i64, text_json: &str) -> i64 {
        let id = {
            let mut inner = self.shared.lock();
            let id = inner.next_update;
            inner.next_update += 1;
            inner.next_message += 1;
            let message = json!({
                "message_id": inner.next_message,
                "date": now(),
                "chat": chat.json(),
                "from": user_json(&inner.names, user),
                "text": "PLACEHOLDER",
            })
            .to_string()
            .replace("\"PLACEHOLDER\"", text_json);
            inner
                .updates
                .push((id, format!(r#"{{"update_id":{id},"message":{message}}}"#)));
            id
        };
        self.shared.changed.notify_waiters();
        id
    }

    /// The next call of `method` about `chat` fails with `failure` (other chats go on).
    pub fn fail_next_in(&self, method: &str, chat: Chat, failure: Failure) {
        self.shared
            .lock()
            .chat_failures
            .entry((method.to_ascii_lowercase(), chat.id))
            .or_default()
            .push_back(failure);
    }

    /// Delivers `update_id` and every later update again on the next long poll, as Telegram
    /// does when a confirmation (the next `offset`) was lost.
    pub fn redeliver(&self, update_id: i64) {
        self.shared.lock().replay_from = Some(update_id);
        self.shared.changed.notify_waiters();
    }

    /// The next call of `method` (case-insensitive) fails with `failure`.
    pub fn fail_next(&self, method: &str, failure: Failure) {
        self.shared
            .lock()
            .failures
            .entry(method.to_ascii_lowercase())
            .or_default()
            .push_back(failure);
    }

    /// The command names of the bot's menu for `language` ("" for the default).
    pub fn menu(&self, language: &str) -> Vec<String> {
        self.shared
            .lock()
            .menus
            .get(language)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c["command"].as_str().map(str::to_string))
            .collect()
    }

    /// The bot's menu is set to `commands` (name, description), as a host bot's start-up
    /// would, in the default language and in Japanese.
    pub fn set_menu(&self, commands: &[(&str, &str)]) {
        let list: Vec<Value> = commands
            .iter()
            .map(|(c, d)| json!({"command": c, "description": d}))
            .collect();
        let mut inner = self.shared.lock();
        inner.menus.insert(String::new(), json!(list));
        inner.menus.insert("ja".into(), json!(list));
    }

    /// Waits for a draft of at least `words` words (a reply being streamed); returns the
    /// drafts sent so far.
    pub async fn wait_draft(&self, words: usize) -> Vec<Call> {
        self.wait_for("a draft with words", Duration::from_secs(10), |calls| {
            calls.iter().any(|c| {
                c.method == "sendmessagedraft" && c.text().split_whitespace().count() >= words
            })
        })
        .await;
        self.calls_of("sendMessageDraft")
    }

    /// Every recorded call (not `getUpdates`).
    pub fn calls(&self) -> Vec<Call> {
        self.shared.lock().calls.clone()
    }

    /// Calls of one method (lower case).
    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        let method = method.to_ascii_lowercase();
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }

    /// Texts the bot sent to `chat` (in its topic, if any), in order.
    pub fn texts_in(&self, chat: Chat) -> Vec<String> {
        self.calls_of("sendmessage")
            .into_iter()
            .filter(|c| c.chat_id() == Some(chat.id) && c.thread_id() == chat.topic)
            .map(|c| c.text().to_string())
            .collect()
    }

    /// The bot's messages in `chat` (its topic, if any) as they are now: edits applied,
    /// deleted ones left out, in order.
    pub fn shown_in(&self, chat: Chat) -> Vec<String> {
        let inner = self.shared.lock();
        let mut shown: Vec<(i64, String)> = inner
            .bot_messages
            .iter()
            .filter(|((c, _), m)| {
                *c == chat.id && m.get("message_thread_id").and_then(Value::as_i64) == chat.topic
            })
            .map(|((_, id), m)| (*id, m["text"].as_str().unwrap_or_default().to_string()))
            .collect();
        shown.sort();
        shown.into_iter().map(|(_, t)| t).collect()
    }

    /// How many times the bot long-polled.
    pub fn polls(&self) -> usize {
        self.shared.lock().get_updates_calls
    }

    /// Waits until `done` holds for the recorded calls (panics after `timeout`).
    pub async fn wait_for(&self, what: &str, timeout: Duration, done: impl Fn(&[Call]) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if done(&self.calls()) {
                return;
            }
            if Instant::now() > deadline {
                let calls: Vec<String> = self
                    .calls()
                    .iter()
                    .map(|c| format!("{} {}", c.method, c.params))
                    .collect();
                panic!("timed out waiting for {what}; calls:\n{}", calls.join("\n"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the bot has sent `n` messages to `chat` in all and returns them.
    pub async fn wait_texts(&self, chat: Chat, n: usize) -> Vec<String> {
        self.wait_for(
            &format!("{n} messages in {chat:?}"),
            Duration::from_secs(20),
            |calls| {
                calls
                    .iter()
                    .filter(|c| {
                        c.method == "sendmessage"
                            && c.chat_id() == Some(chat.id)
                            && c.thread_id() == chat.topic
                    })
                    .count()
                    >= n
            },
        )
        .await;
        self.texts_in(chat)
    }

    /// The callback data of the button labelled `label` (contains) on the bot's message as
    /// it is now (after edits).
    pub fn button_on(&self, chat: Chat, message_id: i64, label: &str) -> String {
        let inner = self.shared.lock();
        let message = inner.bot_messages.get(&(chat.id, message_id));
        message
            .and_then(|m| m.pointer("/reply_markup/inline_keyboard"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_array)
            .flatten()
            .find(|b| b["text"].as_str().is_some_and(|t| t.contains(label)))
            .and_then(|b| b["callback_data"].as_str())
            .unwrap_or_else(|| panic!("no button {label:?} on message {message_id}: {message:?}"))
            .to_string()
    }

    /// The last message the bot sent to `chat` that carries a keyboard.
    pub fn last_keyboard(&self, chat: Chat) -> Option<Call> {
        self.calls_of("sendmessage").into_iter().rfind(|c| {
            c.chat_id() == Some(chat.id) && c.thread_id() == chat.topic && !c.buttons().is_empty()
        })
    }
}

fn user_json(names: &HashMap<i64, String>, id: i64) -> Value {
    let name = names
        .get(&id)
        .cloned()
        .unwrap_or_else(|| format!("User{id}"));
    json!({"id": id, "is_bot": false, "first_name": name, "language_code": "en"})
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    if bot.strip_prefix("bot") != Some(shared.token.as_str()) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"ok": false, "error_code": 401, "description": "Unauthorized"})),
        )
            .into_response();
    }
    let method = method.to_ascii_lowercase();
    let params: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(_) => {
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({"ok": false, "error_code": 400, "description": "Bad Request: not JSON"})),
                )
                    .into_response();
            }
        }
    };
    let chat_id = params.get("chat_id").and_then(Value::as_i64).unwrap_or(0);
    let failure = {
        let mut inner = shared.lock();
        let for_chat = inner
            .chat_failures
            .get_mut(&(method.clone(), chat_id))
            .and_then(VecDeque::pop_front);
        for_chat.or_else(|| {
            inner
                .failures
                .get_mut(&method)
                .and_then(VecDeque::pop_front)
        })
    };
    if method == "getupdates" && failure.is_none() {
        if shared.lock().webhook.is_some() {
            return (
                StatusCode::CONFLICT,
                Json(json!({"ok": false, "error_code": 409, "description": "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"})),
            )
                .into_response();
        }
        return get_updates(&shared, &params).await;
    }
    match failure {
        Some(Failure::RetryAfter(secs)) => {
            shared.lock().calls.push(Call {
                method: format!("{method}!429"),
                params,
                message_id: None,
                at: Instant::now(),
            });
            return (
                StatusCode::TOO_MANY_REQUESTS,
                Json(json!({
                    "ok": false,
                    "error_code": 429,
                    "description": format!("Too Many Requests: retry after {secs}"),
                    "parameters": {"retry_after": secs}
                })),
            )
                .into_response();
        }
        Some(Failure::BadRequest(description)) => {
            shared.lock().calls.push(Call {
                method: format!("{method}!400"),
                params,
                message_id: None,
                at: Instant::now(),
            });
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"ok": false, "error_code": 400, "description": description})),
            )
                .into_response();
        }
        Some(Failure::BadGateway) => {
            shared.lock().calls.push(Call {
                method: format!("{method}!502"),
                params,
                message_id: None,
                at: Instant::now(),
            });
            return (
                StatusCode::BAD_GATEWAY,
                [("content-type", "text/html")],
                "<html><body>502 Bad Gateway</body></html>",
            )
                .into_response();
        }
        Some(Failure::AnswerLost) => {
            // carried out as usual, then the answer breaks off
            let _ = answer(&shared, method, params);
            return crate::answer_lost();
        }
        Some(Failure::ServerError) => {
            shared.lock().calls.push(Call {
                method: format!("{method}!500"),
                params,
                message_id: None,
                at: Instant::now(),
            });
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(
                    json!({"ok": false, "error_code": 500, "description": "Internal Server Error"}),
                ),
            )
                .into_response();
        }
        None => {}
    }
    answer(&shared, method, params)
}

/// Carries out a call that does not fail and answers it.
fn answer(shared: &Shared, method: String, params: Value) -> Response {
    let mut inner = shared.lock();
    let chat_id = params.get("chat_id").and_then(Value::as_i64).unwrap_or(0);
    let chat = Chat {
        id: chat_id,
        topic: None,
    };
    let (result, message_id) = match method.as_str() {
        "getme" => (
            json!({
                "id": BOT_ID, "is_bot": true, "first_name": "Kaiwa", "username": BOT_USERNAME,
                "can_join_groups": true, "can_read_all_group_messages": true,
                "supports_inline_queries": false, "can_connect_to_business": false,
                "has_main_web_app": false
            }),
            None,
        ),
        "getwebhookinfo" => {
            let pending = inner
                .updates
                .iter()
                .filter(|(id, _)| *id >= inner.webhook_next)
                .count();
            let info = match &inner.webhook {
                Some(w) => {
                    json!({"url": w.url, "has_custom_certificate": false, "pending_update_count": pending, "allowed_updates": w.allowed_updates})
                }
                None => {
                    json!({"url": "", "has_custom_certificate": false, "pending_update_count": 0})
                }
            };
            (info, None)
        }
        "getchat" => {
            if inner.strangers.contains(&chat_id) {
                drop(inner);
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({"ok": false, "error_code": 400, "description": "Bad Request: chat not found"})),
                )
                    .into_response();
            }
            (chat.json(), None)
        }
        "getchatmember" => (
            json!({"status": "administrator", "user": {"id": BOT_ID, "is_bot": true, "first_name": "Kaiwa", "username": BOT_USERNAME},
                   "can_be_edited": false, "is_anonymous": false, "can_manage_chat": true,
                   "can_delete_messages": true, "can_manage_video_chats": false,
                   "can_restrict_members": false, "can_promote_members": false,
                   "can_change_info": false, "can_invite_users": true,
                   "can_post_stories": false, "can_edit_stories": false, "can_delete_stories": false}),
            None,
        ),
        "setwebhook" => {
            let url = params["url"].as_str().unwrap_or_default().to_string();
            inner.webhook = (!url.is_empty()).then(|| Webhook {
                url,
                secret: params["secret_token"].as_str().map(str::to_string),
                allowed_updates: params.get("allowed_updates").cloned().unwrap_or(json!([])),
            });
            // what polling confirmed is not delivered again
            inner.webhook_next = inner.webhook_next.max(inner.confirmed);
            shared.changed.notify_waiters();
            (json!(true), None)
        }
        "deletewebhook" => {
            inner.webhook = None;
            (json!(true), None)
        }
        "sendmessage" => {
            inner.next_message += 1;
            let id = inner.next_message;
            let mut message = json!({
                "message_id": id,
                "date": now(),
                "chat": chat.json(),
                "from": {"id": BOT_ID, "is_bot": true, "first_name": "Kaiwa", "username": BOT_USERNAME},
                "text": params.get("text").cloned().unwrap_or(json!("")),
            });
            if let Some(topic) = params.get("message_thread_id") {
                message["message_thread_id"] = topic.clone();
                message["is_topic_message"] = json!(true);
            }
            if let Some(markup) = params.get("reply_markup") {
                message["reply_markup"] = markup.clone();
            }
            inner.bot_messages.insert((chat_id, id), message.clone());
            (message, Some(id))
        }
        "editmessagetext" | "editmessagereplymarkup" => {
            let id = params
                .get("message_id")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let Some(message) = inner.bot_messages.get_mut(&(chat_id, id)) else {
                drop(inner);
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({"ok": false, "error_code": 400, "description": "Bad Request: message to edit not found"})),
                )
                    .into_response();
            };
            if let Some(text) = params.get("text") {
                message["text"] = text.clone();
            }
            match params.get("reply_markup") {
                Some(markup) => message["reply_markup"] = markup.clone(),
                None => {
                    if let Some(m) = message.as_object_mut() {
                        m.remove("reply_markup");
                    }
                }
            }
            (message.clone(), Some(id))
        }
        "deletemessage" => {
            let id = params
                .get("message_id")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if inner.bot_messages.remove(&(chat_id, id)).is_none() {
                drop(inner);
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({"ok": false, "error_code": 400, "description": "Bad Request: message to delete not found"})),
                )
                    .into_response();
            }
            (json!(true), Some(id))
        }
        "createforumtopic" => {
            inner.next_message += 1;
            (
                json!({"message_thread_id": inner.next_message, "name": params.get("name").cloned().unwrap_or(json!("")), "icon_color": 7322096}),
                None,
            )
        }
        "setmycommands" => {
            let language = params["language_code"].as_str().unwrap_or_default();
            let commands = params.get("commands").cloned().unwrap_or(json!([]));
            inner.menus.insert(language.to_string(), commands);
            (json!(true), None)
        }
        "getmycommands" => {
            let language = params["language_code"].as_str().unwrap_or_default();
            let menu = inner.menus.get(language).cloned().unwrap_or(json!([]));
            (menu, None)
        }
        "sendmessagedraft" | "answercallbackquery" | "sendchataction" | "deletemycommands" => {
            (json!(true), None)
        }
        _ => {
            return (
                StatusCode::NOT_FOUND,
                Json(json!({"ok": false, "error_code": 404, "description": "Not Found: method not found"})),
            )
                .into_response();
        }
    };
    inner.calls.push(Call {
        method,
        params,
        message_id,
        at: Instant::now(),
    });
    ok(result)
}

async fn get_updates(shared: &Shared, params: &Value) -> Response {
    let offset = params.get("offset").and_then(Value::as_i64);
    let limit = params
        .get("limit")
        .and_then(Value::as_u64)
        .unwrap_or(100)
        .clamp(1, 100) as usize;
    let timeout = params.get("timeout").and_then(Value::as_u64).unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(timeout.min(2));
    loop {
        let changed = shared.changed.notified();
        {
            let mut inner = shared.lock();
            inner.get_updates_calls += 1;
            if let Some(offset) = offset {
                inner.confirmed = inner.confirmed.max(offset);
            }
            let from = inner.replay_from.take().unwrap_or(inner.confirmed);
            let pending: Vec<&str> = inner
                .updates
                .iter()
                .filter(|(id, _)| *id >= from)
                .take(limit)
                .map(|(_, u)| u.as_str())
                .collect();
            if !pending.is_empty() || Instant::now() >= deadline {
                let body = format!(r#"{{"ok":true,"result":[{}]}}"#, pending.join(","));
                return ([("content-type", "application/json")], body).into_response();
            }
        }
        let _ = tokio::time::timeout_at(deadline.into(), changed).await;
    }
}

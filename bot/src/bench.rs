//! `kaiwa bench`: drives simulated users through the real orchestrator (`handle_durable`,
//! as the platform adapters do: each message kept in the inbox until its turn is done),
//! flows and a file SQLite store (WAL), with the scripted model answering after a fixed
//! latency, and prints one JSON object on its last line (turns/s, per-turn overhead
//! percentiles excluding the simulated model time on the turn's critical path, model calls
//! per turn, that critical path per turn — calls made side by side count once —, peak
//! RSS, database size).

use anyhow::{Context, bail};
use async_trait::async_trait;
use kaiwa::Kaiwa;
use kaiwa::config::Settings;
use kaiwa_core::admin::{AdminNotice, AdminSink, DeliveryError};
use kaiwa_core::flows::interview::simulated::fake_model;
use kaiwa_core::llm::scripted::ScriptedModel;
use kaiwa_core::llm::{ChatModel, ChatRequest, ChatResponse, ModelError, ModelRouter};
use kaiwa_core::message::{
    Body, Incoming, OptionsRequest, Outgoing, Platform, SessionKey, UserRef,
};
use kaiwa_core::orchestrator::{Orchestrator, Outbox};
use kaiwa_core::store::Backend;
use kaiwa_core::store::Store;
use kaiwa_core::store::postgres::PgStore;
use kaiwa_core::store::sqlite::SqliteStore;
use std::cell::Cell;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

mod instances;

/// A simulated user's outbox: it keeps only the options last shown, to press one.
#[derive(Default)]
struct LastOptions(std::sync::Mutex<Option<OptionsRequest>>);

impl LastOptions {
    fn last_options(&self) -> Option<OptionsRequest> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn clear(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

#[async_trait]
impl Outbox for LastOptions {
    async fn deliver(&self, _: &SessionKey, items: &[Outgoing]) -> Result<(), DeliveryError> {
        if let Some(options) = items.iter().rev().find_map(|o| match o {
            Outgoing::Options(req) => Some(req),
            _ => None,
        }) {
            *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(options.clone());
        }
        Ok(())
    }
}

pub struct BenchOptions {
    pub flow: String,
    pub form: String,
    pub sessions: usize,
    pub turns: usize,
    pub concurrency: usize,
    pub model_latency: Duration,
    /// Offered turns per second across all users (open loop); `None`: closed loop.
    pub rate: Option<f64>,
    pub database: Option<String>,
    /// Instances on the one database (PostgreSQL), each with its own store, leases and
    /// users, as several `kaiwa run` would be.
    pub instances: usize,
    /// With `instances` > 1: rounds of one instance and `instances` instances, compared.
    pub rounds: usize,
}

tokio::task_local! {
    /// Simulated model time on the current user's critical path: the time during which
    /// at least one of its calls was in flight (calls made side by side count once).
    static MODEL_TIME: Cell<ModelClock>;
}

/// Every turn's model time on its critical path, summed (µs).
static MODEL_CRITICAL_US: AtomicU64 = AtomicU64::new(0);

/// The union of a task's model calls in time ([`MODEL_TIME`]).
#[derive(Debug, Clone, Copy, Default)]
struct ModelClock {
    in_flight: usize,
    since: Option<Instant>,
    total: Duration,
}

impl ModelClock {
    fn start(mut self, now: Instant) -> Self {
        if self.in_flight == 0 {
            self.since = Some(now);
        }
        self.in_flight += 1;
        self
    }

    fn end(mut self, now: Instant) -> Self {
        self.in_flight = self.in_flight.saturating_sub(1);
        if self.in_flight == 0
            && let Some(since) = self.since.take()
        {
            self.total += now.duration_since(since);
        }
        self
    }
}

/// A call in flight on the task's [`ModelClock`]; its end is counted when it is dropped
/// (answered or cancelled).
struct OnClock;

impl OnClock {
    fn start() -> OnClock {
        let _ = MODEL_TIME.try_with(|c| c.set(c.get().start(Instant::now())));
        OnClock
    }
}

impl Drop for OnClock {
    fn drop(&mut self) {
        let _ = MODEL_TIME.try_with(|c| c.set(c.get().end(Instant::now())));
    }
}

/// The scripted model, counting calls and charging its latency to the calling task.
struct TimedModel {
    inner: ScriptedModel,
    latency: Duration,
    calls: AtomicU64,
}

#[async_trait]
impl ChatModel for TimedModel {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let _clock = OnClock::start();
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        self.inner.chat(request).await
    }
}

struct NullAdmin;

#[async_trait]
impl AdminSink for NullAdmin {
    async fn notify(&self, _notice: &AdminNotice) -> Result<(), DeliveryError> {
        Ok(())
    }
}

/// One step of a simulated user.
#[derive(Clone, Copy)]
enum Step {
    Open,
    /// Press the first option shown (or this value when it is one of them).
    Press(&'static str),
    Say(&'static str),
}

/// An applicant going through the engineer form, in the fake Architect's order.
const INTERVIEW: &[Step] = &[
    Step::Open,
    Step::Press("en"),
    Step::Say("I live in Japan"),
    Step::Say("I enjoy building developer tools"),
    Step::Say("Hanako Yamada"),
    Step::Say("hanako@example.com"),
    Step::Say("5"),
    Step::Say("Rust and TypeScript"),
    Step::Press("remote"),
    Step::Say("2026-04-01"),
    Step::Say("https://github.com/hanako"),
];

const CHAT: &[Step] = &[Step::Say("Tell me something interesting about tea.")];

/// The open loop's clock: a thread of its own that tells each simulated user when to send,
/// `1 / rate` seconds apart, user after user in turn (each user every `users / rate`
/// seconds). A tokio timer would wake a user on the next whole millisecond or later (its
/// wheel ticks in milliseconds and is turned only when a worker looks), and that lateness,
/// ~1 ms at the median, would be counted as the bot's; a thread's sleep is accurate to
/// tens of microseconds. A message's time counts from its scheduled send, so a bot that
/// falls behind is charged its queue (the sends wait in the channel).
fn pace_users(users: Vec<mpsc::UnboundedSender<Instant>>, started: Instant, rate: f64) {
    let mut open = users.len();
    let mut gone = vec![false; users.len()];
    let mut sent: u64 = 0;
    while open > 0 {
        let due = started + Duration::from_secs_f64(sent as f64 / rate);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let user = (sent % users.len() as u64) as usize;
        // a user whose conversations are all done closed its channel: its turns stay empty
        if !gone[user] && users[user].send(due).is_err() {
            gone[user] = true;
            open -= 1;
        }
        sent += 1;
    }
}

/// One simulated user's conversation; the bot's time per turn, in milliseconds, without
/// the simulated model time. A paced user waits for each scheduled send, and a turn's time
/// counts from that moment (a bot that falls behind is charged its queue).
async fn simulate_user(
    orchestrator: &Arc<Orchestrator>,
    script: &[Step],
    user: usize,
    turns: usize,
    (flow, form): (&str, &str),
    mut pace: Option<&mut mpsc::UnboundedReceiver<Instant>>,
    updates: &AtomicU64,
) -> anyhow::Result<Vec<f64>> {
    let outbox = LastOptions::default();
    let instances = orchestrator.for_instances();
    let mut overheads = Vec::with_capacity(turns);
    for t in 0..turns {
        let body = match script[t % script.len()] {
            Step::Open => Body::Open,
            Step::Say(text) => Body::Text { text: text.into() },
            Step::Press(value) => match outbox.last_options() {
                Some(req) => {
                    let chosen = req
                        .options
                        .iter()
                        .find(|o| o.value == value)
                        .or(req.options.first())
                        .map(|o| o.value.clone())
                        .unwrap_or_default();
                    Body::Choice {
                        request_id: req.request_id,
                        values: vec![chosen],
                    }
                }
                None => Body::Text { text: value.into() },
            },
        };
        outbox.clear();
        let mut incoming = Incoming {
            platform: Platform::Console,
            chat: format!("bench-{user}"),
            thread: String::new(),
            user: UserRef {
                id: format!("user-{user}"),
                display_name: format!("User {user}"),
                language: None,
            },
            message_id: String::new(),
            body,
            flow: Some(flow.to_string()),
            flow_arg: Some(form.to_string()),
            shared: false,
        };
        MODEL_TIME.with(|m| m.set(ModelClock::default()));
        let turn_started = match pace.as_deref_mut() {
            Some(pace) => pace.recv().await.context("the open loop's clock stopped")?,
            None => Instant::now(),
        };
        // numbered as it is sent, in one sequence for all users, as the platforms number
        // theirs (Telegram's update ids, Discord's snowflakes)
        incoming.message_id = format!("u{:010}", updates.fetch_add(1, Ordering::Relaxed));
        // an instance among several handles a chat it holds (as an adapter does: taken
        // when free, renewed when due)
        if orchestrator.instance().is_shared()
            && !instances.hold_chat(incoming.platform, &incoming.chat).await
        {
            bail!("user {user}'s chat is held by another instance");
        }
        let result = orchestrator.handle_durable(incoming, &outbox).await;
        let model_time = MODEL_TIME.with(|m| m.get().total);
        MODEL_CRITICAL_US.fetch_add(model_time.as_micros() as u64, Ordering::Relaxed);
        if let Err(e) = result {
            bail!("turn {t} of user {user} failed: {e}");
        }
        overheads.push(
            turn_started
                .elapsed()
                .saturating_sub(model_time)
                .as_secs_f64()
                * 1000.0,
        );
    }
    Ok(overheads)
}

fn rss_peak_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// How often the stall probe asks to wake ([`probe_stalls`]).
const PROBE_PERIOD: Duration = Duration::from_millis(5);

/// The machine's own stalls while the bench runs (a thread that only sleeps, as jHiccup
/// does): for each [`PROBE_PERIOD`] sleep until `stop`, how much later than asked it woke,
/// in milliseconds. That lateness is the scheduling delay at this load plus whatever held
/// the whole machine (a virtual machine's host, memory pressure); no turn can be answered
/// faster, so a p99 near it is the machine's, not the bot's (`docs/performance.md`,
/// "The bench VM").
fn probe_stalls(stop: Arc<AtomicBool>) -> Vec<f64> {
    let mut late = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let asked = Instant::now();
        std::thread::sleep(PROBE_PERIOD);
        let slept = asked.elapsed().saturating_sub(PROBE_PERIOD);
        late.push(slept.as_secs_f64() * 1000.0);
    }
    late
}

/// The machine's CPU time so far, in clock ticks: (stolen, all), from the first line of
/// `/proc/stat` (`None` where there is none). Stolen time is time a virtual machine's
/// vCPUs were ready to run but its host ran something else (on the bench VM: the host
/// writing the database's pages to disk).
fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .map_while(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is counted in user)
    let steal = *fields.get(7)?;
    Some((steal, fields.iter().take(8).sum()))
}

/// Clock ticks a second in `/proc`'s figures (`USER_HZ`, 100 on Linux).
const CLOCK_TICKS_PER_SEC: f64 = 100.0;

/// This process's CPU time so far (user and system), in clock ticks, from
/// `/proc/self/stat` (`None` where there is none): with the turns' count, the bot's own CPU
/// per turn, the server's excluded.
fn own_cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // the fields after the command's name, which is in parentheses and may hold spaces
    let mut fields = stat.get(stat.rfind(')')? + 2..)?.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Sets its flag when dropped: the stall probe stops however the run ends.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub async fn run(options: BenchOptions, settings: Settings) -> anyhow::Result<serde_json::Value> {
    if options.sessions == 0 || options.turns == 0 {
        bail!("--sessions and --turns must be at least 1");
    }
    let script: &'static [Step] = match options.flow.as_str() {
        "interview" => INTERVIEW,
        "assistant" => CHAT,
        other => bail!("kaiwa bench drives the interview or assistant flow, not {other:?}"),
    };
    let temp = tempfile::tempdir().context("cannot create a temporary folder")?;
    let (url, db_path) = bench_database(&options, temp.path());
    let backend = Backend::of(&url).context("--database")?;
    if options.instances == 0 {
        bail!("--instances must be at least 1");
    }
    if options.instances > 1 && backend == Backend::Sqlite {
        bail!(
            "--instances {} needs a PostgreSQL --database: one process per SQLite file",
            options.instances
        );
    }
    // several instances are measured against one, in the same run
    let mut report = if options.instances > 1 {
        instances::instances_and_one(&options, &settings, &url, script).await?
    } else {
        run_on(&options, &settings, &url, db_path.as_deref(), script).await?
    };
    if backend == Backend::Postgres {
        // the same load on this machine's SQLite, in the same run: the figure PostgreSQL
        // is measured against
        let path = temp.path().join("beside.db");
        let sqlite_url = format!("sqlite://{}", path.display());
        let beside = BenchOptions {
            database: Some(sqlite_url.clone()),
            instances: 1,
            ..options
        };
        let sqlite = run_on(&beside, &settings, &sqlite_url, Some(&path), script).await?;
        let ratio = throughput_ratio(&report, &sqlite);
        report["sqlite"] = serde_json::json!({
            "turns_per_sec": sqlite["turns_per_sec"],
            "p50_ms": sqlite["p50_ms"],
            "p99_ms": sqlite["p99_ms"],
        });
        report["vs_sqlite"] = serde_json::json!(ratio);
    }
    Ok(report)
}

/// `x` to three decimals, as the report gives its figures.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `run`'s turns/s against `base`'s (0 where `base` has none), as the report gives it.
fn throughput_ratio(run: &serde_json::Value, base: &serde_json::Value) -> f64 {
    let tps = |r: &serde_json::Value| r["turns_per_sec"].as_f64().unwrap_or(0.0);
    if tps(base) > 0.0 {
        round3(tps(run) / tps(base))
    } else {
        0.0
    }
}

/// The bot as `kaiwa run` builds it, with the timed model and no admin chat: once per
/// instance on `url`, each with a store of its own (its pool, writer and cache) and, on
/// PostgreSQL, its place among the instances.
async fn start_instances(
    options: &BenchOptions,
    settings: &Settings,
    url: &str,
    model: &Arc<TimedModel>,
) -> anyhow::Result<(Vec<BenchStore>, Vec<Arc<Orchestrator>>)> {
    let mut settings = settings.clone();
    // simulated users type as fast as the machine lets them: no per-user rate limit
    settings.limits.messages_per_minute = 0;
    let mut stores = Vec::with_capacity(options.instances);
    let mut orchestrators = Vec::with_capacity(options.instances);
    for _ in 0..options.instances {
        let store = BenchStore::open(url).await?;
        let kaiwa = Kaiwa::builder(settings.clone())
            .store(store.shared())
            .models(ModelRouter::new(Some(model.clone())))
            .admin_sink(Arc::new(NullAdmin))
            .build()
            .await
            .context("opening the bench database")?;
        orchestrators.push(kaiwa.orchestrator().clone());
        // a place among the instances, as `kaiwa run` claims it (the bench's SQLite file is
        // its own: nothing to claim)
        if let Some(pg) = store.postgres() {
            pg.claim_for_run()
                .await
                .context("claiming a place among the instances")?;
        }
        stores.push(store);
    }
    // every instance counts the others once all have started, as instances long running
    // have (each counted those before it when it claimed its place)
    for pg in stores.iter().filter_map(BenchStore::postgres) {
        pg.count_instances()
            .await
            .context("counting the instances on the database")?;
    }
    Ok((stores, orchestrators))
}

/// One measured run on `url` with `options.instances` instances.
async fn run_on(
    options: &BenchOptions,
    settings: &Settings,
    url: &str,
    db_path: Option<&std::path::Path>,
    script: &'static [Step],
) -> anyhow::Result<serde_json::Value> {
    let model = Arc::new(TimedModel {
        inner: bench_model(&options.flow),
        latency: options.model_latency,
        calls: AtomicU64::new(0),
    });
    let (stores, orchestrators) = start_instances(options, settings, url, &model).await?;
    if let Err(e) = check_fresh(&orchestrators[0], &stores[0], &options.flow).await {
        for store in &stores {
            store.shared().close().await;
        }
        return Err(e);
    }
    let stop_probe = StopOnDrop(Arc::new(AtomicBool::new(false)));
    let probe = {
        let stop = stop_probe.0.clone();
        std::thread::Builder::new()
            .name("bench-stalls".into())
            .spawn(move || probe_stalls(stop))
            .context("cannot start the stall probe")?
    };
    let ticks_before = cpu_ticks();
    let own_before = own_cpu_ticks();
    let started = Instant::now();
    let tasks = start_users(options, &orchestrators, script, started)?;
    let (mut all, first, last) = collect_overheads(tasks).await?;
    let wall = started.elapsed().as_secs_f64();
    drop(stop_probe);
    let own_ticks = own_cpu_ticks()
        .zip(own_before)
        .map(|(after, before)| after.saturating_sub(before));
    // the share of the machine's CPU time its host took while the bench ran
    let steal_pct = match (ticks_before, cpu_ticks()) {
        (Some((s0, t0)), Some((s1, t1))) if t1 > t0 => {
            Some(100.0 * s1.saturating_sub(s0) as f64 / (t1 - t0) as f64)
        }
        _ => None,
    };
    // (it wakes within one period: joined off the runtime's threads)
    let mut stalls = tokio::task::spawn_blocking(move || probe.join())
        .await
        .context("waiting for the stall probe")?
        .map_err(|_| anyhow::anyhow!("the stall probe panicked"))?;
    stalls.sort_by(f64::total_cmp);
    let turns = all.len();
    all.sort_by(f64::total_cmp);
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let wal_restarts = stores[0].wal_restarts();
    for store in &stores {
        store.shared().close().await;
    }
    let db_bytes = db_path.map_or(0, database_bytes);
    Ok(serde_json::json!({
        "turns_per_sec": round3(turns as f64 / wall),
        "p50_ms": round3(percentile(&all, 0.50)),
        "p99_ms": round3(percentile(&all, 0.99)),
        "max_ms": round3(all.last().copied().unwrap_or(0.0)),
        "first20_mean_ms": round3(mean(&first)),
        "last20_mean_ms": round3(mean(&last)),
        "model_calls_per_turn": round3(model.calls.load(Ordering::Relaxed) as f64 / turns.max(1) as f64),
        "model_critical_path_ms_per_turn": round3(
            MODEL_CRITICAL_US.swap(0, Ordering::Relaxed) as f64 / 1000.0 / turns.max(1) as f64
        ),
        "peak_rss_mb": round3(rss_peak_mb()),
        "backend": Backend::of(url).map(Backend::as_str).unwrap_or("?"),
        "instances": options.instances,
        "db_bytes": db_bytes,
        "wal_restarts": wal_restarts,
        "sessions": options.sessions,
        "turns": turns,
        "wall_secs": round3(wall),
        "offered_rate": options.rate,
        "stall_p99_ms": round3(percentile(&stalls, 0.99)),
        "stall_max_ms": round3(stalls.last().copied().unwrap_or(0.0)),
        "cpu_steal_pct": steal_pct.map(round3),
        "cpu_ms_per_turn": own_ticks.map(|t| round3(t as f64 * 1000.0 / CLOCK_TICKS_PER_SEC / turns.max(1) as f64)),
    }))
}

/// The store the bench writes, by the URL's scheme: its own counts need the concrete type.
enum BenchStore {
    Sqlite(Arc<SqliteStore>),
    Postgres(Arc<PgStore>),
}

impl BenchStore {
    async fn open(url: &str) -> anyhow::Result<BenchStore> {
        let context = || format!("opening the bench database {}", kaiwa::app::redact_url(url));
        Ok(match Backend::of(url).with_context(context)? {
            Backend::Sqlite => BenchStore::Sqlite(Arc::new(
                SqliteStore::connect(url).await.with_context(context)?,
            )),
            Backend::Postgres => {
                BenchStore::Postgres(Arc::new(PgStore::connect(url).await.with_context(context)?))
            }
        })
    }

    fn shared(&self) -> Arc<dyn Store> {
        match self {
            BenchStore::Sqlite(s) => s.clone(),
            BenchStore::Postgres(s) => s.clone(),
        }
    }

    async fn session_count(&self) -> Result<i64, kaiwa_core::store::StoreError> {
        match self {
            BenchStore::Sqlite(s) => s.session_count().await,
            BenchStore::Postgres(s) => s.session_count().await,
        }
    }

    /// The store on PostgreSQL, where instances share the database.
    fn postgres(&self) -> Option<&PgStore> {
        match self {
            BenchStore::Postgres(s) => Some(s),
            BenchStore::Sqlite(_) => None,
        }
    }

    /// WAL restarts (SQLite only).
    fn wal_restarts(&self) -> Option<u64> {
        match self {
            BenchStore::Sqlite(s) => Some(s.wal_restarts()),
            BenchStore::Postgres(_) => None,
        }
    }
}

/// The database the bench writes: `--database`, else a file in `temp`; and its path, to
/// weigh it at the end.
fn bench_database(options: &BenchOptions, temp: &std::path::Path) -> (String, Option<PathBuf>) {
    match &options.database {
        Some(url) => (
            url.clone(),
            url.strip_prefix("sqlite://").map(PathBuf::from),
        ),
        None => {
            let path = temp.join("bench.db");
            (format!("sqlite://{}", path.display()), Some(path))
        }
    }
}

/// The model the simulated users' flow talks to: the interview's simulated agents, or a
/// one-line answer for the assistant.
fn bench_model(flow: &str) -> ScriptedModel {
    match flow {
        "interview" => fake_model(Arc::new(|_| None)).unrecorded(),
        _ => ScriptedModel::repeating(|_| {
            ChatResponse::text("Green tea and black tea come from the same plant.")
        })
        .unrecorded(),
    }
}

/// The flow is enabled and the database new: its users would resume the sessions a run
/// before left, and its message ids were used there (the turns would be answered as
/// duplicates, measuring nothing).
async fn check_fresh(
    orchestrator: &Orchestrator,
    store: &BenchStore,
    flow: &str,
) -> anyhow::Result<()> {
    if orchestrator.flows().get(flow).is_none() {
        bail!("the flow {flow:?} is not enabled (is the form folder configured?)");
    }
    let earlier = store
        .session_count()
        .await
        .context("reading the bench database")?;
    if earlier > 0 {
        bail!(
            "the bench database already holds {earlier} sessions: give --database a new file \
             (or leave it out for a temporary one)"
        );
    }
    Ok(())
}

/// The database file with its write-ahead log and shared memory, in bytes.
fn database_bytes(path: &std::path::Path) -> u64 {
    ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", path.display())).ok())
        .map(|m| m.len())
        .sum()
}

type UserTask = tokio::task::JoinHandle<anyhow::Result<Vec<Vec<f64>>>>;

/// `concurrency` simulated users at a time, each a task that takes the next user when its
/// user is done: a user who is not talking is only rows in the database, as in the bot.
/// Open loop (`--rate`): each user sends every `workers / rate` seconds, spread evenly.
fn start_users(
    options: &BenchOptions,
    orchestrators: &[Arc<Orchestrator>],
    script: &'static [Step],
    started: Instant,
) -> anyhow::Result<Vec<UserTask>> {
    let next_user = Arc::new(AtomicUsize::new(0));
    let updates = Arc::new(AtomicU64::new(1));
    let workers = options.concurrency.clamp(1, options.sessions);
    let mut paces = match options.rate {
        Some(rate) if rate > 0.0 && rate.is_finite() => {
            let (senders, receivers): (Vec<_>, Vec<_>) =
                (0..workers).map(|_| mpsc::unbounded_channel()).unzip();
            std::thread::Builder::new()
                .name("bench-clock".into())
                .spawn(move || pace_users(senders, started, rate))
                .context("cannot start the open loop's clock")?;
            receivers.into_iter().map(Some).collect()
        }
        Some(rate) => bail!("--rate must be a positive number of turns per second, not {rate}"),
        None => Vec::new(),
    };
    paces.resize_with(workers, || None);
    let mut tasks = Vec::with_capacity(workers);
    for pace in paces {
        let (orchestrators, next_user, updates, flow, form) = (
            orchestrators.to_vec(),
            next_user.clone(),
            updates.clone(),
            options.flow.clone(),
            options.form.clone(),
        );
        let (turns, sessions) = (options.turns, options.sessions);
        tasks.push(tokio::spawn(MODEL_TIME.scope(
            Cell::new(ModelClock::default()),
            async move {
                let mut pace = pace;
                let mut users = Vec::new();
                loop {
                    let user = next_user.fetch_add(1, Ordering::Relaxed);
                    if user >= sessions {
                        break;
                    }
                    // instance by user: each instance has users of its own
                    let orchestrator = &orchestrators[user % orchestrators.len()];
                    let overheads = simulate_user(
                        orchestrator,
                        script,
                        user,
                        turns,
                        (&flow, &form),
                        pace.as_mut(),
                        &updates,
                    )
                    .await?;
                    users.push(overheads);
                }
                Ok::<_, anyhow::Error>(users)
            },
        )));
    }
    Ok(tasks)
}

/// Every user's per-turn overheads, and each user's first and last 20 of them.
async fn collect_overheads(tasks: Vec<UserTask>) -> anyhow::Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let mut all = Vec::new();
    let (mut first, mut last) = (Vec::new(), Vec::new());
    for task in tasks {
        for overheads in task.await.context("a simulated user panicked")?? {
            let window = overheads.len().min(20);
            first.extend_from_slice(&overheads[..window]);
            last.extend_from_slice(&overheads[overheads.len() - window..]);
            all.extend(overheads);
        }
    }
    Ok((all, first, last))
}

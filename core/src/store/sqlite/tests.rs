use super::*;
use crate::message::Incoming;
use crate::message::UserRef;
use crate::store::ProcessedUpdate;
use crate::store::sqlite::checkpoint::{PAGE_SIZE, RESTART_BACKOFF};
use crate::store::sqlite::writer::{COMMIT_GAP, commit_delay};
use crate::store::{Inbox, Reads, Role, SessionStatus, StateChange, Submission, SubmissionStatus};
use sqlx::ConnectOptions;
use sqlx::Connection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

pub(crate) fn key() -> SessionKey {
    SessionKey {
        platform: Platform::Console,
        chat: "c1".into(),
        thread: String::new(),
        user: "u1".into(),
    }
}

fn user() -> UserRef {
    UserRef {
        id: "u1".into(),
        display_name: "Aiko".into(),
        language: None,
    }
}

pub(crate) fn commit(
    session: SessionRecord,
    message_id: &str,
    changes: Vec<StateChange>,
) -> TurnCommit {
    TurnCommit {
        session,
        user: user(),
        finish_session: None,
        processed: Some(ProcessedUpdate {
            platform: Platform::Console,
            chat: "c1".into(),
            message_id: message_id.into(),
        }),
        changes,
        llm_calls: vec![LlmCallRecord {
            session_id: None,
            agent: "greeter".into(),
            model: "m".into(),
            prompt_tokens: 10,
            completion_tokens: 5,
            latency_ms: 7,
            error: None,
            at: Utc::now(),
            wasted: false,
        }],
    }
}

/// The session of `key()`, opened by the update "m1".
pub(crate) async fn first_turn(store: &SqliteStore) -> CommittedTurn {
    store
        .commit_turn(commit(
            SessionRecord::draft(key(), "assistant"),
            "m1",
            vec![],
        ))
        .await
        .expect("commits")
}

#[test]
fn only_a_batch_after_a_busy_one_waits_out_the_commit_gap() {
    // a lone turn last time (or none): the next batch begins at once
    assert_eq!(commit_delay(0, Duration::ZERO), None);
    assert_eq!(commit_delay(1, Duration::from_micros(10)), None);
    // two turns or more: the rest of the gap since the last batch began
    let since = Duration::from_micros(300);
    assert_eq!(commit_delay(2, since), Some(COMMIT_GAP - since));
    assert_eq!(commit_delay(40, Duration::ZERO), Some(COMMIT_GAP));
    // the gap is over already
    assert_eq!(commit_delay(2, COMMIT_GAP), None);
    assert_eq!(commit_delay(40, COMMIT_GAP * 3), None);
}

fn turn_of(i: usize, session: SessionRecord, message_id: &str) -> TurnCommit {
    TurnCommit {
        user: UserRef {
            id: format!("u{i}"),
            display_name: format!("User {i}"),
            language: None,
        },
        processed: Some(ProcessedUpdate {
            platform: Platform::Console,
            chat: format!("c{i}"),
            message_id: message_id.into(),
        }),
        ..commit(
            session,
            message_id,
            vec![
                StateChange::AddUserMessage {
                    text: format!("question {i} {message_id}"),
                },
                StateChange::AddAssistantMessage {
                    text: format!("answer {i} {message_id}"),
                    trace: None,
                },
            ],
        )
    }
}

#[tokio::test]
async fn turns_committed_together_are_refused_one_by_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/batch.db", dir.path().display());
    let store = SqliteStore::connect(&url).await.expect("opens");
    let key_of = |i: usize| SessionKey {
        platform: Platform::Console,
        chat: format!("c{i}"),
        thread: String::new(),
        user: format!("u{i}"),
    };
    // twenty new sessions at once: they queue for the writer and commit in batches
    let first: Vec<CommittedTurn> = futures::future::join_all((0..20).map(|i| {
        store.commit_turn(turn_of(
            i,
            SessionRecord::draft(key_of(i), "assistant"),
            "m1",
        ))
    }))
    .await
    .into_iter()
    .collect::<Result<_, _>>()
    .expect("all first turns commit");
    let ids: std::collections::HashSet<i64> = first.iter().map(|c| c.session.id).collect();
    assert_eq!(ids.len(), 20);
    assert!(first.iter().all(|c| c.assistant_message_ids.len() == 1));

    // then at once: a replayed update, a stale session and eighteen ordinary turns
    let mut stale = first[1].session.clone();
    stale.version = 0;
    let second = futures::future::join_all((0..20).map(|i| {
        let job = match i {
            0 => turn_of(0, first[0].session.clone(), "m1"),
            1 => turn_of(1, stale.clone(), "m2"),
            _ => turn_of(i, first[i].session.clone(), "m2"),
        };
        store.commit_turn(job)
    }))
    .await;
    assert!(matches!(second[0], Err(StoreError::Duplicate { .. })));
    assert!(matches!(second[1], Err(StoreError::Conflict { .. })));
    for (i, result) in second.iter().enumerate().skip(2) {
        let turn = result.as_ref().expect("an ordinary turn commits");
        assert_eq!(turn.session.version, 2);
        assert_eq!(turn.assistant_message_ids.len(), 1);
        let texts: Vec<String> = store
            .recent_messages(turn.session.id, 10)
            .await
            .expect("messages")
            .into_iter()
            .map(|m| m.text)
            .collect();
        assert_eq!(
            texts,
            [
                format!("question {i} m1"),
                format!("answer {i} m1"),
                format!("question {i} m2"),
                format!("answer {i} m2"),
            ]
        );
    }
    // the refused turns wrote nothing
    for c in &first[..2] {
        assert_eq!(
            store
                .recent_messages(c.session.id, 10)
                .await
                .expect("messages")
                .len(),
            2
        );
    }
    assert!(
        !store
            .is_processed(Platform::Console, "c1", "m2")
            .await
            .expect("checks")
    );
    assert_eq!(
        store.llm_calls(None).await.expect("ledger").len(),
        20 + 18,
        "model calls of refused turns are not kept with them"
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rarer_write_gets_the_writer_while_turns_keep_coming() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/kaiwa.db", dir.path().display());
    let store = Arc::new(SqliteStore::connect(&url).await.expect("opens"));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let turns = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut users = Vec::new();
    for u in 0..16 {
        let (store, stop, turns) = (store.clone(), stop.clone(), turns.clone());
        users.push(tokio::spawn(async move {
            let mut session = SessionRecord::draft(
                SessionKey {
                    user: format!("u{u}"),
                    ..key()
                },
                "assistant",
            );
            let mut t = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                t += 1;
                let changes = vec![StateChange::AddUserMessage { text: "hi".into() }];
                let mut turn = commit(session, &format!("{u}-{t}"), changes);
                turn.user.id = format!("u{u}");
                session = store.commit_turn(turn).await.expect("commits").session;
                turns.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = turns.load(std::sync::atomic::Ordering::SeqCst);
    let retention = store.delete_transcripts_before(Utc::now() - chrono::Duration::days(30));
    let deleted = tokio::time::timeout(Duration::from_secs(10), retention)
        .await
        .expect("the retention write is not starved")
        .expect("deletes");
    assert_eq!(deleted, 0, "every transcript is recent");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for user in users {
        user.await.expect("a user's turns");
    }
    assert!(before > 0, "turns were coming when the write asked");
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_restarts_under_a_steady_stream_of_turns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kaiwa.db");
    let url = format!("sqlite://{}", path.display());
    // the writer's own checkpoint out of the way: only the checkpointer restarts the WAL
    let store = Arc::new(
        SqliteStore::connect_tuned(&url, 64 * 1024, 1 << 30)
            .await
            .expect("opens"),
    );
    let (users, turns) = (32, 80);
    let mut tasks = Vec::new();
    for u in 0..users {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut session = SessionRecord::draft(
                SessionKey {
                    user: format!("u{u}"),
                    ..key()
                },
                "assistant",
            );
            for t in 0..turns {
                let mut turn = commit(
                    session,
                    &format!("{u}-{t}"),
                    vec![
                        StateChange::AddUserMessage {
                            text: "a question ".repeat(40),
                        },
                        StateChange::AddAssistantMessage {
                            text: "an answer ".repeat(60),
                            trace: None,
                        },
                    ],
                );
                turn.user.id = format!("u{u}");
                session = store.commit_turn(turn).await.expect("commits").session;
            }
            session.id
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.expect("a user's turns"));
    }
    let wal = std::fs::metadata(dir.path().join("kaiwa.db-wal"))
        .expect("the WAL")
        .len();
    // every turn wrote several pages: without restarts the WAL holds them all (over
    // 20 MB here), with them what is written between two restarts (about 2 MB; more
    // when the machine is busy with other tests and the checkpointer runs late, and the
    // file keeps its largest size)
    assert!(wal < 16 << 20, "the WAL grew to {wal} bytes");
    for id in ids {
        let messages = store.recent_messages(id, 1000).await.expect("messages");
        assert_eq!(messages.len(), 2 * turns, "every turn of session {id} kept");
    }
    // the WAL starts over at the next commit: with none coming, the last restart is the
    // last (each one pauses the writer and syncs the database)
    // (on a busy machine the checkpointer runs late: wait until the count settles)
    let mut restarts = store.wal_restarts();
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let now = store.wal_restarts();
        if now == restarts {
            break;
        }
        restarts = now;
    }
    assert!(restarts > 0, "the WAL was restarted");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        store.wal_restarts(),
        restarts,
        "an idle WAL restarted again"
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_read_holds_the_wal_restart_up_but_no_turn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/kaiwa.db", dir.path().display());
    let store = SqliteStore::connect_tuned(&url, 64 * 1024, 1 << 30)
        .await
        .expect("opens");
    let connect = || async {
        SqliteConnectOptions::from_str(&url)
            .expect("url")
            .connect()
            .await
            .expect("a connection")
    };
    let (mut reader, mut probe) = (connect().await, connect().await);
    // frames in the WAL, as a PASSIVE checkpoint sees them
    async fn wal_frames(conn: &mut sqlx::SqliteConnection) -> i64 {
        let (_, frames, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_one(conn)
            .await
            .expect("checkpoint");
        frames
    }
    let mut session = SessionRecord::draft(key(), "assistant");
    let mut turn = 0;
    let mut talk = async |store: &SqliteStore, turns: usize| {
        for _ in 0..turns {
            turn += 1;
            let changes = vec![StateChange::AddUserMessage {
                text: "a long question ".repeat(100),
            }];
            let next = commit(session.clone(), &format!("m{turn}"), changes);
            session = store.commit_turn(next).await.expect("commits").session;
        }
    };
    talk(&store, 5).await;
    // an export, say: a read transaction open on an old snapshot
    sqlx::query("BEGIN")
        .execute(&mut reader)
        .await
        .expect("begins");
    sqlx::query("SELECT count(*) FROM messages")
        .execute(&mut reader)
        .await
        .expect("reads");
    let started = std::time::Instant::now();
    talk(&store, 200).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "turns went on beside the read"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        wal_frames(&mut probe).await > 200,
        "the read kept the WAL from starting over"
    );
    sqlx::query("COMMIT")
        .execute(&mut reader)
        .await
        .expect("ends");
    // past the backoff, the next turns find the WAL restarted
    tokio::time::sleep(RESTART_BACKOFF + Duration::from_millis(200)).await;
    talk(&store, 5).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        wal_frames(&mut probe).await < 200,
        "the WAL started over once the read ended"
    );
    reader.close().await.expect("closes");
    probe.close().await.expect("closes");
    store.close().await;
}

fn incoming(message_id: &str) -> Incoming {
    Incoming {
        platform: Platform::Console,
        chat: "c1".into(),
        thread: String::new(),
        user: user(),
        message_id: message_id.into(),
        body: crate::message::Body::Text {
            text: format!("text of {message_id}"),
        },
        flow: None,
        flow_arg: None,
        shared: false,
    }
}

/// The ids of the inbox's entries, in the order a start replays them.
async fn pending_in_order(store: &SqliteStore) -> Vec<String> {
    store
        .inbox_pending(Platform::Console)
        .await
        .expect("inbox")
        .into_iter()
        .map(|m| m.message_id)
        .collect()
}

async fn pending_ids(store: &SqliteStore) -> Vec<String> {
    let mut ids = pending_in_order(store).await;
    ids.sort();
    ids
}

/// Holds the write lock from another connection (`COMMIT` on it lets go): the writer's
/// batch in progress waits for it, and all queued meanwhile goes into the batch after it.
pub(crate) async fn hold_the_writer(url: &str) -> sqlx::SqliteConnection {
    let mut other = SqliteConnectOptions::from_str(url)
        .expect("url")
        .connect()
        .await
        .expect("connects");
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .expect("locks");
    other
}

/// A place of user `u1` on the console.
fn place(chat: &str) -> SessionKey {
    SessionKey {
        platform: Platform::Console,
        chat: chat.into(),
        thread: String::new(),
        user: "u1".into(),
    }
}

/// [`commit`], its update received in the session's own chat.
fn turn_in_place(session: SessionRecord, id: &str, changes: Vec<StateChange>) -> TurnCommit {
    let mut commit = commit(session, id, changes);
    if let Some(p) = commit.processed.as_mut() {
        p.chat = commit.session.key.chat.clone();
    }
    commit
}

/// `turns` committed in one batch: the writer held, they queue behind a first turn (a
/// new session at `occupier`), then it is let go.
async fn together(
    store: &SqliteStore,
    url: &str,
    occupier: &str,
    turns: Vec<TurnCommit>,
) -> Vec<Result<CommittedTurn, StoreError>> {
    let mut holder = hold_the_writer(url).await;
    let occupy = store.commit_turn(turn_in_place(
        SessionRecord::draft(place(occupier), "assistant"),
        occupier,
        vec![],
    ));
    let batch = futures::future::join_all(turns.into_iter().map(|t| store.commit_turn(t)));
    let release = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        sqlx::query("COMMIT")
            .execute(&mut holder)
            .await
            .expect("releases");
    };
    let (first, results, ()) = tokio::join!(occupy, batch, release);
    first.expect("the first turn commits");
    results
}

/// The fast path numbers messages itself (no row comes back from its query): the ids a
/// turn reports are the stored ones, per session and in order, across batches of
/// several sessions and after a batch SQLite numbered turn by turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_numbered_by_the_writer_are_the_ones_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let store = SqliteStore::connect(&url).await.expect("opens");
    let turn = |session: SessionRecord, id: &str, n: usize| {
        let mut changes = Vec::new();
        for k in 0..n {
            changes.extend(said(&format!("q {id} {k}"), &format!("a {id} {k}")));
        }
        turn_in_place(session, id, changes)
    };
    let ok = |r: Result<CommittedTurn, StoreError>| r.expect("commits");

    // two new sessions in one fast batch, with one and two exchanges
    let mut results = together(
        &store,
        &url,
        "z1",
        vec![
            turn(SessionRecord::draft(place("a"), "assistant"), "a1", 1),
            turn(SessionRecord::draft(place("b"), "assistant"), "b1", 2),
        ],
    )
    .await
    .into_iter();
    let (a1, b1) = (
        ok(results.next().expect("a1")),
        ok(results.next().expect("b1")),
    );
    // a stale turn sends its batch turn by turn: SQLite numbers those messages
    let mut stale = b1.session.clone();
    stale.version = 0;
    let mut results = together(
        &store,
        &url,
        "z2",
        vec![turn(stale, "b2", 1), turn(a1.session.clone(), "a2", 2)],
    )
    .await
    .into_iter();
    assert!(matches!(
        results.next(),
        Some(Err(StoreError::Conflict { .. }))
    ));
    let a2 = ok(results.next().expect("a2"));
    // and the fast path numbers from the database again
    let a3 = ok(store.commit_turn(turn(a2.session.clone(), "a3", 1)).await);
    let b3 = ok(store.commit_turn(turn(b1.session.clone(), "b3", 1)).await);

    for (session, turns) in [
        (
            a3.session.id,
            vec![("a1", 1, &a1), ("a2", 2, &a2), ("a3", 1, &a3)],
        ),
        (b3.session.id, vec![("b1", 2, &b1), ("b3", 1, &b3)]),
    ] {
        let stored = store.recent_messages(session, 50).await.expect("messages");
        let mut expected = Vec::new();
        let mut reported = Vec::new();
        for (id, n, committed) in turns {
            for k in 0..n {
                expected.push(format!("q {id} {k}"));
                expected.push(format!("a {id} {k}"));
            }
            reported.extend(committed.assistant_message_ids.iter().copied());
        }
        let texts: Vec<&str> = stored.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, expected);
        assert!(stored.windows(2).all(|w| w[0].id < w[1].id), "{stored:?}");
        let assistant: Vec<i64> = stored
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .map(|m| m.id)
            .collect();
        assert_eq!(reported, assistant, "the ids each turn reported");
    }
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_keeping_messages_and_the_write_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/kaiwa.db", dir.path().display());
    let store = SqliteStore::connect(&url).await.expect("opens");
    store.check_writable().await.expect("writable at first");
    // the writer's one connection may not grow the file: SQLite answers "database or disk
    // is full", as on a full disk
    let (pages,): (i64,) = sqlx::query_as("PRAGMA page_count")
        .fetch_one(&store.writer)
        .await
        .expect("page count");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "PRAGMA max_page_count = {pages}"
    )))
    .execute(&store.writer)
    .await
    .expect("limits the file");
    let big = Incoming {
        body: crate::message::Body::Text {
            text: "x".repeat(200_000),
        },
        ..incoming("big")
    };
    let kept = store.inbox_keep(&[big]).await;
    assert!(
        kept.is_err(),
        "a message that did not commit is not reported kept"
    );
    // /healthz's check: the failed batch is reported once…
    assert!(store.check_writable().await.is_err());
    // …and a database that takes writes again is healthy again
    sqlx::query("PRAGMA max_page_count = 1073741823")
        .execute(&store.writer)
        .await
        .expect("lifts the limit");
    store.check_writable().await.expect("writable again");
    store.inbox_keep(&[incoming("small")]).await.expect("kept");
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_rides_with_the_turns_even_in_a_batch_redone_turn_by_turn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/kaiwa.db", dir.path().display());
    let store = Arc::new(SqliteStore::connect(&url).await.expect("opens"));
    store.inbox_put(&incoming("m1")).await.expect("keeps m1");
    store.inbox_put(&incoming("m2")).await.expect("keeps m2");
    // kept as received, and again (a platform sending it twice) changes nothing
    store
        .inbox_put(&incoming("m2"))
        .await
        .expect("keeps m2 again");
    let first = first_turn(&store).await;
    // kept with or before the turn that follows (m1's own turn: no entry needed if the
    // writer took them in one batch)
    let kept = store.inbox_pending(Platform::Console).await.expect("inbox");
    assert!((1..=2).contains(&kept.len()), "{kept:?}");
    assert_eq!(kept.last(), Some(&incoming("m2")), "kept as received");
    assert!(kept.len() == 1 || kept[0] == incoming("m1"));

    // a turn queued for the writer, in the order of the calls; its answer comes later
    async fn turn(
        store: &SqliteStore,
        message_id: &str,
        session: SessionRecord,
    ) -> oneshot::Receiver<Result<CommittedTurn, StoreError>> {
        let mut commit = commit(session, message_id, vec![]);
        commit.user.id = commit.session.key.user.clone();
        let (reply, answer) = oneshot::channel();
        let commit = Box::new(commit);
        store
            .submit(Job::Turn {
                after: Box::new(Prepared::of(&commit).expect("prepared")),
                commit,
                reply,
            })
            .await
            .expect("queues");
        answer
    }
    // the writer has taken all that was queued (and waits for the lock with it)
    async fn writer_took_all(store: &SqliteStore) {
        while store.jobs.capacity() < store.jobs.max_capacity() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let newcomer = |user: &str| {
        let place = SessionKey {
            user: user.into(),
            ..key()
        };
        SessionRecord::draft(place, "assistant")
    };

    let mut other = hold_the_writer(&url).await;
    // another user's first turn: the one the writer is held up in
    let mut held = turn(&store, "m0", newcomer("u3")).await;
    writer_took_all(&store).await;
    store.inbox_put(&incoming("m3")).await.expect("queues m3");
    store
        .inbox_done(Platform::Console, "c1", "m1")
        .await
        .expect("queues the clear");
    // the update m1 again: refused as a duplicate, so this batch is redone turn by turn
    let again = turn(&store, "m1", first.session.clone()).await;
    store.inbox_put(&incoming("m4")).await.expect("queues m4");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(held.try_recv().is_err(), "the writer waits for the lock");
    sqlx::query("COMMIT")
        .execute(&mut other)
        .await
        .expect("unlocks");
    held.await.expect("answered").expect("commits");
    assert!(matches!(
        again.await.expect("answered"),
        Err(StoreError::Duplicate { .. })
    ));
    assert_eq!(pending_ids(&store).await, ["m2", "m3", "m4"]);

    // a message and its turn in one batch that commits: no entry is written for it
    let mut other = hold_the_writer(&url).await;
    let held = turn(&store, "m5", first.session.clone()).await;
    writer_took_all(&store).await;
    store.inbox_put(&incoming("m6")).await.expect("queues m6");
    // another user's (two turns of one session in a batch would take the slow path)
    let quick = turn(&store, "m6", newcomer("u2")).await;
    sqlx::query("COMMIT")
        .execute(&mut other)
        .await
        .expect("unlocks");
    held.await.expect("answered").expect("commits");
    quick.await.expect("answered").expect("commits");
    assert_eq!(pending_ids(&store).await, ["m2", "m3", "m4"]);
    assert!(
        store
            .is_processed(Platform::Console, "c1", "m6")
            .await
            .expect("checks")
    );

    // what was kept survives a restart; clears queued before a clean stop are written
    store
        .inbox_done(Platform::Console, "c1", "m2")
        .await
        .expect("queues");
    store.close().await;
    drop(store);
    other.close().await.expect("closes");
    let store = SqliteStore::connect(&url).await.expect("reopens");
    assert_eq!(pending_ids(&store).await, ["m3", "m4"]);
    store.close().await;
}

#[tokio::test]
async fn updates_processed_and_messages_kept_before_the_upgrade_are_still_known() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/kaiwa.db", dir.path().display());
    // the database as the release before `processed_updates` went WITHOUT ROWID left it
    let earlier = dir.path().join("migrations");
    std::fs::create_dir(&earlier).expect("folder");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/sqlite");
    for entry in std::fs::read_dir(root).expect("migrations") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        if name.as_str() < "20261122000007" {
            std::fs::copy(&path, earlier.join(&name)).expect("copies");
        }
    }
    let pool = SqlitePoolOptions::new()
        .connect_with(
            SqliteConnectOptions::from_str(&url)
                .expect("url")
                .create_if_missing(true),
        )
        .await
        .expect("opens");
    sqlx::migrate::Migrator::new(earlier.as_path())
        .await
        .expect("migrations")
        .run(&pool)
        .await
        .expect("migrates");
    sqlx::query(
        "INSERT INTO processed_updates (platform, chat, message_id, created_ms) \
         VALUES ('console', 'c1', 'm1', 1)",
    )
    .execute(&pool)
    .await
    .expect("inserts");
    // two messages left in the inbox, received in the same millisecond: m9 first
    for id in ["m9", "m10"] {
        sqlx::query(
            "INSERT INTO inbox (platform, chat, message_id, incoming, created_ms) \
             VALUES ('console', 'c1', ?, ?, 5)",
        )
        .bind(id)
        .bind(serde_json::to_string(&incoming(id)).expect("JSON"))
        .execute(&pool)
        .await
        .expect("inserts");
    }
    pool.close().await;

    let store = SqliteStore::connect(&url).await.expect("upgrades");
    assert!(
        store
            .is_processed(Platform::Console, "c1", "m1")
            .await
            .expect("checks")
    );
    assert_eq!(
        pending_in_order(&store).await,
        ["m9", "m10"],
        "replayed in the order received"
    );
    let replay = store
        .commit_turn(commit(
            SessionRecord::draft(key(), "assistant"),
            "m1",
            vec![],
        ))
        .await;
    assert!(matches!(replay, Err(StoreError::Duplicate { .. })));
    store
        .commit_turn(commit(
            SessionRecord::draft(key(), "assistant"),
            "m2",
            vec![],
        ))
        .await
        .expect("a new update goes through");
    assert!(
        store
            .is_processed(Platform::Console, "c1", "m2")
            .await
            .expect("checks")
    );
    store.close().await;
}

#[tokio::test]
async fn a_new_database_gets_small_pages_and_an_older_one_keeps_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let page_size = |store: &SqliteStore| {
        let pool = store.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>("PRAGMA page_size")
                .fetch_one(&pool)
                .await
                .expect("page size")
        }
    };
    let fresh = format!("sqlite://{}/new.db", dir.path().display());
    let store = SqliteStore::connect(&fresh).await.expect("opens");
    assert_eq!(page_size(&store).await, i64::from(PAGE_SIZE));
    store.close().await;

    // a database made with SQLite's default pages (as every release before this one did)
    let older = format!("sqlite://{}/old.db", dir.path().display());
    let pool = SqlitePoolOptions::new()
        .connect_with(
            SqliteConnectOptions::from_str(&older)
                .expect("url")
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal),
        )
        .await
        .expect("opens");
    sqlx::query("CREATE TABLE earlier (x INTEGER)")
        .execute(&pool)
        .await
        .expect("creates");
    pool.close().await;
    let store = SqliteStore::connect(&older).await.expect("migrates");
    assert_eq!(page_size(&store).await, 4096, "the file keeps its pages");
    let id = store
        .commit_turn(commit(
            SessionRecord::draft(key(), "assistant"),
            "m1",
            said("hello", "hi"),
        ))
        .await
        .expect("commits")
        .session
        .id;
    store.close().await;
    let store = SqliteStore::connect(&older).await.expect("reopens");
    let kept = store.recent_messages(id, 10).await.expect("reads");
    assert_eq!(kept.len(), 2, "the turn is kept");
    store.close().await;
}

/// A user's message and the reply to it.
pub(crate) fn said(user: &str, assistant: &str) -> Vec<StateChange> {
    vec![
        StateChange::AddUserMessage { text: user.into() },
        StateChange::AddAssistantMessage {
            text: assistant.into(),
            trace: None,
        },
    ]
}

fn submission() -> Submission {
    Submission {
        applicant: "山田 \"Yama\" 花子".into(),
        form_id: "engineer".into(),
        variant: "default".into(),
        status: SubmissionStatus::Submitted,
        language: Some("ja".into()),
        country: Some("JP".into()),
        timezone: None,
        values: serde_json::json!({ "full_name": "山田 花子", "years": 3 }),
        facts: serde_json::json!({ "skills": { "rust": true } }),
        flags: serde_json::json!([]),
        audit: Some(serde_json::json!({ "passed": true, "summary": "ok\nfine" })),
    }
}

#[tokio::test]
async fn one_batch_carries_every_kind_of_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/kinds.db", dir.path().display());
    let store = SqliteStore::connect(&url).await.expect("opens");
    let turn = turn_in_place;
    let going = store
        .commit_turn(turn(
            SessionRecord::draft(place("a"), "assistant"),
            "a1",
            said("hi", "hello"),
        ))
        .await
        .expect("commits");
    let switched = store
        .commit_turn(turn(
            SessionRecord::draft(place("b"), "assistant"),
            "b1",
            said("hi", "hello"),
        ))
        .await
        .expect("commits");

    // the writer held: what follows queues, then commits as one batch
    let mut ending = said("my answers", "thank you");
    ending.push(StateChange::SaveSubmission {
        submission: submission(),
    });
    ending.push(StateChange::EndSession);
    let mut switch = turn(
        SessionRecord::draft(place("b"), "interview"),
        "b2",
        said("/interview", "welcome"),
    );
    switch.finish_session = Some(switched.session.id);
    let results = together(
        &store,
        &url,
        "z",
        vec![
            turn(SessionRecord::draft(place("c"), "interview"), "c1", ending),
            switch,
            turn(going.session.clone(), "a2", said("more", "sure")),
        ],
    )
    .await;
    let [ended, new, went_on]: [CommittedTurn; 3] = results
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .expect("every turn of the batch commits")
        .try_into()
        .expect("three");

    assert_eq!(ended.session.status, SessionStatus::Finished);
    assert_eq!(
        store.session(ended.session.id).await.expect("reads"),
        Some(ended.session.clone())
    );
    let saved = store.submissions(None).await.expect("reads");
    assert_eq!(saved.len(), 1);
    assert_eq!(saved[0].session_id, Some(ended.session.id));
    assert_eq!(saved[0].submission, submission());
    let old = store
        .session(switched.session.id)
        .await
        .expect("reads")
        .expect("kept");
    assert_eq!(old.status, SessionStatus::Finished);
    assert_eq!(
        store.active_session(&place("b")).await.expect("reads"),
        Some(new.session.clone())
    );
    assert_eq!(went_on.session.version, 2);
    let ids: std::collections::HashSet<i64> = [
        going.session.id,
        switched.session.id,
        ended.session.id,
        new.session.id,
    ]
    .into();
    assert_eq!(ids.len(), 4, "every session its own id");
    for (turn, texts) in [
        (&ended, vec!["my answers", "thank you"]),
        (&new, vec!["/interview", "welcome"]),
        (&went_on, vec!["hi", "hello", "more", "sure"]),
    ] {
        let stored: Vec<String> = store
            .recent_messages(turn.session.id, 10)
            .await
            .expect("reads")
            .into_iter()
            .map(|m| m.text)
            .collect();
        assert_eq!(stored, texts);
        assert_eq!(turn.assistant_message_ids.len(), 1);
    }
    for (chat, id) in [("c", "c1"), ("b", "b2"), ("a", "a2")] {
        assert!(
            store
                .is_processed(Platform::Console, chat, id)
                .await
                .expect("reads")
        );
    }
    assert_eq!(store.llm_calls(None).await.expect("ledger").len(), 6);
    store.close().await;
}

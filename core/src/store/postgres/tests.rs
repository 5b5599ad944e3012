//! The writer's batch on a real server: one statement for what it can take, one by one for
//! the rest, and a refused turn that refuses nothing else.

use super::PgStore;
use super::writer::{Job, Work};
use crate::message::Platform;
use crate::store::contract::{commit, incoming, place, said};
use crate::store::{Inbox, SessionRecord, Store, StoreError, TurnCommit};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::oneshot;

async fn store() -> PgStore {
    PgStore::connect(&crate::testing::postgres::database_url().await)
        .await
        .expect("connects")
}

/// `commit` as a job, and where its outcome arrives.
fn turn(
    commit: TurnCommit,
) -> (
    Job,
    oneshot::Receiver<Result<crate::store::CommittedTurn, StoreError>>,
) {
    let (reply, outcome) = oneshot::channel();
    (
        Job::Turn {
            commit: Box::new(commit),
            reply,
        },
        outcome,
    )
}

async fn count(store: &PgStore, table: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(&store.pool)
        .await
        .expect("counts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_refused_turn_leaves_the_rest_of_its_batch_committed() {
    let store = store().await;
    let mut sessions = Vec::new();
    for chat in ["c1", "c2", "c3"] {
        let first = store
            .commit_turn(commit(
                SessionRecord::draft(place(chat), "assistant"),
                &format!("{chat}-1"),
                said("hi", "hello"),
            ))
            .await
            .expect("commits");
        sessions.push(first.session);
    }
    let messages_before = count(&store, "messages").await;
    let mut stale = sessions[1].clone();
    stale.version = 0;
    // an entry of another chat, kept in the same batch, and one cleared by it
    let mut kept = incoming("k1");
    kept.chat = "c9".into();
    let mut cleared = incoming("k2");
    cleared.chat = "c9".into();
    store.inbox_keep(&[cleared]).await.expect("kept");
    let (keep_done, keep_committed) = oneshot::channel();
    let jobs = vec![
        turn(commit(sessions[0].clone(), "c1-2", said("two", "two back"))),
        turn(commit(stale, "c2-2", said("stale", "never"))),
        turn(commit(
            SessionRecord::draft(place("c4"), "assistant"),
            "c4-1",
            said("new", "new back"),
        )),
        turn(commit(
            sessions[2].clone(),
            "c3-2",
            said("three", "three back"),
        )),
    ];
    let (jobs, outcomes): (Vec<Job>, Vec<_>) = jobs.into_iter().unzip();
    let mut jobs = jobs;
    jobs.push(Job::Keep {
        entries: vec![kept],
        durable: Some(keep_done),
    });
    jobs.push(Job::Done {
        platform: Platform::Console,
        chat: "c9".into(),
        message_id: "k2".into(),
    });
    let failures = AtomicU64::new(0);
    Work::of(jobs.into_iter())
        .write(&store.pool, &store.hot, &failures)
        .await;
    let mut answers = Vec::new();
    for outcome in outcomes {
        answers.push(outcome.await.expect("answered"));
    }
    keep_committed
        .await
        .expect("answered")
        .expect("the entry is committed");
    assert!(
        matches!(answers[1], Err(StoreError::Conflict { .. })),
        "{:?}",
        answers[1]
    );
    let written: Vec<_> = [0, 2, 3]
        .iter()
        .map(|&i| answers[i].as_ref().expect("committed"))
        .collect();
    assert_eq!(written[0].session.version, 2);
    assert_eq!(written[1].session.version, 1);
    assert!(written[1].session.id > sessions[2].id, "a new id is drawn");
    // the replies' ids are the stored ones, in the order written
    let ids: Vec<i64> = written
        .iter()
        .flat_map(|t| t.assistant_message_ids.clone())
        .collect();
    for (turn, id) in written.iter().zip(&ids) {
        let stored = store.undelivered(turn.session.id).await.expect("reads");
        assert_eq!(stored.last().map(|m| m.id), Some(*id));
    }
    assert_eq!(count(&store, "messages").await, messages_before + 6);
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "a refusal is no failure"
    );
    let pending = store.inbox_pending(Platform::Console).await.expect("reads");
    let pending: Vec<&str> = pending.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(pending, ["k1"], "kept with the batch, and k2 cleared by it");
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_statement_writes_nothing_of_its_batch() {
    let store = store().await;
    let first = store
        .commit_turn(commit(
            SessionRecord::draft(place("c1"), "assistant"),
            "c1-1",
            said("hi", "hello"),
        ))
        .await
        .expect("commits");
    let before = (
        count(&store, "messages").await,
        count(&store, "sessions").await,
        count(&store, "llm_calls").await,
    );
    let mut stale = first.session.clone();
    stale.version = 0;
    let good = commit(
        SessionRecord::draft(place("c2"), "assistant"),
        "c2-1",
        said("new", "new back"),
    );
    let refused = commit(stale, "c1-2", said("stale", "never"));
    let mut batch = super::batch::AtOnce::default();
    batch.turns([&good, &refused]);
    let written = super::batch::at_once(&store.pool, &batch)
        .await
        .expect("runs");
    assert!(written.is_none(), "refused");
    let after = (
        count(&store, "messages").await,
        count(&store, "sessions").await,
        count(&store, "llm_calls").await,
    );
    assert_eq!(after, before);
    store.close().await;
}

/// The generic plan a writer's connection makes of `statement`, with every parameter null.
async fn writers_plan(url: &str, statement: &str) -> String {
    use sqlx::Connection;
    use std::str::FromStr;
    let options = sqlx::postgres::PgConnectOptions::from_str(url).expect("a URL");
    let mut writer = sqlx::PgConnection::connect_with(&super::writer_options(options))
        .await
        .expect("connects");
    let parameters = (1..)
        .take_while(|n| statement.contains(&format!("${n}")))
        .count();
    let nulls = vec!["NULL"; parameters].join(", ");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "PREPARE planned AS {statement}"
    )))
    .execute(&mut writer)
    .await
    .expect("prepares");
    let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "EXPLAIN EXECUTE planned({nulls})"
    )))
    .fetch_all(&mut writer)
    .await
    .expect("explains");
    let _ = writer.close().await;
    plan.join("\n")
}

/// Measured: a writer's plan made on a database just created read every session (and
/// every inbox entry) for each batch, however large the tables grew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_plan_made_on_empty_tables_reads_rows_by_their_keys() {
    let url = crate::testing::postgres::database_url().await;
    let store = PgStore::connect(&url).await.expect("connects");
    let keys_used: [(&str, &[&str]); 2] = [
        (
            super::batch::AT_ONCE,
            &[
                "using inbox_pkey on inbox",
                "using sessions_pkey on sessions",
            ],
        ),
        (super::batch::CLEAR_AND_MARK, &["using inbox_pkey on inbox"]),
    ];
    for (statement, keys) in keys_used {
        let plan = writers_plan(&url, statement).await;
        for table in ["sessions", "inbox", "messages"] {
            assert!(
                !plan.contains(&format!("Seq Scan on {table}")),
                "{table} scanned whole:\n{plan}"
            );
        }
        for key in keys {
            assert!(plan.contains(key), "{key}:\n{plan}");
        }
    }
    store.close().await;
}

/// An instance alone uses both its writers; among others, one (the writers in use follow
/// the instances running on the database: counted when one claims its place, and again
/// as they come and go), and its turns still all commit, in order across a change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_among_others_uses_one_writer() {
    use crate::store::Leases;
    use std::time::Duration;
    let url = crate::testing::postgres::database_url().await;
    let (a, b) = (
        PgStore::connect(&url).await.expect("connects"),
        PgStore::connect(&url).await.expect("connects"),
    );
    assert_eq!(
        a.count_instances().await.expect("counts"),
        2,
        "none runs yet"
    );
    a.claim_for_run().await.expect("claims");
    assert_eq!(a.writers.in_use().await, 2, "alone");
    // a store not claimed for a run (a one-off command) is not an instance, and the chats'
    // leases count for nothing
    assert!(
        b.lease("chat:telegram:b", "instance-b", Duration::from_secs(30))
            .await
            .expect("takes")
    );
    assert_eq!(a.count_instances().await.expect("counts"), 2, "still alone");
    // an instance that starts among others starts with its share; the other follows at its
    // next count
    b.claim_for_run().await.expect("claims");
    assert_eq!(b.writers.in_use().await, 1, "started among others");
    assert_eq!(
        a.count_instances().await.expect("counts"),
        1,
        "two instances"
    );
    // one that stops gives its place up at once
    b.close().await;
    assert_eq!(
        a.count_instances().await.expect("counts"),
        2,
        "the other one stopped"
    );
    // and one killed is counted until its place expires
    let c = PgStore::connect(&url).await.expect("connects");
    c.claim_for_run().await.expect("claims");
    assert_eq!(a.count_instances().await.expect("counts"), 1, "a third one");
    drop(c);
    sqlx::query("UPDATE leases SET expires_ms = 0 WHERE name LIKE 'running:%' AND holder <> $1")
        .bind(&a.writers.id)
        .execute(&a.pool)
        .await
        .expect("expires");
    assert_eq!(
        a.count_instances().await.expect("counts"),
        2,
        "the killed one expired"
    );
    // the count every quarter second follows too
    let d = PgStore::connect(&url).await.expect("connects");
    d.claim_for_run().await.expect("claims");
    let seen = async {
        while a.writers.in_use().await != 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), seen)
        .await
        .expect("counted within a few ticks");
    d.close().await;
    // turns of many chats, each session's one after another, while the writers in use
    // change back and forth: every turn commits, none refused as stale
    let turns = (0..20).map(|i| {
        let a = &a;
        async move {
            let chat = format!("many-{i}");
            let mut session = SessionRecord::draft(place(&chat), "assistant");
            for t in 0..5 {
                session = a
                    .commit_turn(commit(session, &format!("{chat}-{t}"), said("hi", "hello")))
                    .await
                    .expect("commits")
                    .session;
            }
        }
    });
    let changes = async {
        for n in [1, 2, 1, 2, 1] {
            a.writers.set(n).await.expect("sets");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    futures::future::join(futures::future::join_all(turns), changes).await;
    assert_eq!(count(&a, "sessions").await, 20);
    assert_eq!(count(&a, "processed_updates").await, 100);
    a.close().await;
}

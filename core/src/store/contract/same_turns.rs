//! The contract's property test: the same random turns (the generator of the SQLite
//! write-path test, [`Script`]) on both backends give the same answers and leave the same
//! data, read through the trait.

use super::Db;
use crate::message::{Platform, SessionKey};
use crate::store::sqlite::write_paths::{Script, Turn, turn};
use crate::store::{Store, StoreError};
use proptest::prelude::{ProptestConfig, prop, prop_assert_eq, proptest};
use std::collections::HashMap;

/// The same random turns on both backends give the same answers and leave the same data,
/// read through the trait (ids renumbered in the order they appear: PostgreSQL's sequences
/// skip the ids of a rolled-back turn).
async fn run_on(store: &dyn Store, rounds: &[Vec<Turn>]) -> Vec<String> {
    let mut script = Script::default();
    let mut ids: HashMap<i64, usize> = HashMap::new();
    let mut renumber = |id: i64| {
        let next = ids.len();
        *ids.entry(id).or_insert(next)
    };
    let mut seen = Vec::new();
    for turn in rounds.iter().flatten() {
        let commit = script.next(turn);
        match store.commit_turn(commit).await {
            Ok(done) => {
                seen.push(format!(
                    "ok session {} v{} {:?} replies {}",
                    renumber(done.session.id),
                    done.session.version,
                    done.session.status,
                    done.assistant_message_ids.len()
                ));
                script.committed(turn.place, done.session);
            }
            Err(StoreError::Duplicate { message_id, .. }) => {
                seen.push(format!("duplicate {message_id}"))
            }
            Err(StoreError::Conflict { .. }) => seen.push("conflict".into()),
            Err(e) => seen.push(format!("error {e}")),
        }
    }
    for place in 0..4 {
        let key = format!("u{place}");
        let data = store
            .user_data(Platform::Console, &key)
            .await
            .expect("data");
        let strip = |mut v: serde_json::Value| {
            fn walk(v: &mut serde_json::Value) {
                match v {
                    serde_json::Value::Object(map) => {
                        map.retain(|k, _| !k.ends_with("_ms") && k != "id");
                        map.values_mut().for_each(walk);
                    }
                    serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
                    _ => {}
                }
            }
            walk(&mut v);
            v
        };
        seen.push(strip(data).to_string());
        let active = store
            .active_session(&SessionKey {
                platform: Platform::Console,
                chat: format!("c{place}"),
                thread: String::new(),
                user: key.clone(),
            })
            .await
            .expect("reads");
        if let Some(s) = active {
            seen.push(format!(
                "{key} active v{} {:?} {:?} {} {:?}",
                s.version,
                s.language,
                s.pending_options.map(|o| o.prompt),
                s.state.as_json(),
                store.tickets(s.id).await.expect("tickets").len()
            ));
        }
    }
    let usage = store.llm_usage().await.expect("usage");
    seen.push(format!(
        "{:?}",
        usage
            .iter()
            .map(|u| (&u.flow, &u.agent, u.calls, u.wasted))
            .collect::<Vec<_>>()
    ));
    seen.push(format!(
        "{}",
        store.submissions(None).await.expect("reads").len()
    ));
    seen
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn both_backends_answer_and_store_the_same(
        rounds in prop::collection::vec(prop::collection::vec(turn(), 1..6), 1..5)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let (on_sqlite, on_postgres) = runtime.block_on(async {
            let (lite, pg) = (Db::sqlite(), Db::postgres().await);
            let (lite_store, pg_store) = (lite.open().await, pg.open().await);
            let a = run_on(&*lite_store, &rounds).await;
            let b = run_on(&*pg_store, &rounds).await;
            lite_store.close().await;
            pg_store.close().await;
            (a, b)
        });
        prop_assert_eq!(on_sqlite, on_postgres);
    }
}

//! The contract of the browser console's rows: sign-in links used once, sessions until
//! they end or expire, and the overviews across users.

use super::{Db, StateChange, Ticket, commit, place, said, submission, user};
use crate::message::{Platform, SessionKey};
use crate::store::console::{ConsoleAdmin, ConsoleSession};
use crate::store::reading::ReadingChange;
use crate::store::{SessionRecord, TurnCommit};
use chrono::{Duration, Utc};

fn admin() -> ConsoleAdmin {
    ConsoleAdmin {
        platform: Platform::Telegram,
        user_id: "9".into(),
        name: "Ann".into(),
    }
}

pub(super) async fn a_console_link_works_once_and_a_session_until_it_ends(db: Db) {
    let store = db.open().await;
    let now = Utc::now();
    store
        .console_link_put("h-link", &admin(), now + Duration::minutes(10))
        .await
        .expect("keeps");
    store
        .console_link_put("h-old", &admin(), now - Duration::seconds(1))
        .await
        .expect("keeps");
    assert_eq!(
        store
            .console_link_take("h-unknown", now)
            .await
            .expect("reads"),
        None
    );
    assert_eq!(
        store.console_link_take("h-old", now).await.expect("reads"),
        None,
        "expired"
    );
    // two instances use the same link at once: one signs in
    let other = db.open().await;
    let (a, b) = tokio::join!(
        store.console_link_take("h-link", now),
        other.console_link_take("h-link", now)
    );
    let taken: Vec<_> = [a.expect("reads"), b.expect("reads")]
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(taken, vec![admin()]);
    assert_eq!(
        store.console_link_take("h-link", now).await.expect("reads"),
        None
    );

    let session = ConsoleSession {
        admin: admin(),
        csrf: "csrf".into(),
        admins: "fingerprint".into(),
        expires_at: now + Duration::hours(12),
    };
    store
        .console_session_put("h-cookie", &session)
        .await
        .expect("keeps");
    let read = other.console_session("h-cookie", now).await.expect("reads");
    assert_eq!(
        read.map(|s| (s.admin, s.csrf, s.admins)),
        Some((admin(), "csrf".into(), "fingerprint".into()))
    );
    assert_eq!(
        store
            .console_session("h-cookie", now + Duration::hours(13))
            .await
            .expect("reads"),
        None,
        "expired"
    );
    other
        .console_session_end("h-cookie", now)
        .await
        .expect("ends");
    assert_eq!(
        store.console_session("h-cookie", now).await.expect("reads"),
        None
    );
}

pub(super) async fn the_console_finds_sessions_tickets_and_readers_across_users(db: Db) {
    let store = db.open().await;
    let mut asked = said("How do I reset?", "Press reset.");
    asked.push(StateChange::SaveTicket {
        ticket: Ticket {
            ticket_no: 1,
            question: "How do I reset?".into(),
            plan: vec![],
            sub_answers: serde_json::json!({}),
            answer: "Press reset.".into(),
            sources: vec![],
            feedback: Some("not_solved".into()),
        },
    });
    let helpdesk = store
        .commit_turn(commit(
            SessionRecord::draft(place("h"), "helpdesk"),
            "t1",
            asked,
        ))
        .await
        .expect("commits")
        .session;
    let reader = SessionKey {
        platform: Platform::Telegram,
        chat: "r".into(),
        thread: String::new(),
        user: "aiko".into(),
    };
    store
        .commit_turn(TurnCommit {
            session: SessionRecord::draft(reader, "reading"),
            user: user("aiko"),
            finish_session: None,
            processed: None,
            changes: vec![StateChange::Reading {
                change: ReadingChange::OpenRecord {
                    title: "Kokoro".into(),
                    author: None,
                    details: None,
                },
            }],
            llm_calls: vec![],
        })
        .await
        .expect("commits");

    let tickets = store.all_tickets(10).await.expect("reads");
    assert_eq!(tickets.len(), 1);
    assert_eq!(tickets[0].user_name, "User u1");
    assert_eq!(tickets[0].ticket.feedback.as_deref(), Some("not_solved"));
    assert_eq!(tickets[0].handled_at, None);
    // the user asks for a person; someone takes the conversation over: handled
    let mut human = said("A person, please", "Someone will come");
    human.push(StateChange::SaveTicket {
        ticket: Ticket {
            ticket_no: 2,
            question: "Still broken".into(),
            plan: vec![],
            sub_answers: serde_json::json!({}),
            answer: "Sorry.".into(),
            sources: vec![],
            feedback: Some("human".into()),
        },
    });
    let helpdesk = store
        .commit_turn(commit(helpdesk, "t2", human))
        .await
        .expect("commits")
        .session;
    let open = store.all_tickets(10).await.expect("reads");
    assert_eq!(open[0].ticket.ticket_no, 2, "newest first");
    assert_eq!(open[0].handled_at, None);
    store
        .take_over(helpdesk.id, &helpdesk.key, "telegram:9 (Ann)")
        .await
        .expect("takes over");
    let handled = store.all_tickets(10).await.expect("reads");
    assert!(handled[0].handled_at.is_some(), "the request for a person");
    assert_eq!(handled[1].handled_at, None, "a ticket rated otherwise");
    let by_id = store.find_sessions("u1", 10).await.expect("reads");
    assert_eq!(by_id.len(), 1);
    assert_eq!(by_id[0].flow, "helpdesk");
    let by_name = store.find_sessions("USER AIK", 10).await.expect("reads");
    assert_eq!(
        by_name
            .iter()
            .map(|s| s.key.user.as_str())
            .collect::<Vec<_>>(),
        ["aiko"]
    );
    assert!(
        store
            .find_sessions("%", 10)
            .await
            .expect("reads")
            .is_empty(),
        "no pattern"
    );
    assert_eq!(
        store.find_sessions("", 10).await.expect("reads").len(),
        2,
        "everyone"
    );
    // one application found by its id, as the list has it
    let mut ending = said("my answers", "thanks");
    ending.push(StateChange::SaveSubmission {
        submission: submission(),
    });
    store
        .commit_turn(commit(
            SessionRecord::draft(place("a"), "interview"),
            "s1",
            ending,
        ))
        .await
        .expect("commits");
    let listed = store.submissions(None).await.expect("reads");
    let by_id = store.submission_by_id(listed[0].id).await.expect("reads");
    assert_eq!(by_id.as_ref(), Some(&listed[0]));
    assert_eq!(
        store
            .submission_by_id(listed[0].id + 1)
            .await
            .expect("reads"),
        None
    );
    let readers = store.all_reading_records(10).await.expect("reads");
    assert_eq!(readers.len(), 1);
    assert_eq!(
        (
            readers[0].user_name.as_str(),
            readers[0].record.title.as_str()
        ),
        ("User aiko", "Kokoro")
    );
}

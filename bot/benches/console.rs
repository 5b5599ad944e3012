//! The console's pages with 1,000 applications and 1,000 help-desk questions stored
//! (SQLite, the shipped knowledge base): each page served over HTTP on 127.0.0.1 to a
//! signed-in client, as a browser loads it. Figures in `docs/performance.md`.

use criterion::{Criterion, criterion_group, criterion_main};
use kaiwa::config::Settings;
use kaiwa_core::message::{Platform, SessionKey, UserRef};
use kaiwa_core::store::console::{ConsoleAdmin, ConsoleSession, token_hash};
use kaiwa_core::store::{
    SessionRecord, StateChange, Submission, SubmissionStatus, Ticket, TurnCommit,
};
use std::time::Duration;

const APPLICATIONS: usize = 1_000;
const COOKIE: &str = "bench-cookie";

fn submission(i: usize) -> Submission {
    Submission {
        applicant: format!("Applicant {i:04}"),
        form_id: if i.is_multiple_of(3) {
            "designer"
        } else {
            "engineer"
        }
        .into(),
        variant: "application".into(),
        status: if i.is_multiple_of(10) {
            SubmissionStatus::Incomplete
        } else {
            SubmissionStatus::Submitted
        },
        language: Some("en".into()),
        country: Some("JP".into()),
        timezone: Some("Asia/Tokyo".into()),
        values: serde_json::json!({
            "full_name": format!("Applicant {i:04}"),
            "email": format!("a{i}@example.com"),
            "experience_years": (i % 20).to_string(),
            "skills": "Rust, SQL, distributed systems",
            "motivation": "I want to build developer tools that people enjoy using every day.",
        }),
        facts: serde_json::json!({"motivation": {"reason": "developer tools"}}),
        flags: serde_json::json!({}),
        audit: Some(serde_json::json!({
            "passed": !i.is_multiple_of(7),
            "violations": if i.is_multiple_of(7) { serde_json::json!([{"type": "missing", "message": "no portfolio", "severity": "error"}]) } else { serde_json::json!([]) },
            "summary": "A complete application.",
        })),
    }
}

async fn seed(kaiwa: &kaiwa::Kaiwa) {
    let store = kaiwa.store();
    for i in 0..APPLICATIONS {
        for (flow, chat) in [
            ("interview", format!("a{i}")),
            ("helpdesk", format!("h{i}")),
        ] {
            let key = SessionKey {
                platform: Platform::Telegram,
                chat,
                thread: String::new(),
                user: format!("{}", 10_000 + i),
            };
            let mut changes = vec![
                StateChange::AddUserMessage {
                    text: "Here is my answer, in a sentence or two.".into(),
                },
                StateChange::AddAssistantMessage {
                    text: "Thank you. Next question?".into(),
                    trace: None,
                },
            ];
            if flow == "interview" {
                changes.push(StateChange::SaveSubmission {
                    submission: submission(i),
                });
            } else {
                changes.push(StateChange::SaveTicket {
                    ticket: Ticket {
                        ticket_no: 1,
                        question: format!("How do I change setting number {i} of the export?"),
                        plan: vec![],
                        sub_answers: serde_json::json!({}),
                        answer: "See the user guide.".into(),
                        sources: if i.is_multiple_of(2) {
                            vec![]
                        } else {
                            vec!["en/user-guide.md#Export".into()]
                        },
                        feedback: Some(
                            if i.is_multiple_of(3) {
                                "not_solved"
                            } else {
                                "solved"
                            }
                            .into(),
                        ),
                    },
                });
            }
            store
                .commit_turn(TurnCommit {
                    session: SessionRecord::draft(key, flow),
                    user: UserRef {
                        id: format!("{}", 10_000 + i),
                        display_name: format!("Applicant {i:04}"),
                        language: None,
                    },
                    finish_session: None,
                    processed: None,
                    changes,
                    llm_calls: vec![],
                })
                .await
                .expect("seeds");
        }
    }
    let admin = ConsoleAdmin {
        platform: Platform::Telegram,
        user_id: "9".into(),
        name: "Bench".into(),
    };
    store
        .console_session_put(
            &token_hash(COOKIE),
            &ConsoleSession {
                admin,
                csrf: "csrf".into(),
                admins: kaiwa.orchestrator().for_people().admins_fingerprint(),
                expires_at: chrono::Utc::now() + chrono::Duration::hours(1),
            },
        )
        .await
        .expect("a session");
}

fn pages(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../config");
    let settings: Settings = toml::from_str(&format!(
        r#"
database_url = "sqlite://{}/kaiwa.db"
[flows]
forms_dir = "{config}/forms"
kb_dir = "{config}/kb"
books = "{config}/books.toml"
[telegram]
admins = [9]
"#,
        dir.path().display()
    ))
    .expect("settings");
    let (base, _kaiwa) = runtime.block_on(async {
        let kaiwa = kaiwa::Kaiwa::builder(settings)
            .build()
            .await
            .expect("kaiwa");
        seed(&kaiwa).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let address = listener.local_addr().expect("address");
        let router = kaiwa.console(&format!("http://{address}"));
        tokio::spawn(async move { axum::serve(listener, router).await });
        (format!("http://{address}"), kaiwa)
    });
    let client = reqwest::Client::new();
    let mut group = c.benchmark_group("console_1000_applications");
    group
        .measurement_time(Duration::from_secs(5))
        .sample_size(20);
    for (name, path) in [
        ("applications_newest", "/applications"),
        (
            "applications_filtered_sorted_page_10",
            "/applications?form=engineer&status=submitted&sort=name&page=10",
        ),
        ("application_detail", "/applications/500"),
        ("helpdesk", "/helpdesk"),
        ("knowledge_gaps", "/helpdesk/gaps"),
        ("sessions_find", "/sessions?user=applicant%2005"),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                runtime.block_on(async {
                    let page = client
                        .get(format!("{base}{path}"))
                        .header("cookie", format!("kaiwa_console={COOKIE}"))
                        .send()
                        .await
                        .expect("answers");
                    assert!(page.status().is_success(), "{path}: {}", page.status());
                    page.bytes().await.expect("a page").len()
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, pages);
criterion_main!(benches);

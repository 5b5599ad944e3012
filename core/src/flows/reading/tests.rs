//! Reading flow tests: the floor in both modes, guided vs freeform with a model (the model is
//! not even offered `present_options` in freeform), options answered by choice and by text,
//! status changes, and delegation to the BookGuide.

use super::*;
use crate::i18n::has_japanese;

use crate::jobs::weekly_review;
use crate::llm::scripted::ScriptedModel;
use crate::llm::{ChatMessage, ChatRequest, ChatResponse, ModelRouter};
use crate::message::{Body, Incoming, Platform, SessionKey, UserRef};

use crate::store::sqlite::SqliteStore;
use crate::store::{Reads, Store};
use crate::testing::{FlowHarness, Place, RecordingOutbox};
use serde_json::json;

/// A reader in a Telegram chat in the shared [`FlowHarness`], with the reading flows.
struct Harness(FlowHarness);

impl std::ops::Deref for Harness {
    type Target = FlowHarness;
    fn deref(&self) -> &FlowHarness {
        &self.0
    }
}

impl Harness {
    async fn new(models: ModelRouter) -> Harness {
        Harness::speaking(models, None).await
    }

    /// A reader whose app reports `language` (Telegram's `language_code`).
    async fn speaking(models: ModelRouter, language: Option<&str>) -> Harness {
        let catalogue = Arc::new(
            Catalogue::parse(include_str!("../../../../config/books.toml")).expect("catalogue"),
        );
        let guide = Arc::new(BookGuide::new(catalogue.clone(), None));
        let flows: Vec<Arc<dyn crate::flow::Flow>> = vec![
            Arc::new(ReadingFlow::new(catalogue.clone(), guide.clone())),
            Arc::new(onboarding::OnboardingFlow::new().with_guide(guide)),
            Arc::new(mentor::MentorFlow::new().with_catalogue(catalogue.clone())),
            Arc::new(recommendation::RecommendFlow::new(catalogue)),
        ];
        let place = Place {
            platform: Platform::Telegram,
            chat: "42".into(),
            thread: String::new(),
            user: UserRef {
                id: "reader".into(),
                display_name: "Mika".into(),
                language: language.map(str::to_string),
            },
            flow: Some(ID.into()),
            flow_arg: None,
        };
        Harness(FlowHarness::new("sqlite::memory:", flows, models, place).await)
    }

    async fn record(&self) -> crate::store::reading::ReadingRecord {
        self.store
            .reading_records(Platform::Telegram, "reader")
            .await
            .expect("records")
            .remove(0)
    }

    /// The reader's profile entries, oldest first.
    async fn profile(&self) -> Vec<crate::store::reading::ProfileEntry> {
        self.store
            .profile_entries(Platform::Telegram, "reader")
            .await
            .expect("profile")
    }

    /// Asserts that `asked` is kept as a question note on the reader's book.
    async fn assert_question_note(&self, asked: &str) {
        let record = self.record().await;
        let insights = self.store.insights(record.id).await.expect("insights");
        assert!(
            insights
                .iter()
                .any(|i| i.kind == InsightKind::Question && i.text == asked),
            "{asked}: kept as a question note on the book: {insights:?}"
        );
    }
}

fn last(texts: &[String]) -> String {
    texts.last().cloned().unwrap_or_default()
}

#[tokio::test]
async fn without_a_model_messages_become_insights_and_moods_come_from_buttons() {
    let h = Harness::new(ModelRouter::none()).await;
    let greeting = h.say("/reading start kokoro").await;
    assert!(
        greeting[0].contains("«Kokoro»"),
        "the catalogue title is used: {greeting:?}"
    );
    h.choose(&["curious"]).await;
    h.say("I started reading it yesterday").await;
    assert_eq!(
        h.record().await.status,
        ReadingStatus::Reading,
        "status detected by rules"
    );
    let saved = h.say("Why does Sensei keep his distance?").await;
    assert!(saved[0].contains("Saved as question"), "{saved:?}");
    h.say("/mode guided").await;
    let kinds = h.say("K reminds me of Raskolnikov").await;
    assert_eq!(last(&kinds), "What kind of note is this?");
    h.choose(&["connection"]).await;
    h.say("/status completed").await;
    h.choose(&["excited"]).await;
    let md = h.say("/insights").await;
    assert!(
        md[0].starts_with("## Kokoro\n- **question** Why does Sensei keep his distance?"),
        "{md:?}"
    );
    assert!(md[0].contains("- **connection** K reminds me of Raskolnikov"));

    let record = h.record().await;
    assert_eq!(record.status, ReadingStatus::Completed);
    assert_eq!(record.mode, InteractionMode::Guided);
    assert!(record.finished_at.is_some());
    let moods = h.store.moods(record.id).await.expect("moods");
    assert_eq!(
        moods.iter().map(|m| (m.phase, m.score)).collect::<Vec<_>>(),
        [(MoodPhase::Before, 4), (MoodPhase::After, 5)]
    );
}

/// A model that fails every call: the reader is greeted as without one — the book named,
/// the mood asked — in their language.
#[tokio::test]
async fn a_failing_model_leaves_the_greeting_of_the_rules() {
    for (start, book, prompt) in [
        (
            "/reading start kokoro",
            "«Kokoro»",
            "How do you feel right now?",
        ),
        ("/reading start こころ", "『こころ』", "今の気分は？"),
    ] {
        let failing: Arc<dyn crate::llm::ChatModel> = Arc::new(ScriptedModel::new([]));
        let h = Harness::new(ModelRouter::new(Some(failing))).await;
        let greeting = h.say(start).await;
        assert!(greeting[0].contains(book), "{greeting:?}");
        assert_eq!(
            h.outbox.last_options().map(|o| o.prompt).as_deref(),
            Some(prompt),
            "{greeting:?}"
        );
    }
}

fn tools_of(r: &ChatRequest) -> Vec<String> {
    r.tools.iter().map(|t| t.name.clone()).collect()
}

/// Plays the Reading agent (and the BookGuide behind `ask_book_guide`).
fn reading_model() -> ScriptedModel {
    ScriptedModel::repeating(|r| {
        let tools = tools_of(r);
        let after_tool = matches!(r.messages.last(), Some(ChatMessage::Tool { .. }));
        if tools.iter().any(|t| t == "save_insight") {
            let user = r.last_user_text().to_string();
            if after_tool {
                return ChatResponse::text("Thank you for sharing.");
            }
            if user == "__session_init__" {
                return ChatResponse::text("Welcome to Kokoro!");
            }
            if user.contains("Who is K") {
                return ChatResponse::tool_call("ask_book_guide", json!({"question": user}));
            }
            if tools.iter().any(|t| t == "present_options") && !user.starts_with("Moved") {
                return ChatResponse::tool_call(
                    "present_options",
                    json!({"prompt": "How did it make you feel?", "options": ["Moved", "Puzzled", "Inspired"], "allow_multiple": true}),
                );
            }
            return ChatResponse::tool_call(
                "save_insight",
                json!({"kind": "impression", "text": user}),
            );
        }
        // the BookGuide's nodes
        let schema: String = r.tools.iter().map(|t| t.parameters.to_string()).collect();
        if schema.contains("subtasks") {
            return ChatResponse::tool_call(
                "respond",
                json!({"subtasks": ["Who is K in Kokoro?"]}),
            );
        }
        if schema.contains("is_sufficient") {
            return ChatResponse::tool_call(
                "respond",
                json!({"is_sufficient": true, "feedback": ""}),
            );
        }
        if tools.iter().any(|t| t == "get_book_info") {
            return if after_tool {
                ChatResponse::text("K is Sensei's friend [books.toml#Kokoro].")
            } else {
                ChatResponse::tool_call("get_book_info", json!({"title": "Kokoro"}))
            };
        }
        ChatResponse::text("K is Sensei's old friend, whose fate shapes Sensei's guilt [1].")
    })
}

#[tokio::test]
async fn present_options_is_offered_to_the_model_only_in_guided_mode() {
    let model = reading_model();
    let h = Harness::new(ModelRouter::new(Some(Arc::new(model.clone())))).await;
    let hello = h.say("/reading start Kokoro").await;
    assert_eq!(hello, ["Welcome to Kokoro!"]);
    h.say("/status reading").await;
    let freeform = h.say("The letter at the end is heartbreaking").await;
    assert_eq!(freeform, ["Thank you for sharing."]);
    let reading_calls: Vec<ChatRequest> = model
        .requests()
        .into_iter()
        .filter(|r| tools_of(r).contains(&"save_insight".to_string()))
        .collect();
    assert!(
        reading_calls
            .iter()
            .all(|r| !tools_of(r).contains(&"present_options".to_string())),
        "freeform: not offered"
    );

    h.say("/mode guided").await;
    let guided = h.say("I finished part one").await;
    assert_eq!(last(&guided), "How did it make you feel?");
    let options = h.outbox.last_options().expect("options");
    assert!(options.allow_multiple);
    // answered by choice: several values at once
    let answered = h.choose(&["Moved", "Inspired"]).await;
    assert_eq!(answered, ["Thank you for sharing."]);
    let last_request = model
        .requests()
        .into_iter()
        .rev()
        .find(|r| tools_of(r).contains(&"save_insight".to_string()))
        .expect("reading call");
    assert!(tools_of(&last_request).contains(&"present_options".to_string()));
    let insights = h
        .store
        .insights(h.record().await.id)
        .await
        .expect("insights");
    assert_eq!(
        insights.last().map(|i| i.text.as_str()),
        Some("Moved, Inspired")
    );

    // options can be ignored: free text still works
    h.say("Sensei is a lonely man").await;
    let also_text = h.say("Moved by his honesty").await;
    assert_eq!(also_text, ["Thank you for sharing."]);
    let insights = h
        .store
        .insights(h.record().await.id)
        .await
        .expect("insights");
    assert_eq!(
        insights.last().map(|i| i.text.as_str()),
        Some("Moved by his honesty")
    );
}

#[tokio::test]
async fn expert_questions_go_to_the_book_guide() {
    let model = reading_model();
    let h = Harness::new(ModelRouter::new(Some(Arc::new(model.clone())))).await;
    h.say("/reading start Kokoro").await;
    let reply = h.say("Who is K, really?").await;
    assert_eq!(reply, ["Thank you for sharing."]);
    let guide_result = model
        .requests()
        .into_iter()
        .filter_map(|r| match r.messages.last() {
            Some(ChatMessage::Tool { content, .. })
                if tools_of(&r).contains(&"ask_book_guide".to_string()) =>
            {
                Some(content.clone())
            }
            _ => None,
        })
        .next()
        .expect("the BookGuide's answer went back to the Reading agent");
    assert!(
        guide_result.contains("[1] books.toml#Kokoro"),
        "{guide_result}"
    );
}

#[tokio::test]
async fn a_stale_session_key_never_reaches_another_users_books() {
    let h = Harness::new(ModelRouter::none()).await;
    h.say("/reading start Snow Country").await;
    let key = SessionKey {
        platform: Platform::Telegram,
        chat: "42".into(),
        thread: String::new(),
        user: "someone-else".into(),
    };
    assert!(h.store.active_session(&key).await.expect("loads").is_none());
    assert!(
        h.store
            .reading_records(Platform::Telegram, "someone-else")
            .await
            .expect("records")
            .is_empty()
    );
}

// ---- Onboarding, Mentor, Recommendation ----

use crate::store::reading::{InsightKind as Kind, ProfileKind, ReadingChange as RC};

async fn seed(store: &SqliteStore, user: &str, changes: Vec<RC>) {
    let key = SessionKey {
        platform: Platform::Telegram,
        chat: format!("seed-{user}"),
        thread: String::new(),
        user: user.into(),
    };
    let session = store
        .active_session(&key)
        .await
        .expect("loads")
        .unwrap_or_else(|| crate::store::SessionRecord::draft(key, "reading"));
    store
        .commit_turn(crate::store::TurnCommit {
            session,
            user: UserRef {
                id: user.into(),
                display_name: user.into(),
                language: None,
            },
            finish_session: None,
            processed: None,
            changes: changes
                .into_iter()
                .map(|change| crate::store::StateChange::Reading { change })
                .collect(),
            llm_calls: vec![],
        })
        .await
        .expect("seeded");
}

#[tokio::test]
async fn the_mentor_context_covers_7_or_30_days() {
    let store = SqliteStore::connect("sqlite::memory:")
        .await
        .expect("store");
    let t = |s: &str| s.to_string();
    seed(
        &store,
        "u",
        vec![
            RC::OpenRecord {
                title: t("Kokoro"),
                author: None,
                details: None,
            },
            RC::SetStatus {
                title: t("Kokoro"),
                status: ReadingStatus::Completed,
            },
            RC::AddInsight {
                title: t("Kokoro"),
                kind: Kind::Learning,
                text: t("old insight"),
            },
            RC::OpenRecord {
                title: t("Kitchen"),
                author: None,
                details: None,
            },
            RC::SetStatus {
                title: t("Kitchen"),
                status: ReadingStatus::Completed,
            },
            RC::AddInsight {
                title: t("Kitchen"),
                kind: Kind::Impression,
                text: t("fresh insight"),
            },
            RC::OpenRecord {
                title: t("Snow Country"),
                author: None,
                details: None,
            },
            RC::SetStatus {
                title: t("Snow Country"),
                status: ReadingStatus::Reading,
            },
            RC::AddProfileEntry {
                kind: ProfileKind::Goal,
                text: t("read 20 books a year"),
            },
        ],
    )
    .await;
    // Kokoro was finished, and its insight written, 20 days ago
    let twenty_days_ago = (chrono::Utc::now() - chrono::Duration::days(20)).timestamp_millis();
    sqlx::query("UPDATE reading_records SET finished_ms = ? WHERE title = 'Kokoro'")
        .bind(twenty_days_ago)
        .execute(store.pool())
        .await
        .expect("backdate");
    sqlx::query("UPDATE insights SET created_ms = ? WHERE text = 'old insight'")
        .bind(twenty_days_ago)
        .execute(store.pool())
        .await
        .expect("backdate");

    let week = mentor::mentor_context(&store, Platform::Telegram, "u", 7)
        .await
        .expect("week");
    assert_eq!(week.books_finished, ["Kitchen"]);
    assert_eq!(week.insights.len(), 1);
    assert_eq!(week.books_reading, ["Snow Country"]);
    let month = mentor::mentor_context(&store, Platform::Telegram, "u", 30)
        .await
        .expect("month");
    assert_eq!(month.books_finished.len(), 2);
    assert_eq!(month.insights.len(), 2);
    assert_eq!(month.goals, ["read 20 books a year"]);

    let review = mentor::template_review(&week, "en");
    assert!(
        review.starts_with("Well done this week: 1 book(s) finished and 1 insight(s) recorded."),
        "{review}"
    );
    assert!(review.contains("“fresh insight”"));
    assert!(review.contains("Next step: read 10 pages of «Snow Country»"));
    let quiet = mentor::template_review(
        &mentor::mentor_context(&store, Platform::Telegram, "nobody", 7)
            .await
            .expect("quiet"),
        "en",
    );
    assert!(
        quiet.starts_with("A quiet this week — that's fine") || quiet.starts_with("A quiet"),
        "{quiet}"
    );
    assert!(
        quiet.contains("Next step"),
        "a quiet week still gets a concrete next step"
    );
}

/// A note shares "the" with every summary: a recommendation's reason is a word that says
/// something, or the book is offered as well-loved, never "it matches" by grammar alone.
#[test]
fn a_recommendation_matches_a_note_by_its_words_not_its_grammar() {
    let catalogue =
        Catalogue::parse(include_str!("../../../../config/books.toml")).expect("catalogue");
    let grammar_only = recommendation::rank(
        &catalogue,
        &["It is the one that I was in".to_string()],
        &[],
        3,
    );
    assert!(
        grammar_only.iter().all(|(_, why)| why.is_empty()),
        "well-loved books, no reason: {grammar_only:?}"
    );
    let japanese = recommendation::rank(&catalogue, &["それはですます".to_string()], &[], 3);
    assert!(
        japanese.iter().all(|(_, why)| why.is_empty()),
        "{japanese:?}"
    );
    // the words that say something still match
    let lonely = recommendation::rank(&catalogue, &["the lonely boy".to_string()], &[], 3);
    assert_eq!(
        lonely.first().map(|(t, _)| t.as_str()),
        Some("Night on the Galactic Railroad"),
        "{lonely:?}"
    );
    // one book that matches, and well-loved ones make up the three
    let one = recommendation::rank(&catalogue, &["Giovanni".to_string()], &[], 3);
    assert_eq!(one.len(), 3, "{one:?}");
    assert_eq!(
        one[0],
        ("Night on the Galactic Railroad".into(), "Giovanni".into())
    );
    assert!(one[1..].iter().all(|(_, why)| why.is_empty()), "{one:?}");
}

#[tokio::test]
async fn a_recommendation_never_repeats_a_logged_book() {
    let catalogue =
        Catalogue::parse(include_str!("../../../../config/books.toml")).expect("catalogue");
    let picks = recommendation::rank(
        &catalogue,
        &["Natsume Soseki novels".to_string()],
        &["Kokoro".to_string()],
        3,
    );
    assert!(picks.iter().any(|(t, _)| t == "I Am a Cat"), "{picks:?}");
    assert!(!picks.iter().any(|(t, _)| t == "Kokoro"));

    // the model tries to recommend the logged book: refused in code, it picks another
    let model = ScriptedModel::responses([
        ChatResponse::tool_call(
            "save_recommendation",
            json!({"title": "Kokoro", "reason": "you love Soseki"}),
        ),
        ChatResponse::tool_call(
            "save_recommendation",
            json!({"title": "I Am a Cat", "reason": "more Soseki, with humour"}),
        ),
        ChatResponse::text("Here you go."),
    ]);
    let h = Harness::new(ModelRouter::new(Some(Arc::new(model.clone())))).await;
    seed(
        &h.store,
        "reader",
        vec![RC::OpenRecord {
            title: "Kokoro".into(),
            author: None,
            details: None,
        }],
    )
    .await;
    let reply = h.say("/recommend").await;
    assert_eq!(
        reply,
        ["Books for you:\n- «I Am a Cat» — Natsume Soseki: more Soseki, with humour"]
    );
    let refusal = match model.requests()[1].messages.last() {
        Some(ChatMessage::Tool { content, .. }) => content.clone(),
        _ => String::new(),
    };
    assert!(refusal.contains("already logged"), "{refusal}");
}

#[tokio::test]
async fn onboarding_asks_goal_interest_and_wish_and_saves_the_answers() {
    let h = Harness::new(ModelRouter::none()).await;
    assert_eq!(
        h.say("/onboarding").await,
        ["What would you like reading to bring you — a goal, or who you want to become?"]
    );
    h.say("Read more classics").await;
    h.say("nothing in particular").await;
    let done = h.say("The Tale of Genji").await;
    assert!(done[0].starts_with("Thank you! Your profile is saved."));
    let entries = h.profile().await;
    assert_eq!(
        entries
            .iter()
            .map(|e| (e.kind, e.text.as_str()))
            .collect::<Vec<_>>(),
        [
            (ProfileKind::Goal, "Read more classics"),
            (ProfileKind::BookWish, "The Tale of Genji")
        ]
    );
    // rerunnable: /profile shows what is known and asks again
    let again = h.say("/profile").await;
    assert!(again[0].contains("- goal: Read more classics"), "{again:?}");
}

#[tokio::test]
async fn the_mentor_and_onboarding_agents_use_their_tools_with_a_model() {
    let model = ScriptedModel::responses([
        // Onboarding: saves two entries, then asks a follow-up
        ChatResponse::tool_call(
            "save_profile_entry",
            json!({"kind": "interest", "text": "Meiji era"}),
        ),
        ChatResponse::tool_call(
            "save_profile_entry",
            json!({"kind": "goal", "text": "one classic a month"}),
        ),
        ChatResponse::text("Lovely! Which classic first?"),
        // Mentor: asks for the wrong period (refused), then the right one, then saves
        ChatResponse::tool_call("get_mentor_context", json!({"period_days": 7})),
        ChatResponse::tool_call("get_mentor_context", json!({"period_days": 30})),
        ChatResponse::tool_call(
            "save_mentor_feedback",
            json!({"feedback_type": "monthly", "content": "A calm month. Next step: 10 pages of Kokoro."}),
        ),
    ]);
    let h = Harness::new(ModelRouter::new(Some(Arc::new(model.clone())))).await;
    h.say("/onboarding").await;
    assert_eq!(
        h.say("I love the Meiji era and want to read one classic a month")
            .await,
        ["Lovely! Which classic first?"]
    );
    let entries = h.profile().await;
    assert_eq!(entries.len(), 2);

    let review = h.say("/review monthly").await;
    assert_eq!(review[0], "A calm month. Next step: 10 pages of Kokoro.");
    let refused = match model.requests()[4].messages.last() {
        Some(ChatMessage::Tool { content, .. }) => content.clone(),
        _ => String::new(),
    };
    assert!(refused.contains("this review covers 30 days"), "{refused}");
    let context = match model.requests()[5].messages.last() {
        Some(ChatMessage::Tool { content, .. }) => content.clone(),
        _ => String::new(),
    };
    assert!(context.contains("Goal: one classic a month"), "{context}");
    assert_eq!(model.remaining(), 0);
}

#[tokio::test]
async fn an_opted_in_reader_gets_the_weekly_review_once_per_week_from_the_scheduler() {
    use crate::orchestrator::Outbox;
    use chrono::{DateTime, Duration, Utc};
    let h = Harness::new(ModelRouter::none()).await;
    h.say("/reading start kokoro").await;
    h.choose(&["curious"]).await;
    h.say("Sensei's loneliness feels very modern").await;
    let typo = h.say("/review weekly on Asia/Tokoy").await;
    assert!(typo[0].contains("time zone \"Asia/Tokoy\""), "{typo:?}");
    assert!(
        h.store.weekly_reviews().await.expect("subs").is_empty(),
        "an unknown zone subscribes nobody"
    );
    let on = h.say("/review weekly on Asia/Tokyo").await;
    assert!(
        on[0].contains("every Sunday evening (Asia/Tokyo)"),
        "{on:?}"
    );
    let subs = h.store.weekly_reviews().await.expect("subs");
    assert_eq!(subs.len(), 1);
    assert_eq!(subs[0].key.chat, "42");
    assert_eq!(subs[0].timezone, "Asia/Tokyo");

    let recording = Arc::new(RecordingOutbox::default());
    let outbox: Arc<dyn Outbox> = recording.clone();
    let outbox_for = move |p: Platform| (p == Platform::Telegram).then(|| outbox.clone());
    let since = subs[0].since;
    // the next Sunday 19:00 in Tokyo, whatever today is
    let mut step = since;
    let date = loop {
        step += Duration::hours(1);
        if let Some(date) = weekly_review::due_review(step, "Asia/Tokyo", since) {
            break date;
        }
    };
    use chrono::TimeZone;
    let due = chrono_tz::Asia::Tokyo
        .from_local_datetime(&date.and_hms_opt(19, 0, 0).expect("time"))
        .earliest()
        .expect("exists")
        .with_timezone(&Utc);
    let before: DateTime<Utc> = due - Duration::minutes(1);
    let run = |now| weekly_review::send_due_reviews(&h.orchestrator, now, outbox_for.clone());
    assert_eq!(
        run(before).await.expect("tick"),
        0,
        "not before Sunday evening"
    );
    assert_eq!(run(due).await.expect("tick"), 1);
    assert_eq!(
        run(due + Duration::hours(3)).await.expect("tick"),
        0,
        "once a week"
    );
    let key = SessionKey {
        platform: Platform::Telegram,
        chat: "42".into(),
        thread: String::new(),
        user: "reader".into(),
    };
    let feedback: Vec<_> = h
        .store
        .recent_messages(
            h.store
                .active_session(&key)
                .await
                .expect("loads")
                .expect("the review's session")
                .id,
            10,
        )
        .await
        .expect("messages");
    assert!(
        feedback
            .iter()
            .any(|m| m.text.contains("Sensei's loneliness")),
        "the review quotes an insight: {feedback:?}"
    );
    let delivered = recording.items();
    assert!(
        delivered
            .iter()
            .all(|(k, _)| k.chat == "42" && k.user == "reader"),
        "sent to the place where the reader opted in"
    );
    assert!(
        recording
            .texts()
            .iter()
            .any(|t| t.contains("Sensei's loneliness")),
        "{:?}",
        recording.texts()
    );
    assert_eq!(
        run(due + Duration::days(7)).await.expect("tick"),
        1,
        "and again the next week"
    );

    h.say("/review weekly off").await;
    assert!(h.store.weekly_reviews().await.expect("subs").is_empty());
    assert_eq!(run(due + Duration::days(14)).await.expect("tick"), 0);
}

#[tokio::test]
async fn mydata_shows_only_my_data_and_forget_deletes_it_after_a_confirmation() {
    let h = Harness::new(ModelRouter::none()).await;
    h.say("/reading start kokoro").await;
    h.choose(&["curious"]).await;
    h.say("Sensei's secret weighs on him").await;
    h.say("/review weekly on Asia/Tokyo").await;
    // another reader, elsewhere
    for (id, text) in [
        ("o1", "/reading start sanshiro"),
        ("o2", "Mineko is a puzzle"),
    ] {
        let incoming = Incoming {
            platform: Platform::Telegram,
            chat: "77".into(),
            thread: String::new(),
            user: UserRef {
                id: "other".into(),
                display_name: "Ken".into(),
                language: None,
            },
            message_id: id.into(),
            body: Body::from_text(text),
            flow: Some(ID.into()),
            flow_arg: None,
            shared: false,
        };
        h.orchestrator
            .handle(incoming, &h.outbox)
            .await
            .expect("turn");
    }
    let mine = h.say("/mydata").await;
    let json = mine[0].split_once('\n').map(|(_, j)| j).unwrap_or_default();
    let data: serde_json::Value = serde_json::from_str(json).expect("JSON");
    assert_eq!(data["user"], "reader");
    assert_eq!(data["reading"][0]["title"], "Kokoro");
    assert!(json.contains("Sensei's secret weighs on him"));
    assert!(
        !json.contains("Mineko") && !json.contains("sanshiro"),
        "{json}"
    );
    assert_eq!(data["weekly_review"][0]["timezone"], "Asia/Tokyo");

    let count = |d: &serde_json::Value| {
        [
            "sessions",
            "reading",
            "profile_entries",
            "mentor_feedback",
            "weekly_review",
        ]
        .iter()
        .map(|k| d[k].as_array().map_or(0, Vec::len))
        .sum::<usize>()
    };
    assert!(count(&data) >= 3);

    let asked = h.say("/forget").await;
    assert!(asked[0].contains("Delete everything"), "{asked:?}");
    let kept = h.choose(&["forget:no"]).await;
    assert_eq!(kept, ["Nothing was deleted."]);
    let after_no = h
        .store
        .user_data(Platform::Telegram, "reader")
        .await
        .expect("data");
    assert_eq!(count(&after_no), count(&data));

    h.say("/forget").await;
    let done = h.choose(&["forget:yes"]).await;
    assert!(
        done[0].contains("everything I had stored about you is deleted"),
        "{done:?}"
    );
    let gone = h
        .store
        .user_data(Platform::Telegram, "reader")
        .await
        .expect("data");
    assert_eq!(count(&gone), 0, "{gone}");
    assert!(gone["profile"].as_array().is_some_and(Vec::is_empty));
    assert!(h.store.weekly_reviews().await.expect("subs").is_empty());
    let other = h
        .store
        .user_data(Platform::Telegram, "other")
        .await
        .expect("data");
    assert_eq!(
        other["reading"][0]["title"], "sanshiro",
        "another user's data stays"
    );
    // the next message starts afresh
    let again = h.say("/reading start kokoro").await;
    assert!(again[0].contains("«Kokoro»"), "{again:?}");
}

#[tokio::test]
async fn typing_at_the_mood_question_keeps_the_note_and_asks_the_mood_again() {
    let h = Harness::new(ModelRouter::none()).await;
    h.say("/lang ja").await;
    h.say("/reading start こころ").await;
    // a thought typed instead of a mood: kept, and the mood asked again
    let kept = h.say("先生の孤独が気になる").await;
    assert!(kept[0].contains("として記録しました"), "{kept:?}");
    assert_eq!(last(&kept), "今の気分は？", "{kept:?}");
    let record = h.record().await;
    let notes = h.store.insights(record.id).await.expect("insights");
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].text, "先生の孤独が気になる");
    // the mood typed by its label is the mood, not a note
    let mood = h.say("わくわく").await;
    assert!(
        mood[0].starts_with("記録しました。読書を楽しんで"),
        "{mood:?}"
    );
    let moods = h.store.moods(record.id).await.expect("moods");
    assert_eq!(moods.len(), 1);
    assert_eq!(moods[0].label, "excited");
    // a bare option number after the options are gone: not a note
    let number = h.say("2").await;
    assert!(
        number[0].contains("選択肢はもう表示されていません"),
        "{number:?}"
    );
    assert_eq!(
        h.store.insights(record.id).await.expect("insights").len(),
        1
    );
}

/// A question of fact about the book (who wrote it, when, where it is set, its
/// characters) is the BookGuide's, asked at the mood question or later: answered from the
/// catalogue, not only noted.
#[tokio::test]
async fn a_question_of_fact_about_the_book_reaches_the_book_guide() {
    for (lang, asked, says) in [
        ("en", "Who wrote this book?", Some("Natsume Soseki")),
        ("en", "When was it published?", Some("1914")),
        ("en", "Where is the story set?", None),
        ("en", "Who are the main characters?", None),
        ("ja", "この本を書いたのは誰ですか？", Some("夏目漱石")),
        ("ja", "いつ出版されたの？", Some("1914")),
        ("ja", "登場人物を教えて", None),
        // what it is about: the entry's summary ("I have no source" before)
        ("en", "What is the book about?", Some("Sensei")),
        ("ja", "あらすじを教えてください", Some("Sensei")),
    ] {
        let h = Harness::speaking(ModelRouter::none(), Some(lang)).await;
        h.say("/reading start kokoro").await;
        let reply = h.say(asked).await;
        assert!(guide_answered(&reply), "{asked}: {reply:?}");
        if let Some(says) = says {
            assert!(reply.iter().any(|t| t.contains(says)), "{asked}: {reply:?}");
        }
        h.assert_question_note(asked).await;
    }
}

/// The mood may be ignored (seed 004: tap an option, or ignore them and write): asked
/// again once after a note, not after every note that follows.
#[tokio::test]
async fn a_mood_ignored_twice_is_not_asked_a_third_time() {
    for (start, notes, question) in [
        (
            "/reading start Kokoro",
            [
                "I chose it for the letters",
                "Sensei seems lonely",
                "K is a puzzle",
            ],
            "How do you feel right now?",
        ),
        (
            "/reading start こころ",
            ["手紙の部分が気になって", "先生は孤独だ", "Kが謎めいている"],
            "今の気分は？",
        ),
    ] {
        let h = Harness::new(ModelRouter::none()).await;
        h.say(start).await;
        let first = h.say(notes[0]).await;
        assert_eq!(last(&first), question, "asked again once: {first:?}");
        for note in &notes[1..] {
            let reply = h.say(note).await;
            assert!(
                !reply.iter().any(|t| t.contains(question)),
                "{note}: asked again: {reply:?}"
            );
            assert!(
                ["Noted as", "Saved as", "として記録しました"]
                    .iter()
                    .any(|s| reply[0].contains(s)),
                "{reply:?}"
            );
        }
        let record = h.record().await;
        let kept = h.store.insights(record.id).await.expect("insights");
        assert_eq!(kept.len(), 3, "every note kept: {kept:?}");
    }
}

#[tokio::test]
async fn expert_questions_reach_the_book_guide_which_cites_only_this_book() {
    let h = Harness::new(ModelRouter::none()).await;
    h.say("/lang ja").await;
    h.say("/reading start こころ").await;
    h.choose(&["calm"]).await;
    // seed 004's own example: routed to the BookGuide, not saved as a plain note
    let paradigm = h.say("「パラダイム」って何ですか？").await;
    let text = paradigm.join("\n");
    assert!(
        text.contains("『こころ』について、この質問に答えられる資料が手元にありません"),
        "{text}"
    );
    // kept as a question note, and said so (not suggested as if it were not)
    assert!(text.contains("疑問として記録しました"), "{text}");
    for other in ["Pillow", "Little Prince", "books.toml#"] {
        assert!(!text.contains(other), "no other book's passage: {text}");
    }

    let h = Harness::new(ModelRouter::none()).await;
    h.say("/reading start Kokoro").await;
    h.choose(&["calm"]).await;
    // a question the book's own entry answers cites it, and only it
    let who = h.say("Who is Sensei in Kokoro, really?").await.join("\n");
    assert!(who.contains("books.toml#Kokoro"), "{who}");
    assert!(!who.contains("books.toml#The"), "{who}");
    let here = h.say("What does 'paradigm' mean here?").await.join("\n");
    assert!(
        here.contains("I have no source that answers this for «Kokoro»"),
        "{here}"
    );
    assert!(here.contains("I've kept it as a question note"), "{here}");
    let record = h.record().await;
    let notes = h.store.insights(record.id).await.expect("insights");
    assert_eq!(notes.last().map(|n| n.kind), Some(InsightKind::Question));
}

#[tokio::test]
async fn the_mentor_is_a_conversation_and_saves_a_review_only_when_asked() {
    let h = Harness::new(ModelRouter::none()).await;
    h.say("/reading start Kokoro").await;
    h.choose(&["calm"]).await;
    h.say("/status reading").await;
    h.say("I learned how lonely Sensei is.").await;
    let opened = h
        .send(Body::Command {
            name: "review".into(),
            args: String::new(),
        })
        .await;
    assert!(opened[0].contains("reading mentor"), "{opened:?}");
    assert!(
        h.outbox.last_options().is_some(),
        "a review is offered, not written"
    );
    let saved = |h: &Harness| {
        let store = h.store.clone();
        async move {
            store
                .user_data(Platform::Telegram, "reader")
                .await
                .expect("data")["mentor_feedback"]
                .as_array()
                .map_or(0, Vec::len)
        }
    };
    assert_eq!(saved(&h).await, 0);
    let review = h.choose(&["weekly"]).await;
    assert!(review[0].starts_with("Well done this week"), "{review:?}");
    assert_eq!(saved(&h).await, 1);
    // a follow-up question: answered from the review's data, nothing new saved
    let notes = h.say("What notes did I write?").await;
    assert!(
        notes[0].contains("I learned how lonely Sensei is."),
        "{notes:?}"
    );
    let books = h.say("Which book am I reading?").await;
    assert!(books[0].contains("In progress: Kokoro"), "{books:?}");
    assert_eq!(saved(&h).await, 1, "questions save no review");
    // /review weekly makes a new one
    h.say("/review weekly").await;
    assert_eq!(saved(&h).await, 2);
}

#[tokio::test]
async fn a_member_who_writes_japanese_is_answered_in_japanese_everywhere() {
    let h = Harness::new(ModelRouter::none()).await;
    // no /lang: the title written in Japanese is enough
    let greeting = h.say("/reading start こころ").await;
    assert!(
        greeting[0].starts_with("『こころ』を読む準備をしましょう"),
        "{greeting:?}"
    );
    let labels: Vec<String> = h
        .outbox
        .last_options()
        .expect("moods")
        .options
        .into_iter()
        .map(|o| o.label)
        .collect();
    assert_eq!(labels[0], "わくわく", "button labels too: {labels:?}");
    h.choose(&["calm"]).await;
    let note = h.say("先生の孤独が心に残った").await;
    assert!(note[0].contains("記録しました"), "{note:?}");
    // a new conversation with nothing written goes on in Japanese
    let mentor = h
        .send(Body::Command {
            name: "review".into(),
            args: String::new(),
        })
        .await;
    assert!(mentor[0].contains("読書メンター"), "{mentor:?}");
    // onboarding, started with Japanese
    let onboarding = h.say("/onboarding 歴史小説が好きです").await.join("\n");
    assert!(!onboarding.contains("Let's"), "{onboarding}");
    assert!(has_japanese(&onboarding), "{onboarding}");
}

/// A Japanese reader sees the catalogue's Japanese titles wherever a book is named: the
/// insights, the mentor's review and its follow-up (the kinds of notes too), the
/// recommendations (with the authors' Japanese names); an English reader the English ones.
#[tokio::test]
async fn a_japanese_reader_sees_the_books_by_their_japanese_titles() {
    for (lang, title, unwanted) in [
        ("ja", "『こころ』", ["Kokoro", "I Am a Cat"]),
        ("en", "«Kokoro»", ["こころ", "吾輩は猫である"]),
    ] {
        let h = Harness::speaking(ModelRouter::none(), Some(lang)).await;
        h.say("/reading start Kokoro").await;
        h.choose(&["calm"]).await;
        h.say(if lang == "ja" {
            "先生の孤独が心に残った"
        } else {
            "Sensei's loneliness stays with me"
        })
        .await;
        let insights = h.say("/insights").await.join("\n");
        let review = h.say("/review weekly").await.join("\n");
        let follow_up = h
            .say(if lang == "ja" {
                "どんな気づきがあった？"
            } else {
                "What did I note?"
            })
            .await
            .join("\n");
        let recommended = h.say("/recommend").await.join("\n");
        let shown = title.trim_matches(['『', '』', '«', '»']);
        assert!(insights.contains(shown), "{lang} insights: {insights}");
        assert!(review.contains(title), "{lang} review: {review}");
        assert!(follow_up.contains(title), "{lang} follow-up: {follow_up}");
        let kind = if lang == "ja" {
            "（感想）"
        } else {
            "(impression)"
        };
        assert!(follow_up.contains(kind), "{lang} follow-up: {follow_up}");
        // each pick by the title the reader knows
        let picks: Vec<&str> = recommended
            .lines()
            .filter(|l| l.starts_with("- "))
            .collect();
        assert!(!picks.is_empty(), "{recommended}");
        for line in picks {
            let title = line.split(['』', '»']).next().unwrap_or_default();
            let japanese = line.starts_with("- 『") && has_japanese(title);
            assert_eq!(japanese, lang == "ja", "{lang} recommendation: {line}");
            // and by its author's name as the reader knows it (夏目漱石)
            let author = line
                .split(" — ")
                .nth(1)
                .and_then(|rest| rest.split(':').next())
                .unwrap_or_default();
            assert_eq!(has_japanese(author), lang == "ja", "{lang} author: {line}");
        }
        for said in [&insights, &review, &follow_up, &recommended] {
            for word in unwanted {
                assert!(!said.contains(word), "{lang}: {word} in {said}");
            }
        }
    }
}

/// `/status` alone (or with a status it does not know) says the book's status and how to
/// change it, instead of asking to start a book that is open; a status is also taken by
/// its name in the reader's language (「/status 読書中」).
#[tokio::test]
async fn the_status_command_says_the_books_status_and_takes_its_names() {
    for (lang, now, by_name, set, later) in [
        (
            "ja",
            "『こころ』のステータスは「読書前」です",
            "/status 読書中",
            "ステータスを「読書中」にしました",
            "『こころ』のステータスは「読書中」です",
        ),
        (
            "en",
            "«Kokoro» is marked not started",
            "/status Reading",
            "Status set to reading",
            "«Kokoro» is marked reading",
        ),
    ] {
        let h = Harness::speaking(ModelRouter::none(), Some(lang)).await;
        // the companion asks which book: none to mark yet
        h.say("/reading").await;
        let none = h.say("/status").await.join("\n");
        assert!(none.contains("/reading start"), "{lang} no book: {none}");
        h.say("/reading start Kokoro").await;
        h.choose(&["calm"]).await;
        let shown = h.say("/status").await.join("\n");
        assert!(shown.contains(now), "{lang}: {shown}");
        assert!(
            shown.contains("completed"),
            "{lang}: how to change it: {shown}"
        );
        let changed = h.say(by_name).await.join("\n");
        assert!(changed.contains(set), "{lang}: {changed}");
        assert_eq!(h.record().await.status, ReadingStatus::Reading);
        let unknown = h.say("/status someday").await.join("\n");
        assert!(unknown.contains(later), "{lang}: {unknown}");
        assert_eq!(h.record().await.status, ReadingStatus::Reading);
    }
}

#[tokio::test]
async fn the_app_language_telegram_reports_is_used_when_nothing_is_written_yet() {
    let catalogue = Arc::new(
        Catalogue::parse(include_str!("../../../../config/books.toml")).expect("catalogue"),
    );
    let guide = Arc::new(BookGuide::new(catalogue.clone(), None));
    let place = Place {
        platform: Platform::Telegram,
        chat: "43".into(),
        thread: String::new(),
        user: UserRef {
            id: "yuki".into(),
            display_name: "Yuki".into(),
            language: Some("ja-JP".into()),
        },
        flow: Some(ID.into()),
        flow_arg: None,
    };
    let h = FlowHarness::new(
        "sqlite::memory:",
        vec![Arc::new(ReadingFlow::new(catalogue, guide))],
        ModelRouter::none(),
        place,
    )
    .await;
    let asked = h.say("/reading").await;
    assert_eq!(asked, ["どの本を読みますか？書名を送ってください。"]);
}

#[tokio::test]
async fn written_japanese_outranks_the_profile_and_the_profile_outranks_english_words() {
    // /lang ja, then a title in English: still Japanese
    let h = Harness::new(ModelRouter::none()).await;
    h.say("/lang ja").await;
    let greeting = h.say("/reading start Kokoro").await;
    assert!(greeting[0].contains("を読む準備"), "{greeting:?}");
    // /lang en, then a new conversation written in Japanese: Japanese
    let h = Harness::new(ModelRouter::none()).await;
    h.say("/lang en").await;
    let greeting = h.say("/reading start こころ").await;
    assert!(greeting[0].starts_with("『こころ』"), "{greeting:?}");
}

#[tokio::test]
async fn an_expert_question_reaches_the_book_guide_while_a_mood_is_asked() {
    // seed 004's own example, after a status change (which asks for the mood), in both
    // languages; the mood is asked again after the answer
    for (question, no_source, mood) in [
        (
            "第1章の「パラダイム」って何ですか？",
            "資料が手元にありません",
            "今の気分は？",
        ),
        (
            "What does 'paradigm' mean here?",
            "I have no source",
            "How do you feel right now?",
        ),
    ] {
        let h = Harness::new(ModelRouter::none()).await;
        h.say("/reading start kokoro").await;
        h.say("/status reading").await;
        let reply = h.say(question).await;
        // (the floor's acknowledgement of a note, not the guide's answer, which says it
        // kept the question)
        assert!(
            !reply
                .iter()
                .any(|t| t.starts_with("Noted as") || t.ends_with("として記録しました。")),
            "{question}: not a note: {reply:?}"
        );
        assert!(
            reply.iter().any(|t| t.contains(no_source)),
            "{question}: the BookGuide answers (here: it has no source): {reply:?}"
        );
        let options = h.outbox.last_options().expect("options");
        assert!(
            options.prompt.contains(mood) || options.prompt.contains("How do you feel"),
            "the mood is still asked: {options:?}"
        );
        h.assert_question_note(question).await;
    }
}

/// Whether `reply` has the BookGuide's answer: cited from the catalogue, or "no source".
fn guide_answered(reply: &[String]) -> bool {
    reply.iter().any(|t| {
        [
            "Sources:",
            "出典:",
            "I have no source",
            "資料が手元にありません",
        ]
        .iter()
        .any(|mark| t.contains(mark))
    })
}

/// Seed 004: an expert question reaches the BookGuide from any step, a profile question
/// (`/profile`, `/onboarding`) too: answered about the book read last and kept as a
/// question note on it; the profile question is asked again, and the question is not
/// saved as the reader's goal. Without a book, the guide answers all the same.
#[tokio::test]
async fn an_expert_question_between_the_profile_questions_reaches_the_book_guide() {
    for (lang, asks, goal_question, goal) in [
        (
            "ja",
            "先生の気持ちを説明して",
            "読書を通じて達成したいこと",
            "仕事の効率を上げたい",
        ),
        (
            "ja",
            "第1章の「パラダイム」って何ですか？",
            "読書を通じて達成したいこと",
            "仕事の効率を上げたい",
        ),
        (
            "en",
            "What does 'paradigm' mean here?",
            "What would you like reading to bring you",
            "To read more classics",
        ),
    ] {
        for command in ["/profile", "/onboarding"] {
            let h = Harness::speaking(ModelRouter::none(), Some(lang)).await;
            h.say("/reading start kokoro").await;
            h.say(command).await;
            let reply = h.say(asks).await;
            assert!(guide_answered(&reply), "{lang} {command}: {reply:?}");
            assert!(
                reply.last().is_some_and(|t| t.contains(goal_question)),
                "{lang} {command}: the profile question again: {reply:?}"
            );
            h.assert_question_note(asks).await;
            // the answer that follows is the goal; the question never was
            h.say(goal).await;
            let profile: Vec<(ProfileKind, String)> = h
                .profile()
                .await
                .into_iter()
                .filter(|e| e.kind != ProfileKind::Language)
                .map(|e| (e.kind, e.text))
                .collect();
            assert_eq!(
                profile,
                vec![(ProfileKind::Goal, goal.to_string())],
                "{lang}"
            );
        }
        // a goal that says what is beyond the reader is the goal, not a question
        let h = Harness::speaking(ModelRouter::none(), Some(lang)).await;
        h.say("/reading start kokoro").await;
        h.say("/profile").await;
        let beyond = if lang == "ja" {
            "経済のことがよくわからないので学びたい"
        } else {
            "I don't understand economics and want to learn"
        };
        let reply = h.say(beyond).await;
        assert!(!guide_answered(&reply), "{lang}: {reply:?}");
        assert!(
            h.profile()
                .await
                .iter()
                .any(|e| e.kind == ProfileKind::Goal && e.text == beyond),
            "{lang}: kept as the goal"
        );
        // no book yet: the guide answers all the same (from the catalogue, here that it
        // found nothing) and the same question is asked again
        let h = Harness::speaking(ModelRouter::none(), Some(lang)).await;
        h.say("/profile").await;
        let reply = h.say(asks).await;
        assert_eq!(reply.len(), 2, "{lang} without a book: {reply:?}");
        assert!(reply[1].contains(goal_question), "{reply:?}");
        assert!(h.profile().await.iter().all(|e| e.text != asks));
    }
}

/// Seed 004's own use cases of the BookGuide, not all of them with a question mark ("I
/// don't get this part of relativity"), reach it while the mood is asked and in the
/// conversation (no model: the rules); what a reader tells of the book stays a note.
#[tokio::test]
async fn asking_for_an_explanation_reaches_the_book_guide_with_or_without_a_question_mark() {
    for asks in [
        "相対性理論のこの部分がよくわからない",
        "この古典の言い回しはどういう意味",
        "Kの最後の手紙の意味を説明してください",
        "I don't understand the part about Sensei's will",
        "Can you explain what a paradigm is",
        "What does 'meiji spirit' mean",
        "明治の精神って何",
        "Kは誰",
        "what is the spirit of Meiji",
        "Is there an explanation of the title?",
        "Why did the author write it as letters?",
    ] {
        for mood_asked in [true, false] {
            let h = Harness::new(ModelRouter::none()).await;
            h.say("/reading start kokoro").await;
            if mood_asked {
                h.say("/status reading").await;
            }
            let reply = h.say(asks).await;
            assert!(
                guide_answered(&reply),
                "{asks} (mood asked: {mood_asked}): the BookGuide answers: {reply:?}"
            );
            h.assert_question_note(asks).await;
        }
    }
    for note in [
        "The meaning of friendship in chapter 2 moved me",
        "先生の孤独の意味がわかった気がする",
        "It explains a lot about the Meiji era, I loved it",
        "友情って何だろうと考えさせられた",
        "K's letter is what I keep thinking about",
        "誰にでも勧めたい本です",
        "What a meaningful ending",
        "How meaningful this book is",
        "Who is more lonely than Sensei!",
    ] {
        let h = Harness::new(ModelRouter::none()).await;
        h.say("/reading start kokoro").await;
        let reply = h.say(note).await;
        assert!(
            !guide_answered(&reply),
            "{note}: a note, not a question for the guide: {reply:?}"
        );
    }
}

/// Without a model the greeting asks why this book: the answer is also the reader's goal
/// (seed 004 saves 「仕事の効率を上げたくて」 as a profile entry), once; it stays a note, the
/// mood is asked again, and what is written next is a note only.
#[tokio::test]
async fn the_reason_for_a_book_is_kept_as_the_readers_goal() {
    for (title, reason, noted, then) in [
        (
            "こころ",
            "仕事の効率を上げたくて...",
            "この本を読む理由としても残しました",
            "友人に勧められた本です",
        ),
        (
            "Kokoro",
            "I want to understand Meiji Japan",
            "and as your reason for reading it",
            "A friend lent it to me",
        ),
    ] {
        let h = Harness::new(ModelRouter::none()).await;
        h.say(&format!("/reading start {title}")).await;
        let reply = h.say(reason).await;
        assert!(reply.iter().any(|t| t.contains(noted)), "{reply:?}");
        assert!(h.outbox.last_options().is_some(), "the mood is asked again");
        h.say(then).await;
        let entries = h.profile().await;
        assert_eq!(
            entries
                .iter()
                .map(|e| (e.kind, e.text.as_str()))
                .collect::<Vec<_>>(),
            [(ProfileKind::Goal, reason)],
            "{title}"
        );
        let record = h.record().await;
        let insights = h.store.insights(record.id).await.expect("insights");
        assert_eq!(
            insights.iter().map(|i| i.text.as_str()).collect::<Vec<_>>(),
            [reason, then],
            "both are notes: {title}"
        );
    }
    // a command in between: the greeting's question is no longer the one answered
    let h = Harness::new(ModelRouter::none()).await;
    h.say("/reading start Kokoro").await;
    h.say("/status reading").await;
    h.say("I want to understand Meiji Japan").await;
    let entries = h.profile().await;
    assert!(entries.is_empty(), "{entries:?}");
}

#[tokio::test]
async fn a_command_in_latin_letters_leaves_the_app_language() {
    // a Japanese Telegram user's `/reading start Kokoro`: the command and the title say
    // nothing about the user's language; their app does
    for (app, greeting, mood) in [
        ("ja", "読む準備をしましょう", "今の気分は？"),
        ("en", "Let's get ready for", "How do you feel right now?"),
    ] {
        let h = Harness::speaking(ModelRouter::none(), Some(app)).await;
        let reply = h.say("/reading start Kokoro").await;
        assert!(
            reply.iter().any(|t| t.contains(greeting)),
            "{app}: {reply:?}"
        );
        let options = h.outbox.last_options().expect("mood options");
        assert_eq!(options.prompt, mood, "{app}");
    }
}

/// The mentor names only what it was given: a review or an answer that quotes a book or a
/// note the member's data and the catalogue do not hold (a model's invention) is not used,
/// and "What should I read next?" after a review goes to the recommendations, which pick
/// from the catalogue.
#[tokio::test]
async fn the_mentor_never_names_a_book_it_was_not_given() {
    let invented = "Try \"The Nightingale\" by Kristin Nolan next.";
    let model = ScriptedModel::responses([
        // the review: an invented book is refused, the second draft is saved
        ChatResponse::tool_call("get_mentor_context", json!({"period_days": 7})),
        ChatResponse::tool_call(
            "save_mentor_feedback",
            json!({"feedback_type": "weekly", "content": invented}),
        ),
        ChatResponse::tool_call(
            "save_mentor_feedback",
            json!({"feedback_type": "weekly", "content": "You noted “Sensei is lonely” about «Kokoro». Next step: 10 pages."}),
        ),
        // a follow-up answered with an invented book: the data answers instead
        ChatResponse::text(invented),
        // a follow-up that quotes the member's own note: used
        ChatResponse::text("You wrote “Sensei is lonely”."),
    ]);
    let models = ModelRouter::new(None).with_agent(mentor::AGENT, Arc::new(model.clone()));
    let h = Harness::new(models).await;
    h.say("/reading start Kokoro").await;
    h.choose(&["calm"]).await;
    h.say("Sensei is lonely").await;
    let review = h.say("/review weekly").await;
    assert_eq!(
        review[0],
        "You noted “Sensei is lonely” about «Kokoro». Next step: 10 pages."
    );
    let refused = match model.requests()[2].messages.last() {
        Some(ChatMessage::Tool { content, .. }) => content.clone(),
        _ => String::new(),
    };
    assert!(refused.contains("The Nightingale"), "{refused}");
    let answer = h.say("What else could I try?").await.join("\n");
    assert!(!answer.contains("Nightingale"), "{answer}");
    assert!(answer.contains("Kokoro"), "from the data: {answer}");
    let quoted = h.say("What did I note?").await;
    assert_eq!(quoted, ["You wrote “Sensei is lonely”."]);
    // a statement that names a recommendation is no request for one
    for statement in ["My friend recommended it", "友達のおすすめで読みました"] {
        assert!(!recommendation::asks_for_a_book(statement), "{statement}");
    }
    for request in [
        "Any recommendations?",
        "Recommend me a book",
        "次は何を読めばいい",
    ] {
        assert!(recommendation::asks_for_a_book(request), "{request}");
    }
    // what to read next: the recommendations, from the catalogue (no model call)
    let next = h.say("What should I read next?").await.join("\n");
    assert!(next.starts_with("Books for you:"), "{next}");
    assert_eq!(model.remaining(), 0);
    // the recommendations answer once; the mentor's conversation goes on
    assert_eq!(h.active().await.map(|s| s.flow).as_deref(), Some("mentor"));
}

/// Thanks or a greeting while reading is no note about the book: answered, nothing saved,
/// and a mood still asked stays asked.
#[tokio::test]
async fn thanks_and_greetings_are_no_notes() {
    let h = Harness::new(ModelRouter::none()).await;
    h.say("/reading start Kokoro").await;
    // the mood is still asked
    let hello = h.say("hello").await;
    assert_eq!(hello[0], "Hello! How is «Kokoro» going?");
    assert_eq!(h.outbox.last_options().map(|o| o.options.len()), Some(5));
    h.choose(&["calm"]).await;
    h.say("Who is K in this book?").await;
    let thanks = h.say("thanks!").await;
    assert_eq!(thanks, ["You're welcome! Tell me about «Kokoro» any time."]);
    // (in the conversation's language)
    let arigato = h.say("ありがとうございました").await;
    assert_eq!(arigato, thanks);
    let record = h.record().await;
    let notes: Vec<String> = h
        .store
        .insights(record.id)
        .await
        .expect("insights")
        .into_iter()
        .map(|i| i.text)
        .collect();
    assert_eq!(notes, ["Who is K in this book?"], "only the question");
}

/// `/end` in the middle of the profile questions or of a review was answered with
/// silence: the reader could not tell it had worked. Each says what is kept and how to
/// come back, in the reader's language.
#[tokio::test]
async fn end_in_the_profile_questions_or_a_review_says_so() {
    let h = Harness::new(ModelRouter::none()).await;
    h.say("/onboarding").await;
    h.say("Read more classics").await;
    let ended = h.say("/end").await;
    assert!(ended.iter().any(|t| t.contains("/profile")), "{ended:?}");
    assert_eq!(h.profile().await.len(), 1, "the answer given is kept");
    h.say("/review weekly").await;
    let ended = h.say("/end").await;
    assert!(ended.iter().any(|t| t.contains("/review")), "{ended:?}");
    let h = Harness::speaking(ModelRouter::none(), Some("ja")).await;
    h.say("/profile").await;
    let ended = h.say("/end").await;
    assert!(
        ended
            .iter()
            .any(|t| t.contains("/profile") && has_japanese(t)),
        "{ended:?}"
    );
}

/// `/reading` again for a book not started yet asked "What made you choose it?" and the
/// mood once more, though both were answered: a book the reader has talked about is
/// welcomed back, and a mood given for its phase is not asked again.
#[tokio::test]
async fn back_to_a_book_what_was_answered_is_not_asked_again() {
    let h = Harness::new(ModelRouter::none()).await;
    h.say("/reading start Kokoro").await;
    h.say("A friend loved it").await;
    h.choose(&["excited"]).await;
    let back = h.say("/reading").await;
    let all = back.join("\n");
    assert!(!all.contains("What made you choose it?"), "{all}");
    assert!(!all.contains("How do you feel"), "{all}");
    assert!(all.contains("Kokoro"), "{all}");
    // a book finished: the mood after reading once
    h.say("/status completed").await;
    h.choose(&["calm"]).await;
    let again = h.say("/reading").await.join("\n");
    assert!(!again.contains("How do you feel after reading?"), "{again}");
}

/// After a review, "What did I read this week?" said "In progress: none" for a book the
/// reader wrote three notes about (its status still "not started"), and "thanks" got the
/// whole review's data again.
#[tokio::test]
async fn after_a_review_a_book_written_about_was_read_and_thanks_are_thanks() {
    let h = Harness::new(ModelRouter::none()).await;
    h.say("/reading start Kokoro").await;
    h.choose(&["curious"]).await;
    h.say("Sensei is a lonely man").await;
    h.say("/review weekly").await;
    let read = h.say("What did I read this week?").await;
    assert!(read[0].contains("In progress: Kokoro"), "{read:?}");
    let thanks = h.say("thanks").await;
    assert!(thanks[0].starts_with("You're welcome"), "{thanks:?}");
    assert!(!thanks[0].contains("note(s)"), "{thanks:?}");
}

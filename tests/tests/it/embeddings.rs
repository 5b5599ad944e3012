//! The help-desk's search by meaning against a fake embeddings server on 127.0.0.1
//! ([`FakeEmbeddings`], the OpenAI `/v1/embeddings` wire format): a paraphrase that shares
//! no word with its passage is found in English and Japanese, where words alone find
//! nothing; the passages' vectors are kept in the database, so a restart embeds nothing and
//! a changed file only its changed passage, and another model under the same name starts
//! afresh; a server failing, garbled, hanging or gone,
//! and a model whose vectors mean nothing, leave the search by words (the floor); a model
//! that knows no Japanese is used for English questions only; a question nothing answers
//! finds nothing. Then the whole bot: a Telegram group's
//! help-desk answers a paraphrase from the right passage.

use kaiwa_core::kb::{KbError, KbSearch, KnowledgeBase, Semantic};
use kaiwa_core::llm::ModelRouter;
use kaiwa_core::llm::openai::OpenAiEmbeddings;
use kaiwa_core::store::{SearchCache, Store};
use kaiwa_tests::fake_embeddings::{Behaviour, FakeEmbeddings};
use kaiwa_tests::fake_openai::FakeOpenAi;
use kaiwa_tests::fake_telegram::{Chat, FakeTelegram};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the fake's vectors know: each list of words means one thing.
const CONCEPTS: &[&[&str]] = &[
    &["fever", "ill", "sick", "熱", "体調", "病気"],
    &[
        "paper",
        "printer",
        "jam",
        "stuck",
        "紙",
        "プリンター",
        "詰ま",
    ],
    &["home", "vpn", "remote", "internal", "在宅", "社内"],
    &["password", "forgot", "login", "パスワード", "ログイン"],
];

const PAGES: &[(&str, &str)] = &[
    (
        "en/leave.md",
        "# Leave\n## Sick leave\nIf you are ill, tell your manager before 9:00 and rest. A doctor's note is needed after three days.\n## Annual leave\nBook holidays in the HR portal two weeks ahead.\n",
    ),
    (
        "en/office.md",
        "# Office\n## Printer problems\nIf paper is stuck, open tray 2 and remove it. Replace the toner when the light blinks.\n## Meeting rooms\nReserve rooms in the calendar.\n",
    ),
    (
        "en/it.md",
        "# IT\n## VPN\nUse the VPN client to reach internal systems from home.\n## Password reset\nReset your password in the self-service portal.\n",
    ),
    (
        "ja/leave.md",
        "# 休暇\n## 病気休暇\n体調が悪いときは9時までに上長へ連絡し、休んでください。3日を超える場合は診断書が必要です。\n## 年次有給休暇\n休暇は2週間前までに人事ポータルで申請します。\n",
    ),
    (
        "ja/office.md",
        "# オフィス\n## プリンターのトラブル\n紙詰まりはトレイ2を開けて取り除きます。トナーはランプが点滅したら交換します。\n## 会議室\n会議室はカレンダーで予約します。\n",
    ),
];

const FEVER: &str = "I have a fever and can't come in today";
/// The text Kaiwa embeds to recognise the model's vector space.
const PROBE: &str = "Kaiwa: a help-desk question";
const FEVER_JA: &str = "熱があって今日は出社できません";

struct Setup {
    _dir: tempfile::TempDir,
    kb_dir: std::path::PathBuf,
    kb: Arc<KnowledgeBase>,
    store: Arc<dyn Store>,
    db: String,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let kb_dir = dir.path().join("kb");
    for (path, text) in PAGES {
        let file = kb_dir.join(path);
        std::fs::create_dir_all(file.parent().expect("folder")).expect("folder");
        std::fs::write(file, text).expect("page");
    }
    let db = format!("sqlite://{}/kaiwa.db", dir.path().display());
    let store = kaiwa_core::store::connect(&db).await.expect("store");
    Setup {
        kb: Arc::new(KnowledgeBase::open(&kb_dir).expect("index")),
        kb_dir,
        _dir: dir,
        store,
        db,
    }
}

fn semantic(
    fake: &FakeEmbeddings,
    cache: Option<Arc<dyn Store>>,
    timeout: Duration,
) -> Arc<Semantic> {
    let embedder =
        OpenAiEmbeddings::new(&fake.base_url(), "fake-embed", None, timeout).expect("client");
    let cache = cache.map(|c| c as Arc<dyn SearchCache>);
    Arc::new(Semantic::new(Arc::new(embedder), cache))
}

/// What the server embedded, less the probes of its vector space.
fn embedded(fake: &FakeEmbeddings) -> Vec<String> {
    fake.inputs().into_iter().filter(|t| t != PROBE).collect()
}

fn top(found: &[kaiwa_core::kb::Passage]) -> Option<String> {
    found.first().map(|p| p.citation())
}

#[tokio::test]
async fn a_paraphrase_is_found_by_meaning_in_both_languages_where_words_find_nothing() {
    let s = setup().await;
    let fake = FakeEmbeddings::start(CONCEPTS).await.expect("fake");
    let meaning = semantic(&fake, Some(s.store.clone()), Duration::from_secs(5));
    // words alone: no passage shares a word with the question
    assert_eq!(top(&s.kb.search(FEVER, 3).expect("search")), None);
    assert_eq!(top(&s.kb.search(FEVER_JA, 3).expect("search")), None);
    meaning.prepare(&s.kb).await.expect("passages embedded");
    assert!(meaning.is_ready_for(&s.kb));
    let search = KbSearch {
        kb: s.kb.clone(),
        meaning: Some(meaning),
    };
    let found = search.search(FEVER, 3).await.expect("search");
    assert_eq!(
        top(&found).as_deref(),
        Some("en/leave.md#Sick leave"),
        "{found:?}"
    );
    let found = search.search(FEVER_JA, 3).await.expect("search");
    assert_eq!(
        top(&found).as_deref(),
        Some("ja/leave.md#病気休暇"),
        "{found:?}"
    );
    // a question with words of its passage still finds it, in its language
    let found = search
        .search("The printer has a paper jam", 3)
        .await
        .expect("search");
    assert_eq!(
        top(&found).as_deref(),
        Some("en/office.md#Printer problems")
    );
    let found = search
        .search("在宅から社内システムに入れません", 3)
        .await
        .expect("search");
    assert!(
        found.iter().all(|p| p.path.starts_with("ja/")) || found.is_empty(),
        "a Japanese question is answered from Japanese passages: {found:?}"
    );
    // a question nothing answers finds nothing, by meaning either
    assert_eq!(
        search
            .search("Which cactus likes shade?", 3)
            .await
            .expect("search"),
        Vec::new()
    );
    s.store.close().await;
}

#[tokio::test]
async fn a_question_searched_again_in_a_turn_is_embedded_once() {
    let s = setup().await;
    let fake = FakeEmbeddings::start(CONCEPTS).await.expect("fake");
    let meaning = semantic(&fake, None, Duration::from_secs(5));
    meaning.prepare(&s.kb).await.expect("passages embedded");
    let search = KbSearch {
        kb: s.kb.clone(),
        meaning: Some(meaning),
    };
    // a sub-task's search, then the floor's, of the same text
    for _ in 0..2 {
        let found = search.search(FEVER, 3).await.expect("search");
        assert_eq!(top(&found).as_deref(), Some("en/leave.md#Sick leave"));
    }
    let asked = |fake: &FakeEmbeddings| fake.inputs().iter().filter(|t| *t == FEVER).count();
    assert_eq!(asked(&fake), 1, "the question's vector is reused");
    // a failed call keeps nothing: the next search asks again
    fake.set(Behaviour::Status(503));
    let found = search.search(FEVER_JA, 3).await.expect("search");
    assert_eq!(top(&found), None, "words alone find nothing");
    fake.set(Behaviour::Normal);
    let found = search.search(FEVER_JA, 3).await.expect("search");
    assert_eq!(top(&found).as_deref(), Some("ja/leave.md#病気休暇"));
    s.store.close().await;
}

#[tokio::test]
async fn vectors_are_kept_so_a_restart_embeds_nothing_and_a_change_only_what_changed() {
    let s = setup().await;
    let fake = FakeEmbeddings::start(CONCEPTS).await.expect("fake");
    semantic(&fake, Some(s.store.clone()), Duration::from_secs(5))
        .prepare(&s.kb)
        .await
        .expect("passages embedded");
    let first = embedded(&fake);
    assert!(
        first.iter().any(|t| t.starts_with("Sick leave\n")),
        "passages are embedded with their heading: {first:?}"
    );
    // a restart: another process, the same database
    s.store.close().await;
    let store = kaiwa_core::store::connect(&s.db).await.expect("reopens");
    let kb = Arc::new(KnowledgeBase::open(&s.kb_dir).expect("index"));
    let again = semantic(&fake, Some(store.clone()), Duration::from_secs(5));
    again.prepare(&kb).await.expect("vectors read back");
    assert_eq!(embedded(&fake).len(), first.len(), "nothing embedded again");
    let found = again.search(&kb, FEVER, 1).await.expect("search");
    assert_eq!(top(&found).as_deref(), Some("en/leave.md#Sick leave"));
    assert_eq!(
        embedded(&fake)[first.len()..],
        [FEVER.to_string()],
        "only the question"
    );
    // one passage changes: only it goes to the server
    std::fs::write(
        s.kb_dir.join("en/leave.md"),
        "# Leave\n## Sick leave\nIf you are ill, call your manager before 9:00 and rest.\n## Annual leave\nBook holidays in the HR portal two weeks ahead.\n",
    )
    .expect("edit");
    assert!(kb.refresh_if_changed().expect("rebuilt"));
    assert!(
        !again.is_ready_for(&kb),
        "vectors of the old build are not used"
    );
    let before = embedded(&fake).len();
    again.prepare(&kb).await.expect("the change embedded");
    assert_eq!(
        embedded(&fake)[before..],
        ["Sick leave\nIf you are ill, call your manager before 9:00 and rest.".to_string()]
    );
    // another model under the same name (another vector space): everything again, and the
    // old vectors are not compared with its questions
    fake.set(Behaviour::Replaced);
    let replaced = semantic(&fake, Some(store.clone()), Duration::from_secs(5));
    let before = embedded(&fake).len();
    replaced.prepare(&kb).await.expect("embedded afresh");
    assert!(
        embedded(&fake)[before..]
            .iter()
            .any(|t| t.starts_with("Annual leave\n")),
        "unchanged passages embedded again in the new space"
    );
    let found = replaced.search(&kb, FEVER, 1).await.expect("search");
    assert_eq!(top(&found).as_deref(), Some("en/leave.md#Sick leave"));
    store.close().await;
}

#[tokio::test]
async fn a_failing_garbled_hanging_or_missing_server_leaves_the_search_by_words() {
    let s = setup().await;
    let fake = FakeEmbeddings::start(CONCEPTS).await.expect("fake");
    let question = "How do I reset my password?";
    let by_words = s.kb.search(question, 3).expect("search");
    assert_eq!(top(&by_words).as_deref(), Some("en/it.md#Password reset"));
    // before the vectors: the server failing makes preparing fail, and searches use words
    for behaviour in [
        Behaviour::Status(503),
        Behaviour::Status(429),
        Behaviour::Garbage,
    ] {
        fake.set(behaviour);
        let meaning = semantic(&fake, Some(s.store.clone()), Duration::from_secs(5));
        assert!(
            matches!(meaning.prepare(&s.kb).await, Err(KbError::Embeddings(_))),
            "{behaviour:?}"
        );
        assert!(!meaning.is_ready_for(&s.kb));
        assert_eq!(
            meaning.search(&s.kb, question, 3).await.expect("search"),
            by_words,
            "{behaviour:?}"
        );
    }
    // vectors ready, then the server fails on the question: words answer
    fake.set(Behaviour::Normal);
    let meaning = semantic(&fake, Some(s.store.clone()), Duration::from_millis(500));
    meaning.prepare(&s.kb).await.expect("passages embedded");
    for behaviour in [Behaviour::Status(500), Behaviour::Garbage, Behaviour::Hang] {
        fake.set(behaviour);
        let started = Instant::now();
        let found = meaning.search(&s.kb, question, 3).await.expect("search");
        assert_eq!(found, by_words, "{behaviour:?}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{behaviour:?} bounded by the timeout"
        );
    }
    // the turn's budget bounds the question's embedding too
    let started = Instant::now();
    let found = kaiwa_core::llm::budget::within(
        Duration::from_millis(150),
        meaning.search(&s.kb, question, 3),
    )
    .await
    .expect("search");
    assert_eq!(found, by_words);
    assert!(started.elapsed() < Duration::from_millis(450));
    // the server gone altogether
    drop(fake);
    assert_eq!(
        meaning.search(&s.kb, question, 3).await.expect("search"),
        by_words
    );
    s.store.close().await;
}

#[tokio::test]
async fn vectors_that_mean_nothing_are_not_used() {
    let s = setup().await;
    let fake = FakeEmbeddings::start(CONCEPTS).await.expect("fake");
    fake.set(Behaviour::Noise);
    let meaning = semantic(&fake, Some(s.store.clone()), Duration::from_secs(5));
    let refused = meaning.prepare(&s.kb).await;
    assert!(
        matches!(refused, Err(KbError::WeakEmbeddings { .. })),
        "{refused:?}"
    );
    assert!(!meaning.is_ready_for(&s.kb));
    let question = "The printer has a paper jam";
    assert_eq!(
        meaning.search(&s.kb, question, 3).await.expect("search"),
        s.kb.search(question, 3).expect("search")
    );
    s.store.close().await;
}

#[tokio::test]
async fn a_model_that_knows_no_japanese_is_used_for_english_questions_only() {
    let s = setup().await;
    let fake = FakeEmbeddings::start(CONCEPTS).await.expect("fake");
    fake.set(Behaviour::EnglishOnly);
    let meaning = semantic(&fake, Some(s.store.clone()), Duration::from_secs(5));
    let checks = meaning
        .prepare(&s.kb)
        .await
        .expect("English passages told apart");
    // what `kaiwa kb index` tells the team, per language
    let by_meaning: Vec<(&str, bool)> = checks.iter().map(|c| (c.language, c.by_meaning)).collect();
    assert_eq!(by_meaning, [("en", true), ("ja", false)], "{checks:?}");
    assert!(checks[0].headings_found_pct >= 80, "{checks:?}");
    assert!(checks[1].headings_found_pct < 80, "{checks:?}");
    assert!(
        checks[1]
            .to_string()
            .starts_with("Japanese questions by words alone ("),
        "{}",
        checks[1]
    );
    assert_eq!(
        meaning.prepare(&s.kb).await.expect("ready"),
        checks,
        "asked again, the same answer without embedding anything"
    );
    let found = meaning.search(&s.kb, FEVER, 3).await.expect("search");
    assert_eq!(top(&found).as_deref(), Some("en/leave.md#Sick leave"));
    let asked = fake.inputs().len();
    let found = meaning.search(&s.kb, FEVER_JA, 3).await.expect("search");
    assert_eq!(
        found,
        s.kb.search(FEVER_JA, 3).expect("search"),
        "words alone"
    );
    assert_eq!(
        fake.inputs().len(),
        asked,
        "a Japanese question is not embedded"
    );
    s.store.close().await;
}

/// The whole bot, as deployed, on the fake Telegram: a group whose topics are the
/// help-desk, `[llm] embeddings_model` on the fake embeddings server beside the chat model
/// `llm` names (`[llm]` keys).
struct Bot {
    telegram: FakeTelegram,
    stop: tokio::sync::oneshot::Sender<()>,
    bot: tokio::task::JoinHandle<()>,
}

impl Bot {
    async fn start(
        s: &Setup,
        fake: &FakeEmbeddings,
        llm: &str,
        models: Option<ModelRouter>,
    ) -> Bot {
        const TOKEN: &str = "123456:TEST-secret-token";
        let telegram = FakeTelegram::start(TOKEN).await;
        let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let config = s._dir.path().join("kaiwa.toml");
        std::fs::write(
            &config,
            format!(
                "[flows]\nforms_dir = \"{repo}/config/forms\"\nkb_dir = {:?}\nbooks = \"{repo}/config/books.toml\"\n\n\
                 [server]\nlisten = \"127.0.0.1:0\"\n\n\
                 [llm]\n{llm}\nembeddings_model = \"fake-embed\"\nembeddings_base_url = \"{}\"\n\n\
                 [telegram]\napi_url = \"{}\"\ngroup_flow = \"helpdesk\"\npoll_timeout_secs = 1\n",
                s.kb_dir,
                fake.base_url(),
                telegram.url()
            ),
        )
        .expect("config");
        let options = kaiwa::Options {
            config: Some(config),
            database_url: Some(s.db.clone()),
        };
        let (settings, _) = options.settings().expect("settings");
        let mut builder = kaiwa::Kaiwa::builder(settings)
            .database_url(s.db.clone())
            .telegram_token(TOKEN);
        if let Some(models) = models {
            builder = builder.models(models);
        }
        let kaiwa = builder.build().await.expect("kaiwa");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let bot = tokio::spawn(async move {
            kaiwa
                .run_until(async {
                    let _ = stopped.await;
                })
                .await
                .expect("Kaiwa runs");
        });
        // the passages are embedded at start, in the background: the last heading checked
        let started = Instant::now();
        while !fake.inputs().iter().any(|t| t.ends_with("会議室")) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "passages embedded at start"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        Bot {
            telegram,
            stop,
            bot,
        }
    }

    /// `user` asks `question` in the help-desk's forum topic `topic`: the first reply.
    async fn ask(&self, topic: i64, user: i64, question: &str) -> String {
        let desk = Chat::topic(-100_700, topic);
        self.telegram.send_text(desk, user, question);
        self.telegram.wait_texts(desk, 1).await.remove(0)
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(20), self.bot)
            .await
            .expect("the bot stops")
            .expect("no panic");
    }
}

/// `[llm]` keys whose chat model never answers: the help-desk's floor answers.
const NO_CHAT_MODEL: &str = "base_url = \"http://127.0.0.1:9/v1\"\nmodel = \"none\"";

/// No chat model: the help-desk's floor answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_telegram_help_desk_answers_a_paraphrase_from_the_passage_it_means() {
    let s = setup().await;
    s.store.close().await;
    let fake = FakeEmbeddings::start(CONCEPTS).await.expect("fake");
    let bot = Bot::start(&s, &fake, NO_CHAT_MODEL, Some(ModelRouter::none())).await;
    let reply = bot.ask(3, 701, FEVER).await;
    assert!(
        reply.contains("Sick leave") && reply.contains("en/leave.md#Sick leave"),
        "{reply:?}"
    );
    let reply = bot.ask(4, 702, FEVER_JA).await;
    assert!(reply.contains("ja/leave.md#病気休暇"), "{reply:?}");
    assert!(
        fake.inputs().iter().any(|t| t == FEVER_JA),
        "the question went to the embeddings model"
    );
    bot.stop().await;
    // the answers' traces say the floor searched by meaning too
    let store = kaiwa_core::store::connect(&s.db).await.expect("store");
    let mut traces: Vec<String> = Vec::new();
    for session in store.find_sessions("", 10).await.expect("sessions") {
        for message in store.traced_messages(session.id).await.expect("traced") {
            if let Some(trace) = store
                .message_trace(session.id, message)
                .await
                .expect("a trace")
            {
                traces.push(trace);
            }
        }
    }
    store.close().await;
    assert_eq!(traces.len(), 2, "{traces:?}");
    for trace in &traces {
        assert!(
            trace.contains(r#""tool":"floor""#) && trace.contains(r#""by_meaning":true"#),
            "{trace}"
        );
    }
}

/// A model trained with prefixes (nomic-embed-text's here) is given them: the questions,
/// the headings of the self-check and the space's probe with the query's, the passages with
/// the passage's; and it still finds the paraphrase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_prefixes_go_before_questions_and_passages() {
    let s = setup().await;
    s.store.close().await;
    let fake = FakeEmbeddings::start(CONCEPTS).await.expect("fake");
    let llm = format!(
        "{NO_CHAT_MODEL}\nembeddings_query_prefix = \"search_query: \"\n\
         embeddings_passage_prefix = \"search_document: \""
    );
    let bot = Bot::start(&s, &fake, &llm, Some(ModelRouter::none())).await;
    let reply = bot.ask(3, 701, FEVER).await;
    assert!(reply.contains("en/leave.md#Sick leave"), "{reply:?}");
    let inputs = fake.inputs();
    let question = format!("search_query: {FEVER}");
    assert!(inputs.contains(&question), "the question: {inputs:?}");
    assert!(inputs.contains(&format!("search_query: {PROBE}")));
    assert!(inputs.contains(&"search_query: 病気休暇".to_string()));
    let passages: Vec<&String> = inputs
        .iter()
        .filter(|t| t.starts_with("search_document: "))
        .collect();
    assert_eq!(passages.len(), 10, "every passage, once: {passages:?}");
    assert!(
        passages
            .iter()
            .any(|t| t.starts_with("search_document: Sick leave\nIf you are ill")),
        "{passages:?}"
    );
    assert!(
        inputs
            .iter()
            .all(|t| t.starts_with("search_query: ") || t.starts_with("search_document: ")),
        "nothing without its prefix: {inputs:?}"
    );
    bot.stop().await;
}

/// A chat model too slow for the turn's budget: the floor answers after the budget is
/// spent, and still by meaning — the question was embedded while the planner waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_too_slow_for_the_turn_leaves_the_floor_its_search_by_meaning() {
    let s = setup().await;
    s.store.close().await;
    let fake = FakeEmbeddings::start(CONCEPTS).await.expect("fake");
    let chat = FakeOpenAi::start([]).await.expect("fake model");
    chat.set_delay(Duration::from_secs(60));
    let llm = format!(
        "base_url = \"{}\"\nmodel = \"slow\"\nmax_retries = 0\nturn_budget_secs = 2",
        chat.base_url()
    );
    let bot = Bot::start(&s, &fake, &llm, None).await;
    let asked = Instant::now();
    let reply = bot.ask(3, 701, FEVER).await;
    assert!(
        reply.contains("en/leave.md#Sick leave"),
        "the floor found the passage by meaning: {reply:?}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "answered soon after the budget: {:?}",
        asked.elapsed()
    );
    assert!(!chat.requests().is_empty(), "the model was asked first");
    assert_eq!(
        fake.inputs().iter().filter(|t| *t == FEVER).count(),
        1,
        "the question embedded once"
    );
    bot.stop().await;
}

/// A preparation that fails in the background (the server answering 503 for a while) is
/// tried again with back-off until every passage is embedded, sending only what was not
/// kept; searches use words meanwhile, then meaning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preparation_that_failed_in_the_background_goes_on_until_all_are_embedded() {
    let s = setup().await;
    let fake = FakeEmbeddings::start(CONCEPTS).await.expect("fake");
    let embedder =
        OpenAiEmbeddings::new(&fake.base_url(), "fake-embed", None, Duration::from_secs(5))
            .expect("client");
    let cache = s.store.clone() as Arc<dyn SearchCache>;
    let meaning = Arc::new(Semantic::new(Arc::new(embedder), Some(cache)).with_batch(2));
    // the probe and one batch answer, the next fails
    fake.fail_request(2);
    let search = KbSearch {
        kb: s.kb.clone(),
        meaning: Some(meaning.clone()),
    };
    // the first search starts the preparation and answers by words
    let by_words = s.kb.search(FEVER, 3).expect("search");
    assert_eq!(search.search(FEVER, 3).await.expect("search"), by_words);
    tokio::time::timeout(Duration::from_secs(20), async {
        while !meaning.is_ready_for(&s.kb) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("ready after a retry, without another search");
    let found = search.search(FEVER, 3).await.expect("search");
    assert_eq!(top(&found).as_deref(), Some("en/leave.md#Sick leave"));
    // the batch embedded before the failure was not sent again
    let requests = fake.requests();
    assert_eq!(requests[1].0, 2, "{requests:?}");
    let inputs = fake.inputs();
    for first in &inputs[1..3] {
        assert_eq!(
            inputs.iter().filter(|t| *t == first).count(),
            1,
            "{first:?} sent again: {requests:?}"
        );
    }
    s.store.close().await;
}

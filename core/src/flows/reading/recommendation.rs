//! Recommendation (seed 004, phase 2 — shipped): `get_user_profile`, `search_books` (the
//! local catalogue) and `save_recommendation`. Each pick is explained from the profile and
//! past insights. A book the user already logged is never recommended: `save_recommendation`
//! refuses it in code, and the floor excludes it. Without a model, the catalogue is ranked by
//! the profile's keywords. Exposed as the `recommend` flow (`/recommend`).

use super::catalogue::Catalogue;
use crate::agent::{Agent, ToolError, ToolOutput, TypedTool, typed};
use crate::flow::{CommandInfo, Flow, FlowError, TurnContext, TurnInput, TurnOutput};
use crate::i18n::{pick, written_language};
use crate::llm::ChatMessage;
use crate::search::{BookInfo, BooksApi, SearchError};
use crate::store::StateChange;
use crate::store::reading::ReadingChange;
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;

pub const ID: &str = "recommend";
pub const AGENT: &str = "recommendation";

/// Whether `question` asks what to read next: the recommendations' work, from the club's
/// catalogue (never a model's invention), wherever it is asked. It names a next book or a
/// recommendation and is put as a question or a request ("My friend recommended it" is
/// neither).
pub fn asks_for_a_book(question: &str) -> bool {
    let q = question.trim().to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| q.contains(w));
    // questions by their words alone
    if has(&[
        "what should i read",
        "which book should i",
        "want to read a book",
        "want to read something",
        "looking for a book",
        "looking for something to read",
        "books do you have",
        "books are there",
        "any good books",
        "次は何を読",
        "何を読めば",
        "本を読みたい",
        "読む本を探",
        "どんな本があり",
        "いい本はあり",
        "本はありますか",
    ]) {
        return true;
    }
    let names_one = has(&[
        "read next",
        "next book",
        "recommend",
        "suggest",
        "a good book",
        "おすすめ",
        "オススメ",
        "次に読む",
        "次の本",
    ]);
    let asked = has(&[
        "?",
        "？",
        "教えて",
        "ください",
        "ありますか",
        "can you",
        "could you",
        "please",
    ]) || ["recommend", "suggest", "any "]
        .iter()
        .any(|w| q.starts_with(w));
    names_one && asked
}

/// `(title, reason)` picks by the rules: profile and insight words against the catalogue,
/// logged books excluded; well-loved books, without a reason, make up the `k`.
pub fn rank(
    catalogue: &Catalogue,
    profile: &[String],
    logged: &[String],
    k: usize,
) -> Vec<(String, String)> {
    let mut scored: Vec<(f32, String, String)> = Vec::new();
    for entry in profile {
        for (score, book) in catalogue.search(entry, 10) {
            if logged.iter().any(|l| l.eq_ignore_ascii_case(&book.title)) {
                continue;
            }
            match scored.iter_mut().find(|(_, t, _)| *t == book.title) {
                Some(existing) => existing.0 += score,
                None => scored.push((score, book.title.clone(), entry.clone())),
            }
        }
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut picks: Vec<(String, String)> = scored
        .into_iter()
        .take(k)
        .map(|(_, t, why)| (t, why))
        .collect();
    // fewer that match than asked for (or none): well-loved books the user has not logged,
    // without a reason
    for book in catalogue.books() {
        if picks.len() >= k {
            break;
        }
        let logged = logged.iter().any(|l| l.eq_ignore_ascii_case(&book.title));
        if !logged && !picks.iter().any(|(t, _)| *t == book.title) {
            picks.push((book.title.clone(), String::new()));
        }
    }
    picks
}

struct Work {
    catalogue: Arc<Catalogue>,
    /// The books API (`[books_api]`), searched after the catalogue.
    api: Option<Arc<BooksApi>>,
    /// Books the API found in this answer (they may be recommended).
    found: Vec<BookInfo>,
    profile: String,
    logged: Vec<String>,
    picks: Vec<(String, String)>,
}

fn is_logged(logged: &[String], title: &str) -> bool {
    logged.iter().any(|l| l.eq_ignore_ascii_case(title))
}

#[derive(Deserialize, JsonSchema)]
pub struct NoArgs {}
struct GetUserProfile;
impl TypedTool<Work> for GetUserProfile {
    type Args = NoArgs;
    const NAME: &'static str = "get_user_profile";
    fn description(&self) -> String {
        "The user's goals, interests, wished-for books, recent insights and the books already logged.".into()
    }
    async fn run(&self, w: &mut Work, _: NoArgs) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::ok(format!(
            "{}\nAlready logged (never recommend): {}",
            w.profile,
            w.logged.join(", ")
        )))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct SearchArgs {
    pub query: String,
}
struct SearchBooks;
impl TypedTool<Work> for SearchBooks {
    type Args = SearchArgs;
    const NAME: &'static str = "search_books";
    fn description(&self) -> String {
        "Search the local book catalogue, then the books API when one is configured.".into()
    }
    async fn run(&self, w: &mut Work, a: SearchArgs) -> Result<ToolOutput, ToolError> {
        let mut found: Vec<String> = w
            .catalogue
            .search(&a.query, 5)
            .into_iter()
            .map(|(_, b)| b.describe())
            .collect();
        if let Some(api) = w.api.clone() {
            match api.search(&a.query).await {
                Ok(books) => {
                    for book in books {
                        if is_logged(&w.logged, &book.title)
                            || w.catalogue.find(&book.title).is_some()
                        {
                            continue;
                        }
                        found.push(format!("{} [{}]", book.describe(), api.provider().label()));
                        w.found.push(book);
                    }
                }
                Err(e) => found.push(format!(
                    "(the books API is unavailable: {e}; recommend from the catalogue)"
                )),
            }
        }
        Ok(ToolOutput::ok(if found.is_empty() {
            "No book matched.".into()
        } else {
            found.join("\n")
        }))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct SaveArgs {
    /// A title from the catalogue or found with search_books.
    pub title: String,
    /// Why this book, from the profile and insights.
    pub reason: String,
}
struct SaveRecommendation;
impl TypedTool<Work> for SaveRecommendation {
    type Args = SaveArgs;
    const NAME: &'static str = "save_recommendation";
    fn description(&self) -> String {
        "Save one recommendation with its reason.".into()
    }
    async fn run(&self, w: &mut Work, a: SaveArgs) -> Result<ToolOutput, ToolError> {
        let title = match w.catalogue.find(&a.title) {
            Some(book) => book.title.clone(),
            None => match w
                .found
                .iter()
                .find(|b| b.title.eq_ignore_ascii_case(&a.title))
            {
                Some(book) => book.title.clone(),
                None => {
                    return Err(ToolError::Rejected(format!(
                        "{:?} is neither in the catalogue nor found by search_books; use search_books",
                        a.title
                    )));
                }
            },
        };
        if is_logged(&w.logged, &title) {
            return Err(ToolError::Rejected(format!(
                "the user already logged {title:?}; recommend another book"
            )));
        }
        if w.picks.iter().any(|(t, _)| *t == title) {
            return Err(ToolError::Rejected(
                "already recommended in this answer".into(),
            ));
        }
        w.picks.push((title, a.reason));
        Ok(ToolOutput::ok("saved"))
    }
}

pub struct RecommendFlow {
    catalogue: Arc<Catalogue>,
    api: Option<Arc<BooksApi>>,
}

impl RecommendFlow {
    pub fn new(catalogue: Arc<Catalogue>) -> Self {
        RecommendFlow {
            catalogue,
            api: None,
        }
    }

    /// Searches the books API too (`[books_api]`).
    pub fn with_books(mut self, api: Arc<BooksApi>) -> Self {
        self.api = Some(api);
        self
    }
}

/// Words of the profile worth searching a books API for: the longer ones, most frequent
/// first.
fn keywords(profile: &[String]) -> Vec<String> {
    const ASIDE: &[&str] = &[
        "about", "books", "book", "like", "love", "read", "reading", "want", "would", "that",
        "this", "with", "from", "have", "more", "they", "their", "there", "what", "when",
    ];
    let mut counted: Vec<(String, usize)> = Vec::new();
    for entry in profile {
        let lower = entry.to_lowercase();
        let mut words: Vec<String> = lower
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.chars().count() >= 4 && !ASIDE.contains(w))
            .map(str::to_string)
            .collect();
        words.extend(
            crate::i18n::kanji_katakana_words(entry)
                .into_iter()
                .filter(|w| w.chars().count() >= 2),
        );
        for word in words {
            match counted.iter_mut().find(|(w, _)| *w == word) {
                Some(c) => c.1 += 1,
                None => counted.push((word, 1)),
            }
        }
    }
    counted.sort_by_key(|c| std::cmp::Reverse(c.1));
    counted.into_iter().map(|(w, _)| w).take(3).collect()
}

/// The floor's pick from the books API: its results for the profile's keywords, ranked by
/// how many keywords their title and subjects carry; never a logged or picked book.
async fn api_pick(
    api: &BooksApi,
    profile: &[String],
    logged: &[String],
    picked: &[(String, String)],
) -> Result<Option<(BookInfo, String)>, SearchError> {
    let words = keywords(profile);
    let Some(first) = words.first() else {
        return Ok(None);
    };
    let mut books = api.search(&words.join(" ")).await?;
    if books.is_empty() && words.len() > 1 {
        // fewer words find more
        books = api.search(first).await?;
    }
    Ok(books
        .into_iter()
        .filter(|b| !is_logged(logged, &b.title) && !picked.iter().any(|(t, _)| t == &b.title))
        .map(|b| {
            let about = format!("{} {}", b.title, b.subjects.join(" ")).to_lowercase();
            let matched: Vec<&String> = words
                .iter()
                .filter(|w| about.contains(w.as_str()))
                .collect();
            let why = matched
                .first()
                .map_or_else(|| first.clone(), |w| (*w).clone());
            (matched.len(), b, why)
        })
        .max_by_key(|(n, _, _)| *n)
        .map(|(_, b, why)| (b, why)))
}

#[async_trait]
impl Flow for RecommendFlow {
    fn id(&self) -> &str {
        ID
    }
    fn description(&self) -> &str {
        "book recommendations from your profile and insights"
    }
    fn start_commands(&self) -> Vec<CommandInfo> {
        vec![CommandInfo {
            name: "recommend",
            description_en: "recommend books for you",
            description_ja: "おすすめの本を紹介",
        }]
    }

    fn farewell(&self, lang: &str) -> Option<String> {
        Some(pick(
            lang,
            "OK. Send /recommend whenever you would like more suggestions.",
            "わかりました。また本を探すときは /recommend を送ってください。",
        ))
    }

    async fn turn(&self, ctx: TurnContext<'_>, input: TurnInput) -> Result<TurnOutput, FlowError> {
        let mut out = TurnOutput::default();
        if let TurnInput::Command { .. } = &input {
            out.unknown_command = true;
            return Ok(out);
        }
        // what the user asked for: the words that brought them here (a hand-off), or the
        // message that answers the question below
        let wish = match &input {
            TurnInput::Text(text) => Some(text.as_str()),
            _ => ctx.start_arg,
        }
        .map(str::trim)
        .filter(|w| !w.is_empty());
        let (mut profile, logged) = reader_of(&ctx).await?;
        if wish.is_none() && profile.is_empty() && logged.is_empty() {
            // opened with nothing to go on (no wish, no profile, no book logged): ask
            // first, and answer the wish that comes
            out.say(pick(
                ctx.language(),
                "What would you like to read? Tell me a book or an author you liked, or the kind of story you are in the mood for (or say \"anything\").",
                "どんな本を読みたいですか？好きだった本や作家、読みたい気分の話を教えてください（「なんでも」でも大丈夫です）。",
            ));
            return Ok(out);
        }
        // the wish's own words say its language (「どんな本がありますか？」 in a
        // conversation that chose English), else the conversation's
        let lang = wish
            .and_then(written_language)
            .unwrap_or(ctx.language())
            .to_string();
        // the wish first: it shapes the picks more than what the profile says
        if let Some(wish) = wish {
            profile.insert(0, wish.to_string());
        }
        let mut picks = self.model_picks(&ctx, &profile, &logged, &lang).await;
        if picks.picks.is_empty() {
            picks = self.floor_picks(&profile, &logged, &lang, wish).await;
        }
        let text = self.render(&picks, &lang, &mut out);
        out.say(text);
        // one answer: what the user says next goes where its words say (the list again
        // only when they ask for it)
        out.end();
        Ok(out)
    }
}

/// What the recommendations are made of: the picks with their reasons, the books the API
/// found, whether the API failed.
#[derive(Default)]
struct Picks {
    picks: Vec<(String, String)>,
    found: Vec<BookInfo>,
    api_failed: bool,
}

/// The user's profile and recent insights (what picks are matched against), and the books
/// they logged (never recommended).
async fn reader_of(ctx: &TurnContext<'_>) -> Result<(Vec<String>, Vec<String>), FlowError> {
    let key = &ctx.session.key;
    let records = ctx.store.reading_records(key.platform, &key.user).await?;
    let logged: Vec<String> = records.iter().map(|r| r.title.clone()).collect();
    let mut profile: Vec<String> = ctx
        .store
        .profile_entries(key.platform, &key.user)
        .await?
        .into_iter()
        .map(|e| e.text)
        .collect();
    for r in records.iter().take(5) {
        profile.extend(
            ctx.store
                .insights(r.id)
                .await?
                .into_iter()
                .rev()
                .take(3)
                .map(|i| i.text),
        );
    }
    Ok((profile, logged))
}

impl RecommendFlow {
    /// The Recommendation agent's picks (none without a model, or when it failed).
    async fn model_picks(
        &self,
        ctx: &TurnContext<'_>,
        profile: &[String],
        logged: &[String],
        lang: &str,
    ) -> Picks {
        let Some(model) = ctx.models.for_agent(AGENT) else {
            return Picks::default();
        };
        let work = Work {
            catalogue: self.catalogue.clone(),
            api: self.api.clone(),
            found: Vec::new(),
            profile: profile.join("\n"),
            logged: logged.to_vec(),
            picks: Vec::new(),
        };
        let agent = Agent::new(
            AGENT,
            vec![
                typed(GetUserProfile),
                typed(SearchBooks),
                typed(SaveRecommendation),
            ],
        )
        .with_remaining_tasks(|w: &Work| {
            if w.picks.is_empty() {
                vec!["Save at least one recommendation with save_recommendation".into()]
            } else {
                Vec::new()
            }
        });
        let system = format!(
            "You recommend books from the local catalogue (and the books API's results search_books lists). Read the profile, search, and save up to 3 picks, each \
             with a reason tied to the user's goals, interests or insights. Never recommend a book they already \
             logged. Answer in {}.",
            if lang == "ja" { "Japanese" } else { "English" }
        );
        let messages = vec![ChatMessage::system(system), ChatMessage::user("/recommend")];
        match agent.run(model.as_ref(), messages, work, ctx.ledger).await {
            Ok(r) => Picks {
                picks: r.state.picks,
                found: r.state.found,
                api_failed: false,
            },
            Err(e) => {
                tracing::warn!(error = %e, "the Recommendation agent failed; ranking by rules");
                Picks::default()
            }
        }
    }

    /// The rules' picks: the catalogue ranked by the profile's words, and the books API's
    /// best match for them.
    /// The catalogue's (and the books API's) picks for `profile` (the user's `wish` first,
    /// when they said one).
    async fn floor_picks(
        &self,
        profile: &[String],
        logged: &[String],
        lang: &str,
        wish: Option<&str>,
    ) -> Picks {
        let mut picks = Picks::default();
        let from_api = match &self.api {
            Some(api) => match api_pick(api, profile, logged, &[]).await {
                Ok(pick) => pick,
                Err(_) => {
                    picks.api_failed = true;
                    None
                }
            },
            None => None,
        };
        let room = if from_api.is_some() { 2 } else { 3 };
        picks.picks = rank(&self.catalogue, profile, logged, room)
            .into_iter()
            .map(|(t, why)| {
                let reason = if Some(why.as_str()) == wish {
                    pick(lang, "it fits what you asked for", "ご希望に合っています")
                } else if why.is_empty() {
                    pick(
                        lang,
                        "a well-loved book to start with",
                        "最初の一冊におすすめの名作",
                    )
                } else {
                    pick(
                        lang,
                        &format!("it matches “{why}”"),
                        &format!("「{why}」に合っています"),
                    )
                };
                (t, reason)
            })
            .collect();
        if let (Some((book, why)), Some(api)) = (from_api, &self.api) {
            let label = api.provider().label();
            picks.picks.push((
                book.title.clone(),
                pick(
                    lang,
                    &format!("it matches “{why}” (found on {label})"),
                    &format!("「{why}」に合っています（{label}で見つけた本）"),
                ),
            ));
            picks.found.push(book);
        }
        picks
    }

    /// The picks as the reply says them (each kept as a recommendation in `out`).
    fn render(&self, picks: &Picks, lang: &str, out: &mut TurnOutput) -> String {
        let mut text = pick(lang, "Books for you:\n", "あなたへのおすすめ:\n");
        for (title, reason) in &picks.picks {
            let author = match self.catalogue.find(title) {
                Some(book) => Some(book.author_in(lang).to_string()),
                None => picks
                    .found
                    .iter()
                    .find(|b| &b.title == title)
                    .and_then(|b| b.author.clone()),
            };
            let by = author.map(|a| format!(" — {a}")).unwrap_or_default();
            // the title the member knows: 『吾輩は猫である』 for a Japanese reader
            let shown = self.catalogue.title_in(title, lang);
            text.push_str(&pick(
                lang,
                &format!("- «{shown}»{by}: {reason}\n"),
                &format!("- 『{shown}』{by}: {reason}\n"),
            ));
            out.change(StateChange::Reading {
                change: ReadingChange::AddRecommendation {
                    title: title.clone(),
                    reason: reason.clone(),
                },
            });
        }
        if picks.api_failed {
            text.push_str(&pick(
                lang,
                "(The books API was unavailable, so these come from the club's catalogue only.)",
                "（書籍APIが利用できなかったため、クラブの蔵書からのみ選びました。）",
            ));
        }
        text.trim_end().to_string()
    }
}

//! Recommendation (seed 004, phase 2 — shipped): `get_user_profile`, `search_books` (the
//! local catalogue) and `save_recommendation`. Each pick is explained from the profile and
//! past insights. A book the user already logged is never recommended: `save_recommendation`
//! refuses it in code, and the floor excludes it. Without a model, the catalogue is ranked by
//! the profile's keywords. Exposed as the `recommend` flow (`/recommend`).

use super::catalogue::Catalogue;
use crate::agent::{Agent, ToolError, ToolOutput, TypedTool, typed};
use crate::flow::{CommandInfo, Flow, FlowError, TurnContext, TurnInput, TurnOutput};
use crate::i18n::pick;
use crate::llm::ChatMessage;
use crate::store::StateChange;
use crate::store::reading::ReadingChange;
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;

pub const ID: &str = "recommend";
pub const AGENT: &str = "recommendation";

/// `(title, reason)` picks by the rules: profile and insight words against the catalogue,
/// logged books excluded.
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
    if scored.is_empty() {
        // nothing to go on: well-loved books the user has not logged
        return catalogue
            .books()
            .iter()
            .filter(|b| !logged.iter().any(|l| l.eq_ignore_ascii_case(&b.title)))
            .take(k)
            .map(|b| (b.title.clone(), String::new()))
            .collect();
    }
    scored
        .into_iter()
        .take(k)
        .map(|(_, t, why)| (t, why))
        .collect()
}

struct Work {
    catalogue: Arc<Catalogue>,
    profile: String,
    logged: Vec<String>,
    picks: Vec<(String, String)>,
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
        "Search the local book catalogue.".into()
    }
    async fn run(&self, w: &mut Work, a: SearchArgs) -> Result<ToolOutput, ToolError> {
        let found: Vec<String> = w
            .catalogue
            .search(&a.query, 5)
            .into_iter()
            .map(|(_, b)| b.describe())
            .collect();
        Ok(ToolOutput::ok(if found.is_empty() {
            "No book matched.".into()
        } else {
            found.join("\n")
        }))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct SaveArgs {
    /// A title from the catalogue.
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
        let Some(book) = w.catalogue.find(&a.title) else {
            return Err(ToolError::Rejected(format!(
                "{:?} is not in the catalogue; use search_books",
                a.title
            )));
        };
        if w.logged.iter().any(|l| l.eq_ignore_ascii_case(&book.title)) {
            return Err(ToolError::Rejected(format!(
                "the user already logged {:?}; recommend another book",
                book.title
            )));
        }
        if w.picks.iter().any(|(t, _)| *t == book.title) {
            return Err(ToolError::Rejected(
                "already recommended in this answer".into(),
            ));
        }
        w.picks.push((book.title.clone(), a.reason));
        Ok(ToolOutput::ok("saved"))
    }
}

pub struct RecommendFlow {
    catalogue: Arc<Catalogue>,
}

impl RecommendFlow {
    pub fn new(catalogue: Arc<Catalogue>) -> Self {
        RecommendFlow { catalogue }
    }
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

    /// Ends without a word: the review or answer given is the last thing said.
    fn farewell(&self, _lang: &str) -> Option<String> {
        None
    }

    async fn turn(&self, ctx: TurnContext<'_>, input: TurnInput) -> Result<TurnOutput, FlowError> {
        let mut out = TurnOutput::default();
        if let TurnInput::Command { .. } = &input {
            out.unknown_command = true;
            return Ok(out);
        }
        let lang = ctx.language().to_string();
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
        let mut picks = Vec::new();
        if let Some(model) = ctx.models.for_agent(AGENT) {
            let work = Work {
                catalogue: self.catalogue.clone(),
                profile: profile.join("\n"),
                logged: logged.clone(),
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
                "You recommend books from the local catalogue. Read the profile, search, and save up to 3 picks, each \
                 with a reason tied to the user's goals, interests or insights. Never recommend a book they already \
                 logged. Answer in {}.",
                if lang == "ja" { "Japanese" } else { "English" }
            );
            match agent
                .run(
                    model.as_ref(),
                    vec![ChatMessage::system(system), ChatMessage::user("/recommend")],
                    work,
                    ctx.ledger,
                )
                .await
            {
                Ok(r) => picks = r.state.picks,
                Err(e) => {
                    tracing::warn!(error = %e, "the Recommendation agent failed; ranking by rules")
                }
            }
        }
        if picks.is_empty() {
            picks = rank(&self.catalogue, &profile, &logged, 3)
                .into_iter()
                .map(|(t, why)| {
                    let reason = if why.is_empty() {
                        pick(
                            &lang,
                            "a well-loved book to start with",
                            "最初の一冊におすすめの名作",
                        )
                    } else {
                        pick(
                            &lang,
                            &format!("it matches “{why}”"),
                            &format!("「{why}」に合っています"),
                        )
                    };
                    (t, reason)
                })
                .collect();
        }
        let mut text = pick(&lang, "Books for you:\n", "あなたへのおすすめ:\n");
        for (title, reason) in &picks {
            let book = self.catalogue.find(title);
            let by = book.map(|b| format!(" — {}", b.author)).unwrap_or_default();
            text.push_str(&format!("- «{title}»{by}: {reason}\n"));
            out.change(StateChange::Reading {
                change: ReadingChange::AddRecommendation {
                    title: title.clone(),
                    reason: reason.clone(),
                },
            });
        }
        out.say(text.trim_end());
        Ok(out)
    }
}

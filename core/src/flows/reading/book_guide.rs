//! BookGuide (seed 004): the reading companion's sub-agent for expert questions — concepts,
//! historical background, the author's intent, old language, related works.
//!
//! It is the shared research workflow ([`crate::agent::research`]: plan → research with
//! tools → reflect ⟳ → integrate with citations) over a second library: `get_book_info`
//! (the local catalogue) and `search_library` (catalogue and knowledge base together). No
//! node logic is copied from the help-desk; only the library differs. Without a model the
//! answer is the catalogue entry and the best passages, cited.

use super::catalogue::Catalogue;
use crate::agent::LlmLedger;
use crate::agent::research::{Library, Research, ResearchAnswer, ResearchWork};
use crate::agent::workflow::run_workflow;
use crate::agent::{ToolError, ToolOutput, TypedTool, typed};
use crate::kb::{KnowledgeBase, Passage};
use crate::llm::ModelRouter;
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;

pub const NAME: &str = "book_guide";

#[derive(Deserialize, JsonSchema)]
pub struct BookInfoArgs {
    /// The book's title (English or Japanese).
    pub title: String,
}

/// `get_book_info(title)`: the catalogue entry.
pub struct GetBookInfo(pub Arc<Catalogue>);

impl TypedTool<ResearchWork> for GetBookInfo {
    type Args = BookInfoArgs;
    const NAME: &'static str = "get_book_info";
    fn description(&self) -> String {
        "Look a book up in the local catalogue: author, year, genre, themes and summary.".into()
    }
    async fn run(
        &self,
        work: &mut ResearchWork,
        args: BookInfoArgs,
    ) -> Result<ToolOutput, ToolError> {
        work.searched = true;
        let book = self.0.find(&args.title).ok_or_else(|| {
            ToolError::Rejected(format!(
                "{:?} is not in the catalogue; try search_library",
                args.title
            ))
        })?;
        let passage = book.passage(1.0);
        let text = format!("[{}]\n{}", passage.citation(), passage.text);
        if !work
            .passages
            .iter()
            .any(|p| p.citation() == passage.citation())
        {
            work.passages.push(passage);
        }
        Ok(ToolOutput::ok(text))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct LibraryArgs {
    /// Words or a sentence to look for.
    pub query: String,
}

/// `search_library(query)`: the catalogue and the knowledge base.
pub struct SearchLibrary {
    catalogue: Arc<Catalogue>,
    kb: Option<Arc<KnowledgeBase>>,
}

fn search_both(
    catalogue: &Catalogue,
    kb: Option<&KnowledgeBase>,
    query: &str,
    k: usize,
) -> Vec<Passage> {
    let mut out: Vec<Passage> = catalogue
        .search(query, k)
        .into_iter()
        .map(|(s, b)| b.passage(s))
        .collect();
    if let Some(kb) = kb {
        out.extend(kb.search(query, k).unwrap_or_default());
    }
    out.truncate(k.max(1) * 2);
    out
}

impl TypedTool<ResearchWork> for SearchLibrary {
    type Args = LibraryArgs;
    const NAME: &'static str = "search_library";
    fn description(&self) -> String {
        "Search the book catalogue and the knowledge base; returns passages with their [path#heading].".into()
    }
    async fn run(
        &self,
        work: &mut ResearchWork,
        args: LibraryArgs,
    ) -> Result<ToolOutput, ToolError> {
        work.searched = true;
        let found = search_both(&self.catalogue, self.kb.as_deref(), &args.query, 3);
        let text = found
            .iter()
            .map(|p| format!("[{}]\n{}", p.citation(), p.text))
            .collect::<Vec<_>>()
            .join("\n\n");
        for p in found {
            if !work.passages.iter().any(|q| q.citation() == p.citation()) {
                work.passages.push(p);
            }
        }
        Ok(ToolOutput::ok(if text.is_empty() {
            "No passage matched.".into()
        } else {
            text
        }))
    }
}

pub struct BookGuide {
    library: Library,
    catalogue: Arc<Catalogue>,
}

impl BookGuide {
    pub fn new(catalogue: Arc<Catalogue>, kb: Option<Arc<KnowledgeBase>>) -> Self {
        let (floor_catalogue, floor_kb) = (catalogue.clone(), kb.clone());
        let library = Library::new(
            NAME,
            "a knowledgeable literary guide for a reading club (concepts, historical background, the author's intent, old language, related works)",
            ("the book catalogue", "蔵書カタログ"),
            vec![
                typed(GetBookInfo(catalogue.clone())),
                typed(SearchLibrary {
                    catalogue: catalogue.clone(),
                    kb,
                }),
            ],
            Arc::new(move |q: &str, k: usize| {
                search_both(&floor_catalogue, floor_kb.as_deref(), q, k)
            }),
        );
        BookGuide { library, catalogue }
    }

    /// Answers an expert question, optionally about the book being read.
    pub async fn answer(
        &self,
        question: &str,
        book: Option<&str>,
        models: &ModelRouter,
        ledger: &LlmLedger,
        lang: &str,
    ) -> ResearchAnswer {
        let asked = match book {
            Some(title) => format!("{question} (about the book {title})"),
            None => question.to_string(),
        };
        // about one book: its own catalogue entry and the knowledge base, never another
        // book's entry
        let this_book = book
            .and_then(|t| self.catalogue.find(t))
            .map(|b| b.title.clone());
        let only_this_book = |p: &Passage| {
            p.path != super::catalogue::PATH || this_book.as_deref() == Some(p.heading.as_str())
        };
        let research = Research {
            question: asked,
            previous: None,
            library: &self.library,
            models,
            ledger,
            lang: lang.to_string(),
            sources_allowed: book
                .map(|_| &only_this_book as &(dyn Fn(&Passage) -> bool + Send + Sync)),
        };
        let mut answer = run_workflow(&research, 3, 3).await;
        // the floor cannot read: a source counts when it names what the question asks about
        if book.is_some() && models.for_agent(&self.library.answerer).is_none() {
            answer
                .sources
                .retain(|p| names_what_is_asked(question, &p.text));
        }
        if let (Some(title), true) = (book, answer.sources.is_empty()) {
            let shown = self.catalogue.title_in(title, lang);
            answer.text = crate::i18n::pick(
                lang,
                &format!(
                    "I have no source that answers this for «{shown}», so I won't guess. You could note it as a question and look for it as you read."
                ),
                &format!(
                    "『{shown}』について、この質問に答えられる資料が手元にありません。推測では答えません。疑問として記録して、読み進めながら探してみてください。"
                ),
            );
        }
        answer
    }
}

/// Whether `text` names at least half of what `question` asks about: its longer English
/// words (question words aside) and its kanji / katakana words.
fn names_what_is_asked(question: &str, text: &str) -> bool {
    const ASIDE: &[&str] = &[
        "what", "who", "whom", "why", "how", "when", "where", "which", "does", "did", "mean",
        "means", "meaning", "here", "this", "that", "there", "the", "and", "are", "was", "were",
        "really", "about", "book", "story", "explain", "tell",
    ];
    let lower_text = text.to_lowercase();
    let lower = question.to_lowercase();
    let mut asked: Vec<String> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| w.len() >= 3 && !ASIDE.contains(w))
        .map(str::to_string)
        .collect();
    asked.extend(
        crate::i18n::kanji_katakana_words(question)
            .into_iter()
            .filter(|w| w.chars().count() >= 2),
    );
    if asked.is_empty() {
        return false;
    }
    let met = asked
        .iter()
        .filter(|w| lower_text.contains(w.as_str()))
        .count();
    met * 2 >= asked.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ChatResponse;
    use crate::llm::scripted::ScriptedModel;
    use serde_json::json;

    fn guide() -> BookGuide {
        let catalogue =
            Catalogue::parse(include_str!("../../../../config/books.toml")).expect("catalogue");
        BookGuide::new(Arc::new(catalogue), None)
    }

    #[tokio::test]
    async fn without_a_model_the_guide_cites_the_catalogue() {
        let answer = guide()
            .answer(
                "Who is K in Kokoro, and what is the Meiji era background?",
                None,
                &ModelRouter::none(),
                &LlmLedger::new(),
                "en",
            )
            .await;
        assert_eq!(answer.sources[0].citation(), "books.toml#Kokoro");
        assert!(answer.text.starts_with("**Kokoro**\n"), "{}", answer.text);
        assert!(answer.text.contains("[1] books.toml#Kokoro"));
    }

    #[tokio::test]
    async fn with_a_model_it_plans_looks_up_reflects_and_integrates() {
        let model = ScriptedModel::responses([
            ChatResponse::tool_call(
                "respond",
                json!({"subtasks": ["What does Hojoki say about impermanence?"]}),
            ),
            ChatResponse::tool_call("get_book_info", json!({"title": "方丈記"})),
            ChatResponse::text(
                "Chomei saw fires and famine as proof that nothing lasts [books.toml#Hojoki].",
            ),
            ChatResponse::tool_call("respond", json!({"is_sufficient": true, "feedback": ""})),
            ChatResponse::text(
                "In Hojoki, Kamo no Chomei reads disasters as signs of impermanence [1].",
            ),
        ]);
        let models = ModelRouter::new(Some(Arc::new(model.clone())));
        let ledger = LlmLedger::new();
        let answer = guide()
            .answer("What is mujo in Hojoki?", None, &models, &ledger, "en")
            .await;
        assert!(answer.text.starts_with(
            "In Hojoki, Kamo no Chomei reads disasters as signs of impermanence [1]."
        ));
        assert!(answer.text.contains("[1] books.toml#Hojoki"));
        assert_eq!(model.remaining(), 0);
        let agents: Vec<String> = ledger.drain().into_iter().map(|c| c.agent).collect();
        assert_eq!(
            agents,
            [
                "book_guide_planner",
                "book_guide_executor",
                "book_guide_executor",
                "book_guide_reflector",
                "book_guide_answer"
            ]
        );
    }
}

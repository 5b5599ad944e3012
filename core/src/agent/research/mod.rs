//! [`Research`]: a question answered from a [`Library`] as a [`PlanExecuteReflect`] workflow —
//! seed 003's nodes `create_plan`, `select_tools` / `execute_tools` / `create_subtask_answer`
//! (one agent loop over the library's tools), `reflect_subtask` and `create_answer`, each with
//! its rule-based floor. The help-desk (knowledge base) and the reading flow's book guide
//! (catalogue + knowledge base) are two libraries on this one implementation. A final answer
//! that says nothing beyond its citations, or names two or more people or places its
//! sources never mention, gives way to the floor's, which quotes the passages.

use crate::agent::trace::{By, Note, TracedPassage};
use crate::agent::workflow::{
    PlanExecuteReflect, Reflection, ReflectionLike, TaskOutcome, structured,
};
use crate::agent::{Agent, LlmLedger, Tool, ToolError, ToolOutput, TypedTool, typed};
use crate::kb::{KbSearch, KnowledgeBase, Passage};
use crate::llm::{ChatMessage, ModelRouter};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;

mod checks;
mod floor;

pub use checks::check_citations;
use checks::{keep_cited, names_not_in, says_something};
pub use floor::{FLOOR_CUT, FLOOR_READS, floor_cut, floor_order};

/// Sub-tasks a plan may have.
pub const MAX_SUBTASKS: usize = 5;

/// The rule-based search: a question and how many passages, to the passages found.
pub type FloorSearch =
    Arc<dyn Fn(String, usize) -> futures::future::BoxFuture<'static, Vec<Passage>> + Send + Sync>;

/// Work done on a question ahead of its search (its vector by meaning, embedded while the
/// planner thinks).
pub type Prefetch = Arc<dyn Fn(String) -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// Whether a search of a text ranks by meaning beside words.
pub type RanksByMeaning = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// What a research agent consults, and who it is.
pub struct Library {
    /// Agent names are `{name}_planner`, `{name}_executor`, `{name}_reflector`, `{name}_answer`.
    pub planner: String,
    pub executor: String,
    pub reflector: String,
    pub answerer: String,
    /// Who answers, for the prompts ("a help-desk assistant for the team").
    pub role: String,
    /// "the knowledge base" / "ナレッジベース", for the floor's answers.
    pub source_en: String,
    pub source_ja: String,
    pub tools: Vec<Arc<dyn Tool<ResearchWork>>>,
    /// The rule-based search used without a model.
    pub search: FloorSearch,
    /// Run on the question beside the planner's call, where the library has it.
    pub prefetch: Option<Prefetch>,
    /// Whether the floor's search of a text ranks by meaning too (for the trace).
    pub by_meaning: Option<RanksByMeaning>,
}

impl Library {
    pub fn new(
        name: &str,
        role: &str,
        sources: (&str, &str),
        tools: Vec<Arc<dyn Tool<ResearchWork>>>,
        search: FloorSearch,
    ) -> Self {
        Library {
            planner: format!("{name}_planner"),
            executor: format!("{name}_executor"),
            reflector: format!("{name}_reflector"),
            answerer: format!("{name}_answer"),
            role: role.to_string(),
            source_en: sources.0.to_string(),
            source_ja: sources.1.to_string(),
            tools,
            search,
            prefetch: None,
            by_meaning: None,
        }
    }

    /// The team's knowledge base with `search_kb` and `get_kb_document` (by meaning too
    /// where `search` has embeddings, the floor included).
    pub fn knowledge_base(name: &str, role: &str, search: KbSearch) -> Self {
        let (floor, ahead, ranks) = (search.clone(), search.clone(), search.clone());
        let mut library = Library::new(
            name,
            role,
            ("the knowledge base", "ナレッジベース"),
            vec![
                typed(SearchKb(search.clone())),
                typed(GetKbDocument(search.kb)),
            ],
            Arc::new(move |q: String, k: usize| {
                let floor = floor.clone();
                Box::pin(async move { floor.search(&q, k).await.unwrap_or_default() })
            }),
        );
        library.by_meaning = Some(Arc::new(move |q: &str| ranks.ranks_by_meaning(q)));
        // the question's vector, ready for the floor even once a slow model spent the turn
        library.prefetch = Some(Arc::new(move |q: String| {
            let ahead = ahead.clone();
            Box::pin(async move { ahead.prefetch(&q).await })
        }));
        library
    }
}

pub struct Research<'a> {
    pub question: String,
    /// The previous question and answer of this session (follow-ups build on it).
    pub previous: Option<(String, String)>,
    pub library: &'a Library,
    pub models: &'a ModelRouter,
    pub ledger: &'a LlmLedger,
    pub lang: String,
    /// Which passages may be sources (`None`: all): the BookGuide, asked about one book,
    /// never cites another book's entry as this one's. Enforced on every source, whoever
    /// found it (the model's tools or the floor).
    pub sources_allowed: Option<&'a (dyn Fn(&Passage) -> bool + Send + Sync)>,
}

impl Research<'_> {
    fn allowed(&self, p: &Passage) -> bool {
        self.sources_allowed.is_none_or(|allowed| allowed(p))
    }
}

/// The seed's `Plan`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PlanOut {
    /// Sub-tasks that together answer the question (1 to 5).
    pub subtasks: Vec<String>,
}

/// The research reflection: the shared base plus queries worth trying next.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ResearchReflection {
    #[serde(flatten)]
    pub base: Reflection,
    #[serde(default)]
    pub additional_queries: Vec<String>,
}

impl ReflectionLike for ResearchReflection {
    fn base(&self) -> &Reflection {
        &self.base
    }
}

/// One try at a sub-task.
#[derive(Debug, Clone, Default)]
pub struct SubAnswer {
    pub text: String,
    pub passages: Vec<Passage>,
}

/// The integrated answer.
#[derive(Debug, Clone)]
pub struct ResearchAnswer {
    pub text: String,
    pub plan: Vec<String>,
    pub sources: Vec<Passage>,
    pub sub_answers: Value,
    /// The best source meets most of the question ([`STRONG_COVERAGE`]): an answer, not
    /// "the closest I found".
    pub confident: bool,
}

/// A passage meeting at least this share of a question answers it; below, it is only the
/// closest match.
pub const STRONG_COVERAGE: f32 = 0.5;

/// A question that leans on the one before ("and on Mac?", 「それは CSV でも？」): the floor
/// searches it together with that one.
pub fn is_follow_up(question: &str) -> bool {
    let t = question.trim().to_lowercase();
    let en = [
        "and ",
        "and?",
        "what about",
        "how about",
        "also ",
        "or ",
        "but ",
    ];
    let ja = [
        "それ",
        "では",
        "じゃあ",
        "あと",
        "その",
        "また",
        "ちなみに",
        "なら",
    ];
    en.iter().any(|p| t.starts_with(p))
        || ja.iter().any(|p| t.starts_with(p))
        || (t.chars().count() <= 12
            && crate::i18n::has_japanese(&t)
            && (t.ends_with("は？") || t.ends_with("は?") || t.ends_with("では？")))
}

#[derive(Default)]
pub struct ResearchWork {
    pub passages: Vec<Passage>,
    pub searched: bool,
    /// Each tool call's search, for the turn's trace.
    pub searches: Vec<Searched>,
}

/// A search a sub-task made, as the trace keeps it.
pub struct Searched {
    pub tool: String,
    pub query: String,
    /// Ranked by meaning beside words.
    pub by_meaning: bool,
    pub passages: Vec<TracedPassage>,
}

impl Searched {
    /// A search by `tool` for `query` (by meaning too: `by_meaning`) that returned `found`.
    fn new(tool: &str, query: &str, by_meaning: bool, found: &[Passage]) -> Self {
        Searched {
            tool: tool.to_string(),
            query: query.to_string(),
            by_meaning,
            passages: found.iter().map(TracedPassage::from).collect(),
        }
    }
}

impl ResearchWork {
    /// A search by `tool` for `query` (by meaning too: `by_meaning`) returned `found`:
    /// noted for the trace.
    pub fn note_search(&mut self, tool: &str, query: &str, by_meaning: bool, found: &[Passage]) {
        self.searched = true;
        self.searches
            .push(Searched::new(tool, query, by_meaning, found));
    }
}

fn render(passages: &[Passage]) -> String {
    if passages.is_empty() {
        return "No passage matched.".into();
    }
    passages
        .iter()
        .map(|p| format!("[{}]\n{}", p.citation(), p.text))
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn remember(work: &mut ResearchWork, found: &[Passage]) {
    for p in found {
        if !work.passages.iter().any(|q| q.citation() == p.citation()) {
            work.passages.push(p.clone());
        }
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct SearchArgs {
    /// What to look for (words or a sentence, any language).
    pub query: String,
    /// How many passages (default 3, at most 10).
    #[serde(default)]
    pub k: Option<usize>,
}

/// `search_kb(query, k)`: passages with their file and heading.
pub struct SearchKb(pub KbSearch);

impl TypedTool<ResearchWork> for SearchKb {
    type Args = SearchArgs;
    const NAME: &'static str = "search_kb";
    fn description(&self) -> String {
        "Search the team's knowledge base; returns passages with their [path#heading].".into()
    }
    async fn run(
        &self,
        work: &mut ResearchWork,
        args: SearchArgs,
    ) -> Result<ToolOutput, ToolError> {
        let found = self
            .0
            .search(&args.query, args.k.unwrap_or(3).clamp(1, 10))
            .await
            .map_err(|e| ToolError::Rejected(e.to_string()))?;
        let by_meaning = self.0.ranks_by_meaning(&args.query);
        work.note_search(Self::NAME, &args.query, by_meaning, &found);
        remember(work, &found);
        Ok(ToolOutput::ok(render(&found)))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct DocumentArgs {
    /// A path from a search result (before the #).
    pub path: String,
}

/// `get_kb_document(path)`: a whole document of the knowledge base.
pub struct GetKbDocument(pub Arc<KnowledgeBase>);

impl TypedTool<ResearchWork> for GetKbDocument {
    type Args = DocumentArgs;
    const NAME: &'static str = "get_kb_document";
    fn description(&self) -> String {
        "Read a whole knowledge-base document by the path shown in search results.".into()
    }
    async fn run(
        &self,
        work: &mut ResearchWork,
        args: DocumentArgs,
    ) -> Result<ToolOutput, ToolError> {
        work.note_search(Self::NAME, &args.path, false, &[]);
        self.0
            .document(&args.path)
            .map(ToolOutput::ok)
            .ok_or_else(|| {
                ToolError::Rejected(format!(
                    "no document {:?}; use a path from search_kb results",
                    args.path
                ))
            })
    }
}

fn excerpt(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        format!("{}…", flat.chars().take(max).collect::<String>())
    }
}

/// Whether `passage` is a web page (its path an `http(s)` address) rather than the
/// library's.
pub fn is_web(passage: &Passage) -> bool {
    passage.path.starts_with("https://") || passage.path.starts_with("http://")
}

pub(crate) fn sources_block(sources: &[Passage], lang: &str) -> String {
    let mut out = if lang == "ja" {
        "出典:\n".to_string()
    } else {
        "Sources:\n".to_string()
    };
    for (i, p) in sources.iter().enumerate() {
        if is_web(p) {
            // a page found on the web, named as such beside the library's sources
            let web = if lang == "ja" { "ウェブ" } else { "web" };
            out.push_str(&format!("[{}] {} — {} ({web})\n", i + 1, p.heading, p.path));
        } else {
            out.push_str(&format!("[{}] {}\n", i + 1, p.citation()));
        }
    }
    out.trim_end().to_string()
}

impl Research<'_> {
    /// The question as the one sub-task of a turn without a plan: a follow-up ("and on
    /// Mac?") together with the question it follows, so its search has something to find.
    fn as_one_task(&self) -> String {
        match &self.previous {
            Some((before, _)) if is_follow_up(&self.question) => {
                format!("{before} {}", self.question)
            }
            _ => self.question.clone(),
        }
    }
}

#[async_trait]
impl PlanExecuteReflect for Research<'_> {
    type Task = String;
    type Attempt = SubAnswer;
    type Reflection = ResearchReflection;
    type Output = ResearchAnswer;

    async fn plan(&self) -> Vec<String> {
        let (tasks, by, why) = self.planned().await;
        self.ledger.note(Note::Plan {
            subtasks: tasks.clone(),
            by,
            why,
        });
        tasks
    }

    async fn attempt(
        &self,
        task: &String,
        previous: Option<(&SubAnswer, &ResearchReflection)>,
        try_no: u32,
    ) -> SubAnswer {
        let (answer, searches) = self.attempted(task, previous, try_no).await;
        for s in searches {
            self.ledger.note(Note::Search {
                subtask: task.clone(),
                tool: s.tool,
                query: s.query,
                by_meaning: s.by_meaning,
                passages: s.passages,
            });
        }
        answer
    }

    async fn reflect(&self, task: &String, attempt: &SubAnswer) -> ResearchReflection {
        let reflection = self.reflected(task, attempt).await;
        if self.models.for_agent(&self.library.reflector).is_some() {
            self.ledger.note(Note::Reflection {
                subtask: task.clone(),
                sufficient: reflection.base.is_sufficient,
                advice: reflection.base.feedback.clone(),
            });
        }
        reflection
    }

    async fn integrate(
        &self,
        outcomes: Vec<TaskOutcome<String, SubAnswer, ResearchReflection>>,
    ) -> ResearchAnswer {
        let (answer, by, why) = self.integrated(outcomes).await;
        self.ledger.note(Note::Answer {
            by,
            why,
            cited: answer.sources.iter().map(Passage::citation).collect(),
        });
        answer
    }
}

impl Research<'_> {
    /// The sub-tasks, who planned them and why the floor did.
    async fn planned(&self) -> (Vec<String>, By, Option<String>) {
        let Some(model) = self.models.for_agent(&self.library.planner) else {
            return (vec![self.as_one_task()], By::Floor, Some("no model".into()));
        };
        let previous = self
            .previous
            .as_ref()
            .map(|(q, a)| format!("\nEarlier in this conversation:\nQ: {q}\nA: {a}\n"))
            .unwrap_or_default();
        let system = format!(
            "You plan the answers of {}. Split the user's question into 1 to 5 self-contained sub-tasks, each \
             answerable by searching {}. A simple question is one sub-task.",
            self.library.role, self.library.source_en
        );
        let planned = structured::<PlanOut>(
            model.as_ref(),
            &self.library.planner,
            system,
            format!("{previous}Question: {}", self.question),
            self.ledger,
        );
        // the question's own search work starts beside the planner (in this task, within
        // the turn's budget): the floor searches the question when the model fails
        let planned = match &self.library.prefetch {
            Some(prefetch) => tokio::join!(planned, prefetch(self.as_one_task())).0,
            None => planned.await,
        };
        match planned {
            Ok(plan) => {
                let tasks: Vec<String> = plan
                    .subtasks
                    .into_iter()
                    .filter(|t| !t.trim().is_empty())
                    .take(MAX_SUBTASKS)
                    .collect();
                if tasks.is_empty() {
                    (
                        vec![self.as_one_task()],
                        By::Floor,
                        Some("the model planned no sub-task".into()),
                    )
                } else {
                    (tasks, By::Model, None)
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "planner failed; one sub-task");
                (vec![self.as_one_task()], By::Floor, Some(e.to_string()))
            }
        }
    }

    /// A sub-task's answer and the searches made for it (tool, query, passages).
    async fn attempted(
        &self,
        task: &String,
        previous: Option<(&SubAnswer, &ResearchReflection)>,
        _try_no: u32,
    ) -> (SubAnswer, Vec<Searched>) {
        let Some(model) = self.models.for_agent(&self.library.executor) else {
            return self.floor_attempt(task).await;
        };
        let agent = Agent::new(self.library.executor.clone(), self.library.tools.clone())
            .with_max_iterations(5)
            .with_remaining_tasks(|w: &ResearchWork| {
                if w.searched {
                    Vec::new()
                } else {
                    vec!["Search with the tools before answering".into()]
                }
            });
        let system = format!(
            "You are {}. Use the tools to find the answer in {}, then answer the sub-task in {} using only what \
             you found, citing passages as [path#heading]. Say so plainly if nothing answers it.",
            self.library.role,
            self.library.source_en,
            if self.lang == "ja" {
                "Japanese"
            } else {
                "English"
            }
        );
        let mut user = format!("User question: {}\nSub-task: {task}", self.question);
        // a retry carries the last answer and the advice, not the earlier tool messages
        if let Some((last, reflection)) = previous {
            user.push_str(&format!(
                "\n\nA previous attempt answered:\n{}\n\nAdvice for this attempt: {}",
                last.text, reflection.base.feedback
            ));
            if !reflection.additional_queries.is_empty() {
                user.push_str(&format!(
                    "\nQueries worth trying: {}",
                    reflection.additional_queries.join("; ")
                ));
            }
        }
        match agent
            .run(
                model.as_ref(),
                vec![ChatMessage::system(system), ChatMessage::user(user)],
                ResearchWork::default(),
                self.ledger,
            )
            .await
        {
            Ok(result) => (
                SubAnswer {
                    text: result.response_text,
                    passages: result.state.passages,
                },
                result.state.searches,
            ),
            Err(e) => {
                tracing::warn!(error = %e, "sub-task failed; using the search floor");
                self.floor_attempt(task).await
            }
        }
    }

    async fn reflected(&self, task: &String, attempt: &SubAnswer) -> ResearchReflection {
        let floor = ResearchReflection {
            base: Reflection {
                // retrying the same search cannot find more
                is_sufficient: true,
                feedback: String::new(),
            },
            additional_queries: Vec::new(),
        };
        let Some(model) = self.models.for_agent(&self.library.reflector) else {
            return floor;
        };
        let system = format!(
            "You check a sub-answer written by {}. Is it complete, correct with respect to the cited passages, \
             and does it answer the sub-task? If not, give concrete advice and queries to try.",
            self.library.role
        );
        let user = format!(
            "Sub-task: {task}\n\nAnswer:\n{}\n\nPassages used:\n{}",
            attempt.text,
            attempt
                .passages
                .iter()
                .map(|p| p.citation())
                .collect::<Vec<_>>()
                .join("\n")
        );
        structured::<ResearchReflection>(
            model.as_ref(),
            &self.library.reflector,
            system,
            user,
            self.ledger,
        )
        .await
        .unwrap_or(floor)
    }

    /// The answer, who wrote it and why the floor did.
    async fn integrated(
        &self,
        outcomes: Vec<TaskOutcome<String, SubAnswer, ResearchReflection>>,
    ) -> (ResearchAnswer, By, Option<String>) {
        let mut sources: Vec<Passage> = Vec::new();
        for o in &outcomes {
            for p in o.attempt.passages.iter().filter(|p| self.allowed(p)) {
                if !sources.iter().any(|s| s.citation() == p.citation()) {
                    sources.push(p.clone());
                }
            }
        }
        let plan: Vec<String> = outcomes.iter().map(|o| o.task.clone()).collect();
        let sub_answers = json!(outcomes
            .iter()
            .map(|o| json!({
                "task": o.task,
                "answer": o.attempt.text,
                "tries": o.tries,
                "completed": o.completed,
                "advice": o.reflections.iter().map(|r| r.base.feedback.clone()).collect::<Vec<_>>(),
            }))
            .collect::<Vec<_>>());
        let answered = match self.models.for_agent(&self.library.answerer) {
            Some(model) if !sources.is_empty() => {
                self.model_answer(model.as_ref(), &outcomes, &mut sources)
                    .await
            }
            Some(_) => Err("no passage to answer from".to_string()),
            None => Err("no model".to_string()),
        };
        let (text, by, why) = match answered {
            Ok(text) => (text, By::Model, None),
            Err(why) => (self.floor_answer(&sources), By::Floor, Some(why)),
        };
        let confident = sources.iter().any(|p| p.coverage >= STRONG_COVERAGE);
        (
            ResearchAnswer {
                text,
                plan,
                sources,
                sub_answers,
                confident,
            },
            by,
            why,
        )
    }

    /// The final answer the model writes from the sub-answers of `outcomes` and the
    /// numbered `sources` (left as the passages it cites), or why the floor answers instead:
    /// the model's error, an answer of citations alone, or one naming people and places the
    /// sources never mention.
    async fn model_answer(
        &self,
        model: &dyn crate::llm::ChatModel,
        outcomes: &[TaskOutcome<String, SubAnswer, ResearchReflection>],
        sources: &mut Vec<Passage>,
    ) -> Result<String, String> {
        let numbered = sources
            .iter()
            .enumerate()
            .map(|(i, p)| format!("[{}] {}\n{}", i + 1, p.citation(), excerpt(&p.text, 600)))
            .collect::<Vec<_>>()
            .join("\n\n");
        let subs = outcomes
            .iter()
            .map(|o| format!("Sub-task: {}\nAnswer: {}", o.task, o.attempt.text))
            .collect::<Vec<_>>()
            .join("\n\n");
        let previous = self
            .previous
            .as_ref()
            .map(|(q, a)| format!("Earlier: Q: {q}\nA: {a}\n\n"))
            .unwrap_or_default();
        let system = format!(
            "You are {}. Write the final answer in {}: integrate the sub-answers into one clear reply and cite \
             the numbered sources as [n]. Use only the sources.",
            self.library.role,
            if self.lang == "ja" {
                "Japanese"
            } else {
                "English"
            }
        );
        let user = format!(
            "{previous}Question: {}\n\n{subs}\n\nSources:\n{numbered}",
            self.question
        );
        let agent: Agent<()> = Agent::new(self.library.answerer.clone(), Vec::new())
            .with_max_iterations(1)
            .streaming();
        match agent
            .run(
                model,
                vec![ChatMessage::system(system), ChatMessage::user(user)],
                (),
                self.ledger,
            )
            .await
        {
            // (an answer of citations alone, or one that names people and places
            // its sources never mention, gives way to the passages themselves)
            Ok(r) if !says_something(&r.response_text) => {
                Err("the model's answer said nothing beyond its citations".into())
            }
            Ok(r) if names_not_in(&r.response_text, sources, &self.question).len() >= 2 => {
                Err("the model's answer named people or places its sources never mention".into())
            }
            Ok(r) => {
                let checked = check_citations(r.response_text.trim(), sources.len());
                let (text, cited) = keep_cited(&checked, std::mem::take(sources));
                *sources = cited;
                Ok(format!("{text}\n\n{}", sources_block(sources, &self.lang)))
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

//! [`Semantic`]: the knowledge base searched by meaning beside words, when the model server
//! offers embeddings (`[llm] embeddings_model`).
//!
//! Each passage's heading and text is embedded once. The vectors are kept in the database
//! per model — named with a fingerprint of its vector space, so a model replaced under the
//! same name starts afresh — and text (SHA-256 of what was embedded): a restart, another
//! instance or an unchanged file costs no call, and after a re-index only new or changed
//! passages are sent. They are prepared in the background: the first search of a (re)built
//! index starts it. Passages go to the server in batches of a bounded size (a slow CPU server
//! answers each within its timeout), each batch kept as it arrives; a batch that failed is
//! tried again in the background with back-off (5 s, doubling to 5 minutes) until all are
//! embedded, from where it stopped. Until they are ready, and whenever the server cannot
//! embed a question (down, slow, garbage), BM25 answers alone: words are the floor. A question is embedded once (the last few are kept in memory, never
//! in the database); logs never carry them. A model trained with prefixes gets them
//! ([`Prefixes`]: E5's `query: ` before questions, `passage: ` before passages).

use super::{KbError, KnowledgeBase, Passage};
use crate::llm::{EmbedKind, Embedder};
use crate::store::SearchCache;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Texts per embeddings request by default (`[llm] embeddings_batch`): a CPU server
/// embeds a few passages a second.
pub const DEFAULT_BATCH: usize = 8;
/// A passage is embedded from its first this many characters (models read a few hundred
/// tokens).
const EMBEDDED_CHARS: usize = 2_000;
/// How long after the first failed preparation the next one starts; doubled after each
/// failure, up to [`RETRY_AT_MOST`].
const RETRY_AFTER: Duration = Duration::from_secs(5);
const RETRY_AT_MOST: Duration = Duration::from_secs(300);

/// The passage vectors of one build of the index, of unit length.
struct Vectors {
    built_at: chrono::DateTime<chrono::Utc>,
    unit: Vec<Vec<f32>>,
    /// Whether meaning is used for questions in English (and other non-CJK text) and in
    /// Japanese — where the model passed [`SELF_CHECK`] on that language's passages — and
    /// from what similarity a passage is found by meaning alone ([`Check::alone_at`]).
    english: Option<f32>,
    japanese: Option<f32>,
    /// What the self-check found, per language with passages.
    checks: Vec<LanguageCheck>,
    /// The last questions' vectors, newest last: a turn's sub-tasks, its floor and a
    /// follow-up often search the same text, and each would cost the server a call.
    asked: Mutex<VecDeque<(String, Arc<Vec<f32>>)>>,
}

/// What [`Semantic::prepare`] found for one language of the passages: the share of its
/// headings whose own passage is the closest in meaning, and so whether its questions are
/// searched by meaning too (80 % of headings or more) or by words alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LanguageCheck {
    /// `"en"` (English and other non-CJK text) or `"ja"`.
    pub language: &'static str,
    pub headings_found_pct: u32,
    pub by_meaning: bool,
}

impl std::fmt::Display for LanguageCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let language = match self.language {
            "ja" => "Japanese",
            _ => "English",
        };
        let found = self.headings_found_pct;
        let threshold = (SELF_CHECK * 100.0).round() as u32;
        if self.by_meaning {
            write!(
                f,
                "{language} questions by meaning too ({found} % of headings find their passage)"
            )
        } else {
            write!(
                f,
                "{language} questions by words alone ({found} % of headings find their passage, under {threshold} %)"
            )
        }
    }
}

/// A question's meaning against one build of the passages ([`Semantic::meaning_of`]).
struct Meaning {
    built_at: chrono::DateTime<chrono::Utc>,
    /// The cosine similarity of each passage to the question.
    similarity: Vec<f32>,
    /// From what similarity a passage is found by meaning alone.
    alone_at: f32,
}

/// Questions whose vectors are kept ([`Vectors::asked`]).
const QUESTIONS_KEPT: usize = 64;

impl Vectors {
    /// From what similarity a passage is found by meaning alone for `query`, in its
    /// language; `None` where that language is searched by words alone.
    fn alone_at_for(&self, query: &str) -> Option<f32> {
        if query.chars().any(super::is_cjk) {
            self.japanese
        } else {
            self.english
        }
    }

    fn asked_before(&self, query: &str) -> Option<Arc<Vec<f32>>> {
        let asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        asked
            .iter()
            .rev()
            .find(|(q, _)| q == query)
            .map(|(_, v)| v.clone())
    }

    fn keep_asked(&self, query: &str, vector: Arc<Vec<f32>>) {
        let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        if asked.len() >= QUESTIONS_KEPT {
            asked.pop_front();
        }
        asked.push_back((query.to_string(), vector));
    }
}

/// What is written before each text an embeddings model is given: asymmetric models are
/// trained with one prefix for questions and another for the passages that answer them
/// (E5: `query: ` / `passage: `; nomic-embed-text: `search_query: ` / `search_document: `),
/// and rank worse without. Empty (the default) for models that take plain text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prefixes {
    /// Before a question (and a heading in the self-check, which stands for one).
    pub query: String,
    /// Before a passage's heading and text.
    pub passage: String,
}

/// How far [`Semantic::prepare_with_progress`] has come: passages with their vectors (kept
/// before, or embedded now) of all.
pub type Progress<'a> = &'a (dyn Fn(usize, usize) + Send + Sync);

pub struct Semantic {
    embedder: Arc<dyn Embedder>,
    prefixes: Prefixes,
    /// Texts per embeddings request.
    batch: usize,
    cache: Option<Arc<dyn SearchCache>>,
    ready: RwLock<Option<Arc<Vectors>>>,
    /// One preparation at a time.
    preparing: tokio::sync::Mutex<()>,
    /// A preparation was started in the background and has not ended.
    started: AtomicBool,
    /// The build whose vectors failed [`SELF_CHECK`]: not tried again until the index is
    /// rebuilt.
    refused: Mutex<Option<chrono::DateTime<chrono::Utc>>>,
}

/// The share of headings whose own passage must be the closest in meaning, per language:
/// a model that does worse (a chat model asked for embeddings, or an English model on
/// Japanese) would rank passages by noise, so its vectors are not used for that language.
const SELF_CHECK: f32 = 0.8;
/// Headings the self-check embeds at most.
const SELF_CHECK_HEADINGS: usize = 200;

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_bytes(bytes: &[u8]) -> Option<Vec<f32>> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// SHA-256 of `text`, hex.
fn text_hash(text: &str) -> String {
    crate::store::console::token_hash(text)
}

/// What the self-check learns of a model on one language's passages.
#[derive(Debug, Clone, Copy)]
struct Check {
    /// The share of headings whose own passage is the closest.
    found: f32,
    /// The mean similarity of a heading to its own passage, and to the others.
    own: f32,
    other: f32,
}

impl Check {
    /// The similarity at which a passage is close enough to a question to be found by
    /// meaning alone: a third of the way from how close a heading is to other passages to
    /// how close it is to its own (the model's own scale, whatever its range).
    fn alone_at(&self) -> f32 {
        self.other + (self.own - self.other) / 3.0
    }
}

/// [`Check`] of `headings` (at least one, each with the passages that carry it) against
/// `passages` (those of one language, `of`, are compared).
fn self_check(headings: &[(Vec<f32>, Vec<usize>)], passages: &[Vec<f32>], of: &[usize]) -> Check {
    let (mut found, mut own, mut other, mut others) = (0usize, 0.0f32, 0.0f32, 0usize);
    for (v, mine) in headings {
        let v = unit(v.clone());
        let best = of
            .iter()
            .copied()
            .max_by(|&a, &b| dot(&passages[a], &v).total_cmp(&dot(&passages[b], &v)));
        if best.is_some_and(|b| mine.contains(&b)) {
            found += 1;
        }
        own += mine
            .iter()
            .map(|&n| dot(&passages[n], &v))
            .fold(f32::MIN, f32::max);
        for &n in of.iter().filter(|n| !mine.contains(n)) {
            other += dot(&passages[n], &v);
            others += 1;
        }
    }
    let count = headings.len() as f32;
    Check {
        found: found as f32 / count,
        own: own / count,
        other: if others == 0 {
            0.0
        } else {
            other / others as f32
        },
    }
}

impl Semantic {
    /// Vectors from `embedder`, kept in `cache` (none: kept in memory only).
    pub fn new(embedder: Arc<dyn Embedder>, cache: Option<Arc<dyn SearchCache>>) -> Self {
        Semantic {
            embedder,
            prefixes: Prefixes::default(),
            batch: DEFAULT_BATCH,
            cache,
            ready: RwLock::new(None),
            preparing: tokio::sync::Mutex::new(()),
            started: AtomicBool::new(false),
            refused: Mutex::new(None),
        }
    }

    /// The same search with `prefixes` before the texts the model is given.
    pub fn with_prefixes(mut self, prefixes: Prefixes) -> Self {
        self.prefixes = prefixes;
        self
    }

    /// The same search sending at most `batch` texts per embeddings request (at least one).
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// `text` as a question for the model.
    fn as_query(&self, text: &str) -> String {
        format!("{}{text}", self.prefixes.query)
    }

    /// The embeddings model.
    pub fn model(&self) -> &str {
        self.embedder.model()
    }

    /// One text embedded: the vectors' length, or why the server cannot give them.
    pub async fn probe(&self) -> Result<usize, KbError> {
        Ok(self.space().await?.1)
    }

    /// The model's vector space as the database names it: the model, the vectors' length
    /// and where a fixed text's four largest components lie. A model replaced under the
    /// same name (a newer `ollama pull`) gives another space, and its passages are embedded
    /// again instead of compared with vectors of the old one.
    async fn space(&self) -> Result<(String, usize), KbError> {
        let v = self
            .embedder
            .embed(
                &[self.as_query("Kaiwa: a help-desk question")],
                EmbedKind::Query,
            )
            .await?;
        let v = v.into_iter().next().unwrap_or_default();
        let mut largest: Vec<usize> = (0..v.len()).collect();
        largest.sort_by(|&a, &b| v[b].abs().total_cmp(&v[a].abs()).then(a.cmp(&b)));
        largest.truncate(4);
        largest.sort_unstable();
        let at: Vec<String> = largest.iter().map(ToString::to_string).collect();
        Ok((
            format!("{}@{}:{}", self.model(), v.len(), at.join(".")),
            v.len(),
        ))
    }

    /// Whether the passages of `kb`'s current index have their vectors (searches use
    /// meaning).
    pub fn is_ready_for(&self, kb: &KnowledgeBase) -> bool {
        self.current(kb).is_some()
    }

    fn current(&self, kb: &KnowledgeBase) -> Option<Arc<Vectors>> {
        let built_at = kb.built_at();
        self.ready
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|v| v.built_at == built_at)
    }

    /// The vectors the database keeps in `space`, by text hash.
    async fn kept(&self, space: &str) -> Result<HashMap<String, Vec<f32>>, KbError> {
        let mut known = HashMap::new();
        if let Some(cache) = &self.cache {
            for (hash, bytes) in cache
                .passage_vectors(space)
                .await
                .map_err(KbError::Vectors)?
            {
                if let Some(v) = from_bytes(&bytes) {
                    known.insert(hash, v);
                }
            }
        }
        Ok(known)
    }

    /// The vectors of `texts` (of `kind`): from `known` (what the database keeps), from the
    /// server for the others, a batch at a time (each kept, and added to `known`, as it
    /// arrives; `progress` told); returns them with how many the server made.
    async fn vectors(
        &self,
        texts: &[String],
        kind: EmbedKind,
        (known, space): (&mut HashMap<String, Vec<f32>>, &str),
        progress: Progress<'_>,
    ) -> Result<(Vec<Vec<f32>>, usize), KbError> {
        let hashes: Vec<String> = texts.iter().map(|t| text_hash(t)).collect();
        let mut missing: Vec<usize> = (0..texts.len())
            .filter(|&n| !known.contains_key(&hashes[n]))
            .collect();
        missing.dedup_by_key(|n| hashes[*n].clone());
        let mut done = 0;
        for batch in missing.chunks(self.batch) {
            let inputs: Vec<String> = batch.iter().map(|&n| texts[n].clone()).collect();
            let vectors = self.embedder.embed(&inputs, kind).await?;
            if vectors.len() != inputs.len() {
                return Err(KbError::Embeddings(crate::llm::ModelError::Malformed(
                    "the server gave a vector per text of a batch, less or more".into(),
                )));
            }
            let rows: Vec<(String, Vec<u8>)> = batch
                .iter()
                .zip(&vectors)
                .map(|(&n, v)| (hashes[n].clone(), to_bytes(v)))
                .collect();
            if let Some(cache) = &self.cache {
                cache
                    .keep_passage_vectors(space, &rows)
                    .await
                    .map_err(KbError::Vectors)?;
            }
            for (&n, v) in batch.iter().zip(vectors) {
                known.insert(hashes[n].clone(), v);
            }
            done += batch.len();
            progress(texts.len() - missing.len() + done, texts.len());
        }
        let out: Vec<Vec<f32>> = hashes
            .iter()
            .filter_map(|h| known.get(h).cloned())
            .collect();
        let width = out.first().map_or(0, Vec::len);
        if out.len() != texts.len() || out.iter().any(|v| v.len() != width) {
            return Err(KbError::Embeddings(crate::llm::ModelError::Malformed(
                "the server gave vectors of different lengths".into(),
            )));
        }
        Ok((out, missing.len()))
    }

    /// Gives every passage of `kb`'s current index its vector (kept in the database, or
    /// from the server) and checks, per language, that the model tells them apart (each
    /// heading finds its own passage for 80 % of headings). Searches use meaning after it.
    /// Returns what the check found for each language that has passages.
    pub async fn prepare(&self, kb: &KnowledgeBase) -> Result<Vec<LanguageCheck>, KbError> {
        self.prepare_with_progress(kb, &|_, _| {}).await
    }

    /// [`Self::prepare`], telling `progress` after each batch how many of the passages have
    /// their vectors.
    pub async fn prepare_with_progress(
        &self,
        kb: &KnowledgeBase,
        progress: Progress<'_>,
    ) -> Result<Vec<LanguageCheck>, KbError> {
        let _one = self.preparing.lock().await;
        if let Some(ready) = self.current(kb) {
            return Ok(ready.checks.clone());
        }
        let started = Instant::now();
        let (built_at, passages) = kb.passages_to_embed();
        let texts: Vec<String> = passages
            .iter()
            .map(|(heading, text)| {
                let text: String = format!("{heading}\n{text}")
                    .chars()
                    .take(EMBEDDED_CHARS)
                    .collect();
                format!("{}{text}", self.prefixes.passage)
            })
            .collect();
        let (space, _) = self.space().await?;
        let mut known = self.kept(&space).await?;
        let (vectors, embedded) = self
            .vectors(&texts, EmbedKind::Passage, (&mut known, &space), progress)
            .await?;
        let unit: Vec<Vec<f32>> = vectors.into_iter().map(unit).collect();
        // the self-check, per language: each heading should find its own passage
        let mut checked: [Option<Check>; 2] = [None; 2];
        for (at, japanese) in [(0, false), (1, true)] {
            let mut headings: Vec<(String, Vec<usize>)> = Vec::new();
            let mut of = Vec::new();
            for (n, (heading, text)) in passages.iter().enumerate() {
                if text.chars().any(super::is_cjk) != japanese {
                    continue;
                }
                of.push(n);
                match headings.iter_mut().find(|(h, _)| h == heading) {
                    Some((_, own)) => own.push(n),
                    None if !heading.trim().is_empty() => headings.push((heading.clone(), vec![n])),
                    None => {}
                }
            }
            headings.truncate(SELF_CHECK_HEADINGS);
            let named: Vec<String> = headings.iter().map(|(h, _)| self.as_query(h)).collect();
            if named.is_empty() {
                continue;
            }
            let (heading_vectors, _) = self
                .vectors(&named, EmbedKind::Query, (&mut known, &space), &|_, _| {})
                .await?;
            let pairs: Vec<(Vec<f32>, Vec<usize>)> = heading_vectors
                .into_iter()
                .zip(headings.into_iter().map(|(_, own)| own))
                .collect();
            checked[at] = Some(self_check(&pairs, &unit, &of));
        }
        // meaning for a language whose passages the model tells apart
        let [english, japanese] = checked.map(|c| c.filter(|c| c.found >= SELF_CHECK));
        let pct = |c: Option<Check>| c.map_or(0, |c| (c.found * 100.0).round() as u32);
        if checked.iter().any(Option::is_some) && english.is_none() && japanese.is_none() {
            *self.refused.lock().unwrap_or_else(|p| p.into_inner()) = Some(built_at);
            return Err(KbError::WeakEmbeddings {
                model: self.model().to_string(),
                found: pct(checked[0]).max(pct(checked[1])),
            });
        }
        let checks: Vec<LanguageCheck> =
            [("en", checked[0], english), ("ja", checked[1], japanese)]
                .into_iter()
                .filter_map(|(language, check, used)| {
                    check.map(|c| LanguageCheck {
                        language,
                        headings_found_pct: pct(Some(c)),
                        by_meaning: used.is_some(),
                    })
                })
                .collect();
        tracing::info!(
            model = self.model(),
            passages = texts.len(),
            embedded,
            english_headings_found_pct = pct(checked[0]),
            japanese_headings_found_pct = pct(checked[1]),
            ms = started.elapsed().as_millis() as u64,
            "knowledge base: passages embedded; searching by meaning too where the model tells passages apart (80 %)"
        );
        *self.ready.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(Vectors {
            built_at,
            unit,
            english: english.map(|c| c.alone_at()),
            japanese: japanese.map(|c| c.alone_at()),
            checks: checks.clone(),
            asked: Mutex::new(VecDeque::new()),
        }));
        Ok(checks)
    }

    /// Starts [`Self::prepare`] in the background unless one runs or this build's vectors
    /// were refused (at start, so the first question finds them ready). A preparation that
    /// fails (the server down, slow or answering garbage) is tried again with back-off
    /// until it succeeds, the model is refused, or this search is dropped; each try sends
    /// only what the database does not keep yet.
    pub fn prepare_in_background(self: &Arc<Self>, kb: &Arc<KnowledgeBase>) {
        let refused =
            *self.refused.lock().unwrap_or_else(|p| p.into_inner()) == Some(kb.built_at());
        if refused || self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let (me, kb) = (Arc::downgrade(self), kb.clone());
        tokio::spawn(async move {
            let mut wait = RETRY_AFTER;
            loop {
                let Some(semantic) = me.upgrade() else { return };
                match semantic.prepare(&kb).await {
                    Ok(_) => {}
                    Err(e @ KbError::WeakEmbeddings { .. }) => {
                        tracing::warn!(model = semantic.model(), error = %e, "knowledge base: searching by words alone");
                    }
                    Err(e) => {
                        tracing::warn!(model = semantic.model(), error = %e, retry_in_secs = wait.as_secs(), "knowledge base: passages could not all be embedded yet; searching by words alone meanwhile");
                        drop(semantic);
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(RETRY_AT_MOST);
                        continue;
                    }
                }
                semantic.started.store(false, Ordering::SeqCst);
                return;
            }
        });
    }

    /// The best `k` passages for `query` by words and meaning
    /// ([`KnowledgeBase::search_by_meaning`]); by words alone while the passages' vectors
    /// are not ready or the question cannot be embedded.
    pub async fn search(
        self: &Arc<Self>,
        kb: &Arc<KnowledgeBase>,
        query: &str,
        k: usize,
    ) -> Result<Vec<Passage>, KbError> {
        if self.current(kb).is_none() {
            self.prepare_in_background(kb);
        }
        match self.meaning_of(kb, query).await {
            Some(m) => kb.search_by_meaning(query, k, m.built_at, &m.similarity, m.alone_at),
            None => kb.search(query, k),
        }
    }

    /// [`KnowledgeBase::explain`] for `query` as [`Self::search`] ranks it: with meaning
    /// when the passages' vectors are ready, its language is searched by meaning and the
    /// question can be embedded (the second value says whether it was), by words otherwise.
    pub async fn explain(
        &self,
        kb: &KnowledgeBase,
        query: &str,
        k: usize,
    ) -> Result<(Vec<super::Explained>, bool), KbError> {
        match self.meaning_of(kb, query).await {
            Some(m) => Ok((
                kb.explain(query, k, Some((m.built_at, &m.similarity, m.alone_at)))?,
                true,
            )),
            None => Ok((kb.explain(query, k, None)?, false)),
        }
    }

    /// Each passage's similarity to `query`, where a search of it ranks by meaning: the
    /// passages' vectors are ready, its language is searched by meaning and it could be
    /// embedded.
    async fn meaning_of(&self, kb: &KnowledgeBase, query: &str) -> Option<Meaning> {
        let vectors = self.current(kb)?;
        let alone_at = vectors.alone_at_for(query)?;
        let asked = self.question_vector(&vectors, query).await?;
        Some(Meaning {
            built_at: vectors.built_at,
            similarity: vectors.unit.iter().map(|p| dot(p, &asked)).collect(),
            alone_at,
        })
    }

    /// Whether a search of `query` now ranks by meaning too: the passages' vectors are
    /// ready and its language is searched by meaning (its vector then kept or embedded).
    pub fn ranks_by_meaning(&self, kb: &KnowledgeBase, query: &str) -> bool {
        self.current(kb)
            .is_some_and(|v| v.alone_at_for(query).is_some())
    }

    /// Embeds `query` ahead of a search of it (kept with the last questions' vectors), where
    /// its language is searched by meaning and it was not asked before: a help-desk turn
    /// embeds its question beside the planner's call, so the rule-based floor still finds
    /// by meaning when the model's slowness has spent the turn's budget.
    pub async fn prefetch(&self, kb: &KnowledgeBase, query: &str) {
        if let Some(vectors) = self.current(kb).filter(|v| v.alone_at_for(query).is_some()) {
            self.question_vector(&vectors, query).await;
        }
    }

    /// `query`'s vector of unit length: the one kept since it was last asked, or the
    /// server's (then kept); `None` (said in the log) where the server cannot give one of
    /// the passages' length.
    async fn question_vector(&self, vectors: &Vectors, query: &str) -> Option<Arc<Vec<f32>>> {
        if let Some(asked) = vectors.asked_before(query) {
            return Some(asked);
        }
        let width = vectors.unit.first().map_or(0, Vec::len);
        match self
            .embedder
            .embed(&[self.as_query(query)], EmbedKind::Query)
            .await
        {
            Ok(mut v) if v.len() == 1 && v[0].len() == width => {
                let asked = Arc::new(unit(v.remove(0)));
                vectors.keep_asked(query, asked.clone());
                Some(asked)
            }
            Ok(_) => {
                tracing::warn!(
                    model = self.model(),
                    "the question's vector is not the passages' length; searching by words alone"
                );
                None
            }
            Err(e) => {
                tracing::warn!(model = self.model(), error = %e, "the question could not be embedded; searching by words alone");
                None
            }
        }
    }
}

/// The knowledge base as the help-desk searches it: by words, and by meaning too where
/// embeddings are configured.
#[derive(Clone)]
pub struct KbSearch {
    pub kb: Arc<KnowledgeBase>,
    pub meaning: Option<Arc<Semantic>>,
}

impl From<Arc<KnowledgeBase>> for KbSearch {
    /// By words alone.
    fn from(kb: Arc<KnowledgeBase>) -> Self {
        KbSearch { kb, meaning: None }
    }
}

impl KbSearch {
    /// Whether a search of `query` ranks by meaning too ([`Semantic::ranks_by_meaning`]).
    pub fn ranks_by_meaning(&self, query: &str) -> bool {
        self.meaning
            .as_ref()
            .is_some_and(|m| m.ranks_by_meaning(&self.kb, query))
    }

    /// Embeds `query` ahead of its search ([`Semantic::prefetch`]); nothing without
    /// embeddings.
    pub async fn prefetch(&self, query: &str) {
        if let Some(meaning) = &self.meaning {
            meaning.prefetch(&self.kb, query).await;
        }
    }

    /// The best `k` passages for `query` ([`Semantic::search`], or
    /// [`KnowledgeBase::search`] without embeddings).
    pub async fn search(&self, query: &str, k: usize) -> Result<Vec<Passage>, KbError> {
        match &self.meaning {
            Some(meaning) => meaning.search(&self.kb, query, k).await,
            None => self.kb.search(query, k),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{from_bytes, to_bytes};

    #[test]
    fn vectors_round_trip_through_bytes() {
        let v = vec![0.5, -1.25, 3.0e-7];
        assert_eq!(from_bytes(&to_bytes(&v)), Some(v));
        assert_eq!(from_bytes(&[1, 2, 3]), None);
        assert_eq!(from_bytes(&[]), None);
    }
}

//! The knowledge base: Markdown and text files under a folder (`config/kb/**/*.md|*.txt`),
//! split into passages by heading and indexed with tantivy (BM25) in memory.
//!
//! Indexed twice, the heading counting double: English text (lowercased, stop words —
//! question words included — removed, stemmed) and the CJK characters as character bigrams,
//! so Japanese questions find Japanese passages without a dictionary. Queries are built from
//! the same analyzers as term queries (never parsed as query syntax, so user text cannot
//! break them); Japanese grammar bigrams (「には」「ですか」) are left out, and a small table of
//! help-desk synonyms in both languages (stop / end / やめる / 終える, export /
//! エクスポート …) widens a question, at a lower weight. Passages in the question's language
//! come first; the other language's only when the question's has none. Each passage found
//! carries its [`Passage::coverage`]: how much of the question it matches, which tells a
//! strong match from a weak one. [`KnowledgeBase::refresh_if_changed`]
//! rebuilds the index when a file was added, removed or modified. Documents are read only
//! from the indexed set: a path outside it is simply not found.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::SystemTime;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, PhraseQuery, Query, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, STORED, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::tokenizer::{
    Language, LowerCaser, NgramTokenizer, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
    WhitespaceTokenizer,
};
use tantivy::{Index, IndexReader, TantivyDocument, Term};
use vocabulary::{CJK_STOP_BIGRAMS, EN_STOP_WORDS, SYNONYMS};

pub mod japanese;
mod semantic;
mod vocabulary;

pub use japanese::Morphology;
pub use semantic::{KbSearch, Semantic};

/// A passage found by a search.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Passage {
    /// Path relative to the knowledge-base folder, with `/` separators.
    pub path: String,
    pub heading: String,
    pub text: String,
    pub score: f32,
    /// The share of the question's words (or their synonyms) the passage contains, 0–1.
    #[serde(default)]
    pub coverage: f32,
}

impl Passage {
    /// `path#heading`, as answers cite it.
    pub fn citation(&self) -> String {
        format!("{}#{}", self.path, self.heading)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KbError {
    #[error("cannot read the knowledge base at {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("search index error: {0}")]
    Index(#[from] tantivy::TantivyError),
    #[error("the Japanese dictionary cannot be used: {0}")]
    Dictionary(String),
    #[error("passages could not be embedded: {0}")]
    Embeddings(#[from] crate::llm::ModelError),
    #[error("passage vectors could not be read or kept: {0}")]
    Vectors(crate::store::StoreError),
    #[error(
        "the embeddings model {model:?} finds a passage by its own heading for {found} % of headings (80 % needed): its vectors are not used"
    )]
    WeakEmbeddings { model: String, found: u32 },
}

#[derive(Clone, Copy)]
struct Fields {
    /// The passage's place in [`Indexed::sections`].
    ord: Field,
    en: Field,
    cjk: Field,
    head_en: Field,
    head_cjk: Field,
    /// The base forms of Japanese words ([`Morphology`]), when there is a dictionary.
    ja: Field,
    head_ja: Field,
}

/// A passage as indexed.
struct Section {
    /// Relative to the knowledge-base folder, with `/` separators.
    path: String,
    heading: String,
    text: String,
    /// Its search tokens ([`tokens`]): worked out once, at indexing, for [`coverage`].
    words: Vec<String>,
    /// A document's title passage (its overview).
    overview: bool,
}

struct Indexed {
    index: Index,
    reader: IndexReader,
    fields: Fields,
    fingerprint: Vec<(PathBuf, u64, Option<SystemTime>)>,
    documents: BTreeMap<String, String>,
    /// Every passage, by its `ord`.
    sections: Vec<Section>,
    /// Each file as indexed, by path.
    listing: Vec<DocumentInfo>,
    built_at: chrono::DateTime<chrono::Utc>,
}

/// A file of the knowledge base as indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentInfo {
    /// Relative to the knowledge-base folder, with `/` separators.
    pub path: String,
    pub passages: usize,
    pub bytes: usize,
    /// The file's modification time when it was read.
    pub modified: Option<chrono::DateTime<chrono::Utc>>,
}

pub struct KnowledgeBase {
    root: PathBuf,
    inner: RwLock<Indexed>,
    morphology: Option<std::sync::Arc<Morphology>>,
}

fn is_cjk(c: char) -> bool {
    matches!(c, '\u{3040}'..='\u{30ff}' | '\u{3400}'..='\u{4dbf}' | '\u{4e00}'..='\u{9fff}' | '\u{f900}'..='\u{faff}' | '\u{ff66}'..='\u{ff9f}')
}

/// The CJK runs of `text`, other characters as single spaces.
fn cjk_only(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if is_cjk(c) {
            out.push(c);
        } else if !out.ends_with(' ') {
            out.push(' ');
        }
    }
    out
}

/// A token of the CJK bigram analyzer (not an English word).
fn is_cjk_token(token: &str) -> bool {
    token.chars().any(is_cjk)
}

/// The search tokens of `text`: its English words (analysed) and its CJK bigrams less the
/// grammar ones, each once.
fn tokens(index: &Index, fields: Fields, text: &str) -> Result<Vec<String>, KbError> {
    let mut out = Vec::new();
    for (field, input) in [(fields.en, text.to_string()), (fields.cjk, cjk_only(text))] {
        let mut analyzer = index.tokenizer_for_field(field)?;
        let mut stream = analyzer.token_stream(&input);
        while stream.advance() {
            let token = stream.token().text.trim().to_string();
            // a bigram with hiragana in it is grammar more often than meaning (「を始」「める」);
            // the verbs that matter come back through the synonym groups
            let grammar = token
                .chars()
                .any(|c| ('\u{3040}'..='\u{309f}').contains(&c));
            if token.is_empty()
                || grammar
                || CJK_STOP_BIGRAMS.contains(&token.as_str())
                || out.contains(&token)
            {
                continue;
            }
            out.push(token);
        }
    }
    Ok(out)
}

/// A synonym group a question names: its words and their search tokens.
struct Group {
    members: &'static [&'static str],
    tokens: Vec<String>,
}

/// A unit of a question's meaning: an English word (analysed), a run of kanji / katakana,
/// or a synonym group.
enum Unit {
    Word(String),
    Run(String),
    Group(usize),
}

/// The units of `query`: its English words and its kanji / katakana runs (hiragana is
/// grammar) — or, with a dictionary, the base forms of its Japanese words (`lemmas`) —
/// those a named synonym group covers counted once, as the group.
fn units(
    i: &Indexed,
    query: &str,
    groups: &[Group],
    lemmas: Option<&[String]>,
) -> Result<Vec<Unit>, KbError> {
    let mut out: Vec<Unit> = (0..groups.len()).map(Unit::Group).collect();
    let grouped = |token: &str| groups.iter().any(|g| g.tokens.iter().any(|t| t == token));
    let mut analyzer = i.index.tokenizer_for_field(i.fields.en)?;
    let mut stream = analyzer.token_stream(query);
    let mut words: Vec<String> = Vec::new();
    while stream.advance() {
        let token = stream.token().text.clone();
        if !token.chars().any(is_cjk) && !grouped(&token) && !words.contains(&token) {
            words.push(token);
        }
    }
    out.extend(words.into_iter().map(Unit::Word));
    if let Some(lemmas) = lemmas {
        for lemma in lemmas.iter().filter(|l| l.chars().any(is_cjk)) {
            let in_group = groups.iter().any(|g| {
                g.members
                    .iter()
                    .filter(|m| !m.is_ascii() && query.contains(*m))
                    .any(|m| m.contains(lemma.as_str()) || lemma.contains(*m))
            });
            if !in_group {
                out.push(Unit::Word(lemma.clone()));
            }
        }
        return Ok(out);
    }
    for run in crate::i18n::kanji_katakana_words(query) {
        let in_group = groups.iter().any(|g| {
            g.members
                .iter()
                .filter(|m| !m.is_ascii() && query.contains(*m))
                .any(|m| m.contains(run.as_str()) || run.contains(*m))
        });
        // one character says little on its own (「使」「置」)
        if !in_group && run.chars().count() > 1 {
            out.push(Unit::Run(run));
        }
    }
    Ok(out)
}

/// The share of the question's `units` a passage meets: a word among its `words`, a run in
/// its `text`, a group by any of its words.
fn coverage(units: &[Unit], groups: &[Group], words: &[String], text: &str) -> f32 {
    if units.is_empty() {
        return 0.0;
    }
    let met = units
        .iter()
        .filter(|unit| match unit {
            Unit::Word(w) => words.contains(w),
            Unit::Run(r) => text.contains(r.as_str()),
            Unit::Group(g) => {
                groups[*g].tokens.iter().any(|t| words.contains(t))
                    || groups[*g]
                        .members
                        .iter()
                        .any(|m| !m.is_ascii() && text.contains(*m))
            }
        })
        .count();
    met as f32 / units.len() as f32
}

/// Whether `heading` is the title (`#`) of the document `content`: an overview, not a
/// section.
fn is_title(content: &str, heading: &str) -> bool {
    content.lines().any(|l| {
        l.trim_start()
            .strip_prefix("# ")
            .is_some_and(|h| h.trim() == heading)
    })
}

fn files(root: &Path) -> Result<Vec<PathBuf>, KbError> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| KbError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md" || e == "txt") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

fn fingerprint(paths: &[PathBuf]) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    paths
        .iter()
        .map(|p| {
            let meta = std::fs::metadata(p).ok();
            (
                p.clone(),
                meta.as_ref().map_or(0, |m| m.len()),
                meta.and_then(|m| m.modified().ok()),
            )
        })
        .collect()
}

/// Splits a file into `(heading, text)` passages: Markdown by headings, text by paragraphs.
pub fn split_passages(name: &str, content: &str, markdown: bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if markdown {
        let mut heading = name.to_string();
        let mut body = String::new();
        for line in content.lines() {
            let trimmed = line.trim_start();
            if trimmed.starts_with('#') {
                if !body.trim().is_empty() {
                    out.push((heading.clone(), body.trim().to_string()));
                }
                heading = trimmed.trim_start_matches('#').trim().to_string();
                body.clear();
            } else {
                body.push_str(line);
                body.push('\n');
            }
        }
        if !body.trim().is_empty() {
            out.push((heading, body.trim().to_string()));
        }
    } else {
        for (i, para) in content
            .split("\n\n")
            .filter(|p| !p.trim().is_empty())
            .enumerate()
        {
            out.push((format!("{name}-{}", i + 1), para.trim().to_string()));
        }
    }
    out
}

/// One passage as the index holds it: its text for each analyzer, the heading counting
/// double; and the words [`coverage`] reads.
fn passage_document(
    index: &Index,
    fields: Fields,
    morphology: Option<&Morphology>,
    heading: &str,
    text: &str,
) -> Result<(TantivyDocument, Vec<String>), KbError> {
    let mut doc = TantivyDocument::default();
    let searchable = format!("{heading}\n{text}");
    doc.add_text(fields.en, &searchable);
    doc.add_text(fields.cjk, cjk_only(&searchable));
    doc.add_text(fields.head_en, heading);
    doc.add_text(fields.head_cjk, cjk_only(heading));
    let mut words = tokens(index, fields, &searchable)?;
    if let Some(morphology) = morphology
        && searchable.chars().any(is_cjk)
    {
        let lemmas = morphology.lemmas(&searchable);
        doc.add_text(fields.ja, lemmas.join("\n"));
        doc.add_text(fields.head_ja, morphology.lemmas(heading).join("\n"));
        for lemma in lemmas {
            if !words.contains(&lemma) {
                words.push(lemma);
            }
        }
    }
    Ok((doc, words))
}

fn build(root: &Path, morphology: Option<&Morphology>) -> Result<Indexed, KbError> {
    let mut schema = Schema::builder();
    let indexed = |tokenizer: &str| {
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(tokenizer)
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        )
    };
    let fields = Fields {
        ord: schema.add_u64_field("ord", STORED),
        en: schema.add_text_field("en", indexed("kb_en")),
        cjk: schema.add_text_field("cjk", indexed("kb_cjk")),
        head_en: schema.add_text_field("head_en", indexed("kb_en")),
        head_cjk: schema.add_text_field("head_cjk", indexed("kb_cjk")),
        ja: schema.add_text_field("ja", indexed("kb_ja")),
        head_ja: schema.add_text_field("head_ja", indexed("kb_ja")),
    };
    let index = Index::create_in_ram(schema.build());
    let en = TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(LowerCaser)
        .filter(StopWordFilter::remove(
            EN_STOP_WORDS.iter().map(|w| w.to_string()),
        ))
        .filter(Stemmer::new(Language::English))
        .build();
    index.tokenizers().register("kb_en", en);
    index.tokenizers().register(
        "kb_cjk",
        TextAnalyzer::builder(NgramTokenizer::new(2, 2, false)?).build(),
    );
    // base forms, already analysed: one per line
    index.tokenizers().register(
        "kb_ja",
        TextAnalyzer::builder(WhitespaceTokenizer::default()).build(),
    );

    let paths = if root.exists() {
        files(root)?
    } else {
        Vec::new()
    };
    let mut writer = index.writer_with_num_threads(1, 15_000_000)?;
    let mut documents = BTreeMap::new();
    let mut sections: Vec<Section> = Vec::new();
    let mut listing = Vec::new();
    for path in &paths {
        let before = sections.len();
        let content = std::fs::read_to_string(path).map_err(|source| KbError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let rel = path
            .strip_prefix(root)
            .unwrap_or(path)
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let markdown = path.extension().is_some_and(|e| e == "md");
        for (heading, text) in split_passages(&name, &content, markdown) {
            let (mut doc, words) = passage_document(&index, fields, morphology, &heading, &text)?;
            doc.add_u64(fields.ord, sections.len() as u64);
            writer.add_document(doc)?;
            sections.push(Section {
                path: rel.clone(),
                overview: is_title(&content, &heading),
                heading,
                text,
                words,
            });
        }
        listing.push(DocumentInfo {
            path: rel.clone(),
            passages: sections.len() - before,
            bytes: content.len(),
            modified: std::fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .map(chrono::DateTime::<chrono::Utc>::from),
        });
        documents.insert(rel, content);
    }
    listing.sort_by(|a, b| a.path.cmp(&b.path));
    writer.commit()?;
    let reader = index.reader()?;
    reader.reload()?;
    Ok(Indexed {
        index,
        reader,
        fields,
        fingerprint: fingerprint(&paths),
        listing,
        built_at: chrono::Utc::now(),
        documents,
        sections,
    })
}

impl KnowledgeBase {
    /// Indexes every `*.md` and `*.txt` under `root` (a missing folder is an empty base).
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, KbError> {
        Self::open_with(root, None)
    }

    /// [`Self::open`], Japanese words analysed by `morphology` (their base forms indexed and
    /// searched beside the character pairs).
    pub fn open_with(
        root: impl Into<PathBuf>,
        morphology: Option<std::sync::Arc<Morphology>>,
    ) -> Result<Self, KbError> {
        let root = root.into();
        let inner = build(&root, morphology.as_deref())?;
        Ok(KnowledgeBase {
            root,
            inner: RwLock::new(inner),
            morphology,
        })
    }

    /// Whether Japanese is analysed by a dictionary (otherwise by character pairs only).
    pub fn analyses_japanese(&self) -> bool {
        self.morphology.is_some()
    }

    /// Rebuilds the index when files were added, removed or changed. True when it rebuilt.
    pub fn refresh_if_changed(&self) -> Result<bool, KbError> {
        let paths = if self.root.exists() {
            files(&self.root)?
        } else {
            Vec::new()
        };
        let now = fingerprint(&paths);
        let stale = self
            .inner
            .read()
            .map(|i| i.fingerprint != now)
            .unwrap_or(true);
        if stale {
            let rebuilt = build(&self.root, self.morphology.as_deref())?;
            *self.inner.write().unwrap_or_else(|p| p.into_inner()) = rebuilt;
        }
        Ok(stale)
    }

    /// Reads every file again and rebuilds the index (the console's re-index button).
    pub fn reindex(&self) -> Result<(), KbError> {
        let rebuilt = build(&self.root, self.morphology.as_deref())?;
        *self.inner.write().unwrap_or_else(|p| p.into_inner()) = rebuilt;
        Ok(())
    }

    /// When the index was built, and each file in it.
    pub fn documents(&self) -> (chrono::DateTime<chrono::Utc>, Vec<DocumentInfo>) {
        let i = self.inner.read().unwrap_or_else(|p| p.into_inner());
        (i.built_at, i.listing.clone())
    }

    /// When the index in use was built.
    pub fn built_at(&self) -> chrono::DateTime<chrono::Utc> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .built_at
    }

    /// `(files, passages)` indexed.
    pub fn stats(&self) -> (usize, usize) {
        let i = self.inner.read().unwrap_or_else(|p| p.into_inner());
        (i.documents.len(), i.sections.len())
    }

    /// The best `k` passages for `query` (English words and Japanese text alike), in the
    /// question's language when it has any (see the module).
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<Passage>, KbError> {
        let i = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let question = self.question(&i, query)?;
        let found = lexical(&i, &question)?;
        Ok(best_in_language(
            found.into_iter().map(|(_, p)| p).collect(),
            query,
            k,
        ))
    }

    /// What [`Semantic`] embeds: each passage's heading and text, by its place in the index,
    /// and when the index was built (vectors of another build do not apply to it).
    pub fn passages_to_embed(&self) -> (chrono::DateTime<chrono::Utc>, Vec<(String, String)>) {
        let i = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let passages = i
            .sections
            .iter()
            .map(|s| (s.heading.clone(), s.text.clone()))
            .collect();
        (i.built_at, passages)
    }

    /// [`Self::search`] with meaning: `similarity[n]` is the cosine similarity of passage
    /// `n` of the index built at `built_at` to the question, ranked beside BM25 (the share
    /// of the question a passage meets and how far its meaning stands out above the other
    /// passages', half each); from `alone_at` a passage may be found by meaning alone. Similarities of
    /// another build are not used: BM25 alone answers.
    pub fn search_by_meaning(
        &self,
        query: &str,
        k: usize,
        built_at: chrono::DateTime<chrono::Utc>,
        similarity: &[f32],
        alone_at: f32,
    ) -> Result<Vec<Passage>, KbError> {
        let i = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let question = self.question(&i, query)?;
        let found = lexical(&i, &question)?;
        if i.built_at != built_at || similarity.len() != i.sections.len() {
            return Ok(best_in_language(
                found.into_iter().map(|(_, p)| p).collect(),
                query,
                k,
            ));
        }
        Ok(fuse(&i, &question, found, (similarity, alone_at), k))
    }

    /// What a search needs to know of `query`: its tokens, the synonym groups it names,
    /// its base forms and its units of meaning.
    fn question<'q>(&self, i: &Indexed, query: &'q str) -> Result<Question<'q>, KbError> {
        let own = tokens(&i.index, i.fields, query)?;
        // the synonym groups the question names, with their words' tokens
        let groups = synonym_groups(i, query)?;
        let lemmas = self
            .morphology
            .as_deref()
            .filter(|_| query.chars().any(is_cjk))
            .map(|m| m.lemmas(query));
        let units = units(i, query, &groups, lemmas.as_deref())?;
        Ok(Question {
            text: query,
            own,
            groups,
            lemmas,
            units,
        })
    }

    /// A whole indexed document by its relative path.
    pub fn document(&self, path: &str) -> Option<String> {
        let i = self.inner.read().unwrap_or_else(|p| p.into_inner());
        i.documents.get(path.trim_start_matches("./")).cloned()
    }
}

/// A question as a search sees it ([`KnowledgeBase::search`]).
struct Question<'q> {
    text: &'q str,
    /// Its search tokens.
    own: Vec<String>,
    groups: Vec<Group>,
    /// The base forms of its Japanese words, with a dictionary.
    lemmas: Option<Vec<String>>,
    units: Vec<Unit>,
}

/// Passage `ord` as found for `q`, with `score`.
fn found_passage(i: &Indexed, q: &Question, ord: usize, score: f32) -> Passage {
    let s = &i.sections[ord];
    let whole = format!("{}\n{}", s.heading, s.text);
    Passage {
        path: s.path.clone(),
        heading: s.heading.clone(),
        text: s.text.clone(),
        coverage: coverage(&q.units, &q.groups, &s.words, &whole),
        score,
    }
}

/// The best 20 passages for `q` by BM25, with their places in the index.
fn lexical(i: &Indexed, q: &Question) -> Result<Vec<(usize, Passage)>, KbError> {
    let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
    let mut add = |token: &str, en: bool, weight: f32| {
        let (body, head) = if en {
            (i.fields.en, i.fields.head_en)
        } else {
            (i.fields.cjk, i.fields.head_cjk)
        };
        for (field, boost) in [(body, weight), (head, weight * 2.0)] {
            let term = Term::from_field_text(field, token);
            clauses.push((
                Occur::Should,
                Box::new(BoostQuery::new(
                    Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)),
                    boost,
                )),
            ));
        }
    };
    for token in &q.own {
        add(token, !is_cjk_token(token), 1.0);
    }
    for token in q
        .groups
        .iter()
        .flat_map(|g| &g.tokens)
        .filter(|t| !q.own.contains(t))
    {
        add(token, true, 0.6);
    }
    // the base forms of the question's Japanese words weigh more than character pairs
    for lemma in q.lemmas.iter().flatten().filter(|l| l.chars().any(is_cjk)) {
        for (field, boost) in [(i.fields.ja, 1.5), (i.fields.head_ja, 3.0)] {
            clauses.push((
                Occur::Should,
                Box::new(BoostQuery::new(
                    Box::new(TermQuery::new(
                        Term::from_field_text(field, lemma),
                        IndexRecordOption::WithFreqs,
                    )),
                    boost,
                )),
            ));
        }
    }
    // a Japanese synonym as a whole word: the phrase of its bigrams
    for member in q
        .groups
        .iter()
        .flat_map(|g| g.members.iter())
        .filter(|m| !m.is_ascii())
    {
        let chars: Vec<char> = member.chars().collect();
        let bigrams: Vec<String> = chars.windows(2).map(|w| w.iter().collect()).collect();
        for (field, boost) in [(i.fields.cjk, 0.6), (i.fields.head_cjk, 1.2)] {
            let query: Box<dyn Query> = match bigrams.len() {
                0 => continue,
                1 => Box::new(TermQuery::new(
                    Term::from_field_text(field, &bigrams[0]),
                    IndexRecordOption::WithFreqs,
                )),
                _ => Box::new(PhraseQuery::new(
                    bigrams
                        .iter()
                        .map(|b| Term::from_field_text(field, b))
                        .collect(),
                )),
            };
            clauses.push((Occur::Should, Box::new(BoostQuery::new(query, boost))));
        }
    }
    if clauses.is_empty() {
        return Ok(Vec::new());
    }
    let searcher = i.reader.searcher();
    let top = searcher.search(
        &BooleanQuery::new(clauses),
        &TopDocs::with_limit(20).order_by_score(),
    )?;
    let mut found = Vec::new();
    for (score, address) in top {
        let doc: TantivyDocument = searcher.doc(address)?;
        let Some(ord) = doc
            .get_first(i.fields.ord)
            .and_then(|v| v.as_u64())
            .map(|o| o as usize)
            .filter(|o| *o < i.sections.len())
        else {
            continue;
        };
        // a document's overview ranks after a section that matches as well
        let score = if i.sections[ord].overview {
            score * 0.5
        } else {
            score
        };
        found.push((ord, found_passage(i, q, ord, score)));
    }
    Ok(found)
}

/// The weight of meaning against words in a ranking with embeddings.
const MEANING_WEIGHT: f32 = 0.5;

/// How far above the mean similarity of the passages (in standard deviations) a passage
/// that shares no word with the question may stand to be found by meaning alone (besides
/// a similarity the model itself reaches between a heading and its passage).
const MEANING_ALONE: f32 = 2.0;

/// Standing out this far (in standard deviations) in meaning is full marks.
const MEANING_FULL: f32 = 3.0;

/// BM25's passages (`lexical`) and the passages closest in meaning, ranked together.
///
/// Only passages in one language take part: the question's, unless the other's meet more
/// of its words (as [`best_in_language`] decides), or the base has none in it. Words count
/// as the share of the question a passage meets (its coverage, with BM25's score relative
/// to the best as a tie-break); meaning as the passage's similarity in standard deviations
/// above the mean of all passages ([`MEANING_FULL`] and more: full marks), so a question nothing
/// answers, close to every passage alike, finds nothing by meaning. A passage that shares
/// no word with the question is kept only when its meaning stands out ([`MEANING_ALONE`])
/// or its similarity reaches `alone_at` (the model's own scale, learnt from the passages:
/// a base of a few passages has too few for standard deviations).
/// `Passage::score` is the combined score, 0–1.
fn fuse(
    i: &Indexed,
    q: &Question,
    lexical: Vec<(usize, Passage)>,
    (similarity, alone_at): (&[f32], f32),
    k: usize,
) -> Vec<Passage> {
    // the language words chose (the question's, unless the other's passages meet more of it)
    let asked_in_japanese = q.text.chars().any(is_cjk);
    let best_coverage = |japanese: bool| {
        lexical
            .iter()
            .filter(|(o, _)| i.sections[*o].text.chars().any(is_cjk) == japanese)
            .map(|(_, p)| p.coverage)
            .fold(0.0f32, f32::max)
    };
    let japanese = if best_coverage(!asked_in_japanese) > best_coverage(asked_in_japanese) {
        !asked_in_japanese
    } else {
        asked_in_japanese
    };
    let in_language = |s: &Section| s.text.chars().any(is_cjk) == japanese;
    let any = i.sections.iter().any(in_language);
    let eligible: Vec<bool> = i.sections.iter().map(|s| !any || in_language(s)).collect();
    let pool: Vec<f32> = (0..similarity.len())
        .filter(|&o| eligible[o])
        .map(|o| similarity[o])
        .collect();
    if pool.is_empty() {
        return Vec::new();
    }
    let mean = pool.iter().sum::<f32>() / pool.len() as f32;
    let spread = (pool.iter().map(|s| (s - mean).powi(2)).sum::<f32>() / pool.len() as f32).sqrt();
    let stands_out = |o: usize| {
        if spread > 1e-6 {
            (similarity[o] - mean) / spread
        } else {
            0.0
        }
    };
    let best_bm25 = lexical.iter().map(|(_, p)| p.score).fold(0.0f32, f32::max);
    let mut candidates: BTreeMap<usize, Passage> =
        lexical.into_iter().filter(|(o, _)| eligible[*o]).collect();
    let alone = |o: usize| stands_out(o) >= MEANING_ALONE || similarity[o] >= alone_at;
    for o in (0..similarity.len()).filter(|&o| eligible[o]) {
        if alone(o) && !candidates.contains_key(&o) {
            candidates.insert(o, found_passage(i, q, o, 0.0));
        }
    }
    let mut ranked: Vec<Passage> = candidates
        .into_iter()
        .filter(|(o, p)| p.coverage > 0.0 || alone(*o))
        .map(|(o, mut p)| {
            let bm25 = if best_bm25 > 0.0 {
                p.score / best_bm25
            } else {
                0.0
            };
            let words = 0.8 * p.coverage + 0.2 * bm25;
            let mut meaning = (stands_out(o) / MEANING_FULL).clamp(0.0, 1.0);
            // an overview is close to every question about its document: a section first
            if i.sections[o].overview {
                meaning *= 0.5;
            }
            p.score = (1.0 - MEANING_WEIGHT) * words + MEANING_WEIGHT * meaning;
            p
        })
        .collect();
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score));
    ranked.truncate(k.clamp(1, 20));
    ranked
}

/// The synonym groups `query` names, with the tokens of their English words.
fn synonym_groups(i: &Indexed, query: &str) -> Result<Vec<Group>, KbError> {
    let lower = query.to_lowercase();
    let named = |w: &str| {
        if w.is_ascii() {
            lower
                .split(|c: char| !c.is_alphanumeric())
                .any(|word| word == w)
        } else {
            query.contains(w)
        }
    };
    let mut groups: Vec<Group> = Vec::new();
    for members in SYNONYMS {
        if members.iter().any(|w| named(w)) {
            let mut tokens_of = Vec::new();
            for w in members.iter().filter(|w| w.is_ascii()) {
                tokens_of.extend(tokens(&i.index, i.fields, w)?);
            }
            tokens_of.sort();
            tokens_of.dedup();
            groups.push(Group {
                members,
                tokens: tokens_of,
            });
        }
    }
    Ok(groups)
}

/// The passages `found` for `query` in its order of merit (the better match of the
/// question first: a passage that meets more of it before one that only scores higher),
/// in the question's language (the other only when it has nothing that matches as well),
/// at most `k`.
fn best_in_language(mut found: Vec<Passage>, query: &str, k: usize) -> Vec<Passage> {
    found.sort_by(|a, b| {
        b.coverage
            .total_cmp(&a.coverage)
            .then(b.score.total_cmp(&a.score))
    });
    // the question's language; the other only when it has nothing that matches as well
    let japanese = query.chars().any(is_cjk);
    let in_language = |p: &Passage| p.text.chars().any(is_cjk) == japanese;
    let best = |own: bool| {
        found
            .iter()
            .filter(|p| in_language(p) == own)
            .map(|p| p.coverage)
            .fold(0.0f32, f32::max)
    };
    let (own_best, other_best) = (best(true), best(false));
    let keep_own = found.iter().any(in_language) && own_best >= other_best;
    found.retain(|p| in_language(p) == keep_own);
    found.retain(|p| p.coverage > 0.0);
    found.truncate(k.clamp(1, 20));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kb() -> (tempfile::TempDir, KnowledgeBase) {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("ja")).expect("dir");
        std::fs::write(
            dir.path().join("guide.md"),
            "# Guide\nIntro.\n## Resetting your password\nOpen Settings, choose Security and press Reset password.\n## Exporting data\nRun kaiwa export with the form id.\n",
        )
        .expect("write");
        std::fs::write(dir.path().join("ja/guide.md"), "# ガイド\n## パスワードの再設定\n設定画面のセキュリティからパスワードを再設定します。\n").expect("write");
        let kb = KnowledgeBase::open(dir.path()).expect("index");
        (dir, kb)
    }

    #[test]
    fn english_and_japanese_questions_find_their_passages() {
        let (_dir, kb) = kb();
        assert_eq!(kb.stats(), (2, 4));
        let en = kb.search("How do I reset my password?", 3).expect("search");
        assert_eq!(en[0].citation(), "guide.md#Resetting your password");
        let ja = kb.search("パスワードを忘れました", 3).expect("search");
        assert_eq!(ja[0].citation(), "ja/guide.md#パスワードの再設定");
        assert!(kb.search("zebra quantum", 3).expect("search").is_empty());
        assert!(
            kb.search("\"(unbalanced AND OR", 3).is_ok(),
            "query syntax cannot break a search"
        );
    }

    #[test]
    fn documents_are_served_only_from_the_index_and_changes_are_picked_up() {
        let (dir, kb) = kb();
        assert!(kb.document("guide.md").is_some());
        assert!(kb.document("../../etc/passwd").is_none());
        assert!(!kb.refresh_if_changed().expect("check"));
        std::fs::write(
            dir.path().join("new.txt"),
            "Billing questions go to the finance team.",
        )
        .expect("write");
        assert!(kb.refresh_if_changed().expect("rebuild"));
        assert_eq!(kb.search("billing", 1).expect("search")[0].path, "new.txt");
    }
}

//! The knowledge base: Markdown and text files under a folder (`config/kb/**/*.md|*.txt`),
//! split into passages by heading and indexed with tantivy (BM25) in memory.
//!
//! A section is searched with its document's title too ("Battery problems" under
//! "# Laptops" is about laptops), and shown as written. Indexed twice, the heading counting
//! double: English text (lowercased, stop words — question words included — removed,
//! stemmed) and the CJK characters as character bigrams, so Japanese questions find
//! Japanese passages without a dictionary. Queries are built from the same analyzers as
//! term queries (never parsed as query syntax, so user text cannot break them); Japanese
//! grammar bigrams (「には」「ですか」) are left out, and a small table of help-desk synonyms
//! in both languages (stop / end / やめる / 終える, export / エクスポート …) widens a question,
//! at a lower weight. Passages in the question's language come first; the other language's
//! only when the question's has none. Each passage found carries its
//! [`Passage::coverage`]: how much of the question it matches, which tells a strong match
//! from a weak one (a Japanese word it lacks counts half where they share a kanji few
//! passages have: 割れる and ひび割れ). [`KnowledgeBase::refresh_if_changed`] rebuilds the index when a file
//! was added, removed or modified. Documents are read only from the indexed set: a path
//! outside it is simply not found.
//!
//! This file answers through [`KnowledgeBase`]; `build.rs` builds the index from the
//! folder, `ranking.rs` ranks a question's passages, `semantic.rs` adds meaning
//! ([`Semantic`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::RwLock;
use std::time::SystemTime;
use tantivy::schema::Field;
use tantivy::{Index, IndexReader};
use vocabulary::CJK_STOP_BIGRAMS;

mod build;
pub mod japanese;
mod ranking;
mod semantic;
pub(crate) mod vocabulary;

pub use build::split_passages;
use build::{build, files, fingerprint};
pub use japanese::Morphology;
use ranking::{best_in_language, fuse, lexical, question};
pub use semantic::{DEFAULT_BATCH, KbSearch, LanguageCheck, Prefixes, Progress, Semantic};

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

/// The passages of a ranking, without what they were ranked by.
fn passages(ranking: Vec<Explained>) -> Vec<Passage> {
    ranking.into_iter().map(|e| e.passage).collect()
}

/// A passage of a ranking with what it was ranked by ([`KnowledgeBase::explain`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Explained {
    /// The passage; its `score` is the ranking's (0–1 with meaning, BM25's without).
    pub passage: Passage,
    /// BM25's score for the question's words (0: found by meaning alone).
    pub bm25: f32,
    /// The cosine similarity of the passage to the question, with meaning.
    pub similarity: Option<f32>,
    /// How far that similarity stands above the mean of the passages, in standard
    /// deviations, with meaning.
    pub above_mean: Option<f32>,
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
    /// The title of its document, where it is a section under one: what it is about too.
    title: Option<String>,
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
    /// In how many passages each kanji appears (heading, title and text).
    kanji_passages: std::collections::HashMap<char, usize>,
}

impl Indexed {
    /// Whether the kanji `c` is rare enough to say something when a question and a passage
    /// share it: in at most a tenth of the passages (or in one).
    fn is_rare_kanji(&self, c: char) -> bool {
        let in_passages = self.kanji_passages.get(&c).copied().unwrap_or(0);
        in_passages <= (self.sections.len() / 10).max(1)
    }
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

fn is_kanji(c: char) -> bool {
    matches!(c, '\u{3400}'..='\u{4dbf}' | '\u{4e00}'..='\u{9fff}' | '\u{f900}'..='\u{faff}')
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
        Ok(passages(self.explain(query, k, None)?))
    }

    /// How many units of meaning `query` has for the search (its English words, Japanese
    /// words or runs of kanji and katakana, synonym groups): what a passage's
    /// [`Passage::coverage`] is a share of.
    pub fn question_size(&self, query: &str) -> Result<usize, KbError> {
        let i = self.inner.read().unwrap_or_else(|p| p.into_inner());
        Ok(question(&i, self.morphology.as_deref(), query)?.size())
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
        Ok(passages(self.explain(
            query,
            k,
            Some((built_at, similarity, alone_at)),
        )?))
    }

    /// The ranking [`Self::search`] (`meaning`: `None`) or [`Self::search_by_meaning`]
    /// (`Some((built_at, similarity, alone_at))`) makes for `query`, at most `k`, each
    /// passage with what it was ranked by: what `kaiwa kb explain` shows.
    pub fn explain(
        &self,
        query: &str,
        k: usize,
        meaning: Option<(chrono::DateTime<chrono::Utc>, &[f32], f32)>,
    ) -> Result<Vec<Explained>, KbError> {
        let i = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let question = question(&i, self.morphology.as_deref(), query)?;
        let found = lexical(&i, &question)?;
        match meaning {
            Some((built_at, similarity, alone_at))
                if i.built_at == built_at && similarity.len() == i.sections.len() =>
            {
                Ok(fuse(&i, &question, found, (similarity, alone_at), k))
            }
            _ => Ok(
                best_in_language(found.into_iter().map(|(_, p)| p).collect(), query, k)
                    .into_iter()
                    .map(|p| Explained {
                        bm25: p.score,
                        passage: p,
                        similarity: None,
                        above_mean: None,
                    })
                    .collect(),
            ),
        }
    }

    /// A whole indexed document by its relative path.
    pub fn document(&self, path: &str) -> Option<String> {
        let i = self.inner.read().unwrap_or_else(|p| p.into_inner());
        i.documents.get(path.trim_start_matches("./")).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A folder holding `files` (relative path, content).
    fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for (path, content) in files {
            let path = dir.path().join(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("dir");
            }
            std::fs::write(path, content).expect("write");
        }
        dir
    }

    fn kb() -> (tempfile::TempDir, KnowledgeBase) {
        let dir = folder(&[
            (
                "guide.md",
                "# Guide\nIntro.\n## Resetting your password\nOpen Settings, choose Security and press Reset password.\n## Exporting data\nRun kaiwa export with the form id.\n",
            ),
            (
                "ja/guide.md",
                "# ガイド\n## パスワードの再設定\n設定画面のセキュリティからパスワードを再設定します。\n",
            ),
        ]);
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

    /// Two documents with a section of the same name: the one whose title the question
    /// names comes first, in both languages; the passage itself is shown as written.
    #[test]
    fn a_section_is_found_by_its_documents_title_too() {
        let dir = folder(&[
            (
                "phones.md",
                "# Phones\n## Battery problems\nA company handset gets a new battery after two years.\n",
            ),
            (
                "laptops.md",
                "# Laptops\n## Battery problems\nIf it lasts under two hours, bring it to the service desk.\n",
            ),
            (
                "ja-phones.md",
                "# 携帯電話\n## バッテリーの不具合\n社用の端末は2年で電池を交換します。\n",
            ),
            (
                "ja-laptops.md",
                "# ノートPC\n## バッテリーの不具合\n2時間もたない場合はサービスデスクへ持参してください。\n",
            ),
        ]);
        let morphology = Morphology::from_mecab_dir(Path::new(japanese::DEBIAN_IPADIC)).ok();
        for morphology in [None, morphology.map(std::sync::Arc::new)] {
            let kb = KnowledgeBase::open_with(dir.path(), morphology).expect("index");
            for (question, citation, title) in [
                (
                    "battery problems with my laptop",
                    "laptops.md#Battery problems",
                    "Laptops",
                ),
                (
                    "携帯電話のバッテリーの不具合",
                    "ja-phones.md#バッテリーの不具合",
                    "携帯電話",
                ),
            ] {
                let found = kb.search(question, 3).expect("search");
                assert_eq!(found[0].citation(), citation, "{found:?}");
                assert!(!found[0].text.contains(title), "shown as written");
            }
        }
    }

    /// 「画面が割れました」 and 「ディスプレイのひび割れ」 share no word, but a kanji no other
    /// passage has (割): half a word's worth, enough to pass the loan laptop that only
    /// shares the document's title.
    #[test]
    fn a_rare_kanji_in_common_counts_for_half_a_word() {
        let dir = folder(&[(
            "laptop.md",
            "# ノートPC\n## ハードウェアの破損\nディスプレイのひび割れ、水濡れはポータルから報告してください。\n## 貸出用PC\n修理の間はノートPCを借りられます。\n",
        )]);
        let morphology = Morphology::from_mecab_dir(Path::new(japanese::DEBIAN_IPADIC))
            .unwrap_or_else(|e| panic!("{e} (install Debian's mecab-ipadic; .ci/run does)"));
        let kb = KnowledgeBase::open_with(dir.path(), Some(std::sync::Arc::new(morphology)))
            .expect("index");
        let found = kb.search("ノートPCの画面が割れました", 3).expect("search");
        assert_eq!(
            found[0].citation(),
            "laptop.md#ハードウェアの破損",
            "{found:?}"
        );
        assert!(found[0].coverage > found[1].coverage, "{found:?}");
    }

    /// With embeddings, "I have a fever, not coming into the office" shares only "office"
    /// with *Last working day* (the best BM25 score of the lot) and nothing with *Sick
    /// leave*, whose meaning stands out: being the best of a weak lexical lot does not
    /// outweigh meaning; the words decide where a passage meets the question.
    #[test]
    fn the_best_bm25_score_of_a_weak_lot_does_not_outweigh_meaning() {
        let mut page = String::from("# Handbook\n");
        page.push_str("## Sick leave\nIf you are ill, tell your manager before nine.\n");
        page.push_str(
            "## Last working day\nOn your last day at the office, hand back your badge.\n",
        );
        for (n, topic) in [
            "Parking", "Canteen", "Lockers", "Printing", "Lifts", "Plants",
        ]
        .iter()
        .enumerate()
        {
            page.push_str(&format!("## {topic}\nRule {n} about {topic} applies.\n"));
        }
        let dir = folder(&[("handbook.md", &page)]);
        let kb = KnowledgeBase::open(dir.path()).expect("index");
        let (built_at, passages) = kb.passages_to_embed();
        let similarity = |close: &[(&str, f32)]| -> Vec<f32> {
            passages
                .iter()
                .map(|(heading, _)| {
                    close
                        .iter()
                        .find(|(h, _)| h == heading)
                        .map_or(0.3, |(_, s)| *s)
                })
                .collect()
        };
        let fever = "I have a fever, not coming into the office";
        let meaning = similarity(&[("Sick leave", 0.85), ("Last working day", 0.62)]);
        let found = kb
            .search_by_meaning(fever, 3, built_at, &meaning, 0.95)
            .expect("search");
        assert_eq!(found[0].citation(), "handbook.md#Sick leave", "{found:?}");
        // where the words meet the question, they still lead
        let badge = "Where do I hand back my badge on my last day?";
        let meaning = similarity(&[("Sick leave", 0.7), ("Last working day", 0.6)]);
        let found = kb
            .search_by_meaning(badge, 3, built_at, &meaning, 0.95)
            .expect("search");
        assert_eq!(
            found[0].citation(),
            "handbook.md#Last working day",
            "{found:?}"
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

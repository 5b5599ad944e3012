//! The knowledge base: Markdown and text files under a folder (`config/kb/**/*.md|*.txt`),
//! split into passages by heading and indexed with tantivy (BM25) in memory.
//!
//! Two indexed fields: English text (lowercased, stop words removed, stemmed) and the CJK
//! characters of the text as character bigrams, so Japanese questions find Japanese
//! passages without a dictionary. Queries are built from the same analyzers as term queries
//! (never parsed as query syntax, so user text cannot break them). [`KnowledgeBase::refresh_if_changed`]
//! rebuilds the index when a file was added, removed or modified. Documents are read only
//! from the indexed set: a path outside it is simply not found.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::SystemTime;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, STORED, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::tokenizer::{
    Language, LowerCaser, NgramTokenizer, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
};
use tantivy::{Index, IndexReader, TantivyDocument, Term};

/// A passage found by a search.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Passage {
    /// Path relative to the knowledge-base folder, with `/` separators.
    pub path: String,
    pub heading: String,
    pub text: String,
    pub score: f32,
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
}

#[derive(Clone, Copy)]
struct Fields {
    path: Field,
    heading: Field,
    text: Field,
    en: Field,
    cjk: Field,
}

struct Indexed {
    index: Index,
    reader: IndexReader,
    fields: Fields,
    fingerprint: Vec<(PathBuf, u64, Option<SystemTime>)>,
    documents: BTreeMap<String, String>,
    passages: usize,
}

pub struct KnowledgeBase {
    root: PathBuf,
    inner: RwLock<Indexed>,
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

fn build(root: &Path) -> Result<Indexed, KbError> {
    let mut schema = Schema::builder();
    let indexed = |tokenizer: &str| {
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(tokenizer)
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        )
    };
    let fields = Fields {
        path: schema.add_text_field("path", STORED),
        heading: schema.add_text_field("heading", STORED),
        text: schema.add_text_field("text", STORED),
        en: schema.add_text_field("en", indexed("kb_en")),
        cjk: schema.add_text_field("cjk", indexed("kb_cjk")),
    };
    let index = Index::create_in_ram(schema.build());
    let mut en = TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(LowerCaser)
        .dynamic();
    if let Some(stop) = StopWordFilter::new(Language::English) {
        en = en.filter_dynamic(stop);
    }
    index.tokenizers().register(
        "kb_en",
        en.filter_dynamic(Stemmer::new(Language::English)).build(),
    );
    index.tokenizers().register(
        "kb_cjk",
        TextAnalyzer::builder(NgramTokenizer::new(2, 2, false)?).build(),
    );

    let paths = if root.exists() {
        files(root)?
    } else {
        Vec::new()
    };
    let mut writer = index.writer_with_num_threads(1, 15_000_000)?;
    let mut documents = BTreeMap::new();
    let mut passages = 0;
    for path in &paths {
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
            let mut doc = TantivyDocument::default();
            doc.add_text(fields.path, &rel);
            doc.add_text(fields.heading, &heading);
            doc.add_text(fields.text, &text);
            let searchable = format!("{heading}\n{text}");
            doc.add_text(fields.en, &searchable);
            doc.add_text(fields.cjk, cjk_only(&searchable));
            writer.add_document(doc)?;
            passages += 1;
        }
        documents.insert(rel, content);
    }
    writer.commit()?;
    let reader = index.reader()?;
    reader.reload()?;
    Ok(Indexed {
        index,
        reader,
        fields,
        fingerprint: fingerprint(&paths),
        documents,
        passages,
    })
}

impl KnowledgeBase {
    /// Indexes every `*.md` and `*.txt` under `root` (a missing folder is an empty base).
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, KbError> {
        let root = root.into();
        let inner = build(&root)?;
        Ok(KnowledgeBase {
            root,
            inner: RwLock::new(inner),
        })
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
            let rebuilt = build(&self.root)?;
            *self.inner.write().unwrap_or_else(|p| p.into_inner()) = rebuilt;
        }
        Ok(stale)
    }

    /// `(files, passages)` indexed.
    pub fn stats(&self) -> (usize, usize) {
        let i = self.inner.read().unwrap_or_else(|p| p.into_inner());
        (i.documents.len(), i.passages)
    }

    /// The best `k` passages for `query` (English words and Japanese text alike).
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<Passage>, KbError> {
        let i = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for (field, text) in [
            (i.fields.en, query.to_string()),
            (i.fields.cjk, cjk_only(query)),
        ] {
            let mut analyzer = i.index.tokenizer_for_field(field)?;
            let mut stream = analyzer.token_stream(&text);
            let mut seen = std::collections::HashSet::new();
            while stream.advance() {
                let token = stream.token().text.clone();
                if token.trim().is_empty() || !seen.insert(token.clone()) {
                    continue;
                }
                let term = Term::from_field_text(field, &token);
                clauses.push((
                    Occur::Should,
                    Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)),
                ));
            }
        }
        if clauses.is_empty() {
            return Ok(Vec::new());
        }
        let searcher = i.reader.searcher();
        let top = searcher.search(
            &BooleanQuery::new(clauses),
            &TopDocs::with_limit(k.clamp(1, 20)).order_by_score(),
        )?;
        let mut out = Vec::new();
        for (score, address) in top {
            let doc: TantivyDocument = searcher.doc(address)?;
            let get = |f: Field| {
                doc.get_first(f)
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            };
            out.push(Passage {
                path: get(i.fields.path),
                heading: get(i.fields.heading),
                text: get(i.fields.text),
                score,
            });
        }
        Ok(out)
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

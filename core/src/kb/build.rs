//! Building the knowledge base's index: the files under its folder (and their
//! fingerprint, to tell when one changed), each split into passages by heading, indexed
//! twice (English terms and CJK bigrams, with the Japanese dictionary's base forms when
//! there is one).

use super::vocabulary::EN_STOP_WORDS;
use super::{
    DocumentInfo, Fields, Indexed, KbError, Morphology, Section, cjk_only, is_cjk, is_kanji, tokens,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use tantivy::schema::{IndexRecordOption, STORED, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::{
    Language, LowerCaser, NgramTokenizer, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
    WhitespaceTokenizer,
};
use tantivy::{Index, TantivyDocument};

/// Whether `heading` is the title (`#`) of the document `content`: an overview, not a
/// section.
fn is_title(content: &str, heading: &str) -> bool {
    content.lines().any(|l| {
        l.trim_start()
            .strip_prefix("# ")
            .is_some_and(|h| h.trim() == heading)
    })
}

/// The title (`# …`) of the Markdown document `content`, if it has one.
fn document_title(content: &str) -> Option<String> {
    content.lines().find_map(|l| {
        l.trim_start()
            .strip_prefix("# ")
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
    })
}

pub(super) fn files(root: &Path) -> Result<Vec<PathBuf>, KbError> {
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

pub(super) fn fingerprint(paths: &[PathBuf]) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
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

/// In how many of `sections` each kanji appears (heading, title and text).
fn kanji_passages(sections: &[Section]) -> std::collections::HashMap<char, usize> {
    let mut counts = std::collections::HashMap::new();
    for s in sections {
        let mut kanji: Vec<char> = [Some(&s.heading), s.title.as_ref(), Some(&s.text)]
            .into_iter()
            .flatten()
            .flat_map(|t| t.chars())
            .filter(|c| is_kanji(*c))
            .collect();
        kanji.sort_unstable();
        kanji.dedup();
        for c in kanji {
            *counts.entry(c).or_insert(0) += 1;
        }
    }
    counts
}

pub(super) fn build(root: &Path, morphology: Option<&Morphology>) -> Result<Indexed, KbError> {
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
        let title = markdown.then(|| document_title(&content)).flatten();
        for (heading, text) in split_passages(&name, &content, markdown) {
            // the document's title, what a section under it is about too
            let title = title.clone().filter(|t| *t != heading);
            let searchable = match &title {
                Some(title) => format!("{title}\n{text}"),
                None => text.clone(),
            };
            let (mut doc, words) =
                passage_document(&index, fields, morphology, &heading, &searchable)?;
            doc.add_u64(fields.ord, sections.len() as u64);
            writer.add_document(doc)?;
            sections.push(Section {
                path: rel.clone(),
                overview: is_title(&content, &heading),
                heading,
                text,
                words,
                title,
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
        kanji_passages: kanji_passages(&sections),
        documents,
        sections,
    })
}

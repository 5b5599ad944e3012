//! [`Catalogue`]: the local book catalogue (`config/books.toml`) — title (and Japanese
//! title), author, year, genre, tags, summary — with a keyword search that works for English
//! words and Japanese text (character bigrams). No network: a web search is not part of it.

use crate::kb::Passage;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Book {
    pub title: String,
    #[serde(default)]
    pub title_ja: Option<String>,
    pub author: String,
    /// The author as a Japanese reader knows them (夏目漱石).
    #[serde(default)]
    pub author_ja: Option<String>,
    pub year: i32,
    pub genre: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub summary: String,
}

impl Book {
    /// The title a member reading in `lang` knows it by: the Japanese one for `ja` when
    /// there is one.
    pub fn title_in(&self, lang: &str) -> &str {
        match (&self.title_ja, lang) {
            (Some(ja), "ja") => ja,
            _ => &self.title,
        }
    }

    /// The author as a member reading in `lang` knows them: the Japanese name for `ja`
    /// when there is one.
    pub fn author_in(&self, lang: &str) -> &str {
        match (&self.author_ja, lang) {
            (Some(ja), "ja") => ja,
            _ => &self.author,
        }
    }

    /// The book as a citable passage (`books.toml#Title`).
    pub fn passage(&self, score: f32) -> Passage {
        Passage {
            path: PATH.into(),
            heading: self.title.clone(),
            text: self.describe(),
            score,
            coverage: 1.0,
        }
    }

    pub fn describe(&self) -> String {
        let ja = self
            .title_ja
            .as_deref()
            .map(|t| format!(" ({t})"))
            .unwrap_or_default();
        let author_ja = self
            .author_ja
            .as_deref()
            .map(|a| format!(" ({a})"))
            .unwrap_or_default();
        format!(
            "{}{ja} by {}{author_ja}, {} ({}). Themes: {}. {}",
            self.title,
            self.author,
            self.year,
            self.genre,
            self.tags.join(", "),
            self.summary
        )
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
struct CatalogueFile {
    #[serde(default)]
    books: Vec<Book>,
}

#[derive(Debug, Clone, Default)]
pub struct Catalogue {
    books: Vec<Book>,
}

/// Where a catalogue entry cited as a source says it comes from (`books.toml#Title`).
pub const PATH: &str = "books.toml";

fn terms(text: &str) -> Vec<String> {
    use crate::kb::vocabulary::{CJK_STOP_BIGRAMS, EN_STOP_WORDS};
    let lower = text.to_lowercase();
    // words of grammar alone ("the", 「です」) match every summary and say nothing
    let mut out: Vec<String> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() >= 3 && w.is_ascii() && !EN_STOP_WORDS.contains(w))
        .map(str::to_string)
        .collect();
    let cjk: Vec<char> = lower
        .chars()
        .filter(|c| !c.is_ascii() && c.is_alphanumeric())
        .collect();
    out.extend(
        cjk.windows(2)
            .map(|w| w.iter().collect::<String>())
            .filter(|b| !CJK_STOP_BIGRAMS.contains(&b.as_str())),
    );
    out.sort();
    out.dedup();
    out
}

impl Catalogue {
    pub fn new(books: Vec<Book>) -> Self {
        Catalogue { books }
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let file: CatalogueFile =
            toml::from_str(text).map_err(|e| format!("invalid book catalogue: {e}"))?;
        Ok(Catalogue { books: file.books })
    }

    /// Reads the catalogue file; a missing file is an empty catalogue.
    pub fn load(path: &Path) -> Result<Self, String> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Catalogue::default()),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }

    pub fn books(&self) -> &[Book] {
        &self.books
    }

    /// `title` as a member reading in `lang` knows it ([`Book::title_in`]; a title not in
    /// the catalogue as given).
    pub fn title_in(&self, title: &str, lang: &str) -> String {
        self.find(title)
            .map_or(title, |book| book.title_in(lang))
            .to_string()
    }

    /// A book by title (English or Japanese, case-insensitive; a unique partial match counts).
    pub fn find(&self, title: &str) -> Option<&Book> {
        let title = clean_title(title);
        self.find_exactly(&title).or_else(|| {
            // "Kokoro by Natsume Soseki", 「こころ（夏目漱石）」: the title before its author
            let before = title
                .split(" by ")
                .next()
                .and_then(|t| t.split(['（', '(']).next())
                .map(str::trim)
                .filter(|t| !t.is_empty() && *t != title)?;
            self.find_exactly(before)
        })
    }

    fn find_exactly(&self, title: &str) -> Option<&Book> {
        let t = title.trim().to_lowercase();
        let exact = self.books.iter().find(|b| {
            b.title.to_lowercase() == t
                || b.title_ja.as_deref().is_some_and(|j| j.to_lowercase() == t)
        });
        exact.or_else(|| {
            let partial: Vec<&Book> = self
                .books
                .iter()
                .filter(|b| {
                    !t.is_empty()
                        && (b.title.to_lowercase().contains(&t)
                            || b.title_ja
                                .as_deref()
                                .is_some_and(|j| j.contains(title.trim())))
                })
                .collect();
            (partial.len() == 1).then(|| partial[0])
        })
    }

    /// Books matching the query's words, best first (title and author count most).
    pub fn search(&self, query: &str, k: usize) -> Vec<(f32, &Book)> {
        let wanted = terms(query);
        let mut scored: Vec<(f32, &Book)> = self
            .books
            .iter()
            .filter_map(|b| {
                let head = terms(&format!(
                    "{} {} {} {}",
                    b.title,
                    b.title_ja.as_deref().unwrap_or_default(),
                    b.author,
                    b.author_ja.as_deref().unwrap_or_default()
                ));
                let body = terms(&format!("{} {} {}", b.genre, b.tags.join(" "), b.summary));
                let score: f32 = wanted
                    .iter()
                    .map(|w| {
                        if head.contains(w) {
                            3.0
                        } else if body.contains(w) {
                            1.0
                        } else {
                            0.0
                        }
                    })
                    .sum();
                (score > 0.0).then_some((score, b))
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored.truncate(k);
        scored
    }
}

/// A title as the reader typed it without the marks around it: 「こころ」, 『こころ』,
/// "Kokoro", «Kokoro» are こころ and Kokoro.
pub fn clean_title(title: &str) -> String {
    title
        .trim()
        .trim_matches(|c: char| "「」『』\"“”'‘’«»《》【】<>".contains(c))
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_catalogue_parses_and_searches_in_both_languages() {
        let c = Catalogue::parse(include_str!("../../../../config/books.toml")).expect("parses");
        assert!(c.books().len() >= 24, "a few dozen books");
        assert_eq!(
            c.find("こころ").map(|b| b.author.as_str()),
            Some("Natsume Soseki")
        );
        assert_eq!(c.find("kokoro").map(|b| b.year), Some(1914));
        // as readers type it: in quotes, with its author
        for typed in [
            "「こころ」",
            "『こころ』",
            "\"Kokoro\"",
            "Kokoro by Natsume Soseki",
            "こころ（夏目漱石）",
        ] {
            assert_eq!(c.find(typed).map(|b| b.year), Some(1914), "{typed}");
        }
        assert_eq!(c.search("Soseki guilt", 1)[0].1.title, "Kokoro");
        assert_eq!(c.search("方丈記", 1)[0].1.title, "Hojoki");
        // a Japanese reader's name for the author finds the book, and is what they see
        assert_eq!(c.search("鴨長明", 1)[0].1.title, "Hojoki");
        let kokoro = c.find("kokoro").expect("Kokoro");
        assert_eq!(
            (kokoro.author_in("ja"), kokoro.author_in("en")),
            ("夏目漱石", "Natsume Soseki")
        );
        assert!(
            c.books().iter().all(|b| b.author_ja.is_some()),
            "every shipped book has its author in Japanese"
        );
        assert!(c.search("zzzz", 3).is_empty());
    }
}

//! What a model's final answer is checked for before a user reads it: citations that name
//! a source ([`check_citations`], renumbered to the sources it uses by `keep_cited`), that
//! it says something beyond them (`says_something`), and the names it takes from nowhere
//! (`names_not_in`).

use crate::kb::Passage;
use regex::Regex;
use std::sync::LazyLock;

static CITATION: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"\[(\d+)\]").ok());

/// Whether a model's answer says something beyond its citations and a label ("A:",
/// "Answer:", 「回答:」): five letters or digits at least, a CJK character counting two.
/// "A: [1]\n[2]", which a small model writes, does not.
pub(super) fn says_something(text: &str) -> bool {
    let bare = match CITATION.as_ref() {
        Some(re) => re.replace_all(text, "").into_owned(),
        None => text.to_string(),
    };
    let bare = bare.trim();
    let lower = bare.to_lowercase();
    let unlabelled = ["answer:", "a:", "回答:", "回答：", "答え:", "答え："]
        .iter()
        .find_map(|label| {
            lower
                .starts_with(label)
                .then(|| bare.get(label.len()..))
                .flatten()
        })
        .unwrap_or(bare);
    let weight: usize = unlabelled
        .chars()
        .filter(|c| c.is_alphanumeric())
        .map(|c| if c.is_ascii() { 1 } else { 2 })
        .sum();
    weight >= 5
}

/// The names an answer uses that neither its sources nor the question hold: capitalised
/// words (and hyphenated ones, "Kaito-no-Mae") not at the start of a sentence, each once.
/// A model that invents a character or a place for a book names them; a grounded answer
/// takes its names from the passages it cites.
pub(super) fn names_not_in(text: &str, sources: &[Passage], question: &str) -> Vec<String> {
    let mut known = question.to_lowercase();
    for p in sources {
        for part in [&p.heading, &p.text, &p.path] {
            known.push('\n');
            known.push_str(&part.to_lowercase());
        }
    }
    let mut unknown: Vec<String> = Vec::new();
    let mut sentence_start = true;
    for raw in text.split_whitespace() {
        let word = raw.trim_matches(|c: char| !c.is_alphanumeric() && c != '-');
        let starts = sentence_start;
        // the next word starts a sentence after an end mark, a colon or a citation
        sentence_start =
            raw.ends_with(['.', '!', '?', ':', '。']) || raw.starts_with('[') && raw.ends_with(']');
        if starts || word.chars().count() < 2 {
            continue;
        }
        let named = word.chars().next().is_some_and(|c| c.is_ascii_uppercase());
        if named && !known.contains(&word.to_lowercase()) && !unknown.iter().any(|u| u == word) {
            unknown.push(word.to_string());
        }
    }
    unknown
}

/// Removes `[n]` citations that name no source.
pub fn check_citations(text: &str, sources: usize) -> String {
    let Some(re) = CITATION.as_ref() else {
        return text.to_string();
    };
    re.replace_all(text, |c: &regex::Captures<'_>| {
        let n: usize = c[1].parse().unwrap_or(0);
        if (1..=sources).contains(&n) {
            c[0].to_string()
        } else {
            String::new()
        }
    })
    .into_owned()
}

/// The sources an answer cites, in the order it first cites them, with its citations
/// renumbered to match: a passage the searches found but the answer does not use is not
/// listed as a source. An answer that cites none keeps them all.
pub(super) fn keep_cited(text: &str, sources: Vec<Passage>) -> (String, Vec<Passage>) {
    let Some(re) = CITATION.as_ref() else {
        return (text.to_string(), sources);
    };
    let mut order: Vec<usize> = Vec::new();
    for c in re.captures_iter(text) {
        let n: usize = c[1].parse().unwrap_or(0);
        if (1..=sources.len()).contains(&n) && !order.contains(&n) {
            order.push(n);
        }
    }
    if order.is_empty() {
        return (text.to_string(), sources);
    }
    let text = re
        .replace_all(text, |c: &regex::Captures<'_>| {
            let n: usize = c[1].parse().unwrap_or(0);
            match order.iter().position(|&o| o == n) {
                Some(at) => format!("[{}]", at + 1),
                None => c[0].to_string(),
            }
        })
        .into_owned();
    let kept = order.iter().map(|&n| sources[n - 1].clone()).collect();
    (text, kept)
}

#[cfg(test)]
mod tests {
    use super::{Passage, check_citations, keep_cited, names_not_in, says_something};

    fn passage(heading: &str) -> Passage {
        Passage {
            path: "kb.md".into(),
            heading: heading.into(),
            text: String::new(),
            score: 1.0,
            coverage: 1.0,
        }
    }

    #[test]
    fn only_the_sources_an_answer_cites_are_listed_renumbered() {
        let sources = vec![passage("a"), passage("b"), passage("c")];
        let (text, kept) = keep_cited("B [2], then C [3], B again [2].", sources.clone());
        assert_eq!(text, "B [1], then C [2], B again [1].");
        assert_eq!(kept, vec![passage("b"), passage("c")]);
        // an answer that cites nothing keeps them all
        let (text, kept) = keep_cited("No citation here.", sources.clone());
        assert_eq!((text.as_str(), kept), ("No citation here.", sources));
    }

    #[test]
    fn names_an_answer_takes_from_nowhere_are_found() {
        let mut kokoro = passage("Kokoro");
        kokoro.text = "A student befriends an older man he calls Sensei, at the end of the \
                       Meiji era. Natsume Soseki, 1914."
            .into();
        let invented = "The title \"Kokoro\" refers to a novel by Natsume Soseki. The story \
                        features an older man named Kaito-no-Mae who admires a samurai named \
                        Kage no Maru, in the Edo period.";
        assert_eq!(
            names_not_in(
                invented,
                std::slice::from_ref(&kokoro),
                "What does the title mean?"
            ),
            ["Kaito-no-Mae", "Kage", "Maru", "Edo"]
        );
        let grounded = "Sensei is the older man the student befriends, late in the Meiji era \
                        [1]. The Student calls him so.";
        assert!(names_not_in(grounded, &[kokoro], "Who is Sensei?").is_empty());
    }

    #[test]
    fn an_answer_of_citations_alone_says_nothing() {
        for nothing in ["A: [1]\n[2]", "[1] [2]", "  ", "Answer: [1]", "はい[1]"] {
            assert!(!says_something(nothing), "{nothing:?}");
        }
        for something in ["Send /end to stop [1].", "/end を送ります [1]", "Use /end."] {
            assert!(says_something(something), "{something:?}");
        }
    }

    #[test]
    fn citations_to_missing_sources_are_removed() {
        assert_eq!(
            check_citations("See [1] and [3], not [0].", 2),
            "See [1] and , not ."
        );
    }
}

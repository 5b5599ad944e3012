//! Retrieval on a knowledge base the project's vocabulary was never tuned on: an ordinary
//! IT / HR help-desk (`fixtures/helpdesk-eval`, 20 pages per language, written with its 73
//! questions per language before any retrieval ran on them; 37 of each are paraphrases
//! sharing no word with the section they want). Prints top-1 per language
//! (`--nocapture`); the floors below are what the dictionary-free search reaches, so a
//! change that loses ground fails.

mod common;

use kaiwa_core::kb::{KnowledgeBase, Morphology, Passage};
use std::sync::Arc;

const QUESTIONS: &str = include_str!("fixtures/helpdesk-eval/questions.json");

#[derive(serde::Deserialize)]
struct Question {
    q: String,
    expect: String,
    paraphrase: bool,
}

/// A search: the knowledge base's own, or by meaning too.
type Search<'a> = &'a dyn Fn(&str) -> Vec<Passage>;

fn top1(search: Search, lang: &str) -> (usize, usize, Vec<String>) {
    let sets: std::collections::BTreeMap<String, Vec<Question>> =
        serde_json::from_str(QUESTIONS).expect("the question set");
    let questions = &sets[lang];
    let mut misses = Vec::new();
    for q in questions {
        let found = search(&q.q);
        let top = found.first().map(|p| p.citation()).unwrap_or_default();
        if top != q.expect {
            let seen: Vec<String> = found
                .iter()
                .map(|p| format!("{} ({:.2})", p.citation(), p.coverage))
                .collect();
            let kind = if q.paraphrase { "paraphrase" } else { "direct" };
            misses.push(format!("[{kind}] {} -> {seen:?} (want {})", q.q, q.expect));
        }
    }
    (questions.len() - misses.len(), questions.len(), misses)
}

const KB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/helpdesk-eval");

/// Top-1 per language, printed with the misses; returns (en, ja) hits.
fn evaluate(kb: &KnowledgeBase, label: &str) -> (usize, usize) {
    evaluate_with(&|q| kb.search(q, 3).expect("search"), label)
}

fn evaluate_with(search: Search, label: &str) -> (usize, usize) {
    let mut hits = Vec::new();
    for lang in ["en", "ja"] {
        let (hit, total, misses) = top1(search, lang);
        println!(
            "{label} {lang}: top-1 {hit}/{total} = {:.0} %",
            hit as f64 * 100.0 / total as f64
        );
        for miss in &misses {
            println!("  {miss}");
        }
        hits.push(hit);
    }
    (hits[0], hits[1])
}

/// The dictionary: Debian's mecab-ipadic (`.ci/run` installs it).
fn morphology() -> Arc<Morphology> {
    let dir = std::path::Path::new(kaiwa_core::kb::japanese::DEBIAN_IPADIC);
    Arc::new(
        Morphology::from_mecab_dir(dir)
            .unwrap_or_else(|e| panic!("{e} (install Debian's mecab-ipadic; .ci/run does)")),
    )
}

#[test]
fn an_unseen_help_desk_is_searched_in_both_languages() {
    let plain = KnowledgeBase::open(KB).expect("the knowledge base");
    let (en, ja) = evaluate(&plain, "character pairs");
    assert!(en >= 48 && ja >= 42, "lost ground: en {en}, ja {ja}");
    let analysed = KnowledgeBase::open_with(KB, Some(morphology())).expect("the knowledge base");
    let (en_m, ja_m) = evaluate(&analysed, "dictionary");
    assert_eq!(en_m, en, "English is not analysed by the dictionary");
    assert!(ja_m > ja, "the dictionary finds more: {ja_m} against {ja}");
}

/// With embeddings from a real server, by hand (not in CI): `KAIWA_EVAL_EMBEDDINGS=
/// "http://127.0.0.1:PORT/v1 MODEL" cargo test -p kaiwa-core --test kb_eval -- --ignored
/// --nocapture`, and `KAIWA_EVAL_PREFIXES="query: |passage: "` for a model trained with
/// prefixes (E5). Prints top-1 per language by words and meaning, without and with the
/// dictionary.
#[test]
#[ignore = "needs a real embeddings server (KAIWA_EVAL_EMBEDDINGS)"]
fn with_embeddings_from_a_real_server() {
    for (label, morphology) in [
        ("meaning + pairs", None),
        ("meaning + dictionary", Some(morphology())),
    ] {
        let kb = KnowledgeBase::open_with(KB, morphology).expect("the knowledge base");
        let meaning = common::RealMeaning::new(kb, label);
        evaluate_with(&|q| meaning.search(q), label);
    }
}

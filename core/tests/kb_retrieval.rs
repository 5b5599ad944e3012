//! How often the knowledge base puts the right passage first, on the question set in
//! `fixtures/kb_questions.toml` (over 30 questions per language, paraphrases included),
//! against the project's own knowledge base. The figure is printed (`--nocapture`) and must
//! stay at 90 % or more in each language.

mod common;

use kaiwa_core::kb::KnowledgeBase;
use std::collections::BTreeMap;

const QUESTIONS: &str = include_str!("fixtures/kb_questions.toml");

const KB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/kb");

#[test]
fn the_right_passage_comes_first_for_nine_questions_in_ten() {
    check(&KnowledgeBase::open(KB).expect("the knowledge base"));
}

#[test]
fn with_the_japanese_dictionary_too() {
    let dir = std::path::Path::new(kaiwa_core::kb::japanese::DEBIAN_IPADIC);
    let morphology = kaiwa_core::kb::Morphology::from_mecab_dir(dir)
        .unwrap_or_else(|e| panic!("{e} (install Debian's mecab-ipadic; .ci/run does)"));
    let kb = KnowledgeBase::open_with(KB, Some(std::sync::Arc::new(morphology)))
        .expect("the knowledge base");
    check(&kb);
}

/// With a real embeddings server, by hand: `KAIWA_EVAL_EMBEDDINGS="URL MODEL"` (see
/// `kb_eval.rs`); the same floor holds.
#[test]
#[ignore = "needs a real embeddings server (KAIWA_EVAL_EMBEDDINGS)"]
fn with_embeddings_from_a_real_server() {
    let meaning = common::RealMeaning::new(
        KnowledgeBase::open(KB).expect("the knowledge base"),
        "meaning",
    );
    check_with(&|q| meaning.search(q));
}

fn check(kb: &KnowledgeBase) {
    check_with(&|q| kb.search(q, 3).expect("search"));
}

fn check_with(search: &dyn Fn(&str) -> Vec<kaiwa_core::kb::Passage>) {
    let sets: BTreeMap<String, Vec<Vec<String>>> =
        toml::from_str(QUESTIONS).expect("the question set");
    for (lang, questions) in &sets {
        assert!(
            questions.len() >= 30,
            "{lang}: {} questions",
            questions.len()
        );
        let mut misses = Vec::new();
        for q in questions {
            let (question, right) = (&q[0], &q[1..]);
            let found = search(question);
            let top = found.first().map(|p| p.citation()).unwrap_or_default();
            if !right.contains(&top) {
                let seen: Vec<String> = found
                    .iter()
                    .map(|p| format!("{} ({:.2}, {:.1})", p.citation(), p.coverage, p.score))
                    .collect();
                misses.push(format!("{question} -> {seen:?} (want {})", right[0]));
            }
        }
        let hits = questions.len() - misses.len();
        let share = hits as f64 / questions.len() as f64;
        println!(
            "{lang}: top-1 {hits}/{} = {:.0} %",
            questions.len(),
            share * 100.0
        );
        for miss in &misses {
            println!("  miss: {miss}");
        }
        assert!(
            share >= 0.9,
            "{lang}: {:.0} %\n{}",
            share * 100.0,
            misses.join("\n")
        );
    }
}

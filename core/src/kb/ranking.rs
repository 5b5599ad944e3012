//! Ranking a question's passages: what a question means to the search (its tokens,
//! synonym groups, base forms and units of meaning, [`Question`]), BM25 over the index
//! ([`lexical`]), how much of the question a passage meets ([`coverage`]), the choice of
//! language ([`best_in_language`]), and BM25 and meaning ranked together ([`fuse`]).

use super::vocabulary::SYNONYMS;
use super::{
    Explained, Indexed, KbError, Morphology, Passage, Section, is_cjk, is_cjk_token, is_kanji,
    tokens,
};
use std::collections::BTreeMap;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, PhraseQuery, Query, TermQuery};
use tantivy::schema::{IndexRecordOption, Value};
use tantivy::{TantivyDocument, Term};

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

/// What a Japanese word the passage lacks is worth when they share a rare kanji
/// ([`Indexed::is_rare_kanji`]): 「割れる」 and 「ひび割れ」, 「盗まれた」 and 「盗難」 are the
/// same matter in other words.
const SHARED_KANJI: f32 = 0.5;

/// The share of the question's `units` a passage meets: a word among its `words`, a run in
/// its `text`, a group by any of its words; a Japanese word or run it lacks counts
/// [`SHARED_KANJI`] when the passage has one of its kanji that `rare` says few passages have.
fn coverage(
    units: &[Unit],
    groups: &[Group],
    (words, text): (&[String], &str),
    rare: &dyn Fn(char) -> bool,
) -> f32 {
    if units.is_empty() {
        return 0.0;
    }
    let shares_a_rare_kanji = |u: &str| {
        u.chars()
            .any(|c| is_kanji(c) && rare(c) && text.contains(c))
    };
    let partly = units
        .iter()
        .filter(|unit| match unit {
            Unit::Word(w) => !words.contains(w) && shares_a_rare_kanji(w),
            Unit::Run(r) => !text.contains(r.as_str()) && shares_a_rare_kanji(r),
            Unit::Group(_) => false,
        })
        .count();
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
    (met as f32 + SHARED_KANJI * partly as f32) / units.len() as f32
}

/// A question as a search sees it ([`super::KnowledgeBase::search`]).
pub(super) struct Question<'q> {
    text: &'q str,
    /// Its search tokens.
    own: Vec<String>,
    groups: Vec<Group>,
    /// The base forms of its Japanese words, with a dictionary.
    lemmas: Option<Vec<String>>,
    units: Vec<Unit>,
}

impl Question<'_> {
    /// How many units of meaning it has.
    pub(super) fn size(&self) -> usize {
        self.units.len()
    }
}

/// What a search needs to know of `query`: its tokens, the synonym groups it names, its
/// base forms (with `morphology`) and its units of meaning.
pub(super) fn question<'q>(
    i: &Indexed,
    morphology: Option<&Morphology>,
    query: &'q str,
) -> Result<Question<'q>, KbError> {
    let own = tokens(&i.index, i.fields, query)?;
    // the synonym groups the question names, with their words' tokens
    let groups = synonym_groups(i, query)?;
    let lemmas = morphology
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

/// Passage `ord` as found for `q`, with `score`.
fn found_passage(i: &Indexed, q: &Question, ord: usize, score: f32) -> Passage {
    let s = &i.sections[ord];
    let whole = match &s.title {
        Some(title) => format!("{}\n{title}\n{}", s.heading, s.text),
        None => format!("{}\n{}", s.heading, s.text),
    };
    Passage {
        path: s.path.clone(),
        heading: s.heading.clone(),
        text: s.text.clone(),
        coverage: coverage(&q.units, &q.groups, (&s.words, &whole), &|c| {
            i.is_rare_kanji(c)
        }),
        score,
    }
}

/// The best 20 passages for `q` by BM25, with their places in the index.
pub(super) fn lexical(i: &Indexed, q: &Question) -> Result<Vec<(usize, Passage)>, KbError> {
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
/// as the share of the question a passage meets (its coverage, a fifth of it by BM25's
/// score relative to the best: a tie-break among passages that meet as much); meaning as the passage's similarity in standard deviations
/// above the mean of all passages ([`MEANING_FULL`] and more: full marks), so a question nothing
/// answers, close to every passage alike, finds nothing by meaning. A passage that shares
/// no word with the question is kept only when its meaning stands out ([`MEANING_ALONE`])
/// or its similarity reaches `alone_at` (the model's own scale, learnt from the passages:
/// a base of a few passages has too few for standard deviations).
/// `Passage::score` is the combined score, 0–1; each passage comes with what it was ranked
/// by ([`Explained`]).
pub(super) fn fuse(
    i: &Indexed,
    q: &Question,
    lexical: Vec<(usize, Passage)>,
    (similarity, alone_at): (&[f32], f32),
    k: usize,
) -> Vec<Explained> {
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
    let mut ranked: Vec<Explained> = candidates
        .into_iter()
        .filter(|(o, p)| p.coverage > 0.0 || alone(*o))
        .map(|(o, mut p)| {
            let bm25_raw = p.score;
            let bm25 = if best_bm25 > 0.0 {
                p.score / best_bm25
            } else {
                0.0
            };
            // BM25 tells apart passages that meet as much of the question: a share of
            // what they meet, so a passage meeting one common word of the question gains
            // little from being the best of a weak lexical lot
            let words = p.coverage * (0.8 + 0.2 * bm25);
            let mut meaning = (stands_out(o) / MEANING_FULL).clamp(0.0, 1.0);
            // an overview is close to every question about its document: a section first
            if i.sections[o].overview {
                meaning *= 0.5;
            }
            p.score = (1.0 - MEANING_WEIGHT) * words + MEANING_WEIGHT * meaning;
            Explained {
                passage: p,
                bm25: bm25_raw,
                similarity: Some(similarity[o]),
                above_mean: Some(stands_out(o)),
            }
        })
        .collect();
    ranked.sort_by(|a, b| b.passage.score.total_cmp(&a.passage.score));
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
pub(super) fn best_in_language(mut found: Vec<Passage>, query: &str, k: usize) -> Vec<Passage> {
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

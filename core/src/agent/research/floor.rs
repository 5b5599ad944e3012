//! The rule-based floor of a [`Research`]: what answers without a model (or when it fails).
//! It reads the first [`FLOOR_READS`] passages a search finds, keeps those scoring at
//! least [`FLOOR_CUT`] of the best, and answers from the one meeting most of the question
//! when it meets [`STRONG_COVERAGE`], else shows the closest it found and offers a person.

use super::{Research, STRONG_COVERAGE, Searched, SubAnswer, excerpt, sources_block};
use crate::kb::Passage;

/// How many passages the rule-based floor reads for a question.
pub const FLOOR_READS: usize = 3;

/// The floor keeps the passages scoring at least this share of the best: weak matches
/// next to a strong one are noise, not sources.
pub const FLOOR_CUT: f32 = 0.4;

/// What the rule-based floor keeps of a search's passages (best first): those scoring at
/// least [`FLOOR_CUT`] of the best.
pub fn floor_cut(mut passages: Vec<Passage>) -> Vec<Passage> {
    let best = passages.first().map_or(0.0, |p| p.score);
    passages.retain(|p| p.score >= best * FLOOR_CUT);
    passages
}

/// The floor's sources in the order it answers from them, with their places among
/// `sources`: the one meeting most of the question first (an answer when it meets
/// [`STRONG_COVERAGE`], otherwise "the closest I found"), ties by score.
pub fn floor_order(sources: &[Passage]) -> Vec<(usize, &Passage)> {
    let mut ranked: Vec<(usize, &Passage)> = sources.iter().enumerate().collect();
    ranked.sort_by(|a, b| {
        b.1.coverage
            .total_cmp(&a.1.coverage)
            .then(b.1.score.total_cmp(&a.1.score))
    });
    ranked
}

impl Research<'_> {
    /// A sub-task answered by search alone: the passages the floor keeps, with their
    /// excerpts, and the search for the trace.
    pub(super) async fn floor_attempt(&self, task: &str) -> (SubAnswer, Vec<Searched>) {
        let mut passages = (self.library.search)(task.to_string(), FLOOR_READS).await;
        passages.retain(|p| self.allowed(p));
        let passages = floor_cut(passages);
        let by_meaning = self
            .library
            .by_meaning
            .as_ref()
            .is_some_and(|ranks| ranks(task));
        let searched = vec![Searched::new("floor", task, by_meaning, &passages)];
        let answer = SubAnswer {
            text: passages
                .iter()
                .map(|p| excerpt(&p.text, 300))
                .collect::<Vec<_>>()
                .join("\n"),
            passages,
        };
        (answer, searched)
    }

    /// The answer from `sources` without a model: the passage meeting most of the
    /// question (and what else answers as well), or the closest one said to be so, or
    /// that nothing was found; with the sources block.
    pub(super) fn floor_answer(&self, sources: &[Passage]) -> String {
        if sources.is_empty() {
            return if self.lang == "ja" {
                format!(
                    "{}にはこのご質問に関する情報が見つかりませんでした。担当者にお繋ぎすることもできます。",
                    self.library.source_ja
                )
            } else {
                format!(
                    "I found nothing in {} about this. I can pass your question to a person if you like.",
                    self.library.source_en
                )
            };
        }
        let ranked = floor_order(sources);
        let ja = self.lang == "ja";
        let mut out = String::new();
        let (best_index, best) = ranked[0];
        if best.coverage >= STRONG_COVERAGE {
            // an answer: the passage itself, then what else answers as well
            out.push_str(&format!(
                "**{}**\n{} [{}]\n\n",
                best.heading,
                excerpt(&best.text, 600),
                best_index + 1
            ));
            let related: Vec<&(usize, &Passage)> = ranked[1..]
                .iter()
                .filter(|(_, p)| p.coverage >= STRONG_COVERAGE)
                .take(2)
                .collect();
            if !related.is_empty() {
                out.push_str(if ja { "関連:\n" } else { "Related:\n" });
                for (i, p) in related {
                    out.push_str(&format!(
                        "[{}] {}: {}\n",
                        i + 1,
                        p.heading,
                        excerpt(&p.text, 200)
                    ));
                }
                out.push('\n');
            }
        } else {
            // only the closest match: said so, with the way to a person
            out.push_str(&if ja {
                format!(
                    "{}にぴったりの答えは見つかりませんでした。いちばん近いのはこちらです:\n\n",
                    self.library.source_ja
                )
            } else {
                format!(
                    "I found no exact answer in {}. The closest I found:\n\n",
                    self.library.source_en
                )
            });
            out.push_str(&format!(
                "[{}] {}: {}\n\n",
                best_index + 1,
                best.heading,
                excerpt(&best.text, 400)
            ));
            out.push_str(if ja {
                "これで解決しない場合は、担当者にお繋ぎできます。\n\n"
            } else {
                "If this does not answer it, I can pass your question to a person.\n\n"
            });
        }
        out.push_str(&sources_block(sources, &self.lang));
        out
    }
}

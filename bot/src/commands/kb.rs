//! `kaiwa kb index|search|explain`: what the help-desk's knowledge base holds, finds, and
//! why it ranks as it does.

use crate::cli::KbCommand;
use anyhow::Context;
use kaiwa::app;
use kaiwa::config::Settings;

/// `kaiwa kb index|search`: what the help-desk's knowledge base holds and finds; with
/// `[llm] embeddings_model`, the passages embedded (their vectors kept in the database) and
/// searched by meaning too, as the help-desk does.
pub async fn kb(settings: &Settings, database_url: &str, command: KbCommand) -> anyhow::Result<()> {
    let kb = std::sync::Arc::new(app::open_kb(settings)?);
    let store = match settings
        .llm
        .as_ref()
        .and_then(|l| l.embeddings_model.as_ref())
    {
        Some(_) => Some(app::open_store(database_url).await?),
        None => None,
    };
    let meaning = app::build_semantic(settings.llm.as_ref(), store.clone())
        .context("[llm] embeddings_model")?;
    if let Some(meaning) = &meaning {
        // each batch as it arrives, on one line a terminal rewrites
        let progress = |done: usize, of: usize| {
            eprint!("\rembedding passages: {done} of {of}");
            if done == of {
                eprintln!();
            }
        };
        // a batch that fails is tried again a few times (what was embedded is kept)
        let mut wait = std::time::Duration::from_secs(2);
        for tries_left in (0..4).rev() {
            match meaning.prepare_with_progress(&kb, &progress).await {
                Ok(checks) => {
                    say!("embeddings: {} (passages embedded)", meaning.model());
                    for check in checks {
                        say!("  {check}");
                    }
                }
                Err(e @ kaiwa_core::kb::KbError::WeakEmbeddings { .. }) => {
                    say!("embeddings: {e}; searching by words alone")
                }
                Err(e) if tries_left > 0 => {
                    eprintln!("\nembeddings: {e}; trying again in {} s", wait.as_secs());
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                    continue;
                }
                Err(e) => say!(
                    "embeddings: {e}; searching by words alone (what was embedded is kept: \
                     `kaiwa kb index` again, or `kaiwa run`, goes on from there)"
                ),
            }
            break;
        }
    }
    match command {
        KbCommand::Index => {
            let (files, passages) = kb.stats();
            say!(
                "knowledge base {}: {files} files, {passages} passages indexed",
                settings.flows.kb_dir
            );
        }
        KbCommand::Search { query, k } => {
            let search = kaiwa_core::kb::KbSearch {
                kb: kb.clone(),
                meaning,
            };
            for (i, p) in search
                .search(&query, k)
                .await
                .context("search failed")?
                .iter()
                .enumerate()
            {
                say!("[{}] {} (score {:.2})", i + 1, p.citation(), p.score);
            }
        }
        KbCommand::Explain { question, k } => {
            let (ranking, by_meaning) = match &meaning {
                Some(meaning) => meaning.explain(&kb, &question, k).await,
                None => kb.explain(&question, k, None).map(|r| (r, false)),
            }
            .context("search failed")?;
            let size = kb.question_size(&question).context("search failed")?;
            say!(
                "{}",
                explain_report(&question, size, &ranking, by_meaning, meaning.as_deref())
            );
        }
    }
    if let Some(store) = store {
        store.close().await;
    }
    Ok(())
}

/// What `kaiwa kb explain` prints: the ranking with what each passage was ranked by, then
/// what the rule-based floor does with it (the same rules: it reads the first
/// [`FLOOR_READS`](kaiwa_core::agent::research::FLOOR_READS), keeps those above its cut,
/// and answers from the one meeting most of the question).
fn explain_report(
    question: &str,
    size: usize,
    ranking: &[kaiwa_core::kb::Explained],
    by_meaning: bool,
    meaning: Option<&kaiwa_core::kb::Semantic>,
) -> String {
    use kaiwa_core::agent::research::{
        FLOOR_CUT, FLOOR_READS, STRONG_COVERAGE, floor_cut, floor_order,
    };
    let pct = |x: f32| (x * 100.0).round() as u32;
    let how = match (by_meaning, meaning) {
        (true, Some(m)) => format!("by words and meaning ({})", m.model()),
        (false, Some(_)) => "by words alone (this question's language is not searched by meaning, \
                             or the embeddings server did not answer)"
            .to_string(),
        _ => "by words alone (no [llm] embeddings_model)".to_string(),
    };
    let mut out = format!("{question:?}: {size} units of meaning; ranked {how}\n");
    if ranking.is_empty() {
        out.push_str("No passage meets any of its words");
        out.push_str(if by_meaning {
            " or stands out in meaning.\n"
        } else {
            ".\n"
        });
        out.push_str("The floor answers that it found nothing, and offers a person.");
        return out;
    }
    out.push_str(" #  score  covers  words (BM25)");
    if by_meaning {
        out.push_str("  meaning (similarity, above the mean)");
    }
    out.push_str("  passage\n");
    for (n, e) in ranking.iter().enumerate() {
        let mut line = format!(
            "{:>2}  {:>5.2}  {:>5} %  {:>12.2}",
            n + 1,
            e.passage.score,
            pct(e.passage.coverage),
            e.bm25
        );
        if let (Some(similarity), Some(above)) = (e.similarity, e.above_mean) {
            line.push_str(&format!("  {similarity:>10.3} ({above:+.1} sd){:>14}", ""));
        }
        line.push_str(&format!("  {}\n", e.passage.citation()));
        out.push_str(&line);
    }
    let read: Vec<kaiwa_core::kb::Passage> = ranking
        .iter()
        .take(FLOOR_READS)
        .map(|e| e.passage.clone())
        .collect();
    let best = read.first().map_or(0.0, |p| p.score);
    let kept = floor_cut(read.clone());
    let kept_numbers: Vec<String> = (1..=kept.len()).map(|n| n.to_string()).collect();
    let first = match read.len() {
        1 => "the one passage found".to_string(),
        n => format!("the first {n}"),
    };
    out.push_str(&format!(
        "The floor reads {first} and keeps those scoring at least {} % of the best \
         ({:.2}): {}.\n",
        pct(FLOOR_CUT),
        best * FLOOR_CUT,
        kept_numbers.join(", ")
    ));
    if let Some(&(at, p)) = floor_order(&kept).first() {
        if p.coverage >= STRONG_COVERAGE {
            out.push_str(&format!(
                "It answers from [{}] {}: the passage meets {} % of the question ({} % is enough).",
                at + 1,
                p.citation(),
                pct(p.coverage),
                pct(STRONG_COVERAGE)
            ));
        } else {
            out.push_str(&format!(
                "No passage meets {} % of the question: it says it found no exact answer, shows \
                 the closest, [{}] {} ({} %), and offers a person.",
                pct(STRONG_COVERAGE),
                at + 1,
                p.citation(),
                pct(p.coverage)
            ));
        }
    }
    out
}

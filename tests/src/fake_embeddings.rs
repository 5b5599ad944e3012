//! [`FakeEmbeddings`]: a fake OpenAI-compatible `POST /v1/embeddings` on 127.0.0.1 (port 0)
//! that records every input.
//!
//! Its vectors are made to be predictable, as a real model's are not: one dimension per
//! *concept* the test names (the words, English or Japanese, that mean it: "fever", "ill",
//! 「熱」, 「体調」), so that a paraphrase meets its passage where no word does; and 4,096
//! dimensions of hashed words (lower weight), so that every heading finds its own passage
//! and different texts differ. It can also answer an error status, garbage, nothing
//! (hang), noise (a vector that means nothing: a chat model asked for embeddings), or
//! vectors of the ASCII text alone (a model that knows no Japanese).

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// How the server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Concept vectors.
    Normal,
    /// This status with an error body.
    Status(u16),
    /// 200 with a body that is not embeddings.
    Garbage,
    /// Never answers.
    Hang,
    /// Vectors from a hash of the text: no meaning at all.
    Noise,
    /// Concept vectors of the ASCII text only: a model that knows no Japanese (all its
    /// Japanese texts come out alike).
    EnglishOnly,
    /// Concept vectors with their components in reverse order: another model served under
    /// the same name (the same meaning, another space).
    Replaced,
}

struct Shared {
    concepts: Vec<Vec<String>>,
    behaviour: Behaviour,
    inputs: Vec<String>,
    /// Each request's count of texts and its `input_type`, in order.
    requests: Vec<(usize, Option<String>)>,
    /// Time per 8 texts (rounded up) before answering: a CPU server.
    per_eight: Option<std::time::Duration>,
    /// Which requests (counted from the first, 0) answer 503.
    fail_at: Vec<usize>,
}

pub struct FakeEmbeddings {
    addr: std::net::SocketAddr,
    shared: Arc<Mutex<Shared>>,
    task: tokio::task::JoinHandle<()>,
}

const WORD_DIMENSIONS: usize = 4096;

fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

/// The words of `text`: lowercased ASCII words and CJK characters one by one.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            word.push(c.to_ascii_lowercase());
            continue;
        }
        if !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        if !c.is_ascii() && c.is_alphanumeric() {
            out.push(c.to_string());
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

fn vector(concepts: &[Vec<String>], text: &str, behaviour: Behaviour) -> Vec<f32> {
    let width = concepts.len() + WORD_DIMENSIONS;
    if behaviour == Behaviour::Noise {
        let mut seed = fnv(text);
        return (0..width)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
            })
            .collect();
    }
    let kept: String;
    let text = if behaviour == Behaviour::EnglishOnly {
        kept = text.chars().filter(char::is_ascii).collect();
        &kept
    } else {
        text
    };
    let lower = text.to_lowercase();
    let mut v = vec![0.0f32; width];
    for (n, words) in concepts.iter().enumerate() {
        if words.iter().any(|w| {
            if w.is_ascii() {
                self::words(&lower).iter().any(|x| x == w)
            } else {
                text.contains(w.as_str())
            }
        }) {
            v[n] = 3.0;
        }
    }
    // function words say little, in a real model too
    const FUNCTION_WORDS: &[&str] = &[
        "a", "an", "the", "i", "you", "your", "my", "to", "in", "of", "and", "is", "are", "if",
        "it", "do", "how", "what", "which", "can", "has", "have",
    ];
    for word in words(text)
        .into_iter()
        .filter(|w| !FUNCTION_WORDS.contains(&w.as_str()))
    {
        v[concepts.len() + (fnv(&word) as usize % WORD_DIMENSIONS)] += 0.5;
    }
    if behaviour == Behaviour::Replaced {
        v.reverse();
    }
    v
}

async fn embeddings(State(shared): State<Arc<Mutex<Shared>>>, body: String) -> Response {
    let (behaviour, vectors, delay) = {
        let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
        let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let inputs: Vec<String> = match &request["input"] {
            Value::String(one) => vec![one.clone()],
            Value::Array(many) => many
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        s.inputs.extend(inputs.iter().cloned());
        let input_type = request["input_type"].as_str().map(str::to_string);
        let fails = s.fail_at.contains(&s.requests.len());
        s.requests.push((inputs.len(), input_type));
        let vectors: Vec<Vec<f32>> = inputs
            .iter()
            .map(|t| vector(&s.concepts, t, s.behaviour))
            .collect();
        let behaviour = if fails {
            Behaviour::Status(503)
        } else {
            s.behaviour
        };
        let delay = s
            .per_eight
            .map(|d| d * u32::try_from(inputs.len().div_ceil(8)).unwrap_or(u32::MAX));
        (behaviour, vectors, delay)
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    match behaviour {
        Behaviour::Status(status) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            r#"{"error":{"message":"the model is loading"}}"#,
        )
            .into_response(),
        Behaviour::Garbage => (StatusCode::OK, "<html>Bad gateway</html>").into_response(),
        Behaviour::Hang => {
            std::future::pending::<()>().await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
        Behaviour::Normal | Behaviour::Noise | Behaviour::EnglishOnly | Behaviour::Replaced => {
            let data: Vec<Value> = vectors
                .into_iter()
                .enumerate()
                .map(|(index, embedding)| {
                    json!({"object": "embedding", "index": index, "embedding": embedding})
                })
                .collect();
            axum::Json(json!({"object": "list", "model": "fake-embed", "data": data}))
                .into_response()
        }
    }
}

impl FakeEmbeddings {
    /// A server whose vectors know `concepts` (each a list of words that mean one thing).
    pub async fn start(concepts: &[&[&str]]) -> std::io::Result<Self> {
        let shared = Arc::new(Mutex::new(Shared {
            concepts: concepts
                .iter()
                .map(|c| c.iter().map(|w| w.to_string()).collect())
                .collect(),
            behaviour: Behaviour::Normal,
            inputs: Vec::new(),
            requests: Vec::new(),
            per_eight: None,
            fail_at: Vec::new(),
        }));
        let app = Router::new()
            .route("/v1/embeddings", post(embeddings))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeEmbeddings { addr, shared, task })
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn set(&self, behaviour: Behaviour) {
        self.lock().behaviour = behaviour;
    }

    /// Answers after `per_eight` for every 8 texts of a request (rounded up), as a server
    /// on a small CPU does.
    pub fn slow(&self, per_eight: std::time::Duration) {
        self.lock().per_eight = Some(per_eight);
    }

    /// The request numbered `n` (the first is 0) is answered 503.
    pub fn fail_request(&self, n: usize) {
        self.lock().fail_at.push(n);
    }

    /// Each request's count of texts and its `input_type` field, in order.
    pub fn requests(&self) -> Vec<(usize, Option<String>)> {
        self.lock().requests.clone()
    }

    /// Every text received, in order.
    pub fn inputs(&self) -> Vec<String> {
        self.lock().inputs.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for FakeEmbeddings {
    fn drop(&mut self) {
        self.task.abort();
    }
}

//! A circuit breaker per model endpoint. After `threshold` failed calls in a row (timeouts,
//! connection errors, 5xx, 429s) the breaker opens: calls fail at once with
//! [`ModelError::CircuitOpen`], so agents answer with their rule-based floor instead of making
//! every user wait for a dead server. After `cool_down` one call is let through; a success
//! closes the breaker, a failure keeps it open for another period.

use super::{ChatModel, ChatRequest, ChatResponse, ModelError};
use async_trait::async_trait;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct State {
    failures: u32,
    open_until: Option<Instant>,
    /// Bumped each time the breaker opens, so "told once" can be per outage.
    outages: u64,
}

/// The shared state of one endpoint's breaker (several agents' models may use one endpoint).
#[derive(Debug)]
pub struct Breaker {
    threshold: u32,
    cool_down: Duration,
    state: Mutex<State>,
}

impl Breaker {
    pub fn new(threshold: u32, cool_down: Duration) -> Arc<Breaker> {
        Arc::new(Breaker {
            threshold: threshold.max(1),
            cool_down,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Some(outage number)` while the breaker is open.
    pub fn open_outage(&self) -> Option<u64> {
        let state = self.lock();
        state
            .open_until
            .filter(|until| Instant::now() < *until)
            .map(|_| state.outages)
    }

    /// Whether a call may go out now (closed, or the cool-down is over: a trial call).
    fn admit(&self) -> bool {
        let mut state = self.lock();
        match state.open_until {
            Some(until) if Instant::now() < until => false,
            Some(_) => {
                // half open: this call is the trial; others wait for its outcome
                state.open_until = Some(Instant::now() + self.cool_down);
                true
            }
            None => true,
        }
    }

    /// A result; a failure counts `weight` times (a refused connection more than a slow
    /// answer: nothing is there).
    fn record(&self, ok: bool, weight: u32) {
        let mut state = self.lock();
        if ok {
            if state.open_until.is_some() {
                tracing::info!("model endpoint answers again; circuit closed");
            }
            state.failures = 0;
            state.open_until = None;
            return;
        }
        state.failures += weight;
        if state.failures >= self.threshold {
            if state.open_until.is_none() {
                state.outages += 1;
                tracing::warn!(
                    failures = state.failures,
                    cool_down = ?self.cool_down,
                    "model endpoint failing; circuit open, agents use their floor"
                );
            }
            state.open_until = Some(Instant::now() + self.cool_down);
        }
    }
}

/// Failures that say the endpoint is unhealthy (a malformed answer is the model's fault, not
/// the server's, and does not count).
fn counts(error: &ModelError) -> bool {
    match error {
        ModelError::Timeout(_) | ModelError::Connect(_) | ModelError::RateLimited { .. } => true,
        ModelError::Http { status, .. } => *status >= 500 || *status == 429,
        _ => false,
    }
}

/// A model behind a breaker.
pub struct BreakerModel {
    inner: Arc<dyn ChatModel>,
    breaker: Arc<Breaker>,
}

impl BreakerModel {
    pub fn new(inner: Arc<dyn ChatModel>, breaker: Arc<Breaker>) -> Self {
        BreakerModel { inner, breaker }
    }
}

#[async_trait]
impl ChatModel for BreakerModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn parallel_calls(&self) -> usize {
        self.inner.parallel_calls()
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        if !self.breaker.admit() {
            return Err(ModelError::CircuitOpen);
        }
        let result = self.inner.chat(request).await;
        self.record(&result);
        result
    }

    async fn chat_streaming(
        &self,
        request: ChatRequest,
        tap: &super::stream::Tap,
    ) -> Result<ChatResponse, ModelError> {
        if !self.breaker.admit() {
            return Err(ModelError::CircuitOpen);
        }
        let result = self.inner.chat_streaming(request, tap).await;
        self.record(&result);
        result
    }
}

impl BreakerModel {
    fn record(&self, result: &Result<ChatResponse, ModelError>) {
        match result {
            Ok(_) => self.breaker.record(true, 0),
            // a refused connection: the server is not there, which waits will not change
            Err(ModelError::Connect(_)) => self.breaker.record(false, 2),
            Err(e) if counts(e) => self.breaker.record(false, 1),
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ChatMessage;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Flaky {
        calls: AtomicUsize,
        fail: std::sync::atomic::AtomicBool,
    }

    #[async_trait]
    impl ChatModel for Flaky {
        fn name(&self) -> &str {
            "flaky"
        }
        async fn chat(&self, _r: ChatRequest) -> Result<ChatResponse, ModelError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.fail.load(Ordering::SeqCst) {
                Err(ModelError::Timeout(Duration::from_secs(1)))
            } else {
                Ok(ChatResponse::text("ok"))
            }
        }
    }

    fn request() -> ChatRequest {
        ChatRequest {
            messages: vec![ChatMessage::user("hi")],
            ..ChatRequest::default()
        }
    }

    #[tokio::test]
    async fn opens_after_repeated_failures_and_closes_after_a_good_trial() {
        let flaky = Arc::new(Flaky {
            calls: AtomicUsize::new(0),
            fail: std::sync::atomic::AtomicBool::new(true),
        });
        let breaker = Breaker::new(3, Duration::from_millis(100));
        let model = BreakerModel::new(flaky.clone(), breaker.clone());
        for _ in 0..3 {
            assert!(matches!(
                model.chat(request()).await,
                Err(ModelError::Timeout(_))
            ));
        }
        assert_eq!(breaker.open_outage(), Some(1));
        // open: calls fail at once, the server is not bothered
        assert!(matches!(
            model.chat(request()).await,
            Err(ModelError::CircuitOpen)
        ));
        assert_eq!(flaky.calls.load(Ordering::SeqCst), 3);
        tokio::time::sleep(Duration::from_millis(120)).await;
        flaky.fail.store(false, Ordering::SeqCst);
        assert!(
            model.chat(request()).await.is_ok(),
            "the trial call goes out"
        );
        assert_eq!(breaker.open_outage(), None);
        assert!(model.chat(request()).await.is_ok());
    }

    /// A server that refuses connections is not there: its failures count double, so the
    /// floors take over after fewer users waited for it.
    #[tokio::test]
    async fn refused_connections_open_the_circuit_sooner() {
        struct Refused;
        #[async_trait]
        impl ChatModel for Refused {
            fn name(&self) -> &str {
                "refused"
            }
            async fn chat(&self, _r: ChatRequest) -> Result<ChatResponse, ModelError> {
                Err(ModelError::Connect("connection refused".into()))
            }
        }
        let breaker = Breaker::new(5, Duration::from_secs(60));
        let model = BreakerModel::new(Arc::new(Refused), breaker.clone());
        for _ in 0..3 {
            assert!(matches!(
                model.chat(request()).await,
                Err(ModelError::Connect(_))
            ));
        }
        assert_eq!(breaker.open_outage(), Some(1), "open after 3 of 5");
        assert!(matches!(
            model.chat(request()).await,
            Err(ModelError::CircuitOpen)
        ));
    }
}

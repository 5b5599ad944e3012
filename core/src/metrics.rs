//! Prometheus metrics of a running bot: turns, model calls, tokens, model latency, errors by
//! kind, active sessions and queued messages. The orchestrator records them; `kaiwa run`
//! serves [`Metrics::render`] at `/metrics`.

use crate::store::LlmCallRecord;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 50 ms … ~51 s
    Histogram::new(exponential_buckets(0.05, 2.0, 11))
}

/// Error kinds counted in `kaiwa_errors_total{kind=…}`.
pub mod kind {
    pub const FLOW: &str = "flow";
    pub const STORE: &str = "store";
    pub const DELIVERY: &str = "delivery";
    pub const MODEL: &str = "model";
    pub const OVERSIZED: &str = "oversized";
    pub const RATE_LIMITED: &str = "rate_limited";
    pub const QUEUE_FULL: &str = "queue_full";
}

pub struct Metrics {
    registry: Registry,
    turns: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    model_calls: Family<Labels, Counter>,
    tokens: Family<Labels, Counter>,
    model_latency: HistogramFamily,
    active_sessions: Gauge,
    queued: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kaiwa");
        let turns = Family::<Labels, Counter>::default();
        let errors = Family::<Labels, Counter>::default();
        let model_calls = Family::<Labels, Counter>::default();
        let tokens = Family::<Labels, Counter>::default();
        let model_latency: HistogramFamily = Family::new_with_constructor(latency_histogram);
        let active_sessions = Gauge::default();
        let queued = Gauge::default();
        registry.register("turns", "Turns committed, by flow", turns.clone());
        registry.register("errors", "Errors, by kind", errors.clone());
        registry.register("model_calls", "Model calls, by agent", model_calls.clone());
        registry.register(
            "tokens",
            "Model tokens (prompt + completion), by agent",
            tokens.clone(),
        );
        registry.register(
            "model_latency_seconds",
            "Model call latency, by agent",
            model_latency.clone(),
        );
        registry.register(
            "active_sessions",
            "Sessions in progress",
            active_sessions.clone(),
        );
        registry.register(
            "queued_messages",
            "Messages waiting for their session's previous turn",
            queued.clone(),
        );
        Metrics {
            registry,
            turns,
            errors,
            model_calls,
            tokens,
            model_latency,
            active_sessions,
            queued,
        }
    }
}

impl Metrics {
    pub fn turn(&self, flow: &str) {
        self.turns
            .get_or_create(&vec![("flow", flow.to_string())])
            .inc();
    }

    pub fn error(&self, kind: &'static str) {
        self.errors
            .get_or_create(&vec![("kind", kind.to_string())])
            .inc();
    }

    pub fn model_calls(&self, calls: &[LlmCallRecord]) {
        for call in calls {
            let labels = vec![("agent", call.agent.clone())];
            self.model_calls.get_or_create(&labels).inc();
            self.tokens
                .get_or_create(&labels)
                .inc_by(call.prompt_tokens + call.completion_tokens);
            self.model_latency
                .get_or_create(&labels)
                .observe(call.latency_ms as f64 / 1000.0);
            if call.error.is_some() {
                self.error(kind::MODEL);
            }
        }
    }

    pub fn set_active_sessions(&self, n: i64) {
        self.active_sessions.set(n);
    }

    /// A message starts waiting for its session (returns a guard that stops the count).
    pub fn queued(&self) -> QueuedGuard<'_> {
        self.queued.inc();
        QueuedGuard(&self.queued)
    }

    /// Messages waiting now.
    pub fn queued_now(&self) -> i64 {
        self.queued.get()
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

pub struct QueuedGuard<'a>(&'a Gauge);

impl Drop for QueuedGuard<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.turn("interview");
        m.turn("interview");
        m.error(kind::STORE);
        m.model_calls(&[LlmCallRecord {
            session_id: None,
            agent: "reviewer".into(),
            model: "m".into(),
            prompt_tokens: 10,
            completion_tokens: 5,
            latency_ms: 120,
            error: None,
            at: chrono::Utc::now(),
            wasted: false,
        }]);
        m.set_active_sessions(3);
        {
            let _waiting = m.queued();
            assert_eq!(m.queued_now(), 1);
        }
        let text = m.render();
        assert!(
            text.contains("kaiwa_turns_total{flow=\"interview\"} 2"),
            "{text}"
        );
        assert!(text.contains("kaiwa_errors_total{kind=\"store\"} 1"));
        assert!(text.contains("kaiwa_tokens_total{agent=\"reviewer\"} 15"));
        assert!(text.contains("kaiwa_model_latency_seconds_count{agent=\"reviewer\"} 1"));
        assert!(text.contains("kaiwa_active_sessions 3"));
        assert!(text.contains("kaiwa_queued_messages 0"));
    }
}

//! A turn's budget for model work: the orchestrator runs each flow turn [`within`] a time
//! budget, and every model call made inside it sees what is [`remaining`]. A call's timeout
//! is the smaller of its own and what is left; once nothing is left calls fail at once
//! ([`super::ModelError::BudgetSpent`]) and agents answer by their floors, so a user gets a
//! reply within the budget plus the platform's own time.
//!
//! The deadline is a task-local: it follows the turn's future (the help-desk's parallel
//! sub-tasks run in the same task) and nothing outside it. [`Capped`] gives one agent's
//! calls less than that (`[llm.agents.NAME] turn_budget_secs`): a quick check that must not
//! eat the time of the step after it.

use super::{ChatModel, ChatRequest, ChatResponse, ModelError};
use async_trait::async_trait;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

tokio::task_local! {
    static DEADLINE: Instant;
}

/// Runs `work` with `budget` for its model calls.
pub async fn within<F: Future>(budget: Duration, work: F) -> F::Output {
    DEADLINE.scope(Instant::now() + budget, work).await
}

/// Runs `work` with at most `limit` of what is left of the budget (all of `limit` outside
/// a turn).
pub async fn at_most<F: Future>(limit: Duration, work: F) -> F::Output {
    let own = Instant::now() + limit;
    let deadline = DEADLINE.try_with(|d| (*d).min(own)).unwrap_or(own);
    DEADLINE.scope(deadline, work).await
}

/// A model whose every call ends within `cap` (and within the turn's budget).
pub struct Capped {
    inner: Arc<dyn ChatModel>,
    cap: Duration,
}

impl Capped {
    pub fn new(inner: Arc<dyn ChatModel>, cap: Duration) -> Self {
        Capped { inner, cap }
    }
}

#[async_trait]
impl ChatModel for Capped {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn parallel_calls(&self) -> usize {
        self.inner.parallel_calls()
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        at_most(self.cap, self.inner.chat(request)).await
    }

    async fn chat_streaming(
        &self,
        request: ChatRequest,
        tap: &super::stream::Tap,
    ) -> Result<ChatResponse, ModelError> {
        at_most(self.cap, self.inner.chat_streaming(request, tap)).await
    }
}

/// What is left of the current turn's budget; `None` outside a turn (no budget).
pub fn remaining() -> Option<Duration> {
    DEADLINE
        .try_with(|deadline| deadline.saturating_duration_since(Instant::now()))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_budget_shrinks_inside_and_is_absent_outside() {
        assert_eq!(remaining(), None);
        within(Duration::from_secs(10), async {
            let first = remaining().expect("inside");
            assert!(first <= Duration::from_secs(10) && first > Duration::from_secs(9));
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(remaining().expect("inside") < first);
        })
        .await;
        within(Duration::ZERO, async {
            assert_eq!(remaining(), Some(Duration::ZERO));
        })
        .await;
    }

    #[tokio::test]
    async fn an_agent_cap_shortens_the_budget_and_never_lengthens_it() {
        within(Duration::from_secs(10), async {
            at_most(Duration::from_secs(2), async {
                let left = remaining().expect("inside");
                assert!(left <= Duration::from_secs(2) && left > Duration::from_secs(1));
            })
            .await;
            assert!(remaining().expect("inside") > Duration::from_secs(9));
        })
        .await;
        within(Duration::from_secs(1), async {
            at_most(Duration::from_secs(5), async {
                assert!(remaining().expect("inside") <= Duration::from_secs(1));
            })
            .await;
        })
        .await;
        at_most(Duration::from_secs(3), async {
            assert!(remaining().expect("a cap alone") <= Duration::from_secs(3));
        })
        .await;
    }
}

//! A turn's budget for model work: the orchestrator runs each flow turn [`within`] a time
//! budget, and every model call made inside it sees what is [`remaining`]. A call's timeout
//! is the smaller of its own and what is left; once nothing is left calls fail at once
//! ([`super::ModelError::BudgetSpent`]) and agents answer by their floors, so a user gets a
//! reply within the budget plus the platform's own time.
//!
//! The deadline is a task-local: it follows the turn's future (the help-desk's parallel
//! sub-tasks run in the same task) and nothing outside it.

use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

tokio::task_local! {
    static DEADLINE: Instant;
}

/// Runs `work` with `budget` for its model calls.
pub async fn within<F: Future>(budget: Duration, work: F) -> F::Output {
    DEADLINE.scope(Instant::now() + budget, work).await
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
}

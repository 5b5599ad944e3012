//! The reusable agent framework of seed 002: a node is a prompt plus a typed output schema
//! ([`structured`]), reflections share one base shape ([`Reflection`]) that agents extend,
//! one retry rule ([`should_continue`]), and [`PlanExecuteReflect`] — plan → execute each
//! sub-task concurrently (bounded) with reflect ⟳ retries → integrate — as a workflow any
//! agent plugs into without copying the loop.
//!
//! The help-desk (seed 003) and the book guide are built on it.

use super::{Agent, AgentError, LlmLedger, ToolError, ToolOutput, TypedTool, typed};
use crate::llm::{ChatMessage, ChatModel, ToolChoice};
use async_trait::async_trait;
use futures::StreamExt;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;

/// The seed's `BaseReflection`: every reflection has these two fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Reflection {
    /// Whether the result is good enough.
    pub is_sufficient: bool,
    /// What to improve on the next try.
    pub feedback: String,
}

/// Implemented by agent-specific reflections that extend [`Reflection`] (with
/// `#[serde(flatten)] base: Reflection` plus their own fields), so shared logic takes any.
pub trait ReflectionLike {
    fn base(&self) -> &Reflection;
}

impl ReflectionLike for Reflection {
    fn base(&self) -> &Reflection {
        self
    }
}

/// The one retry rule: go on while the reflection is not sufficient and tries remain.
pub fn should_continue<R: ReflectionLike>(reflection: &R, tries: u32, max_retries: u32) -> bool {
    !reflection.base().is_sufficient && tries < max_retries
}

struct Respond<O>(PhantomData<fn() -> O>);

impl<O: DeserializeOwned + JsonSchema + Send + 'static> TypedTool<Option<O>> for Respond<O> {
    type Args = O;
    const NAME: &'static str = "respond";
    fn description(&self) -> String {
        "Return your result in the required structure.".into()
    }
    async fn run(&self, state: &mut Option<O>, args: O) -> Result<ToolOutput, ToolError> {
        *state = Some(args);
        Ok(ToolOutput::finish("recorded"))
    }
}

/// A node: `system` and `user` prompts in, a value of type `O` out (the model answers
/// through a `respond` tool whose schema is `O`'s; malformed output is fed back and retried).
pub async fn structured<O>(
    model: &dyn ChatModel,
    agent: &str,
    system: String,
    user: String,
    ledger: &LlmLedger,
) -> Result<O, AgentError>
where
    O: DeserializeOwned + JsonSchema + Send + 'static,
{
    let node = Agent::new(agent, vec![typed(Respond::<O>(PhantomData))])
        .with_max_iterations(3)
        .with_tool_choice(ToolChoice::Required)
        .until_set("Return the result with the respond tool");
    let result = node
        .run(
            model,
            vec![ChatMessage::system(system), ChatMessage::user(user)],
            None,
            ledger,
        )
        .await?;
    result.state.ok_or_else(|| AgentError::MaxIterations {
        agent: agent.to_string(),
        iterations: 3,
    })
}

/// One sub-task's outcome.
#[derive(Debug, Clone)]
pub struct TaskOutcome<T, A, R> {
    pub task: T,
    /// The last attempt (the one that was accepted, or the last of the tries).
    pub attempt: A,
    pub reflections: Vec<R>,
    pub tries: u32,
    pub completed: bool,
}

/// An agent in plan → execute → reflect ⟳ → integrate form.
#[async_trait]
pub trait PlanExecuteReflect: Send + Sync {
    type Task: Clone + Send + Sync;
    type Attempt: Send;
    type Reflection: ReflectionLike + Send;
    type Output: Send;

    async fn plan(&self) -> Vec<Self::Task>;
    /// One try at a task; `previous` is the last try and its reflection (advice) on a retry.
    async fn attempt(
        &self,
        task: &Self::Task,
        previous: Option<(&Self::Attempt, &Self::Reflection)>,
        try_no: u32,
    ) -> Self::Attempt;
    async fn reflect(&self, task: &Self::Task, attempt: &Self::Attempt) -> Self::Reflection;
    async fn integrate(
        &self,
        outcomes: Vec<TaskOutcome<Self::Task, Self::Attempt, Self::Reflection>>,
    ) -> Self::Output;
}

/// Runs the workflow: every task concurrently (at most `concurrency` at once), each retried
/// while [`should_continue`] says so, then one integration. Outcomes keep the plan's order.
pub async fn run_workflow<W: PlanExecuteReflect>(
    workflow: &W,
    max_retries: u32,
    concurrency: usize,
) -> W::Output {
    let tasks = workflow.plan().await;
    let outcomes = futures::stream::iter(tasks)
        .map(|task| run_task(workflow, task, max_retries))
        .buffered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    workflow.integrate(outcomes).await
}

async fn run_task<W: PlanExecuteReflect>(
    workflow: &W,
    task: W::Task,
    max_retries: u32,
) -> TaskOutcome<W::Task, W::Attempt, W::Reflection> {
    let mut reflections: Vec<W::Reflection> = Vec::new();
    let mut tries = 1;
    let mut attempt = workflow.attempt(&task, None, tries).await;
    loop {
        let reflection = workflow.reflect(&task, &attempt).await;
        let go_on = should_continue(&reflection, tries, max_retries);
        reflections.push(reflection);
        if !go_on {
            break;
        }
        tries += 1;
        let next = workflow
            .attempt(&task, reflections.last().map(|r| (&attempt, r)), tries)
            .await;
        attempt = next;
    }
    let completed = reflections.last().is_some_and(|r| r.base().is_sufficient);
    TaskOutcome {
        task,
        attempt,
        reflections,
        tries,
        completed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
    struct KeywordReflection {
        #[serde(flatten)]
        base: Reflection,
        #[serde(default)]
        additional_queries: Vec<String>,
    }

    impl ReflectionLike for KeywordReflection {
        fn base(&self) -> &Reflection {
            &self.base
        }
    }

    /// Tasks "a" and "b"; "b" is only sufficient on its third try; advice is recorded.
    struct Toy {
        advice_seen: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl PlanExecuteReflect for Toy {
        type Task = String;
        type Attempt = String;
        type Reflection = KeywordReflection;
        type Output = Vec<(String, u32, bool)>;

        async fn plan(&self) -> Vec<String> {
            vec!["a".into(), "b".into(), "never".into()]
        }
        async fn attempt(
            &self,
            task: &String,
            previous: Option<(&String, &KeywordReflection)>,
            try_no: u32,
        ) -> String {
            if let Some((_, r)) = previous {
                self.advice_seen
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(r.base.feedback.clone());
            }
            format!("{task}{try_no}")
        }
        async fn reflect(&self, task: &String, attempt: &String) -> KeywordReflection {
            let ok = task == "a" || attempt == "b3";
            KeywordReflection {
                base: Reflection {
                    is_sufficient: ok,
                    feedback: format!("improve {attempt}"),
                },
                additional_queries: vec![],
            }
        }
        async fn integrate(
            &self,
            outcomes: Vec<TaskOutcome<String, String, KeywordReflection>>,
        ) -> Self::Output {
            outcomes
                .into_iter()
                .map(|o| (o.attempt, o.tries, o.completed))
                .collect()
        }
    }

    #[tokio::test]
    async fn tasks_retry_with_advice_up_to_the_limit() {
        let toy = Toy {
            advice_seen: Mutex::new(Vec::new()),
        };
        let out = run_workflow(&toy, 3, 3).await;
        assert_eq!(
            out,
            vec![
                ("a1".to_string(), 1, true),
                ("b3".to_string(), 3, true),
                ("never3".to_string(), 3, false)
            ]
        );
        let mut advice = toy
            .advice_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        advice.sort();
        assert_eq!(
            advice,
            [
                "improve b1",
                "improve b2",
                "improve never1",
                "improve never2"
            ]
        );
    }

    #[test]
    fn extended_reflections_parse_with_their_base() {
        let r: KeywordReflection = serde_json::from_str(
            r#"{"is_sufficient": false, "feedback": "more", "additional_queries": ["x"]}"#,
        )
        .expect("parses");
        assert!(should_continue(&r, 1, 3));
        assert!(!should_continue(&r, 3, 3));
        assert_eq!(r.additional_queries, ["x"]);
    }
}

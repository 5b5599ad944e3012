//! The [`Tool`] trait an agent offers the model, and [`TypedTool`], the usual way to write
//! one: typed arguments (serde + schemars) whose JSON Schema is generated, never hand-written.
//!
//! A tool works on the agent's state `S` and says through [`Control`] whether the loop goes
//! on, waits for the user (`ask`) or is finished (`result`, `create_plan`, …). Bad arguments
//! and tool failures are [`ToolError`]s, which the agent loop reports back to the model.

use crate::llm::ToolSpec;
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::any::TypeId;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex};

/// What the loop does after a tool ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Feed the result to the model and call it again.
    Continue,
    /// Stop the loop: `message` goes to the user and we wait for the answer.
    AwaitUser { message: String },
    /// Stop the loop: the agent produced its result (kept in the state).
    Finish,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// Sent back to the model as the tool result.
    pub content: String,
    pub control: Control,
}

impl ToolOutput {
    pub fn ok(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            control: Control::Continue,
        }
    }
    pub fn ask(message: impl Into<String>) -> Self {
        let message = message.into();
        ToolOutput {
            content: "Sent to the user. Waiting for their answer.".into(),
            control: Control::AwaitUser { message },
        }
    }
    pub fn finish(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            control: Control::Finish,
        }
    }
}

/// A tool failure, reported to the model so it can correct itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("{0}")]
    Rejected(String),
}

/// A tool as the agent loop sees it. Object-safe: agents hold `Arc<dyn Tool<S>>`.
#[async_trait]
pub trait Tool<S>: Send + Sync {
    fn name(&self) -> &str;
    fn spec(&self) -> ToolSpec;
    /// `arguments` is the model's raw JSON text.
    async fn call(&self, state: &mut S, arguments: &str) -> Result<ToolOutput, ToolError>;
}

/// A tool with typed arguments. Wrap it with [`typed`] to get an `Arc<dyn Tool<S>>`.
pub trait TypedTool<S>: Send + Sync + 'static {
    type Args: DeserializeOwned + JsonSchema + Send + 'static;
    const NAME: &'static str;
    fn description(&self) -> String;
    fn run(
        &self,
        state: &mut S,
        args: Self::Args,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send;
}

struct Typed<T>(T);

/// Makes a [`TypedTool`] usable by an agent.
pub fn typed<S: Send + 'static, T: TypedTool<S>>(tool: T) -> Arc<dyn Tool<S>> {
    Arc::new(Typed(tool))
}

#[async_trait]
impl<S: Send + 'static, T: TypedTool<S>> Tool<S> for Typed<T> {
    fn name(&self) -> &str {
        T::NAME
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: T::NAME.to_string(),
            description: self.0.description(),
            parameters: cached_schema::<T::Args>(),
        }
    }

    async fn call(&self, state: &mut S, arguments: &str) -> Result<ToolOutput, ToolError> {
        let args: T::Args = parse_arguments(arguments)?;
        self.0.run(state, args).await
    }
}

/// Parses a model's argument text; an empty string counts as `{}`.
pub fn parse_arguments<A: DeserializeOwned>(arguments: &str) -> Result<A, ToolError> {
    let text = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    serde_json::from_str(text).map_err(|e| ToolError::InvalidArguments(e.to_string()))
}

/// [`schema_of`], generated once per argument type: agents are built per turn, and walking
/// the type with schemars on every model call cost more than the rest of the agent loop.
fn cached_schema<T: JsonSchema + 'static>() -> Arc<Value> {
    static CACHE: LazyLock<Mutex<HashMap<TypeId, Arc<Value>>>> = LazyLock::new(Default::default);
    let id = TypeId::of::<T>();
    let cached = CACHE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .cloned();
    cached.unwrap_or_else(|| {
        let schema = Arc::new(schema_of::<T>());
        CACHE
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, schema.clone());
        schema
    })
}

/// The JSON Schema of `T` as a function's `parameters`: inlined (no `$ref`, which small
/// models handle badly), no `$schema` or `title`, always an object.
pub fn schema_of<T: JsonSchema>() -> Value {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator()
        .into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Some(object) = value.as_object_mut() {
        object.remove("title");
        object.remove("$schema");
        object
            .entry("type")
            .or_insert_with(|| Value::String("object".into()));
        object
            .entry("properties")
            .or_insert_with(|| Value::Object(Default::default()));
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct AskArgs {
        /// The question for the user.
        question: String,
        options: Option<Vec<String>>,
    }

    #[test]
    fn schemas_are_generated_from_types() {
        let schema = schema_of::<AskArgs>();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["properties"]["question"]["type"], "string");
        assert_eq!(
            schema["properties"]["question"]["description"],
            "The question for the user."
        );
        assert_eq!(schema["required"], serde_json::json!(["question"]));
        assert!(schema.get("$schema").is_none());
    }

    #[test]
    fn bad_arguments_are_reported_not_panicked() {
        let err = parse_arguments::<AskArgs>(r#"{"question": 3}"#).err();
        assert!(matches!(err, Some(ToolError::InvalidArguments(_))));
        assert!(parse_arguments::<AskArgs>("not json").is_err());
    }
}

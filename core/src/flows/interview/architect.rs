//! Architect (seed 000 / 001): designs the order of the interview with `create_plan`
//! (the seed's `PlanSchema`). The plan is validated in code — known field ids only, no id
//! twice, every required field present — and an invalid plan goes back to the model as an
//! error. If the model cannot produce a valid plan (or there is none) the plan is the form's
//! `sort_order`.

use super::form::Form;
use crate::agent::{Agent, LlmLedger, ToolError, ToolOutput, TypedTool, typed};
use crate::llm::{ChatMessage, ChatModel};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::Arc;

pub const AGENT: &str = "architect";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PlanField {
    pub field_id: String,
    pub label: String,
    pub intent: String,
    pub required: bool,
}

/// The seed's `PlanSchema`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Plan {
    pub fields: Vec<PlanField>,
}

/// Checks a plan against the form; the error explains what to fix.
pub fn validate_plan(form: &Form, plan: &Plan) -> Result<Vec<String>, String> {
    let mut seen = HashSet::new();
    let mut problems = Vec::new();
    for f in &plan.fields {
        if form.field(&f.field_id).is_none() {
            problems.push(format!("unknown field id {:?}", f.field_id));
        } else if !seen.insert(f.field_id.as_str()) {
            problems.push(format!("field {:?} appears more than once", f.field_id));
        }
    }
    for f in form.fields.iter().filter(|f| f.required) {
        if !seen.contains(f.id.as_str()) {
            problems.push(format!("required field {:?} is missing", f.id));
        }
    }
    if problems.is_empty() {
        Ok(plan.fields.iter().map(|f| f.field_id.clone()).collect())
    } else {
        Err(problems.join("; "))
    }
}

struct CreatePlan(Arc<Form>);

impl TypedTool<Option<Vec<String>>> for CreatePlan {
    type Args = Plan;
    const NAME: &'static str = "create_plan";
    fn description(&self) -> String {
        "Return the interview plan: the form's fields in the order to ask them.".into()
    }
    async fn run(
        &self,
        state: &mut Option<Vec<String>>,
        plan: Plan,
    ) -> Result<ToolOutput, ToolError> {
        let order = validate_plan(&self.0, &plan).map_err(ToolError::Rejected)?;
        *state = Some(order);
        Ok(ToolOutput::finish("plan accepted"))
    }
}

/// The plan: the model's if it makes a valid one, otherwise `sort_order`.
pub async fn plan(
    model: Option<&dyn ChatModel>,
    form: &Arc<Form>,
    ledger: &LlmLedger,
) -> Vec<String> {
    let fallback = form.sorted_field_ids();
    let Some(model) = model else {
        return fallback;
    };
    let fields: Vec<String> = form
        .fields
        .iter()
        .map(|f| {
            format!(
                "- {} | {} | intent: {} | required: {} | sort_order: {}",
                f.id,
                f.label.get("en"),
                f.intent.as_deref().unwrap_or("-"),
                f.required,
                f.sort_order
            )
        })
        .collect();
    let system = "You are the Architect of an interview. Decide the order in which to ask the form's fields so the \
                  conversation flows naturally (easy, factual questions first; related fields together). Every \
                  required field must appear exactly once; use only the given ids. Call `create_plan` once.";
    let messages = vec![
        ChatMessage::system(system),
        ChatMessage::user(format!("Form {:?} fields:\n{}", form.id, fields.join("\n"))),
    ];
    // an empty or invalid plan is asked for once more, not three times: the form's order
    // is a good plan too
    let agent = Agent::new(AGENT, vec![typed(CreatePlan(form.clone()))])
        .with_max_iterations(2)
        .until_set("Create the plan with create_plan");
    match agent.run(model, messages, None, ledger).await {
        Ok(result) => result.state.unwrap_or(fallback),
        Err(e) => {
            tracing::warn!(error = %e, "the Architect failed; using sort_order");
            fallback
        }
    }
}

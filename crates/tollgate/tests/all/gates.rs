//! A gate that decides by the run: the customer in the run's metadata, wherever the gate is asked.

use super::*;
use std::collections::HashMap;
use std::sync::Mutex;
use tollgate::{ErrorContext, RunStatus};

/// Refund an amount.
#[derive(Deserialize, JsonSchema)]
struct RefundArgs {
    /// Euros.
    amount: u32,
}

/// Refunds without asking up to the customer's limit, asks above it, and refuses a run without a
/// customer; records (customer, amount) of each refund it makes.
#[derive(Clone, Default)]
struct Refund {
    made: Arc<Mutex<Vec<(String, u32)>>>,
}

fn limits() -> HashMap<&'static str, u32> {
    HashMap::from([("c-gold", 100), ("c-new", 20)])
}

impl TypedTool for Refund {
    type Args = RefundArgs;

    const NAME: &str = "refund";

    const DESCRIPTION: &str = "Refunds the customer.";

    const GATE: Gate = Gate::Ask;

    fn gate(&self, args: &RefundArgs, ctx: &ToolContext) -> Gate {
        let Some(customer) = ctx.metadata.get("customer").and_then(|c| c.as_str()) else { return Gate::Forbid };
        let limit = limits().get(customer).copied().unwrap_or(0);
        if args.amount <= limit { Gate::Allow } else { Gate::Ask }
    }

    async fn call(&self, args: RefundArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let customer: String = ctx.metadata.get_as("customer")?.context("no customer")?;
        self.made.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((customer, args.amount));
        Ok(format!("refunded {} EUR", args.amount).into())
    }
}

const REFUND_80: &str = r#"{"turns": [
  {"tool_calls": [{"name": "refund", "arguments": {"amount": 80}}]},
  {"text": "done"}
]}"#;

async fn on(url: &str, refund: &Refund) -> Tollgate {
    Tollgate::builder()
        .store(url)
        .agent(Agent::new("support").model(Model::scripted_json(REFUND_80)).tool(refund.clone()))
        .build()
        .await
        .unwrap_or_else(|e| panic!("build: {e}"))
}

#[tokio::test]
async fn a_gate_decides_by_the_runs_customer_at_the_start_and_again_at_the_resume_in_another_process() {
    let (_dir, url) = temp_db();
    let (here, there) = (Refund::default(), Refund::default());
    let starter = on(&url, &here).await;

    let gold = starter.start("refund").metadata("customer", "c-gold").wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(gold.status, RunStatus::Completed, "80 is within c-gold's limit");
    let anonymous = starter.start("refund").wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(anonymous.status, RunStatus::Completed, "forbidden: refused without a person");
    let new = starter.start("refund").metadata("customer", "c-new").wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(new.status, RunStatus::WaitingForApproval, "80 is above c-new's limit");
    let made = |refund: &Refund| refund.made.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    assert_eq!(made(&here), [("c-gold".to_owned(), 80)]);

    // Another process approves: the resume asks the gate again, with the run's metadata as stored (an
    // empty context would forbid the call, and it would not run).
    let approver = on(&url, &there).await;
    let held = approver.pending(&new.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(held.awaiting().map(|c| c.gate).collect::<Vec<_>>(), [Gate::Ask]);
    let done = approver.decide(held.approve_all()).by("alice").wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((done.status, done.output.as_deref()), (RunStatus::Completed, Some("done")));
    assert_eq!(made(&there), [("c-new".to_owned(), 80)]);
}

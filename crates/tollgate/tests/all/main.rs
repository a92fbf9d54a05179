//! The `tollgate` facade as an embedder uses it: builder, runs, held turns, decisions, live events.

mod builder;
mod events;
mod gates;
mod models;
#[cfg(feature = "server")]
mod server;
mod waiting;
mod workers;

use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tollgate::{Agent, Gate, Model, Tollgate, ToolContext, ToolError, ToolOutput, TypedTool};

/// Pay someone.
#[derive(Deserialize, JsonSchema)]
pub(crate) struct PayArgs {
    /// Who.
    pub(crate) to: String,
    /// Cents.
    pub(crate) cents: u64,
}

/// Asks above 100.00; counts its executions and records the metadata it saw.
#[derive(Clone, Default)]
pub(crate) struct Pay {
    pub(crate) runs: Arc<AtomicUsize>,
    pub(crate) seen: Arc<std::sync::Mutex<Vec<String>>>,
}

impl TypedTool for Pay {
    type Args = PayArgs;

    const NAME: &str = "pay";

    const DESCRIPTION: &str = "Pays someone.";

    const GATE: Gate = Gate::Ask;

    fn gate(&self, args: &PayArgs, _ctx: &ToolContext) -> Gate {
        if args.cents > 10_000 { Gate::Ask } else { Gate::Allow }
    }

    async fn preview(&self, args: &PayArgs) -> Option<String> {
        Some(format!("pay {} {} cents", args.to, args.cents))
    }

    async fn call(&self, args: PayArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let customer = ctx.metadata.get("customer").and_then(|v| v.as_str()).unwrap_or("-").to_owned();
        self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(customer.clone());
        Ok(format!("paid {} {} for {customer}", args.to, args.cents).into())
    }
}

/// Three calls in one turn: 20.00 to ann (allowed), 500.00 to bob and 900.00 to cy (both ask).
pub(crate) const THREE_CALLS: &str = r#"{"turns": [
  {"tool_calls": [
    {"name": "pay", "arguments": {"to": "ann", "cents": 2000}},
    {"name": "pay", "arguments": {"to": "bob", "cents": 50000}},
    {"name": "pay", "arguments": {"to": "cy", "cents": 90000}}
  ]},
  {"text": "done"}
]}"#;

pub(crate) async fn tollgate_on(url: &str, pay: &Pay) -> Tollgate {
    Tollgate::builder()
        .store(url)
        .agent(Agent::new("bank").model(Model::scripted_json(THREE_CALLS)).tool(pay.clone()))
        .build()
        .await
        .unwrap_or_else(|e| panic!("build: {e}"))
}

pub(crate) fn temp_db() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let url = format!("sqlite://{}", dir.path().join("runs.db").display());
    (dir, url)
}

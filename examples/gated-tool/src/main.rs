//! A tool whose gate depends on its arguments: small transfers run at once, large ones wait for a
//! person. The model is scripted, so this runs offline:
//!
//! ```sh
//! cargo run -p example-gated-tool
//! ```

use schemars::JsonSchema;
use serde::Deserialize;
use tollgate::{Agent, Gate, Model, Tollgate, ToolContext, ToolError, ToolOutput, TypedTool};

/// The arguments the model fills in; the doc comments become the schema's descriptions.
#[derive(Deserialize, JsonSchema)]
struct TransferArgs {
    /// Who is paid.
    to: String,
    /// How much, in cents.
    cents: u64,
}

/// Transfers up to 100.00 run without asking; larger ones wait at the gate.
struct Transfer;

impl TypedTool for Transfer {
    type Args = TransferArgs;

    const NAME: &str = "transfer";

    const DESCRIPTION: &str = "Transfers money to someone.";

    const GATE: Gate = Gate::Ask;

    fn gate(&self, args: &TransferArgs, _ctx: &ToolContext) -> Gate {
        if args.cents > 10_000 { Gate::Ask } else { Gate::Allow }
    }

    async fn preview(&self, args: &TransferArgs) -> Option<String> {
        Some(format!("Pay {} {}.{:02}", args.to, args.cents / 100, args.cents % 100))
    }

    async fn call(&self, args: TransferArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        // A real tool would send `ctx.idempotency_key()` to the bank, so a retry never pays twice.
        Ok(format!("paid {} cents to {} (key {})", args.cents, args.to, ctx.idempotency_key()).into())
    }
}

/// The model asks for two transfers in one turn, then sums up.
const SCRIPT: &str = r#"{"turns": [
  {"tool_calls": [
    {"name": "transfer", "arguments": {"to": "alice", "cents": 2500}},
    {"name": "transfer", "arguments": {"to": "bob", "cents": 250000}}
  ]},
  {"when_approved": {"text": "Both transfers went through."},
   "when_denied": {"text": "Alice was paid; Bob's transfer was declined."}}
]}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tollgate = Tollgate::builder()
        .store("sqlite::memory:")
        .agent(Agent::new("bank").model(Model::scripted_json(SCRIPT)).tool(Transfer))
        .build()
        .await?;

    let run = tollgate.start("Pay Alice 25 and Bob 2,500").wait().await?;
    println!("run {} is {}", run.id, run.status.as_str());

    // The whole turn waits, the small transfer too: nothing of a turn runs before every call is decided.
    let held = tollgate.pending(&run.id).await?;
    for call in &held.calls {
        println!("  {} {} gate={} preview={:?}", call.call_id, call.arguments, call.gate.as_str(), call.preview);
    }
    let decisions = held.decide_each(|call| match call.arguments["cents"].as_u64() {
        Some(cents) if cents > 100_000 => tollgate::Decision::Deny { reason: "over the daily limit".into() },
        _ => tollgate::Decision::Approve,
    });
    let run = tollgate.decide(decisions).by("treasurer").wait().await?;
    println!("run {} is {}: {}", run.id, run.status.as_str(), run.output.unwrap_or_default());
    println!("chain of {} events verified", tollgate.verify(&run.id).await?);
    tollgate.shutdown().await;
    Ok(())
}

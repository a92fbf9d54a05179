//! A durable approval across two processes on one SQLite file:
//!
//! ```sh
//! cargo run -p example-two-process -- start runs.db "Delete the old invoices"   # prints the run id, exits
//! cargo run -p example-two-process -- show runs.db RUN_ID                       # what waits, and its digest
//! cargo run -p example-two-process -- approve runs.db RUN_ID                    # resumes it here
//! ```
//!
//! The first process stops once the run waits at the gate; nothing is kept in memory. The second loads
//! the held turn from the store, approves it by digest, and the tool runs there, exactly once.

use schemars::JsonSchema;
use serde::Deserialize;
use std::process::ExitCode;
use tollgate::{Agent, Gate, Model, RunId, Tollgate, ToolContext, ToolError, ToolOutput, TypedTool};

/// Deletes files matching a pattern.
#[derive(Deserialize, JsonSchema)]
struct PurgeArgs {
    /// A glob, e.g. `invoices/2019-*`.
    pattern: String,
}

struct Purge;

impl TypedTool for Purge {
    type Args = PurgeArgs;

    const NAME: &str = "purge";

    const DESCRIPTION: &str = "Deletes the files matching a pattern.";

    fn gate(&self, _args: &PurgeArgs, _ctx: &ToolContext) -> Gate {
        Gate::Ask
    }

    async fn call(&self, args: PurgeArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        // Stands in for the side effect: it says which process ran it.
        println!("purge ran in process {} for run {}", std::process::id(), ctx.run_id);
        Ok(format!("deleted everything matching {}", args.pattern).into())
    }
}

const SCRIPT: &str = r#"{"turns": [
  {"tool_calls": [{"name": "purge", "arguments": {"pattern": "invoices/2019-*"}}]},
  {"text": "The 2019 invoices are gone."}
]}"#;

async fn tollgate(db: &str) -> Result<Tollgate, tollgate::BuildError> {
    Tollgate::builder()
        .store(format!("sqlite://{db}"))
        .agent(Agent::new("clerk").model(Model::scripted_json(SCRIPT)).tool(Purge))
        .build()
        .await
}

async fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    match args {
        [command, db, input] if command == "start" => {
            let tollgate = tollgate(db).await?;
            let run = tollgate.start(input.as_str()).by("alice").wait().await?;
            println!("{} {}", run.id, run.status.as_str());
            tollgate.shutdown().await;
        }
        [command, db, id] if command == "show" => {
            let tollgate = tollgate(db).await?;
            let held = tollgate.pending(&RunId::from(id)).await?;
            println!("digest {}", held.digest);
            for call in held.awaiting() {
                println!("{} {} {}", call.call_id, call.tool, call.arguments);
            }
            tollgate.shutdown().await;
        }
        [command, db, id] if command == "approve" => {
            let tollgate = tollgate(db).await?;
            let id = RunId::from(id);
            let held = tollgate.pending(&id).await?;
            let run = tollgate.decide(held.approve_all()).by("bob").wait().await?;
            println!("{} {}: {}", run.id, run.status.as_str(), run.output.unwrap_or_default());
            tollgate.verify(&id).await?;
            tollgate.shutdown().await;
        }
        _ => return Err("usage: example-two-process start DB INPUT | show DB RUN_ID | approve DB RUN_ID".into()),
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

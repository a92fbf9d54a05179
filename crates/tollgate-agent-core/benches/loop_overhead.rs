//! docs/benchmarks.md workload B, "loop overhead": one run whose script makes 50 turns of ONE allow-gated
//! `get_time()` call each, then a final answer — 51 model calls, 50 tool invocations.
//!
//! One criterion iteration is one whole run, started from scratch on the scripted provider, with no store
//! and no hooks ([`NoHooks`]). Throughput is reported in tool-loop iterations (model calls) per second:
//! `Throughput::Elements(51)` per run. Everything measured is Tollgate's own overhead — the gate, schema
//! checks, transcript bookkeeping and the scripted provider's replay — since the model and the tool answer
//! instantly.
//!
//! Run with `cargo bench -p tollgate-agent-core --bench loop_overhead`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::hint::black_box;
use std::sync::Arc;
use tollgate_agent_core::scripted::{Script, ScriptedModel};
use tollgate_agent_core::{
    AgentLoop, BoxFuture, LoopConfig, NoHooks, Outcome, RunScope, TerminationReason, Tool, ToolContext, ToolError,
    ToolLoop, ToolOutput, ToolRegistry,
};

/// Turns of the script that each make one `get_time` call.
const TOOL_TURNS: usize = 50;
/// Model calls per run: the tool turns plus the final answer.
const ITERATIONS_PER_RUN: u64 = TOOL_TURNS as u64 + 1;

/// A `get_time()` tool: no arguments, allow-gated (the trait's default gate), a fixed answer so the
/// benchmark measures the loop and not the clock.
struct GetTime {
    schema: Value,
}

impl GetTime {
    fn new() -> Self {
        Self { schema: json!({"type": "object", "properties": {}}) }
    }
}

impl Tool for GetTime {
    fn name(&self) -> &str {
        "get_time"
    }

    fn description(&self) -> &str {
        "The current time, ISO 8601 in UTC."
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    fn call<'a>(&'a self, _args: Value, _ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(std::future::ready(Ok(ToolOutput::text("2025-01-01T12:00:00Z"))))
    }
}

/// The workload B script: 50 turns of one `get_time()` call, then the answer.
fn script() -> Result<Script, Box<dyn std::error::Error>> {
    let mut turns: Vec<Value> = (0..TOOL_TURNS).map(|_| json!({"tool_calls": [{"name": "get_time"}]})).collect();
    turns.push(json!({"text": "It is 12:00 UTC."}));
    Ok(Script::from_value(json!({ "turns": turns }))?)
}

fn agent() -> Result<ToolLoop, Box<dyn std::error::Error>> {
    let tools = ToolRegistry::new().with(Arc::new(GetTime::new()))?;
    // The default cap (10) would cut the run short; leave room for every turn of the script.
    let config = LoopConfig { max_iterations: ITERATIONS_PER_RUN as u32, ..LoopConfig::default() };
    Ok(ToolLoop::new(Arc::new(ScriptedModel::new(script()?)), Arc::new(tools), config))
}

/// One whole run; panics (failing the benchmark) if it does not complete as workload B says.
async fn run_once(agent: &ToolLoop) {
    match agent.start(&RunScope::new("bench-run"), "What time is it? Check 50 times.", &NoHooks).await {
        Ok(Outcome::Completed(done)) => {
            assert_eq!(done.reason, TerminationReason::Completed);
            assert_eq!(done.counters.tool_invocations as usize, TOOL_TURNS);
            black_box(done);
        }
        other => panic!("workload B must complete, got {other:?}"),
    }
}

fn loop_overhead(c: &mut Criterion) {
    let agent = agent().unwrap_or_else(|e| panic!("cannot build the workload B agent: {e}"));
    // Criterion's async support is not enabled in this workspace, so each run is driven by `block_on` on a
    // current-thread runtime: one core, no work stealing, nothing but the loop itself.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("cannot build the tokio runtime: {e}"));
    // Check the workload once outside the measurement, so a broken script fails loudly and early.
    runtime.block_on(run_once(&agent));

    let mut group = c.benchmark_group("workload_b");
    group.throughput(Throughput::Elements(ITERATIONS_PER_RUN));
    group.bench_function("loop_overhead_50_get_time_turns", |b| b.iter(|| runtime.block_on(run_once(&agent))));
    group.finish();
}

criterion_group!(benches, loop_overhead);
criterion_main!(benches);

//! How fast the queue drains: queues RUNS runs at once (a burst, as `POST /v1/runs` without `wait` makes
//! them), then starts NODES nodes of WORKERS workers each on the same database and times them until
//! every run has completed. Each node is a runtime with its store of its own (its own connections),
//! in this process; each run is one scripted model turn that answers at once, so the figure is what
//! the queue, the claims and the writes of a run cost, not a model's latency.
//!
//! ```text
//! cargo run --release -p tollgate-agent-bench --example queue_drain -- URL [RUNS] [NODES] [WORKERS]
//! ```
//! Defaults: 50000 runs, 1 node, 64 workers a node (`[runtime] workers` on 2 cores). URL `postgres://…`
//! runs in a fresh schema of that database (dropped afterwards); `sqlite://FILE` needs a new file.
//! Prints the time to queue, the drain time and rate, and each node's claims.

use serde_json::json;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_agent_core::{LoopConfig, RunStatus, RunStore, SystemClock, ToolLoop, ToolRegistry};
use tollgate_agent_providers::{Script, ScriptedModel};
use tollgate_agent_runtime::{AgentSpec, OnExpiry, Runtime, RuntimeOptions, StartRun, UuidV7Ids};
use tollgate_agent_store::ScratchSchema;

/// The same allocator as the `tollgate` binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(url) = args.first().cloned() else {
        eprintln!("usage: queue_drain URL [RUNS] [NODES] [WORKERS]");
        return ExitCode::FAILURE;
    };
    let number = |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (runs, nodes, workers) = (number(1, 50_000), number(2, 1), number(3, 64));
    let schema = if url.starts_with("postgres") {
        match ScratchSchema::create(&url, "tollgate_queue_drain").await {
            Ok(schema) => Some(schema),
            Err(e) => {
                eprintln!("queue_drain: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let store_url = schema.as_ref().map_or_else(|| url.clone(), ScratchSchema::url);
    let result = drain(&store_url, runs, nodes.max(1), workers.max(1)).await;
    if let Some(schema) = schema
        && let Err(e) = schema.drop_all().await
    {
        eprintln!("queue_drain: cannot drop the scratch schema: {e}");
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("queue_drain: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A runtime of one agent, `bench`, whose model answers `done` at once.
fn runtime(store: Arc<dyn RunStore>, node: &str, workers: usize) -> Result<Runtime, Error> {
    let script = Script::from_value(json!({"turns": [{"text": "done"}]}))?;
    let registry = Arc::new(ToolRegistry::new());
    let agent_loop = ToolLoop::new(Arc::new(ScriptedModel::new(script)), registry, LoopConfig::default());
    let spec = AgentSpec {
        name: "bench".into(),
        model: "scripted".into(),
        agent_loop: Arc::new(agent_loop),
        tools: Vec::new(),
        approval_ttl: None,
        on_expiry: OnExpiry::Deny,
        forbid_self_approval: false,
        escalation: None,
    };
    let options = RuntimeOptions { node_id: node.into(), workers, ..RuntimeOptions::default() };
    Ok(Runtime::new(store, vec![spec], Arc::new(SystemClock), Arc::new(UuidV7Ids), options))
}

async fn drain(url: &str, runs: usize, nodes: usize, workers: usize) -> Result<(), Error> {
    // The burst: a node that takes no work queues every run started through it.
    let store = tollgate_agent_store::open(url).await?;
    let queuer = runtime(store.clone(), "queuer", 1)?;
    queuer.stop_taking_work();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let per_task = runs.div_ceil(64);
    for task in 0..64 {
        let queuer = queuer.clone();
        tasks.spawn(async move {
            for i in task * per_task..((task + 1) * per_task).min(runs) {
                let run = queuer.enqueue(StartRun::new(&format!("run {i}"), "bench")).await?;
                if run.status() != RunStatus::Queued {
                    return Err(format!("run {i} is {}, not queued", run.status()).into());
                }
            }
            Ok::<(), Error>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let queued_in = started.elapsed();
    let counts = store.count_by_status().await?;
    if counts != vec![(RunStatus::Queued, runs as u64)] {
        return Err(format!("after queueing: {counts:?}").into());
    }
    println!(
        "queued {runs} runs in {:.1} s ({:.0} runs/s)",
        queued_in.as_secs_f64(),
        runs as f64 / queued_in.as_secs_f64()
    );

    // The drain: every node's claim loop starts at once.
    let mut runtimes = Vec::new();
    for node in 0..nodes {
        let store = tollgate_agent_store::open(url).await?;
        runtimes.push(runtime(store, &format!("node-{node}"), workers)?);
    }
    let started = Instant::now();
    for runtime in &runtimes {
        runtime.start_workers();
    }
    let mut queue_empty = None;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let counts = store.count_by_status().await?;
        let count = |status| counts.iter().find(|(s, _)| *s == status).map_or(0, |(_, n)| *n);
        if queue_empty.is_none() && count(RunStatus::Queued) == 0 {
            queue_empty = Some(started.elapsed());
        }
        if count(RunStatus::Completed) == runs as u64 {
            break;
        }
        if counts.iter().any(|(s, n)| s.is_terminal() && *s != RunStatus::Completed && *n > 0) {
            return Err(format!("a run did not complete: {counts:?}").into());
        }
    }
    let drained = started.elapsed();
    let claims: Vec<u64> = runtimes.iter().map(|r| r.workers().claims).collect();
    println!(
        "{nodes} node(s) × {workers} workers: {runs} runs completed in {:.2} s = {:.0} runs/s (queue empty after {:.2} s); claims per node {claims:?}",
        drained.as_secs_f64(),
        runs as f64 / drained.as_secs_f64(),
        queue_empty.unwrap_or(drained).as_secs_f64(),
    );
    if claims.iter().sum::<u64>() != runs as u64 {
        return Err(format!("{} claims for {runs} runs", claims.iter().sum::<u64>()).into());
    }
    for runtime in &runtimes {
        runtime.stop_taking_work();
        runtime.drain().await;
    }
    Ok(())
}

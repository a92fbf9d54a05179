//! A hand-run throughput check of the store under docs/benchmarks.md workload A's write pattern (not a test,
//! and not the full benchmark: no model, no tool loop — only what A asks of the store).
//!
//! Phase 1 per run: `create` (run_started) + `transition(Suspend)` (model_request, model_response,
//! approval_requested). Phase 2 per run: `get` by id, `transition(Decide, resume)` (decision,
//! run_resumed), `append` (tool_started), `transition(Complete)` (tool_finished, model_request,
//! model_response, run_completed).
//!
//! ```text
//! cargo run --release -p tollgate-agent-store --example store_throughput -- [RUNS] [CONCURRENCY] [URL]
//! ```
//! Defaults: 10000 runs, 32 concurrent tasks, a fresh SQLite file in the temp dir (give a URL to use
//! another store; the ids are fresh on every start). It prints wall time, runs/s, per-run latency
//! p50/p99, and process CPU time (user + system) per run for each phase. The runtime is Tokio's
//! multi-threaded one unless `TOLLGATE_BENCH_RUNTIME=current_thread`.

use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_agent_core::event::{EventKind, NewEvent};
use tollgate_agent_core::run::{HeldTurn, Lease, RunRecord, RunStatus, Transition, Vote};
use tollgate_agent_core::store::{Guard, RunStore};
use tollgate_agent_core::suspension::{Decision, StoredSuspension, TurnDigest};
use tollgate_agent_core::tool_loop::TerminationReason;
use tollgate_agent_core::transcript::Usage;
use tollgate_agent_core::{Approval, ApprovalId, Requirement, RunId};

const T0: i64 = 1_764_410_400_000;

/// Ids unique to this process's start time, so that the check can be rerun on the same database.
fn run_id(i: usize) -> RunId {
    static PREFIX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let prefix = PREFIX.get_or_init(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
    });
    RunId::from(format!("{:08x}-{:04x}-7000-8000-{i:012x}", prefix >> 16, prefix & 0xffff))
}

fn event(kind: EventKind, round: u32, data: serde_json::Value) -> NewEvent {
    NewEvent { at: T0, kind, round, data }
}

/// A suspension of about the size the loop persists for workload A's one-call turn.
fn suspension(i: usize) -> String {
    json!({
        "schema_version": 1,
        "run_id": run_id(i),
        "transcript": [
            {"role": "system", "content": "You are a careful assistant. Use the tools you are given to do what the user asks, and nothing else."},
            {"role": "user", "content": format!("Save a note saying hello {i}")},
            {"role": "assistant", "content": null, "tool_calls": [{"call_id": "call_1", "tool": "write_note", "arguments": {"text": format!("hello {i}")}}]}
        ],
        "held": [{"call_id": "call_1", "tool": "write_note", "arguments": {"text": format!("hello {i}")}, "gate": "ask", "preview": null, "in_doubt": false}],
        "pins": [{"tool": "write_note", "schema_sha256": "9f2c5b1d0a7e4c3b2a1908f7e6d5c4b3a29180706f5e4d3c2b1a09f8e7d6c5b4"}],
        "counters": {"iterations": 1, "usage": {"input_tokens": 120, "output_tokens": 30}},
    })
    .to_string()
}

async fn phase_one(store: &dyn RunStore, i: usize) -> anyhow::Result<()> {
    let id = run_id(i);
    let lease = Lease { owner: "bench".into(), expires_at: T0 + 30_000 };
    let run = RunRecord::new(
        id.clone(),
        "demo".into(),
        format!("Save a note saying hello {i}"),
        "local".into(),
        T0,
        Some(lease),
    );
    store
        .create(
            run,
            vec![event(
                EventKind::RunStarted,
                0,
                json!({"agent": "demo", "input": format!("Save a note saying hello {i}"), "actor": "local"}),
            )],
        )
        .await?;
    let held = HeldTurn {
        suspension: StoredSuspension::from_stored(suspension(i)),
        turn_digest: TurnDigest(format!("sha256:{}", "9f".repeat(32))),
        approvals: vec![Approval::pending(
            ApprovalId::new(format!("{id}/call_1")),
            id.clone(),
            "call_1",
            Requirement::SINGLE,
            None,
        )],
        expires_at: None,
    };
    let usage = Usage { input_tokens: 120, output_tokens: 30 };
    let call = json!({"call_id": "call_1", "tool": "write_note", "arguments": {"text": format!("hello {i}")}});
    let events = vec![
        event(EventKind::ModelRequest, 1, json!({"messages": 2, "tools": ["write_note"]})),
        event(EventKind::ModelResponse, 1, json!({"text": null, "tool_calls": [call], "usage": usage})),
        event(
            EventKind::ApprovalRequested,
            1,
            json!({"turn_digest": held.turn_digest, "calls": [call], "expires_at": null}),
        ),
    ];
    store
        .transition(
            &id,
            Guard::Lease("bench".into()),
            Transition::Suspend { held, iterations: 1, usage },
            events,
            T0 + 1,
        )
        .await?;
    Ok(())
}

async fn phase_two(store: &dyn RunStore, i: usize) -> anyhow::Result<()> {
    let id = run_id(i);
    let run = store.get(&id).await?;
    anyhow::ensure!(run.status() == RunStatus::WaitingForApproval);
    let owner = format!("worker-{}", i % 32);
    let decision = Vote { decision: Decision::Approve, actor: "local".into(), at: T0 + 2 };
    let events = vec![
        event(EventKind::Decision, 1, json!({"call_id": "call_1", "action": "approve", "actor": "local"})),
        event(EventKind::RunResumed, 1, json!({"actor": "local"})),
    ];
    let decide = Transition::Vote {
        votes: vec![("call_1".into(), decision)],
        resume: Some(Lease { owner: owner.clone(), expires_at: T0 + 60_000 }),
        remember: Vec::new(),
    };
    store.transition(&id, Guard::Version(run.version), decide, events, T0 + 2).await?;
    let key = format!("{id}:call_1");
    let args = json!({"text": format!("hello {i}")});
    store
        .append(
            &id,
            &owner,
            vec![event(
                EventKind::ToolStarted,
                1,
                json!({"call_id": "call_1", "tool": "write_note", "arguments": args, "idempotency_key": key}),
            )],
            T0 + 60_000,
        )
        .await?;
    let usage = Usage { input_tokens: 300, output_tokens: 32 };
    let events = vec![
        event(
            EventKind::ToolFinished,
            1,
            json!({"call_id": "call_1", "tool": "write_note", "is_error": false, "result": "ok"}),
        ),
        event(EventKind::ModelRequest, 2, json!({"messages": 4, "tools": ["write_note"]})),
        event(EventKind::ModelResponse, 2, json!({"text": "done", "tool_calls": [], "usage": usage})),
        event(EventKind::RunCompleted, 2, json!({"output": "done", "termination_reason": "completed"})),
    ];
    let complete = Transition::Complete {
        output: Some("done".into()),
        reason: TerminationReason::Completed,
        iterations: 2,
        usage,
    };
    let done = store.transition(&id, Guard::Lease(owner), complete, events, T0 + 3).await?;
    anyhow::ensure!(done.status() == RunStatus::Completed && done.last_seq == 11);
    Ok(())
}

/// User and system CPU time of this process (Linux `/proc/self/stat`, clock ticks of 10 ms).
fn cpu_time() -> (Duration, Duration) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |n: usize| Duration::from_millis(fields.get(n).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0) * 10);
    (ticks(11), ticks(12))
}

async fn phase<F, Fut>(
    name: &str,
    store: Arc<dyn RunStore>,
    runs: usize,
    concurrency: usize,
    step: F,
) -> anyhow::Result<()>
where
    F: Fn(Arc<dyn RunStore>, usize) -> Fut + Send + Sync + Copy + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let cpu = cpu_time();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (store, next) = (store.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= runs {
                    return Ok::<_, anyhow::Error>(latencies);
                }
                let t = Instant::now();
                step(store.clone(), i).await?;
                latencies.push(t.elapsed());
            }
        }));
    }
    let mut latencies = Vec::with_capacity(runs);
    for task in tasks {
        latencies.extend(task.await??);
    }
    let wall = started.elapsed();
    let (user, system) = cpu_time();
    let (user, system) = (user.saturating_sub(cpu.0), system.saturating_sub(cpu.1));
    latencies.sort();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    println!(
        "{name:<8} {runs:>6} runs  c={concurrency:<3} wall {:>7.3} s  {:>6.0} runs/s  p50 {:>6.2} ms  p99 {:>6.2} ms  cpu/run {:>6.1} µs (user {:.1} + sys {:.1})",
        wall.as_secs_f64(),
        runs as f64 / wall.as_secs_f64(),
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        (user + system).as_secs_f64() * 1e6 / runs as f64,
        user.as_secs_f64() * 1e6 / runs as f64,
        system.as_secs_f64() * 1e6 / runs as f64,
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    // The multi-threaded runtime, as the server uses; TOLLGATE_BENCH_RUNTIME=current_thread for one thread.
    let runtime = match std::env::var("TOLLGATE_BENCH_RUNTIME").as_deref() {
        Ok("current_thread") => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        _ => tokio::runtime::Builder::new_multi_thread().enable_all().build()?,
    };
    runtime.block_on(check())
}

async fn check() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = args.get(1).map(|a| a.parse()).transpose()?.unwrap_or(10_000);
    let concurrency: usize = args.get(2).map(|a| a.parse()).transpose()?.unwrap_or(32);
    let dir = std::env::temp_dir().join(format!("tollgate-agent-store-throughput-{}", std::process::id()));
    let url = match args.get(3) {
        Some(url) => url.clone(),
        None => {
            std::fs::create_dir_all(&dir)?;
            format!("sqlite://{}", dir.join("tollgate.db").display())
        }
    };
    println!("store {url}");
    let measured = measure(&url, runs, concurrency).await;
    if args.get(3).is_none() {
        std::fs::remove_dir_all(&dir)?;
    }
    measured
}

async fn measure(url: &str, runs: usize, concurrency: usize) -> anyhow::Result<()> {
    let store = tollgate_agent_store::open(url).await?;
    println!("suspension: {} bytes", suspension(0).len());
    phase("phase 1", store.clone(), runs, concurrency, |s, i| async move { phase_one(&*s, i).await }).await?;
    phase("phase 2", store, runs, concurrency, |s, i| async move { phase_two(&*s, i).await }).await?;
    Ok(())
}

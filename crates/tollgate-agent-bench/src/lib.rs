//! # tollgate-agent-bench
//!
//! The workloads of docs/benchmarks.md, in process, with the scripted provider (instant answers, no
//! network): `tollgate bench` runs them, each a function that answers its phases' [`PhaseReport`]s.
//!
//! ```rust
//! use tollgate_agent_bench::{approval_cycle, loop_overhead, table};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tollgate_agent_bench::BenchError> {
//! // Workload A on an in-memory SQLite store: 20 runs, 4 in flight, approved (`true` denies: workload C).
//! let mut reports = approval_cycle("sqlite::memory:", 20, 4, false).await?;
//! // Workload B, repeated twice: 50 allow-gated tool calls and an answer per run, no store.
//! reports.push(loop_overhead(2).await?);
//!
//! println!("{}", table(&reports)); // phase, count, wall s, runs/s, p50 µs, p99 µs, ...
//! let checks: Vec<_> = reports.iter().filter_map(|report| report.check.as_deref()).collect();
//! assert_eq!(checks, [
//!     "A (c=4): 20 runs completed, the tool ran 20 times, each text once",
//!     "B: 2 runs completed, each after 50 tool calls",
//! ]);
//! # Ok(()) }
//! ```
//!
//! The workloads:
//! - A: the approval cycle — N runs suspend at a `write_note` call (phase 1), then each is loaded fresh
//!   from the store, approved, and completed (phase 2);
//! - B: loop overhead — one run of 50 allow-gated `get_time` turns, repeated, no store;
//! - C: as A, but phase 2 denies with reason `not allowed`;
//! - D: scale — the approval cycle and the waiting list with N runs waiting ([`scale`]).
//!
//! What grants cost ([`grants`]): A for an agent with grants on its tool that match no call against the
//! same agent without, and runs completed by a matching grant against the same runs with the tool's gate
//! `allow`, each pair in alternating rounds of one sitting; and D with one grant applied to the waiting
//! runs ([`scale::scale_applying`]).
//!
//! What notifications cost ([`notify`]) and what tracing costs ([`traces`]): A's phase 1 beside two
//! notifiers, and with OpenTelemetry tracing on (every run sampled, and 1 %), each against the same
//! phase without, in alternating rounds of one sitting.
//!
//! Workload A also runs through the HTTP API ([`http`]), and over N `tollgate serve` processes sharing
//! one PostgreSQL database, each run resumed on another node than the one that started it ([`nodes`]).
//! The soak ([`soak`]) is no workload of the comparison: it kills a real `tollgate serve` again and again
//! under load and audits every run after.
//!
//! Each phase reports wall time, runs/s, per-run latency p50/p99, CPU time per run, peak RSS, and for A/C
//! the mean bytes of persisted suspension; the end checks (N completed, the tool ran exactly N times with
//! each text once, or never for C) make a wrong result fail loudly rather than look fast. A check that
//! passed is named on the workload's last phase ([`PhaseReport::check`]) and [`table`] prints it on a line
//! of its own after the table, e.g. `check A (c=1): 1000 runs completed, the tool ran 1000 times, each
//! text once — ok`.

pub mod grants;
pub mod http;
pub mod nodes;
pub mod notify;
pub mod scale;
pub mod soak;
pub mod traces;

use futures_util::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tollgate_agent_core::{
    Actor, BoxFuture, Gate, LoopConfig, NoHooks, Outcome, RunId, RunScope, RunStatus, RunStore, SystemClock, Tool,
    ToolContext, ToolError, ToolLoop, ToolOutput, ToolRegistry,
};
use tollgate_agent_providers::{Script, ScriptedModel};
use tollgate_agent_runtime::{
    AgentSpec, DecisionSet, OnExpiry, PrivacyLevel, Runtime, RuntimeOptions, StartRun, UuidV7Ids,
};

/// The worker pool of the benchmarks' runtimes: more than any workload keeps in flight.
const BENCH_WORKERS: usize = 1024;

/// The actor that starts and decides the in-process workloads' runs.
const BENCH_ACTOR: &str = "bench";

/// One measured phase.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseReport {
    /// What was measured.
    pub name: String,
    /// Runs (or loop iterations for B) done.
    pub count: u64,
    /// Wall time in seconds.
    pub wall_secs: f64,
    /// Runs (or loop iterations for B) per second: the table's `runs/s` column. The key keeps its name
    /// in `--json` reports, which programs read.
    pub per_sec: f64,
    /// Per-run latency, median, microseconds.
    pub p50_us: f64,
    /// Per-run latency, 99th percentile, microseconds.
    pub p99_us: f64,
    /// CPU time of the whole process per run, microseconds (user + system).
    pub cpu_us_per_run: f64,
    /// The system (kernel) part of that CPU time, microseconds per run.
    pub sys_us_per_run: f64,
    /// Peak resident set size so far, MiB.
    pub peak_rss_mib: f64,
    /// Mean bytes of persisted suspension per run (A and C).
    pub suspension_bytes: Option<f64>,
    /// On a workload's last phase: its end check, which passed (a failed check is an error instead),
    /// e.g. `A (c=1): 1000 runs completed, the tool ran 1000 times, each text once`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    /// On a variant measured against a baseline in alternating rounds of the same sitting (what grants
    /// cost): how it compares. [`table`] prints it on a line of its own after the table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versus: Option<Versus>,
    /// On a phase with tracing on (what tracing costs): the spans its runs sent, as the OTLP receiver
    /// counted them. [`table`] prints them, per run, on a line of their own after the table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spans: Option<u64>,
}

/// A phase set against its baseline: both measured in the same process, in alternating rounds (the
/// order swapped each round), so that a machine that speeds up or slows down weighs on both.
#[derive(Clone, Debug, Serialize)]
pub struct Versus {
    /// The baseline phase's name.
    pub of: String,
    /// Rounds of each.
    pub rounds: u32,
    /// This phase's CPU per run over the baseline's, all rounds together.
    pub cpu_ratio: f64,
    /// This phase's runs/s over the baseline's, all rounds together.
    pub rate_ratio: f64,
    /// The CPU ratio of each round (each round's phase over the same round's baseline).
    pub cpu_ratios: Vec<f64>,
    /// The rate ratio of each round.
    pub rate_ratios: Vec<f64>,
}

/// A benchmark that could not run or whose end check failed.
#[derive(Debug)]
pub struct BenchError(pub String);

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError(e.to_string())
}

/// The environment variable that turns on encryption at rest for the benchmarks: 64 hexadecimal
/// digits, used as data key `bench`.
pub const DATA_KEY_ENV: &str = "TOLLGATE_BENCH_DATA_KEY";

/// Opens the store at `store_url`, encrypting at rest when [`DATA_KEY_ENV`] is set.
pub async fn open_store(store_url: &str) -> Result<Arc<dyn RunStore>, BenchError> {
    let mut options = tollgate_agent_store::StoreOptions::default();
    if let Ok(hex) = std::env::var(DATA_KEY_ENV) {
        let key = tollgate_agent_store::DataKey::from_hex("bench", &hex).map_err(err)?;
        options.data_keys = Some(Arc::new(tollgate_agent_store::DataKeys::new([key]).map_err(err)?));
    }
    tollgate_agent_store::open_with(store_url, options).await.map_err(err)
}

/// The `write_note` tool of workload A: gate ask (`allow` for the allow-gated runs of what grants cost),
/// appends its text to an in-memory list.
struct WriteNote {
    schema: Value,
    gate: Gate,
    notes: Arc<Mutex<Vec<String>>>,
}

impl Tool for WriteNote {
    fn name(&self) -> &str {
        "write_note"
    }
    fn description(&self) -> &str {
        "Write a note."
    }
    fn parameters(&self) -> &Value {
        &self.schema
    }
    fn gate(&self, _args: &Value, _ctx: &ToolContext) -> Gate {
        self.gate
    }
    fn preview<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Option<String>> {
        Box::pin(std::future::ready(Some(format!("write note: {}", args["text"].as_str().unwrap_or_default()))))
    }
    fn call<'a>(&'a self, args: Value, _ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        let text = args["text"].as_str().unwrap_or_default().to_owned();
        self.notes.lock().unwrap_or_else(PoisonError::into_inner).push(text);
        Box::pin(std::future::ready(Ok(ToolOutput::text("saved"))))
    }
}

/// The `get_time` tool of workload B: gate allow.
struct GetTime {
    schema: Value,
}

impl Tool for GetTime {
    fn name(&self) -> &str {
        "get_time"
    }
    fn description(&self) -> &str {
        "The current time."
    }
    fn parameters(&self) -> &Value {
        &self.schema
    }
    fn call<'a>(&'a self, _args: Value, _ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(std::future::ready(Ok(ToolOutput::text("2026-11-29T10:00:00Z"))))
    }
}

/// Workload A (or C with `deny`) against the store at `store_url`, with `concurrency` runs in flight.
///
/// The workload runs in a task of its own on the current runtime's workers, as a server's request
/// handlers do, not on the thread that called `block_on`: every wake-up between the caller and the
/// run it started would otherwise cross threads.
pub async fn approval_cycle(
    store_url: &str,
    n: u64,
    concurrency: usize,
    deny: bool,
) -> Result<Vec<PhaseReport>, BenchError> {
    let store_url = store_url.to_owned();
    crate::in_own_task(async move { approval_cycle_here(&store_url, n, concurrency, deny).await }).await
}

/// Runs `workload` in a task of its own on the current runtime's workers (why: [`approval_cycle`]).
async fn in_own_task<T: Send + 'static>(
    workload: impl std::future::Future<Output = Result<T, BenchError>> + Send + 'static,
) -> Result<T, BenchError> {
    tokio::spawn(workload).await.map_err(|e| BenchError(format!("the workload task failed: {e}")))?
}

/// A SQLite store in a fresh scratch folder labelled `label`, for a test's tiny sitting.
#[cfg(test)]
fn scratch_store(label: &str) -> String {
    format!("sqlite://{}", tollgate_agent_testkit::scratch_dir(label).join("bench.db").display())
}

async fn approval_cycle_here(
    store_url: &str,
    n: u64,
    concurrency: usize,
    deny: bool,
) -> Result<Vec<PhaseReport>, BenchError> {
    let store = open_store(store_url).await?;
    let notes = Arc::new(Mutex::new(Vec::new()));
    let runtime = approval_runtime(store, notes.clone())?;
    let label = if deny { "C" } else { "A" };

    // Phase 1: start N runs; each suspends at write_note and is committed waiting.
    let cpu0 = cpu_time();
    let started = Instant::now();
    let results: Vec<Result<(RunId, Duration), BenchError>> = crate::in_flight(0..n, concurrency.max(1), |i| {
        let runtime = runtime.clone();
        async move { start_waiting(&runtime, i).await }
    })
    .await;
    let (ids, latencies): (Vec<RunId>, Vec<Duration>) =
        results.into_iter().collect::<Result<Vec<_>, _>>()?.into_iter().unzip();
    let phase1 = report(&format!("{label} phase 1: start → waiting (c={concurrency})"), started, cpu0, latencies, None);

    // Phase 2: load each run fresh, decide, let it complete.
    let cpu0 = cpu_time();
    let started = Instant::now();
    let actor = Actor::new(BENCH_ACTOR);
    let results: Vec<Result<(Duration, usize), BenchError>> = crate::in_flight(ids, concurrency.max(1), |id| {
        let runtime = runtime.clone();
        let actor = &actor;
        async move { decide_to_completion(&runtime, &id, deny, actor).await }
    })
    .await;
    let (latencies, sizes): (Vec<Duration>, Vec<usize>) =
        results.into_iter().collect::<Result<Vec<_>, _>>()?.into_iter().unzip();
    let mean_bytes = sizes.iter().sum::<usize>() as f64 / sizes.len().max(1) as f64;
    let mut phase2 = report(
        &format!("{label} phase 2: load → {} → completed (c={concurrency})", if deny { "deny" } else { "approve" }),
        started,
        cpu0,
        latencies,
        Some(mean_bytes),
    );

    // End checks.
    let notes = notes.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if deny {
        if !notes.is_empty() {
            return Err(BenchError(format!("workload C: the tool ran {} times; it must never run", notes.len())));
        }
    } else {
        let mut sorted = notes.clone();
        sorted.sort();
        sorted.dedup();
        if notes.len() as u64 != n || sorted.len() as u64 != n {
            return Err(BenchError(format!(
                "workload A: the tool ran {} times with {} distinct texts; expected {n} and {n}",
                notes.len(),
                sorted.len()
            )));
        }
        if let Some(stray) = notes.iter().find(|text| !is_note_text(text, n)) {
            return Err(BenchError(format!("workload A: the tool wrote {stray:?}, not a text \"hello {{i}}\"")));
        }
    }
    let checked = if deny { "the tool never ran".to_owned() } else { tool_ran_once_each(n) };
    phase2.check = Some(format!("{label} (c={concurrency}): {n} runs completed, {checked}"));
    Ok(vec![phase1, phase2])
}

/// Whether `text` is the note of one of runs 0..`n`: `hello {i}` (run i's input is `Save a note saying
/// hello {i}`; the script's call takes the part after `saying `).
pub(crate) fn is_note_text(text: &str, n: u64) -> bool {
    text.strip_prefix("hello ")
        .and_then(|i| i.parse::<u64>().ok())
        .is_some_and(|i| i < n && text == format!("hello {i}"))
}

/// The end check of an approval cycle that ran the tool for `n` runs, as the check line says it.
pub(crate) fn tool_ran_once_each(n: u64) -> String {
    format!("the tool ran {n} times, each text once")
}

/// The reference for workload A's CPU figures on SQLite: the same durability settings (WAL,
/// `synchronous=FULL`) on a scratch file next to `store_url`'s, `n` transactions that each insert one
/// 1 KiB row and commit, one at a time. Its CPU per commit is what the operating system and SQLite
/// charge for one durable commit (mostly the write and the fsync, in the kernel) before Tollgate does
/// anything; phase 1 of A commits twice per run (created, suspended) and phase 2 three times (claimed,
/// `tool_started`, completed). `None` when the store is not a SQLite file.
pub fn sqlite_commit_floor(store_url: &str, n: u64) -> Result<Option<PhaseReport>, BenchError> {
    let Some(path) = store_url.strip_prefix("sqlite://").filter(|p| !p.is_empty() && !p.contains(":memory:")) else {
        return Ok(None);
    };
    let path = format!("{}-commit-floor.db", path.split('?').next().unwrap_or(path));
    let connection = rusqlite::Connection::open(&path).map_err(err)?;
    connection.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(())).map_err(err)?;
    connection
        .execute_batch(
            "PRAGMA synchronous = FULL; CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, data TEXT)",
        )
        .map_err(err)?;
    let row = "x".repeat(1024);
    let mut latencies = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    let cpu0 = cpu_time();
    let started = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        connection
            .execute_batch("BEGIN IMMEDIATE")
            .and_then(|()| connection.execute("INSERT INTO floor (data) VALUES (?1)", [&row]))
            .and_then(|_| connection.execute_batch("COMMIT"))
            .map_err(err)?;
        latencies.push(t.elapsed());
    }
    let floor = report("SQLite floor: insert 1 KiB + COMMIT (c=1)", started, cpu0, latencies, None);
    drop(connection);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{path}{suffix}"));
    }
    Ok(Some(floor))
}

/// The PostgreSQL floor beside workloads A and C on a `postgres://` store (`None` for another): `n`
/// single-row inserts of 1 KiB, each its own transaction (autocommit, a prepared statement), from
/// `clients` connections that each insert one row at a time — what `pgbench -M prepared` measures with
/// a one-line script, here through the store's own driver and TLS settings, in a scratch schema of the
/// store's database dropped afterwards. It is what one durable commit costs on that server before
/// Tollgate does anything: read A's rates at the same `clients` as ratios to it.
///
/// # Errors
/// The server cannot be reached, or refuses the schema, the table or an insert.
pub async fn postgres_commit_floor(store_url: &str, n: u64, clients: usize) -> Result<Option<PhaseReport>, BenchError> {
    if !soak::is_postgres(store_url) {
        return Ok(None);
    }
    let schema = soak::fresh_schema(store_url, "tollgate_bench_floor").await?;
    let measured = measure_postgres_floor(&schema.url(), n, clients.max(1)).await;
    let dropped = soak::drop_schema(schema).await;
    let floor = measured?;
    dropped?;
    Ok(Some(floor))
}

async fn measure_postgres_floor(url: &str, n: u64, clients: usize) -> Result<PhaseReport, BenchError> {
    use sqlx::Connection as _;
    let mut connections = Vec::with_capacity(clients);
    for _ in 0..clients {
        connections.push(sqlx::PgConnection::connect(url).await.map_err(err)?);
    }
    if let Some(first) = connections.first_mut() {
        sqlx::query("CREATE TABLE floor (id BIGSERIAL PRIMARY KEY, data TEXT NOT NULL)")
            .execute(first)
            .await
            .map_err(err)?;
    }
    let row = Arc::new("x".repeat(1024));
    let taken = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let cpu0 = cpu_time();
    let started = Instant::now();
    let tasks: Vec<_> = connections
        .into_iter()
        .map(|mut connection| {
            let (row, taken) = (Arc::clone(&row), Arc::clone(&taken));
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while taken.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                    let t = Instant::now();
                    sqlx::query("INSERT INTO floor (data) VALUES ($1)")
                        .bind(row.as_str())
                        .execute(&mut connection)
                        .await
                        .map_err(err)?;
                    latencies.push(t.elapsed());
                }
                let _ = connection.close().await;
                Ok::<_, BenchError>(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    let mut failed = None;
    for task in tasks {
        match task.await.map_err(err).and_then(|measured| measured) {
            Ok(measured) => latencies.extend(measured),
            Err(error) => failed = failed.or(Some(error)),
        }
    }
    if let Some(error) = failed {
        return Err(error);
    }
    Ok(report(&format!("PostgreSQL floor: insert 1 KiB, autocommit (c={clients})"), started, cpu0, latencies, None))
}

/// Calls `each` on every item with `at_once` calls in flight and answers every result, in no
/// particular order. One at a time it is a plain loop that stops at the first error: `buffer_unordered`
/// would wake its task again each time its one call waits (`FuturesUnordered` yields once it has polled
/// every future it holds), a trip through the scheduler that woke the runtime's other worker thread at
/// every step: a quarter to two fifths of the process's CPU in workload A on PostgreSQL.
pub(crate) async fn in_flight<I, T, F, Fut>(
    items: impl IntoIterator<Item = I>,
    at_once: usize,
    mut each: F,
) -> Vec<Result<T, BenchError>>
where
    F: FnMut(I) -> Fut,
    Fut: std::future::Future<Output = Result<T, BenchError>>,
{
    if at_once > 1 {
        return futures_util::stream::iter(items).map(each).buffer_unordered(at_once).collect().await;
    }
    let mut results = Vec::new();
    for item in items {
        let result = each(item).await;
        let failed = result.is_err();
        results.push(result);
        if failed {
            break;
        }
    }
    results
}

/// Phase 1 of workload A for run `i`: start it and wait until it is committed waiting at the gate.
/// Returns its id and how long that took.
pub(crate) async fn start_waiting(runtime: &Runtime, i: u64) -> Result<(RunId, Duration), BenchError> {
    let input = format!("Save a note saying hello {i}");
    start_until(runtime, StartRun::new(&input, BENCH_ACTOR), RunStatus::WaitingForApproval).await
}

/// Starts the run `request` asks for and waits until it settles, which must be in status `expected`
/// (waiting at the gate, or completed when nothing asks). Returns its id and how long that took.
pub(crate) async fn start_until(
    runtime: &Runtime,
    request: StartRun<'_>,
    expected: RunStatus,
) -> Result<(RunId, Duration), BenchError> {
    let t = Instant::now();
    let run = runtime.start_and_wait(request).await.map_err(err)?;
    if run.status() != expected {
        return Err(BenchError(format!("run {} ended {} instead of {expected}", run.id, run.status())));
    }
    Ok((run.id, t.elapsed()))
}

/// Phase 2 of workload A (or C with `deny`) for run `id`: load it fresh from the store, decide its held
/// call as `actor`, and wait until it has completed. Returns how long that took and the bytes of its
/// persisted suspension.
pub(crate) async fn decide_to_completion(
    runtime: &Runtime,
    id: &RunId,
    deny: bool,
    actor: &Actor,
) -> Result<(Duration, usize), BenchError> {
    let t = Instant::now();
    let run = runtime.get(id).await.map_err(err)?;
    let pending = run.held_turn().ok_or_else(|| BenchError(format!("run {id} has no held turn")))?;
    let bytes = pending.suspension.as_str().len();
    let set = if deny { DecisionSet::DenyAll { reason: "not allowed".into() } } else { DecisionSet::ApproveAll };
    let done = runtime.decide_and_wait(&run, pending.turn_digest.as_str(), set, actor).await.map_err(err)?;
    if done.status() != RunStatus::Completed {
        return Err(BenchError(format!("run {id} ended {}", done.status())));
    }
    Ok((t.elapsed(), bytes))
}

fn approval_runtime(store: Arc<dyn RunStore>, notes: Arc<Mutex<Vec<String>>>) -> Result<Runtime, BenchError> {
    bench_runtime(store, vec![bench_agent("bench", Gate::Ask, notes)?])
}

/// An agent of workload A named `name`: the scripted `write_note` call on the run's input, then `done`;
/// its `write_note` has gate `gate` and writes into `notes`.
fn bench_agent(name: &str, gate: Gate, notes: Arc<Mutex<Vec<String>>>) -> Result<AgentSpec, BenchError> {
    let schema = json!({"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}});
    let registry = ToolRegistry::new().with(Arc::new(WriteNote { schema, gate, notes })).map_err(err)?;
    let script = Script::from_value(json!({"turns": [
        {"tool_calls": [{"name": "write_note", "arguments": {"text": "{{input_after:saying }}"}}]},
        {"text": "done"}
    ]}))
    .map_err(err)?;
    let registry = Arc::new(registry);
    let agent_loop = ToolLoop::new(Arc::new(ScriptedModel::new(script)), registry.clone(), LoopConfig::default());
    Ok(AgentSpec {
        name: name.into(),
        model: "scripted".into(),
        agent_loop: Arc::new(agent_loop),
        tools: registry.iter().map(|t| tollgate_agent_runtime::ToolInfo::of(t.tool().as_ref(), "default")).collect(),
        approval_ttl: None,
        on_expiry: OnExpiry::Deny,
        forbid_self_approval: false,
        escalation: None,
    })
}

/// A runtime over `store` with `agents` (the first is the default), as every in-process workload has it.
fn bench_runtime(store: Arc<dyn RunStore>, agents: Vec<AgentSpec>) -> Result<Runtime, BenchError> {
    traced_runtime(store, agents, None)
}

/// [`bench_runtime`], its runs' spans sent to `telemetry` when there is one.
fn traced_runtime(
    store: Arc<dyn RunStore>,
    agents: Vec<AgentSpec>,
    telemetry: Option<tollgate_agent_runtime::Telemetry>,
) -> Result<Runtime, BenchError> {
    // Workers enough for every run in flight (workload D fills with 256): the workloads measure the
    // store and the loop, not the pool's back-pressure.
    let options =
        RuntimeOptions { privacy: privacy_from_env()?, workers: BENCH_WORKERS, telemetry, ..RuntimeOptions::default() };
    Ok(Runtime::new(store, agents, Arc::new(SystemClock), Arc::new(UuidV7Ids), options))
}

/// The environment variable that sets the event log's privacy level for the benchmarks: `full` (the
/// default), `redacted` or `metadata`.
pub const PRIVACY_ENV: &str = "TOLLGATE_BENCH_PRIVACY";

fn privacy_from_env() -> Result<PrivacyLevel, BenchError> {
    match std::env::var(PRIVACY_ENV).as_deref() {
        Err(_) | Ok("" | "full") => Ok(PrivacyLevel::Full),
        Ok("redacted") => Ok(PrivacyLevel::Redacted),
        Ok("metadata") => Ok(PrivacyLevel::Metadata),
        Ok(other) => Err(BenchError(format!("{PRIVACY_ENV}: expected full, redacted or metadata, got {other:?}"))),
    }
}

/// Workload B: `repeat` runs of 50 allow-gated `get_time` turns and a final answer, no store.
pub async fn loop_overhead(repeat: u64) -> Result<PhaseReport, BenchError> {
    let mut turns: Vec<Value> = (0..50).map(|_| json!({"tool_calls": [{"name": "get_time"}]})).collect();
    turns.push(json!({"text": "done"}));
    let script = Script::from_value(json!({ "turns": turns })).map_err(err)?;
    let registry = ToolRegistry::new()
        .with(Arc::new(GetTime { schema: json!({"type": "object", "properties": {}}) }))
        .map_err(err)?;
    let config = LoopConfig { max_iterations: 51, ..LoopConfig::default() };
    let agent = ToolLoop::new(Arc::new(ScriptedModel::new(script)), Arc::new(registry), config);
    let cpu0 = cpu_time();
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(repeat as usize);
    let scope = RunScope::new("bench");
    for _ in 0..repeat {
        let t = Instant::now();
        match tollgate_agent_core::AgentLoop::start(&agent, &scope, "what time is it?", &NoHooks).await.map_err(err)? {
            Outcome::Completed(done) if done.counters.tool_invocations == 50 => {}
            other => return Err(BenchError(format!("workload B: unexpected outcome {other:?}"))),
        }
        latencies.push(t.elapsed());
    }
    let mut phase = report("B: loop overhead (iterations)", started, cpu0, latencies, None);
    phase.count = repeat * 51;
    phase.per_sec = phase.count as f64 / phase.wall_secs;
    phase.check = Some(format!("B: {repeat} runs completed, each after 50 tool calls"));
    Ok(phase)
}

fn report(
    name: &str,
    started: Instant,
    cpu0: CpuTime,
    mut latencies: Vec<Duration>,
    bytes: Option<f64>,
) -> PhaseReport {
    let wall = started.elapsed().as_secs_f64();
    let count = latencies.len() as u64;
    latencies.sort();
    let micros = |p: f64| percentile(&latencies, p).map_or(0.0, |d| d.as_secs_f64() * 1e6);
    let (p50, p99) = (micros(0.50), micros(0.99));
    phase_report(name, wall, count, (p50, p99), cpu0, bytes)
}

/// The element at percentile `p` (0..=1) of sorted values (nearest rank).
pub(crate) fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    sorted.get(((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1)).copied()
}

/// A phase's report from its measured parts; CPU and peak RSS are read now.
pub(crate) fn phase_report(
    name: &str,
    wall: f64,
    count: u64,
    (p50_us, p99_us): (f64, f64),
    cpu0: CpuTime,
    suspension_bytes: Option<f64>,
) -> PhaseReport {
    phase_report_spent(name, wall, count, (p50_us, p99_us), cpu_time().since(cpu0), suspension_bytes)
}

/// A phase's report from its measured parts and the CPU time it `spent`; peak RSS is read now.
pub(crate) fn phase_report_spent(
    name: &str,
    wall: f64,
    count: u64,
    (p50_us, p99_us): (f64, f64),
    spent: CpuTime,
    suspension_bytes: Option<f64>,
) -> PhaseReport {
    let per_run = |seconds: f64| seconds * 1e6 / count.max(1) as f64;
    PhaseReport {
        name: name.to_owned(),
        count,
        wall_secs: wall,
        per_sec: count as f64 / wall.max(1e-9),
        p50_us,
        p99_us,
        cpu_us_per_run: per_run(spent.user + spent.system),
        sys_us_per_run: per_run(spent.system),
        peak_rss_mib: peak_rss_mib(),
        suspension_bytes,
        check: None,
        versus: None,
        spans: None,
    }
}

/// Prints reports as one table (B's `count` and `runs/s` are loop iterations, as its phase says), then
/// each comparison of a variant with its baseline on a line of its own (`PHASE vs BASELINE: CPU per run
/// ×1.02 (rounds ×0.99–×1.05), runs/s ×0.98 (…), 4 rounds each, alternating`), then the spans of each
/// traced phase (`PHASE: 6000 spans sent, 2.000 per run`), then each end check that passed:
/// `check A (c=1): … — ok`.
pub fn table(reports: &[PhaseReport]) -> String {
    let mut out = format!(
        "{:<56} {:>8} {:>9} {:>11} {:>10} {:>10} {:>9} {:>9} {:>9} {:>10}\n",
        "phase", "count", "wall s", "runs/s", "p50 µs", "p99 µs", "cpu µs", "sys µs", "rss MiB", "susp B"
    );
    for r in reports {
        out.push_str(&format!(
            "{:<56} {:>8} {:>9.3} {:>11.0} {:>10.0} {:>10.0} {:>9.1} {:>9.1} {:>9.1} {:>10}\n",
            r.name,
            r.count,
            r.wall_secs,
            r.per_sec,
            r.p50_us,
            r.p99_us,
            r.cpu_us_per_run,
            r.sys_us_per_run,
            r.peak_rss_mib,
            r.suspension_bytes.map_or("-".to_owned(), |b| format!("{b:.0}"))
        ));
    }
    let span = |ratios: &[f64]| {
        let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let high = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if ratios.is_empty() { "-".to_owned() } else { format!("rounds ×{low:.3}–×{high:.3}") }
    };
    for (name, versus) in reports.iter().filter_map(|r| r.versus.as_ref().map(|v| (&r.name, v))) {
        out.push_str(&format!(
            "{name} vs {}: CPU per run ×{:.3} ({}), runs/s ×{:.3} ({}), {} rounds each, alternating\n",
            versus.of,
            versus.cpu_ratio,
            span(&versus.cpu_ratios),
            versus.rate_ratio,
            span(&versus.rate_ratios),
            versus.rounds
        ));
    }
    for (report, spans) in reports.iter().filter_map(|r| r.spans.map(|spans| (r, spans))) {
        let per_run = spans as f64 / report.count.max(1) as f64;
        out.push_str(&format!("{}: {spans} spans sent, {per_run:.3} per run\n", report.name));
    }
    for check in reports.iter().filter_map(|r| r.check.as_deref()) {
        out.push_str(&format!("check {check} — ok\n"));
    }
    out
}

/// CPU seconds this process has used so far, user and system apart.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpuTime {
    user: f64,
    system: f64,
}

impl CpuTime {
    /// The CPU time spent from `earlier` to this reading.
    pub(crate) fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime { user: self.user - earlier.user, system: self.system - earlier.system }
    }

    /// Both CPU times together.
    pub(crate) fn plus(self, other: CpuTime) -> CpuTime {
        CpuTime { user: self.user + other.user, system: self.system + other.system }
    }

    /// User and system time together, seconds.
    pub(crate) fn total(self) -> f64 {
        self.user + self.system
    }
}

/// This process's CPU time so far (Linux /proc; zero elsewhere).
pub(crate) fn cpu_time() -> CpuTime {
    cpu_time_at("/proc/self/stat")
}

/// The CPU time so far of the process `pid` (Linux /proc; zero elsewhere or once it is gone).
pub(crate) fn cpu_time_of(pid: u32) -> CpuTime {
    cpu_time_at(&format!("/proc/{pid}/stat"))
}

fn cpu_time_at(path: &str) -> CpuTime {
    let Ok(stat) = std::fs::read_to_string(path) else { return CpuTime::default() };
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line: indexes 11 and 12 after the closing parenthesis.
    CpuTime { user: ticks(11) / 100.0, system: ticks(12) / 100.0 }
}

fn peak_rss_mib() -> f64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return 0.0 };
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::{BenchError, in_flight, postgres_commit_floor};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Counts the calls under way and the most at once.
    #[derive(Default)]
    struct Gauge {
        now: AtomicUsize,
        most: AtomicUsize,
        calls: AtomicUsize,
    }

    impl Gauge {
        async fn call(&self, i: u32) -> Result<u32, BenchError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.most.fetch_max(self.now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(1)).await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            if i == 10 { Err(BenchError(format!("item {i} failed"))) } else { Ok(i) }
        }
    }

    /// Every item is called once, with as many at once as asked and never more.
    #[tokio::test]
    async fn each_item_once_with_at_most_the_asked_in_flight() {
        for at_once in [1, 4] {
            let gauge = Arc::new(Gauge::default());
            let results = in_flight(20..60u32, at_once, |i| {
                let gauge = Arc::clone(&gauge);
                async move { gauge.call(i).await }
            })
            .await;
            let mut answered: Vec<u32> = results.into_iter().map(|r| r.unwrap_or_else(|e| panic!("{e}"))).collect();
            answered.sort_unstable();
            assert_eq!(answered, (20..60).collect::<Vec<_>>());
            assert_eq!(gauge.most.load(Ordering::SeqCst), at_once, "calls at once");
        }
    }

    /// One at a time, the first failure is the last call; its error is among the results.
    #[tokio::test]
    async fn one_at_a_time_stops_at_the_first_error() {
        let gauge = Arc::new(Gauge::default());
        let results = in_flight(0..100u32, 1, |i| {
            let gauge = Arc::clone(&gauge);
            async move { gauge.call(i).await }
        })
        .await;
        assert_eq!(gauge.calls.load(Ordering::SeqCst), 11);
        assert_eq!(
            results.last().and_then(|r| r.as_ref().err()).map(ToString::to_string).as_deref(),
            Some("item 10 failed")
        );
    }

    /// The floor makes its inserts from as many connections as asked, in a schema it drops after.
    #[tokio::test]
    async fn the_postgres_floor_inserts_n_rows_and_leaves_no_schema() {
        assert!(postgres_commit_floor("sqlite::memory:", 10, 1).await.unwrap_or_else(|e| panic!("{e}")).is_none());
        let Some(base) = tollgate_agent_testkit::postgres_url() else { return };
        let floor = postgres_commit_floor(&base, 60, 4)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no floor on PostgreSQL"));
        assert_eq!(floor.count, 60);
        assert_eq!(floor.name, "PostgreSQL floor: insert 1 KiB, autocommit (c=4)");
        assert!(floor.per_sec > 0.0 && floor.p50_us > 0.0, "{floor:?}");
        use sqlx::Connection as _;
        let mut admin = sqlx::PgConnection::connect(&base).await.unwrap_or_else(|e| panic!("{e}"));
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1")
            .bind(format!("tollgate\\_bench\\_floor\\_{}\\_%", std::process::id()))
            .fetch_one(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(left, 0, "the floor's schema is left behind");
    }
}

//! Workload D of docs/benchmarks.md (scale), in a bounded and honest form: the store is filled with N waiting runs,
//! really started and suspended by the runtime (phase 1 of workload A, many in flight), then, with those
//! N runs waiting, it measures
//! - the latency of "load one waiting run by id, decide, complete" (phase 2 of workload A, one at a
//!   time) over a sample of runs spread evenly over the N, and
//! - the latency of listing `status = waiting_for_approval`, `limit = 50` (the query behind
//!   `GET /v1/runs?status=waiting_for_approval&limit=50`, through [`tollgate_agent_runtime::Runtime::list`]),
//!   timed first, while all N runs wait, so every listing returns a full page,
//!
//! and reports the process's peak RSS with each. docs/benchmarks.md's criterion ("within 2×") compares two runs of
//! this workload: one with N = 1,000 and one with N = 1,000,000.
//!
//! What it promises: the sample is taken across the whole fill (every `N / sample`-th run started), so
//! old and new runs are both measured; only the sample's ids are kept in memory, not N of them, so the
//! peak RSS reflects the runtime and the store rather than this harness; and the end checks hold: every
//! sampled run completed, the tool ran once per sampled run with each text once, and each listing
//! returned only waiting runs, as many as the limit allows.

use crate::{
    BENCH_ACTOR, BenchError, CpuTime, PhaseReport, approval_runtime, cpu_time, err, percentile, phase_report, report,
};
use futures_util::StreamExt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use tollgate_agent_core::{Actor, RunId, RunQuery, RunStatus};
use tollgate_agent_runtime::DecisionSet;

/// How many waiting runs are decided and timed, by default: enough that the p99 is the tenth slowest,
/// not one hiccup of the machine.
pub const SAMPLE: usize = 1000;
/// Runs started at once while filling the store.
const FILL_CONCURRENCY: usize = 256;
/// How many times the waiting list is read and timed.
const LIST_REPEAT: usize = 200;
/// The page size of the timed listing (the API's default).
const LIST_LIMIT: u32 = 50;

/// Workload D against the store at `store_url` (use a fresh database): fills it with `n` waiting runs,
/// then times the waiting list and the approval cycle of `sample` of them. Returns three phases: the
/// fill, the cycle, the listing.
pub async fn scale(store_url: &str, n: u64, sample: usize) -> Result<Vec<PhaseReport>, BenchError> {
    if n == 0 {
        return Err(BenchError("workload D needs at least one waiting run".into()));
    }
    let store = crate::open_store(store_url).await?;
    let notes = Arc::new(Mutex::new(Vec::new()));
    let runtime = approval_runtime(store, notes.clone())?;
    let sample = u64::try_from(sample).unwrap_or(u64::MAX).clamp(1, n);
    let stride = n / sample;

    // Fill: N runs, each committed waiting at the gate. Only the sampled ids are kept.
    let cpu0 = cpu_time();
    let started = Instant::now();
    let mut picked: Vec<RunId> = Vec::with_capacity(sample as usize);
    let mut micros: Vec<u32> = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    let mut fills = futures_util::stream::iter(0..n)
        .map(|i| {
            let runtime = runtime.clone();
            async move {
                let (id, elapsed) = crate::start_waiting(&runtime, i).await?;
                Ok::<_, BenchError>((i, id, elapsed))
            }
        })
        .buffer_unordered(FILL_CONCURRENCY);
    while let Some(filled) = fills.next().await {
        let (i, id, latency) = filled?;
        micros.push(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX));
        if i % stride == 0 && (picked.len() as u64) < sample {
            picked.push(id);
        }
    }
    drop(fills);
    let fill = report_micros(&format!("D fill: {n} runs → waiting (c={FILL_CONCURRENCY})"), started, cpu0, micros);

    // The waiting list, first page, with all N runs waiting (before any is decided).
    let expected = n.min(u64::from(LIST_LIMIT));
    let cpu0 = cpu_time();
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(LIST_REPEAT);
    for _ in 0..LIST_REPEAT {
        let t = Instant::now();
        let query =
            RunQuery { status: Some(RunStatus::WaitingForApproval), agent: None, limit: LIST_LIMIT, cursor: None };
        let page = runtime.list(query).await.map_err(err)?;
        latencies.push(t.elapsed());
        if (page.runs.len() as u64) < expected || page.runs.iter().any(|r| r.status() != RunStatus::WaitingForApproval)
        {
            return Err(BenchError(format!(
                "workload D: the waiting list gave {} runs (expected {expected}, all waiting)",
                page.runs.len()
            )));
        }
    }
    let mut list =
        report(&format!("D at {n} waiting: list waiting, limit {LIST_LIMIT}"), started, cpu0, latencies, None);

    // The approval cycle, one run at a time, with the store full.
    let cpu0 = cpu_time();
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(picked.len());
    let mut bytes = 0usize;
    let actor = Actor::new(BENCH_ACTOR);
    for id in &picked {
        let t = Instant::now();
        let run = runtime.get(id).await.map_err(err)?;
        let pending = run.held_turn().ok_or_else(|| BenchError(format!("run {id} has no held turn")))?;
        bytes += pending.suspension.as_str().len();
        let done = runtime
            .decide_and_wait(&run, pending.turn_digest.as_str(), DecisionSet::ApproveAll, &actor)
            .await
            .map_err(err)?;
        if done.status() != RunStatus::Completed {
            return Err(BenchError(format!("workload D: run {id} ended {}", done.status())));
        }
        latencies.push(t.elapsed());
    }
    let mean_bytes = bytes as f64 / picked.len().max(1) as f64;
    let cycle = report(
        &format!("D at {n} waiting: load → approve → completed (c=1)"),
        started,
        cpu0,
        latencies,
        Some(mean_bytes),
    );

    // End checks: the sampled runs, and only they, ran the tool, each once.
    let notes = notes.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut distinct = notes.clone();
    distinct.sort();
    distinct.dedup();
    if notes.len() != picked.len() || distinct.len() != picked.len() {
        return Err(BenchError(format!(
            "workload D: the tool ran {} times with {} distinct texts; expected {} and {}",
            notes.len(),
            distinct.len(),
            picked.len(),
            picked.len()
        )));
    }
    list.check = Some(format!(
        "D: {} sampled runs completed, {}; each of {LIST_REPEAT} listings gave {expected} runs, all waiting",
        picked.len(),
        crate::tool_ran_once_each(picked.len() as u64)
    ));
    Ok(vec![fill, cycle, list])
}

/// A phase report from latencies in whole microseconds (compact for a million runs).
fn report_micros(name: &str, started: Instant, cpu0: CpuTime, mut micros: Vec<u32>) -> PhaseReport {
    let wall = started.elapsed().as_secs_f64();
    let count = micros.len() as u64;
    micros.sort_unstable();
    let pct = |p: f64| percentile(&micros, p).map_or(0.0, f64::from);
    phase_report(name, wall, count, (pct(0.50), pct(0.99)), cpu0, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The bound of one listing: generous, it only catches a listing gone badly wrong.
    const LIST_BOUND: Duration = Duration::from_secs(5);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_scale_run_fills_decides_a_sample_and_lists() {
        let url = format!("sqlite://{}", tollgate_agent_testkit::scratch_dir("bench-scale").join("bench.db").display());
        let reports = scale(&url, 120, 20).await.unwrap_or_else(|e| panic!("{e}"));
        let counts: Vec<u64> = reports.iter().map(|r| r.count).collect();
        assert_eq!(counts, [120, 20, LIST_REPEAT as u64]);
        assert!(reports[1].suspension_bytes.is_some_and(|b| b > 100.0));
        assert!(reports[2].p99_us < LIST_BOUND.as_secs_f64() * 1e6, "{:?}", reports[2]);
        assert!(reports.iter().all(|r| r.p50_us > 0.0 && r.p99_us >= r.p50_us));
    }
}

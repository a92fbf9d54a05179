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
//!
//! Its variant with a grant ([`scale_applying`], issue #34): M of the N runs write a note that one
//! grant matches; once all N wait, that grant is made with `apply_to_waiting`, and the time until it has
//! decided the M runs, then until they have all completed, is measured with the other N − M still
//! waiting. Its end check: the grant decided exactly M runs, each once, all M completed and ran the tool
//! once with a text of its own, and N − M runs are still waiting after.

use crate::{
    BENCH_ACTOR, BenchError, CpuTime, PhaseReport, approval_runtime, cpu_time, err, percentile, phase_report, report,
};
use futures_util::StreamExt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tollgate_agent_core::{Actor, RunId, RunQuery, RunStatus};
use tollgate_agent_runtime::{DecisionSet, NewGrant, Runtime, StartRun};

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
    scale_applying(store_url, n, sample, 0).await
}

/// Workload D with one grant applied to the waiting runs: as [`scale`], but `matching` of the `n` runs
/// (spread evenly over the fill) write `granted {i}` instead of `hello {i}`. Once all `n` wait and the
/// waiting list is timed, a grant on `write_note` matching `{"/text": "granted *"}` is made with
/// `apply_to_waiting`; then the sample (drawn from the other runs) is decided as in [`scale`]. Returns
/// [`scale`]'s three phases, then, when `matching` is not 0, two more: the grant's request until it
/// has decided the `matching` runs (its latency in both latency columns: one request), and until they
/// have all completed (per run: from the request to its completion).
pub async fn scale_applying(
    store_url: &str,
    n: u64,
    sample: usize,
    matching: u64,
) -> Result<Vec<PhaseReport>, BenchError> {
    if n == 0 {
        return Err(BenchError("workload D needs at least one waiting run".into()));
    }
    if matching > n {
        return Err(BenchError(format!("workload D: {matching} runs to match, more than the {n} waiting")));
    }
    let store = crate::open_store(store_url).await?;
    let notes = Arc::new(Mutex::new(Vec::new()));
    let runtime = approval_runtime(store, notes.clone())?;
    let sample = u64::try_from(sample).unwrap_or(u64::MAX).clamp(1, n);
    let stride = n / sample;
    // Run i writes a note the grant matches when it is the last of a stretch of `n / matching` runs,
    // for the first `matching` stretches.
    let stretch = n / matching.max(1);
    let matches = move |i: u64| matching > 0 && i % stretch == stretch - 1 && i / stretch < matching;

    // Fill: N runs, each committed waiting at the gate. Only the sampled ids are kept.
    let cpu0 = cpu_time();
    let started = Instant::now();
    let mut picked: Vec<RunId> = Vec::with_capacity(sample as usize);
    let mut micros: Vec<u32> = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    let mut fills = futures_util::stream::iter(0..n)
        .map(|i| {
            let runtime = runtime.clone();
            async move {
                let (id, elapsed) = if matches(i) {
                    let input = format!("Save a note saying granted {i}");
                    crate::start_until(&runtime, StartRun::new(&input, BENCH_ACTOR), RunStatus::WaitingForApproval)
                        .await?
                } else {
                    crate::start_waiting(&runtime, i).await?
                };
                Ok::<_, BenchError>((i, id, elapsed))
            }
        })
        .buffer_unordered(FILL_CONCURRENCY);
    while let Some(filled) = fills.next().await {
        let (i, id, latency) = filled?;
        micros.push(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX));
        if i % stride == 0 && !matches(i) && (picked.len() as u64) < sample {
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

    // The grant, applied to the waiting runs it now clears, with all N waiting.
    let applied = if matching > 0 { Some(apply_grant(&runtime, n, matching).await?) } else { None };

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

    // End checks: the sampled runs and those the grant decided, and only they, ran the tool, each once.
    let notes = notes.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let (granted, sampled): (Vec<&String>, Vec<&String>) = notes.iter().partition(|text| text.starts_with("granted "));
    for (texts, expected, kind) in [(sampled, picked.len() as u64, "sampled"), (granted, matching, "granted")] {
        let mut distinct = texts.clone();
        distinct.sort();
        distinct.dedup();
        let stray = texts.iter().find(|text| {
            let i = text.rsplit(' ').next().and_then(|i| i.parse::<u64>().ok());
            !i.is_some_and(|i| i < n && matches(i) == (kind == "granted"))
        });
        if texts.len() as u64 != expected || distinct.len() as u64 != expected || stray.is_some() {
            return Err(BenchError(format!(
                "workload D: the tool ran {} times for {kind} runs with {} distinct texts (expected {expected} and \
                 {expected}){}",
                texts.len(),
                distinct.len(),
                stray.map(|text| format!(", one of them {text:?}")).unwrap_or_default()
            )));
        }
    }
    list.check = Some(format!(
        "D: {} sampled runs completed, {}; each of {LIST_REPEAT} listings gave {expected} runs, all waiting",
        picked.len(),
        crate::tool_ran_once_each(picked.len() as u64)
    ));
    let mut reports = vec![fill, cycle, list];
    reports.extend(applied.into_iter().flatten());
    Ok(reports)
}

/// Makes the grant of [`scale_applying`] with `apply_to_waiting`, `n` runs waiting of which `matching`
/// write a note it matches; times the request, and each of those runs until it has completed. Checks that
/// the grant decided exactly those runs, each once, and that the others still wait.
async fn apply_grant(runtime: &Runtime, n: u64, matching: u64) -> Result<[PhaseReport; 2], BenchError> {
    let changes = runtime.changes();
    let actor = Actor::new(BENCH_ACTOR);
    let mut pattern = serde_json::Map::new();
    pattern.insert("/text".into(), "granted *".into());
    let new = NewGrant {
        agent: "bench".into(),
        tool: "write_note".into(),
        pattern,
        apply_to_waiting: true,
        ..NewGrant::default()
    };
    let cpu0 = cpu_time();
    let started = Instant::now();
    let request = runtime.create_grant(new, &actor);
    tokio::pin!(request);
    let mut decided: Option<PhaseReport> = None;
    // From the request to each run's completion, as the change set tells it (a run changes no more once
    // it has ended, so each is counted once).
    let mut completed: Vec<Duration> = Vec::with_capacity(usize::try_from(matching).unwrap_or(0));
    while decided.is_none() || (completed.len() as u64) < matching {
        tokio::select! {
            made = &mut request, if decided.is_none() => {
                let wall = started.elapsed();
                let mut applied = made.map_err(err)?.applied_to.unwrap_or_default();
                let listed = applied.len();
                applied.sort();
                applied.dedup();
                if listed as u64 != matching || applied.len() != listed {
                    return Err(BenchError(format!(
                        "workload D: the grant was applied to {listed} runs ({} distinct), not the {matching} it matches",
                        applied.len()
                    )));
                }
                let micros = wall.as_secs_f64() * 1e6;
                let name = format!("D at {n} waiting: grant → {matching} decided (apply_to_waiting)");
                decided = Some(phase_report(&name, wall.as_secs_f64(), matching, (micros, micros), cpu0, None));
            }
            batch = changes.next() => {
                let at = started.elapsed();
                for (id, changed) in batch {
                    if changed.status == RunStatus::Completed {
                        completed.push(at);
                    } else if changed.status.is_terminal() {
                        return Err(BenchError(format!("workload D: granted run {id} ended {}", changed.status)));
                    }
                }
            }
        }
    }
    let micros = completed.iter().map(|d| u32::try_from(d.as_micros()).unwrap_or(u32::MAX)).collect::<Vec<_>>();
    let mut done = report_micros(&format!("D at {n} waiting: grant → {matching} completed"), started, cpu0, micros);
    let still = runtime.count_by_status().await.map_err(err)?;
    let waiting = still.iter().find(|(status, _)| *status == RunStatus::WaitingForApproval).map_or(0, |(_, k)| *k);
    if waiting != n - matching {
        return Err(BenchError(format!("workload D: {waiting} runs still wait after the grant, not {}", n - matching)));
    }
    done.check = Some(format!(
        "D apply_to_waiting: one grant decided {matching} of {n} waiting runs, each once; all {matching} \
         completed, {}; {waiting} still waiting",
        crate::tool_ran_once_each(matching)
    ));
    let decided = decided.ok_or_else(|| BenchError("workload D: the grant's request never answered".into()))?;
    Ok([decided, done])
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
        let url = crate::scratch_store("bench-scale");
        let reports = scale(&url, 120, 20).await.unwrap_or_else(|e| panic!("{e}"));
        let counts: Vec<u64> = reports.iter().map(|r| r.count).collect();
        assert_eq!(counts, [120, 20, LIST_REPEAT as u64]);
        assert!(reports[1].suspension_bytes.is_some_and(|b| b > 100.0));
        assert!(reports[2].p99_us < LIST_BOUND.as_secs_f64() * 1e6, "{:?}", reports[2]);
        assert!(reports.iter().all(|r| r.p50_us > 0.0 && r.p99_us >= r.p50_us));
    }

    /// With a grant applied to the waiting runs: the three phases, then the grant's two, which decided
    /// and completed exactly the runs it matches; the sample is drawn from the others.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_grant_applied_to_waiting_runs_decides_the_matching_ones() {
        let url = crate::scratch_store("bench-scale-grant");
        let reports = scale_applying(&url, 150, 20, 30).await.unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = reports.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "D fill: 150 runs → waiting (c=256)",
                "D at 150 waiting: load → approve → completed (c=1)",
                "D at 150 waiting: list waiting, limit 50",
                "D at 150 waiting: grant → 30 decided (apply_to_waiting)",
                "D at 150 waiting: grant → 30 completed",
            ]
        );
        let counts: Vec<u64> = reports.iter().map(|r| r.count).collect();
        // Every 5th run matches (i % 5 == 4); the sample takes i % 7 == 0 among the others.
        let sampled = (0..150u64).filter(|i| i % 7 == 0 && i % 5 != 4).count().min(20) as u64;
        assert_eq!(counts, [150, sampled, LIST_REPEAT as u64, 30, 30]);
        let (decided, completed) = (&reports[3], &reports[4]);
        assert!(decided.per_sec > 0.0 && decided.p50_us > 0.0 && decided.p50_us == decided.p99_us, "{decided:?}");
        assert!(completed.wall_secs >= decided.wall_secs, "{completed:?} {decided:?}");
        assert!(completed.p50_us > 0.0 && completed.p99_us >= completed.p50_us, "{completed:?}");
        assert_eq!(
            completed.check.as_deref(),
            Some(
                "D apply_to_waiting: one grant decided 30 of 150 waiting runs, each once; all 30 completed, the tool \
                 ran 30 times, each text once; 120 still waiting"
            )
        );
        assert!(scale_applying(&url, 10, 5, 11).await.is_err(), "more runs to match than wait");
    }
}

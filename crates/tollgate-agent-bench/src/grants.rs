//! What grants cost (issue #34; docs/benchmarks.md, "What grants cost"): workload A beside grants, in
//! process, on one store and one runtime whose agents differ only in their grants and in one gate. Each
//! comparison is measured in alternating rounds of the same sitting (the order swapped every round), so
//! that a machine that speeds up or slows down weighs on both sides:
//!
//! - **grants that match nothing**: phases 1 and 2 of A for an agent with `grants` active grants on
//!   `write_note`, none matching a call (`{"/text": "nothing {k} *"}`), against the same agent without
//!   any. The gate reads the agent's grants once per turn that asks, so this is what a long list costs;
//! - **one matching grant**: runs that would have waited at the gate, completed by a grant on
//!   `{"/text": "hello *"}` without a person (start → completed), against the same runs with
//!   `write_note`'s gate `allow`.
//!
//! Workload D's variant, one grant applied to many waiting runs, is [`crate::scale::scale_applying`].
//!
//! What it promises: every run writes a text of its own (`hello {j}`, j counted across all the rounds
//! and kinds), and the end check holds: every run settled as its kind must (waiting with grants that
//! match nothing, completed by the matching grant without a decision), every run completed, the tool ran
//! once per run with each text once, and the matching grant counted one use per run it allowed.

use crate::{
    BENCH_ACTOR, BenchError, CpuTime, PhaseReport, Versus, bench_agent, bench_runtime, cpu_time, decide_to_completion,
    err, in_flight, is_note_text, percentile, phase_report_spent, start_until,
};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tollgate_agent_core::{Actor, Gate, RunId, RunStatus};
use tollgate_agent_runtime::{NewGrant, Runtime, StartRun};

/// Rounds of each kind, alternating, when the caller has no reason to choose.
pub const ROUNDS: u32 = 4;

/// The agent without grants (the default agent, as in workload A).
const PLAIN: &str = "bench";
/// The same agent with the grants that match no call.
const UNMATCHED: &str = "bench-grants";
/// The same agent with one grant matching every call.
const GRANTED: &str = "bench-granted";
/// The same agent with `write_note`'s gate `allow`.
const ALLOWED: &str = "bench-allow";
/// The tool every grant is on.
const TOOL: &str = "write_note";

/// What grants cost, against the store at `store_url` (use a fresh database), `n` runs per kind and
/// round with `concurrency` in flight, an agent with `grants` grants that match no call, `rounds`
/// alternating rounds. Returns six phases, each summed over its rounds: A's phase 1 without grants and
/// with them, phase 2 likewise, then the allow-gated runs and the runs a grant completed; the second of
/// each pair carries its [`Versus`] the first.
///
/// Runs as [`crate::approval_cycle`] does, in a task of its own on the current runtime's workers.
pub async fn grant_costs(
    store_url: &str,
    n: u64,
    concurrency: usize,
    grants: u64,
    rounds: u32,
) -> Result<Vec<PhaseReport>, BenchError> {
    let store_url = store_url.to_owned();
    crate::in_own_task(async move { grant_costs_here(&store_url, n, concurrency, grants, rounds).await }).await
}

async fn grant_costs_here(
    store_url: &str,
    n: u64,
    concurrency: usize,
    grants: u64,
    rounds: u32,
) -> Result<Vec<PhaseReport>, BenchError> {
    if rounds == 0 {
        return Err(BenchError("what grants cost needs at least one round".into()));
    }
    let store = crate::open_store(store_url).await?;
    let notes = Arc::new(Mutex::new(Vec::new()));
    let agents = [(PLAIN, Gate::Ask), (UNMATCHED, Gate::Ask), (GRANTED, Gate::Ask), (ALLOWED, Gate::Allow)]
        .into_iter()
        .map(|(name, gate)| bench_agent(name, gate, notes.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let runtime = bench_runtime(store, agents)?;
    let actor = Actor::new(BENCH_ACTOR);
    for k in 0..grants {
        make_grant(&runtime, UNMATCHED, &format!("nothing {k} *"), &actor).await?;
    }
    let matching = make_grant(&runtime, GRANTED, "hello *", &actor).await?;
    let c = concurrency.max(1);
    let mut next = 0;

    // Grants that match nothing: the whole cycle of A, each agent in turn.
    let [mut plain_1, mut plain_2, mut unmatched_1, mut unmatched_2] = std::array::from_fn(|_| Tally::default());
    for round in 0..rounds {
        let order = if round % 2 == 0 { [PLAIN, UNMATCHED] } else { [UNMATCHED, PLAIN] };
        for agent in order {
            let (phase_1, phase_2) =
                if agent == PLAIN { (&mut plain_1, &mut plain_2) } else { (&mut unmatched_1, &mut unmatched_2) };
            let ids = start_block(&runtime, agent, next..next + n, c, RunStatus::WaitingForApproval, phase_1).await?;
            next += n;
            approve_block(&runtime, ids, c, &actor, phase_2).await?;
        }
    }

    // One matching grant: runs that would wait complete at once, as allow-gated runs do.
    let [mut allowed, mut granted] = std::array::from_fn(|_| Tally::default());
    for round in 0..rounds {
        let order = if round % 2 == 0 { [ALLOWED, GRANTED] } else { [GRANTED, ALLOWED] };
        for agent in order {
            let tally = if agent == ALLOWED { &mut allowed } else { &mut granted };
            start_block(&runtime, agent, next..next + n, c, RunStatus::Completed, tally).await?;
            next += n;
        }
    }

    // End checks.
    let notes = notes.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut distinct = notes.clone();
    distinct.sort();
    distinct.dedup();
    if notes.len() as u64 != next || distinct.len() as u64 != next {
        return Err(BenchError(format!(
            "what grants cost: the tool ran {} times with {} distinct texts; expected {next} and {next}",
            notes.len(),
            distinct.len()
        )));
    }
    if let Some(stray) = notes.iter().find(|text| !is_note_text(text, next)) {
        return Err(BenchError(format!("what grants cost: the tool wrote {stray:?}, not a text \"hello {{j}}\"")));
    }
    let uses = runtime.grant(&matching).await.map_err(err)?.uses;
    let by_grant = u64::from(rounds) * n;
    if uses != by_grant {
        return Err(BenchError(format!("what grants cost: the matching grant counted {uses} uses, not {by_grant}")));
    }

    let level = format!("(c={c})");
    let unmatched = format!("{grants} grants matching none");
    let mut reports = Vec::with_capacity(6);
    reports.extend(pair(
        (format!("A phase 1, no grants {level}"), plain_1),
        (format!("A phase 1, {unmatched} {level}"), unmatched_1),
        rounds,
        false,
    ));
    reports.extend(pair(
        (format!("A phase 2, no grants {level}"), plain_2),
        (format!("A phase 2, {unmatched} {level}"), unmatched_2),
        rounds,
        true,
    ));
    let [allowed, mut granted] = pair(
        (format!("A allow-gated: start → completed {level}"), allowed),
        (format!("A granted: start → completed, no person {level}"), granted),
        rounds,
        false,
    );
    granted.check = Some(format!(
        "A with grants {level}: {rounds} rounds of {n} runs of each kind, {next} runs completed, {}; the runs \
         beside {grants} grants matching none waited, the matching grant allowed {by_grant} calls without a person",
        crate::tool_ran_once_each(next)
    ));
    reports.extend([allowed, granted]);
    Ok(reports)
}

/// Makes a grant of scope agent on `agent`'s `write_note`, matching `/text` against `glob`, by `actor`.
async fn make_grant(
    runtime: &Runtime,
    agent: &str,
    glob: &str,
    actor: &Actor,
) -> Result<tollgate_agent_core::GrantId, BenchError> {
    let mut pattern = serde_json::Map::new();
    pattern.insert("/text".into(), glob.into());
    let new = NewGrant { agent: agent.into(), tool: TOOL.into(), pattern, ..NewGrant::default() };
    Ok(runtime.create_grant(new, actor).await.map_err(err)?.grant.id)
}

/// Starts runs `indexes` of `agent` (run j's input is `Save a note saying hello {j}`), `concurrency` in
/// flight, each until it settles, which must be in status `expected`; adds the block to `tally` and
/// answers the runs' ids.
pub(crate) async fn start_block(
    runtime: &Runtime,
    agent: &str,
    indexes: std::ops::Range<u64>,
    concurrency: usize,
    expected: RunStatus,
    tally: &mut Tally,
) -> Result<Vec<RunId>, BenchError> {
    let cpu0 = cpu_time();
    let started = Instant::now();
    let (ids, latencies) = start_runs(runtime, agent, indexes, concurrency, expected).await?;
    tally.add(started, cpu0, latencies, 0);
    Ok(ids)
}

/// Starts runs `indexes` of `agent` as [`start_block`] does, without counting them; answers the runs'
/// ids and how long each took to settle.
pub(crate) async fn start_runs(
    runtime: &Runtime,
    agent: &str,
    indexes: std::ops::Range<u64>,
    concurrency: usize,
    expected: RunStatus,
) -> Result<(Vec<RunId>, Vec<Duration>), BenchError> {
    let results = in_flight(indexes, concurrency, |j| {
        let runtime = runtime.clone();
        async move {
            let input = format!("Save a note saying hello {j}");
            start_until(&runtime, StartRun::new(&input, BENCH_ACTOR).agent(agent), expected).await
        }
    })
    .await;
    Ok(results.into_iter().collect::<Result<Vec<_>, _>>()?.into_iter().unzip())
}

/// Phase 2 of A for the waiting runs `ids`, `concurrency` in flight; adds the block to `tally`.
async fn approve_block(
    runtime: &Runtime,
    ids: Vec<RunId>,
    concurrency: usize,
    actor: &Actor,
    tally: &mut Tally,
) -> Result<(), BenchError> {
    let cpu0 = cpu_time();
    let started = Instant::now();
    let results = in_flight(ids, concurrency, |id| {
        let runtime = runtime.clone();
        async move { decide_to_completion(&runtime, &id, false, actor).await }
    })
    .await;
    let (latencies, sizes): (Vec<Duration>, Vec<usize>) =
        results.into_iter().collect::<Result<Vec<_>, _>>()?.into_iter().unzip();
    tally.add(started, cpu0, latencies, sizes.iter().sum());
    Ok(())
}

/// One kind's blocks, summed over the rounds.
#[derive(Clone, Default)]
pub(crate) struct Tally {
    pub(crate) wall: f64,
    pub(crate) spent: CpuTime,
    latencies: Vec<Duration>,
    bytes: usize,
    /// Each round's CPU per run (µs) and runs/s.
    rounds: Vec<(f64, f64)>,
}

impl Tally {
    /// Adds a block that started at `started` with the process's CPU time at `cpu0`.
    pub(crate) fn add(&mut self, started: Instant, cpu0: CpuTime, latencies: Vec<Duration>, bytes: usize) {
        let wall = started.elapsed().as_secs_f64();
        let spent = cpu_time().since(cpu0);
        let count = latencies.len() as f64;
        self.rounds.push((spent.total() * 1e6 / count.max(1.0), count / wall.max(1e-9)));
        self.wall += wall;
        self.spent = self.spent.plus(spent);
        self.latencies.extend(latencies);
        self.bytes += bytes;
    }

    /// The phase report of all the rounds together (with the mean suspension bytes when `with_bytes`).
    fn report(&mut self, name: &str, with_bytes: bool) -> PhaseReport {
        self.latencies.sort_unstable();
        let micros = |p: f64| percentile(&self.latencies, p).map_or(0.0, |d| d.as_secs_f64() * 1e6);
        let count = self.latencies.len() as u64;
        let bytes = with_bytes.then(|| self.bytes as f64 / count.max(1) as f64);
        phase_report_spent(name, self.wall, count, (micros(0.50), micros(0.99)), self.spent, bytes)
    }
}

/// The reports of a baseline and a variant, named, the variant's set against the baseline's.
pub(crate) fn pair(
    (baseline_name, mut baseline): (String, Tally),
    (variant_name, mut variant): (String, Tally),
    rounds: u32,
    with_bytes: bool,
) -> [PhaseReport; 2] {
    let of = baseline.report(&baseline_name, with_bytes);
    let mut report = variant.report(&variant_name, with_bytes);
    let by_round = |pick: fn(&(f64, f64)) -> f64| {
        variant.rounds.iter().zip(&baseline.rounds).map(|(v, b)| ratio(pick(v), pick(b))).collect::<Vec<_>>()
    };
    report.versus = Some(Versus {
        of: baseline_name,
        rounds,
        cpu_ratio: ratio(report.cpu_us_per_run, of.cpu_us_per_run),
        rate_ratio: ratio(report.per_sec, of.per_sec),
        cpu_ratios: by_round(|round| round.0),
        rate_ratios: by_round(|round| round.1),
    });
    [of, report]
}

/// `value / baseline`; not a number when the baseline is zero (a phase too short for the CPU clock's
/// ticks of 10 ms).
fn ratio(value: f64, baseline: f64) -> f64 {
    if baseline > 0.0 { value / baseline } else { f64::NAN }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny sitting: the six phases in order, each summed over its rounds, every variant set against
    /// its baseline with a ratio per round, and the end check named on the last.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_grant_variants_run_and_compare_with_their_baselines() {
        let url = crate::scratch_store("bench-grants");
        let reports = grant_costs(&url, 12, 3, 5, 2).await.unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = reports.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "A phase 1, no grants (c=3)",
                "A phase 1, 5 grants matching none (c=3)",
                "A phase 2, no grants (c=3)",
                "A phase 2, 5 grants matching none (c=3)",
                "A allow-gated: start → completed (c=3)",
                "A granted: start → completed, no person (c=3)",
            ]
        );
        for report in &reports {
            assert_eq!(report.count, 24, "{report:?}");
            assert!(report.per_sec > 0.0 && report.p50_us > 0.0 && report.p99_us >= report.p50_us, "{report:?}");
            assert!(report.cpu_us_per_run >= 0.0 && report.cpu_us_per_run.is_finite(), "{report:?}");
        }
        assert!(reports[3].suspension_bytes.is_some_and(|b| b > 100.0), "{:?}", reports[3]);
        for (baseline, variant) in [(0, 1), (2, 3), (4, 5)] {
            assert!(reports[baseline].versus.is_none());
            let versus = reports[variant].versus.as_ref().unwrap_or_else(|| panic!("{:?}", reports[variant]));
            assert_eq!((versus.of.as_str(), versus.rounds), (reports[baseline].name.as_str(), 2));
            assert_eq!((versus.cpu_ratios.len(), versus.rate_ratios.len()), (2, 2));
            assert!(versus.rate_ratio > 0.0 && versus.rate_ratios.iter().all(|r| *r > 0.0), "{versus:?}");
            assert!(versus.cpu_ratio.is_nan() || versus.cpu_ratio > 0.0, "{versus:?}");
        }
        assert_eq!(
            reports[5].check.as_deref(),
            Some(
                "A with grants (c=3): 2 rounds of 12 runs of each kind, 96 runs completed, the tool ran 96 times, \
                 each text once; the runs beside 5 grants matching none waited, the matching grant allowed 24 \
                 calls without a person"
            )
        );
        let table = crate::table(&reports);
        assert!(
            table.contains(
                "A granted: start → completed, no person (c=3) vs A allow-gated: start → completed (c=3): CPU per run ×"
            ),
            "{table}"
        );
    }
}

//! `tollgate bench [A|B|C|D] [--n N] [--store URL] [--concurrency C]`: docs/benchmarks.md's workloads, run
//! by `tollgate-agent-bench` (C runs in flight in the concurrent phases, default 32), and one table of their
//! phases (rates in the `runs/s` column; B's are loop iterations), then each workload's
//! end check on a line of its own, e.g. `check A (c=1): 1000 runs completed, the tool ran 1000 times, each
//! text once — ok`. `--json`: the reports, with the same figures under their keys (`per_sec` is runs/s)
//! and the check on each workload's last phase (`check`); a failed check exits 1 with it named instead.
//!
//! `tollgate bench soak --secs N [--store URL] [--clients N] [--kill-every SECS]`: the soak of
//! `tollgate_agent_bench::soak`, with this very binary as the server it kills; its report as text or JSON, exit 1
//! when a check fails. Its temporary folder (config, workspace, ledger, `serve.log`) is removed when the
//! soak passes and kept, named, when it fails or cannot run.
//!
//! `tollgate bench [A] --nodes N [--store postgres://...] [--concurrency C] [--n N]`: workload A over HTTP
//! only, on N `tollgate serve` children of this very binary sharing the store (`tollgate_agent_bench::nodes`):
//! the table, then one line per node (runs started, decisions, runs resumed, peak RSS, exit code after
//! SIGTERM); `--json` adds `nodes`. N ≥ 2 without a `postgres://` store is a usage error (exit 2). Its
//! temporary folder (on `/dev/shm` when there is one) is removed when the check passes and kept, named,
//! when it fails.
//!
//! `tollgate bench A --notifiers` measures what notifications cost instead of A's usual phases
//! (`tollgate_agent_bench::notify`, in process at c=1 and c=C, beside the SQLite floor), and `tollgate bench
//! A --traces` what tracing costs (`tollgate_agent_bench::traces`, likewise).
//!
//! `tollgate bench A --grants N` measures what grants cost instead of A's usual phases
//! (`tollgate_agent_bench::grants`, in process at c=1 and c=C, beside the same floors as A); `tollgate bench D
//! --apply-to-waiting M` adds to D a grant applied to M of the waiting runs
//! (`tollgate_agent_bench::scale::scale_applying`). Each flag with another workload, or `--nodes`, is a
//! usage error (exit 2), as is M above D's N.
//!
//! This module only chooses stores and sizes and prints; the workloads and their end checks live in
//! `tollgate-agent-bench`. It never touches the configured store: without `--store`, each workload gets a
//! fresh SQLite file (WAL, `synchronous = FULL`, as in production) in a temporary folder that is removed
//! afterwards.

use crate::args::{BenchArgs, BenchCommand, SoakArgs, Workload};
use crate::exit::{CliError, Exit};
use serde_json::json;
use std::io::Write;
use std::time::Duration;
use tollgate_agent_bench::{BenchError, PhaseReport};

/// N for A, C and D when `--n` is not given.
const DEFAULT_RUNS: u64 = 1000;
/// Repeats of B's 50-turn run when `--n` is not given.
const DEFAULT_REPEATS: u64 = 200;
/// The soak's clients when `--clients` does not fit a `usize`.
const CONCURRENCY: usize = 32;
/// A over HTTP gives up after this long.
const HTTP_TIME_LIMIT: Duration = Duration::from_secs(3600);

/// Runs the chosen workloads (all when none is named) and prints the table; exit 1 when one fails.
pub async fn bench(args: &BenchArgs, json: bool, quiet: bool) -> Result<Exit, CliError> {
    if let Some(BenchCommand::Soak(soak_args)) = &args.command {
        return soak(soak_args, json, quiet).await;
    }
    check_grant_flags(args)?;
    let store_url = one_host(args.store.as_deref(), quiet).await?;
    if let Some(nodes) = args.nodes {
        return on_nodes(args, store_url, nodes, json, quiet).await;
    }
    let folder = tempfile::Builder::new()
        .prefix("tollgate-agent-bench-")
        .tempdir()
        .map_err(|e| CliError::failed(format!("cannot create a temporary folder for the bench store: {e}")))?;
    let store = |label: &str| match &store_url {
        Some(url) => url.clone(),
        None => format!("sqlite://{}", folder.path().join(format!("{label}.db")).display()),
    };
    let store_said = match &store_url {
        // Only the scheme: the rest of a URL may hold a password.
        Some(url) => format!("the store at --store ({})", url.split(':').next().unwrap_or_default()),
        None => format!("a fresh SQLite file per workload in {} (WAL, synchronous=FULL)", folder.path().display()),
    };
    let note = |text: String| {
        if !quiet {
            eprintln!("{text}");
        }
    };
    note(format!("bench: {store_said}"));

    let workloads = match args.workload {
        Some(workload) => vec![workload],
        None => vec![Workload::A, Workload::B, Workload::C, Workload::D],
    };
    let mut reports: Vec<PhaseReport> = Vec::new();
    let mut failure: Option<BenchError> = None;
    for workload in workloads {
        let concurrency = usize::try_from(args.concurrency).unwrap_or(usize::MAX);
        let outcome = match (workload, args.grants) {
            (Workload::A, Some(grants)) => grant_costs(args.n, grants, concurrency, &store, &note).await,
            (Workload::A, None) if args.notifiers => notify_costs(args.n, concurrency, &store, &note).await,
            (Workload::A, None) if args.traces => trace_costs(args.n, concurrency, &store, &note).await,
            _ => run_workload(workload, args.n, args.apply_to_waiting, concurrency, &store, &note).await,
        };
        match outcome {
            Ok(done) => reports.extend(done),
            Err(error) => {
                failure = Some(error);
                break;
            }
        }
    }

    // What was measured is printed even when a later workload failed.
    if json {
        let value = json!({"store": store_said, "reports": reports});
        let text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string());
        print_out(&format!("{text}\n"));
    } else if !reports.is_empty() {
        print_out(&tollgate_agent_bench::table(&reports));
    }
    match failure {
        None => Ok(Exit::Done),
        Some(error) => Err(CliError::failed(format!("bench failed: {error}"))),
    }
}

/// `--grants` goes with workload A and `--apply-to-waiting` with D (at most D's N), neither with `--nodes`.
fn check_grant_flags(args: &BenchArgs) -> Result<(), CliError> {
    let alone = args.nodes.is_none();
    if args.grants.is_some() && (args.workload != Some(Workload::A) || !alone) {
        return Err(CliError::usage("--grants goes with workload A in process: tollgate bench A --grants N"));
    }
    if args.notifiers && (args.workload != Some(Workload::A) || !alone || args.grants.is_some()) {
        return Err(CliError::usage("--notifiers goes with workload A in process: tollgate bench A --notifiers"));
    }
    if args.traces && (args.workload != Some(Workload::A) || !alone || args.grants.is_some() || args.notifiers) {
        return Err(CliError::usage("--traces goes with workload A in process: tollgate bench A --traces"));
    }
    if let Some(matching) = args.apply_to_waiting {
        if args.workload != Some(Workload::D) || !alone {
            return Err(CliError::usage(
                "--apply-to-waiting goes with workload D: tollgate bench D --apply-to-waiting M",
            ));
        }
        let runs = args.n.unwrap_or(DEFAULT_RUNS);
        if matching > runs {
            return Err(CliError::usage(format!("--apply-to-waiting {matching} is more than the {runs} waiting runs")));
        }
    }
    Ok(())
}

fn check_store_url(url: Option<&str>) -> Result<(), CliError> {
    if let Some(url) = url
        && !["sqlite:", "postgres://", "postgresql://"].iter().any(|scheme| url.starts_with(scheme))
    {
        return Err(CliError::usage("--store must be a sqlite://FILE or postgres://USER@HOST:PORT/DB URL"));
    }
    Ok(())
}

/// `--store` checked, and a PostgreSQL URL that names several hosts (libpq's `HOST1:PORT,HOST2:PORT`)
/// narrowed to the one a store would use now (the first that will do for `target_session_attrs`):
/// the bench makes scratch schemas and measures the floor on one server, and its nodes share it.
async fn one_host(url: Option<&str>, quiet: bool) -> Result<Option<String>, CliError> {
    check_store_url(url)?;
    let Some(url) = url else { return Ok(None) };
    if !url.starts_with("postgres") {
        return Ok(Some(url.to_owned()));
    }
    let host = tollgate_agent_store::host_url(url)
        .await
        .map_err(|e| CliError::failed(format!("bench: cannot reach the PostgreSQL of --store: {e}")))?;
    if host != url && !quiet {
        eprintln!("bench: measuring on {}, the host of --store that will do", tollgate_agent_store::redact_url(&host));
    }
    Ok(Some(host))
}

/// `tollgate bench --nodes N`: workload A over HTTP on N `tollgate serve` children of this binary.
async fn on_nodes(
    args: &BenchArgs,
    store_url: Option<String>,
    nodes: u64,
    json: bool,
    quiet: bool,
) -> Result<Exit, CliError> {
    if args.workload.is_some_and(|w| w != Workload::A) {
        return Err(CliError::usage("--nodes runs workload A (over HTTP) only"));
    }
    let postgres = store_url.as_deref().is_some_and(|url| url.starts_with("postgres"));
    if nodes >= 2 && !postgres {
        return Err(CliError::usage(format!(
            "--nodes {nodes} needs a postgres://USER@HOST:PORT/DB --store: the nodes share one database \
             (SQLite is one process's file)"
        )));
    }
    let program = std::env::current_exe()
        .map_err(|e| CliError::failed(format!("cannot find this binary to start it as the nodes: {e}")))?;
    // On tmpfs when there is one: each run's note is a file, and its fsyncs should cost nothing there.
    let mut builder = tempfile::Builder::new();
    builder.prefix("tollgate-bench-nodes-");
    let shm = std::path::Path::new("/dev/shm");
    let folder = if shm.is_dir() { builder.tempdir_in(shm) } else { builder.tempdir() }
        .map_err(|e| CliError::failed(format!("cannot create a temporary folder for the nodes: {e}")))?;
    let runs = args.n.unwrap_or(DEFAULT_RUNS);
    let clients = usize::try_from(args.concurrency).unwrap_or(usize::MAX);
    let options = tollgate_agent_bench::nodes::NodesOptions {
        program,
        folder: folder.path().to_owned(),
        store: store_url.clone(),
        nodes: usize::try_from(nodes).unwrap_or(usize::MAX),
        n: runs,
        clients,
        time_limit: HTTP_TIME_LIMIT,
    };
    let store_said = if postgres {
        "PostgreSQL at --store, in a fresh schema".to_owned()
    } else if let Some(url) = &store_url {
        // Only the scheme: the rest of a URL may hold a password.
        format!("the store at --store ({})", url.split(':').next().unwrap_or_default())
    } else {
        "a fresh SQLite file (WAL, synchronous=FULL)".to_owned()
    };
    let note = |text: String| {
        if !quiet {
            eprintln!("{text}");
        }
    };
    note(format!(
        "A: {runs} runs through the HTTP API of {nodes} tollgate serve process(es), {clients} clients on \
         loopback; {store_said}; in {}",
        folder.path().display()
    ));
    let mut report = match tollgate_agent_bench::nodes::approval_cycle_nodes(&options, &note).await {
        Ok(report) => report,
        Err(error) => {
            let kept = folder.keep();
            return Err(CliError::failed(format!(
                "bench failed: {error} (its folder {} is kept: node-J/serve.log, node-J/tollgate.toml)",
                kept.display()
            )));
        }
    };
    // The reference the rates are read against, measured on the same server minutes later.
    if let Some(url) = store_url.as_deref().filter(|_| postgres) {
        note(format!("PostgreSQL floor: {runs} single-row inserts from {clients} connections"));
        match tollgate_agent_bench::postgres_commit_floor(url, runs, clients).await {
            Ok(floor) => report.phases.extend(floor),
            Err(error) => eprintln!("bench: the PostgreSQL floor at c={clients} was not measured: {error}"),
        }
    }
    if json {
        let value = json!({"store": store_said, "reports": report.phases, "nodes": report.nodes});
        let text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string());
        print_out(&format!("{text}\n"));
    } else {
        print_out(&format!("{}{}", tollgate_agent_bench::table(&report.phases), report.text()));
    }
    Ok(Exit::Done)
}

/// `tollgate bench soak`: runs the soak with this binary as its server and prints the report.
async fn soak(args: &SoakArgs, json: bool, quiet: bool) -> Result<Exit, CliError> {
    let store_url = one_host(args.store.as_deref(), quiet).await?;
    let program = std::env::current_exe()
        .map_err(|e| CliError::failed(format!("cannot find this binary to start it as the server: {e}")))?;
    let folder = tempfile::Builder::new()
        .prefix("tollgate-soak-")
        .tempdir()
        .map_err(|e| CliError::failed(format!("cannot create a temporary folder for the soak: {e}")))?;
    let options = tollgate_agent_bench::soak::SoakOptions {
        program,
        folder: folder.path().to_owned(),
        store: store_url.clone(),
        duration: Duration::from_secs(args.secs),
        clients: usize::try_from(args.clients).unwrap_or(CONCURRENCY),
        kill_every: Duration::from_secs(args.kill_every),
    };
    let note = |text: String| {
        if !quiet {
            eprintln!("{text}");
        }
    };
    let store_said = match &store_url {
        Some(url) if url.starts_with("postgres") => "PostgreSQL at --store, in a fresh schema".to_owned(),
        // Only the scheme: the rest of a URL may hold a password.
        Some(url) => format!("the store at --store ({})", url.split(':').next().unwrap_or_default()),
        None => "a fresh SQLite file".to_owned(),
    };
    note(format!(
        "soak: {} s, {} clients, SIGKILL every {} s, {store_said}, in {}",
        args.secs,
        args.clients,
        args.kill_every,
        folder.path().display()
    ));
    let report = match tollgate_agent_bench::soak::soak(&options, &note).await {
        Ok(report) => report,
        Err(error) => {
            let kept = folder.keep();
            return Err(CliError::failed(format!(
                "soak could not run: {error} (its folder {} is kept)",
                kept.display()
            )));
        }
    };
    if json {
        let value = serde_json::to_value(&report).unwrap_or_default();
        let text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string());
        print_out(&format!("{text}\n"));
    } else {
        print_out(&report.text());
    }
    let failures = report.failures();
    if failures.is_empty() {
        return Ok(Exit::Done);
    }
    let kept = folder.keep();
    Err(CliError::failed(format!(
        "soak failed: {} (its folder {} is kept: serve.log, soak.toml, workspace/ledger.txt)",
        failures.join(", "),
        kept.display()
    )))
}

/// `tollgate bench A --grants N`: what grants cost at c=1 and c=`concurrency`, each level beside the
/// same floors as workload A.
async fn grant_costs(
    n: Option<u64>,
    grants: u64,
    concurrency: usize,
    store: &impl Fn(&str) -> String,
    note: &impl Fn(String),
) -> Result<Vec<PhaseReport>, BenchError> {
    let runs = n.unwrap_or(DEFAULT_RUNS);
    let rounds = tollgate_agent_bench::grants::ROUNDS;
    let mut reports = Vec::new();
    let levels = if concurrency == 1 { vec![1] } else { vec![1, concurrency] };
    for concurrency in levels {
        note(format!(
            "A with grants: {rounds} alternating rounds of {runs} runs per kind in process, {concurrency} in flight, \
             {grants} grants matching none"
        ));
        let url = store(&format!("a-grants-c{concurrency}"));
        reports.extend(tollgate_agent_bench::grants::grant_costs(&url, runs, concurrency, grants, rounds).await?);
        if concurrency == 1 {
            reports.extend(tollgate_agent_bench::sqlite_commit_floor(&url, runs)?);
        }
        match tollgate_agent_bench::postgres_commit_floor(&url, runs, concurrency).await {
            Ok(floor) => reports.extend(floor),
            Err(error) => eprintln!("bench: the PostgreSQL floor at c={concurrency} was not measured: {error}"),
        }
    }
    Ok(reports)
}

/// `tollgate bench A --notifiers`: what notifications cost at c=1 and c=`concurrency`, each level beside
/// the SQLite floor.
async fn notify_costs(
    n: Option<u64>,
    concurrency: usize,
    store: &impl Fn(&str) -> String,
    note: &impl Fn(String),
) -> Result<Vec<PhaseReport>, BenchError> {
    let rounds = tollgate_agent_bench::notify::ROUNDS;
    let runs = n.unwrap_or(DEFAULT_RUNS);
    let levels = phase_1_levels(concurrency).into_iter().map(|c| {
        note(format!(
            "A with notifiers: {rounds} alternating rounds of {runs} runs per side in process, {c} in flight, two \
             notifiers (Slack, SMTP) on one side"
        ));
        (c, store(&format!("a-notify-c{c}")))
    });
    beside_the_floor(runs, levels, async |url, c| {
        tollgate_agent_bench::notify::notify_costs(url, runs, c, rounds).await
    })
    .await
}

/// `tollgate bench A --traces`: what tracing costs at c=1 and c=`concurrency`, each level beside the
/// SQLite floor.
async fn trace_costs(
    n: Option<u64>,
    concurrency: usize,
    store: &impl Fn(&str) -> String,
    note: &impl Fn(String),
) -> Result<Vec<PhaseReport>, BenchError> {
    let rounds = tollgate_agent_bench::traces::ROUNDS;
    let runs = n.unwrap_or(DEFAULT_RUNS);
    let levels = phase_1_levels(concurrency).into_iter().map(|c| {
        note(format!(
            "A with tracing: {rounds} rounds of {runs} runs per side in process, taking turns, {c} in flight; \
             tracing off, on with 100 % and with 1 % sampled, the spans sent over OTLP/HTTP to a loopback receiver"
        ));
        (c, store(&format!("a-traces-c{c}")))
    });
    beside_the_floor(runs, levels, async |url, c| tollgate_agent_bench::traces::trace_costs(url, runs, c, rounds).await)
        .await
}

/// The levels of concurrency A's comparisons measure: one run at a time, then `concurrency`.
fn phase_1_levels(concurrency: usize) -> Vec<usize> {
    if concurrency == 1 { vec![1] } else { vec![1, concurrency] }
}

/// `measure(url, c)` at each level (`c`, a store URL) in turn, the SQLite floor of `runs` commits after
/// the one at c=1.
async fn beside_the_floor(
    runs: u64,
    levels: impl Iterator<Item = (usize, String)>,
    measure: impl AsyncFn(&str, usize) -> Result<Vec<PhaseReport>, BenchError>,
) -> Result<Vec<PhaseReport>, BenchError> {
    let mut reports = Vec::new();
    for (concurrency, url) in levels {
        reports.extend(measure(&url, concurrency).await?);
        if concurrency == 1 {
            reports.extend(tollgate_agent_bench::sqlite_commit_floor(&url, runs)?);
        }
    }
    Ok(reports)
}

async fn run_workload(
    workload: Workload,
    n: Option<u64>,
    apply_to_waiting: Option<u64>,
    concurrency: usize,
    store: &impl Fn(&str) -> String,
    note: &impl Fn(String),
) -> Result<Vec<PhaseReport>, BenchError> {
    let runs = n.unwrap_or(DEFAULT_RUNS);
    let mut reports = Vec::new();
    match workload {
        Workload::A | Workload::C => {
            let (label, deny) = if workload == Workload::A { ("A", false) } else { ("C", true) };
            let levels = if concurrency == 1 { vec![1] } else { vec![1, concurrency] };
            for concurrency in levels {
                note(format!("{label}: {runs} runs in process, {concurrency} in flight"));
                let url = store(&format!("{}-c{concurrency}", label.to_lowercase()));
                reports.extend(tollgate_agent_bench::approval_cycle(&url, runs, concurrency, deny).await?);
                if concurrency == 1 {
                    reports.extend(tollgate_agent_bench::sqlite_commit_floor(&url, runs)?);
                }
                // The reference row only: a server that refuses its connections loses no workload's figures.
                match tollgate_agent_bench::postgres_commit_floor(&url, runs, concurrency).await {
                    Ok(floor) => reports.extend(floor),
                    Err(error) => eprintln!("bench: the PostgreSQL floor at c={concurrency} was not measured: {error}"),
                }
            }
            if workload == Workload::A {
                note(format!("A: {runs} runs through the HTTP API, {concurrency} clients on loopback"));
                let url = store("a-http");
                reports.extend(
                    tollgate_agent_bench::http::approval_cycle_http(&url, runs, concurrency, HTTP_TIME_LIMIT).await?,
                );
            }
        }
        Workload::B => {
            let repeats = n.unwrap_or(DEFAULT_REPEATS);
            note(format!("B: {repeats} runs of 50 tool turns, no store"));
            reports.push(tollgate_agent_bench::loop_overhead(repeats).await?);
        }
        Workload::D => {
            let matching = apply_to_waiting.unwrap_or(0);
            let granted = if matching > 0 { format!(", a grant applied to {matching} of them") } else { String::new() };
            note(format!(
                "D: filling the store with {runs} waiting runs, then timing the waiting list{granted} and {} approval \
                 cycles",
                tollgate_agent_bench::scale::SAMPLE.min(usize::try_from(runs).unwrap_or(usize::MAX))
            ));
            let sample = tollgate_agent_bench::scale::SAMPLE;
            reports.extend(tollgate_agent_bench::scale::scale_applying(&store("d"), runs, sample, matching).await?);
        }
    }
    Ok(reports)
}

fn print_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

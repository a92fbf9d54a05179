//! Workload A of docs/benchmarks.md over HTTP, spread over N `tollgate serve` processes (nodes) that share
//! one store (`tollgate bench A --nodes N`): every resume happens on a node that did not start the run.
//!
//! **The nodes.** N child processes, `PROGRAM --config node-J/tollgate.toml serve --addr 127.0.0.1:PORT`
//! (the CLI passes its own binary), each on a free loopback port, started one after the other (the first
//! creates the tables) and waited for (`GET /healthz`), with every `TOLLGATE_*` variable removed from
//! their environment (so `TOLLGATE_BENCH_PRIVACY` and `TOLLGATE_BENCH_DATA_KEY` do not apply here). Each
//! has a config of its own naming the same store, its own workspace (`node-J/workspace`) and one agent,
//! `bench`, on the scripted provider: turn 1 is ONE call `fs_write({"path": "notes/INPUT.txt",
//! "content": INPUT})` (gate `ask`), turn 2 answers `done`. The tool runs in another process than the
//! bench, so workload A's in-memory `write_note` becomes a built-in tool writing one small file (the CLI
//! puts the folder on tmpfs, `/dev/shm`, when there is one, where its fsyncs cost nothing). Output goes to
//! `node-J/serve.log`. At the end each node gets SIGTERM and is waited for (SIGKILL after
//! [`STOP_LIMIT`]); a node that does not exit 0 fails the workload.
//!
//! **The store.** N ≥ 2 needs PostgreSQL: a `postgres://` URL gets a fresh schema of its own
//! (`tollgate_bench_PID_NANOS`, as the soak does), dropped at the end when the workload passed and kept,
//! named, when it failed. With one node the store may also be SQLite (`None`: a fresh file in the folder).
//!
//! **The load.** As [`crate::http`]: phase 1 sends run i's `POST /v1/runs` (`wait: true`, answered once
//! its suspension is committed) to node `i % N`; phase 2 sends its `POST /v1/runs/{id}/decisions`
//! (approve, `wait: true`, answered once the run completed) to node `(i + 1) % N`, which loads the run
//! from the store, claims it and runs the tool itself. `clients` requests are in flight in each phase.
//!
//! **The figures.** Per phase those of the other workloads; latencies are per request, seen by the client;
//! CPU time is the bench process's and every node's together (from `/proc/PID/stat`); peak RSS is the
//! largest node's (`VmHWM`). Per node: runs started through it, decisions sent to it, runs it resumed
//! (the notes in its workspace: the tool runs where the run resumed), its peak RSS and exit code.
//!
//! **The checks.** N completed runs, each with exactly one `tool_started` event (the tool ran once),
//! and run i's note, holding `hello {i}`, in the workspace of node `(i + 1) % N` and nowhere else.

use crate::http::{REQUEST_TIMEOUT, approve_until_completed, before_deadline, send, served_id};
use crate::soak::{ServeChild, drop_schema, free_port, fresh_schema, is_postgres, proc_status_kib, toml_string};
use crate::{BenchError, CpuTime, PhaseReport, cpu_time, cpu_time_of, err, report};
use serde::Serialize;
use serde_json::json;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tollgate_agent_core::{EventKind, RunId, RunStatus, RunStore};

/// The agent the nodes serve.
pub const AGENT: &str = "bench";
/// How long a node may take to exit after SIGTERM before it gets SIGKILL.
pub const STOP_LIMIT: Duration = Duration::from_secs(10);
/// The notes' folder in each node's workspace.
const NOTES: &str = "notes";

/// What to run.
#[derive(Clone, Debug)]
pub struct NodesOptions {
    /// The `tollgate` binary to run as `serve` (the CLI passes its own).
    pub program: PathBuf,
    /// An empty folder for the nodes' configs, workspaces and logs (and the SQLite file of one node).
    pub folder: PathBuf,
    /// The store: a `postgres://` URL gets a fresh schema; `None` is a fresh SQLite file in `folder`
    /// (one node only); any other URL is used as given (one node only).
    pub store: Option<String>,
    /// The number of `tollgate serve` processes (at least 1).
    pub nodes: usize,
    /// Runs.
    pub n: u64,
    /// Requests in flight.
    pub clients: usize,
    /// The whole workload gives up with an error after this long.
    pub time_limit: Duration,
}

/// The phases and what each node did.
#[derive(Clone, Debug, Serialize)]
pub struct NodesReport {
    /// Phase 1 and phase 2, the check on the last.
    pub phases: Vec<PhaseReport>,
    /// One per node, in order.
    pub nodes: Vec<NodeReport>,
}

/// One node's share.
#[derive(Clone, Debug, Default, Serialize)]
pub struct NodeReport {
    /// Its index, 0 to N - 1.
    pub node: usize,
    /// Its address, `127.0.0.1:PORT`.
    pub addr: String,
    /// Its process id (reaped by the end).
    pub pid: u32,
    /// Runs started through it (phase 1 requests it answered).
    pub started: u64,
    /// Decisions sent to it (phase 2 requests it answered).
    pub decided: u64,
    /// Runs it resumed: its tool calls (the notes in its workspace).
    pub resumed: u64,
    /// Its peak RSS (`VmHWM`), MiB.
    pub peak_rss_mib: f64,
    /// Its exit code after SIGTERM (`None`: killed after [`STOP_LIMIT`]).
    pub exit_code: Option<i32>,
}

impl NodesReport {
    /// One line per node.
    pub fn text(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                format!(
                    "node {} {}: started {}, decided {}, resumed {}, peak RSS {:.1} MiB, exit {}\n",
                    n.node,
                    n.addr,
                    n.started,
                    n.decided,
                    n.resumed,
                    n.peak_rss_mib,
                    n.exit_code.map_or("killed".to_owned(), |c| c.to_string())
                )
            })
            .collect()
    }
}

/// Runs workload A over HTTP on `options.nodes` child `tollgate serve` processes; `note` receives
/// progress lines.
pub async fn approval_cycle_nodes(options: &NodesOptions, note: &dyn Fn(String)) -> Result<NodesReport, BenchError> {
    if options.nodes == 0 {
        return Err(BenchError("workload A on nodes needs at least one node".into()));
    }
    let postgres = options.store.as_deref().is_some_and(is_postgres);
    if options.nodes > 1 && !postgres {
        return Err(BenchError("workload A on 2 or more nodes needs a postgres:// store they share".into()));
    }
    let (url, schema) = match &options.store {
        None => (format!("sqlite://{}", options.folder.join("bench.db").display()), None),
        Some(base) if postgres => {
            let schema = fresh_schema(base, "tollgate_bench").await?;
            (schema.url(), Some(schema))
        }
        Some(url) => (url.clone(), None),
    };
    let outcome = on_nodes(options, &url, note).await;
    let Some(schema) = schema else { return outcome };
    let name = schema.name().to_owned();
    match outcome {
        Ok(report) => {
            if let Err(e) = drop_schema(schema).await {
                note(format!("cannot drop the PostgreSQL schema {name}: {e}"));
            }
            Ok(report)
        }
        Err(e) => Err(BenchError(format!("{e} (the PostgreSQL schema {name} is kept)"))),
    }
}

async fn on_nodes(options: &NodesOptions, url: &str, note: &dyn Fn(String)) -> Result<NodesReport, BenchError> {
    let (nodes, clients, n) = (options.nodes, options.clients.max(1), options.n);
    let deadline = Instant::now() + options.time_limit;
    let folder = &options.folder;
    let script = folder.join("script.json");
    // Run i's note holds `hello {i}`, the part of its input after `saying ` (BENCH.md's write_note text).
    let path = format!("{NOTES}/{{{{input_after:saying }}}}.txt");
    let call = json!({"name": "fs_write", "arguments": {"path": path, "content": "{{input_after:saying }}"}});
    let turns = json!({"turns": [{"tool_calls": [call]}, {"text": "done"}]});
    std::fs::write(&script, turns.to_string()).map_err(err)?;
    let http =
        reqwest::Client::builder().timeout(REQUEST_TIMEOUT).pool_max_idle_per_host(clients).build().map_err(err)?;

    let mut children = Vec::with_capacity(nodes);
    let mut workspaces = Vec::with_capacity(nodes);
    for j in 0..nodes {
        let dir = folder.join(format!("node-{j}"));
        let workspace = dir.join("workspace");
        std::fs::create_dir_all(workspace.join(NOTES)).map_err(err)?;
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let config = write_config(&dir, &workspace, url, addr, &script)?;
        let log = dir.join("serve.log");
        let mut child = ServeChild::new(options.program.clone(), config, addr, log.clone());
        // On an error the children started so far are killed as they are dropped.
        child.start(&http).await?;
        note(format!("A/HTTP×{nodes}: node {j}: tollgate serve on http://{addr} (log {})", log.display()));
        children.push((addr, child));
        workspaces.push(workspace);
    }
    let bases: Vec<String> = children.iter().map(|(addr, _)| format!("http://{addr}")).collect();
    let pids: Vec<u32> = children.iter().filter_map(|(_, child)| child.pid()).collect();
    let store = tollgate_agent_store::open(url).await.map_err(err)?;

    let outcome = phases(&http, &bases, &pids, store.as_ref(), n, clients, deadline).await;

    let mut reports = Vec::with_capacity(nodes);
    for (j, (addr, mut child)) in children.into_iter().enumerate() {
        let peak = child.pid().and_then(|pid| proc_status_kib(pid, "VmHWM:")).map_or(0.0, |kib| kib as f64 / 1024.0);
        let pid = child.pid().unwrap_or_default();
        let exit_code = child.terminate(STOP_LIMIT).await;
        reports.push(NodeReport {
            pid,
            node: j,
            addr: addr.to_string(),
            peak_rss_mib: peak,
            exit_code,
            ..NodeReport::default()
        });
    }
    let (mut phases, started, decided) = outcome?;
    for (j, report) in reports.iter_mut().enumerate() {
        report.started = started[j];
        report.decided = decided[j];
        report.resumed = std::fs::read_dir(workspaces[j].join(NOTES)).map_err(err)?.count() as u64;
        if report.exit_code != Some(0) {
            return Err(BenchError(format!(
                "node {j} did not exit 0 after SIGTERM ({}); see {}",
                report.exit_code.map_or(format!("killed after {STOP_LIMIT:?}"), |c| format!("exit {c}")),
                folder.join(format!("node-{j}")).join("serve.log").display()
            )));
        }
    }
    for phase in &mut phases {
        phase.peak_rss_mib = reports.iter().map(|r| r.peak_rss_mib).fold(0.0, f64::max);
    }

    // Run i's note is in the workspace of node (i + 1) % N, holding `hello {i}`; with exactly N notes in all,
    // none is anywhere else.
    for i in 0..n {
        let text = format!("hello {i}");
        let path =
            workspaces[usize::try_from((i + 1) % nodes as u64).map_err(err)?].join(NOTES).join(format!("{text}.txt"));
        match std::fs::read_to_string(&path) {
            Ok(held) if held == text => {}
            Ok(held) => return Err(BenchError(format!("{} holds {held:?}, not {text:?}", path.display()))),
            Err(e) => return Err(BenchError(format!("run {i}'s note {}: {e}", path.display()))),
        }
    }
    let notes: u64 = reports.iter().map(|r| r.resumed).sum();
    if notes != n {
        return Err(BenchError(format!("the nodes' workspaces hold {notes} notes; expected {n}")));
    }
    if let Some(last) = phases.last_mut() {
        let placement = if nodes > 1 {
            format!("; each started on node i % {nodes} and resumed on node (i + 1) % {nodes}")
        } else {
            String::new()
        };
        last.check = Some(format!(
            "A/HTTP×{nodes} (c={clients}): {n} runs completed, {}{placement}",
            crate::tool_ran_once_each(n)
        ));
    }
    Ok(NodesReport { phases, nodes: reports })
}

/// Run i's input, as in the other workloads.
fn input(i: u64) -> String {
    format!("Save a note saying hello {i}")
}

/// The two phases; answers them and, per node, the runs started and the decisions sent through it.
async fn phases(
    http: &reqwest::Client,
    bases: &[String],
    pids: &[u32],
    store: &dyn RunStore,
    n: u64,
    clients: usize,
    deadline: Instant,
) -> Result<(Vec<PhaseReport>, Vec<u64>, Vec<u64>), BenchError> {
    let nodes = bases.len() as u64;
    let node = |i: u64| usize::try_from(i % nodes).unwrap_or(0);

    // Phase 1: run i starts on node i % N; each answers once its suspension is committed.
    let (cpu0, nodes0) = (cpu_time(), nodes_cpu(pids));
    let started = Instant::now();
    let results: Vec<Result<(u64, RunId, String, Duration), BenchError>> = crate::in_flight(0..n, clients, |i| {
        let url = format!("{}/v1/runs", bases[node(i)]);
        async move {
            before_deadline(deadline)?;
            let t = Instant::now();
            let body = json!({"agent": AGENT, "input": input(i), "wait": true});
            let run = send(http.post(url).json(&body), 201).await?;
            if run["status"] != RunStatus::WaitingForApproval.as_str() {
                return Err(BenchError(format!("run {} answered {} instead of waiting", run["id"], run["status"])));
            }
            let digest = run["pending"]["turn_digest"].as_str().unwrap_or_default().to_owned();
            Ok((i, served_id(&run), digest, t.elapsed()))
        }
    })
    .await;
    let mut held = Vec::with_capacity(results.len());
    let mut latencies = Vec::with_capacity(results.len());
    let mut started_on = vec![0u64; bases.len()];
    for result in results {
        let (i, id, digest, latency) = result?;
        started_on[node(i)] += 1;
        held.push((i, id, digest));
        latencies.push(latency);
    }
    let label = format!("A/HTTP×{nodes}");
    let mut phase1 =
        report(&format!("{label} phase 1: POST /v1/runs → waiting (c={clients})"), started, cpu0, latencies, None);
    add_nodes_cpu(&mut phase1, pids, &nodes0);

    // Not timed: the mean size of the persisted suspensions, read from the store.
    let mut bytes = 0usize;
    for (_, id, _) in &held {
        let run = store.get(id).await.map_err(err)?;
        bytes += run.held_turn().map_or(0, |p| p.suspension.as_str().len());
    }
    let mean_bytes = bytes as f64 / held.len().max(1) as f64;
    let ids: Vec<RunId> = held.iter().map(|(_, id, _)| id.clone()).collect();

    // Phase 2: run i's decision goes to node (i + 1) % N; the answer comes once the run completed.
    let (cpu0, nodes0) = (cpu_time(), nodes_cpu(pids));
    let started = Instant::now();
    let results: Vec<Result<(u64, Duration), BenchError>> = crate::in_flight(held, clients, |(i, id, digest)| {
        let url = format!("{}/v1/runs/{id}/decisions", bases[node(i + 1)]);
        async move {
            before_deadline(deadline)?;
            let t = Instant::now();
            approve_until_completed(http.post(url), &id, &digest).await?;
            Ok((i, t.elapsed()))
        }
    })
    .await;
    let mut latencies = Vec::with_capacity(results.len());
    let mut decided_on = vec![0u64; bases.len()];
    for result in results {
        let (i, latency) = result?;
        decided_on[node(i + 1)] += 1;
        latencies.push(latency);
    }
    let mut phase2 = report(
        &format!("{label} phase 2: POST decisions → completed (c={clients})"),
        started,
        cpu0,
        latencies,
        Some(mean_bytes),
    );
    add_nodes_cpu(&mut phase2, pids, &nodes0);

    // Not timed: every run completed in the store, its tool started exactly once.
    for id in &ids {
        let run = store.get(id).await.map_err(err)?;
        if run.status() != RunStatus::Completed {
            return Err(BenchError(format!("run {id} is {} in the store, not completed", run.status())));
        }
        let events = tollgate_agent_core::store::events_after(store, id, 0).await.map_err(err)?;
        let starts = events.iter().filter(|e| e.kind == EventKind::ToolStarted).count();
        if starts != 1 {
            return Err(BenchError(format!("run {id} has {starts} tool_started events; expected 1")));
        }
    }
    Ok((vec![phase1, phase2], started_on, decided_on))
}

/// The nodes' CPU time so far, one each.
fn nodes_cpu(pids: &[u32]) -> Vec<CpuTime> {
    pids.iter().map(|&pid| cpu_time_of(pid)).collect()
}

/// Adds the nodes' CPU time since `before` to a phase's (the bench process's own).
fn add_nodes_cpu(phase: &mut PhaseReport, pids: &[u32], before: &[CpuTime]) {
    let per_run = |seconds: f64| seconds * 1e6 / phase.count.max(1) as f64;
    let (mut user, mut system) = (0.0, 0.0);
    for (now, then) in nodes_cpu(pids).iter().zip(before) {
        user += now.user - then.user;
        system += now.system - then.system;
    }
    phase.cpu_us_per_run += per_run(user + system);
    phase.sys_us_per_run += per_run(system);
}

/// Writes node J's `tollgate.toml` into `dir`; returns its path.
fn write_config(
    dir: &Path,
    workspace: &Path,
    url: &str,
    addr: SocketAddr,
    script: &Path,
) -> Result<PathBuf, BenchError> {
    let config = format!(
        "[store]\nurl = {url}\n\n[server]\naddr = \"{addr}\"\n\n[workspace]\nroot = {workspace}\n\n\
         [[providers]]\nname = \"scripted\"\nkind = \"scripted\"\nscript = {script}\n\n\
         [[agents]]\nname = \"{AGENT}\"\nprovider = \"scripted\"\ntools = [\"fs_write\"]\n",
        url = toml_string(url),
        workspace = toml_string(&workspace.display().to_string()),
        script = toml_string(&script.display().to_string()),
    );
    let path = dir.join("tollgate.toml");
    std::fs::write(&path, config).map_err(err)?;
    Ok(path)
}

//! The soak (`tollgate bench soak`): a real `tollgate serve` process under load from many HTTP clients,
//! killed with SIGKILL again and again on the same database, then audited run by run. Loopback only and
//! bounded in time: the load lasts `duration`, settling at most [`SETTLE_LIMIT`].
//!
//! **The server.** A child process, `PROGRAM --config soak.toml serve --addr 127.0.0.1:PORT` (the CLI
//! passes its own binary), on a free loopback port chosen once and kept across restarts, with every
//! `TOLLGATE_*` variable removed from its environment so only the soak's config applies. The config sets
//! the store, `[server] lease = "2s"` ([`LEASE`], so a killed process's runs are taken over by the next
//! one within seconds), and one agent, `soak`, on the scripted provider. Its output goes to `serve.log`
//! in the soak's folder. Every `kill_every` the child gets SIGKILL (`Child::kill`), is reaped, and a new
//! one is started on the same database and waited for (`GET /healthz`).
//!
//! **The store.** By default a fresh SQLite file in the soak's folder. A `postgres://` URL gets a fresh
//! schema of its own (`tollgate_soak_PID_NANOS`, through `options[search_path]`, as the store's tests
//! isolate themselves), dropped at the end when every check passed and kept, named, when one failed.
//! Any other URL is used as given. Whatever it is, it must hold no run when the soak starts: the audit
//! counts every run in it.
//!
//! **Counting executions.** The agent's script makes one turn of two calls to the built-in `shell` tool
//! (gate `ask`), `sh -c 'echo "$0 call_N" >> ledger.txt' INPUT`, then answers `done`. Each run's input
//! is a token unique to one start request (`soak-CLIENT-N`; a start that failed is never sent again with
//! the same token), so every line of the workspace's `ledger.txt` names one run (by its input) and one of
//! its calls. The file is appended by the tool's own process (`O_APPEND`, one short write per line), so a
//! line survives the server's death: a call that ran and whose server was then killed before
//! `tool_finished` was committed still left its line. The ledger is the ground truth of what ran.
//!
//! **The load.** `clients` tokio tasks share one HTTP client; each repeats a random operation: start a
//! run (30 %, `wait` true or false), decide the held calls of a waiting run found by listing or by reading
//! one it saw created (40 %: approve all, deny all, or one call only; by the turn digest the API served),
//! read (25 %: the list, one run, its events), or cancel a run it saw created (5 %). A request that fails
//! to connect, or whose answer cannot be read, counts as a connection error, never as a success; the
//! client then backs off (20 ms doubling to 500 ms) while the server is down. Only a `201` with an id
//! makes a run "seen created".
//!
//! **The end.** The clients stop, the child is killed once more (counted) and restarted, and the soak
//! settles: until no run is `queued`, `running` or `waiting_for_approval` (at most [`SETTLE_LIMIT`], or
//! the soak's duration when longer), it lists the unfinished runs and approves the undecided calls of
//! each waiting one, in-doubt calls included, `clients` at a time, while the server takes over the runs
//! of the dead processes. Then the child's RSS is sampled
//! a last time, the child is stopped, and the store is opened directly and audited:
//! - **lost**: runs seen created that the store does not hold;
//! - **stuck**: runs not terminal;
//! - **chains**: every run's log verifies against its recorded head ([`tollgate_agent_core::verify_chain`]);
//!   a run whose stored data cannot be read is **unreadable**;
//! - **duplicated**: calls that ran (ledger lines) more often than their `tool_started` events. Each
//!   execution must be preceded by its own durable `tool_started` (persist before the side effect), and
//!   a call in doubt after a crash runs again only when a person approves it again, which commits a new
//!   `tool_started`. So a call that ran twice after an in-doubt re-approval is not a duplicate (it is
//!   counted as **re-executed in doubt**, as the design allows); one that ran twice on one `tool_started`
//!   is;
//! - **unaccounted**: ledger lines naming no stored run.
//!
//! The soak passes when lost, stuck, duplicated, unaccounted, broken and unreadable chains are all 0.
//! The child's RSS (`VmRSS` of `/proc/PID/status`) is sampled through the load and reported as start
//! (the first child), peak, and end (the last child, once settled); each restart begins a new process.

use crate::{BenchError, err};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tollgate_agent_core::{CallId, EventKind, RunId, RunQuery, RunStatus, verify_chain_with};
use tollgate_agent_store::ScratchSchema;

/// The child's `[server] lease`: short, so runs of a killed process are taken over during the soak.
pub const LEASE: Duration = Duration::from_secs(2);
/// How long settling may take before the runs still unfinished are counted stuck: this, or the soak's
/// duration when longer (a long soak may leave thousands of runs waiting, each to be approved and run).
pub const SETTLE_LIMIT: Duration = Duration::from_secs(60);
/// One request's bound (a `wait: true` request may wait for a run taken over after a kill).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a started child may take to answer `GET /healthz`.
const READY_LIMIT: Duration = Duration::from_secs(30);
/// Attempts to start a child (the port may be briefly unavailable after a kill).
const START_ATTEMPTS: u32 = 3;
/// A client's backoff after a connection error: from this, doubling…
const BACKOFF_MIN: Duration = Duration::from_millis(20);
/// …up to this.
const BACKOFF_MAX: Duration = Duration::from_millis(500);
/// Clients pick the runs they read, decide or cancel among the last this many seen created.
const RECENT: usize = 64;
/// The ledger of executions, in the workspace.
const LEDGER: &str = "ledger.txt";
/// The agent's name.
const AGENT: &str = "soak";
/// Examples kept per kind of problem in the report.
const EXAMPLES: usize = 5;

/// What to soak.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    /// The `tollgate` binary to run as `serve` (the CLI passes its own).
    pub program: PathBuf,
    /// An empty folder for the config, the workspace, the ledger, the log and the default SQLite file.
    pub folder: PathBuf,
    /// The store: `None` for a fresh SQLite file in `folder`; a `postgres://` URL gets a fresh schema.
    pub store: Option<String>,
    /// How long the clients run.
    pub duration: Duration,
    /// Concurrent HTTP clients.
    pub clients: usize,
    /// How often the child is killed (at least one second).
    pub kill_every: Duration,
}

/// What the soak did and found. [`SoakReport::failures`] lists what makes it fail.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SoakReport {
    /// The store's scheme (`sqlite`, `postgres`).
    pub store: String,
    /// How long the clients ran, seconds.
    pub secs: f64,
    /// Concurrent clients.
    pub clients: usize,
    /// Seconds between kills.
    pub kill_every_secs: u64,
    /// The child's lease, seconds.
    pub lease_secs: u64,
    /// Runs in the store at the end.
    pub runs: u64,
    /// Runs at the end by status.
    pub statuses: BTreeMap<String, u64>,
    /// Runs whose creation a client saw (a `201` with an id).
    pub runs_seen_created: u64,
    /// SIGKILLs sent to the child (the one before settling included).
    pub kills: u64,
    /// What the clients' requests got.
    pub requests: RequestCounts,
    /// Tool executions in the ledger.
    pub tool_executions: u64,
    /// Calls put back to waiting in doubt after a crash (`approval_requested` with `in_doubt`).
    pub in_doubt: u64,
    /// Calls that ran twice because a person approved them again in doubt (allowed by the design).
    pub reexecuted_in_doubt: u64,
    /// Runs seen created that the store does not hold.
    pub lost: u64,
    /// Calls that ran more often than their `tool_started` events.
    pub duplicated: u64,
    /// Ledger lines naming no stored run.
    pub unaccounted: u64,
    /// Runs not terminal at the end.
    pub stuck: u64,
    /// Runs whose hash chain verifies against the recorded head.
    pub chains_verified: u64,
    /// Runs whose hash chain does not.
    pub chains_broken: u64,
    /// Runs whose stored data cannot be read.
    pub unreadable: u64,
    /// How long settling took, seconds.
    pub settle_secs: f64,
    /// The child's resident set size over time.
    pub rss: RssReport,
    /// Examples of what went wrong (failures) or looked odd (unexpected answers), at most a few per kind.
    pub problems: Vec<String>,
    /// The PostgreSQL schema kept for inspection after a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_schema: Option<String>,
}

/// The clients' requests by outcome.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RequestCounts {
    /// `201` starts (each a run seen created).
    pub starts: u64,
    /// Starts that failed to connect or whose answer was lost: the run may or may not exist.
    pub starts_unknown: u64,
    /// `200` decisions.
    pub decisions: u64,
    /// `200` cancels.
    pub cancels: u64,
    /// `200` reads.
    pub reads: u64,
    /// `409`: a stale digest, a call already decided, a run already finished (races between clients).
    pub conflicts: u64,
    /// Requests that could not connect or whose answer could not be read (the server was down).
    pub connection_errors: u64,
    /// Any other answer (listed in `problems`).
    pub unexpected: u64,
}

/// The child's RSS samples.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RssReport {
    /// The first sample (the first child), MiB.
    pub start_mib: f64,
    /// The largest sample, MiB.
    pub peak_mib: f64,
    /// The last sample (the last child, once settled), MiB.
    pub end_mib: f64,
    /// Every sample.
    pub samples: Vec<RssSample>,
}

/// One RSS sample of the child.
#[derive(Clone, Debug, Serialize)]
pub struct RssSample {
    /// Seconds since the load began.
    pub at_secs: f64,
    /// Which child: 1 for the first, +1 per restart.
    pub child: u32,
    /// `VmRSS`, MiB.
    pub mib: f64,
}

impl SoakReport {
    /// What makes the soak fail, one line each; empty when it passed.
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        let mut check = |count: u64, what: &str| {
            if count > 0 {
                failures.push(format!("{count} {what}"));
            }
        };
        check(self.lost, "lost run(s)");
        check(self.duplicated, "duplicated call(s)");
        check(self.unaccounted, "ledger line(s) naming no run");
        check(self.stuck, "stuck run(s)");
        check(self.chains_broken, "broken hash chain(s)");
        check(self.unreadable, "unreadable run(s)");
        failures
    }

    /// The report as text, ending with the check line.
    pub fn text(&self) -> String {
        let statuses: Vec<String> = self.statuses.iter().map(|(s, n)| format!("{s} {n}")).collect();
        let r = &self.requests;
        let mut out = String::new();
        let mut line = |label: &str, value: String| out.push_str(&format!("{label:<20} {value}\n"));
        line(
            "soak",
            format!(
                "{:.0} s, {} clients, SIGKILL every {} s, lease {} s, store {}",
                self.secs, self.clients, self.kill_every_secs, self.lease_secs, self.store
            ),
        );
        line("runs", format!("{} ({})", self.runs, statuses.join(", ")));
        line("runs seen created", self.runs_seen_created.to_string());
        line("kills", self.kills.to_string());
        line(
            "requests",
            format!(
                "starts {} (+{} unknown), decisions {}, cancels {}, reads {}, conflicts {}, connection errors {}, unexpected {}",
                r.starts,
                r.starts_unknown,
                r.decisions,
                r.cancels,
                r.reads,
                r.conflicts,
                r.connection_errors,
                r.unexpected
            ),
        );
        line(
            "tool executions",
            format!(
                "{} (calls in doubt {}, re-executed on approval {})",
                self.tool_executions, self.in_doubt, self.reexecuted_in_doubt
            ),
        );
        line("lost", self.lost.to_string());
        line("duplicated", self.duplicated.to_string());
        line("unaccounted", self.unaccounted.to_string());
        line("stuck", self.stuck.to_string());
        line(
            "chains verified",
            format!(
                "{} of {} ({} broken, {} unreadable)",
                self.chains_verified,
                self.runs + self.unreadable,
                self.chains_broken,
                self.unreadable
            ),
        );
        line(
            "child RSS MiB",
            format!(
                "start {:.1}, peak {:.1}, end {:.1} ({} samples)",
                self.rss.start_mib,
                self.rss.peak_mib,
                self.rss.end_mib,
                self.rss.samples.len()
            ),
        );
        line("settled in", format!("{:.1} s", self.settle_secs));
        for problem in &self.problems {
            out.push_str(&format!("  {problem}\n"));
        }
        if let Some(schema) = &self.kept_schema {
            out.push_str(&format!("the PostgreSQL schema {schema} is kept for inspection\n"));
        }
        let failures = self.failures();
        if failures.is_empty() {
            out.push_str(&format!(
                "check soak: {} runs, {} kills: none lost, none duplicated, none stuck, every chain verified — ok\n",
                self.runs, self.kills
            ));
        } else {
            out.push_str(&format!("check soak: FAILED: {}\n", failures.join(", ")));
        }
        out
    }
}

/// Runs the soak; `note` receives progress lines. An error means the soak could not run (the child
/// would not start, the store could not be read); a soak that ran returns its report, passed or not.
pub async fn soak(options: &SoakOptions, note: &dyn Fn(String)) -> Result<SoakReport, BenchError> {
    if options.kill_every < Duration::from_secs(1) {
        return Err(BenchError("the soak kills its server at most once a second".into()));
    }
    let (url, schema) = prepare_store(options).await?;
    let outcome = soak_on(options, &url, note).await;
    let Some(schema) = schema else { return outcome };
    let name = schema.name().to_owned();
    match outcome {
        Ok(mut report) if report.failures().is_empty() => {
            if let Err(e) = drop_schema(schema).await {
                report.problems.push(format!("cannot drop the schema {name}: {e}"));
            }
            Ok(report)
        }
        Ok(mut report) => {
            report.kept_schema = Some(name);
            Ok(report)
        }
        Err(e) => Err(BenchError(format!("{e} (the PostgreSQL schema {name} is kept)"))),
    }
}

async fn soak_on(options: &SoakOptions, url: &str, note: &dyn Fn(String)) -> Result<SoakReport, BenchError> {
    {
        let store = tollgate_agent_store::open(url).await.map_err(err)?;
        let held: u64 = store.count_by_status().await.map_err(err)?.iter().map(|(_, n)| n).sum();
        if held > 0 {
            return Err(BenchError(format!("the soak needs an empty store; this one holds {held} run(s)")));
        }
    }
    let folder = &options.folder;
    let workspace = folder.join("workspace");
    std::fs::create_dir_all(&workspace).map_err(err)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let mut server = ServeChild {
        program: options.program.clone(),
        config: write_config(folder, &workspace, url, addr)?,
        addr,
        log: folder.join("serve.log"),
        child: None,
        generation: 0,
    };
    let http = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .pool_max_idle_per_host(options.clients.max(1))
        .build()
        .map_err(err)?;
    let shared = Arc::new(Shared {
        http,
        base: format!("http://{}", server.addr),
        stop: AtomicBool::new(false),
        created: Mutex::new(Vec::new()),
        counts: Counters::default(),
        unexpected: Mutex::new(Vec::new()),
    });
    server.start(&shared.http).await?;
    note(format!("soak: tollgate serve on {} (log {})", shared.base, server.log.display()));

    let mut report = SoakReport {
        store: url.split(':').next().unwrap_or_default().to_owned(),
        clients: options.clients,
        kill_every_secs: options.kill_every.as_secs(),
        lease_secs: LEASE.as_secs(),
        ..SoakReport::default()
    };
    let mut rss = RssSampler::new(options.duration);
    let clients: Vec<_> = (0..options.clients.max(1)).map(|i| tokio::spawn(client(shared.clone(), i))).collect();
    let load = load(options, &mut server, &shared, &mut rss, note, &mut report).await;
    shared.stop.store(true, Ordering::Relaxed);
    // The last kill, under whatever the clients still have in flight; it also ends their waits.
    if server.kill() {
        report.kills += 1;
    }
    for handle in clients {
        let _ = handle.await;
    }
    load?;
    note(format!("soak: {} kills; clients stopped; restarting the server to settle every run", report.kills));
    server.start(&shared.http).await?;
    rss.sample(&server);

    let settling = Instant::now();
    settle(&shared, SETTLE_LIMIT.max(options.duration), options.clients).await;
    report.settle_secs = settling.elapsed().as_secs_f64();
    rss.sample(&server);
    server.kill();
    report.requests = shared.counts.snapshot();
    report.problems.extend(shared.unexpected.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned());
    report.rss = rss.report();

    note("soak: auditing every run in the store".to_owned());
    let created: Vec<RunId> = shared.created.lock().unwrap_or_else(PoisonError::into_inner).clone();
    report.runs_seen_created = created.len() as u64;
    audit(url, &workspace.join(LEDGER), &created, &mut report).await?;
    Ok(report)
}

/// The load phase: kills and restarts the child every `kill_every`, sampling its RSS, until `duration`.
async fn load(
    options: &SoakOptions,
    server: &mut ServeChild,
    shared: &Shared,
    rss: &mut RssSampler,
    note: &dyn Fn(String),
    report: &mut SoakReport,
) -> Result<(), BenchError> {
    let started = Instant::now();
    let end = started + options.duration;
    let mut next_kill = started + options.kill_every;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        if now >= rss.next {
            rss.sample(server);
        }
        if now >= next_kill {
            server.kill();
            report.kills += 1;
            server.start(&shared.http).await?;
            note(format!(
                "soak: {:.0} s: kill {} (SIGKILL), server restarted",
                started.elapsed().as_secs_f64(),
                report.kills
            ));
            next_kill = Instant::now() + options.kill_every;
        }
        let wake = end.min(next_kill).min(rss.next);
        tokio::time::sleep(wake.saturating_duration_since(Instant::now())).await;
    }
    report.secs = started.elapsed().as_secs_f64();
    Ok(())
}

/// The store's URL, and for PostgreSQL the fresh schema it is in.
async fn prepare_store(options: &SoakOptions) -> Result<(String, Option<ScratchSchema>), BenchError> {
    match &options.store {
        None => Ok((format!("sqlite://{}", options.folder.join("soak.db").display()), None)),
        Some(base) if is_postgres(base) => {
            let schema = fresh_schema(base, "tollgate_soak").await?;
            Ok((schema.url(), Some(schema)))
        }
        Some(url) => Ok((url.clone(), None)),
    }
}

/// Whether `url` names a PostgreSQL store.
pub(crate) fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Creates a fresh schema `PREFIX_…` in the PostgreSQL database at `base` (only the server's message
/// on failure: the URL may hold a password).
pub(crate) async fn fresh_schema(base: &str, prefix: &str) -> Result<ScratchSchema, BenchError> {
    ScratchSchema::create(base, prefix).await.map_err(|e| BenchError(format!("PostgreSQL at --store: {e}")))
}

/// Drops a schema made by [`fresh_schema`].
pub(crate) async fn drop_schema(schema: ScratchSchema) -> Result<(), BenchError> {
    schema.drop_all().await.map_err(|e| BenchError(format!("PostgreSQL at --store: {e}")))
}

pub(crate) fn free_port() -> Result<u16, BenchError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(err)?;
    Ok(listener.local_addr().map_err(err)?.port())
}

/// A TOML basic string (JSON's escapes are TOML's).
pub(crate) fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// Writes the script and `soak.toml` into `folder`; returns the config's path.
fn write_config(folder: &Path, workspace: &Path, url: &str, addr: SocketAddr) -> Result<PathBuf, BenchError> {
    let call = |n: u32| json!({"name": "shell", "arguments": {"argv": ["sh", "-c", format!("echo \"$0 call_{n}\" >> {LEDGER}"), "{{input}}"]}});
    let script = json!({"turns": [{"tool_calls": [call(1), call(2)]}, {"text": "done"}]});
    let script_path = folder.join("script.json");
    std::fs::write(&script_path, script.to_string()).map_err(err)?;
    let config = format!(
        "[store]\nurl = {url}\n\n[server]\naddr = \"{addr}\"\nlease = \"{lease}s\"\n\n\
         [workspace]\nroot = {workspace}\n\n\
         [[providers]]\nname = \"scripted\"\nkind = \"scripted\"\nscript = {script}\n\n\
         [[agents]]\nname = \"{AGENT}\"\nprovider = \"scripted\"\ntools = [\"shell\"]\n",
        url = toml_string(url),
        lease = LEASE.as_secs(),
        workspace = toml_string(&workspace.display().to_string()),
        script = toml_string(&script_path.display().to_string()),
    );
    let path = folder.join("soak.toml");
    std::fs::write(&path, config).map_err(err)?;
    Ok(path)
}

/// The `tollgate serve` child.
pub(crate) struct ServeChild {
    program: PathBuf,
    config: PathBuf,
    addr: SocketAddr,
    log: PathBuf,
    child: Option<Child>,
    /// 1 for the first child, +1 per restart.
    generation: u32,
}

impl ServeChild {
    /// A child to start: `PROGRAM --config CONFIG serve --addr ADDR`, its output appended to `log`.
    pub(crate) fn new(program: PathBuf, config: PathBuf, addr: SocketAddr, log: PathBuf) -> Self {
        Self { program, config, addr, log, child: None, generation: 0 }
    }

    /// The running child's process id.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts a child and waits until it answers `GET /healthz` (asked through `http`).
    pub(crate) async fn start(&mut self, http: &reqwest::Client) -> Result<(), BenchError> {
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match self.start_once(http).await {
                Ok(()) => return Ok(()),
                Err(e) => last = e.0,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(BenchError(format!("{last}; see {}", self.log.display())))
    }

    async fn start_once(&mut self, http: &reqwest::Client) -> Result<(), BenchError> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).map_err(err)?;
        let mut command = Command::new(&self.program);
        command
            .arg("--config")
            .arg(&self.config)
            .arg("serve")
            .arg("--addr")
            .arg(self.addr.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(err)?)
            .stderr(log);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("TOLLGATE_") {
                command.env_remove(name);
            }
        }
        let child = command.spawn().map_err(|e| BenchError(format!("cannot start {}: {e}", self.program.display())))?;
        self.child = Some(child);
        self.generation += 1;
        let deadline = Instant::now() + READY_LIMIT;
        loop {
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(BenchError(format!("tollgate serve exited ({status}) before it was ready")));
            }
            let health = http.get(format!("http://{}/healthz", self.addr)).timeout(Duration::from_secs(1)).send().await;
            if health.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(BenchError(format!("tollgate serve did not answer /healthz within {READY_LIMIT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// SIGTERM, then waits up to `limit` for the child to exit (SIGKILL after that); answers how it
    /// ended: its exit code (`None` when it was killed or none was running).
    pub(crate) async fn terminate(&mut self, limit: Duration) -> Option<i32> {
        let mut child = self.child.take()?;
        let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).ok()?)?;
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let deadline = Instant::now() + limit;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status.code(),
                Ok(None) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(20)).await,
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return None;
                }
            }
        }
    }

    /// SIGKILL and reap; false when no child was running.
    fn kill(&mut self) -> bool {
        let Some(mut child) = self.child.take() else { return false };
        let _ = child.kill();
        let _ = child.wait();
        true
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Samples the child's `VmRSS` every few seconds.
struct RssSampler {
    started: Instant,
    every: Duration,
    next: Instant,
    samples: Vec<RssSample>,
}

impl RssSampler {
    /// About a hundred samples over the load, at most one a second and at least one every ten.
    fn new(duration: Duration) -> Self {
        let every = Duration::from_secs((duration.as_secs() / 100).clamp(1, 10));
        let now = Instant::now();
        Self { started: now, every, next: now, samples: Vec::new() }
    }

    fn sample(&mut self, server: &ServeChild) {
        self.next = Instant::now() + self.every;
        let Some(pid) = server.child.as_ref().map(Child::id) else { return };
        if let Some(kib) = vm_rss_kib(pid) {
            self.samples.push(RssSample {
                at_secs: self.started.elapsed().as_secs_f64(),
                child: server.generation,
                mib: kib as f64 / 1024.0,
            });
        }
    }

    fn report(self) -> RssReport {
        let mib = |s: Option<&RssSample>| s.map_or(0.0, |s| s.mib);
        RssReport {
            start_mib: mib(self.samples.first()),
            peak_mib: self.samples.iter().map(|s| s.mib).fold(0.0, f64::max),
            end_mib: mib(self.samples.last()),
            samples: self.samples,
        }
    }
}

fn vm_rss_kib(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmRSS:")
}

/// A `kB` figure of `/proc/PID/status`, e.g. `VmRSS:` or `VmHWM:` (the peak).
pub(crate) fn proc_status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// What the clients share.
struct Shared {
    http: reqwest::Client,
    base: String,
    stop: AtomicBool,
    /// Ids of the runs seen created, in order.
    created: Mutex<Vec<RunId>>,
    counts: Counters,
    /// Examples of unexpected answers.
    unexpected: Mutex<Vec<String>>,
}

#[derive(Default)]
struct Counters {
    starts: AtomicU64,
    starts_unknown: AtomicU64,
    decisions: AtomicU64,
    cancels: AtomicU64,
    reads: AtomicU64,
    conflicts: AtomicU64,
    connection_errors: AtomicU64,
    unexpected: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> RequestCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RequestCounts {
            starts: get(&self.starts),
            starts_unknown: get(&self.starts_unknown),
            decisions: get(&self.decisions),
            cancels: get(&self.cancels),
            reads: get(&self.reads),
            conflicts: get(&self.conflicts),
            connection_errors: get(&self.connection_errors),
            unexpected: get(&self.unexpected),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// An answer that was read whole, or nothing (no connection, or the answer was cut off).
enum Answer {
    Status(u16, Value),
    Failed,
}

impl Shared {
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Answer {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                response.json::<Value>().await.ok().map(|body| Answer::Status(status, body))
            }
            Err(_) => None,
        };
        answer.unwrap_or_else(|| {
            bump(&self.counts.connection_errors);
            Answer::Failed
        })
    }

    fn unexpected(&self, what: &str, status: u16, body: &Value) {
        bump(&self.counts.unexpected);
        let mut examples = self.unexpected.lock().unwrap_or_else(PoisonError::into_inner);
        if examples.len() < EXAMPLES {
            examples.push(format!("unexpected answer to {what}: {status} {body}"));
        }
    }

    /// One of the last [`RECENT`] runs seen created.
    fn recent(&self, rng: &mut Rng) -> Option<RunId> {
        let created = self.created.lock().unwrap_or_else(PoisonError::into_inner);
        let window = &created[created.len().saturating_sub(RECENT)..];
        (!window.is_empty()).then(|| window[rng.below(window.len())].clone())
    }
}

/// A small xorshift generator: the soak needs variety, not quality.
struct Rng(u64);

impl Rng {
    fn new(seed: usize) -> Self {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        Self((seed as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ nanos | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

/// One client: random operations until told to stop, backing off while the server is down.
async fn client(shared: Arc<Shared>, index: usize) {
    let mut rng = Rng::new(index);
    let mut started = 0u64;
    let mut backoff = BACKOFF_MIN;
    while !shared.stop.load(Ordering::Relaxed) {
        let reached = match rng.below(100) {
            0..30 => {
                started += 1;
                start(&shared, &mut rng, &format!("soak-{index}-{started}")).await
            }
            30..70 => decide(&shared, &mut rng).await,
            70..95 => read(&shared, &mut rng).await,
            _ => cancel(&shared, &mut rng).await,
        };
        if reached {
            backoff = BACKOFF_MIN;
        } else {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
}

/// Each operation answers whether the server was reached.
async fn start(shared: &Shared, rng: &mut Rng, input: &str) -> bool {
    let body = json!({"agent": AGENT, "input": input, "wait": rng.below(2) == 0});
    match shared.send(reqwest::Method::POST, "/v1/runs", Some(body)).await {
        Answer::Status(201, run) => {
            match run["id"].as_str() {
                Some(id) => {
                    shared.created.lock().unwrap_or_else(PoisonError::into_inner).push(RunId::from(id));
                    bump(&shared.counts.starts);
                }
                None => shared.unexpected("a start", 201, &run),
            }
            true
        }
        Answer::Status(status, body) => {
            shared.unexpected("a start", status, &body);
            true
        }
        Answer::Failed => {
            bump(&shared.counts.starts_unknown);
            false
        }
    }
}

async fn decide(shared: &Shared, rng: &mut Rng) -> bool {
    let run = if rng.below(2) == 0 {
        match shared.send(reqwest::Method::GET, "/v1/runs?status=waiting_for_approval&limit=20", None).await {
            Answer::Status(200, page) => {
                bump(&shared.counts.reads);
                let runs = page["runs"].as_array().cloned().unwrap_or_default();
                if runs.is_empty() {
                    return true;
                }
                runs[rng.below(runs.len())].clone()
            }
            Answer::Status(status, body) => {
                shared.unexpected("the waiting list", status, &body);
                return true;
            }
            Answer::Failed => return false,
        }
    } else {
        let Some(id) = shared.recent(rng) else { return true };
        match get_run(shared, &id).await {
            Some(Some(run)) => run,
            Some(None) => return true,
            None => return false,
        }
    };
    let (Some(id), Some(digest)) = (run["id"].as_str(), run["pending"]["turn_digest"].as_str()) else { return true };
    let undecided: Vec<&str> = run["pending"]["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["decision"].is_null() && (c["gate"] == "ask" || c["in_doubt"] == true))
        .filter_map(|c| c["call_id"].as_str())
        .collect();
    if undecided.is_empty() {
        return true;
    }
    let wait = rng.below(4) == 0;
    let body = match rng.below(100) {
        0..70 => json!({"turn_digest": digest, "approve_all": true, "wait": wait}),
        70..85 => json!({"turn_digest": digest, "deny_all": true, "reason": "the soak says no", "wait": wait}),
        _ => {
            let call = undecided[rng.below(undecided.len())];
            let decision = if rng.below(2) == 0 {
                json!({"call_id": call, "action": "approve"})
            } else {
                json!({"call_id": call, "action": "deny", "reason": "the soak says no"})
            };
            json!({"turn_digest": digest, "decisions": [decision], "wait": wait})
        }
    };
    match shared.send(reqwest::Method::POST, &format!("/v1/runs/{id}/decisions"), Some(body)).await {
        Answer::Status(200, _) => bump(&shared.counts.decisions),
        Answer::Status(409, _) => bump(&shared.counts.conflicts),
        Answer::Status(status, body) => shared.unexpected("a decision", status, &body),
        Answer::Failed => return false,
    }
    true
}

/// Run `id` as served: `Some(Some(run))`, `Some(None)` after an unexpected answer, `None` unreached.
async fn get_run(shared: &Shared, id: &RunId) -> Option<Option<Value>> {
    match shared.send(reqwest::Method::GET, &format!("/v1/runs/{id}"), None).await {
        Answer::Status(200, run) => {
            bump(&shared.counts.reads);
            Some(Some(run))
        }
        Answer::Status(status, body) => {
            shared.unexpected("reading a run seen created", status, &body);
            Some(None)
        }
        Answer::Failed => None,
    }
}

async fn read(shared: &Shared, rng: &mut Rng) -> bool {
    let id = shared.recent(rng);
    let (what, path) = match (rng.below(3), id) {
        (1, Some(id)) => ("reading a run seen created", format!("/v1/runs/{id}")),
        (2, Some(id)) => ("reading the events of a run seen created", format!("/v1/runs/{id}/events")),
        _ => ("the run list", "/v1/runs?limit=50".to_owned()),
    };
    match shared.send(reqwest::Method::GET, &path, None).await {
        Answer::Status(200, _) => bump(&shared.counts.reads),
        Answer::Status(status, body) => shared.unexpected(what, status, &body),
        Answer::Failed => return false,
    }
    true
}

async fn cancel(shared: &Shared, rng: &mut Rng) -> bool {
    let Some(id) = shared.recent(rng) else { return true };
    let body = json!({"reason": "the soak cancels"});
    match shared.send(reqwest::Method::POST, &format!("/v1/runs/{id}/cancel"), Some(body)).await {
        Answer::Status(200, _) => bump(&shared.counts.cancels),
        Answer::Status(409, _) => bump(&shared.counts.conflicts),
        Answer::Status(status, body) => shared.unexpected("a cancel", status, &body),
        Answer::Failed => return false,
    }
    true
}

/// Until no run is unfinished (at most `limit`): approves the undecided calls of every waiting run,
/// in-doubt ones included, `concurrency` at a time, while the server takes over the runs of the killed
/// processes. Each approval resumes a run, which then runs its calls: a backlog of thousands of waiting
/// runs takes a while.
async fn settle(shared: &Shared, limit: Duration, concurrency: usize) {
    use futures_util::StreamExt;
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let mut unfinished = 0usize;
        for status in [RunStatus::WaitingForApproval, RunStatus::Running, RunStatus::Queued] {
            let runs = list_all(shared, status).await;
            unfinished += runs.len();
            futures_util::stream::iter(runs)
                .for_each_concurrent(concurrency.max(1), |run| async move {
                    if let (Some(id), Some(digest)) = (run["id"].as_str(), run["pending"]["turn_digest"].as_str()) {
                        let body = json!({"turn_digest": digest, "approve_all": true});
                        let path = format!("/v1/runs/{id}/decisions");
                        let _ = shared.send(reqwest::Method::POST, &path, Some(body)).await;
                    }
                })
                .await;
        }
        if unfinished == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every run with `status`, as served, page by page; what could be read when a page fails.
async fn list_all(shared: &Shared, status: RunStatus) -> Vec<Value> {
    let mut runs = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/runs?status={}&limit=500", status.as_str());
        if let Some(cursor) = &cursor {
            path.push_str("&cursor=");
            path.extend(cursor.bytes().map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
                _ => format!("%{b:02X}"),
            }));
        }
        let Answer::Status(200, page) = shared.send(reqwest::Method::GET, &path, None).await else {
            // Counted as unfinished by the caller's next round: one run stands for the unread page.
            runs.push(Value::Null);
            return runs;
        };
        runs.extend(page["runs"].as_array().cloned().unwrap_or_default());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return runs,
        }
    }
}

/// Reads every run in the store and the ledger, and fills in the report's checks.
async fn audit(url: &str, ledger: &Path, created: &[RunId], report: &mut SoakReport) -> Result<(), BenchError> {
    let store = tollgate_agent_store::open(url).await.map_err(err)?;
    let mut executions: HashMap<(String, CallId), u64> = HashMap::new();
    match std::fs::read_to_string(ledger) {
        Ok(text) => {
            for line in text.lines() {
                if let Some((input, call)) = line.trim().rsplit_once(' ') {
                    *executions.entry((input.to_owned(), CallId::from(call))).or_default() += 1;
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(BenchError(format!("cannot read the ledger {}: {e}", ledger.display()))),
    }
    report.tool_executions = executions.values().sum();

    let mut problems: Vec<String> = Vec::new();
    let mut example = |text: String| {
        if problems.len() < EXAMPLES * 4 {
            problems.push(text);
        }
    };
    let mut stored: HashSet<RunId> = HashSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let page =
            store.list(RunQuery { status: None, agent: None, limit: 500, cursor: cursor.take() }).await.map_err(err)?;
        for id in &page.skipped {
            report.unreadable += 1;
            stored.insert(RunId::from(id));
            example(format!("run {id} cannot be read"));
        }
        for run in &page.runs {
            stored.insert(run.id.clone());
            report.runs += 1;
            *report.statuses.entry(run.status().as_str().to_owned()).or_default() += 1;
            if !run.status().is_terminal() {
                report.stuck += 1;
                example(format!("run {} is stuck {}", run.id, run.status()));
            }
            let events = tollgate_agent_core::store::events_after(store.as_ref(), &run.id, 0).await.map_err(err)?;
            match verify_chain_with(&events, run.last_seq, &run.last_hash, store.chain_keys()) {
                Ok(()) => report.chains_verified += 1,
                Err(e) => {
                    report.chains_broken += 1;
                    example(format!("run {}: the hash chain breaks at seq {}: {e}", run.id, e.seq()));
                }
            }
            let mut started: HashMap<CallId, u64> = HashMap::new();
            for event in &events {
                match event.kind {
                    EventKind::ToolStarted => {
                        let call = CallId::from(event.data["call_id"].as_str().unwrap_or_default());
                        *started.entry(call).or_default() += 1;
                    }
                    EventKind::ApprovalRequested => {
                        let calls = event.data["calls"].as_array().into_iter().flatten();
                        report.in_doubt += calls.filter(|c| c["in_doubt"] == true).count() as u64;
                    }
                    _ => {}
                }
            }
            for call in ["call_1", "call_2"] {
                let ran = executions.remove(&(run.input.clone(), CallId::from(call))).unwrap_or(0);
                let starts = started.get(call).copied().unwrap_or(0);
                if ran > starts {
                    report.duplicated += 1;
                    example(format!("run {} {call} ran {ran} times on {starts} tool_started event(s)", run.id));
                } else if ran > 1 {
                    report.reexecuted_in_doubt += 1;
                }
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    for id in created {
        if !stored.contains(id) {
            report.lost += 1;
            example(format!("run {id} was seen created and is not in the store"));
        }
    }
    for ((input, call), ran) in executions {
        report.unaccounted += ran;
        example(format!("the ledger names {input} {call} ({ran} times) and no run has that input"));
    }
    report.problems.extend(problems);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_agent_core::Actor;
    use tollgate_agent_runtime::DecisionSet;

    /// The audit is what makes the soak worth running: it must catch each kind of failure it reports.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_audit_catches_a_duplicate_an_unaccounted_line_a_lost_and_a_stuck_run() {
        let dir = tollgate_agent_testkit::scratch_dir("soak-audit");
        let url = format!("sqlite://{}", dir.join("audit.db").display());
        let store = crate::open_store(&url).await.unwrap_or_else(|e| panic!("{e}"));
        let runtime =
            crate::approval_runtime(store, Arc::new(Mutex::new(Vec::new()))).unwrap_or_else(|e| panic!("{e}"));
        // Run 0 completes: its write_note call_1 ran once, with one tool_started. Run 1 stays waiting.
        let (done, _) = crate::start_waiting(&runtime, 0).await.unwrap_or_else(|e| panic!("{e}"));
        let (waiting, _) = crate::start_waiting(&runtime, 1).await.unwrap_or_else(|e| panic!("{e}"));
        let run = runtime.get(&done).await.unwrap_or_else(|e| panic!("{e}"));
        let digest = run.held_turn().map(|p| p.turn_digest.as_str().to_owned()).unwrap_or_default();
        let finished = runtime
            .decide_and_wait(&run, &digest, DecisionSet::ApproveAll, &Actor::from("soak"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(finished.status(), RunStatus::Completed);

        let ledger = dir.join(LEDGER);
        let honest = "Save a note saying hello 0 call_1\n";
        std::fs::write(&ledger, honest).unwrap_or_else(|e| panic!("{e}"));
        let created = vec![done.clone(), waiting.clone()];
        let mut report = SoakReport::default();
        audit(&url, &ledger, &created, &mut report).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((report.runs, report.chains_verified, report.tool_executions), (2, 2, 1));
        assert_eq!((report.lost, report.duplicated, report.unaccounted, report.stuck), (0, 0, 0, 1), "{report:?}");

        // The same call ran twice on one tool_started; a line names no run; a run seen created is gone.
        std::fs::write(&ledger, format!("{honest}{honest}soak-9-9 call_2\n")).unwrap_or_else(|e| panic!("{e}"));
        let created = vec![done, waiting, RunId::new("0193b0c6-0000-7000-8000-000000000000")];
        let mut report = SoakReport::default();
        audit(&url, &ledger, &created, &mut report).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((report.lost, report.duplicated, report.unaccounted, report.stuck), (1, 1, 1, 1), "{report:?}");
        assert_eq!(report.failures().len(), 4, "{:?}", report.failures());
    }
}

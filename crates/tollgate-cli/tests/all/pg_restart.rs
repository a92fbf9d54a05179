//! A PostgreSQL restart under traffic: two real `tollgate serve` nodes on a private PostgreSQL cluster
//! of their own (never the shared one on 5432, which the rest of the suite uses), clients starting runs
//! and deciding them in a loop, and the cluster stopped (`pg_ctlcluster … stop -m fast`) for about
//! three seconds and started again.
//!
//! What must hold (docs/api.md: a store that cannot be reached is 503 `unavailable`; docs/nodes.md):
//! - every request is answered within the client's bound (15 s; a request that finds no connection
//!   waits for one up to the pool's acquire timeout, so most requests sent during a short outage are
//!   answered once the cluster is back): a success, or 503 with an `application/problem+json` document
//!   whose `type` is `unavailable` and whose `detail` names the run store — never a hang, a dropped
//!   connection or a 500; `/healthz` stays 200, and `/readyz` never says ready while the cluster is down
//!   (past the second it reuses an answer);
//! - the nodes live through it;
//! - once the cluster is back, new runs start and are decided to completion within a bound, and
//!   `/readyz` is ready again;
//! - nothing is lost and nothing fails: every run answered 201 is readable, every run completes (a drive
//!   waits the outage out and goes on; none is failed for it), `tollgate doctor` finds every
//!   hash chain intact, and the ledger written by the tool holds at most one line per run, never one
//!   without a `tool_started` event, exactly one for a completed run. A call whose result could not be
//!   stored is put back in doubt once the lease expires (docs/nodes.md); settling denies it, since it
//!   ran. And a start answered 503 created no run (else a client's retry starts the work twice). Every
//!   event of every run reaches the nodes' webhook receiver (delivered from the store's commit log).
//!
//! Needs PostgreSQL's server tools (`pg_createcluster`, `pg_ctlcluster`, `pg_isready`, `pg_dropcluster`)
//! and the right to use them: skipped with a note when `pg_createcluster` is not on `PATH`, a failure
//! under CI (env `CI` set).

use crate::nodes::{Hooks, Node, spawn, write_config};
use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tollgate_agent_testkit::scratch_dir;

/// Each node's `[server] lease`: a run whose driver lost the store is taken over this long after.
const LEASE: Duration = Duration::from_secs(2);
pub(crate) const LEDGER: &str = "ledger.txt";
/// No answer may take longer: a request past it is a hang.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the cluster stays stopped while the clients go on.
const OUTAGE: Duration = Duration::from_secs(3);
/// How soon after the cluster is back a run must start and be decided, and `/readyz` be ready.
const RECOVERY_LIMIT: Duration = Duration::from_secs(20);
/// Concurrent traffic clients.
const CLIENTS: usize = 2;
const PROBLEM_JSON: &str = "application/problem+json";
const UNAVAILABLE: &str = "https://tollgate.dev/problems/unavailable";

/// Which cluster: what `pg_ctlcluster` needs.
#[derive(Debug, Clone)]
pub(crate) struct ClusterName {
    pub(crate) version: String,
    pub(crate) name: String,
    pub(crate) port: u16,
}

impl ClusterName {
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctlcluster start`, then waits until `pg_isready` says it accepts connections.
    pub(crate) fn start(&self) -> Result<()> {
        run_tool("pg_ctlcluster", &[&self.version, &self.name, "start"])?;
        let deadline = Instant::now() + Duration::from_secs(20);
        let port = self.port.to_string();
        loop {
            let ready = Command::new("pg_isready")
                .args(["-q", "-h", "127.0.0.1", "-p", &port])
                .status()
                .context("cannot run pg_isready")?;
            if ready.success() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("cluster {} did not accept connections within 20 s of its start", self.name);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `pg_ctlcluster stop -m fast`: sessions are cut, the server is down when it returns.
    pub(crate) fn stop(&self) -> Result<()> {
        run_tool("pg_ctlcluster", &[&self.version, &self.name, "stop", "-m", "fast"])
    }
}

/// A private PostgreSQL cluster (Debian's postgresql-common), dropped with `pg_dropcluster --stop`
/// when this is dropped, also when the test fails.
pub(crate) struct PgCluster(pub(crate) ClusterName);

impl PgCluster {
    /// Creates and starts a cluster on a free port; `None` when the tools are missing outside CI.
    pub(crate) fn create() -> Result<Option<PgCluster>> {
        if !on_path("pg_createcluster") {
            if std::env::var_os("CI").is_some() {
                bail!("pg_createcluster is not on PATH: CI must have PostgreSQL's server tools for this test");
            }
            eprintln!("note: pg_createcluster is not on PATH; skipping the PostgreSQL restart test");
            return Ok(None);
        }
        let version = newest_major()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos();
        let name = format!("tollgate_restart_{}_{nanos}", std::process::id());
        // Made before the cluster exists, so that a half-created cluster is dropped too.
        let cluster = PgCluster(ClusterName { version, name, port });
        let (version, name, port) = (&cluster.0.version, &cluster.0.name, port.to_string());
        run_tool("pg_createcluster", &[version, name, "-p", &port, "--", "--auth=trust", "--no-sync"])?;
        cluster.0.start()?;
        Ok(Some(cluster))
    }

    /// Stops or starts the cluster off the async workers, so the clients go on meanwhile.
    async fn control(&self, action: fn(&ClusterName) -> Result<()>) -> Result<()> {
        let name = self.0.clone();
        tokio::task::spawn_blocking(move || action(&name)).await?
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let dropped = Command::new("pg_dropcluster")
            .args(["--stop", &self.0.version, &self.0.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !dropped.is_ok_and(|s| s.success()) {
            eprintln!("warning: could not drop the PostgreSQL cluster {} {}", self.0.version, self.0.name);
        }
    }
}

pub(crate) fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// The newest PostgreSQL major version installed (`/etc/postgresql/NN`).
pub(crate) fn newest_major() -> Result<String> {
    let mut versions: Vec<u32> = std::fs::read_dir("/etc/postgresql")
        .context("cannot list /etc/postgresql")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    versions.sort_unstable();
    versions.last().map(u32::to_string).ok_or_else(|| anyhow!("no PostgreSQL version under /etc/postgresql"))
}

/// Runs a PostgreSQL tool, failing with its output when it fails.
pub(crate) fn run_tool(program: &str, args: &[&str]) -> Result<()> {
    let output = Command::new(program).args(args).output().with_context(|| format!("cannot run {program}"))?;
    if !output.status.success() {
        bail!(
            "{program} {args:?} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// One request of the traffic and what came back.
#[derive(Debug, Clone)]
struct Answer {
    /// When the request was sent.
    sent: Instant,
    /// `start`, `decide` or `readyz`.
    what: &'static str,
    url: String,
    /// The HTTP status, or `None` when no answer came (a timeout, a dropped connection).
    status: Option<u16>,
    content_type: String,
    body: Value,
    /// The transport error, when there was no answer.
    error: Option<String>,
    took: Duration,
}

impl Answer {
    /// One line for a failure message.
    fn describe(&self, since: Instant) -> String {
        let sent = self.sent.saturating_duration_since(since);
        let answer = match (&self.status, &self.error) {
            (_, Some(error)) => format!("no answer: {error}"),
            (Some(status), None) => {
                let body = self.body.to_string();
                let cut = body.char_indices().nth(200).map_or(body.len(), |(i, _)| i);
                format!("{status} {} {}", self.content_type, &body[..cut])
            }
            (None, None) => "nothing".to_owned(),
        };
        format!("{} {} sent at +{sent:?}, took {:?}: {answer}", self.what, self.url, self.took)
    }

    /// A clear "the store cannot be reached" answer (docs/api.md: 503 `unavailable`).
    fn is_store_unavailable(&self) -> bool {
        self.status == Some(503)
            && self.content_type.starts_with(PROBLEM_JSON)
            && self.body["type"] == UNAVAILABLE
            && self.body["status"] == 503
            && self.body["title"].as_str().is_some_and(|t| !t.is_empty())
            && self.body["detail"].as_str().is_some_and(|d| d.contains("run store"))
    }
}

/// Sends a request and records whatever happened, never failing.
async fn exchange(what: &'static str, url: String, request: reqwest::RequestBuilder) -> Answer {
    let sent = Instant::now();
    let mut answer = Answer {
        sent,
        what,
        url,
        status: None,
        content_type: String::new(),
        body: Value::Null,
        error: None,
        took: Duration::ZERO,
    };
    match request.send().await {
        Ok(response) => {
            answer.status = Some(response.status().as_u16());
            answer.content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            match response.text().await {
                Ok(text) => answer.body = serde_json::from_str(&text).unwrap_or(Value::String(text)),
                Err(e) => answer.error = Some(format!("the answer was cut off: {e:#}")),
            }
        }
        Err(e) => answer.error = Some(format!("{e:#}")),
    }
    answer.took = sent.elapsed();
    answer
}

/// What the clients saw: every answer, and every run answered 201 (id → input).
#[derive(Default)]
struct Traffic {
    answers: Mutex<Vec<Answer>>,
    started: Mutex<BTreeMap<String, String>>,
}

impl Traffic {
    fn record(&self, answer: Answer) {
        if let Ok(mut answers) = self.answers.lock() {
            answers.push(answer);
        }
    }

    fn answers(&self) -> Vec<Answer> {
        self.answers.lock().map(|a| a.clone()).unwrap_or_default()
    }

    fn started(&self) -> BTreeMap<String, String> {
        self.started.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The first time, after `since`, that a run was both started and decided to completion with
    /// requests sent after `since`.
    fn completed_cycle_since(&self, since: Instant) -> Option<Instant> {
        let answers = self.answers();
        let starts: BTreeSet<String> = answers
            .iter()
            .filter(|a| a.what == "start" && a.sent >= since && a.status == Some(201))
            .filter_map(|a| a.body["id"].as_str().map(str::to_owned))
            .collect();
        answers
            .iter()
            .filter(|a| a.what == "decide" && a.sent >= since && a.status == Some(200))
            .filter(|a| a.body["status"] == "completed")
            .filter(|a| a.body["id"].as_str().is_some_and(|id| starts.contains(id)))
            .map(|a| a.sent + a.took)
            .min()
    }
}

/// One client: starts a run with `wait: true` on one node, approves its held call on the other (also
/// with `wait: true`), and again, until `stop`. A failed start is not retried (a retry would be another
/// run); a run whose decision failed is settled at the end.
async fn client(
    k: usize,
    nodes: Arc<Vec<String>>,
    http: reqwest::Client,
    stop: Arc<AtomicBool>,
    traffic: Arc<Traffic>,
) {
    let mut i = 0usize;
    while !stop.load(Ordering::SeqCst) {
        let input = format!("c{k}n{i}");
        let starter = &nodes[(i + k) % nodes.len()];
        let decider = &nodes[(i + k + 1) % nodes.len()];
        i += 1;
        let url = format!("{starter}/v1/runs");
        let start = exchange("start", url.clone(), http.post(&url).json(&json!({"input": input, "wait": true}))).await;
        let run = (start.status == Some(201)).then(|| start.body.clone());
        traffic.record(start);
        let Some(run) = run else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Some(id) = run["id"].as_str().map(str::to_owned) else { continue };
        if let Ok(mut started) = traffic.started.lock() {
            started.insert(id.clone(), input);
        }
        if run["status"] != "waiting_for_approval" {
            continue;
        }
        let url = format!("{decider}/v1/runs/{id}/decisions");
        let body = json!({"turn_digest": run["pending"]["turn_digest"], "approve_all": true, "wait": true});
        let decide = exchange("decide", url.clone(), http.post(&url).json(&body)).await;
        let failed = decide.status != Some(200);
        traffic.record(decide);
        if failed {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Polls `/readyz` and `/healthz` of a node every 200 ms until `stop`.
async fn prober(node: String, http: reqwest::Client, stop: Arc<AtomicBool>, traffic: Arc<Traffic>) {
    while !stop.load(Ordering::SeqCst) {
        for (what, path) in [("readyz", "/readyz"), ("healthz", "/healthz")] {
            let url = format!("{node}{path}");
            let answer = exchange(what, url.clone(), http.get(&url)).await;
            traffic.record(answer);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A `shell` call appending the run's input (as `$0`) to the ledger.
pub(crate) fn ledger_call() -> Value {
    let command = format!("echo \"$0\" >> {LEDGER}");
    json!({"name": "shell", "arguments": {"argv": ["sh", "-c", command, "{{input}}"]}})
}

/// Sends a request that must succeed; its JSON answer.
pub(crate) async fn must(request_name: &str, request: reqwest::RequestBuilder) -> Result<Value> {
    let response = request.send().await.with_context(|| request_name.to_owned())?;
    let status = response.status();
    let answer: Value = response.json().await.with_context(|| request_name.to_owned())?;
    if !status.is_success() {
        bail!("{request_name}: {status} {answer:#}");
    }
    Ok(answer)
}

/// Every run in the store, through the API's listing.
async fn all_runs(http: &reqwest::Client, node: &str) -> Result<Vec<Value>> {
    let mut runs = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{node}/v1/runs?limit=500");
        if let Some(cursor) = &cursor {
            url.push_str(&format!("&cursor={cursor}"));
        }
        let page = must("GET /v1/runs", http.get(&url)).await?;
        runs.extend(page["runs"].as_array().ok_or_else(|| anyhow!("no runs in {page}"))?.iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(runs),
        }
    }
}

/// Drives every run to a terminal state: approves what waits, denies a call put back in doubt (here it
/// always ran: the tool writes its line before the store could lose its result), and waits for what
/// runs (a run whose driver lost the store is taken over after the lease). Answers every run, settled,
/// by id.
async fn settle(http: &reqwest::Client, node: &str, limit: Duration) -> Result<BTreeMap<String, Value>> {
    let deadline = Instant::now() + limit;
    loop {
        let mut settled = BTreeMap::new();
        let mut unsettled = Vec::new();
        for run in all_runs(http, node).await? {
            let id = run["id"].as_str().ok_or_else(|| anyhow!("no id in {run}"))?.to_owned();
            match run["status"].as_str().unwrap_or_default() {
                "completed" | "failed" | "cancelled" | "expired" => {
                    settled.insert(id, run);
                }
                "waiting_for_approval" => {
                    let digest = &run["pending"]["turn_digest"];
                    let in_doubt = run["pending"]["calls"]
                        .as_array()
                        .is_some_and(|calls| calls.iter().any(|c| c["in_doubt"] == true));
                    // A call in doubt took effect (its ledger line says so): a person who checks says no.
                    let body = if in_doubt {
                        json!({"turn_digest": digest, "deny_all": true, "reason": "it ran already", "wait": true})
                    } else {
                        json!({"turn_digest": digest, "approve_all": true, "wait": true})
                    };
                    let url = format!("{node}/v1/runs/{id}/decisions");
                    must(&format!("settling {id}"), http.post(&url).json(&body)).await?;
                    unsettled.push(run);
                }
                _ => unsettled.push(run),
            }
        }
        if unsettled.is_empty() {
            return Ok(settled);
        }
        if Instant::now() > deadline {
            bail!("after {limit:?} these runs have not settled: {unsettled:#?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The run's events.
async fn events(http: &reqwest::Client, node: &str, id: &str) -> Result<Vec<Value>> {
    let answer = must(&format!("events of {id}"), http.get(format!("{node}/v1/runs/{id}/events"))).await?;
    answer["events"].as_array().cloned().ok_or_else(|| anyhow!("no events in {answer}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_restart_under_traffic_is_answered_503_and_recovered_without_loss() -> Result<()> {
    let _alone = crate::support::ALONE.lock().await;
    let began = Instant::now();
    let Some(cluster) = tokio::task::spawn_blocking(PgCluster::create).await?? else { return Ok(()) };
    eprintln!("cluster {:?} ready after {:?}", cluster.0, began.elapsed());

    let dir = scratch_dir("pg-restart");
    let script = json!({"turns": [{"tool_calls": [ledger_call()]}, {"text": "done"}]});
    // Both nodes deliver every event to one webhook receiver.
    let hooks = Hooks::start().await?;
    hooks.answering.store(true, Ordering::SeqCst);
    let policy =
        format!("[[agents.policy]]\ntool = \"shell\"\ngate = \"ask\"\n\n[[webhooks]]\nurl = \"{}\"", hooks.url);
    let (workspace, config_path) = write_config(&dir, &cluster.0.url(), LEASE, &script, "[\"shell\"]", &policy)?;
    let http = reqwest::Client::builder().timeout(CLIENT_TIMEOUT).build()?;
    // A first, alone: it applies the migrations.
    let mut a = spawn(&dir, &config_path, "a", &http).await?;
    let mut b = spawn(&dir, &config_path, "b", &http).await?;
    let logs = |a: &Node, b: &Node| format!("A's log:\n{}\nB's log:\n{}", a.log(), b.log());

    let nodes = Arc::new(vec![a.url.clone(), b.url.clone()]);
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = Arc::new(Traffic::default());
    let mut tasks = Vec::new();
    for k in 0..CLIENTS {
        tasks.push(tokio::spawn(client(k, nodes.clone(), http.clone(), stop.clone(), traffic.clone())));
    }
    tasks.push(tokio::spawn(prober(a.url.clone(), http.clone(), stop.clone(), traffic.clone())));

    // Traffic flows before the outage.
    let flowing = Instant::now();
    while traffic.completed_cycle_since(flowing).is_none() {
        if flowing.elapsed() > Duration::from_secs(10) {
            bail!("no run was started and decided within 10 s: {:#?}\n{}", traffic.answers(), logs(&a, &b));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    let stopping = Instant::now();
    cluster.control(ClusterName::stop).await?;
    let down = Instant::now();
    eprintln!("cluster stopped in {:?}", down - stopping);
    tokio::time::sleep(OUTAGE).await;
    let starting = Instant::now();
    cluster.control(ClusterName::start).await?;
    let back = Instant::now();
    eprintln!("cluster started again in {:?}", back - starting);

    // Recovery: a whole cycle, and `/readyz` ready, with requests sent after the cluster is back.
    let recovered = loop {
        let ready_again =
            traffic.answers().iter().any(|a| a.what == "readyz" && a.sent >= back && a.status == Some(200));
        if let Some(at) = traffic.completed_cycle_since(back)
            && ready_again
        {
            break at;
        }
        if back.elapsed() > RECOVERY_LIMIT {
            let recent: Vec<String> =
                traffic.answers().iter().filter(|a| a.sent >= back).map(|a| a.describe(began)).collect();
            bail!(
                "{RECOVERY_LIMIT:?} after the cluster was back, no run was started and decided, or /readyz is not \
                 ready; the answers since: {recent:#?}\n{}",
                logs(&a, &b)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("recovered {:?} after the cluster was back", recovered - back);
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await?;
    }

    eprintln!(
        "cluster down at +{:?}, starting at +{:?}, back at +{:?}; the failed or slow answers meanwhile:",
        down - began,
        starting - began,
        back - began
    );
    let eventful = |a: &&Answer| a.status.is_none_or(|s| s >= 300) || a.took > Duration::from_millis(500);
    for answer in traffic.answers().iter().filter(|a| a.sent + a.took >= stopping && a.sent <= back).filter(eventful) {
        eprintln!("  {}", answer.describe(began));
    }

    // The nodes lived through it.
    for (name, node) in [("A", &mut a), ("B", &mut b)] {
        if !node.alive()? {
            bail!("node {name} died during the outage:\n{}", node.log());
        }
    }

    // Every request had a clear answer: a success, or 503 `unavailable` naming the store.
    let answers = traffic.answers();
    let unclear: Vec<&Answer> = answers
        .iter()
        .filter(|a| match a.what {
            "healthz" => a.status != Some(200),
            // `/readyz` may say 503 while the store is down, with a problem document.
            _ => !(a.status.is_some_and(|s| (200..300).contains(&s)) || a.is_store_unavailable()),
        })
        .collect();
    let slowest = answers.iter().map(|a| a.took).max().unwrap_or_default();
    let failed = answers.iter().filter(|a| a.what != "readyz" && a.is_store_unavailable()).count();
    // Not vacuous: the clients were at work while the cluster was down (answered 503 at once, or once it
    // was back).
    let during = answers
        .iter()
        .filter(|a| matches!(a.what, "start" | "decide") && a.sent < starting && a.sent + a.took > down)
        .count();
    eprintln!(
        "{} requests ({} starts, {} decisions), {failed} answered 503 unavailable, slowest answer {slowest:?}, \
         {during} in flight while the cluster was down",
        answers.len(),
        answers.iter().filter(|a| a.what == "start").count(),
        answers.iter().filter(|a| a.what == "decide").count(),
    );
    if !unclear.is_empty() {
        let unclear: Vec<String> = unclear.iter().map(|a| a.describe(began)).collect();
        bail!("{} requests had no clear answer: {unclear:#?}\n{}", unclear.len(), logs(&a, &b));
    }
    assert!(during > 0, "no start or decision was in flight while the cluster was down");
    // `/readyz` reuses its answer for a second (docs/api.md), and a probe that finds no connection waits
    // for one up to the pool's acquire timeout: while the cluster is down it answers 503 or nothing yet,
    // never "ready".
    let readyz_down: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.what == "readyz" && a.sent + a.took > down + Duration::from_secs(1) && a.sent + a.took < starting)
        .collect();
    let ready_while_down: Vec<String> =
        readyz_down.iter().filter(|a| a.status == Some(200)).map(|a| a.describe(began)).collect();
    assert!(ready_while_down.is_empty(), "/readyz said ready while the cluster was down: {ready_while_down:#?}");
    eprintln!(
        "/readyz answered 503 `unavailable` {} times while the cluster was down",
        readyz_down.iter().filter(|a| a.is_store_unavailable()).count()
    );

    // Nothing lost: every run settles, every run answered 201 among them.
    let settled = settle(&http, &a.url, Duration::from_secs(15)).await.with_context(|| logs(&a, &b))?;
    let started = traffic.started();
    for (id, input) in &started {
        let run = settled.get(id).ok_or_else(|| anyhow!("run {id} ({input}) was answered 201 and is not listed"))?;
        assert_eq!(run["input"], input.as_str(), "{run:#}");
        must(&format!("GET run {id}"), http.get(format!("{}/v1/runs/{id}", b.url))).await?;
    }
    // An outage is the operator's to fix: no run fails for it (docs/nodes.md, "When the store fails").
    for (id, run) in &settled {
        if run["status"] != "completed" {
            bail!("run {id} did not complete: {run:#}\n{}", logs(&a, &b));
        }
    }

    // At most one execution of the tool per run, none without its `tool_started`.
    let ledger = std::fs::read_to_string(workspace.join(LEDGER)).unwrap_or_default();
    let mut lines: BTreeMap<&str, usize> = BTreeMap::new();
    for line in ledger.lines() {
        *lines.entry(line).or_default() += 1;
    }
    let mut in_doubt = Vec::new();
    for (id, run) in &settled {
        let input = run["input"].as_str().unwrap_or_default();
        let events = events(&http, &a.url, id).await?;
        let tool_starts = events.iter().filter(|e| e["kind"] == "tool_started").count();
        let doubted = events.iter().any(|e| {
            e["kind"] == "approval_requested"
                && e["data"]["calls"].as_array().is_some_and(|calls| calls.iter().any(|c| c["in_doubt"] == true))
        });
        if doubted {
            in_doubt.push(id.clone());
        }
        let ran = lines.get(input).copied().unwrap_or(0);
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
        // Persisted before the side effect: never a run of the tool without its `tool_started`.
        assert!(ran <= tool_starts, "run {id} ({input}) ran its tool {ran} times, started {tool_starts}: {kinds:?}");
        assert!(ran <= 1, "run {id} ({input}) ran its tool {ran} times: {kinds:?}");
        if run["status"] == "completed" {
            assert_eq!(ran, 1, "run {id} ({input}) completed: its tool ran once: {kinds:?}");
        }
        if run["status"] != "completed" || doubted || !started.contains_key(id) {
            let answered = if started.contains_key(id) { "answered 201" } else { "its start not answered 201" };
            eprintln!("run {id} ({input}, {answered}): {} {}, events {kinds:?}", run["status"], run["error"]);
        }
    }
    let unknown: Vec<&&str> =
        lines.keys().filter(|input| !settled.values().any(|run| run["input"] == **input)).collect();
    assert!(unknown.is_empty(), "ledger lines of no run: {unknown:?}");

    // Every hash chain verifies.
    let report = crate::support::doctor_report(&dir, &config_path)?;
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(report["runs_checked"], settled.len(), "{report:#}");
    assert_eq!(report["chains_intact"], settled.len(), "{report:#}");

    eprintln!(
        "{} runs ({} answered 201), all completed, {} with a call in doubt {in_doubt:?}; test took {:?}",
        settled.len(),
        started.len(),
        in_doubt.len(),
        began.elapsed()
    );
    // A start answered 503 ("try again") created no run: else a client that retries, as the answer says
    // to, starts the same work twice, and the first run waits for a decision no one knows to give.
    let orphans: Vec<String> = settled
        .iter()
        .filter(|(id, _)| !started.contains_key(*id))
        .map(|(id, run)| format!("{id} ({})", run["input"]))
        .collect();
    assert!(orphans.is_empty(), "{} run(s) exist whose start was not answered 201: {orphans:?}", orphans.len());

    // Every event of every run reaches the webhook receiver, the outage notwithstanding (at least once).
    let mut expected = BTreeSet::new();
    for id in settled.keys() {
        for event in events(&http, &a.url, id).await? {
            expected.insert(format!("{id}:{}", event["seq"]));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let seen: BTreeSet<String> = hooks.seen().into_iter().collect();
        let missing: Vec<&String> = expected.difference(&seen).collect();
        if missing.is_empty() {
            eprintln!("every one of {} events delivered ({} deliveries)", expected.len(), hooks.seen().len());
            break;
        }
        if Instant::now() > deadline {
            bail!("{} of {} events were never delivered: {missing:?}\n{}", missing.len(), expected.len(), logs(&a, &b));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop((a, b));
    drop(cluster);
    Ok(())
}

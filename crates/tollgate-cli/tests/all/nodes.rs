//! Two real `tollgate serve` processes on one PostgreSQL schema (docs/nodes.md): a node killed with
//! SIGKILL while it drives an approved call (the other takes the run over after the lease and puts the call
//! back as in doubt, never running it again by itself), a node stopped with SIGTERM mid-call (it finishes
//! the step, gives the run back, exits 0, and the other node's worker continues it at once, well within
//! the lease), queued runs claimed by the workers of both nodes (each run once), and a run started on
//! one node and decided on the other (resumed once, the deciding node answers the settled run), and an SSE
//! stream on one node that sees every step the other node commits, in order with no gap, each within a
//! second of its commit (the commit's time taken from the test's own LISTEN, kept by neither node), and
//! the node holding the webhook reader killed with its deliveries unanswered (the other delivers them)
//! or stopped with SIGTERM (it releases the reader: the other delivers at once, within the lease).
//! Every tool call appends a line to `ledger.txt` in the workspace both nodes share, which counts
//! executions.
//!
//! Needs `TOLLGATE_TEST_POSTGRES_URL` (skipped with a note when unset, a failure under CI).

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tollgate_agent_store::ScratchSchema;
use tollgate_agent_testkit::{SseFrames, postgres_url, scratch_dir};

/// Each node's `[server] lease`.
const LEASE: Duration = Duration::from_secs(2);
const LEDGER: &str = "ledger.txt";

/// One `tollgate serve` child; SIGKILLed when dropped if still running.
pub(crate) struct Node {
    pub(crate) url: String,
    log: PathBuf,
    child: Option<Child>,
}

impl Node {
    /// Whether the process still runs (it did not crash).
    pub(crate) fn alive(&mut self) -> Result<bool> {
        match &mut self.child {
            Some(child) => Ok(child.try_wait()?.is_none()),
            None => Ok(false),
        }
    }

    fn pid(&self) -> Result<u32> {
        self.child.as_ref().map(Child::id).ok_or_else(|| anyhow!("the node is not running"))
    }

    /// SIGKILL, and reap.
    fn kill(&mut self) -> Result<()> {
        let mut child = self.child.take().ok_or_else(|| anyhow!("the node is not running"))?;
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// SIGTERM; answers the exit code once the node exits, failing after `limit`.
    async fn terminate(&mut self, limit: Duration) -> Result<Option<i32>> {
        let status = Command::new("kill").args(["-TERM", &self.pid()?.to_string()]).status()?;
        if !status.success() {
            bail!("kill -TERM failed");
        }
        let mut child = self.child.take().ok_or_else(|| anyhow!("the node is not running"))?;
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status.code());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("the node did not exit within {limit:?} of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Two nodes, A and B, on one fresh schema with one config and one shared workspace.
struct Cluster {
    a: Node,
    b: Node,
    workspace: PathBuf,
    http: reqwest::Client,
    schema: ScratchSchema,
    /// The test's folder and the nodes' config, to start a node again.
    dir: PathBuf,
    config: PathBuf,
}

impl Cluster {
    /// Starts both nodes with an agent `agent` running `script` under `policy` (TOML
    /// `[[agents.policy]]` tables). `None` when no PostgreSQL is configured.
    async fn start(script: Value, policy: &str) -> Result<Option<Cluster>> {
        Cluster::start_with(script, policy, LEASE, "").await
    }

    /// [`Cluster::start`] with each node's `lease` and more TOML for the config (e.g. `[runtime]`).
    async fn start_with(script: Value, policy: &str, lease: Duration, more: &str) -> Result<Option<Cluster>> {
        let Some(base) = postgres_url() else { return Ok(None) };
        let schema = ScratchSchema::create(&base, "tollgate_nodes").await?;
        let dir = scratch_dir("nodes");
        let (workspace, config_path) = write_config(
            &dir,
            &schema.url(),
            lease,
            &script,
            "[\"shell\", \"fs_write\"]",
            &format!("{policy}\n\n{more}"),
        )?;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build()?;
        // A first, alone: it applies the migrations to the fresh schema.
        let a = spawn(&dir, &config_path, "a", &http).await?;
        let b = spawn(&dir, &config_path, "b", &http).await?;
        Ok(Some(Cluster { a, b, workspace, http, schema, dir, config: config_path }))
    }

    fn ledger(&self) -> Vec<String> {
        std::fs::read_to_string(self.workspace.join(LEDGER)).unwrap_or_default().lines().map(str::to_owned).collect()
    }

    /// Waits until the ledger has `n` lines.
    async fn ledger_reaches(&self, n: usize, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        while self.ledger().len() < n {
            if Instant::now() > deadline {
                bail!("the ledger has {:?}, not {n} lines, after {limit:?}", self.ledger());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    async fn post(&self, node: &Node, path: &str, body: Value) -> Result<Value> {
        Self::answer(&format!("POST {path} on {}", node.url), self.http.post(format!("{}{path}", node.url)).json(&body))
            .await
    }

    async fn get(&self, node: &Node, path: &str) -> Result<Value> {
        Self::answer(&format!("GET {path} on {}", node.url), self.http.get(format!("{}{path}", node.url))).await
    }

    /// Sends the request; its JSON answer, or an error naming the request, the status and the answer.
    async fn answer(request_name: &str, request: reqwest::RequestBuilder) -> Result<Value> {
        let response = request.send().await?;
        let status = response.status();
        let answer: Value = response.json().await?;
        if !status.is_success() {
            bail!("{request_name}: {status} {answer:#}");
        }
        Ok(answer)
    }

    async fn run(&self, node: &Node, id: &str) -> Result<Value> {
        self.get(node, &format!("/v1/runs/{id}")).await
    }

    async fn event_kinds(&self, node: &Node, id: &str) -> Result<Vec<String>> {
        let events = self.get(node, &format!("/v1/runs/{id}/events")).await?;
        let events = events["events"].as_array().ok_or_else(|| anyhow!("no events in {events}"))?;
        Ok(events.iter().map(|e| e["kind"].as_str().unwrap_or_default().to_owned()).collect())
    }

    /// Polls the run on `node` until `done` holds, failing after `limit`.
    async fn run_until(&self, node: &Node, id: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> Result<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let run = self.run(node, id).await?;
            if done(&run) {
                return Ok(run);
            }
            if Instant::now() > deadline {
                bail!(
                    "after {limit:?} the run is still {run:#}\nA's log:\n{}\nB's log:\n{}",
                    self.a.log(),
                    self.b.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn drop_schema(self) -> Result<()> {
        let Cluster { mut a, mut b, schema, .. } = self;
        // The nodes go first: they hold connections to the schema.
        let _ = a.kill();
        let _ = b.kill();
        Ok(schema.drop_all().await?)
    }
}

/// Writes the config of a two-node test into `dir`: the store at `url`, `lease`, a workspace, the scripted
/// provider with `script`, and the agent `agent` with `tools` (a TOML array) followed by `rest` (its
/// policy and any more tables). Answers the workspace and the config's path.
pub(crate) fn write_config(
    dir: &Path,
    url: &str,
    lease: Duration,
    script: &Value,
    tools: &str,
    rest: &str,
) -> Result<(PathBuf, PathBuf)> {
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(&workspace)?;
    let script_path = dir.join("script.json");
    std::fs::write(&script_path, script.to_string())?;
    let string = |text: &str| serde_json::to_string(text).unwrap_or_default();
    let config = format!(
        "[store]\nurl = {url}\n\n[server]\nlease = \"{lease}s\"\n\n[workspace]\nroot = {workspace}\n\n\
         [[providers]]\nname = \"scripted\"\nkind = \"scripted\"\nscript = {script}\n\n\
         [[agents]]\nname = \"agent\"\nprovider = \"scripted\"\ntools = {tools}\n\n{rest}\n",
        url = string(url),
        lease = lease.as_secs(),
        workspace = string(&workspace.display().to_string()),
        script = string(&script_path.display().to_string()),
    );
    let config_path = dir.join("tollgate.toml");
    std::fs::write(&config_path, config)?;
    Ok((workspace, config_path))
}

/// Starts `tollgate --config CONFIG serve` on a free loopback port and waits for `/healthz`.
pub(crate) async fn spawn(dir: &Path, config: &Path, name: &str, http: &reqwest::Client) -> Result<Node> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let log = dir.join(format!("{name}.log"));
    let out = std::fs::File::create(&log)?;
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command
        .arg("--config")
        .arg(config)
        .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("TOLLGATE_") {
            command.env_remove(key);
        }
    }
    let mut node = Node { url: format!("http://127.0.0.1:{port}"), log, child: Some(command.spawn()?) };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(child) = &mut node.child
            && let Some(status) = child.try_wait()?
        {
            node.child = None;
            bail!("node {name} exited ({status}) before it was ready:\n{}", node.log());
        }
        let health = http.get(format!("{}/healthz", node.url)).timeout(Duration::from_secs(1)).send().await;
        if health.is_ok_and(|r| r.status().is_success()) {
            return Ok(node);
        }
        if Instant::now() > deadline {
            bail!("node {name} did not answer /healthz within 10 s:\n{}", node.log());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A `shell` call appending `LINE` (after `{{input}}` as `$0`) to the ledger, then sleeping `sleep` s.
fn ledger_call(line: &str, sleep: u32) -> Value {
    let command = format!("echo \"$0 {line}\" >> {LEDGER}; sleep {sleep}");
    json!({"name": "shell", "arguments": {"argv": ["sh", "-c", command, "{{input}}"]}})
}

fn id_of(run: &Value) -> Result<String> {
    run["id"].as_str().map(str::to_owned).ok_or_else(|| anyhow!("no id in {run:#}"))
}

fn status(run: &Value) -> &str {
    run["status"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_of_the_driving_node_leaves_an_approved_started_call_in_doubt_on_the_other() -> Result<()> {
    let script = json!({"turns": [{"tool_calls": [ledger_call("slow", 3)]}, {"text": "done"}]});
    let policy = "[[agents.policy]]\ntool = \"shell\"\ngate = \"ask\"";
    let Some(cluster) = Cluster::start(script, policy).await? else { return Ok(()) };
    let run = cluster.post(&cluster.a, "/v1/runs", json!({"input": "r", "wait": true})).await?;
    assert_eq!(status(&run), "waiting_for_approval", "{run:#}");
    let id = id_of(&run)?;
    let digest = run["pending"]["turn_digest"].clone();
    // Approved on A, without waiting: A drives the call.
    let decided = cluster
        .post(&cluster.a, &format!("/v1/runs/{id}/decisions"), json!({"turn_digest": digest, "approve_all": true}))
        .await?;
    assert_eq!(status(&decided), "running", "the decision completed the turn and claimed the resume: {decided:#}");
    // B sees the call started (committed before it runs), and the call has taken effect.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cluster.event_kinds(&cluster.b, &id).await?.iter().any(|k| k == "tool_started") {
        if Instant::now() > deadline {
            bail!("B never saw `tool_started`: {:?}", cluster.event_kinds(&cluster.b, &id).await?);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.ledger_reaches(1, Duration::from_secs(5)).await?;
    let mut cluster = cluster;
    cluster.a.kill()?;
    let killed = Instant::now();

    // B takes the run over after the lease and puts the call back to waiting, in doubt.
    let run =
        cluster.run_until(&cluster.b, &id, LEASE + Duration::from_secs(6), |run| status(run) != "running").await?;
    let took = killed.elapsed();
    eprintln!("B took the run over {took:?} after the SIGKILL");
    assert_eq!(status(&run), "waiting_for_approval", "{run:#}");
    let call = &run["pending"]["calls"][0];
    assert_eq!(call["state"], "in_doubt", "{run:#}");
    assert_eq!(call["in_doubt"], true, "{run:#}");
    assert_eq!(call["takes_decision"], true, "{run:#}");
    // Nothing ran it again by itself, even a while later.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(cluster.ledger(), ["r slow"], "taken over after {took:?}");
    assert_eq!(status(&cluster.run(&cluster.b, &id).await?), "waiting_for_approval");

    // Approved again on B: it runs once more, and the run completes there.
    let digest = run["pending"]["turn_digest"].clone();
    let settled = cluster
        .post(
            &cluster.b,
            &format!("/v1/runs/{id}/decisions"),
            json!({"turn_digest": digest, "approve_all": true, "wait": true}),
        )
        .await?;
    assert_eq!(status(&settled), "completed", "{settled:#}");
    assert_eq!(cluster.ledger(), ["r slow", "r slow"]);
    cluster.drop_schema().await
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_mid_call_finishes_the_step_and_gives_the_run_to_the_other_node_at_once() -> Result<()> {
    // Turn 1: an ask-gated 3-second call; turn 2: an ask-gated write; turn 3: the end. The lease is
    // long: B continues because A gives the run back, not because A's lease expired.
    let write = json!({"name": "fs_write", "arguments": {"path": "note.txt", "content": "{{input}}"}});
    let script =
        json!({"turns": [{"tool_calls": [ledger_call("slow", 3)]}, {"tool_calls": [write]}, {"text": "done"}]});
    let policy =
        "[[agents.policy]]\ntool = \"shell\"\ngate = \"ask\"\n\n[[agents.policy]]\ntool = \"fs_write\"\ngate = \"ask\"";
    let lease = Duration::from_secs(30);
    let Some(mut cluster) = Cluster::start_with(script, policy, lease, "").await? else { return Ok(()) };
    let run = cluster.post(&cluster.a, "/v1/runs", json!({"input": "t", "wait": true})).await?;
    assert_eq!(status(&run), "waiting_for_approval", "{run:#}");
    let id = id_of(&run)?;
    let digest = run["pending"]["turn_digest"].clone();
    let decided = cluster
        .post(&cluster.a, &format!("/v1/runs/{id}/decisions"), json!({"turn_digest": digest, "approve_all": true}))
        .await?;
    assert_eq!(status(&decided), "running", "A resumes the run: {decided:#}");
    // The approved call is running on A (its line is written; it sleeps 3 s more).
    cluster.ledger_reaches(1, Duration::from_secs(5)).await?;
    let signalled = Instant::now();
    let code = cluster.a.terminate(Duration::from_secs(15)).await?;
    let exited = signalled.elapsed();
    eprintln!("A exited {exited:?} after SIGTERM");
    assert_eq!(code, Some(0), "A's log:\n{}", cluster.a.log());
    assert!(exited >= Duration::from_secs(2), "A waited for the call to finish: it exited after {exited:?}");

    // B's worker claims the given-back run at once (well within the 30 s lease) and goes on from the
    // call's recorded result to the next held turn.
    let run =
        cluster.run_until(&cluster.b, &id, Duration::from_secs(5), |run| status(run) == "waiting_for_approval").await?;
    let continued = signalled.elapsed() - exited;
    eprintln!("B held the next turn {continued:?} after A exited");
    assert!(continued < lease / 4, "B continued {continued:?} after A exited: not at once");
    let calls = run["pending"]["calls"].as_array().ok_or_else(|| anyhow!("no held calls: {run:#}"))?;
    assert_eq!(calls.len(), 1, "{run:#}");
    assert_eq!(calls[0]["tool"], "fs_write");
    assert_eq!(calls[0]["state"], "waiting");
    let kinds = cluster.event_kinds(&cluster.b, &id).await?;
    assert_eq!(kinds.iter().filter(|k| *k == "tool_started").count(), 1, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "tool_finished").count(), 1, "{kinds:?}");
    let metrics = cluster.http.get(format!("{}/metrics", cluster.b.url)).send().await?.text().await?;
    assert!(metrics.lines().any(|l| l == "tollgate_claims_total 1"), "B claimed the run:\n{metrics}");

    let digest = run["pending"]["turn_digest"].clone();
    let settled = cluster
        .post(
            &cluster.b,
            &format!("/v1/runs/{id}/decisions"),
            json!({"turn_digest": digest, "approve_all": true, "wait": true}),
        )
        .await?;
    assert_eq!(status(&settled), "completed", "{settled:#}");
    assert_eq!(std::fs::read_to_string(cluster.workspace.join("note.txt"))?, "t");
    assert_eq!(cluster.ledger(), ["t slow"], "the approved call ran once");
    cluster.drop_schema().await
}

/// A run whose segment stops every node that drives it (here each node is SIGKILLed while the run's
/// allow-gated call runs, as a planted input crashing the process would) is taken over after each
/// restart until `[runtime] max_takeovers` takeovers in a row reached no new step; the next takeover
/// fails it as `crash_loop` instead of driving it again, so the fleet stops restarting for it.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_stops_every_node_driving_it_is_failed_after_max_takeovers() -> Result<()> {
    let script = json!({"turns": [{"tool_calls": [ledger_call("loop", 20)]}, {"text": "done"}]});
    let policy = "[[agents.policy]]\ntool = \"shell\"\ngate = \"allow\"";
    let more = "[runtime]\nmax_takeovers = 2";
    let Some(mut cluster) = Cluster::start_with(script, policy, LEASE, more).await? else { return Ok(()) };
    // One node at a time, each started again after the other was killed.
    cluster.b.kill()?;
    let run = cluster.post(&cluster.a, "/v1/runs", json!({"input": "c"})).await?;
    let id = id_of(&run)?;
    // Drive 1 (the start), then takeovers 1 and 2: each reaches the call, then its node dies.
    for drive in 1..=3_usize {
        cluster.ledger_reaches(drive, Duration::from_secs(20)).await?;
        let next = if drive % 2 == 1 { "b" } else { "a" };
        if drive % 2 == 1 {
            cluster.a.kill()?
        } else {
            cluster.b.kill()?
        }
        let node = spawn(&cluster.dir, &cluster.config, &format!("{next}{drive}"), &cluster.http).await?;
        if drive % 2 == 1 { cluster.b = node } else { cluster.a = node }
    }
    // Takeover 3 fails the run: the call is not run a fourth time.
    let node = &cluster.b;
    let failed = cluster.run_until(node, &id, Duration::from_secs(20), |run| status(run) == "failed").await?;
    assert_eq!(failed["error"]["kind"], "crash_loop", "{failed:#}");
    assert_eq!(cluster.ledger(), ["c loop"; 3], "driven once and taken over twice, never again");
    let kinds = cluster.event_kinds(node, &id).await?;
    assert_eq!(kinds.iter().filter(|k| *k == "run_taken_over").count(), 3, "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("run_failed"), "{kinds:?}");
    cluster.drop_schema().await
}

#[tokio::test(flavor = "multi_thread")]
async fn queued_runs_spread_over_both_nodes_and_each_runs_once() -> Result<()> {
    // Two workers a node and eight one-second runs queued at once: both nodes' workers claim them.
    let script = json!({"turns": [{"tool_calls": [ledger_call("queued", 1)]}, {"text": "done"}]});
    let policy = "[[agents.policy]]\ntool = \"shell\"\ngate = \"allow\"";
    let workers = "[runtime]\nworkers = 2";
    let Some(cluster) = Cluster::start_with(script, policy, LEASE, workers).await? else { return Ok(()) };
    let mut ids = Vec::new();
    for n in 0..8 {
        let node = if n % 2 == 0 { &cluster.a } else { &cluster.b };
        let run = cluster.post(node, "/v1/runs", json!({"input": format!("q{n}")})).await?;
        assert_eq!(status(&run), "queued", "answered at once, queued for a worker: {run:#}");
        ids.push(id_of(&run)?);
    }
    for id in &ids {
        cluster.run_until(&cluster.a, id, Duration::from_secs(20), |run| status(run) == "completed").await?;
    }
    let mut ledger = cluster.ledger();
    ledger.sort();
    let expected: Vec<String> = (0..8).map(|n| format!("q{n} queued")).collect();
    assert_eq!(ledger, expected, "each run's call ran once");
    let mut claims = Vec::new();
    for node in [&cluster.a, &cluster.b] {
        let metrics = cluster.http.get(format!("{}/metrics", node.url)).send().await?.text().await?;
        let value = |name: &str| {
            metrics.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok()).unwrap_or(-1.0)
        };
        assert_eq!(value("tollgate_workers"), 2.0, "{metrics}");
        assert_eq!(value("tollgate_queue_depth"), 0.0, "{metrics}");
        assert!(value("tollgate_claim_latency_seconds_count") >= 1.0, "{metrics}");
        claims.push(value("tollgate_claims_total"));
    }
    eprintln!("claims on A and B: {claims:?}");
    assert!(claims.iter().all(|n| *n >= 1.0), "both nodes claimed queued runs: {claims:?}");
    assert_eq!(claims.iter().sum::<f64>(), 8.0, "every run was claimed once: {claims:?}");
    cluster.drop_schema().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_started_on_one_node_and_decided_on_the_other_resumes_once() -> Result<()> {
    let script = json!({"turns": [{"tool_calls": [ledger_call("once", 0)]}, {"text": "done"}]});
    let policy = "[[agents.policy]]\ntool = \"shell\"\ngate = \"ask\"";
    let Some(cluster) = Cluster::start(script, policy).await? else { return Ok(()) };
    let run = cluster.post(&cluster.a, "/v1/runs", json!({"input": "d", "wait": true})).await?;
    assert_eq!(status(&run), "waiting_for_approval", "{run:#}");
    let id = id_of(&run)?;
    let on_b = cluster.run(&cluster.b, &id).await?;
    assert_eq!(on_b["pending"], run["pending"], "B reads the held turn A stored");

    let digest = run["pending"]["turn_digest"].clone();
    let settled = cluster
        .post(
            &cluster.b,
            &format!("/v1/runs/{id}/decisions"),
            json!({"turn_digest": digest, "approve_all": true, "wait": true}),
        )
        .await?;
    assert_eq!(status(&settled), "completed", "B's answer is the settled run: {settled:#}");
    assert_eq!(cluster.ledger(), ["d once"]);
    // A sees the same settled run, and the log holds one execution.
    let on_a = cluster.run_until(&cluster.a, &id, Duration::from_secs(5), |run| status(run) == "completed").await?;
    assert_eq!(on_a["version"], settled["version"], "{on_a:#}\n{settled:#}");
    let kinds = cluster.event_kinds(&cluster.a, &id).await?;
    assert_eq!(kinds.iter().filter(|k| *k == "tool_started").count(), 1, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "tool_finished").count(), 1, "{kinds:?}");
    // A second decision is refused: the run is not waiting.
    let again = cluster
        .http
        .post(format!("{}/v1/runs/{id}/decisions", cluster.a.url))
        .json(&json!({"turn_digest": digest, "approve_all": true}))
        .send()
        .await?;
    assert_eq!(again.status().as_u16(), 409);
    assert_eq!(cluster.ledger(), ["d once"]);
    cluster.drop_schema().await
}

/// The most a stream on one node may lag the other node's commit (the issue's bound).
const WAKE_BOUND: Duration = Duration::from_secs(1);

/// When each commit in `schema` was announced, as the test's own LISTEN heard it: `(run, last_seq, when)`
/// in the order PostgreSQL delivered them. PostgreSQL delivers a notification at its transaction's
/// commit, so this clock is the commit's, kept by neither node.
#[derive(Clone, Default)]
struct Announcements(std::sync::Arc<std::sync::Mutex<Vec<(String, u64, Instant)>>>);

impl Announcements {
    /// Listens on the channel the nodes' writes announce themselves on, from now until the test ends.
    async fn listen(base: &str, schema: &str) -> Result<Announcements> {
        let mut listener = sqlx::postgres::PgListener::connect(base).await?;
        listener.listen(tollgate_agent_store::pg_notify::CHANNEL).await?;
        let heard = Announcements::default();
        let recorded = heard.clone();
        let schema = schema.to_owned();
        tokio::spawn(async move {
            while let Ok(notification) = listener.recv().await {
                let when = Instant::now();
                let Ok(payload) = serde_json::from_str::<Value>(notification.payload()) else { continue };
                if payload["schema"] != schema.as_str() {
                    continue;
                }
                let id = payload["id"].as_str().unwrap_or_default().to_owned();
                let seq = payload["last_seq"].as_u64().unwrap_or_default();
                recorded.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((id, seq, when));
            }
        });
        Ok(heard)
    }

    /// When the commit that wrote event `seq` of run `id` was announced.
    fn commit_of(&self, id: &str, seq: u64) -> Option<Instant> {
        let heard = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        heard.iter().find(|(run, last, _)| run == id && *last >= seq).map(|(_, _, when)| *when)
    }
}

/// An open SSE response, read event by event (the `data:` of each frame).
struct Sse {
    response: reqwest::Response,
    frames: SseFrames,
}

impl Sse {
    async fn open(url: &str) -> Result<Sse> {
        let response = reqwest::Client::new().get(url).header("accept", "text/event-stream").send().await?;
        if !response.status().is_success() {
            bail!("GET {url} (SSE): {}", response.status());
        }
        Ok(Sse { response, frames: SseFrames::default() })
    }

    /// The next event's JSON, `None` once the stream has ended; fails after `limit` without one.
    async fn next(&mut self, limit: Duration) -> Result<Option<Value>> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(frame) = self.frames.next_frame() {
                return Ok(Some(serde_json::from_str(&frame.data)?));
            }
            match tokio::time::timeout_at(deadline, self.response.chunk()).await {
                Ok(chunk) => match chunk? {
                    Some(bytes) => self.frames.push(&bytes),
                    None => return Ok(None),
                },
                Err(_) => bail!("no SSE event within {limit:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sse_stream_on_one_node_sees_the_other_nodes_steps_in_order_within_a_second_of_each_commit() -> Result<()> {
    // Two allow-gated pauses (each turn's results committed before the next model call), then an
    // ask-gated call held at the gate; approved on A, it runs and the run completes: five commits by A.
    let pause = json!({"name": "shell", "arguments": {"argv": ["sh", "-c", "sleep 0.3"]}});
    let script = json!({"turns": [
        {"tool_calls": [pause]}, {"tool_calls": [pause]}, {"tool_calls": [ledger_call("streamed", 0)]}, {"text": "done"}
    ]});
    let policy = "[[agents.policy]]\ntool = \"shell\"\nwhen = { \"/argv/2\" = \"sleep *\" }\ngate = \"allow\"\n\n\
                  [[agents.policy]]\ntool = \"shell\"\ngate = \"ask\"";
    let Some(cluster) = Cluster::start(script, policy).await? else { return Ok(()) };
    let base = postgres_url().ok_or_else(|| anyhow!("no PostgreSQL"))?;
    let announced = Announcements::listen(&base, cluster.schema.name()).await?;
    // Both nodes listen (each records its listener), and long enough ago that neither polls any more:
    // from here a stream on B learns of A's commits from notifications alone.
    let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&base).await?;
    let live = format!(
        "SELECT COUNT(*) FROM {}.listeners AS l JOIN pg_stat_activity AS a ON a.pid = l.pid",
        cluster.schema.name()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(live.clone())).fetch_one(&mut admin).await? < 2 {
        if Instant::now() > deadline {
            bail!("both nodes do not listen within 10 s\nA's log:\n{}\nB's log:\n{}", cluster.a.log(), cluster.b.log());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(tollgate_agent_store::pg_notify::SETTLE + Duration::from_millis(500)).await;

    // A drives the run (a waiting start is driven by the node it was sent to); B finds it once its first
    // step is committed and follows it from the start.
    let start = tokio::spawn({
        let (http, url) = (cluster.http.clone(), cluster.a.url.clone());
        async move {
            Cluster::answer(
                "POST /v1/runs on A",
                http.post(format!("{url}/v1/runs")).json(&json!({"input": "s", "wait": true})),
            )
            .await
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let id = loop {
        let page = cluster.get(&cluster.b, "/v1/runs").await?;
        if let Some(run) = page["runs"].as_array().and_then(|runs| runs.first()) {
            break id_of(run)?;
        }
        if Instant::now() > deadline {
            bail!("B lists no run within 10 s\nA's log:\n{}", cluster.a.log());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let mut stream = Sse::open(&format!("{}/v1/runs/{id}/events", cluster.b.url)).await?;
    let opened = Instant::now();
    let mut seen: Vec<(Value, Instant)> = Vec::new();
    let mut follow = async |stream: &mut Sse, until: &str| -> Result<()> {
        loop {
            let event = stream.next(Duration::from_secs(20)).await?.ok_or_else(|| anyhow!("the stream ended early"))?;
            let kind = event["kind"].as_str().unwrap_or_default().to_owned();
            seen.push((event, Instant::now()));
            if kind == until {
                return Ok(());
            }
        }
    };
    follow(&mut stream, "approval_requested").await?;
    let waiting = start.await??;
    assert_eq!(status(&waiting), "waiting_for_approval", "{waiting:#}");
    let decided = cluster
        .post(
            &cluster.a,
            &format!("/v1/runs/{id}/decisions"),
            json!({"turn_digest": waiting["pending"]["turn_digest"], "approve_all": true}),
        )
        .await?;
    assert_eq!(status(&decided), "running", "A resumes the run it decided: {decided:#}");
    follow(&mut stream, "run_completed").await?;
    assert!(stream.next(Duration::from_secs(5)).await?.is_none(), "the stream ends after the terminal event");

    // Every event once, in order, with no gap: what A stored, as B streamed it.
    let stored = cluster.get(&cluster.a, &format!("/v1/runs/{id}/events")).await?["events"].clone();
    let streamed: Vec<Value> = seen.iter().map(|(event, _)| event.clone()).collect();
    assert_eq!(Value::Array(streamed), stored, "B streamed every event A stored, once each, in order");
    // Each event committed after the stream opened reached B within the bound of its commit.
    let mut measured = Vec::new();
    for (event, arrived) in &seen {
        let seq = event["seq"].as_u64().unwrap_or_default();
        let kind = event["kind"].as_str().unwrap_or_default();
        let Some(committed) = announced.commit_of(&id, seq) else {
            bail!("the commit of event {seq} ({kind}) was never announced, though B listens");
        };
        if committed > opened {
            measured.push((seq, kind.to_owned(), arrived.saturating_duration_since(committed)));
        }
    }
    eprintln!("B's SSE latencies after A's commits: {measured:?}");
    for kind in ["tool_finished", "approval_requested", "decision", "run_completed"] {
        assert!(
            measured.iter().any(|(_, k, _)| k == kind),
            "no {kind} committed after the stream opened: {measured:?}"
        );
    }
    for (seq, kind, latency) in &measured {
        assert!(*latency < WAKE_BOUND, "event {seq} ({kind}) reached B {latency:?} after A's commit");
    }
    // And no poll delay: a stream that learnt of A's commits by reading again every second (SSE's
    // fallback) would lag them by half a second in the middle, not a few milliseconds.
    let mut lags: Vec<Duration> = measured.iter().map(|(_, _, latency)| *latency).collect();
    lags.sort();
    let median = lags[lags.len() / 2];
    assert!(median < WAKE_BOUND / 4, "B's median lag is {median:?}: it polls instead of waking on notifications");
    assert_eq!(cluster.ledger(), ["s streamed"]);
    sqlx::Connection::close(admin).await?;
    cluster.drop_schema().await
}

/// A webhook receiver on loopback: it records the `X-Tollgate-Delivery` of every request, and answers
/// 200 once `answering` is set; until then it holds each request open without an answer.
pub(crate) struct Hooks {
    pub(crate) url: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    pub(crate) answering: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Hooks {
    pub(crate) async fn start() -> Result<Hooks> {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        let hooks = Hooks { url, seen: Default::default(), answering: Default::default() };
        let (seen, answering) = (hooks.seen.clone(), hooks.answering.clone());
        tokio::spawn(async move {
            while let Ok((connection, _)) = listener.accept().await {
                let (seen, answering) = (seen.clone(), answering.clone());
                tokio::spawn(async move {
                    let mut connection = BufReader::new(connection);
                    loop {
                        let (mut length, mut delivery, mut line) = (0, String::new(), String::new());
                        loop {
                            line.clear();
                            if connection.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            let header = line.trim_end().to_ascii_lowercase();
                            if header.is_empty() {
                                break;
                            }
                            if let Some(value) = header.strip_prefix("content-length:") {
                                length = value.trim().parse().unwrap_or(0);
                            }
                            if let Some(value) = header.strip_prefix("x-tollgate-delivery:") {
                                delivery = value.trim().to_owned();
                            }
                        }
                        let mut body = vec![0; length];
                        if connection.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(delivery);
                        while !answering.load(std::sync::atomic::Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                        if connection.get_mut().write_all(answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Ok(hooks)
    }

    /// The `X-Tollgate-Delivery` of every request received, in arrival order.
    pub(crate) fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// Two nodes delivering webhooks to `hooks`, each with `lease`: A started alone until it holds the
/// `webhooks` reader, then B. `None` when no PostgreSQL is configured.
async fn webhook_cluster(hooks: &Hooks, lease: Duration) -> Result<Option<Cluster>> {
    let Some(base) = postgres_url() else { return Ok(None) };
    let schema = ScratchSchema::create(&base, "tollgate_nodes").await?;
    let dir = scratch_dir("nodes-hooks");
    let script = json!({"turns": [{"tool_calls": [ledger_call("hooked", 0)]}, {"text": "done"}]});
    let rest = format!("[[agents.policy]]\ntool = \"shell\"\ngate = \"ask\"\n\n[[webhooks]]\nurl = \"{}\"", hooks.url);
    let (workspace, config) = write_config(&dir, &schema.url(), lease, &script, "[\"shell\"]", &rest)?;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build()?;
    let a = spawn(&dir, &config, "a", &http).await?;
    let mut db = <sqlx::PgConnection as sqlx::Connection>::connect(&schema.url()).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held: Option<String> = sqlx::query_scalar("SELECT holder FROM log_readers WHERE name = 'webhooks'")
            .fetch_optional(&mut db)
            .await?;
        if held.is_some() {
            break;
        }
        if Instant::now() > deadline {
            bail!("node A never took the webhook reader:\n{}", a.log());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let b = spawn(&dir, &config, "b", &http).await?;
    Ok(Some(Cluster { a, b, workspace, http, schema, dir, config }))
}

/// Waits until `hooks` has seen every delivery of `expected` among those after the first `skip`.
async fn delivered(
    hooks: &Hooks,
    skip: usize,
    expected: &[String],
    limit: Duration,
    log: impl Fn() -> String,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let seen: Vec<String> = hooks.seen().get(skip..).map(<[String]>::to_vec).unwrap_or_default();
        if expected.iter().all(|delivery| seen.contains(delivery)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{seen:?} of {expected:?} delivered within {limit:?}:\n{}", log());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The node holding the webhook reader is killed while its deliveries are under way (the receiver
/// holds them unanswered): once its hold lapses, the other node takes the reader and delivers every
/// event from the position the first left behind, so nothing committed goes undelivered.
#[tokio::test(flavor = "multi_thread")]
async fn sigkill_of_the_webhook_holder_leaves_its_deliveries_to_the_other_node() -> Result<()> {
    let hooks = Hooks::start().await?;
    let Some(mut cluster) = webhook_cluster(&hooks, LEASE).await? else { return Ok(()) };
    let run = cluster.post(&cluster.b, "/v1/runs", json!({"input": "r", "wait": true})).await?;
    assert_eq!(status(&run), "waiting_for_approval", "{run:#}");
    let id = id_of(&run)?;
    let kinds = cluster.event_kinds(&cluster.b, &id).await?;
    let expected: Vec<String> = (1..=kinds.len()).map(|seq| format!("{id}:{seq}")).collect();
    // A (the holder) has sent them, and the receiver holds them unanswered.
    delivered(&hooks, 0, &expected, Duration::from_secs(10), || cluster.a.log()).await?;
    cluster.a.kill()?;
    let killed = Instant::now();
    let sent_by_a = hooks.seen().len();
    hooks.answering.store(true, std::sync::atomic::Ordering::SeqCst);

    // B takes the reader once A's hold lapses and sends every event again.
    delivered(&hooks, sent_by_a, &expected, LEASE + Duration::from_secs(8), || cluster.b.log()).await?;
    eprintln!("B delivered A's unanswered deliveries {:?} after the SIGKILL", killed.elapsed());
    cluster.drop_schema().await
}

/// SIGTERM of the node holding the webhook reader (a rolling deploy): it releases the reader as it
/// exits, so the other node delivers what is committed next at once — well within the 30 s lease the
/// reader is held for, which a lapse would wait out.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_of_the_webhook_holder_hands_the_reader_over_at_once() -> Result<()> {
    let hooks = Hooks::start().await?;
    hooks.answering.store(true, std::sync::atomic::Ordering::SeqCst);
    let lease = Duration::from_secs(30);
    let Some(mut cluster) = webhook_cluster(&hooks, lease).await? else { return Ok(()) };
    assert_eq!(cluster.a.terminate(Duration::from_secs(15)).await?, Some(0), "{}", cluster.a.log());
    let exited = Instant::now();
    let run = cluster.post(&cluster.b, "/v1/runs", json!({"input": "r", "wait": true})).await?;
    assert_eq!(status(&run), "waiting_for_approval", "{run:#}");
    let id = id_of(&run)?;
    let kinds = cluster.event_kinds(&cluster.b, &id).await?;
    let expected: Vec<String> = (1..=kinds.len()).map(|seq| format!("{id}:{seq}")).collect();
    delivered(&hooks, 0, &expected, lease / 4, || cluster.b.log()).await?;
    eprintln!("B delivered {:?} after A exited", exited.elapsed());
    cluster.drop_schema().await
}

//! Quorum through the real binary (V2.md section 4, docs/api.md "Quorum"): two `tollgate serve` nodes on
//! one PostgreSQL schema, a `shell` call whose policy rule says `approvals = 2`, and four people with
//! their own tokens. Three approvers racing over HTTP on both nodes: exactly two approvals land, the
//! second resumes the run once, and the call runs once (every run appends a line to `ledger.txt`). Then,
//! on one run: the same actor twice (409), an edit and a respond (422), one deny among approvals (the
//! call never runs), and `approve_all` by two actors (each counts once).
//!
//! Needs `TOLLGATE_TEST_POSTGRES_URL` (skipped with a note when unset, a failure under CI).

use crate::nodes::{Node, spawn, write_config};
use anyhow::{Result, anyhow, bail};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tollgate_agent_store::ScratchSchema;
use tollgate_agent_testkit::{postgres_url, scratch_dir};

const LEDGER: &str = "ledger.txt";

/// The people, each with a token of their own: alice starts runs, the others approve.
fn people() -> String {
    [("alice", "runner"), ("bob", "approver"), ("carol", "approver"), ("dave", "approver")]
        .iter()
        .map(|(name, role)| {
            format!("[[auth.tokens]]\nname = \"{name}\"\ntoken = \"{}\"\nroles = [\"{role}\"]\n\n", token(name))
        })
        .collect()
}

fn token(person: &str) -> String {
    format!("token-{person}-0123456789")
}

/// Two nodes on one fresh schema; the agent's `shell` calls need two approvals.
struct Quorum {
    a: Node,
    b: Node,
    workspace: std::path::PathBuf,
    http: reqwest::Client,
    schema: ScratchSchema,
}

impl Quorum {
    async fn start() -> Result<Option<Quorum>> {
        let Some(base) = postgres_url() else { return Ok(None) };
        let schema = ScratchSchema::create(&base, "tollgate_quorum").await?;
        let dir = scratch_dir("quorum");
        let command = format!("echo \"$0\" >> {LEDGER}");
        let call = json!({"name": "shell", "arguments": {"argv": ["sh", "-c", command, "{{input}}"]}});
        let script = json!({"turns": [
            {"tool_calls": [call]},
            {"when_denied": {"text": "Not paid."}, "when_approved": {"text": "Paid."}}
        ]});
        let rest = format!("[[agents.policy]]\ntool = \"shell\"\ngate = \"ask\"\napprovals = 2\n\n{}", people());
        let (workspace, config) =
            write_config(&dir, &schema.url(), Duration::from_secs(5), &script, "[\"shell\"]", &rest)?;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build()?;
        let a = spawn(&dir, &config, "a", &http).await?;
        let b = spawn(&dir, &config, "b", &http).await?;
        Ok(Some(Quorum { a, b, workspace, http, schema }))
    }

    fn ledger(&self) -> Vec<String> {
        std::fs::read_to_string(self.workspace.join(LEDGER)).unwrap_or_default().lines().map(str::to_owned).collect()
    }

    /// The answer's status and JSON body.
    async fn send(&self, request: reqwest::RequestBuilder, person: &str) -> Result<(StatusCode, Value)> {
        let response = request.bearer_auth(token(person)).send().await?;
        let status = response.status();
        Ok((status, response.json().await?))
    }

    /// Starts a run as alice on A and answers it, waiting for approval.
    async fn start_run(&self, input: &str) -> Result<Value> {
        let request = self.http.post(format!("{}/v1/runs", self.a.url)).json(&json!({"input": input, "wait": true}));
        let (status, run) = self.send(request, "alice").await?;
        if status != StatusCode::CREATED && status != StatusCode::OK {
            bail!("start: {status} {run:#}");
        }
        if run["status"] != "waiting_for_approval" {
            bail!("the run does not wait: {run:#}");
        }
        Ok(run)
    }

    /// `person`'s decision request on `node`, naming the digest of `run` as read.
    async fn decide(&self, node: &Node, run: &Value, person: &str, body: Value) -> Result<(StatusCode, Value)> {
        let mut body = body;
        body["turn_digest"] = run["pending"]["turn_digest"].clone();
        let url = format!("{}/v1/runs/{}/decisions", node.url, id(run)?);
        self.send(self.http.post(url).json(&body), person).await
    }

    async fn run(&self, node: &Node, id: &str) -> Result<Value> {
        let (status, run) = self.send(self.http.get(format!("{}/v1/runs/{id}", node.url)), "alice").await?;
        if status != StatusCode::OK {
            bail!("GET run: {status} {run:#}");
        }
        Ok(run)
    }

    /// Polls the run on `node` until it has ended.
    async fn ended(&self, node: &Node, id: &str) -> Result<Value> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let run = self.run(node, id).await?;
            if run["finished_at"].is_string() {
                return Ok(run);
            }
            if Instant::now() > deadline {
                bail!("the run has not ended: {run:#}\nA:\n{}\nB:\n{}", self.a.log(), self.b.log());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The `decision` events of a run: actor, action and approvals.
    async fn decisions(&self, id: &str) -> Result<Vec<Value>> {
        let url = format!("{}/v1/runs/{id}/events", self.b.url);
        let (_, events) = self.send(self.http.get(url), "alice").await?;
        let events = events["events"].as_array().ok_or_else(|| anyhow!("no events: {events}"))?;
        Ok(events
            .iter()
            .filter(|e| e["kind"] == "decision")
            .map(|e| json!([e["data"]["actor"], e["data"]["action"], e["data"]["approvals"]]))
            .collect())
    }

    async fn drop_schema(self) -> Result<()> {
        let Quorum { a, b, schema, .. } = self;
        drop((a, b));
        Ok(schema.drop_all().await?)
    }
}

fn id(run: &Value) -> Result<String> {
    run["id"].as_str().map(str::to_owned).ok_or_else(|| anyhow!("no id in {run:#}"))
}

const APPROVE_ALL: fn() -> Value = || json!({"approve_all": true});

fn each(decision: Value) -> Value {
    let mut decision = decision;
    decision["call_id"] = json!("call_1");
    json!({"decisions": [decision]})
}

#[tokio::test(flavor = "multi_thread")]
async fn three_approvers_racing_on_two_nodes_approve_a_quorum_call_once() -> Result<()> {
    let Some(q) = Quorum::start().await? else { return Ok(()) };
    let run = q.start_run("race").await?;
    assert_eq!(run["pending"]["calls"][0]["approvals"], json!({"required": 2, "given": []}), "{run:#}");
    let id = id(&run)?;

    let (bob, carol, dave) = tokio::join!(
        q.decide(&q.a, &run, "bob", APPROVE_ALL()),
        q.decide(&q.b, &run, "carol", APPROVE_ALL()),
        q.decide(&q.a, &run, "dave", APPROVE_ALL()),
    );
    let answers = [bob?, carol?, dave?];
    let landed = answers.iter().filter(|(status, _)| status.is_success()).count();
    assert_eq!(landed, 2, "exactly two approvals land: {answers:#?}");
    for (status, problem) in answers.iter().filter(|(status, _)| !status.is_success()) {
        assert_eq!(*status, StatusCode::CONFLICT, "the third finds the run resumed: {problem:#}");
    }
    let done = q.ended(&q.b, &id).await?;
    assert_eq!((&done["status"], &done["output"]), (&json!("completed"), &json!("Paid.")), "{done:#}");
    assert_eq!(q.ledger(), ["race"], "the call ran once");
    let decisions = q.decisions(&id).await?;
    assert_eq!(decisions.len(), 2, "{decisions:#?}");
    let given = decisions[1][2]["given"].as_array().map_or(0, Vec::len);
    assert_eq!((&decisions[1][2]["required"], given), (&json!(2), 2), "{decisions:#?}");
    q.drop_schema().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_quorum_call_refuses_a_second_approval_an_edit_and_runs_never_after_a_deny() -> Result<()> {
    let Some(q) = Quorum::start().await? else { return Ok(()) };

    // The same actor twice, an edit and a respond: refused, nothing changes.
    let run = q.start_run("denied").await?;
    let id_denied = id(&run)?;
    let (status, first) = q.decide(&q.a, &run, "bob", each(json!({"action": "approve"}))).await?;
    assert_eq!(status, StatusCode::OK, "{first:#}");
    assert_eq!(first["status"], "waiting_for_approval", "one of two approvals: {first:#}");
    let call = &first["pending"]["calls"][0];
    assert_eq!(
        (&call["approvals"], &call["takes_decision"]),
        (&json!({"required": 2, "given": ["bob"]}), &json!(true))
    );
    let (status, twice) = q.decide(&q.b, &run, "bob", each(json!({"action": "approve"}))).await?;
    assert_eq!(status, StatusCode::CONFLICT, "{twice:#}");
    assert!(twice["detail"].as_str().is_some_and(|d| d.contains("bob already approved")), "{twice:#}");
    let (status, all_again) = q.decide(&q.b, &run, "bob", APPROVE_ALL()).await?;
    assert_eq!(status, StatusCode::CONFLICT, "approve_all counts once per actor: {all_again:#}");
    let edit = each(json!({"action": "edit", "arguments": {"argv": ["true"]}}));
    let (status, edited) = q.decide(&q.a, &run, "carol", edit).await?;
    assert_eq!(
        (status, &edited["type"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("https://tollgate.dev/problems/invalid-decision")),
        "{edited:#}"
    );
    let (status, _) = q.decide(&q.a, &run, "carol", each(json!({"action": "respond", "result": "ok"}))).await?;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(q.run(&q.b, &id_denied).await?["pending"], first["pending"], "refusals changed nothing");

    // One deny among approvals denies it: the call never runs.
    let (status, denied) =
        q.decide(&q.b, &run, "carol", each(json!({"action": "deny", "reason": "over budget"}))).await?;
    assert_eq!(status, StatusCode::OK, "{denied:#}");
    let done = q.ended(&q.a, &id_denied).await?;
    assert_eq!(done["output"], "Not paid.", "{done:#}");
    assert!(q.ledger().is_empty(), "a denied call never runs: {:?}", q.ledger());

    // `approve_all` by two actors approves it.
    let run = q.start_run("approved").await?;
    let (status, half) = q.decide(&q.a, &run, "dave", APPROVE_ALL()).await?;
    assert_eq!((status, &half["status"]), (StatusCode::OK, &json!("waiting_for_approval")), "{half:#}");
    let (status, _) = q.decide(&q.b, &run, "carol", APPROVE_ALL()).await?;
    assert_eq!(status, StatusCode::OK);
    let done = q.ended(&q.a, &id(&run)?).await?;
    assert_eq!(done["output"], "Paid.", "{done:#}");
    assert_eq!(q.ledger(), ["approved"]);
    assert_eq!(
        q.decisions(&id(&run)?).await?,
        vec![
            json!(["dave", "approve", {"required": 2, "given": ["dave"]}]),
            json!(["carol", "approve", {"required": 2, "given": ["dave", "carol"]}]),
        ]
    );
    q.drop_schema().await
}

//! The real `tollgate` binary in a fresh folder with no configuration and stdin not a terminal: the
//! demo agent's whole approval cycle, the exit codes of docs/cli.md, `--json` output, id prefixes, and
//! snapshots of the text people read.

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use tollgate_agent_testkit::scratch_dir;

use crate::support::{Outcome, is_uuid_v7};

/// A fresh, empty folder used as the current folder of every invocation.
struct Sandbox {
    dir: PathBuf,
}

impl Sandbox {
    fn new() -> Self {
        Self { dir: scratch_dir("cli") }
    }

    fn tollgate(&self, args: &[&str]) -> Result<Outcome> {
        self.tollgate_with(args, &[])
    }

    fn tollgate_with(&self, args: &[&str], env: &[(&str, &str)]) -> Result<Outcome> {
        crate::support::tollgate_in(&self.dir, args, env)
    }

    /// Runs and checks the exit code.
    fn expect(&self, code: i32, args: &[&str]) -> Result<Outcome> {
        let out = self.tollgate(args)?;
        if out.code != code {
            bail!("`tollgate {}` exited {} instead of {code}: {out:?}", args.join(" "), out.code);
        }
        Ok(out)
    }

    /// Starts a demo run that waits at the gate; returns its id.
    fn waiting_run(&self, input: &str) -> Result<String> {
        self.expect(3, &["run", input])?.waiting_id()
    }

    fn workspace_file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join("workspace").join(name)).ok()
    }

    fn db(&self) -> PathBuf {
        self.dir.join("tollgate.db")
    }
}

#[test]
fn hello_waits_at_the_gate_and_approve_writes_the_note() -> Result<()> {
    let sandbox = Sandbox::new();
    let run = sandbox.expect(3, &["run", "hello"])?;
    let id = run.waiting_id()?;
    assert!(run.stdout.contains(&format!("tollgate approve {id}")), "{run:?}");
    assert!(run.stderr.contains("create note.txt (5 bytes)"), "the preview is shown: {run:?}");
    assert!(sandbox.db().exists(), "the default store is ./tollgate.db");
    assert!(sandbox.dir.join("workspace").is_dir(), "the workspace is created on first use");
    assert_eq!(sandbox.workspace_file("note.txt"), None, "nothing is written before the decision");

    let approved = sandbox.expect(0, &["approve", &id])?;
    assert_eq!(approved.stdout, "Saved note.txt.\n");
    assert_eq!(sandbox.workspace_file("note.txt").as_deref(), Some("hello"));
    Ok(())
}

#[test]
fn deny_with_a_reason_leaves_no_note() -> Result<()> {
    let sandbox = Sandbox::new();
    let id = sandbox.waiting_run("hello")?;
    let denied = sandbox.expect(0, &["deny", &id, "--reason", "not today"])?;
    assert_eq!(denied.stdout, "Understood — I did not write the note.\n");
    assert_eq!(sandbox.workspace_file("note.txt"), None);

    let shown = sandbox.expect(0, &["show", &id, "--events", "--json"])?.json()?;
    let decision = shown["events"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["kind"] == "decision"))
        .ok_or_else(|| anyhow!("no decision event in {shown}"))?;
    assert_eq!(decision["data"]["action"], "deny");
    assert_eq!(decision["data"]["reason"], "not today");
    assert_eq!(decision["data"]["actor"], "local");
    Ok(())
}

/// The approval is bound to what its preview saw: `create note.txt` was approved, but another process
/// made `note.txt` in between, so the approved write leaves that file alone and its result says why.
#[test]
fn a_file_made_while_the_write_waits_is_not_overwritten_by_its_approval() -> Result<()> {
    let sandbox = Sandbox::new();
    let run = sandbox.expect(3, &["run", "--detach", "hello"])?;
    assert!(run.stderr.contains("create note.txt (5 bytes)"), "{run:?}");
    let id = run.waiting_id()?;
    std::fs::write(sandbox.dir.join("workspace/note.txt"), "someone else's")?;

    sandbox.expect(0, &["approve", &id])?;
    assert_eq!(sandbox.workspace_file("note.txt").as_deref(), Some("someone else's"));
    let shown = sandbox.expect(0, &["show", &id, "--events", "--json"])?.json()?;
    let write = shown["events"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["kind"] == "tool_finished" && e["data"]["tool"] == "fs_write"))
        .ok_or_else(|| anyhow!("no tool_finished of fs_write in {shown}"))?;
    assert_eq!(write["data"]["is_error"], true);
    assert_eq!(
        write["data"]["result"],
        "not written: `note.txt` changed since the preview: it was nothing, it is now a file of 14 bytes"
    );
    Ok(())
}

#[test]
fn meta_options_become_the_runs_metadata() -> Result<()> {
    let sandbox = Sandbox::new();
    let args = ["--json", "run", "--meta", "customer=acme", "--meta", "seats=3", "--meta", r#"tenant={"id":7}"#, "hi"];
    let waiting = sandbox.expect(3, &args)?.json()?;
    assert_eq!(waiting["metadata"], serde_json::json!({"customer": "acme", "seats": 3, "tenant": {"id": 7}}));
    let id = waiting["id"].as_str().unwrap_or_default().to_owned();
    let shown = sandbox.expect(0, &["show", &id])?;
    let line = shown.stdout.lines().find(|l| l.starts_with("metadata ")).unwrap_or_default();
    assert!(line.ends_with(r#" {"customer":"acme","seats":3,"tenant":{"id":7}}"#), "{shown:?}");
    let plain = sandbox.expect(3, &["--json", "run", "hello"])?.json()?;
    assert_eq!(plain["metadata"], serde_json::json!({}), "no metadata is an empty object");

    let bad = sandbox.expect(2, &["run", "--meta", "no-value", "hi"])?;
    assert!(bad.stderr.contains("is not KEY=VALUE"), "{bad:?}");
    let big = format!("blob={}", "x".repeat(17_000));
    let too_big = sandbox.expect(2, &["run", "--meta", &big, "hi"])?;
    assert!(too_big.stderr.contains("metadata must be at most 16384 bytes"), "{too_big:?}");
    Ok(())
}

#[test]
fn json_output_is_the_documented_run_object() -> Result<()> {
    let sandbox = Sandbox::new();
    let waiting = sandbox.expect(3, &["--json", "run", "hello"])?.json()?;
    let keys: Vec<&str> = waiting.as_object().map(|m| m.keys().map(String::as_str).collect()).unwrap_or_default();
    assert_eq!(
        keys,
        [
            "id",
            "agent",
            "status",
            "input",
            "metadata",
            "output",
            "termination_reason",
            "iterations",
            "usage",
            "version",
            "created_by",
            "created_at",
            "updated_at",
            "finished_at",
            "error",
            "pending"
        ]
    );
    let id = waiting["id"].as_str().unwrap_or_default().to_owned();
    assert!(is_uuid_v7(&id), "{id}");
    assert_eq!(waiting["agent"], "demo");
    assert_eq!(waiting["status"], "waiting_for_approval");
    assert_eq!(waiting["input"], "hello");
    assert_eq!(waiting["output"], Value::Null);
    assert_eq!(waiting["iterations"], 1);
    assert!(waiting["usage"]["input_tokens"].is_u64() && waiting["usage"]["output_tokens"].is_u64());
    assert_eq!(waiting["created_by"], "local");
    assert!(waiting["created_at"].as_str().is_some_and(|t| t.ends_with('Z')));
    let digest = waiting["pending"]["turn_digest"].as_str().unwrap_or_default();
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{digest}");
    let calls = waiting["pending"]["calls"].as_array().cloned().unwrap_or_default();
    assert_eq!(calls.len(), 2, "both calls of the held turn are listed");
    assert_eq!(calls[0]["tool"], "fs_list");
    assert_eq!(calls[0]["gate"], "allow");
    assert_eq!(
        calls[1],
        serde_json::json!({"call_id": "call_2", "tool": "fs_write",
            "arguments": {"path": "note.txt", "content": "hello"}, "gate": "ask",
            "preview": "create note.txt (5 bytes)", "in_doubt": false, "decision": null,
            "state": "waiting", "takes_decision": true, "result": null,
            "suggested_match": {"/path": "*"}})
    );
    assert_eq!((&calls[0]["state"], &calls[0]["takes_decision"]), (&Value::from("allowed"), &Value::from(false)));

    let done = sandbox.expect(0, &["approve", &id, "--json"])?.json()?;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"], "Saved note.txt.");
    assert_eq!(done["termination_reason"], "completed");
    assert_eq!(done["pending"], Value::Null);
    assert!(done["finished_at"].is_string());

    let listed = sandbox.expect(0, &["runs", "--json"])?.json()?;
    assert_eq!(listed["runs"].as_array().map(Vec::len), Some(1));
    assert_eq!(listed["runs"][0]["id"], id.as_str());

    let shown = sandbox.expect(0, &["show", &id, "--events", "--json"])?.json()?;
    let events = shown["events"].as_array().cloned().unwrap_or_default();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"run_started"));
    assert_eq!(kinds.last(), Some(&"run_completed"));
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event["seq"], i as u64 + 1);
        assert!(event["hash"].as_str().is_some_and(|h| h.len() == 64), "{event}");
    }
    Ok(())
}

#[test]
fn ids_prefixes_conflicts_and_rejected_arguments() -> Result<()> {
    let sandbox = Sandbox::new();
    let first = sandbox.waiting_run("one")?;
    let second = sandbox.waiting_run("two")?;

    // A unique prefix works; a shared one is ambiguous; an unknown one names what was asked.
    let common = first.chars().zip(second.chars()).take_while(|(a, b)| a == b).count();
    let ambiguous = &first[..common.min(4)];
    let out = sandbox.expect(1, &["show", ambiguous])?;
    assert!(out.stderr.contains(&format!("`{ambiguous}` matches 2 runs")), "{out:?}");
    let unknown = sandbox.expect(1, &["approve", "ffffffff"])?;
    assert!(unknown.stderr.contains("no run matches `ffffffff`"), "{unknown:?}");

    // Rejected arguments change nothing (exit 2), and an unknown call is named (exit 1).
    let bad_json = sandbox.expect(2, &["edit", &first, "--call", "call_2", "--args", "{path:"])?;
    assert!(bad_json.stderr.contains("--args is not valid JSON"), "{bad_json:?}");
    let bad_schema = sandbox.expect(2, &["edit", &first, "--call", "call_2", "--args", r#"{"path": 3}"#])?;
    assert!(bad_schema.stderr.contains("call_2"), "{bad_schema:?}");
    let escape =
        sandbox.expect(2, &["edit", &first, "--call", "call_2", "--args", r#"{"path": "../x", "content": ""}"#])?;
    assert!(escape.stderr.contains("escapes the workspace"), "{escape:?}");
    sandbox.expect(2, &["approve", &first, "--call", "call_1"])?;
    let unknown_call = sandbox.expect(1, &["approve", &first, "--call", "call_9"])?;
    assert!(unknown_call.stderr.contains("call_9"), "{unknown_call:?}");
    sandbox.expect(2, &["runs", "--status", "sleeping"])?;
    sandbox.expect(2, &["deny", &first])?;
    let still = sandbox.expect(0, &["show", &first, "--json"])?.json()?;
    assert_eq!(still["status"], "waiting_for_approval");
    assert_eq!(still["pending"]["calls"][1]["decision"], Value::Null, "nothing was recorded");

    // Edit with valid arguments by a unique prefix: the edited call runs.
    let prefix = &first[..first.len() - 4];
    let edited = sandbox
        .expect(0, &["edit", prefix, "--call", "call_2", "--args", r#"{"path": "edited.txt", "content": "hi"}"#])?;
    assert_eq!(edited.stdout, "Saved note.txt.\n");
    assert_eq!(sandbox.workspace_file("edited.txt").as_deref(), Some("hi"));
    assert_eq!(sandbox.workspace_file("note.txt"), None);

    // A finished run takes no decision and cannot be cancelled: conflict.
    sandbox.expect(4, &["approve", &first])?;
    sandbox.expect(4, &["cancel", &first])?;
    let verified = sandbox.expect(0, &["verify", prefix])?;
    assert!(verified.stdout.contains("the hash chain is intact"), "{verified:?}");

    // Respond answers in the tool's place: nothing is written.
    let answered = sandbox.expect(0, &["respond", &second, "--call", "call_2", "--result", "done elsewhere"])?;
    assert_eq!(answered.stdout, "Saved note.txt.\n");
    assert_eq!(sandbox.workspace_file("note.txt"), None);

    // Cancel a waiting run: 0, then a conflict.
    let third = sandbox.waiting_run("three")?;
    let cancelled = sandbox.expect(0, &["cancel", &third, "--reason", "changed my mind"])?;
    assert_eq!(cancelled.stdout, format!("run {third} cancelled\n"));
    sandbox.expect(4, &["cancel", &third])?;
    sandbox.expect(4, &["approve", &third])?;

    let waiting = sandbox.expect(0, &["runs", "--status", "waiting_for_approval", "--json"])?.json()?;
    assert_eq!(waiting["runs"].as_array().map(Vec::len), Some(0));
    Ok(())
}

#[test]
fn the_store_url_comes_from_the_environment() -> Result<()> {
    let sandbox = Sandbox::new();
    let other = [("TOLLGATE_STORE_URL", "sqlite://other.db")];
    let out = sandbox.tollgate_with(&["run", "hello"], &other)?;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(sandbox.dir.join("other.db").exists());
    assert!(!sandbox.db().exists());

    let unusable = sandbox.tollgate_with(&["runs"], &[("TOLLGATE_STORE_URL", "mysql://db/x")])?;
    assert_eq!(unusable.code, 2, "a store that cannot be opened is a configuration error: {unusable:?}");
    assert!(unusable.stderr.contains("TOLLGATE_STORE_URL: store.url: expected"), "{unusable:?}");
    Ok(())
}

#[test]
fn tools_lists_gates_per_agent() -> Result<()> {
    let sandbox = Sandbox::new();
    let listed = sandbox.expect(0, &["tools", "--agent", "demo", "--json"])?.json()?;
    let gates: Vec<(String, String)> = listed["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| (t["name"].as_str().unwrap_or_default().to_owned(), t["gate"].as_str().unwrap_or_default().to_owned()))
        .collect();
    assert_eq!(gates, [("fs_list".to_owned(), "allow".to_owned()), ("fs_write".to_owned(), "ask".to_owned())]);
    let all = sandbox.expect(0, &["tools", "--json"])?.json()?;
    let names: Vec<&str> = all["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    for name in ["fs_list", "fs_read", "fs_write", "fs_delete"] {
        assert!(names.contains(&name), "every built-in tool is known: {names:?}");
    }
    sandbox.expect(2, &["tools", "--agent", "nobody"])?;
    Ok(())
}

#[test]
fn purge_removes_finished_runs_by_age() -> Result<()> {
    let sandbox = Sandbox::new();
    let done = sandbox.waiting_run("old")?;
    sandbox.expect(0, &["approve", &done])?;
    let waiting = sandbox.waiting_run("pending")?;

    assert_eq!(sandbox.expect(0, &["purge"])?.stdout, "purged 0 run(s)\n", "nothing is 30 days old");
    let purged = sandbox.expect(0, &["purge", "--older-than", "0s", "--json"])?.json()?;
    assert_eq!(purged, serde_json::json!({"deleted_runs": 1}));
    sandbox.expect(1, &["show", &done])?;
    sandbox.expect(0, &["show", &waiting])?;
    sandbox.expect(2, &["purge", "--older-than", "soon"])?;
    Ok(())
}

#[tokio::test]
async fn verify_names_the_first_tampered_event() -> Result<()> {
    let sandbox = Sandbox::new();
    let id = sandbox.waiting_run("hello")?;
    sandbox.expect(0, &["verify", &id])?;

    let url = format!("sqlite://{}", sandbox.db().display());
    let pool = sqlx::SqlitePool::connect(&url).await?;
    sqlx::query("UPDATE events SET data = ? WHERE run_id = ? AND seq = 3")
        .bind(r#"{"text":"forged","tool_calls":[],"usage":{"input_tokens":1,"output_tokens":1}}"#)
        .bind(&id)
        .execute(&pool)
        .await?;
    pool.close().await;

    let broken = sandbox.expect(1, &["verify", &id])?;
    assert!(broken.stdout.contains("breaks at seq 3"), "{broken:?}");
    let json = sandbox.expect(1, &["verify", &id, "--json"])?.json()?;
    assert_eq!(json["ok"], false);
    assert_eq!(json["first_bad_seq"], 3);
    Ok(())
}

/// Replaces what changes from run to run (ids, times, digests, ages) with stable placeholders.
fn normalise(text: &str, ids: &[(&str, &str)]) -> String {
    let mut text = text.to_owned();
    for (id, name) in ids {
        text = text.replace(id, name);
    }
    text
}

fn snapshot_settings() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z", "[TIME]");
    settings.add_filter(r"sha256:[0-9a-f]{64}", "sha256:[DIGEST]");
    settings.add_filter(r"\(\d+s ago", "([AGE] ago");
    settings.add_filter(r"\b\d+s +", "[AGE]  ");
    settings.set_prepend_module_to_snapshot(false);
    settings
}

#[test]
fn runs_and_show_text_snapshots() -> Result<()> {
    let sandbox = Sandbox::new();
    let first = sandbox.waiting_run("hello")?;
    sandbox.expect(0, &["approve", &first])?;
    let second = sandbox.waiting_run("a much longer input that does not fit in the runs table column")?;
    // Same width as a real id, so the table's columns line up as they do for people.
    let ids = [
        (first.as_str(), "run-a000-0000-7000-8000-000000000000"),
        (second.as_str(), "run-b000-0000-7000-8000-000000000000"),
    ];

    let settings = snapshot_settings();
    let _guard = settings.bind_to_scope();
    let runs = sandbox.expect(0, &["runs"])?;
    insta::assert_snapshot!("runs_table", normalise(&runs.stdout, &ids));
    let waiting = sandbox.expect(0, &["show", &second])?;
    insta::assert_snapshot!("show_waiting", normalise(&waiting.stdout, &ids));
    let done = sandbox.expect(0, &["show", &first])?;
    insta::assert_snapshot!("show_completed", normalise(&done.stdout, &ids));
    let waiting_line = sandbox.expect(3, &["run", "again"])?;
    let third = waiting_line.waiting_id()?;
    insta::assert_snapshot!(
        "run_waiting_stdout",
        normalise(&waiting_line.stdout, &[(third.as_str(), "run-c000-0000-7000-8000-000000000000")])
    );
    Ok(())
}

/// One plain HTTP/1.1 request on loopback; returns the status line and the body.
fn http(port: u16, request: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

#[test]
fn serve_answers_the_api_and_a_run_started_over_http_waits_at_the_gate() -> Result<()> {
    let sandbox = Sandbox::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
        .current_dir(&sandbox.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .env_remove("TOLLGATE_STORE_URL")
        .env_remove("TOLLGATE_WORKSPACE_ROOT")
        .spawn()?;
    let health = (0..200).find_map(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        http(port, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    });
    let body = r#"{"input": "hello", "wait": true}"#;
    let started = http(
        port,
        &format!(
            "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    let _ = server.kill();
    let _ = server.wait();
    let health = health.context("the server never answered")?;
    assert!(health.starts_with("HTTP/1.1 200") && health.contains(r#"{"status":"ok"}"#), "{health}");
    let started = started.context("no answer to POST /v1/runs")?;
    assert!(started.starts_with("HTTP/1.1 201"), "{started}");
    assert!(started.contains(r#""status":"waiting_for_approval""#), "{started}");

    // The run is in the store the CLI reads, and the CLI can decide it.
    let id = sandbox.expect(0, &["runs", "--json"])?.json()?["runs"][0]["id"].as_str().unwrap_or_default().to_owned();
    sandbox.expect(0, &["approve", &id])?;
    assert_eq!(sandbox.workspace_file("note.txt").as_deref(), Some("hello"));
    Ok(())
}

#[test]
fn serve_refuses_a_public_address_without_tokens() -> Result<()> {
    let sandbox = Sandbox::new();
    let out = sandbox.expect(2, &["serve", "--addr", "0.0.0.0:0"])?;
    assert!(out.stderr.contains("cannot serve"), "{out:?}");
    Ok(())
}

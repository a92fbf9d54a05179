//! A process assembled from `tollgate.toml`: a real provider behind a mock server, operator policy and
//! deadlines wired into the runtime, and the reference MCP filesystem server as a tool source.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use tollgate_agent_app::App;
use tollgate_agent_config::{ConfigLoader, EnvVars};
use tollgate_agent_core::{Actor, Decision, Gate, RunStatus};
use tollgate_agent_runtime::{DecisionSet, OnExpiry, StartRun};
use tollgate_agent_testkit::scratch_dir;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

async fn app(dir: &Path, toml: &str) -> App {
    let loader = ConfigLoader::new(EnvVars::new().with("OPENAI_KEY", "sk-test"), dir);
    let config = loader.load_str(dir.join("tollgate.toml"), toml).unwrap_or_else(|e| panic!("{e}"));
    App::build(config).await.unwrap_or_else(|e| panic!("{e}"))
}

/// Answers like OpenAI: first a turn writing a note, then (once a tool result is in the request) "done".
struct ChatCompletions;

impl Respond for ChatCompletions {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let answered = body["messages"].as_array().is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        let message = if answered {
            json!({"role": "assistant", "content": "done"})
        } else {
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_a", "type": "function",
                "function": {"name": "fs_write", "arguments": "{\"path\":\"note.txt\",\"content\":\"from the model\"}"}
            }]})
        };
        let finish = if answered { "stop" } else { "tool_calls" };
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "x", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}
        }))
    }
}

#[tokio::test]
async fn an_openai_agent_from_the_config_waits_at_the_gate_and_completes() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(ChatCompletions).mount(&server).await;
    let dir = scratch_dir("app-openai");
    let toml = format!(
        r#"
[store]
url = "sqlite://runs.db"
[workspace]
root = "files"
[[providers]]
name = "local"
kind = "openai"
base_url = "{}/v1"
api_key = "env:OPENAI_KEY"
timeout = "10s"
max_retries = 0
[[agents]]
name = "writer"
provider = "local"
model = "m"
tools = ["fs_*"]
approval_ttl = "1h"
on_expiry = "cancel"
"#,
        server.uri()
    );
    let app = app(&dir, &toml).await;
    std::fs::create_dir_all(&app.workspace).unwrap_or_else(|e| panic!("{e}"));
    let agent = app.runtime.agent("writer").unwrap_or_else(|| panic!("no agent"));
    assert_eq!(agent.on_expiry, OnExpiry::Cancel);
    assert_eq!(agent.approval_ttl, Some(std::time::Duration::from_secs(3600)));
    assert!(app.runtime.agent("demo").is_none(), "the demo agent exists only without configured agents");

    let run =
        app.runtime.start_and_wait(StartRun::new("write a note", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status(), RunStatus::WaitingForApproval);
    let digest = run.held_turn().map(|p| p.turn_digest.0.clone()).unwrap_or_default();
    let set = DecisionSet::Each(vec![("call_a".into(), Decision::Approve)]);
    app.runtime.decide(&run.id, &digest, set, &Actor::from("bob")).await.unwrap_or_else(|e| panic!("{e}"));
    let done = app.runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status(), RunStatus::Completed, "{:?}", done.error());
    assert_eq!(done.output(), Some("done"));
    assert_eq!(std::fs::read_to_string(dir.join("files/note.txt")).ok().as_deref(), Some("from the model"));
    assert!(dir.join("runs.db").exists(), "the store path is relative to the config file");
}

#[tokio::test]
async fn policy_overrides_gates_and_says_why() {
    let dir = scratch_dir("app-policy");
    std::fs::write(dir.join("script.json"), r#"{"turns": [{"text": "hi"}]}"#).unwrap_or_else(|e| panic!("{e}"));
    let toml = r#"
[[providers]]
name = "script"
kind = "scripted"
script = "script.json"
[[agents]]
name = "careful"
provider = "script"
tools = ["fs_list", "fs_write", "fs_delete"]
[[agents.policy]]
tool = "fs_write"
when = { "/path" = "notes/**" }
gate = "allow"
[[agents.policy]]
tool = "fs_list"
gate = "forbid"
"#;
    let app = app(&dir, toml).await;
    let agent = app.runtime.agent("careful").unwrap_or_else(|| panic!("no agent"));
    let info = |name: &str| agent.tools.iter().find(|t| t.name == name).cloned().unwrap_or_else(|| panic!("{name}"));
    assert_eq!(
        (info("fs_list").gate, info("fs_list").why.as_str()),
        (Gate::Forbid, "policy rule 2 (tool = \"fs_list\")")
    );
    assert_eq!(info("fs_write").gate, Gate::Ask);
    assert_eq!(info("fs_write").why, "default; policy rule 1 makes it allow when /path = \"notes/**\"");
    assert_eq!((info("fs_delete").gate, info("fs_delete").why.as_str()), (Gate::Ask, "default"));
    assert!(agent.tools.iter().all(|t| t.name != "fs_read"), "only the tools the agent names are offered");
    let catalog: Vec<&str> = app.runtime.catalog().iter().map(|t| t.name.as_str()).collect();
    assert!(catalog.contains(&"fs_read"), "the catalog lists every tool the process knows");
}

fn filesystem_server() -> Option<PathBuf> {
    match std::env::var("TOLLGATE_TEST_MCP_FILESYSTEM") {
        Ok(path) if !path.is_empty() => Some(PathBuf::from(path)),
        _ if std::env::var_os("CI").is_some() => panic!("TOLLGATE_TEST_MCP_FILESYSTEM must be set in CI (see .ci/run)"),
        _ => {
            eprintln!("note: TOLLGATE_TEST_MCP_FILESYSTEM is unset; skipping the reference filesystem server test");
            None
        }
    }
}

#[tokio::test]
async fn the_reference_filesystem_server_reads_freely_and_writes_after_approval() {
    let Some(entry) = filesystem_server() else { return };
    let dir = std::fs::canonicalize(scratch_dir("app-mcp")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(dir.join("files")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("files/hello.txt"), "hello").unwrap_or_else(|e| panic!("{e}"));
    let files = dir.join("files");
    let script = json!({"turns": [
        {"tool_calls": [
            {"name": "files__read_text_file", "arguments": {"path": files.join("hello.txt")}},
            {"name": "files__write_file", "arguments": {"path": files.join("note.txt"), "content": "{{input}}"}}
        ]},
        {"text": "written"}
    ]});
    std::fs::write(dir.join("script.json"), script.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let toml = format!(
        r#"
[store]
url = "sqlite://runs.db"
[[mcp_servers]]
name = "files"
command = "node"
args = ["{}", "{}"]
[[providers]]
name = "script"
kind = "scripted"
script = "script.json"
[[agents]]
name = "mcp"
provider = "script"
tools = ["files__*"]
"#,
        entry.display(),
        files.display()
    );
    let app = app(&dir, &toml).await;
    let run =
        app.runtime.start_and_wait(StartRun::new("from the gate", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status(), RunStatus::WaitingForApproval, "{:?}", run.error());
    let view = tollgate_agent_runtime::view::run_json(&run);
    assert_eq!(view["pending"]["calls"][0]["gate"], "allow", "the read tool needs no approval");
    assert_eq!(view["pending"]["calls"][1]["gate"], "ask", "the write tool waits at the gate");
    let preview = view["pending"]["calls"][1]["preview"].as_str().unwrap_or_else(|| panic!("no preview: {view}"));
    for part in ["MCP server `files`, tool `write_file`", "\"content\": \"from the gate\""] {
        assert!(preview.contains(part), "missing {part:?} in the preview: {preview}");
    }
    assert!(!files.join("note.txt").exists(), "nothing of the held turn ran");
    let digest = run.held_turn().map(|p| p.turn_digest.0.clone()).unwrap_or_default();
    app.runtime
        .decide(&run.id, &digest, DecisionSet::ApproveAll, &Actor::from("bob"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let done = app.runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status(), RunStatus::Completed, "{:?}", done.error());
    assert_eq!(std::fs::read_to_string(files.join("note.txt")).ok().as_deref(), Some("from the gate"));
    app.shutdown().await;
}

/// The embedder's own tool: records that it ran.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct RefundArgs {
    /// Cents.
    cents: u64,
}

struct Refund;

impl tollgate_agent_core::TypedTool for Refund {
    type Args = RefundArgs;
    const NAME: &str = "refund";
    const DESCRIPTION: &str = "Refunds.";
    async fn call(
        &self,
        args: RefundArgs,
        _ctx: tollgate_agent_core::ToolContext,
    ) -> Result<tollgate_agent_core::ToolOutput, tollgate_agent_core::ToolError> {
        Ok(format!("refunded {}", args.cents).into())
    }
}

/// Loads the config of a scripted agent `support` offered the embedder's `refund` tool under one policy
/// rule for it (`rule`: its keys after `tool`), with `rest` after it; the script calls `refund` once,
/// then says "ok". Each call loads the same file anew.
fn refund_config(dir_name: &str, rule: &str, rest: &str) -> impl Fn() -> tollgate_agent_config::Config {
    let dir = scratch_dir(dir_name);
    std::fs::write(
        dir.join("script.json"),
        r#"{"turns": [{"tool_calls": [{"name": "refund", "arguments": {"cents": 5}}]}, {"text": "ok"}]}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let toml = format!(
        r#"
[[providers]]
name = "script"
kind = "scripted"
script = "script.json"
[[agents]]
name = "support"
provider = "script"
tools = ["refund"]
[[agents.policy]]
tool = "refund"
{rule}
{rest}"#
    );
    move || {
        ConfigLoader::new(EnvVars::new(), &dir)
            .load_str(dir.join("tollgate.toml"), &toml)
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

#[tokio::test]
async fn an_embedders_own_tool_is_offered_where_the_config_names_it_under_the_agents_policy() {
    use tollgate_agent_core::IntoTool;
    let other = "[[agents]]\nname = \"other\"\nprovider = \"script\"\ntools = [\"fs_read\"]\n";
    let load = refund_config("app-own-tool", "gate = \"ask\"", other);
    let app = App::build_with_tools(load(), vec![Refund.into_tool()]).await.unwrap_or_else(|e| panic!("{e}"));
    let support = app.runtime.agent("support").unwrap_or_else(|| panic!("no agent"));
    assert_eq!(support.tools.iter().map(|t| (t.name.as_str(), t.gate)).collect::<Vec<_>>(), [("refund", Gate::Ask)]);
    let other = app.runtime.agent("other").unwrap_or_else(|| panic!("no agent"));
    assert!(other.tools.iter().all(|t| t.name != "refund"), "offered only where the config names it");

    let run = app.runtime.start_and_wait(StartRun::new("refund me", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status(), RunStatus::WaitingForApproval, "the policy made it ask");
    let digest = run.held_turn().map(|h| h.turn_digest.to_string()).unwrap_or_default();
    let done = app
        .runtime
        .decide_and_wait(&run, &digest, DecisionSet::ApproveAll, &Actor::from("bob"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status(), RunStatus::Completed);

    let clash = App::build_with_tools(load(), vec![Refund.into_tool(), Refund.into_tool()]).await.err();
    assert!(clash.is_some_and(|e| e.to_string().contains("tool `refund`")), "a second tool of one name is refused");
}

#[tokio::test]
async fn a_policy_quorum_holds_the_call_until_that_many_people_approve() {
    use tollgate_agent_core::IntoTool;
    let config = refund_config("app-quorum", "gate = \"ask\"\napprovals = 2", "")();
    let app = App::build_with_tools(config, vec![Refund.into_tool()]).await.unwrap_or_else(|e| panic!("{e}"));
    let support = app.runtime.agent("support").unwrap_or_else(|| panic!("no agent"));
    let why: Vec<_> = support.tools.iter().map(|t| (t.name.as_str(), t.gate, t.why.as_str())).collect();
    assert_eq!(why, [("refund", Gate::Ask, "policy rule 1 (tool = \"refund\"), 2 approvals")]);

    let run = app.runtime.start_and_wait(StartRun::new("refund me", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status(), RunStatus::WaitingForApproval);
    let digest = run.held_turn().map(|h| h.turn_digest.to_string()).unwrap_or_default();
    let (bob, carol) = (Actor::from("bob"), Actor::from("carol"));
    let decide = |run, actor| app.runtime.decide_and_wait(run, &digest, DecisionSet::ApproveAll, actor);
    let once = decide(&run, &bob).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(once.status(), RunStatus::WaitingForApproval, "one approval of two");
    let done = decide(&once, &carol).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status(), RunStatus::Completed, "{:?}", done.error());
    assert_eq!(done.output(), Some("ok"));
}

/// Through the real runtime, store and built-in tools: a turn that deletes `old.log` and rewrites
/// `notes.txt` waits at the gate; another process replaces the file by a folder of 200 files and appends a
/// line to the notes; both calls are approved. Neither touches the disk, and each result says what changed.
#[tokio::test]
async fn an_approval_acts_only_on_what_its_preview_saw() {
    let dir = scratch_dir("app-observed");
    let script = json!({"turns": [
        {"tool_calls": [
            {"name": "fs_delete", "arguments": {"path": "old.log"}},
            {"name": "fs_write", "arguments": {"path": "notes.txt", "content": "one\ntwo\n"}}
        ]},
        {"text": "done"}
    ]});
    std::fs::write(dir.join("script.json"), script.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let toml = r#"
[store]
url = "sqlite://runs.db"
[workspace]
root = "files"
[[providers]]
name = "script"
kind = "scripted"
script = "script.json"
[[agents]]
name = "tidy"
provider = "script"
tools = ["fs_delete", "fs_write"]
"#;
    let app = app(&dir, toml).await;
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(files.join("old.log"), "13 bytes here").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(files.join("notes.txt"), "one\n").unwrap_or_else(|e| panic!("{e}"));

    let run = app.runtime.start_and_wait(StartRun::new("tidy up", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status(), RunStatus::WaitingForApproval);
    let held = run.held_turn().unwrap_or_else(|| panic!("no held turn"));
    let suspension = held.suspension.parse().unwrap_or_else(|e| panic!("{e}"));
    let previews: Vec<Option<&str>> = suspension.calls.iter().map(|c| c.preview.as_deref()).collect();
    assert_eq!(previews[0], Some("delete old.log (13 bytes)"));

    // Another process, while the run waits.
    std::fs::remove_file(files.join("old.log")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir(files.join("old.log")).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..200 {
        std::fs::write(files.join(format!("old.log/{i}.txt")), "kept").unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::write(files.join("notes.txt"), "one\nmine\n").unwrap_or_else(|e| panic!("{e}"));

    let set = DecisionSet::Each(vec![("call_1".into(), Decision::Approve), ("call_2".into(), Decision::Approve)]);
    app.runtime.decide(&run.id, &held.turn_digest.0, set, &Actor::from("bob")).await.unwrap_or_else(|e| panic!("{e}"));
    let done = app.runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status(), RunStatus::Completed, "{:?}", done.error());

    let events = app.runtime.events(&run.id, 0, 1000).await.unwrap_or_else(|e| panic!("{e}"));
    let finished: Vec<(Value, Value)> = events
        .iter()
        .filter(|e| e.kind.as_str() == "tool_finished")
        .map(|e| (e.data["is_error"].clone(), e.data["result"].clone()))
        .collect();
    assert_eq!(
        finished,
        [
            (
                json!(true),
                json!(
                    "not deleted: `old.log` changed since the preview: it was a file of 13 bytes, it is now a folder of 200 entries"
                )
            ),
            (
                json!(true),
                json!(
                    "not written: `notes.txt` changed since the preview: it was a file of 4 bytes, it is now a file of 9 bytes"
                )
            ),
        ]
    );
    assert_eq!(std::fs::read_dir(files.join("old.log")).map(Iterator::count).unwrap_or_default(), 200);
    assert_eq!(std::fs::read_to_string(files.join("notes.txt")).ok().as_deref(), Some("one\nmine\n"));
}

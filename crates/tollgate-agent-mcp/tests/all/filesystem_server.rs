//! tollgate-agent-mcp against the official reference server `@modelcontextprotocol/server-filesystem` (npm),
//! started with `node`. Runs when `TOLLGATE_TEST_MCP_FILESYSTEM` names the server's entry point (`.ci/run`
//! installs it: `.ci/npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js`); skipped
//! with a note when unset, except under CI (env `CI` set), where a missing server fails the test.

use serde_json::json;
use std::path::PathBuf;
use tollgate_agent_core::{Gate, Tool, ToolContext, ToolRegistry};
use tollgate_agent_mcp::{GATE_REASON_DEFAULT, GATE_REASON_READ_ONLY, McpServerConfig, McpSource};
use tollgate_agent_testkit::scratch_dir;

fn entry_point() -> Option<PathBuf> {
    match std::env::var("TOLLGATE_TEST_MCP_FILESYSTEM") {
        Ok(path) if !path.is_empty() => {
            let path = PathBuf::from(path);
            assert!(path.is_file(), "TOLLGATE_TEST_MCP_FILESYSTEM names {}, which is not a file", path.display());
            Some(path)
        }
        _ if std::env::var_os("CI").is_some() => panic!(
            "TOLLGATE_TEST_MCP_FILESYSTEM must be set in CI, e.g. to \
             .ci/npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js (see .ci/run)"
        ),
        _ => {
            eprintln!("note: TOLLGATE_TEST_MCP_FILESYSTEM is unset; skipping the reference filesystem server test");
            None
        }
    }
}

#[tokio::test]
async fn reference_filesystem_server_reads_without_asking_and_writes_after_the_gate() {
    let Some(entry) = entry_point() else { return };
    // The server resolves symlinks in its allowed directories; give it the canonical path.
    let root = std::fs::canonicalize(scratch_dir("mcp-filesystem")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(root.join("hello.txt"), "hello from the workspace").unwrap_or_else(|e| panic!("{e}"));

    let config = McpServerConfig::new("files", "node").arg(entry.display().to_string()).arg(root.display().to_string());
    let source = McpSource::start(config).await.unwrap_or_else(|e| panic!("{e}"));

    // Every schema the real server sends compiles in the core registry.
    let mut registry = ToolRegistry::new();
    for tool in source.tools() {
        registry.register(tool).unwrap_or_else(|e| panic!("{e}"));
    }
    let tool = |name: &str| {
        source.mcp_tools().iter().find(|t| t.name() == name).cloned().unwrap_or_else(|| {
            panic!("no {name} among {:?}", registry.specs().iter().map(|s| &s.name).collect::<Vec<_>>())
        })
    };
    let ctx = ToolContext::new("run-1", "call-1");

    let read = tool("files__read_text_file");
    let hello = json!({"path": root.join("hello.txt")});
    assert_eq!((read.gate(&hello, &ctx), read.gate_reason()), (Gate::Allow, GATE_REASON_READ_ONLY));
    let output = read.call(hello, ctx.clone()).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(!output.is_error, "{}", output.content);
    assert_eq!(output.content, "hello from the workspace");

    let write = tool("files__write_file");
    let note = root.join("note.txt");
    let args = json!({"path": note, "content": "written through tollgate"});
    assert_eq!((write.gate(&args, &ctx), write.gate_reason()), (Gate::Ask, GATE_REASON_DEFAULT));
    assert!(!note.exists(), "nothing is written before the call runs");
    // What the runtime does once a person approved the call.
    let output = write.call(args, ctx).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(!output.is_error, "{}", output.content);
    assert_eq!(std::fs::read_to_string(&note).unwrap_or_else(|e| panic!("{e}")), "written through tollgate");

    source.shutdown().await;
}

//! tollgate-agent-mcp against the crate's own hand-written MCP server (`tollgate-agent-mcp-test-server`): listing and
//! names, gates from annotations, calls and their results, a crash mid-call and the restart after it, a
//! server that never starts, timeouts and the cancellation of abandoned calls, and previews.

use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_agent_core::{Gate, Tool, ToolContext, ToolOutput, ToolRegistry};
use tollgate_agent_mcp::{
    GATE_REASON_DEFAULT, GATE_REASON_DESTRUCTIVE, GATE_REASON_READ_ONLY, MAX_PREVIEW_BYTES, McpServerConfig, McpSource,
    McpTool, PREVIEW_CUT_MARKER, StartError, StartFailure,
};
use tollgate_agent_testkit::scratch_dir;

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_tollgate-agent-mcp-test-server");

const ALL_NAMES: [&str; 11] = [
    "test__read_thing",
    "test__delete_thing",
    "test__purge_things",
    "test__crash",
    "test__slow",
    "test__mixed",
    "test__picture",
    "test__odd_name_v2",
    // sha256("test__a_tool_name_long_enough_that_the_full_name_passes_sixty_four_chars") starts a93594fd.
    "test__a_tool_name_long_enough_that_the_full_name_passes_a93594fd",
    "test__get_env",
    "test__cancelled_requests",
];

fn config() -> McpServerConfig {
    McpServerConfig::new("test", TEST_SERVER)
}

async fn start(config: McpServerConfig) -> McpSource {
    McpSource::start(config).await.unwrap_or_else(|e| panic!("the test server should start: {e}"))
}

async fn start_failure(config: McpServerConfig) -> StartError {
    match McpSource::start(config).await {
        Ok(source) => panic!("the server should not start, but it listed {:?}", names(&source)),
        Err(error) => error,
    }
}

fn names(source: &McpSource) -> Vec<String> {
    source.tools().iter().map(|t| t.name().to_owned()).collect()
}

fn tool(source: &McpSource, name: &str) -> Arc<McpTool> {
    source
        .mcp_tools()
        .iter()
        .find(|t| t.name() == name)
        .cloned()
        .unwrap_or_else(|| panic!("no tool {name} in {:?}", names(source)))
}

async fn call(tool: &McpTool, args: Value) -> ToolOutput {
    let ctx = ToolContext::new("run-1", "call-1");
    tool.call(args, ctx).await.unwrap_or_else(|e| panic!("{} failed internally: {e}", tool.name()))
}

/// The pid the test server reports from `read_thing`, so a test can tell a restarted process.
async fn read_pid(tool: &McpTool) -> String {
    let output = call(tool, json!({"id": "1"})).await;
    assert!(!output.is_error, "read_thing failed: {}", output.content);
    output
        .content
        .strip_prefix("thing 1 (pid ")
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unexpected read_thing output: {}", output.content))
        .to_owned()
}

#[tokio::test]
async fn lists_every_tool_under_its_tollgate_name() {
    let source = start(config()).await;
    assert_eq!(source.name(), "test");
    assert_eq!(names(&source), ALL_NAMES);

    let odd = tool(&source, "test__odd_name_v2");
    assert_eq!(odd.mcp_name(), "odd name.v2");
    assert_eq!(odd.server_name(), "test");
    // No description: a generated one. A non-object schema: any object.
    assert_eq!(odd.description(), "Tool `odd name.v2` of MCP server `test`.");
    assert_eq!(odd.parameters(), &json!({"type": "object"}));

    let long = tool(&source, ALL_NAMES[8]);
    assert_eq!(long.mcp_name(), "a_tool_name_long_enough_that_the_full_name_passes_sixty_four_chars");
    assert_eq!(long.name().len(), 64);

    let read = tool(&source, "test__read_thing");
    assert_eq!(read.description(), "Reads a thing by id.");
    assert_eq!(
        read.parameters(),
        &json!({
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "required": ["id"],
            "additionalProperties": false
        })
    );
}

#[tokio::test]
async fn listing_follows_every_page() {
    let source = start(config().args(["--page-size", "2"])).await;
    assert_eq!(names(&source), ALL_NAMES);
}

#[tokio::test]
async fn every_tool_registers_in_a_core_registry() {
    let source = start(config()).await;
    let mut registry = ToolRegistry::new();
    for tool in source.tools() {
        registry.register(tool).unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(registry.len(), ALL_NAMES.len());
}

#[tokio::test]
async fn gates_default_from_the_read_only_annotation() {
    let source = start(config()).await;
    let args = json!({"id": "1"});

    let read = tool(&source, "test__read_thing");
    assert_eq!((read.default_gate(), read.gate_reason()), (Gate::Allow, GATE_REASON_READ_ONLY));
    assert_eq!(read.gate(&args, &ToolContext::listing()), Gate::Allow);

    // Annotated destructive, and readOnlyHint false.
    let delete = tool(&source, "test__delete_thing");
    assert_eq!((delete.default_gate(), delete.gate_reason()), (Gate::Ask, GATE_REASON_DEFAULT));
    assert_eq!(delete.gate(&args, &ToolContext::listing()), Gate::Ask);

    // Annotated read-only and destructive at once: the hint that asks wins.
    let purge = tool(&source, "test__purge_things");
    assert_eq!((purge.default_gate(), purge.gate_reason()), (Gate::Ask, GATE_REASON_DESTRUCTIVE));
    assert_eq!(purge.gate(&args, &ToolContext::listing()), Gate::Ask);

    // No annotations at all.
    let crash = tool(&source, "test__crash");
    assert_eq!((crash.default_gate(), crash.gate_reason()), (Gate::Ask, GATE_REASON_DEFAULT));
}

#[tokio::test]
async fn calls_return_the_servers_results() {
    let source = start(config()).await;

    let deleted = call(&tool(&source, "test__delete_thing"), json!({"id": "42"})).await;
    assert_eq!(deleted, ToolOutput::text("deleted thing 42"));

    // isError from the server is an error result.
    let missing = call(&tool(&source, "test__delete_thing"), json!({"id": "missing"})).await;
    assert_eq!(missing, ToolOutput::error("no thing missing"));

    // Text as it is, other blocks summarized, in order; the image (a PNG's 8-byte signature) kept.
    let mixed = call(&tool(&source, "test__mixed"), Value::Null).await;
    assert_eq!(mixed.content, "first\n[image: image/png, 8 bytes]\n[resource: thing://1]\nembedded\nlast");
    let images: Vec<(&str, &str)> = mixed.images().iter().map(|i| (i.media_type(), i.base64())).collect();
    assert_eq!(images, [("image/png", "iVBORw0KGgo=")]);

    // The original MCP name goes on the wire.
    let odd = call(&tool(&source, "test__odd_name_v2"), json!({"x": 1})).await;
    assert_eq!(odd, ToolOutput::text(r#"odd called with {"x":1}"#));

    let not_an_object = call(&tool(&source, "test__read_thing"), json!([1, 2])).await;
    assert!(not_an_object.is_error);
    assert!(not_an_object.content.contains("must be a JSON object"), "{}", not_an_object.content);
}

#[tokio::test]
async fn image_blocks_stay_images_within_the_limits_and_are_described_otherwise() {
    let source = start(config()).await;
    let picture = tool(&source, "test__picture");
    let media_types = |output: &ToolOutput| output.images().iter().map(|i| i.media_type()).collect::<Vec<_>>();

    for (format, size, line) in [
        ("png", 64, "[image: image/png, 64 bytes]"),
        ("jpeg", 12 * 1024, "[image: image/jpeg, 12 KB]"),
        ("gif", 2_000, "[image: image/gif, 2 KB]"),
        ("webp", 3 * 1024 * 1024, "[image: image/webp, 3.0 MB]"),
    ] {
        let output = call(&picture, json!({"mime": format!("image/{format}"), "bytes": size})).await;
        assert_eq!(output.content, format!("1 picture(s)\n{line}"));
        assert_eq!(media_types(&output), [format!("image/{format}")]);
        assert_eq!(output.images()[0].byte_len(), size);
    }

    // Described with why, never passed on: another type, bytes of another type, data that is not base64,
    // an image over the limit.
    for (args, line) in [
        (
            json!({"mime": "image/svg+xml", "bytes": 3000}),
            "[image: image/svg+xml, 3 KB; not shown to the model: only PNG, JPEG, GIF and WebP images are]",
        ),
        (
            json!({"mime": "image/png", "format": "gif", "bytes": 100}),
            "[image: image/png, 100 bytes; not shown to the model: its bytes are not of type image/png]",
        ),
        (
            json!({"mime": "image/png", "data": "not base64 at all!"}),
            "[image: image/png; not shown to the model: its data is not base64]",
        ),
        (
            json!({"bytes": 3 * 1024 * 1024 + 800 * 1024}),
            "[image: image/png, 3.8 MB; not shown to the model: it is over the limit of 3.75 MB per image]",
        ),
    ] {
        let output = call(&picture, args.clone()).await;
        assert_eq!(output.content, format!("1 picture(s)\n{line}"), "{args}");
        assert!(output.images().is_empty(), "{args}");
    }

    // One result keeps 8 images, and 7.5 MB of them.
    let full = "not shown to the model: the result already holds its limit of 8 images, 7.5 MB in all]";
    let many = call(&picture, json!({"count": 9})).await;
    assert_eq!(many.images().len(), 8);
    assert!(
        many.content.ends_with(&format!("[image: image/png, 64 bytes]\n[image: image/png, 64 bytes; {full}")),
        "{}",
        many.content
    );
    let heavy = call(&picture, json!({"count": 3, "bytes": 3 * 1024 * 1024})).await;
    assert_eq!(heavy.images().len(), 2);
    assert!(heavy.content.ends_with(&format!("[image: image/png, 3.0 MB; {full}")), "{}", heavy.content);
}

#[tokio::test]
async fn a_crash_mid_call_is_an_error_result_and_the_next_call_restarts_the_server() {
    let source = start(config()).await;
    let read = tool(&source, "test__read_thing");
    let first_pid = read_pid(&read).await;

    let crashed = call(&tool(&source, "test__crash"), json!({})).await;
    assert!(crashed.is_error, "{crashed:?}");
    for part in ["MCP server `test` is not available", "crashing on purpose", "restarted on next use"] {
        assert!(crashed.content.contains(part), "missing {part:?} in: {}", crashed.content);
    }

    let second_pid = read_pid(&read).await;
    assert_ne!(first_pid, second_pid, "the server should run in a new process");
    // Same tool list as before the crash; the restarted process serves every tool.
    assert_eq!(names(&source), ALL_NAMES);
    let deleted = call(&tool(&source, "test__delete_thing"), json!({"id": "7"})).await;
    assert_eq!(deleted, ToolOutput::text("deleted thing 7"));
}

#[tokio::test]
async fn a_failed_restart_is_an_error_result_and_is_tried_again_on_next_use() {
    let marker = scratch_dir("mcp-refuse").join("refuse");
    let source = start(config().args(["--refuse-if-exists".to_owned(), marker.display().to_string()])).await;
    let read = tool(&source, "test__read_thing");

    std::fs::write(&marker, "").unwrap_or_else(|e| panic!("{e}"));
    let crashed = call(&tool(&source, "test__crash"), json!({})).await;
    assert!(crashed.is_error);

    let refused = call(&read, json!({"id": "1"})).await;
    assert!(refused.is_error, "{refused:?}");
    for part in ["MCP server `test` is not available", "could not be restarted", "refusing to start, as asked"] {
        assert!(refused.content.contains(part), "missing {part:?} in: {}", refused.content);
    }

    std::fs::remove_file(&marker).unwrap_or_else(|e| panic!("{e}"));
    read_pid(&read).await;
}

#[tokio::test]
async fn a_server_that_exits_at_start_is_a_clear_error() {
    // Also shows `env` reaching the server.
    let error = start_failure(config().env("TOLLGATE_TEST_SERVER_REFUSE", "1")).await;
    assert_eq!(error.server, "test");
    match &error.failure {
        StartFailure::Handshake { stderr, .. } => {
            assert_eq!(stderr, &["refusing to start, as asked".to_owned()]);
        }
        other => panic!("expected a handshake failure, got {other:?}"),
    }
    let message = error.to_string();
    assert!(message.starts_with("MCP server `test` could not be started: the MCP handshake failed"), "{message}");
    assert!(message.ends_with("; its stderr ends with: refusing to start, as asked"), "{message}");
}

#[tokio::test]
async fn a_missing_program_is_a_clear_error() {
    let error = start_failure(McpServerConfig::new("ghost", "/nonexistent/tollgate-no-such-server")).await;
    assert!(matches!(error.failure, StartFailure::Spawn { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message
            .starts_with("MCP server `ghost` could not be started: cannot run `/nonexistent/tollgate-no-such-server`"),
        "{message}"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_at_start() {
    let error = start_failure(config().arg("--mute").start_timeout(Duration::from_millis(500))).await;
    match &error.failure {
        StartFailure::Timeout { after, .. } => assert_eq!(*after, Duration::from_millis(500)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(error.to_string().contains("did not finish starting within 500ms"), "{error}");
}

/// The `notifications/cancelled` the test server received, once there are at least `at_least` (it waits
/// a few seconds for them, then answers with what it has).
async fn cancelled_requests(source: &McpSource, at_least: usize) -> Vec<Value> {
    let output = call(&tool(source, "test__cancelled_requests"), json!({"at_least": at_least})).await;
    assert!(!output.is_error, "{}", output.content);
    serde_json::from_str(&output.content).unwrap_or_else(|e| panic!("{e}: {}", output.content))
}

/// The tool each received cancellation named (the server resolves the request id to the `tools/call` it
/// received under that id).
fn cancelled_tools(cancelled: &[Value]) -> Vec<&str> {
    cancelled.iter().map(|c| c["tool"].as_str().unwrap_or("(an id the server never received)")).collect()
}

#[tokio::test]
async fn a_call_past_its_call_timeout_is_cancelled_on_the_server_and_the_server_keeps_serving() {
    let source = start(config().call_timeout(Duration::from_millis(300))).await;
    let read = tool(&source, "test__read_thing");
    let pid = read_pid(&read).await;

    let started = Instant::now();
    let slow = call(&tool(&source, "test__slow"), json!({"ms": 30_000})).await;
    let took = started.elapsed();
    assert_eq!(
        slow,
        ToolOutput::error(
            "MCP server `test` timed out after 300ms on `slow` (its call_timeout); the call was cancelled, and it \
             may or may not have taken effect"
        )
    );
    assert!(took < Duration::from_secs(10), "the timed-out call took {took:?}");

    let cancelled = cancelled_requests(&source, 1).await;
    assert_eq!(cancelled_tools(&cancelled), ["slow"], "{cancelled:?}");
    assert!(cancelled[0]["requestId"].is_number() || cancelled[0]["requestId"].is_string(), "{cancelled:?}");

    // The same process answers the next call, and a call within the timeout finishes.
    assert_eq!(read_pid(&read).await, pid);
    let quick = call(&tool(&source, "test__slow"), json!({"ms": 1})).await;
    assert_eq!(quick, ToolOutput::text("slept 1ms"));
}

#[tokio::test]
async fn a_call_within_its_call_timeout_finishes_and_nothing_is_cancelled() {
    let source = start(config().call_timeout(Duration::from_secs(30))).await;
    let slow = call(&tool(&source, "test__slow"), json!({"ms": 400})).await;
    assert_eq!(slow, ToolOutput::text("slept 400ms"));
    assert_eq!(cancelled_requests(&source, 0).await, Vec::<Value>::new());
}

#[tokio::test]
async fn a_dropped_call_is_cancelled_on_the_server() {
    // The default call_timeout (60s) is far away: only the drop can cancel the call.
    let source = start(config()).await;
    let slow = tool(&source, "test__slow");
    let abandoned = tokio::time::timeout(Duration::from_millis(300), call(&slow, json!({"ms": 30_000}))).await;
    assert!(abandoned.is_err(), "the slow call should still have been running: {abandoned:?}");

    let cancelled = cancelled_requests(&source, 1).await;
    assert_eq!(cancelled_tools(&cancelled), ["slow"], "{cancelled:?}");
}

#[tokio::test]
async fn a_held_call_has_a_preview_with_server_tool_hints_and_arguments() {
    let source = start(config()).await;
    let delete = tool(&source, "test__delete_thing");
    let args = json!({"id": "42", "reason": "obsolete"});
    assert_eq!(delete.gate(&args, &ToolContext::listing()), Gate::Ask, "the call is held");
    // Made from what was listed at start: the server is not asked, so a stopped one does not matter.
    source.shutdown().await;
    let preview = delete.preview(&args).await;
    assert_eq!(
        preview.as_deref(),
        Some(
            "MCP server `test`, tool `delete_thing`\n\
             annotations (hints from the server): readOnlyHint: false, destructiveHint: true\n\
             arguments:\n\
             {\n  \"id\": \"42\",\n  \"reason\": \"obsolete\"\n}"
        )
    );

    // No annotations at all: no hints line.
    let crash = tool(&source, "test__crash").preview(&json!({})).await;
    assert_eq!(crash.as_deref(), Some("MCP server `test`, tool `crash`\narguments:\n{}"));
}

#[tokio::test]
async fn a_huge_argument_gives_a_bounded_preview_that_says_it_was_cut() {
    let source = start(config()).await;
    let delete = tool(&source, "test__delete_thing");
    // Two-byte characters, so a cut by bytes alone would split one.
    let args = json!({"id": "é".repeat(100_000)});
    let preview = delete.preview(&args).await.unwrap_or_else(|| panic!("no preview"));
    assert!(preview.len() <= MAX_PREVIEW_BYTES, "{} bytes", preview.len());
    assert!(preview.starts_with("MCP server `test`, tool `delete_thing`\nannotations"), "{preview}");
    let (kept, marker) = preview.rsplit_once('\n').unwrap_or_else(|| panic!("no marker line: {preview}"));
    assert!(kept.ends_with('é'), "cut inside the argument, on a character boundary: {kept}");
    assert!(marker.starts_with(PREVIEW_CUT_MARKER), "{marker}");
    assert!(kept.len() > MAX_PREVIEW_BYTES - 200, "most of the budget is used: {} bytes kept", kept.len());
    source.shutdown().await;
}

#[tokio::test]
async fn after_shutdown_calls_are_error_results() {
    let source = start(config()).await;
    let read = tool(&source, "test__read_thing");
    source.shutdown().await;
    let output = call(&read, json!({"id": "1"})).await;
    assert_eq!(output, ToolOutput::error("MCP server `test` is not available: it was shut down"));
}

/// Attack: a server's read-only tool handed Tollgate's environment (provider keys, tokens) to the model.
/// A server now gets only `DEFAULT_ENV` plus its configured `env`, unless `inherit_env` is set.
#[tokio::test]
async fn a_server_sees_only_the_default_environment_and_its_own_env() {
    // Cargo sets CARGO_MANIFEST_DIR for the test process: a stand-in for a secret in Tollgate's environment.
    let ours = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|e| panic!("{e}"));
    let get_env = |source: &McpSource| tool(source, "test__get_env");

    let scrubbed = start(config().env("CONFIGURED", "given")).await;
    let tool_ = get_env(&scrubbed);
    assert_eq!(call(&tool_, json!({"name": "CARGO_MANIFEST_DIR"})).await.content, "(unset)");
    assert_eq!(call(&tool_, json!({"name": "CONFIGURED"})).await.content, "given");
    let path = std::env::var("PATH").unwrap_or_default();
    assert_eq!(call(&tool_, json!({"name": "PATH"})).await.content, path, "PATH is one of the defaults");

    let inheriting = start(config().inherit_env(true)).await;
    assert_eq!(call(&get_env(&inheriting), json!({"name": "CARGO_MANIFEST_DIR"})).await.content, ours);
}

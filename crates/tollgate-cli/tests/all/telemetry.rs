//! OpenTelemetry traces through the real binary (docs/telemetry.md): an OTLP/HTTP receiver decoding
//! with the official protobuf definitions (tests/otlp_receiver.py, PyPI's opentelemetry-proto; no
//! registry ships the Collector) takes the spans of `tollgate run` — which suspends at the gate and
//! exits — and of `tollgate approve` in another process, which resumes the run to its end. One trace:
//! the first segment is its root, the resume and the gate's wait are the root's children, model and tool
//! calls are their segments' children, with the GenAI conventions' attributes. No content goes out
//! unless `[telemetry] content = true` and the privacy level is `full`.
//!
//! Needs the test venv's Python (`TOLLGATE_TEST_PYTHON`; skipped with a note without it, a failure
//! under CI).

use crate::support::{Outcome, tollgate_in};
use anyhow::{Context as _, Result, bail};
use serde_json::Value;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tollgate_agent_testkit::{scratch_dir, test_python};

/// The run's input: it must appear in no span unless content is let out.
const INPUT: &str = "input-7731-not-for-traces";

/// The receiver, killed when dropped.
struct Receiver {
    child: Child,
    endpoint: String,
    spans: PathBuf,
}

impl Receiver {
    fn start(python: &Path, dir: &Path) -> Result<Receiver> {
        let spans = dir.join("spans.jsonl");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp_receiver.py");
        let mut child = Command::new(python)
            .arg(&script)
            .arg(&spans)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start the OTLP receiver")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("no stdout")?).read_line(&mut line)?;
        let port: u16 = line.trim().parse().with_context(|| format!("the receiver printed {line:?}"))?;
        Ok(Receiver { child, endpoint: format!("http://127.0.0.1:{port}"), spans })
    }

    /// The spans received so far.
    fn spans(&self) -> Result<Vec<Value>> {
        let text = std::fs::read_to_string(&self.spans).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).context("a span line")).collect()
    }

    /// The spans, once at least `n` have arrived (bounded).
    fn wait_for(&self, n: usize) -> Result<Vec<Value>> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let spans = self.spans()?;
            if spans.len() >= n {
                return Ok(spans);
            }
            if Instant::now() > deadline {
                bail!("{} spans arrived, expected at least {n}: {spans:#?}", spans.len());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tollgate` in `dir` with telemetry sent to `receiver`, plus `env`.
fn traced(dir: &Path, receiver: &Receiver, args: &[&str], env: &[(&str, &str)]) -> Result<Outcome> {
    let mut all = vec![("TOLLGATE_TELEMETRY_ENDPOINT", receiver.endpoint.as_str())];
    all.extend_from_slice(env);
    tollgate_in(dir, args, &all)
}

fn named<'a>(spans: &'a [Value], prefix: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with(prefix))).collect()
}

const CONTENT_KEYS: [&str; 4] =
    ["gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"];

fn has_content(spans: &[Value]) -> bool {
    spans.iter().any(|s| CONTENT_KEYS.iter().any(|k| !s["attributes"][k].is_null()))
}

/// Runs the demo agent to its gate in one process and approves it in another; answers the spans.
fn suspend_exit_resume(python: &Path, label: &str, env: &[(&str, &str)]) -> Result<(String, Vec<Value>)> {
    let dir = scratch_dir(label);
    let receiver = Receiver::start(python, &dir)?;
    let waiting = traced(&dir, &receiver, &["run", INPUT], env)?;
    assert_eq!(waiting.code, 3, "waits for approval: {waiting:?}");
    let id = waiting.waiting_id()?;
    // The first process has exited: its spans were sent before it did.
    let first = receiver.wait_for(2)?;
    assert!(named(&first, "await_approval").is_empty(), "nobody decided yet: {first:#?}");
    let approved = traced(&dir, &receiver, &["approve", &id], env)?;
    assert_eq!(approved.code, 0, "{approved:?}");
    // A second segment, its model call, its two tool calls, and the wait.
    let spans = receiver.wait_for(first.len() + 5)?;
    Ok((id, spans))
}

#[test]
fn one_trace_across_a_suspension_an_exit_and_a_resume_in_another_process() -> Result<()> {
    let Some(python) = test_python(&["opentelemetry.proto.collector.trace.v1.trace_service_pb2"]) else {
        return Ok(());
    };
    let (id, spans) = suspend_exit_resume(&python, "telemetry", &[])?;

    let trace = spans[0]["trace_id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(trace.len(), 32);
    assert!(spans.iter().all(|s| s["trace_id"] == trace.as_str()), "one trace: {spans:#?}");
    assert!(spans.iter().all(|s| s["resource"]["service.name"] == "tollgate"), "{spans:#?}");

    let segments = named(&spans, "invoke_agent demo");
    assert_eq!(segments.len(), 2, "the start and the resume: {spans:#?}");
    let root = segments.iter().find(|s| s["parent_span_id"] == "").context("a root segment")?;
    let resume = segments.iter().find(|s| s["parent_span_id"] != "").context("a resumed segment")?;
    let root_id = root["span_id"].as_str().unwrap_or_default();
    assert_eq!(root["attributes"]["tollgate.segment"], "start");
    assert_eq!(root["attributes"]["tollgate.run.status"], "waiting_for_approval");
    assert_eq!(resume["attributes"]["tollgate.segment"], "resume");
    assert_eq!(resume["parent_span_id"], root_id, "the resume continues the stored trace");
    assert_eq!(resume["attributes"]["tollgate.run.status"], "completed");
    for segment in &segments {
        assert_eq!(segment["attributes"]["gen_ai.operation.name"], "invoke_agent");
        assert_eq!(segment["attributes"]["gen_ai.agent.name"], "demo");
        assert_eq!(segment["attributes"]["gen_ai.conversation.id"], id.as_str());
        assert_eq!(segment["attributes"]["tollgate.run.id"], id.as_str());
    }

    let chats = named(&spans, "chat ");
    assert!(chats.len() >= 2, "a model call in each segment: {spans:#?}");
    for chat in &chats {
        let attributes = &chat["attributes"];
        assert_eq!(attributes["gen_ai.operation.name"], "chat");
        assert_eq!(attributes["gen_ai.system"], "tollgate.scripted");
        assert!(attributes["gen_ai.request.model"].is_string(), "{chat}");
        assert!(attributes["gen_ai.usage.input_tokens"].is_i64(), "{chat}");
        assert!(attributes["gen_ai.usage.output_tokens"].is_i64(), "{chat}");
        assert!(attributes["gen_ai.response.finish_reasons"].is_array(), "{chat}");
        assert_eq!(chat["kind"], 3, "SPAN_KIND_CLIENT");
        assert!(segments.iter().any(|s| s["span_id"] == chat["parent_span_id"]), "in a segment: {chat}");
    }

    // The demo's turn: `fs_list` (allowed) and `fs_write` (asks), both run by the resume.
    let tools = named(&spans, "execute_tool ");
    assert_eq!(tools.len(), 2, "each call ran once: {spans:#?}");
    for tool in &tools {
        assert_eq!(tool["attributes"]["gen_ai.operation.name"], "execute_tool");
        assert!(tool["attributes"]["gen_ai.tool.call.id"].is_string());
        assert_eq!(tool["attributes"]["gen_ai.tool.type"], "function");
        assert_eq!(tool["parent_span_id"], resume["span_id"], "run by the resume");
    }
    let tool = *named(&spans, "execute_tool fs_write").first().context("the write ran")?;
    assert_eq!(tool["attributes"]["gen_ai.tool.name"], "fs_write");
    assert_eq!(tool["attributes"]["tollgate.gate"], "ask");
    assert_eq!(named(&spans, "execute_tool fs_list")[0]["attributes"]["tollgate.gate"], "allow");

    let waits = named(&spans, "await_approval demo");
    assert_eq!(waits.len(), 1, "{spans:#?}");
    let wait = waits[0];
    assert_eq!(wait["parent_span_id"], root_id);
    let attributes = &wait["attributes"];
    assert_eq!(attributes["tollgate.approval.actor"], "local");
    assert_eq!(attributes["tollgate.approval.outcome"], "approved");
    assert_eq!(attributes["tollgate.approval.approved"], 1);
    assert_eq!(attributes["tollgate.approval.tools"], serde_json::json!([tool["attributes"]["gen_ai.tool.name"]]));
    let waited = attributes["tollgate.approval.wait_ms"].as_i64().unwrap_or(-1);
    assert!(waited >= 0, "{wait}");
    let (start, end) = (wait["start_ns"].as_u64().unwrap_or(0), wait["end_ns"].as_u64().unwrap_or(0));
    assert!(end >= start && start >= root["start_ns"].as_u64().unwrap_or(u64::MAX), "from the request: {wait}");
    assert_eq!(wait["events"][0]["name"], "tollgate.approval.vote", "{wait}");
    assert_eq!(wait["events"][0]["attributes"]["tollgate.approval.action"], "approve");

    // Content stays out by default: no content attribute, and the input nowhere.
    assert!(!has_content(&spans), "{spans:#?}");
    assert!(!serde_json::to_string(&spans)?.contains(INPUT), "the input is in no span");
    Ok(())
}

#[test]
fn content_goes_in_spans_only_when_asked_for_at_privacy_full() -> Result<()> {
    let Some(python) = test_python(&["opentelemetry.proto.collector.trace.v1.trace_service_pb2"]) else {
        return Ok(());
    };
    let content = ("TOLLGATE_TELEMETRY_CONTENT", "true");
    let (_, full) = suspend_exit_resume(&python, "telemetry-content", &[content])?;
    assert!(has_content(&full), "content = true at privacy full: {full:#?}");
    let root = named(&full, "invoke_agent demo").into_iter().find(|s| s["parent_span_id"] == "").context("root")?;
    assert!(root["attributes"]["gen_ai.input.messages"].as_str().is_some_and(|m| m.contains(INPUT)), "{root}");
    let tool = *named(&full, "execute_tool fs_write").first().context("the write ran")?;
    assert!(tool["attributes"]["gen_ai.tool.call.arguments"].is_string(), "{tool}");

    for level in ["redacted", "metadata"] {
        let env = [content, ("TOLLGATE_PRIVACY_LEVEL", level)];
        let (_, spans) = suspend_exit_resume(&python, "telemetry-private", &env)?;
        assert!(!has_content(&spans), "privacy {level}: {spans:#?}");
        assert!(!serde_json::to_string(&spans)?.contains(INPUT), "privacy {level}: the input is in no span");
    }
    Ok(())
}

#[test]
fn a_sample_ratio_of_zero_sends_nothing_and_a_bad_endpoint_is_a_config_error() -> Result<()> {
    let Some(python) = test_python(&["opentelemetry.proto.collector.trace.v1.trace_service_pb2"]) else {
        return Ok(());
    };
    let dir = scratch_dir("telemetry-unsampled");
    let receiver = Receiver::start(&python, &dir)?;
    let unsampled = [("TOLLGATE_TELEMETRY_SAMPLE_RATIO", "0")];
    let waiting = traced(&dir, &receiver, &["run", INPUT], &unsampled)?;
    let id = waiting.waiting_id()?;
    // Sampled out at creation: the process approving it later follows that decision, even at 100 %.
    let approved = traced(&dir, &receiver, &["approve", &id], &[])?;
    assert_eq!(approved.code, 0, "{approved:?}");
    // A sampled run after them: once its spans are in, nothing of the first run came before them.
    let sampled = traced(&dir, &receiver, &["run", "another"], &[])?;
    assert_eq!(sampled.code, 3, "{sampled:?}");
    let spans = receiver.wait_for(2)?;
    assert!(
        spans
            .iter()
            .all(|s| s["attributes"]["tollgate.run.id"].is_null() || s["attributes"]["tollgate.run.id"] != id.as_str()),
        "the unsampled run sent nothing: {spans:#?}"
    );

    let bad = tollgate_in(&dir, &["runs"], &[("TOLLGATE_TELEMETRY_ENDPOINT", "ftp://collector")])?;
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("TOLLGATE_TELEMETRY_ENDPOINT"), "the variable is named: {bad:?}");
    Ok(())
}

/// The caller's trace (`TRACEPARENT`): its trace id on every span of the run.
const CALLER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// The root segment of `spans` (the one started with the run) is the caller's span's child, in the
/// caller's trace, and every span is in that trace.
fn joined_the_caller(spans: &[Value]) -> Result<()> {
    assert!(spans.iter().all(|s| s["trace_id"] == "0af7651916cd43dd8448eb211c80319c"), "{spans:#?}");
    let root = named(spans, "invoke_agent demo")
        .into_iter()
        .find(|s| s["attributes"]["tollgate.segment"] == "start")
        .context("the first segment")?;
    assert_eq!(root["parent_span_id"], "b7ad6b7169203331", "the caller's span is its parent: {root}");
    Ok(())
}

/// `TRACEPARENT` puts the run into the caller's trace — locally, and through a server as the
/// `traceparent` header of `POST /v1/runs` — and the resume in another process stays in it; one that is
/// not a `traceparent` is ignored with a warning and the run starts its own trace.
#[test]
fn a_run_joins_the_trace_traceparent_names() -> Result<()> {
    let Some(python) = test_python(&["opentelemetry.proto.collector.trace.v1.trace_service_pb2"]) else {
        return Ok(());
    };
    let dir = scratch_dir("telemetry-joined");
    let receiver = Receiver::start(&python, &dir)?;
    let waiting = traced(&dir, &receiver, &["run", INPUT], &[("TRACEPARENT", CALLER)])?;
    assert_eq!(waiting.code, 3, "{waiting:?}");
    let id = waiting.waiting_id()?;
    let first = receiver.wait_for(2)?;
    let approved = traced(&dir, &receiver, &["approve", &id], &[])?;
    assert_eq!(approved.code, 0, "{approved:?}");
    let spans = receiver.wait_for(first.len() + 5)?;
    joined_the_caller(&spans)?;
    assert_eq!(named(&spans, "await_approval demo").len(), 1, "the wait is in the caller's trace");

    // Not a traceparent: said, and the run has a trace of its own.
    let dir = scratch_dir("telemetry-not-joined");
    let receiver = Receiver::start(&python, &dir)?;
    let bad = traced(&dir, &receiver, &["run", INPUT], &[("TRACEPARENT", "00-not-a-trace-01")])?;
    assert_eq!(bad.code, 3, "{bad:?}");
    assert!(bad.stderr.contains("warning: TRACEPARENT is ignored"), "{bad:?}");
    let spans = receiver.wait_for(2)?;
    assert!(spans.iter().all(|s| s["trace_id"] != "0af7651916cd43dd8448eb211c80319c"), "{spans:#?}");
    assert!(named(&spans, "invoke_agent demo").iter().any(|s| s["parent_span_id"] == ""), "a root of its own");

    // Through a server: the client sends it as `traceparent`; the server's spans join.
    let dir = scratch_dir("telemetry-served");
    let receiver = Receiver::start(&python, &dir)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut serve = crate::support::serve_in(&dir, &format!("127.0.0.1:{port}"));
    let mut server = serve.env("TOLLGATE_TELEMETRY_ENDPOINT", &receiver.endpoint).spawn()?;
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let client = scratch_dir("telemetry-client");
    let url = format!("http://127.0.0.1:{port}");
    let waiting = tollgate_in(&client, &["--server", &url, "run", INPUT], &[("TRACEPARENT", CALLER)]);
    let spans = waiting.and_then(|waiting| {
        assert_eq!(waiting.code, 3, "{waiting:?}");
        receiver.wait_for(2)
    });
    let _ = server.kill();
    let _ = server.wait();
    joined_the_caller(&spans?)
}

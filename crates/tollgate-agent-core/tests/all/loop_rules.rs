//! One test per rule of the loop (docs/design.md, "The loop"): refusals become error results and never run,
//! tool failures are hidden from the model, results are capped, limits hold across segments, allow-gated
//! calls run concurrently yet answer in order, bad decisions run nothing, stored suspensions are checked,
//! and the hooks see each call start before it runs.

use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tollgate_agent_core::scripted::{Script, ScriptedModel};
use tollgate_agent_core::{
    AgentLoop, BoxFuture, CallId, Completion, Counters, Decision, DecisionError, Decisions, Gate, HookError,
    ITERATION_LIMIT_RESULT, LoopConfig, LoopError, LoopEvent, LoopHooks, Message, Metadata, ModelClient, ModelError,
    ModelRequest, ModelResponse, NoHooks, Outcome, RunScope, SCHEMA_VERSION, Suspension, SuspensionError,
    TerminationReason, Tool, ToolContext, ToolError, ToolLoop, ToolOutput, ToolRegistry, ToolResult, Usage,
};
use tollgate_agent_testkit::{Behaviour, RecordingHooks, TestTool};

// ---------------------------------------------------------------------------------------------------------
// Building loops and reading their outcomes

fn scripted(script: Value) -> ScriptedModel {
    ScriptedModel::new(Script::from_value(script).unwrap_or_else(|e| panic!("{e}")))
}

fn registry(tools: &[Arc<dyn Tool>]) -> Arc<ToolRegistry> {
    let mut registry = ToolRegistry::new();
    for tool in tools {
        registry.register(tool.clone()).unwrap_or_else(|e| panic!("{e}"));
    }
    Arc::new(registry)
}

fn agent_with(model: Arc<dyn ModelClient>, tools: &[Arc<dyn Tool>], config: LoopConfig) -> ToolLoop {
    ToolLoop::new(model, registry(tools), config)
}

fn agent(script: Value, tools: &[&TestTool], config: LoopConfig) -> ToolLoop {
    let tools: Vec<Arc<dyn Tool>> = tools.iter().map(|t| t.shared()).collect();
    agent_with(Arc::new(scripted(script)), &tools, config)
}

fn completed(outcome: Result<Outcome, LoopError>) -> Completion {
    match outcome {
        Ok(Outcome::Completed(done)) => done,
        other => panic!("expected a completion, got {other:?}"),
    }
}

fn suspended(outcome: Result<Outcome, LoopError>) -> Suspension {
    match outcome {
        Ok(Outcome::Suspended(suspension)) => suspension,
        other => panic!("expected a suspension, got {other:?}"),
    }
}

fn decisions(list: &[(&str, Decision)]) -> Decisions {
    list.iter().map(|(id, d)| (CallId::from(*id), d.clone())).collect()
}

/// The one result a call got in a transcript.
fn result<'a>(transcript: &'a [Message], call_id: &str) -> &'a ToolResult {
    let mut found = transcript.iter().filter_map(|m| match m {
        Message::Tool(r) if r.call_id == call_id => Some(r),
        _ => None,
    });
    match (found.next(), found.next()) {
        (Some(r), None) => r,
        (first, second) => panic!("{call_id} must have exactly one result, found {first:?} and {second:?}"),
    }
}

/// Every result in the transcript, in order.
fn results(transcript: &[Message]) -> Vec<&ToolResult> {
    transcript
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// A stored suspension, as another process reads it.
fn reload(suspension: &Suspension) -> Suspension {
    Suspension::from_json(&suspension.to_json().unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"))
}

fn write_tool() -> TestTool {
    TestTool::new("write").gate(Gate::Ask).schema(json!({
        "type": "object",
        "required": ["path", "content"],
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "additionalProperties": false
    }))
}

/// One turn of calls, then a closing answer.
fn one_turn(calls: Value) -> Value {
    json!({"turns": [{"tool_calls": calls}, {"text": "Done."}]})
}

// ---------------------------------------------------------------------------------------------------------
// Refusals: each becomes an error result for the model, and the tool never runs

#[tokio::test]
async fn unknown_tool_gets_an_error_result_naming_the_available_tools() {
    let list = TestTool::new("list");
    let write = write_tool();
    let agent = agent(one_turn(json!([{"name": "ghost"}, {"name": "list"}])), &[&list, &write], LoopConfig::default());

    let done = completed(agent.start(&RunScope::new("run"), "go", &NoHooks).await);

    let ghost = result(&done.transcript, "call_1");
    assert_eq!(ghost.content, "Tool ghost does not exist. Available tools: list, write.");
    assert!(ghost.is_error);
    assert!(!result(&done.transcript, "call_2").is_error, "the known call of the same turn still runs");
    assert_eq!(list.call_count(), 1);
    assert_eq!(done.reason, TerminationReason::Completed, "a refusal never aborts the run");
}

#[tokio::test]
async fn forbidden_calls_get_an_error_result_and_do_not_run() {
    let rm = TestTool::new("rm").gate(Gate::Forbid);
    // Forbidden by argument: writes outside the workspace.
    let write = write_tool().gate_fn(|args| {
        let outside = args["path"].as_str().is_some_and(|p| p.starts_with('/'));
        if outside { Gate::Forbid } else { Gate::Ask }
    });
    let calls = json!([
        {"name": "rm", "arguments": {"path": "a.txt"}},
        {"name": "write", "arguments": {"path": "/etc/passwd", "content": "x"}}
    ]);
    let agent = agent(one_turn(calls), &[&rm, &write], LoopConfig::default());

    // No call asks, so the turn does not wait for anyone.
    let done = completed(agent.start(&RunScope::new("run"), "go", &NoHooks).await);

    assert_eq!(result(&done.transcript, "call_1").content, "Tool rm is forbidden by policy and was not run.");
    assert_eq!(result(&done.transcript, "call_2").content, "Tool write is forbidden by policy and was not run.");
    assert!(results(&done.transcript).iter().all(|r| r.is_error));
    assert_eq!((rm.call_count(), write.call_count()), (0, 0));
    assert_eq!(done.counters.tool_invocations, 0);
    assert!(done.trace.is_empty());
}

#[tokio::test]
async fn arguments_failing_the_schema_get_an_error_result_and_do_not_run() {
    let write = write_tool();
    let agent = agent(one_turn(json!([{"name": "write", "arguments": {"path": 3}}])), &[&write], LoopConfig::default());

    // Refused before the gate: an ask-gated tool with bad arguments does not wait for a person.
    let done = completed(agent.start(&RunScope::new("run"), "go", &NoHooks).await);

    let refused = result(&done.transcript, "call_1");
    assert!(refused.is_error);
    assert!(refused.content.starts_with("Tool write was not run: invalid arguments: "), "{}", refused.content);
    assert!(refused.content.contains("/path"), "names the bad field: {}", refused.content);
    assert!(refused.content.contains("content"), "names the missing field: {}", refused.content);
    assert_eq!(write.call_count(), 0);
}

/// Marks every call to one tool as having arguments that were not valid JSON, as an adapter would.
struct MalformedCalls {
    inner: ScriptedModel,
    tool: &'static str,
    problem: &'static str,
}

impl ModelClient for MalformedCalls {
    fn complete<'a>(&'a self, request: ModelRequest<'a>) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            let mut response = self.inner.complete(request).await?;
            for call in response.tool_calls.iter_mut().filter(|c| c.name == self.tool) {
                call.arguments = Value::String(r#"{"path": "a.txt", "content": "#.into());
                call.malformed_arguments = Some(self.problem.into());
            }
            Ok(response)
        })
    }
}

#[tokio::test]
async fn malformed_arguments_get_an_error_result_and_do_not_run() {
    let write = write_tool();
    let model = MalformedCalls {
        inner: scripted(one_turn(json!([{"name": "write", "arguments": {"path": "a.txt", "content": "x"}}]))),
        tool: "write",
        problem: "EOF while parsing a value at line 1 column 29",
    };
    let agent = agent_with(Arc::new(model), &[write.shared()], LoopConfig::default());

    let done = completed(agent.start(&RunScope::new("run"), "go", &NoHooks).await);

    let refused = result(&done.transcript, "call_1");
    assert_eq!(
        refused.content,
        "Tool write was not run: its arguments are not valid JSON (EOF while parsing a value at line 1 column 29)."
    );
    assert!(refused.is_error);
    assert_eq!(write.call_count(), 0);
}

// ---------------------------------------------------------------------------------------------------------
// Tool failures

#[tokio::test]
async fn a_tool_error_reaches_the_model_as_a_plain_failure_without_its_internal_text() {
    let flaky = TestTool::new("flaky").behaviour(Behaviour::Fail("connect to db://admin:hunter2@10.0.0.7".into()));
    let agent = agent(one_turn(json!([{"name": "flaky"}])), &[&flaky], LoopConfig::default());

    let done = completed(agent.start(&RunScope::new("run"), "go", &NoHooks).await);

    let failed = result(&done.transcript, "call_1");
    assert_eq!((failed.content.as_str(), failed.is_error), ("Tool flaky failed.", true));
    assert_eq!(flaky.call_count(), 1);
    let everything = serde_json::to_string(&done).unwrap_or_default();
    assert!(!everything.contains("hunter2"), "the internal error text must stay out of the transcript");
}

#[tokio::test]
async fn a_tool_output_error_passes_through_as_an_error_result() {
    let read = TestTool::new("read").behaviour(Behaviour::ModelError("no such file: a.txt".into()));
    let agent = agent(one_turn(json!([{"name": "read"}])), &[&read], LoopConfig::default());

    let done = completed(agent.start(&RunScope::new("run"), "go", &NoHooks).await);

    let missing = result(&done.transcript, "call_1");
    assert_eq!((missing.content.as_str(), missing.is_error), ("no such file: a.txt", true));
    assert_eq!(done.counters.tool_invocations, 1, "it ran; its result is an error for the model");
    assert!(done.trace[0].is_error);
}

#[tokio::test]
async fn a_panic_in_gate_is_caught_and_becomes_an_error_result() {
    let touchy = TestTool::new("touchy").gate_fn(|_| panic!("gate exploded"));
    let agent = agent(one_turn(json!([{"name": "touchy"}])), &[&touchy], LoopConfig::default());

    let done = completed(agent.start(&RunScope::new("run"), "go", &NoHooks).await);

    let refused = result(&done.transcript, "call_1");
    assert_eq!((refused.content.as_str(), refused.is_error), ("Tool touchy failed to check its arguments.", true));
    assert_eq!(touchy.call_count(), 0);
    assert_eq!(done.reason, TerminationReason::Completed);
}

#[tokio::test]
async fn long_results_are_cut_on_a_char_boundary_with_a_visible_marker() {
    // 3-byte and 4-byte characters, so a cap of 50 bytes falls inside a character.
    let euros = TestTool::new("euros").behaviour(Behaviour::Output("€".repeat(40)));
    let crabs = TestTool::new("crabs").behaviour(Behaviour::Output("🦀".repeat(20)));
    let exact = TestTool::new("exact").behaviour(Behaviour::Output("é".repeat(25)));
    let calls = json!([{"name": "euros"}, {"name": "crabs"}, {"name": "exact"}]);
    let config = LoopConfig { result_cap_bytes: 50, ..LoopConfig::default() };
    let agent = agent(one_turn(calls), &[&euros, &crabs, &exact], config);

    let done = completed(agent.start(&RunScope::new("run"), "go", &NoHooks).await);

    let euros = &result(&done.transcript, "call_1").content;
    assert_eq!(euros, &format!("{}\n[output truncated: showing 48 of 120 bytes]", "€".repeat(16)));
    let crabs = &result(&done.transcript, "call_2").content;
    assert_eq!(crabs, &format!("{}\n[output truncated: showing 48 of 80 bytes]", "🦀".repeat(12)));
    assert_eq!(result(&done.transcript, "call_3").content, "é".repeat(25), "exactly at the cap is kept whole");
}

// ---------------------------------------------------------------------------------------------------------
// Limits

#[tokio::test]
async fn the_token_budget_ends_the_run_with_the_last_text_and_no_closing_call() {
    let tick = TestTool::new("tick");
    let script = json!({"turns": [
        {"tool_calls": [{"name": "tick"}], "usage": {"input_tokens": 50, "output_tokens": 10}},
        {"text": "Still ticking.", "tool_calls": [{"name": "tick"}], "usage": {"input_tokens": 30, "output_tokens": 15}},
        {"text": "A closing call must not be made."}
    ]});
    let config = LoopConfig { max_tokens: Some(100), ..LoopConfig::default() };
    let agent = agent(script, &[&tick], config);
    let hooks = RecordingHooks::default();

    let done = completed(agent.start(&RunScope::new("run"), "go", &hooks).await);

    assert_eq!(done.reason, TerminationReason::BudgetExhausted);
    assert_eq!(done.output.as_deref(), Some("Still ticking."));
    assert_eq!(done.counters.usage, Usage { input_tokens: 80, output_tokens: 25 });
    assert_eq!(done.counters.iterations, 2);
    assert_eq!(tick.calls().iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["call_1"]);
    let requests = hooks.lines().iter().filter(|l| l.starts_with("model_request")).count();
    assert_eq!(requests, 2, "no closing completion after the budget is used up");
}

#[tokio::test]
async fn max_iterations_counts_every_segment_of_a_resumed_run() {
    let write = write_tool();
    let tick = TestTool::new("tick");
    let script = json!({"turns": [
        {"tool_calls": [{"name": "write", "arguments": {"path": "a.txt", "content": "1"}}]},
        {"tool_calls": [{"name": "tick"}]},
        {"text": "Stopping at the cap."},
        {"text": "A third round must not happen."}
    ]});
    let config = LoopConfig { max_iterations: 2, ..LoopConfig::default() };
    let first = agent(script.clone(), &[&write, &tick], config.clone());
    let suspension = suspended(first.start(&RunScope::new("run"), "go", &NoHooks).await);
    assert_eq!(suspension.counters.iterations, 1);

    // Resumed in another loop: one model call with tools is left, then the closing completion.
    let second = agent(script, &[&write, &tick], config);
    let hooks = RecordingHooks::default();
    let done = completed(
        second
            .resume(&RunScope::new("run"), reload(&suspension), &decisions(&[("call_1", Decision::Approve)]), &hooks)
            .await,
    );

    assert_eq!(done.reason, TerminationReason::MaxIterations);
    assert_eq!(done.output.as_deref(), Some("Stopping at the cap."));
    assert_eq!(done.counters.iterations, 2);
    assert_eq!((write.call_count(), tick.call_count()), (1, 0), "the capped turn's call does not run");
    let capped = result(&done.transcript, "call_2");
    assert_eq!((capped.content.as_str(), capped.is_error), (ITERATION_LIMIT_RESULT, true));
    let requests: Vec<String> = hooks.lines().into_iter().filter(|l| l.starts_with("model_request")).collect();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].starts_with("model_request 2 ") && requests[0].ends_with("tools=2"), "{requests:?}");
    assert!(requests[1].starts_with("model_request 3 ") && requests[1].ends_with("tools=0"), "{requests:?}");
    // The closing completion's response is round N+1 too, like its request.
    let responses: Vec<String> = hooks.lines().into_iter().filter(|l| l.starts_with("model_response")).collect();
    assert_eq!(responses, ["model_response 2 calls=1", "model_response 3 calls=0"]);
}

// ---------------------------------------------------------------------------------------------------------
// Concurrency of allow-gated calls

/// What the probe tools saw: how many calls were in flight at once, and the order of starts and ends.
struct Probe {
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    events: Mutex<Vec<String>>,
    finished: watch::Sender<usize>,
}

impl Probe {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            events: Mutex::default(),
            finished: watch::Sender::new(0),
        })
    }

    fn note(&self, event: String) {
        self.events.lock().unwrap_or_else(PoisonError::into_inner).push(event);
    }

    fn events(&self) -> Vec<String> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// An allow-gated tool that sleeps, and optionally first waits until some other calls have finished.
struct ProbeTool {
    name: String,
    schema: Value,
    sleep: Duration,
    after_finished: usize,
    probe: Arc<Probe>,
}

impl ProbeTool {
    fn shared(name: &str, sleep_ms: u64, after_finished: usize, probe: &Arc<Probe>) -> Arc<dyn Tool> {
        Arc::new(Self {
            name: name.into(),
            schema: json!({"type": "object"}),
            sleep: Duration::from_millis(sleep_ms),
            after_finished,
            probe: probe.clone(),
        })
    }
}

impl Tool for ProbeTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        "sleeps"
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    fn call<'a>(&'a self, _args: Value, _ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let probe = &self.probe;
            let now = probe.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            probe.peak.fetch_max(now, Ordering::SeqCst);
            probe.note(format!("start {}", self.name));
            let mut finished = probe.finished.subscribe();
            finished.wait_for(|n| *n >= self.after_finished).await.map_err(|e| ToolError::new(e.to_string()))?;
            tokio::time::sleep(self.sleep).await;
            probe.note(format!("finish {}", self.name));
            probe.in_flight.fetch_sub(1, Ordering::SeqCst);
            probe.finished.send_modify(|n| *n += 1);
            Ok(ToolOutput::text(format!("{} done", self.name)))
        })
    }
}

fn three_calls() -> Value {
    one_turn(json!([{"name": "slow"}, {"name": "quick"}, {"name": "medium"}]))
}

#[tokio::test]
async fn allow_gated_calls_of_a_turn_run_concurrently_and_answer_in_model_order() {
    let probe = Probe::new();
    // `slow` cannot finish until both later calls have: it ends last whenever the calls overlap, and the
    // turn never ends if they run one at a time (hence the timeout, which only turns a hang into a failure).
    let tools = [
        ProbeTool::shared("slow", 1, 2, &probe),
        ProbeTool::shared("quick", 1, 0, &probe),
        ProbeTool::shared("medium", 2, 0, &probe),
    ];
    let agent = agent_with(Arc::new(scripted(three_calls())), &tools, LoopConfig::default());

    let outcome =
        tokio::time::timeout(Duration::from_secs(10), agent.start(&RunScope::new("run"), "go", &NoHooks)).await;
    let done = completed(outcome.unwrap_or_else(|_| panic!("the calls did not run concurrently")));

    assert_eq!(probe.peak.load(Ordering::SeqCst), 3, "all three calls were in flight at once");
    assert_eq!(probe.events().last().map(String::as_str), Some("finish slow"));
    let order: Vec<(&str, &str)> =
        results(&done.transcript).iter().map(|r| (r.call_id.as_str(), r.content.as_str())).collect();
    assert_eq!(order, [("call_1", "slow done"), ("call_2", "quick done"), ("call_3", "medium done")]);
    let traced: Vec<&str> = done.trace.iter().map(|i| i.call_id.as_str()).collect();
    assert_eq!(traced, ["call_1", "call_2", "call_3"]);
}

#[tokio::test]
async fn with_concurrency_one_allow_gated_calls_never_overlap() {
    let probe = Probe::new();
    let tools = [
        ProbeTool::shared("slow", 3, 0, &probe),
        ProbeTool::shared("quick", 1, 0, &probe),
        ProbeTool::shared("medium", 2, 0, &probe),
    ];
    let config = LoopConfig { concurrency: 1, ..LoopConfig::default() };
    let agent = agent_with(Arc::new(scripted(three_calls())), &tools, config);

    let done = completed(agent.start(&RunScope::new("run"), "go", &NoHooks).await);

    assert_eq!(probe.peak.load(Ordering::SeqCst), 1);
    assert_eq!(
        probe.events(),
        ["start slow", "finish slow", "start quick", "finish quick", "start medium", "finish medium"]
    );
    assert_eq!(results(&done.transcript).len(), 3);
}

// ---------------------------------------------------------------------------------------------------------
// Decisions that cannot resume a suspension: nothing runs

/// A suspended run holding `list` (allow, call_1) and `write` (ask, call_2), its tools and a fresh loop.
async fn held_list_and_write() -> (ToolLoop, Suspension, TestTool, TestTool) {
    let list = TestTool::new("list");
    let write = write_tool();
    let calls = json!([{"name": "list"}, {"name": "write", "arguments": {"path": "a.txt", "content": "x"}}]);
    let agent = agent(one_turn(calls), &[&list, &write], LoopConfig::default());
    let suspension = suspended(agent.start(&RunScope::new("run"), "go", &NoHooks).await);
    (agent, suspension, list, write)
}

async fn refused_resume(list: &[(&str, Decision)]) -> DecisionError {
    let (agent, suspension, list_tool, write_tool) = held_list_and_write().await;
    let hooks = RecordingHooks::default();
    let outcome = agent.resume(&RunScope::new("run"), reload(&suspension), &decisions(list), &hooks).await;
    let error = match outcome {
        Err(LoopError::Decision(error)) => error,
        other => panic!("expected a decision error, got {other:?}"),
    };
    assert_eq!((list_tool.call_count(), write_tool.call_count()), (0, 0), "nothing ran");
    assert_eq!(hooks.lines(), Vec::<String>::new(), "no model call, no tool started");
    error
}

#[tokio::test]
async fn a_decision_for_an_unknown_call_id_is_refused_and_nothing_runs() {
    let error = refused_resume(&[("call_2", Decision::Approve), ("call_9", Decision::Approve)]).await;
    assert_eq!(error, DecisionError::UnknownCall("call_9".into()));
}

#[tokio::test]
async fn a_decision_for_an_allow_gated_call_is_refused_and_nothing_runs() {
    let deny = Decision::Deny { reason: "no".into() };
    let error = refused_resume(&[("call_1", deny), ("call_2", Decision::Approve)]).await;
    assert_eq!(error, DecisionError::NotDecidable { call_id: "call_1".into(), gate: Gate::Allow });
}

#[tokio::test]
async fn a_missing_decision_is_refused_and_nothing_runs() {
    let error = refused_resume(&[]).await;
    assert_eq!(error, DecisionError::Missing(vec!["call_2".into()]));
}

#[tokio::test]
async fn an_edit_failing_the_schema_is_refused_and_nothing_runs() {
    let edit = Decision::Edit { arguments: json!({"path": "a.txt", "content": "x", "mode": "append"}) };
    let error = refused_resume(&[("call_2", edit)]).await;
    match error {
        DecisionError::InvalidEdit { call_id, message } => {
            assert_eq!(call_id, "call_2");
            assert!(message.contains("mode"), "names the offending property: {message}");
        }
        other => panic!("expected InvalidEdit, got {other:?}"),
    }
}

/// An edit into arguments the gate forbids is refused when it is checked (before a caller records it);
/// if the gate forbids them only after it was taken, the resume's recheck gives the call an error result.
#[tokio::test]
async fn an_edit_into_forbidden_arguments_is_refused_when_checked() {
    let list = TestTool::new("list");
    let write = write_tool().gate_fn(|args| {
        if args["path"].as_str().is_some_and(|p| p.starts_with("keep/")) { Gate::Forbid } else { Gate::Ask }
    });
    let calls = json!([{"name": "list"}, {"name": "write", "arguments": {"path": "a.txt", "content": "x"}}]);
    let agent = agent(one_turn(calls), &[&list, &write], LoopConfig::default());
    let suspension = suspended(agent.start(&RunScope::new("run"), "go", &NoHooks).await);
    let forbidden = Decision::Edit { arguments: json!({"path": "keep/a.txt", "content": "x"}) };
    let call_2 = CallId::from("call_2");
    match agent.check_decision(&RunScope::new("run"), &suspension, &call_2, &forbidden).await {
        Err(DecisionError::InvalidEdit { call_id, message }) => {
            assert_eq!(call_id, "call_2");
            assert_eq!(message, "policy forbids write with them, so the edit is refused");
        }
        other => panic!("expected InvalidEdit, got {other:?}"),
    }
    let allowed = Decision::Edit { arguments: json!({"path": "b.txt", "content": "x"}) };
    assert_eq!(agent.check_decision(&RunScope::new("run"), &suspension, &call_2, &allowed).await, Ok(()));

    let done = completed(
        agent.resume(&RunScope::new("run"), reload(&suspension), &decisions(&[("call_2", forbidden)]), &NoHooks).await,
    );
    let refused = result(&done.transcript, "call_2");
    assert!(refused.is_error && refused.content.contains("forbidden by policy"), "{refused:?}");
    assert_eq!(write.call_count(), 0);
}

#[tokio::test]
async fn a_refused_resume_leaves_the_stored_suspension_resumable() {
    let (agent, suspension, list, write) = held_list_and_write().await;
    let stored = suspension.to_json().unwrap_or_else(|e| panic!("{e}"));
    let refused = agent.resume(&RunScope::new("run"), reload(&suspension), &Decisions::new(), &NoHooks).await;
    assert!(matches!(refused, Err(LoopError::Decision(DecisionError::Missing(_)))), "{refused:?}");

    let again = Suspension::from_json(&stored).unwrap_or_else(|e| panic!("{e}"));
    let done = completed(
        agent.resume(&RunScope::new("run"), again, &decisions(&[("call_2", Decision::Approve)]), &NoHooks).await,
    );
    assert_eq!((list.call_count(), write.call_count()), (1, 1));
    assert_eq!(done.reason, TerminationReason::Completed);
}

// ---------------------------------------------------------------------------------------------------------
// The run's scope reaches every tool call

#[tokio::test]
async fn every_call_sees_the_runs_metadata_at_start_and_after_a_resume_elsewhere() {
    let metadata =
        Metadata::try_from(json!({"customer": "acme", "tenant": {"id": 7}})).unwrap_or_else(|e| panic!("{e}"));
    let scope = RunScope::new("run-7").with_metadata(metadata.clone());
    let script = json!({"turns": [
        {"tool_calls": [{"name": "list"}, {"name": "list"}]},
        {"tool_calls": [{"name": "write", "arguments": {"path": "a.txt", "content": "x"}}]},
        {"tool_calls": [{"name": "list"}]},
        {"text": "Done."}
    ]});
    let (list, write) = (TestTool::new("list"), write_tool());
    let first = agent(script.clone(), &[&list, &write], LoopConfig::default());
    let suspension = suspended(first.start(&scope, "go", &NoHooks).await);
    assert_eq!(list.call_count(), 2, "the first turn ran (concurrently) before the gate");

    // Another process: the suspension from storage, the scope from the stored run.
    let (later_list, later_write) = (TestTool::new("list"), write_tool());
    let second = agent(script, &[&later_list, &later_write], LoopConfig::default());
    let stored: Metadata =
        serde_json::from_str(r#"{"customer":"acme","tenant":{"id":7}}"#).unwrap_or_else(|e| panic!("{e}"));
    let stored_scope = RunScope::new("run-7").with_metadata(stored);
    let approve = decisions(&[("call_3", Decision::Approve)]);
    completed(second.resume(&stored_scope, reload(&suspension), &approve, &NoHooks).await);

    let seen: Vec<ToolContext> = [list.contexts(), later_write.contexts(), later_list.contexts()].concat();
    let call_ids: Vec<&str> = seen.iter().map(|c| c.call_id.as_str()).collect();
    assert_eq!(call_ids, ["call_1", "call_2", "call_3", "call_4"]);
    for ctx in &seen {
        assert_eq!((ctx.run_id.as_str(), &ctx.metadata), ("run-7", &metadata), "{}", ctx.call_id);
        assert_eq!(ctx.metadata.get_as::<String>("customer").ok().flatten().as_deref(), Some("acme"));
    }

    // Without metadata, a tool sees an empty object.
    let bare = TestTool::new("list");
    completed(
        agent(one_turn(json!([{"name": "list"}])), &[&bare], LoopConfig::default())
            .start(&RunScope::new("r"), "go", &NoHooks)
            .await,
    );
    assert!(bare.contexts().iter().all(|c| c.metadata.is_empty() && c.run_id == "r"));
}

// ---------------------------------------------------------------------------------------------------------
// The live tool set at resume

#[tokio::test]
async fn a_tool_whose_schema_changed_since_the_suspension_does_not_run() {
    let list = TestTool::new("list");
    let write = write_tool();
    let calls = json!([{"name": "list"}, {"name": "write", "arguments": {"path": "a.txt", "content": "x"}}]);
    let before = agent(one_turn(calls.clone()), &[&list, &write], LoopConfig::default());
    let stored = suspended(before.start(&RunScope::new("run"), "go", &NoHooks).await)
        .to_json()
        .unwrap_or_else(|e| panic!("{e}"));

    // A new deployment: same name, a different schema the person never saw.
    let new_write = TestTool::new("write")
        .gate(Gate::Ask)
        .schema(json!({"type": "object", "properties": {"path": {"type": "string"}, "mode": {"type": "string"}}}));
    let after = agent(one_turn(calls), &[&list, &new_write], LoopConfig::default());
    let suspension = Suspension::from_json(&stored).unwrap_or_else(|e| panic!("{e}"));
    let done = completed(
        after.resume(&RunScope::new("run"), suspension, &decisions(&[("call_2", Decision::Approve)]), &NoHooks).await,
    );

    let changed = result(&done.transcript, "call_2");
    assert_eq!(changed.content, "Tool write changed since the call was checked; the call was not run.");
    assert!(changed.is_error);
    assert_eq!((write.call_count(), new_write.call_count()), (0, 0));
    assert_eq!(list.call_count(), 1, "the unchanged tool of the turn still runs");
}

// ---------------------------------------------------------------------------------------------------------
// Stored suspensions

async fn stored_suspension() -> Value {
    let (_, suspension, _, _) = held_list_and_write().await;
    serde_json::from_str(&suspension.to_json().unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_suspension_from_a_newer_version_is_refused() {
    let mut stored = stored_suspension().await;
    stored["schema_version"] = json!(2);
    match Suspension::from_json(&stored.to_string()) {
        Err(SuspensionError::UnsupportedVersion { found, supported }) => {
            assert_eq!((found, supported), (2, SCHEMA_VERSION));
        }
        other => panic!("expected UnsupportedVersion, got {other:?}"),
    }
}

#[tokio::test]
async fn garbage_is_not_a_suspension() {
    for text in ["not json at all", "{}", r#"{"schema_version": 1}"#, "[1, 2, 3]"] {
        let read = Suspension::from_json(text);
        assert!(matches!(read, Err(SuspensionError::Invalid(_))), "{text}: {read:?}");
    }
}

#[tokio::test]
async fn a_tampered_suspension_is_refused() {
    let untouched = stored_suspension().await;
    assert!(Suspension::from_json(&untouched.to_string()).is_ok());

    let mut digest = untouched.clone();
    digest["turn_digest"] = json!(format!("sha256:{}", "0".repeat(64)));
    let read = Suspension::from_json(&digest.to_string());
    assert!(matches!(read, Err(SuspensionError::Invalid(_))), "tampered digest: {read:?}");

    // Arguments changed behind the person's back: the digest no longer matches what they were shown.
    let mut arguments = untouched;
    arguments["calls"][1]["arguments"]["path"] = json!("/etc/passwd");
    let read = Suspension::from_json(&arguments.to_string());
    assert!(matches!(read, Err(SuspensionError::Invalid(_))), "tampered arguments: {read:?}");
}

// ---------------------------------------------------------------------------------------------------------
// Hooks

#[tokio::test]
async fn hooks_see_each_executed_call_start_before_it_finishes_and_nothing_for_settled_calls() {
    let list = TestTool::new("list");
    let write = write_tool();
    let calls = json!([
        {"name": "list"},
        {"name": "write", "arguments": {"path": "a.txt", "content": "approve me"}},
        {"name": "write", "arguments": {"path": "b.txt", "content": "deny me"}},
        {"name": "write", "arguments": {"path": "c.txt", "content": "answer me"}},
        {"name": "write", "arguments": {"path": "d.txt", "content": "edit me"}}
    ]);
    let agent = agent(one_turn(calls), &[&list, &write], LoopConfig::default());
    let start_hooks = RecordingHooks::default();
    let suspension = suspended(agent.start(&RunScope::new("run"), "go", &start_hooks).await);
    assert!(start_hooks.lines().iter().all(|l| !l.starts_with("tool_")), "nothing of a held turn starts");

    let hooks = RecordingHooks::default();
    let decided = decisions(&[
        ("call_2", Decision::Approve),
        ("call_3", Decision::Deny { reason: "no".into() }),
        ("call_4", Decision::Respond { result: "42".into() }),
        ("call_5", Decision::Edit { arguments: json!({"path": "e.txt", "content": "edited"}) }),
    ]);
    completed(agent.resume(&RunScope::new("run"), reload(&suspension), &decided, &hooks).await);

    let tool_lines: Vec<String> = hooks.lines().into_iter().filter(|l| l.starts_with("tool_")).collect();
    assert_eq!(
        tool_lines,
        [
            "tool_started 1 call_1 list allow",
            "tool_finished 1 call_1 list error=false",
            "tool_started 1 call_2 write ask",
            "tool_finished 1 call_2 write error=false",
            "tool_started 1 call_5 write ask",
            "tool_finished 1 call_5 write error=false",
        ]
    );
    let ran: Vec<CallId> = write.calls().into_iter().map(|(id, _)| id).collect();
    assert_eq!(ran, ["call_2", "call_5"]);
}

/// Hooks whose store is unreachable when a call is about to start.
struct FailOnToolStarted;

impl LoopHooks for FailOnToolStarted {
    fn on_event<'a>(&'a self, event: LoopEvent<'a>) -> BoxFuture<'a, Result<(), HookError>> {
        let answer = match event {
            LoopEvent::ToolStarted { .. } => Err(HookError("the store is unreachable".into())),
            _ => Ok(()),
        };
        Box::pin(std::future::ready(answer))
    }
}

#[tokio::test]
async fn a_failing_tool_started_hook_stops_the_loop_before_an_approved_call_runs() {
    let write = write_tool();
    let script = one_turn(json!([{"name": "write", "arguments": {"path": "a.txt", "content": "x"}}]));
    let agent = agent(script, &[&write], LoopConfig::default());
    let suspension = suspended(agent.start(&RunScope::new("run"), "go", &NoHooks).await);

    let outcome = agent
        .resume(
            &RunScope::new("run"),
            reload(&suspension),
            &decisions(&[("call_1", Decision::Approve)]),
            &FailOnToolStarted,
        )
        .await;

    match outcome {
        Err(LoopError::Hook(HookError(message))) => assert_eq!(message, "the store is unreachable"),
        other => panic!("expected a hook error, got {other:?}"),
    }
    assert_eq!(write.call_count(), 0, "a side effect never runs before its start is recorded");
}

#[tokio::test]
async fn a_failing_tool_started_hook_stops_the_loop_before_an_allowed_call_runs() {
    let list = TestTool::new("list");
    let agent = agent(one_turn(json!([{"name": "list"}])), &[&list], LoopConfig::default());

    let outcome = agent.start(&RunScope::new("run"), "go", &FailOnToolStarted).await;

    assert!(matches!(outcome, Err(LoopError::Hook(_))), "{outcome:?}");
    assert_eq!(list.call_count(), 0);
}

// ---------------------------------------------------------------------------------------------------------
// Counters over segments

#[tokio::test]
async fn a_resumed_run_that_suspends_again_folds_its_counters() {
    let write = write_tool();
    let usage = |i: u64, o: u64| json!({"input_tokens": i, "output_tokens": o});
    let script = json!({"turns": [
        {"tool_calls": [{"name": "write", "arguments": {"path": "a.txt", "content": "1"}}], "usage": usage(10, 1)},
        {"tool_calls": [{"name": "write", "arguments": {"path": "b.txt", "content": "2"}}], "usage": usage(20, 2)},
        {"text": "Both written.", "usage": usage(30, 3)}
    ]});
    let agent = agent(script, &[&write], LoopConfig::default());
    let first = suspended(agent.start(&RunScope::new("run"), "go", &NoHooks).await);

    let second = suspended(
        agent
            .resume(&RunScope::new("run"), reload(&first), &decisions(&[("call_1", Decision::Approve)]), &NoHooks)
            .await,
    );

    assert_eq!(second.round, 2);
    assert_eq!(
        second.counters,
        Counters { iterations: 2, usage: Usage { input_tokens: 30, output_tokens: 3 }, tool_invocations: 1 }
    );
    let traced: Vec<(u32, &str)> = second.trace.iter().map(|i| (i.round, i.call_id.as_str())).collect();
    assert_eq!(traced, [(1, "call_1")], "the trace carries the first segment's invocation");

    let done = completed(
        agent
            .resume(&RunScope::new("run"), reload(&second), &decisions(&[("call_2", Decision::Approve)]), &NoHooks)
            .await,
    );
    assert_eq!(
        done.counters,
        Counters { iterations: 3, usage: Usage { input_tokens: 60, output_tokens: 6 }, tool_invocations: 2 }
    );
    let traced: Vec<(u32, &str)> = done.trace.iter().map(|i| (i.round, i.call_id.as_str())).collect();
    assert_eq!(traced, [(1, "call_1"), (2, "call_2")]);
}

/// Gives every call of a response the same id, as a sloppy local server might.
struct SameIds {
    inner: ScriptedModel,
}

impl ModelClient for SameIds {
    fn complete<'a>(&'a self, request: ModelRequest<'a>) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            let mut response = self.inner.complete(request).await?;
            for call in response.tool_calls.iter_mut() {
                call.call_id = "dup".into();
            }
            Ok(response)
        })
    }
}

#[tokio::test]
async fn a_call_id_used_twice_in_one_turn_never_rides_on_another_calls_approval() {
    let write = write_tool();
    let model = SameIds {
        inner: scripted(one_turn(json!([
            {"name": "write", "arguments": {"path": "a.txt", "content": "x"}},
            {"name": "write", "arguments": {"path": "b.txt", "content": "y"}}
        ]))),
    };
    let agent = agent_with(Arc::new(model), &[write.shared()], LoopConfig::default());
    let suspension = match agent.start(&RunScope::new("run"), "go", &NoHooks).await {
        Ok(Outcome::Suspended(s)) => s,
        other => panic!("expected a suspension, got {other:?}"),
    };
    assert_eq!(suspension.decidable_calls().count(), 1, "only the first call with the id takes a decision");
    let decisions: Decisions = [(CallId::from("dup"), Decision::Approve)].into();
    let done = completed(agent.resume(&RunScope::new("run"), suspension, &decisions, &NoHooks).await);
    assert_eq!(write.call_count(), 1, "the second call with the same id did not run");
    let refusals = done.transcript.iter().filter(|m| matches!(m, Message::Tool(r) if r.is_error)).count();
    assert_eq!(refusals, 1);
}

// ---------------------------------------------------------------------------------------------------------
// The call a resume runs first, whose ledger entry may ride with the claim

#[tokio::test]
async fn the_first_decided_call_is_the_one_the_resume_starts_first() {
    let write = write_tool();
    let list = TestTool::new("list");
    let args = |p: &str| json!({"path": p, "content": "x"});
    let agent = agent(
        one_turn(json!([
            {"name": "write", "arguments": args("a")},
            {"name": "write", "arguments": args("b")}
        ])),
        &[&write, &list],
        LoopConfig::default(),
    );
    let held = reload(&suspended(agent.start(&RunScope::new("run-1"), "go", &NoHooks).await));
    let first = async |d: &Decisions| {
        let plan = agent.plan_resume(&RunScope::new("run-1"), &held, d, &[]).await.ok()?;
        plan.first_decided().map(|c| (c.call_id, c.arguments, c.gate))
    };

    let approve_both = decisions(&[("call_1", Decision::Approve), ("call_2", Decision::Approve)]);
    assert_eq!(first(&approve_both).await, Some(("call_1".into(), args("a"), Gate::Ask)));
    let edited = decisions(&[("call_1", Decision::Edit { arguments: args("c") }), ("call_2", Decision::Approve)]);
    assert_eq!(first(&edited).await, Some(("call_1".into(), args("c"), Gate::Ask)), "an edit runs with its arguments");
    let deny_first = decisions(&[
        ("call_1", Decision::Deny { reason: "no".into() }),
        ("call_2", Decision::Edit { arguments: args("d") }),
    ]);
    assert_eq!(first(&deny_first).await, Some(("call_2".into(), args("d"), Gate::Ask)), "a denied call does not run");
    let none_run = decisions(&[
        ("call_1", Decision::Deny { reason: "no".into() }),
        ("call_2", Decision::Respond { result: "ok".into() }),
    ]);
    assert_eq!(first(&none_run).await, None);
    assert_eq!(first(&decisions(&[("call_1", Decision::Approve)])).await, None, "an incomplete set resumes nothing");

    // A plan whose first start was committed with the claim runs that call without announcing its start
    // again; the next call's start is announced as usual.
    let mut plan =
        agent.plan_resume(&RunScope::new("run-1"), &held, &approve_both, &[]).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plan.commit_first_start().map(|c| c.call_id), Some(CallId::from("call_1")));
    let hooks = RecordingHooks::default();
    completed(agent.resume_planned(&RunScope::new("run-1"), held.clone(), plan, &hooks).await);
    let calls: Vec<String> = hooks.lines().into_iter().filter(|e| e.starts_with("tool_")).collect();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(calls[0].starts_with("tool_finished 1 call_1"), "{calls:?}");
    assert!(calls[1].starts_with("tool_started 1 call_2") && calls[2].starts_with("tool_finished 1 call_2"));

    // The hooks see exactly that call start first.
    let hooks = RecordingHooks::default();
    let _ = agent.resume(&RunScope::new("run-1"), held.clone(), &deny_first, &hooks).await;
    let started = hooks.lines().into_iter().find(|e| e.starts_with("tool_started"));
    assert_eq!(started.as_deref(), Some("tool_started 1 call_2 write ask"));

    // An allow-gated call that runs before the decided one: nothing may ride with the claim.
    let mixed = agent_with(
        Arc::new(scripted(one_turn(json!([{"name": "list"}, {"name": "write", "arguments": args("a")}])))),
        &[write.shared(), list.shared()],
        LoopConfig::default(),
    );
    let held = reload(&suspended(mixed.start(&RunScope::new("run-2"), "go", &NoHooks).await));
    let plan =
        mixed.plan_resume(&RunScope::new("run-2"), &held, &decisions(&[("call_2", Decision::Approve)]), &[]).await;
    assert_eq!(plan.map(|p| p.first_decided()), Ok(None));
}

/// An edit planned after its tool began to refuse those arguments (the target changed between the
/// decision and the resume) is planned as that call's error result, said by `refused_edit`: the rest of
/// the turn runs and the run goes on. `resume` (plan and execute in one) refuses the edit instead.
#[tokio::test]
async fn an_edit_the_tool_refuses_at_planning_is_its_calls_error_result_and_the_rest_runs() {
    let write = write_tool().schema(json!({"type": "object", "required": ["path"]}));
    let agent = agent(
        one_turn(json!([
            {"name": "write", "arguments": {"path": "a", "content": "x"}},
            {"name": "write", "arguments": {"path": "b", "content": "y"}}
        ])),
        &[&write],
        LoopConfig::default(),
    );
    let held = reload(&suspended(agent.start(&RunScope::new("run"), "go", &NoHooks).await));
    let decided = decisions(&[
        ("call_1", Decision::Edit { arguments: json!({"content": "no path"}) }),
        ("call_2", Decision::Approve),
    ]);
    let plan = agent.plan_resume(&RunScope::new("run"), &held, &decided, &[]).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(plan.refused_edit(&CallId::from("call_1")).is_some_and(|m| m.contains("path")), "{plan:?}");
    assert_eq!(plan.refused_edit(&CallId::from("call_2")), None);
    let done = completed(agent.resume_planned(&RunScope::new("run"), held.clone(), plan, &NoHooks).await);
    assert_eq!(write.call_count(), 1, "only the approved call ran");
    let first = done.transcript.iter().find_map(|m| match m {
        Message::Tool(r) if r.call_id == "call_1" => Some(r.clone()),
        _ => None,
    });
    assert!(first.is_some_and(|r| r.is_error && r.content.contains("edited arguments are refused")));
    let refused = agent.resume(&RunScope::new("run"), held, &decided, &NoHooks).await;
    assert!(matches!(refused, Err(LoopError::Decision(DecisionError::InvalidEdit { .. }))), "{refused:?}");
}

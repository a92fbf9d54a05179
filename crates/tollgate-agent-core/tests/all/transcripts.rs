//! Snapshots of the transcript the loop builds for each way a held turn can be decided, and for the
//! loop's refusals and limits. Each snapshot is what the model would be sent next.

use serde_json::{Value, json};
use std::sync::Arc;
use tollgate_agent_core::scripted::{Script, ScriptedModel};
use tollgate_agent_core::{
    AgentLoop, CallId, Completion, Decision, Decisions, Gate, LoopConfig, NoHooks, Outcome, RunScope, Suspension,
    ToolLoop, ToolRegistry,
};
use tollgate_agent_testkit::{Behaviour, TestTool};

fn agent(script: Value, tools: &[&TestTool], config: LoopConfig) -> ToolLoop {
    let script = Script::from_value(script).unwrap_or_else(|e| panic!("{e}"));
    let mut registry = ToolRegistry::new();
    for tool in tools {
        registry.register(tool.shared()).unwrap_or_else(|e| panic!("{e}"));
    }
    ToolLoop::new(Arc::new(ScriptedModel::new(script)), Arc::new(registry), config)
}

fn config() -> LoopConfig {
    LoopConfig { system_prompt: Some("You are careful.".into()), ..LoopConfig::default() }
}

async fn suspend(agent: &ToolLoop, input: &str) -> Suspension {
    match agent.start(&RunScope::new("run"), input, &NoHooks).await {
        Ok(Outcome::Suspended(s)) => s,
        other => panic!("expected a suspension, got {other:?}"),
    }
}

async fn complete(agent: &ToolLoop, suspension: Suspension, decisions: &[(&str, Decision)]) -> Completion {
    let decisions: Decisions = decisions.iter().map(|(id, d)| (CallId::from(*id), d.clone())).collect();
    match agent.resume(&RunScope::new("run"), suspension, &decisions, &NoHooks).await {
        Ok(Outcome::Completed(c)) => c,
        other => panic!("expected a completion, got {other:?}"),
    }
}

fn write_script() -> Value {
    json!({"turns": [
        {"tool_calls": [{"name": "write", "arguments": {"path": "note.txt", "content": "{{input}}"}}]},
        {"when_denied": {"text": "I did not write it."}, "when_approved": {"text": "Saved."}}
    ]})
}

fn write_tool() -> TestTool {
    TestTool::new("write")
        .gate(Gate::Ask)
        .preview("create note.txt")
        .schema(json!({"type": "object", "required": ["path", "content"],
                       "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}))
}

#[tokio::test]
async fn approve() {
    let write = write_tool();
    let agent = agent(write_script(), &[&write], config());
    let suspension = suspend(&agent, "hello").await;
    let done = complete(&agent, suspension, &[("call_1", Decision::Approve)]).await;
    assert_eq!(write.call_count(), 1);
    insta::assert_json_snapshot!(done);
}

#[tokio::test]
async fn deny() {
    let write = write_tool();
    let agent = agent(write_script(), &[&write], config());
    let suspension = suspend(&agent, "hello").await;
    let done = complete(&agent, suspension, &[("call_1", Decision::Deny { reason: "not on a Friday".into() })]).await;
    assert_eq!(write.call_count(), 0);
    insta::assert_json_snapshot!(done);
}

#[tokio::test]
async fn edit() {
    let write = write_tool();
    let agent = agent(write_script(), &[&write], config());
    let suspension = suspend(&agent, "hello").await;
    let arguments = json!({"path": "draft.txt", "content": "hi"});
    let done = complete(&agent, suspension, &[("call_1", Decision::Edit { arguments: arguments.clone() })]).await;
    assert_eq!(write.calls(), vec![(CallId::from("call_1"), arguments)]);
    insta::assert_json_snapshot!(done);
}

#[tokio::test]
async fn respond() {
    let write = write_tool();
    let agent = agent(write_script(), &[&write], config());
    let suspension = suspend(&agent, "hello").await;
    let done =
        complete(&agent, suspension, &[("call_1", Decision::Respond { result: "The answer is 42".into() })]).await;
    assert_eq!(write.call_count(), 0);
    insta::assert_json_snapshot!(done);
}

#[tokio::test]
async fn mixed_allow_and_ask_turn() {
    let list = TestTool::new("list").behaviour(Behaviour::Output("note.txt".into()));
    let write = write_tool();
    let script = json!({"turns": [
        {"text": "Looking first.", "tool_calls": [
            {"name": "list", "arguments": {}},
            {"name": "write", "arguments": {"path": "a.txt", "content": "A"}},
            {"name": "list", "arguments": {"again": true}},
            {"name": "write", "arguments": {"path": "b.txt", "content": "B"}}
        ]},
        {"text": "Done."}
    ]});
    let agent = agent(script, &[&list, &write], config());
    let suspension = suspend(&agent, "tidy up").await;
    assert_eq!(list.call_count(), 0, "nothing of a held turn runs before the decisions");
    insta::assert_json_snapshot!("mixed_allow_and_ask_turn_suspension", suspension);
    let done = complete(
        &agent,
        suspension,
        &[("call_2", Decision::Approve), ("call_4", Decision::Deny { reason: "keep b".into() })],
    )
    .await;
    assert_eq!(list.call_count(), 2);
    assert_eq!(write.call_count(), 1);
    insta::assert_json_snapshot!(done);
}

#[tokio::test]
async fn second_suspension_after_resume() {
    let write = write_tool();
    let script = json!({"turns": [
        {"tool_calls": [{"name": "write", "arguments": {"path": "a.txt", "content": "1"}}]},
        {"tool_calls": [{"name": "write", "arguments": {"path": "b.txt", "content": "2"}}]},
        {"text": "Both written."}
    ]});
    let agent = agent(script, &[&write], config());
    let first = suspend(&agent, "two notes").await;
    let decisions: Decisions = [(CallId::from("call_1"), Decision::Approve)].into();
    let second = match agent.resume(&RunScope::new("run"), first, &decisions, &NoHooks).await {
        Ok(Outcome::Suspended(s)) => s,
        other => panic!("expected a second suspension, got {other:?}"),
    };
    assert_eq!(second.round, 2);
    assert_eq!(second.counters.iterations, 2);
    assert_eq!(second.trace.len(), 1);
    insta::assert_json_snapshot!("second_suspension", second);
    let done = complete(&agent, second, &[("call_2", Decision::Approve)]).await;
    assert_eq!(done.trace.len(), 2, "the trace covers both segments");
    insta::assert_json_snapshot!(done);
}

#[tokio::test]
async fn iteration_cap() {
    let tick = TestTool::new("tick");
    let script = json!({"turns": [
        {"tool_calls": [{"name": "tick"}]},
        {"tool_calls": [{"name": "tick"}]},
        {"text": "Stopping here.", "tool_calls": [{"name": "tick"}]}
    ]});
    let agent = agent(script, &[&tick], LoopConfig { max_iterations: 2, ..config() });
    let done = match agent.start(&RunScope::new("run"), "tick forever", &NoHooks).await {
        Ok(Outcome::Completed(c)) => c,
        other => panic!("{other:?}"),
    };
    assert_eq!(tick.call_count(), 1, "the capped turn's call is not run");
    assert_eq!(done.counters.iterations, 2, "the closing completion is not counted");
    insta::assert_json_snapshot!(done);
}

#[tokio::test]
async fn vanished_tool() {
    let write = write_tool();
    let before = agent(write_script(), &[&write], config());
    let suspension = suspend(&before, "hello").await;
    let stored = suspension.to_json().unwrap_or_else(|e| panic!("{e}"));
    // The process restarts without the tool.
    let after = agent(write_script(), &[], config());
    let suspension = Suspension::from_json(&stored).unwrap_or_else(|e| panic!("{e}"));
    let done = complete(&after, suspension, &[("call_1", Decision::Approve)]).await;
    assert_eq!(write.call_count(), 0);
    insta::assert_json_snapshot!(done);
}

#[tokio::test]
async fn tool_panic() {
    let boom = TestTool::new("boom").behaviour(Behaviour::Panic("secret internal detail".into()));
    let script = json!({"turns": [{"tool_calls": [{"name": "boom"}]}, {"text": "It failed."}]});
    let agent = agent(script, &[&boom], config());
    let done = match agent.start(&RunScope::new("run"), "go", &NoHooks).await {
        Ok(Outcome::Completed(c)) => c,
        other => panic!("{other:?}"),
    };
    let text = serde_json::to_string(&done.transcript).unwrap_or_default();
    assert!(!text.contains("secret internal detail"), "a panic's text never reaches the model");
    insta::assert_json_snapshot!(done);
}

//! The `data` of each event kind (API.md, "Events"), built in one place so every writer agrees.

use serde_json::{Value, json};
use tollgate_core::{
    EventKind, HeldCall, Millis, ModelResponse, NewEvent, RecordedDecision, RunError, RunRecord, Suspension,
    ToolResult, ToolSpec, rfc3339,
};

pub(crate) fn event(at: Millis, kind: EventKind, round: u32, data: Value) -> NewEvent {
    NewEvent { at, kind, round, data }
}

/// A run's first event, as of its creation.
pub(crate) fn run_started(run: &RunRecord) -> NewEvent {
    let data = json!({"agent": run.agent, "input": run.input, "actor": run.created_by});
    event(run.created_at, EventKind::RunStarted, 0, data)
}

pub(crate) fn model_request(at: Millis, round: u32, messages: usize, tools: &[ToolSpec]) -> NewEvent {
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    event(at, EventKind::ModelRequest, round, json!({"messages": messages, "tools": names}))
}

pub(crate) fn model_response(at: Millis, round: u32, response: &ModelResponse) -> NewEvent {
    let calls: Vec<Value> = response
        .tool_calls
        .iter()
        .map(|c| json!({"call_id": c.call_id, "tool": c.name, "arguments": c.arguments}))
        .collect();
    event(
        at,
        EventKind::ModelResponse,
        round,
        json!({"text": response.text, "tool_calls": calls, "usage": response.usage}),
    )
}

pub(crate) fn tool_started(
    at: Millis,
    round: u32,
    run_id: &str,
    call_id: &str,
    tool: &str,
    arguments: &Value,
    gate: tollgate_core::Gate,
) -> NewEvent {
    event(
        at,
        EventKind::ToolStarted,
        round,
        json!({"call_id": call_id, "tool": tool, "arguments": arguments, "gate": gate,
               "idempotency_key": format!("{run_id}:{call_id}")}),
    )
}

pub(crate) fn tool_finished(at: Millis, round: u32, result: &ToolResult) -> NewEvent {
    event(
        at,
        EventKind::ToolFinished,
        round,
        json!({"call_id": result.call_id, "tool": result.tool, "is_error": result.is_error, "result": result.content}),
    )
}

pub(crate) fn held_call_json(call: &HeldCall) -> Value {
    json!({"call_id": call.call_id, "tool": call.tool, "arguments": call.arguments, "gate": call.gate(),
           "preview": call.preview, "in_doubt": call.in_doubt()})
}

pub(crate) fn approval_requested(at: Millis, suspension: &Suspension, expires_at: Option<Millis>) -> NewEvent {
    let calls: Vec<Value> = suspension.calls.iter().map(held_call_json).collect();
    event(
        at,
        EventKind::ApprovalRequested,
        suspension.round,
        json!({"turn_digest": suspension.turn_digest, "calls": calls, "expires_at": expires_at.map(rfc3339)}),
    )
}

pub(crate) fn decision(at: Millis, round: u32, call_id: &str, recorded: &RecordedDecision) -> NewEvent {
    let mut data = serde_json::to_value(&recorded.decision).unwrap_or_else(|_| json!({}));
    if let Value::Object(map) = &mut data {
        map.insert("call_id".into(), json!(call_id));
        map.insert("actor".into(), json!(recorded.actor));
    }
    event(at, EventKind::Decision, round, data)
}

pub(crate) fn run_resumed(at: Millis, round: u32, actor: &str) -> NewEvent {
    event(at, EventKind::RunResumed, round, json!({"actor": actor}))
}

pub(crate) fn run_completed(at: Millis, round: u32, output: Option<&str>, reason: &str) -> NewEvent {
    event(at, EventKind::RunCompleted, round, json!({"output": output, "termination_reason": reason}))
}

pub(crate) fn run_failed(at: Millis, round: u32, error: &RunError) -> NewEvent {
    event(at, EventKind::RunFailed, round, json!({"error": error}))
}

pub(crate) fn run_cancelled(at: Millis, round: u32, actor: &str, reason: Option<&str>) -> NewEvent {
    event(at, EventKind::RunCancelled, round, json!({"actor": actor, "reason": reason}))
}

pub(crate) fn run_expired(at: Millis, round: u32, deadline: Millis) -> NewEvent {
    event(at, EventKind::RunExpired, round, json!({"deadline": rfc3339(deadline)}))
}

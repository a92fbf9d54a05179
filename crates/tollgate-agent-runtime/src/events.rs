//! The `data` of each event kind (docs/events.md), built in one place so every writer agrees: each is
//! one of `tollgate_agent_protocol::event_data`'s structs, whose JSON is the event data Tollgate has always
//! written (the frozen v1 events prove it).

use crate::wire;
use serde_json::Value;
use tollgate_agent_core::{Actor, CallId, GrantId, RunId};
use tollgate_agent_core::{
    Approval, EventKind, HeldTurn, Millis, ModelResponse, NewEvent, RunError, RunRecord, Suspension, TerminationReason,
    ToolResult, ToolSpec, Vote, rfc3339,
};
use tollgate_agent_protocol::event_data as data;

fn event(at: Millis, kind: EventKind, round: u32, data: impl Into<data::EventData>) -> NewEvent {
    NewEvent { at, kind, round, data: data.into().to_value() }
}

/// A run's first event, as of its creation.
pub(crate) fn run_started(run: &RunRecord) -> NewEvent {
    let started =
        data::RunStarted { agent: run.agent.clone(), input: Some(run.input.clone()), actor: run.created_by.clone() };
    event(run.created_at, EventKind::RunStarted, 0, started)
}

pub(crate) fn model_request(at: Millis, round: u32, messages: usize, tools: &[ToolSpec]) -> NewEvent {
    let request =
        data::ModelRequest { messages: messages as u64, tools: tools.iter().map(|t| t.name.clone()).collect() };
    event(at, EventKind::ModelRequest, round, request)
}

pub(crate) fn model_response(at: Millis, round: u32, response: &ModelResponse) -> NewEvent {
    let tool_calls = response
        .tool_calls
        .iter()
        .map(|c| data::ModelToolCall {
            call_id: c.call_id.clone(),
            tool: c.name.clone(),
            arguments: c.arguments.clone(),
        })
        .collect();
    let answered = data::ModelResponse { text: response.text.clone(), tool_calls, usage: response.usage };
    event(at, EventKind::ModelResponse, round, answered)
}

/// A call about to run, as its `tool_started` names it.
pub(crate) struct Starting<'a> {
    pub(crate) call_id: &'a CallId,
    pub(crate) tool: &'a str,
    pub(crate) arguments: &'a Value,
    pub(crate) gate: tollgate_agent_core::Gate,
    /// The grant that allowed it, if one did.
    pub(crate) grant: Option<&'a GrantId>,
}

pub(crate) fn tool_started(at: Millis, round: u32, run_id: &RunId, starting: Starting<'_>) -> NewEvent {
    let Starting { call_id, tool, arguments, gate, grant } = starting;
    let started = data::ToolStarted {
        call_id: call_id.clone(),
        tool: tool.to_owned(),
        arguments: arguments.clone(),
        gate,
        idempotency_key: format!("{run_id}:{call_id}"),
        // Written since grants, null when no grant allowed the call (V2.md).
        grant: Some(grant.cloned()),
    };
    event(at, EventKind::ToolStarted, round, started)
}

/// `tool_started` of `call`, a call whose start is committed before it runs together with another
/// write (the claim of a resume a person decided, the hold of a turn a grant cleared).
pub(crate) fn call_started(
    at: Millis,
    round: u32,
    run_id: &RunId,
    call: &tollgate_agent_core::StartingCall,
) -> NewEvent {
    let starting = Starting {
        call_id: &call.call_id,
        tool: &call.tool,
        arguments: &call.arguments,
        gate: call.gate,
        grant: call.grant.as_ref(),
    };
    tool_started(at, round, run_id, starting)
}

pub(crate) fn tool_finished(at: Millis, round: u32, result: &ToolResult) -> NewEvent {
    let finished = data::ToolFinished {
        call_id: result.call_id.clone(),
        tool: result.tool.clone(),
        is_error: result.is_error,
        result: Some(result.content.clone()),
    };
    event(at, EventKind::ToolFinished, round, finished)
}

/// `approval_requested`: the held turn `held` of `suspension`, each call with its approval's count when
/// it is a quorum call.
pub(crate) fn approval_requested(at: Millis, suspension: &Suspension, held: &HeldTurn) -> NewEvent {
    let requested = data::ApprovalRequested {
        turn_digest: suspension.turn_digest.0.clone(),
        calls: suspension.calls.iter().map(|call| wire::gated_call(call, held.approval(&call.call_id))).collect(),
        expires_at: held.expires_at.map(rfc3339),
    };
    event(at, EventKind::ApprovalRequested, suspension.round, requested)
}

/// `decision`: one vote, with its approval's count after it when the call is a quorum.
pub(crate) fn decision(at: Millis, round: u32, call_id: &CallId, recorded: &Vote, approval: &Approval) -> NewEvent {
    let made = data::DecisionMade {
        decision: recorded.decision.clone().into(),
        call_id: call_id.clone(),
        actor: recorded.actor.clone(),
        approvals: wire::approvals(approval),
        grant: None,
        link: None,
    };
    event(at, EventKind::Decision, round, made)
}

pub(crate) fn run_resumed(at: Millis, round: u32, actor: &Actor) -> NewEvent {
    event(at, EventKind::RunResumed, round, data::RunResumed { actor: actor.clone() })
}

/// `run_taken_over`: `owner` took the run over from `previous_owner`, the `takeovers`th time in a row
/// without a new step.
pub(crate) fn run_taken_over(at: Millis, round: u32, owner: &str, previous_owner: &str, takeovers: u32) -> NewEvent {
    let taken = data::RunTakenOver { owner: owner.to_owned(), previous_owner: previous_owner.to_owned(), takeovers };
    event(at, EventKind::RunTakenOver, round, taken)
}

pub(crate) fn run_completed(at: Millis, round: u32, output: Option<&str>, reason: TerminationReason) -> NewEvent {
    let completed = data::RunCompleted { output: output.map(str::to_owned), termination_reason: reason };
    event(at, EventKind::RunCompleted, round, completed)
}

pub(crate) fn run_failed(at: Millis, round: u32, error: &RunError) -> NewEvent {
    event(at, EventKind::RunFailed, round, data::RunFailed { error: error.clone() })
}

pub(crate) fn run_cancelled(at: Millis, round: u32, actor: &Actor, reason: Option<&str>) -> NewEvent {
    let cancelled = data::RunCancelled { actor: actor.clone(), reason: reason.map(str::to_owned) };
    event(at, EventKind::RunCancelled, round, cancelled)
}

/// `approval_escalated`: the held turn `turn_digest` waited its agent's `escalate_after` (`rule`) and the
/// rule's notifiers were told.
pub(crate) fn approval_escalated(at: Millis, round: u32, turn_digest: &str, rule: &crate::EscalationRule) -> NewEvent {
    let escalated = data::ApprovalEscalated {
        turn_digest: turn_digest.to_owned(),
        after: rule.after_text.clone(),
        notified: rule.notify.clone(),
    };
    event(at, EventKind::ApprovalEscalated, round, escalated)
}

pub(crate) fn run_expired(at: Millis, round: u32, deadline: Millis) -> NewEvent {
    event(at, EventKind::RunExpired, round, data::RunExpired { deadline: rfc3339(deadline) })
}

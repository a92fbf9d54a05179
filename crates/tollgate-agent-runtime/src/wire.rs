//! The runtime's types as the wire types of `tollgate-agent-protocol`: the one place core meets the protocol.
//!
//! Both sides are foreign to this crate, so these are functions rather than `From` impls (the orphan
//! rule). `Gate`, `RunStatus` and `Usage` need none: core uses the wire's. Every other enum is converted with an
//! exhaustive `match`: a new reason, event kind or decision in core does not compile until its wire form
//! is chosen here.

use tollgate_agent_core::{
    Approval, CallState, Decision, EventKind, HeldCall, RecordedDecision, RunError, RunRecord, RunState, StoredEvent,
    TerminationReason, rfc3339,
};
use tollgate_agent_protocol as wire;

/// A termination reason on the wire.
pub fn termination_reason(reason: TerminationReason) -> wire::TerminationReason {
    match reason {
        TerminationReason::Completed => wire::TerminationReason::Completed,
        TerminationReason::MaxIterations => wire::TerminationReason::MaxIterations,
        TerminationReason::BudgetExhausted => wire::TerminationReason::BudgetExhausted,
        TerminationReason::Error => wire::TerminationReason::Error,
        TerminationReason::Cancelled => wire::TerminationReason::Cancelled,
        TerminationReason::Expired => wire::TerminationReason::Expired,
    }
}

/// An event kind on the wire.
pub fn event_kind(kind: EventKind) -> wire::EventKind {
    match kind {
        EventKind::RunStarted => wire::EventKind::RunStarted,
        EventKind::ModelRequest => wire::EventKind::ModelRequest,
        EventKind::ModelResponse => wire::EventKind::ModelResponse,
        EventKind::ToolStarted => wire::EventKind::ToolStarted,
        EventKind::ToolFinished => wire::EventKind::ToolFinished,
        EventKind::ApprovalRequested => wire::EventKind::ApprovalRequested,
        EventKind::Decision => wire::EventKind::Decision,
        EventKind::RunResumed => wire::EventKind::RunResumed,
        EventKind::RunTakenOver => wire::EventKind::RunTakenOver,
        EventKind::RunCompleted => wire::EventKind::RunCompleted,
        EventKind::RunFailed => wire::EventKind::RunFailed,
        EventKind::RunCancelled => wire::EventKind::RunCancelled,
        EventKind::RunExpired => wire::EventKind::RunExpired,
    }
}

/// A run's error on the wire.
pub fn run_error(error: &RunError) -> wire::RunError {
    wire::RunError { kind: error.kind.clone(), message: error.message.clone() }
}

/// A decision on the wire.
pub fn decision(decision: &Decision) -> wire::Decision {
    match decision {
        Decision::Approve => wire::Decision::Approve,
        Decision::Edit { arguments } => wire::Decision::Edit { arguments: arguments.clone() },
        Decision::Deny { reason } => wire::Decision::Deny { reason: reason.clone() },
        Decision::Respond { result } => wire::Decision::Respond { result: result.clone() },
    }
}

/// A wire decision as the runtime's (a request body's decision, after its defaults are applied).
pub fn decision_from_wire(decision: wire::Decision) -> Decision {
    match decision {
        wire::Decision::Approve => Decision::Approve,
        wire::Decision::Edit { arguments } => Decision::Edit { arguments },
        wire::Decision::Deny { reason } => Decision::Deny { reason },
        wire::Decision::Respond { result } => Decision::Respond { result },
    }
}

/// A recorded decision on the wire: the decision, who, and when.
pub fn recorded_decision(recorded: &RecordedDecision) -> wire::RecordedDecision {
    wire::RecordedDecision {
        decision: decision(&recorded.decision),
        actor: recorded.actor.clone(),
        at: rfc3339(recorded.at),
    }
}

/// A held call as `approval_requested` lists it.
pub fn gated_call(call: &HeldCall) -> wire::event_data::GatedCall {
    wire::event_data::GatedCall {
        call_id: call.call_id.clone(),
        tool: call.tool.clone(),
        arguments: call.arguments.clone(),
        gate: call.gate(),
        preview: call.preview.clone(),
        in_doubt: call.in_doubt(),
    }
}

/// Where a held call stands on the wire, given the decision recorded for it so far.
pub fn call_state(call: &HeldCall, recorded: Option<&RecordedDecision>) -> wire::CallState {
    match (&call.state, recorded) {
        (CallState::Finished(_), _) => wire::CallState::Finished,
        (CallState::Refused(_), _) => wire::CallState::Refused,
        (CallState::Allowed, _) => wire::CallState::Allowed,
        (CallState::Asks | CallState::InDoubt, Some(_)) => wire::CallState::Decided,
        (CallState::InDoubt, None) => wire::CallState::InDoubt,
        (CallState::Asks, None) => wire::CallState::Waiting,
    }
}

/// A quorum approval's count on the wire (`calls[].approvals`, a `decision` event's `approvals`); none
/// for an approval one decision settles.
pub fn approvals(approval: &Approval) -> Option<wire::Approvals> {
    approval.requirement.is_quorum().then(|| wire::Approvals {
        required: approval.required(),
        given: approval.approvals_given().into_iter().map(str::to_owned).collect(),
    })
}

/// A held call as the run object shows it, with its approval (if it needs people). It takes a decision
/// when [`HeldCall::takes_decision`] says so and its approval is still open (the one rule; clients read
/// it from here, and `decide` refuses the others); its `decision` is the one its approval settled on.
pub fn call(call: &HeldCall, approval: Option<&Approval>) -> wire::Call {
    let result = match &call.state {
        CallState::Finished(result) => {
            Some(wire::CallResult { content: result.content.clone(), is_error: result.is_error })
        }
        CallState::Refused(_) | CallState::Allowed | CallState::Asks | CallState::InDoubt => None,
    };
    let recorded = approval.and_then(Approval::settled_by);
    wire::Call {
        call_id: call.call_id.clone(),
        tool: call.tool.clone(),
        arguments: call.arguments.clone(),
        gate: call.gate(),
        preview: call.preview.clone(),
        in_doubt: call.in_doubt(),
        decision: recorded.as_ref().map(recorded_decision),
        state: call_state(call, recorded.as_ref()),
        takes_decision: call.takes_decision() && recorded.is_none(),
        result,
        approvals: approval.and_then(approvals),
    }
}

/// A stored event on the wire (the data as stored: the hash covers it).
pub fn event(event: &StoredEvent) -> wire::Event {
    wire::Event {
        seq: event.seq,
        at: event.at.clone(),
        kind: event_kind(event.kind),
        round: event.round,
        data: event.data.clone(),
        hash: event.hash.clone(),
    }
}

/// The run object of docs/api.md for a record. A held turn whose suspension cannot be read shows no calls
/// (and is logged); deciding on it fails the run as `corrupt_suspension`.
pub fn run(run: &RunRecord) -> wire::Run {
    let pending = match &run.state {
        RunState::Waiting(pending) => {
            let calls = pending
                .suspension
                .parse()
                .inspect_err(|error| tracing::warn!(run = %run.id, %error, "the held turn cannot be read"))
                .map(|s| s.calls.iter().map(|held| call(held, pending.approval(&held.call_id))).collect())
                .unwrap_or_default();
            Some(wire::HeldTurn {
                turn_digest: pending.turn_digest.0.clone(),
                expires_at: pending.expires_at.map(rfc3339),
                calls,
            })
        }
        RunState::Queued { .. }
        | RunState::Running { .. }
        | RunState::Completed { .. }
        | RunState::Failed { .. }
        | RunState::Cancelled { .. }
        | RunState::Expired { .. } => None,
    };
    wire::Run {
        id: run.id.clone(),
        agent: run.agent.clone(),
        status: run.status(),
        input: run.input.clone(),
        metadata: run.metadata.as_map().clone(),
        output: run.output().map(str::to_owned),
        termination_reason: run.termination_reason().map(termination_reason),
        iterations: run.iterations,
        usage: run.usage,
        version: run.version,
        created_by: run.created_by.clone(),
        created_at: rfc3339(run.created_at),
        updated_at: rfc3339(run.updated_at),
        finished_at: run.finished_at().map(rfc3339),
        error: run.error().map(run_error),
        pending,
    }
}

/// A listed tool on the wire.
pub fn tool(info: &crate::ToolInfo) -> wire::Tool {
    wire::Tool {
        name: info.name.clone(),
        description: info.description.clone(),
        parameters: info.parameters.clone(),
        gate: info.gate,
        why: info.why.clone(),
    }
}

/// A configured agent on the wire.
pub fn agent(spec: &crate::AgentSpec) -> wire::Agent {
    wire::Agent {
        name: spec.name.clone(),
        model: spec.model.clone(),
        tools: spec.tools.iter().map(|t| t.name.clone()).collect(),
        forbid_self_approval: spec.forbid_self_approval,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use tollgate_agent_core::ToolResult;

    fn held(state: CallState) -> HeldCall {
        HeldCall {
            call_id: "call_1".into(),
            tool: "write".into(),
            arguments: json!({"text": "a"}),
            preview: Some("write a".into()),
            observed: None,
            state,
            requirement: tollgate_agent_core::Requirement::SINGLE,
        }
    }

    fn result(content: &str, is_error: bool) -> ToolResult {
        ToolResult { call_id: "call_1".into(), tool: "write".into(), content: content.into(), is_error, denied: false }
    }

    /// The approval of `call_1`, decided by bob's approval.
    fn approved() -> Approval {
        let vote = RecordedDecision { decision: Decision::Approve, actor: "bob".into(), at: 1_796_000_000_000 };
        let pending = Approval::pending("ap".into(), "run", "call_1", tollgate_agent_core::Requirement::SINGLE, None);
        pending.apply(&tollgate_agent_core::ApprovalCommand::Vote(vote)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The fields the run object adds for a call, and the older ones next to them.
    fn shown(call: &HeldCall, recorded: Option<&Approval>) -> Value {
        let json = serde_json::to_value(super::call(call, recorded)).unwrap_or_else(|e| panic!("{e}"));
        json!([json["state"], json["takes_decision"], json["result"], json["gate"], json["in_doubt"]])
    }

    #[test]
    fn each_call_state_is_shown_with_whether_it_takes_a_decision() {
        let cases = [
            (held(CallState::Asks), None, json!(["waiting", true, null, "ask", false])),
            (held(CallState::InDoubt), None, json!(["in_doubt", true, null, "ask", true])),
            (
                held(CallState::Finished(result("wrote a", false))),
                None,
                json!(["finished", false, {"content": "wrote a", "is_error": false}, "ask", false]),
            ),
            (
                held(CallState::Finished(result("disk full", true))),
                None,
                json!(["finished", false, {"content": "disk full", "is_error": true}, "ask", false]),
            ),
            (held(CallState::Asks), Some(approved()), json!(["decided", false, null, "ask", false])),
            (held(CallState::InDoubt), Some(approved()), json!(["decided", false, null, "ask", true])),
            (held(CallState::Allowed), None, json!(["allowed", false, null, "allow", false])),
            (
                held(CallState::Refused(result("unknown tool", true))),
                None,
                json!(["refused", false, null, "forbid", false]),
            ),
        ];
        for (call, recorded, expected) in cases {
            assert_eq!(shown(&call, recorded.as_ref()), expected, "{call:?} {recorded:?}");
        }
    }

    #[test]
    fn a_call_takes_a_decision_on_the_wire_exactly_when_the_runtime_would_accept_one() {
        for state in [
            CallState::Asks,
            CallState::InDoubt,
            CallState::Finished(result("x", false)),
            CallState::Allowed,
            CallState::Refused(result("x", true)),
        ] {
            let call = held(state);
            for recorded in [None, Some(approved())] {
                let wire = super::call(&call, recorded.as_ref());
                let accepted = call.refuse_decision().is_none() && recorded.is_none();
                assert_eq!(wire.takes_decision, accepted, "{call:?} {recorded:?}");
                assert_eq!(wire.awaits_decision(), accepted);
                assert_eq!(
                    wire.takes_decision,
                    matches!(wire.state, wire::CallState::Waiting | wire::CallState::InDoubt),
                    "{call:?}: takes_decision agrees with state"
                );
            }
        }
    }
}

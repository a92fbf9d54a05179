//! The runtime's types as the wire types of `tollgate-protocol`: the one place core meets the protocol.
//!
//! Both sides are foreign to this crate, so these are functions rather than `From` impls (the orphan
//! rule). Every enum is converted with an exhaustive `match`: a new status, gate, reason, event kind or
//! decision in core does not compile until its wire form is chosen here.

use tollgate_core::{
    Decision, EventKind, Gate, HeldCall, RecordedDecision, RunError, RunRecord, RunState, RunStatus, StoredEvent,
    TerminationReason, Usage, rfc3339,
};
use tollgate_protocol as wire;

/// A run status on the wire.
pub fn run_status(status: RunStatus) -> wire::RunStatus {
    match status {
        RunStatus::Queued => wire::RunStatus::Queued,
        RunStatus::Running => wire::RunStatus::Running,
        RunStatus::WaitingForApproval => wire::RunStatus::WaitingForApproval,
        RunStatus::Completed => wire::RunStatus::Completed,
        RunStatus::Failed => wire::RunStatus::Failed,
        RunStatus::Cancelled => wire::RunStatus::Cancelled,
        RunStatus::Expired => wire::RunStatus::Expired,
    }
}

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

/// A gate verdict on the wire.
pub fn gate(gate: Gate) -> wire::Gate {
    match gate {
        Gate::Allow => wire::Gate::Allow,
        Gate::Ask => wire::Gate::Ask,
        Gate::Forbid => wire::Gate::Forbid,
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
        EventKind::RunCompleted => wire::EventKind::RunCompleted,
        EventKind::RunFailed => wire::EventKind::RunFailed,
        EventKind::RunCancelled => wire::EventKind::RunCancelled,
        EventKind::RunExpired => wire::EventKind::RunExpired,
    }
}

/// Token counts on the wire.
pub fn usage(usage: Usage) -> wire::Usage {
    let Usage { input_tokens, output_tokens } = usage;
    wire::Usage { input_tokens, output_tokens }
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
        gate: gate(call.gate()),
        preview: call.preview.clone(),
        in_doubt: call.in_doubt(),
    }
}

/// A held call as the run object shows it, with the decision recorded for it so far.
pub fn call(call: &HeldCall, recorded: Option<&RecordedDecision>) -> wire::Call {
    wire::Call {
        call_id: call.call_id.clone(),
        tool: call.tool.clone(),
        arguments: call.arguments.clone(),
        gate: gate(call.gate()),
        preview: call.preview.clone(),
        in_doubt: call.in_doubt(),
        decision: recorded.map(recorded_decision),
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
                .map(|s| s.calls.iter().map(|held| call(held, pending.decisions.get(&held.call_id))).collect())
                .unwrap_or_default();
            Some(wire::HeldTurn {
                turn_digest: pending.turn_digest.0.clone(),
                expires_at: pending.expires_at.map(rfc3339),
                calls,
            })
        }
        RunState::Queued
        | RunState::Running { .. }
        | RunState::Completed { .. }
        | RunState::Failed { .. }
        | RunState::Cancelled { .. }
        | RunState::Expired { .. } => None,
    };
    wire::Run {
        id: run.id.clone(),
        agent: run.agent.clone(),
        status: run_status(run.status()),
        input: run.input.clone(),
        output: run.output().map(str::to_owned),
        termination_reason: run.termination_reason().map(termination_reason),
        iterations: run.iterations,
        usage: usage(run.usage),
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
        gate: gate(info.gate),
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

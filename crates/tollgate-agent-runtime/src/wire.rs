//! The runtime's types as the wire types of `tollgate-agent-protocol`: the one place core meets the protocol.
//!
//! Both sides are foreign to this crate, so these are functions rather than `From` impls (the orphan
//! rule). The enums that exist on the wire need none: core uses the protocol's `RunStatus`, `Gate`,
//! `Usage`, `EventKind`, `TerminationReason` and `Decision` as they are. What is converted here is what
//! core keeps in another shape (times as milliseconds, a held call's state with its result, a run's
//! record with its lease): a new field there does not compile until its wire form is chosen here.

use tollgate_agent_core::{Approval, HeldCall, HeldCallState, RunRecord, RunState, StoredEvent, Vote, rfc3339};
use tollgate_agent_protocol as wire;

/// A recorded decision on the wire: the decision, who, and when.
pub fn recorded_decision(recorded: &Vote) -> wire::RecordedDecision {
    wire::RecordedDecision {
        decision: recorded.decision.clone(),
        actor: recorded.actor.clone(),
        at: rfc3339(recorded.at),
    }
}

/// A held call as `approval_requested` lists it, with its approval's count when it is a quorum call.
pub fn gated_call(call: &HeldCall, approval: Option<&Approval>) -> wire::event_data::GatedCall {
    wire::event_data::GatedCall {
        call_id: call.call_id.clone(),
        tool: call.tool.clone(),
        arguments: call.arguments.clone(),
        gate: call.gate(),
        preview: call.preview.clone(),
        in_doubt: call.in_doubt(),
        approvals: approval.and_then(approvals),
    }
}

/// Where a held call stands on the wire, given the decision recorded for it so far.
pub fn call_state(call: &HeldCall, recorded: Option<&Vote>) -> wire::CallState {
    match (&call.state, recorded) {
        (HeldCallState::Finished(_), _) => wire::CallState::Finished,
        (HeldCallState::Refused(_), _) => wire::CallState::Refused,
        // A grant answered it: it runs without a person, as an allowed call does (`grant` says which).
        (HeldCallState::Allowed | HeldCallState::Granted(_), _) => wire::CallState::Allowed,
        (HeldCallState::Asks | HeldCallState::InDoubt, Some(_)) => wire::CallState::Decided,
        (HeldCallState::InDoubt, None) => wire::CallState::InDoubt,
        (HeldCallState::Asks, None) => wire::CallState::Waiting,
    }
}

/// A quorum approval's count on the wire (`calls[].approvals`, a `decision` event's `approvals`); none
/// for an approval one decision settles.
pub fn approvals(approval: &Approval) -> Option<wire::Approvals> {
    approval.requirement.is_quorum().then(|| wire::Approvals {
        required: approval.required(),
        given: approval.approvals_given().into_iter().cloned().collect(),
    })
}

/// A held call as the run object shows it, with its approval (if it needs people). It takes a decision
/// when [`HeldCall::takes_decision`] says so and its approval is still open (the one rule; clients read
/// it from here, and `decide` refuses the others); its `decision` is the one its approval settled on.
pub fn call(call: &HeldCall, approval: Option<&Approval>) -> wire::Call {
    let result = match &call.state {
        HeldCallState::Finished(result) => {
            Some(wire::CallResult { content: result.content.clone(), is_error: result.is_error })
        }
        HeldCallState::Refused(_)
        | HeldCallState::Allowed
        | HeldCallState::Asks
        | HeldCallState::Granted(_)
        | HeldCallState::InDoubt => None,
    };
    let recorded = approval.and_then(Approval::settled_by);
    let takes_decision = call.takes_decision() && recorded.is_none();
    wire::Call {
        call_id: call.call_id.clone(),
        tool: call.tool.clone(),
        arguments: call.arguments.clone(),
        gate: call.gate(),
        preview: call.preview.clone(),
        in_doubt: call.in_doubt(),
        decision: recorded.as_ref().map(recorded_decision),
        state: call_state(call, recorded.as_ref()),
        takes_decision,
        result,
        approvals: approval.and_then(approvals),
        // Offered while a person may still approve and remember the call.
        suggested_match: call.suggested_match.clone().filter(|_| takes_decision && !call.in_doubt()),
        grant: call.grant().cloned(),
    }
}

/// A stored event on the wire (the data as stored: the hash covers it).
pub fn event(event: &StoredEvent) -> wire::Event {
    wire::Event {
        seq: event.seq,
        at: event.at.clone(),
        kind: event.kind,
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
            // Every open approval of an escalated turn carries the same marker: the first tells.
            let escalated = pending.approvals.iter().find_map(|approval| approval.escalated());
            Some(wire::Pending {
                turn_digest: pending.turn_digest.0.clone(),
                expires_at: pending.expires_at.map(rfc3339),
                calls,
                escalated: escalated.map(|e| wire::Escalated { at: rfc3339(e.at), notified: e.notified.clone() }),
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
        termination_reason: run.termination_reason(),
        iterations: run.iterations,
        usage: run.usage,
        version: run.version,
        created_by: run.created_by.clone(),
        created_at: rfc3339(run.created_at),
        updated_at: rfc3339(run.updated_at),
        finished_at: run.finished_at().map(rfc3339),
        error: run.error().cloned(),
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

/// A grant as the API answers it (`applied_to` set by the caller when it applied the grant).
pub fn grant(grant: &tollgate_agent_core::GrantRecord) -> wire::Grant {
    wire::Grant {
        id: grant.id.clone(),
        agent: grant.agent.clone(),
        tool: grant.tool.clone(),
        r#match: grant.matcher.pattern().clone(),
        scope: grant.scope,
        run_id: grant.run_id.clone(),
        reason: grant.reason.clone(),
        created_by: grant.created_by.clone(),
        created_at: rfc3339(grant.created_at),
        expires_at: rfc3339(grant.expires_at),
        revoked_at: grant.revoked.as_ref().map(|(at, _)| rfc3339(*at)),
        revoked_by: grant.revoked.as_ref().map(|(_, by)| by.clone()),
        uses: grant.uses,
        applied_to: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use tollgate_agent_core::ToolResult;

    fn held(state: HeldCallState) -> HeldCall {
        HeldCall {
            call_id: "call_1".into(),
            tool: "write".into(),
            arguments: json!({"text": "a"}),
            preview: Some("write a".into()),
            observed: None,
            state,
            requirement: tollgate_agent_core::Requirement::SINGLE,
            suggested_match: None,
        }
    }

    fn result(content: &str, is_error: bool) -> ToolResult {
        ToolResult {
            call_id: "call_1".into(),
            tool: "write".into(),
            content: content.into(),
            is_error,
            denied: false,
            images: Vec::new(),
        }
    }

    /// The approval of `call_1`, decided by bob's approval.
    fn approved() -> Approval {
        let vote =
            Vote { decision: tollgate_agent_core::Decision::Approve, actor: "bob".into(), at: 1_796_000_000_000 };
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
            (held(HeldCallState::Asks), None, json!(["waiting", true, null, "ask", false])),
            (held(HeldCallState::InDoubt), None, json!(["in_doubt", true, null, "ask", true])),
            (
                held(HeldCallState::Finished(result("wrote a", false))),
                None,
                json!(["finished", false, {"content": "wrote a", "is_error": false}, "ask", false]),
            ),
            (
                held(HeldCallState::Finished(result("disk full", true))),
                None,
                json!(["finished", false, {"content": "disk full", "is_error": true}, "ask", false]),
            ),
            (held(HeldCallState::Asks), Some(approved()), json!(["decided", false, null, "ask", false])),
            (held(HeldCallState::InDoubt), Some(approved()), json!(["decided", false, null, "ask", true])),
            (held(HeldCallState::Allowed), None, json!(["allowed", false, null, "allow", false])),
            (
                held(HeldCallState::Refused(result("unknown tool", true))),
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
            HeldCallState::Asks,
            HeldCallState::InDoubt,
            HeldCallState::Finished(result("x", false)),
            HeldCallState::Allowed,
            HeldCallState::Refused(result("x", true)),
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
